//! The generated manifests, parsed back and checked: resources, probes, labels against selectors, pinned
//! images, and no capability beyond what the lab needs.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use lab_model::Millicores;
use serde_json::Value;

use super::manifests::{self, Settings, names};
use super::{DEFAULT_IMAGE, DEFAULT_PROMETHEUS_IMAGE};

fn settings() -> Settings {
    Settings {
        namespace: "straggler-lab-demo".into(),
        lab: "demo".into(),
        image: DEFAULT_IMAGE.into(),
        prometheus_image: DEFAULT_PROMETHEUS_IMAGE.into(),
        pull_policy: "IfNotPresent".into(),
        ranks: 4,
        world_size: 4,
        storage_servers: 3,
        seed: 42,
        gpus: 4,
        watchdog_seconds: 120,
        cpu: Millicores(400),
        gpu_resource: "lab.dev/gpu".into(),
        control_token: "0123abcd".into(),
    }
}

fn all_objects(s: &Settings) -> Vec<DynamicObject> {
    let mut v = s.namespace().unwrap();
    v.extend(s.config().unwrap());
    v.extend(s.storage().unwrap());
    v.extend(s.seeder().unwrap());
    v.extend(s.ranks().unwrap());
    v.extend(s.prometheus("groups: []\n").unwrap());
    v.extend(
        s.database(super::DEFAULT_DB_IMAGE, super::kind::POD_SUBNET)
            .unwrap(),
    );
    v
}

fn kind_of(o: &DynamicObject) -> &str {
    &o.types.as_ref().unwrap().kind
}

