//! A kind lab's own cluster: its images built, a node image with them preloaded found or made
//! ([`super::preload`]), then the cluster created from it, with nothing left to load. When the preloaded
//! image cannot be made, the cluster is created from the pinned image and the images loaded after.

use std::time::Duration;

use futures::future::LocalBoxFuture;

use super::super::{connect, kind};
use super::images::{self, LabImage};
use super::{Action, Created, Ctx, KIND_KUBECONFIG, dns, named, preload, stale_flows};
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
                let client = connect(Some(&kubeconfig), None, request).await?;
                dns::install(&cluster, &client, request).await?;
                Ok(client)
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
