//! `lab incident`: the incident bundle of the lab as it is now — wiring, changes, golden signals firing and
//! per-dependency latency — as text or JSON (schema: docs/incident.md).

use std::process::ExitCode;

use lab_drills::Bundle;

use crate::cli::IncidentArgs;
use lab_session::Lab;

use crate::out;

pub async fn incident(name: &str, a: IncidentArgs) -> anyhow::Result<ExitCode> {
    let lab = Lab::open(name).await?;
    let snap = out::current(&lab, a.window).await;
    let bundle = Bundle::from_snapshot(&snap);
    if a.json {
        out::json(&bundle)?;
    } else {
        print!("{}", bundle.text());
    }
    Ok(ExitCode::SUCCESS)
}
