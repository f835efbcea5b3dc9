//! The lab's workloads on a cluster that answers, the same on kind and on an existing cluster: the
//! namespace, then storage, the dataset, the ranks (and the database and Prometheus beside them), then
//! training seen running.

use std::time::Duration;

use futures::future::LocalBoxFuture;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::Api;
use lab_model::{db, metrics};

use super::super::manifests::names as obj;
use super::super::{ClusterMode, KubeRuntime, api, gpus, kind};
use super::images::OFFLINE_PROMETHEUS;
use super::{Action, Created, Ctx, named};
use lab_runtime::wait::{Look, poll};
use lab_runtime::{Result, RuntimeError, Scrape};

/// Steps every rank must have done before the baseline counts as reached.
const BASELINE_STEPS: f64 = 3.0;

/// The lab's namespace (created unless it exists) and its configuration.
pub(super) struct CreateNamespace;

impl Action for CreateNamespace {
    fn name(&self) -> &'static str {
        "create namespace"
    }

    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let client = cx.client()?;
            let (opts, rec) = (cx.opts, &cx.rec);
            let settings = rec.settings(&opts.name, opts.ranks, opts.ranks, opts.cpu);
            let created = ensure_namespace(&client, &settings, rec.request_timeout).await?;
            cx.created(if created {
                Created::Namespace
            } else {
                Created::Objects
            })?;
            api::apply_all(&client, &cx.rec.namespace, &settings.config()?).await
        })
    }
}

/// Storage, the dataset and the ranks, with everything that does not wait on them beside them: the
/// database and Prometheus are applied at once and awaited while storage, the dataset and the ranks come
/// up; the GPUs are advertised while storage comes up (only the ranks ask for them). Each is a step.
pub(super) struct Workloads;