fn find<'a>(objs: &'a [DynamicObject], kind: &str, name: &str) -> &'a DynamicObject {
    objs.iter()
        .find(|o| kind_of(o) == kind && o.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn pod_template(o: &DynamicObject) -> &Value {
    &o.data["spec"]["template"]
}

fn containers(o: &DynamicObject) -> Vec<&Value> {
    pod_template(o)["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .collect()
}

fn workloads(objs: &[DynamicObject]) -> Vec<&DynamicObject> {
    objs.iter()
        .filter(|o| matches!(kind_of(o), "Deployment" | "StatefulSet" | "Job"))
        .collect()
}

#[test]
fn every_file_renders_and_parses() {
    let objs = all_objects(&settings());
    // namespace, config and the control token's Secret, master (2) and the servers' headless Service, 3
    // servers, seeder, ranks (3), prometheus (6 + rules), the database (its Service, its StatefulSet, the
    // writer's Service and Deployment)
    assert_eq!(objs.len(), 1 + 2 + 3 + 3 + 1 + 3 + 7 + 4);
    for o in &objs {
        manifests::api_resource(o).unwrap();
        let labels = o.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.get(names::INSTANCE_LABEL).map(String::as_str),
            Some("demo"),
            "{:?}",
            o.metadata.name
        );
        assert_eq!(
            labels.get("app.kubernetes.io/managed-by").map(String::as_str),
            Some("straggler-lab")
        );
        if kind_of(o) != "Namespace" {
            assert_eq!(o.metadata.namespace.as_deref(), Some("straggler-lab-demo"));
        }
    }
}

#[test]
fn a_missing_variable_is_refused() {
    let err = manifests::render(
        "image: ${IMAGE}\nx: ${NOPE}",
        &manifests::Vars::new().with("IMAGE", "a:1"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("${NOPE}"), "{err}");
    assert!(manifests::render("x: ${OPEN", &manifests::Vars::new()).is_err());
    assert_eq!(
        manifests::render("a $1 ${X}", &manifests::Vars::new().with("X", 2)).unwrap(),
        "a $1 2"
    );
}

#[test]
fn selectors_match_their_pod_labels_and_services_find_pods() {
    let objs = all_objects(&settings());
    for w in workloads(&objs) {
        let labels = pod_template(w)["metadata"]["labels"].as_object().unwrap();
        if kind_of(w) == "Job" {
            continue;
        }
        let sel = w.data["spec"]["selector"]["matchLabels"].as_object().unwrap();
        for (k, v) in sel {
            assert_eq!(
                labels.get(k),
                Some(v),
                "{} {:?}: selector {k} not on its pods",
                kind_of(w),
                w.metadata.name
            );
        }
    }
    // Every Service selects the pods of some workload (the rendezvous Service: rank-0's pod by name).
    for svc in objs.iter().filter(|o| kind_of(o) == "Service") {
        let sel = svc.data["spec"]["selector"].as_object().unwrap();
        let matched = workloads(&objs).iter().any(|w| {
            let labels = pod_template(w)["metadata"]["labels"].as_object().unwrap();
            sel.iter()
                .all(|(k, v)| k == "statefulset.kubernetes.io/pod-name" || labels.get(k) == Some(v))
        });
        assert!(matched, "service {:?} selects no pods", svc.metadata.name);
    }
    let rdv = find(&objs, "Service", "rendezvous");
    assert_eq!(
        rdv.data["spec"]["selector"]["statefulset.kubernetes.io/pod-name"],
        "rank-0"
    );
    // rank-0 stays reachable while its restarted container waits for its next readiness probe.
    assert_eq!(rdv.data["spec"]["publishNotReadyAddresses"], true);
}

#[test]
fn images_are_pinned_and_pulled_only_if_absent() {
    let objs = all_objects(&settings());
    for w in workloads(&objs) {
        for c in containers(w) {
            let image = c["image"].as_str().unwrap();
            let last = image.rsplit('/').next().unwrap();
            assert!(
                last.contains(':') && !image.ends_with(":latest"),
                "{image} is not pinned"
            );
            assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{image}");
        }
    }
    assert!(!DEFAULT_IMAGE.ends_with(":latest"));
    assert!(super::DEFAULT_NODE_IMAGE.contains("@sha256:"));
}

#[test]
fn ranks_ask_for_cpu_and_one_gpu_and_probe_readyz() {
    let s = Settings {
        gpu_resource: "nvidia.com/gpu".into(),
        ..settings()
    };
    let objs = all_objects(&s);
    let sts = find(&objs, "StatefulSet", names::RANKS);
    assert_eq!(sts.data["spec"]["replicas"], 4);
    assert_eq!(sts.data["spec"]["serviceName"], "ranks");
    assert_eq!(find(&objs, "Service", "ranks").data["spec"]["clusterIP"], "None");
    let c = containers(sts)[0];
    assert_eq!(c["name"], names::RANK_CONTAINER);
    for side in ["requests", "limits"] {
        assert_eq!(c["resources"][side]["nvidia.com/gpu"], "1");
    }
    assert_eq!(c["resources"]["limits"]["cpu"], "400m");
    assert_eq!(c["resources"]["requests"]["cpu"], "100m");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "metrics");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    let ports: BTreeMap<&str, i64> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["containerPort"].as_i64().unwrap()))
        .collect();
    assert_eq!(ports["metrics"], i64::from(names::RANK_METRICS_PORT));
    // CPU can be resized in place without a restart.
    assert_eq!(c["resizePolicy"][0]["resourceName"], "cpu");
    assert_eq!(c["resizePolicy"][0]["restartPolicy"], "NotRequired");
    // The world size comes from lab-config, read when the container starts, and is on the template.
    let env = c["env"].as_array().unwrap();
    let ws = env.iter().find(|e| e["name"] == "WORLD_SIZE").unwrap();
    assert_eq!(ws["valueFrom"]["configMapKeyRef"]["name"], names::CONFIG);
    assert_eq!(ws["valueFrom"]["configMapKeyRef"]["key"], names::WORLD_SIZE_KEY);
    assert_eq!(
        pod_template(sts)["metadata"]["annotations"][names::WORLD_SIZE_ANNOTATION],
        "4"
    );
    let cm = find(&objs, "ConfigMap", names::CONFIG);
    assert_eq!(cm.data["data"][names::WORLD_SIZE_KEY], "4");
    // No cluster DNS: addresses come from the Service variables the kubelet injects.
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--rendezvous=$(RENDEZVOUS_SERVICE_HOST):29500"),
        "{args:?}"
    );
    assert!(args.iter().all(|a| !a.contains(".svc")), "{args:?}");
}

