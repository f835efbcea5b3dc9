//! `lab job …`: the jobs on the lab's storage — the training job and jobs of other teams — with the read
//! rate each one makes, and the two fixes for a noisy neighbour: hold a foreign job to a read rate, or
//! stop it. Like every remediation they leave a change record; what is not a foreign job (a rank, the
//! training job, an unknown name) is refused before anything changes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lab_model::change::ChangeSource;
use lab_model::jobs::{ForeignJob, JobLine, TRAINING_JOB, is_training_name};
use lab_model::metrics as m;
use lab_model::scrape::TargetKind;
use lab_model::status::{Phase, Role};
use lab_model::{ChangeRecord, names};
use lab_runtime::Runtime;
use lab_runtime::state::now_ms;

use crate::{FaultError, Ledger};

/// Counters read from every metrics endpoint at one instant.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// Each storage server's own GET count (SeaweedFS's counter), by server.
    pub server_gets: BTreeMap<String, f64>,
    /// Each foreign job's reads, by job.
    pub job_reads: BTreeMap<String, f64>,
    /// Each rank's successful reads, by rank.
    pub rank_reads: BTreeMap<String, f64>,
}

/// Reads every counter once.
///
/// # Errors
/// When the runtime cannot name its endpoints. An endpoint that does not answer is left out.
pub async fn counts(rt: &dyn Runtime) -> Result<Counts, FaultError> {
    let targets = rt
        .scrape_targets()
        .await
        .map_err(FaultError::runtime("listing metrics endpoints"))?;
    let mut c = Counts::default();
    let get_count = format!("{}_count", m::SEAWEED_VOLUME_REQUEST_SECONDS);
    let read_count = format!("{}_count", m::STORAGE_READ_DURATION);
    for t in &targets {
        let Ok(text) = rt.fetch_metrics(t, Duration::from_secs(3)).await else {
            continue;
        };
        let Ok(samples) = lab_model::expo::parse(&text) else {
            continue;
        };
        for s in samples {
            let into = match t.kind {
                TargetKind::Storage if s.name == get_count && s.labels.get("type") == Some("GET") => {
                    &mut c.server_gets
                }
                TargetKind::Job if s.name == m::JOB_READS => &mut c.job_reads,
                TargetKind::Rank if s.name == read_count => &mut c.rank_reads,
                _ => continue,
            };
            *into.entry(t.instance.clone()).or_default() += s.value;
        }
    }
    Ok(c)
}

/// Rates per second between two readings `secs` apart (a counter that went down restarted: its rate is
/// its new value over the window).
pub fn rates(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>, secs: f64) -> BTreeMap<String, f64> {
    b.iter()
        .map(|(k, vb)| {
            let va = a.get(k).copied().unwrap_or(0.0);
            let d = if *vb >= va { vb - va } else { *vb };
            (k.clone(), d / secs.max(1e-3))
        })
        .collect()
}

/// The rates of every counter over `window`.
#[derive(Debug, Default, Clone)]
pub struct Rates {
    pub server_gets: BTreeMap<String, f64>,
    pub job_reads: BTreeMap<String, f64>,
    pub rank_reads: BTreeMap<String, f64>,
}

/// Measures [`Rates`] over `window`.
///
/// # Errors
/// As [`counts`].
pub async fn measure(rt: &dyn Runtime, window: Duration) -> Result<Rates, FaultError> {
    let a = counts(rt).await?;
    let t = Instant::now();
    tokio::time::sleep(window).await;
    let b = counts(rt).await?;
    let secs = t.elapsed().as_secs_f64();
    Ok(Rates {
        server_gets: rates(&a.server_gets, &b.server_gets, secs),
        job_reads: rates(&a.job_reads, &b.job_reads, secs),
        rank_reads: rates(&a.rank_reads, &b.rank_reads, secs),
    })
}

/// `lab job list`: the training job and every foreign job, with the reads per second each made over
/// `window`.
///
/// # Errors
/// When the runtime cannot be reached.
pub async fn list(rt: &dyn Runtime, window: Duration) -> Result<Vec<JobLine>, FaultError> {
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    let foreign = rt
        .foreign_jobs()
        .await
        .map_err(FaultError::runtime("listing foreign jobs"))?;
    let r = measure(rt, window).await?;
    let ranks: Vec<_> = st.ranks().collect();
    let mut out = vec![JobLine {
        name: TRAINING_JOB.into(),
        kind: "training".into(),
        members: ranks.iter().map(|p| p.name.clone()).collect(),
        running: ranks.iter().filter(|p| p.phase == Phase::Running).count(),
        servers: (0..st.storage_servers).map(names::storage).collect(),
        reads_per_s: (!r.rank_reads.is_empty()).then(|| r.rank_reads.values().sum()),
        rate_limit: None,
    }];
    for j in foreign {
        let pod = st
            .pods
            .iter()
            .find(|p| p.role == Role::ForeignJob && p.name == j.name);
        out.push(JobLine {
            name: j.name.clone(),
            kind: "foreign".into(),
            members: vec![j.name.clone()],
            running: usize::from(pod.is_some_and(|p| p.phase == Phase::Running)),
            servers: vec![names::storage(j.server)],
            reads_per_s: r.job_reads.get(&j.name).copied(),
            rate_limit: j.rate,
        });
    }
    Ok(out)
}

