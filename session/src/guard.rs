//! Injecting and clearing faults, with an interrupt that never leaves half a fault: an injection cut
//! short is rolled back from the ledger (every fault still `Injecting` is cleared).

use std::future::Future;

use lab_faults::ledger::{Entry, FaultPhase};
use lab_faults::{Fault, Injected, Ledger};
use lab_runtime::Runtime;

use crate::Lab;
use crate::error::Result;

/// How a guarded operation ended.
#[derive(Debug)]
pub enum Guarded<T> {
    /// It ran to its end.
    Done(T),
    /// It was interrupted; what it had applied was rolled back.
    RolledBack,
}

/// What to clear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Clear {
    /// Every fault the ledger holds as injected.
    All,
    /// One fault by id, or by kind (the newest of that kind).
    One(String),
}

impl Lab {
    /// Injects `fault` and proves it took effect (a failed proof rolls back what was applied).
    ///
    /// # Errors
    /// [`crate::SessionError::Fault`] when the fault cannot be injected.
    pub async fn inject(&self, fault: Fault) -> Result<Injected> {
        Ok(lab_faults::inject(self.runtime.as_ref(), &self.ledger, fault).await?)
    }

    /// Injects `fault` and proves it took effect. If `interrupt` completes first (Ctrl-C), what was applied
    /// is rolled back; `say` receives a line per thing done.
    ///
    /// # Errors
    /// [`crate::SessionError::Fault`] when the fault cannot be injected (after its own rollback).
    pub async fn inject_guarded(
        &self,
        fault: Fault,
        interrupt: impl Future<Output = ()>,
        say: &(dyn Fn(&str) + Sync),
    ) -> Result<Guarded<Injected>> {
        self.inject_guarded_for(fault, None, interrupt, say).await
    }

    /// [`Lab::inject_guarded`], and with `lifetime` the fault clears itself that long after it was
    /// proven: the lab's watcher clears it ([`Lab::clear_expired`]), so it must run.
    ///
    /// # Errors
    /// [`crate::SessionError::Fault`] as for [`Lab::inject_guarded`]; [`lab_faults::FaultError::Invalid`]
    /// before anything changes when a lifetime is asked and no watcher runs to clear it.
    pub async fn inject_guarded_for(
        &self,
        fault: Fault,
        lifetime: Option<std::time::Duration>,
        interrupt: impl Future<Output = ()>,
        say: &(dyn Fn(&str) + Sync),
    ) -> Result<Guarded<Injected>> {
        if lifetime.is_some() && !crate::live::running(&self.name) {
            return Err(lab_faults::FaultError::Invalid(format!(
                "no watcher runs for lab {:?} to clear the fault when its time is up (it starts with \
                 `lab up`; see `lab logs watcher`): inject without --for, or take the lab down and up again",
                self.name
            ))
            .into());
        }
        tokio::select! {
            r = lab_faults::inject_for(self.runtime.as_ref(), &self.ledger, fault, lifetime) => Ok(Guarded::Done(r?)),
            () = interrupt => {
                say("interrupted: rolling back what was applied …");
                roll_back_interrupted(self.runtime.as_ref(), &self.ledger, say).await;
                Ok(Guarded::RolledBack)
            }
        }
    }

    /// Clears faults and restores exactly their before values; returns the entries cleared.
    ///
    /// # Errors
    /// [`crate::SessionError::Fault`] when a fault cannot be cleared, or `id` names none.
    pub async fn clear(&self, what: Clear) -> Result<Vec<Entry>> {
        Ok(match what {
            Clear::All => lab_faults::clear_all(self.runtime.as_ref(), &self.ledger).await?,
            Clear::One(id) => lab_faults::clear(self.runtime.as_ref(), &self.ledger, &id)
                .await?
                .into_iter()
                .collect(),
        })
    }
}

/// After an interrupted inject: clear every fault that never finished injecting.
pub async fn roll_back_interrupted(rt: &dyn Runtime, ledger: &Ledger, say: &(dyn Fn(&str) + Sync)) {
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
            Ok(_) => say(&format!("rolled back {id}")),
            Err(e) => say(&format!(
                "could not roll back {id}: {e}; run `lab fault clear --all`"
            )),
        }
    }
}
