//! `slow-disk`: the storage node itself is slow. Its own volume server process is held to a small CPU
//! budget per CFS period (its own cgroup on the local runtime, with a long period: see
//! `lab_runtime_local::cgroup::STORAGE_PERIOD_US`; on Kubernetes the volume container's CPU limit,
//! resized in place, in the kubelet's 100 ms period), so a request that arrives after the budget is spent waits
//! for the next period — reading its needles from its data directory included; the path to it (proxy,
//! network) is left alone. Proven by timing requests straight to the server, bypassing the path the ranks
//! use, on a fixed schedule: the server's own latency rises against its siblings' and its own before, which is
//! what tells it from `slow-storage` (a slow path, where the server's own latency stays flat).

use std::time::{Duration, Instant};

use async_trait::async_trait;
use lab_model::quantity::format_duration;
use lab_model::status::LabStatus;
use lab_model::{ChangeRecord, Millicores, names};

use super::{Applied, Cx, Injector, mismatched, not_proven};
use crate::FaultError;
use crate::ledger::Before;

/// The server's own latency must be at least this much above its siblings' to count as proven.
const PROOF_FLOOR: Duration = Duration::from_millis(50);
/// ... and at least this many times its own latency before the fault.
const PROOF_FACTOR: u32 = 5;
/// Requests per direct probe of the faulted server (sent 70 ms apart, so they span more than one period).
const SAMPLES: usize = 9;
/// Requests per direct probe of a sibling, and of every server before the fault.
const SIBLING_SAMPLES: usize = 5;
/// How long the fault may take to show: a few periods, and a server busy with the job spends its budget in
/// the first. Rounds are few, so noise gets few chances to pass for the fault.
const PROOF_WINDOW: Duration = Duration::from_secs(12);

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::SlowDisk;

/// A storage server's CPU limit as the change records say it.
pub fn storage_cpu_text(c: Option<Millicores>) -> String {
    c.map_or_else(|| "unlimited".into(), |c| c.to_string())
}

async fn own(cx: &Cx<'_>, server: u32, samples: usize) -> Result<Duration, FaultError> {
    cx.rt
        .probe_storage_own(server, samples)
        .await
        .map_err(FaultError::runtime(format!("probing storage-{server} directly")))
}

#[async_trait]
impl Injector for SlowDisk {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        // Every runtime has the actuator: the server's own cgroup locally, the volume container's CPU
        // limit resized in place on Kubernetes. A cluster that refuses the resize fails the apply with
        // the kubelet's reason, and nothing stays changed.
        super::storage_server(status, self.server)
    }

    async fn apply(&self, cx: &Cx<'_>, status: &LabStatus) -> Result<Applied, FaultError> {
        let server = self.server;
        let before = cx
            .rt
            .storage_cpu(server)
            .await
            .map_err(FaultError::runtime(format!(
                "reading storage-{server}'s CPU limit"
            )))?;
        // Every server at once: one after another they took about a second, which the fault then took to
        // begin.
        let measured_before =
            futures::future::try_join_all((0..status.storage_servers).map(|s| own(cx, s, SIBLING_SAMPLES)))
                .await?;
        cx.set_before(Before::StorageCpu { cpu: before }).await?;
        cx.rt
            .set_storage_cpu(server, Some(self.cpu))
            .await
            .map_err(FaultError::runtime(format!("limiting storage-{server}'s CPU")))?;
        let c = cx.change(
            names::storage(server),
            "server cpu limit",
            storage_cpu_text(before),
            self.cpu.to_string(),
            Some("the volume server's own process; the path to it unchanged".into()),
        );
        Ok(Applied {
            path: None,
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
        let before = applied
            .measured_before
            .get(server as usize)
            .copied()
            .unwrap_or_default();
        let start = Instant::now();
        loop {
            // The faulted server and its siblings probed at the same time, so a busy machine slows both.
            let siblings = async {
                let mut v = Vec::new();
                for s in (0..status.storage_servers).filter(|s| *s != server) {
                    v.push(own(cx, s, SIBLING_SAMPLES).await?);
                }
                Ok::<_, FaultError>(v)
            };
            let (own, siblings) = tokio::join!(own(cx, server, SAMPLES), siblings);
            let (own, siblings) = (own?, siblings?);
            let sibling_max = siblings.iter().copied().max().unwrap_or_default();
            let proof = format!(
                "storage-{server} answers its own requests (bypassing the path the ranks use) in {} (before: {}); \
                 siblings {} (cpu held to {})",
                format_duration(own),
                format_duration(before),
                siblings
                    .iter()
                    .map(|d| format_duration(*d))
                    .collect::<Vec<_>>()
                    .join(", "),
                self.cpu
            );
            if own >= sibling_max + PROOF_FLOOR && own >= before * PROOF_FACTOR {
                return Ok(proof);
            }
            if start.elapsed() > PROOF_WINDOW {
                return Err(not_proven(cx, proof));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::StorageCpu { cpu } = before else {
            return Err(mismatched(cx, before));
        };
        let server = self.server;
        let read = || async {
            cx.rt
                .storage_cpu(server)
                .await
                .map_err(FaultError::runtime(format!(
                    "reading storage-{server}'s CPU limit"
                )))
        };
        let now = read().await?;
        let mut changes = Vec::new();
        if now != *cpu {
            cx.rt
                .set_storage_cpu(server, *cpu)
                .await
                .map_err(FaultError::runtime(format!(
                    "restoring storage-{server}'s CPU limit"
                )))?;
            changes.push(cx.change(
                names::storage(server),
                "server cpu limit",
                storage_cpu_text(now),
                storage_cpu_text(*cpu),
                Some("cleared".into()),
            ));
        }
        let back = read().await?;
        if back != *cpu {
            return Err(FaultError::NotRestored {
                id: cx.id.into(),
                why: format!("storage-{server}'s CPU limit reads {}", storage_cpu_text(back)),
            });
        }
        Ok(changes)
    }
}
