//! `lab status`: the Kubernetes view beside the training view, or the whole snapshot as JSON.

use std::process::ExitCode;

use crate::cli::StatusArgs;
use lab_session::Lab;

use crate::out;

pub async fn status(name: &str, a: StatusArgs) -> anyhow::Result<ExitCode> {
    let lab = Lab::open(name).await?;
    // A lab whose runtime does not answer is reported as such, not as an empty screen.
    lab.runtime().status().await?;
    let snap = out::current(&lab, a.window).await;
    if a.json {
        out::json(&snap)?;
    } else {
        print!("{}", lab_console::status_text(&snap));
    }
    Ok(ExitCode::SUCCESS)
}
