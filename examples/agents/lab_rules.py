"""The reference agents' rules: what an on-call engineer concludes from the lab's evidence, in order.

Shared by the plan agent (reference.py, which reads one frozen bundle) and the MCP agent
(mcp_reference.py, which investigates through the lab's tools). Standard library only, no model: copy
and change them. `decide(view, look)` takes a bundle-shaped `view` (whatever the evidence level leaves
of it) and an optional `look(rank)` that lists what runs in a rank's CPU limit (the MCP agent's
`processes` tool), and returns a conclusion and the commands to run, each with a reason.

The rules follow the seed story's lessons and its incident library:
  * a rank that holds the job (hung) is restarted, never its siblings that wait for it;
  * a rank that crashes in a loop gets the setting that crashes it put back, not a restart;
  * more ranks than GPUs: the replicas AND the configured world size back to what fits; a rollout
    held by a Pending rank is rolled back (world size first, then the replicas);
  * a database standby that cannot be scheduled: fix its template AND delete the pod stuck on the old
    version by name;
  * a pod whose live CPU limit differs from its template was changed in place: fix that pod;
  * ranks that compute slowly with their limits as in the template: something runs beside them;
  * "storage is slow" has four causes that look the same from the job (Figure 4): a competing job
    (stop it at its source), a slow node (its own latency, measured directly, is high: move the data
    off it), a bad network path (its own latency is flat: revert what changed on the path), a starved
    client (see the drift rule);
  * a fix is not a suspect: a change an earlier remediation made is never the newest cause;
  * what an earlier attempt tried and saw fail is not tried again.
Without the evidence a rule needs it does what the seed's first analyses did with what they had.
"""

import re

CAUSES = {
    "bad-network-path", "slow-node", "competing-job", "starved-client", "over-scaled", "stuck-rollout",
    "crash-loop", "hung-rank", "cpu-neighbour", "unschedulable-replica", "none", "unknown",
}


def num(name):
    """The number at the end of a component's name: rank-3 -> 3."""
    m = re.search(r"(\d+)$", name or "")
    return m.group(1) if m else None


def conclusion(anomaly, blame, cause, summary, commands):
    assert cause in CAUSES, cause
    return {"anomaly": anomaly, "blame": blame, "cause": cause, "summary": summary, "commands": commands}


def cmd(reason, *argv):
    return {"argv": ["lab", *argv], "reason": reason}


def firing(view, rule):
    return [a for a in view.get("signals_firing") or [] if a.get("rule") == rule]


def pods_of(view):
    """Every pod the view shows: the wiring's pods (with resources), else pod health alone."""
    wiring = view.get("wiring") or {}
    return wiring.get("pods") or view.get("pods") or []


def tried_before(view):
    """Every command line an earlier attempt ran."""
    out = set()
    for a in view.get("previous_attempts") or []:
        for c in a.get("commands") or []:
            out.add(c if isinstance(c, str) else " ".join(c))
    return out


def hung_rank(view):
    hung = firing(view, "LabRankHung")
    if not hung:
        return None
    a = hung[0]
    return conclusion(True, [a["target"]], "hung-rank", a.get("summary", f"{a['target']} makes no progress"),
                      [cmd("it holds the job while its siblings wait for it: restart that rank, not the job",
                           "restart", "rank", num(a["target"]))])


def crash_loop(view):
    crashing = firing(view, "LabRankCrashLooping")
    restarting = [p for p in pods_of(view) if p.get("role") == "rank" and (p.get("restarts") or 0) > 0]
    target = crashing[0].get("target") if crashing else None
    if target is None:
        return None
    n = num(target)
    changes = view.get("changes")
    if changes is None:
        return conclusion(True, [target], "crash-loop",
                          f"{target} crashes and restarts; without the change log nothing says why: list its "
                          "settings and escalate (a restart keeps what crashes it)",
                          [cmd("what this rank runs with", "rank", "env", n)])
    # The newest setting added on that rank (not one an earlier fix removed).
    set_here = [c for c in changes if c.get("where") == target and re.fullmatch(r"[A-Z][A-Z0-9_]*", c.get("what", ""))
                and str(c.get("after")) not in ("unset", "none", "")]
    if set_here:
        c = set_here[-1]
        return conclusion(True, [target], "crash-loop",
                          f"{target} crashes in a loop since {c['what']} went {c['before']} -> {c['after']} "
                          f"({len(restarting)} rank(s) restarting)",
                          [cmd(f"put back the setting that crashes it ({c['what']} was {c['before']})",
                               "rank", "env", n, "--unset", c["what"])])
    return conclusion(True, [target], "crash-loop", f"{target} crashes and no change on it explains it: escalate",
                      [cmd("what this rank runs with", "rank", "env", n)])


