//! The ledger: every fault's phase and the values it replaced, and every change made to the lab (by a
//! fault, a clear or a remediation), kept in the lab's directory.
//!
//! An entry is written *before* a fault is applied (phase `injecting`), so a crash or Ctrl-C mid-inject
//! still leaves a record that `lab fault clear --all` and `lab down` act on. Writers hold an exclusive
//! lock for each read-modify-write, so the console and the CLI can inject at the same time.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};

use lab_model::ChangeRecord;
use lab_model::Millicores;
use lab_model::snapshot::ActiveFault;
use lab_runtime::{Delay, DelayPath};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::{Fault, FaultError};

/// How many finished entries and change records the ledger keeps.
const HISTORY: usize = 500;

/// Where a fault is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultPhase {
    /// Recorded, being applied.
    Injecting,
    /// Applied and proven.
    Injected,
    /// Being cleared.
    Clearing,
    /// Cleared: the values from before are back.
    Cleared,
    /// Applying or proving failed; what was applied was rolled back.
    Failed,
}

impl FaultPhase {
    /// True while something of the fault may be applied.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            FaultPhase::Injecting | FaultPhase::Injected | FaultPhase::Clearing
        )
    }
}

/// The values a fault replaced, to be restored exactly by clearing it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Before {
    /// Not read yet (the entry was recorded before the runtime was asked).
    Unknown,
    /// The delay on the server's path (normally none).
    Delay { delay: Option<Delay> },
    /// The rank's live CPU limit.
    Cpu { cpu: Millicores },
    /// The ranks asked for and the world size.
    Ranks { ranks: u32, world_size: u32 },
    /// The rank's training thread ran (was not frozen).
    Running,
    /// Setting `name` of one rank alone (`None`: unset).
    RankEnv { name: String, value: Option<String> },
    /// Nothing ran beside the ranks; `started` lists the `(rank, pid)` of each process the fault
    /// started there, once started (what recover stops).
    Beside { started: Vec<(u32, u32)> },
    /// No foreign job of this name ran: clearing stops it.
    NoJob { name: String },
    /// A storage server's own CPU limit (normally none).
    StorageCpu { cpu: Option<Millicores> },
    /// The database standby's template (node selector) and the primary's `synchronous_standby_names`.
    Database {
        node_selector: std::collections::BTreeMap<String, String>,
        synchronous_standby_names: String,
    },
}

/// One fault's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `slow-storage-1`, `throttled-rank-2`, ...: the kind and a number unique in this lab.
    pub id: String,
    pub fault: Fault,
    pub phase: FaultPhase,
    pub injected_at_ms: u64,
    pub cleared_at_ms: Option<u64>,
    pub before: Before,
    /// How a storage delay was applied (proxy or netem).
    pub path: Option<DelayPath>,
    /// What was measured to prove the fault took effect.
    pub proof: Option<String>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// When the fault clears itself (`lab fault inject … --for 60s`), ms since the Unix epoch: the lab's
    /// watcher clears it then, and a watcher started later still does, since the time is kept here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

impl Entry {
    /// Whether the fault is injected and its lifetime is over at `now_ms`.
    pub fn expired(&self, now_ms: u64) -> bool {
        self.phase == FaultPhase::Injected && self.expires_at_ms.is_some_and(|at| at <= now_ms)
    }
}

/// What the ledger file holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LedgerData {
    pub next_id: u64,
    pub faults: Vec<Entry>,
    pub changes: Vec<ChangeRecord>,
}

impl LedgerData {
    /// The entries that may still have something applied.
    pub fn active(&self) -> impl Iterator<Item = &Entry> {
        self.faults.iter().filter(|e| e.phase.is_active())
    }

    /// Drops the oldest finished entries and changes beyond the history bound.
    fn trim(&mut self) {
        while self.faults.len() > HISTORY {
            match self.faults.iter().position(|e| !e.phase.is_active()) {
                Some(i) => {
                    self.faults.remove(i);
                }
                None => break,
            }
        }
        if self.changes.len() > HISTORY {
            let drop = self.changes.len() - HISTORY;
            self.changes.drain(..drop);
        }
    }
}

/// The ledger of one lab.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
    lock: PathBuf,
    /// On whose behalf this handle's changes are made; see [`Ledger::acting_for`].
    by: Option<String>,
}

impl Ledger {
    /// The ledger in lab directory `dir`.
    pub fn in_dir(dir: &Path) -> Ledger {
        Ledger {
            path: dir.join("ledger.json"),
            lock: dir.join("ledger.lock"),
            by: None,
        }
    }

    /// This ledger, with every change record made through it said to be made on behalf of `by` (e.g.
    /// `remediation 1`). A handle without one takes [`lab_model::change::CHANGE_BY_ENV`] from the
    /// environment, so a `lab` command run by a drill's remediation marks its changes as that
    /// remediation's.
    #[must_use]
    pub fn acting_for(mut self, by: impl Into<String>) -> Ledger {
        self.by = Some(by.into());
        self
    }

    /// On whose behalf changes made through this handle are made, if anyone said.
    fn by(&self) -> Option<String> {
        self.by.clone().or_else(|| {
            std::env::var(lab_model::change::CHANGE_BY_ENV)
                .ok()
                .map(|v| v.trim().chars().take(64).collect::<String>())
                .filter(|v| !v.is_empty())
        })
    }

    /// The ledger of lab `name`.
    pub fn of_lab(name: &str) -> Ledger {
        Ledger::in_dir(&lab_runtime::state::lab_dir(name))
    }

