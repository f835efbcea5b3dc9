#!/usr/bin/env bash
# The benchmark entry point: prints every figure README.md and docs/ quote about the lab, with the run's
# date and machine at the top and, for each figure, the median and the range of what it measured.
#
#   scripts/bench/all.sh            RUNS=6 READS=5, release binaries; then the component benchmarks
#   scripts/bench/all.sh --quick    RUNS=2 READS=3, the debug binaries the tests use; the component
#                               benchmarks are named, not run
#
# Each run stands a local lab up (timed to its learned baseline, and each of its steps: storage, seeding,
# ranks, the baseline latch), reads the job's throughput over the next two 10 s windows as % of the
# baseline it latched (how far a freshly latched baseline is from the job's normal: its trustworthiness),
# reads the supervisor's memory from /proc (VmRSS after up; VmHWM, the peak, after the faults), runs one
# drill (DRILL, slow-storage by default; its fixed cost is everything but the fault itself: check,
# warm-up and baseline, cleanup), then for each fault: injects it, lets one
# 10 s window fill, takes READS reads of the throughput as % of the baseline (each over its own 10 s
# window, with the ranks Ready counted), clears it and times the way back to RECOVER_PCT % with 4/4 ranks
# Ready (polled every 2 s window, so 2 s is the resolution). Then `lab down`, timed.
#
# The component figures come from the scripts that measure them against a peer, which the full run calls
# in turn (each needs its own tools; see its header):
#   scripts/bench/step.sh       step time under 400m cgroups; each fault's effect on bare ranks
#   scripts/bench/alerts.sh     inject to first alert, per fault
#   scripts/bench/allreduce.sh  the all-reduce against OpenMPI and torch gloo, 4 KiB to 64 MiB
#   scripts/bench/storage.sh    the storage client against wrk
#   scripts/bench/scale.sh      4, 8 and 16 ranks: step, all-reduce share, memory, status time, readers,
#                               each beside the figure of its previous run
#
# Settings (environment): RUNS, READS, RECOVER_PCT (90), PROFILE (release | debug), LAB_BIN_DIR (built
# binaries to use instead of building), BENCH_NAME (bench), DRILL (slow-storage; "" for none), FAULTS (the
# faults each run measures, default "slow-storage throttled-rank unplaceable-rank"; "" for none: only lab up,
# its baseline's trustworthiness, status and lab down, about 40 s a run),
# COMPONENTS (full run: the bench-*.sh to call, default "step alerts allreduce storage scale").
#
# The summary is also written to docs/figures/ (scripts/bench/figures-write.sh), which docs/figures.md indexes.
# Each figure is printed beside its previous median (README.md's figures table before this script's
# latest changes) and the goal where the lab has one.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
quick=0
[ "${1:-}" = --quick ] && quick=1
if [ "$quick" = 1 ]; then
  RUNS=${RUNS:-2} READS=${READS:-3} PROFILE=${PROFILE:-debug}
else
  RUNS=${RUNS:-6} READS=${READS:-5} PROFILE=${PROFILE:-release}
