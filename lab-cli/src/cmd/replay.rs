//! `lab replay DIR --agent CMD | --mcp-agent CMD`: scores an agent against recorded incidents, without a lab.

use crate::exit::Exit;

use lab_session::replay::{Agent, Level, ReplayRun, Score};

use crate::cli::ReplayArgs;
use crate::out::outln;

pub async fn replay(a: ReplayArgs) -> anyhow::Result<Exit> {
    // clap asks for one of the two.
    let agent = match (a.agent, a.mcp_agent) {
        (_, Some(cmd)) => Agent::Mcp(cmd),
        (Some(cmd), None) => Agent::Plans(cmd),
        (None, None) => Agent::Plans(String::new()),
    };
    let run = ReplayRun {
        dir: a.dir,
        agent,
        evidence: a.evidence.iter().map(|e| e.level()).collect(),
        timeout: a.agent_timeout,
        expect_fixed: a.expect_fixed,
        expect_stable: a.expect_stable,
    };
    let r = lab_session::replay::run(&run).await?;
    if a.json {
        crate::out::json_list(crate::formats::REPLAY, "levels", &r.levels)?;
    } else {
        for l in &r.levels {
            print_level(l);
        }
        if let Some(n) = a.expect_fixed {
            outln!(
                "{}",
                if r.fixed_ok {
                    format!("as expected: {n} fixed at every level")
                } else {
                    format!("REGRESSION: expected {n} fixed at every level given")
                }
            );
        }
        if a.expect_stable {
            if r.unstable.is_empty() {
                outln!("stable: every score the same when replayed again");
            } else {
                let levels: Vec<String> = r.unstable.iter().map(ToString::to_string).collect();
                outln!(
                    "UNSTABLE: scores changed when replayed again at {}",
                    levels.join(", ")
                );
            }
        }
    }
    Ok(if r.passed() { Exit::Passed } else { Exit::Failed })
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
            outln!(
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
                    (Some(s), Some(p)) => outln!(
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
                    _ => outln!(
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
            outln!(
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
                    Some(s) => outln!(
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
                    None => outln!(
                        "  {:<18} no score: {}",
                        i.drill,
                        i.problem.as_deref().unwrap_or("-")
                    ),
                }
            }
        }
    }
}
