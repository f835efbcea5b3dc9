#!/usr/bin/env bash
# How soon the demo shows its first fault from a fresh clone, against the release build it used before: for
# each profile, a clone of this commit with no build (and SeaweedFS installed by the demo itself, from pip's
# cache where it has one), then the demo's own steps, timed at each mark: the build done, the lab up, the
# first fault injected. The demo is stopped there (Ctrl-C, as a person would; it clears the fault and takes
# the lab down). The goal: the first fault on screen within 4 minutes on 2 cores.
#
#   scripts/bench/demo-start.sh                  # dev (what scripts/demo.sh builds) and release
#   PROFILES=dev scripts/bench/demo-start.sh     # one profile only
#
# Prints a table and keeps it as docs/figures/demo-start.md (scripts/bench/figures-write.sh). Local runtime.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
PROFILES=${PROFILES:-dev release}
say() { printf '[bench-demo-start %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

work=$(mktemp -d)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
commit=$(git -C "$root" rev-parse --short HEAD)

rows=()
for profile in $PROFILES; do
  case "$profile" in
    # dev is scripts/demo.sh itself; release is what it ran before: its steps with a release build.
    dev) script='exec scripts/demo.sh --runtime local --name bench-demo-start'; bin=debug ;;
    release)
      script='eval "$(scripts/tools.sh weed)" && cargo build --release --workspace --bins --locked >&2 && exec target/release/lab demo --runtime local --name bench-demo-start'
      bin=release ;;
    *) say "unknown profile $profile (dev or release)"; exit 2 ;;
  esac
  clone="$work/$profile"
  git clone --quiet "$root" "$clone"
  git -C "$clone" checkout --quiet "$commit"
  say "$profile: from a fresh clone of $commit: $script"
  # Each line of the demo timed from the start; the build is done when `lab demo` prints its first line.
  row=$(cd "$clone" && SCRIPT="$script" BIN="$bin" LAB_STATE_DIR="$work/state-$profile" python3 - <<'EOF'
import os, signal, subprocess, sys, time
t0 = time.monotonic()
p = subprocess.Popen(["bash", "-c", os.environ["SCRIPT"]], stdout=subprocess.PIPE, text=True)
marks = {}
for line in p.stdout:
    t = time.monotonic() - t0
    if line.startswith("Straggler Lab demo") and "built" not in marks:
        marks["built"] = t
    if "Lab \"bench-demo-start\" is up" in line and "up" not in marks:
        marks["up"] = t
    if "Fault 1 of 3" in line and "fault" not in marks:
        marks["fault"] = t
    if "✓ inject" in line and "inject" not in marks:
        marks["inject"] = t
        p.send_signal(signal.SIGINT)
        break
    if "✗" in line:
        print(f"the demo failed before its first fault: {line.strip()}", file=sys.stderr)
        break
rest = p.communicate(timeout=120)[0]
subprocess.run(["target/" + os.environ["BIN"] + "/lab", "--name", "bench-demo-start", "down"],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if "inject" not in marks:
    print(f"no fault injected; the demo printed:\n{rest}", file=sys.stderr)
    sys.exit(1)
print(f'{marks.get("built", 0):.0f}\t{marks.get("up", 0):.0f}\t{marks.get("fault", 0):.0f}\t{marks["inject"]:.0f}')
EOF
  )
  IFS=$'\t' read -r built up fault inject <<<"$row"
  rows+=("$(printf '%-8s %9s %10s %12s %16s' "$profile" "$built s" "$up s" "$fault s" "$inject s")")
  say "$profile: built at $built s, lab up at $up s, fault 1 on screen at $fault s, injected at $inject s"
  rm -rf "$clone"
done

{
  echo "From a fresh clone to the demo's first fault (local runtime, $(nproc) cores, commit $commit); goal: fault 1 injected within 240 s"
  printf '%-8s %9s %10s %12s %16s\n' PROFILE "BUILT AT" "LAB UP AT" "FAULT 1 AT" "FAULT 1 INJECTED"
  printf '%s\n' "${rows[@]}"
} | "$root/scripts/bench/figures-write.sh" demo-start "PROFILES=\"$PROFILES\" scripts/bench/demo-start.sh"
