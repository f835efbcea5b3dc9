//! `lab version` and the versions every drill report names: the `lab` build (given by the binary, which
//! knows its own commit) and the parts it runs, read from the lab's runtime, or, without a lab, from what
//! `lab up` would use here.

use lab_model::status::RuntimeKind;
use lab_model::version::Parts;
use serde::Serialize;

use crate::Lab;

/// The build of the `lab` binary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Build {
    /// The workspace version, e.g. `0.1.0`.
    pub version: &'static str,
    /// The short git commit it was built from, or `unknown` (built outside a git checkout).
    pub commit: &'static str,
}

/// What ran, in one value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Versions {
    /// The `lab` version.
    pub lab: &'static str,
    pub commit: &'static str,
    /// The runtime of the lab the parts were read from; `None` when no lab was asked (the parts are
    /// what `lab up` would use here).
    pub runtime: Option<RuntimeKind>,
    #[serde(flatten)]
    pub parts: Parts,
}

/// The versions of `lab` and of what the lab runs.
pub async fn of_lab(build: &Build, lab: &Lab) -> Versions {
    Versions {
        lab: build.version,
        commit: build.commit,
        runtime: Some(lab.runtime().kind()),
        parts: lab.runtime().versions().await,
    }
}

/// The versions of `lab` and of the parts `lab up` would use on this machine: the `weed` it finds, and
/// the kind CLI where one is installed; no Kubernetes without a cluster.
pub async fn here(build: &Build) -> Versions {
    let seaweedfs = match lab_runtime_local::find_weed(None) {
        Ok(weed) => lab_runtime_local::weed_version(&weed).await,
        Err(_) => None,
    };
    Versions {
        lab: build.version,
        commit: build.commit,
        runtime: None,
        parts: Parts {
            seaweedfs,
            kind: lab_runtime_kube::kind::cli_version().await,
            kubernetes: None,
        },
    }
}

/// The versions for `lab version --name NAME`: of the running lab when there is one that answers, else
/// of this machine.
pub async fn current(build: &Build, name: &str) -> Versions {
    if lab_runtime::state::read_record(name).ok().flatten().is_some()
        && let Ok(lab) = Lab::open(name).await
    {
        return of_lab(build, &lab).await;
    }
    here(build).await
}
