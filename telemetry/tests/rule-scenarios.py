#!/usr/bin/env python3
# Writes manifests/rules/golden-signals.test.yaml: the golden-signal scenarios as promtool unit tests.
# Edit the scenarios here, then regenerate (needs PyYAML):
#   python3 telemetry/tests/rule-scenarios.py manifests/rules/golden-signals.yaml > manifests/rules/golden-signals.test.yaml
# and run `promtool test rules` and `cargo test -p lab-telemetry --test agreement`.
import yaml, re, sys
T = 120
rules = yaml.safe_load(open(sys.argv[1]))
alerts = {r['alert']: r for g in rules['groups'] for r in g['rules'] if 'alert' in r}

def fmt(x):
    s = f"{x:.6f}".rstrip('0').rstrip('.')
    return s if s not in ('-0', '') else '0'

def counter(segs):
    """segs: list of (t_end, rate) or (t_end, 'reset', rate) or (t_end,'stale'); values for t=0..T."""
    out = []; v = 0.0; t = -1
    for seg in segs:
        end = seg[0]
        if seg[1] == 'stale':
            out += ['stale'] * (end - t); t = end; continue
        if seg[1] == 'reset':
            v = 0.0; rate = seg[2]; start = v
        else:
            rate = seg[1]; start = 0.0 if t < 0 else v + rate
        n = end - t - 1
        out.append(f"{fmt(start)}+{fmt(rate)}x{n}" if rate >= 0 else f"{fmt(start)}-{fmt(-rate)}x{n}")
        v = start + rate * n; t = end
    assert t == T, (segs, t)
    return ' '.join(out)

def gauge(segs):
    out = []; t = -1
    for end, val in segs:
        if val == 'stale':
            out += ['stale'] * (end - t)
        else:
            out.append(f"{fmt(val)}x{end - t - 1}")
        t = end
    assert t == T
    return ' '.join(out)

LE = ['0.005', '0.05', '0.5', '+Inf']
def bucket_index(latency):
    for i, le in enumerate(LE):
        if le == '+Inf' or latency <= float(le): return i

def reads(segs):
    """segs: (t_end, reads_per_s, latency) -> {le: counter segs}, count segs"""
    per_le = {le: [] for le in LE}; count = []
    for seg in segs:
        if seg[1] == 'stale':
            for le in LE: per_le[le].append(seg)
            count.append(seg); continue
        reset = seg[1] == 'reset'
        end, rps, lat = (seg[0], seg[2], seg[3]) if reset else seg
        bi = bucket_index(lat)
        for i, le in enumerate(LE):
            r = rps if i >= bi else 0
            per_le[le].append((end, 'reset', r) if reset else (end, r))
        count.append((end, 'reset', rps) if reset else (end, rps))
    return per_le, count

def server_of(rank): return f"storage-{rank % 3}"

def per_step(seg, batch=10):
    if seg[1] == 'stale': return seg
    if seg[1] == 'reset': return (seg[0], 'reset', seg[2] / batch)
    return (seg[0], seg[1] / batch)

def ramp(segs):
    """A gauge that counts seconds: segs (t_end, None | start_t) -> promtool values; None is 0, start_t
    makes it t - start_t from the segment's first second."""
    out = []; t = -1
    for end, start in segs:
        n = end - t - 1
        if start is None:
            out.append(f"0x{n}")
        else:
            out.append(f"{fmt(t + 1 - start)}+1x{n}")
        t = end
    assert t == T
    return ' '.join(out)

