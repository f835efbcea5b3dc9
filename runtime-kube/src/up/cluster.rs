//! A kind lab's own cluster: created while its images are built (neither needs the other, and the
//! cluster takes the longer), then the images loaded into every node.

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
            let build = named(
                progress,
                "build images",
                images::build_images(&docker, kopts, &mut cx.rec, progress),
            );
            let (client, built) = tokio::join!(create, build);
            // The record as the image builds left it (an offline Prometheus is named there), whatever failed.
            cx.save()?;
            cx.client = Some(client?);
            cx.images = built?;
            Ok(())
        })
    }
}

/// Each image into every node at once (kind loads one image into its nodes in turn).
pub(super) struct LoadImages;

impl Action for LoadImages {
    fn name(&self) -> &'static str {
        "load images"
    }

    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let cluster = cx.rec.cluster.clone().unwrap_or_default();
            let wait = cx.kopts.wait_timeout;
            futures::future::try_join_all(cx.images.iter().map(|image| {
                let cluster = &cluster;
                async move {
                    match image {
                        LabImage::InDocker(name) => kind::load_image(cluster, name, wait).await,
                        LabImage::Archive(path) => kind::load_archive(cluster, path, wait).await,
                    }
                }
            }))
            .await
            .map(drop)
        })
    }
}
