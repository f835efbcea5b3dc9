//! Every fault action, apply and wait against a fake API server (`tower_test`, as kube-rs's own mock
//! tests do): the exact requests the lab sends, and what it makes of forbidden, conflict, not found and
//! an API server that never answers.

use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use lab_model::Millicores;
use lab_model::status::{Phase, Role};
use serde_json::{Value, json};

use super::{ClusterMode, DelayChoice, KubeRecord, KubeRuntime};
use lab_runtime::Lab;
use lab_runtime::Neighbours;
use lab_runtime::Ranks;
use lab_runtime::Scrape;
use lab_runtime::Storage;
use lab_runtime::{Delay, DelayPath, RuntimeError};

const NS: &str = "straggler-lab-demo";

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// What the fake API server answers to one request.
enum Reply {
    Json(u16, Value),
    Text(u16, &'static str),
    /// Never answer: the lab's own deadline must end the wait.
    Hang,
}

/// Assertions on a request's JSON body.
type BodyCheck = Box<dyn Fn(&Value) + Send>;

/// One request the lab must send, and the answer it gets.
struct Exchange {
    method: &'static str,
    path: String,
    query: Vec<String>,
    check: Option<BodyCheck>,
    reply: Reply,
}

fn ex(method: &'static str, path: impl Into<String>, reply: Reply) -> Exchange {
    Exchange {
        method,
        path: path.into(),
        query: Vec::new(),
        check: None,
        reply,
    }
}

impl Exchange {
    fn query(mut self, q: &str) -> Self {
        self.query.push(q.to_string());
        self
    }
    fn body(mut self, f: impl Fn(&Value) + Send + 'static) -> Self {
        self.check = Some(Box::new(f));
        self
    }
}

pub(super) fn record(delay: DelayChoice) -> KubeRecord {
    KubeRecord {
        mode: ClusterMode::Existing,
        kubeconfig: None,
        context: None,
        namespace: NS.into(),
        created_namespace: true,
        cluster: None,
        created_cluster: false,
        docker_host: None,
        node_image: String::new(),
        nodes: 1,
        gpu_resource: "lab.dev/gpu".into(),
        advertised_on: vec!["node-a".into()],
        ranks: 4,
        storage_servers: 3,
        seed: 42,
        gpus: 4,
        watchdog_seconds: 120,
        cpu: Millicores(400),
        image: "straggler-lab/lab:0.1.0".into(),
        pull_policy: "IfNotPresent".into(),
        monitoring: false,
        prometheus_image: super::DEFAULT_PROMETHEUS_IMAGE.into(),
        delay,
        wait_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_millis(300),
        db_image: None,
        control_token: None,
    }
}

fn runtime(delay: DelayChoice) -> (KubeRuntime, Handle) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    (KubeRuntime::with_client("demo", client, record(delay)), handle)
}

/// Serves `script` in order, checking each request; returns the requests seen as `METHOD uri` lines.
fn serve(mut handle: Handle, script: Vec<Exchange>) -> tokio::task::JoinHandle<Vec<String>> {
    tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut held = Vec::new();
        for x in script {
            let (req, send) = handle
                .next_request()
                .await
                .unwrap_or_else(|| panic!("the lab stopped early; seen {seen:#?}"));
            let line = format!("{} {}", req.method(), req.uri());
            seen.push(line.clone());
            assert_eq!(req.method().as_str(), x.method, "{line}; seen {seen:#?}");
            assert_eq!(req.uri().path(), x.path, "{line}");
            let query = req.uri().query().unwrap_or("").to_string();
            for q in &x.query {
                assert!(query.contains(q.as_str()), "{line} lacks {q}");
            }
            let bytes = req.into_body().collect().await.unwrap().to_bytes();
            if let Some(check) = &x.check {
                let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                check(&v);
            }
            match x.reply {
                Reply::Json(code, v) => send.send_response(
                    Response::builder()
                        .status(code)
                        .body(Body::from(serde_json::to_vec(&v).unwrap()))
                        .unwrap(),
                ),
                Reply::Text(code, t) => send.send_response(
                    Response::builder()
                        .status(code)
                        .body(Body::from(t.as_bytes().to_vec()))
                        .unwrap(),
                ),
                Reply::Hang => held.push(send),
            }
        }
        if !held.is_empty() {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        seen
    })
}

async fn finish(server: tokio::task::JoinHandle<Vec<String>>) -> Vec<String> {
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the lab sent fewer requests than expected")
        .expect("scenario")
}

fn api_status(code: u16, reason: &str, message: &str) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code })
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({ "kind": kind, "apiVersion": "v1", "metadata": { "resourceVersion": "100" }, "items": items })
}

fn labels(component: &str) -> Value {
    json!({ "app.kubernetes.io/instance": "demo", "app.kubernetes.io/component": component })
}

fn rank_pod(i: u32, phase: &str, live: &str, spec: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": format!("rank-{i}"), "namespace": NS, "labels": labels("rank"), "resourceVersion": "7" },
        "spec": { "nodeName": "node-a", "containers": [ { "name": "rank", "image": "straggler-lab/lab:0.1.0",
            "resources": { "limits": { "cpu": spec, "lab.dev/gpu": "1" }, "requests": { "cpu": spec, "lab.dev/gpu": "1" } } } ] },
        "status": { "phase": phase,
            "conditions": [ { "type": "Ready", "status": if phase == "Running" { "True" } else { "False" } } ],
            "containerStatuses": [ { "name": "rank", "image": "i", "imageID": "", "ready": true, "restartCount": 2,
                "resources": { "limits": { "cpu": live } } } ] },
    })
}

fn pending_rank(i: u32) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": format!("rank-{i}"), "namespace": NS, "labels": labels("rank") },
        "spec": { "containers": [ { "name": "rank", "resources": { "limits": { "cpu": "400m", "lab.dev/gpu": "1" } } } ] },
        "status": { "phase": "Pending", "conditions": [ { "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient lab.dev/gpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod." } ] },
    })
}

fn storage_pod(i: u32, annotations: Value, ephemeral: Vec<Value>, ephemeral_status: Vec<Value>) -> Value {
    let mut l = labels("storage-server");
    l["lab.dev/index"] = json!(i.to_string());
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": format!("storage-{i}-7d9f-abcde"), "namespace": NS, "labels": l, "annotations": annotations, "resourceVersion": "9" },
        "spec": { "containers": [ { "name": "volume" }, { "name": "latency-proxy" } ], "ephemeralContainers": ephemeral },
        "status": { "phase": "Running", "podIP": "10.0.0.5", "conditions": [ { "type": "Ready", "status": "True" } ],
            "ephemeralContainerStatuses": ephemeral_status },
    })
}

fn sts(replicas: u32, cpu: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": { "name": "rank", "namespace": NS },
        "spec": { "replicas": replicas, "serviceName": "ranks", "selector": { "matchLabels": labels("rank") },
            "template": { "metadata": { "labels": labels("rank") }, "spec": { "containers": [ { "name": "rank",
                "resources": { "limits": { "cpu": cpu } } } ] } } },
    })
}

fn generation(mut v: Value, generation: i64, observed: i64) -> Value {
    v["metadata"]["generation"] = json!(generation);
    v["metadata"]["resourceVersion"] = json!("8");
    v["status"] = json!({ "replicas": 4, "observedGeneration": observed });
    v
}

fn config(ws: u32) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "lab-config", "namespace": NS },
        "data": { "world-size": ws.to_string() } })
}

fn node(gpus: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": "node-a", "resourceVersion": "3" },
        "status": { "allocatable": { "cpu": "2", "lab.dev/gpu": gpus }, "capacity": { "lab.dev/gpu": gpus } } })
}

fn pods_path() -> String {
    format!("/api/v1/namespaces/{NS}/pods")
}

fn pod_path(p: &str) -> String {
    format!("/api/v1/namespaces/{NS}/pods/{p}")
}

