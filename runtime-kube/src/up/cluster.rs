//! A kind lab's own cluster: created while its images are built (neither needs the other, and the
//! cluster takes the longer), and the images loaded into every node as soon as the nodes' containerd
//! answers, while kubeadm is still starting Kubernetes; after the cluster is made when that did not work.

use std::cell::Cell;
use std::time::Duration;

use futures::future::LocalBoxFuture;

use super::super::{connect, kind};
use super::images::{self, LabImage};
use super::{Action, Created, Ctx, KIND_KUBECONFIG, named};
use lab_runtime::Result;

/// Two steps beside each other: "create cluster" (kind, then a client for its API) and "build images".
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
            // From here on the cluster is the lab's: a failure deletes it, half-made or not.
            cx.created(Created::Cluster)?;
            let docker = cx.docker.clone().ok_or_else(|| {
                lab_runtime::RuntimeError::Other("create cluster ran before the kind preflight".into())
            })?;
            let cluster = cx.rec.cluster.clone().unwrap_or_default();
            let kubeconfig = cx
                .rec
                .kubeconfig
                .clone()
                .unwrap_or_else(|| cx.dir.join(KIND_KUBECONFIG));
            let (nodes, node_image) = (cx.rec.nodes, cx.rec.node_image.clone());
            let (wait, request) = (cx.kopts.wait_timeout, cx.rec.request_timeout);
            let (progress, dir, kopts) = (cx.progress, cx.dir, cx.kopts);
            let create = named(progress, "create cluster", async {
                kind::create_cluster(dir, &cluster, &node_image, nodes, &kubeconfig, wait).await?;
                connect(Some(&kubeconfig), None, request).await
            });
            let created = Cell::new(false);
            let create = async {
                let r = create.await;
                created.set(true);
                r
            };
            let build = async {
                let built = named(
                    progress,
                    "build images",
                    images::build_images(&docker, kopts, &mut cx.rec, progress),
                )
                .await?;
                let loaded = load_early(progress, &cluster, nodes, &built, wait, &created).await;
                Ok::<_, lab_runtime::RuntimeError>((built, loaded))
            };
            let (client, built) = tokio::join!(create, build);
            // The record as the image builds left it (an offline Prometheus is named there), whatever failed.
            cx.save()?;
            cx.client = Some(client?);
            // Loaded already: nothing left for "load images".
            let (built, loaded) = built?;
            cx.images = if loaded { Vec::new() } else { built };
            Ok(())
        })
    }
}

/// How often the early load asks whether the nodes take images.
const NODES_POLL: Duration = Duration::from_millis(500);

/// Loads `images` into the cluster's nodes while it is being created, once every node's containerd
/// answers; the step "load images" when it does. `false` when the cluster was made (or failed) before the
/// nodes answered, or a load failed: then [`LoadImages`] loads them after.
async fn load_early(
    progress: &dyn super::Progress,
    cluster: &str,
    nodes: u32,
    images: &[LabImage],
    wait: Duration,
    created: &Cell<bool>,
) -> bool {
    loop {
        if created.get() {
            return false;
        }
        if kind::nodes_take_images(cluster, nodes).await {
            break;
        }
        tokio::time::sleep(NODES_POLL).await;
    }
    match named(progress, "load images", load_all(cluster, images, wait)).await {
        Ok(()) => true,
        Err(e) => {
            progress.note(&format!(
                "loading the images while the cluster was made failed ({e}); loading them again now it is made"
            ));
            false
        }
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
