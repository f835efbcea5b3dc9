//! The console against a small synthetic lab, for trying the keys and the screen without standing a lab
//! up, and for the real-terminal test of the console's loop (keys, feedback, terminal restore).
//!
//! Nothing here touches a runtime: injecting a fault only adds the alert the real lab would show, and says
//! so in the status line ("demo: …").
//!
//!   cargo run -p lab-console --bin lab-console-demo [-- --ranks 16 --servers 8] [--panic-after-ms 1500]

use std::time::Duration;

use lab_model::clock::now_ms;

use lab_console::{Action, FaultKey, Feedback};
use lab_model::snapshot::{
    ActiveFault, Alert, Baseline, GoldenSignal, RankView, Snapshot, StorageView, Training,
};
use lab_model::status::{LabStatus, Phase, PodStatus, Role, RuntimeKind};
use lab_model::{FaultKind, Millicores, names};
use tokio::sync::{mpsc, watch};

#[derive(Debug, Clone, Copy)]
struct Size {
    ranks: u32,
    servers: u32,
}

fn snapshot(size: Size, faults: &[FaultKey], since: u64, tick: u64) -> Snapshot {
    let Size { ranks, servers } = size;
    let mut pods = Vec::new();
    for (name, role, index) in (0..servers)
        .map(|s| (names::storage(s), Role::StorageServer, s))
        .chain((0..ranks).map(|r| (names::rank(r), Role::Rank, r)))
    {
        let mut p = PodStatus::new(name, role, Some(index));
        p.phase = Phase::Running;
        p.ready = true;
        if role == Role::Rank {
            p.resources.cpu_live = Some(Millicores(400));
            p.resources.cpu_template = Some(Millicores(400));
            p.resources.gpus = 1;
        }
        pods.push(p);
    }
    let slow = faults.contains(&FaultKey(FaultKind::SlowStorage));
    let pct = if slow { 7.0 } else { 100.0 };
    let mut alerts = Vec::new();
    if slow {
        alerts.push(Alert {
            signal: GoldenSignal::Latency,
            rule: "LabStorageReadLatencyHigh".into(),
            target: "storage-1".into(),
            since_ms: since,
            value: 0.488,
            summary: "storage-1 read p50 488 ms (siblings 3.0 ms)".into(),
        });
    }
    Snapshot {
        at_ms: now_ms(),
        status: LabStatus {
            lab: "demo".into(),
            runtime: RuntimeKind::Local,
            pods,
            gpus_capacity: ranks,
            gpu_resource: "gpu".into(),
            ranks_desired: ranks,
            world_size: ranks,
            storage_servers: servers,
            delay_path: "proxy".into(),
            notes: Vec::new(),
        },
        training: Training {
            baseline: Some(Baseline {
                samples_per_s: 400.0,
                step_seconds: 0.3,
                learned_at_ms: 0,
            }),
            samples_per_s: Some(4.0 * pct),
            pct_of_baseline: Some(pct),
            history: vec![4.0 * pct; 60],
            ..Training::default()
        },
        ranks: (0..ranks)
            .map(|r| RankView {
                rank: r,
                name: names::rank(r),
                server: Some(names::storage(r % servers)),
                up: true,
                read: Some(if slow && r % servers == 1 { 0.9 } else { 0.05 }),
                compute: Some(if slow { 0.05 } else { 0.75 }),
                wait: Some(if slow && r % servers != 1 { 0.9 } else { 0.2 }),
                read_p50: Some(if slow && r % servers == 1 { 0.488 } else { 0.003 }),
                ..RankView::default()
            })
            .collect(),
        storage: (0..servers)
            .map(|s| {
                let p50 = if slow && s == 1 { 0.488 } else { 0.003 };
                StorageView {
                    index: s,
                    name: names::storage(s),
                    client_p50: Some(p50),
                    history: (0..120)
                        .map(|i| p50 * (0.9 + 0.2 * (((i + tick) % 5) as f64 / 5.0)))
                        .collect(),
                    outlier: slow && s == 1,
                    readers: (0..ranks).filter(|r| r % servers == s).map(names::rank).collect(),
                    ..StorageView::default()
                }
            })
            .collect(),
        alerts,
        changes: Vec::new(),
        faults: faults
            .iter()
            .map(|f| ActiveFault {
                id: f.name().into(),
                kind: f.name().into(),
                target: "-".into(),
                phase: "injected".into(),
            })
            .collect(),
        scrape_errors: Vec::new(),
        database: None,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let panic_after = args
        .iter()
        .position(|a| a == "--panic-after-ms")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse::<u64>().ok());
    let num = |flag: &str, default: u32| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let size = Size {
        ranks: num("--ranks", 4),
        servers: num("--servers", 3).max(2),
    };
    let (snap_tx, snap_rx) = watch::channel(Some(snapshot(size, &[], 0, 0)));
    let (action_tx, mut action_rx) = mpsc::channel(4);
    let (feedback_tx, feedback_rx) = mpsc::channel(4);
    tokio::spawn(async move {
        let mut faults: Vec<FaultKey> = Vec::new();
        let mut since = 0;
        let mut tick = 0;
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                a = action_rx.recv() => {
                    let text = match a {
                        Some(Action::Inject(f)) => {
                            if !faults.contains(&f) {
                                faults.push(f);
                            }
                            since = now_ms();
                            format!("demo: {f} marked injected (no lab is touched)")
                        }
                        Some(Action::Clear(f)) => {
                            faults.retain(|x| *x != f);
                            format!("demo: {f} marked cleared")
                        }
                        Some(Action::ClearAll) => {
                            faults.clear();
                            "demo: every fault marked cleared".to_string()
                        }
                        Some(Action::Quit) | None => return,
                    };
                    let _ = feedback_tx.send(Feedback::ok(text)).await;
                }
                _ = every.tick() => {}
            }
            tick += 1;
            let _ = snap_tx.send(Some(snapshot(size, &faults, since, tick)));
        }
    });
    let console = lab_console::run(
        snap_rx,
        action_tx,
        feedback_rx,
        lab_console::Options::from_env(false),
    );
    match panic_after {
        // A panic on the console's own task, with the console live: the terminal must come back.
        Some(ms) => tokio::select! {
            r = console => r?,
            () = tokio::time::sleep(Duration::from_millis(ms)) => panic!("lab-console-demo: panicking on purpose after {ms} ms"),
        },
        None => console.await?,
    }
    Ok(())
}
