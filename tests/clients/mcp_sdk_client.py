#!/usr/bin/env python3
"""A client of `lab mcp` written with the official MCP Python SDK, as an agent team would write one: it
lists the tools, calls `status`, then sends what a careless agent sends (an unknown tool, arguments of the
wrong type, a command off the allow-list) and prints, as one JSON object, what the server answered.

    mcp_sdk_client.py LAB_BINARY ARG...      (the server's command line)
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(r):
    return "".join(getattr(c, "text", "") for c in r.content)


def is_error(r):
    return bool(getattr(r, "is_error", None) or getattr(r, "isError", None))


async def main(argv):
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    out = {}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        init = await s.initialize()
        out["server"] = init.server_info.name if hasattr(init, "server_info") else init.serverInfo.name
        out["tools"] = [t.name for t in (await s.list_tools()).tools]
        r = await s.call_tool("status", {})
        out["status"] = {"error": is_error(r), "body": json.loads(text(r))}
        try:
            r = await s.call_tool("no-such-tool", {})
            out["unknown_tool"] = {"protocol_error": False, "text": text(r)}
        except Exception as e:  # the SDK raises the JSON-RPC error
            out["unknown_tool"] = {"protocol_error": True, "text": str(e)}
        r = await s.call_tool("checkpoint", {"timeout_s": "soon"})
        out["bad_arguments"] = {"error": is_error(r), "text": text(r)}
        r = await s.call_tool("remediate", {"argv": ["lab", "down"], "reason": "tidy up"})
        out["off_the_list"] = {"error": is_error(r), "text": text(r)}
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
