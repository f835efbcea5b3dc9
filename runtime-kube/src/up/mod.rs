//! `lab up` on Kubernetes as a list of named actions run in order, each reported as a step with its time:
//!
//! | kind cluster                          | existing cluster          |
//! |---------------------------------------|---------------------------|
//! | preflight                             | preflight                 |
//! | build images, preload images          |                           |
//! | create cluster                        |                           |
//! | load images (when preloading failed)  |                           |
//! | create namespace                      | create namespace          |
//! | the workloads (below)                 | the workloads             |
//! | wait for training to start            | wait for training to start|
//!
//! The workloads are one action of steps that run beside each other: advertise GPUs ‖ (deploy storage,
//! seed dataset), then deploy ranks; deploy database and deploy monitoring beside all of them. The ranks'
//! StatefulSet is applied with the volume servers and the seeding job, once the GPUs are advertised (each
//! rank waits for the dataset itself); `deploy ranks` waits for them to be Ready. On the lab's own kind
//! cluster all of them go in with the storage master; elsewhere once the master is available. The CLI then
//! learns the baseline.
//!
//! One rule for a failure: the error names the step, and everything the lab created so far (each action
//! says what it created the moment it does) is rolled back in reverse, unless `retain`. What was created
//! inside a cluster the lab created goes with the cluster.

mod cluster;
mod deploy;
mod dns;
mod images;
mod preflight;
mod preload;
mod stale_flows;

use std::path::Path;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use kube::Client;
use lab_model::status::RuntimeKind;

use super::{ClusterMode, KubeOptions, KubeRecord, KubeRuntime, down, gpus};
use lab_runtime::lifecycle::{Progress, UpOptions, step};
use lab_runtime::state::{self, LabRecord};
use lab_runtime::{Result, RuntimeError};

pub use deploy::sample;
pub use preflight::OFFLINE_NODE_IMAGE;

/// The kubeconfig of a kind lab, in the lab's directory.
const KIND_KUBECONFIG: &str = "kubeconfig";
/// How long pulling one image may take before the lab gives up on it (a real pull of the Rust base
/// image on a slow line takes minutes; a machine without a registry fails at once).
const PULL_DEADLINE: Duration = Duration::from_secs(900);

/// One named step of `lab up`.
trait Action {
    /// The step's name, as progress shows it and a failure names it.
    fn name(&self) -> &'static str;
    /// A group runs several steps beside each other and reports (and names in its errors) each of them
    /// itself; the runner reports every other action as one step.
    fn group(&self) -> bool {
        false
    }
    /// Does the step. What it creates it records with [`Ctx::created`] as soon as it exists (or may
    /// partly exist), so a failure later rolls it back.
    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>>;
}

/// Something `lab up` created, which a failure rolls back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Created {
    /// The lab's own kind cluster (everything below, when inside it, goes with it).
    Cluster,
    /// The lab's namespace.
    Namespace,
    /// The lab's labelled objects, in a namespace it did not create.
    Objects,
    /// The GPU resource advertised on these nodes.
    Gpus(Vec<String>),
}

/// What the actions share: the options, what is known so far, and what was created.
struct Ctx<'a> {
    opts: &'a UpOptions,
    kopts: &'a KubeOptions,
    progress: &'a dyn Progress,
    dir: &'a Path,
    rec: KubeRecord,
    /// The Docker engine kind runs on (kind preflight).
    docker: Option<bollard::Docker>,
    /// The images still to load into the kind cluster (build images; emptied once they are in its nodes).
    images: Vec<images::LabImage>,
    /// The cluster's API (preflight on an existing cluster; create cluster on kind).
    client: Option<Client>,
    created: Vec<Created>,
    /// On the lab's own kind cluster, from its creation to the end of `lab up`: connections to Services
    /// sent before kube-proxy wrote their rules, reset.
    sweeper: Option<stale_flows::Sweeper>,
}

impl<'a> Ctx<'a> {
    fn new(
        opts: &'a UpOptions,
        kopts: &'a KubeOptions,
        progress: &'a dyn Progress,
        dir: &'a Path,
        rec: KubeRecord,
    ) -> Self {
        Ctx {
            opts,
            kopts,
            progress,
            dir,
            rec,
            docker: None,
            images: Vec::new(),
            client: None,
            created: Vec::new(),
            sweeper: None,
        }
    }

    /// Writes the lab's record, so `lab down` finds what exists even if this process ends now.
    fn save(&self) -> Result<()> {
        save(self.dir, &self.opts.name, &self.rec)
    }

