//! Replaying recorded incidents against an agent, without a lab (`lab replay DIR --agent CMD`): each
//! incident's bundle, cut to the evidence level, goes to the agent; its plan is checked and scored
//! against the recorded truth, and its commands against the plans verified live — the same commands as a
//! recorded right fix score `fixed`, as a recorded trap `failed`, anything never tried live `unknown`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::command::{self, CommandSpec, GroupSlot};
use crate::record::{RECORDING_FORMAT, RecordedRun, check_marker};
use crate::score::{Score, score};
use crate::{EvidenceLevel, Mitigation, Truth, evidence, plan};

/// One recorded incident: its bundle, truth, and every plan verified live (with how often each outcome).
#[derive(Debug, Clone)]
pub struct Incident {
    pub drill: String,
    pub bundle: serde_json::Value,
    pub truth: Truth,
    pub known: BTreeMap<Vec<Vec<String>>, (u32, u32)>,
    pub runs: usize,
    /// What the tools serve besides the bundle (the first run that kept it).
    pub replay: crate::record::ReplayData,
}

impl Incident {
    /// What live verification said of these commands: fixed, failed, or unknown (never tried, or tried
    /// with both outcomes).
    pub fn outcome_of(&self, commands: &[Vec<String>]) -> (Mitigation, String) {
        let commands = effective(commands);
        match self.known.get(&commands) {
            None => (Mitigation::Unknown, "never verified live".into()),
            Some((f, 0)) => (
                Mitigation::Fixed,
                format!("the recorded right fix (verified {f}×)"),
            ),
            Some((0, t)) => (
                Mitigation::Failed,
                format!("a recorded trap (failed verification {t}×)"),
            ),
            Some((f, t)) => (
                Mitigation::Unknown,
                format!("recorded with both outcomes ({f} fixed, {t} failed)"),
            ),
        }
    }
}

/// Loads the incidents of a recording folder, one per drill, in name order.
///
/// # Errors
/// A message when the folder is not a recording of this format, or a run cannot be read.
pub fn load(dir: &Path) -> Result<Vec<Incident>, String> {
    check_marker(dir)?;
    let mut by_drill: BTreeMap<String, Incident> = BTreeMap::new();
    let mut files: Vec<PathBuf> = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for sub in entries.flatten().filter(|e| e.path().is_dir()) {
        for f in std::fs::read_dir(sub.path())
            .map_err(|e| e.to_string())?
            .flatten()
        {
            if f.path().extension().is_some_and(|x| x == "json") {
                files.push(f.path());
            }
        }
    }
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
        let run: RecordedRun =
            serde_json::from_str(&text).map_err(|e| format!("{}: not a recorded run: {e}", f.display()))?;
        if run.format != RECORDING_FORMAT {
            return Err(format!(
                "{}: format {:?}, this lab reads {RECORDING_FORMAT:?}",
                f.display(),
                run.format
            ));
        }
        let (Some(bundle), Some(truth)) = (run.incident, run.truth) else {
            continue;
        };
        let inc = by_drill.entry(run.drill.clone()).or_insert_with(|| Incident {
            drill: run.drill.clone(),
            bundle,
            truth,
            known: BTreeMap::new(),
            runs: 0,
            replay: Default::default(),
        });
        inc.runs += 1;
        if inc.replay.moments.is_empty() && inc.replay.processes.is_empty() {
            inc.replay = run.replay.clone();
        }
        for t in run.tried {
            let e = inc.known.entry(effective(&t.commands)).or_insert((0, 0));
            match t.outcome {
                Mitigation::Fixed => e.0 += 1,
                _ => e.1 += 1,
            }
        }
    }
    if by_drill.is_empty() {
        return Err(format!("{} holds no recorded incident", dir.display()));
    }
    Ok(by_drill.into_values().collect())
}

/// The commands that change the lab, in order: a checkpoint saves the run and changes nothing of the job,
/// and a read (`lab status`, `lab rank procs`, ...) changes nothing at all, so neither tells a fix from a trap.
pub fn effective(commands: &[Vec<String>]) -> Vec<Vec<String>> {
    commands.iter().filter(|c| !changes_nothing(c)).cloned().collect()
}

