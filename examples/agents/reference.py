#!/usr/bin/env python3
"""The reference agent: reads the incident bundle and prints a plan; it never acts.

Rule-based, Python 3 standard library only, no network, no model: copy it to write your own. The lab
runs it with `sh -c`, the bundle's path in LAB_INCIDENT_BUNDLE (the level it was cut to in its
"evidence" field), and reads one JSON plan from stdout (docs/agents.md).

Its rules follow the seed story's lessons, in order, and each needs the evidence it names:
  1. Over-scaled (wiring): ranks asked for beyond the GPUs there are, or a rank Pending: bring the
     replicas AND the configured world size back to what fits.
  2. A pod changed in place (wiring): its live CPU limit differs from its template: put it back.
  3. One slow dependency (wiring for the edge, changes for the cause): blame the server, not the rank
     that waits on it; revert the newest change on it that is not a removal (a fix is not a suspect).
  4. A rank the alerts name as hung (LabRankHung, at every level): restart that rank, never the siblings
     that wait for it.
  5. Ranks the alerts name as computing slowly (LabRankComputeSlow) with their limits as in the template
     (wiring): something runs beside them; with the change log, stop the process it names, else list what
     runs in each rank's limit and escalate.
Without the wiring map (evidence `metrics`) it can only act on what the metrics name, the ranks, and so
does what the seed's first analyses did: scale the ranks to those up, re-apply the workload's limits to
the throttled rank, or restart the rank that reads slowly.
"""

import json
import os
import sys

FORMAT = "straggler-lab.plan/v1"


def cmd(reason, *argv):
    return {"argv": ["lab", *argv], "reason": reason}


def plan(anomaly, blame, cause, summary, commands):
    return {
        "format": FORMAT,
        "anomaly": anomaly,
        "blame": blame,
        "cause": cause,
        "summary": summary,
        "commands": commands,
    }


def millicores(cores):
    return f"{round(cores * 1000)}m"


def slow_dependency(deps):
    """The one storage server whose reads stand out from its siblings', if any."""
    out = [d for d in deps if d.get("stands_out")]
    return out[0] if len(out) == 1 else None


def firing(b, rule):
    return [a for a in b.get("signals_firing", []) if a.get("rule") == rule]


def hung_rank(b):
    hung = firing(b, "LabRankHung")
    if not hung:
        return None
    a = hung[0]
    n = a["target"].split("-")[-1]
    return plan(True, [a["target"]], "hung-rank", a.get("summary", f"{a['target']} makes no progress"),
                [cmd("it holds the job while its siblings wait for it: restart that rank, not the job",
                     "restart", "rank", n)])


def slow_compute(b, changes):
    slow = sorted({a["target"] for a in firing(b, "LabRankComputeSlow")})
    if not slow:
        return None
    summary = f"{', '.join(slow)} compute far slower than their siblings with their limits as in the template"
    cmds = []
    for name in slow:
        n = name.split("-")[-1]
        beside = [c for c in (changes or []) if c.get("where") == name and "pid" in str(c.get("after", ""))]
        pid = str(beside[-1]["after"]).split("pid")[-1].split()[0] if beside else None
        if pid and pid.isdigit():
            cmds.append(cmd(f"{beside[-1]['after']} runs in {name}'s CPU limit: stop it", "rank", "stop", n,
                            "--pid", pid))
        else:
            cmds.append(cmd(f"list what runs in {name}'s CPU limit", "rank", "procs", n))
    if any(c["argv"][2] == "procs" for c in cmds):
        summary += "; no change names what runs beside them: escalate with the list"
    return plan(True, slow, "cpu-neighbour", summary, cmds)


