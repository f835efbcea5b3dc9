# shellcheck shell=bash
# Sourced by scripts/ci/k8s-e2e.sh: the lab CLI, the three faults as built-in drills, and checks through
# `lab status --json` (scripts/ci/kind-e2e.sh takes only `say` and `die`: its checks are tests/e2e/kind.rs).
# Every helper fails the run, loudly, when it cannot do what it checks: a tier that could not check
# something has not passed it.
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
  wait_snapshot "$1" "$2" ".status | ($3)"
}

# Polls `jq -e <filter>` over the whole snapshot (`lab status --json`: status, storage, ranks, training,
# alerts) until it holds, for at most <seconds>. On timeout it shows the last snapshot's pods, or the
# error `lab status` gave.
wait_snapshot() { # wait_snapshot <what> <seconds> <jq filter> [window]
  local what=$1 deadline=$(( $(date +%s) + $2 )) filter=$3 window=${4:-2s} s err
  err=$(mktemp)
  while :; do
    s=$(lab status --json --window "$window" 2>"$err") || s='{}'
    if echo "$s" | jq -e "$filter" >/dev/null 2>&1; then rm -f "$err"; say "$what"; return 0; fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      cat "$err" >&2
      rm -f "$err"
      echo "$s" | jq -c '.status.pods[]? | {name, phase, ready, reason, resources}' >&2
      echo "$s" | jq -c '.storage[]? | {name, client_p50}' >&2
      die "timed out waiting for: $what"
    fi
    sleep 2
  done
}

# The drill engine, which these tiers check through the built-in drills. A build without it cannot run
# them: that fails the run with the CLI's own error (it used to fall back to hand-injected faults and pass).
have_drills() {
  local out
  if ! out=$("$LAB_BIN" drill list 2>&1); then
    printf '%s\n' "$out" >&2
    die "the drill engine is unavailable ('lab drill list' failed): this tier checks the built-in drills"
  fi
}

# `lab down`, failing the run when it fails (for the EXIT trap: `lab_down || rc=1`).
lab_down() {
  if lab down >&2; then return 0; fi
  say "FAILED: lab down (the lab may be left behind: lab down --name $NAME)"
  return 1
}

# Storage-1 is the slow one: its read p50 (as the ranks see it, over a 10 s window) is above <min> seconds,
# and above each sibling's by at least <gap> seconds. Waits up to <seconds> for the window to fill.
expect_storage1_slow() { # expect_storage1_slow <seconds> <min> <gap>
  local filter
  # shellcheck disable=SC2016  # $p and $sib are jq variables
  filter=$(printf '%s' '(.storage | map({key: .name, value: .client_p50}) | from_entries) as $p
    | [.storage[] | select(.name != "storage-1") | .client_p50] as $sib
    | $p["storage-1"] != null and $p["storage-1"] >= MIN
      and ($sib | length) > 0 and ($sib | all(. != null and ($p["storage-1"] - .) >= GAP))' \
    | sed "s/MIN/$2/; s/GAP/$3/")
  wait_snapshot "storage-1 reads slow (p50 >= $2 s), each sibling at least $3 s faster" "$1" "$filter" 10s
  lab status --json --window 10s | jq -r '.storage[] | "  \(.name) read p50 \(.client_p50) s"' >&2
}

# Runs one built-in drill; a failure is recorded in FAILED (and reported at the end) so that the other
# drills and checks still run and say what they found.
FAILED=()
run_drill() { # run_drill <name or file> [<report name>: the name when a file is given]
  local r=${2:-$1}
  if lab drill run "$1" --report "$REPORTS/$r.json" --junit "$REPORTS/$r.xml" >&2; then
    say "drill $r passed"
  else
    say "drill $r FAILED (report: $REPORTS/$r.json)"
    FAILED+=("drill $r")
  fi
}

# Exits non-zero naming every recorded failure, or says all passed.
finish() {
  if [ ${#FAILED[@]} -gt 0 ]; then die "${FAILED[*]}"; fi
  say "all passed"
}
