//! Inject, prove, clear: the fault engine over the runtime's actions.

use std::time::{Duration, Instant};

use lab_model::change::ChangeSource;
use lab_model::quantity::format_duration;
use lab_model::status::{LabStatus, Phase};
use lab_model::{ChangeRecord, Millicores, metrics, names};
use lab_runtime::{Delay, DelayPath, Runtime, state::now_ms};

use crate::ledger::{Before, Entry, FaultPhase, Ledger};
use crate::{Fault, FaultError, FaultKind};

/// A fault that was applied and proven.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub entry: Entry,
    pub changes: Vec<ChangeRecord>,
}

/// How long a fault may take to show its effect before the inject reports that it did not.
const PROOF_DEADLINE: Duration = Duration::from_secs(90);

/// Checks a fault against the lab as it is now. Nothing is changed.
///
/// # Errors
/// [`FaultError::Invalid`] saying what does not fit.
pub fn check(fault: &Fault, status: &LabStatus) -> Result<(), FaultError> {
    fault.validate()?;
    match fault {
        Fault::SlowStorage { server, .. } => {
            if *server >= status.storage_servers {
                return Err(FaultError::Invalid(format!(
                    "--server {server} is out of range: this lab has storage-0 to storage-{}",
                    status.storage_servers.saturating_sub(1)
                )));
            }
        }
        Fault::ThrottledRank { rank, cpu } => {
            let pod = status.ranks().find(|p| p.index == Some(*rank)).ok_or_else(|| {
                FaultError::Invalid(format!(
                    "--rank {rank} is out of range: this lab has rank-0 to rank-{}",
                    status.ranks_desired.saturating_sub(1)
                ))
            })?;
            if pod.phase != Phase::Running {
                return Err(FaultError::Invalid(format!(
                    "rank-{rank} is {}, not Running: nothing to throttle",
                    pod.phase
                )));
            }
            if pod.resources.cpu_live.is_none() {
                let why = status
                    .notes
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "its CPU limit cannot be read".into());
                return Err(FaultError::Invalid(format!(
                    "rank-{rank} has no enforced CPU limit: {why}"
                )));
            }
            if pod.resources.cpu_live == Some(*cpu) {
                return Err(FaultError::Invalid(format!(
                    "rank-{rank} already runs at {cpu}: pick a lower --cpu"
                )));
            }
        }
        Fault::UnplaceableRank { ranks } => {
            if *ranks <= status.ranks_desired {
                return Err(FaultError::Invalid(format!(
                    "--ranks {ranks} is not above the current {} ranks: give more ranks than the job has",
                    status.ranks_desired
                )));
            }
            if *ranks <= status.gpus_capacity {
                return Err(FaultError::Invalid(format!(
                    "--ranks {ranks} fits on the node's {} GPUs, so no rank would be unplaceable: use --ranks {}",
                    status.gpus_capacity,
                    status.gpus_capacity + 1
                )));
            }
        }
    }
    Ok(())
}

/// Injects `fault`, proves it took effect, and records it. If it cannot be proven, what was applied is
/// rolled back and the error says what was measured.
///
/// # Errors
/// [`FaultError::Invalid`] / [`FaultError::AlreadyInjected`] before anything changes; otherwise the
/// runtime's error or [`FaultError::NotProven`] (after rollback).
pub async fn inject(rt: &dyn Runtime, ledger: &Ledger, fault: Fault) -> Result<Injected, FaultError> {
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
        });
        Ok(id)
    })?;

    match apply_and_prove(rt, ledger, &id, &fault, &status).await {
        Ok((path, proof, changes)) => {
            let entry = ledger.update(|d| {
                d.changes.extend(changes.iter().cloned());
                let e = entry_mut(d, &id)?;
                e.phase = FaultPhase::Injected;
                e.path = path;
                e.proof = Some(proof);
                Ok(e.clone())
            })?;
            Ok(Injected { entry, changes })
        }
        Err(err) => {
            // Roll back whatever was applied, then keep the failure on record.
            let rollback = recover(rt, ledger, &id).await;
            let _ = ledger.update(|d| {
                let e = entry_mut(d, &id)?;
                if rollback.is_ok() {
                    e.phase = FaultPhase::Failed;
                    e.cleared_at_ms = Some(now_ms());
                }
                e.error = Some(err.to_string());
                Ok(())
            });
            match rollback {
                Ok(_) => Err(err),
                Err(rb) => Err(FaultError::NotRestored {
                    id,
                    why: format!("{err}; then rollback failed: {rb}"),
                }),
            }
        }
    }
}

