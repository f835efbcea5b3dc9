//! The checks before `lab up` creates anything: the options, then either the kind preflight (Docker,
//! kind, a free cluster name, the node image) or the existing cluster's (its version, the user's
//! permissions, its GPUs).

use std::time::Duration;

use futures::future::LocalBoxFuture;
use kube::Client;

use super::super::{ClusterMode, KubeOptions, KubeRecord, api, connect, kind};
use super::{Action, Ctx, PULL_DEADLINE};
use lab_runtime::lifecycle::{Progress, UpOptions};
use lab_runtime::state;
use lab_runtime::{Result, RuntimeError};

/// The options make sense, before anything is created.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] naming the option; a missing PostgreSQL for `--database`.
pub(super) fn validate(opts: &UpOptions, kopts: &KubeOptions) -> Result<()> {
    state::validate_name(&opts.name)?;
    if opts.database && kopts.mode != ClusterMode::Kind {
        return Err(RuntimeError::InvalidInput(
            "--database runs on the local and kind runtimes: its image is built from this machine's \
             PostgreSQL and loaded into the lab's own kind cluster, which an existing cluster cannot take \
             (use --runtime kind or --runtime local)"
                .into(),
        ));
    }
    if opts.database && kopts.build_image {
        lab_runtime::db::find_pg_bin()?;
    }
    if opts.ranks == 0 || opts.storage_servers == 0 {
        return Err(RuntimeError::InvalidInput(
            "the lab needs at least one rank and one storage server".into(),
        ));
    }
    if !kopts.gpu_resource.contains('/') {
        return Err(RuntimeError::InvalidInput(format!(
            "{:?} is not an extended resource name: use a domain-prefixed name like lab.dev/gpu or nvidia.com/gpu",
            kopts.gpu_resource
        )));
    }
    if kopts.image.ends_with(":latest")
        || !kopts
            .image
            .rsplit('/')
            .next()
            .is_some_and(|last| last.contains(':') || last.contains('@'))
    {
        return Err(RuntimeError::InvalidInput(format!(
            "image {:?} is not pinned: name a tag other than latest, e.g. straggler-lab/lab:{}",
            kopts.image,
            env!("CARGO_PKG_VERSION")
        )));
    }
    Ok(())
}

/// Preflight on a kind cluster the lab creates: Docker answers, kind is new enough, the cluster's name is
/// free and the node image is at hand.
pub(super) struct KindPreflight;

impl Action for KindPreflight {
    fn name(&self) -> &'static str {
        "preflight"
    }

    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            cx.docker = Some(kind_preflight(cx.kopts, &mut cx.rec, cx.progress).await?);
            cx.save()
        })
    }
}

/// Preflight on an existing cluster: it answers, is new enough, lets the kubeconfig's user do what the lab
/// will do, and offers the GPUs (unless the lab advertises them).
pub(super) struct ClusterPreflight;

impl Action for ClusterPreflight {
    fn name(&self) -> &'static str {
        "preflight"
    }

    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let rec = &cx.rec;
            let client = connect(
                rec.kubeconfig.as_deref(),
                rec.context.as_deref(),
                rec.request_timeout,
            )
            .await?;
            check_server(&client, rec.request_timeout).await?;
            check_permissions(&client, cx.kopts, rec).await?;
            if !cx.kopts.advertise_gpus {
                check_gpus(
                    &client,
                    &rec.gpu_resource,
                    cx.opts.ranks,
                    rec.request_timeout,
                    cx.progress,
                )
                .await?;
            }
            cx.client = Some(client);
            Ok(())
        })
    }
}

/// The API server answers and is new enough for in-place resize.
async fn check_server(client: &Client, deadline: Duration) -> Result<()> {
    let v = api::within("ask the API server its version", deadline, async {
        client
            .apiserver_version()
            .await
            .map_err(|e| api::kube_err("ask the API server its version", e))
    })
    .await?;
    let minor: u32 = v.minor.trim_end_matches('+').parse().unwrap_or(0);
    if v.major != "1" || minor < 33 {
        return Err(RuntimeError::InvalidInput(format!(
            "the cluster runs Kubernetes {}.{}: the lab needs 1.33 or newer (in-place resize through pods/resize)",
            v.major, v.minor
        )));
    }
    Ok(())
}