class Scenario:
    def __init__(self): self.series = []
    def add(self, name, labels, values):
        lab = ','.join(f'{k}="{v}"' for k, v in labels.items())
        self.series.append({'series': f'{name}{{{lab}}}', 'values': values})
    def rank(self, r, samples, phases, read, cpu, rendezvous, world=None, coll_errors=None, read_errors=None,
             steps=None, coll_wait=None, read_waiting=None, read_wait=None):
        inst = {'instance': f'rank-{r}'}
        self.add('lab_samples_total', inst, counter(samples))
        # A batch of 10 samples per step unless told otherwise.
        self.add('lab_steps_total', inst, counter(steps or [per_step(seg) for seg in samples]))
        self.add('lab_collective_wait_seconds', inst, coll_wait or gauge([(T, 0)]))
        for ph, segs in phases.items():
            self.add('lab_phase_seconds_total', {**inst, 'phase': ph}, counter(segs))
        per_le, count = reads(read)
        for le in LE:
            self.add('lab_storage_read_duration_seconds_bucket', {**inst, 'le': le, 'server': server_of(r)}, counter(per_le[le]))
        self.add('lab_storage_read_duration_seconds_count', {**inst, 'server': server_of(r)}, counter(count))
        if read_waiting is not None:
            self.add('lab_storage_read_waiting_seconds', {**inst, 'server': server_of(r)}, read_waiting)
        # Seconds waited on reads, counted as they pass: the read phase unless told otherwise.
        self.add('lab_storage_read_wait_seconds_total', {**inst, 'server': server_of(r)}, counter(read_wait or phases['read']))
        periods, throttled, secs = cpu
        self.add('lab_cpu_periods_total', inst, counter(periods))
        self.add('lab_cpu_throttled_periods_total', inst, counter(throttled))
        self.add('lab_cpu_throttled_seconds_total', inst, counter(secs))
        self.add('lab_rendezvous_waiting', inst, gauge(rendezvous))
        self.add('lab_world_size', inst, gauge(world or [(T, 4)]))
        self.add('lab_collective_errors_total', {**inst, 'kind': 'timeout'}, counter(coll_errors or [(T, 0)]))
        self.add('lab_storage_read_errors_total', {**inst, 'kind': 'timeout', 'server': server_of(r)}, counter(read_errors or [(T, 0)]))
    def seaweed(self, s, segs):
        per_le, count = reads(segs)
        inst = {'instance': f'storage-{s}', 'type': 'GET'}
        for le in LE:
            self.add('SeaweedFS_volumeServer_request_seconds_bucket', {**inst, 'le': le}, counter(per_le[le]))

HEALTHY_PHASES = {'read': 0.1, 'compute': 0.6, 'wait': 0.2}
def healthy_rank(sc, r, **over):
    args = dict(
        samples=[(T, 100)],
        phases={p: [(T, v)] for p, v in HEALTHY_PHASES.items()},
        read=[(T, 10, 0.003)],
        cpu=([(T, 10)], [(T, 6)], [(T, 0.3)]),
        rendezvous=[(T, 0)],
    )
    args.update(over)
    sc.rank(r, **args)

def alert_test(t, name, exp):
    out = []
    for labels in exp:
        a = alerts[name]
        lab = {**a.get('labels', {}), **labels}
        ann = {}
        for k, v in a.get('annotations', {}).items():
            v = re.sub(r'\{\{ \$labels\.(\w+) \}\}', lambda m: labels[m.group(1)], v)
            ann[k] = v.strip()
        out.append({'exp_labels': lab, 'exp_annotations': ann})
    return {'eval_time': f'{t}s', 'alertname': name, 'exp_alerts': out}

ALL = list(alerts)
def edges(firsts):
    # The second an alert first fires, and the second before: both evaluators must agree on the edge.
    out = []
    for t, name, labels in firsts:
        out += [alert_test(t - 1, name, []), alert_test(t, name, [labels])]
    return out
def nothing(t, except_=()):
    return [alert_test(t, n, []) for n in ALL if n not in except_]

groups = []

# A: healthy
sc = Scenario()
for r in range(4): healthy_rank(sc, r)
sc.seaweed(1, [(T, 10, 0.0003)])
groups.append(('healthy job: the baseline is learned and nothing fires, though every rank is throttled in 60% of its CFS periods',
    sc, nothing(100), [
    {'expr': 'lab:job_samples_per_second:baseline > bool 380', 'eval_time': '100s', 'exp_samples': [{'labels': '{}', 'value': 1}]},
    {'expr': 'lab:job_samples_per_second', 'eval_time': '100s', 'exp_samples': [{'labels': 'lab:job_samples_per_second', 'value': 400}]},
    {'expr': 'lab:storage_read_p50_seconds{server="storage-1"}', 'eval_time': '100s', 'exp_samples': [{'labels': 'lab:storage_read_p50_seconds{server="storage-1"}', 'value': 0.0025}]},
    ]))

# B: slow storage-1 from 60 s
sc = Scenario()
for r in range(4):
    slow = r == 1
    healthy_rank(sc, r,
        samples=[(60, 100), (T, 7)],
        phases={'read': [(60, 0.1), (T, 0.9 if slow else 0.01)], 'compute': [(60, 0.6), (T, 0.05)], 'wait': [(60, 0.2), (T, 0.05 if slow else 0.94)]},
        read=[(60, 10, 0.003), (T, 2, 0.4)] if slow else [(T, 10, 0.003)])
