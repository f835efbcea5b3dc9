//! Remediation commands: the actions a person or an agent takes to fix the lab, right or wrong.
//!
//! They are not "clear": they change the lab the way an operator would (scale the StatefulSet, edit the
//! job's configuration, resize or restart one pod, re-apply the template), and each leaves a change record
//! so an incident shows the fix beside the fault.

use lab_model::change::ChangeSource;
use lab_model::{ChangeRecord, Millicores, names};
use lab_runtime::{Runtime, state::now_ms};

use crate::{FaultError, Ledger};

fn record(
    ledger: &Ledger,
    target: String,
    what: &str,
    before: String,
    after: String,
    note: Option<String>,
) -> Result<ChangeRecord, FaultError> {
    let c = ChangeRecord {
        at_ms: now_ms(),
        source: ChangeSource::Remediation,
        target,
        what: what.into(),
        before,
        after,
        note,
        fault_id: None,
        by: None,
    };
    ledger.record(vec![c.clone()])?;
    Ok(c)
}

fn check_count(what: &str, n: u32) -> Result<(), FaultError> {
    if n == 0 || n > lab_model::actions::MAX_RANKS {
        return Err(FaultError::Invalid(format!(
            "{what} must be between 1 and {}",
            lab_model::actions::MAX_RANKS
        )));
    }
    Ok(())
}

/// `lab scale ranks N`: sets the number of ranks, leaving the job's world size alone.
///
/// # Errors
/// [`FaultError::Invalid`] for a bad count; the runtime's error.
pub async fn scale(rt: &dyn Runtime, ledger: &Ledger, ranks: u32) -> Result<ChangeRecord, FaultError> {
    check_count("the rank count", ranks)?;
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    rt.scale_ranks(ranks)
        .await
        .map_err(FaultError::runtime(format!("scaling to {ranks} ranks")))?;
    record(
        ledger,
        "ranks".into(),
        "replicas",
        st.ranks_desired.to_string(),
        ranks.to_string(),
        None,
    )
}

/// `lab config world-size N`: sets the world size every rank expects; running ranks restart.
///
/// # Errors
/// [`FaultError::Invalid`] for a bad size; the runtime's error.
pub async fn world_size(
    rt: &dyn Runtime,
    ledger: &Ledger,
    world_size: u32,
) -> Result<ChangeRecord, FaultError> {
    check_count("the world size", world_size)?;
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    rt.set_world_size(world_size)
        .await
        .map_err(FaultError::runtime(format!(
            "setting the world size to {world_size}"
        )))?;
    record(
        ledger,
        "job config".into(),
        "world size",
        st.world_size.to_string(),
        world_size.to_string(),
        None,
    )
}

fn check_rank(st: &lab_model::status::LabStatus, rank: u32) -> Result<(), FaultError> {
    if rank >= st.ranks_desired {
        return Err(FaultError::Invalid(format!(
            "rank {rank} is out of range: this lab has rank-0 to rank-{}",
            st.ranks_desired.saturating_sub(1)
        )));
    }
    Ok(())
}

/// `lab resize rank R --cpu Q`: changes one rank's CPU limit in place.
///
/// # Errors
/// [`FaultError::Invalid`] for an unknown rank; the runtime's error.
pub async fn resize(
    rt: &dyn Runtime,
    ledger: &Ledger,
    rank: u32,
    cpu: Millicores,
) -> Result<ChangeRecord, FaultError> {
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    check_rank(&st, rank)?;
    let before = rt
        .cpu_limits(rank)
        .await
        .map_err(FaultError::runtime(format!("reading rank-{rank}'s CPU limit")))?;
    rt.resize_rank(rank, cpu)
        .await
        .map_err(FaultError::runtime(format!("resizing rank-{rank}")))?;
    record(
        ledger,
        names::rank(rank),
        "cpu limit",
        crate::engine::cpu_text(before.live),
        cpu.to_string(),
        Some(format!("spec {}", before.template)),
    )
}

/// `lab restart rank R`: replaces one rank (a new pod from the template).
///
/// # Errors
/// [`FaultError::Invalid`] for an unknown rank; the runtime's error.
pub async fn restart(rt: &dyn Runtime, ledger: &Ledger, rank: u32) -> Result<ChangeRecord, FaultError> {
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    check_rank(&st, rank)?;
    rt.restart_rank(rank)
        .await
        .map_err(FaultError::runtime(format!("restarting rank-{rank}")))?;
    record(
        ledger,
        names::rank(rank),
        "pod",
        "running".into(),
        "replaced".into(),
        Some("new pod from the template".into()),
    )
}

