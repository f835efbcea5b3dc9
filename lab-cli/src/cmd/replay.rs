//! `lab replay DIR --agent CMD`: scores an agent against recorded incidents, without a lab.

use std::process::ExitCode;

use lab_drills::agent::replay::{ReplayReport, replay as run_replay};

use crate::cli::ReplayArgs;

pub async fn replay(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    let mut reports: Vec<ReplayReport> = Vec::new();
    for level in &a.evidence {
        let r = run_replay(&a.dir, &a.agent, level.level(), a.agent_timeout)
            .await
            .map_err(anyhow::Error::msg)?;
        reports.push(r);
    }
    let mut ok = true;
    for r in &reports {
        if let Some(n) = a.expect_fixed
            && r.fixed != n
        {
            ok = false;
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            println!(
                "evidence {}: {} of {} incidents fixed, {} traps, {} unknown, {} without a plan ({:.2} s)",
                r.evidence,
                r.fixed,
                r.incidents.len(),
                r.failed,
                r.unknown,
                r.no_plan,
                r.duration_s
            );
            for i in &r.incidents {
                match (&i.score, &i.plan) {
                    (Some(s), Some(p)) => println!(
                        "  {:<18} {:?}: {} · blames [{}] (precision {}, recall {:.2}) · cause {} ({}) · {:.2} s\n  {:<18}   plan: {}",
                        i.drill,
                        s.mitigation,
                        i.known,
                        p.blame.join(", "),
                        s.precision.map_or("-".into(), |v| format!("{v:.2}")),
                        s.recall,
                        s.cause_named,
                        if s.cause { "right" } else { "wrong" },
                        i.duration_s,
                        "",
                        if p.commands.is_empty() {
                            "no command".to_string()
                        } else {
                            p.commands
                                .iter()
                                .map(|c| c.line())
                                .collect::<Vec<_>>()
                                .join(" && ")
                        }
                    ),
                    _ => println!(
                        "  {:<18} no plan: {}",
                        i.drill,
                        i.problem.as_deref().unwrap_or("-")
                    ),
                }
            }
        }
        if let Some(n) = a.expect_fixed {
            println!(
                "{}",
                if ok {
                    format!("as expected: {n} fixed at every level")
                } else {
                    format!("REGRESSION: expected {n} fixed at every level given")
                }
            );
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
