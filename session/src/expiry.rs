//! Faults with a lifetime (`lab fault inject … --for 60s`): the lab's watcher clears each one when its
//! time is up, whether or not the command that injected it still runs. The time is in the fault's ledger
//! entry, so a watcher started later (after a crash, or a new `lab up` of the same lab) still honours it;
//! one that finds the time already passed clears the fault at once.

use std::time::Duration;

use lab_faults::Entry;

use crate::{Lab, Result};

/// Whose action a clear at the end of a fault's lifetime is, in the change log (`by`).
pub const WATCHER_BY: &str = "watcher";

/// How often the watcher looks for faults whose time is up.
pub const EVERY: Duration = Duration::from_secs(1);

impl Lab {
    /// Clears every fault whose lifetime is over at `now_ms`, each recorded as the watcher's change.
    /// Returns what was cleared and what could not be (each error says which fault).
    pub async fn clear_expired(&self, now_ms: u64) -> Vec<Result<Entry>> {
        let Ok(data) = self.ledger.read() else {
            return Vec::new();
        };
        let ledger = self.ledger.clone().acting_for(WATCHER_BY);
        let mut done = Vec::new();
        for e in data.faults.iter().filter(|e| e.expired(now_ms)) {
            match lab_faults::clear(self.runtime.as_ref(), &ledger, &e.id).await {
                Ok(Some(cleared)) => done.push(Ok(cleared)),
                // Cleared by someone else in the meantime.
                Ok(None) => {}
                Err(err) => done.push(Err(err.into())),
            }
        }
        done
    }

    /// The watcher's loop for faults with a lifetime: every [`EVERY`], clear those whose time is up,
    /// saying what it did on stderr (the watcher's log). Runs until dropped.
    pub async fn expire_faults(&self) {
        let mut every = tokio::time::interval(EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            every.tick().await;
            for r in self.clear_expired(lab_runtime::state::now_ms()).await {
                match r {
                    Ok(e) => eprintln!("watcher: cleared {} ({}): its time was up", e.id, e.fault),
                    Err(e) => eprintln!(
                        "watcher: a fault whose time was up could not be cleared: {}; retrying",
                        lab_model::format::error_chain(&e)
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use lab_faults::{Fault, FaultPhase, Ledger};
    use lab_model::Millicores;
    use lab_runtime::testing::FakeRuntime;

    use super::*;

    #[tokio::test]
    async fn a_fault_is_cleared_by_the_watcher_once_its_time_is_up_and_not_before() {
        let dir = tempfile::tempdir().unwrap();
        let rt = Arc::new(FakeRuntime::new());
        let lab = Lab::with_parts("t", rt.clone(), Ledger::in_dir(dir.path()));
        let fault = Fault::ThrottledRank(lab_model::fault::ThrottledRank {
            rank: 1,
            cpu: Millicores(150),
        });
        let done = lab_faults::inject_for(rt.as_ref(), lab.ledger(), fault, Some(Duration::from_secs(60)))
            .await
            .unwrap();
        let at = done.entry.expires_at_ms.expect("an expiry");
        let now = lab_runtime::state::now_ms();
        assert!((now + 59_000..=now + 60_000).contains(&at), "{at} vs {now}");
        assert!(lab.clear_expired(at - 1).await.is_empty(), "not before its time");
        // A watcher that reads the ledger later (a restarted one) clears it all the same.
        let later = Lab::with_parts("t", rt.clone(), Ledger::in_dir(dir.path()));
        let cleared = later.clear_expired(at).await;
        assert_eq!(cleared.len(), 1);
        let e = cleared.into_iter().next().unwrap().unwrap();
        assert_eq!(e.phase, FaultPhase::Cleared);
        let data = lab.ledger().read().unwrap();
        let by_watcher: Vec<_> = data
            .changes
            .iter()
            .filter(|c| c.fault_id.as_deref() == Some(e.id.as_str()))
            .map(|c| c.by.as_deref())
            .collect();
        // The inject's change is nobody's in particular; the clear's is the watcher's.
        assert_eq!(by_watcher.first(), Some(&None));
        assert_eq!(by_watcher.last(), Some(&Some(WATCHER_BY)));
        assert!(!rt.state().cpu_live.contains_key(&1) || rt.state().cpu_live[&1] == Millicores(400));
        assert!(lab.clear_expired(at + 10_000).await.is_empty(), "once");
    }
}
