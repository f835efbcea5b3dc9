//! The DNS of the lab's own kind cluster: kubeadm's CoreDNS, installed by the lab with a Corefile quiet
//! towards the machine's DNS servers, and a CoreDNS pod that stalls at start replaced.
//!
//! A kind node's resolver is Docker's embedded one, which forwards every name outside the cluster to the
//! machine's DNS servers, and Docker stops a node only once the queries it is forwarding have ended. On a
//! machine whose DNS servers do not answer (offline), each waits out Docker's 4 s: `docker kill` of a
//! 2-node lab took 3.3–3.9 s with kubeadm's Corefile and 0.5 s with no query in flight (a goroutine dump
//! of the engine showed the kill waiting in the resolver's shutdown). The cluster's own DNS is what keeps
//! one in flight at any moment: its `forward` plugin health-checks a failing upstream (`. NS`) every
//! half second, and its `loop` plugin probes (a random `HINFO` name) for 30 s after each start. On the
//! lab's cluster neither is needed: the nodes' resolver is Docker's, never CoreDNS itself, so there is no
//! loop to find, and with one upstream there is no other to fail over to. Names outside the cluster are
//! still forwarded, so a pod the user adds can reach the network where the machine can.
//!
//! `kubeadm init` skips its CoreDNS phase on the lab's cluster (`kind::cluster_config`); the lab applies
//! what that phase would (`kubeadm init phase addon coredns --print-manifest` in the control plane: the
//! Deployment, its ConfigMap, the `kube-dns` Service at the address the kubelets are given, the RBAC) with
//! the quiet Corefile, once the nodes have joined. Changing kubeadm's ConfigMap afterwards instead reached
//! the pods only by replacing them, as they were placed by then, and the replacements were slower to be
//! Ready: in 6 ups two stalled (replaced again after 12 s) and `deploy database` took 22 s twice.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};

use super::super::{api, kind, manifests};
use lab_runtime::lifecycle::Progress;
use lab_runtime::{Result, RuntimeError};

/// The label of kubeadm's CoreDNS pods.
const DNS_PODS: &str = "k8s-app=kube-dns";

/// `corefile` (kubeadm's) with the upstream never health-checked (`max_fails 0` in the `forward . `
/// block) and without the `loop` plugin; `None` when it is already so or has no `forward . ` line.
pub fn quiet_corefile(corefile: &str) -> Option<String> {
    let mut out = Vec::new();
    let mut changed = false;
    let mut lines = corefile.lines();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if t == "loop" {
            changed = true;
            continue;
        }
        if !t.starts_with("forward . ") {
            out.push(line.to_string());
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let inner = format!("{indent}   max_fails 0");
        if t.ends_with('{') {
            out.push(line.to_string());
            // The block's own lines, up to its closing brace; max_fails added unless one is there.
            let mut block = Vec::new();
            for l in lines.by_ref() {
                let closes = l.trim() == "}";
                block.push(l.to_string());
                if closes {
                    break;
                }
            }
            if !block.iter().any(|l| l.trim().starts_with("max_fails")) {
                out.push(inner);
                changed = true;
            }
            out.extend(block);
        } else {
            out.push(format!("{line} {{"));
            out.push(inner);
            out.push(format!("{indent}}}"));
            changed = true;
        }
    }
    let mut text = out.join("\n");
    if corefile.ends_with('\n') {
        text.push('\n');
    }
    changed.then_some(text)
}

/// Installs CoreDNS in the lab's new kind cluster `cluster`: kubeadm's own objects for its version, printed
/// by `kubeadm` in the control-plane node, with [`quiet_corefile`], applied through `client`.
///
/// # Errors
/// When `kubeadm` in the node cannot print them, or the API server refuses one.
pub(super) async fn install(cluster: &str, client: &Client, deadline: Duration) -> Result<()> {
    let node = format!("{cluster}-control-plane");
    let printed = kind::run(
        "docker",
        &[
            "exec",
            &node,
            "kubeadm",
            "init",
            "phase",
            "addon",
            "coredns",
            "--print-manifest",
            "--config",
            "/kind/kubeadm.conf",
        ],
        deadline,
    )
    .await?;
    for obj in dns_objects(&printed)? {
        api::within(
            "install the cluster's DNS",
            deadline,
            api::apply(client, "kube-system", &obj),
        )
        .await?;
    }
    Ok(())
}

/// kubeadm's printed CoreDNS objects as the lab applies them: the Corefile made quiet, and without the
/// `resourceVersion: "0"` kubeadm gives its Service (for its own create-or-update).
///
/// # Errors
/// When the text is not Kubernetes objects, or has no CoreDNS Deployment.
pub fn dns_objects(printed: &str) -> Result<Vec<DynamicObject>> {
    let mut objects = manifests::parse(printed)?;
    for o in &mut objects {
        o.metadata.resource_version = None;
        if let Some(corefile) = o.data.pointer_mut("/data/Corefile")
            && let Some(quiet) = corefile.as_str().and_then(quiet_corefile)
        {
            *corefile = serde_json::Value::String(quiet);
        }
    }
    let deployment = objects
        .iter()
        .any(|o| o.types.as_ref().is_some_and(|t| t.kind == "Deployment"));
    if !deployment {
        return Err(RuntimeError::Other(
            "kubeadm printed no CoreDNS Deployment for the lab's cluster".into(),
        ));
    }
    Ok(objects)
}

/// How long a CoreDNS pod of the lab's new cluster may run without being Ready before it is replaced.
/// Measured on 2 cores: a healthy one was Ready 9–10 s after it was made, a stalled one 35–40 s.
const DNS_STALLED: Duration = Duration::from_secs(12);
/// How long the lab watches the new cluster's DNS at most.
const DNS_WATCH: Duration = Duration::from_secs(90);