sc.seaweed(1, [(T, 10, 0.0003)])
groups.append(('slow-storage: storage-1 answers 400 ms late from 60 s; latency fires for storage-1 only, throughput and collective wait for the job',
    sc,
    nothing(58) + edges([(64, 'LabRanksWaitingAtCollective', {}), (64, 'LabTrainingThroughputLow', {}),
                         (63, 'LabStorageReadLatencyHigh', {'server': 'storage-1'})]) + [
        alert_test(80, 'LabStorageReadLatencyHigh', [{'server': 'storage-1'}]),
        alert_test(80, 'LabTrainingThroughputLow', [{}]),
        alert_test(80, 'LabRanksWaitingAtCollective', [{}]),
        alert_test(80, 'LabRankCpuThrottled', []),
        alert_test(80, 'LabRanksWaitingForPeers', []),
        alert_test(80, 'LabStorageReadErrors', []),
    ], [
    {'expr': 'lab:storage_server_get_p50_seconds{instance="storage-1"} < bool 0.005', 'eval_time': '80s', 'exp_samples': [{'labels': '{instance="storage-1"}', 'value': 1}]},
    ]))

# B2: slow-disk on storage-1 from 60 s: each read of it takes 2.5 s, so its reader ends under one read a
# second, too few in the window for a p50; the read in flight shows it while it waits (its age at each
# scrape: a sawtooth). Before, a read is seen in flight now and then for a few milliseconds.
def sawtooth(period, start, end):
    return ' '.join(fmt(((t - start) % period)) for t in range(start, end + 1))
sc = Scenario()
for r in range(4):
    slow = r == 1
    healthy_rank(sc, r,
        samples=[(60, 100), (T, 4)],
        phases={'read': [(60, 0.1), (T, 0.98 if slow else 0.01)], 'compute': [(60, 0.6), (T, 0.01)], 'wait': [(60, 0.2), (T, 0.01 if slow else 0.98)]},
        read=[(60, 10, 0.003), (T, 0.4, 2.5)] if slow else [(T, 10, 0.003)],
        read_waiting=(f'0.002x60 {sawtooth(2.5, 60, T - 1)}' if slow else None))
groups.append(('slow-disk: storage-1 takes 2.5 s per read from 60 s, too few reads for a p50; its reads in flight fire latency for storage-1',
    sc,
    nothing(58) + edges([(63, 'LabStorageReadLatencyHigh', {'server': 'storage-1'})]) + [
        alert_test(80, 'LabStorageReadLatencyHigh', [{'server': 'storage-1'}]),
        alert_test(100, 'LabStorageReadLatencyHigh', [{'server': 'storage-1'}]),
        alert_test(80, 'LabTrainingThroughputLow', [{}]),
        alert_test(80, 'LabRanksWaitingAtCollective', [{}]),
        alert_test(80, 'LabRankCpuThrottled', []),
        alert_test(80, 'LabStorageReadErrors', []),
    ], [
    {'expr': 'lab:storage_read_waiting_seconds:unstarved{server="storage-1"} > bool 1', 'eval_time': '80s', 'exp_samples': [{'labels': '{server="storage-1"}', 'value': 1}]},
    ]))

# B3: slow-disk's first seconds on storage-1 from 60 s: each read takes 0.9 s, so its reader ends under
# three reads in the window (too few for a p50) and no read waits 1 s (the in-flight path stays quiet); but
# the reader spends 95 % of its time waiting on storage-1, which the share of waiting shows.
sc = Scenario()
for r in range(4):
    slow = r == 1
    healthy_rank(sc, r,
        samples=[(60, 100), (T, 11)],
        phases={'read': [(60, 0.1), (T, 0.95 if slow else 0.01)], 'compute': [(60, 0.6), (T, 0.04)], 'wait': [(60, 0.2), (T, 0.01 if slow else 0.95)]},
        read=[(60, 10, 0.003), (T, 0.9, 0.9)] if slow else [(T, 10, 0.003)],
        read_waiting=('0.002x60 ' + ' '.join('0.9' if t % 2 else '0.45' for t in range(61, T + 1))) if slow else None)
groups.append(('slow-disk\'s first seconds: storage-1 takes 0.9 s per read from 60 s, too few for a p50 and none waiting 1 s; its reader waiting 95 % of the time fires latency for storage-1',
    sc,
    nothing(58) + edges([(63, 'LabStorageReadLatencyHigh', {'server': 'storage-1'})]) + [
        alert_test(80, 'LabStorageReadLatencyHigh', [{'server': 'storage-1'}]),
    ], [
    {'expr': 'lab:storage_read_wait_share:unstarved{server="storage-1"} > bool 0.75', 'eval_time': '80s', 'exp_samples': [{'labels': '{server="storage-1"}', 'value': 1}]},
    {'expr': 'lab:storage_read_waiting_seconds:unstarved{server="storage-1"} > bool 1', 'eval_time': '80s', 'exp_samples': [{'labels': '{server="storage-1"}', 'value': 0}]},
    ]))

