//! `lab replay DIR --agent CMD | --mcp-agent CMD`: scores an agent against recorded incidents, without a lab.

use std::process::ExitCode;

use lab_drills::agent::replay::{McpReplayed, ReplayReport, replay as run_replay, replay_mcp};
use lab_drills::agent::{EvidenceLevel, Mitigation, Score};
use serde::Serialize;

use crate::cli::ReplayArgs;

/// One level's replay, whichever protocol the agent speaks.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Level {
    Plans(ReplayReport),
    Mcp {
        agent: String,
        evidence: EvidenceLevel,
        incidents: Vec<McpReplayed>,
        fixed: usize,
        duration_s: f64,
    },
}

impl Level {
    fn fixed(&self) -> usize {
        match self {
            Level::Plans(r) => r.fixed,
            Level::Mcp { fixed, .. } => *fixed,
        }
    }

    /// What must not change from one replay to the next: each incident's score and outcome.
    fn scores(&self) -> Vec<(String, Option<Score>, String)> {
        match self {
            Level::Plans(r) => r
                .incidents
                .iter()
                .map(|i| (i.drill.clone(), i.score.clone(), i.known.clone()))
                .collect(),
            Level::Mcp { incidents, .. } => incidents
                .iter()
                .map(|i| (i.drill.clone(), i.score.clone(), i.known.clone()))
                .collect(),
        }
    }
}

async fn replay_level(a: &ReplayArgs, level: EvidenceLevel) -> anyhow::Result<Level> {
    if let Some(agent) = &a.mcp_agent {
        let started = std::time::Instant::now();
        let lab = std::env::current_exe()?;
        let incidents = replay_mcp(&a.dir, agent, level, a.agent_timeout, &lab)
            .await
            .map_err(anyhow::Error::msg)?;
        let fixed = incidents
            .iter()
            .filter(|i| {
                i.score
                    .as_ref()
                    .is_some_and(|s| s.mitigation == Mitigation::Fixed)
            })
            .count();
        return Ok(Level::Mcp {
            agent: agent.clone(),
            evidence: level,
            incidents,
            fixed,
            duration_s: started.elapsed().as_secs_f64(),
        });
    }
    let agent = a.agent.as_deref().unwrap_or_default();
    let r = run_replay(&a.dir, agent, level, a.agent_timeout)
        .await
        .map_err(anyhow::Error::msg)?;
    Ok(Level::Plans(r))
}

pub async fn replay(a: ReplayArgs) -> anyhow::Result<ExitCode> {
    let mut levels: Vec<Level> = Vec::new();
    for level in &a.evidence {
        levels.push(replay_level(&a, level.level()).await?);
    }
    let mut unstable = Vec::new();
    if a.expect_stable {
        for (level, first) in a.evidence.iter().zip(&levels) {
            let again = replay_level(&a, level.level()).await?;
            if again.scores() != first.scores() {
                unstable.push(level.level().to_string());
            }
        }
    }
    let fixed_ok = a
        .expect_fixed
        .is_none_or(|n| levels.iter().all(|l| l.fixed() == n));
    let ok = fixed_ok && unstable.is_empty();
    if a.json {
        crate::out::json(&levels)?;
    } else {
        for l in &levels {
            print_level(l);
        }
        if let Some(n) = a.expect_fixed {
            println!(
                "{}",
                if fixed_ok {
                    format!("as expected: {n} fixed at every level")
                } else {
                    format!("REGRESSION: expected {n} fixed at every level given")
                }
            );
        }
        if a.expect_stable {
            if unstable.is_empty() {
                println!("stable: every score the same when replayed again");
            } else {
                println!(
                    "UNSTABLE: scores changed when replayed again at {}",
                    unstable.join(", ")
                );
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn score_line(s: &Score, blame: &[String]) -> String {
    format!(
        "{:?} · blames [{}] (precision {}, recall {:.2}) · cause {} ({})",
        s.mitigation,
        blame.join(", "),
        s.precision.map_or("-".into(), |v| format!("{v:.2}")),
        s.recall,
        s.cause_named,
        if s.cause { "right" } else { "wrong" },
    )
}

fn print_level(l: &Level) {
    match l {
        Level::Plans(r) => {
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
                        "  {:<18} {}: {} · {:.2} s\n  {:<18}   plan: {}",
                        i.drill,
                        score_line(s, &p.blame),
                        i.known,
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
        Level::Mcp {
            evidence,
            incidents,
            fixed,
            duration_s,
            ..
        } => {
            println!(
                "evidence {evidence} (MCP): {fixed} of {} incidents fixed ({duration_s:.2} s)",
                incidents.len()
            );
            for i in incidents {
                let acts: Vec<String> = i
                    .calls
                    .iter()
                    .filter_map(|c| c.act.as_ref())
                    .filter(|a| a.approved)
                    .map(|a| a.argv.join(" "))
                    .collect();
                match &i.score {
                    Some(s) => println!(
                        "  {:<18} {}: {} · {} calls · {:.2} s\n  {:<18}   acts: {}",
                        i.drill,
                        score_line(
                            s,
                            &i.diagnosis.as_ref().map(|d| d.blame.clone()).unwrap_or_default()
                        ),
                        i.known,
                        i.calls.len(),
                        i.duration_s,
                        "",
                        if acts.is_empty() {
                            "none".to_string()
                        } else {
                            acts.join(" && ")
                        }
                    ),
                    None => println!(
                        "  {:<18} no score: {}",
                        i.drill,
                        i.problem.as_deref().unwrap_or("-")
                    ),
                }
            }
        }
    }
}
