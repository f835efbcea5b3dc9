//! `lab up` and `lab down`: the flags mapped onto the façade's plan, its result printed.

use crate::exit::Exit;
use anyhow::Context;

use lab_model::status::RuntimeKind;
use lab_runtime::UpOptions;
use lab_runtime::kube::{self, KubeOptions};
use lab_runtime::local::LocalOptions;
use lab_session::lifecycle::{self, Place, Requested, UpPlan};
use serde_json::json;

use crate::cli::{DelayPathArg, RuntimeArg, UpArgs};
use crate::formats;
use crate::out::{self, Steps, outln};

/// The runtime a `--runtime` flag asks for.
pub fn requested(r: RuntimeArg) -> Requested {
    match r {
        RuntimeArg::Auto => Requested::Auto,
        RuntimeArg::Local => Requested::Local,
        RuntimeArg::Kind => Requested::Kind,
    }
}

pub async fn up(name: &str, a: UpArgs) -> anyhow::Result<Exit> {
    let options = UpOptions {
        name: name.to_string(),
        ranks: a.ranks,
        storage_servers: a.storage_servers,
        gpus: a.gpus,
        cpu: a.cpu,
        seed: a.seed,
        watchdog: a.watchdog,
        retain: a.retain,
        baseline_timeout: a.baseline_timeout,
        database: a.database,
    };
    let (kind, reason) = lifecycle::choose(if a.kubeconfig.is_some() {
        Requested::Cluster
    } else {
        requested(a.runtime)
    })
    .await;
    if a.nodes != 1 && kind != RuntimeKind::Kind {
        anyhow::bail!(
            "--nodes is for the kind runtime (the {kind} runtime runs on the nodes it has): add --runtime kind"
        );
    }
    let place = match kind {
        RuntimeKind::Local => Place::Local(LocalOptions {
            port_base: a.port_base,
            ..LocalOptions::default()
        }),
        RuntimeKind::Kind | RuntimeKind::Cluster => {
            let mut ko = if kind == RuntimeKind::Kind {
                KubeOptions::kind()
            } else {
                KubeOptions::existing(a.kubeconfig.clone())
            };
            ko.context = a.context.clone();
            ko.namespace = a.namespace.clone();
            ko.gpu_resource = a.gpu_resource.clone();
            if let Some(adv) = a.advertise_gpus {
                ko.advertise_gpus = adv;
            }
            if let Some(i) = &a.image {
                ko.image = i.clone();
            }
            if let Some(p) = &a.pull_policy {
                ko.pull_policy = p.clone();
            }
            ko.delay = match a.delay_path {
                DelayPathArg::Auto => kube::DelayChoice::Auto,
                DelayPathArg::Netem => kube::DelayChoice::Netem,
                DelayPathArg::Proxy => kube::DelayChoice::Proxy,
            };
            if let Some(m) = a.monitoring {
                ko.monitoring = m;
            }
            if let Some(n) = &a.node_image {
                ko.node_image = n.clone();
            }
            if a.no_build {
                ko.build_image = false;
            }
            ko.nodes = a.nodes;
            ko.wait_timeout = a.wait_timeout;
            Place::Kube(Box::new(ko))
        }
    };
    let plan = UpPlan {
        options,
        place,
        rules: a.rules,
    };
    start(&plan, kind, &reason, a.json).await
}

/// Brings the lab of `plan` up on `kind` (chosen for `reason`) and prints the result.
pub async fn start(plan: &UpPlan, kind: RuntimeKind, reason: &str, json: bool) -> anyhow::Result<Exit> {
    let name = plan.options.name.as_str();
    let steps = Steps::new();
    eprintln!("Starting lab {name:?} on the {kind} runtime ({reason})");
    let up = lifecycle::up(plan, &steps).await?;
    // The lab watches itself from now on: `lab status` reads what the watcher keeps.
    let exe = std::env::current_exe().context("cannot find the lab binary to start the watcher")?;
    let watcher = lab_session::live::start(name, &exe, &["__watch", "--name", name]);
    if let Err(e) = &watcher {
        eprintln!(
            "warning: the lab's watcher did not start ({e}); `lab status` will watch for 6 s each time"
        );
    }
    let (baseline, st) = (&up.baseline, &up.status);
    let (ready, total) = st.ranks_ready();
    if json {
        out::json(
            formats::UP,
            &json!({
                "name": name,
                "runtime": kind,
                "baseline": baseline,
                "status": st,
                "rules": up.lab.rules().origins(),
            }),
        )?;
    } else {
        outln!(
            "Lab {name:?} is up on the {kind} runtime: {ready}/{total} ranks Ready, training at {:.0} samples/s (step {:.0} ms).",
            baseline.job.samples_per_s,
            baseline.job.step_seconds * 1000.0
        );
        for n in &st.notes {
            outln!("note: {n}");
        }
        let rules = up.lab.rules();
        for file in rules.origins().into_iter().skip(1) {
            let (alerts, records) = rules.names_from(file);
            println!(
                "Rules of {file} evaluated beside the lab's: {} alert(s) {}, {} recorded series.",
                alerts.len(),
                alerts.join(", "),
                records.len()
            );
        }
        let flag = out::name_flag(name);
        outln!(
            "Next: lab console{flag} · lab fault inject slow-storage{flag} · lab status{flag} · lab down{flag}"
        );
    }
    Ok(Exit::Passed)
}

pub async fn down(name: &str, json: bool) -> anyhow::Result<Exit> {
    let steps = Steps::new();
    let existed = lifecycle::down(name, &steps).await?;
    if json {
        out::json(formats::DOWN, &json!({ "name": name, "stopped": existed }))?;
    } else if existed {
        outln!("Lab {name:?} is down; nothing of it is left.");
    } else {
        outln!("No lab named {name:?} is running; nothing to stop.");
    }
    Ok(Exit::Passed)
}