fi
RECOVER_PCT=${RECOVER_PCT:-90}
DRILL=${DRILL-slow-storage}
FAULTS=${FAULTS-slow-storage throttled-rank unplaceable-rank}
# Each fault this script measures: its `lab fault inject` arguments and what the summary calls it.
declare -A FAULT_ARGS=(
  [slow-storage]="--server 1 --delay 300ms"
  [throttled-rank]="--rank 1 --cpu 150m"
  [unplaceable-rank]="--ranks 5"
)
declare -A FAULT_WHAT=(
  [slow-storage]="storage-1 +300 ms"
  [throttled-rank]="rank-1 150m"
  [unplaceable-rank]="5 ranks, 4 GPUs"
)
NAME=${BENCH_NAME:-bench}
T0=$(date +%s)
say() { printf '[bench +%ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }
for fault in $FAULTS; do
  [ -n "${FAULT_ARGS[$fault]+set}" ] || die "FAULTS: unknown fault $fault (one of: ${!FAULT_ARGS[*]})"
done
command -v jq >/dev/null || die "jq is needed: apt-get install jq"

env_file=$(mktemp)
scripts/tools.sh weed >"$env_file" || die "installing SeaweedFS failed (see above)"
# shellcheck source=/dev/null
. "$env_file"
rm -f "$env_file"
if [ -z "${LAB_BIN_DIR:-}" ]; then
  say "building the lab's binaries ($PROFILE)"
  if [ "$PROFILE" = release ]; then cargo build -q --release --workspace --bins; else cargo build -q --workspace --bins; fi
  LAB_BIN_DIR=$root/target/$PROFILE
fi
LAB="$LAB_BIN_DIR/lab"
STATE=$(mktemp -d -t lab-bench-XXXXXX)
export LAB_STATE_DIR=$STATE
DATA="$STATE/figures.tsv" # fact <TAB> value
lab() { "$LAB" --name "$NAME" "$@"; }
now() { date +%s.%N; }
since() { awk -v t="$1" -v n="$(now)" 'BEGIN { printf "%.2f", n - t }'; }
rec() { printf '%s\t%s\n' "$1" "$2" >>"$DATA"; }

cleanup() {
  if [ -f "$STATE/$NAME/lab.json" ]; then
    say "taking the lab down after an early exit"
    lab down >/dev/null 2>&1 || say "lab down failed: lab down --name $NAME (LAB_STATE_DIR=$STATE)"
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT

machine() {
  local cpu
  cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  printf '%s CPUs (%s), kernel %s, load average %s' "$(nproc)" "${cpu:-unknown}" "$(uname -r)" \
    "$(cut -d' ' -f1-3 /proc/loadavg)"
}
START_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
START_MACHINE=$(machine)

snapshot() { lab status --json --window "$1"; }
supervisor_kb() { # supervisor_kb VmRSS|VmHWM
  local pid; pid=$(jq -r '.[0].pid' "$STATE/$NAME/supervisor.json")
  awk -v k="$1:" '$1 == k { print $2 }' "/proc/$pid/status"
}

# One fault: inject, settle, READS reads, clear, time back.
measure_fault() { # measure_fault <fact> <inject args...>
  local fact=$1 t s pct ready i; shift
  t=$(now)
  lab fault inject "$@" >/dev/null || die "lab fault inject $*"
  rec "$fact inject s" "$(since "$t")"
  snapshot 10s >/dev/null # one window filled with the fault
  for ((i = 1; i <= READS; i++)); do
    s=$(snapshot 10s)
    pct=$(echo "$s" | jq -r '.training.pct_of_baseline // 0')
    ready=$(echo "$s" | jq -r '[.status.pods[] | select(.role == "rank" and .phase == "Running" and .ready)] | length')
    rec "$fact pct" "$pct"
    rec "$fact ready" "$ready"
  done
  lab fault clear --all >/dev/null || die "lab fault clear --all after $fact"
  t=$(now)
  while :; do
    s=$(snapshot 2s)
    if echo "$s" | jq -e --argjson w "$RECOVER_PCT" '(.training.pct_of_baseline // 0) >= $w
        and ([.status.pods[] | select(.role == "rank" and .phase == "Running" and .ready)] | length) == 4
        and .status.ranks_desired == 4' >/dev/null; then
      break
    fi
    awk -v s="$(since "$t")" 'BEGIN { exit !(s > 300) }' && die "$fact: not back to $RECOVER_PCT % within 300 s of the clear"
  done
  rec "$fact back s" "$(since "$t")"
}

for ((run = 1; run <= RUNS; run++)); do
  say "run $run/$RUNS: lab up"
  t=$(now)
  lab up --runtime local >/dev/null 2>"$STATE/up.log" || { cat "$STATE/up.log" >&2; die "lab up"; }
  rec "up s" "$(since "$t")"
  # The steps `lab up` timed (" ✓ start storage   2.8s").
  sed -n 's/^ *✓ \(.*[^ ]\) \+\([0-9.]\+\)s$/\1\t\2/p' "$STATE/up.log" | while IFS=$'\t' read -r what secs; do
    rec "up: $what s" "$secs"
  done
  s=$(snapshot 10s)
  rec "baseline step ms" "$(echo "$s" | jq -r '.training.baseline.step_seconds * 1000')"
  rec "baseline samples/s" "$(echo "$s" | jq -r '.training.baseline.samples_per_s')"
  rec "after up pct" "$(echo "$s" | jq -r '.training.pct_of_baseline // 0')"
  rec "after up pct" "$(snapshot 10s | jq -r '.training.pct_of_baseline // 0')"
  rec "supervisor rss MB" "$(awk -v k="$(supervisor_kb VmRSS)" 'BEGIN { printf "%.1f", k / 1024 }')"
  # `lab status --json` as a script calls it: from the watcher's live snapshot (5 calls), and one call
  # that watches for the 6 s window itself, as every call did before the lab watched itself.
  for ((i = 1; i <= 5; i++)); do
    t=$(now)
    lab status --json >/dev/null || die "lab status --json"
    rec "status live s" "$(since "$t")"
  done
  t=$(now)
  lab status --json --window 6s >/dev/null || die "lab status --json --window 6s"
  rec "status watched s" "$(since "$t")"
  if [ -n "$DRILL" ]; then
    say "run $run/$RUNS: drill $DRILL"
    lab drill run "$DRILL" --report "$STATE/drill.json" >"$STATE/drill.log" 2>&1 || say "drill $DRILL did not pass (its fixed cost counts all the same)"
    jq -r '.drills[0] | [.verdict == "pass",
      ([.steps[] | select(.step == "check" or .step == "baseline" or .step == "cleanup") | .duration_s] | add),
      .duration_s] | @tsv' "$STATE/drill.json" | {
      IFS=$'\t' read -r passed fixed total
      rec "drill fixed s" "$fixed"
      rec "drill total s" "$total"
      rec "drill passed" "$([ "$passed" = true ] && echo 1 || echo 0)"
    }
  fi
  for fault in $FAULTS; do
    say "run $run/$RUNS: $fault"
    # shellcheck disable=SC2086 # the fault's arguments, split on purpose
    measure_fault "$fault" "$fault" ${FAULT_ARGS[$fault]}
  done
  rec "supervisor peak MB" "$(awk -v k="$(supervisor_kb VmHWM)" 'BEGIN { printf "%.1f", k / 1024 }')"
  say "run $run/$RUNS: lab down"
  t=$(now)
  lab down >/dev/null || die "lab down"
  rec "down s" "$(since "$t")"