fn lab_pods(items: Vec<Value>) -> Exchange {
    ex("GET", pods_path(), Reply::Json(200, list("PodList", items)))
        .query("labelSelector=app.kubernetes.io%2Finstance%3Ddemo")
}

/// The initial list of a watch on one object (what `await_condition` starts with).
fn watch_list(path: String, name: &str, kind: &str, items: Vec<Value>) -> Exchange {
    ex("GET", path, Reply::Json(200, list(kind, items)))
        .query(&format!("fieldSelector=metadata.name%3D{name}"))
}

fn delay_300() -> Delay {
    Delay {
        delay: Duration::from_millis(300),
        jitter: Duration::ZERO,
    }
}

#[tokio::test]
async fn status_maps_pods_scheduler_messages_resize_drift_and_added_containers() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let delay_c = json!({ "name": "delay-1", "image": "straggler-lab/lab:0.1.0", "command": ["sh", "-c", "tc qdisc replace dev eth0 root netem delay 300ms 0ms && echo 'lab: tc ok'"] });
    let delay_s = json!({ "name": "delay-1", "image": "i", "imageID": "", "ready": false, "restartCount": 0, "state": { "terminated": { "exitCode": 0 } } });
    let server = serve(
        h,
        vec![
            lab_pods(vec![
                rank_pod(0, "Running", "400m", "400m"),
                rank_pod(1, "Running", "150m", "150m"),
                rank_pod(2, "Running", "400m", "400m"),
                rank_pod(3, "Running", "400m", "400m"),
                pending_rank(4),
                storage_pod(
                    1,
                    json!({ "lab.dev/delay": "300ms±0ms", "lab.dev/delay-path": "netem" }),
                    vec![delay_c],
                    vec![delay_s],
                ),
            ]),
            ex(
                "GET",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank"),
                Reply::Json(200, sts(5, "400m")),
            ),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
                Reply::Json(200, config(5)),
            ),
            ex(
                "GET",
                "/api/v1/nodes",
                Reply::Json(200, list("NodeList", vec![node("4")])),
            ),
        ],
    );
    let s = rt.status().await.unwrap();
    finish(server).await;
    assert_eq!((s.world_size, s.ranks_desired, s.gpus_capacity), (5, 5, 4));
    assert_eq!(s.gpu_resource, "lab.dev/gpu");
    assert_eq!(s.delay_path, "netem");
    let names: Vec<&str> = s.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["storage-1", "rank-0", "rank-1", "rank-2", "rank-3", "rank-4"]
    );
    let r1 = &s.pods[2];
    assert_eq!(
        (
            r1.resources.cpu_live,
            r1.resources.cpu_spec,
            r1.resources.cpu_template
        ),
        (
            Some(Millicores(150)),
            Some(Millicores(150)),
            Some(Millicores(400))
        )
    );
    assert!(r1.resources.drifted() && r1.is_running_ready());
    assert_eq!(
        (r1.restarts, r1.resources.gpus, r1.node.as_deref()),
        (2, 1, Some("node-a"))
    );
    let r4 = &s.pods[5];
    assert_eq!(r4.phase, Phase::Pending);
    assert_eq!(r4.reason.as_deref(), Some("Insufficient lab.dev/gpu"));
    assert!(
        r4.message
            .as_deref()
            .unwrap()
            .starts_with("0/1 nodes are available: 1 Insufficient lab.dev/gpu.")
    );
    let st = &s.pods[0];
    assert_eq!(st.role, Role::StorageServer);
    assert_eq!(
        st.containers[..2],
        ["volume".to_string(), "latency-proxy".to_string()]
    );
    assert!(
        st.containers[2]
            .starts_with("delay-1 (ephemeral, exited 0: tc qdisc replace dev eth0 root netem delay 300ms"),
        "{:?}",
        st.containers
    );
    assert_eq!(s.ranks_ready(), (4, 5));
}

#[tokio::test]
async fn status_without_node_access_says_so_and_reads_events_for_pending_pods() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let mut p = pending_rank(4);
    p["status"]["conditions"] = json!([]);
    let event = json!({ "metadata": { "name": "rank-4.1" }, "involvedObject": { "kind": "Pod", "name": "rank-4" }, "reason": "FailedScheduling",
        "message": "0/1 nodes are available: 1 Insufficient lab.dev/gpu." });
    let server = serve(
        h,
        vec![
            lab_pods(vec![p]),
            ex(
                "GET",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank"),
                Reply::Json(200, sts(5, "400m")),
            ),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
                Reply::Json(200, config(5)),
            ),
            ex(
                "GET",
                "/api/v1/nodes",
                Reply::Json(
                    403,
                    api_status(
                        403,
                        "Forbidden",
                        "nodes is forbidden: User \"lab\" cannot list resource \"nodes\"",
                    ),
                ),
            ),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/events"),
                Reply::Json(200, list("EventList", vec![event])),
            )
            .query("fieldSelector=reason%3DFailedScheduling"),
        ],
    );
    let s = rt.status().await.unwrap();
    finish(server).await;
    assert_eq!(s.gpus_capacity, 0);
    assert!(
        s.notes.iter().any(|n| n.contains("nodes cannot be listed")),
        "{:?}",
        s.notes
    );
    assert_eq!(s.pods[0].reason.as_deref(), Some("Insufficient lab.dev/gpu"));
}

#[tokio::test]
async fn scrape_targets_are_pod_proxy_paths_and_metrics_come_through_them() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let mut r0 = rank_pod(0, "Running", "400m", "400m");
    r0["status"]["podIP"] = json!("10.0.0.9");
    let server = serve(
        h,
        vec![
            lab_pods(vec![
                r0,
                pending_rank(4),
                storage_pod(2, json!({}), vec![], vec![]),
            ]),
            ex(
                "GET",
                format!("{}:9400/proxy/metrics", pod_path("rank-0")),
                Reply::Text(200, "lab_steps_total 12\n"),
            ),
        ],
    );
    let targets = rt.scrape_targets().await.unwrap();
    assert_eq!(targets.len(), 2, "{targets:?}");
    assert_eq!(targets[0].instance, "rank-0");
    assert_eq!(
        targets[0].address,
        format!("{}:9400/proxy/metrics", pod_path("rank-0"))
    );
    assert_eq!(targets[1].instance, "storage-2");
    assert_eq!(
        targets[1].address,
        format!("{}:9325/proxy/metrics", pod_path("storage-2-7d9f-abcde"))
    );
    let text = rt
        .fetch_metrics(&targets[0], Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(super::up::sample(&text, "lab_steps_total"), Some(12.0));
    finish(server).await;
}

fn delay_container_done(name: &str, exit: i32) -> (Value, Value) {
    (
        json!({ "name": name, "image": "straggler-lab/lab:0.1.0", "command": ["sh", "-c", "tc"] }),
        json!({ "name": name, "image": "i", "imageID": "", "ready": false, "restartCount": 0, "state": { "terminated": { "exitCode": exit } } }),
    )
}

