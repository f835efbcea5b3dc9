#!/usr/bin/env bash
# Figures of the lab as an MCP server, in one run, each against its goal:
#   1. a read tool answers in ≤ 50 ms median on a live lab (every read tool, CALLS calls each, over one
#      connection: median, min and max per tool);
#   2. the replay tier with the MCP reference agent, every recorded incident at every evidence level, ≤ 10 s;
#   3. a live drill with the MCP agent costs ≤ 10 s more than the same drill with the plan protocol (RUNS
#      runs of each, alternating: the medians and ranges of the drill's wall time);
#   4. with VARY=K: K variants of every built-in drill with both reference agents at the full evidence level,
#      and the pass rate per drill and protocol (long: about a minute a run).
# It prints a table and keeps it as docs/figures/mcp.md (scripts/bench/figures-write.sh; docs/figures.md indexes it).
#
#   scripts/bench/mcp.sh
#   CALLS=100 RUNS=5 DRILL=throttled-rank scripts/bench/mcp.sh
#   VARY=5 SEED=7 scripts/bench/mcp.sh
#
# Needs the test command's tools (`eval "$(scripts/tools.sh weed postgres mcp)"`) and a built lab.
set -euo pipefail
cd "$(dirname "$0")/../.."

LAB=${LAB:-target/debug/lab}
CALLS=${CALLS:-50}
RUNS=${RUNS:-3}
DRILL=${DRILL:-slow-storage}
VARY=${VARY:-0}
SEED=${SEED:-1}
NAME=${NAME:-bench-mcp}
PY=${LAB_MCP_PYTHON:-.tools/mcp-venv/bin/python}
say() { printf '[bench-mcp %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
[ -x "$LAB" ] || { say "$LAB is not built: cargo build --workspace --bins"; exit 1; }
[ -x "$PY" ] || { say "the MCP Python SDK is missing: eval \"\$(scripts/tools.sh mcp)\""; exit 1; }

state=$(mktemp -d)
export LAB_STATE_DIR="$state"
cleanup() { "$LAB" --name "$NAME" down >/dev/null 2>&1 || true; rm -rf "$state"; }
trap cleanup EXIT
lines=()
row() { lines+=("$1"); printf '%s\n' "$1"; }
load() { cut -d' ' -f1 /proc/loadavg; }

replay_row=
# 2. The replay tier with the MCP agent, at every level: first, before the lab is up (its ranks would take
#    the cores a replay runs on). Its row is printed after the read tools'.
if [ -d agents/tests/fixtures/recorded ]; then
  say "replay: the MCP reference agent, every incident, every level"
  s=$(date +%s%N)
  "$LAB" replay agents/tests/fixtures/recorded --mcp-agent "$PY examples/agents/mcp_reference.py" \
    --evidence pods metrics wiring changes full >/dev/null || true
  ms=$(( ($(date +%s%N) - s) / 1000000 ))
  n=$(find agents/tests/fixtures/recorded -mindepth 1 -maxdepth 1 -type d | wc -l)
  replay_row="| replay, MCP agent, $n incidents × 5 levels, s | $((ms / 1000)).$((ms % 1000 / 100)) | | | ≤ 10 | \`lab replay --mcp-agent\`, one run |"
fi

say "lab up (local$([ "$VARY" -gt 0 ] && echo ', with the database'))"
if [ "$VARY" -gt 0 ]; then
  "$LAB" --name "$NAME" up --runtime local --database >&2
else
  "$LAB" --name "$NAME" up --runtime local >&2
fi

# 1. Read tools: one connection, CALLS calls of each, timed by the client from request to response.
say "read tools: $CALLS calls each (load $(load))"
row "| figure | median | min | max | goal | how |"
row "|---|---|---|---|---|---|"
# (Read into a variable first: rows added in a pipeline's subshell would not reach the page.)
reads=$(python3 - "$LAB" "$NAME" "$CALLS" <<'EOF'
import json, subprocess, sys, time
lab, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = subprocess.Popen([lab, "--name", name, "mcp", "--evidence", "full"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
i = 0
def call(method, params):
    global i
    i += 1
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n")
    p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get("id") == i:
            return m
call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}})
p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"); p.stdin.flush()
tools = [t["name"] for t in call("tools/list", {})["result"]["tools"]]
args = {"processes": {"rank": 1}, "logs": {"component": "rank-1", "lines": 50},
        "query": {"expr": "lab:job_samples_per_second"}}
for t in ["status", "incident", "dependencies", "changes", "processes", "logs", "query"]:
    if t not in tools:
        continue
    ms = []
    for _ in range(n):
        s = time.perf_counter()
        r = call("tools/call", {"name": t, "arguments": args.get(t, {})})
        ms.append((time.perf_counter() - s) * 1000)
        assert "result" in r and not r["result"].get("isError"), r
    ms.sort()
    print(f"| `{t}` on a live lab, ms | {ms[len(ms)//2]:.1f} | {ms[0]:.1f} | {ms[-1]:.1f} | ≤ 50 | {n} calls over one connection |")
p.stdin.close(); p.wait()
EOF
)
while IFS= read -r l; do row "$l"; done <<<"$reads"

