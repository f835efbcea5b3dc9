#!/usr/bin/env bash
# The agent regression tier: replays the recorded incidents of the built-in drills (shipped as fixtures,
# recorded once on the real local lab) against an agent at each evidence level, without a lab, in seconds.
# It fails when the agent no longer fixes every incident with the full bundle, or when it fixes one from
# metrics alone (the seed's finding: without the wiring map no plan fixed the fault).
#
#   scripts/replay-tier.sh                       the reference agent, fixtures in agents/tests/fixtures/recorded
#   AGENT='python3 my_agent.py' scripts/replay-tier.sh
#   LAB=target/release/lab scripts/replay-tier.sh
#
# Needs a built `lab` (cargo build -p lab-cli) and python3 for the reference agent.
set -euo pipefail
cd "$(dirname "$0")/.."

LAB=${LAB:-target/debug/lab}
AGENT=${AGENT:-python3 examples/agents/reference.py}
FIXTURES=${FIXTURES:-agents/tests/fixtures/recorded}
# How many incidents the fixtures hold: every one must be fixed at `full`, none at `metrics`.
INCIDENTS=${INCIDENTS:-3}

if [[ ! -x $LAB ]]; then
  echo "replay tier: $LAB is not built: run \`cargo build -p lab-cli\` first" >&2
  exit 1
fi

failed=0
# level and the number of incidents the agent must fix at it
for want in "full $INCIDENTS" "metrics 0"; do
  read -r level n <<< "$want"
  echo "== replay at evidence $level (expect $n of $INCIDENTS fixed)"
  if ! "$LAB" replay "$FIXTURES" --agent "$AGENT" --evidence "$level" --expect-fixed "$n"; then
    failed=1
  fi
done
echo "== replay at the levels in between (reported, not gated)"
"$LAB" replay "$FIXTURES" --agent "$AGENT" --evidence wiring changes
if (( failed )); then
  echo "replay tier: REGRESSION (see above)" >&2
  exit 1
fi
echo "replay tier: ok"