# B4: storage-1 stops answering rank-1's read at 60 s (a read that waits on and on): rank-1's steps stand
# still and its siblings wait for it at the all-reduce, as under rank-hang; but rank-1 spends the window
# waiting on its read, so the server is named, not the rank.
sc = Scenario()
for r in range(4):
    slow = r == 1
    flat = lambda v: [(60, v), (T, 0)]
    healthy_rank(sc, r,
        samples=flat(100),
        phases={p: flat(v) for p, v in HEALTHY_PHASES.items()},
        read=[(60, 10, 0.003), (T, 0, 0.003)],
        coll_wait=gauge([(T, 0)]) if slow else ramp([(60, None), (T, 60)]),
        read_waiting=ramp([(60, None), (T, 60)]) if slow else None,
        read_wait=[(60, 0.1), (T, 1.0)] if slow else None)
groups.append(('a read of storage-1 that waits on from 60 s holds rank-1 and, through it, the job: latency names storage-1, and rank-1 is not called hung',
    sc,
    nothing(58) + [
        alert_test(66, 'LabStorageReadLatencyHigh', [{'server': 'storage-1'}]),
        alert_test(90, 'LabStorageReadLatencyHigh', [{'server': 'storage-1'}]),
        alert_test(90, 'LabRankHung', []),
    ], []))

# B5: slow-disk on storage-0 at 10m from 60 s, read by rank-0 and rank-3. The server's CPU budget is
# spent early in each period, so its readers' reads end in milliseconds or after a wait of up to a period
# (0.4 s): its p50 stays under the floor with plenty of reads, no read waits 1 s, and the readers wait on
# it 95 % of two seconds in five and 45 % of the other three. Their 3 s share swings between 0.45 and 0.78
# (the 0.75 way in comes and goes); over 10 s it holds at 0.65, and so does the alert, from the moment
# the 10 s window holds the fault, while the job trains at a fifth of normal.
def held(t):
    return 0.95 if (t - 61) % 5 in (0, 1) else 0.45
sc = Scenario()
for r in range(4):
    reader = r in (0, 3)
    healthy_rank(sc, r,
        samples=[(60, 100), (T, 20)],
        phases={'read': [(60, 0.1), (T, 0.65 if reader else 0.01)], 'compute': [(60, 0.6), (T, 0.2)],
                'wait': [(60, 0.2), (T, 0.1 if reader else 0.75)]},
        read=[(60, 10, 0.003), (T, 4, 0.003)] if reader else [(T, 10, 0.003)],
        read_waiting=('0.002x60 ' + ' '.join('0.4' if held(t) > 0.5 else '0.1' for t in range(61, T + 1))) if reader else None,
        read_wait=[(60, 0.1)] + [(t, held(t)) for t in range(61, T + 1)] if reader else None)
groups.append(('slow-disk at 10m on storage-0, read by two ranks: its reads end quickly between waits of under a second, its 3 s figures swing across their thresholds; its readers\' share over 10 s holds latency for storage-0 to the end',
    sc,
    nothing(58) + edges([(63, 'LabStorageReadLatencyHigh', {'server': 'storage-0'})])
    + [alert_test(t, "LabStorageReadLatencyHigh", [{"server": "storage-0"}]) for t in range(66, T)],
    [
    {'expr': 'lab:storage_read_wait_share:unstarved{server="storage-0"} > bool 0.75', 'eval_time': '70s', 'exp_samples': [{'labels': '{server="storage-0"}', 'value': 0}]},
    {'expr': 'lab:storage_read_p50_seconds:unstarved{server="storage-0"} > bool 0.05', 'eval_time': '70s', 'exp_samples': [{'labels': '{server="storage-0"}', 'value': 0}]},
    {'expr': 'lab:storage_read_wait_share_10s:unstarved{server="storage-0"}', 'eval_time': '100s', 'exp_samples': [{'labels': 'lab:storage_read_wait_share_10s:unstarved{server="storage-0"}', 'value': 0.65}]},
    ]))