def placement(view):
    """Ranks asked for beyond the GPUs, a rank Pending, or ranks waiting for peers that never come."""
    t = view.get("training") or {}
    wiring = view.get("wiring") or {}
    ranks = [p for p in pods_of(view) if p.get("role") == "rank"]
    pending = [p for p in ranks if p.get("phase") == "Pending"]
    running = [p for p in ranks if p.get("phase") == "Running"]
    gpus = wiring.get("gpus_capacity") or 0
    desired = t.get("ranks_desired") or len(ranks)
    configured = t.get("world_size_configured")
    reported = t.get("world_size_reported")
    waiting = firing(view, "LabRanksWaitingForPeers") or [r for r in t.get("ranks") or [] if r.get("waiting_for_peers")]
    if gpus and configured is not None and (desired > gpus or configured > gpus or pending):
        fit = min(gpus, desired)
        pct = t.get("pct_of_baseline")
        training = pct is not None and pct > 50 and not waiting
        if training and reported is not None and reported <= fit < configured:
            # A rollout held by the rank it cannot place; the running ranks still train on the old config.
            return conclusion(True, ["ranks", "job config"], "stuck-rollout",
                              f"a rollout to {desired} ranks expecting {configured} waits on {len(pending)} Pending "
                              f"rank(s) ({gpus} GPUs); the running ranks train on world size {reported}",
                              [cmd(f"roll the configuration back to what fits, first: {configured} peers cannot run",
                                   "config", "world-size", str(fit)),
                               cmd(f"then the replicas: only {fit} can be placed", "scale", "ranks", str(fit))])
        blame, cmds = [], []
        if desired > fit:
            blame.append("ranks")
            cmds.append(cmd(f"{desired} ranks asked for, {gpus} GPUs: the extra rank can never be placed",
                            "scale", "ranks", str(fit)))
        if configured > fit:
            blame.append("job config")
            cmds.append(cmd(f"the ranks expect {configured} peers; only {fit} can run",
                            "config", "world-size", str(fit)))
        return conclusion(True, blame, "over-scaled",
                          f"{len(pending)} rank(s) Pending on {gpus} GPUs; the job expects {configured}", cmds)
    if wiring:
        return None
    # Without the wiring: what pod health and the ranks' own metrics show.
    unplaceable = [p for p in pending if "insufficient" in f"{p.get('reason')} {p.get('message')}".lower()
                   or p.get("reason") == "Unschedulable"]
    if unplaceable:
        fit = len(running)
        return conclusion(True, ["ranks"], "over-scaled",
                          f"{', '.join(p['name'] for p in unplaceable)} cannot be placed; {fit} ranks run",
                          [cmd("a rank that can never be placed: run as many ranks as fit", "scale", "ranks", str(fit))])
    up = [r for r in t.get("ranks") or [] if r.get("up")]
    if waiting and reported and up and reported > len(up):
        return conclusion(True, ["job config"], "over-scaled",
                          f"{len(up)} ranks run and wait for world size {reported}",
                          [cmd(f"the ranks wait for {reported - len(up)} peer(s) that do not exist: expect {len(up)}",
                               "config", "world-size", str(len(up)))])
    return None


def database(view):
    db = view.get("database") or {}
    pods = db.get("pods") or view.get("database_pods") or []
    stuck = [p for p in pods if p.get("phase") == "Pending"]
    stalled = firing(view, "LabCommitsStalled")
    if not stuck and not stalled:
        return None
    if not stuck:
        return conclusion(True, ["lab-writer"], "unknown", "commits stall and every database pod runs: escalate", [])
    p = stuck[0]
    template = db.get("template")
    cmds = []
    if template and template.get("node_selector") not in (None, "", "none"):
        cmds.append(cmd(f"the standby's template asks for {template['node_selector']}, which no node has",
                        "db", "template", "--node-selector", ""))
    cmds.append(cmd(f"{p['name']} exists on the old version of its template: a template fix does not change it, "
                    "delete it by name so it is made again", "db", "delete-pod", p["name"]))
    return conclusion(True, [p["name"]], "unschedulable-replica",
                      f"{p['name']} Pending ({p.get('reason') or 'unscheduled'}) while the primary commits to it "
                      "synchronously: every commit waits", cmds)


