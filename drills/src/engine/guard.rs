//! Whatever a drill injected is cleared: by its own cleanup, or by the [`Guard`] when the drill is
//! interrupted. Both clear only the faults injected since the drill began, never an older one.

use std::sync::{Arc, Mutex};

use lab_faults::FaultError;
use nix::sys::signal::Signal;

use super::Lab;
use crate::command::{self, GroupSlot};

/// Clears what a drill injected, and ends its remediation command, when the drill is interrupted.
#[derive(Debug, Clone)]
pub struct Guard {
    lab: Lab,
    since_ms: Arc<Mutex<Option<u64>>>,
    pub(super) group: GroupSlot,
}

impl Guard {
    /// A guard for drills on `lab`.
    pub fn new(lab: Lab) -> Self {
        Guard {
            lab,
            since_ms: Arc::default(),
            group: GroupSlot::default(),
        }
    }

    pub(super) fn arm(&self, since_ms: u64) {
        *self.since_ms.lock().unwrap_or_else(|p| p.into_inner()) = Some(since_ms);
    }

    pub(super) fn disarm(&self) {
        *self.since_ms.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Ends a running remediation command, clears every fault injected since the current drill began and
    /// moves back the volumes of every server drained since. Returns one line per thing done or failed.
    pub async fn abort(&self) -> Vec<String> {
        let mut out = Vec::new();
        let pg = *self.group.lock().unwrap_or_else(|p| p.into_inner());
        if pg.is_some() {
            command::signal_group(pg, Signal::SIGKILL);
            out.push("stopped the remediation command".to_string());
        }
        let Some(since) = *self.since_ms.lock().unwrap_or_else(|p| p.into_inner()) else {
            return out;
        };
        let ids: Vec<String> = match self.lab.ledger.read() {
            Ok(d) => d
                .active()
                .filter(|e| e.injected_at_ms >= since)
                .map(|e| e.id.clone())
                .collect(),
            Err(e) => {
                out.push(format!(
                    "cannot read the fault ledger: {e}; run `lab fault clear --all`"
                ));
                return out;
            }
        };
        for id in ids {
            match lab_faults::clear(self.lab.runtime.as_ref(), &self.lab.ledger, &id).await {
                Ok(_) => out.push(format!("cleared {id}")),
                Err(e) => out.push(format!("could not clear {id}: {e}; run `lab fault clear --all`")),
            }
        }
        // A remediation interrupted after its drain: move the volumes back, as the cleanup does.
        let drained = match lab_faults::drain::drained_since(&self.lab.ledger, since) {
            Ok(d) => d,
            Err(e) => {
                out.push(format!(
                    "cannot read the drain record: {e}; run `lab storage undrain N`"
                ));
                vec![]
            }
        };
        for server in drained {
            match lab_faults::drain::undrain(self.lab.runtime.as_ref(), &self.lab.ledger, server).await {
                Ok(r) => out.push(format!(
                    "storage-{server} undrained ({} volume(s) moved back)",
                    r.moved.len()
                )),
                Err(e) => out.push(format!(
                    "could not undrain storage-{server}: {e}; run `lab storage undrain {server}`"
                )),
            }
        }
        self.disarm();
        out
    }
}

/// Clears every fault injected into `lab` since `since_ms`, then moves back the volumes of every server a
/// remediation drained since (`lab storage drain`, a fix that moves the job's data: left in place, the
/// drill's next run would inject into a server no rank reads); returns what it cleared and moved back.
pub(super) async fn clear_ours(lab: &Lab, since_ms: u64) -> Result<Vec<String>, FaultError> {
    let ids: Vec<String> = lab
        .ledger
        .read()?
        .active()
        .filter(|e| e.injected_at_ms >= since_ms)
        .map(|e| e.id.clone())
        .collect();
    let mut done = Vec::new();
    for id in ids {
        if let Some(e) = lab_faults::clear(lab.runtime.as_ref(), &lab.ledger, &id).await? {
            done.push(format!("{} ({})", e.id, e.fault));
        }
    }
    for server in lab_faults::drain::drained_since(&lab.ledger, since_ms)? {
        let r = lab_faults::drain::undrain(lab.runtime.as_ref(), &lab.ledger, server).await?;
        done.push(format!(
            "storage-{server} undrained ({} volume(s) moved back)",
            r.moved.len()
        ));
    }
    Ok(done)
}