# C: throttled rank-1 from 60 s
sc = Scenario()
for r in range(4):
    hot = r == 1
    healthy_rank(sc, r,
        samples=[(60, 100), (T, 40)],
        phases={'read': [(60, 0.1), (T, 0.1 if hot else 0.05)], 'compute': [(60, 0.6), (T, 0.85 if hot else 0.15)], 'wait': [(60, 0.2), (T, 0.0 if hot else 0.8)]},
        read=[(60, 10, 0.003), (T, 3, 0.067)] if hot else [(T, 10, 0.003)],
        cpu=([(T, 10)], [(60, 6), (T, 9.5 if hot else 6)], [(60, 0.3), (T, 0.85 if hot else 0.05)]),
        # A read timed on the starved CPU is seen waiting 1.5 s at times: no witness against its server.
        read_waiting=('0.002x70 ' + ' '.join('1.5' if t % 4 == 0 else '0.2' for t in range(71, T + 1))) if hot else None)
# Its compute per step rises too, so the slow-compute rule names rank-1 as well: the evidence that differs
# from slow-compute is the limit in force against the template (LabRankCpuThrottled).
groups.append(('throttled-rank: rank-1 limited to 150m from 60 s; saturation fires for rank-1 (throttled, and slow compute), and its slow-looking reads (timed on a starved CPU) do not fire latency',
    sc,
    nothing(58) + edges([(63, 'LabRankCpuThrottled', {'instance': 'rank-1'}), (64, 'LabRanksWaitingAtCollective', {}),
                         (65, 'LabTrainingThroughputLow', {})]) + [
        alert_test(80, 'LabRankCpuThrottled', [{'instance': 'rank-1'}]),
        alert_test(80, 'LabRankComputeSlow', [{'instance': 'rank-1'}]),
        alert_test(80, 'LabRankHung', []),
        alert_test(80, 'LabTrainingThroughputLow', [{}]),
        alert_test(80, 'LabRanksWaitingAtCollective', [{}]),
        alert_test(80, 'LabStorageReadLatencyHigh', []),
        alert_test(80, 'LabRanksWaitingForPeers', []),
    ], [
    {'expr': 'lab:storage_read_p50_seconds{server="storage-1"} > bool 0.05', 'eval_time': '80s', 'exp_samples': [{'labels': '{server="storage-1"}', 'value': 1}]},
    ]))

# D: unplaceable rank from 60 s
sc = Scenario()
for r in range(4):
    healthy_rank(sc, r,
        samples=[(60, 100), (62, 'stale'), (T, 'reset', 0)],
        phases={p: [(60, v), (62, 'stale'), (T, 'reset', 0)] for p, v in HEALTHY_PHASES.items()},
        read=[(60, 10, 0.003), (62, 'stale'), (T, 'reset', 0, 0.003)],
        cpu=([(60, 10), (62, 'stale'), (T, 'reset', 0)], [(60, 6), (62, 'stale'), (T, 'reset', 0)], [(60, 0.3), (62, 'stale'), (T, 'reset', 0)]),
        rendezvous=[(60, 0), (62, 'stale'), (T, 1)],
        world=[(60, 4), (62, 'stale'), (T, 5)],
        coll_errors=[(60, 0), (62, 'stale'), (T, 'reset', 0)],
        read_errors=[(60, 0), (62, 'stale'), (T, 'reset', 0)])
groups.append(('unplaceable-rank: world size 5 from 60 s; the four ranks restart and wait at rendezvous; throughput and waiting-for-peers fire, nothing else',
    sc,
    nothing(58) + edges([(66, 'LabRanksWaitingForPeers', {}), (65, 'LabTrainingThroughputLow', {})]) + [
        alert_test(80, 'LabTrainingThroughputLow', [{}]),
        alert_test(80, 'LabRanksWaitingForPeers', [{}]),
        alert_test(80, 'LabStorageReadLatencyHigh', []),
        alert_test(80, 'LabRankCpuThrottled', []),
        alert_test(80, 'LabRanksWaitingAtCollective', []),
        alert_test(80, 'LabCollectiveErrors', []),
    ], []))

# D2: stuck rollout from 60 s: rank-4 Pending (no GPU: unschedulable), the four running ranks train on as
# before. rank-2 is Pending for 10 s at 30 s (a pod being replaced: scheduled, its container starting), no
# alert.
sc = Scenario()
for r in range(4): healthy_rank(sc, r)
ksm = {'instance': 'kube-state-metrics'}
for r in range(4):
    pending = [(29, 0), (39, 1), (T, 0)] if r == 2 else [(T, 0)]
    running = [(29, 1), (39, 0), (T, 1)] if r == 2 else [(T, 1)]
    sc.add('kube_pod_status_phase', {**ksm, 'phase': 'Pending', 'pod': f'rank-{r}'}, gauge(pending))
    sc.add('kube_pod_status_phase', {**ksm, 'phase': 'Running', 'pod': f'rank-{r}'}, gauge(running))
