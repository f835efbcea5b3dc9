//! The lab's Kubernetes objects: the YAML files in `manifests/`, embedded, rendered with an explicit
//! substitution of `${NAME}` variables, and parsed into objects ready for server-side apply.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use kube::core::{ApiResource, GroupVersionKind};
use serde::Deserialize;

use lab_runtime::{Result, RuntimeError};

/// The namespace, when the lab creates it.
pub const NAMESPACE: &str = include_str!("../../manifests/namespace.yaml");
/// `lab-config`: world size and the job's settings.
pub const CONFIG: &str = include_str!("../../manifests/config.yaml");
/// The SeaweedFS master and its Service.
pub const STORAGE_MASTER: &str = include_str!("../../manifests/storage-master.yaml");
/// One volume server with its latency proxy (rendered once per server).
pub const STORAGE_SERVER: &str = include_str!("../../manifests/storage-server.yaml");
/// The Job that seeds the dataset.
pub const SEEDER: &str = include_str!("../../manifests/seeder.yaml");
/// The rendezvous and headless Services and the ranks' StatefulSet.
pub const RANKS: &str = include_str!("../../manifests/ranks.yaml");
/// A job of another team reading from one volume server (the competing-job fault; `lab job`).
pub const FOREIGN_JOB: &str = include_str!("../../manifests/foreign-job.yaml");
/// The database (`lab up --database`): its Service, its StatefulSet `db` and the writer.
pub const DATABASE: &str = include_str!("../../manifests/database.yaml");
/// Prometheus, its RBAC and its configuration.
pub const PROMETHEUS: &str = include_str!("../../manifests/prometheus.yaml");
/// The golden-signal rules Prometheus evaluates, embedded so `lab up` works outside the repository.
pub const RULES: &str = include_str!("../../manifests/rules/golden-signals.yaml");
/// Where the golden-signal rule file lives in the repository (the binary embeds it: [`RULES`]).
pub const RULES_PATH: &str = "manifests/rules/golden-signals.yaml";

/// Names of the objects the manifests create, so code and YAML agree.
pub mod names {
    /// The ConfigMap with the job's settings.
    pub const CONFIG: &str = "lab-config";
    /// The key in [`CONFIG`] that holds the world size.
    pub const WORLD_SIZE_KEY: &str = "world-size";
    /// The ranks' StatefulSet; its pods are `rank-0`, `rank-1`, ...
    pub const RANKS: &str = "rank";
    /// The storage master's Deployment and Service.
    pub const STORAGE_MASTER: &str = "storage-master";
    /// The seeding Job.
    pub const SEEDER: &str = "seeder";
    /// The template annotation that carries the world size (a template change rolls the ranks).
    pub const WORLD_SIZE_ANNOTATION: &str = "lab.dev/world-size";
    /// The label every object of a lab carries, with the lab's name.
    pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
    /// The label naming an object's role.
    pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
    /// The label with a volume server's index.
    pub const INDEX_LABEL: &str = "lab.dev/index";
    /// The component label of a foreign job's Deployment and pod.
    pub const FOREIGN_JOB_COMPONENT: &str = "foreign-job";
    /// The label with a foreign job's name.
    pub const JOB_LABEL: &str = "lab.dev/job";
    /// A foreign job's metrics port (`lab-reader --metrics-listen`).
    pub const JOB_METRICS_PORT: u16 = 9400;
    /// The rank container's name.
    pub const RANK_CONTAINER: &str = "rank";
    /// The volume server container's name.
    pub const VOLUME_CONTAINER: &str = "volume";
    /// The ConfigMap with the golden-signal rules.
    pub const PROMETHEUS_RULES: &str = "prometheus-rules";
    /// The rank's metrics port (also `/readyz`, `/healthz`).
    pub const RANK_METRICS_PORT: u16 = 9400;
    /// The volume server's `-metricsPort`.
    pub const STORAGE_METRICS_PORT: u16 = 9325;
    /// The volume server's HTTP port, behind the proxy.
    pub const STORAGE_HTTP_PORT: u16 = 8080;
    /// The latency proxy's listening port: the volume server's public URL.
    pub const PROXY_PORT: u16 = 8480;
    /// The latency proxy's control API.
    pub const PROXY_CONTROL_PORT: u16 = 8481;
    /// The database's StatefulSet (pods `db-0`, the primary, and `db-1`, the standby).
    pub const DATABASE: &str = "db";
    /// The database's container.
    pub const DB_CONTAINER: &str = "postgres";
    /// The component label of the database's pods.
    pub const DATABASE_COMPONENT: &str = "database";
    /// The component label of the writer's Deployment and pod.
    pub const WRITER_COMPONENT: &str = "db-writer";
    /// The database's port.
    pub const DB_PORT: u16 = 5432;
    /// The writer's metrics port.
    pub const WRITER_METRICS_PORT: u16 = 9410;
}

