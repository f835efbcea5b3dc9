#!/usr/bin/env python3
"""The reference plan agent: reads the incident bundle and prints a plan; it never acts.

Rule-based, Python 3 standard library only, no network, no model: copy it to write your own. The lab
runs it with `sh -c`, the bundle's path in LAB_INCIDENT_BUNDLE (the level it was cut to in its
"evidence" field), and reads one JSON plan from stdout (docs/agents.md). Its rules are in lab_rules.py,
shared with the MCP agent (mcp_reference.py); a failed attempt is in the bundle's previous_attempts, and
what it tried is not proposed again.

Where the job still trains, the plan saves a checkpoint first (the seed: "if the job supports it, the plan
takes a checkpoint before any other step").
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lab_rules  # noqa: E402

FORMAT = "straggler-lab.plan/v1"


def plan(bundle):
    c = lab_rules.decide(bundle)
    commands = c["commands"]
    if commands and lab_rules.trains(bundle):
        commands = [lab_rules.cmd("save the run before any change", "checkpoint", "--timeout", "60s")] + commands
    return {"format": FORMAT, "anomaly": c["anomaly"], "blame": c["blame"], "cause": c["cause"],
            "summary": c["summary"], "commands": commands}


def main():
    path = os.environ.get("LAB_INCIDENT_BUNDLE")
    if not path:
        print("LAB_INCIDENT_BUNDLE is not set: the lab gives the bundle's path there", file=sys.stderr)
        return 2
    with open(path, encoding="utf-8") as f:
        bundle = json.load(f)
    json.dump(plan(bundle), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
