//! Drills: checked without a lab (`lab drill validate`), listed (`lab drill list`), and run against the
//! opened lab through the one drill runner ([`lab_drills::run_drill`]) with an interrupt that ends a
//! remediation command and clears what the drill injected (`lab drill run`, [`run`]), their reports
//! written where asked.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lab_drills::agent::mcp::McpAgentOptions;
use lab_drills::agent::{AgentOptions, EvidenceLevel, record};
use lab_drills::builtin;
use lab_drills::engine::{Guard, Options, Ticking};
use lab_drills::run_drill;
use serde::Serialize;

use crate::Lab;
use crate::error::{Result, SessionError};
use crate::version::{Build, Versions};

pub use lab_drills::engine::{Event, Flow, Observer};
pub use lab_drills::report::{DrillReport, RunReport, StepName, StepReport, Verdict};
pub use lab_drills::spec::FixChoice;
pub use lab_drills::spec_error::LoadError;
pub use lab_drills::{Drill, Loaded};

/// How a run of drills ended.
#[derive(Debug)]
pub enum Ran {
    /// Every drill ran (or was skipped, said so in its report).
    Finished(RunReport),
    /// Interrupted; the lines say what was stopped and cleared.
    Interrupted(Vec<String>),
}

/// `drills` with each one `n` times in a row (`lab drill run --repeat N`): its runs sit together in the
/// report, and [`RunReport`]'s stats give each drill's pass rate and the spread of its figures.
pub fn repeated(drills: &[Loaded], n: u32) -> Vec<Loaded> {
    drills
        .iter()
        .flat_map(|l| std::iter::repeat_n(l.clone(), n.max(1) as usize))
        .collect()
}

impl Lab {
    /// The options a drill run needs: where bundles go, and what a remediation command is told.
    /// `remediate` replaces every remediate step's command (`--remediate`).
    pub fn drill_options(&self, remediate: Option<String>) -> Options {
        Options {
            remediate,
            remediate_each: Vec::new(),
            bundle_dir: lab_runtime::state::lab_dir(&self.name).join("incidents"),
            command_env: vec![
                ("LAB_NAME".into(), self.name.clone()),
                (
                    "LAB_STATE_DIR".into(),
                    lab_runtime::state::base_dir().display().to_string(),
                ),
            ],
            command_path: std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(PathBuf::from)),
            agent: None,
            mcp_agent: None,
            attempts: 1,
            approval_state: Some(crate::mcp::approval_state_path(&self.name)),
            keep_for_replay: false,
        }
    }

    /// Runs `drills` in order, each reporting to `observer`. A drill that could not clean up leaves the lab
    /// in an unknown state: the drills after it are reported as not run. If `interrupt` completes first,
    /// the running drill's command is stopped and its faults cleared.
    pub async fn run_drills(
        &self,
        drills: &[Loaded],
        options: &Options,
        observer: &dyn Observer,
        interrupt: impl Future<Output = ()>,
    ) -> Ran {
        let lab = self.drill_lab();
        let mut source = Ticking::new(self.driver(), Duration::from_secs(1))
            .with_watched(crate::live::history_path(&self.name));
        let guard = Guard::new(lab.clone());
        let started_ms = lab_runtime::state::now_ms();
        let clock = Instant::now();
        let runtime_kind = self.runtime.kind().to_string();
        let all = async {
            let mut reports: Vec<DrillReport> = Vec::new();
            for l in drills {
                if let Some(prev) = reports.iter().find(|r| r.cleanup_failed()) {
                    reports.push(DrillReport::not_run(
                        &l.drill,
                        &l.origin,
                        &self.name,
                        &runtime_kind,
                        format!("not run: drill {} could not clean up after itself", prev.name),
                    ));
                    continue;
                }
                let r = run_drill(&lab, &mut source, observer, options, &guard, &l.drill, &l.origin).await;
                reports.push(r);
            }
            reports
        };
        tokio::select! {
            r = all => Ran::Finished(RunReport::new(&self.name, started_ms, clock.elapsed().as_secs_f64(), r)),
            () = interrupt => Ran::Interrupted(guard.abort().await),
        }
    }
}

/// `lab drill validate`: each file loaded and checked, or, with none, every built-in drill.
pub fn validate(files: &[PathBuf]) -> Vec<std::result::Result<Loaded, LoadError>> {
    if files.is_empty() {
        builtin::BUILTIN
            .iter()
            .chain(builtin::CHAINED.iter())
            .map(|(n, _)| builtin::builtin(n))
            .collect()
    } else {
        files.iter().map(|f| builtin::load_file(f)).collect()
    }
}

/// One built-in drill as `lab drill list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ListedDrill {
    pub name: String,
    pub description: Option<String>,
    /// Needs `lab up --database`.
    pub database: bool,
    /// Each step in a few words, in order.
    pub steps: Vec<String>,
    /// The drill's own right fix, as commands (`the lab's own clear` for none), when it names one.
    pub right_fix: Option<String>,
    /// Its traps: fixes that look right and fail it.
    pub traps: Vec<String>,
}

