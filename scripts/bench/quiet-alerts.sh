#!/usr/bin/env bash
# False alerts: a quiet local lab, nothing injected, watched for MINUTES by the same collector the console
# runs (the `watch` example of lab-telemetry, which learns its own baseline first). Every alert that fires
# is a false alert; the script lists each one (rule, target, since, summary) and ends with
#
#   false alerts: N in M minutes (load average ...)
#
#   scripts/bench/quiet-alerts.sh                     # 30 minutes
#   MINUTES=15 PROFILE=debug scripts/bench/quiet-alerts.sh
#
# The machine's load average is printed at the start and the end: the rules must stay quiet on a loaded
# machine too. The lab, its state folder and the watcher are this script's own and are removed at the end.
# Exits 1 when any alert fired.
set -euo pipefail
cd "$(dirname "$0")/../.."

MINUTES=${MINUTES:-30}
PROFILE=${PROFILE:-release}
NAME=${NAME:-quiet-alerts-$$}
T0=$(date +%s)
say() { printf '[quiet +%ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { say "FAILED: $*"; exit 2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

command -v jq >/dev/null || die "jq is needed: apt-get install jq"
eval "$(scripts/tools.sh weed)"

# shellcheck source=scripts/bench/watched-lab.sh
source scripts/bench/watched-lab.sh
cleanup() {
  set +e
  watched_lab_cleanup
}
trap cleanup EXIT

if [ "${BUILD:-1}" = 1 ]; then watched_lab_build; fi
watched_lab_up
first=$(watched_lab_baseline)
from=$(jq '.at_ms' <<<"$first")
load_start=$(load)
say "baseline $(jq -r '.baseline | floor' <<<"$first") samples/s; watching for $MINUTES minutes (load $load_start)"
sleep $(( MINUTES * 60 ))
load_end=$(load)
kill -0 "$watcher" 2>/dev/null || die "the watcher ended early"

# One false alert per rule and target each time it starts firing (its since-time).
jq -c --argjson from "$from" 'select(.at_ms >= $from) | .alerts[] | {rule, target, since_ms, summary}' "$ticks" |
  jq -s -c 'unique_by([.rule, .target, .since_ms]) | .[]' >"$work/fired"
ticks_seen=$(jq -c --argjson from "$from" 'select(.at_ms >= $from)' "$ticks" | wc -l)
n=$(wc -l <"$work/fired")
min_pct=$(jq -s --argjson from "$from" '[.[] | select(.at_ms >= $from) | .pct // empty] | min // "-"' "$ticks")
# Also kept as docs/figures/quiet-alerts.md (scripts/bench/figures-write.sh).
{
  while read -r a; do
    echo "$a" | jq -r '"  \(.rule) on \(.target) from \(.since_ms): \(.summary)"'
  done <"$work/fired"
  echo "ticks watched: $ticks_seen; lowest throughput: ${min_pct}% of baseline"
  echo "false alerts: $n in $MINUTES minutes (load average at start $load_start, at end $load_end)"
} | scripts/bench/figures-write.sh quiet-alerts "MINUTES=$MINUTES PROFILE=${PROFILE:-release} scripts/bench/quiet-alerts.sh"
[ "$n" -eq 0 ]
