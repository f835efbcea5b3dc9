//! `lab status`: the Kubernetes view beside the training view, or the whole snapshot as JSON.

use std::process::ExitCode;

use crate::cli::StatusArgs;
use lab_session::Lab;

use crate::out;

/// How long status watches when the lab has no fresh live snapshot (its rules' longest `for` is 5 s).
const DEFAULT_WINDOW: std::time::Duration = std::time::Duration::from_secs(6);

pub async fn status(name: &str, a: StatusArgs) -> anyhow::Result<ExitCode> {
    let lab = Lab::open(name).await?;
    // A lab whose runtime does not answer is reported as such, not as an empty screen.
    lab.runtime().status().await?;
    let live = match a.window {
        None => lab_session::live::read_fresh(name, lab_runtime::state::now_ms()),
        Some(_) => None,
    };
    let snap = match live {
        Some(s) => s,
        None => out::snapshot(&lab, a.window.unwrap_or(DEFAULT_WINDOW)).await,
    };
    if a.json {
        out::json(&snap)?;
    } else {
        print!("{}", lab_console::status_text(&snap));
    }
    Ok(ExitCode::SUCCESS)
}
