//! `lab status`: the Kubernetes view beside the training view, or the whole snapshot as JSON.

use std::process::ExitCode;

use crate::cli::StatusArgs;
use crate::{out, session};

pub async fn status(name: &str, a: StatusArgs) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    let snap = session::snapshot(name, rt, a.window).await;
    if a.json {
        out::json(&snap)?;
    } else {
        print!("{}", brief(&snap));
    }
    Ok(ExitCode::SUCCESS)
}

/// A short plain view, until the console's full status screen is wired in.
fn brief(s: &lab_model::Snapshot) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let (ready, total) = s.status.ready_count();
    let pct = s
        .training
        .pct_of_baseline
        .map_or("?".into(), |p| format!("{p:.0}%"));
    let _ = writeln!(o, "Kubernetes: {ready}/{total} Ready · Training: {pct} of normal");
    for p in &s.status.pods {
        let _ = writeln!(
            o,
            "  {:<16} {:<9} ready={:<5} restarts={:<3} cpu={} {}",
            p.name,
            p.phase.to_string(),
            p.ready,
            p.restarts,
            p.resources.cpu_live.map_or("-".into(), |c| c.to_string()),
            p.reason.clone().unwrap_or_default()
        );
    }
    o
}