/// `lab rank procs R`: every process beside rank `rank` (in its CPU limit), its own included.
///
/// # Errors
/// [`FaultError::Invalid`] for an unknown rank; the runtime's error.
pub async fn rank_processes(
    rt: &dyn Runtime,
    rank: u32,
) -> Result<Vec<lab_runtime::BesideProcess>, FaultError> {
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    check_rank(&st, rank)?;
    rt.rank_processes(rank).await.map_err(FaultError::runtime(format!(
        "listing the processes beside rank-{rank}"
    )))
}

/// `lab rank stop R --pid P`: stops a process beside rank `rank` that is not the rank itself.
///
/// # Errors
/// [`FaultError::Invalid`] for an unknown rank, the rank's own pid, or a pid not beside it (nothing is
/// changed then); the runtime's error.
pub async fn stop_beside(
    rt: &dyn Runtime,
    ledger: &Ledger,
    rank: u32,
    pid: u32,
) -> Result<ChangeRecord, FaultError> {
    let procs = rank_processes(rt, rank).await?;
    let Some(p) = procs.iter().find(|p| p.pid == pid) else {
        return Err(FaultError::Invalid(format!(
            "pid {pid} is not beside rank-{rank}: `lab rank procs {rank}` lists what is"
        )));
    };
    if p.rank_itself {
        return Err(FaultError::Invalid(format!(
            "pid {pid} is rank-{rank} itself: restart the rank with `lab restart rank {rank}` instead"
        )));
    }
    let command = p.command.clone();
    rt.stop_beside(rank, pid)
        .await
        .map_err(FaultError::runtime(format!(
            "stopping pid {pid} beside rank-{rank}"
        )))?;
    record(
        ledger,
        names::rank(rank),
        "process beside it",
        format!("pid {pid} ({command})"),
        "stopped".into(),
        None,
    )
}

/// `lab rank env R`: the settings of rank `rank` alone.
///
/// # Errors
/// [`FaultError::Invalid`] for an unknown rank; the runtime's error.
pub async fn rank_env(
    rt: &dyn Runtime,
    rank: u32,
) -> Result<std::collections::BTreeMap<String, String>, FaultError> {
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    check_rank(&st, rank)?;
    rt.rank_env(rank)
        .await
        .map_err(FaultError::runtime(format!("reading rank-{rank}'s settings")))
}

/// `lab rank env R --set NAME=VALUE | --unset NAME`: changes one setting of rank `rank` alone; the rank is
/// replaced to pick it up.
///
/// # Errors
/// [`FaultError::Invalid`] for an unknown rank, a name that is not a `LAB_*` setting, or unsetting what is
/// not set (nothing is changed then); the runtime's error.
pub async fn set_rank_env(
    rt: &dyn Runtime,
    ledger: &Ledger,
    rank: u32,
    name: &str,
    value: Option<String>,
) -> Result<ChangeRecord, FaultError> {
    lab_model::actions::check_rank_env_name(name).map_err(FaultError::Invalid)?;
    let env = rank_env(rt, rank).await?;
    let before = env.get(name).cloned();
    if value.is_none() && before.is_none() {
        return Err(FaultError::Invalid(format!(
            "rank-{rank} has no setting {name}: `lab rank env {rank}` lists its settings"
        )));
    }
    rt.set_rank_env(rank, name, value.clone())
        .await
        .map_err(FaultError::runtime(format!("changing {name} on rank-{rank}")))?;
    record(
        ledger,
        names::rank(rank),
        name,
        before.unwrap_or_else(|| "unset".into()),
        value.unwrap_or_else(|| "unset".into()),
        Some("the rank restarts to pick it up".into()),
    )
}

/// `lab apply --cpu Q`: re-applies the rank template with CPU limit `cpu`. Running ranks are replaced only
/// if the template changes.
///
/// # Errors
/// The runtime's error.
pub async fn apply_template(
    rt: &dyn Runtime,
    ledger: &Ledger,
    cpu: Millicores,
) -> Result<ChangeRecord, FaultError> {
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab's status"))?;
    let before = st
        .ranks()
        .find_map(|p| p.resources.cpu_template)
        .map_or_else(|| "unknown".into(), |m| m.to_string());
    rt.apply_template(cpu)
        .await
        .map_err(FaultError::runtime("applying the template"))?;
    record(
        ledger,
        "rank template".into(),
        "cpu limit",
        before,
        cpu.to_string(),
        None,
    )
}
