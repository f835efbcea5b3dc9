//! `competing-job`: a job of another team (its own process and cgroup, not a rank) reads hard from one
//! storage server; that server's reads per second and its own latency rise, and the rank that reads
//! from it slows. Proven by the server's own GET rate (SeaweedFS's counter) against what it was before,
//! and the foreign job's own read rate on that server. Recovered by stopping that job.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use lab_model::jobs::ForeignJob;
use lab_model::status::LabStatus;
use lab_model::{ChangeRecord, names};
use lab_runtime::Runtime;

use super::{Applied, Cx, Injector, Look, PROOF_DEADLINE, mismatched, not_proven, wait_until};
use crate::FaultError;
use crate::ledger::Before;

/// The name the fault gives the other team's job.
pub const JOB_NAME: &str = "nightly-etl";

/// How long each rate is measured over while the job runs.
const RATE_WINDOW: Duration = Duration::from_secs(2);
/// How long the server's GET rate before the job is measured over: the fault starts only after it, and
/// every second here is a second later to the first alert. A rank serves itself one GET per step from its
/// server (24–30/s at 33–41 ms a step), so half a second counts a dozen reads or more per rank: close
/// enough for a proof that asks for half as much again and 5 more.
const BEFORE_WINDOW: Duration = Duration::from_millis(500);

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::CompetingJob;

fn job(this: &CompetingJob) -> ForeignJob {
    ForeignJob {
        name: JOB_NAME.into(),
        server: this.server,
        threads: this.threads,
        rate: None,
    }
}

/// GET/s of every server and reads/s of every foreign job, over `window`.
async fn measure(
    rt: &dyn Runtime,
    window: Duration,
) -> Result<(BTreeMap<String, f64>, BTreeMap<String, f64>), FaultError> {
    let r = crate::jobs::measure(rt, window).await?;
    Ok((r.server_gets, r.job_reads))
}

#[async_trait]
impl Injector for CompetingJob {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        let server = self.server;
        super::storage_server(status, server)?;
        if self.threads == 0 || self.threads > lab_model::jobs::MAX_THREADS {
            return Err(FaultError::Invalid(format!(
                "--threads must be between 1 and {}",
                lab_model::jobs::MAX_THREADS
            )));
        }
        if status.pods.iter().any(|p| p.name == JOB_NAME) {
            return Err(FaultError::Invalid(format!(
                "a job named {JOB_NAME} already runs on this lab: `lab job stop {JOB_NAME}` first"
            )));
        }
        Ok(())
    }

    async fn apply(&self, cx: &Cx<'_>, _status: &LabStatus) -> Result<Applied, FaultError> {
        let server = self.server;
        let (gets, _) = measure(cx.rt, BEFORE_WINDOW).await?;
        let before = gets.get(&names::storage(server)).copied().unwrap_or(0.0);
        cx.set_before(Before::NoJob {
            name: JOB_NAME.into(),
        })
        .await?;
        cx.rt
            .run_foreign_job(&job(self))
            .await
            .map_err(FaultError::runtime(format!("starting job {JOB_NAME}")))?;
        Ok(Applied {
            rates_before: vec![before],
            changes: vec![cx.change(
                JOB_NAME.into(),
                "foreign job",
                "none".into(),
                format!(
                    "reading storage-{server} from {} connections, unthrottled",
                    self.threads
                ),
                Some("a job of another team, not a rank".into()),
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
        let server = names::storage(self.server);
        let before = applied.rates_before.first().copied().unwrap_or(0.0);
        let (rt, server) = (cx.rt, &server);
        let look = move || async move {
            let (gets, jobs) = measure(rt, RATE_WINDOW).await?;
            let now = gets.get(server).copied().unwrap_or(0.0);
            let job = jobs.get(JOB_NAME).copied().unwrap_or(0.0);
            let proof = format!(
                "{server} serves {now:.0} GET/s (before: {before:.0}); {JOB_NAME} reads {job:.0}/s from it"
            );
            // The job reads, and the server carries well over what the ranks asked of it before.
            let loaded = job >= 5.0 && now >= before * 1.5 + 5.0;
            Ok(if loaded {
                Look::Done(proof)
            } else {
                Look::NotYet(proof)
            })
        };
        wait_until(PROOF_DEADLINE, look, |proof| not_proven(cx, proof)).await
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::NoJob { name } = before else {
            return Err(mismatched(cx, before));
        };
        let jobs = cx
            .rt
            .foreign_jobs()
            .await
            .map_err(FaultError::runtime("listing foreign jobs"))?;
        let mut changes = Vec::new();
        // Stopped (or never started) already, by a person's `lab job stop`: nothing to undo.
        if let Some(j) = jobs.iter().find(|j| &j.name == name) {
            cx.rt
                .stop_foreign_job(name)
                .await
                .map_err(FaultError::runtime(format!("stopping job {name}")))?;
            changes.push(cx.change(
                name.clone(),
                "foreign job",
                format!(
                    "reading storage-{} ({})",
                    j.server,
                    j.rate.map_or("unthrottled".into(), |r| format!("{r} reads/s"))
                ),
                "none".into(),
                Some("cleared".into()),
            ));
        }
        let left = cx
            .rt
            .foreign_jobs()
            .await
            .map_err(FaultError::runtime("listing foreign jobs"))?;
        if left.iter().any(|j| &j.name == name) {
            return Err(FaultError::NotRestored {
                id: cx.id.into(),
                why: format!("job {name} still runs"),
            });
        }
        Ok(changes)
    }
}
