#!/usr/bin/env bash
# How often each built-in drill gives the verdict it should: its right fix must pass and its trap must fail,
# every time. Runs each (drill, remediation) pair RUNS times on one lab, once on the machine as it is and
# once with one core kept busy by another process (a shell loop in its own process group, ended by this
# script), and prints the expected-verdict rate of every pair in both conditions, with the median and
# range of its detection and of its time back at baseline.
#
#   scripts/bench/verdict-rates.sh                 the seed's three drills, RUNS=10, both conditions
#   DRILLS=all RUNS=3 LOADS=quiet scripts/bench/verdict-rates.sh      every built-in drill
#   PAIRS="throttled-rank:right throttled-rank:trap" scripts/bench/verdict-rates.sh
#   RUNTIME=kind DRILLS=all RUNS=5 SEED_RUNS=10 LOADS=quiet scripts/bench/verdict-rates.sh
#                                            the kind table: a 2-node kind lab with the database
#
# Settings (environment): RUNS (10), SEED_RUNS (RUNS: the runs of the seed's three drills), LOADS ("quiet
# busy"), DRILLS (the seed's three; "all": every built-in drill), PAIRS (both pairs of every drill in
# DRILLS), RUNTIME (local; kind: through the machine's Docker or the private engine, scripts/env/kind/engine.sh),
# NODES (2, kind only), NAME (verdicts), LAB_BIN (target/debug/lab, built when missing), OUT
# (target/verdict-rates: the JSON reports), PAGE (the figures page's name, below).
# Exits non-zero when any pair gave an unexpected verdict, so a CI job can run it as it is.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
RUNS=${RUNS:-10}
SEED_RUNS=${SEED_RUNS:-$RUNS}
RUNTIME=${RUNTIME:-local}
NODES=${NODES:-2}
LOADS=${LOADS:-quiet busy}
NAME=${NAME:-verdicts}
OUT=${OUT:-$root/target/verdict-rates}
LAB_BIN=${LAB_BIN:-$root/target/debug/lab}
T0=$(date +%s)
say() { printf '[verdicts +%ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

# drill : kind of fix : remediation (empty: the drill's own; several, for a drill with several remediate
# steps, separated by " | ", one per step in order) : the verdict it must give. The traps are the seed's and
# the incident library's: restarting the rank that waits on a slow server, re-applying the template that was
# right all along, scaling back without setting the world size back, fixing a template without deleting the
# pod stuck on the old one, restarting a sibling instead of the hung rank, putting the last fix back.
declare -A FIX=(
  [slow-storage:right]=""
  [slow-storage:trap]="lab restart rank 1"
  [throttled-rank:right]="lab resize rank 1 --cpu 400m"
  [throttled-rank:trap]="lab apply --cpu 400m"
  [unplaceable-rank:right]=""
  [unplaceable-rank:trap]="lab scale ranks 4"
  [stuck-rollout:right]="lab config world-size 4 && lab scale ranks 4"
  [stuck-rollout:trap]="lab scale ranks 4"
  [rank-crash:right]="lab rank env 1 --unset LAB_DEVICE_FAULT_AFTER"
  [rank-crash:trap]="lab restart rank 1"
  [rank-hang:right]="lab restart rank 1"
  [rank-hang:trap]="lab restart rank 2"
  [slow-compute:right]=""
  [slow-compute:trap]="lab apply --cpu 400m"
  [competing-job:right]="lab job stop nightly-etl"
  [competing-job:trap]="lab restart rank 1"
  [slow-disk:right]="lab storage drain 1"
  [slow-disk:trap]="lab restart rank 1"
  [sync-replica:right]="lab db template --node-selector '' && lab db delete-pod db-1"
  [sync-replica:trap]="lab db template --node-selector ''"
  [chained-week:right]="lab fault clear --all | lab resize rank 1 --cpu 400m"
  [chained-week:trap]="lab fault clear --all | lab fault inject slow-storage --server 1 --delay 300ms"
)
SEED="slow-storage throttled-rank unplaceable-rank"
ALL="$SEED stuck-rollout rank-crash rank-hang slow-compute competing-job slow-disk sync-replica chained-week"
DRILLS=${DRILLS:-$SEED}
[ "$DRILLS" = all ] && DRILLS=$ALL
if [ -z "${PAIRS:-}" ]; then
  PAIRS=
  for d in $DRILLS; do PAIRS+=" $d:right $d:trap"; done
fi
for pair in $PAIRS; do
  [ -n "${FIX[$pair]+set}" ] || { say "unknown pair $pair (a built-in drill, then :right or :trap)"; exit 2; }
done
# sync-replica needs the lab's database.
up_args=(up --name "$NAME" --runtime "$RUNTIME")
case " $PAIRS " in *" sync-replica:"*) up_args+=(--database) ;; esac
case "$RUNTIME" in
  local) ;;
  kind)
    up_args+=(--nodes "$NODES")
    if [ -z "${DOCKER_HOST:-}" ] && ! docker info >/dev/null 2>&1; then
      eval "$(scripts/env/kind/engine.sh env)"
    fi
    command -v kind >/dev/null || eval "$(scripts/env/kind/tools.sh)"
    eval "$(scripts/tools.sh busybox postgres)" ;;
  *) say "RUNTIME=$RUNTIME: local or kind"; exit 2 ;;
