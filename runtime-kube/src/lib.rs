//! The Kubernetes runtimes: a kind cluster the lab creates (`--runtime kind`), or an existing cluster
//! reached through a kubeconfig (`--kubeconfig`). Both deploy the same manifests, report the same status
//! model, and do every fault action through the API: an ephemeral container running `tc netem` (or the
//! latency proxy beside the volume server, where the node kernel has no `sch_netem`), the `pods/resize`
//! subresource, the StatefulSet's scale, and the world size in `lab-config`.

pub mod actions;
pub mod api;
pub mod beside;
pub mod database;
pub mod down;
pub mod gpus;
pub mod image;
pub mod image_set;
pub mod jobs;
pub mod kind;
mod logs;
pub mod manifests;
pub mod rbac;
pub mod status;
pub mod storage;
pub mod up;

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use lab_model::Millicores;
use lab_model::status::RuntimeKind;
use serde::{Deserialize, Serialize};

use lab_runtime::state::LabRecord;
use lab_runtime::{Result, RuntimeError};

pub use down::down;
pub use up::up;

/// The lab image every lab container runs (rank, seeder, latency proxy, `weed`, `tc`), pinned to the
/// workspace version: never `:latest`.
pub const DEFAULT_IMAGE: &str = concat!("straggler-lab/lab:", env!("CARGO_PKG_VERSION"));
/// Prometheus, pinned.
pub const DEFAULT_PROMETHEUS_IMAGE: &str = "prom/prometheus:v3.5.0";
/// The kind node image, pinned by digest: Kubernetes 1.34 has in-place resize on by default (beta).
pub const DEFAULT_NODE_IMAGE: &str =
    "kindest/node:v1.34.0@sha256:7416a61b42b1662ca6ca89f02028ac133a309a2a30ba309614e8ec94d976dc5a";
/// The counted GPU resource the lab advertises on the node when it has no device plugin.
pub const DEFAULT_GPU_RESOURCE: &str = "lab.dev/gpu";

/// Whether the lab creates its cluster or uses one that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterMode {
    /// A kind cluster the lab creates and deletes.
    Kind,
    /// A cluster reached through a kubeconfig; the lab creates and deletes only its own objects.
    Existing,
}

/// How the slow-storage fault adds its delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DelayChoice {
    /// `tc netem` in an ephemeral container where the node kernel has `sch_netem`, else the latency proxy.
    #[default]
    Auto,
    /// Only `tc netem`; fail where the kernel lacks it.
    Netem,
    /// Only the latency proxy beside each volume server.
    Proxy,
}

/// What the Kubernetes runtimes need beyond [`lab_runtime::UpOptions`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KubeOptions {
    pub mode: ClusterMode,
    /// The kubeconfig (existing cluster); `None` uses `$KUBECONFIG` or `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; `None` uses the current one.
    pub context: Option<String>,
    /// The namespace; `None` uses `straggler-lab-<name>`, created (and later deleted) by the lab.
    pub namespace: Option<String>,
    /// The counted GPU resource each rank asks for, e.g. `lab.dev/gpu` or `nvidia.com/gpu`.
    pub gpu_resource: String,
    /// Advertise `UpOptions::gpus` of `gpu_resource` on every node, the way a device plugin would. On by
    /// default for kind; on a real cluster with a device plugin leave it off.
    pub advertise_gpus: bool,
    /// The lab image.
    pub image: String,
    /// `IfNotPresent` (default) or `Never` for nodes that have the image imported and no registry.
    pub pull_policy: String,
    /// Deploy Prometheus with the golden-signal rules.
    pub monitoring: bool,
    pub prometheus_image: String,
    /// The kind node image.
    pub node_image: String,
    /// kind: how many nodes (one control plane, the rest workers); every node runs ranks and the GPUs are
    /// split across them.
    pub nodes: u32,
    /// Build the lab image with Docker from the repository's Dockerfile (kind).
    pub build_image: bool,
    /// The folder holding the Dockerfile (kind); `None` searches upwards from the current directory.
    pub build_context: Option<PathBuf>,
    pub delay: DelayChoice,
    /// How long any one wait (a rollout, the seeding Job, a resize) may take.
    #[serde(with = "secs")]
    pub wait_timeout: Duration,
    /// How long any one API request may take.
    #[serde(with = "secs")]
    pub request_timeout: Duration,
}

