//! What one collector tick costs at the lab's largest size: 16 ranks and 8 storage servers, each rank
//! exporting the rank's real metric families (17 read buckets, 16 step buckets), each server the whole text
//! SeaweedFS 4.48 writes on its metrics port. Prints the mean and worst time of `Collector::observe` and the
//! series the store keeps.
//!
//!   cargo run --release -p lab-telemetry --example tick-cost [-- <ranks> <servers> <ticks>]

use std::time::Instant;

use lab_model::scrape::{ScrapeTarget, TargetKind};
use lab_model::status::{LabStatus, RuntimeKind};
use lab_telemetry::Collector;

const READ: [f64; 17] = [
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0,
];
const STEP: [f64; 16] = [
    0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0,
];

fn histogram(out: &mut String, name: &str, labels: &str, bounds: &[f64], n: f64, at: f64) {
    let sep = if labels.is_empty() { "" } else { "," };
    for b in bounds {
        let v = if at <= *b { n } else { 0.0 };
        out.push_str(&format!("{name}_bucket{{{labels}{sep}le=\"{b}\"}} {v}\n"));
    }
    out.push_str(&format!("{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {n}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {n}\n", n * at));
}

fn rank_text(r: u32, servers: u32, tick: u64) -> String {
    let t = tick as f64;
    let server = format!("storage-{}", r % servers);
    let mut s = String::new();
    s.push_str(&format!(
        "# HELP lab_steps_total Steps.\n# TYPE lab_steps_total counter\nlab_steps_total {}\n",
        3.0 * t
    ));
    s.push_str(&format!(
        "lab_samples_total {}\nlab_step {}\n",
        96.0 * t,
        3 * tick
    ));
    histogram(&mut s, "lab_step_duration_seconds", "", &STEP, 3.0 * t, 0.31);
    for (p, v) in [
        ("read", 0.02),
        ("compute", 0.7),
        ("wait", 0.2),
        ("transfer", 0.05),
    ] {
        s.push_str(&format!("lab_phase_seconds_total{{phase=\"{p}\"}} {}\n", v * t));
    }
    histogram(
        &mut s,
        "lab_storage_read_duration_seconds",
        &format!("server=\"{server}\""),
        &READ,
        3.0 * t,
        0.003,
    );
    s.push_str(&format!(
        "lab_storage_read_bytes_total{{server=\"{server}\"}} {}\n",
        3.0e5 * t
    ));
    s.push_str(&format!(
        "lab_storage_checksums_verified_total{{server=\"{server}\"}} {}\n",
        96.0 * t
    ));
    for k in ["connect", "http", "timeout", "checksum"] {
        s.push_str(&format!(
            "lab_storage_read_errors_total{{server=\"{server}\",kind=\"{k}\"}} 0\n"
        ));
    }
    for k in ["timeout", "protocol", "peer_closed"] {
        s.push_str(&format!("lab_collective_errors_total{{kind=\"{k}\"}} 0\n"));
    }
    s.push_str("lab_world_size 16\nlab_peers_connected 16\nlab_rendezvous_waiting 0\nlab_loss 0.013\n");
    s.push_str(
        "lab_model_checksum 12345\nlab_checkpoint_step 100\nlab_resumes_total 0\nlab_steps_lost_total 0\n",
    );
    s.push_str(&format!(
        "lab_cpu_periods_total {}\nlab_cpu_throttled_periods_total {}\n",
        10.0 * t,
        6.0 * t
    ));
    s.push_str(&format!(
        "lab_cpu_throttled_seconds_total {}\nlab_cpu_limit_cores 0.4\n",
        0.3 * t
    ));
    s.push_str(&format!(
        "lab_rank_info{{rank=\"{r}\",world_size=\"16\",server=\"{server}\"}} 1\n"
    ));
    s
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let (ranks, servers, ticks) = (
        args.first().copied().unwrap_or(16) as u32,
        args.get(1).copied().unwrap_or(8) as u32,
        args.get(2).copied().unwrap_or(300),
    );
    let seaweed = include_str!("../../model/tests/fixtures/valid/seaweedfs-volume-4.48.txt");
    let status = LabStatus {
        lab: "cost".into(),
        runtime: RuntimeKind::Local,
        pods: Vec::new(),
        gpus_capacity: ranks,
        gpu_resource: "gpu".into(),
        ranks_desired: ranks,
        world_size: ranks,
        storage_servers: servers,
        delay_path: "proxy".into(),
        notes: Vec::new(),
    };
    let target = |instance: String, kind, index| ScrapeTarget {
        instance,
        kind,
        index,
        address: String::new(),
    };
    let mut c = Collector::default();
    let (mut total, mut worst) = (0.0f64, 0.0f64);
    let mut bytes = 0;
    for tick in 0..ticks {
        let mut scrapes = Vec::new();
        for r in 0..ranks {
            scrapes.push((
                target(format!("rank-{r}"), TargetKind::Rank, r),
                Ok(rank_text(r, servers, tick)),
            ));
        }
        for s in 0..servers {
            scrapes.push((
                target(format!("storage-{s}"), TargetKind::Storage, s),
                Ok(seaweed.to_string()),
            ));
        }
        bytes = scrapes
            .iter()
            .map(|(_, t)| t.as_ref().map_or(0, String::len))
            .sum();
        let start = Instant::now();
        let snap = c.observe(
            1_700_000_000_000 + tick * 1000,
            status.clone(),
            scrapes,
            Vec::new(),
            Vec::new(),
        );
        let took = start.elapsed().as_secs_f64() * 1000.0;
        std::hint::black_box(snap);
        total += took;
        worst = worst.max(took);
    }
    let (series, samples) = c.store_size();
    println!(
        "{ranks} ranks, {servers} servers, {ticks} ticks, {:.0} KiB of metrics text per tick: observe mean {:.2} ms, worst {:.2} ms; store {series} series, {samples} samples",
        bytes as f64 / 1024.0,
        total / ticks as f64,
        worst
    );
}
