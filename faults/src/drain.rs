//! `lab storage drain N` / `lab storage undrain N`: the right fix for a slow storage node. The job's
//! volumes on server N are moved to the healthy servers with SeaweedFS's own tools (the runtime's
//! [`lab_runtime::Storage::move_volume`]); the master then answers lookups with the new place, and the ranks, which
//! look a volume up again when its cached location is old or fails, follow. Undrain moves back exactly
//! the volumes the drain moved.
//!
//! Which volumes a drain moved, and where to, is kept in `drains.json` beside the ledger; each drain and
//! undrain also writes a change record. A refused drain (unknown server, one already drained, the last
//! healthy one) changes nothing: neither the ledger nor the drain record is written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use lab_model::change::ChangeSource;
use lab_model::status::Role;
use lab_model::{ChangeRecord, names};
use lab_runtime::{Runtime, state::now_ms};
use serde::{Deserialize, Serialize};

use crate::{FaultError, Ledger};

/// What one drain moved: `(volume, the server it went to)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drains {
    pub servers: BTreeMap<u32, Vec<(u32, u32)>>,
}

/// What a drain or undrain did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrainReport {
    pub server: u32,
    /// `(volume, from, to)`, in the order moved.
    pub moved: Vec<(u32, u32, u32)>,
    pub seconds: f64,
    pub change: ChangeRecord,
}

/// How a drain's change record's note begins.
const DRAINED: &str = "drained";

/// The servers drained at or after `since_ms` (by the change record of their drain) that are still
/// drained: what a drill's cleanup moves back, so that the drill's next run finds the job's data where
/// this one did.
///
/// # Errors
/// An unreadable ledger or drain record.
pub fn drained_since(ledger: &Ledger, since_ms: u64) -> Result<Vec<u32>, FaultError> {
    let drains = read_drains(ledger)?;
    let changes = ledger.read()?.changes;
    Ok(drains
        .servers
        .keys()
        .copied()
        .filter(|s| {
            changes.iter().any(|c| {
                c.at_ms >= since_ms
                    && c.target == names::storage(*s)
                    && c.note.as_deref().is_some_and(|n| n.starts_with(DRAINED))
            })
        })
        .collect())
}

fn drains_path(ledger: &Ledger) -> PathBuf {
    ledger.dir().join("drains.json")
}

