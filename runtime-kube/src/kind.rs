//! What only the kind path needs: the preflight (Docker reachable through bollard, `kind` at a supported
//! version), creating and deleting the cluster with a generated config and a pinned node image, building
//! the lab image from the repository's Dockerfile with bollard, and loading it into the node.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use futures::StreamExt;
use tokio::process::Command;

use lab_runtime::{Result, RuntimeError};

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

/// The pod network of a cluster the lab creates: a documentation range (RFC 5737), so no address the
/// cluster hands out can be mistaken for one on a real network; each node gets a /26 of it (up to 4).
pub const POD_SUBNET: &str = "203.0.113.0/24";
/// The Service network: the upper half of another documentation range (the lower half is left to
/// Docker's networks where a private engine puts them there).
pub const SERVICE_SUBNET: &str = "198.51.100.128/25";
/// The DNS domain of a cluster the lab creates (kind's and kubeadm's default).
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The most nodes a lab's kind cluster may have: one /26 of [`POD_SUBNET`] each.
pub const MAX_NODES: u32 = 4;

/// The longest the kubelets of a cluster the lab creates wait before restarting a container that keeps
/// exiting (Kubernetes' own default doubles from 10 s up to 5 minutes, and starts afresh only after 10
/// minutes without a restart). Every rank exits when a peer goes away, so each fault that restarts a rank
/// adds a crash to every other rank's count; over a session of drills the back-off grew to minutes, and a
/// right fix was judged on the kubelet's wait instead of on the job. Capped at 10 s it still cost 10 s per
/// restart for the rest of a session (a container that crashed within the last 10 minutes waits the
/// whole cap), which made rank-crash's detection on kind 30.6 s. At 1 s, the least the kubelet takes (with
/// the first restart after 1 s too: [`REDUCED_DECAY_KUBE`]), a stalled job comes back within seconds of its
/// fix and every restart of a rank waits the same second, whatever the drills before it restarted.
pub const MAX_RESTART_BACKOFF: &str = "1s";

/// The oldest Kubernetes whose kubelet takes [`MAX_RESTART_BACKOFF`] (`crashLoopBackOff`, behind the
/// `KubeletCrashLoopBackOffMax` feature gate).
const MIN_BACKOFF_KUBE: (u32, u32) = (1, 32);

/// The oldest Kubernetes whose kubelet starts the back-off at 1 s instead of 10 s (the
/// `ReduceDefaultCrashLoopBackOffDecay` feature gate, alpha from 1.33; an older kubelet refuses a gate it
/// does not know).
const REDUCED_DECAY_KUBE: (u32, u32) = (1, 33);

