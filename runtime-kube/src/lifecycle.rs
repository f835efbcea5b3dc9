//! `lab up` and `lab down` on Kubernetes, as ordered named steps: preflight, create cluster (kind), build
//! and load the image (kind), advertise GPUs, deploy storage, seed the dataset, deploy ranks, deploy
//! monitoring, wait for training to start (the CLI then learns the baseline). A failed step tears down
//! what was created unless `retain`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use lab_model::status::RuntimeKind;
use lab_model::{db, metrics};

use super::manifests::names as obj;
use super::{ClusterMode, KubeOptions, KubeRecord, KubeRuntime, api, connect, kind, read_record};
use lab_runtime::lifecycle::{Progress, UpOptions, step};
use lab_runtime::state::{self, LabRecord};
use lab_runtime::wait::{Look, poll};
use lab_runtime::{Result, Runtime, RuntimeError};

/// Where the golden-signal rule file lives in the repository (the binary embeds it:
/// [`super::manifests::RULES`]).
pub const RULES_PATH: &str = "manifests/rules/golden-signals.yaml";
/// The kubeconfig of a kind lab, in the lab's directory.
const KIND_KUBECONFIG: &str = "kubeconfig";
/// Steps every rank must have done before the baseline counts as reached.
const BASELINE_STEPS: f64 = 3.0;

/// Stands the lab up on Kubernetes and records it so later commands can reopen it by name.
///
/// # Errors
/// The first step that fails, after tearing down what was created (unless `opts.retain`).
pub async fn up(opts: &UpOptions, kopts: &KubeOptions, progress: &dyn Progress) -> Result<KubeRuntime> {
    validate(opts, kopts)?;
    let dir = state::create_lab_dir(&opts.name)?;
    let namespace = kopts
        .namespace
        .clone()
        .unwrap_or_else(|| format!("straggler-lab-{}", opts.name));
    let mut rec = KubeRecord {
        mode: kopts.mode,
        kubeconfig: kopts.kubeconfig.clone(),
        context: kopts.context.clone(),
        namespace,
        created_namespace: false,
        cluster: (kopts.mode == ClusterMode::Kind).then(|| format!("lab-{}", opts.name)),
        created_cluster: false,
        docker_host: (kopts.mode == ClusterMode::Kind).then(|| {
            std::env::var("DOCKER_HOST")
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| DEFAULT_DOCKER_HOST.to_string())
        }),
        node_image: kopts.node_image.clone(),
        nodes: kopts.nodes,
        gpu_resource: kopts.gpu_resource.clone(),
        advertised_on: Vec::new(),
        ranks: opts.ranks,
        storage_servers: opts.storage_servers,
        seed: opts.seed,
        gpus: opts.gpus,
        watchdog_seconds: opts.watchdog.as_secs().max(1),
        cpu: opts.cpu,
        image: kopts.image.clone(),
        pull_policy: kopts.pull_policy.clone(),
        monitoring: kopts.monitoring,
        prometheus_image: kopts.prometheus_image.clone(),
        delay: kopts.delay,
        wait_timeout: kopts.wait_timeout,
        request_timeout: kopts.request_timeout,
        db_image: opts.database.then(|| super::DEFAULT_DB_IMAGE.to_string()),
        control_token: Some(super::new_control_token()?),
    };
    if kopts.mode == ClusterMode::Kind {
        rec.kubeconfig = Some(dir.join(KIND_KUBECONFIG));
        rec.context = None;
    }
    save(&dir, &opts.name, &rec)?;
    match run_up(opts, kopts, progress, &dir, &mut rec).await {
        Ok(rt) => Ok(rt),
        Err(e) => {
            if opts.retain {
                progress.note(&format!(
                    "--retain: leaving what was created; remove it with `lab down --name {}`",
                    opts.name
                ));
            } else {
                let record = LabRecord {
                    name: opts.name.clone(),
                    runtime: runtime_kind(rec.mode),
                    created_ms: 0,
                    config: to_json(&rec)?,
                };
                if let Err(td) = down(&record, progress).await {
                    progress.note(&format!("tearing down after the failure also failed: {td}"));
                }
            }
            Err(e)
        }
    }
}

