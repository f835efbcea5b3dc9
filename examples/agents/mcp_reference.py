#!/usr/bin/env python3
"""The reference MCP agent: investigates a live (or recorded) incident through the lab's MCP tools the way
a person would — status, then the dependencies, the processes and the change log its evidence level
offers — says what it concluded (`diagnose`), saves a checkpoint where the job still trains, and fixes the
cause one `remediate` call at a time. Rule-based (lab_rules.py, shared with the plan agent), no model.

It uses the official MCP Python SDK (`pip install mcp`) as any MCP client would. The lab starts it with
the server's command line in LAB_MCP_SERVER (a JSON argv) and which attempt this is in LAB_ATTEMPT; after a
failed verification it is started again, and the incident's previous_attempts says what was tried and why
it did not hold. By hand, against a running lab:

    python3 mcp_reference.py --server 'lab --name lab mcp --evidence full'
"""

import argparse
import asyncio
import json
import os
import shlex
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lab_rules  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402


def log(*a):
    print("[agent]", *a, file=sys.stderr, flush=True)


async def call(session, tools, name, **args):
    """A tool's answer as JSON, or None when the tool is not offered or answers with an error."""
    if name not in tools:
        return None
    r = await session.call_tool(name, args)
    text = "".join(getattr(c, "text", "") for c in r.content)
    if getattr(r, "is_error", None) or getattr(r, "isError", None):
        log(f"{name} {args}: {text}")
        return None
    return json.loads(text) if text else None


async def investigate(session):
    tools = {t.name for t in (await session.list_tools()).tools}
    log("tools:", ", ".join(sorted(tools)))
    view = await call(session, tools, "incident") or {}
    status = await call(session, tools, "status") or {}
    # What the lab shows now, over the incident as it opened.
    for k in ("kubernetes", "training", "signals_firing", "database", "database_pods"):
        if status.get(k) is not None:
            view[k] = status[k]
    if status.get("pods"):
        if "wiring" in view:
            view["wiring"]["pods"] = status["pods"]
        else:
            view["pods"] = status["pods"]
    deps = await call(session, tools, "dependencies")
    if deps:
        view["dependencies"] = deps["dependencies"]
    changes = await call(session, tools, "changes")
    if changes is not None:
        view["changes"] = changes["changes"]
    cache = {}

    def look(rank):
        return cache.get(rank, [])

    # What runs beside the ranks the alerts name as computing slowly: look before concluding.
    for a in lab_rules.firing(view, "LabRankComputeSlow"):
        n = int(lab_rules.num(a["target"]))
        p = await call(session, tools, "processes", rank=n)
        if p:
            cache[n] = p["processes"]
    c = lab_rules.decide(view, look if "processes" in tools else None)
    log(f"concluded: {c['cause']} blaming {c['blame']}: {c['summary']}")
    await call(session, tools, "diagnose", anomaly=c["anomaly"], blame=c["blame"], cause=c["cause"],
               summary=c["summary"][:2000])
    if c["commands"] and lab_rules.trains(view):
        saved = await call(session, tools, "checkpoint", timeout_s=60)
        log("checkpoint:", "saved" if saved and saved.get("exit_code") == 0 else "not saved")
    for x in c["commands"]:
        r = await call(session, tools, "remediate", argv=x["argv"], reason=x["reason"], cause=c["cause"])
        ok = r is not None and r.get("exit_code") == 0
        log(("ran " if ok else "did not run ") + " ".join(x["argv"]))
        if not ok:
            break
    return 0


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", help="the MCP server's command line (default: LAB_MCP_SERVER, a JSON argv)")
    a = ap.parse_args()
    if a.server:
        argv = shlex.split(a.server)
    elif os.environ.get("LAB_MCP_SERVER"):
        argv = json.loads(os.environ["LAB_MCP_SERVER"])
    else:
        ap.error("give --server, or run it from `lab drill run --mcp-agent` (which sets LAB_MCP_SERVER)")
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await investigate(session)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