    /// Records that `what` now exists (or may partly exist): in the lab's record for `lab down`, and in the
    /// list a failure rolls back.
    fn created(&mut self, what: Created) -> Result<()> {
        match &what {
            Created::Cluster => self.rec.created_cluster = true,
            Created::Namespace => self.rec.created_namespace = true,
            Created::Objects => {}
            Created::Gpus(nodes) => self.rec.advertised_on = nodes.clone(),
        }
        self.created.push(what);
        self.save()
    }

    /// The cluster's API, once an earlier action reached it.
    fn client(&self) -> Result<Client> {
        self.client.clone().ok_or_else(|| {
            RuntimeError::Other("the cluster is not reachable yet (an action ran out of order)".into())
        })
    }

    /// The lab as it stands.
    fn runtime(&self) -> Result<KubeRuntime> {
        Ok(KubeRuntime::with_client(
            self.opts.name.clone(),
            self.client()?,
            self.rec.clone(),
        ))
    }
}

/// The actions of `lab up` on a cluster of `mode`, in order.
fn plan(mode: ClusterMode) -> Vec<Box<dyn Action>> {
    let mut actions: Vec<Box<dyn Action>> = match mode {
        ClusterMode::Kind => vec![
            Box::new(preflight::KindPreflight),
            Box::new(cluster::CreateCluster),
            Box::new(cluster::LoadImages),
        ],
        ClusterMode::Existing => vec![Box::new(preflight::ClusterPreflight)],
    };
    actions.extend(deployment());
    actions
}

/// The actions once the cluster answers, the same on both kinds of cluster.
fn deployment() -> Vec<Box<dyn Action>> {
    vec![
        Box::new(deploy::CreateNamespace),
        Box::new(deploy::Workloads),
        Box::new(deploy::WaitForTraining),
    ]
}

/// Runs `f` as the step `name`, reported to `progress`; its error names the step.
///
/// # Errors
/// Whatever `f` returns, as [`RuntimeError::Step`].
async fn named<T>(
    progress: &dyn Progress,
    name: &str,
    f: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    // Boxed: the steps nest and run beside each other, and in a debug build their futures together
    // overflow a test thread's stack.
    step(progress, name, Box::pin(f)).await.map_err(|e| match e {
        e @ RuntimeError::Step { .. } => e,
        e => RuntimeError::Step {
            step: name.to_string(),
            message: e.to_string(),
        },
    })
}

/// Runs `actions` in order and stops at the first that fails.
async fn run(actions: &[Box<dyn Action>], cx: &mut Ctx<'_>) -> Result<()> {
    for action in actions {
        let progress = cx.progress;
        if action.group() {
            action.execute(cx).await?;
        } else {
            named(progress, action.name(), action.execute(cx)).await?;
        }
    }
    Ok(())
}

/// Stands the lab up on Kubernetes and records it so later commands can reopen it by name.
///
/// # Errors
/// Bad options before anything starts; else the first step that fails, named, after everything created
/// was rolled back (unless `opts.retain`).
pub async fn up(opts: &UpOptions, kopts: &KubeOptions, progress: &dyn Progress) -> Result<KubeRuntime> {
    preflight::validate(opts, kopts)?;
    let dir = state::create_lab_dir(&opts.name)?;
    let rec = new_record(opts, kopts, &dir)?;
    let mut cx = Ctx::new(opts, kopts, progress, &dir, rec);
    cx.save()?;
    let ran = run(&plan(kopts.mode), &mut cx).await;
    if let Some(reset) = cx.sweeper.take().map(|s| s.reset()).filter(|n| *n > 0) {
        progress.note(&format!(
            "reset {reset} connection(s) to a Service sent before kube-proxy had written its rule (each would \
             have waited out its connect timeout)"
        ));
    }
    match ran {
        Ok(()) => cx.runtime(),
        Err(e) => {
            if opts.retain {
                progress.note(&format!(
                    "--retain: leaving what was created; remove it with `lab down --name {}`",
                    opts.name
                ));
            } else if let Err(rb) = roll_back(&cx).await {
                progress.note(&format!(
                    "rolling back after the failure also failed ({rb}): the lab's record is kept, run `lab down --name {}`",
                    opts.name
                ));
            }
            Err(e)
        }
    }
}