impl KubeOptions {
    /// Defaults for a kind cluster the lab creates.
    pub fn kind() -> Self {
        KubeOptions {
            mode: ClusterMode::Kind,
            kubeconfig: None,
            context: None,
            namespace: None,
            gpu_resource: DEFAULT_GPU_RESOURCE.to_string(),
            advertise_gpus: true,
            image: DEFAULT_IMAGE.to_string(),
            pull_policy: "IfNotPresent".to_string(),
            monitoring: true,
            prometheus_image: DEFAULT_PROMETHEUS_IMAGE.to_string(),
            node_image: DEFAULT_NODE_IMAGE.to_string(),
            nodes: 1,
            build_image: true,
            build_context: None,
            delay: DelayChoice::Auto,
            wait_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(30),
        }
    }

    /// Defaults for an existing cluster.
    pub fn existing(kubeconfig: Option<PathBuf>) -> Self {
        KubeOptions {
            mode: ClusterMode::Existing,
            kubeconfig,
            advertise_gpus: false,
            monitoring: false,
            build_image: false,
            ..KubeOptions::kind()
        }
    }
}

/// What `lab.json` records for a Kubernetes lab, enough to reopen it and to take it down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KubeRecord {
    pub mode: ClusterMode,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: String,
    /// The lab created the namespace, so `lab down` deletes it.
    pub created_namespace: bool,
    /// The kind cluster's name.
    pub cluster: Option<String>,
    /// The lab created that cluster (a failed preflight, for a name already taken, did not).
    #[serde(default = "yes")]
    pub created_cluster: bool,
    /// kind: the Docker engine the cluster was created on (`DOCKER_HOST` then, or the default socket), so
    /// that `lab down` deletes it there whatever the shell it runs in points at. Absent in records
    /// written before it was kept: the environment's engine.
    #[serde(default)]
    pub docker_host: Option<String>,
    /// kind: the node image the cluster runs.
    #[serde(default)]
    pub node_image: String,
    /// kind: how many nodes the cluster has.
    #[serde(default = "one")]
    pub nodes: u32,
    pub gpu_resource: String,
    /// Nodes on which the lab advertised the GPU resource (removed again by `lab down`).
    pub advertised_on: Vec<String>,
    pub ranks: u32,
    pub storage_servers: u32,
    pub seed: u64,
    /// Counted GPUs the lab was sized for.
    #[serde(default)]
    pub gpus: u32,
    pub watchdog_seconds: u64,
    pub cpu: Millicores,
    pub image: String,
    pub pull_policy: String,
    pub monitoring: bool,
    pub prometheus_image: String,
    pub delay: DelayChoice,
    #[serde(with = "secs")]
    pub wait_timeout: Duration,
    #[serde(with = "secs")]
    pub request_timeout: Duration,
    /// The lab runs the database (`lab up --database`), from this image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_image: Option<String>,
    /// The lab's control token, sent with every request that changes the job (the ranks have it from the
    /// `lab-control` Secret). Absent in records written before it was kept: no token, as the ranks of
    /// such a lab have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_token: Option<String>,
}

/// A new control token: 32 bytes from the kernel's random source, as hex.
///
/// # Errors
/// When the random source cannot be read.
pub fn new_control_token() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| RuntimeError::io("read /dev/urandom for the lab's control token", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The database image's reference for this version of the lab.
pub const DEFAULT_DB_IMAGE: &str = concat!("straggler-lab/db:", env!("CARGO_PKG_VERSION"));

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

impl KubeRecord {
    /// The manifests' settings for `world_size` and `ranks`, the rest as recorded.
    pub fn settings(&self, lab: &str, ranks: u32, world_size: u32, cpu: Millicores) -> manifests::Settings {
        manifests::Settings {
            namespace: self.namespace.clone(),
            lab: lab.to_string(),
            image: self.image.clone(),
            prometheus_image: self.prometheus_image.clone(),
            pull_policy: self.pull_policy.clone(),
            ranks,
            world_size,
            storage_servers: self.storage_servers,
            seed: self.seed,
            gpus: self.gpus,
            watchdog_seconds: self.watchdog_seconds,
            cpu,
            gpu_resource: self.gpu_resource.clone(),
            control_token: self.control_token.clone().unwrap_or_default(),
        }
    }

    fn runtime_kind(&self) -> RuntimeKind {
        match self.mode {
            ClusterMode::Kind => RuntimeKind::Kind,
            ClusterMode::Existing => RuntimeKind::Cluster,
        }
    }
}

/// A lab running on Kubernetes.
#[derive(Clone)]
pub struct KubeRuntime {
    pub(crate) name: String,
    pub(crate) client: Client,
    pub(crate) rec: KubeRecord,
}

impl std::fmt::Debug for KubeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeRuntime")
            .field("name", &self.name)
            .field("namespace", &self.rec.namespace)
            .finish()
    }
}

impl KubeRuntime {
    /// A runtime over an existing client (tests hand in a fake API server here).
    pub fn with_client(name: impl Into<String>, client: Client, rec: KubeRecord) -> Self {
        KubeRuntime {
            name: name.into(),
            client,
            rec,
        }
    }

