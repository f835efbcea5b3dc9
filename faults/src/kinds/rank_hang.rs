//! `rank-hang`: one rank's training thread frozen while its process lives and its metrics endpoint still
//! answers, so it stays Ready; proven by its step counter, read from its own metrics, standing still while
//! the rank is Running and Ready. Locally the thread is frozen with the cgroup v1 freezer; on Kubernetes
//! the rank image's `lab-beside`, run through `exec`, holds it in a ptrace stop (one thread: a SIGSTOP
//! would stop the metrics thread too, and the probes would fail and restart the rank).

use std::time::Duration;

use async_trait::async_trait;
// Tokio's clock, which tests may pause: the waits below are timed by it.
use lab_model::status::{LabStatus, Phase};
use lab_model::{ChangeRecord, metrics, names};
use lab_runtime::{Runtime, TargetKind};
use tokio::time::Instant;

use super::{Applied, Cx, Injector, PROOF_DEADLINE, mismatched, not_proven};
use crate::FaultError;
use crate::ledger::Before;

/// How long the step counter must stand still for the proof.
const STILL_FOR: Duration = Duration::from_secs(3);
/// How long the inject waits for the rank to train before it freezes it: a rank restarting after a
/// previous fault waits out its restart backoff (up to 30 s locally), then for its peers, then loads the
/// checkpoint.
const TRAINING_WITHIN: Duration = Duration::from_secs(60);
/// How often the rank is looked at while the inject waits for it, and while the proof watches its step.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::RankHang;

/// Rank `rank`'s `lab_step`, read from its own metrics endpoint.
///
/// # Errors
/// The runtime's error, or [`FaultError::Invalid`] when the rank has no scrape target or no step yet.
pub(crate) async fn rank_step(rt: &dyn Runtime, rank: u32) -> Result<f64, FaultError> {
    let targets = rt
        .scrape_targets()
        .await
        .map_err(FaultError::runtime("listing the scrape targets"))?;
    let t = targets
        .iter()
        .find(|t| t.kind == TargetKind::Rank && t.index == rank)
        .ok_or_else(|| FaultError::Invalid(format!("rank-{rank} has no metrics endpoint")))?;
    let text = rt
        .fetch_metrics(t, Duration::from_secs(3))
        .await
        .map_err(FaultError::runtime(format!("reading rank-{rank}'s metrics")))?;
    step_of(&text).ok_or_else(|| FaultError::Invalid(format!("rank-{rank} exports no {}", metrics::STEP)))
}