/// The Kubernetes minor version in a node image's tag (`kindest/node:v1.34.0@sha256:…` → (1, 34)).
fn node_image_kube_version(image: &str) -> Option<(u32, u32)> {
    let tag = image.split('@').next()?.rsplit_once(':')?.1;
    let mut parts = tag.strip_prefix('v')?.split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The token kind gives every cluster for joining its nodes (`kubeadm.Token` in kind's source, the same
/// in every release the lab supports).
const KIND_JOIN_TOKEN: &str = "abcdef.0123456789abcdef";
/// Where a worker of the lab's cluster finds [`discovery_kubeconfig`] (mounted from the lab's folder).
const DISCOVERY_IN_NODE: &str = "/kind/discovery.conf";

/// The kind config the lab creates its cluster with: `nodes` nodes of the pinned image (a control plane,
/// then workers), pod and Service networks on documentation ranges, a /26 of pods per node, and (on
/// Kubernetes 1.32 and later) the kubelets' crash-loop back-off capped at [`MAX_RESTART_BACKOFF`].
///
/// With `discovery` (the host path of [`discovery_kubeconfig`]), the workers join by that file instead
/// of by kind's token discovery. Token discovery waits until the controller-manager has signed the
/// `cluster-info` ConfigMap for the token, and polls every 5 s: on 2 cores it signed 6–8 s after the
/// ConfigMap was made, and the worker's join took 6.3–11.2 s; by the file 3.7–5.0 s (4 creates each,
/// alternated). The file skips the CA check as kind's token discovery does (`unsafeSkipCAVerification`),
/// and kubeadm takes the CA from `cluster-info` into the kubelet's credentials. A `discovery` path with
/// a colon cannot be mounted, and is left out.
pub fn cluster_config(cluster: &str, node_image: &str, nodes: u32, discovery: Option<&Path>) -> String {
    let mut c = format!(
        "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nname: {cluster}\nnetworking:\n  podSubnet: {POD_SUBNET}\n  serviceSubnet: {SERVICE_SUBNET}\nnodes:\n  - role: control-plane\n    image: {node_image}\n"
    );
    // kind mounts with `--volume=HOST:NODE:ro`, which a host path with a colon breaks: such a lab's
    // folder keeps kind's token discovery.
    let discovery = discovery.filter(|f| nodes > 1 && !f.to_string_lossy().contains(':'));
    for _ in 1..nodes.max(1) {
        c.push_str(&format!("  - role: worker\n    image: {node_image}\n"));
        if let Some(file) = discovery {
            // Quoted (a JSON string is YAML): the lab's folder may hold a space, or `#`.
            let host = serde_json::Value::String(file.display().to_string());
            c.push_str(&format!(
                "    extraMounts:\n      - hostPath: {host}\n        containerPath: {DISCOVERY_IN_NODE}\n        readOnly: true\n"
            ));
        }
    }
    c.push_str(
        "kubeadmConfigPatches:\n  - |\n    kind: ClusterConfiguration\n    controllerManager:\n      extraArgs:\n        node-cidr-mask-size: \"26\"\n",
    );
    let version = node_image_kube_version(node_image);
    if version.is_some_and(|v| v >= MIN_BACKOFF_KUBE) {
        let decay = if version.is_some_and(|v| v >= REDUCED_DECAY_KUBE) {
            "      ReduceDefaultCrashLoopBackOffDecay: true\n"
        } else {
            ""
        };
        c.push_str(&format!(
            "  - |\n    kind: KubeletConfiguration\n    featureGates:\n      KubeletCrashLoopBackOffMax: true\n{decay}    crashLoopBackOff:\n      maxContainerRestartPeriod: {MAX_RESTART_BACKOFF}\n"
        ));
    }
    // CoreDNS is installed by the lab once the nodes have joined (`up::dns`), not by `kubeadm init`. A
    // merge patch replaces the list: kind's own entry (its nodes fail kubeadm's preflight checks) is kept.
    c.push_str(
        "  - |\n    kind: InitConfiguration\n    skipPhases:\n      - preflight\n      - addon/coredns\n",
    );
    if discovery.is_some() {
        // A merge patch: `null` removes kind's token discovery, which kubeadm refuses beside a file.
        c.push_str(&format!(
            "  - |\n    kind: JoinConfiguration\n    discovery:\n      bootstrapToken: null\n      file:\n        kubeConfigPath: {DISCOVERY_IN_NODE}\n      tlsBootstrapToken: {KIND_JOIN_TOKEN}\n"
        ));
    }
    c
}

/// The file a worker of cluster `cluster` joins by: the control plane's API server by the name kind's
/// nodes know it by, without CA (kubeadm reads it from the public `cluster-info` ConfigMap) and without
/// credentials (the join token is in the join configuration).
pub fn discovery_kubeconfig(cluster: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n  - name: {cluster}\n    cluster:\n      server: https://{cluster}-control-plane:6443\n      insecure-skip-tls-verify: true\nusers:\n  - name: join\n    user: {{}}\ncontexts:\n  - name: join\n    context:\n      cluster: {cluster}\n      user: join\ncurrent-context: join\n"
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
pub(crate) async fn run(program: &str, args: &[&str], deadline: Duration) -> Result<String> {
    run_on(program, args, deadline, None).await
}

/// [`run`], against the Docker engine at `docker_host` when given (the command's `DOCKER_HOST`), else the
/// environment's.
/// What `kind version` says (within 10 s), if the kind CLI is there and answers.
pub async fn cli_version() -> Option<String> {
    let out = run_on("kind", &["version"], Duration::from_secs(10), None)
        .await
        .ok()?;
    lab_model::version::kind_version(&out)
}

async fn run_on(
    program: &str,
    args: &[&str],
    deadline: Duration,
    docker_host: Option<&str>,
) -> Result<String> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    if let Some(h) = docker_host {
        cmd.env("DOCKER_HOST", h);
    }
    let what = format!("{program} {}", args.join(" "));
    tokio::time::timeout(deadline, output(cmd, &what))
        .await
        .map_err(|_| RuntimeError::Timeout {
            what: what.clone(),
            seconds: deadline.as_secs_f64(),
        })?
}

/// Runs `cmd` (named `what` in errors) to its end; its standard output, or an error with its standard
/// error's last lines.
///
/// # Errors
/// When it cannot be started or exits with a failure.
pub(crate) async fn output(mut cmd: Command, what: &str) -> Result<String> {
    let out = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .output()
        .await
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

/// Creates kind cluster `cluster`, writing its kubeconfig to `kubeconfig` (not the user's own). Returns
/// once the nodes have joined, without kind's wait for the control plane to be Ready (1–3 s on 2 cores):
/// nothing the lab does next needs a Ready node, and its pods wait for one. The cluster's DNS is installed
/// next (`up::dns`).
///
/// # Errors
/// When `kind create cluster` fails or takes longer than `deadline`.
pub async fn create_cluster(
    dir: &Path,
    cluster: &str,
    node_image: &str,
    nodes: u32,
    kubeconfig: &Path,
    deadline: Duration,
) -> Result<()> {
    let config = dir.join("kind-config.yaml");
    let discovery = std::path::absolute(dir.join("kind-discovery.conf"))
        .map_err(|e| RuntimeError::io(format!("find the absolute path of {}", dir.display()), e))?;
    if nodes > 1 {
        lab_runtime::state::write_atomic(&discovery, discovery_kubeconfig(cluster).as_bytes())?;
    }
    lab_runtime::state::write_atomic(
        &config,
        cluster_config(cluster, node_image, nodes, Some(&discovery)).as_bytes(),
    )?;
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
        ],
        deadline + Duration::from_secs(60),
    )
    .await
    .map_err(|e| RuntimeError::Other(format!(
        "{e}; `kind export logs --name {cluster}` collects the nodes' logs (with --retain the cluster is kept to look at)"
    )))?;
    Ok(())
}

/// The kind clusters that exist (`kind get clusters`).
///
/// # Errors
/// When kind cannot list them (Docker not answering).
pub async fn clusters() -> Result<Vec<String>> {
    clusters_on(None).await
}

/// [`clusters`] on the Docker engine at `docker_host` (else the environment's).
///
/// # Errors
/// When kind cannot list them (Docker not answering).
pub async fn clusters_on(docker_host: Option<&str>) -> Result<Vec<String>> {
    let out = run_on("kind", &["get", "clusters"], Duration::from_secs(30), docker_host).await?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("No kind clusters"))
        .map(str::to_string)
        .collect())
}