sc.add('kube_pod_status_phase', {**ksm, 'phase': 'Pending', 'pod': 'rank-4'}, gauge([(59, 'stale'), (T, 1)]))
sc.add('kube_pod_status_phase', {**ksm, 'phase': 'Running', 'pod': 'rank-4'}, gauge([(59, 'stale'), (T, 0)]))
sc.add('kube_pod_status_unschedulable', {**ksm, 'pod': 'rank-4'}, gauge([(59, 'stale'), (T, 1)]))
groups.append(('stuck-rollout: rank-4 Pending from 60 s while the four ranks train on; only the pending-rank rule fires, and a 10 s Pending (scheduled) replacement of rank-2 does not',
    sc,
    nothing(45) + edges([(62, 'LabRankPending', {'pod': 'rank-4'})])
    + nothing(100, except_=('LabRankPending',)) + [alert_test(100, 'LabRankPending', [{'pod': 'rank-4'}])],
    []))

# D3: rank-1 crashes in a loop: it exits on an error of its own (code 6) at 40 s and 70 s, its peers fail
# at the all-reduce and exit with the collective error's code (4) a second later; all restart. At 100 s the
# cause is put back: rank-1 is a new pod (no restarts, no last exit), its peers keep theirs. Only rank-1 is
# named, and not after it is replaced.
sc = Scenario()
for r in range(4): healthy_rank(sc, r)
for r in range(4):
    if r == 1:
        restarts = [(39, 0), (69, 1), (99, 2), (T, 0)]
        code = [(39, 'stale'), (99, 6), (T, 'stale')]
    else:
        restarts = [(40, 0), (70, 1), (T, 2)]
        code = [(40, 'stale'), (T, 4)]
    sc.add('kube_pod_container_status_restarts_total', {**ksm, 'pod': f'rank-{r}', 'container': 'rank'}, gauge(restarts))
    sc.add('kube_pod_container_status_last_terminated_exitcode', {**ksm, 'pod': f'rank-{r}', 'container': 'rank'}, gauge(code))
groups.append(('rank-crash: rank-1 exits with code 6 at 40 s and 70 s and its peers with the collective error after it; the crash-loop rule names rank-1 alone, until it is replaced at 100 s',
    sc,
    nothing(30) + edges([(40, 'LabRankCrashLooping', {'pod': 'rank-1'})])
    + nothing(75, except_=('LabRankCrashLooping',)) + [alert_test(75, 'LabRankCrashLooping', [{'pod': 'rank-1'}])]
    + nothing(105),
    []))

# E: errors
sc = Scenario()
for r in range(4):
    kw = {}
    if r == 2: kw['read_errors'] = [(30, 0), (60, 1), (T, 0)]
    if r == 3: kw['coll_errors'] = [(40, 0), (50, 0.5), (T, 0)]
    if r == 0: kw['coll_errors'] = [(20, 'reset', 0), (T, 'reset', 0)]
    healthy_rank(sc, r, **kw)
# rank-0's error counter starts at 3 and resets to 0 when the rank restarts at 21 s: no new errors, no alert.
for s in sc.series:
    if s['series'].startswith('lab_collective_errors_total{instance="rank-0"'):
        s['values'] = '3x20 0x99'
groups.append(('errors: reads from storage-2 fail from 31 to 60 s, rank-3 fails at the collective from 41 to 50 s; a counter reset on rank-0 is no error',
    sc,
    [
        alert_test(25, 'LabStorageReadErrors', []),
        alert_test(25, 'LabCollectiveErrors', []),
        alert_test(30, 'LabStorageReadErrors', []),
        alert_test(31, 'LabStorageReadErrors', [{'server': 'storage-2'}]),
        alert_test(40, 'LabCollectiveErrors', []),
        alert_test(41, 'LabCollectiveErrors', [{'instance': 'rank-3'}]),
        alert_test(45, 'LabCollectiveErrors', [{'instance': 'rank-3'}]),
        alert_test(75, 'LabStorageReadErrors', []),
        alert_test(75, 'LabCollectiveErrors', []),
    ], []))

