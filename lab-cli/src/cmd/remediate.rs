//! Remediation commands: scale, world size, resize, restart, apply.

use std::process::ExitCode;

use lab_faults::{Ledger, remediate};
use lab_model::{ChangeRecord, Millicores};

async fn done(r: Result<ChangeRecord, lab_faults::FaultError>) -> anyhow::Result<ExitCode> {
    let c = r?;
    println!("changed: {}", c.line());
    Ok(ExitCode::SUCCESS)
}

pub async fn scale(name: &str, ranks: u32) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    done(remediate::scale(rt.as_ref(), &Ledger::of_lab(name), ranks).await).await
}

pub async fn world_size(name: &str, size: u32) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    done(remediate::world_size(rt.as_ref(), &Ledger::of_lab(name), size).await).await
}

pub async fn resize(name: &str, rank: u32, cpu: Millicores) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    done(remediate::resize(rt.as_ref(), &Ledger::of_lab(name), rank, cpu).await).await
}

pub async fn restart(name: &str, rank: u32) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    done(remediate::restart(rt.as_ref(), &Ledger::of_lab(name), rank).await).await
}

pub async fn apply(name: &str, cpu: Millicores) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    done(remediate::apply_template(rt.as_ref(), &Ledger::of_lab(name), cpu).await).await
}
