//! Realistic synthetic snapshots for the screen tests: the healthy lab and each of the three faults, with
//! the figures of the seed incident (storage-1 at 488 ms while its siblings answer in 3 ms; training at
//! 7% of normal while every pod is Ready), and a 16-rank, 8-server lab.

use lab_model::Millicores;
use lab_model::change::{ChangeRecord, ChangeSource};
use lab_model::names;
use lab_model::snapshot::{
    ActiveFault, Alert, Baseline, GoldenSignal, RankView, Snapshot, StorageView, Training,
};
use lab_model::status::{LabStatus, Phase, PodStatus, Role, RuntimeKind};

/// The instant every fixture is taken at, and the console's clock in the tests (1 s later).
pub const AT: u64 = 1_762_700_000_000;
pub const NOW: u64 = AT + 1_000;

const BASE_SAMPLES: f64 = 412.0;
const BASE_STEP: f64 = 0.31;

fn pod(name: String, role: Role, index: Option<u32>, cpu: Option<u32>, gpus: u32) -> PodStatus {
    let mut p = PodStatus::new(name, role, index);
    p.phase = Phase::Running;
    p.ready = true;
    if let Some(c) = cpu {
        p.resources.cpu_live = Some(Millicores(c));
        p.resources.cpu_spec = Some(Millicores(c));
        p.resources.cpu_template = Some(Millicores(c));
    }
    p.resources.gpus = gpus;
    p.node = Some("local".into());
    p
}

fn status(ranks: u32, servers: u32, world_size: u32) -> LabStatus {
    let mut pods = vec![pod(
        names::STORAGE_MASTER.into(),
        Role::StorageMaster,
        None,
        None,
        0,
    )];
    pods.extend((0..servers).map(|s| pod(names::storage(s), Role::StorageServer, Some(s), None, 0)));
    pods.extend((0..ranks).map(|r| pod(names::rank(r), Role::Rank, Some(r), Some(400), 1)));
    LabStatus {
        lab: "demo".into(),
        runtime: RuntimeKind::Local,
        pods,
        gpus_capacity: ranks.min(4).max(ranks),
        gpu_resource: "gpu".into(),
        ranks_desired: ranks,
        world_size,
        storage_servers: servers,
        delay_path: "proxy".into(),
        notes: Vec::new(),
    }
}

/// A wavy but deterministic series around `level`.
fn series(n: usize, level: f64, wobble: f64) -> Vec<f64> {
    (0..n)
        .map(|i| level * (1.0 + wobble * ((i * 7 % 11) as f64 / 10.0 - 0.5)))
        .collect()
}

fn rank(r: u32, servers: u32, read: f64, compute: f64, wait: f64, read_p50: f64) -> RankView {
    RankView {
        rank: r,
        name: names::rank(r),
        server: Some(names::storage(names::default_server_for_rank(r, servers))),
        up: true,
        read: Some(read),
        compute: Some(compute * 0.9),
        wait: Some(wait),
        transfer: Some(compute * 0.1),
        step_seconds: Some(BASE_STEP),
        read_p50: Some(read_p50),
        throttled: Some(0.18),
        cpu_limit_cores: Some(0.4),
        waiting_for_peers: false,
        step: Some(4_812),
    }
}

fn storage(s: u32, ranks: u32, servers: u32, p50: f64) -> StorageView {
    StorageView {
        index: s,
        name: names::storage(s),
        client_p50: Some(p50),
        client_p99: Some(p50 * 2.4),
        server_p50: Some(0.00031),
        server_p99: Some(0.0009),
        own_probe: None,
        baseline_p50: Some(0.0029),
        history: series(60, 0.0029, 0.3),
        reads_per_s: Some(21.0),
        errors_per_s: Some(0.0),
        outlier: false,
        readers: (0..ranks)
            .filter(|r| names::default_server_for_rank(*r, servers) == s)
            .map(names::rank)
            .collect(),
        ..StorageView::default()
    }
}

