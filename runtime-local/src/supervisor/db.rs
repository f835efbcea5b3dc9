//! The lab's optional database in the supervisor: which of its pods run, the standby StatefulSet's
//! template, and deleting a pod by name.
//!
//! The standby behaves as a StatefulSet's pod does: it is made from the template as the template is when
//! the pod is made, and keeps that version until it is deleted. Changing the template changes no pod that
//! exists — not even one left Pending because no node matches its selector (Kubernetes does not replace a
//! pod that never became Ready); deleting the pod by name makes a new one from the template as it is now.

use std::collections::BTreeMap;
use std::time::Instant;

use lab_model::db::{self, DbTemplate};

use super::instance::{Kind, inst_name};
use super::log;
use super::reconcile::{Sup, terminate};

impl Sup {
    /// Adds the database's pods that should run now to `wanted`: the primary, then (once it answers)
    /// the writer, and the standby if its pod can be placed.
    pub(super) fn want_database(&mut self, wanted: &mut Vec<Kind>) {
        let Some(dbs) = self.spec.database.as_mut() else {
            return;
        };
        // The StatefulSet controller: a missing pod is made from the template as it is now.
        if dbs.standby_pod.is_none() {
            dbs.standby_pod = Some(dbs.template.clone());
            log(&format!(
                "creating {} from template revision {}",
                db::STANDBY,
                dbs.template.revision
            ));
            self.save_spec();
        }
        wanted.push(Kind::DbPrimary);
        let started = |k: Kind| self.insts.contains_key(&inst_name(k));
        let primary_up = self
            .insts
            .get(&inst_name(Kind::DbPrimary))
            .is_some_and(|i| i.running.is_some() && i.ready);
        if self.standby_placeable() && (primary_up || started(Kind::DbStandby)) {
            wanted.push(Kind::DbStandby);
        }
        if primary_up || started(Kind::Writer) {
            wanted.push(Kind::Writer);
        }
    }

    /// Why the standby pod cannot be placed on the node (`None`: it can, or there is no database).
    pub(super) fn standby_unplaceable(&self) -> Option<(String, String)> {
        let pod = self.spec.database.as_ref()?.standby_pod.as_ref()?;
        pod.unmatched(&db::local_node_labels())
    }

    fn standby_placeable(&self) -> bool {
        self.standby_unplaceable().is_none()
    }

    /// Changes the standby StatefulSet's template; no pod is touched.
    pub(super) fn set_db_template(&mut self, node_selector: BTreeMap<String, String>) -> Result<(), String> {
        let Some(dbs) = self.spec.database.as_mut() else {
            return Err(no_database());
        };
        db::check_selector(&node_selector)?;
        if dbs.template.node_selector != node_selector {
            dbs.template.node_selector = node_selector;
            dbs.template.revision += 1;
            log(&format!(
                "{} template revision {}: node selector {}",
                db::STANDBY,
                dbs.template.revision,
                dbs.template.selector_text()
            ));
        }
        self.save_spec();
        Ok(())
    }

    /// Deletes a database pod by name: it is made again (the standby from the template as it is now).
    pub(super) fn delete_pod(&mut self, name: &str, now: Instant) -> Result<(), String> {
        let Some(dbs) = self.spec.database.as_mut() else {
            return Err(no_database());
        };
        let kind = match name {
            db::PRIMARY => Kind::DbPrimary,
            db::STANDBY => {
                dbs.standby_pod = None;
                Kind::DbStandby
            }
            db::WRITER => Kind::Writer,
            other if lab_model::jobs::is_training_name(other) => {
                return Err(format!(
                    "{other} is a rank: `lab delete pod` acts on the database's pods ({}, {}, {}); restart a \
                     rank with `lab restart rank N`",
                    db::PRIMARY,
                    db::STANDBY,
                    db::WRITER
                ));
            }
            other => {
                return Err(format!(
                    "no pod named {other:?} to delete: the database's pods are {}, {} and {}",
                    db::PRIMARY,
                    db::STANDBY,
                    db::WRITER
                ));
            }
        };
        self.save_spec();
        log(&format!("deleting pod {name}"));
        if let Some(i) = self.insts.get_mut(&inst_name(kind)) {
            i.replace = true;
            terminate(i, now);
        }
        Ok(())
    }
}

/// Why a database request is refused on a lab without one.
pub(super) fn no_database() -> String {
    "this lab has no database: start one with `lab up --database`".into()
}

/// The selector a template must not have to be placed here, for messages.
pub(super) fn template_text(t: &DbTemplate) -> String {
    format!("revision {} (node selector {})", t.revision, t.selector_text())
}

/// Makes a pod in the status model out of instances (the supervisor's `pod_of`).
pub(super) type PodOf<'a> = dyn Fn(
        String,
        lab_model::status::Role,
        Option<u32>,
        &[Option<&super::reconcile::Inst>],
        &[&str],
    ) -> lab_model::status::PodStatus
    + 'a;

impl Sup {
    /// The database's pods and the writer's scrape target, and the database as the status reports it.
    pub(super) fn database_pods(
        &self,
        pods: &mut Vec<lab_model::status::PodStatus>,
        targets: &mut Vec<lab_runtime::ScrapeTarget>,
        pod_of: &PodOf<'_>,
    ) -> Option<db::DbStatus> {
        use lab_model::status::{Phase, Role};
        let dbs = self.spec.database.as_ref()?;
        let inst = |k: Kind| self.insts.get(&inst_name(k));
        pods.push(pod_of(
            db::PRIMARY.into(),
            Role::Database,
            Some(0),
            &[inst(Kind::DbPrimary)],
            &["postgres"],
        ));
        let mut standby = pod_of(
            db::STANDBY.into(),
            Role::Database,
            Some(1),
            &[inst(Kind::DbStandby)],
            &["postgres"],
        );
        if let Some((k, v)) = self.standby_unplaceable() {
            standby.phase = Phase::Pending;
            standby.ready = false;
            standby.node = None;
            standby.pid = None;
            standby.reason = Some("Unschedulable".into());
            standby.message = Some(format!(
                "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector \
                 (the pod asks for {k}={v}; made from template {})",
                dbs.standby_pod.as_ref().map_or_else(String::new, template_text)
            ));
        }
        pods.push(standby);
        let writer = pod_of(
            db::WRITER.into(),
            Role::DbWriter,
            None,
            &[inst(Kind::Writer)],
            &["lab-writer"],
        );
        if writer.phase == Phase::Running {
            targets.push(lab_runtime::ScrapeTarget {
                instance: db::WRITER.into(),
                kind: lab_runtime::TargetKind::Writer,
                index: 0,
                address: format!("http://127.0.0.1:{}/metrics", dbs.writer_metrics_port),
            });
        }
        pods.push(writer);
        Some(db::DbStatus {
            primary: format!("127.0.0.1:{}", dbs.primary_port),
            template: dbs.template.clone(),
            standby_pod: dbs.standby_pod.clone(),
            node_labels: db::local_node_labels(),
            synchronous_standby_names: None,
        })
    }
}
