//! Remediation commands: scale, world size, resize, restart, apply, storage drain and undrain.

use std::process::ExitCode;

use lab_faults::{Ledger, drain, remediate};
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

pub async fn storage(name: &str, cmd: crate::cli::StorageCmd) -> anyhow::Result<ExitCode> {
    use crate::cli::StorageCmd;
    let rt = lab_runtime::open::open(name).await?;
    let ledger = Ledger::of_lab(name);
    let (a, r) = match cmd {
        StorageCmd::Drain(a) => {
            let r = drain::drain(rt.as_ref(), &ledger, a.server).await;
            (a, r)
        }
        StorageCmd::Undrain(a) => {
            let r = drain::undrain(rt.as_ref(), &ledger, a.server).await;
            (a, r)
        }
    };
    let r = r?;
    if a.json {
        crate::out::json(&r)?;
    } else {
        for (v, from, to) in &r.moved {
            println!("moved volume {v}: storage-{from} → storage-{to}");
        }
        println!("changed: {}", r.change.line());
        println!("took {:.1} s", r.seconds);
    }
    Ok(ExitCode::SUCCESS)
}