def drift(view):
    ranks = [p for p in pods_of(view) if p.get("role") == "rank"]
    drifted = [p for p in ranks if p.get("differs_from_template") and p.get("cpu_template")]
    if len(drifted) != 1:
        return None
    p = drifted[0]
    return conclusion(True, [p["name"]], "starved-client",
                      f"{p['name']} runs with {p.get('cpu_live')} while its template says {p['cpu_template']}",
                      [cmd("the limit was changed in place; the template is right, so fix the pod, not the workload",
                           "resize", "rank", num(p["name"]), "--cpu", p["cpu_template"])])


def slow_compute(view, look):
    slow = sorted({a["target"] for a in firing(view, "LabRankComputeSlow")})
    if not slow:
        return None
    summary = f"{', '.join(slow)} compute far slower than their siblings with their limits as in the template"
    cmds = []
    found = []
    for name in slow:
        n = num(name)
        if look is not None:
            # What runs there now is the evidence; a rank with nothing beside it is not this cause.
            pids = [str(p["pid"]) for p in look(int(n)) if not p.get("rank_itself")]
            if not pids:
                continue
        else:
            # The change log's word, when the newest change of what runs beside the rank added something.
            beside = [c for c in view.get("changes") or [] if c.get("where") == name and c.get("what") == "process beside it"]
            last = str(beside[-1].get("after", "")) if beside else ""
            pid = last.split("pid")[-1].split()[0] if "pid" in last else None
            pids = [pid] if pid and pid.isdigit() else []
        found.append(name)
        if pids:
            cmds += [cmd(f"pid {pid} runs in {name}'s CPU limit beside the rank: stop it", "rank", "stop", n, "--pid", pid)
                     for pid in pids]
        else:
            cmds.append(cmd(f"list what runs in {name}'s CPU limit", "rank", "procs", n))
    if not found:
        return None
    if any(c["argv"][2] == "procs" for c in cmds):
        summary += "; nothing says what runs beside them: escalate with the list"
    return conclusion(True, found, "cpu-neighbour", summary, cmds)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def in_ms(d, seconds, *ms_names):
    """A latency of a bundle's row in ms: bundles since v3 carry seconds (the snapshot's own fields, as in
    `lab status --json`); recorded v2 bundles carried ms under other names."""
    if d.get(seconds) is not None:
        return d[seconds] * 1000.0
    for k in ms_names:
        if d.get(k) is not None:
            return d[k]
    return None


def own_latency(d):
    """The server's own latency as a client measures it, straight, bypassing the ranks' path, in ms."""
    return in_ms(d, "own_probe", "own_latency_ms", "own_probe_ms")


def seen_latency(d):
    """A server's read p50 as its readers see it, in ms."""
    return in_ms(d, "client_p50", "p50_ms")


def stands_out(d):
    """Whether the lab marks the server's latency as standing out from its siblings'."""
    return bool(d.get("outlier") or d.get("stands_out"))


def slow_dependency(view):
    """The one storage server that stands out: by the lab's mark, its latency alert, or its own latency."""
    deps = view.get("dependencies") or []
    if not deps:
        return None
    marked = [d for d in deps if stands_out(d)]
    if len(marked) == 1:
        return marked[0]
    alerted = {a["target"] for a in firing(view, "LabStorageReadLatencyHigh")}
    named = [d for d in deps if d["name"] in alerted]
    if len(named) == 1:
        return named[0]
    own = [(own_latency(d), d) for d in deps if own_latency(d) is not None]
    if len(own) >= 2:
        rest = median([o for o, _ in own])
        worst = max(own, key=lambda x: x[0])
        others = [o for o, d in own if d is not worst[1]]
        if worst[0] > 50 and worst[0] > 4 * max(median(others), 1.0):
            return worst[1]
        del rest
    return None