#[tokio::test]
async fn slow_storage_falls_back_to_the_proxy_where_the_kernel_has_no_netem() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let pod = "storage-1-7d9f-abcde";
    let (c, st) = delay_container_done("delay-1", 2);
    let server = serve(
        h,
        vec![
            lab_pods(vec![storage_pod(1, json!({}), vec![], vec![])]),
            ex(
                "PATCH",
                format!("{}/ephemeralcontainers", pod_path(pod)),
                Reply::Json(200, storage_pod(1, json!({}), vec![c.clone()], vec![])),
            )
            .body(|b| {
                let c = &b["spec"]["ephemeralContainers"][0];
                assert_eq!(c["name"], "delay-1");
                assert_eq!(c["securityContext"]["capabilities"]["add"], json!(["NET_ADMIN"]));
                assert!(
                    c["command"][2]
                        .as_str()
                        .unwrap()
                        .contains("tc qdisc replace dev eth0 root netem delay 300ms 0ms")
                );
            }),
            watch_list(
                pods_path(),
                pod,
                "PodList",
                vec![storage_pod(1, json!({}), vec![c], vec![st])],
            ),
            ex(
                "GET",
                format!("{}/log", pod_path(pod)),
                Reply::Text(200, "Error: Specified qdisc kind is unknown.\n"),
            )
            .query("container=delay-1"),
            ex(
                "PATCH",
                pod_path(pod),
                Reply::Json(200, storage_pod(1, json!({}), vec![], vec![])),
            )
            .body(|b| assert_eq!(b["metadata"]["annotations"]["lab.dev/netem"], "unsupported")),
            ex(
                "PUT",
                format!("{}:8481/proxy/delay", pod_path(pod)),
                Reply::Text(200, "{\"delay_ms\":300.0,\"jitter_ms\":0.0}"),
            )
            .body(|b| assert_eq!(*b, json!({ "delay_ms": 300.0, "jitter_ms": 0.0 }))),
            ex(
                "PATCH",
                pod_path(pod),
                Reply::Json(200, storage_pod(1, json!({}), vec![], vec![])),
            )
            .body(|b| {
                assert_eq!(b["metadata"]["annotations"]["lab.dev/delay-path"], "proxy");
                assert_eq!(b["metadata"]["annotations"]["lab.dev/delay"], "300ms±0ms");
            }),
        ],
    );
    let path = rt.set_storage_delay(1, Some(delay_300())).await.unwrap();
    assert_eq!(path, DelayPath::Proxy);
    finish(server).await;
}

#[tokio::test]
async fn slow_storage_uses_netem_where_the_kernel_has_it_and_clears_it_with_another_tc() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let pod = "storage-0-7d9f-abcde";
    let (c1, s1) = delay_container_done("delay-1", 0);
    let (c2, s2) = delay_container_done("delay-2", 0);
    let netem =
        json!({ "lab.dev/delay": "300ms±0ms", "lab.dev/delay-path": "netem", "lab.dev/netem": "supported" });
    let server = serve(
        h,
        vec![
            lab_pods(vec![storage_pod(0, json!({}), vec![], vec![])]),
            ex(
                "PATCH",
                format!("{}/ephemeralcontainers", pod_path(pod)),
                Reply::Json(200, storage_pod(0, json!({}), vec![c1.clone()], vec![])),
            ),
            watch_list(
                pods_path(),
                pod,
                "PodList",
                vec![storage_pod(0, json!({}), vec![c1.clone()], vec![s1.clone()])],
            ),
            ex(
                "GET",
                format!("{}/log", pod_path(pod)),
                Reply::Text(200, "lab: tc ok\n"),
            ),
            ex(
                "PATCH",
                pod_path(pod),
                Reply::Json(200, storage_pod(0, netem.clone(), vec![], vec![])),
            )
            .body(|b| assert_eq!(b["metadata"]["annotations"]["lab.dev/delay-path"], "netem")),
            // clear: tc again, in a second container, then the annotations go
            lab_pods(vec![storage_pod(
                0,
                netem.clone(),
                vec![c1.clone()],
                vec![s1.clone()],
            )]),
            ex(
                "PATCH",
                format!("{}/ephemeralcontainers", pod_path(pod)),
                Reply::Json(
                    200,
                    storage_pod(0, netem.clone(), vec![c1.clone(), c2.clone()], vec![]),
                ),
            )
            .body(|b| {
                let c = &b["spec"]["ephemeralContainers"][0];
                assert_eq!(c["name"], "delay-2");
                assert!(
                    c["command"][2]
                        .as_str()
                        .unwrap()
                        .contains("tc qdisc del dev eth0 root")
                );
            }),
            watch_list(
                pods_path(),
                pod,
                "PodList",
                vec![storage_pod(0, netem.clone(), vec![c1, c2], vec![s1, s2])],
            ),
            ex(
                "GET",
                format!("{}/log", pod_path(pod)),
                Reply::Text(200, "lab: tc ok\n"),
            )
            .query("container=delay-2"),
            ex(
                "PATCH",
                pod_path(pod),
                Reply::Json(200, storage_pod(0, json!({}), vec![], vec![])),
            )
            .body(|b| {
                assert!(b["metadata"]["annotations"]["lab.dev/delay-path"].is_null());
                assert!(b["metadata"]["annotations"]["lab.dev/delay"].is_null());
            }),
        ],
    );
    assert_eq!(
        rt.set_storage_delay(0, Some(delay_300())).await.unwrap(),
        DelayPath::Netem
    );
    assert_eq!(rt.set_storage_delay(0, None).await.unwrap(), DelayPath::Netem);
    finish(server).await;
}

#[tokio::test]
async fn netem_only_refuses_a_kernel_without_netem_and_says_what_to_do() {
    let (rt, h) = runtime(DelayChoice::Netem);
    let pod = "storage-1-7d9f-abcde";
    let (c, st) = delay_container_done("delay-1", 2);
    let server = serve(
        h,
        vec![
            lab_pods(vec![storage_pod(1, json!({}), vec![], vec![])]),
            ex(
                "PATCH",
                format!("{}/ephemeralcontainers", pod_path(pod)),
                Reply::Json(200, storage_pod(1, json!({}), vec![c.clone()], vec![])),
            ),
            watch_list(
                pods_path(),
                pod,
                "PodList",
                vec![storage_pod(1, json!({}), vec![c], vec![st])],
            ),
            ex(
                "GET",
                format!("{}/log", pod_path(pod)),
                Reply::Text(200, "RTNETLINK answers: Operation not supported\n"),
            ),
            ex(
                "PATCH",
                pod_path(pod),
                Reply::Json(200, storage_pod(1, json!({}), vec![], vec![])),
            ),
        ],
    );
    let err = rt.set_storage_delay(1, Some(delay_300())).await.unwrap_err();
    assert!(err.to_string().contains("no sch_netem"), "{err}");
    finish(server).await;
}

#[tokio::test]
async fn the_proxy_path_reads_and_clears_the_proxy_delay() {
    let (rt, h) = runtime(DelayChoice::Proxy);
    let pod = "storage-2-7d9f-abcde";
    let ann = json!({ "lab.dev/delay": "300ms±0ms", "lab.dev/delay-path": "proxy" });
    let server = serve(
        h,
        vec![
            lab_pods(vec![storage_pod(2, ann.clone(), vec![], vec![])]),
            ex(
                "GET",
                format!("{}:8481/proxy/delay", pod_path(pod)),
                Reply::Text(200, "{\"delay_ms\":300.0,\"jitter_ms\":5.0}"),
            ),
            lab_pods(vec![storage_pod(2, ann.clone(), vec![], vec![])]),
            ex(
                "PUT",
                format!("{}:8481/proxy/delay", pod_path(pod)),
                Reply::Text(200, "{}"),
            )
            .body(|b| assert_eq!(*b, json!({ "delay_ms": 0.0, "jitter_ms": 0.0 }))),
            ex(
                "PATCH",
                pod_path(pod),
                Reply::Json(200, storage_pod(2, json!({}), vec![], vec![])),
            ),
        ],
    );
    let d = rt.storage_delay(2).await.unwrap().unwrap();
    assert_eq!(
        (d.delay, d.jitter),
        (Duration::from_millis(300), Duration::from_millis(5))
    );
    assert_eq!(rt.set_storage_delay(2, None).await.unwrap(), DelayPath::Proxy);
    finish(server).await;
}

#[tokio::test]
async fn a_missing_storage_server_is_named() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let server = serve(h, vec![lab_pods(vec![storage_pod(0, json!({}), vec![], vec![])])]);
    let err = rt.set_storage_delay(7, Some(delay_300())).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::NoSuchInstance(ref n) if n == "storage-7"),
        "{err}"
    );
    finish(server).await;
}

