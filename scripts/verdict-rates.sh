#!/usr/bin/env bash
# How often each built-in drill gives the verdict it should: its right fix must pass and its trap must fail,
# every time. Runs each (drill, remediation) pair RUNS times on one local lab, once on the machine as it is
# and once with one core kept busy by another process (a shell loop in its own process group, ended by
# this script), and prints the expected-verdict rate of every pair in both conditions.
#
#   scripts/verdict-rates.sh                 RUNS=10, both conditions
#   RUNS=3 LOADS=quiet scripts/verdict-rates.sh
#   PAIRS="throttled-rank:right throttled-rank:trap" scripts/verdict-rates.sh
#
# Settings (environment): RUNS (10), LOADS ("quiet busy"), PAIRS (every pair below), NAME (verdicts),
# LAB_BIN (target/debug/lab, built when missing), OUT (target/verdict-rates: the JSON reports).
# Exits non-zero when any pair gave an unexpected verdict, so a CI job can run it as it is.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
RUNS=${RUNS:-10}
LOADS=${LOADS:-quiet busy}
NAME=${NAME:-verdicts}
OUT=${OUT:-$root/target/verdict-rates}
LAB_BIN=${LAB_BIN:-$root/target/debug/lab}
T0=$(date +%s)
say() { printf '[verdicts +%ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

# drill : kind of fix : remediation (empty: the drill's own) : the verdict it must give.
# The traps are the seed's: restarting the rank for a slow disk, re-applying the template that was right
# all along, scaling back without setting the world size back.
declare -A FIX=(
  [slow-storage:right]=""
  [slow-storage:trap]="lab restart rank 1"
  [throttled-rank:right]="lab resize rank 1 --cpu 400m"
  [throttled-rank:trap]="lab apply --cpu 400m"
  [unplaceable-rank:right]=""
  [unplaceable-rank:trap]="lab scale ranks 4"
)
PAIRS=${PAIRS:-slow-storage:right slow-storage:trap throttled-rank:right throttled-rank:trap unplaceable-rank:right unplaceable-rank:trap}

command -v jq >/dev/null || { say "jq is missing: apt-get install jq"; exit 1; }
if [ ! -x "$LAB_BIN" ]; then
  say "building the lab"
  cargo build -q --workspace --bins --locked
fi
eval "$(scripts/tools.sh weed)"
mkdir -p "$OUT"

busy=
stop_busy() {
  if [ -n "$busy" ]; then
    kill -- "-$busy" 2>/dev/null || true
    wait "$busy" 2>/dev/null || true
    busy=
  fi
}
cleanup() {
  stop_busy
  "$LAB_BIN" down --name "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT

say "lab up --name $NAME"
"$LAB_BIN" up --name "$NAME" >/dev/null

results=()
failures=0
for load in $LOADS; do
  if [ "$load" = busy ]; then
    # One core busy: a loop in its own process group, so its pid ends it and nothing else.
    setsid bash -c 'while :; do :; done' &
    busy=$!
    say "one core kept busy by pid $busy"
  fi
  for pair in $PAIRS; do
    drill=${pair%%:*} kind=${pair##*:}
    fix=${FIX[$pair]}
    want=pass
    [ "$kind" = trap ] && want=fail
    report="$OUT/$load-$drill-$kind.json"
    args=(drill run "$drill" --name "$NAME" --repeat "$RUNS" --report "$report")
    [ -n "$fix" ] && args+=(--remediate "$fix")
    say "$load: $drill, $kind fix (${fix:-its own clear}), $RUNS runs, must $want"
    "$LAB_BIN" "${args[@]}" >/dev/null 2>&1 || true
    if [ ! -s "$report" ]; then
      say "no report from $drill ($kind): counted as $RUNS unexpected verdicts"
      expected=0
    else
      expected=$(jq --arg want "$want" '[.drills[] | select(.verdict == $want)] | length' "$report")
    fi
    [ "$expected" -eq "$RUNS" ] || failures=$((failures + 1))
    results+=("$(printf '%-7s %-18s %-6s %3d/%-3d %5.0f %%' "$load" "$drill" "$kind" "$expected" "$RUNS" \
      "$(awk -v a="$expected" -v b="$RUNS" 'BEGIN { print 100 * a / b }')")")
  done
  stop_busy
done

printf '\n%-7s %-18s %-6s %-7s %s\n' load drill fix runs expected
printf '%s\n' "${results[@]}"
say "reports in $OUT; $failures pair(s) gave an unexpected verdict"
[ "$failures" -eq 0 ]