fn validate(opts: &UpOptions, kopts: &KubeOptions) -> Result<()> {
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

fn runtime_kind(mode: ClusterMode) -> RuntimeKind {
    match mode {
        ClusterMode::Kind => RuntimeKind::Kind,
        ClusterMode::Existing => RuntimeKind::Cluster,
    }
}

fn to_json(rec: &KubeRecord) -> Result<serde_json::Value> {
    serde_json::to_value(rec).map_err(|e| RuntimeError::Other(e.to_string()))
}

fn save(dir: &Path, name: &str, rec: &KubeRecord) -> Result<()> {
    let record = LabRecord {
        name: name.to_string(),
        runtime: runtime_kind(rec.mode),
        created_ms: state::now_ms(),
        config: to_json(rec)?,
    };
    state::write_record(dir, &record)
}

async fn run_up(
    opts: &UpOptions,
    kopts: &KubeOptions,
    progress: &dyn Progress,
    dir: &Path,
    rec: &mut KubeRecord,
) -> Result<KubeRuntime> {
    let client = match kopts.mode {
        ClusterMode::Kind => {
            let docker = step(progress, "preflight", kind_preflight(kopts, rec, progress)).await?;
            let cluster = rec.cluster.clone().unwrap_or_default();
            let kubeconfig = rec
                .kubeconfig
                .clone()
                .unwrap_or_else(|| dir.join(KIND_KUBECONFIG));
            // From here on the cluster is the lab's: a failure tears it down, half-made or not.
            rec.created_cluster = true;
            save(dir, &opts.name, rec)?;
            let nodes = rec.nodes;
            let node_image = rec.node_image.clone();
            // The images are built (or found in the cache) while kind makes the cluster: neither needs
            // the other, and the cluster takes the longer.
            let (created, images) = tokio::join!(
                step(
                    progress,
                    "create cluster",
                    kind::create_cluster(dir, &cluster, &node_image, nodes, &kubeconfig, kopts.wait_timeout),
                ),
                step(
                    progress,
                    "build images",
                    build_images(&docker, kopts, rec, progress)
                ),
            );
            created?;
            let images = images?;
            save(dir, &opts.name, rec)?;
            // Each image into every node at once (kind loads one image into its nodes in turn).
            step(progress, "load images", async {
                futures::future::try_join_all(images.iter().map(|image| async {
                    match image {
                        LabImage::InDocker(name) => {
                            kind::load_image(&cluster, name, kopts.wait_timeout).await
                        }
                        LabImage::Archive(path) => {
                            kind::load_archive(&cluster, path, kopts.wait_timeout).await
                        }
                    }
                }))
                .await
                .map(drop)
            })
            .await?;
            connect(Some(&kubeconfig), None, rec.request_timeout).await?
        }
        ClusterMode::Existing => {
            step(progress, "preflight", async {
                let client = connect(
                    rec.kubeconfig.as_deref(),
                    rec.context.as_deref(),
                    rec.request_timeout,
                )
                .await?;
                check_server(&client, rec.request_timeout).await?;
                check_permissions(&client, kopts, rec).await?;
                if !kopts.advertise_gpus {
                    check_gpus(
                        &client,
                        &rec.gpu_resource,
                        opts.ranks,
                        rec.request_timeout,
                        progress,
                    )
                    .await?;
                }
                Ok::<_, RuntimeError>(client)
            })
            .await?
        }
    };
    deploy(&client, opts, kopts, rec, progress, dir).await
}

/// Everything after the cluster is reachable: GPUs, storage, dataset, ranks, monitoring, baseline.
///
/// # Errors
/// The first step that fails.
pub async fn deploy(
    client: &Client,
    opts: &UpOptions,
    kopts: &KubeOptions,
    rec: &mut KubeRecord,
    progress: &dyn Progress,
    dir: &Path,
) -> Result<KubeRuntime> {
    let client = client.clone();
    let rt = KubeRuntime::with_client(opts.name.clone(), client.clone(), rec.clone());

    let settings = rec.settings(&opts.name, opts.ranks, opts.ranks, opts.cpu);
    rec.created_namespace = ensure_namespace(&client, &settings, rec.request_timeout).await?;
    save(dir, &opts.name, rec)?;
    api::apply_all(&client, &rec.namespace, &settings.config()?).await?;
    // What does not wait on the job runs beside it: the database and Prometheus are applied now and
    // awaited while storage, the dataset and the ranks come up; the GPUs are advertised while storage
    // comes up (only the ranks ask for them).
    let fixed = rec.clone();
    let database = async {
        let Some(db_image) = fixed.db_image.clone() else {
            return Ok(());
        };
        step(progress, "deploy database", async {
            api::apply_all(
                &client,
                &fixed.namespace,
                &settings.database(&db_image, kind::POD_SUBNET)?,
            )
            .await?;
            let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &fixed.namespace);
            api::wait_for(
                sts,
                obj::DATABASE,
                "the database's primary and standby to be Ready",
                fixed.wait_timeout,
                |s: Option<&StatefulSet>| s.and_then(|s| s.status.as_ref()?.ready_replicas).unwrap_or(0) >= 2,
            )
            .await?;
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), &fixed.namespace);
            api::wait_for(
                deployments,
                db::WRITER,
                "the writer to be available",
                fixed.wait_timeout,
                deployment_available,
            )
            .await?;
            Ok::<_, RuntimeError>(())
        })
        .await
    };
    let monitoring = async {
        if !fixed.monitoring {
            return Ok(());
        }
        step(progress, "deploy monitoring", async {
            api::apply_all(
                &client,
                &fixed.namespace,
                &if fixed.prometheus_image.starts_with(OFFLINE_PROMETHEUS) {
                    settings.prometheus_static(super::manifests::RULES, opts.ranks + 1)?
                } else {
                    settings.prometheus(super::manifests::RULES)?
                },
            )
            .await?;
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), &fixed.namespace);
            api::wait_for(
                deployments,
                "prometheus",
                "Prometheus to be available",
                fixed.wait_timeout,
                deployment_available,
            )
            .await?;
            Ok::<_, RuntimeError>(())
        })
        .await
    };
    // The nodes patched, kept even when another step fails: `lab down` withdraws what was advertised.
    let advertised = std::sync::Mutex::new(Vec::new());
    let gpus = async {
        if !kopts.advertise_gpus {
            return Ok(());
        }
        // A lab's own multi-node kind cluster: every node runs ranks, and the GPUs are split across them.
        let split = fixed.mode == ClusterMode::Kind && fixed.nodes > 1;
        let nodes = step(
            progress,
            "advertise GPUs",
            advertise_gpus(&client, &fixed.gpu_resource, opts.gpus, split, fixed.wait_timeout),
        )
        .await?;
        *advertised.lock().unwrap_or_else(|p| p.into_inner()) = nodes;
        Ok::<_, RuntimeError>(())
    };
    let storage_and_data = async {
        step(progress, "deploy storage", async {
            api::apply_all(&client, &fixed.namespace, &settings.storage()?).await?;
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), &fixed.namespace);
            let mut names = vec![obj::STORAGE_MASTER.to_string()];
            names.extend((0..fixed.storage_servers).map(|i| format!("storage-{i}")));
            for n in names {
                api::wait_for(
                    deployments.clone(),
                    &n,
                    &format!("deployment {n} to be available"),
                    fixed.wait_timeout,
                    deployment_available,
                )
                .await?;
            }
            Ok::<_, RuntimeError>(())
        })
        .await?;
        step(progress, "seed dataset", async {
            api::apply_all(&client, &fixed.namespace, &settings.seeder()?).await?;
            let jobs: Api<Job> = Api::namespaced(client.clone(), &fixed.namespace);
            let job = api::wait_for(
                jobs,
                obj::SEEDER,
                "the seeding job to finish",
                fixed.wait_timeout,
                job_finished,
            )
            .await?;
            if job_failed(job.as_ref()) {
                return Err(RuntimeError::Step {
                    step: "seed dataset".into(),
                    message: format!(
                        "the seeding job failed: see `kubectl -n {} logs job/seeder`",
                        fixed.namespace
                    ),
                });
            }
            Ok(())
        })
        .await
    };
    let job = async {
        tokio::try_join!(gpus, storage_and_data)?;
        step(progress, "deploy ranks", async {
            api::apply_all(&client, &fixed.namespace, &settings.ranks()?).await?;
            let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &fixed.namespace);
            let want = i32::try_from(opts.ranks).unwrap_or(i32::MAX);
            let ready = move |s: Option<&StatefulSet>| {
                s.and_then(|s| s.status.as_ref()?.ready_replicas).unwrap_or(0) >= want
            };
            api::wait_for(
                sts,
                obj::RANKS,
                &format!("{} ranks to be Ready", opts.ranks),
                fixed.wait_timeout,
                ready,
            )
            .await?;
            Ok::<_, RuntimeError>(())
        })
        .await
    };
    // Boxed: the three together make a future too large for a test thread's stack in a debug build.
    let (job, database, monitoring) = tokio::join!(Box::pin(job), Box::pin(database), Box::pin(monitoring));
    // Recorded before any error is returned: `lab down` withdraws what was advertised.
    rec.advertised_on = advertised.into_inner().unwrap_or_else(|p| p.into_inner());
    save(dir, &opts.name, rec)?;
    job?;
    database?;
    monitoring?;
    let rt = KubeRuntime {
        rec: rec.clone(),
        ..rt
    };
    step(
        progress,
        "wait for training to start",
        wait_for_training(&rt, opts.ranks, opts.baseline_timeout),
    )
    .await?;
    Ok(rt)
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
    let missing = super::rbac::missing(
        client,
        &rec.namespace,
        super::rbac::needed(own_namespace, kopts.advertise_gpus),
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
    let nodes: Api<Node> = Api::all(client.clone());
    let list = api::within("list nodes", deadline, async {
        nodes
            .list(&ListParams::default())
            .await
            .map_err(|e| api::kube_err("list nodes", e))
    })
    .await;
    let list = match list {
        Ok(l) => l,
        Err(e) if api::status_code(&e) == Some(403) => {
            progress.note(&format!(
                "nodes cannot be listed with this kubeconfig: not checking that they offer {ranks} {resource}"
            ));
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let offered: u32 = list
        .items
        .iter()
        .filter_map(|n| {
            n.status
                .as_ref()?
                .allocatable
                .as_ref()?
                .get(resource)
                .and_then(super::status::count_of)
        })
        .sum();
    if offered < ranks {
        return Err(RuntimeError::InvalidInput(format!(
            "the cluster's nodes offer {offered} {resource} and the lab needs {ranks} (one per rank): name the \
             cluster's GPU resource with --gpu-resource (e.g. nvidia.com/gpu), or let the lab advertise counted \
             GPUs with --advertise-gpus true"
        )));
    }
    Ok(())
}

/// Creates the namespace when it does not exist; says whether the lab created it.
async fn ensure_namespace(
    client: &Client,
    settings: &super::manifests::Settings,
    deadline: Duration,
) -> Result<bool> {
    let nss: Api<Namespace> = Api::all(client.clone());
    let existing = api::within("read the namespace", deadline, async {
        nss.get_opt(&settings.namespace)
            .await
            .map_err(|e| api::kube_err(format!("read namespace {}", settings.namespace), e))
    })
    .await?;
    if existing.is_some() {
        return Ok(false);
    }
    api::apply_all(client, &settings.namespace, &settings.namespace()?).await?;
    Ok(true)
}

fn deployment_available(d: Option<&Deployment>) -> bool {
    d.and_then(|d| d.status.as_ref()?.available_replicas).unwrap_or(0) >= 1
}

fn job_finished(j: Option<&Job>) -> bool {
    j.and_then(|j| j.status.as_ref()?.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

fn job_failed(j: Option<&Job>) -> bool {
    j.and_then(|j| j.status.as_ref()?.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
}

/// How `gpus` are shared by `nodes` nodes: as evenly as they go, the first nodes taking the remainder.
pub fn split_gpus(gpus: u32, nodes: usize) -> Vec<u32> {
    let n = u32::try_from(nodes.max(1)).unwrap_or(u32::MAX);
    (0..n).map(|i| gpus / n + u32::from(i < gpus % n)).collect()
}

/// Adds `gpus` of `resource` to every node's capacity (the kubelet copies it to allocatable) and waits
/// until the nodes offer them. With `split` the GPUs are shared out across the nodes instead (a lab's own
/// multi-node cluster), and the control plane's `NoSchedule` taint is lifted so it runs ranks too.
/// Returns the nodes patched.
///
/// # Errors
/// When nodes cannot be listed or patched, or allocatable does not follow in time.
pub async fn advertise_gpus(
    client: &Client,
    resource: &str,
    gpus: u32,
    split: bool,
    deadline: Duration,
) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = api::within("list nodes", deadline, async {
        nodes
            .list(&ListParams::default())
            .await
            .map_err(|e| api::kube_err("list nodes", e))
    })
    .await?;
    let mut names: Vec<String> = list
        .items
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(RuntimeError::Kube("the cluster has no nodes".into()));
    }
    let shares = if split {
        split_gpus(gpus, names.len())
    } else {
        vec![gpus; names.len()]
    };
    let mut patched = Vec::new();
    for (name, share) in names.iter().zip(&shares) {
        let patch = serde_json::json!({ "status": { "capacity": { resource: share.to_string() } } });
        api::within("advertise GPUs", deadline, async {
            nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| api::kube_err(format!("advertise {resource} on node {name}"), e))
        })
        .await?;
        patched.push(name.clone());
    }
    if split {
        for n in &list.items {
            let name = n.metadata.name.clone().unwrap_or_default();
            let taints = n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
            let kept: Vec<_> = taints
                .iter()
                .filter(|t| t.key != "node-role.kubernetes.io/control-plane")
                .cloned()
                .collect();
            if kept.len() == taints.len() {
                continue;
            }
            let patch = serde_json::json!({ "spec": { "taints": kept } });
            api::within("let the control plane run ranks", deadline, async {
                nodes
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| api::kube_err(format!("remove the control-plane taint of node {name}"), e))
            })
            .await?;
        }
    }
    for (name, share) in names.iter().zip(shares) {
        let res = resource.to_string();
        let offers = move |n: Option<&Node>| {
            n.and_then(|n| {
                n.status
                    .as_ref()?
                    .allocatable
                    .as_ref()?
                    .get(&res)
                    .and_then(super::status::count_of)
            })
            .unwrap_or(0)
                >= share
        };
        api::wait_for(
            nodes.clone(),
            name,
            &format!("node {name} to offer {share} {resource}"),
            deadline,
            offers,
        )
        .await?;
    }
    Ok(patched)
}

/// Removes the GPU resource the lab advertised.
async fn withdraw_gpus(client: &Client, resource: &str, nodes: &[String], deadline: Duration) -> Result<()> {
    let api_nodes: Api<Node> = Api::all(client.clone());
    for name in nodes {
        let patch = serde_json::json!({ "status": { "capacity": { resource: null } } });
        let r = api::within("withdraw GPUs", deadline, async {
            api_nodes
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| api::kube_err(format!("withdraw {resource} from node {name}"), e))
        })
        .await;
        match r {
            Ok(_) => {}
            Err(e) if api::status_code(&e) == Some(404) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The value of the first sample of `name` in Prometheus text, read by the telemetry's exposition parser;
/// `None` when there is none or the text is malformed.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    lab_model::expo::parse(text)
        .ok()?
        .into_iter()
        .find(|s| s.name == name)
        .map(|s| s.value)
}

/// Waits until every rank has done a few steps: the job trains end to end.
async fn wait_for_training(rt: &KubeRuntime, ranks: u32, deadline: Duration) -> Result<()> {
    let look = || async {
        let Ok(targets) = rt.scrape_targets().await else {
            return Ok(Look::NotYet(" (no rank endpoints yet)".to_string()));
        };
        let mut trained = 0;
        for t in targets.iter().filter(|t| t.kind == lab_runtime::TargetKind::Rank) {
            if let Ok(text) = rt.fetch_metrics(t, Duration::from_secs(5)).await
                && sample(&text, metrics::STEPS).unwrap_or(0.0) >= BASELINE_STEPS
            {
                trained += 1;
            }
        }
        Ok::<_, RuntimeError>(if trained >= ranks {
            Look::Done(())
        } else {
            Look::NotYet(format!(" ({trained} had, at the last look)"))
        })
    };
    let what = format!("all {ranks} ranks to report {BASELINE_STEPS} training steps");
    // A look reads every rank (5 s each at most): the deadline is held hard around the polling too.
    api::within(&what, deadline, async {
        poll(Duration::from_secs(2), deadline, look)
            .await?
            .map_err(|seen| RuntimeError::Timeout {
                what: format!("{what}{seen}"),
                seconds: deadline.as_secs_f64(),
            })
    })
    .await
}

/// The kinds of objects a lab creates, for deleting them one by one in a namespace the lab did not create.
fn lab_kinds() -> Vec<ApiResource> {
    let k = |g: &str, v: &str, kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural)
    };
    vec![
        k("apps", "v1", "StatefulSet", "statefulsets"),
        k("apps", "v1", "Deployment", "deployments"),
        k("batch", "v1", "Job", "jobs"),
        k("", "v1", "Service", "services"),
        k("", "v1", "ConfigMap", "configmaps"),
        k("", "v1", "Secret", "secrets"),
        k("", "v1", "ServiceAccount", "serviceaccounts"),
        k("rbac.authorization.k8s.io", "v1", "Role", "roles"),
        k("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
        k("", "v1", "Pod", "pods"),
    ]
}

/// Deletes what the lab created in an existing cluster: the namespace if it created it, else each of
/// its labelled objects; then the GPU resource it advertised.
///
/// # Errors
/// When the API server refuses a delete.
pub async fn remove_objects(client: &Client, rec: &KubeRecord, lab: &str) -> Result<()> {
    if rec.created_namespace {
        let nss: Api<Namespace> = Api::all(client.clone());
        if api::delete_if_exists(&nss, &rec.namespace, &format!("namespace {}", rec.namespace)).await? {
            api::wait_for(
                nss,
                &rec.namespace,
                &format!("namespace {} to be deleted", rec.namespace),
                rec.wait_timeout,
                |n: Option<&Namespace>| n.is_none(),
            )
            .await?;
        }
    } else {
        let selector = format!("{}={lab}", obj::INSTANCE_LABEL);
        for ar in lab_kinds() {
            let a: Api<DynamicObject> = Api::namespaced_with(client.clone(), &rec.namespace, &ar);
            let list = api::within("list the lab's objects", rec.request_timeout, async {
                a.list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(|e| api::kube_err(format!("list {}", ar.plural), e))
            })
            .await?;
            for o in list.items {
                let n = o.metadata.name.clone().unwrap_or_default();
                api::delete_if_exists(&a, &n, &format!("{} {n}", ar.kind)).await?;
            }
        }
    }
    withdraw_gpus(client, &rec.gpu_resource, &rec.advertised_on, rec.request_timeout).await
}

/// Takes the lab down: deletes the kind cluster, or only what the lab created in an existing cluster, and
/// forgets the lab.
///
/// # Errors
/// When the record is not a Kubernetes lab's or a delete fails (the record is kept, so `lab down` can be
/// run again).
pub async fn down(record: &LabRecord, progress: &dyn Progress) -> Result<()> {
    let rec = read_record(record)?;
    match rec.mode {
        ClusterMode::Kind => {
            let cluster = rec
                .cluster
                .clone()
                .unwrap_or_else(|| format!("lab-{}", record.name));
            if rec.created_cluster {
                step(
                    progress,
                    "delete cluster",
                    delete_kind_cluster(&cluster, &rec, &state::lab_dir(&record.name), progress),
                )
                .await?;
            } else {
                progress.note(&format!(
                    "the lab never created a cluster (its `up` stopped before): forgetting lab {:?}",
                    record.name
                ));
            }
        }
        ClusterMode::Existing => {
            step(progress, "remove the lab's objects", async {
                let client = connect(
                    rec.kubeconfig.as_deref(),
                    rec.context.as_deref(),
                    rec.request_timeout,
                )
                .await?;
                remove_objects(&client, &rec, &record.name).await
            })
            .await?;
        }
    }
    let dir = state::lab_dir(&record.name);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RuntimeError::io(format!("remove {}", dir.display()), e)),
    }
}

