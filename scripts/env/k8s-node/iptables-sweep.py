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
import shutil
import subprocess
import sys

PREFIXES = ("KUBE-", "CNI-")
TABLES = ("filter", "nat", "mangle", "raw")
FAMILIES = ("iptables", "ip6tables")
BUILTIN = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


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
        if not dry and remove_new_empty_tables(fam, base_dir):
            failed = True
    sys.exit(1 if failed else 0)


def remove_new_empty_tables(fam, base_dir):
    """Deletes nf_tables tables that the node's writes brought into existence and that are empty again."""
    try:
        with open(os.path.join(base_dir, f"tables.{fam}"), encoding="utf-8") as f:
            before = {line.strip() for line in f if line.strip()}
    except FileNotFoundError:
        return False
    if "nf_tables" not in run([fam, "-V"]).stdout or not shutil.which("nft"):
        return False
    failed = False
    saved = run([f"{fam}-save"]).stdout
    table, empty = None, {}
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
            empty[table] = True
        elif table and (line.startswith("-A ") or (line.startswith(":") and line[1:].split()[0] not in BUILTIN)):
            empty[table] = False
        elif table and line.startswith(":") and " ACCEPT " not in line:
            empty[table] = False  # a policy was changed: someone cares about this table
    family = "ip" if fam == "iptables" else "ip6"
    for table, is_empty in sorted(empty.items()):
        if table in before or not is_empty:
            continue
        r = run(["nft", "delete", "table", family, table])
        if r.returncode == 0:
            print(f"{fam}: removed the empty table {table} (it did not exist before)")
        else:
            print(f"nft delete table {family} {table}: {r.stderr.strip()}", file=sys.stderr)
            failed = True
    return failed


if __name__ == "__main__":
    main()