/// The kubeconfig's user may do everything this `lab up` will do: every missing permission is named at
/// once, with the manifest that grants them, before anything is created.
async fn check_permissions(client: &Client, kopts: &KubeOptions, rec: &KubeRecord) -> Result<()> {
    let own_namespace = kopts.namespace.is_none();
    let missing = super::super::rbac::missing(
        client,
        &rec.namespace,
        super::super::rbac::needed(own_namespace, kopts.advertise_gpus),
        rec.request_timeout,
    )
    .await?;
    if missing.is_empty() {
        return Ok(());
    }
    let ns_flag = if own_namespace {
        String::new()
    } else {
        format!(" --namespace {}", rec.namespace)
    };
    Err(RuntimeError::InvalidInput(format!(
        "the kubeconfig's user lacks {} permission(s) the lab needs, nothing was created:\n  {}\n         have a cluster admin grant them: `lab rbac{ns_flag} --user <you> | kubectl apply -f -` (or          --service-account NS/NAME, --group G)",
        missing.len(),
        missing.join("\n  ")
    )))
}

/// The nodes offer enough of the GPU resource for every rank (when the lab does not advertise it itself).
async fn check_gpus(
    client: &Client,
    resource: &str,
    ranks: u32,
    deadline: Duration,
    progress: &dyn Progress,
) -> Result<()> {
    let nodes = match api::list_nodes(client, deadline).await {
        Ok(nodes) => nodes,
        Err(e) if api::status_code(&e) == Some(403) => {
            progress.note(&format!(
                "nodes cannot be listed with this kubeconfig: not checking that they offer {ranks} {resource}"
            ));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let offered = super::super::status::offered(&nodes, resource);
    if offered < ranks {
        return Err(RuntimeError::InvalidInput(format!(
            "the cluster's nodes offer {offered} {resource} and the lab needs {ranks} (one per rank): name the \
             cluster's GPU resource with --gpu-resource (e.g. nvidia.com/gpu), or let the lab advertise counted \
             GPUs with --advertise-gpus true"
        )));
    }
    Ok(())
}

/// A missing tool's hint, with the runtime that needs none of them.
fn or_use_local(e: RuntimeError) -> RuntimeError {
    match e {
        RuntimeError::MissingTool { tool, hint } => RuntimeError::MissingTool {
            tool,
            hint: format!("{hint}, or use --runtime local"),
        },
        other => other,
    }
}

/// The offline kind node image the project builds (`scripts/env/kind/node-image.sh`), used when the pinned
/// default cannot be pulled.
pub const OFFLINE_NODE_IMAGE: &str = "straggler-lab/kind-node:v1.34.4";

/// Docker answers, kind is new enough, the cluster's name is free and the node image is at hand.
async fn kind_preflight(
    kopts: &KubeOptions,
    rec: &mut KubeRecord,
    progress: &dyn Progress,
) -> Result<bollard::Docker> {
    if rec.nodes == 0 || rec.nodes > kind::MAX_NODES {
        return Err(RuntimeError::InvalidInput(format!(
            "--nodes {} is out of range: a lab's kind cluster has 1 to {} nodes",
            rec.nodes,
            kind::MAX_NODES
        )));
    }
    let docker = bollard::Docker::connect_with_defaults().map_err(|e| {
        or_use_local(RuntimeError::MissingTool {
            tool: "docker".into(),
            hint: format!("cannot connect to the Docker API ({e}): install Docker and start it"),
        })
    })?;
    kind::check_docker(&docker).await.map_err(or_use_local)?;
    let version = kind::check_kind("kind").await.map_err(or_use_local)?;
    let cluster = rec.cluster.clone().unwrap_or_default();
    if kind::clusters().await?.contains(&cluster) {
        return Err(RuntimeError::InvalidInput(format!(
            "a kind cluster named {cluster:?} already exists and is not this lab's: delete it with \
             `kind delete cluster --name {cluster}`, or pick another --name"
        )));
    }
    let node_image = &kopts.node_image;
    match kind::ensure_image(&docker, node_image, PULL_DEADLINE).await {
        Ok(()) => rec.node_image = node_image.clone(),
        Err(e)
            if *node_image == super::super::DEFAULT_NODE_IMAGE
                && docker.inspect_image(OFFLINE_NODE_IMAGE).await.is_ok() =>
        {
            progress.note(&format!(
                "the pinned node image cannot be pulled ({e}): using the offline node image {OFFLINE_NODE_IMAGE}"
            ));
            rec.node_image = OFFLINE_NODE_IMAGE.to_string();
        }
        Err(e) => {
            return Err(RuntimeError::InvalidInput(format!(
                "the node image {node_image} is not in Docker and cannot be pulled ({e}): build the offline node \
                 image with scripts/env/kind/node-image.sh and pass --node-image {OFFLINE_NODE_IMAGE}"
            )));
        }
    }
    progress.note(&format!(
        "Docker answers; {version}; node image {}; {} node{}",
        rec.node_image,
        rec.nodes,
        if rec.nodes == 1 { "" } else { "s" }
    ));
    Ok(docker)
}