fn read_drains(ledger: &Ledger) -> Result<Drains, FaultError> {
    let p = drains_path(ledger);
    match std::fs::read(&p) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| FaultError::Ledger {
            path: p.display().to_string(),
            what: format!("unreadable drain record: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Drains::default()),
        Err(e) => Err(FaultError::Ledger {
            path: p.display().to_string(),
            what: e.to_string(),
        }),
    }
}

fn write_drains(ledger: &Ledger, d: &Drains) -> Result<(), FaultError> {
    let p = drains_path(ledger);
    let bytes = serde_json::to_vec_pretty(d).map_err(|e| FaultError::Invalid(e.to_string()))?;
    lab_runtime::state::write_atomic(&p, &bytes).map_err(|e| FaultError::Ledger {
        path: p.display().to_string(),
        what: e.to_string(),
    })
}

fn list(v: &[u32]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

fn change(target: String, before: String, after: String, note: String) -> ChangeRecord {
    ChangeRecord {
        at_ms: now_ms(),
        source: ChangeSource::Remediation,
        target,
        what: "volumes".into(),
        before,
        after,
        note: Some(note),
        fault_id: None,
        by: None,
    }
}

/// Which servers may take volumes when `server` is drained: the Ready ones not drained and not `server`.
///
/// # Errors
/// [`FaultError::Invalid`] for an unknown or already drained server, or when none is left to take them.
pub fn drain_targets(
    status: &lab_model::status::LabStatus,
    drains: &Drains,
    server: u32,
) -> Result<Vec<u32>, FaultError> {
    if server >= status.storage_servers {
        return Err(FaultError::Invalid(format!(
            "storage-{server} does not exist: this lab has storage-0 to storage-{}",
            status.storage_servers.saturating_sub(1)
        )));
    }
    if drains.servers.contains_key(&server) {
        return Err(FaultError::Invalid(format!(
            "storage-{server} is already drained: `lab storage undrain {server}` moves its volumes back"
        )));
    }
    let healthy: Vec<u32> = (0..status.storage_servers)
        .filter(|s| *s != server && !drains.servers.contains_key(s))
        .filter(|s| {
            status
                .pods
                .iter()
                .any(|p| p.role == Role::StorageServer && p.index == Some(*s) && p.is_running_ready())
        })
        .collect();
    if healthy.is_empty() {
        return Err(FaultError::Invalid(format!(
            "storage-{server} is the last healthy storage server: draining it would leave the job's data \
             nowhere (undrain another server first)"
        )));
    }
    Ok(healthy)
}

/// `lab storage drain N`: moves every volume off server `server`, each to the healthy server holding
/// the fewest.
///
/// # Errors
/// [`FaultError::Invalid`] (nothing changed) as [`drain_targets`] says; the runtime's error when a move
/// fails (the volumes moved until then are recorded, so undrain can bring them back).
pub async fn drain(rt: &dyn Runtime, ledger: &Ledger, server: u32) -> Result<DrainReport, FaultError> {
    let status = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    let mut drains = read_drains(ledger)?;
    let targets = drain_targets(&status, &drains, server)?;
    let started = Instant::now();
    let vols = rt
        .storage_volumes(server)
        .await
        .map_err(FaultError::runtime(format!("listing storage-{server}'s volumes")))?;
    let mut load = BTreeMap::new();
    for t in &targets {
        let n = rt
            .storage_volumes(*t)
            .await
            .map_err(FaultError::runtime(format!("listing storage-{t}'s volumes")))?
            .len();
        load.insert(*t, n);
    }
    let mut moved = Vec::new();
    let mut result = Ok(());
    for v in &vols {
        let to = *targets
            .iter()
            .min_by_key(|t| (load[*t], **t))
            .expect("targets is not empty");
        if let Err(e) = rt.move_volume(*v, server, to).await {
            result = Err(FaultError::runtime(format!(
                "moving volume {v} from storage-{server} to storage-{to}"
            ))(e));
            break;
        }
        *load.entry(to).or_default() += 1;
        moved.push((*v, to));
    }
    let result = match result {
        // Nothing moved: the server is not drained, and there is nothing to record.
        Err(e) if moved.is_empty() => return Err(e),
        r => r,
    };
    drains.servers.insert(server, moved.clone());
    write_drains(ledger, &drains)?;
    let seconds = started.elapsed().as_secs_f64();
    let c = change(
        names::storage(server),
        list(&vols),
        list(
            &vols
                .iter()
                .filter(|v| !moved.iter().any(|(m, _)| m == *v))
                .copied()
                .collect::<Vec<_>>(),
        ),
        format!(
            "{DRAINED} in {seconds:.1} s: {}",
            if moved.is_empty() {
                "it held no volumes".to_string()
            } else {
                moved
                    .iter()
                    .map(|(v, t)| format!("{v} → storage-{t}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
    );
    ledger.record(vec![c.clone()])?;
    result?;
    Ok(DrainReport {
        server,
        moved: moved.into_iter().map(|(v, t)| (v, server, t)).collect(),
        seconds,
        change: c,
    })
}

/// `lab storage undrain N`: moves back to server `server` the volumes its drain moved away.
///
/// # Errors
/// [`FaultError::Invalid`] (nothing changed) for an unknown server or one that is not drained; the
/// runtime's error when a move fails (the drain record then keeps the volumes not yet back).
pub async fn undrain(rt: &dyn Runtime, ledger: &Ledger, server: u32) -> Result<DrainReport, FaultError> {
    let status = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    if server >= status.storage_servers {
        return Err(FaultError::Invalid(format!(
            "storage-{server} does not exist: this lab has storage-0 to storage-{}",
            status.storage_servers.saturating_sub(1)
        )));
    }
    let mut drains = read_drains(ledger)?;
    let Some(moved) = drains.servers.get(&server).cloned() else {
        return Err(FaultError::Invalid(format!(
            "storage-{server} is not drained: nothing to move back"
        )));
    };
    let started = Instant::now();
    let mut back = Vec::new();
    let mut result = Ok(());
    for (v, from) in &moved {
        let holds = rt
            .storage_volumes(*from)
            .await
            .map_err(FaultError::runtime(format!("listing storage-{from}'s volumes")))?;
        if holds.contains(v)
            && let Err(e) = rt.move_volume(*v, *from, server).await
        {
            result = Err(FaultError::runtime(format!(
                "moving volume {v} back from storage-{from} to storage-{server}"
            ))(e));
            break;
        }
        back.push((*v, *from, server));
    }
    let left: Vec<(u32, u32)> = moved
        .iter()
        .filter(|(v, _)| !back.iter().any(|(b, _, _)| b == v))
        .copied()
        .collect();
    if left.is_empty() {
        drains.servers.remove(&server);
    } else {
        drains.servers.insert(server, left);
    }
    write_drains(ledger, &drains)?;
    let seconds = started.elapsed().as_secs_f64();
    let c = change(
        names::storage(server),
        "drained".into(),
        list(&back.iter().map(|(v, _, _)| *v).collect::<Vec<_>>()),
        format!("undrained in {seconds:.1} s"),
    );
    ledger.record(vec![c.clone()])?;
    result?;
    Ok(DrainReport {
        server,
        moved: back,
        seconds,
        change: c,
    })
}
