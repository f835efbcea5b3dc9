//! A kind node image with the lab's images already in its containerd: made once for a set of images and
//! kept in Docker, so a kind lab whose images did not change starts from it with nothing to load.
//!
//! `kind load` imports every image into every node while the cluster is made, and the two share the
//! machine: measured on 2 cores, `kind create cluster` takes 24–25 s alone and 33–34 s beside the load.
//! A node image made from the pinned one, with the images imported (unpacked) into its containerd the
//! way kind's own node-image build imports Kubernetes' (containerd in a build container, `ctr images
//! import`, `docker commit` with the entrypoint restored), gives every node its images when Docker
//! copies the image's `/var` into the node's volume: the 24 s cluster, with the images in.
//! Making one takes about 12 s, once per change of the lab's binaries; the one made before it is
//! removed (Docker keeps any still used by a node). A build container left by a `lab up` ended by a
//! signal while it made one is removed by the next `lab up` on the same machine.

use std::process::Stdio;
use std::time::Duration;

use bollard::Docker;
use sha2::{Digest, Sha256};
use tokio::process::Command;

use super::super::kind;
use super::images::LabImage;
use lab_runtime::{Result, RuntimeError};

/// The repository of the node images made here; the tag is the pinned image's, then the key.
pub const PRELOADED_REPOSITORY: &str = "straggler-lab/kind-node-preloaded";
/// The label every such image carries: the node image it was made from.
const LABEL: &str = "straggler-lab.preloaded-from";
/// Changes when the way the image is made changes, so an image made the old way is not reused.
const RECIPE: &str = "preload 1: ctr import --digests, unpacked into overlayfs";
/// The build container's name: this, then the process id of the `lab` that made it.
const BUILD_CONTAINER: &str = "lab-preload-";
/// The label naming the machine whose `lab` made a build container.
const HOST_LABEL: &str = "straggler-lab.preload-host";
/// How long the build container's containerd may take to answer.
const CONTAINERD_START: Duration = Duration::from_secs(30);

/// The node image to create the cluster from, with `images` in it: found in Docker when made before for the
/// same pinned image and the same images, else made now. Says which.
///
/// # Errors
/// When the pinned image is not in Docker, or a step of making the image fails (each names itself).
pub(super) async fn node_image(
    docker: &Docker,
    node_image: &str,
    images: &[LabImage],
    deadline: Duration,
) -> Result<(String, bool)> {
    let base = docker
        .inspect_image(node_image)
        .await
        .map_err(|e| RuntimeError::Other(format!("the node image {node_image} is not in Docker ({e})")))?;
    let mut parts = vec![RECIPE.to_string(), base.id.clone().unwrap_or_default()];
    for image in images {
        parts.push(match image {
            LabImage::InDocker(name) => {
                let id = docker
                    .inspect_image(name)
                    .await
                    .map_err(|e| RuntimeError::Other(format!("inspect {name}: {e}")))?
                    .id
                    .unwrap_or_default();
                format!("docker {name} {id}")
            }
            // The archives' names carry the key of what is in them (`image::ImageSpec::cached_archive`).
            LabImage::Archive(path) => {
                let len = std::fs::metadata(path)
                    .map_err(|e| RuntimeError::io(format!("stat {}", path.display()), e))?
                    .len();
                format!("archive {} {len}", path.display())
            }
        });
    }
    let reference = reference(node_image, &key(&parts));
    if docker.inspect_image(&reference).await.is_ok() {
        return Ok((reference, false));
    }
    let entrypoint = base
        .config
        .and_then(|c| c.entrypoint)
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| vec!["/usr/local/bin/entrypoint".into(), "/sbin/init".into()]);
    remove_abandoned().await;
    let container = format!("{BUILD_CONTAINER}{}", std::process::id());
    let made = tokio::time::timeout(
        deadline,
        make(&container, node_image, images, &entrypoint, &reference),
    )
    .await
    .unwrap_or_else(|_| {
        Err(RuntimeError::Timeout {
            what: format!("making {reference}"),
            seconds: deadline.as_secs_f64(),
        })
    });
    // The build container goes whatever happened.
    let _ = docker_cli(&["rm", "-f", "-v", &container], Duration::from_secs(60)).await;
    made?;
    prune(&reference).await;
    Ok((reference, true))
}