// Keep the trait in scope for `rt.scrape_targets()` above.
#[allow(unused_imports)]
use Runtime as _;
use lab_runtime::Scrape;

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
/// The offline Prometheus image (from the `prometheus` on PATH) is tagged `<this><its version>`.
const OFFLINE_PROMETHEUS: &str = "straggler-lab/prometheus:";
/// How long pulling one image may take before the lab gives up on it (a real pull of the Rust base
/// image on a slow line takes minutes; a machine without a registry fails at once).
const PULL_DEADLINE: Duration = Duration::from_secs(900);

/// An image the cluster needs, and where it is loaded from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabImage {
    /// In the Docker engine: `kind load docker-image`.
    InDocker(String),
    /// An archive the offline builder wrote (kept in the machine's cache for the next lab): `kind load
    /// image-archive`.
    Archive(PathBuf),
}

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
            if *node_image == super::DEFAULT_NODE_IMAGE
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

/// The images the cluster needs: the lab image (from the Dockerfile where its base images can be had,
/// else from this machine's release binaries with the offline builder) and, with monitoring,
/// Prometheus (pulled, else built from Debian's package). Says which path each took.
async fn build_images(
    docker: &bollard::Docker,
    kopts: &KubeOptions,
    rec: &mut KubeRecord,
    progress: &dyn Progress,
) -> Result<Vec<LabImage>> {
    let cache = image_cache()?;
    let mut images = Vec::new();
    if !kopts.build_image {
        docker.inspect_image(&rec.image).await.map_err(|e| {
            RuntimeError::InvalidInput(format!(
                "the lab image {} is not in Docker ({e}): build it (`docker build -t {} .`) or drop --no-build",
                rec.image, rec.image
            ))
        })?;
        progress.note(&format!(
            "lab image {}: taken from Docker as it is (--no-build)",
            rec.image
        ));
        images.push(LabImage::InDocker(rec.image.clone()));
    } else {
        let context = match &kopts.build_context {
            Some(r) => Some(r.clone()),
            None => std::env::current_dir()
                .ok()
                .and_then(|d| kind::find_build_context(&d)),
        };
        let unavailable = match &context {
            Some(root) => first_unavailable_base(docker, root).await,
            None => Some("no Dockerfile here (run from the repository to build from it)".to_string()),
        };
        match (context, unavailable) {
            (Some(root), None) => {
                progress.note(&format!(
                    "lab image {}: building from {}/Dockerfile",
                    rec.image,
                    root.display()
                ));
                kind::build_image(&root, &rec.image, Duration::from_secs(3600), &|_| {}).await?;
                images.push(LabImage::InDocker(rec.image.clone()));
            }
            (_, why) => {
                let why = why.unwrap_or_default();
                let bin_dir = lab_bin_dir()?;
                let weed =
                    weed_binary(kopts.build_context.as_deref()).ok_or_else(|| RuntimeError::MissingTool {
                        tool: "weed".into(),
                        hint: "install SeaweedFS (`scripts/tools.sh weed`) or set LAB_WEED".into(),
                    })?;
                progress.note(&format!(
                    "lab image {}: {why}; building it offline from {} and {}",
                    rec.image,
                    bin_dir.display(),
                    weed.display()
                ));
                let spec = super::image::lab_image(&rec.image, &bin_dir, &weed)?;
                images.push(LabImage::Archive(cached_archive(spec, &cache).await?));
            }
        }
    }
    if let Some(db_image) = rec.db_image.clone() {
        if kopts.build_image {
            // Always offline: the database image is this machine's PostgreSQL, as the local lab's is.
            let bin_dir = lab_bin_dir()?;
            let pg_bin = lab_runtime::db::find_pg_bin()?;
            progress.note(&format!(
                "database image {db_image}: building it offline from {} and PostgreSQL in {}",
                bin_dir.display(),
                pg_bin.display()
            ));
            let spec = super::image::db_image(&db_image, &bin_dir, &pg_bin)?;
            images.push(LabImage::Archive(cached_archive(spec, &cache).await?));
        } else {
            docker.inspect_image(&db_image).await.map_err(|e| {
                RuntimeError::InvalidInput(format!(
                    "the database image {db_image} is not in Docker ({e}): drop --no-build so the lab builds it"
                ))
            })?;
            images.push(LabImage::InDocker(db_image));
        }
    }
    if rec.monitoring {
        match kind::ensure_image(docker, &rec.prometheus_image, PULL_DEADLINE).await {
            Ok(()) => images.push(LabImage::InDocker(rec.prometheus_image.clone())),
            Err(e) => {
                let version = super::image::prometheus_version().unwrap_or_else(|| "debian".into());
                let reference = format!("{OFFLINE_PROMETHEUS}{version}");
                progress.note(&format!(
                    "Prometheus image {} cannot be pulled ({e}): building {reference} from the prometheus on PATH",
                    rec.prometheus_image
                ));
                let spec = super::image::prometheus_image(&reference)?;
                rec.prometheus_image = reference;
                images.push(LabImage::Archive(cached_archive(spec, &cache).await?));
            }
        }
    }
    Ok(images)
}

