//! Talking to the API server: server-side apply, deletes, waits on conditions with deadlines, requests
//! through the pod proxy, and turning API errors into errors that say what to do next.

use std::future::Future;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::manifests;
use lab_runtime::{Result, RuntimeError};

/// The field manager of every server-side apply the lab makes.
pub const FIELD_MANAGER: &str = "straggler-lab";

/// Maps a failed API request to a [`RuntimeError::KubeApi`] that says what to do next.
pub fn kube_err(what: impl Into<String>, e: kube::Error) -> RuntimeError {
    let what = what.into();
    let (code, hint) = match &e {
        kube::Error::Api(s) => {
            let hint = match s.code {
                401 => "the kubeconfig's credentials were refused: refresh them (log in again) and retry"
                    .to_string(),
                403 => format!(
                    "forbidden ({}): the kubeconfig's user lacks the RBAC permission for this; grant it, or use a \
                     --context with more rights",
                    s.message
                ),
                404 => format!(
                    "not found ({}): the lab's objects may have been deleted; run `lab down` and `lab up`",
                    s.message
                ),
                409 => format!(
                    "conflict ({}): something else changed the object at the same time; run the command again",
                    s.message
                ),
                422 => format!("the API server refused the change as invalid: {}", s.message),
                _ => format!("{} ({})", s.message, s.reason),
            };
            (Some(s.code), hint)
        }
        other => (
            None,
            format!(
                "the API server could not be reached ({other}): check that the cluster runs and the kubeconfig points at it"
            ),
        ),
    };
    RuntimeError::KubeApi {
        what,
        code,
        hint,
        source: Box::new(e),
    }
}

/// The HTTP status of a failed API request, if the API server answered.
pub fn status_code(e: &RuntimeError) -> Option<u16> {
    match e {
        RuntimeError::KubeApi { code, .. } => *code,
        _ => None,
    }
}

/// Runs `fut` with a deadline; past it, [`RuntimeError::Timeout`] naming `what`.
///
/// # Errors
/// Whatever `fut` returns, or the timeout.
pub async fn within<T>(what: &str, deadline: Duration, fut: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(r) => r,
        Err(_) => Err(RuntimeError::Timeout {
            what: what.to_string(),
            seconds: deadline.as_secs_f64(),
        }),
    }
}

/// The cluster's nodes, listed within `deadline`.
///
/// # Errors
/// When the API server refuses (403 where the kubeconfig may not list nodes: [`status_code`]) or does not
/// answer in time.
pub async fn list_nodes(
    client: &Client,
    deadline: Duration,
) -> Result<Vec<k8s_openapi::api::core::v1::Node>> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    within("list nodes", deadline, async {
        nodes
            .list(&kube::api::ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| kube_err("list nodes", e))
    })
    .await
}

/// Waits until the cluster has at least `count` nodes, looking 4 times a second, for at most `deadline`.
/// A worker that `kind create` has just joined registers its Node a moment after the join returns.
///
/// # Errors
/// When the nodes cannot be listed, or [`RuntimeError::Timeout`] saying how many registered.
pub async fn wait_for_nodes(client: &Client, count: usize, deadline: Duration) -> Result<()> {
    let started = tokio::time::Instant::now();
    loop {
        let found = list_nodes(client, deadline).await?.len();
        if found >= count {
            return Ok(());
        }
        if started.elapsed() >= deadline {
            return Err(RuntimeError::Timeout {
                what: format!("{count} nodes to register ({found} did)"),
                seconds: deadline.as_secs_f64(),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Server-side applies `obj` (forcing ownership of the fields it names, as the lab owns its objects).
///
/// # Errors
/// When the kind is unknown or the API server refuses the apply.
pub async fn apply(client: &Client, namespace: &str, obj: &DynamicObject) -> Result<()> {
    let (ar, namespaced) = manifests::api_resource(obj)?;
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), namespace, &ar)
    } else {
        Api::all_with(client.clone(), &ar)
    };
    // Strict: a field the API server does not know is a mistake in the manifests, not something to drop.
    let pp = PatchParams::apply(FIELD_MANAGER).force().validation_strict();
    api.patch(&name, &pp, &Patch::Apply(obj))
        .await
        .map_err(|e| kube_err(format!("apply {} {name}", ar.kind), e))?;
    Ok(())
}

/// Applies every object in order.
///
/// # Errors
/// The first apply that fails.
pub async fn apply_all(client: &Client, namespace: &str, objects: &[DynamicObject]) -> Result<()> {
    for obj in objects {
        apply(client, namespace, obj).await?;
    }
    Ok(())
}

/// Deletes `name`, treating "already gone" as done. Returns whether it existed.
///
/// # Errors
/// When the API server refuses the delete.
pub async fn delete_if_exists<K>(api: &Api<K>, name: &str, what: &str) -> Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let dp = DeleteParams::background();
    match api.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(kube_err(format!("delete {what}"), e)),
    }
}

/// Waits until `cond` holds for object `name`, for at most `deadline`.
///
/// A watch that breaks (a connection reset, an API server restart) is started again until the deadline;
/// an answer that will not change by waiting (forbidden, not found as a resource) ends the wait at once.
///
/// # Errors
/// [`RuntimeError::Timeout`] naming `what`, or the watch being refused.
pub async fn wait_for<K>(
    api: Api<K>,
    name: &str,
    what: &str,
    deadline: Duration,
    cond: impl Condition<K> + Clone,
) -> Result<Option<K>>
where
    K: Clone + std::fmt::Debug + Send + DeserializeOwned + Resource + 'static,
{
    use kube::runtime::wait::Error as WaitError;
    use kube::runtime::watcher::Error as WatchError;
    let fut = async {
        loop {
            let e = match await_condition(api.clone(), name, cond.clone()).await {
                Ok(obj) => return Ok(obj),
                Err(WaitError::ProbeFailed(e)) => e,
            };
            let fatal = match &e {
                WatchError::InitialListFailed(kube::Error::Api(s))
                | WatchError::WatchStartFailed(kube::Error::Api(s))
                | WatchError::WatchFailed(kube::Error::Api(s)) => matches!(s.code, 401 | 403 | 404 | 405),
                _ => false,
            };
            if fatal {
                return Err(match e {
                    WatchError::InitialListFailed(e)
                    | WatchError::WatchStartFailed(e)
                    | WatchError::WatchFailed(e) => kube_err(format!("watch {what}"), e),
                    other => RuntimeError::Kube(format!("watch {what}: {other}")),
                });
            }
            tracing::debug!(what, error = %e, "watch broke; watching again");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    within(what, deadline, fut).await
}

/// Sends a request through the API server (a pod-proxy path, for example) and returns the body text.
///
/// # Errors
/// When the request fails or does not finish within `deadline`.
pub async fn request_text(
    client: &Client,
    req: http::Request<Vec<u8>>,
    what: &str,
    deadline: Duration,
) -> Result<String> {
    within(what, deadline, async {
        client
            .request_text(req)
            .await
            .map_err(|e| kube_err(what.to_string(), e))
    })
    .await
}

/// The pod-proxy path to `path` on port `port` of pod `pod`.
pub fn pod_proxy_path(namespace: &str, pod: &str, port: u16, path: &str) -> String {
    format!(
        "/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/{}",
        path.trim_start_matches('/')
    )
}