#[tokio::test]
async fn throttled_rank_resizes_in_place_through_the_resize_subresource() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let server = serve(
        h,
        vec![
            ex(
                "PATCH",
                format!("{}/resize", pod_path("rank-1")),
                Reply::Json(200, rank_pod(1, "Running", "400m", "150m")),
            )
            .body(|b| {
                let c = &b["spec"]["containers"][0];
                assert_eq!(c["name"], "rank");
                assert_eq!(c["resources"]["limits"]["cpu"], "150m");
                assert_eq!(c["resources"]["requests"]["cpu"], "100m");
            }),
            watch_list(
                pods_path(),
                "rank-1",
                "PodList",
                vec![rank_pod(1, "Running", "150m", "150m")],
            ),
            // cpu_limits: live, spec, and the untouched template
            ex(
                "GET",
                pod_path("rank-1"),
                Reply::Json(200, rank_pod(1, "Running", "150m", "150m")),
            ),
            ex(
                "GET",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank"),
                Reply::Json(200, sts(4, "400m")),
            ),
        ],
    );
    rt.resize_rank(1, Millicores(150)).await.unwrap();
    let l = rt.cpu_limits(1).await.unwrap();
    assert_eq!(
        (l.live, l.spec, l.template),
        (Some(Millicores(150)), Some(Millicores(150)), Millicores(400))
    );
    finish(server).await;
}

#[tokio::test]
async fn an_infeasible_resize_is_reported_with_the_kubelets_reason() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let mut stuck = rank_pod(1, "Running", "400m", "9000m");
    stuck["status"]["conditions"] = json!([{ "type": "PodResizePending", "status": "True", "reason": "Infeasible", "message": "Node didn't have enough capacity: cpu, requested: 9000, capacity: 2000" }]);
    let server = serve(
        h,
        vec![
            ex(
                "PATCH",
                format!("{}/resize", pod_path("rank-1")),
                Reply::Json(200, stuck.clone()),
            ),
            watch_list(pods_path(), "rank-1", "PodList", vec![stuck]),
        ],
    );
    let err = rt.resize_rank(1, Millicores(9000)).await.unwrap_err();
    assert!(err.to_string().contains("enough capacity"), "{err}");
    finish(server).await;
}

#[tokio::test]
async fn resize_error_paths_forbidden_conflict_not_found_and_timeout() {
    for (reply, expect) in [
        (
            Reply::Json(
                403,
                api_status(
                    403,
                    "Forbidden",
                    "pods \"rank-1\" is forbidden: cannot patch resource \"pods/resize\"",
                ),
            ),
            "403",
        ),
        (
            Reply::Json(409, api_status(409, "Conflict", "the object has been modified")),
            "409",
        ),
        (
            Reply::Json(404, api_status(404, "NotFound", "pods \"rank-1\" not found")),
            "404",
        ),
        (Reply::Hang, "timeout"),
    ] {
        let (rt, h) = runtime(DelayChoice::Auto);
        let server = serve(
            h,
            vec![ex("PATCH", format!("{}/resize", pod_path("rank-1")), reply)],
        );
        let err = rt.resize_rank(1, Millicores(150)).await.unwrap_err();
        match expect {
            "403" => {
                assert_eq!(super::api::status_code(&err), Some(403));
                assert!(err.to_string().contains("RBAC"), "{err}");
            }
            "409" => {
                assert_eq!(super::api::status_code(&err), Some(409));
                assert!(err.to_string().contains("run the command again"), "{err}");
            }
            "404" => assert!(
                matches!(err, RuntimeError::NoSuchInstance(ref n) if n == "rank-1"),
                "{err}"
            ),
            _ => assert!(matches!(err, RuntimeError::Timeout { .. }), "{err}"),
        }
        server.abort();
    }
}

#[tokio::test]
async fn a_resize_that_never_applies_times_out() {
    let (mut rt, h) = runtime(DelayChoice::Auto);
    rt.rec.wait_timeout = Duration::from_millis(300);
    let server = serve(
        h,
        vec![
            ex(
                "PATCH",
                format!("{}/resize", pod_path("rank-1")),
                Reply::Json(200, rank_pod(1, "Running", "400m", "150m")),
            ),
            // the kubelet never reports 150m; the watch that follows gets no answer
            watch_list(
                pods_path(),
                "rank-1",
                "PodList",
                vec![rank_pod(1, "Running", "400m", "150m")],
            ),
            ex("GET", pods_path(), Reply::Hang).query("watch=true"),
        ],
    );
    let err = rt.resize_rank(1, Millicores(150)).await.unwrap_err();
    assert!(
        matches!(err, RuntimeError::Timeout { ref what, .. } if what.contains("rank-1's CPU limit")),
        "{err}"
    );
    server.abort();
}

fn uid(mut pod: Value, uid: &str) -> Value {
    pod["metadata"]["uid"] = json!(uid);
    pod
}

#[tokio::test]
async fn unplaceable_rank_scales_through_the_scale_subresource_and_sets_the_world_size() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let mut terminating = rank_pod(3, "Running", "400m", "400m");
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let server = serve(
        h,
        vec![
            ex("PATCH", format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank/scale"), Reply::Json(200, json!({
                "apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": { "name": "rank" }, "spec": { "replicas": 5 } })))
                .body(|b| assert_eq!(*b, json!({ "spec": { "replicas": 5 } }))),
            ex("PATCH", format!("/api/v1/namespaces/{NS}/configmaps/lab-config"), Reply::Json(200, config(5)))
                .body(|b| assert_eq!(*b, json!({ "data": { "world-size": "5" } }))),
            ex("PATCH", format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank"), Reply::Json(200, generation(sts(5, "400m"), 3, 2)))
                .body(|b| assert_eq!(b["spec"]["template"]["metadata"]["annotations"]["lab.dev/world-size"], "5")),
            // the pods are deleted only once the controller has seen the new template
            watch_list(format!("/apis/apps/v1/namespaces/{NS}/statefulsets"), "rank", "StatefulSetList", vec![generation(sts(5, "400m"), 3, 3)]),
            lab_pods(vec![uid(rank_pod(0, "Running", "400m", "400m"), "u0"), uid(rank_pod(1, "Running", "400m", "400m"), "u1"), terminating, uid(pending_rank(4), "u4")]),
            // every rank but the one already going, lowest ordinal first, each by the UID listed (a pod
            // made since under its name is left alone); one the rollout took or replaced is fine
            ex("DELETE", pod_path("rank-0"), Reply::Json(200, rank_pod(0, "Running", "400m", "400m")))
                .body(|b| assert_eq!(b["preconditions"]["uid"], "u0")),
            ex("DELETE", pod_path("rank-1"), Reply::Json(409, api_status(409, "Conflict", "Precondition failed: UID in precondition: u1, UID in object meta: u1b"))),
            ex("DELETE", pod_path("rank-4"), Reply::Json(200, pending_rank(4)))
                .body(|b| assert_eq!(b["preconditions"]["uid"], "u4")),
        ],
    );
    rt.scale_ranks(5).await.unwrap();
    rt.set_world_size(5).await.unwrap();
    let seen = finish(server).await;
    // the terminating rank-3 is left alone
    assert!(
        !seen
            .iter()
            .any(|s| s.starts_with("DELETE") && s.contains("rank-3")),
        "{seen:#?}"
    );
    assert!(matches!(
        rt.scale_ranks(0).await,
        Err(RuntimeError::InvalidInput(_))
    ));
    assert!(matches!(
        rt.set_world_size(0).await,
        Err(RuntimeError::InvalidInput(_))
    ));
}

