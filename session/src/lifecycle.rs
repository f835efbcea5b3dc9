//! `lab up` and `lab down` as the lab's life sees them: the runtime's own steps, then the job's baseline
//! (learned, kept, and the lab torn down again if it never comes), and on the way down the faults cleared
//! before the runtime removes the lab.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::open;
use lab_model::status::{LabStatus, RuntimeKind};
use lab_runtime::lifecycle::step;
use lab_runtime::{Progress, Runtime, UpOptions};
use lab_runtime_kube::{self as kube, DelayChoice, KubeOptions};
use lab_runtime_local::{self as local, LocalOptions};
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

/// Where `lab up` runs and how, as its flags say it; [`plan`] maps it onto the chosen runtime's options.
/// A setting of one runtime is left alone by the others (`port_base` is the local runtime's, the rest
/// Kubernetes').
#[derive(Debug, Clone)]
pub struct PlaceSettings {
    /// The runtime asked for; a `kubeconfig` asks for the existing cluster it names instead.
    pub runtime: Requested,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub namespace: Option<String>,
    pub gpu_resource: String,
    /// `None`: the runtime's default (on for kind, off for an existing cluster).
    pub advertise_gpus: Option<bool>,
    pub image: Option<String>,
    pub pull_policy: Option<String>,
    pub delay: DelayChoice,
    /// `None`: the runtime's default (on for kind, off for an existing cluster).
    pub monitoring: Option<bool>,
    pub node_image: Option<String>,
    /// Build the lab image from the Dockerfile (kind); off uses the image already in Docker.
    pub build_image: bool,
    /// kind's nodes; any other runtime refuses more than one.
    pub nodes: u32,
    pub wait_timeout: Duration,
    /// The local runtime's first port.
    pub port_base: Option<u16>,
    /// Rule files the lab evaluates beside its own (`--rules`).
    pub rules: Vec<PathBuf>,
}

impl Default for PlaceSettings {
    fn default() -> Self {
        let kind = KubeOptions::kind();
        PlaceSettings {
            runtime: Requested::Auto,
            kubeconfig: None,
            context: None,
            namespace: None,
            gpu_resource: kind.gpu_resource,
            advertise_gpus: None,
            image: None,
            pull_policy: None,
            delay: kind.delay,
            monitoring: None,
            node_image: None,
            build_image: true,
            nodes: kind.nodes,
            wait_timeout: kind.wait_timeout,
            port_base: None,
            rules: Vec::new(),
        }
    }
}

/// A runtime chosen for `lab up`, with why.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: UpPlan,
    pub kind: RuntimeKind,
    /// Why this runtime, as `lab up` says it (`--runtime local`, `Docker is reachable and …`).
    pub reason: String,
}

/// Chooses the runtime `settings` ask for and maps them onto its options.
///
/// # Errors
/// [`SessionError::Invalid`] when a setting does not fit the chosen runtime (more than one node off kind);
/// nothing is created then.
pub async fn plan(options: UpOptions, settings: &PlaceSettings) -> Result<Planned> {
    let s = settings;
    let (kind, reason) = choose(if s.kubeconfig.is_some() {
        Requested::Cluster
    } else {
        s.runtime
    })
    .await;
    if s.nodes != 1 && kind != RuntimeKind::Kind {
        return Err(SessionError::Invalid(format!(
            "--nodes is for the kind runtime (the {kind} runtime runs on the nodes it has): add --runtime kind"
        )));
    }
    let place = match kind {
        RuntimeKind::Local => Place::Local(LocalOptions {
            port_base: s.port_base,
            ..LocalOptions::default()
        }),
        RuntimeKind::Kind | RuntimeKind::Cluster => {
            let mut ko = if kind == RuntimeKind::Kind {
                KubeOptions::kind()
            } else {
                KubeOptions::existing(s.kubeconfig.clone())
            };
            ko.context = s.context.clone();
            ko.namespace = s.namespace.clone();
            ko.gpu_resource = s.gpu_resource.clone();
            if let Some(adv) = s.advertise_gpus {
                ko.advertise_gpus = adv;
            }
            if let Some(i) = &s.image {
                ko.image = i.clone();
            }
            if let Some(p) = &s.pull_policy {
                ko.pull_policy = p.clone();
            }
            ko.delay = s.delay;
            if let Some(m) = s.monitoring {
                ko.monitoring = m;
            }
            if let Some(n) = &s.node_image {
                ko.node_image = n.clone();
            }
            if !s.build_image {
                ko.build_image = false;
            }
            ko.nodes = s.nodes;
            ko.wait_timeout = s.wait_timeout;
            Place::Kube(Box::new(ko))
        }
    };
    Ok(Planned {
        plan: UpPlan {
            options,
            place,
            rules: s.rules.clone(),
            watcher: None,
        },
        kind,
        reason,
    })
}

/// How to start the lab's watcher (the CLI's own `lab __watch`): a program and its arguments.
#[derive(Debug, Clone)]
pub struct Watcher {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// Everything `lab up` needs.
#[derive(Debug, Clone)]
pub struct UpPlan {
    pub options: UpOptions,
    pub place: Place,
    /// Rule files the lab evaluates beside its own (`--rules`).
    pub rules: Vec<std::path::PathBuf>,
    /// Started once the baseline is learned, so the lab watches itself from then on.
    pub watcher: Option<Watcher>,
}

/// A lab that came up: its runtime, the baseline it learned and its status then.
#[derive(Debug)]
pub struct Up {
    pub lab: Lab,
    pub baseline: LearnedBaseline,
    pub status: LabStatus,
    /// The watcher's pid, or why it did not start (the lab is up all the same; `lab status` then watches
    /// for itself each time). `None` when the plan had no watcher.
    pub watcher: Option<Result<u32>>,
}

/// Whether a lab named `name` is recorded as running.
///
/// # Errors
/// [`SessionError::Runtime`] for an invalid name or a record that cannot be read.
pub fn is_running(name: &str) -> Result<bool> {
    Ok(lab_runtime::state::read_record(name)?.is_some())
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
    // The lab watches itself from now on: `lab status` reads what the watcher keeps.
    let watcher = plan.watcher.as_ref().map(|w| {
        let args: Vec<&str> = w.args.iter().map(String::as_str).collect();
        crate::live::start(name, &w.program, &args)
    });
    Ok(Up {
        lab,
        baseline,
        status,
        watcher,
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
