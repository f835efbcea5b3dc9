//! `lab incident`: the incident bundle of the lab as it is now — wiring, changes, golden signals firing and
//! per-dependency latency — as text or JSON (schema: docs/incident.md).

use crate::exit::Exit;

use lab_drills::Bundle;

use crate::cli::IncidentArgs;
use lab_session::Lab;

use crate::out::{self, out};

pub async fn incident(name: &str, a: IncidentArgs) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    let snap = out::current(&lab, a.window).await;
    let mut bundle = Bundle::from_snapshot(&snap);
    // The database's template and the primary's settings are not in a snapshot: read them when there is one.
    if snap.database.is_some()
        && let Ok(d) = lab.runtime().database().await
    {
        bundle.set_database(&d);
    }
    if a.json {
        out::print_json(&bundle)?;
    } else {
        out!("{}", bundle.text());
    }
    Ok(Exit::Passed)
}