#[tokio::test]
async fn a_rollout_patches_replicas_and_template_together_and_deletes_no_pod() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let server = serve(
        h,
        vec![
            ex(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
                Reply::Json(200, config(5)),
            )
            .body(|b| assert_eq!(*b, json!({ "data": { "world-size": "5" } }))),
            // one change of the StatefulSet: the controller's rolling update does the rest
            ex(
                "PATCH",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank"),
                Reply::Json(200, generation(sts(5, "400m"), 3, 2)),
            )
            .body(|b| {
                assert_eq!(b["spec"]["replicas"], 5);
                assert_eq!(
                    b["spec"]["template"]["metadata"]["annotations"]["lab.dev/world-size"],
                    "5"
                );
            }),
        ],
    );
    rt.rollout_ranks(5, 5).await.unwrap();
    let seen = finish(server).await;
    assert!(!seen.iter().any(|s| s.starts_with("DELETE")), "{seen:#?}");
    assert!(matches!(
        rt.rollout_ranks(5, 0).await,
        Err(RuntimeError::InvalidInput(_))
    ));
}

#[tokio::test]
async fn scale_error_paths_are_explained() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let server = serve(
        h,
        vec![ex(
            "PATCH",
            format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank/scale"),
            Reply::Json(
                403,
                api_status(403, "Forbidden", "cannot patch statefulsets/scale"),
            ),
        )],
    );
    let err = rt.scale_ranks(4).await.unwrap_err();
    assert_eq!(super::api::status_code(&err), Some(403));
    assert!(err.to_string().contains("scale the ranks to 4"), "{err}");
    finish(server).await;
}

#[tokio::test]
async fn apply_template_server_side_applies_the_ranks_with_the_live_replicas_and_world_size() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let sts_path = format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank");
    let server = serve(
        h,
        vec![
            ex("GET", sts_path.clone(), Reply::Json(200, sts(5, "400m"))),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
                Reply::Json(200, config(5)),
            ),
            ex(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/services/rendezvous"),
                Reply::Json(
                    200,
                    json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "rendezvous" } }),
                ),
            )
            .query("fieldManager=straggler-lab")
            .query("force=true"),
            ex(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/services/ranks"),
                Reply::Json(
                    200,
                    json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "ranks" } }),
                ),
            ),
            ex("PATCH", sts_path, Reply::Json(200, sts(5, "400m")))
                .query("fieldManager=straggler-lab")
                .body(|b| {
                    assert_eq!(b["spec"]["replicas"], 5);
                    let c = &b["spec"]["template"]["spec"]["containers"][0];
                    assert_eq!(c["resources"]["limits"]["cpu"], "400m");
                    assert_eq!(
                        b["spec"]["template"]["metadata"]["annotations"]["lab.dev/world-size"],
                        "5"
                    );
                }),
        ],
    );
    rt.apply_template(Millicores(400)).await.unwrap();
    finish(server).await;
}

#[tokio::test]
async fn an_apply_conflict_is_an_error_that_says_to_retry() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let server = serve(
        h,
        vec![
            ex(
                "GET",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank"),
                Reply::Json(200, sts(4, "400m")),
            ),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
                Reply::Json(200, config(4)),
            ),
            ex(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/services/rendezvous"),
                Reply::Json(409, api_status(409, "Conflict", "Apply failed with 1 conflict")),
            ),
        ],
    );
    let err = rt.apply_template(Millicores(400)).await.unwrap_err();
    assert_eq!(super::api::status_code(&err), Some(409));
    assert!(err.to_string().contains("apply Service rendezvous"), "{err}");
    finish(server).await;
}

#[tokio::test]
async fn restart_rank_deletes_its_pod_and_names_a_missing_one() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let server = serve(
        h,
        vec![
            ex(
                "DELETE",
                pod_path("rank-2"),
                Reply::Json(200, rank_pod(2, "Running", "400m", "400m")),
            ),
            ex(
                "DELETE",
                pod_path("rank-9"),
                Reply::Json(404, api_status(404, "NotFound", "pods \"rank-9\" not found")),
            ),
        ],
    );
    rt.restart_rank(2).await.unwrap();
    assert!(matches!(rt.restart_rank(9).await, Err(RuntimeError::NoSuchInstance(ref n)) if n == "rank-9"));
    finish(server).await;
}

#[tokio::test]
async fn a_ranks_own_setting_is_a_config_key_and_a_change_restarts_its_container() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let mut with_key = config(4);
    with_key["data"]["rank-1.LAB_DEVICE_FAULT_AFTER"] = json!("150");
    with_key["data"]["rank-12.LAB_DEVICE_FAULT_AFTER"] = json!("7");
    let cm = format!("/api/v1/namespaces/{NS}/configmaps/lab-config");
    let sts_path = format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank");
    let mut waiting = rank_pod(1, "Running", "400m", "400m");
    waiting["status"]["containerStatuses"] = json!([{ "name": "rank", "ready": false, "restartCount": 3,
        "image": "i", "imageID": "", "state": { "waiting": { "reason": "CrashLoopBackOff" } } }]);
    let server = serve(
        h,
        vec![
            // Read: rank-1's own keys only (not rank-12's).
            ex("GET", cm.clone(), Reply::Json(200, with_key.clone())),
            // Set: the key patched, then rank-1's container looked at: waiting in its back-off, so its
            // next start reads the new value and nothing is signalled (a running one is signalled through
            // exec, which the kind tier checks). No pod is deleted.
            ex("GET", sts_path.clone(), Reply::Json(200, sts(4, "400m"))),
            ex("GET", cm.clone(), Reply::Json(200, config(4))),
            ex("PATCH", cm.clone(), Reply::Json(200, with_key.clone())).body(|b| {
                assert_eq!(b["data"]["rank-1.LAB_DEVICE_FAULT_AFTER"], "150");
            }),
            ex("GET", pod_path("rank-1"), Reply::Json(200, waiting)),
            // The same value again: nothing patched, no pod replaced.
            ex("GET", sts_path.clone(), Reply::Json(200, sts(4, "400m"))),
            ex("GET", cm.clone(), Reply::Json(200, with_key.clone())),
            // Unset: the key removed (null in a merge patch); the pod is not there (being replaced), so
            // its next one reads the new value.
            ex("GET", sts_path.clone(), Reply::Json(200, sts(4, "400m"))),
            ex("GET", cm.clone(), Reply::Json(200, with_key.clone())),
            ex("PATCH", cm.clone(), Reply::Json(200, config(4))).body(|b| {
                assert!(b["data"]["rank-1.LAB_DEVICE_FAULT_AFTER"].is_null(), "{b}");
            }),
            ex(
                "GET",
                pod_path("rank-1"),
                Reply::Json(404, api_status(404, "NotFound", "pods \"rank-1\" not found")),
            ),
            // A rank beyond the replicas: refused before anything changes.
            ex("GET", sts_path.clone(), Reply::Json(200, sts(4, "400m"))),
        ],
    );
    let env = rt.rank_env(1).await.unwrap();
    assert_eq!(env.len(), 1, "{env:?}");
    assert_eq!(env["LAB_DEVICE_FAULT_AFTER"], "150");
    rt.set_rank_env(1, "LAB_DEVICE_FAULT_AFTER", Some("150".into()))
        .await
        .unwrap();
    rt.set_rank_env(1, "LAB_DEVICE_FAULT_AFTER", Some("150".into()))
        .await
        .unwrap();
    rt.set_rank_env(1, "LAB_DEVICE_FAULT_AFTER", None).await.unwrap();
    let e = rt
        .set_rank_env(4, "LAB_DEVICE_FAULT_AFTER", Some("1".into()))
        .await
        .unwrap_err();
    assert!(
        matches!(e, RuntimeError::InvalidInput(ref m) if m.contains("rank-4 does not exist")),
        "{e}"
    );
    // Not a LAB_* name: refused without a request.
    let e = rt.set_rank_env(1, "PATH", Some("/".into())).await.unwrap_err();
    assert!(matches!(e, RuntimeError::InvalidInput(_)), "{e}");
    finish(server).await;
}

