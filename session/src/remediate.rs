//! What a person or an agent does to the opened lab besides faults: the remediation commands (scale, world
//! size, resize, restart, apply, what runs beside a rank, drain), the jobs on its storage, the database
//! beside the job, and a checkpoint on request. Each is one call on [`Lab`], written into the lab's ledger
//! as a change record by the fault engine's own actions.

use std::collections::BTreeMap;
use std::time::Duration;

use lab_faults::checkpoint::Saved;
use lab_faults::drain::DrainReport;
use lab_faults::kinds::WriterReading;
use lab_faults::{db, drain, jobs, remediate};
use lab_model::ChangeRecord;
use lab_model::db::DbStatus;
use lab_model::jobs::JobLine;
use lab_model::quantity::Millicores;
use lab_model::status::{PodStatus, Role};
use lab_runtime::BesideProcess;

use crate::{Lab, Result};

/// `lab db status`: the database's pods, its template and primary, and the writer's signals.
#[derive(Debug, Clone)]
pub struct Database {
    /// The standby's template, the version its pod was made from, the primary's settings.
    pub database: DbStatus,
    /// The database's pods and the writer's, as the lab's status has them.
    pub pods: Vec<PodStatus>,
    /// The writer's signals, when its metrics answer.
    pub writer: Option<WriterReading>,
}

impl Lab {
    /// `lab scale ranks N`: the number of ranks (the job's world size stays).
    ///
    /// # Errors
    /// [`crate::SessionError::Fault`] when the runtime refuses or fails.
    pub async fn scale(&self, ranks: u32) -> Result<ChangeRecord> {
        Ok(remediate::scale(self.runtime.as_ref(), &self.ledger, ranks).await?)
    }

    /// `lab config world-size N`: the world size every rank expects.
    ///
    /// # Errors
    /// As [`Lab::scale`].
    pub async fn world_size(&self, size: u32) -> Result<ChangeRecord> {
        Ok(remediate::world_size(self.runtime.as_ref(), &self.ledger, size).await?)
    }

    /// `lab resize rank R --cpu C`: one rank's CPU limit, in place.
    ///
    /// # Errors
    /// As [`Lab::scale`].
    pub async fn resize(&self, rank: u32, cpu: Millicores) -> Result<ChangeRecord> {
        Ok(remediate::resize(self.runtime.as_ref(), &self.ledger, rank, cpu).await?)
    }

    /// `lab restart rank R`: the rank replaced from the template.
    ///
    /// # Errors
    /// As [`Lab::scale`].
    pub async fn restart(&self, rank: u32) -> Result<ChangeRecord> {
        Ok(remediate::restart(self.runtime.as_ref(), &self.ledger, rank).await?)
    }

    /// `lab apply --cpu C`: the rank template re-applied with this CPU limit.
    ///
    /// # Errors
    /// As [`Lab::scale`].
    pub async fn apply_template(&self, cpu: Millicores) -> Result<ChangeRecord> {
        Ok(remediate::apply_template(self.runtime.as_ref(), &self.ledger, cpu).await?)
    }

    /// `lab rank procs R`: every process in the rank's CPU limit, its own included.
    ///
    /// # Errors
    /// As [`Lab::scale`]; an unknown rank is refused.
    pub async fn rank_processes(&self, rank: u32) -> Result<Vec<BesideProcess>> {
        Ok(remediate::rank_processes(self.runtime.as_ref(), rank).await?)
    }

    /// `lab rank stop R --pid P`: one process beside the rank stopped (never the rank itself).
    ///
    /// # Errors
    /// As [`Lab::scale`]; the rank's own pid, or one not beside it, is refused.
    pub async fn stop_beside(&self, rank: u32, pid: u32) -> Result<ChangeRecord> {
        Ok(remediate::stop_beside(self.runtime.as_ref(), &self.ledger, rank, pid).await?)
    }

    /// `lab rank env R`: the settings of this rank alone.
    ///
    /// # Errors
    /// As [`Lab::scale`]; an unknown rank is refused.
    pub async fn rank_env(&self, rank: u32) -> Result<BTreeMap<String, String>> {
        Ok(remediate::rank_env(self.runtime.as_ref(), rank).await?)
    }