/// The hex digest of `parts`, each length-prefixed.
fn key(parts: &[String]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    super::super::image::hex(&h.finalize())
}

/// `straggler-lab/kind-node-preloaded:<the pinned image's tag>-<key>`: the tag keeps the Kubernetes
/// version first, which the kind config reads (`kind::cluster_config`).
pub fn reference(node_image: &str, key: &str) -> String {
    // The tag, not the digest a pinned reference also carries.
    let (_, tag) = kind::split_reference(node_image.split('@').next().unwrap_or(node_image));
    format!("{PRELOADED_REPOSITORY}:{tag}-{}", &key[..key.len().min(16)])
}

/// The build container from the pinned image, containerd in it, every image imported, containerd
/// stopped, the container committed as `reference` with the pinned image's entrypoint.
async fn make(
    container: &str,
    node_image: &str,
    images: &[LabImage],
    entrypoint: &[String],
    reference: &str,
) -> Result<()> {
    let step = Duration::from_secs(120);
    docker_cli(
        &[
            "run",
            "-d",
            "--name",
            container,
            "--label",
            &format!("{HOST_LABEL}={}", host()),
            "--privileged",
            "--network",
            "none",
            "--entrypoint",
            "sleep",
            node_image,
            "infinity",
        ],
        step,
    )
    .await?;
    docker_cli(
        &[
            "exec",
            container,
            "sh",
            "-c",
            "containerd > /var/log/lab-preload.log 2>&1 & echo $! > /run/lab-preload.pid",
        ],
        step,
    )
    .await?;
    let wait = format!(
        "for i in $(seq 1 {}); do ctr version > /dev/null 2>&1 && exit 0; sleep 0.2; done; cat /var/log/lab-preload.log; exit 1",
        CONTAINERD_START.as_millis() / 200
    );
    docker_cli(&["exec", container, "sh", "-c", &wait], CONTAINERD_START + step).await?;
    futures::future::try_join_all(images.iter().map(|image| import(container, image))).await?;
    // containerd ends before the commit, so its files are whole.
    docker_cli(
        &[
            "exec", container, "sh", "-c",
            "p=$(cat /run/lab-preload.pid); kill \"$p\"; while [ -d \"/proc/$p\" ] && ! grep -q '^State:.*Z' \"/proc/$p/status\"; do sleep 0.1; done; rm -f /run/lab-preload.pid /var/log/lab-preload.log",
        ],
        step,
    )
    .await?;
    let entrypoint = format!(
        "ENTRYPOINT {}",
        serde_json::to_string(entrypoint).map_err(|e| RuntimeError::Other(e.to_string()))?
    );
    let label = format!("LABEL {LABEL}={node_image}");
    docker_cli(
        &[
            "commit",
            "--change",
            &entrypoint,
            "--change",
            &label,
            container,
            reference,
        ],
        Duration::from_secs(600),
    )
    .await?;
    Ok(())
}

/// One image into the build container's containerd, unpacked (`kind load` imports into a running node
/// the same way).
async fn import(container: &str, image: &LabImage) -> Result<()> {
    let ctr = [
        "exec",
        "-i",
        container,
        "ctr",
        "--namespace",
        "k8s.io",
        "images",
        "import",
        "--digests",
        "--snapshotter",
        "overlayfs",
        "-",
    ];
    let mut cmd = Command::new("docker");
    cmd.args(ctr).kill_on_drop(true);
    let what = match image {
        LabImage::Archive(path) => {
            let file = std::fs::File::open(path)
                .map_err(|e| RuntimeError::io(format!("open {}", path.display()), e))?;
            cmd.stdin(Stdio::from(file));
            path.display().to_string()
        }
        LabImage::InDocker(name) => {
            let mut save = Command::new("docker");
            save.args(["save", name])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .kill_on_drop(true);
            let mut saving = save
                .spawn()
                .map_err(|e| RuntimeError::io(format!("run docker save {name}"), e))?;
            let out = saving
                .stdout
                .take()
                .ok_or_else(|| RuntimeError::Other("docker save: no output".into()))?;
            let stdin: Stdio = out
                .try_into()
                .map_err(|e| RuntimeError::io("docker save's output", e))?;
            cmd.stdin(stdin);
            let imported = kind::output(cmd, &format!("import {name}")).await;
            let saved = saving
                .wait()
                .await
                .map_err(|e| RuntimeError::io(format!("docker save {name}"), e))?;
            imported?;
            if !saved.success() {
                return Err(RuntimeError::Other(format!(
                    "docker save {name} failed ({saved})"
                )));
            }
            return Ok(());
        }
    };
    kind::output(cmd, &format!("import {what}")).await.map(drop)
}

