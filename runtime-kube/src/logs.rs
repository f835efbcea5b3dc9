//! `lab logs` and `lab version` on Kubernetes: a pod's container log streamed from the API server (the
//! pod named as `lab status` names it), and the versions of the API server, the kind CLI and the
//! SeaweedFS in the lab's image.

use std::collections::BTreeMap;

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;

use super::status::role_of;
use super::{ClusterMode, KubeRuntime, api};
use lab_runtime::logs::{LogLines, LogRequest, unknown_component};
use lab_runtime::{Result, RuntimeError};

/// The annotation naming the container `kubectl logs` reads by default.
const DEFAULT_CONTAINER: &str = "kubectl.kubernetes.io/default-container";

/// The container of `pod` whose log is the component's: the one the pod names as its default, else its
/// first.
fn main_container(pod: &Pod) -> Option<String> {
    if let Some(c) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULT_CONTAINER))
    {
        return Some(c.clone());
    }
    pod.spec.as_ref()?.containers.first().map(|c| c.name.clone())
}

impl KubeRuntime {
    /// The lab's pods by the names `lab status` gives them.
    async fn pods_by_component(&self) -> Result<BTreeMap<String, Pod>> {
        Ok(self
            .lab_pods()
            .await?
            .into_iter()
            .filter_map(|p| Some((role_of(&p)?.2, p)))
            .collect())
    }

    pub(super) async fn components(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self.pods_by_component().await?.into_keys().collect();
        names.sort_by_key(|n| lab_model::names::natural_key(n));
        Ok(names)
    }

    pub(super) async fn pod_logs(&self, component: &str, request: LogRequest) -> Result<LogLines> {
        let pods = self.pods_by_component().await?;
        let Some(pod) = pods.get(component) else {
            let mut known: Vec<String> = pods.into_keys().collect();
            known.sort_by_key(|n| lab_model::names::natural_key(n));
            return Err(unknown_component(component, &self.name, &known));
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let params = LogParams {
            container: main_container(pod),
            follow: request.follow,
            tail_lines: request.tail.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            ..LogParams::default()
        };
        let what = format!("read {name}'s log");
        let reader = api::within(&what, self.rec.request_timeout, async {
            self.pods_api()
                .log_stream(&name, &params)
                .await
                .map_err(|e| api::kube_err(what.clone(), e))
        })
        .await?;
        Ok(reader
            .lines()
            .map_err(move |e| RuntimeError::io(format!("read {name}'s log"), e))
            .boxed())
    }

    pub(super) async fn part_versions(&self) -> lab_model::version::Parts {
        let kubernetes = tokio::time::timeout(self.rec.request_timeout, self.client.apiserver_version())
            .await
            .ok()
            .and_then(|r| r.ok())
            .map(|i| i.git_version);
        let seaweedfs = self
            .exec_weed_version()
            .await
            .ok()
            .and_then(|out| lab_model::version::weed_version(&out));
        let kind = match self.rec.mode {
            ClusterMode::Kind => super::kind::cli_version().await,
            ClusterMode::Existing => None,
        };
        lab_model::version::Parts {
            seaweedfs,
            kind,
            kubernetes,
        }
    }
}
