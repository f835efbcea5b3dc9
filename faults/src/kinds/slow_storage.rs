//! `slow-storage`: a delay on the path to one storage server (latency proxy or tc netem), proven by
//! timing reads through that path against its siblings.

use std::time::Duration;

use async_trait::async_trait;
use lab_model::quantity::format_duration;
use lab_model::status::LabStatus;
use lab_model::{ChangeRecord, names};
use lab_runtime::Delay;

use super::{Applied, Cx, Injector, mismatched, not_proven};
use crate::FaultError;
use crate::ledger::Before;

/// How many more looks a sibling that answered slowly after the inject gets before the proof fails, and
/// how far apart: a delay on it too would still be there a few seconds later.
const SIBLING_LOOKS: usize = 3;
const SIBLING_LOOK_EVERY: Duration = Duration::from_secs(1);

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::SlowStorage;

/// A delay as the change records and proofs say it: `0 ms`, `300 ms`, `300 ms ± 20 ms`.
pub fn delay_text(d: Option<Delay>) -> String {
    match d {
        None => "0 ms".into(),
        Some(d) if d.jitter.is_zero() => format_duration(d.delay),
        Some(d) => format!("{} ± {}", format_duration(d.delay), format_duration(d.jitter)),
    }
}

fn delay(this: &SlowStorage) -> Delay {
    Delay {
        delay: this.delay,
        jitter: this.jitter,
    }
}

fn siblings(this: &SlowStorage, status: &LabStatus) -> Vec<u32> {
    (0..status.storage_servers)
        .filter(|s| *s != this.server)
        .collect()
}

async fn probe_all(cx: &Cx<'_>, servers: &[u32]) -> Result<Vec<Duration>, FaultError> {
    let mut out = Vec::new();
    for s in servers {
        out.push(
            cx.rt
                .probe_storage(*s, 3)
                .await
                .map_err(FaultError::runtime(format!("probing storage-{s}")))?,
        );
    }
    Ok(out)
}

#[async_trait]
impl Injector for SlowStorage {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        let server = self.server;
        super::storage_server(status, server)?;
        Ok(())
    }

    async fn apply(&self, cx: &Cx<'_>, status: &LabStatus) -> Result<Applied, FaultError> {
        let server = self.server;
        let before = cx
            .rt
            .storage_delay(server)
            .await
            .map_err(FaultError::runtime("reading the storage delay"))?;
        let measured_before = probe_all(cx, &siblings(self, status)).await?;
        cx.set_before(Before::Delay { delay: before }).await?;
        let path = cx
            .rt
            .set_storage_delay(server, Some(delay(self)))
            .await
            .map_err(FaultError::runtime(format!(
                "adding the delay to storage-{server}"
            )))?;
        let c = cx.change(
            names::storage(server),
            "added delay",
            delay_text(before),
            delay_text(Some(delay(self))),
            Some(format!("via {path}")),
        );
        Ok(Applied {
            path: Some(path),
            measured_before,
            changes: vec![c],
            ..Applied::default()
        })
    }

    async fn prove(
        &self,
        cx: &Cx<'_>,
        status: &LabStatus,
        applied: &mut Applied,
    ) -> Result<String, FaultError> {
        let server = self.server;
        let measured = cx
            .rt
            .probe_storage(server, 5)
            .await
            .map_err(FaultError::runtime(format!("probing storage-{server}")))?;
        let floor = self.delay.saturating_sub(self.jitter);
        let siblings = siblings(self, status);
        let mut sibling_after = probe_all(cx, &siblings).await?;
        let slowed = |i: usize, after: &[Duration]| {
            applied
                .measured_before
                .get(i)
                .zip(after.get(i))
                .is_some_and(|(b, a)| *a > *b * 3 + Duration::from_millis(20))
        };
        // A sibling that answers slowly once may be the machine's moment (a busy node, a probe through a
        // busy API server); a delay put on it too stays. Look again at those before calling it.
        for _ in 0..SIBLING_LOOKS {
            let slow: Vec<usize> = (0..siblings.len())
                .filter(|i| slowed(*i, &sibling_after))
                .collect();
            if slow.is_empty() {
                break;
            }
            tokio::time::sleep(SIBLING_LOOK_EVERY).await;
            for i in slow {
                sibling_after[i] = cx
                    .rt
                    .probe_storage(siblings[i], 5)
                    .await
                    .map_err(FaultError::runtime(format!("probing storage-{}", siblings[i])))?;
            }
        }
        let fmt_list = |v: &[Duration]| {
            v.iter()
                .map(|d| format_duration(*d))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let path = applied.path.map_or_else(|| "?".to_string(), |p| p.to_string());
        let proof = format!(
            "storage-{server} answers in {} through its path (set +{} via {path}); siblings {} (before: {})",
            format_duration(measured),
            delay_text(Some(delay(self))),
            fmt_list(&sibling_after),
            fmt_list(&applied.measured_before)
        );
        if measured < floor {
            return Err(not_proven(cx, proof));
        }
        if (0..siblings.len()).any(|i| slowed(i, &sibling_after)) {
            return Err(not_proven(cx, format!("a sibling slowed down too: {proof}")));
        }
        Ok(proof)
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::Delay { delay } = before else {
            return Err(mismatched(cx, before));
        };
        let server = self.server;
        let mut changes = Vec::new();
        let now = cx
            .rt
            .storage_delay(server)
            .await
            .map_err(FaultError::runtime("reading the storage delay"))?;
        if now != *delay {
            cx.rt
                .set_storage_delay(server, *delay)
                .await
                .map_err(FaultError::runtime(format!("restoring storage-{server}'s delay")))?;
            changes.push(cx.change(
                names::storage(server),
                "added delay",
                delay_text(now),
                delay_text(*delay),
                Some("cleared".into()),
            ));
        }
        let back = cx
            .rt
            .storage_delay(server)
            .await
            .map_err(FaultError::runtime("reading the storage delay"))?;
        if back != *delay {
            return Err(FaultError::NotRestored {
                id: cx.id.into(),
                why: format!("storage-{server} delay reads {}", delay_text(back)),
            });
        }
        Ok(changes)
    }
}