/// Removes the build containers whose `lab` is gone (a `lab up` ended by a signal while it made an image
/// leaves its container running `sleep`): those this machine made (the engine may serve others), whose
/// process is not running.
async fn remove_abandoned() {
    let Ok(out) = docker_cli(
        &[
            "ps",
            "-a",
            "--filter",
            &format!("name=^{BUILD_CONTAINER}"),
            "--filter",
            &format!("label={HOST_LABEL}={}", host()),
            "--format",
            "{{.Names}}",
        ],
        Duration::from_secs(30),
    )
    .await
    else {
        return;
    };
    for name in out.lines().map(str::trim) {
        let Some(pid) = name
            .strip_prefix(BUILD_CONTAINER)
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = docker_cli(&["rm", "-f", "-v", name], Duration::from_secs(60)).await;
        }
    }
}

/// Removes the node images made here before, but `keep`. One that a node of another lab still runs on is
/// kept by Docker (no force).
async fn prune(keep: &str) {
    let Ok(out) = docker_cli(
        &[
            "images",
            "--filter",
            &format!("label={LABEL}"),
            "--format",
            "{{.Repository}}:{{.Tag}}",
        ],
        Duration::from_secs(30),
    )
    .await
    else {
        return;
    };
    for old in out.lines().map(str::trim).filter(|l| !l.is_empty() && *l != keep) {
        if let Err(e) = docker_cli(&["rmi", old], Duration::from_secs(60)).await {
            tracing::debug!("removing the older preloaded node image {old}: {e}");
        }
    }
}

/// This machine's host name, as the kernel has it.
fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// `docker ARGS` within `deadline`; its standard output.
async fn docker_cli(args: &[&str], deadline: Duration) -> Result<String> {
    kind::run("docker", args, deadline).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tag_keeps_the_kubernetes_version_first() {
        let k = "0123456789abcdef0123";
        assert_eq!(
            reference("straggler-lab/kind-node:v1.34.4", k),
            "straggler-lab/kind-node-preloaded:v1.34.4-0123456789abcdef"
        );
        assert_eq!(
            reference(
                "kindest/node:v1.34.0@sha256:7416a61b42b1662ca6ca89f02028ac133a309a2a30ba309614e8ec94d976dc5a",
                k
            ),
            "straggler-lab/kind-node-preloaded:v1.34.0-0123456789abcdef"
        );
        assert_eq!(
            reference("localhost:5000/node", k),
            "straggler-lab/kind-node-preloaded:latest-0123456789abcdef"
        );
    }

    #[test]
    fn the_key_changes_with_any_part_and_not_by_concatenation() {
        let a = key(&["ab".into(), "c".into()]);
        assert_eq!(a, key(&["ab".into(), "c".into()]));
        assert_ne!(a, key(&["a".into(), "bc".into()]));
        assert_ne!(a, key(&["ab".into(), "d".into()]));
    }

    #[test]
    fn the_images_from_it_keep_the_back_off_config() {
        let image = reference("straggler-lab/kind-node:v1.34.4", &"f".repeat(64));
        let config = crate::kind::cluster_config("c", &image, 2, None);
        assert!(config.contains("maxContainerRestartPeriod"), "{config}");
        assert!(config.contains(&format!("image: {image}")), "{config}");
    }
}
