//! `sync-replica`: the database's primary commits synchronously to its standby `db-1`, and the standby
//! cannot be scheduled. The fault names `db-1` in the primary's `synchronous_standby_names`, changes the
//! standby StatefulSet's template to ask for a node label no node has, and deletes the standby pod, which
//! is made again from that template and stays Pending. Every commit on the primary waits for a standby that
//! is not there, while reads answer and every pod that runs stays Ready.
//!
//! Proven on the writer's own signals (commits per second at zero, the commit in flight waiting, reads
//! answering) with the standby Pending. Recovered by putting the template back, deleting the standby pod
//! so it is made again from it (changing the template alone leaves the Pending pod as it is), and putting
//! `synchronous_standby_names` back.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use lab_model::ChangeRecord;
use lab_model::db::{self, parse_selector};
use lab_model::metrics as m;
use lab_model::status::{LabStatus, Phase};
use lab_runtime::Runtime;

use super::{Applied, Cx, Injector, Look, PROOF_DEADLINE, mismatched, not_proven, wait_until};
use crate::FaultError;
use crate::ledger::Before;

/// How long a commit must have waited for the proof to count it as hung.
const HUNG_AFTER: Duration = Duration::from_secs(3);
/// How long recovery waits for the standby to be Ready again.
const RECOVER_DEADLINE: Duration = Duration::from_secs(90);

/// The fault's parameters, as the catalogue defines them.
pub use lab_model::fault::SyncReplica;

/// The writer's signals, read from its `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WriterReading {
    pub commits_per_second: f64,
    pub reads_per_second: f64,
    pub p50: f64,
    pub p99: f64,
    pub waiting: f64,
}

/// Reads the writer's gauges from its metrics text.
pub fn parse_writer(text: &str) -> WriterReading {
    let mut r = WriterReading::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        let Ok(v) = value.trim().parse::<f64>() else {
            continue;
        };
        match name {
            m::WRITER_COMMIT_RATE => r.commits_per_second = v,
            m::WRITER_READ_RATE => r.reads_per_second = v,
            m::WRITER_COMMIT_P50 => r.p50 = v,
            m::WRITER_COMMIT_P99 => r.p99 = v,
            m::WRITER_COMMIT_WAITING => r.waiting = v,
            _ => {}
        }
    }
    r
}

/// The writer's signals now.
///
/// # Errors
/// When the writer has no metrics endpoint or does not answer.
pub async fn read_writer(rt: &dyn Runtime) -> Result<WriterReading, FaultError> {
    let targets = rt
        .scrape_targets()
        .await
        .map_err(FaultError::runtime("listing metrics endpoints"))?;
    let t = targets
        .iter()
        .find(|t| t.instance == db::WRITER)
        .ok_or_else(|| FaultError::Invalid(format!("{} is not running", db::WRITER)))?;
    let text = rt
        .fetch_metrics(t, Duration::from_secs(3))
        .await
        .map_err(FaultError::runtime(format!("reading {}'s metrics", db::WRITER)))?;
    Ok(parse_writer(&text))
}

/// Refuses a lab without the database, or one whose standby is not running (nothing to break).
pub(crate) fn database_pods(status: &LabStatus) -> Result<(), FaultError> {
    let pod = |n: &str| status.pods.iter().find(|p| p.name == n);
    if pod(db::PRIMARY).is_none() {
        return Err(FaultError::Invalid(
            "this lab has no database: start one with `lab up --database`".into(),
        ));
    }
    match pod(db::STANDBY) {
        Some(p) if p.phase == Phase::Running && p.ready => Ok(()),
        Some(p) => Err(FaultError::Invalid(format!(
            "{} is {}{}, not Running and Ready: fix it first (`lab db status`)",
            db::STANDBY,
            p.phase,
            p.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
        ))),
        None => Err(FaultError::Invalid(format!(
            "this lab's database has no {}",
            db::STANDBY
        ))),
    }
}

fn selector_text(s: &BTreeMap<String, String>) -> String {
    db::DbTemplate {
        node_selector: s.clone(),
        revision: 0,
    }
    .selector_text()
}

fn names_text(n: &str) -> String {
    if n.is_empty() { "''".into() } else { n.into() }
}

#[async_trait]
impl Injector for SyncReplica {
    fn check(&self, status: &LabStatus) -> Result<(), FaultError> {
        database_pods(status)
    }

    async fn apply(&self, cx: &Cx<'_>, _status: &LabStatus) -> Result<Applied, FaultError> {
        let want = parse_selector(&self.node_selector).map_err(FaultError::Invalid)?;
        let d = cx
            .rt
            .database()
            .await
            .map_err(FaultError::runtime("reading the database"))?;
        let names = d
            .synchronous_standby_names
            .clone()
            .ok_or_else(|| FaultError::Invalid("the primary does not answer: nothing was changed".into()))?;
        cx.set_before(Before::Database {
            node_selector: d.template.node_selector.clone(),
            synchronous_standby_names: names.clone(),
        })
        .await?;
        let mut changes = Vec::new();
        let standby = format!("\"{}\"", db::STANDBY);
        if names != standby {
            cx.rt
                .set_synchronous_standby_names(db::STANDBY)
                .await
                .map_err(FaultError::runtime("setting synchronous_standby_names"))?;
            changes.push(cx.change(
                db::PRIMARY.into(),
                "synchronous_standby_names",
                names_text(&names),
                standby,
                Some("every commit waits for db-1".into()),
            ));
        }
        cx.rt
            .set_db_template(want.clone())
            .await
            .map_err(FaultError::runtime("changing the standby's template"))?;
        changes.push(cx.change(
            format!("statefulset/{}", db::STANDBY.trim_end_matches("-1")),
            "template node selector",
            selector_text(&d.template.node_selector),
            selector_text(&want),
            None,
        ));
        cx.rt
            .delete_pod(db::STANDBY)
            .await
            .map_err(FaultError::runtime("deleting the standby pod"))?;
        changes.push(cx.change(
            db::STANDBY.into(),
            "pod",
            "Running".into(),
            "deleted; made again from the new template".into(),
            None,
        ));
        Ok(Applied {
            changes,
            ..Applied::default()
        })
    }

