//! Watches a running lab with the same collector the console runs, and prints one JSON line per tick:
//! when it was taken, whether a baseline is learned, throughput as % of it, and the firing alerts with
//! their since-times. `scripts/bench/alerts.sh` reads these lines to time each fault's first alert.
//!
//!   cargo run -p lab-session --example watch -- --name <lab> [--baseline <baseline.json>]
//!
//! Without `--baseline` it learns its own, as `lab up` does.

use std::io::Write;
use std::sync::Arc;

use lab_telemetry::{Collector, Driver, DriverConfig, LearnedBaseline, NoLedger};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let name = arg("--name").unwrap_or_else(|| "lab".to_string());
    let mut collector = Collector::default();
    if let Some(path) = arg("--baseline") {
        let b: LearnedBaseline = serde_json::from_slice(&std::fs::read(&path)?)?;
        collector.restore_baseline(b);
    }
    let rt = lab_session::open::open(&name).await?;
    let mut driver = Driver::new(
        Arc::new(lab_session::RuntimeSource(rt)),
        Arc::new(NoLedger),
        collector,
        DriverConfig::default(),
    );
    let mut every = tokio::time::interval(DriverConfig::default().interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let s = driver.tick().await;
        let alerts: Vec<_> = s
            .alerts
            .iter()
            .map(|a| json!({ "signal": a.signal, "rule": a.rule, "target": a.target, "since_ms": a.since_ms, "summary": a.summary }))
            .collect();
        let ranks: Vec<_> = s
            .ranks
            .iter()
            .map(|r| json!({ "name": r.name, "throttled": r.throttled, "read": r.read, "compute": r.compute, "wait": r.wait, "cpu": r.cpu_limit_cores }))
            .collect();
        let line = json!({
            "at_ms": s.at_ms,
            "ranks": ranks,
            "baseline": s.training.baseline.map(|b| b.samples_per_s),
            "samples_per_s": s.training.samples_per_s,
            "pct": s.training.pct_of_baseline,
            "alerts": alerts,
            "scrape_errors": s.scrape_errors,
        });
        // The reader went away (the bench finished): stop quietly.
        if writeln!(std::io::stdout(), "{line}").is_err() {
            return Ok(());
        }
    }
}