#[tokio::test]
async fn gpus_are_advertised_on_node_status_and_awaited_in_allocatable() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let server = serve(
        h,
        vec![
            ex(
                "GET",
                "/api/v1/nodes",
                Reply::Json(200, list("NodeList", vec![node("0")])),
            ),
            ex(
                "PATCH",
                "/api/v1/nodes/node-a/status",
                Reply::Json(200, node("4")),
            )
            .body(|b| assert_eq!(*b, json!({ "status": { "capacity": { "lab.dev/gpu": "4" }, "allocatable": { "lab.dev/gpu": "4" } } }))),
            watch_list("/api/v1/nodes".into(), "node-a", "NodeList", vec![node("4")]),
        ],
    );
    let nodes = super::gpus::advertise(&client, "lab.dev/gpu", 4, false, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(nodes, ["node-a"]);
    finish(server).await;
}

#[tokio::test]
async fn the_nodes_are_awaited_until_as_many_have_registered() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let mut worker = node("0");
    worker["metadata"]["name"] = json!("node-b");
    let nodes = |items: Vec<Value>| ex("GET", "/api/v1/nodes", Reply::Json(200, list("NodeList", items)));
    let server = serve(
        h,
        vec![
            nodes(vec![node("0")]),
            nodes(vec![node("0")]),
            nodes(vec![node("0"), worker.clone()]),
        ],
    );
    super::api::wait_for_nodes(&client, 2, Duration::from_secs(5))
        .await
        .unwrap();
    finish(server).await;
    // Never as many: a timeout that says how many came.
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    // More answers than it can ask for in the time (one per 250 ms), however slow the machine.
    let _server = serve(h, (0..20).map(|_| nodes(vec![node("0")])).collect());
    let err = super::api::wait_for_nodes(&client, 2, Duration::from_millis(600))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("2 nodes to register (1 did)"), "{err}");
}

#[tokio::test]
async fn advertising_gpus_without_node_rights_is_forbidden_with_advice() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let server = serve(
        h,
        vec![
            ex(
                "GET",
                "/api/v1/nodes",
                Reply::Json(200, list("NodeList", vec![node("0")])),
            ),
            ex(
                "PATCH",
                "/api/v1/nodes/node-a/status",
                Reply::Json(
                    403,
                    api_status(403, "Forbidden", "cannot patch resource \"nodes/status\""),
                ),
            ),
        ],
    );
    let err = super::gpus::advertise(&client, "lab.dev/gpu", 4, false, Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("advertise lab.dev/gpu on node node-a"),
        "{err}"
    );
    assert!(err.to_string().contains("RBAC"), "{err}");
    finish(server).await;
}

#[tokio::test]
async fn down_in_an_existing_cluster_deletes_the_namespace_it_created_and_withdraws_gpus() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let server = serve(
        h,
        vec![
            ex(
                "DELETE",
                format!("/api/v1/namespaces/{NS}"),
                Reply::Json(
                    200,
                    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NS } }),
                ),
            ),
            watch_list("/api/v1/namespaces".into(), NS, "NamespaceList", vec![]),
            ex(
                "PATCH",
                "/api/v1/nodes/node-a/status",
                Reply::Json(200, node("0")),
            )
            .body(|b| assert_eq!(*b, json!({ "status": { "capacity": { "lab.dev/gpu": null }, "allocatable": { "lab.dev/gpu": null } } }))),
        ],
    );
    super::down::remove_objects(&client, &record(DelayChoice::Auto), "demo")
        .await
        .unwrap();
    finish(server).await;
}

/// A failed `lab up` undoes what it created newest first: the GPUs advertised last are withdrawn before
/// the namespace made first is deleted; then the lab's folder is gone.
#[tokio::test]
async fn a_failed_up_rolls_back_what_it_created_newest_first() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let server = serve(
        h,
        vec![
            ex(
                "PATCH",
                "/api/v1/nodes/node-a/status",
                Reply::Json(200, node("0")),
            )
            .body(|b| assert_eq!(*b, json!({ "status": { "capacity": { "lab.dev/gpu": null }, "allocatable": { "lab.dev/gpu": null } } }))),
            ex(
                "DELETE",
                format!("/api/v1/namespaces/{NS}"),
                Reply::Json(
                    200,
                    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": NS } }),
                ),
            ),
            watch_list("/api/v1/namespaces".into(), NS, "NamespaceList", vec![]),
        ],
    );
    let (opts, kopts, rec) = one_rank_lab();
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("demo");
    std::fs::create_dir(&dir).unwrap();
    super::up::roll_back_on(
        &client,
        &opts,
        &kopts,
        rec,
        &dir,
        vec![
            super::up::Created::Namespace,
            super::up::Created::Gpus(vec!["node-a".into()]),
        ],
    )
    .await
    .unwrap();
    finish(server).await;
    assert!(!dir.exists(), "the lab is forgotten once everything is undone");
}

/// What is inside the lab's own kind cluster goes with the cluster: a rollback that cannot reach Docker
/// touches nothing in the cluster, says where the cluster may still run, and keeps the lab's record.
#[tokio::test]
async fn a_rollback_inside_the_labs_own_cluster_only_deletes_the_cluster() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    // No request at all reaches the API server.
    let server = serve(h, vec![]);
    let (opts, kopts, mut rec) = one_rank_lab();
    let root = tempfile::tempdir().unwrap();
    rec.mode = ClusterMode::Kind;
    rec.cluster = Some("lab-demo".into());
    rec.docker_host = Some(format!("unix://{}/no-engine.sock", root.path().display()));
    let dir = root.path().join("demo");
    std::fs::create_dir(&dir).unwrap();
    let e = super::up::roll_back_on(
        &client,
        &opts,
        &kopts,
        rec,
        &dir,
        vec![
            super::up::Created::Cluster,
            super::up::Created::Namespace,
            super::up::Created::Gpus(vec!["node-a".into()]),
        ],
    )
    .await
    .expect_err("the cluster cannot be deleted without its engine")
    .to_string();
    finish(server).await;
    assert!(
        e.contains("cluster lab-demo") && e.contains("may still be running"),
        "{e}"
    );
    assert!(dir.exists(), "the record is kept so `lab down` can finish");
}

#[tokio::test]
async fn down_in_a_namespace_it_did_not_create_deletes_only_labelled_objects() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let mut rec = record(DelayChoice::Auto);
    rec.created_namespace = false;
    rec.advertised_on.clear();
    let sel = "labelSelector=app.kubernetes.io%2Finstance%3Ddemo";
    let empty = |kind: &str| Reply::Json(200, list(kind, vec![]));
    let server = serve(
        h,
        vec![
            ex(
                "GET",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets"),
                Reply::Json(200, list("StatefulSetList", vec![sts(4, "400m")])),
            )
            .query(sel),
            ex(
                "DELETE",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank"),
                Reply::Json(200, sts(4, "400m")),
            ),
            ex(
                "GET",
                format!("/apis/apps/v1/namespaces/{NS}/deployments"),
                empty("DeploymentList"),
            )
            .query(sel),
            ex(
                "GET",
                format!("/apis/batch/v1/namespaces/{NS}/jobs"),
                empty("JobList"),
            )
            .query(sel),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/services"),
                empty("ServiceList"),
            )
            .query(sel),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/configmaps"),
                Reply::Json(200, list("ConfigMapList", vec![config(4)])),
            )
            .query(sel),
            // already gone: fine
            ex(
                "DELETE",
                format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
                Reply::Json(404, api_status(404, "NotFound", "gone")),
            ),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/secrets"),
                empty("SecretList"),
            )
            .query(sel),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/serviceaccounts"),
                empty("ServiceAccountList"),
            )
            .query(sel),
            ex(
                "GET",
                format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles"),
                empty("RoleList"),
            )
            .query(sel),
            ex(
                "GET",
                format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings"),
                empty("RoleBindingList"),
            )
            .query(sel),
            ex("GET", format!("/api/v1/namespaces/{NS}/pods"), empty("PodList")).query(sel),
        ],
    );
    super::down::remove_objects(&client, &rec, "demo").await.unwrap();
    let seen = finish(server).await;
    assert!(
        !seen
            .iter()
            .any(|s| s.contains("/namespaces/straggler-lab-demo ")
                || s.ends_with(&format!("/namespaces/{NS}")))
    );
}