/// `lab drill list`: the built-in drills.
///
/// # Errors
/// [`SessionError::Load`] when a built-in drill does not load.
pub fn list() -> Result<Vec<ListedDrill>> {
    Ok(builtin::all()?.iter().map(|l| listed(&l.drill)).collect())
}

/// `d` in a few words per step and fix.
fn listed(d: &Drill) -> ListedDrill {
    use lab_drills::spec::{Step, VerifyJob};
    let steps: Vec<String> = d
        .steps
        .iter()
        .map(|s| match s {
            Step::Inject(f) => format!("inject {f}"),
            Step::Expect(e) => {
                let signals: Vec<String> = e.signals.iter().map(ToString::to_string).collect();
                let mut parts = Vec::new();
                if !signals.is_empty() {
                    parts.push(format!("{} alerts", signals.join(" and ")));
                }
                if let Some(p) = e.throughput_below_pct {
                    parts.push(format!("throughput < {p:.0}%"));
                }
                parts.extend(e.alerts.iter().map(ToString::to_string));
                format!("expect {}", parts.join(", "))
            }
            Step::Remediate(r) => format!(
                "remediate: {}",
                r.command.as_deref().unwrap_or("the lab's own clear")
            ),
            Step::Verify(v) => match v.job {
                VerifyJob::Training => format!(
                    "verify within {:.0}% for {} steps",
                    v.within_pct, v.consecutive_steps
                ),
                VerifyJob::Writer => format!(
                    "verify the writer's commits within {:.0}% for {:.0} s",
                    v.within_pct,
                    v.hold.as_secs_f64()
                ),
            },
        })
        .collect();
    let show = |c: std::result::Result<Vec<String>, String>| {
        c.map(|parts| {
            parts
                .iter()
                .map(|p| {
                    if p.is_empty() {
                        "the lab's own clear".to_string()
                    } else {
                        p.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(" | ")
        })
    };
    ListedDrill {
        name: d.name.clone(),
        description: d.description.clone(),
        database: d.runtime.database,
        steps,
        right_fix: show(d.fix(FixChoice::Right)).ok(),
        traps: (1..=d.fixes.traps.len())
            .filter_map(|n| show(d.fix(FixChoice::Trap(n))).ok())
            .collect(),
    }
}

/// Who remediates instead of the drills' own steps.
#[derive(Debug, Clone, Default)]
pub enum Remediator {
    /// Each remediate step's own command (or the lab's own clear).
    #[default]
    Steps,
    /// Commands given instead (`--remediate`): one for every remediate step, or one per step in order.
    Commands(Vec<String>),
    /// The drill's own known fix (`--fix right|trap[:N]`).
    Fix(FixChoice),
    /// A planning agent (`--agent CMD`).
    Agent(Box<AgentSettings>),
    /// An agent acting through the lab's MCP server (`--mcp-agent CMD`).
    McpAgent(Box<AgentSettings>),
}

/// An agent under test, as `lab drill run` is told about it.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The shell command that runs it.
    pub command: String,
    pub evidence: EvidenceLevel,
    /// `auto`, `ask`, `never`, or an approval policy file.
    pub approve: String,
    /// Answers to the asks, one per line.
    pub approvals: Option<PathBuf>,
    /// Per attempt.
    pub timeout: Duration,
    /// Tries at each incident.
    pub attempts: u32,
}

/// Where a run's reports go.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    /// The JSON report, with the versions of what ran.
    pub report: Option<PathBuf>,
    pub junit: Option<PathBuf>,
    pub html: Option<PathBuf>,
}

/// `lab drill run`, as its flags say it.
#[derive(Debug, Clone)]
pub struct DrillRun {
    /// Drill files or names of built-in drills.
    pub drills: Vec<String>,
    pub remediator: Remediator,
    /// Run this many variants of each drill instead (`--vary K`), drawn from `seed`.
    pub vary: Option<u32>,
    pub seed: u64,
    /// Each drill this many times in a row.
    pub repeat: u32,
    /// Keep each incident for `lab replay` in this folder.
    pub record: Option<PathBuf>,
    pub outputs: Outputs,
    /// The `lab` build, for the versions in the JSON report.
    pub build: Build,
}

/// The drills of `run`, loaded, varied, given their fix and repeated, and the options they run with,
/// checked before the lab is opened: an error here changes nothing.
fn prepare(name: &str, run: &DrillRun) -> Result<(Vec<Loaded>, Options)> {
    let mut drills: Vec<Loaded> = run
        .drills
        .iter()
        .map(|f| lab_drills::resolve(f))
        .collect::<std::result::Result<_, _>>()?;
    if let Some(k) = run.vary {
        drills = drills
            .iter()
            .flat_map(|l| {
                l.drill.vary(k, run.seed).into_iter().map(|d| Loaded {
                    origin: format!("{} (variant, seed {})", l.origin, run.seed),
                    drill: d,
                })
            })
            .collect();
    }
    if let Remediator::Fix(choice) = run.remediator {
        // Checked for every drill before anything runs: a drill without that fix changes nothing.
        for l in &mut drills {
            l.drill = l.drill.with_fix(choice).map_err(SessionError::Invalid)?;
        }
    }
    let mut options = Options::default();
    let given = match &run.remediator {
        Remediator::Commands(c) => c.as_slice(),
        _ => &[],
    };
    let parsed: Vec<&Drill> = drills.iter().map(|l| &l.drill).collect();
    options
        .set_remediate(given, &parsed)
        .map_err(SessionError::Invalid)?;
    let drills = repeated(&drills, run.repeat);
    if let Remediator::Agent(a) = &run.remediator {
        options.agent = Some(AgentOptions {
            command: a.command.clone(),
            evidence: a.evidence,
            approval: crate::mcp::approval(name, &a.approve, a.approvals.as_deref(), 0)?,
            timeout: a.timeout,
        });
    }
    if let Some(dir) = &run.record
        && dir.join(record::MARKER).exists()
    {
        record::check_marker(dir).map_err(SessionError::Invalid)?;
    }
    if let Remediator::McpAgent(a) = &run.remediator {
        // Checked before anything runs: a policy or answers file that cannot be read changes nothing.
        crate::mcp::approval(name, &a.approve, a.approvals.as_deref(), 0)?;
        options.mcp_agent = Some(McpAgentOptions {
            command: a.command.clone(),
            evidence: a.evidence,
            approve: a.approve.clone(),
            approvals: a.approvals.clone(),
            timeout: a.timeout,
            lab_bin: std::env::current_exe().map_err(SessionError::NoBinary)?,
        });
    }
    if let Remediator::Agent(a) | Remediator::McpAgent(a) = &run.remediator {
        options.attempts = a.attempts;
    }
    options.keep_for_replay = run.record.is_some();
    Ok((drills, options))
}

/// `lab drill run`: the drills of `run` checked (before the lab `name` is opened: a bad drill, fix,
/// remediation or approval changes nothing), run against the lab in order with each step told to
/// `observer`, and the reports written where `run.outputs` asks. If `interrupt` completes first, the
/// running drill's command is stopped and its faults cleared.
///
/// # Errors
/// What does not check (nothing has run then); [`SessionError::Runtime`] when the lab does not answer;
/// [`SessionError::Write`] when a report cannot be written.
pub async fn run(
    name: &str,
    run: &DrillRun,
    observer: &dyn Observer,
    interrupt: impl Future<Output = ()>,
) -> Result<Ran> {
    let (drills, checked) = prepare(name, run)?;
    let lab = Lab::open(name).await?;
    let mut options = lab.drill_options(checked.remediate);
    options.remediate_each = checked.remediate_each;
    options.agent = checked.agent;
    options.mcp_agent = checked.mcp_agent;
    options.attempts = checked.attempts;
    options.keep_for_replay = checked.keep_for_replay;
    let ran = lab.run_drills(&drills, &options, observer, interrupt).await;
    if let Ran::Finished(report) = &ran {
        write_reports(&lab, report, &run.outputs, &run.build).await?;
    }
    Ok(ran)
}

/// The JSON report with `versions` after the run's own fields: what ran (the lab's version and commit,
/// SeaweedFS, and kind and Kubernetes where the lab runs on them), so a figure is traced to the parts that
/// made it.
#[derive(Serialize)]
struct Versioned<'a> {
    #[serde(flatten)]
    report: &'a RunReport,
    versions: Versions,
}

