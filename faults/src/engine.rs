//! Inject, prove, clear: the fault engine over the runtime's actions. It owns the ledger and the order of
//! things (record, apply, prove, roll back or keep; clear and restore); what each fault does to the lab is
//! its own file in the kinds module.

use lab_model::format::error_chain;
use lab_model::status::LabStatus;
use lab_model::{ChangeRecord, Millicores};
use lab_runtime::{DelayPath, Runtime, state::now_ms};

use crate::kinds::{Cx, Injector, injector};
use crate::ledger::entry_mut;
use crate::ledger::{Before, Entry, FaultPhase, Ledger};
use crate::{Fault, FaultError, FaultKind};

/// A fault that was applied and proven.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub entry: Entry,
    pub changes: Vec<ChangeRecord>,
}

/// Checks a fault against the lab as it is now. Nothing is changed.
///
/// # Errors
/// [`FaultError::Invalid`] saying what does not fit.
pub fn check(fault: &Fault, status: &LabStatus) -> Result<(), FaultError> {
    fault.validate()?;
    injector(fault).check(status)
}

/// Injects `fault`, proves it took effect, and records it. If it cannot be proven, what was applied is
/// rolled back and the error says what was measured.
///
/// # Errors
/// [`FaultError::Invalid`] / [`FaultError::AlreadyInjected`] before anything changes; otherwise the
/// runtime's error or [`FaultError::NotProven`] (after rollback).
pub async fn inject(rt: &dyn Runtime, ledger: &Ledger, fault: Fault) -> Result<Injected, FaultError> {
    inject_for(rt, ledger, fault, None).await
}

/// [`inject`], and with `lifetime` the fault clears itself that long after it was proven: its entry
/// carries the time ([`Entry::expires_at_ms`]) and the lab's watcher clears it then.
///
/// # Errors
/// As [`inject`].
pub async fn inject_for(
    rt: &dyn Runtime,
    ledger: &Ledger,
    fault: Fault,
    lifetime: Option<std::time::Duration>,
) -> Result<Injected, FaultError> {
    let status = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    check(&fault, &status)?;
    let kind = fault.kind();
    let id = ledger.update(|d| {
        if let Some(e) = d.active().find(|e| e.fault.kind() == kind) {
            return Err(FaultError::AlreadyInjected {
                kind: kind.name().into(),
                id: e.id.clone(),
                target: e.fault.target(),
            });
        }
        d.next_id += 1;
        let id = format!("{}-{}", kind.name(), d.next_id);
        d.faults.push(Entry {
            id: id.clone(),
            fault: fault.clone(),
            phase: FaultPhase::Injecting,
            injected_at_ms: now_ms(),
            cleared_at_ms: None,
            before: Before::Unknown,
            path: None,
            proof: None,
            error: None,
            expires_at_ms: None,
        });
        Ok(id)
    })?;

    let cx = Cx {
        rt,
        ledger,
        id: &id,
        fault: &fault,
    };
    match apply_and_prove(injector(&fault).as_ref(), &cx, &status).await {
        Ok((path, proof, changes)) => {
            let entry = ledger.update(|d| {
                // On record since the apply; the proof may have added what it read back.
                settle_records(&mut d.changes, &changes);
                let e = entry_mut(d, &id)?;
                e.phase = FaultPhase::Injected;
                e.expires_at_ms = lifetime.map(|l| now_ms() + l.as_millis() as u64);
                e.path = path;
                e.proof = Some(proof);
                Ok(e.clone())
            })?;
            Ok(Injected { entry, changes })
        }
        Err(Unproven { err, recorded }) => {
            // Roll back whatever was applied, then keep the failure on record; when the apply's changes
            // went on record, so do the rollback's: the log says the lab was changed and put back.
            let rollback = recover(rt, ledger, &id).await;
            let _ = ledger.update(|d| {
                if recorded && let Ok(back) = &rollback {
                    d.changes.extend(back.iter().cloned());
                }
                let e = entry_mut(d, &id)?;
                if rollback.is_ok() {
                    e.phase = FaultPhase::Failed;
                    e.cleared_at_ms = Some(now_ms());
                }
                e.error = Some(error_chain(&err));
                Ok(())
            });
            match rollback {
                Ok(_) => Err(err),
                // Each with its causes: the runtime's own error is the source of a FaultError::Runtime,
                // which alone says only what was being done.
                Err(rb) => Err(FaultError::NotRestored {
                    id,
                    why: format!(
                        "{}; then rollback failed: {}",
                        error_chain(&err),
                        error_chain(&rb)
                    ),
                }),
            }
        }
    }
}

type Proven = (Option<DelayPath>, String, Vec<ChangeRecord>);

/// Why an inject did not take: the error, and whether the apply's changes were already on record.
struct Unproven {
    err: FaultError,
    recorded: bool,
}

