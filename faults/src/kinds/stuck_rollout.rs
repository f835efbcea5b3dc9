//! `stuck-rollout`: the seed's fault 3 as it happened. The job is scaled past the node's GPUs with a new
//! configuration that expects that many peers, as one rolling change; the extra rank stays Pending, and
//! the rollout waits behind it, so the running ranks keep training on the old configuration and the job
//! trains normally. Proven by the Pending rank, the configuration's new world size, and every running rank
//! still reporting the old one while the rollout does not progress.
//!
//! The trap is the seed agent's first fix: scaling back unblocks the rollout, the ranks restart expecting
//! the new world size, and the job stalls. Only putting the configuration back fixes it.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use lab_model::ChangeRecord;
use lab_model::status::{LabStatus, Phase};
use lab_runtime::Runtime;

use super::unplaceable_rank::reported_world_sizes;
use super::{Applied, Cx, Injector, PROOF_DEADLINE, mismatched, not_proven};
use crate::FaultError;
use crate::ledger::Before;

/// How long the rollout must be seen not to progress before the proof holds.
const STUCK_FOR: Duration = Duration::from_secs(3);

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::StuckRollout;

#[async_trait]
impl Injector for StuckRollout {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        super::more_ranks_than_gpus(
            status,
            self.ranks,
            "no rank would be Pending and the rollout would finish",
        )?;
        if status.world_size != status.ranks_desired {
            return Err(FaultError::Invalid(format!(
                "the job expects {} peers with {} ranks, so it is not training normally: clear the fault \
                 that changed it first",
                status.world_size, status.ranks_desired
            )));
        }
        Ok(())
    }

    async fn apply(&self, cx: &Cx<'_>, status: &LabStatus) -> Result<Applied, FaultError> {
        let ranks = self.ranks;
        cx.set_before(Before::Ranks {
            ranks: status.ranks_desired,
            world_size: status.world_size,
        })
        .await?;
        cx.rt
            .rollout_ranks(ranks, ranks)
            .await
            .map_err(FaultError::runtime(format!(
                "rolling out {ranks} ranks with world size {ranks}"
            )))?;
        let note = Some("one rolling change of the ranks' template".to_string());
        Ok(Applied {
            changes: vec![
                cx.change(
                    "ranks".into(),
                    "replicas",
                    status.ranks_desired.to_string(),
                    ranks.to_string(),
                    note.clone(),
                ),
                cx.change(
                    "job config".into(),
                    "world size",
                    status.world_size.to_string(),
                    ranks.to_string(),
                    note,
                ),
            ],
            ..Applied::default()
        })
    }

    async fn prove(
        &self,
        cx: &Cx<'_>,
        status: &LabStatus,
        _applied: &mut Applied,
    ) -> Result<String, FaultError> {
        prove_stuck(cx.rt, self.ranks, status.world_size)
            .await
            .map_err(|why| not_proven(cx, why))
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::Ranks { ranks, world_size } = before else {
            return Err(mismatched(cx, before));
        };
        let st = cx
            .rt
            .status()
            .await
            .map_err(FaultError::runtime("reading the lab's status"))?;
        let mut changes = Vec::new();
        if st.world_size == *world_size && st.ranks_desired == *ranks {
            return Ok(changes);
        }
        // The same kind of change as the fault, rolled back: ranks that still run the old configuration
        // are already at it and are not restarted.
        cx.rt
            .rollout_ranks(*ranks, *world_size)
            .await
            .map_err(FaultError::runtime("rolling the ranks back"))?;
        let note = Some("cleared".to_string());
        if st.ranks_desired != *ranks {
            changes.push(cx.change(
                "ranks".into(),
                "replicas",
                st.ranks_desired.to_string(),
                ranks.to_string(),
                note.clone(),
            ));
        }
        if st.world_size != *world_size {
            changes.push(cx.change(
                "job config".into(),
                "world size",
                st.world_size.to_string(),
                world_size.to_string(),
                note,
            ));
        }
        let back = cx
            .rt
            .status()
            .await
            .map_err(FaultError::runtime("reading the lab's status"))?;
        if back.world_size != *world_size || back.ranks_desired != *ranks {
            return Err(FaultError::NotRestored {
                id: cx.id.into(),
                why: format!("ranks {} world size {}", back.ranks_desired, back.world_size),
            });
        }
        Ok(changes)
    }
}

/// Holds when the ranks beyond the GPUs are Pending for want of one, the configuration says `ranks`, and
/// every placed rank runs, Ready, still reporting the `old` world size, for [`STUCK_FOR`] on end.
async fn prove_stuck(rt: &dyn Runtime, ranks: u32, old: u32) -> Result<String, String> {
    let start = Instant::now();
    let mut since: Option<Instant> = None;
    let mut last = String::new();
    while start.elapsed() < PROOF_DEADLINE {
        if let Ok(st) = rt.status().await {
            let pending: Vec<u32> = st
                .ranks()
                .filter(|p| {
                    p.phase == Phase::Pending
                        && p.reason.as_deref().is_some_and(|r| r.contains("Insufficient"))
                })
                .filter_map(|p| p.index)
                .collect();
            let running: Vec<_> = st
                .ranks()
                .filter(|p| p.phase == Phase::Running && p.ready)
                .collect();
            let sizes = reported_world_sizes(rt).await;
            let all_old =
                sizes.len() == running.len() && sizes.iter().all(|(_, v)| *v == Some(f64::from(old)));
            let expected: Vec<u32> = (st.gpus_capacity..ranks).collect();
            let placed = running.len() as u32 == st.gpus_capacity.min(ranks);
            last = format!(
                "Pending ranks {pending:?}, configuration world size {}, {} running ranks reporting {:?}",
                st.world_size,
                running.len(),
                sizes
                    .iter()
                    .map(|(n, v)| format!("{n}={}", v.map_or("?".into(), |v| v.to_string())))
                    .collect::<Vec<_>>()
            );
            if pending == expected && placed && all_old && st.world_size == ranks {
                let t = *since.get_or_insert_with(Instant::now);
                if t.elapsed() >= STUCK_FOR {
                    return Ok(format!(
                        "rank-{} Pending (Insufficient GPU) and the rollout to world size {ranks} waits \
                         behind it: the {} running ranks are Ready and still train with world size {old}",
                        expected[0],
                        running.len()
                    ));
                }
            } else {
                since = None;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(format!("after {} s: {last}", PROOF_DEADLINE.as_secs()))
}