async fn write_reports(lab: &Lab, report: &RunReport, outputs: &Outputs, build: &Build) -> Result<()> {
    let write = |what: &'static str, path: &Path, bytes: &[u8]| {
        std::fs::write(path, bytes).map_err(|source| SessionError::Write {
            what,
            path: path.to_path_buf(),
            source,
        })
    };
    if let Some(p) = &outputs.report {
        let versions = crate::version::of_lab(build, lab).await;
        let bytes =
            serde_json::to_vec_pretty(&Versioned { report, versions }).map_err(SessionError::EncodeReport)?;
        write("report", p, &bytes)?;
    }
    if let Some(p) = &outputs.junit {
        let f = std::fs::File::create(p).map_err(|source| SessionError::Write {
            what: "JUnit report",
            path: p.clone(),
            source,
        })?;
        lab_reports::junit::write(report, std::io::BufWriter::new(f))?;
    }
    if let Some(p) = &outputs.html {
        write("HTML report", p, lab_reports::html::render(report).as_bytes())?;
    }
    Ok(())
}

/// `lab drill run --record DIR`: each incident of `report` added to the recording in `dir`; returns the
/// files written.
///
/// # Errors
/// [`SessionError::Invalid`] when the folder holds something else or cannot be written.
pub fn record(dir: &Path, report: &RunReport) -> Result<Vec<PathBuf>> {
    lab_reports::recording::write(dir, &report.drills).map_err(SessionError::Invalid)
}
