//! `lab drill validate|run|list`: check drill files, run drills against the running lab with a live line per
//! step and a summary, and write the JSON and JUnit reports.

use crate::exit::Exit;
use std::fmt::Write;
use std::path::PathBuf;

use lab_session::drills::{
    AgentSettings, DrillRun, Event, Observer, Outputs, Ran, Remediator, RunReport, Verdict,
};

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
    let mut bad = 0;
    for l in lab_session::drills::validate(files) {
        match l {
            Ok(l) => outln!(
                "{}: ok — drill {:?}, {} steps",
                l.origin,
                l.drill.name,
                l.drill.steps.len()
            ),
            Err(e) => {
                bad += 1;
                eprintln!("{}", lab_session::error_chain(&e));
            }
        }
    }
    if bad > 0 { Exit::Failed } else { Exit::Passed }
}

fn list(json: bool) -> anyhow::Result<Exit> {
    let listed = lab_session::drills::list()?;
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
    let agent = |command: &String| {
        Box::new(AgentSettings {
            command: command.clone(),
            evidence: a.evidence.level(),
            approve: a.approve.clone(),
            approvals: a.approvals.clone(),
            timeout: a.agent_timeout,
            attempts: a.attempts,
        })
    };
    // clap keeps these apart: one remediator at most.
    let remediator = if let Some(cmd) = &a.agent {
        Remediator::Agent(agent(cmd))
    } else if let Some(cmd) = &a.mcp_agent {
        Remediator::McpAgent(agent(cmd))
    } else if let Some(choice) = a.fix {
        Remediator::Fix(choice)
    } else if !a.remediate.is_empty() {
        Remediator::Commands(a.remediate.clone())
    } else {
        Remediator::Steps
    };
    let run = DrillRun {
        drills: a.files.clone(),
        remediator,
        vary: a.vary,
        seed: a.seed,
        repeat: a.repeat,
        record: a.record.clone(),
        outputs: Outputs {
            report: a.report.clone(),
            junit: a.junit.clone(),
            html: a.html.clone(),
        },
        build: crate::cmd::labs::BUILD,
    };
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("\ninterrupted: cleaning up what the drill injected");
    };
    let report = match lab_session::drills::run(name, &run, &Printer, interrupt).await? {
        Ran::Finished(r) => r,
        Ran::Interrupted(lines) => {
            for l in lines {
                eprintln!("  {l}");
            }
            return Ok(Exit::Interrupted);
        }
    };
    outln!("\n{}", report.summary_table());
    if a.agent.is_some() || a.mcp_agent.is_some() {
        outln!("{}", agent_table(&report));
    }
    if let Some(dir) = &a.record {
        let written = lab_session::drills::record(dir, &report)?;
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

/// One line per drill with an agent (what it found, whether its fix held, what it cost), then one per plan.
fn agent_table(report: &RunReport) -> String {
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
