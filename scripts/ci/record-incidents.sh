#!/usr/bin/env bash
# Records the built-in drills' incidents for the replay tier (agents/tests/fixtures/recorded): on one local
# lab (with the database), each drill once with the reference plan agent at the full evidence level (its fix,
# verified live, is the recorded right fix) and once with the drill's own trap (`--fix trap`, verified live
# to fail). A replay then scores any agent against both without a lab.
#
#   scripts/ci/record-incidents.sh                          every built-in drill into the fixtures folder
#   DRILLS="slow-storage slow-disk" OUT=/tmp/rec scripts/ci/record-incidents.sh
#
# Environment: LAB (target/debug/lab), OUT (agents/tests/fixtures/recorded; replaced only when every run
# was recorded), DRILLS (every built-in drill), NAME (the lab's name, record). Needs the tools of the test
# command (SeaweedFS, PostgreSQL): `eval "$(scripts/tools.sh weed postgres)"`.
set -euo pipefail
cd "$(dirname "$0")/../.."

LAB=${LAB:-target/debug/lab}
OUT=${OUT:-agents/tests/fixtures/recorded}
NAME=${NAME:-record}
DRILLS=${DRILLS:-"slow-storage throttled-rank unplaceable-rank stuck-rollout rank-crash rank-hang slow-compute competing-job slow-disk sync-replica chained-week"}
AGENT=${AGENT:-python3 examples/agents/reference.py}

say() { printf '[record %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
[ -x "$LAB" ] || { say "$LAB is not built: cargo build --workspace --bins"; exit 1; }

state=$(mktemp -d)
new="$OUT.new"
rm -rf "$new"
export LAB_STATE_DIR="$state"
cleanup() {
  "$LAB" --name "$NAME" down >/dev/null 2>&1 || true
  rm -rf "$state" "$new"
}
trap cleanup EXIT

say "lab up (local, with the database)"
"$LAB" --name "$NAME" up --runtime local --database >&2
failed=()
for d in $DRILLS; do
  say "$d: the reference agent's fix"
  "$LAB" --name "$NAME" drill run "$d" --agent "$AGENT" --evidence full --attempts 1 --record "$new" >&2 \
    || failed+=("$d:agent")
  say "$d: its trap"
  # A trap fails its drill: that is what is recorded.
  "$LAB" --name "$NAME" drill run "$d" --fix trap --record "$new" >&2 || true
done
if [ ${#failed[@]} -gt 0 ]; then
  say "the reference agent did not fix: ${failed[*]} (nothing replaced)"
  exit 1
fi
# The recording names this machine's folders (the ranks' command lines, the lab's state folder): kept as
# what they are relative to, not where this machine had them.
find "$new" -name '*.json' -exec sed -i -e "s#$PWD/##g" -e "s#$state/#\$LAB_STATE_DIR/#g" {} +
rm -rf "$OUT"
mv "$new" "$OUT"
say "recorded $(find "$OUT" -name 'run-*.json' | wc -l) runs in $OUT"
