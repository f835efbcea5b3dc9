//! `lab drill validate|run|list`: check drill files, run drills against the running lab with a live line per
//! step and a summary, and write the JSON and JUnit reports.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use lab_drills::engine::{Event, Guard, Lab, Observer, Options, Ticking};
use lab_drills::report::{DrillReport, RunReport, Verdict};
use lab_drills::{DrillError, Loaded, builtin, junit};
use lab_faults::Ledger;

use crate::cli::{DrillCmd, DrillRunArgs};
use crate::session;

pub async fn run(name: &str, cmd: DrillCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        DrillCmd::Validate { files } => Ok(validate(&files)),
        DrillCmd::Run(a) => run_drills(name, a).await,
        DrillCmd::List => list(),
    }
}

/// Checks each file (or, with none, the built-in drills); errors read `FILE:LINE:COL: message`.
fn validate(files: &[PathBuf]) -> ExitCode {
    let loaded: Vec<Result<Loaded, DrillError>> = if files.is_empty() {
        builtin::BUILTIN
            .iter()
            .map(|(n, _)| builtin::builtin(n))
            .collect()
    } else {
        files.iter().map(|f| builtin::load_file(f)).collect()
    };
    let mut bad = 0;
    for l in loaded {
        match l {
            Ok(l) => println!(
                "{}: ok — drill {:?}, {} steps",
                l.origin,
                l.drill.name,
                l.drill.steps.len()
            ),
            Err(e) => {
                bad += 1;
                eprintln!("{}", crate::out::chain(&e));
            }
        }
    }
    if bad > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn list() -> anyhow::Result<ExitCode> {
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
                    format!("expect {}", parts.join(", "))
                }
                lab_drills::spec::Step::Remediate(r) => format!(
                    "remediate: {}",
                    r.command.as_deref().unwrap_or("the lab's own clear")
                ),
                lab_drills::spec::Step::Verify(v) => format!(
                    "verify within {:.0}% for {} steps",
                    v.within_pct, v.consecutive_steps
                ),
            })
            .collect();
        println!("{:<18} {}", d.name, d.description.as_deref().unwrap_or(""));
        println!("{:<18} {}", "", steps.join(" → "));
    }
    println!(
        "\nRun one with `lab drill run NAME` (or a drill file); `--remediate 'CMD'` tests your own fix."
    );
    Ok(ExitCode::SUCCESS)
}

/// Prints a live line per step, the output of remediation commands, and each drill's verdict.
#[derive(Debug, Default)]
pub struct Printer;

impl Observer for Printer {
    fn event(&self, e: &Event<'_>) {
        let mut o = std::io::stdout().lock();
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
        let _ = o.flush();
    }
}

/// The lab, its snapshot source and the options a drill run (or the demo) needs.
pub async fn prepare(name: &str, remediate: Option<String>) -> anyhow::Result<(Lab, Ticking, Options)> {
    let rt = lab_runtime::open::open(name).await?;
    let lab = Lab {
        name: name.to_string(),
        runtime: rt.clone(),
        ledger: Ledger::of_lab(name),
    };
    let source = Ticking::new(session::driver(name, rt), Duration::from_secs(1));
    let options = Options {
        remediate,
        bundle_dir: lab_runtime::state::lab_dir(name).join("incidents"),
        command_env: vec![
            ("LAB_NAME".into(), name.to_string()),
            (
                "LAB_STATE_DIR".into(),
                lab_runtime::state::base_dir().display().to_string(),
            ),
        ],
        command_path: std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(PathBuf::from)),
    };
    Ok((lab, source, options))
}

async fn run_drills(name: &str, a: DrillRunArgs) -> anyhow::Result<ExitCode> {
    let drills: Vec<Loaded> = a
        .files
        .iter()
        .map(|f| lab_drills::resolve(f))
        .collect::<Result<_, _>>()?;
    let (lab, mut source, options) = prepare(name, a.remediate.clone()).await?;
    let guard = Guard::new(lab.clone());
    let started_ms = lab_runtime::state::now_ms();
    let clock = Instant::now();
    let printer = Printer;
    let runtime_kind = lab.runtime.kind().to_string();
    let all = async {
        let mut reports: Vec<DrillReport> = Vec::new();
        for l in &drills {
            // A drill that could not clean up left the lab in an unknown state: nothing after it is fair.
            if let Some(prev) = reports
                .iter()
                .find(|r| !r.cleanup.ok && r.steps.iter().any(|s| s.step == "cleanup"))
            {
                reports.push(DrillReport::not_run(
                    &l.drill,
                    &l.origin,
                    name,
                    &runtime_kind,
                    format!("not run: drill {} could not clean up after itself", prev.name),
                ));
                continue;
            }
            let r = lab_drills::run_drill(&lab, &mut source, &printer, &options, &guard, &l.drill, &l.origin)
                .await;
            reports.push(r);
        }
        reports
    };
    let reports = tokio::select! {
        r = all => r,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: cleaning up what the drill injected");
            for l in guard.abort().await {
                eprintln!("  {l}");
            }
            return Ok(ExitCode::from(130));
        }
    };
    let report = RunReport::new(name, started_ms, clock.elapsed().as_secs_f64(), reports);
    if let Some(p) = &a.report {
        let bytes = serde_json::to_vec_pretty(&report)?;
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
    println!("\n{}", report.summary_table());
    if let Some(p) = &a.report {
        println!("report: {}", p.display());
    }
    if let Some(p) = &a.junit {
        println!("junit:  {}", p.display());
    }
    if let Some(p) = &a.html {
        println!("html:   {}", p.display());
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