#[test]
fn one_volume_server_per_workload_behind_its_proxy() {
    let objs = all_objects(&settings());
    for i in 0..3 {
        let d = find(&objs, "Deployment", &format!("storage-{i}"));
        assert_eq!(d.data["spec"]["replicas"], 1);
        assert_eq!(
            d.data["spec"]["selector"]["matchLabels"][names::INDEX_LABEL],
            i.to_string()
        );
        let cs = containers(d);
        let volume = cs.iter().find(|c| c["name"] == names::VOLUME_CONTAINER).unwrap();
        let args: Vec<&str> = volume["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&format!("-rack=storage-{i}").as_str()), "{args:?}");
        assert!(
            args.contains(&format!("-publicUrl=$(POD_IP):{}", names::PROXY_PORT).as_str()),
            "{args:?}"
        );
        assert!(
            args.contains(&"-master=$(STORAGE_MASTER_SERVICE_HOST):9333"),
            "{args:?}"
        );
        assert!(args.contains(&format!("-metricsPort={}", names::STORAGE_METRICS_PORT).as_str()));
        let proxy = cs.iter().find(|c| c["name"] == "latency-proxy").unwrap();
        let pargs: Vec<&str> = proxy["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            pargs,
            [
                format!("--listen=0.0.0.0:{}", names::PROXY_PORT),
                format!("--upstream=127.0.0.1:{}", names::STORAGE_HTTP_PORT),
                format!("--control=0.0.0.0:{}", names::PROXY_CONTROL_PORT)
            ]
        );
        assert_eq!(proxy["readinessProbe"]["httpGet"]["path"], "/healthz");
        assert!(volume["readinessProbe"]["httpGet"]["path"].is_string());
    }
}

#[test]
fn nothing_is_privileged_or_holds_net_admin() {
    let objs = all_objects(&settings());
    for w in workloads(&objs) {
        assert!(pod_template(w)["spec"]["hostNetwork"].is_null());
        for c in containers(w) {
            let sc = &c["securityContext"];
            assert!(
                sc["privileged"].is_null() || sc["privileged"] == false,
                "{}",
                c["name"]
            );
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{}", c["name"]);
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{}",
                c["name"]
            );
            assert!(
                sc["capabilities"]["add"].is_null(),
                "{} adds capabilities",
                c["name"]
            );
            assert_eq!(sc["runAsNonRoot"], true, "{}", c["name"]);
        }
    }
}

#[test]
fn prometheus_gets_the_rule_file_and_reads_only_pods() {
    let objs = settings()
        .prometheus("groups:\n  - name: golden\n    rules: []\n")
        .unwrap();
    let rules = find(&objs, "ConfigMap", names::PROMETHEUS_RULES);
    assert!(
        rules.data["data"]["golden-signals.yaml"]
            .as_str()
            .unwrap()
            .contains("golden")
    );
    let role = find(&objs, "Role", "prometheus");
    assert_eq!(role.data["rules"][0]["resources"], serde_json::json!(["pods"]));
    assert_eq!(
        role.data["rules"][0]["verbs"],
        serde_json::json!(["get", "list", "watch"])
    );
    let cfg = find(&objs, "ConfigMap", "prometheus-config");
    let prom: Value = serde_norway::from_str(cfg.data["data"]["prometheus.yml"].as_str().unwrap()).unwrap();
    assert_eq!(prom["rule_files"][0], "/etc/prometheus/rules/*.yaml");
    let jobs: Vec<&str> = prom["scrape_configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_name"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["rank", "storage", "writer"]);
    // The writer's pods by their component and metrics port (no pod of it without the database).
    let writer = &prom["scrape_configs"][2]["relabel_configs"][0];
    assert_eq!(writer["regex"], "db-writer;metrics");
    assert_eq!(writer["action"], "keep");
    let d = find(&objs, "Deployment", "prometheus");
    assert_eq!(containers(d)[0]["image"], DEFAULT_PROMETHEUS_IMAGE);
}

