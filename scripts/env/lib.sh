# shellcheck shell=bash
# What the environments under scripts/env/ share: progress output, steps, waits, and processes started in
# their own session and recorded by PID and start time. Sourced by kind/lib.sh and k8s-node/lib.sh, which set
# $PIDS and $LOGS (where the PID files and logs go) before a process helper runs.

# --- output -------------------------------------------------------------------------------------
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1fs", b - a }'; }
ok() { printf '  \033[32m✓\033[0m %s (%s)\n' "$1" "$2"; }
bad() { printf '  \033[31m✗\033[0m %s (%s)\n' "$1" "$2" >&2; }
say() { printf '%s\n' "$*"; }

# step <description> <command...>: runs the command, prints ✓ or ✗ with its duration, and fails on
# failure (the failing command says why on stderr). The command runs in a subshell with errexit really
# in force: inside `if cmd` bash would silently ignore `set -e` in every function cmd calls.
# STEP_ERREXIT=0 runs steps best-effort (down.sh: one failed removal must not stop the others).
step() {
  local what=$1 t rc=0
  shift
  t=$(date +%s.%N)
  if [ "${STEP_ERREXIT:-1}" = 1 ]; then ( set -e; "$@" ) & else ( "$@" ) & fi
  wait $! || rc=$?
  if [ "$rc" -eq 0 ]; then
    ok "$what" "$(elapsed "$t")"
  else
    bad "$what" "$(elapsed "$t")"
    return 1
  fi
}

# wait_for <seconds> <command...>: polls the command every 0.5s until it succeeds or the deadline passes.
wait_for() {
  local deadline=$(( $(date +%s) + $1 ))
  shift
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

# --- processes ----------------------------------------------------------------------------------
# A PID file holds "<pid> <start time in clock ticks>", so a PID reused by an unrelated process after a
# crash or reboot is never mistaken for ours.
proc_start_time() { awk '{ sub(/^.*\) /, ""); print $20 }' "/proc/$1/stat" 2>/dev/null; }

# running <name>: the recorded process is alive and is the one we started.
running() {
  local f="$PIDS/$1.pid" pid start
  [ -f "$f" ] || return 1
  read -r pid start < "$f" || return 1
  [ -n "$pid" ] && [ -d "/proc/$pid" ] && [ "$(proc_start_time "$pid")" = "$start" ] \
    && [ "$(proc_state "$pid")" != Z ]
}

proc_state() { awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null; }

recorded_pid() { awk '{print $1}' "$PIDS/$1.pid" 2>/dev/null; }

# start_proc <name> <command...>: starts the command in its own session (so it outlives the shell that
# ran up.sh and a Ctrl-C there does not reach it), logs to $LOGS/<name>.log, records its PID.
start_proc() {
  local name=$1 pid
  shift
  mkdir -p "$PIDS" "$LOGS"
  if running "$name"; then return 0; fi
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  pid=$!
  # setsid execs the command in place (this background child is not a group leader), so $! is it.
  sleep 0.2
  if [ ! -d "/proc/$pid" ]; then
    echo "$name exited at once; last lines of $LOGS/$name.log:" >&2
    tail -n 20 "$LOGS/$name.log" >&2
    return 1
  fi
  echo "$pid $(proc_start_time "$pid")" > "$PIDS/$name.pid"
}

# stop_pid <pid> <seconds>: SIGTERM, wait, then SIGKILL.
stop_pid() {
  local pid=$1 grace=${2:-10} deadline
  [ -d "/proc/$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  deadline=$(( $(date +%s) + grace ))
  while [ -d "/proc/$pid" ] && [ "$(date +%s)" -lt "$deadline" ]; do
    # A zombie child of ours has stopped; it is reaped by whoever started it.
    [ "$(proc_state "$pid")" = Z ] && return 0
    sleep 0.2
  done
  [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null
  for _ in $(seq 1 25); do [ -d "/proc/$pid" ] || return 0; sleep 0.2; done
  return 0
}

# stop_proc <name> [grace]: stops the recorded process if it is still ours, and forgets it.
stop_proc() {
  local name=$1 grace=${2:-10}
  if running "$name"; then stop_pid "$(recorded_pid "$name")" "$grace"; fi
  rm -f "$PIDS/$name.pid"
}