# C2: throttling that lapses: keep_firing_for bridges a short lapse and ends after a long one
for lapse_end, name, checks in [
    (88, 'a short lapse (81-88 s) of rank-1\'s throttling: the alert keeps firing through it',
     [(87, [{'instance': 'rank-1'}]), (100, [{'instance': 'rank-1'}])]),
    (T, 'a long lapse (from 81 s) of rank-1\'s throttling: the alert fires on for 10 s, then ends',
     [(89, [{'instance': 'rank-1'}]), (92, [{'instance': 'rank-1'}]), (93, [])]),
]:
    sc = Scenario()
    for r in range(4):
        hot = r == 1
        if hot:
            throttled = [(60, 6), (80, 9.5), (lapse_end, 6)] + ([(T, 9.5)] if lapse_end < T else [])
            secs = [(60, 0.3), (80, 0.85), (lapse_end, 0.05)] + ([(T, 0.85)] if lapse_end < T else [])
        else:
            throttled, secs = [(T, 6)], [(60, 0.3), (T, 0.05)]
        healthy_rank(sc, r, cpu=([(T, 10)], throttled, secs))
    groups.append((name, sc, [alert_test(t, 'LabRankCpuThrottled', exp) for t, exp in checks], []))

# H: rank-hang: rank-1's training thread frozen at 60 s. Every rank's counters stop (they move when a step
# ends); the siblings' live wait at the all-reduce grows from 61 s, rank-1's stays 0 (it is not waiting).
sc = Scenario()
for r in range(4):
    flat = lambda v: [(60, v), (T, 0)]
    healthy_rank(sc, r,
        samples=flat(100),
        phases={p: flat(v) for p, v in HEALTHY_PHASES.items()},
        read=[(60, 10, 0.003), (T, 0, 0.003)],
        coll_wait=gauge([(T, 0)]) if r == 1 else ramp([(60, None), (T, 60)]))
groups.append(('rank-hang: rank-1 frozen from 60 s while its metrics answer; the hung-rank rule names rank-1, not the siblings that wait for it',
    sc,
    nothing(58) + edges([(64, 'LabTrainingThroughputLow', {}), (63, 'LabRankHung', {'instance': 'rank-1'})]) + [
        alert_test(90, 'LabRankHung', [{'instance': 'rank-1'}]),
        alert_test(90, 'LabTrainingThroughputLow', [{}]),
        alert_test(90, 'LabRankComputeSlow', []),
        alert_test(90, 'LabRanksWaitingAtCollective', []),
        alert_test(90, 'LabRanksWaitingForPeers', []),
    ], []))

# H2: rank-1 gone at 60 s (its series stale: a crashed process, not a hung one) while the siblings wait:
# nothing answers for rank-1, so no rank is named hung.
sc = Scenario()
for r in range(4):
    if r == 1:
        healthy_rank(sc, r,
            samples=[(60, 100), (T, 'stale')],
            phases={p: [(60, v), (T, 'stale')] for p, v in HEALTHY_PHASES.items()},
            read=[(60, 10, 0.003), (T, 'stale')],
            cpu=([(60, 10), (T, 'stale')], [(60, 6), (T, 'stale')], [(60, 0.3), (T, 'stale')]),
            rendezvous=[(60, 0), (T, 'stale')], world=[(60, 4), (T, 'stale')],
            coll_errors=[(60, 0), (T, 'stale')], read_errors=[(60, 0), (T, 'stale')],
            coll_wait=gauge([(60, 0), (T, 'stale')]))
    else:
        flat = lambda v: [(60, v), (T, 0)]
        healthy_rank(sc, r, samples=flat(100), phases={p: flat(v) for p, v in HEALTHY_PHASES.items()},
            read=[(60, 10, 0.003), (T, 0, 0.003)], coll_wait=ramp([(60, None), (T, 60)]))
groups.append(('a rank whose process is gone is not hung: the siblings wait, but no rank that answers holds them',
    sc, [alert_test(90, 'LabRankHung', [])], []))

# S: slow-compute: a CPU hog beside rank-1 and rank-2 from 60 s. Their compute per step rises from 60 ms
# to 95 ms, the other two (now waiting for them) compute in 45 ms; the job runs at 70 %. Half the ranks
# are slow, yet both are named: the rule compares with the fastest half, not the median.
sc = Scenario()
for r in range(4):
    slow = r in (1, 2)
    healthy_rank(sc, r,
        samples=[(60, 100), (T, 70)],
        phases={'read': [(60, 0.1), (T, 0.07)], 'compute': [(60, 0.6), (T, 0.665 if slow else 0.315)],
                'wait': [(60, 0.2), (T, 0.05 if slow else 0.45)]})
groups.append(('slow-compute: rank-1 and rank-2 compute 2x slower than their siblings from 60 s; the slow-compute rule names both, and nothing else fires',
    sc,
    nothing(58) + [
        alert_test(63, 'LabRankComputeSlow', []),
        alert_test(64, 'LabRankComputeSlow', [{'instance': 'rank-1'}, {'instance': 'rank-2'}]),
        alert_test(90, 'LabRankComputeSlow', [{'instance': 'rank-1'}, {'instance': 'rank-2'}]),
    ] + nothing(90, except_=('LabRankComputeSlow',)), []))