/// Applies the fault, puts its changes on record at once, then proves it.
///
/// The changes are in force from the moment the apply returns, and a proof may take seconds (a rank's
/// first crash, a server's latency over several CFS periods): whatever reads the ledger meanwhile (the
/// lab's watcher, a drill's snapshots and the incident bundle cut from them when the signals fire before
/// the proof returns) must see them, or it shows the fault's effect without its cause.
async fn apply_and_prove(k: &dyn Injector, cx: &Cx<'_>, status: &LabStatus) -> Result<Proven, Unproven> {
    let mut applied = k
        .apply(cx, status)
        .await
        .map_err(|err| Unproven { err, recorded: false })?;
    cx.ledger
        .record(applied.changes.clone())
        .map_err(|err| Unproven { err, recorded: false })?;
    let proof = k
        .prove(cx, status, &mut applied)
        .await
        .map_err(|err| Unproven { err, recorded: true })?;
    Ok((applied.path, proof, applied.changes))
}

/// Replaces each change record put on record at the apply with its proven form (a proof may add to its
/// note, or read back a value), keeping whatever else the ledger says of it (on whose behalf it was made).
fn settle_records(records: &mut [ChangeRecord], proven: &[ChangeRecord]) {
    for p in proven {
        let same = |c: &&mut ChangeRecord| {
            c.fault_id == p.fault_id && c.at_ms == p.at_ms && c.target == p.target && c.what == p.what
        };
        if let Some(c) = records.iter_mut().rev().find(same) {
            c.before.clone_from(&p.before);
            c.after.clone_from(&p.after);
            c.note.clone_from(&p.note);
        }
    }
}

/// Puts back the values recorded in entry `id`'s `before`, and checks they are back.
async fn recover(rt: &dyn Runtime, ledger: &Ledger, id: &str) -> Result<Vec<ChangeRecord>, FaultError> {
    let entry = ledger
        .read()?
        .faults
        .into_iter()
        .find(|e| e.id == id)
        .ok_or_else(|| FaultError::NotFound(id.into()))?;
    if entry.before == Before::Unknown {
        return Ok(Vec::new());
    }
    let cx = Cx {
        rt,
        ledger,
        id,
        fault: &entry.fault,
    };
    injector(&entry.fault).recover(&cx, &entry.before).await
}

/// Finds the active entry named by `which`: its id, or its kind when exactly one of that kind is active.
fn find_active(ledger: &Ledger, which: &str) -> Result<Option<Entry>, FaultError> {
    let d = ledger.read()?;
    if let Some(e) = d.faults.iter().find(|e| e.id == which) {
        return Ok(e.phase.is_active().then(|| e.clone()));
    }
    if let Ok(kind) = FaultKind::parse(which) {
        return Ok(d.active().find(|e| e.fault.kind() == kind).cloned());
    }
    Err(FaultError::NotFound(which.to_string()))
}

/// Clears fault `which` (an id like `slow-storage-1`, or a kind with one active fault), restoring exactly
/// the values from before. Clearing a fault that is already cleared succeeds and changes nothing.
/// Returns the entry as it ends, or `None` when there was nothing to clear.
///
/// # Errors
/// [`FaultError::NotFound`] for an unknown id; the runtime's error or [`FaultError::NotRestored`].
pub async fn clear(rt: &dyn Runtime, ledger: &Ledger, which: &str) -> Result<Option<Entry>, FaultError> {
    let Some(entry) = find_active(ledger, which)? else {
        return Ok(None);
    };
    let id = entry.id.clone();
    ledger.update(|d| {
        entry_mut(d, &id)?.phase = FaultPhase::Clearing;
        Ok(())
    })?;
    let changes = recover(rt, ledger, &id).await?;
    let e = ledger.update(|d| {
        d.changes.extend(changes);
        let e = entry_mut(d, &id)?;
        e.phase = FaultPhase::Cleared;
        e.cleared_at_ms = Some(now_ms());
        Ok(e.clone())
    })?;
    Ok(Some(e))
}

/// Clears every active fault. Returns the cleared entries; the first error stops nothing, all are tried.
///
/// # Errors
/// The errors of the faults that could not be cleared, joined.
pub async fn clear_all(rt: &dyn Runtime, ledger: &Ledger) -> Result<Vec<Entry>, FaultError> {
    let ids: Vec<String> = ledger.read()?.active().map(|e| e.id.clone()).collect();
    let mut done = Vec::new();
    let mut errors = Vec::new();
    for id in ids {
        match clear(rt, ledger, &id).await {
            Ok(Some(e)) => done.push(e),
            Ok(None) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    if errors.is_empty() {
        Ok(done)
    } else {
        Err(FaultError::NotRestored {
            id: "--all".into(),
            why: errors.join("; "),
        })
    }
}

/// The CPU quantity as a person reads it in messages.
pub fn cpu_text(m: Option<Millicores>) -> String {
    m.map_or_else(|| "unknown".into(), |m| m.to_string())
}
