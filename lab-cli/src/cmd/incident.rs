//! `lab incident`: the incident bundle of the lab as it is now — wiring, changes, golden signals firing and
//! per-dependency latency — as text or JSON (schema: docs/incident.md).

use crate::exit::Exit;

use crate::cli::IncidentArgs;
use lab_session::Lab;

use crate::out::{self, out};

pub async fn incident(name: &str, a: IncidentArgs) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    let snap = out::current(&lab, a.window).await;
    let bundle = lab.incident(&snap).await;
    if a.json {
        out::print_json(&bundle)?;
    } else {
        out!("{}", bundle.text());
    }
    Ok(Exit::Passed)
}