/// The healthy lab of `ranks` ranks over `servers` servers, after the baseline was learned.
pub fn healthy_sized(ranks: u32, servers: u32) -> Snapshot {
    let per_rank = BASE_SAMPLES / 4.0;
    let samples = per_rank * f64::from(ranks);
    Snapshot {
        at_ms: AT,
        status: status(ranks, servers, ranks),
        training: Training {
            baseline: Some(Baseline {
                samples_per_s: samples,
                step_seconds: BASE_STEP,
                learned_at_ms: AT - 600_000,
            }),
            samples_per_s: Some(samples * 1.01),
            steps_per_s: Some(1.0 / BASE_STEP),
            step_seconds: Some(BASE_STEP),
            pct_of_baseline: Some(101.0),
            history: series(120, samples, 0.06),
            step: 4_812,
            loss: Some(0.0132),
            steps_lost: 0,
            checkpoint_step: Some(4_800),
            checkpoint_at_ms: Some(AT - 4_000),
            world_size: Some(ranks),
        },
        ranks: (0..ranks)
            .map(|r| rank(r, servers, 0.03, 0.78, 0.19, 0.0029))
            .collect(),
        storage: (0..servers)
            .map(|s| storage(s, ranks, servers, 0.0029 + 0.0001 * f64::from(s)))
            .collect(),
        alerts: Vec::new(),
        changes: vec![ChangeRecord {
            at_ms: AT - 660_000,
            source: ChangeSource::Lifecycle,
            target: "lab".into(),
            what: "state".into(),
            before: "down".into(),
            after: "up".into(),
            note: Some("local runtime".into()),
            fault_id: None,
            by: None,
        }],
        faults: Vec::new(),
        scrape_errors: Vec::new(),
        database: None,
    }
}

/// The healthy 4-rank, 3-server lab.
pub fn healthy() -> Snapshot {
    healthy_sized(4, 3)
}

fn change(
    at_ms: u64,
    target: &str,
    what: &str,
    before: &str,
    after: &str,
    note: Option<&str>,
    id: &str,
) -> ChangeRecord {
    ChangeRecord {
        at_ms,
        source: ChangeSource::Fault,
        target: target.into(),
        what: what.into(),
        before: before.into(),
        after: after.into(),
        note: note.map(Into::into),
        fault_id: Some(id.into()),
        by: None,
    }
}

fn alert(
    signal: GoldenSignal,
    rule: &str,
    target: &str,
    since_ago_ms: u64,
    value: f64,
    summary: &str,
) -> Alert {
    Alert {
        signal,
        rule: rule.into(),
        target: target.into(),
        since_ms: AT - since_ago_ms,
        value,
        summary: summary.into(),
    }
}

fn degrade(s: &mut Snapshot, pct: f64) {
    let t = &mut s.training;
    let base = t.baseline.unwrap().samples_per_s;
    t.samples_per_s = Some(base * pct / 100.0);
    t.pct_of_baseline = Some(pct);
    let n = t.history.len();
    for (i, v) in t.history.iter_mut().enumerate() {
        if i >= n - 25 {
            *v = base * pct / 100.0 * (1.0 + 0.1 * ((i % 3) as f64 - 1.0));
        }
    }
}

/// Fault 1: storage-1 answers 300 ms late through the latency proxy.
pub fn slow_storage() -> Snapshot {
    let mut s = healthy();
    degrade(&mut s, 7.0);
    s.training.step_seconds = Some(4.3);
    s.training.steps_per_s = Some(1.0 / 4.3);
    for r in &mut s.ranks {
        if r.server.as_deref() == Some("storage-1") {
            *r = RankView {
                read: Some(0.93),
                compute: Some(0.05),
                transfer: Some(0.0),
                wait: Some(0.02),
                read_p50: Some(0.488),
                throttled: Some(0.01),
                ..r.clone()
            };
        } else {
            *r = RankView {
                read: Some(0.01),
                compute: Some(0.05),
                transfer: Some(0.0),
                wait: Some(0.94),
                throttled: Some(0.01),
                ..r.clone()
            };
        }
        r.step_seconds = Some(4.3);
    }
    let st = &mut s.storage[1];
    st.client_p50 = Some(0.488);
    st.client_p99 = Some(0.61);
    st.outlier = true;
    let n = st.history.len();
    for v in &mut st.history[n - 8..] {
        *v = 0.488;
    }
    s.alerts = vec![
        alert(
            GoldenSignal::Latency,
            "LabStorageReadLatencyHigh",
            "storage-1",
            12_000,
            0.488,
            "storage-1 read p50 488 ms (siblings 3.0 ms)",
        ),
        alert(
            GoldenSignal::Throughput,
            "LabTrainingThroughputLow",
            "job",
            11_000,
            28.8,
            "training at 7% of normal (29 of 412 samples/s)",
        ),
        alert(
            GoldenSignal::Saturation,
            "LabRanksWaitingAtCollective",
            "job",
            13_000,
            0.94,
            "ranks wait 94% of each step at the collective",
        ),
    ];
    s.changes.push(change(
        AT - 24_000,
        "storage-1",
        "added delay",
        "0ms",
        "300ms",
        Some("via latency proxy"),
        "f-1",
    ));
    s.faults = vec![ActiveFault {
        id: "f-1".into(),
        kind: "slow-storage".into(),
        target: "storage-1".into(),
        phase: "injected".into(),
    }];
    s
}

