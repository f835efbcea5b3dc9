#!/usr/bin/env bash
# The lab at 4, 8 and 16 ranks: step time, the step's all-reduce share, the ranks' memory, how long
# `lab status --json` takes, and that every storage server the lab started has readers. Each figure is
# printed beside the one the previous run of this script recorded (its figures file), so a change shows as
# before → after.
#
#   scripts/bench/scale.sh                     # 4 ranks on 3 servers, 8 on 4, 16 on 8; release binaries
#   SCALES="4:3 16:8" STATUS_CALLS=5 scripts/bench/scale.sh
#
# For each scale (RANKS:SERVERS, with as many GPUs as ranks): `lab up --runtime local` (timed), one
# `lab status --json --window 10s` for the job's figures (the baseline step, each rank's phase shares: the
# all-reduce share is wait + transfer over the sum of the phases; the share of CFS periods each rank was
# throttled in; each server's readers and reads/s), the
# ranks' resident memory from /proc (VmRSS), STATUS_CALLS timed `lab status --json` calls (the live
# snapshot), `lab console` in a terminal of its own (tmux, 160×50) for CONSOLE_SECONDS: its screen read
# every 0.25 s, the longest time between two changes of the screen (its figures change with each new
# snapshot; a frozen console shows the same text), the highest data age it showed, and
# its CPU (share of one core) and memory, then `lab down` (timed). Ranks CPU-starved at 16 on a 2-CPU
# machine is expected: every rank has its 400m limit and the machine has 2 cores.
#
# Settings (environment): SCALES, STATUS_CALLS (5), CONSOLE_SECONDS (20; 0 leaves the console out),
# PROFILE (release | debug), LAB_BIN_DIR (built binaries
# to use instead of building), BENCH_NAME (lab name, bench-scale), FIGURES (the figures file: read as the
# previous run's, then replaced; default target/bench/scale.tsv).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
SCALES=${SCALES:-4:3 8:4 16:8}
STATUS_CALLS=${STATUS_CALLS:-5}
CONSOLE_SECONDS=${CONSOLE_SECONDS:-20}
PROFILE=${PROFILE:-release}
NAME=${BENCH_NAME:-bench-scale}
FIGURES=${FIGURES:-$root/target/bench/scale.tsv}
say() { printf '[bench-scale] %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }
command -v jq >/dev/null || die "jq is needed: apt-get install jq"

eval "$(scripts/tools.sh weed tmux)"
if [ -z "${LAB_BIN_DIR:-}" ]; then
  say "building the lab's binaries ($PROFILE)"
  if [ "$PROFILE" = release ]; then cargo build -q --release --workspace --bins; else cargo build -q --workspace --bins; fi
  LAB_BIN_DIR=$root/target/$PROFILE
fi
LAB="$LAB_BIN_DIR/lab"
STATE=$(mktemp -d -t lab-bench-scale-XXXXXX)
export LAB_STATE_DIR=$STATE
DATA="$STATE/figures.tsv" # scale <TAB> fact <TAB> value
lab() { "$LAB" --name "$NAME" "$@"; }
now() { date +%s.%N; }
since() { awk -v t="$1" -v n="$(now)" 'BEGIN { printf "%.2f", n - t }'; }

tmux_sock="bench-scale-$$"
cleanup() {
  tmux -L "$tmux_sock" kill-server 2>/dev/null || true
  if [ -f "$STATE/$NAME/lab.json" ]; then
    say "taking the lab down after an early exit"
    lab down >/dev/null 2>&1 || say "lab down failed: lab down --name $NAME (LAB_STATE_DIR=$STATE)"
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT

# `lab console` in its own terminal for CONSOLE_SECONDS: how often its screen changes, the data age it
# shows, its CPU and memory.
console() {
  tmux -L "$tmux_sock" new-session -d -x 160 -y 50 "env LAB_STATE_DIR='$STATE' '$LAB' --name '$NAME' console"
  local pane pid hz c0 c1 t0 t1 head screen last='' last_t changed_at gap=0 age max_age=0 i
  for ((i = 0; i < 40; i++)); do
    pane=$(tmux -L "$tmux_sock" capture-pane -p 2>/dev/null || true)
    grep -q "Kubernetes" <<<"$pane" && break
    sleep 0.25
  done
  if ! grep -q "Kubernetes" <<<"$pane"; then
    say "console: not measured, \`lab console\` did not show its screen:"; head -n 5 <<<"$pane" >&2
    tmux -L "$tmux_sock" kill-server 2>/dev/null || true
    return 0
  fi
  pid=$(tmux -L "$tmux_sock" display-message -p '#{pane_pid}')
  hz=$(getconf CLK_TCK)
  c0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat"); t0=$(now)
  last_t=$t0
  while awk -v t="$t0" -v n="$(now)" -v d="$CONSOLE_SECONDS" 'BEGIN { exit !(n - t < d) }'; do
    screen=$(tmux -L "$tmux_sock" capture-pane -p)
    changed_at=$(now)
    head=$(grep -m 1 "runtime ·" <<<"$screen" || true)
    if [ "$screen" != "$last" ]; then
      gap=$(awk -v g="$gap" -v a="$last_t" -v b="$changed_at" 'BEGIN { d = b - a; print (d > g ? d : g) }')
      last=$screen last_t=$changed_at
    fi
    # "data 0.4 s old" while fresh, "data 42s old" when stale; "data 1m02s old" reads as no number.
    age=$(sed -n 's/.*data \([0-9.]*\) \{0,1\}s old.*/\1/p' <<<"$head")
    [ -n "$age" ] && max_age=$(awk -v m="$max_age" -v a="$age" 'BEGIN { print (a > m ? a : m) }')
    grep -q "old" <<<"$head" && [ -z "$age" ] && max_age=inf
    sleep 0.25
  done
  # The time since the last change counts too: a console that stopped changing has that long a gap.
  gap=$(awk -v g="$gap" -v a="$last_t" -v b="$(now)" 'BEGIN { d = b - a; print (d > g ? d : g) }')
  c1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat"); t1=$(now)
  rec "console longest unchanged s" "$gap"
  rec "console data age max s" "$max_age"
  rec "console CPU % of a core" "$(awk -v c=$((c1 - c0)) -v hz="$hz" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", 100 * (c / hz) / (b - a) }')"
  rec "console rss MB" "$(awk '$1 == "VmRSS:" { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")"
  tmux -L "$tmux_sock" send-keys q
  sleep 0.5
  tmux -L "$tmux_sock" kill-server 2>/dev/null || true
}

