//! `lab drill validate|run|list`: check drill files, run drills against the running lab with a live line per
//! step and a summary, and write the JSON and JUnit reports.

use crate::exit::Exit;
use std::fmt::Write;
use std::path::PathBuf;

use anyhow::Context;
use lab_drills::agent::mcp::McpAgentOptions;
use lab_drills::agent::{AgentOptions, record};
use lab_drills::engine::{Event, Observer};
use lab_drills::report::Verdict;
use lab_drills::spec_error::LoadError;
use lab_drills::{Loaded, builtin, junit};
use lab_session::Lab;
use lab_session::drills::Ran;

use crate::cli::{DrillCmd, DrillRunArgs};
use crate::formats;
use crate::out::{self, outln};

pub async fn run(name: &str, cmd: DrillCmd) -> anyhow::Result<Exit> {
    match cmd {
        DrillCmd::Validate { files } => Ok(validate(&files)),
        DrillCmd::Run(a) => run_drills(name, *a).await,
        DrillCmd::List(a) => list(a.json),
    }
}

/// Checks each file (or, with none, the built-in drills); errors read `FILE:LINE:COL: message`.
fn validate(files: &[PathBuf]) -> Exit {
    let loaded: Vec<Result<Loaded, LoadError>> = if files.is_empty() {
        builtin::BUILTIN
            .iter()
            .chain(builtin::CHAINED.iter())
            .map(|(n, _)| builtin::builtin(n))
            .collect()
    } else {
        files.iter().map(|f| builtin::load_file(f)).collect()
    };
    let mut bad = 0;
    for l in loaded {
        match l {
            Ok(l) => outln!(
                "{}: ok — drill {:?}, {} steps",
                l.origin,
                l.drill.name,
                l.drill.steps.len()
            ),
            Err(e) => {
                bad += 1;
                eprintln!("{}", lab_model::format::error_chain(&e));
            }
        }
    }
    if bad > 0 { Exit::Failed } else { Exit::Passed }
}

/// One built-in drill as `lab drill list --json` shows it.
#[derive(Debug, serde::Serialize)]
struct ListedDrill {
    name: String,
    description: Option<String>,
    /// Needs `lab up --database`.
    database: bool,
    /// Each step in a few words, in order.
    steps: Vec<String>,
    /// The drill's own right fix, as commands (`the lab's own clear` for none), when it names one.
    right_fix: Option<String>,
    /// Its traps: fixes that look right and fail it.
    traps: Vec<String>,
}

