"""What the environments' firewall sweeps share (k8s-node/iptables-sweep.py, kind/firewall.py): removing the
nf_tables tables an environment's writes brought into existence once they are empty again."""

import shutil
import subprocess
import sys

BUILTIN = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def remove_new_empty_tables(fam, before):
    """Deletes the tables of family `fam` (iptables, ip6tables) that were not in `before` (the table names
    saved before the environment came up, or None when nothing was saved) and hold nothing now: no rule, no
    chain of their own, no policy but ACCEPT. Returns whether a deletion failed."""
    if before is None:
        return False
    if "nf_tables" not in run([fam, "-V"]).stdout or not shutil.which("nft"):
        return False
    failed = False
    table, empty = None, {}
    for line in run([f"{fam}-save"]).stdout.splitlines():
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