impl Action for Workloads {
    fn name(&self) -> &'static str {
        "deploy"
    }

    fn group(&self) -> bool {
        true
    }

    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let client = cx.client()?;
            let (opts, kopts, progress) = (cx.opts, cx.kopts, cx.progress);
            let settings = cx.rec.settings(&opts.name, opts.ranks, opts.ranks, opts.cpu);
            let fixed = cx.rec.clone();
            let database = async {
                let Some(db_image) = fixed.db_image.clone() else {
                    return Ok(());
                };
                named(progress, "deploy database", async {
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
                        |s: Option<&StatefulSet>| {
                            s.and_then(|s| s.status.as_ref()?.ready_replicas).unwrap_or(0) >= 2
                        },
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
                named(progress, "deploy monitoring", async {
                    api::apply_all(
                        &client,
                        &fixed.namespace,
                        &if fixed.prometheus_image.starts_with(OFFLINE_PROMETHEUS) {
                            settings.prometheus_static(
                                super::super::manifests::RULES,
                                opts.ranks + 1,
                                fixed.db_image.is_some(),
                                (fixed.mode == ClusterMode::Kind).then_some(kind::CLUSTER_DOMAIN),
                            )?
                        } else {
                            settings.prometheus(super::super::manifests::RULES)?
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
            // The ranks go in once the GPUs they ask for are advertised (else they would wait Pending).
            let (gpus_done, gpus_are_done) = tokio::sync::oneshot::channel::<()>();
            let gpus = async {
                if kopts.advertise_gpus {
                    // A lab's own multi-node kind cluster: every node runs ranks, and the GPUs are split
                    // across them.
                    let split = fixed.mode == ClusterMode::Kind && fixed.nodes > 1;
                    let nodes = named(progress, "advertise GPUs", async {
                        // Shared out over every node: kind's join returns before the worker's Node is
                        // there, and GPUs listed on the control plane alone put every rank on it.
                        if split {
                            let count = usize::try_from(fixed.nodes).unwrap_or(usize::MAX);
                            api::wait_for_nodes(&client, count, fixed.wait_timeout).await?;
                        }
                        gpus::advertise(&client, &fixed.gpu_resource, opts.gpus, split, fixed.wait_timeout)
                            .await
                    })
                    .await?;
                    *advertised.lock().unwrap_or_else(|p| p.into_inner()) = nodes;
                }
                // Nobody waiting any more means storage failed first: its error is the one reported.
                let _ = gpus_done.send(());
                Ok::<_, RuntimeError>(())
            };
            let storage_and_data = async {
                named(progress, "deploy storage", async {
                    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &fixed.namespace);
                    let available = |n: String| {
                        let deployments = deployments.clone();
                        async move {
                            api::wait_for(
                                deployments,
                                &n,
                                &format!("deployment {n} to be available"),
                                fixed.wait_timeout,
                                deployment_available,
                            )
                            .await
                            .map(drop)
                        }
                    };
                    // The master first, and its Service with it (a pod has a Service's address in its
                    // environment only if the Service was there before the pod). Everything that dials the
                    // master retries until it answers: the volume servers ask for its configuration every
                    // 1.8 s before they serve, the seeder waits for the servers, each rank asks for the
                    // dataset's manifest four times a second. On the lab's own kind cluster it all goes in
                    // at once: there a connection to a Service sent before kube-proxy has written its rule
                    // is reset within a second (`stale_flows`). Elsewhere such a connection waits out a
                    // whole connect timeout (20 s for a volume server: its first packet is never
                    // translated, and a new Service on a cluster just made takes seconds to be written),
                    // so the rest waits for the master to be available.
                    let at_once = fixed.mode == ClusterMode::Kind;
                    api::apply_all(&client, &fixed.namespace, &settings.storage_master()?).await?;
                    if !at_once {
                        available(obj::STORAGE_MASTER.to_string()).await?;
                    }
                    api::apply_all(&client, &fixed.namespace, &settings.storage_servers()?).await?;
                    // The seeding job at once: it waits for the volume servers itself, so its pod starts
                    // while they do.
                    api::apply_all(&client, &fixed.namespace, &settings.seeder()?).await?;
                    // And the ranks, so that their pods start while storage starts and the dataset is
                    // seeded, not after (the StatefulSet makes them one after the other, OrderedReady for
                    // the world-size faults, 1–2 s each on kind). `deploy ranks` waits for them to be Ready.
                    if gpus_are_done.await.is_err() {
                        return Err(RuntimeError::Other("the GPUs were not advertised".into()));
                    }
                    api::apply_all(&client, &fixed.namespace, &settings.ranks()?).await?;
                    futures::future::try_join_all(
                        (0..fixed.storage_servers).map(|i| available(format!("storage-{i}"))),
                    )
                    .await?;
                    Ok::<_, RuntimeError>(())
                })
                .await?;
                named(progress, "seed dataset", async {
                    let job = seeding_done(&client, &fixed.namespace, &opts.name, fixed.wait_timeout).await?;
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
                named(progress, "deploy ranks", async {
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
            let steps =
                Box::pin(async { tokio::join!(Box::pin(job), Box::pin(database), Box::pin(monitoring)) });
            // Beside them, on the lab's own new kind cluster, a CoreDNS pod that stalls is replaced; it is
            // given up when the steps are done.
            let dns = Box::pin(async {
                if fixed.mode == ClusterMode::Kind {
                    super::dns::unstick(&client, progress).await;
                }
                std::future::pending::<()>().await;
            });
            let (job, database, monitoring) = match futures::future::select(steps, dns).await {
                futures::future::Either::Left((done, _)) => done,
                futures::future::Either::Right(((), steps)) => steps.await,
            };
            // Recorded before any error is returned: the GPUs advertised are withdrawn on a rollback or by `lab down`.
            let advertised = advertised.into_inner().unwrap_or_else(|p| p.into_inner());
            if !advertised.is_empty() {
                cx.created(Created::Gpus(advertised))?;
            }
            job?;
            database?;
            monitoring?;
            Ok(())
        })
    }
}

/// Training seen running: every rank has done a few steps.
pub(super) struct WaitForTraining;

impl Action for WaitForTraining {
    fn name(&self) -> &'static str {
        "wait for training to start"
    }

    fn execute<'a>(&'a self, cx: &'a mut Ctx<'_>) -> LocalBoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let rt = cx.runtime()?;
            wait_for_training(&rt, cx.opts.ranks, cx.opts.baseline_timeout).await
        })
    }
}

/// Creates the namespace when it does not exist; says whether the lab created it.
async fn ensure_namespace(
    client: &Client,
    settings: &super::super::manifests::Settings,
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

/// Waits until lab `lab`'s seeding job has done its work: one of its pods' container ended with exit 0,
/// which the pod shows about 2 s before the Job controller marks the Job Complete, or the Job finished
/// (`Some` then, to tell a failure).
async fn seeding_done(
    client: &Client,
    namespace: &str,
    lab: &str,
    deadline: Duration,
) -> Result<Option<Job>> {
    use futures::TryStreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    let job = api::wait_for(
        jobs,
        obj::SEEDER,
        "the seeding job to finish",
        deadline,
        job_finished,
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().labels(&format!(
        "{}={},{}={lab}",
        obj::COMPONENT_LABEL,
        obj::SEEDER,
        obj::INSTANCE_LABEL
    ));
    let pod_done = async {
        let stream = watcher(pods, config).default_backoff().applied_objects();
        futures::pin_mut!(stream);
        // A watch that breaks leaves the Job's own wait to finish.
        while let Ok(Some(pod)) = stream.try_next().await {
            if seeded(&pod) {
                return;
            }
        }
        std::future::pending::<()>().await;
    };
    futures::pin_mut!(job, pod_done);
    match futures::future::select(job, pod_done).await {
        futures::future::Either::Left((job, _)) => job,
        futures::future::Either::Right(((), _)) => Ok(None),
    }
}

/// Whether the seeder's container in `pod` ended with exit 0.
fn seeded(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.name == obj::SEEDER
                    && c.state
                        .as_ref()
                        .and_then(|s| s.terminated.as_ref())
                        .is_some_and(|t| t.exit_code == 0)
            })
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn seeder_pod(container: &str, state: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": "seeder-x" },
            "status": { "containerStatuses": [{ "name": container, "ready": false, "restartCount": 0,
                "image": "i", "imageID": "", "state": state }] }
        }))
        .unwrap()
    }

    #[test]
    fn the_seeding_is_done_when_its_container_ended_with_exit_0_only() {
        let ended = |code| serde_json::json!({ "terminated": { "exitCode": code } });
        assert!(seeded(&seeder_pod("seeder", ended(0))));
        assert!(
            !seeded(&seeder_pod("seeder", ended(1))),
            "a failure is retried by the Job"
        );
        assert!(!seeded(&seeder_pod(
            "seeder",
            serde_json::json!({ "running": {} })
        )));
        assert!(!seeded(&seeder_pod("other", ended(0))));
    }
}
