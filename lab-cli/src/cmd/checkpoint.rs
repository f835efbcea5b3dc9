//! `lab checkpoint`.

use std::process::ExitCode;

use lab_faults::Ledger;

use crate::cli::CheckpointArgs;
use crate::out;

pub async fn checkpoint(name: &str, a: CheckpointArgs) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    let progress = |m: &str| eprintln!("   {m}");
    let saved =
        lab_faults::checkpoint::checkpoint(rt.as_ref(), &Ledger::of_lab(name), a.timeout, &progress).await?;
    if a.json {
        out::json(&saved)?;
    } else {
        println!(
            "checkpoint saved: step {} at {} ({:.1} s after the request){}",
            saved.step,
            saved.at,
            saved.waited_s,
            saved
                .previous
                .map_or(String::new(), |p| format!("; the one before was step {}", p.step))
        );
    }
    Ok(ExitCode::SUCCESS)
}