def with_wiring(b, t, wiring, changes):
    pods = wiring.get("pods", [])
    ranks = [p for p in pods if p.get("role") == "rank"]
    gpus = wiring.get("gpus_capacity") or 0
    desired = t.get("ranks_desired") or len(ranks)
    configured = t.get("world_size_configured") or desired
    pending = [p for p in ranks if p.get("phase") == "Pending"]
    if gpus and (desired > gpus or configured > gpus or pending):
        fit = min(gpus, desired)
        blame, cmds = [], []
        if desired > fit:
            blame.append("ranks")
            cmds.append(cmd(f"{desired} ranks asked for, {gpus} GPUs: the extra rank can never be placed",
                            "scale", "ranks", str(fit)))
        if configured > fit:
            blame.append("job config")
            cmds.append(cmd(f"the ranks expect {configured} peers; only {fit} can run",
                            "config", "world-size", str(fit)))
        return plan(True, blame, "over-scaled",
                    f"{len(pending)} rank(s) Pending on a node with {gpus} GPUs; job expects {configured}", cmds)

    drifted = [p for p in ranks if p.get("differs_from_template") and p.get("cpu_template")]
    if len(drifted) == 1:
        p = drifted[0]
        n = p["name"].split("-")[-1]
        return plan(True, [p["name"]], "starved-client",
                    f"{p['name']} runs with {p.get('cpu_live')} while its template says {p['cpu_template']}",
                    [cmd("the limit was changed in place; the template is right, so fix the pod, not the workload",
                         "resize", "rank", n, "--cpu", p["cpu_template"])])

    p = slow_compute(b, changes)
    if p:
        return p

    dep = slow_dependency(b.get("dependencies", []))
    if dep:
        own, seen = dep.get("own_p50_ms"), dep.get("p50_ms")
        path = own is not None and seen is not None and own * 10 < seen
        cause = "bad-network-path" if path else "slow-node"
        summary = (f"{dep['name']} reads at {seen} ms as its readers {dep.get('readers')} see them"
                   f" (server's own p50 {own} ms)")
        if changes is None:
            return plan(True, [dep["name"]], cause,
                        summary + "; no change log to say what changed: escalate to the storage team", [])
        ours = [c for c in changes if c.get("where") == dep["name"] and c.get("who") == "operator"]
        # A fix is not a suspect: a change that removed something (after 0 / none) is not the cause.
        added = [c for c in ours if str(c.get("after", "")).split()[0] not in ("0", "none", "")]
        if added and "delay" in added[-1].get("what", ""):
            c = added[-1]
            return plan(True, [dep["name"]], cause,
                        summary + f"; {c['what']} {c['before']} -> {c['after']} at {c['time']}",
                        [cmd("revert the delay added on the path to this server (the lab's revert of it)",
                             "fault", "clear", "slow-storage")])
        return plan(True, [dep["name"]], cause, summary + "; no change on it explains it: escalate", [])
    return None


def metrics_only(b, t):
    ranks = t.get("ranks", [])
    up = [r for r in ranks if r.get("up")]
    waiting = [r for r in ranks if r.get("waiting_for_peers")]
    if waiting:
        return plan(True, ["ranks"], "over-scaled",
                    f"{len(waiting)} ranks wait for peers that do not come",
                    [cmd("the ranks wait for a peer that never joins: run as many ranks as are up",
                         "scale", "ranks", str(len(up)))])
    throttled = [r for r in ranks if (r.get("throttled") or 0) > 0.3]
    if throttled:
        r = max(throttled, key=lambda r: r["throttled"])
        limit = max((x.get("cpu_limit_cores") or 0) for x in ranks)
        return plan(True, [r["name"]], "starved-client", f"{r['name']} throttled {r['throttled']:.0%}",
                    [cmd("re-apply the workload's CPU limit", "apply", "--cpu", millicores(limit))])
    readers = [r for r in ranks if r.get("read") is not None]
    if readers:
        r = max(readers, key=lambda r: r["read"])
        if r["read"] > 0.5:
            n = r["name"].split("-")[-1]
            return plan(True, [r["name"]], "slow-node", f"{r['name']} spends {r['read']:.0%} of its time reading",
                        [cmd("the rank reads slowly: replace it", "restart", "rank", n)])
    return None


def decide(b):
    t = b.get("training", {})
    pct = t.get("pct_of_baseline")
    anomaly = bool(b.get("signals_firing")) or (pct is not None and pct < 80)
    if not anomaly:
        return plan(False, [], "none", "no golden signal firing, training at its normal", [])
    wiring = b.get("wiring")
    p = hung_rank(b)
    if p:
        return p
    p = with_wiring(b, t, wiring, b.get("changes")) if wiring is not None else metrics_only(b, t)
    return p or plan(True, [], "unknown", "signals fire but no rule explains them", [])


def main():
    path = os.environ.get("LAB_INCIDENT_BUNDLE")
    if not path:
        print("LAB_INCIDENT_BUNDLE is not set: the lab gives the bundle's path there", file=sys.stderr)
        return 2
    with open(path, encoding="utf-8") as f:
        bundle = json.load(f)
    json.dump(decide(bundle), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
