//! The database writer's recovery (`verify: job: writer`): its commits per second back within a tolerance
//! of the pre-fault baseline, held for a time, reached before a deadline. A pure judge of snapshots, like
//! those in [`crate::judge`]; a drill about the database verifies on the writer's signals, because the
//! training job beside it never noticed the fault (its throughput would pass any fix, the trap included).

use lab_model::Snapshot;
use lab_model::db;

use crate::judge::{Outcome, Recovery, job_step};
use lab_drill_file::spec::Verify;

/// Decides whether the writer's commits are back.
#[derive(Debug)]
pub struct CommitsRecovery {
    from_ms: u64,
    deadline_ms: u64,
    hold_ms: u64,
    tolerance: f64,
    /// Pre-fault commits per second.
    baseline: f64,
    /// Since when the commits have been back, and the training step then.
    run: Option<(u64, Option<u64>)>,
    best_ms: u64,
    last: String,
}

impl CommitsRecovery {
    /// Counting from `from_ms` (the end of the remediation), against `baseline` commits per second.
    pub fn new(spec: &Verify, baseline: f64, from_ms: u64) -> Self {
        CommitsRecovery {
            from_ms,
            deadline_ms: spec.deadline.as_millis() as u64,
            hold_ms: spec.hold.as_millis() as u64,
            tolerance: spec.within_pct / 100.0,
            baseline,
            run: None,
            best_ms: 0,
            last: "no measurement yet".into(),
        }
    }

    /// Adds a snapshot.
    pub fn push(&mut self, s: &Snapshot) -> Outcome<Recovery> {
        if s.at_ms < self.from_ms {
            return Outcome::Pending("waiting for the remediation to end".into());
        }
        let commits = s.database.as_ref().map(|d| d.commits_per_s);
        let ok = commits.is_some_and(|c| c >= self.baseline * (1.0 - self.tolerance));
        self.last = match &s.database {
            Some(d) => format!(
                "{:.1} commits/s ({:.0}% of the pre-fault {:.1}), the commit in flight waiting {:.1} s",
                d.commits_per_s,
                pct(d.commits_per_s, self.baseline),
                self.baseline,
                d.commit_waiting_s
            ),
            None => format!("{} reports no commits (not scraped)", db::WRITER),
        };
        if ok {
            let (since, _) = *self.run.get_or_insert((s.at_ms, job_step(s)));
            let held = s.at_ms - since;
            self.best_ms = self.best_ms.max(held);
            if held >= self.hold_ms {
                return Outcome::Done(Recovery {
                    back_at_ms: since,
                    verified_at_ms: s.at_ms,
                    // Training steps while the commits were back: the writer's verdict does not count them.
                    steps: job_step(s)
                        .zip(self.run.and_then(|r| r.1))
                        .map_or(0, |(now, then)| now.saturating_sub(then)),
                    pct: commits.map_or(0.0, |c| pct(c, self.baseline)),
                    step_seconds: crate::judge::step_time(s).unwrap_or(0.0),
                });
            }
        } else {
            self.run = None;
        }
        if s.at_ms - self.from_ms > self.deadline_ms {
            return Outcome::Failed(format!(
                "the writer's commits are not back {:.0} s after the remediation: {}; the longest run within {:.0}% \
                 was {:.0} of {:.0} s; {}",
                self.deadline_ms as f64 / 1000.0,
                self.last,
                self.tolerance * 100.0,
                self.best_ms as f64 / 1000.0,
                self.hold_ms as f64 / 1000.0,
                database_pods(s)
            ));
        }
        let held = self.run.map_or(0, |(since, _)| s.at_ms - since);
        Outcome::Pending(format!(
            "{}; back for {:.0} of {:.0} s",
            self.last,
            held as f64 / 1000.0,
            self.hold_ms as f64 / 1000.0
        ))
    }
}

fn pct(v: f64, of: f64) -> f64 {
    if of > 0.0 { 100.0 * v / of } else { 0.0 }
}

