# shellcheck shell=bash
# Shared by scripts/kind-e2e.sh and scripts/k8s-e2e.sh: the lab CLI, the three faults (as built-in drills,
# or by hand with `lab fault` where the drill engine is missing), and checks through `lab status --json`.
# Source it after setting NAME, REPORTS and LAB_BIN; it defines functions only.

say() { printf '[%s +%ss] %s\n' "${E2E_TAG:-e2e}" "$(( $(date +%s) - E2E_T0 ))" "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

lab() { "$LAB_BIN" --name "$NAME" "$@"; }

# The lab's status model (the `status` part of the snapshot `lab status --json` prints).
status_json() { lab status --json --window 2s | jq '.status'; }

# Every rank and storage server Running and Ready: what Kubernetes reports during each of these faults.
expect_all_ready() { # expect_all_ready <when> [ranks]
  local s want=${2:-4}
  s=$(status_json)
  if ! echo "$s" | jq -e --argjson want "$want" '
      ([.pods[] | select(.role == "rank") | select(.phase == "Running" and .ready)] | length) >= $want
      and ([.pods[] | select(.role == "storage-server")] | all(.phase == "Running" and .ready))' >/dev/null; then
    echo "$s" | jq -c '.pods[] | {name, phase, ready, reason}' >&2
    die "$1: not $want/$want ranks and every storage server Running and Ready"
  fi
  say "$1: $(echo "$s" | jq -r '[.pods[] | select(.role == "rank" and .phase == "Running" and .ready)] | length')/$want ranks Ready"
}

# Polls `jq -e <filter>` over the status model until it holds, for at most <seconds>.
wait_status() { # wait_status <what> <seconds> <jq filter>
  local what=$1 deadline=$(( $(date +%s) + $2 )) filter=$3 s
  while :; do
    s=$(status_json 2>/dev/null || echo '{}')
    if echo "$s" | jq -e "$filter" >/dev/null 2>&1; then say "$what"; return 0; fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "$s" | jq -c '.pods[]? | {name, phase, ready, reason, resources}' >&2
      die "timed out waiting for: $what"
    fi
    sleep 2
  done
}

have_drills() { "$LAB_BIN" drill list >/dev/null 2>&1; }

# Runs one built-in drill; a failure is recorded in FAILED (and reported at the end) so that the other
# drills and checks still run and say what they found.
FAILED=()
run_drill() { # run_drill <name>
  if lab drill run "$1" --report "$REPORTS/$1.json" --junit "$REPORTS/$1.xml" >&2; then
    say "drill $1 passed"
  else
    say "drill $1 FAILED (report: $REPORTS/$1.json)"
    FAILED+=("drill $1")
  fi
}

# Exits non-zero naming every recorded failure, or says all passed.
finish() {
  if [ ${#FAILED[@]} -gt 0 ]; then die "${FAILED[*]}"; fi
  say "all passed"
}