done

for fault in $FAULTS; do printf '%s\t%s\n' "$fault" "${FAULT_WHAT[$fault]}"; done >"$STATE/faults.tsv"
# The summary is also kept as docs/figures/bench[-quick].md, with the settings that made it.
fig_name=bench
[ "$quick" = 1 ] && fig_name=bench-quick
fig_cmd="RUNS=$RUNS READS=$READS PROFILE=$PROFILE DRILL=$DRILL FAULTS=\"$FAULTS\" scripts/bench/all.sh${1:+ $1}"
python3 - "$DATA" "$START_DATE" "$START_MACHINE" "$(machine)" "$PROFILE" "$RUNS" "$READS" "$RECOVER_PCT" \
  "$STATE/faults.tsv" <<'EOF' | "$root/scripts/bench/figures-write.sh" "$fig_name" "$fig_cmd"
import collections, statistics, sys
data, date, m0, m1, profile, runs, reads, back, faults_file = sys.argv[1:]
measured = [line.rstrip("\n").split("\t") for line in open(faults_file) if line.strip()]
v = collections.defaultdict(list)
for line in open(data):
    k, x = line.rstrip("\n").split("\t")
    v[k].append(float(x))
# The previous medians (README.md's figures table, `scripts/bench/all.sh --quick`, 2026-12-01, load 1.4-3.4;
# lab up and lab down from 2026-12-02) and the goals, beside each figure.
previous = {"up s": "11.2 s", "baseline step ms": "34.5 ms", "baseline samples/s": "29 385 samples/s",
            "status live s": "0.01 s", "status watched s": "6.05 s", "supervisor rss MB": "28.5 MB",
            "supervisor peak MB": "29.0 MB", "slow-storage pct": "10.9 %", "throttled-rank pct": "78.8 %",
            "unplaceable-rank pct": "0 %", "slow-storage back s": "2.0 s", "throttled-rank back s": "2.1 s",
            "unplaceable-rank back s": "16.8 s", "down s": "0.7 s"}
