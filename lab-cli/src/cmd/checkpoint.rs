//! `lab checkpoint`.

use crate::exit::Exit;

use lab_session::Lab;

use crate::cli::CheckpointArgs;
use crate::formats;
use crate::out::{self, outln};

pub async fn checkpoint(name: &str, a: CheckpointArgs) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    let progress = |m: &str| eprintln!("   {m}");
    let saved = lab.checkpoint(a.timeout, &progress).await?;
    if a.json {
        out::json(formats::CHECKPOINT, &saved)?;
    } else {
        outln!(
            "checkpoint saved: step {} at {} ({:.1} s after the request){}",
            saved.step,
            saved.at,
            saved.waited_s,
            saved
                .previous
                .map_or(String::new(), |p| format!("; the one before was step {}", p.step))
        );
    }
    Ok(Exit::Passed)
}
