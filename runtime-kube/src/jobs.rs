//! Jobs of other teams on Kubernetes (the competing-job fault, `lab job list/throttle/stop`): each is a
//! Deployment of its own (`manifests/foreign-job.yaml`), labelled `app.kubernetes.io/component:
//! foreign-job` and `lab.dev/job: <name>`, running `lab-reader` in its own pod with its own CPU limit and
//! no GPU. It is never a rank and not in the ranks' StatefulSet. Its settings are annotations on the
//! Deployment; throttling applies it again with `--rate` (the Deployment replaces its pod), stopping
//! deletes it and waits until its pod is gone, so its reads have stopped when the command returns.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DeleteParams, ListParams};
use lab_model::jobs::{ForeignJob, MAX_FOREIGN_JOBS, MAX_THREADS, is_training_name, validate_job_name};

use super::manifests::names as obj;
use super::{KubeRuntime, api};
use lab_runtime::{Result, RuntimeError};

/// The foreign job a Deployment describes, from its labels and annotations (`None`: not one).
pub fn job_of(d: &Deployment) -> Option<ForeignJob> {
    let labels = d.metadata.labels.as_ref()?;
    if labels.get(obj::COMPONENT_LABEL)? != obj::FOREIGN_JOB_COMPONENT {
        return None;
    }
    let name = labels.get(obj::JOB_LABEL)?.clone();
    let ann = d.metadata.annotations.as_ref()?;
    let server = ann.get("lab.dev/server")?.parse().ok()?;
    let threads = ann.get("lab.dev/threads")?.parse().ok()?;
    let rate = match ann.get("lab.dev/rate").map(String::as_str) {
        None | Some("none") => None,
        Some(r) => Some(r.parse().ok()?),
    };
    Some(ForeignJob {
        name,
        server,
        threads,
        rate,
    })
}

/// Checks a job's settings against the lab before anything is applied.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] saying what is wrong.
pub fn check_job(job: &ForeignJob, storage_servers: u32) -> Result<()> {
    validate_job_name(&job.name).map_err(RuntimeError::InvalidInput)?;
    if job.server >= storage_servers {
        return Err(RuntimeError::InvalidInput(format!(
            "storage-{} does not exist: the lab has storage-0 to storage-{}",
            job.server,
            storage_servers.saturating_sub(1)
        )));
    }
    if job.threads == 0 || job.threads > MAX_THREADS {
        return Err(RuntimeError::InvalidInput(format!(
            "threads must be between 1 and {MAX_THREADS}"
        )));
    }
    if let Some(r) = job.rate
        && !(r.is_finite() && r > 0.0 && r <= lab_model::jobs::MAX_READ_RATE)
    {
        return Err(RuntimeError::InvalidInput(format!(
            "read rate {r} must be more than 0 and at most {} reads/s",
            lab_model::jobs::MAX_READ_RATE
        )));
    }
    Ok(())
}