#[test]
fn the_rule_file_is_there_and_ships_in_the_prometheus_rules() {
    // The rule file belongs to telemetry; the lab embeds it (manifests::RULES, from RULES_PATH) and ships
    // it. It must be a rule file Prometheus can load (promtool checks the rest), be the repository's file
    // at RULES_PATH, and land unchanged in the ConfigMap Prometheus mounts.
    let rules = super::manifests::RULES;
    let v: Value = serde_norway::from_str(rules).unwrap();
    assert!(
        v["groups"].as_array().is_some_and(|g| !g.is_empty()),
        "the embedded rule file has no rule groups"
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(super::manifests::RULES_PATH);
    let file = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the golden-signal rule file {}: {e}", path.display()));
    assert_eq!(file, rules, "{} is not the file the lab embeds", path.display());
    let objs = settings().prometheus(rules).unwrap();
    let cm = find(&objs, "ConfigMap", names::PROMETHEUS_RULES);
    assert_eq!(cm.data["data"]["golden-signals.yaml"], rules);
}

#[test]
fn the_kind_config_and_options_are_sane() {
    let k = super::KubeOptions::kind();
    assert!(k.advertise_gpus && k.monitoring && k.build_image);
    let e = super::KubeOptions::existing(None);
    assert!(!e.advertise_gpus && !e.build_image);
    assert_eq!(e.gpu_resource, "lab.dev/gpu");
}

#[test]
fn the_seeder_writes_shards_for_every_gpu_and_ranks_bind_the_rendezvous_locally() {
    let objs = all_objects(&Settings {
        gpus: 5,
        ..settings()
    });
    let seeder = find(&objs, "Job", names::SEEDER);
    let args: Vec<&str> = containers(seeder)[0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--ranks=5"), "{args:?}");
    assert_eq!(pod_template(seeder)["spec"]["restartPolicy"], "OnFailure");
    let rank = containers(find(&objs, "StatefulSet", names::RANKS))[0];
    let args: Vec<&str> = rank["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    // Rank 0 cannot bind the Service's address: it listens on all of its own, and peers reach it through the Service.
    assert!(args.contains(&"--rendezvous-bind=0.0.0.0:29500"), "{args:?}");
    assert!(args.contains(&"--advertise=$(POD_IP)"), "{args:?}");
    assert!(args.contains(&"--rank-from-hostname"), "{args:?}");
}

#[test]
fn a_ranks_scratch_folder_is_an_emptydir_of_its_pod() {
    let objs = all_objects(&settings());
    let sts = find(&objs, "StatefulSet", names::RANKS);
    let rank = containers(sts)[0];
    let flag = rank["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str()?.strip_prefix("--scratch-dir="))
        .next()
        .expect("--scratch-dir");
    let mount = rank["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == flag)
        .expect("a volume mounted at --scratch-dir");
    assert_ne!(mount["readOnly"], true);
    let volume = pod_template(sts)["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert!(volume["emptyDir"].is_object(), "{volume}");
}

#[test]
fn a_ranks_own_settings_come_from_lab_config_in_its_environment() {
    // Read at each start of the container, so restarting the container is enough for a new value.
    let objs = all_objects(&settings());
    let sts = find(&objs, "StatefulSet", names::RANKS);
    let rank = containers(sts)[0];
    assert!(
        rank["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--rank-settings-from-env"),
        "{}",
        rank["args"]
    );
    assert_eq!(rank["envFrom"][0]["configMapRef"]["name"], names::CONFIG);
    // No mounted copy of it, whose refresh would lag the ConfigMap.
    let volumes = pod_template(sts)["spec"]["volumes"].as_array().unwrap();
    assert!(volumes.iter().all(|v| v["configMap"].is_null()), "{volumes:?}");
    assert_eq!(
        sts.data["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
        0
    );
}

#[test]
fn the_control_token_is_a_secret_the_ranks_read_and_nothing_else_shows() {
    let objs = all_objects(&settings());
    let secret = find(&objs, "Secret", "lab-control");
    assert_eq!(secret.data["stringData"]["token"], "0123abcd");
    let cm = find(&objs, "ConfigMap", names::CONFIG);
    assert!(
        !cm.data.to_string().contains("0123abcd"),
        "the token is not in lab-config"
    );
    let sts = find(&objs, "StatefulSet", names::RANKS);
    let rank = containers(sts)[0];
    let env = rank["env"].as_array().unwrap();
    let token = env
        .iter()
        .find(|e| e["name"] == "LAB_CONTROL_TOKEN")
        .expect("LAB_CONTROL_TOKEN");
    assert_eq!(token["valueFrom"]["secretKeyRef"]["name"], "lab-control");
    assert!(
        !sts.data.to_string().contains("0123abcd"),
        "the token is not in the template"
    );
}

#[test]
fn on_a_two_core_node_the_gpus_not_the_cpus_decide_how_many_ranks_fit() {
    // Five ranks (one more than the GPUs) and everything else must fit in 2 CPUs of requests, or the
    // fifth rank would be refused for CPU instead of for its GPU.
    let objs = all_objects(&Settings {
        ranks: 5,
        ..settings()
    });
    let milli = |q: &Value| -> u32 { q.as_str().map_or(0, |s| s.parse::<Millicores>().unwrap().0) };
    let mut total = 0;
    for w in workloads(&objs) {
        let replicas = w.data["spec"]["replicas"].as_u64().unwrap_or(1) as u32;
        if kind_of(w) == "Job" || w.metadata.name.as_deref() == Some("prometheus") {
            continue; // the seeder has finished by then; Prometheus runs on kind only
        }
        for c in containers(w) {
            total += replicas * milli(&c["resources"]["requests"]["cpu"]);
        }
    }
    assert!(total <= 1500, "requests add up to {total}m");
}

#[test]
fn offline_prometheus_scrapes_every_rank_and_server_by_name() {
    let s = Settings {
        prometheus_image: "straggler-lab/prometheus:2.42.0".into(),
        ..settings()
    };
    let objs = s.prometheus_static(manifests::RULES, 5, true, None).unwrap();
    let cm = objs
        .iter()
        .find(|o| o.data.pointer("/data/prometheus.yml").is_some())
        .unwrap();
    let text = cm.data["data"]["prometheus.yml"].as_str().unwrap();
    assert!(!text.contains("kubernetes_sd_configs"), "{text}");
    let config: serde_json::Value = serde_norway::from_str(text).unwrap();
    let jobs = config["scrape_configs"].as_array().unwrap();
    let targets = |job: &str| -> Vec<String> {
        let j = jobs.iter().find(|j| j["job_name"] == job).unwrap();
        j["static_configs"][0]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(targets("rank").len(), 5);
    assert_eq!(targets("rank")[4], "rank-4.ranks.straggler-lab-demo.svc:9400");
    assert_eq!(
        targets("storage")[2],
        "storage-2.storage.straggler-lab-demo.svc:9325"
    );
    assert_eq!(
        targets("writer"),
        ["lab-writer.straggler-lab-demo.svc:9410"],
        "LabCommitsStalled reads the writer's series"
    );
    assert_eq!(config["rule_files"][0], "/etc/prometheus/rules/*.yaml");
    // On the lab's own cluster, whole names: none is ever tried as a name outside the cluster.
    let kind = s
        .prometheus_static(manifests::RULES, 5, true, Some("cluster.local"))
        .unwrap();
    let text = kind
        .iter()
        .find_map(|o| o.data.pointer("/data/prometheus.yml")?.as_str())
        .unwrap();
    assert!(
        text.contains("\"rank-4.ranks.straggler-lab-demo.svc.cluster.local:9400\""),
        "{text}"
    );
    assert!(text.contains("\"lab-writer.straggler-lab-demo.svc.cluster.local:9410\""));
    for j in jobs {
        assert_eq!(j["relabel_configs"][0]["target_label"], "instance");
    }
    // The storage pods carry the hostname and subdomain those names resolve through.
    let storage = s.storage().unwrap();
    assert!(
        storage
            .iter()
            .any(|o| o.metadata.name.as_deref() == Some("storage") && o.data["spec"]["clusterIP"] == "None")
    );
    let dep = storage
        .iter()
        .find(|o| o.metadata.name.as_deref() == Some("storage-1"))
        .unwrap();
    assert_eq!(dep.data["spec"]["template"]["spec"]["hostname"], "storage-1");
    assert_eq!(dep.data["spec"]["template"]["spec"]["subdomain"], "storage");
    // Without the database, no writer to scrape.
    let objs = s.prometheus_static(manifests::RULES, 5, false, None).unwrap();
    let text = objs
        .iter()
        .find_map(|o| o.data.pointer("/data/prometheus.yml"))
        .and_then(|v| v.as_str())
        .unwrap();
    assert!(!text.contains("writer"), "{text}");
}

#[test]
fn a_foreign_job_is_its_own_deployment_not_a_rank_and_reads_its_settings_back() {
    use lab_model::jobs::ForeignJob;
    let s = settings();
    let job = ForeignJob {
        name: "nightly-etl".into(),
        server: 1,
        threads: 16,
        rate: None,
    };
    let objs = s.foreign_job(&job).unwrap();
    assert_eq!(objs.len(), 1);
    let d = &objs[0];
    assert_eq!(kind_of(d), "Deployment");
    assert_eq!(d.metadata.name.as_deref(), Some("nightly-etl"));
    let labels = pod_template(d)["metadata"]["labels"].clone();
    assert_eq!(labels[names::COMPONENT_LABEL], "foreign-job");
    assert_eq!(labels[names::JOB_LABEL], "nightly-etl");
    assert_eq!(
        labels[names::INSTANCE_LABEL],
        "demo",
        "lab down deletes it with the lab"
    );
    // The selector matches its own pod and no rank's.
    let sel = d.data["spec"]["selector"]["matchLabels"].as_object().unwrap();
    for (k, v) in sel {
        assert_eq!(&labels[k], v, "{k}");
    }
    assert_eq!(sel[names::COMPONENT_LABEL], "foreign-job");
    let c = containers(d)[0].clone();
    assert_eq!(c["command"], serde_json::json!(["lab-reader"]));
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--server=storage-1") && args.contains(&"--threads=16"),
        "{args:?}"
    );
    assert!(!args.iter().any(|a| a.starts_with("--rate")), "{args:?}");
    assert!(
        c["resources"]["limits"].get("lab.dev/gpu").is_none(),
        "no GPU: it is not a rank"
    );
    assert_eq!(c["resources"]["limits"]["cpu"], "500m");
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    let typed: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": serde_json::to_value(&d.metadata).unwrap(),
        "spec": d.data["spec"].clone(),
    }))
    .unwrap();
    assert_eq!(super::jobs::job_of(&typed), Some(job.clone()));

    let throttled = ForeignJob {
        rate: Some(20.0),
        ..job
    };
    let objs = s.foreign_job(&throttled).unwrap();
    let args = containers(&objs[0])[0]["args"].clone();
    assert!(
        args.as_array().unwrap().iter().any(|a| a == "--rate=20"),
        "{args}"
    );
    let typed: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": serde_json::to_value(&objs[0].metadata).unwrap(),
        "spec": objs[0].data["spec"].clone(),
    }))
    .unwrap();
    assert_eq!(super::jobs::job_of(&typed), Some(throttled));
}

#[test]
fn the_database_is_one_statefulset_updated_on_delete_and_a_writer_beside_it() {
    let objs = all_objects(&settings());
    let sts = find(&objs, "StatefulSet", names::DATABASE);
    // A template change moves no pod: a pod made from another version keeps it until deleted by name.
    assert_eq!(sts.data["spec"]["updateStrategy"]["type"], "OnDelete");
    assert_eq!(sts.data["spec"]["replicas"], 2);
    assert_eq!(sts.data["spec"]["serviceName"], names::DATABASE);
    assert!(
        pod_template(sts)["spec"]["nodeSelector"].is_null(),
        "no selector until a fault sets one"
    );
    let c = containers(sts)[0];
    assert_eq!(c["name"], names::DB_CONTAINER);
    assert_eq!(c["image"], super::DEFAULT_DB_IMAGE);
    let script = c["args"][0].as_str().unwrap();
    // db-0 is the primary, trusting the pod network only; the standby streams under its pod name.
    assert!(script.contains("*-0) exec lab-db"), "{script}");
    assert!(
        script.contains(&format!("--trust {} primary", super::kind::POD_SUBNET)),
        "{script}"
    );
    assert!(
        script.contains("--primary-host db-0.db --primary-port 5432 --name \"$HOSTNAME\""),
        "{script}"
    );
    assert_eq!(c["ports"][0]["containerPort"], names::DB_PORT);
    // A lookup gives up after 1 s while a new cluster's DNS starts (glibc's default: 5 s a search domain).
    for o in [sts, find(&objs, "Deployment", lab_model::db::WRITER)] {
        let options = &pod_template(o)["spec"]["dnsConfig"]["options"];
        assert_eq!(options[0], serde_json::json!({"name": "timeout", "value": "1"}));
        assert_eq!(options[1], serde_json::json!({"name": "attempts", "value": "1"}));
    }
    // PostgreSQL refuses root: the pod runs as the image's postgres user.
    let uid = super::image::DB_UID;
    assert_eq!(pod_template(sts)["spec"]["securityContext"]["runAsUser"], uid);
    let writer = find(&objs, "Deployment", lab_model::db::WRITER);
    let w = containers(writer)[0];
    assert!(
        w["args"]
            .as_array()
            .unwrap()
            .contains(&Value::String(format!("--primary=db-0.db:{}", names::DB_PORT))),
        "{w}"
    );
    assert_eq!(w["ports"][0]["containerPort"], names::WRITER_METRICS_PORT);
    assert_eq!(
        pod_template(writer)["metadata"]["labels"][names::COMPONENT_LABEL],
        names::WRITER_COMPONENT
    );
    let svc = find(&objs, "Service", names::DATABASE);
    assert_eq!(svc.data["spec"]["clusterIP"], "None");
    // The writer has a name Prometheus' static configuration scrapes it by, even while its commits stall.
    let svc = find(&objs, "Service", lab_model::db::WRITER);
    assert_eq!(svc.data["spec"]["clusterIP"], "None");
    assert_eq!(svc.data["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(
        svc.data["spec"]["selector"][names::COMPONENT_LABEL],
        names::WRITER_COMPONENT
    );
    assert_eq!(svc.data["spec"]["ports"][0]["port"], names::WRITER_METRICS_PORT);
}
