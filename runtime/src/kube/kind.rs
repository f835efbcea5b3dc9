//! What only the kind path needs: the preflight (Docker reachable through bollard, `kind` at a supported
//! version), creating and deleting the cluster with a generated config and a pinned node image, building
//! the lab image from the repository's Dockerfile with bollard, and loading it into the node.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use futures::StreamExt;
use tokio::process::Command;

use crate::{Result, RuntimeError};

/// The oldest kind release whose node images the lab pins (Kubernetes 1.34, in-place resize on).
pub const MIN_KIND: (u32, u32, u32) = (0, 30, 0);

/// Parses `kind v0.30.0 go1.24.6 linux/amd64` into `(0, 30, 0)`.
pub fn parse_kind_version(out: &str) -> Option<(u32, u32, u32)> {
    let v = out
        .split_whitespace()
        .find(|w| w.starts_with('v') && w[1..].starts_with(|c: char| c.is_ascii_digit()))?;
    let core = v[1..].split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// The kind config the lab creates its cluster with: one node, the pinned image.
pub fn cluster_config(cluster: &str, node_image: &str) -> String {
    format!(
        "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nname: {cluster}\nnodes:\n  - role: control-plane\n    image: {node_image}\n"
    )
}

/// Docker is reachable through its API, and `kind` is on PATH at a supported version.
///
/// # Errors
/// [`RuntimeError::MissingTool`] saying how to install or start what is missing.
pub async fn preflight() -> Result<String> {
    let docker = Docker::connect_with_defaults().map_err(|e| RuntimeError::MissingTool {
        tool: "docker".into(),
        hint: format!("cannot connect to the Docker API ({e}): install Docker and start it"),
    })?;
    check_docker(&docker).await?;
    check_kind("kind").await
}

/// The Docker daemon behind `docker` answers a ping.
///
/// # Errors
/// [`RuntimeError::MissingTool`] saying how to start it.
pub async fn check_docker(docker: &Docker) -> Result<()> {
    let ping = tokio::time::timeout(Duration::from_secs(10), docker.ping()).await;
    if matches!(ping, Ok(Ok(_))) {
        return Ok(());
    }
    Err(RuntimeError::MissingTool {
        tool: "docker".into(),
        hint: "the Docker daemon does not answer: start Docker (Docker Desktop, or `sudo systemctl start docker`)"
            .into(),
    })
}

/// `program` (kind) runs and is at least [`MIN_KIND`]; returns `kind vX.Y.Z`.
///
/// # Errors
/// [`RuntimeError::MissingTool`] saying how to install or upgrade it.
pub async fn check_kind(program: &str) -> Result<String> {
    let out = run(program, &["version"], Duration::from_secs(20)).await.map_err(|_| RuntimeError::MissingTool {
        tool: "kind".into(),
        hint: format!(
            "install kind v{}.{}.{} or newer (`go install sigs.k8s.io/kind@v0.30.0`, or a release binary)",
            MIN_KIND.0, MIN_KIND.1, MIN_KIND.2
        ),
    })?;
    let v = parse_kind_version(&out)
        .ok_or_else(|| RuntimeError::Other(format!("cannot read the kind version from {:?}", out.trim())))?;
    if v < MIN_KIND {
        return Err(RuntimeError::MissingTool {
            tool: format!("kind v{}.{}.{} or newer", MIN_KIND.0, MIN_KIND.1, MIN_KIND.2),
            hint: format!(
                "kind v{}.{}.{} is too old for the pinned node image: upgrade with `go install sigs.k8s.io/kind@v0.30.0`",
                v.0, v.1, v.2
            ),
        });
    }
    Ok(format!("kind v{}.{}.{}", v.0, v.1, v.2))
}

/// Runs a command with a deadline and returns its standard output.
async fn run(program: &str, args: &[&str], deadline: Duration) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    let what = format!("{program} {}", args.join(" "));
    let out = tokio::time::timeout(deadline, cmd.output())
        .await
        .map_err(|_| RuntimeError::Timeout {
            what: what.clone(),
            seconds: deadline.as_secs_f64(),
        })?
        .map_err(|e| RuntimeError::io(format!("run {what}"), e))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        return Err(RuntimeError::Other(format!(
            "{what} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Creates kind cluster `cluster`, writing its kubeconfig to `kubeconfig` (not the user's own).
///
/// # Errors
/// When `kind create cluster` fails or takes longer than `deadline`.
pub async fn create_cluster(
    dir: &Path,
    cluster: &str,
    node_image: &str,
    kubeconfig: &Path,
    deadline: Duration,
) -> Result<()> {
    let config = dir.join("kind-config.yaml");
    crate::state::write_atomic(&config, cluster_config(cluster, node_image).as_bytes())?;
    let (c, k) = (
        config.to_string_lossy().into_owned(),
        kubeconfig.to_string_lossy().into_owned(),
    );
    run(
        "kind",
        &[
            "create",
            "cluster",
            "--config",
            &c,
            "--kubeconfig",
            &k,
            "--wait",
            "120s",
        ],
        deadline,
    )
    .await?;
    Ok(())
}

/// Deletes kind cluster `cluster` (nothing to do when it does not exist).
///
/// # Errors
/// When `kind delete cluster` fails.
pub async fn delete_cluster(cluster: &str, kubeconfig: Option<&Path>) -> Result<()> {
    let mut args = vec![
        "delete".to_string(),
        "cluster".into(),
        "--name".into(),
        cluster.into(),
    ];
    if let Some(k) = kubeconfig {
        args.push("--kubeconfig".into());
        args.push(k.to_string_lossy().into_owned());
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run("kind", &refs, Duration::from_secs(180)).await?;
    Ok(())
}

/// Loads `image` from the local Docker into every node of `cluster`.
///
/// # Errors
/// When `kind load docker-image` fails.
pub async fn load_image(cluster: &str, image: &str, deadline: Duration) -> Result<()> {
    run(
        "kind",
        &["load", "docker-image", image, "--name", cluster],
        deadline,
    )
    .await?;
    Ok(())
}

/// The repository root that holds the Dockerfile: `start` or one of its parents.
pub fn find_build_context(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join("Dockerfile").is_file() && d.join("Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// Folders and files never sent to Docker: build output, tools, version control.
const EXCLUDED: &[&str] = &["target", ".git", ".tools", "node_modules", ".github"];

/// A tar of the build context (the repository without build output).
///
/// # Errors
/// When a file cannot be read.
pub fn context_tar(root: &Path) -> Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let entries =
        std::fs::read_dir(root).map_err(|e| RuntimeError::io(format!("read {}", root.display()), e))?;
    let mut names: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    names.sort();
    for name in names {
        let n = name.to_string_lossy();
        if EXCLUDED.contains(&n.as_ref()) {
            continue;
        }
        let path = root.join(&name);
        let r = if path.is_dir() {
            b.append_dir_all(&*n, &path)
        } else {
            b.append_path_with_name(&path, &*n)
        };
        r.map_err(|e| RuntimeError::io(format!("pack {} for docker build", path.display()), e))?;
    }
    b.into_inner()
        .map_err(|e| RuntimeError::io("finish the docker build context", e))
}

/// Builds `image` from the Dockerfile in `root` through the Docker API; `progress` gets each step line.
///
/// # Errors
/// When Docker cannot be reached or the build fails (the build's own error is in the message).
pub async fn build_image(
    root: &Path,
    image: &str,
    deadline: Duration,
    progress: &dyn Fn(&str),
) -> Result<()> {
    let docker = Docker::connect_with_defaults()
        .map_err(|e| RuntimeError::Other(format!("cannot connect to Docker ({e}): start Docker")))?;
    let tar = context_tar(root)?;
    let opts = bollard::query_parameters::BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(image)
        .rm(true)
        .build();
    let fut = async {
        let mut stream = docker.build_image(opts, None, Some(bollard::body_full(bytes::Bytes::from(tar))));
        while let Some(item) = stream.next().await {
            let info =
                item.map_err(|e| RuntimeError::Other(format!("docker build of {image} failed: {e}")))?;
            if let Some(err) = info.error_detail.and_then(|d| d.message) {
                return Err(RuntimeError::Other(format!(
                    "docker build of {image} failed: {err}"
                )));
            }
            if let Some(line) = info
                .stream
                .as_deref()
                .map(str::trim)
                .filter(|l| l.starts_with("Step ") || l.starts_with("#"))
            {
                progress(line);
            }
        }
        Ok(())
    };
    tokio::time::timeout(deadline, fut)
        .await
        .map_err(|_| RuntimeError::Timeout {
            what: format!("docker build of {image}"),
            seconds: deadline.as_secs_f64(),
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_versions() {
        assert_eq!(
            parse_kind_version("kind v0.30.0 go1.24.6 linux/amd64"),
            Some((0, 30, 0))
        );
        assert_eq!(
            parse_kind_version("kind v0.32.0-alpha+abc go1.25 linux/arm64"),
            Some((0, 32, 0))
        );
        assert_eq!(parse_kind_version("nonsense"), None);
        assert!(parse_kind_version("kind v0.29.0 go1.24").unwrap() < MIN_KIND);
    }

    #[tokio::test]
    async fn a_docker_daemon_that_does_not_answer_says_how_to_start_it() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("docker.sock");
        // A socket file nobody listens on any more: what a stopped daemon leaves behind.
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        let docker =
            Docker::connect_with_unix(sock.to_str().unwrap(), 2, bollard::API_DEFAULT_VERSION).unwrap();
        let err = check_docker(&docker).await.unwrap_err();
        assert!(
            matches!(err, RuntimeError::MissingTool { ref tool, .. } if tool == "docker"),
            "{err}"
        );
        assert!(err.to_string().contains("start Docker"), "{err}");
    }

    #[tokio::test]
    async fn a_missing_kind_says_how_to_install_it() {
        let err = check_kind("/nonexistent/kind").await.unwrap_err();
        assert!(
            matches!(err, RuntimeError::MissingTool { ref tool, .. } if tool == "kind"),
            "{err}"
        );
        assert!(
            err.to_string().contains("go install sigs.k8s.io/kind@v0.30.0"),
            "{err}"
        );
    }

    #[test]
    fn config_pins_the_node_image() {
        let c = cluster_config("lab-demo", super::super::DEFAULT_NODE_IMAGE);
        assert!(c.contains("image: kindest/node:v1.34.0@sha256:"));
        assert!(c.contains("name: lab-demo"));
    }

    #[test]
    fn build_context_leaves_out_build_output() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::create_dir_all(d.path().join("target/debug")).unwrap();
        std::fs::write(d.path().join("target/debug/big"), "x").unwrap();
        std::fs::create_dir_all(d.path().join("src")).unwrap();
        std::fs::write(d.path().join("src/lib.rs"), "").unwrap();
        let tar = context_tar(d.path()).unwrap();
        let mut a = tar::Archive::new(tar.as_slice());
        let names: Vec<String> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert!(names.iter().any(|n| n == "Dockerfile"));
        assert!(names.iter().any(|n| n == "src/lib.rs"));
        assert!(!names.iter().any(|n| n.starts_with("target")));
    }
}
