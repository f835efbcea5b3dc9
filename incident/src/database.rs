//! The database section of the incident bundle (`lab up --database`): the writer's golden signals (commits
//! per second, commit latency, the age of the commit in flight, reads), the database's pods, and for each
//! pod made from the standby StatefulSet's template the version it was made from against the template as it
//! is now — the drift that says a pod is stuck on an old version. Evidence only, as the rest of the bundle:
//! nothing here says what was injected.

use std::fmt::Write as _;

use lab_model::Snapshot;
use lab_model::db::{self, DbStatus, DbTemplate};
use lab_model::format::latency;
use lab_model::snapshot::DatabaseView;
use lab_model::status::{Phase, Role};
use serde::Serialize;

/// The database beside the job, as the bundle shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DatabaseSection {
    /// The writer's own signals, each over its last 10 s (the snapshot's own view, seconds); `None` while
    /// it is not scraped.
    pub writer: Option<DatabaseView>,
    /// The primary's `synchronous_standby_names` (`''`: commits wait for no standby); `None` when not read.
    pub synchronous_standby_names: Option<String>,
    /// The standby StatefulSet's template as it is now; `None` when not read.
    pub template: Option<TemplateView>,
    pub pods: Vec<DbPod>,
}

/// A StatefulSet template: its revision and node selector (`k=v,...`, `none`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateView {
    pub revision: u64,
    pub node_selector: String,
}

impl From<&DbTemplate> for TemplateView {
    fn from(t: &DbTemplate) -> Self {
        TemplateView {
            revision: t.revision,
            node_selector: t.selector_text(),
        }
    }
}

/// One database pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DbPod {
    pub name: String,
    pub phase: Phase,
    pub ready: bool,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// For the standby (a StatefulSet's pod): the template version it was made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub made_from: Option<TemplateView>,
    /// True when the pod was made from another version of the template than the one now: fixing the
    /// template does not change a pod that exists.
    pub differs_from_template: bool,
}

impl DatabaseSection {
    /// The section for the lab as `s` shows it; `None` for a lab without the database. The template and
    /// the primary's settings are not in a snapshot: [`DatabaseSection::set_status`] adds them.
    pub fn from_snapshot(s: &Snapshot) -> Option<DatabaseSection> {
        let pods: Vec<DbPod> = s
            .status
            .pods
            .iter()
            .filter(|p| matches!(p.role, Role::Database | Role::DbWriter))
            .map(|p| DbPod {
                name: p.name.clone(),
                phase: p.phase,
                ready: p.ready,
                reason: p.reason.as_deref().and_then(crate::redact::evidence_only),
                message: p.message.as_deref().and_then(crate::redact::evidence_only),
                made_from: None,
                differs_from_template: false,
            })
            .collect();
        if pods.is_empty() && s.database.is_none() {
            return None;
        }
        let writer = s.database.clone();
        Some(DatabaseSection {
            writer,
            synchronous_standby_names: None,
            template: None,
            pods,
        })
    }

    /// Adds what the runtime says of the database: the template, the version the standby pod was made
    /// from (and whether it differs), and the primary's `synchronous_standby_names`.
    pub fn set_status(&mut self, d: &DbStatus) {
        self.template = Some(TemplateView::from(&d.template));
        self.synchronous_standby_names = d
            .synchronous_standby_names
            .as_ref()
            .map(|n| if n.is_empty() { "''".into() } else { n.clone() });
        if let (Some(p), Some(made)) = (
            self.pods.iter_mut().find(|p| p.name == db::STANDBY),
            d.standby_pod.as_ref(),
        ) {
            p.made_from = Some(TemplateView::from(made));
            p.differs_from_template =
                made.revision != d.template.revision || made.node_selector != d.template.node_selector;
        }
    }