[ -z "$replay_row" ] || row "$replay_row"

# 3. A live drill with each protocol, alternating.
say "$DRILL with the plan agent and with the MCP agent, $RUNS runs each (load $(load))"
plan=(); mcp=()
for _ in $(seq "$RUNS"); do
  for proto in plan mcp; do
    s=$(date +%s%N)
    if [ "$proto" = plan ]; then
      "$LAB" --name "$NAME" drill run "$DRILL" --agent "python3 examples/agents/reference.py" >/dev/null || say "a plan run failed"
      plan+=($(( ($(date +%s%N) - s) / 1000000 )))
    else
      "$LAB" --name "$NAME" drill run "$DRILL" --mcp-agent "$PY examples/agents/mcp_reference.py" >/dev/null || say "an MCP run failed"
      mcp+=($(( ($(date +%s%N) - s) / 1000000 )))
    fi
  done
done
stats() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {printf "%.1f %.1f %.1f", v[int((NR+1)/2)]/1000, v[1]/1000, v[NR]/1000}'; }
read -r pm pl ph <<< "$(stats "${plan[@]}")"
read -r mm ml mh <<< "$(stats "${mcp[@]}")"
row "| $DRILL with the plan agent, s | $pm | $pl | $ph | | $RUNS runs, alternating |"
row "| $DRILL with the MCP agent, s | $mm | $ml | $mh | ≤ plan + 10 | $RUNS runs, alternating |"
row "| the MCP agent's extra cost, s | $(awk -v a="$mm" -v b="$pm" 'BEGIN {printf "%.1f", a - b}') | | | ≤ 10 | difference of the medians |"

# 4. Variants with both agents.
if [ "$VARY" -gt 0 ]; then
  for d in slow-storage throttled-rank unplaceable-rank stuck-rollout rank-crash rank-hang slow-compute competing-job slow-disk sync-replica; do
    for proto in agent mcp-agent; do
      if [ "$proto" = agent ]; then cmd="python3 examples/agents/reference.py"; else cmd="$PY examples/agents/mcp_reference.py"; fi
      rep="$state/vary-$d-$proto.json"
      say "$d: $VARY variants (seed $SEED), --$proto"
      "$LAB" --name "$NAME" drill run "$d" --vary "$VARY" --seed "$SEED" "--$proto" "$cmd" --report "$rep" >/dev/null || true
      pass=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sum(d['verdict']=='pass' for d in r['drills']), len(r['drills']))" "$rep")
      row "| $d, $VARY variants, $([ "$proto" = agent ] && echo plan || echo MCP) agent, full evidence, passed | ${pass% *} of ${pass#* } | | | every one | seed $SEED |"
    done
  done
fi

# The table is kept as docs/figures/mcp.md, with the date, the machine and the settings that made it.
printf '%s\n' "${lines[@]}" | FIGURES_FORMAT=markdown scripts/bench/figures-write.sh mcp \
  "CALLS=$CALLS RUNS=$RUNS DRILL=$DRILL VARY=$VARY SEED=$SEED scripts/bench/mcp.sh" >/dev/null