def storage(view):
    dep = slow_dependency(view)
    if dep is None:
        return None
    name = dep["name"]
    seen, own = seen_latency(dep), own_latency(dep)
    siblings = [own_latency(d) for d in view.get("dependencies") or [] if d["name"] != name and own_latency(d) is not None]
    clients = dep.get("clients") or []
    jobs = [c for c in clients if c.get("kind") == "job"]
    rank_reads = sum(c.get("reads_per_s") or 0 for c in clients if c.get("kind") == "rank")
    ms = lambda v: "?" if v is None else f"{v:.1f}"  # noqa: E731
    summary = (f"{name} reads at {ms(seen)} ms as its readers {dep.get('readers')} see them; its own latency "
               f"measured directly {ms(own)} ms (siblings {', '.join(ms(v) for v in siblings)} ms)")
    if jobs and max(j.get("reads_per_s") or 0 for j in jobs) > max(2 * rank_reads, 20):
        j = max(jobs, key=lambda c: c.get("reads_per_s") or 0)
        return conclusion(True, [name, j["client"]], "competing-job",
                          summary + f"; {j['client']} (another team's job) reads {j['reads_per_s']:.0f}/s from it",
                          [cmd("stop the neighbour at its source: the server is busy with its reads, not broken",
                               "job", "stop", j["client"])])
    sib = median(siblings) if siblings else None
    if own is not None and sib is not None and own > 20 and own > 4 * max(sib, 1.0):
        return conclusion(True, [name], "slow-node", summary + "; the node itself is slow",
                          [cmd("the server itself answers slowly to anyone: move the job's data off it",
                               "storage", "drain", num(name))])
    changes = view.get("changes")
    if changes is None:
        return conclusion(True, [name], "bad-network-path",
                          summary + "; the server is fast, its path is not; no change log to say what changed: "
                          "escalate to the storage team", [])
    ours = [c for c in changes if c.get("where") == name and c.get("who") != "remediation" and not c.get("remediation")]
    # A fix is not a suspect: a change that removed something is not the cause.
    added = [c for c in ours if str(c.get("after", "")).split()[0] not in ("0", "0ms", "none", "unset", "")]
    if added and "delay" in added[-1].get("what", ""):
        c = added[-1]
        return conclusion(True, [name], "bad-network-path",
                          summary + f"; {c['what']} {c['before']} -> {c['after']} at {c['time']}",
                          [cmd("revert the delay added on the path to this server (the lab's revert of it)",
                               "fault", "clear", "slow-storage")])
    return conclusion(True, [name], "bad-network-path", summary + "; no change on its path explains it: escalate", [])


def metrics_only(view):
    """What the seed's first analyses did with metrics alone: act on the ranks the metrics name."""
    t = view.get("training") or {}
    ranks = t.get("ranks") or []
    throttled = [r for r in ranks if (r.get("throttled") or 0) > 0.3]
    if throttled:
        r = max(throttled, key=lambda r: r["throttled"])
        limit = max((x.get("cpu_limit_cores") or 0) for x in ranks)
        return conclusion(True, [r["name"]], "starved-client", f"{r['name']} throttled {r['throttled']:.0%}",
                          [cmd("re-apply the workload's CPU limit", "apply", "--cpu", f"{round(limit * 1000)}m")])
    readers = [r for r in ranks if r.get("read") is not None]
    if readers:
        r = max(readers, key=lambda r: r["read"])
        if r["read"] > 0.5:
            return conclusion(True, [r["name"]], "slow-node", f"{r['name']} spends {r['read']:.0%} of its time reading",
                              [cmd("the rank reads slowly: replace it", "restart", "rank", num(r["name"]))])
    return None


def anomalous(view):
    t = view.get("training") or {}
    pct = t.get("pct_of_baseline")
    pods = pods_of(view) + (view.get("database_pods") or [])
    return (bool(view.get("signals_firing")) or (pct is not None and pct < 80)
            or any(p.get("phase") not in ("Running", None) or p.get("ready") is False for p in pods))


def trains(view):
    """Whether the job still takes steps a checkpoint can save (not stalled, hung or crashing)."""
    t = view.get("training") or {}
    pct = t.get("pct_of_baseline")
    blocked = firing(view, "LabRankHung") or firing(view, "LabRanksWaitingForPeers") or firing(view, "LabRankCrashLooping")
    return pct is not None and pct >= 5 and not blocked


def decide(view, look=None):
    """The conclusion and the commands for `view`; `look(rank)` lists what runs beside a rank, if it can."""
    if not anomalous(view):
        return conclusion(False, [], "none", "no golden signal firing, training at its normal", [])
    for rule in (hung_rank, crash_loop, placement, database, drift):
        c = rule(view)
        if c:
            break
    else:
        # A storage server that stands out is the more specific evidence: a machine under load can make
        # ranks compute slowly too, and a slow reader makes its siblings wait.
        c = storage(view) or slow_compute(view, look) or (None if view.get("wiring") else metrics_only(view))
    if c is None:
        return conclusion(True, [], "unknown", "signals fire but no rule explains them", [])
    done = tried_before(view)
    fresh = [x for x in c["commands"] if " ".join(x["argv"]) not in done]
    if len(fresh) < len(c["commands"]):
        c["summary"] += f"; {len(c['commands']) - len(fresh)} step(s) already tried and not enough"
        c["commands"] = fresh
    return c
