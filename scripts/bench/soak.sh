#!/usr/bin/env bash
# shellcheck disable=SC2154  # inventory() sets before_* and after_* by name (printf -v)
# Soak: one local lab, CYCLES inject/clear cycles of each of the three faults in a mixed order drawn from a
# seed. After each clear it waits until the job is back to RECOVER_PCT % of its baseline (`lab status
# --json`, training.pct_of_baseline) and records how long that took. At the end it checks that nothing
# leaked while the lab ran (processes, cgroups, listening sockets, open file descriptors of the supervisor
# and the ranks, active ledger entries) and that `lab down` leaves nothing (processes, cgroup, ports,
# state folder), then prints the figures. Exits non-zero if a cycle failed or anything leaked.
#
# Settings (environment):
#   CYCLES=50              cycles of each fault (3 × CYCLES in all)
#   SOAK_SEED=1            the seed of the order
#   RECOVER_PCT=90         "back" means at least this % of the baseline, with 4/4 ranks Ready
#   RECOVER_DEADLINE=240   seconds a cycle may take to come back before it counts as failed
#   SOAK_NAME=soak         the lab's name (its own state folder under a temporary directory)
#   LAB_BIN_DIR            where lab, lab-rank, lab-seeder and lab-proxy are (default: target/debug, built)
#   SOAK_OUT               where the per-cycle CSV goes (default: a temporary file, printed at the end)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
cycles=${CYCLES:-50}
seed=${SOAK_SEED:-1}
recover_pct=${RECOVER_PCT:-90}
deadline=${RECOVER_DEADLINE:-240}
NAME=${SOAK_NAME:-soak}
T0=$(date +%s)

