//! `lab up` and `lab down` as the lab's life sees them: the runtime's own steps, then the job's baseline
//! (learned, kept, and the lab torn down again if it never comes), and on the way down the faults cleared
//! before the runtime removes the lab.

use std::sync::Arc;
use std::time::Duration;

use lab_model::status::{LabStatus, RuntimeKind};
use lab_runtime::kube::{self, KubeOptions};
use lab_runtime::lifecycle::step;
use lab_runtime::local::{self, LocalOptions};
use lab_runtime::{Progress, Runtime, UpOptions, open};
use lab_telemetry::LearnedBaseline;

use crate::Lab;
use crate::error::{Result, SessionError};

/// Which runtime a caller asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requested {
    /// Kind where Docker and kind are usable, else local.
    Auto,
    Local,
    Kind,
    /// The existing cluster a kubeconfig names.
    Cluster,
}

/// Resolves `requested` to a runtime and the reason, as `lab up` says it.
pub async fn choose(requested: Requested) -> (RuntimeKind, String) {
    match requested {
        Requested::Cluster => (
            RuntimeKind::Cluster,
            "--kubeconfig names an existing cluster".to_string(),
        ),
        Requested::Local => (RuntimeKind::Local, "--runtime local".to_string()),
        Requested::Kind => (RuntimeKind::Kind, "--runtime kind".to_string()),
        Requested::Auto => {
            let c = open::choose().await;
            (c.runtime, c.reason)
        }
    }
}

/// Where the lab runs, with that runtime's own options.
#[derive(Debug, Clone)]
pub enum Place {
    Local(LocalOptions),
    /// A kind cluster or an existing one ([`KubeOptions::mode`]).
    Kube(Box<KubeOptions>),
}

impl Place {
    /// The defaults of `kind`, as `lab up` with no flags has them.
    pub fn defaults(kind: RuntimeKind) -> Place {
        match kind {
            RuntimeKind::Local => Place::Local(LocalOptions::default()),
            RuntimeKind::Kind => Place::Kube(Box::new(KubeOptions::kind())),
            RuntimeKind::Cluster => Place::Kube(Box::new(KubeOptions::existing(None))),
        }
    }
}

/// Everything `lab up` needs.
#[derive(Debug, Clone)]
pub struct UpPlan {
    pub options: UpOptions,
    pub place: Place,
    /// Rule files the lab evaluates beside its own (`--rules`).
    pub rules: Vec<std::path::PathBuf>,
}

/// A lab that came up: its runtime, the baseline it learned and its status then.
#[derive(Debug)]
pub struct Up {
    pub lab: Lab,
    pub baseline: LearnedBaseline,
    pub status: LabStatus,
}

/// Brings the lab up: the runtime's steps, then "wait for training baseline". A baseline that never
/// comes takes the lab down again unless [`UpOptions::retain`].
///
/// # Errors
/// The failed step's error; [`SessionError::Rules`], before anything starts, when a rule file cannot be
/// evaluated; [`SessionError::NoBaseline`] when training never settles.
pub async fn up(plan: &UpPlan, progress: &dyn Progress) -> Result<Up> {
    let opts = &plan.options;
    let name = opts.name.as_str();
    // The rule files first: one the lab cannot evaluate is refused before anything starts.
    let (rules, kept) = crate::rules::load(&plan.rules)?;
    let rt: Arc<dyn Runtime> = match &plan.place {
        Place::Local(lo) => Arc::new(local::up(opts, lo, progress).await?),
        Place::Kube(ko) => Arc::new(kube::up(opts, ko, progress).await?),
    };
    let lab = Lab::with_runtime(name, rt).with_rules(rules);
    if let Err(e) = crate::rules::save(name, &kept) {
        if !opts.retain {
            let _ = open::down(name, &lab_runtime::lifecycle::Quiet).await;
        }
        return Err(e);
    }
    let learned = step(progress, "wait for training baseline", async {
        let mut d = lab.driver();
        d.collector_mut().reset_baseline();
        d.learn_baseline(opts.baseline_timeout)
            .await
            .map_err(|seen| SessionError::NoBaseline {
                after: opts.baseline_timeout,
                seen: Box::new(seen),
                retained: opts.retain,
            })
    })
    .await;
    let baseline = match learned {
        Ok(b) => b,
        Err(e) => {
            if !opts.retain {
                let _ = open::down(name, &lab_runtime::lifecycle::Quiet).await;
            }
            return Err(e);
        }
    };
    crate::baseline::save_baseline(name, &baseline)?;
    let status = lab.runtime.status().await?;
    Ok(Up {
        lab,
        baseline,
        status,
    })
}

/// How long `lab down` waits for the faults to clear.
const CLEAR_DEADLINE: Duration = Duration::from_secs(120);

/// Takes the lab down; on Kubernetes its faults are cleared first. Returns whether a lab was running.
///
/// # Errors
/// [`SessionError::Runtime`] when the runtime cannot remove what it created.
pub async fn down(name: &str, progress: &dyn Progress) -> Result<bool> {
    // The watcher first, so that nothing reads the lab while it is taken apart.
    if crate::live::running(name) {
        let _ = step(progress, "stop the watcher", async {
            crate::live::stop(name);
            Ok::<(), SessionError>(())
        })
        .await;
    }
    // On Kubernetes a fault outlives the lab's objects only if the cluster does: clear them first. A local
    // lab's faults live in its own processes and cgroups, which down removes.
    if let Ok(Some(rec)) = lab_runtime::state::read_record(name)
        && rec.runtime != RuntimeKind::Local
        && let Ok(lab) = Lab::open(name).await
    {
        let _ = step(progress, "clear faults", async {
            tokio::time::timeout(CLEAR_DEADLINE, lab.clear(crate::guard::Clear::All))
                .await
                .map_err(|_| SessionError::Timeout)?
        })
        .await;
    }
    Ok(open::down(name, progress).await?)
}
