//! `lab demo`: the seed story end to end. The lab comes up, then each of the three faults in turn is
//! injected, detected by the golden signals while Kubernetes still says Ready, remediated and verified on
//! the job's own signals, with the Kubernetes view beside the training view at each stage. Fault 3 replays
//! the seed's lesson: scaling back alone leaves the job stalled (verification keeps failing), restoring the
//! world size brings it back. Ends with a table of what was measured, then takes the lab down.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use lab_drills::engine::{Guard, Session};
use lab_drills::report::{DrillReport, Verdict};
use lab_drills::spec::{Expect, Remediate, Step, Verify};
use lab_drills::{Lab, Options, Ticking, builtin};
use lab_faults::{Fault, FaultKind};
use lab_model::Snapshot;
use lab_model::status::Phase;

use crate::cli::{Cli, Command, DemoArgs, RuntimeArg};
use crate::cmd::drill::{Printer, prepare};
use crate::cmd::lifecycle;
use crate::out;

/// How long the demo watches a fault after detecting it, so the screen shows its steady effect.
const HOLD: Duration = Duration::from_secs(10);
/// How long the demo gives the seed's first, incomplete fix for fault 3 before the second one.
const WRONG_FIX_WINDOW: Duration = Duration::from_secs(30);

pub async fn demo(name: &str, a: DemoArgs) -> anyhow::Result<ExitCode> {
    let clock = Instant::now();
    println!(
        "Straggler Lab demo: one slow component stalls a synchronous training job while Kubernetes says every\n\
         pod is Ready. Three faults in turn, each detected, remediated and verified on the job's own signals.\n\
         This takes a few minutes.\n"
    );
    let existing = lab_runtime::state::read_record(name)?.is_some();
    if existing {
        println!("Using the lab {name:?} that is already running; it stays up afterwards.");
    } else {
        let runtime = match a.runtime {
            RuntimeArg::Auto => "auto",
            RuntimeArg::Local => "local",
            RuntimeArg::Kind => "kind",
        };
        let Command::Up(up) = Cli::try_parse_from(["lab", "up", "--runtime", runtime])?.command else {
            unreachable!("`lab up` parses as the up command");
        };
        lifecycle::up(name, up).await?;
    }
    let keep = a.keep || existing;
    let (lab, mut source, options) = prepare(name, None).await?;
    let guard = Guard::new(lab.clone());
    let story = story(&lab, &mut source, &options, &guard, clock);
    let rows = tokio::select! {
        r = story => r,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ninterrupted: clearing what the demo injected");
            for l in guard.abort().await {
                eprintln!("  {l}");
            }
            if !keep {
                lifecycle::down(name, false).await?;
            }
            return Ok(ExitCode::from(130));
        }
    };
    println!("\n━━ What was measured ({}) ━━", elapsed(clock));
    println!("{}", table(&rows));
    let passed = rows.len() == 3 && rows.iter().all(|r| r.report.verdict == Verdict::Pass);
    if keep {
        let flag = out::name_flag(name);
        println!(
            "The lab stays up: lab console{flag} · lab fault inject slow-storage{flag} · lab down{flag}"
        );
    } else {
        println!();
        lifecycle::down(name, false).await?;
    }
    if passed {
        println!(
            "Demo complete: every fault was caught by the job's own signals and fixed, while Ready never changed."
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("Demo finished with failures: see the lines marked ✗ above.");
        Ok(ExitCode::FAILURE)
    }
}

fn elapsed(clock: Instant) -> String {
    let s = clock.elapsed().as_secs();
    format!("{}m{:02}s", s / 60, s % 60)
}

/// One fault's line in the final table.
struct Row {
    title: &'static str,
    kubernetes: String,
    fix: String,
    report: DrillReport,
}

fn show(title: &str, snap: Option<&Snapshot>) {
    let Some(s) = snap else { return };
    println!("\n  ┌─ {title}");
    for line in lab_console::status_text(s).lines() {
        println!("  │ {line}");
    }
    println!("  └─");
}

/// Kubernetes' view in a few words: `4/4 Ready`, `4/5 Ready, 1 Pending`.
fn kube_words(s: Option<&Snapshot>) -> String {
    let Some(s) = s else { return "-".into() };
    let (ready, total) = s.status.ranks_ready();
    let pending = s.status.ranks().filter(|p| p.phase == Phase::Pending).count();
    let mut w = format!("{ready}/{total} Ready");
    if pending > 0 {
        w.push_str(&format!(", {pending} Pending"));
    }
    w
}

fn parts(kind: FaultKind) -> anyhow::Result<(lab_drills::Loaded, Fault, Expect, Verify)> {
    let loaded = builtin::builtin(kind.name())?;
    let mut fault = None;
    let mut expect = None;
    let mut verify = None;
    for s in &loaded.drill.steps {
        match s {
            Step::Inject(f) => fault = Some(f.clone()),
            Step::Expect(e) => expect = Some(e.clone()),
            Step::Verify(v) => verify = Some(v.clone()),
            Step::Remediate(_) => {}
        }
    }
    let (Some(fault), Some(mut expect), Some(verify)) = (fault, expect, verify) else {
        anyhow::bail!(
            "the built-in drill {} lacks an inject, expect or verify step",
            kind.name()
        );
    };
    expect.hold = expect.hold.max(HOLD);
    Ok((loaded, fault, expect, verify))
}

fn command(cmd: &str) -> Remediate {
    Remediate {
        command: Some(cmd.to_string()),
        timeout: Duration::from_secs(180),
    }
}

