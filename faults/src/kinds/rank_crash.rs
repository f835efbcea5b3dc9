//! `rank-crash`: one rank crashes in a loop (IL-0421). A setting of that rank alone
//! (`LAB_DEVICE_FAULT_AFTER`, the rank's simulated accelerator failing after so many steps) makes it exit
//! as the setting takes effect (the restart that brings the setting is the device's first failure: the
//! runtime tells the rank so with SIGUSR1, see [`lab_model::actions::fails_device_now`]) and then after
//! every `after` steps of each restarted process (the rank counts its failures in a folder that outlives
//! its restarts, `lab-rank --scratch-dir`: the pod's emptyDir on Kubernetes); the supervisor restarts it as a kubelet would, its peers see the crash
//! only as a collective error, and the job resumes from its last checkpoint each time, losing the steps
//! since.
//! Proven by the rank's restarts and its last exit; recovered by removing the setting. On Kubernetes the
//! setting is a `rank-<N>.<NAME>` key of the job's ConfigMap, which rank N alone reads when it starts.

use async_trait::async_trait;
use lab_model::status::LabStatus;
use lab_model::{ChangeRecord, names};

use super::{Applied, Cx, Injector, Look, PROOF_DEADLINE, mismatched, not_proven, wait_until};
use crate::FaultError;
use crate::ledger::Before;

/// The rank setting the fault puts on the rank: its simulated accelerator fails after this many steps.
pub const SETTING: &str = lab_model::actions::DEVICE_FAULT_SETTING;

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::RankCrash;

#[async_trait]
impl Injector for RankCrash {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        let rank = self.rank;
        let pod = super::rank_pod(status, rank)?;
        super::running(pod, rank, "crash")?;
        Ok(())
    }

    async fn apply(&self, cx: &Cx<'_>, _status: &LabStatus) -> Result<Applied, FaultError> {
        let rank = self.rank;
        let env = cx
            .rt
            .rank_env(rank)
            .await
            .map_err(FaultError::runtime(format!("reading rank-{rank}'s settings")))?;
        let old = env.get(SETTING).cloned();
        if old.as_deref() == Some(self.after.to_string().as_str()) {
            return Err(FaultError::Invalid(format!(
                "rank-{rank} already has {SETTING}={}: clear that first",
                self.after
            )));
        }
        cx.set_before(Before::RankEnv {
            name: SETTING.into(),
            value: old.clone(),
        })
        .await?;
        cx.rt
            .set_rank_env(rank, SETTING, Some(self.after.to_string()))
            .await
            .map_err(FaultError::runtime(format!("setting {SETTING} on rank-{rank}")))?;
        Ok(Applied {
            changes: vec![cx.change(
                names::rank(rank),
                SETTING,
                old.unwrap_or_else(|| "unset".into()),
                self.after.to_string(),
                Some("a setting of this rank alone: its accelerator fails after that many steps".into()),
            )],
            ..Applied::default()
        })
    }

    async fn prove(
        &self,
        cx: &Cx<'_>,
        status: &LabStatus,
        _applied: &mut Applied,
    ) -> Result<String, FaultError> {
        let rank = self.rank;
        let rt = cx.rt;
        // What the rank's pod said before: on a lab just used, the pod may already show restarts and an old
        // exit of its own code, so neither proves the crash; only a restart that ended in a failure since.
        let before = status
            .ranks()
            .find(|p| p.index == Some(rank))
            .map(|p| (p.restarts, p.last_exit_code));
        let look = move || async move {
            let st = rt
                .status()
                .await
                .map_err(FaultError::runtime("reading the lab's status"))?;
            let own = i32::from(lab_model::actions::DEVICE_FAULT_EXIT);
            Ok(match st.ranks().find(|p| p.index == Some(rank)) {
                // A pod on its way out (the one replaced to pick the setting up) proves nothing; nor does an
                // exit 0 (stopped as asked), a restart after its peers' collective error, or one counted
                // before the setting (on a lab just used, the pod still shows them): a restart since the
                // inject that ended in the rank's own device fault does (its exit code, where the runtime
                // still reports one).
                Some(p)
                    if p.restarts >= 1
                        && p.reason.as_deref() != Some("Terminating")
                        && p.last_exit_code.is_none_or(|c| c == own)
                        && before != Some((p.restarts, p.last_exit_code)) =>
                {
                    Look::Done(format!(
                        "rank-{rank} crashed and was restarted {} time(s) (last exit: {})",
                        p.restarts,
                        // On Kubernetes the message is there only while the container waits to restart.
                        p.message
                            .clone()
                            .or_else(|| p.last_exit_code.map(|c| format!("exit code {c}")))
                            .unwrap_or_else(|| "unknown".into())
                    ))
                }
                _ => Look::NotYet(format!(
                    "rank-{rank} did not crash within {} s",
                    PROOF_DEADLINE.as_secs()
                )),
            })
        };
        wait_until(PROOF_DEADLINE, look, |why| not_proven(cx, why)).await
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::RankEnv { name, value } = before else {
            return Err(mismatched(cx, before));
        };
        let rank = self.rank;
        let now = cx
            .rt
            .rank_env(rank)
            .await
            .map_err(FaultError::runtime(format!("reading rank-{rank}'s settings")))?;
        let current = now.get(name).cloned();
        // Put back by the operator already (`lab rank env --unset`): nothing to undo.
        if current == *value {
            return Ok(Vec::new());
        }
        cx.rt
            .set_rank_env(rank, name, value.clone())
            .await
            .map_err(FaultError::runtime(format!("putting back {name} on rank-{rank}")))?;
        let back = cx
            .rt
            .rank_env(rank)
            .await
            .map_err(FaultError::runtime(format!("reading rank-{rank}'s settings")))?;
        if back.get(name) != value.as_ref() {
            return Err(FaultError::NotRestored {
                id: cx.id.into(),
                why: format!("rank-{rank}'s {name} reads {:?}", back.get(name)),
            });
        }
        Ok(vec![cx.change(
            names::rank(rank),
            name,
            current.unwrap_or_else(|| "unset".into()),
            value.clone().unwrap_or_else(|| "unset".into()),
            Some("cleared".into()),
        )])
    }
}