fn list(json: bool) -> anyhow::Result<Exit> {
    let mut listed = Vec::new();
    for l in builtin::all()? {
        let d = &l.drill;
        let steps: Vec<String> = d
            .steps
            .iter()
            .map(|s| match s {
                lab_drills::spec::Step::Inject(f) => format!("inject {f}"),
                lab_drills::spec::Step::Expect(e) => {
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
                lab_drills::spec::Step::Remediate(r) => format!(
                    "remediate: {}",
                    r.command.as_deref().unwrap_or("the lab's own clear")
                ),
                lab_drills::spec::Step::Verify(v) => match v.job {
                    lab_drills::spec::VerifyJob::Training => format!(
                        "verify within {:.0}% for {} steps",
                        v.within_pct, v.consecutive_steps
                    ),
                    lab_drills::spec::VerifyJob::Writer => format!(
                        "verify the writer's commits within {:.0}% for {:.0} s",
                        v.within_pct,
                        v.hold.as_secs_f64()
                    ),
                },
            })
            .collect();
        let show = |c: Result<Vec<String>, String>| {
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
        listed.push(ListedDrill {
            name: d.name.clone(),
            description: d.description.clone(),
            database: d.runtime.database,
            steps,
            right_fix: show(d.fix(lab_drills::spec::FixChoice::Right)).ok(),
            traps: (1..=d.fixes.traps.len())
                .filter_map(|n| show(d.fix(lab_drills::spec::FixChoice::Trap(n))).ok())
                .collect(),
        });
    }
    if json {
        out::json_list(formats::DRILLS, "drills", &listed)?;
        return Ok(Exit::Passed);
    }
    for d in &listed {
        outln!("{:<18} {}", d.name, d.description.as_deref().unwrap_or(""));
        if d.database {
            outln!("{:<18} needs `lab up --database`", "");
        }
        outln!("{:<18} {}", "", d.steps.join(" → "));
        if let Some(r) = &d.right_fix {
            outln!("{:<18} right fix: {r}", "");
        }
        for (n, t) in d.traps.iter().enumerate() {
            outln!("{:<18} trap {}: {t}", "", n + 1);
        }
    }
    outln!(
        "\nRun one with `lab drill run NAME` (or a drill file); `--remediate 'CMD'` tests your own fix, `--fix right` or \
         `--fix trap` the drill's own, `--vary K` K variants of it, `--mcp-agent 'CMD'` an agent."
    );
    Ok(Exit::Passed)
}

/// Prints a live line per step, the output of remediation commands, and each drill's verdict.
#[derive(Debug, Default)]
pub struct Printer;

impl Observer for Printer {
    fn event(&self, e: &Event<'_>) {
        let mut o = String::new();
        let _ = match e {
            Event::DrillStarted {
                name,
                origin,
                description,
            } => {
                let _ = writeln!(o, "\n▶ drill {name}  ({origin})");
                match description {
                    Some(d) => writeln!(o, "  {d}"),
                    None => Ok(()),
                }
            }
            Event::StepStarted { step, what } => writeln!(o, "  … {step:<9} {what}"),
            Event::Progress {
                step,
                elapsed_s,
                text,
            } => writeln!(o, "    {step:<9} +{elapsed_s:>4.0}s  {text}"),
            Event::Output { line, stderr } => {
                writeln!(o, "    {} {line}", if *stderr { "┃" } else { "│" })
            }
            Event::StepFinished(s) => {
                let _ = writeln!(
                    o,
                    "  {} {:<9} {:>6.1}s  {}",
                    if s.ok { "✓" } else { "✗" },
                    s.step,
                    s.duration_s,
                    s.summary
                );
                if !s.ok {
                    for l in &s.evidence {
                        let _ = writeln!(o, "      {l}");
                    }
                }
                Ok(())
            }
            Event::DrillFinished(r) => {
                let f = &r.figures;
                let secs = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} s"));
                let mark = if r.verdict == Verdict::Pass { "✓" } else { "✗" };
                let _ = writeln!(
                    o,
                    "{mark} {} {}  detect {} · mitigate {} · back to baseline {} · steps lost {}",
                    r.verdict,
                    r.name,
                    secs(f.time_to_detect_s),
                    secs(f.time_to_mitigate_s),
                    secs(f.time_to_baseline_s),
                    f.steps_lost
                );
                if r.verdict != Verdict::Pass {
                    let _ = writeln!(o, "  reason: {}", r.reason);
                }
                if !r.cleanup.ok {
                    let _ = writeln!(
                        o,
                        "!!! {}\n!!! the lab may not be as the drill found it: check `lab status` and `lab fault status`",
                        r.cleanup.summary
                    );
                }
                Ok(())
            }
        };
        out::write(format_args!("{o}"));
    }
}

async fn run_drills(name: &str, a: DrillRunArgs) -> anyhow::Result<Exit> {
    let mut drills: Vec<Loaded> = a
        .files
        .iter()
        .map(|f| lab_drills::resolve(f))
        .collect::<Result<_, _>>()?;
    if let Some(k) = a.vary {
        drills = drills
            .iter()
            .flat_map(|l| {
                l.drill.vary(k, a.seed).into_iter().map(|d| Loaded {
                    origin: format!("{} (variant, seed {})", l.origin, a.seed),
                    drill: d,
                })
            })
            .collect();
    }
    if let Some(choice) = a.fix {
        // Checked for every drill before anything runs: a drill without that fix changes nothing.
        for l in &mut drills {
            l.drill = l.drill.with_fix(choice).map_err(anyhow::Error::msg)?;
        }
    }
    // Checked before anything runs: a mismatch changes nothing.
    let mut remediate = lab_drills::Options::default();
    let parsed: Vec<&lab_drills::Drill> = drills.iter().map(|l| &l.drill).collect();
    remediate
        .set_remediate(&a.remediate, &parsed)
        .map_err(anyhow::Error::msg)?;
    let drills = lab_session::drills::repeated(&drills, a.repeat);
    let agent = match &a.agent {
        Some(cmd) => {
            let approval = lab_session::mcp::approval(name, &a.approve, a.approvals.as_deref(), 0)?;
            Some(AgentOptions {
                command: cmd.clone(),
                evidence: a.evidence.level(),
                approval,
                timeout: a.agent_timeout,
            })
        }
        None => None,
    };
    if let Some(dir) = &a.record
        && dir.join(record::MARKER).exists()
    {
        lab_drills::agent::record::check_marker(dir).map_err(anyhow::Error::msg)?;
    }
    let mcp_agent = match &a.mcp_agent {
        Some(cmd) => {
            // Checked before anything runs: a policy or answers file that cannot be read changes nothing.
            lab_session::mcp::approval(name, &a.approve, a.approvals.as_deref(), 0)?;
            Some(McpAgentOptions {
                command: cmd.clone(),
                evidence: a.evidence.level(),
                approve: a.approve.clone(),
                approvals: a.approvals.clone(),
                timeout: a.agent_timeout,
                lab_bin: std::env::current_exe().context("cannot find the lab binary for the MCP server")?,
            })
        }
        None => None,
    };
    let lab = Lab::open(name).await?;
    let mut options = lab.drill_options(remediate.remediate);
    options.remediate_each = remediate.remediate_each;
    options.agent = agent;
    options.mcp_agent = mcp_agent;
    options.attempts = a.attempts;
    options.keep_for_replay = a.record.is_some();
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("\ninterrupted: cleaning up what the drill injected");
    };
    let report = match lab.run_drills(&drills, &options, &Printer, interrupt).await {
        Ran::Finished(r) => r,
        Ran::Interrupted(lines) => {
            for l in lines {
                eprintln!("  {l}");
            }
            return Ok(Exit::Interrupted);
        }
    };
    if let Some(p) = &a.report {
        let versions = lab_session::version::of_lab(&crate::cmd::labs::BUILD, &lab).await;
        let bytes = serde_json::to_vec_pretty(&Versioned {
            report: &report,
            versions,
        })?;
        std::fs::write(p, bytes).with_context(|| format!("cannot write the report to {}", p.display()))?;
    }
    if let Some(p) = &a.junit {
        let f = std::fs::File::create(p)
            .with_context(|| format!("cannot write the JUnit report to {}", p.display()))?;
        junit::write(&report, std::io::BufWriter::new(f))?;
    }
    if let Some(p) = &a.html {
        std::fs::write(p, lab_drills::html::render(&report))
            .with_context(|| format!("cannot write the HTML report to {}", p.display()))?;
    }
    outln!("\n{}", report.summary_table());
    if a.agent.is_some() || a.mcp_agent.is_some() {
        outln!("{}", agent_table(&report));
    }
    if let Some(dir) = &a.record {
        let written = lab_drills::recording::write(dir, &report.drills).map_err(anyhow::Error::msg)?;
        outln!("recorded {} incident runs in {}", written.len(), dir.display());
    }
    if a.repeat > 1 {
        outln!("over {} runs of each drill: median (min–max)", a.repeat);
        outln!("{}", report.repeat_table());
    }
    if let Some(p) = &a.report {
        outln!("report: {}", p.display());
    }
    if let Some(p) = &a.junit {
        outln!("junit:  {}", p.display());
    }
    if let Some(p) = &a.html {
        outln!("html:   {}", p.display());
    }
    Ok(Exit::of_report(&report))
}