/// Undoes what `cx` created, newest first (what is inside a cluster the lab created goes with the
/// cluster), then forgets the lab. Every undo is tried; the record is kept when one fails.
async fn roll_back(cx: &Ctx<'_>) -> Result<()> {
    let progress = cx.progress;
    let rec = &cx.rec;
    let in_own_cluster = cx.created.contains(&Created::Cluster);
    let mut first_error = None;
    for what in cx.created.iter().rev() {
        let undone = match what {
            Created::Cluster => {
                let cluster = rec.cluster.clone().unwrap_or_default();
                step(
                    progress,
                    "delete cluster",
                    down::delete_kind_cluster(&cluster, rec, cx.dir, progress),
                )
                .await
            }
            _ if in_own_cluster => Ok(()),
            Created::Gpus(nodes) => match cx.client() {
                Ok(c) => {
                    step(
                        progress,
                        "withdraw GPUs",
                        gpus::withdraw(&c, &rec.gpu_resource, nodes, rec.request_timeout),
                    )
                    .await
                }
                Err(e) => Err(e),
            },
            Created::Namespace => match cx.client() {
                Ok(c) => step(progress, "delete namespace", down::delete_namespace(&c, rec)).await,
                Err(e) => Err(e),
            },
            Created::Objects => match cx.client() {
                Ok(c) => {
                    step(
                        progress,
                        "delete the lab's objects",
                        down::delete_labelled(&c, rec, &cx.opts.name),
                    )
                    .await
                }
                Err(e) => Err(e),
            },
        };
        if let Err(e) = undone {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => match std::fs::remove_dir_all(cx.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(RuntimeError::io(format!("remove {}", cx.dir.display()), e)),
        },
    }
}

/// [`roll_back`] of `created`, in the order given, on a cluster `client` reaches (tests).
#[cfg(test)]
pub(crate) async fn roll_back_on(
    client: &Client,
    opts: &UpOptions,
    kopts: &KubeOptions,
    rec: KubeRecord,
    dir: &Path,
    created: Vec<Created>,
) -> Result<()> {
    let mut cx = Ctx::new(opts, kopts, &lab_runtime::lifecycle::Quiet, dir, rec);
    cx.client = Some(client.clone());
    cx.created = created;
    roll_back(&cx).await
}

/// The deployment's actions on a cluster `client` already reaches, without rolling back (what `up` runs
/// after the cluster answers; tests run it against a fake API server). `rec` ends as recorded.
///
/// # Errors
/// The first step that fails, named.
pub async fn deploy(
    client: &Client,
    opts: &UpOptions,
    kopts: &KubeOptions,
    rec: &mut KubeRecord,
    progress: &dyn Progress,
    dir: &Path,
) -> Result<KubeRuntime> {
    let mut cx = Ctx::new(opts, kopts, progress, dir, rec.clone());
    cx.client = Some(client.clone());
    let r = run(&deployment(), &mut cx).await;
    *rec = cx.rec.clone();
    r.and_then(|()| cx.runtime())
}

/// The record of a lab about to be created with these options.
fn new_record(opts: &UpOptions, kopts: &KubeOptions, dir: &Path) -> Result<KubeRecord> {
    let kind = kopts.mode == ClusterMode::Kind;
    Ok(KubeRecord {
        mode: kopts.mode,
        // A kind lab's kubeconfig is its own, in the lab's folder.
        kubeconfig: if kind {
            Some(dir.join(KIND_KUBECONFIG))
        } else {
            kopts.kubeconfig.clone()
        },
        context: if kind { None } else { kopts.context.clone() },
        namespace: kopts
            .namespace
            .clone()
            .unwrap_or_else(|| format!("straggler-lab-{}", opts.name)),
        created_namespace: false,
        cluster: kind.then(|| format!("lab-{}", opts.name)),
        created_cluster: false,
        docker_host: kind.then(|| {
            std::env::var("DOCKER_HOST")
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| down::DEFAULT_DOCKER_HOST.to_string())
        }),
        node_image: kopts.node_image.clone(),
        nodes: kopts.nodes,
        gpu_resource: kopts.gpu_resource.clone(),
        advertised_on: Vec::new(),
        ranks: opts.ranks,
        storage_servers: opts.storage_servers,
        seed: opts.seed,
        gpus: opts.gpus,
        watchdog_seconds: opts.watchdog.as_secs().max(1),
        cpu: opts.cpu,
        image: kopts.image.clone(),
        pull_policy: kopts.pull_policy.clone(),
        monitoring: kopts.monitoring,
        prometheus_image: kopts.prometheus_image.clone(),
        delay: kopts.delay,
        wait_timeout: kopts.wait_timeout,
        request_timeout: kopts.request_timeout,
        db_image: opts.database.then(|| super::DEFAULT_DB_IMAGE.to_string()),
        control_token: Some(super::new_control_token()?),
    })
}

fn runtime_kind(mode: ClusterMode) -> RuntimeKind {
    match mode {
        ClusterMode::Kind => RuntimeKind::Kind,
        ClusterMode::Existing => RuntimeKind::Cluster,
    }
}

fn save(dir: &Path, name: &str, rec: &KubeRecord) -> Result<()> {
    let record = LabRecord {
        name: name.to_string(),
        runtime: runtime_kind(rec.mode),
        created_ms: state::now_ms(),
        config: serde_json::to_value(rec).map_err(|e| RuntimeError::Other(e.to_string()))?,
    };
    state::write_record(dir, &record)
}
