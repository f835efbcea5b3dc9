#!/usr/bin/env python3
"""Removes the iptables chains the node's components created, and only those.

kube-proxy, the kubelet and the CNI bridge/portmap plugins name their chains KUBE-* and CNI-*. A chain
is removed when its name has one of those prefixes AND it was not there before the node first came up
(the lists up.sh saved). Rules elsewhere that jump to a removed chain are deleted one by one; no
built-in chain is ever flushed.

Tables of the nf_tables backend that did not exist before (tables.<family>) and are empty again are
deleted too, so the host ends as it was.

Usage: iptables-sweep.py <dir with chains.<family>.<table> baselines> [--dry-run]
Prints what it removed; exit status 1 if a removal failed.
"""

import os
import shlex
import subprocess
import sys

# The environments' shared helpers (scripts/env/nftables.py), without leaving bytecode in the checkout.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nftables import remove_new_empty_tables  # noqa: E402

PREFIXES = ("KUBE-", "CNI-")
TABLES = ("filter", "nat", "mangle", "raw")
FAMILIES = ("iptables", "ip6tables")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    base_dir = sys.argv[1]
    dry = "--dry-run" in sys.argv
    failed = False
    for fam in FAMILIES:
        for table in TABLES:
            saved = run([f"{fam}-save", "-t", table])
            if saved.returncode != 0:
                continue
            baseline_file = os.path.join(base_dir, f"chains.{fam}.{table}")
            try:
                with open(baseline_file, encoding="utf-8") as f:
                    baseline = {line.strip() for line in f if line.strip()}
            except FileNotFoundError:
                # Without a record of the host's chains nothing can be told apart: touch nothing.
                print(f"{fam} {table}: no baseline in {baseline_file}; left alone", file=sys.stderr)
                failed = True
                continue
            chains, rules = set(), []
            for line in saved.stdout.splitlines():
                if line.startswith(":"):
                    chains.add(line[1:].split()[0])
                elif line.startswith("-A "):
                    rules.append(shlex.split(line))
            ours = {c for c in chains if c.startswith(PREFIXES) and c not in baseline}
            if not ours:
                continue
            # Jumps into our chains from chains that stay (built-in or the host's own).
            for rule in rules:
                chain = rule[1]
                target = None
                for i, tok in enumerate(rule):
                    if tok in ("-j", "--jump", "-g", "--goto") and i + 1 < len(rule):
                        target = rule[i + 1]
                if chain not in ours and target in ours:
                    cmd = [fam, "-w", "5", "-t", table, "-D", chain] + rule[2:]
                    print(f"{fam} -t {table}: delete rule in {chain} -> {target}")
                    if not dry and run(cmd).returncode != 0:
                        failed = True
            for op in ("-F", "-X"):
                for chain in sorted(ours):
                    if dry:
                        continue
                    r = run([fam, "-w", "5", "-t", table, op, chain])
                    if r.returncode != 0:
                        print(f"{fam} -t {table} {op} {chain}: {r.stderr.strip()}", file=sys.stderr)
                        failed = True
            print(f"{fam} -t {table}: removed chains {' '.join(sorted(ours))}")
        if not dry and remove_new_empty_tables(fam, saved_tables(fam, base_dir)):
            failed = True
    sys.exit(1 if failed else 0)


def saved_tables(fam, base_dir):
    """The table names saved before the node came up, or None."""
    try:
        with open(os.path.join(base_dir, f"tables.{fam}"), encoding="utf-8") as f:
            return {line.strip() for line in f if line.strip()}
    except FileNotFoundError:
        return None


if __name__ == "__main__":
    main()
