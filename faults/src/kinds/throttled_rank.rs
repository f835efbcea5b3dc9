//! `throttled-rank`: one rank's CPU limit cut in place (the `pods/resize` subresource, or the cgroup quota
//! of its process) while its template keeps the old limit; proven by reading the limit in force.

use async_trait::async_trait;
use lab_model::status::LabStatus;
use lab_model::{ChangeRecord, names};

use super::{Applied, Cx, Injector, Look, PROOF_DEADLINE, mismatched, not_proven, wait_until};
use crate::FaultError;
use crate::ledger::Before;

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::ThrottledRank;

#[async_trait]
impl Injector for ThrottledRank {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        let (rank, cpu) = (self.rank, self.cpu);
        let pod = super::rank_pod(status, rank)?;
        super::running(pod, rank, "throttle")?;
        if pod.resources.cpu_live.is_none() {
            let why = status
                .notes
                .first()
                .cloned()
                .unwrap_or_else(|| "its CPU limit cannot be read".into());
            return Err(FaultError::Invalid(format!(
                "rank-{rank} has no enforced CPU limit: {why}"
            )));
        }
        if pod.resources.cpu_live == Some(cpu) {
            return Err(FaultError::Invalid(format!(
                "rank-{rank} already runs at {cpu}: pick a lower --cpu"
            )));
        }
        Ok(())
    }

    async fn apply(&self, cx: &Cx<'_>, _status: &LabStatus) -> Result<Applied, FaultError> {
        let rank = self.rank;
        let limits = cx
            .rt
            .cpu_limits(rank)
            .await
            .map_err(FaultError::runtime(format!("reading rank-{rank}'s CPU limit")))?;
        let live = limits
            .live
            .ok_or_else(|| FaultError::Invalid(format!("rank-{rank}'s live CPU limit cannot be read")))?;
        cx.set_before(Before::Cpu { cpu: live }).await?;
        cx.rt
            .resize_rank(rank, self.cpu)
            .await
            .map_err(FaultError::runtime(format!("resizing rank-{rank} in place")))?;
        // The change record names the template, which the proof reads back.
        Ok(Applied {
            changes: vec![cx.change(
                names::rank(rank),
                "cpu limit",
                live.to_string(),
                self.cpu.to_string(),
                None,
            )],
            ..Applied::default()
        })
    }

    async fn prove(
        &self,
        cx: &Cx<'_>,
        _status: &LabStatus,
        applied: &mut Applied,
    ) -> Result<String, FaultError> {
        let (rank, cpu) = (self.rank, self.cpu);
        let rt = cx.rt;
        let look = move || async move {
            let now = rt
                .cpu_limits(rank)
                .await
                .map_err(FaultError::runtime(format!("reading rank-{rank}'s CPU limit")))?;
            Ok(if now.live == Some(cpu) {
                Look::Done(now.template)
            } else {
                Look::NotYet(format!(
                    "rank-{rank}'s limit in force still reads {:?}",
                    now.live.map(|m| m.to_string())
                ))
            })
        };
        let template = wait_until(PROOF_DEADLINE, look, |why| not_proven(cx, why)).await?;
        for c in &mut applied.changes {
            c.note = Some(format!("spec {template}"));
        }
        Ok(format!(
            "rank-{rank}'s CPU limit in force reads {cpu} while its template says {template}"
        ))
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::Cpu { cpu } = before else {
            return Err(mismatched(cx, before));
        };
        let rank = self.rank;
        let mut changes = Vec::new();
        let now = cx.rt.cpu_limits(rank).await;
        // A rank that was replaced (or scaled away) since came back from its template: nothing to undo.
        if let Ok(now) = now
            && let Some(live) = now.live
            && live != *cpu
        {
            cx.rt
                .resize_rank(rank, *cpu)
                .await
                .map_err(FaultError::runtime(format!("resizing rank-{rank} back")))?;
            let back = cx
                .rt
                .cpu_limits(rank)
                .await
                .map_err(FaultError::runtime("reading the CPU limit"))?;
            if back.live != Some(*cpu) {
                return Err(FaultError::NotRestored {
                    id: cx.id.into(),
                    why: format!("rank-{rank}'s limit reads {:?}", back.live.map(|m| m.to_string())),
                });
            }
            changes.push(cx.change(
                names::rank(rank),
                "cpu limit",
                live.to_string(),
                cpu.to_string(),
                Some("cleared".into()),
            ));
        }
        Ok(changes)
    }
}
