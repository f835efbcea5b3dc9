#!/usr/bin/env bash
# Prints the integration-test executables of one package, built (when not fresh) with the feature set the
# whole workspace's tests share, one `name<TAB>executable` per line.
#
#   scripts/ci/test-bins.sh lab-tests            # every end-to-end test binary
#   scripts/ci/test-bins.sh lab-runtime-kube control_plane
#
# `cargo test -p PKG` or `--test NAME` alone resolves the features of fewer packages: dependencies such as
# tokio, hyper and kube then build a second time with another feature set (minutes on a cold run, for
# nothing). Building every test of the workspace once and running the chosen binaries directly avoids that.
# Run a binary from its package's folder, as `cargo test` does.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 PACKAGE [TEST_NAME]" >&2; exit 2; }
pkg=$1
only=${2:-}
# The build's own output (progress, errors) goes to stderr; a failed build fails here.
json=$(cargo test --workspace --locked --no-run --message-format=json-render-diagnostics)
PKG=$pkg ONLY=$only python3 -c '
import json, os, sys
pkg, only = os.environ["PKG"], os.environ["ONLY"]
found = []
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if t.get("kind") != ["test"]:
        continue
    # A package id ends in "#name@version" (or "#version" when the folder is the name).
    where, _, tail = m["package_id"].rpartition("#")
    name = tail.rpartition("@")[0] if "@" in tail else where.rstrip("/").rsplit("/", 1)[-1]
    if name != pkg:
        continue
    if only and t["name"] != only:
        continue
    found.append(t["name"] + "\t" + m["executable"])
for line in sorted(found):
    print(line)
if not found:
    sys.exit("no test binary of package %s%s in the workspace build" % (pkg, " named " + only if only else ""))
' <<<"$json"
