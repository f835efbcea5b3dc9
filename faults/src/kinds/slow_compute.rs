//! `slow-compute`: a CPU hog beside each of some ranks, inside the rank's own CPU limit (its cgroup), so
//! the rank computes slowly while its spec, its limit in force and the template all stay as they were:
//! comparing with the template finds nothing. Proven by the hog's CPU time growing inside the rank's
//! group while the limit in force equals the template. Locally the supervisor starts the hog in the rank's
//! cgroup; on Kubernetes the lab `exec`s the rank image's `lab-beside hog` in the rank's container, whose
//! cgroup (and CPU limit) it then shares, with the pod object untouched.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use lab_model::status::LabStatus;
use lab_model::{ChangeRecord, names};

use super::{Applied, Cx, Injector, PROOF_DEADLINE, mismatched, not_proven};
use crate::FaultError;
use crate::ledger::Before;

/// How long the hogs' CPU use is watched for the proof.
const WATCH: Duration = Duration::from_secs(2);

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::SlowCompute;

/// CPU seconds of process `pid` beside `rank`, if it is there.
async fn cpu_of(cx: &Cx<'_>, rank: u32, pid: u32) -> Result<Option<f64>, FaultError> {
    let procs = cx
        .rt
        .rank_processes(rank)
        .await
        .map_err(FaultError::runtime(format!(
            "listing the processes beside rank-{rank}"
        )))?;
    Ok(procs.iter().find(|p| p.pid == pid).map(|p| p.cpu_seconds))
}

#[async_trait]
impl Injector for SlowCompute {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        for &rank in &self.ranks {
            let pod = status.ranks().find(|p| p.index == Some(rank)).ok_or_else(|| {
                FaultError::Invalid(format!(
                    "--ranks names rank-{rank}, which is out of range: this lab has rank-0 to rank-{}",
                    status.ranks_desired.saturating_sub(1)
                ))
            })?;
            super::running(pod, rank, "slow down")?;
            if pod.resources.cpu_live.is_none() {
                let why = status
                    .notes
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "its CPU limit cannot be read".into());
                return Err(FaultError::Invalid(format!(
                    "rank-{rank} has no enforced CPU limit for a process beside it to share: {why}"
                )));
            }
        }
        if self.ranks.len() >= status.ranks().count() {
            return Err(FaultError::Invalid(
                "--ranks names every rank: slow-compute slows some ranks against their siblings, so leave one out"
                    .into(),
            ));
        }
        Ok(())
    }

    async fn apply(&self, cx: &Cx<'_>, _status: &LabStatus) -> Result<Applied, FaultError> {
        cx.set_before(Before::Beside { started: Vec::new() }).await?;
        let mut started = Vec::new();
        let mut changes = Vec::new();
        for &rank in &self.ranks {
            let pid = cx.rt.start_hog(rank).await.map_err(FaultError::runtime(format!(
                "starting a process beside rank-{rank}"
            )))?;
            started.push((rank, pid));
            // Recorded at once, so a failure on the next rank still clears this one.
            cx.set_before(Before::Beside {
                started: started.clone(),
            })
            .await?;
            changes.push(cx.change(
                names::rank(rank),
                "process beside it",
                "none".into(),
                format!("cpu hog pid {pid}"),
                Some("in the rank's cgroup; spec and template unchanged".into()),
            ));
        }
        Ok(Applied {
            changes,
            ..Applied::default()
        })
    }

    async fn prove(
        &self,
        cx: &Cx<'_>,
        _status: &LabStatus,
        applied: &mut Applied,
    ) -> Result<String, FaultError> {
        let started = match cx.ledger.read() {
            Ok(d) => d.faults.iter().find(|e| e.id == cx.id).map(|e| e.before.clone()),
            Err(_) => None,
        };
        let Some(Before::Beside { started }) = started else {
            return Err(not_proven(
                cx,
                "the ledger does not list the processes started".into(),
            ));
        };
        let deadline = Instant::now() + PROOF_DEADLINE;
        let mut lines = Vec::new();
        for &(rank, pid) in &started {
            loop {
                let a = cpu_of(cx, rank, pid).await?;
                let t = Instant::now();
                tokio::time::sleep(WATCH).await;
                let b = cpu_of(cx, rank, pid).await?;
                let (Some(a), Some(b)) = (a, b) else {
                    return Err(not_proven(cx, format!("pid {pid} is not beside rank-{rank}")));
                };
                let limits = cx
                    .rt
                    .cpu_limits(rank)
                    .await
                    .map_err(FaultError::runtime(format!("reading rank-{rank}'s CPU limit")))?;
                if b - a > 0.05 && limits.live == Some(limits.template) {
                    lines.push(format!(
                        "rank-{rank}: pid {pid} used {:.2} s of CPU in {:.1} s inside the rank's {} limit (template {}, unchanged)",
                        b - a,
                        t.elapsed().as_secs_f64(),
                        limits.template,
                        limits.template
                    ));
                    break;
                }
                if Instant::now() > deadline {
                    return Err(not_proven(
                        cx,
                        format!(
                            "pid {pid} beside rank-{rank} used {:.2} s of CPU in {:.1} s; limit in force {:?}, template {}",
                            b - a,
                            t.elapsed().as_secs_f64(),
                            limits.live.map(|m| m.to_string()),
                            limits.template
                        ),
                    ));
                }
            }
        }
        for c in &mut applied.changes {
            c.note = Some("in the rank's cgroup, sharing its CPU limit; spec and template unchanged".into());
        }
        Ok(lines.join("; "))
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::Beside { started } = before else {
            return Err(mismatched(cx, before));
        };
        let mut changes = Vec::new();
        for &(rank, pid) in started {
            // A hog stopped since (by `lab rank stop`, or its rank's group went away) needs nothing undone.
            let there = match cx.rt.rank_processes(rank).await {
                Ok(p) => p.iter().any(|p| p.pid == pid && !p.rank_itself),
                Err(_) => false,
            };
            if !there {
                continue;
            }
            cx.rt
                .stop_beside(rank, pid)
                .await
                .map_err(FaultError::runtime(format!(
                    "stopping pid {pid} beside rank-{rank}"
                )))?;
            let gone_by = Instant::now() + Duration::from_secs(10);
            while cpu_of(cx, rank, pid).await.ok().flatten().is_some() {
                if Instant::now() > gone_by {
                    return Err(FaultError::NotRestored {
                        id: cx.id.into(),
                        why: format!("pid {pid} still runs beside rank-{rank}"),
                    });
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            changes.push(cx.change(
                names::rank(rank),
                "process beside it",
                format!("cpu hog pid {pid}"),
                "none".into(),
                Some("cleared".into()),
            ));
        }
        Ok(changes)
    }
}
