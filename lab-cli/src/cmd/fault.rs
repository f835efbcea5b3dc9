//! `lab fault list|inject|clear|status`.

use crate::exit::Exit;

use lab_session::guard::{Clear, Guarded};
use lab_session::{FaultKind, Lab};
use serde_json::json;

use crate::cli::{ClearArgs, FaultCmd, InjectArgs};
use crate::formats;
use crate::out::{self, outln};

pub async fn run(name: &str, cmd: FaultCmd) -> anyhow::Result<Exit> {
    match cmd {
        FaultCmd::List(a) => list(a.json),
        FaultCmd::Inject(i) => inject(name, i).await,
        FaultCmd::Clear(a) => clear(name, a).await,
        FaultCmd::Status(a) => status(name, a.json),
    }
}

fn list(json: bool) -> anyhow::Result<Exit> {
    if json {
        let v: Vec<_> = FaultKind::ALL
            .iter()
            .map(|k| {
                let parameters: Vec<_> = k
                    .parameters()
                    .into_iter()
                    .map(|(flag, default)| json!({ "flag": flag, "default": default }))
                    .collect();
                json!({
                    "kind": k.name(),
                    "description": k.summary(),
                    "parameters": parameters,
                    "default": k.default_fault(),
                })
            })
            .collect();
        out::json_list(formats::FAULT_CATALOG, "faults", &v)?;
    } else {
        for k in FaultKind::ALL {
            outln!("{:<18} {}", k.name(), k.describe());
        }
    }
    Ok(Exit::Passed)
}

async fn inject(name: &str, a: InjectArgs) -> anyhow::Result<Exit> {
    let (fault, json) = (a.fault, a.json);
    // Listen for Ctrl-C from the start (`ctrl_c()` listens only once first polled, so an earlier signal took
    // the default action: the process died without a word or its exit status); one that arrives while the
    // lab is being opened is kept and answered by the guarded inject.
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let lab = Lab::open(name).await?;
    if !json {
        match a.lifetime {
            Some(l) => eprintln!("injecting {fault} for {} …", lab_session::format_duration(l)),
            None => eprintln!("injecting {fault} …"),
        }
    }
    let interrupt = async {
        sigint.recv().await;
    };
    let say = |line: &str| eprintln!("{line}");
    let done = match lab.inject_guarded_for(fault, a.lifetime, interrupt, &say).await? {
        Guarded::Done(done) => done,
        Guarded::RolledBack => return Ok(Exit::Interrupted),
    };
    if json {
        out::json(
            formats::FAULT_INJECTED,
            &json!({ "entry": done.entry, "changes": done.changes }),
        )?;
    } else {
        outln!("✓ injected {}: {}", done.entry.id, done.entry.fault);
        if let Some(p) = &done.entry.proof {
            outln!("  proof:  {p}");
        }
        for c in &done.changes {
            outln!("  change: {}", c.line());
        }
        if let Some(at) = done.entry.expires_at_ms {
            outln!(
                "  clears itself in {} (the lab's watcher clears it, at {})",
                lab_session::format_duration(a.lifetime.unwrap_or_default()),
                lab_session::rfc3339(at)
            );
        }
        outln!(
            "  clear with: lab fault clear {}{}",
            done.entry.id,
            out::name_flag(name)
        );
    }
    Ok(Exit::Passed)
}

async fn clear(name: &str, a: ClearArgs) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    let cleared = lab
        .clear(if a.all {
            Clear::All
        } else {
            Clear::One(a.id.expect("clap requires an id without --all"))
        })
        .await?;
    if a.json {
        out::json_list(formats::FAULT_CLEARED, "cleared", &cleared)?;
    } else if cleared.is_empty() {
        outln!("nothing to clear: no fault is injected");
    } else {
        for e in &cleared {
            outln!("✓ cleared {}: {}", e.id, e.fault);
        }
    }
    Ok(Exit::Passed)
}

fn status(name: &str, json: bool) -> anyhow::Result<Exit> {
    let data = lab_session::fault_ledger(name)?;
    if json {
        out::json(formats::FAULT_LEDGER, &data)?;
        return Ok(Exit::Passed);
    }
    let now = lab_session::now_ms();
    let active: Vec<_> = data.active().collect();
    if active.is_empty() {
        outln!("no fault is injected");
    }
    for e in &active {
        outln!(
            "{:<22} {:<10} {}",
            e.id,
            format!("{:?}", e.phase).to_lowercase(),
            e.fault
        );
        if let Some(p) = &e.proof {
            outln!("{:<22} proof: {p}", "");
        }
        if let Some(at) = e.expires_at_ms {
            let left = std::time::Duration::from_millis(at.saturating_sub(now));
            outln!(
                "{:<22} clears itself in {} (by the lab's watcher)",
                "",
                lab_session::format_duration(left)
            );
        }
    }
    if !data.changes.is_empty() {
        outln!("\nchanges (newest last):");
        for c in data.changes.iter().rev().take(12).rev() {
            match &c.by {
                Some(by) => outln!("  {:?} {} (by {by})", c.source, c.line()),
                None => outln!("  {:?} {}", c.source, c.line()),
            }
        }
    }
    Ok(Exit::Passed)
}