fn entry_mut<'a>(d: &'a mut crate::ledger::LedgerData, id: &str) -> Result<&'a mut Entry, FaultError> {
    d.faults
        .iter_mut()
        .find(|e| e.id == id)
        .ok_or_else(|| FaultError::NotFound(id.to_string()))
}

fn change(
    fault_id: &str,
    source: ChangeSource,
    target: String,
    what: &str,
    before: String,
    after: String,
    note: Option<String>,
) -> ChangeRecord {
    ChangeRecord {
        at_ms: now_ms(),
        source,
        target,
        what: what.into(),
        before,
        after,
        note,
        fault_id: Some(fault_id.to_string()),
    }
}

fn delay_text(d: Option<Delay>) -> String {
    match d {
        None => "0 ms".into(),
        Some(d) if d.jitter.is_zero() => format_duration(d.delay),
        Some(d) => format!("{} ± {}", format_duration(d.delay), format_duration(d.jitter)),
    }
}

async fn set_before(ledger: &Ledger, id: &str, before: Before) -> Result<(), FaultError> {
    ledger.update(|d| {
        entry_mut(d, id)?.before = before;
        Ok(())
    })
}

type Applied = (Option<DelayPath>, String, Vec<ChangeRecord>);

async fn apply_and_prove(
    rt: &dyn Runtime,
    ledger: &Ledger,
    id: &str,
    fault: &Fault,
    status: &LabStatus,
) -> Result<Applied, FaultError> {
    match *fault {
        Fault::SlowStorage {
            server,
            delay,
            jitter,
        } => {
            let before = rt
                .storage_delay(server)
                .await
                .map_err(FaultError::runtime("reading the storage delay"))?;
            let siblings: Vec<u32> = (0..status.storage_servers).filter(|s| *s != server).collect();
            let mut sibling_before = Vec::new();
            for s in &siblings {
                sibling_before.push(
                    rt.probe_storage(*s, 3)
                        .await
                        .map_err(FaultError::runtime(format!("probing storage-{s}")))?,
                );
            }
            set_before(ledger, id, Before::Delay { delay: before }).await?;
            let new = Delay { delay, jitter };
            let path = rt
                .set_storage_delay(server, Some(new))
                .await
                .map_err(FaultError::runtime(format!(
                    "adding the delay to storage-{server}"
                )))?;
            let measured = rt
                .probe_storage(server, 5)
                .await
                .map_err(FaultError::runtime(format!("probing storage-{server}")))?;
            let floor = delay.saturating_sub(jitter);
            let mut sibling_after = Vec::new();
            for s in &siblings {
                sibling_after.push(
                    rt.probe_storage(*s, 3)
                        .await
                        .map_err(FaultError::runtime(format!("probing storage-{s}")))?,
                );
            }
            let fmt_list = |v: &[Duration]| {
                v.iter()
                    .map(|d| format_duration(*d))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let proof = format!(
                "storage-{server} answers in {} through its path (set +{} via {path}); siblings {} (before: {})",
                format_duration(measured),
                delay_text(Some(new)),
                fmt_list(&sibling_after),
                fmt_list(&sibling_before)
            );
            if measured < floor {
                return Err(FaultError::NotProven {
                    fault: fault.to_string(),
                    why: proof,
                });
            }
            for (b, a) in sibling_before.iter().zip(&sibling_after) {
                if *a > *b * 3 + Duration::from_millis(20) {
                    return Err(FaultError::NotProven {
                        fault: fault.to_string(),
                        why: format!("a sibling slowed down too: {proof}"),
                    });
                }
            }
            let c = change(
                id,
                ChangeSource::Fault,
                names::storage(server),
                "added delay",
                delay_text(before),
                delay_text(Some(new)),
                Some(format!("via {path}")),
            );
            Ok((Some(path), proof, vec![c]))
        }
        Fault::ThrottledRank { rank, cpu } => {
            let limits = rt
                .cpu_limits(rank)
                .await
                .map_err(FaultError::runtime(format!("reading rank-{rank}'s CPU limit")))?;
            let live = limits
                .live
                .ok_or_else(|| FaultError::Invalid(format!("rank-{rank}'s live CPU limit cannot be read")))?;
            set_before(ledger, id, Before::Cpu { cpu: live }).await?;
            rt.resize_rank(rank, cpu)
                .await
                .map_err(FaultError::runtime(format!("resizing rank-{rank} in place")))?;
            let start = Instant::now();
            loop {
                let now = rt
                    .cpu_limits(rank)
                    .await
                    .map_err(FaultError::runtime(format!("reading rank-{rank}'s CPU limit")))?;
                if now.live == Some(cpu) {
                    let proof = format!(
                        "rank-{rank}'s CPU limit in force reads {cpu} while its template says {}",
                        now.template
                    );
                    let c = change(
                        id,
                        ChangeSource::Fault,
                        names::rank(rank),
                        "cpu limit",
                        live.to_string(),
                        cpu.to_string(),
                        Some(format!("spec {}", now.template)),
                    );
                    return Ok((None, proof, vec![c]));
                }
                if start.elapsed() > PROOF_DEADLINE {
                    return Err(FaultError::NotProven {
                        fault: fault.to_string(),
                        why: format!(
                            "rank-{rank}'s limit in force still reads {:?}",
                            now.live.map(|m| m.to_string())
                        ),
                    });
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        Fault::UnplaceableRank { ranks } => {
            let before = Before::Ranks {
                ranks: status.ranks_desired,
                world_size: status.world_size,
            };
            set_before(ledger, id, before).await?;
            rt.scale_ranks(ranks)
                .await
                .map_err(FaultError::runtime(format!("scaling to {ranks} ranks")))?;
            rt.set_world_size(ranks)
                .await
                .map_err(FaultError::runtime(format!("setting the world size to {ranks}")))?;
            let proof = prove_unplaceable(rt, ranks)
                .await
                .map_err(|why| FaultError::NotProven {
                    fault: fault.to_string(),
                    why,
                })?;
            let changes = vec![
                change(
                    id,
                    ChangeSource::Fault,
                    "ranks".into(),
                    "replicas",
                    status.ranks_desired.to_string(),
                    ranks.to_string(),
                    None,
                ),
                change(
                    id,
                    ChangeSource::Fault,
                    "job config".into(),
                    "world size",
                    status.world_size.to_string(),
                    ranks.to_string(),
                    None,
                ),
            ];
            Ok((None, proof, changes))
        }
    }
}

/// The world size each running rank reports in its metrics.
async fn reported_world_sizes(rt: &dyn Runtime) -> Vec<(String, Option<f64>)> {
    let Ok(targets) = rt.scrape_targets().await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in targets.iter().filter(|t| t.kind == lab_runtime::TargetKind::Rank) {
        let v = match rt.fetch_metrics(t, Duration::from_secs(2)).await {
            Ok(text) => lab_telemetry::expo::parse(&text).ok().and_then(|s| {
                s.into_iter()
                    .find(|s| s.name == metrics::WORLD_SIZE)
                    .map(|s| s.value)
            }),
            Err(_) => None,
        };
        out.push((t.instance.clone(), v));
    }
    out
}

async fn prove_unplaceable(rt: &dyn Runtime, ranks: u32) -> Result<String, String> {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < PROOF_DEADLINE {
        if let Ok(st) = rt.status().await {
            let pending: Vec<_> = st
                .ranks()
                .filter(|p| {
                    p.phase == Phase::Pending
                        && p.reason.as_deref().is_some_and(|r| r.contains("Insufficient"))
                })
                .collect();
            let running: Vec<_> = st.ranks().filter(|p| p.phase == Phase::Running).collect();
            let sizes = reported_world_sizes(rt).await;
            let all_new = !sizes.is_empty()
                && sizes.len() == running.len()
                && sizes.iter().all(|(_, v)| *v == Some(f64::from(ranks)));
            last = format!(
                "{} Pending ({}), {} running ranks reporting world size {:?}",
                pending
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                pending.first().and_then(|p| p.reason.clone()).unwrap_or_default(),
                running.len(),
                sizes
                    .iter()
                    .map(|(n, v)| format!("{n}={}", v.map_or("?".into(), |v| v.to_string())))
                    .collect::<Vec<_>>()
            );
            // The ranks beyond the node's GPUs are the Pending ones, and every rank below them runs: a rank
            // that is only briefly Pending while it restarts does not count.
            let expected: Vec<u32> = (st.gpus_capacity..ranks).collect();
            let pending_idx: Vec<u32> = pending.iter().filter_map(|p| p.index).collect();
            let placed = running.len() as u32 == ranks.min(st.gpus_capacity);
            if pending_idx == expected && placed && all_new && running.iter().all(|p| p.ready) {
                return Ok(format!(
                    "{} Pending ({}); {} running ranks restarted, Ready, and expecting {ranks} peers",
                    pending
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    pending[0].reason.clone().unwrap_or_default(),
                    running.len()
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("after {} s: {last}", PROOF_DEADLINE.as_secs()))
}

/// Puts back the values recorded in entry `id`'s `before`, and checks they are back.
async fn recover(rt: &dyn Runtime, ledger: &Ledger, id: &str) -> Result<Vec<ChangeRecord>, FaultError> {
    let entry = ledger
        .read()?
        .faults
        .into_iter()
        .find(|e| e.id == id)
        .ok_or_else(|| FaultError::NotFound(id.into()))?;
    let mut changes = Vec::new();
    match (&entry.fault, &entry.before) {
        (_, Before::Unknown) => {}
        (Fault::SlowStorage { server, .. }, Before::Delay { delay }) => {
            let now = rt
                .storage_delay(*server)
                .await
                .map_err(FaultError::runtime("reading the storage delay"))?;
            if now != *delay {
                rt.set_storage_delay(*server, *delay)
                    .await
                    .map_err(FaultError::runtime(format!("restoring storage-{server}'s delay")))?;
                changes.push(change(
                    id,
                    ChangeSource::Fault,
                    names::storage(*server),
                    "added delay",
                    delay_text(now),
                    delay_text(*delay),
                    Some("cleared".into()),
                ));
            }
            let back = rt
                .storage_delay(*server)
                .await
                .map_err(FaultError::runtime("reading the storage delay"))?;
            if back != *delay {
                return Err(FaultError::NotRestored {
                    id: id.into(),
                    why: format!("storage-{server} delay reads {}", delay_text(back)),
                });
            }
        }
        (Fault::ThrottledRank { rank, .. }, Before::Cpu { cpu }) => {
            let now = rt.cpu_limits(*rank).await;
            // A rank that was replaced (or scaled away) since came back from its template: nothing to undo.
            if let Ok(now) = now
                && let Some(live) = now.live
                && live != *cpu
            {
                rt.resize_rank(*rank, *cpu)
                    .await
                    .map_err(FaultError::runtime(format!("resizing rank-{rank} back")))?;
                let back = rt
                    .cpu_limits(*rank)
                    .await
                    .map_err(FaultError::runtime("reading the CPU limit"))?;
                if back.live != Some(*cpu) {
                    return Err(FaultError::NotRestored {
                        id: id.into(),
                        why: format!("rank-{rank}'s limit reads {:?}", back.live.map(|m| m.to_string())),
                    });
                }
                changes.push(change(
                    id,
                    ChangeSource::Fault,
                    names::rank(*rank),
                    "cpu limit",
                    live.to_string(),
                    cpu.to_string(),
                    Some("cleared".into()),
                ));
            }
        }
        (Fault::UnplaceableRank { .. }, Before::Ranks { ranks, world_size }) => {
            let st = rt
                .status()
                .await
                .map_err(FaultError::runtime("reading the lab's status"))?;
            if st.world_size != *world_size {
                rt.set_world_size(*world_size)
                    .await
                    .map_err(FaultError::runtime("restoring the world size"))?;
                changes.push(change(
                    id,
                    ChangeSource::Fault,
                    "job config".into(),
                    "world size",
                    st.world_size.to_string(),
                    world_size.to_string(),
                    Some("cleared".into()),
                ));
            }
            if st.ranks_desired != *ranks {
                rt.scale_ranks(*ranks)
                    .await
                    .map_err(FaultError::runtime("restoring the rank count"))?;
                changes.push(change(
                    id,
                    ChangeSource::Fault,
                    "ranks".into(),
                    "replicas",
                    st.ranks_desired.to_string(),
                    ranks.to_string(),
                    Some("cleared".into()),
                ));
            }
            let back = rt
                .status()
                .await
                .map_err(FaultError::runtime("reading the lab's status"))?;
            if back.world_size != *world_size || back.ranks_desired != *ranks {
                return Err(FaultError::NotRestored {
                    id: id.into(),
                    why: format!("ranks {} world size {}", back.ranks_desired, back.world_size),
                });
            }
        }
        (f, b) => {
            return Err(FaultError::Ledger {
                path: "ledger".into(),
                what: format!("entry {id}: {f} has a mismatched before value {b:?}"),
            });
        }
    }
    Ok(changes)
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
