//! The counted GPUs a lab advertises on nodes that have no device plugin: added to the nodes' capacity
//! for `lab up` (shared out across a lab's own multi-node cluster) and withdrawn by `lab down`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use super::api;
use lab_runtime::{Result, RuntimeError};

/// How `gpus` are shared by `nodes` nodes: as evenly as they go, the first nodes taking the remainder.
pub fn split_gpus(gpus: u32, nodes: usize) -> Vec<u32> {
    let n = u32::try_from(nodes.max(1)).unwrap_or(u32::MAX);
    (0..n).map(|i| gpus / n + u32::from(i < gpus % n)).collect()
}

/// Adds `gpus` of `resource` to every node's capacity and allocatable, and waits until the nodes offer
/// them. (The kubelet copies capacity to allocatable only at its next node status update, every 10 s by
/// default; it then writes the same figure over the lab's.) With `split` the GPUs are shared out across
/// the nodes instead (a lab's own multi-node cluster), and the control plane's `NoSchedule` taint is
/// lifted so it runs ranks too.
/// Returns the nodes patched.
///
/// # Errors
/// When nodes cannot be listed or patched, or allocatable does not follow in time.
pub async fn advertise(
    client: &Client,
    resource: &str,
    gpus: u32,
    split: bool,
    deadline: Duration,
) -> Result<Vec<String>> {
    let list = api::list_nodes(client, deadline).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut names: Vec<String> = list.iter().filter_map(|n| n.metadata.name.clone()).collect();
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
        let n = share.to_string();
        let patch =
            serde_json::json!({ "status": { "capacity": { resource: n }, "allocatable": { resource: n } } });
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
        for n in &list {
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

/// Removes the GPU resource the lab advertised from `nodes` (a node that is gone is skipped).
///
/// # Errors
/// When the API server refuses a patch.
pub async fn withdraw(client: &Client, resource: &str, nodes: &[String], deadline: Duration) -> Result<()> {
    let api_nodes: Api<Node> = Api::all(client.clone());
    for name in nodes {
        let patch = serde_json::json!({ "status": { "capacity": { resource: null }, "allocatable": { resource: null } } });
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