/// Replaces a CoreDNS pod of the lab's own new kind cluster that has run [`DNS_STALLED`] without becoming
/// Ready, once.
///
/// CoreDNS reaches the API server through the `kubernetes` Service. When its first connection goes out
/// before kube-proxy has written that Service's rule, the packet is never translated and CoreDNS waits
/// out the whole connect timeout: measured on a 2-core machine, it logged "waiting for Kubernetes API"
/// for 33 s, and the database's standby, which looks up the primary by name, was Ready 35 s into
/// `deploy database`. A pod made again by its Deployment a few seconds later finds the rule written.
/// Returns once every CoreDNS pod is Ready, or after [`DNS_WATCH`]; it never fails `lab up` (the steps
/// that need the DNS wait for it with their own deadlines).
pub(super) async fn unstick(client: &Client, progress: &dyn Progress) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let list = ListParams::default().labels(DNS_PODS);
    let started = tokio::time::Instant::now();
    let mut replaced = std::collections::BTreeSet::new();
    while started.elapsed() < DNS_WATCH {
        if let Ok(Ok(found)) = tokio::time::timeout(Duration::from_secs(5), pods.list(&list)).await {
            let mut all_ready = !found.items.is_empty();
            for p in &found.items {
                let name = p.metadata.name.clone().unwrap_or_default();
                let status = p.status.as_ref();
                let ready = crate::status::pod_ready(p);
                all_ready &= ready;
                // How long its container has run, by its start time (the nodes are containers of this
                // machine: one clock); a pod whose container does not run is left to its kubelet.
                let started_at = status
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|cs| cs.first()?.state.as_ref()?.running.as_ref()?.started_at.clone());
                let (false, Some(t), None) = (ready, started_at, &p.metadata.deletion_timestamp) else {
                    continue;
                };
                let ms = k8s_openapi::jiff::Timestamp::now().as_millisecond() - t.0.as_millisecond();
                let ran = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
                if ran >= DNS_STALLED && replaced.insert(name.clone()) {
                    progress.note(&format!(
                        "the cluster's DNS pod {name} has run {} s without being Ready: replacing it (a CoreDNS \
                         whose first call to the API server went out before kube-proxy wrote the Service's \
                         rule waits about 30 s)",
                        ran.as_secs()
                    ));
                    if let Err(e) = pods.delete(&name, &DeleteParams::default()).await {
                        tracing::debug!("deleting {name}: {e}");
                    }
                }
            }
            if all_ready {
                return;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::{dns_objects, quiet_corefile};

    /// What `kubeadm init phase addon coredns --print-manifest` printed in a node of the lab's cluster
    /// (Kubernetes 1.34.4, Service network 198.51.100.128/25).
    const PRINTED: &str = include_str!("../../testdata/kubeadm-v1.34-coredns.yaml");

    #[test]
    fn kubeadms_objects_are_applied_with_the_quiet_corefile() {
        let objects = dns_objects(PRINTED).unwrap();
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o.types.as_ref().unwrap().kind.as_str())
            .collect();
        assert_eq!(
            kinds,
            [
                "Deployment",
                "ConfigMap",
                "Service",
                "ClusterRole",
                "ClusterRoleBinding",
                "ServiceAccount"
            ]
        );
        for o in &objects {
            assert!(o.metadata.resource_version.is_none(), "{:?}", o.metadata.name);
            crate::manifests::api_resource(o).expect("a kind the lab applies");
        }
        let corefile = objects[1].data["data"]["Corefile"].as_str().unwrap();
        assert!(corefile.contains("max_fails 0"), "{corefile}");
        assert!(!corefile.lines().any(|l| l.trim() == "loop"), "{corefile}");
        // The address kubeadm gives the kubelets: the tenth of the Service network.
        assert_eq!(objects[2].data["spec"]["clusterIP"], "198.51.100.138");
        assert!(dns_objects("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n").is_err());
    }

    /// kubeadm's Corefile of Kubernetes 1.34, as the lab's kind cluster gets it.
    const KUBEADM: &str = ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    \
        kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       \
        ttl 30\n    }\n    prometheus :9153\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    \
        cache 30 {\n       disable success cluster.local\n       disable denial cluster.local\n    }\n    loop\n    reload\n    \
        loadbalance\n}\n";

    #[test]
    fn kubeadms_corefile_loses_the_loop_probe_and_the_upstream_health_check() {
        let q = quiet_corefile(KUBEADM).expect("changed");
        assert!(!q.lines().any(|l| l.trim() == "loop"), "{q}");
        assert!(
            q.contains(
                "    forward . /etc/resolv.conf {\n       max_fails 0\n       max_concurrent 1000\n    }\n"
            ),
            "{q}"
        );
        // Everything else as it was, the ending newline too.
        let rest: Vec<&str> = KUBEADM.lines().filter(|l| l.trim() != "loop").collect();
        let kept: Vec<&str> = q.lines().filter(|l| l.trim() != "max_fails 0").collect();
        assert_eq!(kept, rest);
        assert!(q.ends_with("}\n"));
    }

    #[test]
    fn a_quiet_corefile_is_left_as_it_is() {
        let q = quiet_corefile(KUBEADM).unwrap();
        assert_eq!(quiet_corefile(&q), None);
        assert_eq!(
            quiet_corefile(".:53 {\n    errors\n}\n"),
            None,
            "no forward line: nothing to quiet"
        );
    }

    #[test]
    fn a_forward_line_without_a_block_gets_one() {
        let q = quiet_corefile(".:53 {\n    forward . 192.0.2.53\n    cache 30\n}").unwrap();
        assert_eq!(
            q,
            ".:53 {\n    forward . 192.0.2.53 {\n       max_fails 0\n    }\n    cache 30\n}"
        );
    }
}