/// Values substituted into the manifests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vars(BTreeMap<&'static str, String>);

impl Vars {
    /// An empty set of values.
    pub fn new() -> Self {
        Vars(BTreeMap::new())
    }

    /// Sets `${name}` to `value`.
    #[must_use]
    pub fn with(mut self, name: &'static str, value: impl ToString) -> Self {
        self.0.insert(name, value.to_string());
        self
    }

    /// The value of `${name}`, if set.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
}

impl Default for Vars {
    fn default() -> Self {
        Self::new()
    }
}

/// Replaces every `${NAME}` in `template` with its value.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] naming the first variable without a value, or an unterminated `${`.
pub fn render(template: &str, vars: &Vars) -> Result<String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| RuntimeError::InvalidInput("manifest has an unterminated ${".to_string()))?;
        let name = &after[..end];
        let value = vars.get(name).ok_or_else(|| {
            RuntimeError::InvalidInput(format!("manifest variable ${{{name}}} has no value"))
        })?;
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses a multi-document YAML text into objects, skipping empty documents.
///
/// # Errors
/// [`RuntimeError::InvalidInput`] when a document is not a Kubernetes object with apiVersion, kind and name.
pub fn parse(yaml: &str) -> Result<Vec<DynamicObject>> {
    let mut objects = Vec::new();
    for doc in serde_norway::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(doc)
            .map_err(|e| RuntimeError::InvalidInput(format!("manifest is not valid YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject = serde_json::from_value(value)
            .map_err(|e| RuntimeError::InvalidInput(format!("manifest is not a Kubernetes object: {e}")))?;
        if obj.types.is_none() || obj.metadata.name.is_none() {
            return Err(RuntimeError::InvalidInput(
                "manifest object lacks apiVersion, kind or name".into(),
            ));
        }
        objects.push(obj);
    }
    Ok(objects)
}

/// Renders and parses one manifest file.
///
/// # Errors
/// As [`render`] and [`parse`].
pub fn objects(template: &str, vars: &Vars) -> Result<Vec<DynamicObject>> {
    parse(&render(template, vars)?)
}

/// The API resource of an object the lab applies, without asking the server (the lab only applies kinds
/// it knows, so discovery would be a round trip for nothing).
///
/// # Errors
/// [`RuntimeError::InvalidInput`] for a kind the lab does not apply.
pub fn api_resource(obj: &DynamicObject) -> Result<(ApiResource, bool)> {
    let types = obj
        .types
        .as_ref()
        .ok_or_else(|| RuntimeError::InvalidInput("object without a kind".into()))?;
    let (group, version) = match types.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", types.api_version.as_str()),
    };
    let (plural, namespaced) = match types.kind.as_str() {
        "Namespace" => ("namespaces", false),
        "ConfigMap" => ("configmaps", true),
        "Secret" => ("secrets", true),
        "Service" => ("services", true),
        "ServiceAccount" => ("serviceaccounts", true),
        "Deployment" => ("deployments", true),
        "StatefulSet" => ("statefulsets", true),
        "Job" => ("jobs", true),
        "Role" => ("roles", true),
        "RoleBinding" => ("rolebindings", true),
        "ClusterRole" => ("clusterroles", false),
        "ClusterRoleBinding" => ("clusterrolebindings", false),
        other => {
            return Err(RuntimeError::InvalidInput(format!(
                "the lab does not apply objects of kind {other}"
            )));
        }
    };
    let gvk = GroupVersionKind::gvk(group, version, &types.kind);
    Ok((ApiResource::from_gvk_with_plural(&gvk, plural), namespaced))
}

/// What a rank asks the scheduler for: at most 100m, so that GPUs, not CPUs, limit how many ranks fit.
pub const RANK_CPU_REQUEST: lab_model::Millicores = lab_model::Millicores(100);

/// A rank's CPU request for CPU limit `cpu` (a request may not exceed its limit).
pub fn cpu_request(cpu: lab_model::Millicores) -> lab_model::Millicores {
    cpu.min(RANK_CPU_REQUEST)
}

/// Everything that decides what the manifests say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub namespace: String,
    pub lab: String,
    pub image: String,
    pub prometheus_image: String,
    pub pull_policy: String,
    pub ranks: u32,
    pub world_size: u32,
    pub storage_servers: u32,
    pub seed: u64,
    /// Counted GPUs: the dataset holds shards for this many ranks (at least `ranks`).
    pub gpus: u32,
    pub watchdog_seconds: u64,
    pub cpu: lab_model::Millicores,
    pub gpu_resource: String,
    /// The lab's control token (the `lab-control` Secret): rank 0 takes a checkpoint request only with it.
    pub control_token: String,
}