START="$(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
for scale in $SCALES; do
  ranks=${scale%%:*} servers=${scale##*:}
  rec() { printf '%s\t%s\t%s\n' "$ranks:$servers" "$1" "$2" >>"$DATA"; }
  say "$ranks ranks on $servers storage servers: lab up"
  t=$(now)
  lab up --runtime local --ranks "$ranks" --storage-servers "$servers" --gpus "$ranks" >/dev/null 2>"$STATE/up.log" \
    || { cat "$STATE/up.log" >&2; die "lab up with $ranks ranks and $servers servers"; }
  rec "up s" "$(since "$t")"
  s=$(lab status --json --window 10s) || die "lab status --json --window 10s"
  echo "$s" >"$STATE/status.json"
  rec "baseline step ms" "$(jq -r '.training.baseline.step_seconds * 1000' <<<"$s")"
  rec "step ms" "$(jq -r '(.training.step_seconds // 0) * 1000' <<<"$s")"
  rec "samples/s" "$(jq -r '.training.samples_per_s // 0' <<<"$s")"
  jq -r '.ranks[] | select(.up) | (.wait + .transfer) / ((.read + .compute + .wait + .transfer) | if . > 0 then . else 1 end) * 100' \
    <<<"$s" | while read -r share; do rec "all-reduce share %" "$share"; done
  jq -r '.ranks[] | select(.up) | (.throttled // 0) * 100' <<<"$s" | while read -r t; do rec "throttled %" "$t"; done
  rec "ranks Ready" "$(jq -r '[.status.pods[] | select(.role == "rank" and .ready)] | length' <<<"$s")"
  rec "servers with readers" "$(jq -r '[.storage[] | select((.readers | length) > 0 and .reads_per_s > 0)] | length' <<<"$s")"
  rec "alerts firing" "$(jq -r '.alerts | length' <<<"$s")"
  for pid in $(jq -r '.status.pods[] | select(.role == "rank") | .pid // empty' <<<"$s"); do
    kb=$(awk '$1 == "VmRSS:" { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    [ -n "$kb" ] && rec "rank rss MB" "$(awk -v k="$kb" 'BEGIN { printf "%.1f", k / 1024 }')"
  done
  for ((i = 1; i <= STATUS_CALLS; i++)); do
    t=$(now)
    lab status --json >/dev/null || die "lab status --json"
    rec "status s" "$(since "$t")"
  done
  if [ "$CONSOLE_SECONDS" -gt 0 ]; then
    say "$ranks ranks: lab console for $CONSOLE_SECONDS s"
    console
  fi
  say "$ranks ranks: lab down"
  t=$(now)
  lab down >/dev/null || die "lab down"
  rec "down s" "$(since "$t")"
done

mkdir -p "$(dirname "$FIGURES")"
python3 - "$DATA" "$FIGURES" "$START" "$PROFILE" <<'EOF'
import collections, os, statistics, sys
data, figures, start, profile = sys.argv[1:]
def load(path):
    v = collections.defaultdict(list)
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 3:
                v[(parts[0], parts[1])].append(float(parts[2]))
    return v
now, prev = load(data), load(figures)
prev_note = open(figures + ".when").read().strip() if os.path.exists(figures + ".when") else ""
def fig(v, key, nd):
    xs = v.get(key)
    if not xs:
        return "—"
    med = statistics.median(xs)
    if len(xs) == 1:
        return f"{med:.{nd}f}"
    return f"{med:.{nd}f} ({min(xs):.{nd}f}–{max(xs):.{nd}f})"
rows = [("lab up, s", "up s", 1), ("baseline step, ms", "baseline step ms", 1), ("step now, ms", "step ms", 1),
        ("samples/s", "samples/s", 0), ("all-reduce share of the step, % (ranks)", "all-reduce share %", 1),
        ("CPU throttled, % of periods (ranks)", "throttled %", 1), ("rank memory VmRSS, MB (ranks)", "rank rss MB", 1), ("lab status --json, s", "status s", 2),
        ("console: screen unchanged, longest s", "console longest unchanged s", 2),
        ("console: data age shown, max s", "console data age max s", 1),
        ("console CPU, % of a core", "console CPU % of a core", 1), ("console memory VmRSS, MB", "console rss MB", 1),
        ("ranks Ready", "ranks Ready", 0), ("servers with readers", "servers with readers", 0),
        ("alerts firing", "alerts firing", 0), ("lab down, s", "down s", 1)]
scales = list(dict.fromkeys(k[0] for k in now))
print(f"scripts/bench/scale.sh — {start}; {profile} binaries; median (range) per figure")
print(f"previous figures: {prev_note}" if prev_note else "previous figures: none recorded (first run)")
for scale in scales:
    ranks, servers = scale.split(":")
    print(f"\n{ranks} ranks on {servers} storage servers ({ranks} GPUs)      now   ·   previous run")
    for label, key, nd in rows:
        print(f"  {label:<40} {fig(now, (scale, key), nd):>24}   ·   {fig(prev, (scale, key), nd)}")
with open(figures, "w") as out:
    for (scale, key), xs in now.items():
        for x in xs:
            out.write(f"{scale}\t{key}\t{x}\n")
with open(figures + ".when", "w") as out:
    out.write(start + "\n")
EOF
