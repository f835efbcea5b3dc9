# shellcheck shell=bash
# Shared by scripts/bench/alerts.sh and scripts/bench/quiet-alerts.sh: a local lab of the script's own, watched
# by the same collector the console runs (the `watch` example of lab-telemetry, which learns its own
# baseline first), every tick one line of JSON in $ticks.
#
# Source it after setting NAME, PROFILE and `say`/`die`; then
#   watched_lab_build      # unless the caller builds: the binaries and the watcher
#   watched_lab_up         # lab up --runtime $LAB_RUNTIME (local by default), plus the array up_args if
#                          # the caller set it; the watcher started; sets work, ticks, watcher
#   watched_lab_baseline   # waits for the watcher's first tick with a baseline, prints that tick
# and call watched_lab_cleanup from the caller's EXIT trap (or between two labs): it stops the watcher,
# clears any fault, takes the lab down and removes its state folder.

bin="$PWD/target/$PROFILE"
# The caller's extra `lab up` arguments, if it set any (defined here so `set -u` callers need not), and the
# runtime (local unless the caller set LAB_RUNTIME).
up_args=("${up_args[@]}")
LAB_RUNTIME=${LAB_RUNTIME:-local}
work=""
ticks=""
watcher=""

lab() { "$bin/lab" --name "$NAME" "$@"; }

watched_lab_build() {
  say "building ($PROFILE)"
  local flag=()
  [ "$PROFILE" = release ] && flag=(--release)
  cargo build "${flag[@]}" --locked --workspace --bins >&2
  cargo build "${flag[@]}" --locked -p lab-session --example watch >&2
}

watched_lab_up() {
  if [ ! -x "$bin/lab" ] || [ ! -x "$bin/examples/watch" ]; then
    die "$bin/lab or $bin/examples/watch is not built (BUILD=0 takes the binaries as they are): run without BUILD=0"
  fi
  work=$(mktemp -d)
  export LAB_STATE_DIR="$work/state"
  mkdir -p "$LAB_STATE_DIR"
  ticks="$work/ticks.jsonl"
  say "lab up --runtime $LAB_RUNTIME ${up_args[*]}"
  lab up --runtime "$LAB_RUNTIME" "${up_args[@]}" >&2 || die "lab up"
  "$bin/examples/watch" --name "$NAME" >"$ticks" 2>"$work/watch.err" &
  watcher=$!
}

watched_lab_baseline() {
  local deadline=$(( $(date +%s) + 240 )) first=""
  until [ -n "$first" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || die "the watcher learned no baseline in 240 s"
    kill -0 "$watcher" 2>/dev/null || { cat "$work/watch.err" >&2; die "the watcher ended"; }
    sleep 1
    # Only whole lines: the watcher may be writing the last one.
    first=$(head -n "$(wc -l <"$ticks")" "$ticks" | jq -c 'select(.baseline != null)' 2>/dev/null | head -n 1)
  done
  echo "$first"
}

watched_lab_cleanup() {
  # The watcher ends by the signal, so its status is not a failure (and under a caller's `set -e` must
  # not end the caller between two labs).
  if [ -n "$watcher" ]; then
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
  fi
  watcher=""
  if [ -n "$work" ]; then
    lab fault clear --all >/dev/null 2>&1
    lab down >/dev/null 2>&1
    rm -rf "$work"
  fi
  work=""
  return 0
}