/// The foreign job `name`, or a refusal that says what `name` is instead.
async fn foreign(rt: &dyn Runtime, name: &str) -> Result<ForeignJob, FaultError> {
    if is_training_name(name) {
        return Err(FaultError::Invalid(format!(
            "{name} is the training job (or one of its ranks), not a foreign job: `lab job throttle` and \
             `lab job stop` act only on jobs of other teams (see `lab job list`)"
        )));
    }
    let jobs = rt
        .foreign_jobs()
        .await
        .map_err(FaultError::runtime("listing foreign jobs"))?;
    let known: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    jobs.iter().find(|j| j.name == name).cloned().ok_or_else(|| {
        FaultError::Invalid(if known.is_empty() {
            format!("no foreign job named {name:?}: none runs on this lab (see `lab job list`)")
        } else {
            format!(
                "no foreign job named {name:?}: this lab runs {} (see `lab job list`)",
                known.join(", ")
            )
        })
    })
}

fn rate_text(r: Option<f64>) -> String {
    r.map_or_else(|| "unthrottled".into(), |r| format!("{r} reads/s"))
}

fn record(
    ledger: &Ledger,
    target: String,
    before: String,
    after: String,
) -> Result<ChangeRecord, FaultError> {
    let c = ChangeRecord {
        at_ms: now_ms(),
        source: ChangeSource::Remediation,
        target,
        what: "foreign job".into(),
        before,
        after,
        note: None,
        fault_id: None,
        by: None,
    };
    ledger.record(vec![c.clone()])?;
    Ok(c)
}

/// `lab job throttle NAME --rate R`: holds foreign job `name` to `rate` reads per second (its process is
/// replaced with the new setting, as a Deployment rolls its pod).
///
/// # Errors
/// [`FaultError::Invalid`] for a rate that is not more than 0, or a name that is not a foreign job
/// (nothing changed); the runtime's error.
pub async fn throttle(
    rt: &dyn Runtime,
    ledger: &Ledger,
    name: &str,
    rate: f64,
) -> Result<ChangeRecord, FaultError> {
    if !(rate.is_finite() && rate > 0.0 && rate <= lab_model::jobs::MAX_READ_RATE) {
        return Err(FaultError::Invalid(format!(
            "--rate must be more than 0 and at most {} reads/s: to stop the job, use `lab job stop {name}`",
            lab_model::jobs::MAX_READ_RATE
        )));
    }
    let job = foreign(rt, name).await?;
    let after = ForeignJob {
        rate: Some(rate),
        ..job.clone()
    };
    rt.run_foreign_job(&after)
        .await
        .map_err(FaultError::runtime(format!("throttling job {name}")))?;
    record(
        ledger,
        name.into(),
        format!("reading storage-{} {}", job.server, rate_text(job.rate)),
        format!("reading storage-{} {}", job.server, rate_text(Some(rate))),
    )
}

/// `lab job stop NAME`: stops foreign job `name`.
///
/// # Errors
/// [`FaultError::Invalid`] for a name that is not a foreign job (nothing changed); the runtime's error.
pub async fn stop(rt: &dyn Runtime, ledger: &Ledger, name: &str) -> Result<ChangeRecord, FaultError> {
    let job = foreign(rt, name).await?;
    rt.stop_foreign_job(name)
        .await
        .map_err(FaultError::runtime(format!("stopping job {name}")))?;
    record(
        ledger,
        name.into(),
        format!("reading storage-{} {}", job.server, rate_text(job.rate)),
        "stopped".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_survive_a_restarted_counter() {
        let a = BTreeMap::from([("storage-1".to_string(), 100.0), ("storage-0".to_string(), 50.0)]);
        let b = BTreeMap::from([
            ("storage-1".to_string(), 300.0),
            ("storage-0".to_string(), 10.0),
            ("nightly-etl".to_string(), 40.0),
        ]);
        let r = rates(&a, &b, 2.0);
        assert_eq!(r["storage-1"], 100.0);
        assert_eq!(r["storage-0"], 5.0, "a counter that went down restarted");
        assert_eq!(r["nightly-etl"], 20.0, "a new counter counts from 0");
    }
}
