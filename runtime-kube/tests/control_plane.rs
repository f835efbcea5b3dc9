//! The Kubernetes runtime against a real control plane: a real API server, scheduler and controllers, with
//! a Node object but no kubelet. Every manifest must be accepted by the real API server under strict field
//! validation; the StatefulSet and Job controllers make the pods; the real scheduler binds four ranks and
//! refuses the fifth with its own `Insufficient lab.dev/gpu` message; the fault requests (scale, world size,
//! template apply, in-place resize, the delay container) must be accepted exactly as the lab sends them.
//! Nothing runs in the pods (no kubelet), so what needs a running container is left to the real-node tier
//! (scripts/ci/k8s-e2e.sh).
//!
//! Run against such a cluster (cluster-admin kubeconfig; the controllers it needs are statefulset, job,
//! deployment, replicaset, namespace, serviceaccount and podgc; the test creates and removes its own
//! namespace and node, and the node must be the only schedulable one): `LAB_TEST_KUBECONFIG=... cargo test -p lab-runtime --test control_plane -- --ignored`.
//! `scripts/ci/kube-control-plane.sh test` starts such a control plane, runs this and stops it; the
//! real-Kubernetes tier (`scripts/ci/k8s-e2e.sh`, run by `.ci/run`) runs that first.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use lab_model::Millicores;
use lab_model::status::{LabStatus, Phase};
use lab_runtime::Lab;
use lab_runtime::Neighbours;
use lab_runtime::Ranks;
use lab_runtime::Storage;
use lab_runtime::{Delay, RuntimeError};
use lab_runtime_kube::{self as lk, ClusterMode, DelayChoice, KubeRecord, KubeRuntime};
use serde_json::json;

const GPU: &str = "lab.dev/gpu";

fn record(ns: &str, wait: Duration) -> KubeRecord {
    KubeRecord {
        mode: ClusterMode::Existing,
        kubeconfig: None,
        context: None,
        namespace: ns.to_string(),
        created_namespace: true,
        cluster: None,
        created_cluster: false,
        docker_host: None,
        node_image: String::new(),
        nodes: 1,
        gpu_resource: GPU.into(),
        advertised_on: Vec::new(),
        ranks: 4,
        storage_servers: 3,
        seed: 42,
        gpus: 4,
        watchdog_seconds: 120,
        cpu: Millicores(400),
        image: lk::DEFAULT_IMAGE.into(),
        pull_policy: "Never".into(),
        monitoring: true,
        prometheus_image: lk::DEFAULT_PROMETHEUS_IMAGE.into(),
        delay: DelayChoice::Auto,
        wait_timeout: wait,
        request_timeout: Duration::from_secs(10),
        db_image: None,
        control_token: None,
    }
}

/// What a kubelet would report for the ranks the scheduler bound to `node`: Running and Ready.
async fn report_bound_ranks_ready(pods: &Api<Pod>, node: &str) {
    let list = pods.list(&ListParams::default()).await.unwrap();
    for p in list.items {
        let name = p.metadata.name.clone().unwrap_or_default();
        let bound = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if !name.starts_with("rank-") || !bound || ready || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // A resize-capable kubelet reports the resources it applied; the API server accepts a resize
        // only for pods whose running containers report them.
        let applied = p
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.resources.clone());
        let at = "2026-01-01T00:00:00Z";
        let status = json!({ "status": {
            "phase": "Running",
            "conditions": [
                { "type": "PodScheduled", "status": "True", "lastTransitionTime": at },
                { "type": "Ready", "status": "True", "lastTransitionTime": at },
            ],
            "containerStatuses": [ { "name": "rank", "ready": true, "restartCount": 0, "started": true,
                "image": "straggler-lab/lab:test", "imageID": "", "state": { "running": { "startedAt": at } },
                "resources": applied } ],
        } });
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    }
}