async fn story(
    lab: &Lab,
    source: &mut Ticking,
    options: &Options,
    guard: &Guard,
    clock: Instant,
) -> Vec<Row> {
    let printer = Printer;
    let chapters: [(FaultKind, &'static str, &'static str); 3] = [
        (
            FaultKind::SlowStorage,
            "a slow storage server",
            "storage-1 answers every request 300 ms late. Fix: remove the added delay (the lab's own clear).",
        ),
        (
            FaultKind::ThrottledRank,
            "one throttled worker",
            "rank-1's CPU limit is cut in place to 150m; its template keeps 400m. Fix: replace the drifted pod \
             (`lab restart rank 1`), not re-apply a template that was right all along.",
        ),
        (
            FaultKind::UnplaceableRank,
            "one worker that cannot be placed",
            "The job is scaled to 5 ranks on 4 GPUs and told to expect 5 peers. First fix, as in the seed: scale \
             back to 4 — not enough. Second: restore the world size to 4.",
        ),
    ];
    let mut rows = Vec::new();
    for (i, (kind, title, plan)) in chapters.into_iter().enumerate() {
        println!("\n━━ Fault {} of 3: {title} ({}) ━━", i + 1, elapsed(clock));
        println!("{plan}");
        let (loaded, fault, expect, verify) = match parts(kind) {
            Ok(p) => p,
            Err(e) => {
                println!("✗ {e}");
                continue;
            }
        };
        let mut s = Session::new(lab.clone(), source, &printer, options, guard.clone());
        let mut kubernetes = "-".to_string();
        let mut fix = String::new();
        'chapter: {
            if !s.check_lab(&loaded.drill).await.ok {
                break 'chapter;
            }
            if !s.settle(loaded.drill.warmup, loaded.drill.baseline).await.ok {
                break 'chapter;
            }
            if i == 0 {
                show("Before any fault", s.last_snapshot());
            }
            if !s.inject(fault).await.ok {
                break 'chapter;
            }
            let detected = s.expect(&expect).await.ok;
            kubernetes = kube_words(s.last_snapshot());
            show(
                "Under the fault: Kubernetes' view beside the job's",
                s.last_snapshot(),
            );
            if !detected {
                break 'chapter;
            }
            match kind {
                FaultKind::SlowStorage => {
                    fix = "the lab's own clear (delay removed)".into();
                    if !s
                        .remediate(&Remediate {
                            command: None,
                            timeout: Duration::from_secs(120),
                        })
                        .await
                        .ok
                    {
                        break 'chapter;
                    }
                }
                FaultKind::ThrottledRank => {
                    fix = "lab restart rank 1".into();
                    if !s.remediate(&command("lab restart rank 1")).await.ok {
                        break 'chapter;
                    }
                }
                FaultKind::UnplaceableRank => {
                    if !s.remediate(&command("lab scale ranks 4")).await.ok {
                        break 'chapter;
                    }
                    let first = Verify {
                        deadline: WRONG_FIX_WINDOW,
                        ..verify.clone()
                    };
                    if s.verify(&first).await.ok {
                        fix = "lab scale ranks 4 (held, unlike in the seed)".into();
                        show("After scaling back to 4 ranks", s.last_snapshot());
                        break 'chapter;
                    }
                    show(
                        "After scaling back to 4 ranks only: every rank Ready, the job still stalled",
                        s.last_snapshot(),
                    );
                    println!(
                        "  → verification failed, so the incident goes back for a second plan: restore the world size"
                    );
                    s.retry();
                    fix = "lab scale ranks 4 (not enough) → lab config world-size 4".into();
                    if !s.remediate(&command("lab config world-size 4")).await.ok {
                        break 'chapter;
                    }
                }
            }
            if s.verify(&verify).await.ok {
                show(
                    "Recovered: throughput and step time back at the baseline",
                    s.last_snapshot(),
                );
            }
        }
        s.cleanup(loaded.drill.cleanup_deadline).await;
        s.rejudge();
        let report = s.into_report(&loaded.drill, &loaded.origin);
        let f = &report.figures;
        println!(
            "{} {}: detected in {}, back to baseline {} after the injection, {} steps lost{}",
            if report.verdict == Verdict::Pass {
                "✓"
            } else {
                "✗"
            },
            title,
            secs(f.time_to_detect_s),
            secs(f.time_to_baseline_s),
            f.steps_lost,
            if report.verdict == Verdict::Pass {
                String::new()
            } else {
                format!(" — {}", report.reason)
            }
        );
        rows.push(Row {
            title,
            kubernetes,
            fix,
            report,
        });
        // A fault that could not be cleaned up leaves nothing fair for the next one.
        if rows.last().is_some_and(|r| !r.report.cleanup.ok) {
            println!("!!! the lab could not be brought back to its steady state: stopping the demo here");
            break;
        }
    }
    rows
}

fn secs(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1} s"))
}

fn table(rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<38} {:<22} {:>16} {:>9} {:>10} {:>10} {:>6}  FIX",
        "FAULT", "KUBERNETES", "TRAINING (FAULT)", "DETECT", "MITIGATED", "BACK AT", "LOST"
    );
    for r in rows {
        let f = &r.report.figures;
        let _ = writeln!(
            o,
            "{:<38} {:<22} {:>16} {:>9} {:>10} {:>10} {:>6}  {}",
            format!("{} {}", r.report.verdict, r.title),
            r.kubernetes,
            f.fault_throughput_pct
                .or(f.lowest_throughput_pct)
                .map_or("-".into(), |p| format!("{p:.0}% of normal")),
            secs(f.time_to_detect_s),
            secs(f.time_to_mitigate_s),
            secs(f.time_to_baseline_s),
            f.steps_lost,
            r.fix
        );
    }
    let _ = write!(
        o,
        "Times are from the injection. Training (fault) is the median throughput while the fault was in,\n\
         against the baseline measured just before it. Fixed means step time and throughput back, not Ready."
    );
    o
}
