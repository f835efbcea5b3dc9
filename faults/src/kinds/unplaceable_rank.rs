//! `unplaceable-rank`: the job scaled beyond the node's GPUs and told to expect that many peers; proven by
//! the extra ranks Pending for want of a GPU while the placed ones restart, stay Ready, and report the new
//! world size.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use lab_model::status::{LabStatus, Phase};
use lab_model::{ChangeRecord, metrics};
use lab_runtime::Runtime;

use super::{Applied, Cx, Injector, PROOF_DEADLINE, mismatched, not_proven};
use crate::FaultError;
use crate::ledger::Before;

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::UnplaceableRank;

#[async_trait]
impl Injector for UnplaceableRank {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        super::more_ranks_than_gpus(status, self.ranks, "no rank would be unplaceable")?;
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
            .scale_ranks(ranks)
            .await
            .map_err(FaultError::runtime(format!("scaling to {ranks} ranks")))?;
        cx.rt
            .set_world_size(ranks)
            .await
            .map_err(FaultError::runtime(format!("setting the world size to {ranks}")))?;
        Ok(Applied {
            changes: vec![
                cx.change(
                    "ranks".into(),
                    "replicas",
                    status.ranks_desired.to_string(),
                    ranks.to_string(),
                    None,
                ),
                cx.change(
                    "job config".into(),
                    "world size",
                    status.world_size.to_string(),
                    ranks.to_string(),
                    None,
                ),
            ],
            ..Applied::default()
        })
    }

    async fn prove(
        &self,
        cx: &Cx<'_>,
        _status: &LabStatus,
        _applied: &mut Applied,
    ) -> Result<String, FaultError> {
        prove_unplaceable(cx.rt, self.ranks)
            .await
            .map_err(|why| not_proven(cx, why))
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::Ranks { ranks, world_size } = before else {
            return Err(mismatched(cx, before));
        };
        let mut changes = Vec::new();
        let st = cx
            .rt
            .status()
            .await
            .map_err(FaultError::runtime("reading the lab's status"))?;
        if st.world_size != *world_size {
            cx.rt
                .set_world_size(*world_size)
                .await
                .map_err(FaultError::runtime("restoring the world size"))?;
            changes.push(cx.change(
                "job config".into(),
                "world size",
                st.world_size.to_string(),
                world_size.to_string(),
                Some("cleared".into()),
            ));
        }
        if st.ranks_desired != *ranks {
            cx.rt
                .scale_ranks(*ranks)
                .await
                .map_err(FaultError::runtime("restoring the rank count"))?;
            changes.push(cx.change(
                "ranks".into(),
                "replicas",
                st.ranks_desired.to_string(),
                ranks.to_string(),
                Some("cleared".into()),
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
/// The world size each running rank reports in its metrics.
pub(super) async fn reported_world_sizes(rt: &dyn Runtime) -> Vec<(String, Option<f64>)> {
    let Ok(targets) = rt.scrape_targets().await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in targets.iter().filter(|t| t.kind == lab_runtime::TargetKind::Rank) {
        let v = match rt.fetch_metrics(t, Duration::from_secs(2)).await {
            Ok(text) => lab_model::expo::parse(&text).ok().and_then(|s| {
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