    /// The folder the ledger lives in (the lab's directory): records that belong beside it, such as
    /// which volumes `lab storage drain` moved, are kept there.
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or_else(|| Path::new("."))
    }

    fn err(&self, what: impl Into<String>) -> FaultError {
        FaultError::Ledger {
            path: self.path.display().to_string(),
            what: what.into(),
        }
    }

    /// Reads the ledger; a missing file is an empty ledger.
    ///
    /// # Errors
    /// [`FaultError::Ledger`] when the file is unreadable or corrupt.
    pub fn read(&self) -> Result<LedgerData, FaultError> {
        match fs::read(&self.path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                self.err(format!(
                    "corrupt ({e}); move it aside to start a fresh ledger after checking nothing is injected"
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(LedgerData::default()),
            Err(e) => Err(self.err(format!("unreadable: {e}"))),
        }
    }

    /// Reads, changes and writes the ledger under its lock. Nothing is written if `f` fails.
    ///
    /// # Errors
    /// What `f` returns, or [`FaultError::Ledger`] on I/O errors.
    pub fn update<T>(
        &self,
        f: impl FnOnce(&mut LedgerData) -> Result<T, FaultError>,
    ) -> Result<T, FaultError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .map_err(|e| self.err(format!("cannot open the lock file: {e}")))?;
        let _guard: Flock<File> = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, e)| self.err(format!("cannot lock: {e}")))?;
        let mut data = self.read()?;
        let known = data.changes.len();
        let out = f(&mut data)?;
        // Records are only ever appended: the new ones are those past the ones read.
        if let Some(by) = self.by() {
            for c in data.changes.iter_mut().skip(known).filter(|c| c.by.is_none()) {
                c.by = Some(by.clone());
            }
        }
        data.trim();
        let bytes = serde_json::to_vec_pretty(&data).map_err(|e| self.err(e.to_string()))?;
        lab_runtime::state::write_atomic(&self.path, &bytes).map_err(|e| self.err(e.to_string()))?;
        Ok(out)
    }

    /// Appends change records.
    ///
    /// # Errors
    /// [`FaultError::Ledger`] on I/O errors.
    pub fn record(&self, changes: Vec<ChangeRecord>) -> Result<(), FaultError> {
        self.update(|d| {
            d.changes.extend(changes);
            Ok(())
        })
    }

    /// The change records and active faults, as the telemetry snapshot wants them. A broken ledger reads
    /// as empty here: the console must keep running.
    pub fn view(&self) -> (Vec<ChangeRecord>, Vec<ActiveFault>) {
        let Ok(d) = self.read() else {
            return (Vec::new(), Vec::new());
        };
        let active = d
            .active()
            .map(|e| ActiveFault {
                id: e.id.clone(),
                kind: e.fault.kind().name().to_string(),
                target: e.fault.target(),
                phase: format!("{:?}", e.phase).to_lowercase(),
            })
            .collect();
        (d.changes, active)
    }
}

/// The entry of fault `id` in `d`.
///
/// # Errors
/// [`FaultError::NotFound`] when no fault has that id.
pub(crate) fn entry_mut<'a>(d: &'a mut LedgerData, id: &str) -> Result<&'a mut Entry, FaultError> {
    d.faults
        .iter_mut()
        .find(|e| e.id == id)
        .ok_or_else(|| FaultError::NotFound(id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_acting_for_someone_marks_the_changes_it_adds_and_only_those() {
        let t = tempfile::tempdir().unwrap();
        let change = |after: &str| ChangeRecord {
            at_ms: 1,
            source: lab_model::change::ChangeSource::Remediation,
            target: "ranks".into(),
            what: "replicas".into(),
            before: "5".into(),
            after: after.into(),
            note: None,
            fault_id: None,
            by: None,
        };
        Ledger::in_dir(t.path()).record(vec![change("4")]).unwrap();
        let fix = Ledger::in_dir(t.path()).acting_for("remediation 1");
        fix.record(vec![change("5")]).unwrap();
        let by: Vec<Option<String>> = fix.read().unwrap().changes.into_iter().map(|c| c.by).collect();
        assert_eq!(by, [None, Some("remediation 1".to_string())]);
        // What a record already says is kept.
        fix.record(vec![ChangeRecord {
            by: Some("alice".into()),
            ..change("6")
        }])
        .unwrap();
        assert_eq!(fix.read().unwrap().changes[2].by.as_deref(), Some("alice"));
    }

    #[test]
    fn update_is_atomic_and_failed_updates_write_nothing() {
        let t = tempfile::tempdir().unwrap();
        let l = Ledger::in_dir(t.path());
        assert_eq!(l.read().unwrap(), LedgerData::default());
        l.update(|d| {
            d.next_id = 7;
            Ok(())
        })
        .unwrap();
        let before = fs::read(t.path().join("ledger.json")).unwrap();
        let r: Result<(), _> = l.update(|d| {
            d.next_id = 99;
            Err(FaultError::Invalid("no".into()))
        });
        assert!(r.is_err());
        assert_eq!(fs::read(t.path().join("ledger.json")).unwrap(), before);
        assert_eq!(l.read().unwrap().next_id, 7);
    }

    #[test]
    fn a_corrupt_ledger_is_an_error_not_a_panic() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("ledger.json"), b"{not json").unwrap();
        let l = Ledger::in_dir(t.path());
        assert!(l.read().unwrap_err().to_string().contains("corrupt"));
        assert_eq!(l.view(), (Vec::new(), Vec::new()));
    }
}
