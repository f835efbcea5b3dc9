//! `lab up` and `lab down`: the flags mapped onto the façade's plan, its result printed.

use crate::exit::Exit;
use anyhow::Context;

use lab_session::lifecycle::{self, PlaceSettings, Planned, Requested, Watcher};
use lab_session::{DelayChoice, UpOptions};
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
    let settings = PlaceSettings {
        runtime: requested(a.runtime),
        kubeconfig: a.kubeconfig,
        context: a.context,
        namespace: a.namespace,
        gpu_resource: a.gpu_resource,
        advertise_gpus: a.advertise_gpus,
        image: a.image,
        pull_policy: a.pull_policy,
        delay: match a.delay_path {
            DelayPathArg::Auto => DelayChoice::Auto,
            DelayPathArg::Netem => DelayChoice::Netem,
            DelayPathArg::Proxy => DelayChoice::Proxy,
        },
        monitoring: a.monitoring,
        node_image: a.node_image,
        build_image: !a.no_build,
        nodes: a.nodes,
        wait_timeout: a.wait_timeout,
        port_base: a.port_base,
        rules: a.rules,
    };
    start(lifecycle::plan(options, &settings).await?, a.json).await
}

/// Brings the lab `planned` up, with its watcher, and prints the result.
pub async fn start(planned: Planned, json: bool) -> anyhow::Result<Exit> {
    let Planned {
        mut plan,
        kind,
        reason,
    } = planned;
    let name = plan.options.name.clone();
    let exe = std::env::current_exe().context("cannot find the lab binary to start the watcher")?;
    plan.watcher = Some(Watcher {
        program: exe,
        args: vec!["__watch".into(), "--name".into(), name.clone()],
    });
    let steps = Steps::new();
    eprintln!("Starting lab {name:?} on the {kind} runtime ({reason})");
    let up = lifecycle::up(&plan, &steps).await?;
    if let Some(Err(e)) = &up.watcher {
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
                "steps": steps.finished(),
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
            outln!(
                "Rules of {file} evaluated beside the lab's: {} alert(s) {}, {} recorded series.",
                alerts.len(),
                alerts.join(", "),
                records.len()
            );
        }
        let flag = out::name_flag(&name);
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
        out::json(
            formats::DOWN,
            &json!({ "name": name, "stopped": existed, "steps": steps.finished() }),
        )?;
    } else if existed {
        outln!("Lab {name:?} is down; nothing of it is left.");
    } else {
        outln!("No lab named {name:?} is running; nothing to stop.");
    }
    Ok(Exit::Passed)
}