say() { printf '[soak +%ss] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

eval "$(scripts/tools.sh weed)"
if [ -z "${LAB_BIN_DIR:-}" ]; then
  say "building the lab's binaries (debug; the ranks' arithmetic is optimised in every profile)"
  cargo build --workspace --bins -q
  LAB_BIN_DIR=$root/target/debug
fi
export LAB_BIN_DIR
LAB="$LAB_BIN_DIR/lab"
STATE=$(mktemp -d -t lab-soak-XXXXXX)
export LAB_STATE_DIR=$STATE
OUT=${SOAK_OUT:-$STATE.csv}
lab() { "$LAB" --name "$NAME" "$@"; }
since() { awk -v t="$1" -v n="$(date +%s.%N)" 'BEGIN { printf "%.3f", n - t }'; }

cleanup() {
  if [ -f "$STATE/$NAME/lab.json" ]; then
    say "taking the lab down after an early exit"
    lab down >/dev/null 2>&1 || true
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT

# --- what the lab holds, for the leak checks ----------------------------------------------------------
lab_pids() { # every live, non-zombie process with STRAGGLER_LAB=<name>
  local p
  for p in /proc/[0-9]*; do
    if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -q "^STRAGGLER_LAB=$NAME@" \
        && ! awk '{ sub(/.*\) /, ""); exit !($1 == "Z") }' "$p/stat" 2>/dev/null; then
      echo "${p#/proc/}"
    fi
  done
}
comm_of() { cat "/proc/$1/comm" 2>/dev/null || echo gone; }
fds_of() { # the open file descriptors of the pids given
  local n=0 p
  for p in "$@"; do n=$(( n + $(ls "/proc/$p/fd" 2>/dev/null | wc -l) )); done
  echo "$n"
}
supervisor_pid() { jq -r '.[0].pid' "$STATE/$NAME/supervisor.json"; }
rank_pids() { jq -r '.[] | select(.name | startswith("rank-")) | .pid' "$STATE/$NAME/procs.json"; }
lab_ports() { jq -r '.. | objects | to_entries[] | select(.key | test("port$|^(listen|metrics|proxy|control|weed|weed_grpc)$")) | .value | numbers' \
  "$STATE/$NAME/lab.json" "$STATE/$NAME/spec.json" 2>/dev/null | sort -un; }
listening_of() { # listening TCP sockets (ip:port) owned by the pids given
  local inodes p
  inodes=$(for p in "$@"; do ls -l "/proc/$p/fd" 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\].*/\1/p'; done | sort -u)
  [ -n "$inodes" ] || return 0
  awk -v inodes="$(echo "$inodes" | tr '\n' ' ')" 'BEGIN { n = split(inodes, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
    FNR > 1 && $4 == "0A" && ($10 in want) { print $2 }' /proc/net/tcp /proc/net/tcp6 | sort
}
port_listening() { # is anything listening on 127.0.0.1:<port> (any owner)?
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v hex="$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == hex { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6
}
cgroup_dirs() { find /sys/fs/cgroup/cpu/straggler-lab."$NAME" /sys/fs/cgroup/straggler-lab."$NAME" -mindepth 0 -type d 2>/dev/null | sort; }
active_faults() { lab fault status --json | jq '[.faults[] | select(.phase == "injecting" or .phase == "injected" or .phase == "clearing")] | length'; }

inventory() { # inventory <prefix>: sets <prefix>_* variables
  local sup ranks all
  sup=$(supervisor_pid)
  mapfile -t ranks < <(rank_pids)
  mapfile -t all < <(lab_pids)
  printf -v "$1_sup_fds" '%s' "$(fds_of "$sup")"
  printf -v "$1_rank_fds" '%s' "$(fds_of "${ranks[@]}")"
  printf -v "$1_all_fds" '%s' "$(fds_of "${all[@]}")"
  printf -v "$1_procs" '%s' "$(for p in "${all[@]}"; do comm_of "$p"; done | sort | uniq -c | awk '{ printf "%s×%s ", $1, $2 }')"
  printf -v "$1_nprocs" '%s' "${#all[@]}"
  printf -v "$1_listen" '%s' "$(listening_of "${all[@]}" | wc -l)"
  printf -v "$1_cgroups" '%s' "$(cgroup_dirs | wc -l)"
}

# pct of baseline and ranks Ready, from one status
status_line() { lab status --json --window 2s 2>/dev/null | jq -r '[(.training.pct_of_baseline // -1), ([.status.pods[] | select(.role == "rank" and .phase == "Running" and .ready)] | length), ([.status.pods[] | select(.role == "rank")] | length)] | @tsv'; }

# --- up -------------------------------------------------------------------------------------------------
say "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; $cycles cycles of each fault, seed $seed"
lab up --runtime local >&2 || die "lab up"
say "waiting for a steady job"
start=$(date +%s)
while :; do
  read -r pct ready total < <(status_line) || true
  if awk -v p="${pct:--1}" 'BEGIN { exit !(p >= 80) }' && [ "${ready:-0}" = 4 ] && [ "${total:-0}" = 4 ]; then break; fi
  [ $(( $(date +%s) - start )) -lt 180 ] || die "the job never settled (last: ${pct:-?}% ready ${ready:-?}/${total:-?})"
  sleep 2
done
mapfile -t PORTS < <(lab_ports)
inventory before
say "steady at ${pct}%; ${before_nprocs} processes (${before_procs}), ${before_listen} listening sockets, fds: supervisor ${before_sup_fds}, ranks ${before_rank_fds}, all ${before_all_fds}"

# --- cycles ---------------------------------------------------------------------------------------------
mapfile -t ORDER < <(python3 - "$cycles" "$seed" <<'EOF'
import random, sys
n, seed = int(sys.argv[1]), int(sys.argv[2])
order = ["slow-storage", "throttled-rank", "unplaceable-rank"] * n
random.Random(seed).shuffle(order)
print("\n".join(order))
EOF
)
echo "cycle,fault,inject_s,pct_under_fault,clear_s,recover_s,pct_back,ok" >"$OUT"
failures=()
i=0
for fault in "${ORDER[@]}"; do
  i=$(( i + 1 ))
  t=$(date +%s.%N)
  if ! lab fault inject "$fault" --json >/dev/null 2>"$STATE/inject.err"; then
    failures+=("cycle $i $fault: inject failed: $(tail -n 1 "$STATE/inject.err")")
    say "cycle $i/${#ORDER[@]} $fault: inject FAILED: $(tail -n 1 "$STATE/inject.err")"
    lab fault clear --all >/dev/null 2>&1 || true
    echo "$i,$fault,,,,,,0" >>"$OUT"
    continue
  fi
  inject_s=$(since "$t")
  read -r under _ _ < <(status_line) || under=-1
  t=$(date +%s.%N)
  if ! lab fault clear --all >/dev/null 2>"$STATE/clear.err"; then
    failures+=("cycle $i $fault: clear failed: $(tail -n 1 "$STATE/clear.err")")
  fi
  cleared=$(date +%s.%N)
  clear_s=$(awk -v a="$cleared" -v b="$t" 'BEGIN { printf "%.3f", a - b }')
  ok=0
  while :; do
    read -r pct ready total < <(status_line) || true
    if awk -v p="${pct:--1}" -v w="$recover_pct" 'BEGIN { exit !(p >= w) }' && [ "${ready:-0}" = 4 ] && [ "${total:-0}" = 4 ]; then
      ok=1
      break
    fi
    if awk -v s="$(since "$cleared")" -v d="$deadline" 'BEGIN { exit !(s > d) }'; then break; fi
  done
  recover_s=$(since "$cleared")
  printf '%s,%s,%.1f,%s,%.1f,%.1f,%s,%s\n' "$i" "$fault" "$inject_s" "$under" "$clear_s" "$recover_s" "$pct" "$ok" >>"$OUT"
  if [ "$ok" = 1 ]; then
    say "cycle $i/${#ORDER[@]} $fault: inject $(printf %.1f "$inject_s") s, under the fault ${under}%, back to ${pct}% $(printf %.1f "$recover_s") s after the clear"
  else
    failures+=("cycle $i $fault: not back to ${recover_pct}% within ${deadline}s (last ${pct:-?}%, ready ${ready:-?}/${total:-?})")
    say "cycle $i/${#ORDER[@]} $fault: NOT back within ${deadline}s (last ${pct:-?}%)"
  fi
done

# --- leaks while running --------------------------------------------------------------------------------
lab fault clear --all >/dev/null
active=$(active_faults)
inventory after
leaks=()
[ "$active" = 0 ] || leaks+=("$active ledger entries still active")
[ "$after_procs" = "$before_procs" ] || leaks+=("processes changed: before ${before_procs}, after ${after_procs}")
[ "$after_listen" = "$before_listen" ] || leaks+=("listening sockets: ${before_listen} before, ${after_listen} after")
[ "$after_cgroups" -le "$before_cgroups" ] || leaks+=("cgroups: ${before_cgroups} before, ${after_cgroups} after: $(cgroup_dirs | tr '\n' ' ')")
# Descriptors move a little with connections in flight; a leak grows with every cycle.
grew() { [ "$2" -gt $(( $1 + $1 / 10 + 8 )) ]; }
grew "$before_sup_fds" "$after_sup_fds" && leaks+=("supervisor fds ${before_sup_fds} → ${after_sup_fds}")
grew "$before_rank_fds" "$after_rank_fds" && leaks+=("rank fds ${before_rank_fds} → ${after_rank_fds}")
grew "$before_all_fds" "$after_all_fds" && leaks+=("all fds ${before_all_fds} → ${after_all_fds}")

# --- down: nothing left ---------------------------------------------------------------------------------
lab down >&2 || leaks+=("lab down failed")
left_procs=$(lab_pids | wc -l)
[ "$left_procs" = 0 ] || leaks+=("$left_procs processes left after down")
[ -z "$(cgroup_dirs)" ] || leaks+=("cgroups left after down: $(cgroup_dirs | tr '\n' ' ')")
for p in "${PORTS[@]}"; do port_listening "$p" && leaks+=("port $p still listening after down"); done
[ ! -e "$STATE/$NAME" ] || leaks+=("state folder left after down")

# --- figures --------------------------------------------------------------------------------------------
echo
echo "Soak: $cycles cycles of each fault ($(( ${#ORDER[@]} )) in all, seed $seed) in $(( $(date +%s) - T0 )) s; load $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
python3 - "$OUT" "$recover_pct" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print(f"{'fault':<18}{'cycles':>7}{'back':>6}{'inject med':>12}{'recover med':>13}{'recover max':>13}{'min % under':>13}{'min % back':>12}")
print("  (% under: a 2 s status window right after the inject; recover: from the end of the clear until a 2 s")
print("   window at or above the threshold with 4/4 ranks Ready, so about 2-3 s is the resolution)")
for f in ["slow-storage", "throttled-rank", "unplaceable-rank"]:
    r = [x for x in rows if x["fault"] == f]
    ok = [x for x in r if x["ok"] == "1"]
    num = lambda k, rs: [float(x[k]) for x in rs if x[k] not in ("", "-1")]
    rec, inj, under, back = num("recover_s", ok), num("inject_s", r), num("pct_under_fault", r), num("pct_back", ok)
    med = lambda v: f"{statistics.median(v):.1f} s" if v else "-"
    mx = lambda v: f"{max(v):.1f} s" if v else "-"
    mn = lambda v: f"{min(v):.0f}%" if v else "-"
    print(f"{f:<18}{len(r):>7}{len(ok):>6}{med(inj):>12}{med(rec):>13}{mx(rec):>13}{mn(under):>13}{mn(back):>12}")
EOF
echo "processes: before ${before_nprocs} (${before_procs}); after ${after_nprocs} (${after_procs})"
echo "listening sockets: before ${before_listen}, after ${after_listen}; cgroups: before ${before_cgroups}, after ${after_cgroups}"
echo "open fds: supervisor ${before_sup_fds} → ${after_sup_fds}; ranks ${before_rank_fds} → ${after_rank_fds}; all lab processes ${before_all_fds} → ${after_all_fds}"
echo "active ledger entries at the end: $active; after lab down: $left_procs processes, ${#PORTS[@]} ports checked"
echo "per-cycle figures: $OUT"
if [ ${#failures[@]} -gt 0 ] || [ ${#leaks[@]} -gt 0 ]; then
  for f in "${failures[@]}" "${leaks[@]}"; do say "$f"; done
  exit 1
fi
say "every cycle came back to ${recover_pct}% and nothing leaked"