    /// The section as text for a person.
    pub fn write_text(&self, o: &mut String) {
        let _ = writeln!(o, "\nDATABASE  the writer's own signals, over its last 10 s");
        match &self.writer {
            Some(w) => {
                let _ = writeln!(
                    o,
                    "  lab-writer  {:.1} commits/s · commit p50 {} p99 {} · commit in flight {:.1} s · {:.1} reads/s",
                    w.commits_per_s,
                    latency(w.commit_p50_s),
                    latency(w.commit_p99_s),
                    w.commit_waiting_s,
                    w.reads_per_s
                );
            }
            None => {
                let _ = writeln!(o, "  lab-writer  not scraped");
            }
        }
        if let Some(n) = &self.synchronous_standby_names {
            let _ = writeln!(o, "  {} synchronous_standby_names = {n}", db::PRIMARY);
        }
        if let Some(t) = &self.template {
            let _ = writeln!(
                o,
                "  statefulset/db template: revision {}, node selector {}",
                t.revision, t.node_selector
            );
        }
        let _ = writeln!(
            o,
            "  {:<11} {:<9} {:<5} {:<30} REASON",
            "POD", "PHASE", "READY", "MADE FROM"
        );
        for p in &self.pods {
            let made = p.made_from.as_ref().map_or(String::new(), |m| {
                format!(
                    "revision {} ({}){}",
                    m.revision,
                    m.node_selector,
                    if p.differs_from_template { " ≠" } else { "" }
                )
            });
            let _ = writeln!(
                o,
                "  {:<11} {:<9} {:<5} {:<30} {}",
                p.name,
                p.phase.to_string(),
                if p.ready { "1/1" } else { "0/1" },
                made,
                p.reason.as_deref().unwrap_or("")
            );
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use lab_model::snapshot::DatabaseView;
    use lab_model::status::PodStatus;

    use super::*;
    use lab_model::testing::snap;

    /// The lab under a hung standby: db-1 Pending on the old template, the template fixed, commits hung.
    pub(crate) fn stuck() -> (Snapshot, DbStatus) {
        let mut s = snap(0, Some(400.0), Some(0.3), 100);
        for (name, role, phase) in [
            (db::PRIMARY, Role::Database, Phase::Running),
            (db::STANDBY, Role::Database, Phase::Pending),
            (db::WRITER, Role::DbWriter, Phase::Running),
        ] {
            let mut p = PodStatus::new(name, role, None);
            p.phase = phase;
            p.ready = phase == Phase::Running;
            if phase == Phase::Pending {
                p.reason = Some("Unschedulable".into());
            }
            s.status.pods.push(p);
        }
        s.database = Some(DatabaseView {
            commits_per_s: 0.0,
            reads_per_s: 19.5,
            commit_p50_s: 4.0,
            commit_p99_s: 14.2,
            commit_waiting_s: 14.2,
        });
        let nvme = db::parse_selector("lab/disk=nvme").unwrap();
        let d = DbStatus {
            primary: "127.0.0.1:5432".into(),
            template: DbTemplate {
                node_selector: Default::default(),
                revision: 2,
            },
            standby_pod: Some(DbTemplate {
                node_selector: nvme,
                revision: 1,
            }),
            node_labels: db::local_node_labels(),
            synchronous_standby_names: Some("\"db-1\"".into()),
        };
        (s, d)
    }

    #[test]
    fn the_standby_stuck_on_an_old_template_shows_its_drift() {
        let (s, d) = stuck();
        let mut sec = DatabaseSection::from_snapshot(&s).unwrap();
        assert_eq!(sec.pods.len(), 3);
        assert!(sec.template.is_none());
        sec.set_status(&d);
        let standby = sec.pods.iter().find(|p| p.name == "db-1").unwrap();
        assert!(standby.differs_from_template);
        assert_eq!(
            standby.made_from,
            Some(TemplateView {
                revision: 1,
                node_selector: "lab/disk=nvme".into()
            })
        );
        assert!(
            !sec.pods
                .iter()
                .find(|p| p.name == "db-0")
                .unwrap()
                .differs_from_template
        );
        let mut text = String::new();
        sec.write_text(&mut text);
        assert!(text.contains("0.0 commits/s"), "{text}");
        assert!(text.contains("commit in flight 14.2 s"), "{text}");
        assert!(text.contains("revision 2, node selector none"), "{text}");
        assert!(text.contains("revision 1 (lab/disk=nvme) ≠"), "{text}");
        assert!(text.contains("synchronous_standby_names = \"db-1\""), "{text}");
    }

    #[test]
    fn a_lab_without_the_database_has_no_section() {
        assert_eq!(
            DatabaseSection::from_snapshot(&snap(0, Some(1.0), Some(1.0), 1)),
            None
        );
    }
}