impl Settings {
    /// The substitution values for every file (`INDEX` is added per volume server).
    pub fn vars(&self) -> Vars {
        Vars::new()
            .with("NAMESPACE", &self.namespace)
            .with("LAB", &self.lab)
            .with("IMAGE", &self.image)
            .with("PROMETHEUS_IMAGE", &self.prometheus_image)
            .with("PULL_POLICY", &self.pull_policy)
            .with("RANKS", self.ranks)
            .with("WORLD_SIZE", self.world_size)
            .with("STORAGE_SERVERS", self.storage_servers)
            .with("SEED", self.seed)
            .with("SEED_RANKS", self.ranks.max(self.gpus))
            .with("WATCHDOG_SECONDS", self.watchdog_seconds)
            .with("CPU", self.cpu)
            .with("CPU_REQUEST", cpu_request(self.cpu))
            .with("GPU_RESOURCE", &self.gpu_resource)
            .with("CONTROL_TOKEN", &self.control_token)
    }

    /// The namespace object.
    ///
    /// # Errors
    /// When a manifest does not render or parse (a bug caught by the tests).
    pub fn namespace(&self) -> Result<Vec<DynamicObject>> {
        objects(NAMESPACE, &self.vars())
    }

    /// `lab-config`.
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn config(&self) -> Result<Vec<DynamicObject>> {
        objects(CONFIG, &self.vars())
    }

    /// The storage master, then every volume server.
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn storage(&self) -> Result<Vec<DynamicObject>> {
        let mut out = self.storage_master()?;
        out.extend(self.storage_servers()?);
        Ok(out)
    }

    /// The storage's Services and its master.
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn storage_master(&self) -> Result<Vec<DynamicObject>> {
        objects(STORAGE_MASTER, &self.vars())
    }

    /// Every volume server.
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn storage_servers(&self) -> Result<Vec<DynamicObject>> {
        let mut out = Vec::new();
        for i in 0..self.storage_servers {
            out.extend(objects(STORAGE_SERVER, &self.vars().with("INDEX", i))?);
        }
        Ok(out)
    }

    /// The seeding Job.
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn seeder(&self) -> Result<Vec<DynamicObject>> {
        objects(SEEDER, &self.vars())
    }

    /// The Services, then the StatefulSet, of the ranks.
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn ranks(&self) -> Result<Vec<DynamicObject>> {
        objects(RANKS, &self.vars())
    }

    /// The database: its Service, its StatefulSet (`db-0` the primary, `db-1` the standby) and the
    /// writer, run from `db_image`, trusting connections from `trust` (the cluster's pod network).
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn database(&self, db_image: &str, trust: &str) -> Result<Vec<DynamicObject>> {
        objects(
            DATABASE,
            &self
                .vars()
                .with("DB_IMAGE", db_image)
                .with("DB_TRUST", trust)
                .with("DB_UID", super::image::DB_UID),
        )
    }

    /// The Deployment of foreign job `job`: its own pod running `lab-reader` against `storage-<server>`,
    /// with `--rate` when it is held to one. Its settings are also kept as annotations, which is how the
    /// lab lists it again.
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn foreign_job(&self, job: &lab_model::jobs::ForeignJob) -> Result<Vec<DynamicObject>> {
        let rate = job.rate.map_or_else(|| "none".to_string(), |r| r.to_string());
        let vars = self
            .vars()
            .with("JOB", &job.name)
            .with("SERVER", job.server)
            .with("THREADS", job.threads)
            .with("RATE", &rate);
        let mut out = objects(FOREIGN_JOB, &vars)?;
        if let Some(r) = job.rate {
            for o in &mut out {
                if let Some(args) = o
                    .data
                    .pointer_mut("/spec/template/spec/containers/0/args")
                    .and_then(serde_json::Value::as_array_mut)
                {
                    args.push(serde_json::Value::String(format!("--rate={r}")));
                }
            }
        }
        Ok(out)
    }