goal = {"up s": "10 s", "slow-storage back s": "5 s", "throttled-rank back s": "5 s",
        "unplaceable-rank back s": "5 s", "down s": "3 s", "drill fixed s": "20 s"}
def f(k, unit, nd=1):
    xs = v[k]
    if not xs:
        return "not measured"
    med, lo, hi = statistics.median(xs), min(xs), max(xs)
    out = f"median {med:.{nd}f}{unit} (range {lo:.{nd}f}–{hi:.{nd}f}{unit}, n={len(xs)})"
    if k in previous:
        out += f"; previous {previous[k]}"
    if k in goal:
        out += f"; goal ≤ {goal[k]}"
    return out
def spread(k):
    xs = v[k]
    if len(xs) < 2:
        return ""
    return f", relative spread {100 * statistics.stdev(xs) / statistics.mean(xs):.1f} %"
print(f"scripts/bench/all.sh — {date}")
print(f"machine at the start: {m0}")
print(f"machine at the end:   {m1}")
faults = sum(1 for f, _ in measured if v[f + " ready"])
print(f"{profile} binaries; {runs} runs of lab up → {faults} faults → lab down; {reads} reads of 10 s per fault per run")
print()
print(f"{'lab up to a steady baseline':<34} {f('up s', ' s')}")
for k in sorted(k for k in v if k.startswith("up: ")):
    print(f"  {k[4:-2]:<32} {f(k, ' s')}")
print(f"{'baseline step':<34} {f('baseline step ms', ' ms')}")
print(f"{'baseline throughput':<34} {f('baseline samples/s', ' samples/s', 0)}{spread('baseline samples/s')} between runs")
print(f"{'the 20 s after up, % of it':<34} {f('after up pct', ' %')}{spread('after up pct')}")
if v["drill total s"]:
    passed = int(sum(v["drill passed"]))
    print(f"{'drill: fixed cost':<34} {f('drill fixed s', ' s')} (check, baseline, cleanup)")
    print(f"{'drill: whole run':<34} {f('drill total s', ' s')}; passed {passed} of {len(v['drill passed'])}")
print(f"{'lab status --json (live snapshot)':<34} {f('status live s', ' s', 2)}")
print(f"{'... watching its own 6 s window':<34} {f('status watched s', ' s', 2)}")
print(f"{'supervisor memory after up':<34} {f('supervisor rss MB', ' MB')} resident (VmRSS)")
print(f"{'supervisor memory, peak':<34} {f('supervisor peak MB', ' MB')} (VmHWM, after the faults)")
for fault, what in measured:
    ready = v[f"{fault} ready"]
    if not ready:
        continue
    print(f"{fault} ({what})")
    print(f"  {'throughput, % of the baseline':<32} {f(fault + ' pct', ' %')}")
    print(f"  {'ranks Running and Ready':<32} {int(min(ready))}–{int(max(ready))} of the running ranks in every read")
    print(f"  {'inject (command to proof)':<32} {f(fault + ' inject s', ' s')}")
    print(f"  {'back to ' + back + ' % after the clear':<32} {f(fault + ' back s', ' s')}")
print(f"{'lab down':<34} {f('down s', ' s')}")
EOF

if [ "$quick" = 1 ]; then
  say "--quick: the component figures come from scripts/bench/step.sh, scripts/bench/alerts.sh,"
  say "scripts/bench/allreduce.sh, scripts/bench/storage.sh and scripts/bench/scale.sh (the full run calls them)"
  exit 0
fi
for c in ${COMPONENTS-step alerts allreduce storage scale}; do
  echo
  echo "== scripts/bench-$c.sh"
  "$root/scripts/bench-$c.sh" || die "scripts/bench-$c.sh"
done
