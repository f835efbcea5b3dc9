//! A kind lab's own cluster: its images built, a node image with them preloaded found or made
//! ([`super::preload`]), then the cluster created from it, with nothing left to load. When the preloaded
//! image cannot be made, the cluster is created from the pinned image and the images loaded after.

use std::time::Duration;

use futures::future::LocalBoxFuture;

use super::super::{connect, kind};
use super::images::{self, LabImage};
use super::{Action, Created, Ctx, KIND_KUBECONFIG, named, preload, stale_flows};
use lab_runtime::Result;

/// The steps "build images", "preload images" and "create cluster" (kind, then a client for its API).
pub(super) struct CreateCluster;

impl Action for CreateCluster {
    fn name(&self) -> &'static str {
        "create cluster"
    }

    fn group(&self) -> bool {
        true
    }

    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let docker = cx.docker.clone().ok_or_else(|| {
                lab_runtime::RuntimeError::Other("create cluster ran before the kind preflight".into())
            })?;
            let cluster = cx.rec.cluster.clone().unwrap_or_default();
            let kubeconfig = cx
                .rec
                .kubeconfig
                .clone()
                .unwrap_or_else(|| cx.dir.join(KIND_KUBECONFIG));
            let (nodes, pinned) = (cx.rec.nodes, cx.rec.node_image.clone());
            let (wait, request) = (cx.kopts.wait_timeout, cx.rec.request_timeout);
            let (progress, kopts) = (cx.progress, cx.kopts);
            let built = named(
                progress,
                "build images",
                images::build_images(&docker, kopts, &mut cx.rec, progress),
            )
            .await;
            // The record as the image builds left it (an offline Prometheus is named there), whatever failed.
            cx.save()?;
            let built = built?;
            let preloaded = named(
                progress,
                "preload images",
                preload::node_image(&docker, &pinned, &built, wait),
            )
            .await;
            let node_image = match preloaded {
                Ok((image, made)) => {
                    let how = if made { "made" } else { "reused (made before)" };
                    progress.note(&format!(
                        "node image {image}: {how} from {pinned}, with the lab's images in it"
                    ));
                    image
                }
                Err(e) => {
                    progress.note(&format!(
                        "a node image with the lab's images in it could not be made ({e}): the cluster is \
                         made from {pinned} and the images are loaded after"
                    ));
                    cx.images = built;
                    pinned
                }
            };
            // From here on the cluster is the lab's: a failure deletes it, half-made or not.
            cx.created(Created::Cluster)?;
            let dir = cx.dir;
            let client = named(progress, "create cluster", async {
                kind::create_cluster(dir, &cluster, &node_image, nodes, &kubeconfig, wait).await?;
                connect(Some(&kubeconfig), None, request).await
            })
            .await?;
            cx.client = Some(client);
            match kind::node_names(&cluster).await {
                Ok(nodes) => cx.sweeper = Some(stale_flows::Sweeper::start(nodes)),
                Err(e) => tracing::debug!("listing the nodes of {cluster}: {e}"),
            }
            Ok(())
        })
    }
}

/// Each image into every node at once (kind loads one image into its nodes in turn).
async fn load_all(cluster: &str, images: &[LabImage], wait: Duration) -> Result<()> {
    futures::future::try_join_all(images.iter().map(|image| async move {
        match image {
            LabImage::InDocker(name) => kind::load_image(cluster, name, wait).await,
            LabImage::Archive(path) => kind::load_archive(cluster, path, wait).await,
        }
    }))
    .await
    .map(drop)
}

/// The images into every node, when [`CreateCluster`] did not load them while the cluster was made.
pub(super) struct LoadImages;

impl Action for LoadImages {
    fn name(&self) -> &'static str {
        "load images"
    }

    /// Reports its own step, and none when the images are already in.
    fn group(&self) -> bool {
        true
    }

    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if cx.images.is_empty() {
                return Ok(());
            }
            let cluster = cx.rec.cluster.clone().unwrap_or_default();
            let wait = cx.kopts.wait_timeout;
            named(cx.progress, self.name(), load_all(&cluster, &cx.images, wait)).await?;
            cx.images.clear();
            Ok(())
        })
    }
}

/// How long a CoreDNS pod of the lab's new cluster may run without being Ready before it is replaced.
/// Measured on 2 cores: a healthy one was Ready 9–10 s after it was made, a stalled one 35–40 s.
const DNS_STALLED: Duration = Duration::from_secs(12);
/// How long the lab watches the new cluster's DNS at most.
const DNS_WATCH: Duration = Duration::from_secs(90);

/// Replaces a CoreDNS pod of the lab's own new kind cluster that has run [`DNS_STALLED`] without becoming
/// Ready, once.
///
/// CoreDNS reaches the API server through the `kubernetes` Service. When its first connection goes out
/// before kube-proxy has written that Service's rule, the packet is never translated and CoreDNS waits
/// out the whole connect timeout: measured on a 2-core machine, it logged "waiting for Kubernetes API"
/// for 33 s, and the database's standby, which looks up the primary by name, was Ready 35 s into
/// `deploy database`. A pod made again by its Deployment a few seconds later finds the rule written.
/// Returns once every CoreDNS pod is Ready, or after [`DNS_WATCH`]; it never fails `lab up` (the steps
/// that need the DNS wait for it with their own deadlines).
pub(super) async fn unstick_dns(client: &kube::Client, progress: &dyn lab_runtime::lifecycle::Progress) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, DeleteParams, ListParams};

    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let list = ListParams::default().labels("k8s-app=kube-dns");
    let started = tokio::time::Instant::now();
    let mut replaced = std::collections::BTreeSet::new();
    while started.elapsed() < DNS_WATCH {
        if let Ok(Ok(found)) = tokio::time::timeout(Duration::from_secs(5), pods.list(&list)).await {
            let mut all_ready = !found.items.is_empty();
            for p in &found.items {
                let name = p.metadata.name.clone().unwrap_or_default();
                let status = p.status.as_ref();
                let ready = crate::status::pod_ready(p);
                all_ready &= ready;
                // How long its container has run, by its start time (the nodes are containers of this
                // machine: one clock); a pod whose container does not run is left to its kubelet.
                let started_at = status
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|cs| cs.first()?.state.as_ref()?.running.as_ref()?.started_at.clone());
                let (false, Some(t), None) = (ready, started_at, &p.metadata.deletion_timestamp) else {
                    continue;
                };
                let ms = k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond();
                let ran = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
                if ran >= DNS_STALLED && replaced.insert(name.clone()) {
                    progress.note(&format!(
                        "the cluster's DNS pod {name} has run {} s without being Ready: replacing it (a CoreDNS \
                         whose first call to the API server went out before kube-proxy wrote the Service's \
                         rule waits about 30 s)",
                        ran.as_secs()
                    ));
                    if let Err(e) = pods.delete(&name, &DeleteParams::default()).await {
                        tracing::debug!("deleting {name}: {e}");
                    }
                }
            }
            if all_ready {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
