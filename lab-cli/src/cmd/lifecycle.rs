//! `lab up` and `lab down`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use lab_model::status::RuntimeKind;
use lab_runtime::kube::{self, KubeOptions};
use lab_runtime::lifecycle::step;
use lab_runtime::local::{self, LocalOptions};
use lab_runtime::{Runtime, UpOptions, open};
use serde_json::json;

use crate::cli::{DelayPathArg, RuntimeArg, UpArgs};
use crate::out::{self, Steps};
use crate::session;

pub async fn up(name: &str, a: UpArgs) -> anyhow::Result<ExitCode> {
    let opts = UpOptions {
        name: name.to_string(),
        ranks: a.ranks,
        storage_servers: a.storage_servers,
        gpus: a.gpus,
        cpu: a.cpu,
        seed: a.seed,
        watchdog: a.watchdog,
        retain: a.retain,
        baseline_timeout: a.baseline_timeout,
    };
    let (kind, reason) = if a.kubeconfig.is_some() {
        (
            RuntimeKind::Cluster,
            "--kubeconfig names an existing cluster".to_string(),
        )
    } else {
        match a.runtime {
            RuntimeArg::Local => (RuntimeKind::Local, "--runtime local".to_string()),
            RuntimeArg::Kind => (RuntimeKind::Kind, "--runtime kind".to_string()),
            RuntimeArg::Auto => {
                let c = open::choose().await;
                (c.runtime, c.reason)
            }
        }
    };
    if a.nodes != 1 && kind != RuntimeKind::Kind {
        anyhow::bail!(
            "--nodes is for the kind runtime (the {kind} runtime runs on the nodes it has): add --runtime kind"
        );
    }
    let steps = Steps::new();
    eprintln!("Starting lab {name:?} on the {kind} runtime ({reason})");
    let rt: Arc<dyn Runtime> = match kind {
        RuntimeKind::Local => {
            let lo = LocalOptions {
                port_base: a.port_base,
                ..LocalOptions::default()
            };
            Arc::new(local::up(&opts, &lo, &steps).await?)
        }
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
            Arc::new(kube::up(&opts, &ko, &steps).await?)
        }
    };
    let learned = step(&steps, "wait for training baseline", async {
        let mut d = session::driver(name, rt.clone());
        d.collector_mut().reset_baseline();
        d.learn_baseline(opts.baseline_timeout).await.ok_or_else(|| {
            anyhow::anyhow!(
                "training did not settle into a steady rate within {} s: see `lab status`, and the ranks' logs",
                opts.baseline_timeout.as_secs()
            )
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
    session::save_baseline(name, &baseline)?;
    let st = rt.status().await?;
    let (ready, total) = st.ranks_ready();
    if a.json {
        out::json(&json!({ "name": name, "runtime": kind, "baseline": baseline, "status": st }))?;
    } else {
        println!(
            "Lab {name:?} is up on the {kind} runtime: {ready}/{total} ranks Ready, training at {:.0} samples/s (step {:.0} ms).",
            baseline.job.samples_per_s,
            baseline.job.step_seconds * 1000.0
        );
        for n in &st.notes {
            println!("note: {n}");
        }
        let flag = out::name_flag(name);
        println!(
            "Next: lab console{flag} · lab fault inject slow-storage{flag} · lab status{flag} · lab down{flag}"
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn down(name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let steps = Steps::new();
    // On Kubernetes a fault outlives the lab's objects only if the cluster does: clear them first. A local
    // lab's faults live in its own processes and cgroups, which down removes.
    if let Ok(Some(rec)) = lab_runtime::state::read_record(name)
        && rec.runtime != RuntimeKind::Local
        && let Ok(rt) = open::open(name).await
    {
        let ledger = lab_faults::Ledger::of_lab(name);
        let _ = step(&steps, "clear faults", async {
            tokio::time::timeout(
                Duration::from_secs(120),
                lab_faults::clear_all(rt.as_ref(), &ledger),
            )
            .await
            .context("timed out")?
            .map_err(anyhow::Error::from)
        })
        .await;
    }
    let existed = open::down(name, &steps).await?;
    if json {
        out::json(&json!({ "name": name, "stopped": existed }))?;
    } else if existed {
        println!("Lab {name:?} is down; nothing of it is left.");
    } else {
        println!("No lab named {name:?} is running; nothing to stop.");
    }
    Ok(ExitCode::SUCCESS)
}