    async fn prove(
        &self,
        cx: &Cx<'_>,
        _status: &LabStatus,
        _applied: &mut Applied,
    ) -> Result<String, FaultError> {
        let rt = cx.rt;
        let look = move || async move {
            let st = rt
                .status()
                .await
                .map_err(FaultError::runtime("reading the lab"))?;
            let pod = |n: &str| st.pods.iter().find(|p| p.name == n);
            let standby = pod(db::STANDBY);
            let pending = standby.is_some_and(|p| p.phase == Phase::Pending);
            let primary_ready = pod(db::PRIMARY).is_some_and(|p| p.ready);
            let w = read_writer(rt).await?;
            let proof = format!(
                "{} {} ({}); {} Ready: {primary_ready}; writer: the commit in flight waiting {:.1} s (no commit \
                 completes; {:.1} commits/s over its last 10 s), p99 {:.1} s, {:.1} reads/s",
                db::STANDBY,
                standby.map_or("missing".into(), |p| p.phase.to_string()),
                standby.and_then(|p| p.reason.clone()).unwrap_or_default(),
                db::PRIMARY,
                w.waiting,
                w.commits_per_second,
                w.p99,
                w.reads_per_second
            );
            // The writer sends one commit at a time: the one in flight waiting HUNG_AFTER says none
            // completed meanwhile. Its 10 s commit rate would say the same only 10 s after the hang.
            let hung =
                pending && primary_ready && w.waiting >= HUNG_AFTER.as_secs_f64() && w.reads_per_second > 0.0;
            Ok(if hung {
                Look::Done(proof)
            } else {
                Look::NotYet(proof)
            })
        };
        wait_until(PROOF_DEADLINE, look, |proof| not_proven(cx, proof)).await
    }

    async fn recover(&self, cx: &Cx<'_>, before: &Before) -> Result<Vec<ChangeRecord>, FaultError> {
        let Before::Database {
            node_selector,
            synchronous_standby_names,
        } = before
        else {
            return Err(mismatched(cx, before));
        };
        let d = cx
            .rt
            .database()
            .await
            .map_err(FaultError::runtime("reading the database"))?;
        let mut changes = Vec::new();
        if &d.template.node_selector != node_selector {
            cx.rt
                .set_db_template(node_selector.clone())
                .await
                .map_err(FaultError::runtime("restoring the standby's template"))?;
            changes.push(cx.change(
                "statefulset/db".into(),
                "template node selector",
                selector_text(&d.template.node_selector),
                selector_text(node_selector),
                Some("cleared".into()),
            ));
        }
        // A pod made from another version of the template keeps it: delete it so it is made again.
        let stale = d
            .standby_pod
            .as_ref()
            .is_none_or(|p| &p.node_selector != node_selector);
        if stale {
            cx.rt
                .delete_pod(db::STANDBY)
                .await
                .map_err(FaultError::runtime("deleting the standby pod"))?;
            changes.push(cx.change(
                db::STANDBY.into(),
                "pod",
                "made from the changed template".into(),
                "deleted; made again from the restored template".into(),
                Some("cleared".into()),
            ));
        }
        let now = d.synchronous_standby_names.clone().unwrap_or_default();
        if &now != synchronous_standby_names {
            cx.rt
                .set_synchronous_standby_names(synchronous_standby_names.trim_matches('"'))
                .await
                .map_err(FaultError::runtime("restoring synchronous_standby_names"))?;
            changes.push(cx.change(
                db::PRIMARY.into(),
                "synchronous_standby_names",
                names_text(&now),
                names_text(synchronous_standby_names),
                Some("cleared".into()),
            ));
        }
        let rt = cx.rt;
        let look = move || async move {
            let st = rt
                .status()
                .await
                .map_err(FaultError::runtime("reading the lab"))?;
            let standby = st.pods.iter().find(|p| p.name == db::STANDBY);
            Ok(match standby {
                Some(p) if p.phase == Phase::Running && p.ready => Look::Done(()),
                Some(p) => Look::NotYet(format!("{} {}", p.phase, p.reason.as_deref().unwrap_or(""))),
                None => Look::NotYet("missing".into()),
            })
        };
        wait_until(RECOVER_DEADLINE, look, |seen| FaultError::NotRestored {
            id: cx.id.into(),
            why: format!(
                "{} is not Running and Ready {} s after its template was restored: {}",
                db::STANDBY,
                RECOVER_DEADLINE.as_secs(),
                seen.trim()
            ),
        })
        .await?;
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writers_gauges_are_read() {
        let text = "# HELP x\nlab_writer_commits_per_second 0.0\nlab_writer_reads_per_second 5.0\n\
                    lab_writer_commit_latency_p99_seconds 7.5\nlab_writer_commit_waiting_seconds 7.5\n\
                    lab_writer_commits_total 120\n";
        let r = parse_writer(text);
        assert_eq!(
            r,
            WriterReading {
                commits_per_second: 0.0,
                reads_per_second: 5.0,
                p50: 0.0,
                p99: 7.5,
                waiting: 7.5
            }
        );
    }
}