impl KubeRuntime {
    fn deployments_api(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), &self.rec.namespace)
    }

    /// The foreign jobs' Deployments (not being deleted).
    pub(super) async fn foreign_deployments(&self) -> Result<Vec<ForeignJob>> {
        let lp = ListParams::default().labels(&format!(
            "{}={},{}={}",
            obj::INSTANCE_LABEL,
            self.name,
            obj::COMPONENT_LABEL,
            obj::FOREIGN_JOB_COMPONENT
        ));
        let list = api::within("list foreign jobs", self.rec.request_timeout, async {
            self.deployments_api()
                .list(&lp)
                .await
                .map_err(|e| api::kube_err("list foreign jobs (deployments)", e))
        })
        .await?;
        let mut jobs: Vec<ForeignJob> = list
            .items
            .iter()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .filter_map(job_of)
            .collect();
        jobs.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(jobs)
    }

    /// Runs `job`, or applies the one of that name again with new settings (its pod is replaced).
    pub(super) async fn run_job(&self, job: &ForeignJob) -> Result<()> {
        check_job(job, self.rec.storage_servers)?;
        let existing = self.foreign_deployments().await?;
        if !existing.iter().any(|j| j.name == job.name) {
            if existing.len() >= MAX_FOREIGN_JOBS {
                return Err(RuntimeError::InvalidInput(format!(
                    "this lab already runs {MAX_FOREIGN_JOBS} foreign jobs: stop one first"
                )));
            }
            // A Deployment of the lab's own with that name (prometheus, storage-master...) is not a job.
            let taken = api::within("read a deployment", self.rec.request_timeout, async {
                self.deployments_api()
                    .get_opt(&job.name)
                    .await
                    .map_err(|e| api::kube_err(format!("read deployment {}", job.name), e))
            })
            .await?;
            if taken.is_some() {
                return Err(RuntimeError::InvalidInput(format!(
                    "{} is one of the lab's own objects, not a job of another team: pick another name",
                    job.name
                )));
            }
        }
        let settings = self
            .rec
            .settings(&self.name, self.rec.ranks, self.rec.ranks, self.rec.cpu);
        let objects = settings.foreign_job(job)?;
        api::apply_all(&self.client, &self.rec.namespace, &objects).await
    }

    /// Stops foreign job `name`: deletes its Deployment and waits until its pod is gone.
    pub(super) async fn stop_job(&self, name: &str) -> Result<()> {
        if is_training_name(name) {
            return Err(RuntimeError::InvalidInput(format!(
                "{name} is the training job (or one of its ranks), not a foreign job: `lab job` acts only on \
                 jobs of other teams"
            )));
        }
        let jobs = self.foreign_deployments().await?;
        if !jobs.iter().any(|j| j.name == name) {
            let known: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
            return Err(RuntimeError::InvalidInput(if known.is_empty() {
                format!("no foreign job named {name:?}: none runs on this lab")
            } else {
                format!(
                    "no foreign job named {name:?}: this lab runs {}",
                    known.join(", ")
                )
            }));
        }
        let what = format!("delete deployment {name}");
        api::within(&what, self.rec.request_timeout, async {
            match self
                .deployments_api()
                .delete(name, &DeleteParams::background())
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(api::kube_err(what.clone(), e)),
            }
        })
        .await?;
        // Stopped means its reads stopped: its pod is gone, not only its Deployment.
        let lp = ListParams::default().labels(&format!(
            "{}={},{}={name}",
            obj::INSTANCE_LABEL,
            self.name,
            obj::JOB_LABEL
        ));
        let deadline = Instant::now() + self.rec.wait_timeout;
        loop {
            let left = api::within("list a job's pods", self.rec.request_timeout, async {
                self.pods_api()
                    .list(&lp)
                    .await
                    .map_err(|e| api::kube_err("list a job's pods", e))
            })
            .await?;
            if left.items.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::Timeout {
                    what: format!("job {name}'s pod to go"),
                    seconds: self.rec.wait_timeout.as_secs_f64(),
                });
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_model::jobs::ForeignJob;

    fn etl(rate: Option<f64>) -> ForeignJob {
        ForeignJob {
            name: "nightly-etl".into(),
            server: 1,
            threads: 16,
            rate,
        }
    }

    #[test]
    fn bad_settings_are_refused_before_anything_is_applied() {
        assert!(check_job(&etl(None), 3).is_ok());
        assert!(check_job(&etl(Some(20.0)), 3).is_ok());
        let e = check_job(&etl(None), 1).unwrap_err().to_string();
        assert!(e.contains("storage-1 does not exist"), "{e}");
        for bad in [Some(0.0), Some(-1.0), Some(f64::NAN)] {
            assert!(check_job(&etl(bad), 3).is_err(), "{bad:?}");
        }
        let rank = ForeignJob {
            name: "rank-1".into(),
            ..etl(None)
        };
        assert!(check_job(&rank, 3).is_err());
        let none = ForeignJob {
            threads: 0,
            ..etl(None)
        };
        assert!(check_job(&none, 3).is_err());
    }
}
