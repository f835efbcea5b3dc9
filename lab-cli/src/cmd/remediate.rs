//! Remediation commands: scale, world size, resize, restart, apply, what runs beside a rank, storage drain
//! and undrain.

use crate::exit::Exit;

use lab_session::{ChangeRecord, Lab, Millicores};

use crate::formats;
use crate::out::outln;

fn done(r: lab_session::Result<ChangeRecord>) -> anyhow::Result<Exit> {
    let c = r?;
    outln!("changed: {}", c.line());
    Ok(Exit::Passed)
}

pub async fn scale(name: &str, ranks: u32) -> anyhow::Result<Exit> {
    done(Lab::open(name).await?.scale(ranks).await)
}

pub async fn world_size(name: &str, size: u32) -> anyhow::Result<Exit> {
    done(Lab::open(name).await?.world_size(size).await)
}

pub async fn resize(name: &str, rank: u32, cpu: Millicores) -> anyhow::Result<Exit> {
    done(Lab::open(name).await?.resize(rank, cpu).await)
}

pub async fn restart(name: &str, rank: u32) -> anyhow::Result<Exit> {
    done(Lab::open(name).await?.restart(rank).await)
}

pub async fn apply(name: &str, cpu: Millicores) -> anyhow::Result<Exit> {
    done(Lab::open(name).await?.apply_template(cpu).await)
}

pub async fn procs(name: &str, rank: u32, json: bool) -> anyhow::Result<Exit> {
    let procs = Lab::open(name).await?.rank_processes(rank).await?;
    if json {
        crate::out::json(
            formats::RANK_PROCS,
            &serde_json::json!({ "rank": rank, "processes": procs }),
        )?;
        return Ok(Exit::Passed);
    }
    outln!("{:>8}  {:>9}  {:<6}  COMMAND", "PID", "CPU (s)", "");
    for p in &procs {
        let who = if p.rank_itself { "rank" } else { "beside" };
        outln!("{:>8}  {:>9.2}  {who:<6}  {}", p.pid, p.cpu_seconds, p.command);
    }
    let beside = procs.iter().filter(|p| !p.rank_itself).count();
    if beside > 0 {
        outln!(
            "{beside} process(es) share rank-{rank}'s CPU limit; `lab rank stop {rank} --pid PID` stops one"
        );
    }
    Ok(Exit::Passed)
}

pub async fn stop(name: &str, rank: u32, pid: u32) -> anyhow::Result<Exit> {
    done(Lab::open(name).await?.stop_beside(rank, pid).await)
}

pub async fn env(
    name: &str,
    rank: u32,
    set: Option<String>,
    unset: Option<String>,
    json: bool,
) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    let change = match (set, unset) {
        (Some(kv), _) => {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("--set takes NAME=VALUE (e.g. LAB_LOG_EVERY=50), not {kv:?}")
            })?;
            Some((k.to_string(), Some(v.to_string())))
        }
        (None, Some(k)) => Some((k, None)),
        (None, None) => None,
    };
    if let Some((k, v)) = change {
        return done(lab.set_rank_env(rank, &k, v).await);
    }
    let env = lab.rank_env(rank).await?;
    if json {
        crate::out::json(
            formats::RANK_ENV,
            &serde_json::json!({ "rank": rank, "env": env }),
        )?;
    } else if env.is_empty() {
        outln!("rank-{rank} has no settings of its own: it runs as the template says");
    } else {
        for (k, v) in &env {
            outln!("{k}={v}");
        }
    }
    Ok(Exit::Passed)
}

pub async fn storage(name: &str, cmd: crate::cli::StorageCmd) -> anyhow::Result<Exit> {
    use crate::cli::StorageCmd;
    let lab = Lab::open(name).await?;
    let (a, r) = match cmd {
        StorageCmd::Drain(a) => {
            let r = lab.drain(a.server).await;
            (a, r)
        }
        StorageCmd::Undrain(a) => {
            let r = lab.undrain(a.server).await;
            (a, r)
        }
    };
    let r = r?;
    if a.json {
        crate::out::json(formats::DRAIN, &r)?;
    } else {
        for (v, from, to) in &r.moved {
            outln!("moved volume {v}: storage-{from} → storage-{to}");
        }
        outln!("changed: {}", r.change.line());
        outln!("took {:.1} s", r.seconds);
    }
    Ok(Exit::Passed)
}