/// The database's pods as Kubernetes shows them: `db-0 Running, Ready; db-1 Pending (Unschedulable)`.
pub fn database_pods(s: &Snapshot) -> String {
    let pods: Vec<String> = s
        .status
        .pods
        .iter()
        .filter(|p| [db::PRIMARY, db::STANDBY, db::WRITER].contains(&p.name.as_str()))
        .map(|p| {
            let mut t = format!("{} {}", p.name, p.phase);
            if p.ready {
                t.push_str(", Ready");
            }
            if let Some(r) = &p.reason {
                t.push_str(&format!(" ({r})"));
            }
            t
        })
        .collect();
    if pods.is_empty() {
        "no database pods".into()
    } else {
        pods.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lab_model::snapshot::DatabaseView;
    use lab_model::status::{Phase, PodStatus, Role};

    use super::*;
    use lab_drill_file::spec::VerifyJob;
    use lab_model::testing::{T0, snap};

    fn spec(hold: u64, deadline: u64) -> Verify {
        Verify {
            job: VerifyJob::Writer,
            within_pct: 20.0,
            consecutive_steps: 1,
            hold: Duration::from_secs(hold),
            deadline: Duration::from_secs(deadline),
        }
    }

    /// A healthy training job, with the writer at `commits` per second (`None`: no writer scraped) and
    /// db-1 in `standby`.
    fn at(t: u64, commits: Option<f64>, standby: Phase) -> Snapshot {
        let mut s = snap(t, Some(400.0), Some(0.3), 100 + 3 * t);
        s.database = commits.map(|c| DatabaseView {
            commits_per_s: c,
            reads_per_s: 20.0,
            commit_p50_s: 0.004,
            commit_p99_s: if c > 0.0 { 0.01 } else { 12.0 },
            commit_waiting_s: if c > 0.0 { 0.0 } else { 12.0 },
        });
        let mut p = PodStatus::new(db::STANDBY, Role::Database, Some(1));
        p.phase = standby;
        p.ready = standby == Phase::Running;
        if standby == Phase::Pending {
            p.reason = Some("Unschedulable".into());
        }
        s.status.pods.push(p);
        s
    }

    #[test]
    fn commits_back_for_the_hold_pass() {
        let mut r = CommitsRecovery::new(&spec(5, 60), 20.0, T0);
        // Still hung, then ramping (the writer's own 10 s window), then back.
        for (t, c) in [(1, 0.0), (2, 4.0), (3, 12.0)] {
            assert!(matches!(
                r.push(&at(t, Some(c), Phase::Running)),
                Outcome::Pending(_)
            ));
        }
        // 16 commits/s is 80 % of 20: within the tolerance.
        for t in 4..9 {
            assert!(matches!(
                r.push(&at(t, Some(16.0 + (t % 2) as f64), Phase::Running)),
                Outcome::Pending(_)
            ));
        }
        let Outcome::Done(rec) = r.push(&at(9, Some(19.0), Phase::Running)) else {
            panic!("not verified")
        };
        assert_eq!(rec.back_at_ms, T0 + 4_000);
        assert_eq!(rec.verified_at_ms, T0 + 9_000);
        assert!((rec.pct - 95.0).abs() < 1e-9);
        assert_eq!(rec.steps, 15);
    }

    #[test]
    fn a_dip_restarts_the_hold() {
        let mut r = CommitsRecovery::new(&spec(3, 60), 20.0, T0);
        for t in 1..3 {
            r.push(&at(t, Some(20.0), Phase::Running));
        }
        assert!(matches!(
            r.push(&at(3, Some(10.0), Phase::Running)),
            Outcome::Pending(_)
        ));
        for t in 4..7 {
            assert!(matches!(
                r.push(&at(t, Some(20.0), Phase::Running)),
                Outcome::Pending(_)
            ));
        }
        assert!(matches!(
            r.push(&at(7, Some(20.0), Phase::Running)),
            Outcome::Done(_)
        ));
    }

    /// The trap: the template fixed alone leaves db-1 Pending and the commits hung, while the training job
    /// beside it trains at its baseline (a training verify would pass). The writer's verdict fails, saying
    /// what the commits and the pods are.
    #[test]
    fn hung_commits_fail_at_the_deadline_whatever_the_training_does() {
        let mut r = CommitsRecovery::new(&spec(5, 10), 20.0, T0);
        let mut last = Outcome::Pending(String::new());
        for t in 0..=11 {
            last = r.push(&at(t, Some(0.0), Phase::Pending));
        }
        let Outcome::Failed(why) = last else {
            panic!("{last:?}")
        };
        assert!(why.contains("not back 10 s after the remediation"), "{why}");
        assert!(why.contains("0.0 commits/s (0% of the pre-fault 20.0)"), "{why}");
        assert!(why.contains("db-1 Pending (Unschedulable)"), "{why}");
        // A writer that is not scraped is not back either.
        let mut r = CommitsRecovery::new(&spec(1, 2), 20.0, T0);
        for t in 0..3 {
            assert!(matches!(
                r.push(&at(t, None, Phase::Running)),
                Outcome::Pending(_)
            ));
        }
        assert!(
            matches!(r.push(&at(3, None, Phase::Running)), Outcome::Failed(w) if w.contains("not scraped"))
        );
    }
}
