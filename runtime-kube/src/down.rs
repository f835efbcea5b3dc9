//! `lab down` on Kubernetes: the lab's kind cluster deleted, or in an existing cluster only what the lab
//! created (its namespace or its labelled objects, and the GPUs it advertised); then the lab is forgotten.
//! `lab up` rolls back a failed start with the same pieces.

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};

use super::manifests::names as obj;
use super::{ClusterMode, KubeRecord, api, connect, gpus, kind, read_record};
use lab_runtime::lifecycle::{Progress, step};
use lab_runtime::state::{self, LabRecord};
use lab_runtime::{Result, RuntimeError};

/// The kinds of objects a lab creates, for deleting them one by one in a namespace the lab did not create.
fn lab_kinds() -> Vec<ApiResource> {
    let k = |g: &str, v: &str, kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural)
    };
    vec![
        k("apps", "v1", "StatefulSet", "statefulsets"),
        k("apps", "v1", "Deployment", "deployments"),
        k("batch", "v1", "Job", "jobs"),
        k("", "v1", "Service", "services"),
        k("", "v1", "ConfigMap", "configmaps"),
        k("", "v1", "Secret", "secrets"),
        k("", "v1", "ServiceAccount", "serviceaccounts"),
        k("rbac.authorization.k8s.io", "v1", "Role", "roles"),
        k("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
        k("", "v1", "Pod", "pods"),
    ]
}

/// Deletes what the lab created in an existing cluster: the namespace if it created it, else each of
/// its labelled objects; then the GPU resource it advertised.
///
/// # Errors
/// When the API server refuses a delete.
pub async fn remove_objects(client: &Client, rec: &KubeRecord, lab: &str) -> Result<()> {
    if rec.created_namespace {
        delete_namespace(client, rec).await?;
    } else {
        delete_labelled(client, rec, lab).await?;
    }
    gpus::withdraw(client, &rec.gpu_resource, &rec.advertised_on, rec.request_timeout).await
}

/// Deletes the namespace the lab created, and waits until it is gone.
///
/// # Errors
/// When the API server refuses the delete, or the namespace outlives the wait.
pub async fn delete_namespace(client: &Client, rec: &KubeRecord) -> Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    if api::delete_if_exists(&nss, &rec.namespace, &format!("namespace {}", rec.namespace)).await? {
        api::wait_for(
            nss,
            &rec.namespace,
            &format!("namespace {} to be deleted", rec.namespace),
            rec.wait_timeout,
            |n: Option<&Namespace>| n.is_none(),
        )
        .await?;
    }
    Ok(())
}

/// Deletes each object labelled as lab `lab`'s in a namespace the lab did not create.
///
/// # Errors
/// When the API server refuses a list or a delete.
pub async fn delete_labelled(client: &Client, rec: &KubeRecord, lab: &str) -> Result<()> {
    let selector = format!("{}={lab}", obj::INSTANCE_LABEL);
    for ar in lab_kinds() {
        let a: Api<DynamicObject> = Api::namespaced_with(client.clone(), &rec.namespace, &ar);
        let list = api::within("list the lab's objects", rec.request_timeout, async {
            a.list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| api::kube_err(format!("list {}", ar.plural), e))
        })
        .await?;
        for o in list.items {
            let n = o.metadata.name.clone().unwrap_or_default();
            api::delete_if_exists(&a, &n, &format!("{} {n}", ar.kind)).await?;
        }
    }
    Ok(())
}

/// Takes the lab down: deletes the kind cluster, or only what the lab created in an existing cluster, and
/// forgets the lab.
///
/// # Errors
/// When the record is not a Kubernetes lab's or a delete fails (the record is kept, so `lab down` can be
/// run again).
pub async fn down(record: &LabRecord, progress: &dyn Progress) -> Result<()> {
    let rec = read_record(record)?;
    match rec.mode {
        ClusterMode::Kind => {
            let cluster = rec
                .cluster
                .clone()
                .unwrap_or_else(|| format!("lab-{}", record.name));
            if rec.created_cluster {
                step(
                    progress,
                    "delete cluster",
                    delete_kind_cluster(&cluster, &rec, &state::lab_dir(&record.name), progress),
                )
                .await?;
            } else {
                progress.note(&format!(
                    "the lab never created a cluster (its `up` stopped before): forgetting lab {:?}",
                    record.name
                ));
            }
        }
        ClusterMode::Existing => {
            step(progress, "remove the lab's objects", async {
                let client = connect(
                    rec.kubeconfig.as_deref(),
                    rec.context.as_deref(),
                    rec.request_timeout,
                )
                .await?;
                remove_objects(&client, &rec, &record.name).await
            })
            .await?;
        }
    }
    forget(&record.name)
}

/// Removes the lab's folder and with it its record: nothing of the lab is left to take down.
///
/// # Errors
/// When the folder cannot be removed.
pub fn forget(name: &str) -> Result<()> {
    let dir = state::lab_dir(name);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RuntimeError::io(format!("remove {}", dir.display()), e)),
    }
}

/// Docker's own default endpoint, recorded for a cluster made without `DOCKER_HOST`.
pub(crate) const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

/// Deletes the lab's kind cluster and, when no other kind cluster is left, kind's Docker network. Where
/// Docker or kind cannot be reached the cluster cannot be running through them: the lab says how to
/// delete it by hand and is forgotten all the same, so a missing tool never leaves a record behind that
/// blocks the next `lab up`.
///
/// # Errors
/// When Docker or kind cannot be reached (the record is kept), or kind fails to delete the cluster.
pub async fn delete_kind_cluster(
    cluster: &str,
    rec: &KubeRecord,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<()> {
    let host = rec.docker_host.as_deref();
    let docker = match host {
        Some(h) => bollard::Docker::connect_with_host(h),
        None => bollard::Docker::connect_with_defaults(),
    };
    let docker_ok = match &docker {
        Ok(d) => kind::check_docker(d).await.is_ok(),
        Err(_) => false,
    };
    let forget = format!(
        "if that engine is gone for good, so is the cluster: remove {} to forget the lab",
        dir.display()
    );
    if !docker_ok {
        let at = match host {
            Some(h) => format!("DOCKER_HOST={h}"),
            None => "the environment's DOCKER_HOST (or the default socket)".to_string(),
        };
        return Err(RuntimeError::Other(format!(
            "Docker does not answer at {at}, where cluster {cluster} was created: it may still be running \
             there. Start that engine and run `lab down` again (the lab's record is kept); {forget}"
        )));
    }
    if let Err(e) = kind::check_kind("kind").await {
        return Err(RuntimeError::Other(format!(
            "{e}: cannot delete cluster {cluster}; install kind and run `lab down` again (the lab's record is \
             kept), or remove its node containers with \
             `docker rm -f $(docker ps -aq --filter label=io.x-k8s.kind.cluster={cluster})` and remove {}",
            dir.display()
        )));
    }
    progress.note(&format!(
        "deleting cluster {cluster}{}",
        host.map(|h| format!(" on DOCKER_HOST={h}")).unwrap_or_default()
    ));
    kind::delete_cluster(cluster, rec.kubeconfig.as_deref(), host).await?;
    if let Ok(d) = docker
        && kind::clusters_on(host).await.is_ok_and(|c| c.is_empty())
    {
        // kind leaves its network behind; nothing else of the lab's is on it once no cluster is left.
        let _ = d.remove_network("kind").await;
    }
    Ok(())
}
