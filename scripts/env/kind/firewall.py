#!/usr/bin/env python3
"""Records the host's firewall before the private Docker engine starts, removes what the engine added
after it stopped, and checks the firewall is back as it was.

Docker (--iptables=true) adds the chains DOCKER, DOCKER-USER, DOCKER-ISOLATION-STAGE-1/2 and rules in the
built-in chains (FORWARD accepts for its bridges, POSTROUTING masquerades for its subnets, PREROUTING and
OUTPUT jumps to DOCKER), and does not remove them when it stops. A rule is removed only when it was not
there before the engine started AND it names a Docker chain, one of the engine's bridges (docker0, br-*)
or one of its subnets; a chain only when its name starts with DOCKER and it was not there before. Tables of
the nf_tables backend that the engine brought into existence and that are empty again are deleted.

Usage: firewall.py save DIR            record the firewall into DIR (once: an existing record is kept)
       firewall.py sweep DIR PREFIX..  remove what the engine added (prints what it removed); PREFIX
                                       starts the engine's subnets, e.g. 198.51.100.
       firewall.py check DIR           exit 0 when the firewall equals the record, else print the difference
"""

import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys

# The environments' shared helpers (scripts/env/nftables.py), without leaving bytecode in the checkout.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from nftables import remove_new_empty_tables  # noqa: E402

TABLES = ("filter", "nat", "mangle", "raw")
FAMILIES = ("iptables", "ip6tables")
BUILTIN = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}
OURS_CHAIN = re.compile(r"^DOCKER(\b|-)")
OURS_IFACE = re.compile(r"^(docker0|br-[0-9a-f]{12})$")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def rules(fam, table):
    """(chains, rules) of one table, as `-S` prints them; None when the table cannot be read."""
    r = run([fam, "-w", "5", "-t", table, "-S"])
    if r.returncode != 0:
        return None
    chains, out = [], []
    for line in r.stdout.splitlines():
        if line.startswith("-N "):
            chains.append(line.split()[1])
        elif line.startswith("-A "):
            out.append(line)
    return chains, out


def tables(fam):
    r = run([f"{fam}-save"])
    return sorted({line[1:].strip() for line in r.stdout.splitlines() if line.startswith("*")})


def normalized(fam):
    """The whole firewall of one family without counters and comments, for comparison."""
    r = run([f"{fam}-save"])
    out = []
    for line in r.stdout.splitlines():
        if line.startswith("#"):
            continue
        out.append(re.sub(r" \[\d+:\d+\]$", "", line))
    return out


def nft_normalized():
    if not shutil.which("nft"):
        return []
    r = run(["nft", "list", "ruleset"])
    return [re.sub(r"counter packets \d+ bytes \d+", "counter", line) for line in r.stdout.splitlines()]


def write(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + ("\n" if lines else ""))


def read(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def save(d):
    if os.path.exists(os.path.join(d, "saved")):
        return  # the record of the host as it was before the first up: never overwritten by a later up
    os.makedirs(d, exist_ok=True)
    for fam in FAMILIES:
        write(os.path.join(d, f"tables.{fam}"), tables(fam))
        for t in TABLES:
            got = rules(fam, t)
            if got is not None:
                write(os.path.join(d, f"rules.{fam}.{t}"), ["-N " + c for c in got[0]] + got[1])
        write(os.path.join(d, f"all.{fam}"), normalized(fam))
    write(os.path.join(d, "all.nft"), nft_normalized())
    write(os.path.join(d, "saved"), ["ok"])


def is_ours(rule, subnets):
    toks = shlex.split(rule)
    for i, tok in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else ""
        if tok in ("-j", "--jump", "-g", "--goto") and OURS_CHAIN.match(nxt):
            return True
        if tok in ("-i", "-o", "--in-interface", "--out-interface") and OURS_IFACE.match(nxt):
            return True
        if tok in ("-s", "-d", "--source", "--destination") and any(nxt.startswith(p) for p in subnets):
            return True
    return OURS_CHAIN.match(toks[1]) is not None


def sweep(d, subnets):
    failed = False
    for fam in FAMILIES:
        for t in TABLES:
            got = rules(fam, t)
            if got is None:
                continue
            try:
                before = set(read(os.path.join(d, f"rules.{fam}.{t}")))
            except FileNotFoundError:
                print(f"{fam} {t}: no record of the firewall before up; left alone", file=sys.stderr)
                failed = True
                continue
            chains, now = got
            ours = [c for c in chains if OURS_CHAIN.match(c) and ("-N " + c) not in before]
            for rule in now:
                if rule in before or not is_ours(rule, subnets):
                    continue
                toks = shlex.split(rule)
                if toks[1] in ours:
                    continue  # goes with its chain
                r = run([fam, "-w", "5", "-t", t, "-D"] + toks[1:])
                print(f"{fam} -t {t}: removed {rule}")
                if r.returncode != 0:
                    print(f"  failed: {r.stderr.strip()}", file=sys.stderr)
                    failed = True
            for op in ("-F", "-X"):
                for c in ours:
                    r = run([fam, "-w", "5", "-t", t, op, c])
                    if r.returncode != 0:
                        print(f"{fam} -t {t} {op} {c}: {r.stderr.strip()}", file=sys.stderr)
                        failed = True
            if ours:
                print(f"{fam} -t {t}: removed chains {' '.join(ours)}")
        failed |= remove_new_empty_tables(fam, saved_tables(fam, d))
    return failed


def saved_tables(fam, d):
    """The table names saved before the engine came up, or None."""
    try:
        return set(read(os.path.join(d, f"tables.{fam}")))
    except FileNotFoundError:
        return None


def without_empty_tables(lines):
    """An iptables-save listing without its tables that hold no rule, no chain of their own and no policy
    but ACCEPT: such a table filters nothing. Without `nft` an empty table the engine made cannot be
    removed again (remove_new_empty_tables), so it is not counted as a change."""
    out, block, empty = [], [], True
    for line in lines + ["*"]:
        if line.startswith("*"):
            if block and not empty:
                out.extend(block)
            block, empty = [], True
        elif line.startswith("-A ") or (line.startswith(":") and (line[1:].split()[0] not in BUILTIN or " ACCEPT" not in line)):
            empty = False
        if line != "*" or block:
            block.append(line)
    return [line for line in out if line != "*"]


def check(d):
    same = True
    pairs = [(f"all.{fam}", normalized(fam)) for fam in FAMILIES] + [("all.nft", nft_normalized())]
    for name, now in pairs:
        before = read(os.path.join(d, name))
        now = [line for line in now if line.strip()]
        if name != "all.nft":
            before, now = without_empty_tables(before), without_empty_tables(now)
        if before != now:
            same = False
            for line in difflib.unified_diff(before, now, f"{name} before up", f"{name} now", lineterm="", n=1):
                print(line)
    return same


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("save", "sweep", "check"):
        sys.exit(__doc__)
    cmd, d = sys.argv[1], sys.argv[2]
    if cmd == "save":
        save(d)
    elif cmd == "sweep":
        sys.exit(1 if sweep(d, set(sys.argv[3:])) else 0)
    else:
        sys.exit(0 if check(d) else 1)


if __name__ == "__main__":
    main()