/// Whether Docker has `image`, pulling it when it does not (within `deadline`). `Err` carries why it
/// could not be had.
///
/// # Errors
/// The pull's own error, or a timeout.
pub async fn ensure_image(docker: &Docker, image: &str, deadline: Duration) -> Result<()> {
    if docker.inspect_image(image).await.is_ok() {
        return Ok(());
    }
    let (from, tag) = split_reference(image);
    let opts = bollard::query_parameters::CreateImageOptionsBuilder::default()
        .from_image(&from)
        .tag(&tag)
        .build();
    let pull = async {
        let mut stream = docker.create_image(Some(opts), None, None);
        while let Some(item) = stream.next().await {
            item.map_err(|e| RuntimeError::Other(format!("pull {image}: {e}")))?;
        }
        Ok::<_, RuntimeError>(())
    };
    tokio::time::timeout(deadline, pull)
        .await
        .map_err(|_| RuntimeError::Timeout {
            what: format!("pull {image}"),
            seconds: deadline.as_secs_f64(),
        })??;
    Ok(())
}

/// `repo:tag` or `repo@sha256:…` into what the pull API takes (`fromImage`, `tag`).
pub fn split_reference(image: &str) -> (String, String) {
    if let Some((repo, digest)) = image.split_once('@') {
        // A digest pins the image: pull by digest, whatever tag the name also carries.
        let repo = match repo.rsplit_once(':') {
            Some((r, t)) if !t.contains('/') => r,
            _ => repo,
        };
        return (repo.to_string(), digest.to_string());
    }
    match image.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r.to_string(), t.to_string()),
        _ => (image.to_string(), "latest".to_string()),
    }
}

/// The base images a Dockerfile builds `FROM` (stage names excluded).
pub fn dockerfile_bases(dockerfile: &str) -> Vec<String> {
    let mut stages = Vec::new();
    let mut bases = Vec::new();
    for line in dockerfile.lines().map(str::trim) {
        let mut w = line.split_whitespace();
        if !w.next().is_some_and(|k| k.eq_ignore_ascii_case("FROM")) {
            continue;
        }
        let words: Vec<&str> = w.filter(|x| !x.starts_with("--")).collect();
        let Some(image) = words.first() else { continue };
        if !stages.iter().any(|s: &String| s == image) && !bases.iter().any(|b: &String| b == image) {
            bases.push(image.to_string());
        }
        if words.len() >= 3 && words[1].eq_ignore_ascii_case("AS") {
            stages.push(words[2].to_string());
        }
    }
    bases
}

