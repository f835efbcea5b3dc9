#!/usr/bin/env bash
# Keeps what a benchmark script printed as a figures page: reads the figures on stdin, passes them through
# to stdout unchanged, and writes docs/figures/NAME.md with the date, the machine and the command that
# printed them, then regenerates the index, docs/figures.md (scripts/bench/figures-index.sh).
#
#   ... | scripts/bench/figures-write.sh NAME 'RUNS=5 scripts/bench/all.sh --quick'
#   ... | FIGURES_FORMAT=markdown scripts/bench/figures-write.sh mcp 'scripts/bench/mcp.sh'   # already a table
#
# FIGURES_DIR (docs/figures) is where the page goes; set it empty to print without writing (a trial run).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: $0 NAME COMMAND (the figures on stdin)" >&2; exit 2; }
name=$1
command=$2
case "$name" in
  *[!a-z0-9-]* | '') echo "$0: NAME must be lowercase letters, digits and dashes: $name" >&2; exit 2 ;;
esac
dir=${FIGURES_DIR-$root/docs/figures}
format=${FIGURES_FORMAT:-text}

body=$(cat)
printf '%s\n' "$body"
[ -n "$dir" ] || exit 0

cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
mkdir -p "$dir"
tmp=$(mktemp "$dir/.$name.XXXXXX")
{
  echo "# $name"
  echo
  echo "<!-- written by scripts/bench/figures-write.sh from the output of the command below; do not edit by hand -->"
  echo
  echo "- command: \`$command\`"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: $(nproc) CPUs (${cpu:-unknown}), kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
  echo "- commit: $commit"
  echo
  if [ "$format" = markdown ]; then
    printf '%s\n' "$body"
  else
    echo '```text'
    printf '%s\n' "$body"
    echo '```'
  fi
} >"$tmp"
mv "$tmp" "$dir/$name.md"
echo "[figures] written to ${dir#"$root"/}/$name.md" >&2
if [ "$dir" = "$root/docs/figures" ]; then
  "$root/scripts/bench/figures-index.sh"
fi