#[tokio::test]
async fn the_manifests_are_applied_in_order_with_server_side_apply() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let settings = record(DelayChoice::Auto).settings("demo", 4, 4, Millicores(400));
    let objs = settings.config().unwrap();
    let server = serve(
        h,
        vec![
            ex(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
                Reply::Json(200, config(4)),
            )
            .query("fieldManager=straggler-lab")
            .query("force=true")
            .body(|b| {
                assert_eq!(b["kind"], "ConfigMap");
                assert_eq!(b["data"]["world-size"], "4");
            }),
            ex(
                "PATCH",
                format!("/api/v1/namespaces/{NS}/secrets/lab-control"),
                Reply::Json(200, applied("Secret", "lab-control")),
            )
            .query("fieldManager=straggler-lab")
            .query("force=true")
            .body(|b| assert_eq!(b["kind"], "Secret")),
        ],
    );
    super::api::apply_all(&client, NS, &objs).await.unwrap();
    finish(server).await;
}

fn applied(kind: &str, name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": kind, "metadata": { "name": name, "namespace": NS } })
}

fn deployment(name: &str, available: i32) -> Value {
    json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": name, "namespace": NS, "resourceVersion": "5" },
        "spec": { "selector": {}, "template": {} }, "status": { "availableReplicas": available } })
}

fn job(condition: &str) -> Value {
    json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": { "name": "seeder", "namespace": NS, "resourceVersion": "5" },
        "spec": { "template": {} }, "status": { "conditions": [ { "type": condition, "status": "True" } ] } })
}

fn apply(path: String, kind: &'static str, name: &'static str) -> Exchange {
    ex("PATCH", path, Reply::Json(200, applied(kind, name)))
        .query("fieldManager=straggler-lab")
        .query("force=true")
        .query("fieldValidation=Strict")
        .body(move |b| {
            assert_eq!(b["kind"], kind);
            assert_eq!(b["metadata"]["name"], name);
        })
}

/// Steps up to and including the seeding Job, for a lab of one storage server and one rank.
fn storage_and_seed(seed_outcome: &str) -> Vec<Exchange> {
    let core = |r: &str| format!("/api/v1/namespaces/{NS}/{r}");
    let apps = |r: &str| format!("/apis/apps/v1/namespaces/{NS}/{r}");
    vec![
        ex(
            "GET",
            format!("/api/v1/namespaces/{NS}"),
            Reply::Json(404, api_status(404, "NotFound", "namespaces not found")),
        ),
        apply(format!("/api/v1/namespaces/{NS}"), "Namespace", NS),
        apply(core("configmaps/lab-config"), "ConfigMap", "lab-config"),
        apply(core("secrets/lab-control"), "Secret", "lab-control"),
        apply(core("services/storage"), "Service", "storage"),
        apply(core("services/storage-master"), "Service", "storage-master"),
        apply(apps("deployments/storage-master"), "Deployment", "storage-master"),
        // The master available before a volume server dials its Service.
        watch_list(
            apps("deployments"),
            "storage-master",
            "DeploymentList",
            vec![deployment("storage-master", 1)],
        ),
        apply(apps("deployments/storage-0"), "Deployment", "storage-0"),
        // The seeding job goes in with the volume servers (it waits for them itself).
        apply(
            format!("/apis/batch/v1/namespaces/{NS}/jobs/seeder"),
            "Job",
            "seeder",
        ),
        // And the ranks (each waits for the dataset itself), before anything is awaited.
        apply(core("services/rendezvous"), "Service", "rendezvous"),
        apply(core("services/ranks"), "Service", "ranks"),
        apply(apps("statefulsets/rank"), "StatefulSet", "rank"),
        watch_list(
            apps("deployments"),
            "storage-0",
            "DeploymentList",
            vec![deployment("storage-0", 1)],
        ),
        watch_list(
            format!("/apis/batch/v1/namespaces/{NS}/jobs"),
            "seeder",
            "JobList",
            vec![job(seed_outcome)],
        ),
        // Beside the Job, its pods are watched: a seeder that ended with exit 0 is done before the Job
        // controller says so.
        ex("GET", core("pods"), Reply::Json(200, list("PodList", vec![])))
            .query("labelSelector=app.kubernetes.io%2Fcomponent%3Dseeder"),
    ]
}

fn one_rank_lab() -> (lab_runtime::UpOptions, super::KubeOptions, KubeRecord) {
    let opts = lab_runtime::UpOptions {
        name: "demo".into(),
        ranks: 1,
        storage_servers: 1,
        gpus: 1,
        ..Default::default()
    };
    let mut kopts = super::KubeOptions::existing(None);
    kopts.namespace = Some(NS.into());
    let mut rec = record(DelayChoice::Auto);
    rec.ranks = 1;
    rec.storage_servers = 1;
    rec.created_namespace = false;
    rec.advertised_on.clear();
    (opts, kopts, rec)
}

#[tokio::test]
async fn deploy_applies_every_manifest_and_waits_on_each_condition_in_order() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let (opts, kopts, mut rec) = one_rank_lab();
    let mut script = storage_and_seed("Complete");
    let mut r0 = rank_pod(0, "Running", "400m", "400m");
    r0["status"]["podIP"] = json!("10.0.0.9");
    let mut ready_sts = sts(1, "400m");
    ready_sts["metadata"]["resourceVersion"] = json!("6");
    ready_sts["status"] = json!({ "replicas": 1, "readyReplicas": 1 });
    script.extend([
        watch_list(
            format!("/apis/apps/v1/namespaces/{NS}/statefulsets"),
            "rank",
            "StatefulSetList",
            vec![ready_sts],
        ),
        // the baseline: the rank has trained a few steps
        lab_pods(vec![r0]),
        ex(
            "GET",
            format!("{}:9400/proxy/metrics", pod_path("rank-0")),
            Reply::Text(200, "# TYPE lab_steps_total counter\nlab_steps_total 7\n"),
        ),
    ]);
    let server = serve(h, script);
    let dir = tempfile::tempdir().unwrap();
    let rt = super::up::deploy(
        &client,
        &opts,
        &kopts,
        &mut rec,
        &lab_runtime::lifecycle::Quiet,
        dir.path(),
    )
    .await
    .unwrap();
    finish(server).await;
    assert!(
        rec.created_namespace,
        "the lab created the namespace, so lab down deletes it"
    );
    assert_eq!(rt.namespace(), NS);
    let saved: lab_runtime::state::LabRecord =
        serde_json::from_slice(&std::fs::read(dir.path().join("lab.json")).unwrap()).unwrap();
    assert_eq!(saved.runtime, lab_model::status::RuntimeKind::Cluster);
    assert_eq!(saved.config["created_namespace"], true);
}

#[tokio::test]
async fn a_failed_seeding_job_stops_the_lab_coming_up_and_says_where_to_look() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let (opts, kopts, mut rec) = one_rank_lab();
    let server = serve(h, storage_and_seed("Failed"));
    let dir = tempfile::tempdir().unwrap();
    let err = super::up::deploy(
        &client,
        &opts,
        &kopts,
        &mut rec,
        &lab_runtime::lifecycle::Quiet,
        dir.path(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("logs job/seeder"), "{err}");
    finish(server).await;
}