# W: the database writer (`lab up --database`) beside a healthy job: 20 commits/s in 4 ms each.
def writer(sc, commits, waiting):
    inst = {'instance': 'lab-writer'}
    sc.add('lab_writer_commits_total', inst, counter(commits))
    sc.add('lab_writer_commit_waiting_seconds', inst, waiting)
    sc.add('lab_writer_reads_total', inst, counter([(T, 20)]))

sc = Scenario()
for r in range(4): healthy_rank(sc, r)
# A slow commit at 40 s waits 2 s (at the threshold, not over it), then the commits go on.
writer(sc, [(39, 20), (41, 0), (T, 20)], f'0.004x39 1+1x1 0.004x{T - 42}')
groups.append(('a quiet lab with the database: the writer commits 20 times a second, one commit waits 2 s once; nothing fires',
    sc, nothing(100), []))

# W2: sync-replica from 60 s: every commit hangs (the standby it waits for cannot be placed); reads answer,
# the training job trains on.
sc = Scenario()
for r in range(4): healthy_rank(sc, r)
writer(sc, [(59, 20), (T, 0)], ramp([(59, None), (T, 60)]))
groups.append(('sync-replica: the writer\'s commits hang from 60 s while its reads answer; the stalled-commits rule names lab-writer, and nothing else fires',
    sc,
    nothing(58) + edges([(64, 'LabCommitsStalled', {'instance': 'lab-writer'})]) + [
        alert_test(90, 'LabCommitsStalled', [{'instance': 'lab-writer'}]),
    ] + nothing(90, except_=('LabCommitsStalled',)), []))

# F: unstable throughput: no baseline, so no throughput alert
sc = Scenario()
# A square wave over 4 s (20/s for 2 s, then 180/s): its 3 s rate swings between about 73 and 127 every
# second, so no 5 s window of it varies by under 10 %. Checked at 64 s, before the drop to 10/s at 60 s has
# filled a window of its own.
healthy_rank(sc, 0, samples=[(t, 20 if (t // 2) % 2 == 0 else 180) for t in range(1, 60, 2)] + [(60, 180), (T, 10)])
groups.append(('unstable throughput never settles into a baseline, so a later drop fires nothing',
    sc, [alert_test(64, 'LabTrainingThroughputLow', [])], [
    {'expr': 'lab:job_samples_per_second:baseline', 'eval_time': '64s', 'exp_samples': []},
    ]))

# G0: a quiet lab where one read of storage-2 waits 0.9 s once: under the 1 s a read must wait, and its
# reader's share of waiting rises to about half the window; nothing
sc = Scenario()
for r in range(4):
    healthy_rank(sc, r, read_waiting=('0.002x39 0.9 0.002x79' if r == 2 else None),
                 read_wait=([(39, 0.1), (40, 1.0), (T, 0.1)] if r == 2 else None))
groups.append(('a quiet lab where one read waits 0.9 s once: nothing fires',
    sc, nothing(41) + nothing(100), []))

# G: every server equally slow
sc = Scenario()
for r in range(4): healthy_rank(sc, r, read=[(T, 2, 0.4)])
groups.append(('every server equally slow: no one server stands out, so latency fires for none',
    sc, [alert_test(60, 'LabStorageReadLatencyHigh', [])], []))

out = {
    'rule_files': ['golden-signals.yaml'],
    'evaluation_interval': '1s',
    'tests': [],
}
for name, sc, at, et in groups:
    t = {'name': name, 'interval': '1s', 'input_series': sc.series, 'alert_rule_test': at}
    if et: t['promql_expr_test'] = et
    out['tests'].append(t)

class Dumper(yaml.SafeDumper): pass
def str_presenter(d, data):
    return d.represent_scalar('tag:yaml.org,2002:str', data)
Dumper.add_representer(str, str_presenter)
header = """# promtool unit tests for golden-signals.yaml: `promtool test rules golden-signals.test.yaml`.
# Generated by telemetry/tests/rule-scenarios.py: edit the scenarios there.
#
# Each test is one scenario of the lab on synthetic series (4 ranks; rank r reads from storage-(r mod 3)),
# with the alerts expected to fire and not to fire. lab-telemetry's agreement test feeds these same series,
# tick by tick, through the lab's own evaluator and expects the same alerts at the same times; so every
# series covers the whole run, and a series that disappears is written `stale`, never `_`.
"""
sys.stdout.write(header + yaml.dump(out, Dumper=Dumper, sort_keys=False, width=120, default_flow_style=False))
