//! `lab checkpoint`: asks the training job to save a checkpoint now, waits until it has, and writes the
//! action into the change log (source remediation: whoever ran it, a person or an agent's plan), so an
//! incident shows that the run was saved before the fix. It changes nothing in the lab.

use std::time::{Duration, Instant};

use lab_model::ChangeRecord;
use lab_model::change::ChangeSource;
use lab_model::checkpoint::{self as ckpt, CheckpointState, SavedCheckpoint};
use lab_runtime::{Runtime, state::now_ms};
use serde::Serialize;

use crate::{FaultError, Ledger};

/// How long one request to rank 0's endpoint may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the job is asked whether it has saved.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// How often the wait reports where the job stands.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// A checkpoint the job saved on request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Saved {
    /// The step saved.
    pub step: u64,
    /// When the job finished writing it, ms since the Unix epoch, and as RFC 3339 (UTC).
    pub at_ms: u64,
    pub at: String,
    /// From the request to the job's answer, seconds.
    pub waited_s: f64,
    /// The checkpoint before it, if the job had written one since rank 0 started.
    pub previous: Option<SavedCheckpoint>,
    /// The change record written for it.
    pub change: ChangeRecord,
}

/// The time as RFC 3339 in UTC, to the millisecond.
pub fn rfc3339(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// Asks the job to save a checkpoint after the step it is in, and waits up to `timeout` for it; `progress`
/// hears where the job stands while it waits.
///
/// # Errors
/// [`FaultError::Invalid`] when the job is not training (nothing is asked then);
/// [`FaultError::NotAnswered`] when it did not save in time or rank 0 restarted meanwhile (the request
/// then lapses); the runtime's error when rank 0 cannot be reached. Nothing is recorded on an error.
pub async fn checkpoint(
    rt: &dyn Runtime,
    ledger: &Ledger,
    timeout: Duration,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Saved, FaultError> {
    if timeout.is_zero() {
        return Err(FaultError::Invalid(
            "--timeout must be more than 0 (e.g. 60s)".into(),
        ));
    }
    let read = |save: bool| async move {
        rt.checkpoint(save, REQUEST_TIMEOUT)
            .await
            .map_err(FaultError::runtime("asking rank-0 for a checkpoint"))
    };
    let before = read(false).await?;
    if !before.training {
        return Err(FaultError::Invalid(
            "the job is not training (rank-0 waits at rendezvous for its peers), so there is no step to save: \
             nothing was asked; `lab status` shows which rank is missing"
                .into(),
        ));
    }
    let asked = Instant::now();
    let posted = read(true).await?;
    let request = posted.requested;
    progress(&format!(
        "asked the job to save a checkpoint (request {request}; rank-0 at step {})",
        posted.step
    ));
    let deadline = asked + timeout;
    let mut last_report = Instant::now();
    let mut now = posted.clone();
    loop {
        if now.started_ms != posted.started_ms {
            return Err(FaultError::NotAnswered(
                "rank-0 restarted before it saved the checkpoint, and a new rank-0 does not know the request: \
                 run `lab checkpoint` again once the job trains"
                    .into(),
            ));
        }
        if let Some(c) = now.answer(request) {
            let change = ChangeRecord {
                at_ms: now_ms(),
                source: ChangeSource::Remediation,
                target: ckpt::CHANGE_TARGET.into(),
                what: ckpt::CHANGE_WHAT.into(),
                before: before.last.map_or_else(
                    || "none since rank-0 started".into(),
                    |p| format!("step {}", p.step),
                ),
                after: format!("step {}", c.step),
                note: Some(format!("saved at {}", rfc3339(c.at_ms))),
                fault_id: None,
                by: None,
            };
            ledger.record(vec![change.clone()])?;
            return Ok(Saved {
                step: c.step,
                at_ms: c.at_ms,
                at: rfc3339(c.at_ms),
                waited_s: asked.elapsed().as_secs_f64(),
                previous: before.last,
                change,
            });
        }
        if Instant::now() >= deadline {
            return Err(FaultError::NotAnswered(stalled(&posted, &now, timeout)));
        }
        if last_report.elapsed() >= PROGRESS_EVERY {
            last_report = Instant::now();
            progress(&format!(
                "waiting for the job to save it: rank-0 at step {} ({:.0} s)",
                now.step,
                asked.elapsed().as_secs_f64()
            ));
        }
        tokio::time::sleep(POLL_EVERY).await;
        // A read that fails is retried until the deadline: rank 0 may be busy or briefly unreachable.
        match read(false).await {
            Ok(s) => now = s,
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => {}
        }
    }
}

/// Why the job did not answer within `timeout`, from where it stood when asked and now.
fn stalled(asked: &CheckpointState, now: &CheckpointState, timeout: Duration) -> String {
    let secs = timeout.as_secs_f64();
    if now.step == asked.step {
        format!(
            "the job did not save a checkpoint within {secs:.0} s: rank-0 stayed at step {} and finished no \
             step in that time, so the job is stalled (a rank it waits for at the all-reduce, or its storage); \
             nothing was saved — `lab status` shows where it waits",
            now.step
        )
    } else {
        format!(
            "the job did not save a checkpoint within {secs:.0} s although it went from step {} to {}: the \
             write to storage did not finish (rank-0's log says why); nothing was recorded, try a longer \
             --timeout",
            asked.step, now.step
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_runtime::testing::FakeRuntime;

    fn ledger() -> (tempfile::TempDir, Ledger) {
        let t = tempfile::tempdir().unwrap();
        let l = Ledger::in_dir(t.path());
        (t, l)
    }

    #[tokio::test]
    async fn the_job_saves_and_the_change_log_says_so() {
        let rt = FakeRuntime::new();
        rt.update(|l| {
            l.steps.insert(0, 412);
        });
        let (_t, l) = ledger();
        let said = std::sync::Mutex::new(Vec::new());
        let s = checkpoint(&rt, &l, Duration::from_secs(5), &|m: &str| {
            said.lock().unwrap().push(m.to_string())
        })
        .await
        .unwrap();
        assert_eq!(s.step, 412);
        assert!(said.lock().unwrap()[0].contains("request 1"));
        let changes = l.read().unwrap().changes;
        assert_eq!(changes.len(), 1);
        assert!(ckpt::is_checkpoint(&changes[0]));
        assert_eq!(changes[0].source, ChangeSource::Remediation);
        assert_eq!(
            changes[0].line(),
            format!(
                "training job checkpoint none since rank-0 started → step 412; saved at {}",
                s.at
            )
        );
    }

    #[tokio::test]
    async fn a_stalled_job_times_out_and_nothing_is_recorded() {
        let rt = FakeRuntime::new();
        let (_t, l) = ledger();
        // Asked while it trains, then its training thread stops between two steps.
        rt.update(|l| {
            l.steps.insert(0, 50);
        });
        let rt2 = rt.clone();
        let freeze = async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            rt2.update(|l| {
                l.frozen.insert(0);
            });
        };
        let (r, ()) = tokio::join!(
            checkpoint(&rt, &l, Duration::from_millis(600), &|_: &str| {}),
            freeze
        );
        let e = r.unwrap_err();
        assert!(matches!(e, FaultError::NotAnswered(_)), "{e}");
        assert!(e.to_string().contains("stayed at step 50"), "{e}");
        assert!(l.read().unwrap().changes.is_empty());
    }

    #[tokio::test]
    async fn a_job_that_does_not_train_is_not_asked() {
        let rt = FakeRuntime::new();
        rt.update(|l| {
            l.frozen.insert(0);
        });
        let (_t, l) = ledger();
        let e = checkpoint(&rt, &l, Duration::from_secs(1), &|_: &str| {})
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not training"), "{e}");
        assert_eq!(rt.calls(), ["checkpoint(false)"]);
        assert!(l.read().unwrap().changes.is_empty());
        // A lab whose rank 0 does not run at all: the runtime says so.
        rt.update(|l| l.gpus = 0);
        let e = checkpoint(&rt, &l, Duration::from_secs(1), &|_: &str| {})
            .await
            .unwrap_err();
        assert!(e.to_string().contains("asking rank-0"), "{e}");
        assert!(
            checkpoint(&rt, &l, Duration::ZERO, &|_: &str| {})
                .await
                .unwrap_err()
                .to_string()
                .contains("--timeout")
        );
    }
}