/// The JSON report with `versions` after the run's own fields: what ran (the lab's version and commit,
/// SeaweedFS, and kind and Kubernetes where the lab runs on them), so a figure is traced to the parts that
/// made it.
#[derive(serde::Serialize)]
struct Versioned<'a> {
    #[serde(flatten)]
    report: &'a lab_drills::RunReport,
    versions: lab_session::version::Versions,
}

/// One line per drill with an agent (what it found, whether its fix held, what it cost), then one per plan.
fn agent_table(report: &lab_drills::RunReport) -> String {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let mut o = String::from(
        "agents: detected · localized · cause · mitigated · attempts · incident→fix · calls · declined/refused · harmful · idle accelerator-s",
    );
    for d in &report.drills {
        let Some(a) = &d.agent else { continue };
        o.push_str(&format!(
            "\n{:<18} {:<4} {:<8} {} · {} · {} · {} · {} · {} · {} · {}/{} · {} · {}",
            d.name,
            a.protocol,
            a.evidence.to_string(),
            yes(a.detected),
            yes(a.localized),
            yes(a.cause),
            yes(a.mitigated),
            a.attempts,
            a.incident_to_fix_s.map_or("-".into(), |t| format!("{t:.1} s")),
            a.tool_calls,
            a.declined,
            a.refused,
            if a.harmful.is_empty() {
                "none".to_string()
            } else {
                a.harmful.join("; ")
            },
            d.idle_accelerator_s.map_or("-".into(), |v| format!("{v:.0}")),
        ));
    }
    o.push_str("\nagent plans: detection · localization (precision/recall) · cause · mitigation");
    for d in &report.drills {
        for r in &d.remediations {
            let Some(a) = &r.agent else { continue };
            let line = match &a.score {
                Some(s) => format!(
                    "{:<18} {:<8} {} · {}/{} · {} ({}) · {:?}{}",
                    d.name,
                    a.evidence.to_string(),
                    if s.detection { "right" } else { "wrong" },
                    s.precision.map_or("-".into(), |p| format!("{p:.2}")),
                    format_args!("{:.2}", s.recall),
                    if s.cause { "right" } else { "wrong" },
                    s.cause_named,
                    s.mitigation,
                    s.plan_at_s
                        .map_or(String::new(), |t| format!(" · plan at +{t:.1} s")),
                ),
                None => format!(
                    "{:<18} {:<8} no score: {}",
                    d.name,
                    a.evidence.to_string(),
                    a.problem.as_deref().unwrap_or("no plan")
                ),
            };
            o.push('\n');
            o.push_str(&line);
        }
    }
    o
}