esac

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

say "lab ${up_args[*]}"
"$LAB_BIN" "${up_args[@]}" >/dev/null

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
    report="$OUT/$RUNTIME-$load-$drill-$kind.json"
    runs=$RUNS
    [[ " $SEED " == *" $drill "* ]] && runs=$SEED_RUNS
    args=(drill run "$drill" --name "$NAME" --repeat "$runs" --report "$report")
    if [ -n "$fix" ]; then
      rest=$fix
      while :; do
        args+=(--remediate "${rest%% | *}")
        [ "$rest" = "${rest#* | }" ] && break
        rest=${rest#* | }
      done
    fi
    say "$load: $drill, $kind fix (${fix:-its own clear}), $runs runs, must $want"
    "$LAB_BIN" "${args[@]}" >/dev/null 2>&1 || true
    # A drill that could not clean up after itself (its report says so) leaves its fault in the lab, and
    # every later drill would refuse to start: the lab is cleared here, said, and the next pair starts clean.
    if [ -s "$report" ] && jq -e '[.drills[] | select(.cleanup.ok == false and .cleanup.summary != "")] | length > 0' "$report" >/dev/null; then
      say "$drill ($kind) could not clean up after itself (see $report): lab fault clear --all"
      "$LAB_BIN" fault clear --all --name "$NAME" >&2 || say "lab fault clear --all failed too"
    fi
    figs="-"
    if [ ! -s "$report" ]; then
      say "no report from $drill ($kind): counted as $runs unexpected verdicts"
      expected=0
    else
      expected=$(jq --arg want "$want" '[.drills[] | select(.verdict == $want)] | length' "$report")
      # Detection and the way back (right fixes), median (min–max) over the runs that have them.
      figs=$(jq -r '
        def fig(f): [.drills[] | f | numbers] | sort
          | if length == 0 then "-" else
              "\(if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end
                 | . * 10 | round / 10) (\(.[0] * 10 | round / 10)–\(.[-1] * 10 | round / 10))" end;
        "\(fig(.figures.time_to_detect_s))\t\(fig(.figures.time_to_baseline_s))"' "$report")
    fi
    [ "$expected" -eq "$runs" ] || failures=$((failures + 1))
    results+=("$(printf '%-7s %-18s %-6s %3d/%-3d %5.0f %%  %-22s %s' "$load" "$drill" "$kind" "$expected" "$runs" \
      "$(awk -v a="$expected" -v b="$runs" 'BEGIN { print 100 * a / b }')" "${figs%%$'\t'*}" "${figs#*$'\t'}")")
  done
  stop_busy
done

# The table is also kept as docs/figures/verdict-rates[-RUNTIME].md (scripts/bench/figures-write.sh), or as
# docs/figures/$PAGE.md: a run of other drills then keeps a page of its own beside the seed's.
fig_name=verdict-rates
[ "$RUNTIME" = local ] || fig_name="verdict-rates-$RUNTIME"
fig_name=${PAGE:-$fig_name}
echo
{
  printf '%s runtime; load average at the end %s, %s CPUs\n' "$RUNTIME" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)"
  printf '%-7s %-18s %-6s %-7s %-8s %-22s %s\n' load drill fix runs expected "detected (s)" "back at baseline (s)"
  printf '%s\n' "${results[@]}"
} | "$root/scripts/bench/figures-write.sh" "$fig_name" "${PAGE:+PAGE=$PAGE }RUNS=$RUNS RUNTIME=$RUNTIME LOADS=\"$LOADS\" DRILLS=\"$DRILLS\" scripts/bench/verdict-rates.sh"
say "reports in $OUT; $failures pair(s) gave an unexpected verdict"
[ "$failures" -eq 0 ]
