#!/usr/bin/env bash
# Fuzzes the lab's two parsers of outside input with cargo-fuzz (libFuzzer), each for a bounded time, and
# prints what was run. Exits non-zero when a target crashed, hung or ran out of memory; the input that did
# it is kept in fuzz/artifacts/<target>/ and the command to replay it is printed.
#
#   expo_parse    lab_telemetry::expo::parse, the Prometheus text every scrape target sends
#   drill_parse   lab_drills::spec::parse, drill files
#
# Settings (environment):
#   FUZZ_SECONDS=60            seconds per target
#   FUZZ_TARGETS="expo_parse drill_parse"
#   FUZZ_SANITIZER=address     address | none (none builds and runs faster; the targets are safe Rust, but
#                              the YAML parser underneath the drill reader is not)
#   FUZZ_TIMEOUT=10            seconds one input may take before it counts as a hang
#
# cargo-fuzz is installed when missing (`cargo install cargo-fuzz`). It needs a nightly compiler: the
# nightly toolchain when rustup has one, otherwise the stable compiler with RUSTC_BOOTSTRAP=1.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"expo_parse drill_parse"}
sanitizer=${FUZZ_SANITIZER:-address}
per_input=${FUZZ_TIMEOUT:-10}

say() { printf '[fuzz] %s\n' "$*" >&2; }

if ! cargo fuzz --version >/dev/null 2>&1; then
  say "installing cargo-fuzz (once)"
  cargo install cargo-fuzz --locked >&2
fi

toolchain=()
if command -v rustup >/dev/null 2>&1 && rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
  say "compiler: $(rustc +nightly --version)"
else
  # libFuzzer's instrumentation flags are unstable; a stable compiler accepts them with this switch.
  export RUSTC_BOOTSTRAP=1
  say "compiler: $(rustc --version) with RUSTC_BOOTSTRAP=1 (no nightly toolchain)"
fi

# Seeds: the lab's own fixtures and the metrics its components really send.
seed() { # seed <target> <files...>
  local dir="fuzz/corpus/$1"
  shift
  mkdir -p "$dir"
  for f in "$@"; do
    [ -f "$f" ] && cp -n "$f" "$dir/seed-$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  return 0
}
seed expo_parse model/tests/fixtures/valid/*
seed drill_parse tests/fixtures/valid/*.yaml tests/fixtures/invalid/*.yaml

dict_of() {
  case "$1" in
    expo_parse) echo fuzz/dict/expo.dict ;;
    drill_parse) echo fuzz/dict/drill.dict ;;
  esac
}

failed=()
summary=()
for t in $targets; do
  log="fuzz/artifacts/$t.log"
  mkdir -p "fuzz/artifacts/$t"
  say "building and running $t for ${seconds}s (sanitizer: $sanitizer)"
  set +e
  cargo "${toolchain[@]}" fuzz run --sanitizer "$sanitizer" "$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -timeout="$per_input" -rss_limit_mb=2048 -max_len=8192 \
    -dict="$(dict_of "$t")" -print_final_stats=1 >"$log" 2>&1
  code=$?
  set -e
  stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -n 1; }
  execs=$(stat number_of_executed_units)
  rate=$(stat average_exec_per_sec)
  added=$(stat new_units_added)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)
  corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
  if [ "$code" -eq 0 ]; then
    verdict=ok
  else
    verdict="FAILED (exit $code)"
    failed+=("$t")
    artifact=$(grep -Eo 'fuzz/artifacts/[^ ]+' "$log" | grep -v '\.log$' | tail -n 1 || true)
    [ -z "$execs" ] && tail -n 30 "$log" >&2
    if [ -n "$artifact" ]; then
      say "$t: input kept in $artifact"
      say "replay: cargo ${toolchain[*]} fuzz run --sanitizer $sanitizer $t $artifact"
    fi
    grep -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$log" | head -n 5 >&2 || true
  fi
  summary+=("$(printf '%-12s %-10s %12s %10s %8s %8s %8s' "$t" "$verdict" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${added:-?}" "$corpus")")
done

printf '\n%-12s %-10s %12s %10s %8s %8s %8s\n' target result execs "execs/s" cov "new" files
printf '%s\n' "${summary[@]}"
printf '(%ss each; logs in fuzz/artifacts/<target>.log)\n' "$seconds"
if [ ${#failed[@]} -gt 0 ]; then
  say "crashed or hung: ${failed[*]}"
  exit 1
fi