    /// Prometheus as [`Settings::prometheus`], scraping fixed targets by their DNS names instead of
    /// discovering pods through the API: Debian's `prometheus` package, which the offline Prometheus image
    /// is made from, is built without Kubernetes service discovery. The ranks by their StatefulSet names
    /// (`rank-N.ranks`, up to `max_ranks`, so a rank scaled in later is scraped once it runs), the volume
    /// servers by their hostnames in the `storage` headless Service, and with `database` the writer by its
    /// headless Service; `instance` is the pod's name, as with discovery. With the cluster's `domain`
    /// known (the lab's own kind cluster), each name is given whole: Prometheus looks a target up at every
    /// scrape, and a name of a rank that does not run (the one beyond the ranks) is then refused by the
    /// cluster's DNS at once instead of being tried last as a name outside the cluster, forwarded to the
    /// machine's DNS servers (see `up::dns`).
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn prometheus_static(
        &self,
        rules: &str,
        max_ranks: u32,
        database: bool,
        domain: Option<&str>,
    ) -> Result<Vec<DynamicObject>> {
        let mut out = self.prometheus(rules)?;
        // What follows a Service's name: its namespace's, then the cluster's domain where known.
        let svc = &match domain {
            Some(d) => format!("{}.svc.{d}", self.namespace),
            None => format!("{}.svc", self.namespace),
        };
        let list = |names: Vec<String>| {
            names
                .iter()
                .map(|n| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let ranks = list(
            (0..max_ranks)
                .map(|i| format!("rank-{i}.ranks.{svc}:{}", names::RANK_METRICS_PORT))
                .collect(),
        );
        let storage = list(
            (0..self.storage_servers)
                .map(|i| format!("storage-{i}.storage.{svc}:{}", names::STORAGE_METRICS_PORT))
                .collect(),
        );
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\nrule_files:\n  - /etc/prometheus/rules/*.yaml\n\
             scrape_configs:\n  - job_name: rank\n    static_configs:\n      - targets: [{ranks}]\n    relabel_configs:\n\
             \x20     - source_labels: [__address__]\n        regex: '(rank-[0-9]+)[.].*'\n        target_label: instance\n\
             \x20 - job_name: storage\n    static_configs:\n      - targets: [{storage}]\n    relabel_configs:\n\
             \x20     - source_labels: [__address__]\n        regex: '(storage-[0-9]+)[.].*'\n        target_label: instance\n"
        );
        let config = if database {
            let writer = lab_model::db::WRITER;
            format!(
                "{config}  - job_name: writer\n    static_configs:\n      - targets: [\"{writer}.{svc}:{}\"]\n\
                 \x20   relabel_configs:\n      - target_label: instance\n        replacement: {writer}\n",
                names::WRITER_METRICS_PORT
            )
        } else {
            config
        };
        for o in &mut out {
            if o.types.as_ref().is_some_and(|t| t.kind == "ConfigMap")
                && o.data.pointer("/data/prometheus.yml").is_some()
            {
                o.data["data"]["prometheus.yml"] = serde_json::Value::String(config.clone());
            }
        }
        Ok(out)
    }

    /// Prometheus, with `rules` (the golden-signal rule file) in the `prometheus-rules` ConfigMap.
    ///
    /// # Errors
    /// As [`Settings::namespace`].
    pub fn prometheus(&self, rules: &str) -> Result<Vec<DynamicObject>> {
        let mut out = objects(PROMETHEUS, &self.vars())?;
        let cm = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": names::PROMETHEUS_RULES,
                "namespace": self.namespace,
                "labels": {
                    "app.kubernetes.io/part-of": "straggler-lab",
                    "app.kubernetes.io/instance": self.lab,
                    "app.kubernetes.io/managed-by": "straggler-lab",
                    "app.kubernetes.io/component": "monitoring",
                },
            },
            "data": { "golden-signals.yaml": rules },
        });
        let cm: DynamicObject = serde_json::from_value(cm).map_err(|e| RuntimeError::Other(e.to_string()))?;
        out.insert(0, cm);
        Ok(out)
    }
}