    /// `lab rank env R --set NAME=VALUE` (`value` given) or `--unset NAME`: the rank restarts with it.
    ///
    /// # Errors
    /// As [`Lab::scale`]; a name that is not a `LAB_*` setting, or unsetting what is not set, is refused.
    pub async fn set_rank_env(&self, rank: u32, name: &str, value: Option<String>) -> Result<ChangeRecord> {
        Ok(remediate::set_rank_env(self.runtime.as_ref(), &self.ledger, rank, name, value).await?)
    }

    /// `lab storage drain N`: every volume moved off storage server `server`.
    ///
    /// # Errors
    /// As [`Lab::scale`]; an unknown server, one already drained, or the last healthy one is refused.
    pub async fn drain(&self, server: u32) -> Result<DrainReport> {
        Ok(drain::drain(self.runtime.as_ref(), &self.ledger, server).await?)
    }

    /// `lab storage undrain N`: the volumes its drain moved away moved back.
    ///
    /// # Errors
    /// As [`Lab::scale`].
    pub async fn undrain(&self, server: u32) -> Result<DrainReport> {
        Ok(drain::undrain(self.runtime.as_ref(), &self.ledger, server).await?)
    }

    /// `lab job list`: every job on the lab's storage, its read rate measured over `window`.
    ///
    /// # Errors
    /// As [`Lab::scale`].
    pub async fn jobs(&self, window: Duration) -> Result<Vec<JobLine>> {
        Ok(jobs::list(self.runtime.as_ref(), window).await?)
    }

    /// `lab job throttle JOB --rate R`: another team's job held to `rate` reads per second.
    ///
    /// # Errors
    /// As [`Lab::scale`]; a rank or the training job is refused.
    pub async fn throttle_job(&self, job: &str, rate: f64) -> Result<ChangeRecord> {
        Ok(jobs::throttle(self.runtime.as_ref(), &self.ledger, job, rate).await?)
    }

    /// `lab job stop JOB`: another team's job stopped.
    ///
    /// # Errors
    /// As [`Lab::throttle_job`].
    pub async fn stop_job(&self, job: &str) -> Result<ChangeRecord> {
        Ok(jobs::stop(self.runtime.as_ref(), &self.ledger, job).await?)
    }

    /// `lab db status`.
    ///
    /// # Errors
    /// [`crate::SessionError::Runtime`] when the lab runs no database or does not answer.
    pub async fn database(&self) -> Result<Database> {
        let database = self.runtime.database().await?;
        let st = self.runtime.status().await?;
        let writer = lab_faults::kinds::sync_replica_reading(self.runtime.as_ref())
            .await
            .ok();
        let pods = st
            .pods
            .into_iter()
            .filter(|p| matches!(p.role, Role::Database | Role::DbWriter))
            .collect();
        Ok(Database {
            database,
            pods,
            writer,
        })
    }

    /// `lab db template --node-selector S`: the standby StatefulSet's template changed.
    ///
    /// # Errors
    /// As [`Lab::scale`].
    pub async fn set_db_template(&self, node_selector: &str) -> Result<ChangeRecord> {
        Ok(db::set_template(self.runtime.as_ref(), &self.ledger, node_selector).await?)
    }

    /// `lab db delete-pod P`: a database pod deleted by name, made again from its template.
    ///
    /// # Errors
    /// As [`Lab::scale`].
    pub async fn delete_db_pod(&self, pod: &str) -> Result<ChangeRecord> {
        Ok(db::delete_pod(self.runtime.as_ref(), &self.ledger, pod).await?)
    }

    /// `lab checkpoint`: the job asked to save a checkpoint now, waited for up to `timeout`; `progress`
    /// hears where the job stands meanwhile.
    ///
    /// # Errors
    /// [`crate::SessionError::Fault`] when the job is not training, does not save in time, or rank 0
    /// cannot be reached (nothing is recorded then).
    pub async fn checkpoint(&self, timeout: Duration, progress: &(dyn Fn(&str) + Sync)) -> Result<Saved> {
        Ok(
            lab_faults::checkpoint::checkpoint(self.runtime.as_ref(), &self.ledger, timeout, progress)
                .await?,
        )
    }
}