/// Whether `argv` is a `lab` command that changes nothing of the job: a checkpoint, or a read.
pub fn changes_nothing(argv: &[String]) -> bool {
    let rest: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
    matches!(
        rest.as_slice(),
        ["checkpoint", ..]
            | ["status", ..]
            | ["rank", "procs", ..]
            | ["job", "list", ..]
            | ["db", "status", ..]
    ) || matches!(rest.as_slice(), ["rank", "env", _])
        || matches!(rest.as_slice(), ["rank", "env", _, "--json"])
}

/// One incident replayed.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    pub drill: String,
    pub evidence: EvidenceLevel,
    /// The agent's plan, or why there was none (crash, timeout, refused plan).
    pub plan: Option<plan::Plan>,
    pub problem: Option<String>,
    pub known: String,
    pub score: Option<Score>,
    pub duration_s: f64,
}

/// The replay of a folder.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub agent: String,
    pub evidence: EvidenceLevel,
    pub incidents: Vec<Replayed>,
    pub fixed: usize,
    pub failed: usize,
    pub unknown: usize,
    pub no_plan: usize,
    pub duration_s: f64,
}

/// Replays every incident against `agent` (a shell command) at `level`, each with `timeout`.
///
/// # Errors
/// A message when the folder cannot be loaded or a bundle cannot be written for the agent.
pub async fn replay(
    dir: &Path,
    agent: &str,
    level: EvidenceLevel,
    timeout: Duration,
) -> Result<ReplayReport, String> {
    use futures::stream::{self, StreamExt, TryStreamExt};
    let started = Instant::now();
    let incidents = load(dir)?;
    let tmp = std::env::temp_dir().join(format!("lab-replay-{}-{level}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    // Incidents are independent (each its own bundle file and agent): as many at once as there are cores,
    // the results in the recording's order.
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let out = stream::iter(&incidents)
        .map(|inc| one(inc, agent, level, timeout, &tmp))
        .buffered(jobs)
        .try_collect::<Vec<_>>()
        .await;
    let _ = std::fs::remove_dir_all(&tmp);
    let out = out?;
    let count = |m: Mitigation| {
        out.iter()
            .filter(|r| r.score.as_ref().is_some_and(|s| s.mitigation == m))
            .count()
    };
    Ok(ReplayReport {
        agent: agent.into(),
        evidence: level,
        fixed: count(Mitigation::Fixed),
        failed: count(Mitigation::Failed),
        unknown: count(Mitigation::Unknown),
        no_plan: out.iter().filter(|r| r.score.is_none()).count(),
        incidents: out,
        duration_s: started.elapsed().as_secs_f64(),
    })
}

async fn one(
    inc: &Incident,
    agent: &str,
    level: EvidenceLevel,
    timeout: Duration,
    tmp: &Path,
) -> Result<Replayed, String> {
    let started = Instant::now();
    let path = tmp.join(format!("{}.json", inc.drill));
    let cut = evidence::limit(&inc.bundle, level);
    std::fs::write(&path, serde_json::to_vec_pretty(&cut).map_err(|e| e.to_string())?)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let spec = CommandSpec {
        command: agent.into(),
        timeout,
        env: vec![
            ("LAB_INCIDENT_BUNDLE".into(), path.display().to_string()),
            ("LAB_EVIDENCE".into(), level.to_string()),
        ],
        path_first: None,
    };
    let o = command::run(&spec, Arc::new(|_: &str, _| {}), &GroupSlot::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut r = Replayed {
        drill: inc.drill.clone(),
        evidence: level,
        plan: None,
        problem: None,
        known: String::new(),
        score: None,
        duration_s: 0.0,
    };
    if o.timed_out {
        r.problem = Some(format!(
            "the agent did not answer within {:.0} s",
            timeout.as_secs_f64()
        ));
    } else if o.exit_code != Some(0) {
        let last = o.stderr.lines().last().unwrap_or("");
        r.problem = Some(format!("the agent failed ({:?}): {last}", o.exit_code));
    } else {
        match plan::parse(&o.stdout) {
            Err(e) => r.problem = Some(format!("the plan was refused: {e}")),
            Ok(p) => {
                let cmds: Vec<Vec<String>> = p.commands.iter().map(|c| c.argv.clone()).collect();
                let (m, known) = inc.outcome_of(&cmds);
                r.known = known;
                r.score = Some(score(&p, &inc.truth, m, None, None));
                r.plan = Some(p);
            }
        }
    }
    r.duration_s = started.elapsed().as_secs_f64();
    Ok(r)
}
