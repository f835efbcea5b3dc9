//! `lab fault list|inject|clear|status`.

use std::process::ExitCode;

use lab_faults::{Fault, FaultKind, Ledger};
use lab_session::Lab;
use lab_session::guard::{Clear, Guarded};
use serde_json::json;

use crate::cli::{ClearArgs, FaultCmd, InjectCmd};
use crate::out;

pub async fn run(name: &str, cmd: FaultCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        FaultCmd::List(a) => list(a.json),
        FaultCmd::Inject(i) => inject(name, i).await,
        FaultCmd::Clear(a) => clear(name, a).await,
        FaultCmd::Status(a) => status(name, a.json),
    }
}

fn list(json: bool) -> anyhow::Result<ExitCode> {
    if json {
        let v: Vec<_> = FaultKind::ALL
            .iter()
            .map(|k| json!({ "kind": k.name(), "parameters": k.describe(), "default": k.default_fault() }))
            .collect();
        out::json(&v)?;
    } else {
        for k in FaultKind::ALL {
            println!("{:<18} {}", k.name(), k.describe());
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn inject(name: &str, cmd: InjectCmd) -> anyhow::Result<ExitCode> {
    let (fault, json) = match cmd {
        InjectCmd::SlowStorage {
            server,
            delay,
            jitter,
            json,
        } => (
            Fault::SlowStorage {
                server,
                delay,
                jitter,
            },
            json,
        ),
        InjectCmd::ThrottledRank { rank, cpu, json } => (Fault::ThrottledRank { rank, cpu }, json),
        InjectCmd::UnplaceableRank { ranks, json } => (Fault::UnplaceableRank { ranks }, json),
        InjectCmd::StuckRollout { ranks, json } => (Fault::StuckRollout { ranks }, json),
        InjectCmd::RankHang { rank, json } => (Fault::RankHang { rank }, json),
        InjectCmd::RankCrash { rank, after, json } => (Fault::RankCrash { rank, after }, json),
        InjectCmd::SlowCompute { ranks, json } => (Fault::SlowCompute { ranks }, json),
        InjectCmd::CompetingJob {
            server,
            threads,
            json,
        } => (Fault::CompetingJob { server, threads }, json),
        InjectCmd::SlowDisk { server, cpu, json } => (Fault::SlowDisk { server, cpu }, json),
        InjectCmd::SyncReplica { node_selector, json } => (Fault::SyncReplica { node_selector }, json),
    };
    // Listen for Ctrl-C from the start (`ctrl_c()` listens only once first polled, so an earlier signal took
    // the default action: the process died without a word or its exit status); one that arrives while the
    // lab is being opened is kept and answered by the guarded inject.
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let lab = Lab::open(name).await?;
    if !json {
        eprintln!("injecting {fault} …");
    }
    let interrupt = async {
        sigint.recv().await;
    };
    let say = |line: &str| eprintln!("{line}");
    let done = match lab.inject_guarded(fault, interrupt, &say).await? {
        Guarded::Done(done) => done,
        Guarded::RolledBack => return Ok(ExitCode::from(130)),
    };
    if json {
        out::json(&done.entry)?;
    } else {
        println!("✓ injected {}: {}", done.entry.id, done.entry.fault);
        if let Some(p) = &done.entry.proof {
            println!("  proof:  {p}");
        }
        for c in &done.changes {
            println!("  change: {}", c.line());
        }
        println!(
            "  clear with: lab fault clear {}{}",
            done.entry.id,
            out::name_flag(name)
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn clear(name: &str, a: ClearArgs) -> anyhow::Result<ExitCode> {
    let lab = Lab::open(name).await?;
    let cleared = lab
        .clear(if a.all {
            Clear::All
        } else {
            Clear::One(a.id.expect("clap requires an id without --all"))
        })
        .await?;
    if a.json {
        out::json(&cleared)?;
    } else if cleared.is_empty() {
        println!("nothing to clear: no fault is injected");
    } else {
        for e in &cleared {
            println!("✓ cleared {}: {}", e.id, e.fault);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn status(name: &str, json: bool) -> anyhow::Result<ExitCode> {
    if lab_runtime::state::read_record(name)?.is_none() {
        return Err(lab_runtime::RuntimeError::NotRunning { name: name.into() }.into());
    }
    let data = Ledger::of_lab(name).read()?;
    if json {
        out::json(&data)?;
        return Ok(ExitCode::SUCCESS);
    }
    let active: Vec<_> = data.active().collect();
    if active.is_empty() {
        println!("no fault is injected");
    }
    for e in &active {
        println!(
            "{:<22} {:<10} {}",
            e.id,
            format!("{:?}", e.phase).to_lowercase(),
            e.fault
        );
        if let Some(p) = &e.proof {
            println!("{:<22} proof: {p}", "");
        }
    }
    if !data.changes.is_empty() {
        println!("\nchanges (newest last):");
        for c in data.changes.iter().rev().take(12).rev() {
            println!("  {:?} {}", c.source, c.line());
        }
    }
    Ok(ExitCode::SUCCESS)
}