/// Loads the image archive at `archive` into every node of `cluster`.
///
/// # Errors
/// When `kind load image-archive` fails.
pub async fn load_archive(cluster: &str, archive: &Path, deadline: Duration) -> Result<()> {
    let a = archive.to_string_lossy().into_owned();
    run(
        "kind",
        &["load", "image-archive", &a, "--name", cluster],
        deadline,
    )
    .await?;
    Ok(())
}

/// Deletes kind cluster `cluster` from the Docker engine at `docker_host` (else the environment's);
/// nothing to do when it does not exist.
///
/// # Errors
/// When `kind delete cluster` fails.
pub async fn delete_cluster(
    cluster: &str,
    kubeconfig: Option<&Path>,
    docker_host: Option<&str>,
) -> Result<()> {
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
    run_on("kind", &refs, Duration::from_secs(180), docker_host).await?;
    Ok(())
}

/// The node containers of kind cluster `cluster` (`kind get nodes`).
///
/// # Errors
/// When kind cannot list them.
pub async fn node_names(cluster: &str) -> Result<Vec<String>> {
    let out = run(
        "kind",
        &["get", "nodes", "--name", cluster],
        Duration::from_secs(10),
    )
    .await?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
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
        let c = cluster_config("lab-demo", super::super::DEFAULT_NODE_IMAGE, 1, None);
        assert!(c.contains("image: kindest/node:v1.34.0@sha256:"));
        assert!(c.contains("name: lab-demo"));
        assert!(!c.contains("role: worker"));
        assert!(c.contains("podSubnet: 203.0.113.0/24"));
        assert!(c.contains("serviceSubnet: 198.51.100.128/25"));
        let parsed: serde_json::Value = serde_norway::from_str(&c).unwrap();
        assert_eq!(parsed["nodes"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn more_nodes_are_workers_beside_one_control_plane() {
        let c = cluster_config("lab-demo", "straggler-lab/kind-node:v1.34.4", 3, None);
        let parsed: serde_json::Value = serde_norway::from_str(&c).unwrap();
        let roles: Vec<&str> = parsed["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["role"].as_str().unwrap())
            .collect();
        assert_eq!(roles, ["control-plane", "worker", "worker"]);
        // Every node gets a /26 of the pod network, so four fit.
        let patch = parsed["kubeadmConfigPatches"][0].as_str().unwrap();
        assert!(patch.contains("node-cidr-mask-size"), "{patch}");
        // The kubelets' crash-loop back-off is capped.
        let kubelet: serde_json::Value =
            serde_norway::from_str(parsed["kubeadmConfigPatches"][1].as_str().unwrap()).unwrap();
        assert_eq!(kubelet["kind"], "KubeletConfiguration");
        assert_eq!(kubelet["featureGates"]["KubeletCrashLoopBackOffMax"], true);
        assert_eq!(
            kubelet["featureGates"]["ReduceDefaultCrashLoopBackOffDecay"],
            true
        );
        assert_eq!(kubelet["crashLoopBackOff"]["maxContainerRestartPeriod"], "1s");
    }

    #[test]
    fn kubeadm_init_leaves_coredns_to_the_lab() {
        let c = cluster_config("lab-demo", "straggler-lab/kind-node:v1.34.4", 1, None);
        let parsed: serde_json::Value = serde_norway::from_str(&c).unwrap();
        let init = parsed["kubeadmConfigPatches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| serde_norway::from_str::<serde_json::Value>(p.as_str().unwrap()).unwrap())
            .find(|p| p["kind"] == "InitConfiguration")
            .expect("an InitConfiguration patch");
        assert_eq!(
            init["skipPhases"],
            serde_json::json!(["preflight", "addon/coredns"])
        );
    }

    #[test]
    fn workers_join_by_the_discovery_file_when_one_is_given() {
        let file = Path::new("/state/my labs/demo/kind-discovery.conf");
        let c = cluster_config("lab-demo", "straggler-lab/kind-node:v1.34.4", 3, Some(file));
        let parsed: serde_json::Value = serde_norway::from_str(&c).unwrap();
        let nodes = parsed["nodes"].as_array().unwrap();
        assert!(
            nodes[0].get("extraMounts").is_none(),
            "the control plane does not join"
        );
        for w in &nodes[1..] {
            assert_eq!(
                w["extraMounts"][0]["hostPath"],
                "/state/my labs/demo/kind-discovery.conf"
            );
            assert_eq!(w["extraMounts"][0]["containerPath"], DISCOVERY_IN_NODE);
        }
        let patches = parsed["kubeadmConfigPatches"].as_array().unwrap();
        let join: serde_json::Value =
            serde_norway::from_str(patches.last().unwrap().as_str().unwrap()).unwrap();
        assert_eq!(join["kind"], "JoinConfiguration");
        assert!(join["discovery"]["bootstrapToken"].is_null());
        assert!(
            join["discovery"]
                .as_object()
                .unwrap()
                .contains_key("bootstrapToken"),
            "null removes kind's"
        );
        assert_eq!(join["discovery"]["file"]["kubeConfigPath"], DISCOVERY_IN_NODE);
        assert_eq!(join["discovery"]["tlsBootstrapToken"], KIND_JOIN_TOKEN);
        // A folder with a colon cannot be mounted by kind: its workers join by kind's token.
        let colon = cluster_config(
            "lab-demo",
            "straggler-lab/kind-node:v1.34.4",
            3,
            Some(Path::new("/state/a:b/kind-discovery.conf")),
        );
        assert!(
            !colon.contains("JoinConfiguration") && !colon.contains("extraMounts"),
            "{colon}"
        );
        // One node joins nothing: no mount, no patch.
        let one = cluster_config("lab-demo", "straggler-lab/kind-node:v1.34.4", 1, Some(file));
        assert!(
            !one.contains("JoinConfiguration") && !one.contains("extraMounts"),
            "{one}"
        );
        // The file names the control plane as kind's nodes do, with a user kubeadm's check asks for.
        let k: serde_json::Value = serde_norway::from_str(&discovery_kubeconfig("lab-demo")).unwrap();
        assert_eq!(
            k["clusters"][0]["cluster"]["server"],
            "https://lab-demo-control-plane:6443"
        );
        assert_eq!(k["contexts"][0]["context"]["user"], k["users"][0]["name"]);
        assert_eq!(k["current-context"], k["contexts"][0]["name"]);
    }

    #[test]
    fn the_backoff_cap_only_where_the_kubelet_knows_it() {
        assert_eq!(
            node_image_kube_version("kindest/node:v1.34.0@sha256:abc"),
            Some((1, 34))
        );
        assert_eq!(
            node_image_kube_version("straggler-lab/kind-node:v1.34.4"),
            Some((1, 34))
        );
        assert_eq!(
            node_image_kube_version("localhost:5000/node:v1.31.2"),
            Some((1, 31))
        );
        assert_eq!(node_image_kube_version("my/node:latest"), None);
        assert_eq!(node_image_kube_version("my/node"), None);
        let patches = |image: &str| {
            let c = cluster_config("lab-demo", image, 1, None);
            let parsed: serde_json::Value = serde_norway::from_str(&c).unwrap();
            parsed["kubeadmConfigPatches"].as_array().unwrap().len()
        };
        assert_eq!(patches("kindest/node:v1.34.0"), 3);
        assert_eq!(patches("kindest/node:v1.31.2"), 2);
        // 1.32 knows the cap but not the faster start: a gate it does not know stops its kubelet.
        let c = cluster_config("lab-demo", "kindest/node:v1.32.5", 1, None);
        assert!(c.contains("KubeletCrashLoopBackOffMax"), "{c}");
        assert!(!c.contains("ReduceDefaultCrashLoopBackOffDecay"), "{c}");
        assert_eq!(patches("my/node:latest"), 2);
    }

    #[test]
    fn references_split_for_the_pull_api() {
        assert_eq!(
            split_reference("debian:bookworm-slim"),
            ("debian".into(), "bookworm-slim".into())
        );
        assert_eq!(
            split_reference("prom/prometheus"),
            ("prom/prometheus".into(), "latest".into())
        );
        assert_eq!(
            split_reference("localhost:5000/lab"),
            ("localhost:5000/lab".into(), "latest".into())
        );
        assert_eq!(
            split_reference("kindest/node:v1.34.0@sha256:abc"),
            ("kindest/node".into(), "sha256:abc".into())
        );
    }

    #[test]
    fn the_dockerfile_names_its_base_images_not_its_stages() {
        let d = "FROM rust:1.95-slim-bookworm AS build\nRUN x\nFROM --platform=linux/amd64 python:3.12 AS weed\nFROM debian:bookworm-slim\nCOPY --from=build /a /b\nFROM build\n";
        assert_eq!(
            dockerfile_bases(d),
            ["rust:1.95-slim-bookworm", "python:3.12", "debian:bookworm-slim"]
        );
        let ours = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Dockerfile")).unwrap();
        assert_eq!(dockerfile_bases(&ours).len(), 3, "{ours}");
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
