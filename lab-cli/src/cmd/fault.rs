//! `lab fault list|inject|clear|status`.

use std::process::ExitCode;

use lab_faults::ledger::FaultPhase;
use lab_faults::{Fault, FaultKind, Ledger};
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
    };
    // Listen for Ctrl-C from the start (`ctrl_c()` listens only once first polled, so an earlier signal took
    // the default action: the process died without a word or its exit status); one that arrives while the
    // lab is being opened is kept and answered by the select below.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let rt = lab_runtime::open::open(name).await?;
    let ledger = Ledger::of_lab(name);
    if !json {
        eprintln!("injecting {fault} …");
    }
    let result = tokio::select! {
        r = lab_faults::inject(rt.as_ref(), &ledger, fault) => r,
        _ = interrupt.recv() => {
            eprintln!("interrupted: rolling back what was applied …");
            roll_back_interrupted(rt.as_ref(), &ledger).await;
            return Ok(ExitCode::from(130));
        }
    };
    let done = result?;
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

/// After Ctrl-C mid-inject: clear every fault that never finished injecting.
async fn roll_back_interrupted(rt: &dyn lab_runtime::Runtime, ledger: &Ledger) {
    let ids: Vec<String> = ledger
        .read()
        .map(|d| {
            d.faults
                .iter()
                .filter(|e| e.phase == FaultPhase::Injecting)
                .map(|e| e.id.clone())
                .collect()
        })
        .unwrap_or_default();
    for id in ids {
        match lab_faults::clear(rt, ledger, &id).await {
            Ok(_) => eprintln!("rolled back {id}"),
            Err(e) => eprintln!("could not roll back {id}: {e}; run `lab fault clear --all`"),
        }
    }
}

async fn clear(name: &str, a: ClearArgs) -> anyhow::Result<ExitCode> {
    let rt = lab_runtime::open::open(name).await?;
    let ledger = Ledger::of_lab(name);
    let cleared = if a.all {
        lab_faults::clear_all(rt.as_ref(), &ledger).await?
    } else {
        let id = a.id.expect("clap requires an id without --all");
        lab_faults::clear(rt.as_ref(), &ledger, &id)
            .await?
            .into_iter()
            .collect()
    };
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
