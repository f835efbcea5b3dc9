#!/usr/bin/env bash
# The agent regression tier: replays the recorded incidents of the built-in drills (shipped as fixtures,
# recorded on the real local lab by scripts/ci/record-incidents.sh) against the reference agents — the plan
# agent and the MCP agent — at every evidence level, without a lab, in seconds.
#
# What must hold: with the full evidence, every incident is fixed (by both agents); at every level, each
# incident's score is reported and comes out the same when replayed again. What the agents manage with less
# evidence is printed, not gated (the seed found that metrics alone never reached the storage server; a
# better agent must not fail CI).
#
#   scripts/ci/replay-tier.sh
#   AGENT='python3 my_agent.py' MCP_AGENT='python3 my_mcp_agent.py' scripts/ci/replay-tier.sh
#
# Needs a built `lab` (cargo build -p lab-cli), python3, and the MCP Python SDK for the MCP agent
# (`eval "$(scripts/tools.sh mcp)"`, which sets LAB_MCP_PYTHON).
set -euo pipefail
cd "$(dirname "$0")/../.."

LAB=${LAB:-target/debug/lab}
AGENT=${AGENT:-python3 examples/agents/reference.py}
MCP_PYTHON=${LAB_MCP_PYTHON:-.tools/mcp-venv/bin/python}
MCP_AGENT=${MCP_AGENT:-$MCP_PYTHON examples/agents/mcp_reference.py}
FIXTURES=${FIXTURES:-agents/tests/fixtures/recorded}
LEVELS=(pods metrics wiring changes full)

if [[ ! -x $LAB ]]; then
  echo "replay tier: $LAB is not built: run \`cargo build -p lab-cli\` first" >&2
  exit 1
fi
# Every built-in incident: the drills the fixtures hold.
INCIDENTS=${INCIDENTS:-$(find "$FIXTURES" -mindepth 1 -maxdepth 1 -type d | wc -l)}
start=$(date +%s%N)
failed=0
for proto in agent mcp-agent; do
  if [[ $proto == agent ]]; then cmd=$AGENT; else cmd=$MCP_AGENT; fi
  echo "== --$proto at evidence full: every one of the $INCIDENTS incidents fixed, the same when replayed again"
  "$LAB" replay "$FIXTURES" "--$proto" "$cmd" --evidence full --expect-fixed "$INCIDENTS" --expect-stable || failed=1
  echo "== --$proto at the other levels: reported, and the same when replayed again"
  "$LAB" replay "$FIXTURES" "--$proto" "$cmd" --evidence "${LEVELS[@]:0:4}" --expect-stable || failed=1
done
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf 'replay tier: %d.%01d s for %s incidents, both agents, %s levels, each twice\n' \
  $((ms / 1000)) $((ms % 1000 / 100)) "$INCIDENTS" "${#LEVELS[@]}"
if (( failed )); then
  echo "replay tier: REGRESSION (see above)" >&2
  exit 1
fi
echo "replay tier: ok"
