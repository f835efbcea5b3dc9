//! `lab status`: the Kubernetes view beside the training view, or the whole snapshot as JSON.

use crate::exit::Exit;

use crate::cli::StatusArgs;
use lab_session::Lab;

use crate::formats;
use crate::out::{self, out};

pub async fn status(name: &str, a: StatusArgs) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    // A lab whose runtime does not answer is reported as such, not as an empty screen.
    lab.status().await?;
    let snap = out::current(&lab, a.window).await;
    if a.json {
        out::json(formats::STATUS, &snap)?;
    } else {
        out!("{}", lab_console::status_text(&snap));
    }
    Ok(Exit::Passed)
}