/// Where the offline images' archives are kept between labs: `LAB_CACHE` (the scripts' cache folder,
/// `~/.cache/straggler-lab` by default) `/images`.
fn image_cache() -> Result<PathBuf> {
    let base = std::env::var_os("LAB_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache/straggler-lab"))
        })
        .ok_or_else(|| {
            RuntimeError::InvalidInput(
                "neither LAB_CACHE nor HOME is set: set LAB_CACHE to a folder for the lab's image archives"
                    .into(),
            )
        })?;
    Ok(base.join("images"))
}

/// [`super::image::ImageSpec::cached_archive`] off the async threads (it may write hundreds of MB).
async fn cached_archive(spec: super::image::ImageSpec, cache: &Path) -> Result<PathBuf> {
    let cache = cache.to_path_buf();
    tokio::task::spawn_blocking(move || spec.cached_archive(&cache))
        .await
        .map_err(|e| RuntimeError::Other(e.to_string()))?
}

/// The folder of the running `lab` binary: the workspace's other binaries, which the offline images are
/// made from, are beside it.
fn lab_bin_dir() -> Result<PathBuf> {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .ok_or_else(|| RuntimeError::Other("cannot tell where the lab binary is".into()))
}

/// The first base image of the Dockerfile in `root` that Docker neither has nor can pull, with why.
async fn first_unavailable_base(docker: &bollard::Docker, root: &Path) -> Option<String> {
    let text = match std::fs::read_to_string(root.join("Dockerfile")) {
        Ok(t) => t,
        Err(e) => return Some(format!("cannot read the Dockerfile ({e})")),
    };
    for base in kind::dockerfile_bases(&text) {
        if let Err(e) = kind::ensure_image(docker, &base, PULL_DEADLINE).await {
            return Some(format!(
                "the Dockerfile's base image {base} cannot be pulled ({e})"
            ));
        }
    }
    None
}