/// Waits until rank `rank` trains: Running and Ready, its metrics answer and its step moves from one look
/// to the next. Returns its step.
///
/// A hang is told by a step counter that stands still, so the rank must be seen stepping before it is
/// frozen: a rank that restarts (after a previous fault, on a lab just used), waits for its peers or loads
/// its checkpoint stands still without any fault, and its metrics may not answer yet. Freezing it then
/// would prove nothing, and reading it fail.
///
/// # Errors
/// The runtime's error reading the status, or [`FaultError::Invalid`] saying what was seen when the rank
/// does not train within [`TRAINING_WITHIN`]; nothing is changed.
async fn training(rt: &dyn Runtime, rank: u32) -> Result<f64, FaultError> {
    let start = Instant::now();
    let mut last: Option<f64> = None;
    loop {
        let st = rt
            .status()
            .await
            .map_err(FaultError::runtime("reading the lab's status"))?;
        let seen = match st.ranks().find(|p| p.index == Some(rank)) {
            Some(p) if p.phase == Phase::Running && p.ready => match rank_step(rt, rank).await {
                Ok(step) if last.is_some_and(|l| step > l) => return Ok(step),
                Ok(step) => {
                    let seen = match last {
                        Some(l) => format!("its step stood at {l}"),
                        None => format!("its step read {step}"),
                    };
                    last = Some(step);
                    seen
                }
                Err(e) => {
                    last = None;
                    format!("{e}")
                }
            },
            Some(p) => {
                last = None;
                format!(
                    "it was {}{}{}",
                    p.phase,
                    if p.ready { "" } else { ", not Ready" },
                    p.reason.as_ref().map_or(String::new(), |r| format!(" ({r})"))
                )
            }
            None => "it was not in the lab's status".to_string(),
        };
        if start.elapsed() > TRAINING_WITHIN {
            return Err(FaultError::Invalid(format!(
                "rank-{rank} is not training, so a hang could not be told apart ({seen}, {} s after the inject \
                 began): the job is not steady; wait until `lab status` shows every rank Ready and training, \
                 then inject again",
                TRAINING_WITHIN.as_secs()
            )));
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// The value of the unlabelled `lab_step` sample in a metrics text.
fn step_of(text: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(metrics::STEP)?;
        let v = rest.strip_prefix(' ')?;
        v.split_whitespace().next()?.parse().ok()
    })
}

#[async_trait]
impl Injector for RankHang {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        let rank = self.rank;
        let pod = super::rank_pod(status, rank)?;
        if pod.phase != Phase::Running || !pod.ready {
            return Err(FaultError::Invalid(format!(
                "rank-{rank} is {}{}, not Running and Ready: nothing to hang",
                pod.phase,
                if pod.ready { "" } else { " (not Ready)" }
            )));
        }
        Ok(())
    }

    async fn apply(&self, cx: &Cx<'_>, _status: &LabStatus) -> Result<Applied, FaultError> {
        let rank = self.rank;
        if cx
            .rt
            .rank_frozen(rank)
            .await
            .map_err(FaultError::runtime(format!(
                "reading whether rank-{rank} is frozen"
            )))?
        {
            return Err(FaultError::Invalid(format!(
                "rank-{rank}'s training thread is already frozen: clear that first"
            )));
        }
        training(cx.rt, rank).await?;
        cx.set_before(Before::Running).await?;
        cx.rt
            .freeze_rank(rank, true)
            .await
            .map_err(FaultError::runtime(format!(
                "freezing rank-{rank}'s training thread"
            )))?;
        Ok(Applied {
            changes: vec![cx.change(
                names::rank(rank),
                "training thread",
                "running".into(),
                "frozen".into(),
                Some("process alive, metrics endpoint answering".into()),
            )],
            ..Applied::default()
        })
    }

    async fn prove(
        &self,
        cx: &Cx<'_>,
        _status: &LabStatus,
        _applied: &mut Applied,
    ) -> Result<String, FaultError> {
        let rank = self.rank;
        let start = Instant::now();
        let mut last: Option<f64> = None;
        let mut still_since = Instant::now();
        loop {
            // A look that fails is looked at again until the deadline: the metrics thread of a process
            // whose training thread was just frozen may answer a moment late.
            let read = rank_step(cx.rt, rank).await;
            match &read {
                Ok(step) if last != Some(*step) => (last, still_since) = (Some(*step), Instant::now()),
                _ => {}
            }
            if let (Ok(_), Some(last)) = (&read, last)
                && still_since.elapsed() >= STILL_FOR
            {
                let st = cx
                    .rt
                    .status()
                    .await
                    .map_err(FaultError::runtime("reading the lab's status"))?;
                let pod = st.ranks().find(|p| p.index == Some(rank));
                let ready = pod.is_some_and(|p| p.phase == Phase::Running && p.ready);
                let frozen = cx.rt.rank_frozen(rank).await.unwrap_or(false);
                if ready && frozen {
                    return Ok(format!(
                        "rank-{rank}'s step counter stood at {last} for {:.0} s while it stayed Running and Ready",
                        still_since.elapsed().as_secs_f64()
                    ));
                }
                if !frozen {
                    return Err(not_proven(
                        cx,
                        format!("rank-{rank}'s training thread is not frozen (was the rank replaced?)"),
                    ));
                }
            }
            if start.elapsed() > PROOF_DEADLINE {
                let why = match (read, last) {
                    (Err(e), _) => format!("rank-{rank}'s metrics did not answer while it was frozen: {e}"),
                    (Ok(_), Some(l)) => format!("rank-{rank}'s step counter kept moving (last read {l})"),
                    (Ok(s), None) => format!("rank-{rank}'s step counter kept moving (last read {s})"),
                };
                return Err(not_proven(cx, why));
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::Running = before else {
            return Err(mismatched(cx, before));
        };
        let rank = self.rank;
        // A rank restarted since came back thawed: nothing to undo.
        let frozen = cx.rt.rank_frozen(rank).await.unwrap_or(false);
        if !frozen {
            return Ok(Vec::new());
        }
        cx.rt
            .freeze_rank(rank, false)
            .await
            .map_err(FaultError::runtime(format!("thawing rank-{rank}")))?;
        if cx
            .rt
            .rank_frozen(rank)
            .await
            .map_err(FaultError::runtime("reading the freezer"))?
        {
            return Err(FaultError::NotRestored {
                id: cx.id.into(),
                why: format!("rank-{rank}'s training thread is still frozen"),
            });
        }
        Ok(vec![cx.change(
            names::rank(rank),
            "training thread",
            "frozen".into(),
            "running".into(),
            Some("cleared".into()),
        )])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_step_is_read_from_the_unlabelled_sample_only() {
        let text = "# HELP lab_step x\nlab_steps_total 9\nlab_step 1234\n";
        assert_eq!(super::step_of(text), Some(1234.0));
        assert_eq!(super::step_of("lab_steps_total 3\n"), None);
    }
}
