//! The lab's database on Kubernetes (`lab up --runtime kind --database`): the StatefulSet `db` (`db-0` the
//! primary, `db-1` the standby) and the writer's Deployment, read and changed the way a person would with
//! kubectl. The template is the StatefulSet's; the version a pod was made from is the ControllerRevision its
//! `controller-revision-hash` label names. The StatefulSet updates `OnDelete`, so changing the template
//! changes no pod: a pod made from another version keeps it until it is deleted by name. PostgreSQL's own
//! settings are read and set with `psql` through `exec` in the primary's container.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use lab_model::db::{self, DbStatus, DbTemplate};
use serde_json::{Value, json};

use super::manifests::names as obj;
use super::{KubeRuntime, api};
use lab_runtime::{Result, RuntimeError};

/// How long one `psql` through `exec` may take: reading or setting a parameter never waits for a standby.
const PSQL_TIMEOUT: Duration = Duration::from_secs(15);

/// The merge patch that makes the template's node selector `want`, dropping the keys of `now` it lacks.
pub fn selector_patch(now: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> Value {
    let mut sel = serde_json::Map::new();
    for k in now.keys().filter(|k| !want.contains_key(*k)) {
        sel.insert(k.clone(), Value::Null);
    }
    for (k, v) in want {
        sel.insert(k.clone(), Value::String(v.clone()));
    }
    json!({ "spec": { "template": { "spec": { "nodeSelector": sel } } } })
}

/// The `psql` command line for `sql` on the primary, from inside its container.
pub fn psql_command(sql: &str) -> Vec<String> {
    let mut c = vec!["psql".to_string()];
    c.extend(lab_runtime::db::psql_args(
        "127.0.0.1",
        &obj::DB_PORT.to_string(),
        sql,
    ));
    c
}

/// A pod spec's node selector (none: empty).
fn selector_of(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> BTreeMap<String, String> {
    spec.and_then(|s| s.node_selector.clone()).unwrap_or_default()
}

impl KubeRuntime {
    fn no_database(&self) -> RuntimeError {
        RuntimeError::InvalidInput(format!(
            "lab {} has no database: start one with `lab up --runtime kind --database`",
            self.name
        ))
    }

    /// The database's pod `name` (`db-0`, `db-1`), if it stands.
    async fn db_pod(&self, name: &str) -> Result<Option<Pod>> {
        let what = format!("read pod {name}");
        api::within(&what, self.rec.request_timeout, async {
            self.pods_api()
                .get_opt(name)
                .await
                .map_err(|e| api::kube_err(&what, e))
        })
        .await
    }

    /// Runs `sql` on the primary with `psql` in its container; returns what it printed.
    async fn psql(&self, sql: &str) -> Result<String> {
        let what = format!("psql in {}", db::PRIMARY);
        api::within(&what, PSQL_TIMEOUT, async {
            let (out, err, failure) = self
                .exec_text(db::PRIMARY, obj::DB_CONTAINER, psql_command(sql), &what)
                .await?;
            match failure {
                None => Ok(out.trim().to_string()),
                Some(m) => Err(RuntimeError::Other(format!("{what}: {m}: {}", err.trim()))),
            }
        })
        .await
    }

    /// The revision number of each of the StatefulSet's ControllerRevisions, by name.
    async fn db_revisions(&self) -> Result<BTreeMap<String, u64>> {
        let lp = ListParams::default().labels(&format!(
            "{}={},{}={}",
            obj::INSTANCE_LABEL,
            self.name,
            obj::COMPONENT_LABEL,
            obj::DATABASE_COMPONENT
        ));
        let list = api::within("list the database's revisions", self.rec.request_timeout, async {
            Api::<ControllerRevision>::namespaced(self.client.clone(), &self.rec.namespace)
                .list(&lp)
                .await
                .map_err(|e| api::kube_err("list the database's revisions", e))
        })
        .await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|r| Some((r.metadata.name?, u64::try_from(r.revision).ok()?)))
            .collect())
    }

    /// The database's StatefulSet; a lab without one is refused.
    async fn db_statefulset(&self) -> Result<k8s_openapi::api::apps::v1::StatefulSet> {
        let what = "read the database's StatefulSet";
        api::within(what, self.rec.request_timeout, async {
            self.sts_api()
                .get_opt(obj::DATABASE)
                .await
                .map_err(|e| api::kube_err(what, e))
        })
        .await?
        .ok_or_else(|| self.no_database())
    }

    /// The database as the cluster has it now.
    pub(super) async fn db_status(&self) -> Result<DbStatus> {
        let sts = self.db_statefulset().await?;
        let revisions = self.db_revisions().await?;
        let template = DbTemplate {
            node_selector: selector_of(sts.spec.as_ref().and_then(|s| s.template.spec.as_ref())),
            revision: sts
                .status
                .as_ref()
                .and_then(|s| s.update_revision.as_ref())
                .and_then(|r| revisions.get(r).copied())
                .unwrap_or_else(|| revisions.values().copied().max().unwrap_or(0)),
        };
        let standby_pod = self
            .db_pod(db::STANDBY)
            .await?
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| DbTemplate {
                node_selector: selector_of(p.spec.as_ref()),
                revision: p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("controller-revision-hash"))
                    .and_then(|h| revisions.get(h).copied())
                    .unwrap_or(0),
            });
        let primary_node = self.db_pod(db::PRIMARY).await?.and_then(|p| p.spec?.node_name);
        let nodes = api::within("list the nodes", self.rec.request_timeout, async {
            Api::<Node>::all(self.client.clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| api::kube_err("list the nodes", e))
        })
        .await?;
        let node_labels = nodes
            .items
            .iter()
            .find(|n| primary_node.is_none() || n.metadata.name == primary_node)
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        Ok(DbStatus {
            primary: format!("{}.{}:{}", db::PRIMARY, obj::DATABASE, obj::DB_PORT),
            template,
            standby_pod,
            node_labels,
            synchronous_standby_names: self.psql("SHOW synchronous_standby_names").await.ok(),
        })
    }

    /// Sets the StatefulSet's template node selector, as `kubectl apply` would: no pod changes.
    pub(super) async fn set_db_selector(&self, want: BTreeMap<String, String>) -> Result<()> {
        db::check_selector(&want).map_err(RuntimeError::InvalidInput)?;
        let now = selector_of(
            self.db_statefulset()
                .await?
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref()),
        );
        if now == want {
            return Ok(());
        }
        let what = "change the database's template";
        api::within(what, self.rec.request_timeout, async {
            self.sts_api()
                .patch(
                    obj::DATABASE,
                    &PatchParams::default(),
                    &Patch::Merge(selector_patch(&now, &want)),
                )
                .await
                .map_err(|e| api::kube_err(what, e))
        })
        .await?;
        Ok(())
    }

    /// Deletes one of the database's pods by name; its controller makes it again (the standby from the
    /// template as it is now).
    pub(super) async fn delete_db_pod(&self, name: &str) -> Result<()> {
        self.db_statefulset().await?;
        let pod = match name {
            db::PRIMARY | db::STANDBY => name.to_string(),
            db::WRITER => self
                .lab_pods()
                .await?
                .into_iter()
                .find(|p| {
                    super::status::role_of(p).is_some_and(|(r, _, _)| r == lab_model::status::Role::DbWriter)
                        && p.metadata.deletion_timestamp.is_none()
                })
                .and_then(|p| p.metadata.name)
                .ok_or_else(|| RuntimeError::NoSuchInstance(db::WRITER.into()))?,
            other if lab_model::jobs::is_training_name(other) => {
                return Err(RuntimeError::InvalidInput(format!(
                    "{other} is a rank: `lab db delete-pod` acts on the database's pods ({}, {}, {}); restart \
                     a rank with `lab restart rank N`",
                    db::PRIMARY,
                    db::STANDBY,
                    db::WRITER
                )));
            }
            other => {
                return Err(RuntimeError::InvalidInput(format!(
                    "no pod named {other:?} to delete: the database's pods are {}, {} and {}",
                    db::PRIMARY,
                    db::STANDBY,
                    db::WRITER
                )));
            }
        };
        let what = format!("delete pod {pod}");
        api::within(&what, self.rec.request_timeout, async {
            self.pods_api()
                .delete(&pod, &DeleteParams::default())
                .await
                .map(drop)
                .map_err(|e| api::kube_err(&what, e))
        })
        .await
    }

    /// Sets the primary's `synchronous_standby_names` and reloads it, then waits until it says so.
    pub(super) async fn set_standby_names(&self, names: &str) -> Result<()> {
        lab_runtime::db::set_standby_names(names, |sql| async move { self.psql(&sql).await }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_patch_drops_the_keys_it_no_longer_wants() {
        let now = db::parse_selector("lab/disk=nvme,zone=a").unwrap();
        let want = db::parse_selector("zone=b").unwrap();
        assert_eq!(
            selector_patch(&now, &want),
            json!({ "spec": { "template": { "spec": { "nodeSelector": { "lab/disk": null, "zone": "b" } } } } })
        );
        assert_eq!(
            selector_patch(&now, &BTreeMap::new()),
            json!({ "spec": { "template": { "spec": { "nodeSelector": { "lab/disk": null, "zone": null } } } } })
        );
    }

    #[test]
    fn psql_runs_one_statement_on_the_primary_over_loopback() {
        let c = psql_command("SHOW synchronous_standby_names");
        assert_eq!(c[0], "psql");
        assert!(c.windows(2).any(|w| w[0] == "-h" && w[1] == "127.0.0.1"));
        assert!(c.windows(2).any(|w| w[0] == "-p" && w[1] == "5432"));
        assert_eq!(c.last().unwrap(), "SHOW synchronous_standby_names");
    }
}