#[tokio::test]
async fn a_forbidden_namespace_read_stops_the_lab_coming_up() {
    let (svc, h) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(svc, NS);
    let (opts, kopts, mut rec) = one_rank_lab();
    let server = serve(
        h,
        vec![ex(
            "GET",
            format!("/api/v1/namespaces/{NS}"),
            Reply::Json(403, api_status(403, "Forbidden", "cannot get namespaces")),
        )],
    );
    let dir = tempfile::tempdir().unwrap();
    let err = super::up::deploy(
        &client,
        &opts,
        &kopts,
        &mut rec,
        &lab_runtime::lifecycle::Quiet,
        dir.path(),
    )
    .await
    .unwrap_err();
    // The error names the step, and says what the API server refused and what to do.
    assert!(
        matches!(&err, RuntimeError::Step { step, message }
            if step == "create namespace" && message.contains("read namespace") && message.contains("forbidden")),
        "{err}"
    );
    finish(server).await;
}

#[tokio::test]
async fn a_broken_watch_is_started_again_and_a_forbidden_one_ends_the_wait() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let server = serve(
        h,
        vec![
            ex(
                "PATCH",
                format!("{}/resize", pod_path("rank-1")),
                Reply::Json(200, rank_pod(1, "Running", "400m", "150m")),
            ),
            // the API server restarts under the watch: a 500, then the answer
            ex(
                "GET",
                pods_path(),
                Reply::Json(500, api_status(500, "InternalError", "etcd leader changed")),
            )
            .query("fieldSelector=metadata.name%3Drank-1"),
            watch_list(
                pods_path(),
                "rank-1",
                "PodList",
                vec![rank_pod(1, "Running", "150m", "150m")],
            ),
            // the next resize's watch is refused: no point in waiting
            ex(
                "PATCH",
                format!("{}/resize", pod_path("rank-2")),
                Reply::Json(200, rank_pod(2, "Running", "400m", "150m")),
            ),
            ex(
                "GET",
                pods_path(),
                Reply::Json(
                    403,
                    api_status(403, "Forbidden", "pods is forbidden: cannot watch"),
                ),
            )
            .query("fieldSelector=metadata.name%3Drank-2"),
        ],
    );
    rt.resize_rank(1, Millicores(150)).await.unwrap();
    let start = std::time::Instant::now();
    let err = rt.resize_rank(2, Millicores(150)).await.unwrap_err();
    assert_eq!(super::api::status_code(&err), Some(403), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "a forbidden watch must not wait out the deadline"
    );
    finish(server).await;
}

#[tokio::test]
async fn a_latency_proxy_the_api_server_cannot_reach_is_an_error_naming_the_pod() {
    let (rt, h) = runtime(DelayChoice::Proxy);
    let pod = "storage-1-7d9f-abcde";
    let server = serve(
        h,
        vec![
            lab_pods(vec![storage_pod(1, json!({}), vec![], vec![])]),
            ex(
                "PUT",
                format!("{}:8481/proxy/delay", pod_path(pod)),
                Reply::Json(
                    503,
                    api_status(
                        503,
                        "ServiceUnavailable",
                        "error trying to reach service: dial tcp 10.0.0.5:8481: connect: connection refused",
                    ),
                ),
            ),
        ],
    );
    let err = rt.set_storage_delay(1, Some(delay_300())).await.unwrap_err();
    assert_eq!(super::api::status_code(&err), Some(503), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("set the latency proxy's delay on {pod}")),
        "{err}"
    );
    finish(server).await;
}

#[tokio::test]
async fn a_world_size_change_without_lab_config_says_what_is_missing() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let server = serve(
        h,
        vec![ex(
            "PATCH",
            format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
            Reply::Json(
                404,
                api_status(404, "NotFound", "configmaps \"lab-config\" not found"),
            ),
        )],
    );
    let err = rt.set_world_size(5).await.unwrap_err();
    assert_eq!(super::api::status_code(&err), Some(404), "{err}");
    assert!(
        err.to_string().contains("set the world size in lab-config"),
        "{err}"
    );
    assert!(err.to_string().contains("lab down"), "{err}");
    finish(server).await;
}

#[tokio::test]
async fn a_terminating_rank_is_not_counted_ready() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let mut going = rank_pod(2, "Running", "400m", "400m");
    going["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let server = serve(
        h,
        vec![
            lab_pods(vec![rank_pod(0, "Running", "400m", "400m"), going]),
            ex(
                "GET",
                format!("/apis/apps/v1/namespaces/{NS}/statefulsets/rank"),
                Reply::Json(200, sts(4, "400m")),
            ),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/configmaps/lab-config"),
                Reply::Json(200, config(4)),
            ),
            ex(
                "GET",
                "/api/v1/nodes",
                Reply::Json(200, list("NodeList", vec![node("4")])),
            ),
        ],
    );
    let s = rt.status().await.unwrap();
    finish(server).await;
    let r2 = s.pods.iter().find(|p| p.name == "rank-2").unwrap();
    assert_eq!(
        (r2.phase, r2.ready, r2.reason.as_deref()),
        (Phase::Running, false, Some("Terminating"))
    );
    assert_eq!(s.ranks_ready(), (1, 2));
}

/// The `exec` request for `lab-beside` in a rank's container: the program and its arguments with no shell,
/// the rank container named, stdout and stderr on, no stdin and no terminal; and what a refusal becomes.
#[tokio::test]
async fn processes_beside_a_rank_are_reached_by_exec_of_lab_beside_in_its_container() {
    let (rt, h) = runtime(DelayChoice::Auto);
    let exec = format!("/api/v1/namespaces/{NS}/pods/rank-1/exec");
    let server = serve(
        h,
        vec![
            ex(
                "GET",
                exec.clone(),
                Reply::Json(
                    403,
                    api_status(
                        403,
                        "Forbidden",
                        "pods \"rank-1\" is forbidden: User \"dev\" cannot create resource \"pods/exec\"",
                    ),
                ),
            )
            .query("command=lab-beside&command=hog")
            .query("container=rank")
            .query("stdout=true")
            .query("stderr=true"),
            ex(
                "GET",
                format!("/api/v1/namespaces/{NS}/pods/rank-7/exec"),
                Reply::Json(404, api_status(404, "NotFound", "pods \"rank-7\" not found")),
            )
            .query("command=lab-beside&command=procs"),
        ],
    );
    let e = rt.start_hog(1).await.unwrap_err();
    assert_eq!(super::api::status_code(&e), Some(403), "{e}");
    assert!(e.to_string().contains("lab-beside hog"), "{e}");
    let e = rt.rank_processes(7).await.unwrap_err();
    assert!(
        matches!(e, RuntimeError::NoSuchInstance(ref n) if n == "rank-7"),
        "{e}"
    );
    let seen = server.await.unwrap();
    assert!(
        !seen[0].contains("stdin=true") && !seen[0].contains("tty=true"),
        "{seen:?}"
    );
}

/// A cluster whose Docker engine does not answer cannot be known gone: `lab down` fails, says where
/// it looked and how to finish, and keeps the record (the caller removes the lab's folder only after).
#[tokio::test]
async fn a_cluster_on_an_engine_that_does_not_answer_is_not_called_gone() {
    let dir = tempfile::tempdir().unwrap();
    let host = format!("unix://{}/no-engine.sock", dir.path().display());
    let mut rec = record(DelayChoice::Auto);
    rec.mode = ClusterMode::Kind;
    rec.cluster = Some("lab-gone".into());
    rec.created_cluster = true;
    rec.docker_host = Some(host.clone());
    let e = super::down::delete_kind_cluster("lab-gone", &rec, dir.path(), &lab_runtime::lifecycle::Quiet)
        .await
        .expect_err("an engine that does not answer is an error")
        .to_string();
    assert!(
        e.contains(&format!("Docker does not answer at DOCKER_HOST={host}")),
        "{e}"
    );
    assert!(e.contains("may still be running"), "{e}");
    assert!(e.contains("run `lab down` again"), "{e}");
}
