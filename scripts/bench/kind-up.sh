#!/usr/bin/env bash
# Benchmark: `lab up` and `lab down` on kind, each step timed, median and range over RUNS runs, beside the
# same figures for the local runtime.
#
#   scripts/bench/kind-up.sh                    # 5 runs of each runtime, `--database`, kind on 2 nodes
#   RUNS=3 RUNTIMES=kind scripts/bench/kind-up.sh
#   NODES=1 UP_ARGS="" scripts/bench/kind-up.sh
#
# Warm: the node image, the kind CLI and the lab's binaries exist before the first run (a cold machine
# builds them first: scripts/env/kind/node-image.sh, `cargo build`), and on kind one lab is stood up and
# taken down unmeasured first, so the node image with the lab's images preloaded exists (the first `lab up`
# after a change of the binaries makes it; its figures are printed above the table): what is timed is
# `lab up` itself. Each
# run is `lab up --runtime R $UP_ARGS` (and `--nodes $NODES` on kind) from the repository, then `lab down`;
# the steps are the ones `lab up` prints (" ✓ create cluster   21.3s"), the total is the command's wall
# time. The goals: kind up ≤ 45 s with 2 nodes and the database, kind down ≤ 3 s. The table is kept as
# docs/figures/kind-up.md.
#
# Settings (environment): RUNS (5), WARMUP (1: the unmeasured first kind lab; 0 for none), RUNTIMES ("local kind"), NODES (2), UP_ARGS (--database), LAB_BIN
# (target/debug/lab, built when missing), NAME (bench-up-<pid>), LOGS (a folder that keeps each run's
# `lab up` and `lab down` output as up-RUNTIME-N.log; none when unset). Where no Docker answers and the script
# runs as root, it uses the project's private engine (scripts/env/kind/engine.sh; started by the caller).
# The machine's load average is printed before and after: the figures are only comparable at a like load.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
RUNS=${RUNS:-5}
RUNTIMES=${RUNTIMES:-local kind}
NODES=${NODES:-2}
UP_ARGS=${UP_ARGS---database}
NAME=${NAME:-bench-up-$$}
LOGS=${LOGS:-}
WARMUP=${WARMUP:-1}
[ -z "$LOGS" ] || mkdir -p "$LOGS"
LAB_BIN=${LAB_BIN:-$root/target/debug/lab}
T0=$(date +%s)
say() { printf '[bench-up +%ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v t="$1" -v n="$(now)" 'BEGIN { printf "%.2f", n - t }'; }

command -v jq >/dev/null || die "jq is needed: apt-get install jq"
if [ ! -x "$LAB_BIN" ]; then
  say "building the lab"
  cargo build -q --workspace --bins --locked
fi
eval "$(scripts/tools.sh weed postgres busybox)"
if [[ " $RUNTIMES " == *" kind "* ]]; then
  if [ -z "${DOCKER_HOST:-}" ] && ! docker info >/dev/null 2>&1; then
    eval "$(scripts/env/kind/engine.sh env)"
    docker info >/dev/null 2>&1 || die "no Docker answers: start Docker, or the private engine (sudo scripts/env/kind/engine.sh up)"
  fi
  command -v kind >/dev/null || eval "$(scripts/env/kind/tools.sh)"
fi
STATE=$(mktemp -d -t lab-bench-up-XXXXXX)
export LAB_STATE_DIR=$STATE
DATA="$STATE/figures.tsv"
: >"$DATA"
rec() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$DATA"; }
lab() { "$LAB_BIN" --name "$NAME" "$@"; }
cleanup() {
  if [ -f "$STATE/$NAME/lab.json" ]; then
    say "taking the lab down after an early exit"
    lab down >/dev/null 2>&1 || say "lab down failed: LAB_STATE_DIR=$STATE $LAB_BIN down --name $NAME"
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD0=$(load)
read -r -a up_extra <<<"$UP_ARGS"
FIRST=""
if [[ " $RUNTIMES " == *" kind "* ]] && [ "$WARMUP" = 1 ]; then
  say "kind: one lab up and down first, unmeasured, so the preloaded node image exists"
  t=$(now)
  lab up --runtime kind "${up_extra[@]}" --nodes "$NODES" >/dev/null 2>"$STATE/up.log" || { cat "$STATE/up.log" >&2; die "the first lab up --runtime kind"; }
  FIRST="first kind lab (unmeasured): up $(since "$t") s, $(sed -n 's/^ *✓ \(preload images\) \+\([0-9.]\+\)s$/\1 \2 s/p' "$STATE/up.log")"
  FIRST="$FIRST ($(grep -o 'node image [^ ]*: [a-z]*' "$STATE/up.log" | head -1 | sed 's/.*: //'))"
  lab down >/dev/null 2>"$STATE/down.log" || { cat "$STATE/down.log" >&2; die "the first lab down"; }
fi

for runtime in $RUNTIMES; do
  args=(up --runtime "$runtime" "${up_extra[@]}")
  [ "$runtime" = kind ] && args+=(--nodes "$NODES")
  for ((run = 1; run <= RUNS; run++)); do
    say "$runtime run $run/$RUNS: lab ${args[*]} (load $(load))"
    t=$(now)
    lab "${args[@]}" >/dev/null 2>"$STATE/up.log" || { cat "$STATE/up.log" >&2; die "lab up --runtime $runtime"; }
    rec "$runtime" "up (total)" "$(since "$t")"
    [ -z "$LOGS" ] || cp "$STATE/up.log" "$LOGS/up-$runtime-$run.log"
    sed -n 's/^ *✓ \(.*[^ ]\) \+\([0-9.]\+\)s$/\1\t\2/p' "$STATE/up.log" | while IFS=$'\t' read -r what secs; do
      rec "$runtime" "up: $what" "$secs"
    done
    t=$(now)
    lab down >/dev/null 2>"$STATE/down.log" || { cat "$STATE/down.log" >&2; die "lab down --runtime $runtime"; }
    rec "$runtime" "down (total)" "$(since "$t")"
    [ -z "$LOGS" ] || cp "$STATE/down.log" "$LOGS/down-$runtime-$run.log"
    sed -n 's/^ *✓ \(.*[^ ]\) \+\([0-9.]\+\)s$/\1\t\2/p' "$STATE/down.log" | while IFS=$'\t' read -r what secs; do
      rec "$runtime" "down: $what" "$secs"
    done
  done
done

# The table is also kept as docs/figures/kind-up.md (scripts/bench/figures-write.sh).
{
echo "lab up / lab down per step, $RUNS runs each (s; up: ${UP_ARGS:-no extra arguments}, kind on $NODES nodes)"
echo "load average before: $LOAD0; after: $(load); $(nproc) CPUs"
[ -z "$FIRST" ] || echo "$FIRST"
python3 - "$DATA" "$RUNTIMES" <<'EOF'
import collections, statistics, sys
data, runtimes = sys.argv[1], sys.argv[2].split()
v = collections.defaultdict(list)
order = []
for line in open(data):
    rt, what, x = line.rstrip("\n").split("\t")
    v[(rt, what)].append(float(x))
    if what not in order:
        order.append(what)
goals = {("kind", "up (total)"): "≤ 45", ("kind", "down (total)"): "≤ 3"}
def fig(xs):
    return f"{statistics.median(xs):6.1f} ({min(xs):.1f}–{max(xs):.1f})" if xs else "-"
print(f"{'step':<30}" + "".join(f"{rt + ' median (range)':>26}" for rt in runtimes) + "   goal")
for what in sorted(order, key=lambda w: (w.startswith("down"), w.endswith("(total)"), order.index(w))):
    goal = " ".join(g for (rt, w), g in goals.items() if w == what)
    print(f"{what:<30}" + "".join(f"{fig(v.get((rt, what), [])):>26}" for rt in runtimes) + f"   {goal}")
EOF
} | { echo; scripts/bench/figures-write.sh kind-up "RUNS=$RUNS RUNTIMES=\"$RUNTIMES\" NODES=$NODES UP_ARGS=\"$UP_ARGS\" scripts/bench/kind-up.sh"; }