/// Polls `status()` until `cond` holds, for at most `secs`.
async fn until(rt: &KubeRuntime, what: &str, secs: u64, cond: impl Fn(&LabStatus) -> bool) -> LabStatus {
    let start = Instant::now();
    loop {
        let s = rt.status().await.expect("status");
        if cond(&s) {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
#[ignore = "needs a real control plane: set LAB_TEST_KUBECONFIG (see the module doc)"]
async fn the_lab_against_a_real_api_server_scheduler_and_controllers() {
    let kubeconfig = std::env::var("LAB_TEST_KUBECONFIG").expect("LAB_TEST_KUBECONFIG");
    let client = lk::connect(
        Some(std::path::Path::new(&kubeconfig)),
        None,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let id = std::process::id();
    let ns = format!("lab-cp-{id}");
    let node_name = format!("cp-node-{id}");
    let lab = "cp";

    // A node the scheduler can place pods on: Ready, with room for everything but a fifth GPU.
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": node_name } }),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let status = json!({ "status": {
        "capacity": { "cpu": "8", "memory": "32Gi", "pods": "110" },
        "allocatable": { "cpu": "8", "memory": "32Gi", "pods": "110", GPU: "4" },
        // The API server lets a pod be resized only on a node whose kubelet is new enough to do it.
        "nodeInfo": { "kubeletVersion": "v1.34.4", "kubeProxyVersion": "", "machineID": "", "systemUUID": "",
            "bootID": "", "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "",
            "operatingSystem": "linux", "architecture": "amd64" },
        "conditions": [ { "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test node",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z" } ],
    } });
    nodes
        .patch_status(&node_name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    // A new node is tainted not-ready until its kubelet reports; this one has no kubelet.
    let untaint = json!({ "spec": { "taints": null } });
    nodes
        .patch(&node_name, &PatchParams::default(), &Patch::Merge(&untaint))
        .await
        .unwrap();
    // The lab's own advertisement: a status patch with a '/' in the key, accepted by the real server.
    let patched = lk::gpus::advertise(&client, GPU, 4, false, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(patched.contains(&node_name));

    // Every manifest, applied twice (the second apply changes nothing), under strict validation.
    let rec = record(&ns, Duration::from_secs(30));
    let settings = rec.settings(lab, 4, 4, Millicores(400));
    let rules = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../",
        "manifests/rules/golden-signals.yaml"
    ))
    .unwrap_or_else(|_| "groups: []\n".into());
    for _ in 0..2 {
        for objs in [
            settings.namespace(),
            settings.config(),
            settings.storage(),
            settings.seeder(),
            settings.ranks(),
            settings.prometheus(&rules),
        ] {
            lk::api::apply_all(&client, &ns, &objs.unwrap()).await.unwrap();
        }
    }
    let rt = KubeRuntime::with_client(lab, client.clone(), rec.clone());

    // The controllers made the pods and the scheduler bound them; nothing runs them. The ranks'
    // StatefulSet is OrderedReady: the test plays the kubelet's one part the controller waits for, each
    // bound rank reported Running and Ready, so the controller creates the next.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let start = Instant::now();
    let s = loop {
        report_bound_ranks_ready(&pods_api, &node_name).await;
        let s = rt.status().await.expect("status");
        if s.ranks()
            .filter(|p| p.node.as_deref() == Some(node_name.as_str()))
            .count()
            == 4
        {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "timed out waiting for four ranks bound to the node: {s:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!((s.world_size, s.ranks_desired, s.gpus_capacity), (4, 4, 4));
    assert!(s.pods.iter().any(|p| p.name == "storage-master"));
    assert!(s.pods.iter().any(|p| p.name == "seeder"));
    for i in 0..3 {
        assert!(
            s.pods.iter().any(|p| p.name == format!("storage-{i}")),
            "storage-{i}: {s:#?}"
        );
    }
    let r1 = s.pods.iter().find(|p| p.name == "rank-1").unwrap();
    assert_eq!(
        (
            r1.resources.cpu_spec,
            r1.resources.cpu_template,
            r1.resources.gpus
        ),
        (Some(Millicores(400)), Some(Millicores(400)), 1)
    );

    // unplaceable-rank: five ranks, four GPUs; the real scheduler says why.
    rt.scale_ranks(5).await.unwrap();
    let s = until(&rt, "rank-4 unschedulable", 60, |s| {
        s.pods
            .iter()
            .any(|p| p.name == "rank-4" && p.phase == Phase::Pending && p.reason.is_some())
    })
    .await;
    let r4 = s.pods.iter().find(|p| p.name == "rank-4").unwrap();
    assert_eq!(r4.reason.as_deref(), Some("Insufficient lab.dev/gpu"), "{r4:#?}");
    let msg = r4.message.as_deref().unwrap();
    assert!(
        msg.contains("nodes are available") && msg.contains("Insufficient lab.dev/gpu"),
        "{msg}"
    );
    eprintln!("the scheduler says: {msg}");
    assert_eq!(s.ranks_desired, 5);

    rt.set_world_size(5).await.unwrap();
    assert_eq!(rt.status().await.unwrap().world_size, 5);
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let template_ws = |s: &StatefulSet| {
        s.spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()["lab.dev/world-size"]
            .clone()
    };
    assert_eq!(template_ws(&sts.get("rank").await.unwrap()), "5");

    // Re-applying the template keeps the live replicas and world size: only the CPU is the caller's.
    rt.apply_template(Millicores(400)).await.unwrap();
    let live = sts.get("rank").await.unwrap();
    assert_eq!(live.spec.as_ref().unwrap().replicas, Some(5));
    assert_eq!(template_ws(&live), "5");

    // throttled-rank: the resize subresource takes the lab's patch; the pod spec says 150m, the template
    // 400m. No kubelet applies it (the live limit stays what was reported, 400m), so the wait for the
    // applied limit times out here.
    let short = KubeRuntime::with_client(lab, client.clone(), record(&ns, Duration::from_secs(3)));
    let err = short.resize_rank(1, Millicores(150)).await.unwrap_err();
    assert!(matches!(err, RuntimeError::Timeout { .. }), "{err}");
    let l = rt.cpu_limits(1).await.unwrap();
    assert_eq!(
        (l.spec, l.template, l.live),
        (Some(Millicores(150)), Millicores(400), Some(Millicores(400)))
    );

    // slow-storage: the delay container (NET_ADMIN, nothing else) is accepted as an ephemeral container.
    let err = short
        .set_storage_delay(
            1,
            Some(Delay {
                delay: Duration::from_millis(300),
                jitter: Duration::ZERO,
            }),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RuntimeError::Timeout { .. }), "{err}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let storage1 = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=storage-server,lab.dev/index=1"))
        .await
        .unwrap()
        .items
        .remove(0);
    let eph = storage1
        .spec
        .as_ref()
        .unwrap()
        .ephemeral_containers
        .clone()
        .unwrap();
    assert_eq!(eph[0].name, "delay-1");
    let caps = eph[0]
        .security_context
        .as_ref()
        .unwrap()
        .capabilities
        .as_ref()
        .unwrap();
    assert_eq!(caps.add.as_deref(), Some(&["NET_ADMIN".to_string()][..]));
    let s = rt.status().await.unwrap();
    let st1 = s.pods.iter().find(|p| p.name == "storage-1").unwrap();
    assert!(
        st1.containers.iter().any(|c| c.starts_with("delay-1 (ephemeral")
            && c.contains("tc qdisc replace dev eth0 root netem delay 300ms")),
        "{:?}",
        st1.containers
    );

    // slow-disk: the resize subresource takes the lab's patch of the volume container's CPU limit (1000m
    // as deployed) down to 10m; no kubelet applies it, so the wait for the applied limit times out.
    let err = short.set_storage_cpu(1, Some(Millicores(10))).await.unwrap_err();
    assert!(matches!(err, RuntimeError::Timeout { .. }), "{err}");
    let storage1 = pods
        .list(&ListParams::default().labels("app.kubernetes.io/component=storage-server,lab.dev/index=1"))
        .await
        .unwrap()
        .items
        .remove(0);
    let volume = storage1
        .spec
        .as_ref()
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == "volume")
        .unwrap();
    let limits = volume.resources.as_ref().unwrap().limits.as_ref().unwrap();
    assert_eq!(limits["cpu"].0, "10m");

    // competing-job: the foreign job's Deployment is accepted under strict validation, listed back from
    // its annotations, and its pod (made by the Deployment controller) is a foreign job in the status,
    // not a rank. Throttling applies it again with a rate; stopping deletes the Deployment (its pod, if
    // the scheduler bound it to the node no kubelet runs, cannot finish terminating here, so the wait for
    // it may time out).
    let job = lab_model::jobs::ForeignJob {
        name: "nightly-etl".into(),
        server: 1,
        threads: 64,
        rate: None,
    };
    rt.run_foreign_job(&job).await.unwrap();
    assert_eq!(rt.foreign_jobs().await.unwrap(), vec![job.clone()]);
    let s = until(&rt, "the foreign job's pod", 60, |s| {
        s.pods
            .iter()
            .any(|p| p.name == "nightly-etl" && p.role == lab_model::status::Role::ForeignJob)
    })
    .await;
    assert!(
        !s.ranks().any(|p| p.name == "nightly-etl"),
        "the job is not a rank"
    );
    let throttled = lab_model::jobs::ForeignJob {
        rate: Some(20.0),
        ..job
    };
    rt.run_foreign_job(&throttled).await.unwrap();
    assert_eq!(rt.foreign_jobs().await.unwrap(), vec![throttled]);
    assert!(rt.stop_foreign_job("rank-1").await.is_err());
    match short.stop_foreign_job("nightly-etl").await {
        Ok(()) | Err(RuntimeError::Timeout { .. }) => {}
        Err(e) => panic!("stopping the job: {e}"),
    }
    assert!(rt.foreign_jobs().await.unwrap().is_empty());

    // Back to four, then remove everything: the node first, so the pods bound to it can go.
    rt.scale_ranks(4).await.unwrap();
    rt.set_world_size(4).await.unwrap();
    nodes.delete(&node_name, &DeleteParams::default()).await.unwrap();
    for p in pods.list(&ListParams::default()).await.unwrap().items {
        let _ = pods
            .delete(
                p.metadata.name.as_deref().unwrap(),
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                },
            )
            .await;
    }
    let mut rm = record(&ns, Duration::from_secs(60));
    rm.advertised_on.clear();
    lk::down::remove_objects(&client, &rm, lab).await.unwrap();
}