/// SeaweedFS for the offline image: `LAB_WEED`, `weed` on PATH, or the project's tools folder.
fn weed_binary(context: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LAB_WEED")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
    {
        return Some(p);
    }
    if let Some(p) = super::image::which("weed") {
        return Some(p);
    }
    let roots: Vec<PathBuf> = match context {
        Some(c) => vec![c.to_path_buf()],
        None => std::env::current_dir()
            .map(|d| d.ancestors().map(Path::to_path_buf).collect())
            .unwrap_or_default(),
    };
    roots
        .into_iter()
        .map(|r| r.join(".tools/bin/weed"))
        .find(|p| p.is_file())
}

/// Deletes the lab's kind cluster and, when no other kind cluster is left, kind's Docker network. Where
/// Docker or kind cannot be reached the cluster cannot be running through them: the lab says how to
/// delete it by hand and is forgotten all the same, so a missing tool never leaves a record behind that
/// blocks the next `lab up`.
/// Docker's own default endpoint, recorded for a cluster made without `DOCKER_HOST`.
const DEFAULT_DOCKER_HOST: &str = "unix:///var/run/docker.sock";

pub(crate) async fn delete_kind_cluster(
    cluster: &str,
    rec: &KubeRecord,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<()> {
    let host = rec.docker_host.as_deref();
    let docker = match host {
        Some(h) => bollard::Docker::connect_with_host(h),
        None => bollard::Docker::connect_with_defaults(),
    };
    let docker_ok = match &docker {
        Ok(d) => kind::check_docker(d).await.is_ok(),
        Err(_) => false,
    };
    let forget = format!(
        "if that engine is gone for good, so is the cluster: remove {} to forget the lab",
        dir.display()
    );
    if !docker_ok {
        let at = match host {
            Some(h) => format!("DOCKER_HOST={h}"),
            None => "the environment's DOCKER_HOST (or the default socket)".to_string(),
        };
        return Err(RuntimeError::Other(format!(
            "Docker does not answer at {at}, where cluster {cluster} was created: it may still be running \
             there. Start that engine and run `lab down` again (the lab's record is kept); {forget}"
        )));
    }
    if let Err(e) = kind::check_kind("kind").await {
        return Err(RuntimeError::Other(format!(
            "{e}: cannot delete cluster {cluster}; install kind and run `lab down` again (the lab's record is \
             kept), or remove its node containers with \
             `docker rm -f $(docker ps -aq --filter label=io.x-k8s.kind.cluster={cluster})` and remove {}",
            dir.display()
        )));
    }
    progress.note(&format!(
        "deleting cluster {cluster}{}",
        host.map(|h| format!(" on DOCKER_HOST={h}")).unwrap_or_default()
    ));
    kind::delete_cluster(cluster, rec.kubeconfig.as_deref(), host).await?;
    if let Ok(d) = docker
        && kind::clusters_on(host).await.is_ok_and(|c| c.is_empty())
    {
        // kind leaves its network behind; nothing else of the lab's is on it once no cluster is left.
        let _ = d.remove_network("kind").await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_are_shared_out_as_evenly_as_they_go() {
        assert_eq!(split_gpus(4, 1), [4]);
        assert_eq!(split_gpus(4, 2), [2, 2]);
        assert_eq!(split_gpus(5, 2), [3, 2]);
        assert_eq!(split_gpus(4, 3), [2, 1, 1]);
        assert_eq!(split_gpus(1, 3), [1, 0, 0]);
        assert_eq!(split_gpus(4, 0), [4]);
    }
}
