//! Whatever a drill injected is cleared: by its own cleanup, or by the [`Guard`] when the drill is
//! interrupted. Both clear only the faults injected since the drill began, never an older one.

use std::sync::{Arc, Mutex};

use nix::sys::signal::Signal;

use super::Lab;
use lab_agents::command::{self, GroupSlot};

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
        let swept = sweep(&self.lab, since).await;
        out.extend(swept.cleared.iter().map(|c| format!("cleared {c}")));
        out.extend(swept.undrained);
        out.extend(swept.failed);
        self.disarm();
        out
    }
}

/// What a sweep did, and what it could not do.
#[derive(Debug, Default)]
struct Swept {
    /// The faults cleared, as `<id> (<fault>)`.
    cleared: Vec<String>,
    /// One line per server undrained.
    undrained: Vec<String>,
    /// One line per thing that failed, with the command that finishes it by hand.
    failed: Vec<String>,
}

/// Clears every fault injected into `lab` since `since_ms`, then moves back the volumes of every server a
/// remediation drained since (`lab storage drain`, a fix that moves the job's data: left in place, the
/// drill's next run would inject into a server no rank reads). Best effort: a failure is noted and the
/// sweep goes on, so one fault that cannot be cleared leaves no other behind.
async fn sweep(lab: &Lab, since_ms: u64) -> Swept {
    let mut s = Swept::default();
    match lab.ledger.read() {
        Ok(d) => {
            let ids: Vec<String> = d
                .active()
                .filter(|e| e.injected_at_ms >= since_ms)
                .map(|e| e.id.clone())
                .collect();
            for id in ids {
                match lab_faults::clear(lab.runtime.as_ref(), &lab.ledger, &id).await {
                    Ok(Some(e)) => s.cleared.push(format!("{} ({})", e.id, e.fault)),
                    Ok(None) => {}
                    Err(e) => s.failed.push(format!(
                        "could not clear {id}: {}; run `lab fault clear --all`",
                        lab_model::format::error_chain(&e)
                    )),
                }
            }
        }
        Err(e) => s.failed.push(format!(
            "cannot read the fault ledger: {e}; run `lab fault clear --all`"
        )),
    }
    match lab_faults::drain::drained_since(&lab.ledger, since_ms) {
        Ok(drained) => {
            for server in drained {
                match lab_faults::drain::undrain(lab.runtime.as_ref(), &lab.ledger, server).await {
                    Ok(r) => s.undrained.push(format!(
                        "storage-{server} undrained ({} volume(s) moved back)",
                        r.moved.len()
                    )),
                    Err(e) => s.failed.push(format!(
                        "could not undrain storage-{server}: {e}; run `lab storage undrain {server}`"
                    )),
                }
            }
        }
        Err(e) => s.failed.push(format!(
            "cannot read the drain record: {e}; run `lab storage undrain N`"
        )),
    }
    s
}

/// [`sweep`] for a drill's own cleanup and its lab-side remediation: what it cleared and moved back, or
/// every failure, joined.
pub(super) async fn clear_ours(lab: &Lab, since_ms: u64) -> Result<Vec<String>, String> {
    let mut s = sweep(lab, since_ms).await;
    if s.failed.is_empty() {
        s.cleared.append(&mut s.undrained);
        Ok(s.cleared)
    } else {
        Err(s.failed.join("; "))
    }
}