    /// The namespace the lab lives in.
    pub fn namespace(&self) -> &str {
        &self.rec.namespace
    }

    /// What the lab recorded about itself.
    pub fn record(&self) -> &KubeRecord {
        &self.rec
    }
}

/// Opens the Kubernetes lab that `record` describes.
///
/// # Errors
/// When the record is not a Kubernetes lab's, or its kubeconfig cannot be loaded.
pub async fn open(record: &LabRecord) -> Result<KubeRuntime> {
    let rec = read_record(record)?;
    let client = connect(
        rec.kubeconfig.as_deref(),
        rec.context.as_deref(),
        rec.request_timeout,
    )
    .await?;
    Ok(KubeRuntime::with_client(record.name.clone(), client, rec))
}

/// Parses the Kubernetes part of a lab record.
///
/// # Errors
/// [`RuntimeError::State`]-like errors when the record belongs to another runtime or is malformed.
pub fn read_record(record: &LabRecord) -> Result<KubeRecord> {
    if !matches!(record.runtime, RuntimeKind::Kind | RuntimeKind::Cluster) {
        return Err(RuntimeError::InvalidInput(format!(
            "lab {:?} runs on the {} runtime, not on Kubernetes",
            record.name, record.runtime
        )));
    }
    serde_json::from_value(record.config.clone()).map_err(|e| {
        RuntimeError::Other(format!(
            "lab {:?} has a malformed Kubernetes record: {e}",
            record.name
        ))
    })
}

/// A client for `kubeconfig` (or the default one) and `context`.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] when the kubeconfig cannot be read or the context does not exist.
pub async fn connect(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    timeout: Duration,
) -> Result<Client> {
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let mut config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| {
                RuntimeError::InvalidInput(format!(
                    "cannot read kubeconfig {}: {}; pass the path of a readable kubeconfig with --kubeconfig",
                    path.display(),
                    without_secrets(&e.to_string(), path)
                ))
            })?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .map_err(|e| {
                    RuntimeError::InvalidInput(format!(
                        "kubeconfig {}: {}; check --context",
                        path.display(),
                        without_secrets(&e.to_string(), path)
                    ))
                })?
        }
        None => kube::Config::from_kubeconfig(&opts).await.map_err(|e| {
            RuntimeError::InvalidInput(format!(
                "no usable kubeconfig ({e}): pass --kubeconfig PATH, or set KUBECONFIG"
            ))
        })?,
    };
    // No read timeout of the client's own: a watch is quiet for as long as nothing changes, and every
    // request and wait of the lab has its own deadline.
    config.read_timeout = None;
    config.connect_timeout = Some(timeout.min(Duration::from_secs(10)));
    Client::try_from(config).map_err(|e| api::kube_err("create a client", e))
}

/// The keys of a kubeconfig whose values are credentials.
const SECRET_KEYS: [&str; 7] = [
    "token",
    "password",
    "client-key-data",
    "client-certificate-data",
    "id-token",
    "refresh-token",
    "access-token",
];

/// A kubeconfig error as the lab prints it: its first line only (the YAML parser quotes the lines around the
/// fault after it, which may be the credentials), and any credential of the file still in it masked.
fn without_secrets(error: &str, kubeconfig: &std::path::Path) -> String {
    let mut said = error.lines().next().unwrap_or_default().trim().to_string();
    let text = std::fs::read_to_string(kubeconfig).unwrap_or_default();
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches('-').trim_start();
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if !SECRET_KEYS.contains(&key.trim()) {
            continue;
        }
        let value = value
            .trim()
            .trim_matches(|c| matches!(c, '"' | '\'' | '[' | ']' | ' '));
        if value.len() >= 4 {
            said = said.replace(value, "<redacted>");
        }
    }
    said
}

mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Duration::try_from_secs_f64(f64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_kubeconfig_error_prints_neither_the_quoted_lines_nor_a_credential() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "users:\n- name: u\n  user:\n    token: \"s3cret-token\"\n    password: hunter22\n",
        )
        .unwrap();
        let error = "invalid type: string \"s3cret-token\", expected hunter22 here\n --> <input>:4:3\n  |\n4 |     token: s3cret-token";
        let said = super::without_secrets(error, &path);
        assert_eq!(
            said,
            "invalid type: string \"<redacted>\", expected <redacted> here"
        );
        // Nothing to mask, and a file that cannot be read: the first line as it is.
        assert_eq!(
            super::without_secrets("line 1: bad\nmore", &dir.path().join("nope")),
            "line 1: bad"
        );
    }
}

#[cfg(test)]
mod manifest_tests;
#[cfg(test)]
mod mock_tests;