/// Fault 2: rank-1's CPU limit cut in place from 400m to 150m; its template keeps 400m.
pub fn throttled_rank() -> Snapshot {
    let mut s = healthy();
    degrade(&mut s, 38.0);
    s.training.step_seconds = Some(0.82);
    let p = s.status.pods.iter_mut().find(|p| p.name == "rank-1").unwrap();
    p.resources.cpu_live = Some(Millicores(150));
    for r in &mut s.ranks {
        if r.name == "rank-1" {
            *r = RankView {
                read: Some(0.08),
                compute: Some(0.83),
                transfer: Some(0.08),
                wait: Some(0.01),
                read_p50: Some(0.067),
                throttled: Some(0.92),
                cpu_limit_cores: Some(0.15),
                ..r.clone()
            };
        } else {
            *r = RankView {
                read: Some(0.02),
                compute: Some(0.22),
                transfer: Some(0.03),
                wait: Some(0.73),
                throttled: Some(0.05),
                ..r.clone()
            };
        }
        r.step_seconds = Some(0.82);
    }
    s.storage[1].client_p50 = Some(0.067);
    s.alerts = vec![
        alert(
            GoldenSignal::Saturation,
            "LabRankCpuThrottled",
            "rank-1",
            9_000,
            0.92,
            "rank-1 CPU throttled in 92% of periods (limit 150m, template 400m)",
        ),
        alert(
            GoldenSignal::Throughput,
            "LabTrainingThroughputLow",
            "job",
            7_000,
            156.6,
            "training at 38% of normal (157 of 412 samples/s)",
        ),
        alert(
            GoldenSignal::Saturation,
            "LabRanksWaitingAtCollective",
            "job",
            8_000,
            0.73,
            "ranks wait 73% of each step at the collective",
        ),
    ];
    s.changes.push(change(
        AT - 15_000,
        "rank-1",
        "cpu limit",
        "400m",
        "150m",
        Some("spec 400m"),
        "f-2",
    ));
    s.faults = vec![ActiveFault {
        id: "f-2".into(),
        kind: "throttled-rank".into(),
        target: "rank-1".into(),
        phase: "injected".into(),
    }];
    s
}

/// Fault 3: ranks scaled to 5 on 4 GPUs with world size 5; rank-4 is Pending, the four running ranks
/// restarted and wait at rendezvous for a fifth peer.
pub fn unplaceable_rank() -> Snapshot {
    let mut s = healthy();
    degrade(&mut s, 0.0);
    let t = &mut s.training;
    t.step_seconds = None;
    t.steps_per_s = Some(0.0);
    t.world_size = Some(5);
    t.steps_lost = 37;
    s.status.world_size = 5;
    s.status.ranks_desired = 5;
    for p in s.status.pods.iter_mut().filter(|p| p.role == Role::Rank) {
        p.restarts = 1;
    }
    let mut pending = PodStatus::new(names::rank(4), Role::Rank, Some(4));
    pending.reason = Some("Insufficient gpu".into());
    pending.message = Some("0/1 nodes are available: 1 Insufficient gpu".into());
    pending.resources.cpu_spec = Some(Millicores(400));
    pending.resources.cpu_template = Some(Millicores(400));
    pending.resources.gpus = 1;
    s.status.pods.push(pending);
    for r in &mut s.ranks {
        *r = RankView {
            read: None,
            compute: None,
            transfer: None,
            wait: None,
            step_seconds: None,
            read_p50: None,
            throttled: None,
            waiting_for_peers: true,
            step: Some(4_800),
            ..r.clone()
        };
    }
    s.ranks.push(RankView {
        rank: 4,
        name: names::rank(4),
        up: false,
        ..Default::default()
    });
    for st in &mut s.storage {
        st.client_p50 = None;
        st.client_p99 = None;
        st.reads_per_s = Some(0.0);
    }
    s.alerts = vec![
        alert(
            GoldenSignal::Throughput,
            "LabTrainingThroughputLow",
            "job",
            6_000,
            0.0,
            "training at 0% of normal (0 of 412 samples/s)",
        ),
        alert(
            GoldenSignal::Saturation,
            "LabRanksWaitingForPeers",
            "job",
            5_000,
            4.0,
            "4 ranks wait at rendezvous for peers (world size 5)",
        ),
    ];
    s.changes
        .push(change(AT - 16_000, "ranks", "replicas", "4", "5", None, "f-3"));
    s.changes.push(change(
        AT - 16_000,
        "job config",
        "world size",
        "4",
        "5",
        Some("running ranks restart"),
        "f-3",
    ));
    s.faults = vec![ActiveFault {
        id: "f-3".into(),
        kind: "unplaceable-rank".into(),
        target: "ranks".into(),
        phase: "injected".into(),
    }];
    s.scrape_errors = vec!["rank-4: not running (Pending)".into()];
    s
}
