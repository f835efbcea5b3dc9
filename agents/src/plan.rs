//! The plan an agent prints: what it concluded (anomaly or not, the components it blames, the cause class)
//! and the ordered lab commands it proposes, each with a reason. [`parse`] reads it and checks every
//! command against the allow-list: only `lab` commands that change the lab the way a remediation may, as
//! argv (no shell), and never on another lab.

use serde::{Deserialize, Serialize};

/// The plan format's identifier, versioned.
pub const PLAN_FORMAT: &str = "straggler-lab.plan/v1";

/// The most commands a plan may hold.
pub const MAX_COMMANDS: usize = 10;

/// The cause classes a plan may name (docs/agents.md defines each): each fault's in the catalogue
/// (`lab_model::fault::Spec::CAUSE`), then `none` and `unknown`.
pub fn causes() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = lab_model::FaultKind::ALL.iter().map(|k| k.cause()).collect();
    v.extend(["none", "unknown"]);
    v
}

/// The `lab` subcommands a plan may run, as argv prefixes after `lab`.
pub const ALLOWED: [&[&str]; 19] = [
    &["scale", "ranks"],
    &["config", "world-size"],
    &["resize", "rank"],
    &["restart", "rank"],
    &["apply"],
    &["fault", "clear"],
    &["status"],
    &["rank", "procs"],
    &["rank", "stop"],
    &["rank", "env"],
    &["job", "list"],
    &["job", "throttle"],
    &["job", "stop"],
    &["storage", "drain"],
    &["storage", "undrain"],
    &["checkpoint"],
    &["db", "status"],
    &["db", "template"],
    &["db", "delete-pod"],
];

/// One proposed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanCommand {
    /// The command as argv, starting with `lab`.
    pub argv: Vec<String>,
    /// Why this step.
    pub reason: String,
}

impl PlanCommand {
    /// The command as one line, for people (`lab scale ranks 4`).
    pub fn line(&self) -> String {
        self.argv.join(" ")
    }
}

/// A plan as an agent prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub format: String,
    /// Whether the agent sees an anomaly at all.
    pub anomaly: bool,
    /// The components it blames, by the names the bundle uses (`storage-1`, `rank-1`, `ranks`, `job config`).
    #[serde(default)]
    pub blame: Vec<String>,
    /// One of [`causes`].
    pub cause: String,
    /// Its reasoning in a sentence or two.
    #[serde(default)]
    pub summary: String,
    /// The ordered commands; empty when it proposes nothing.
    #[serde(default)]
    pub commands: Vec<PlanCommand>,
}

/// Why a plan was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the agent printed nothing: a plan is one JSON object on stdout")]
    Empty,
    #[error("the agent's output is not a plan: {0}")]
    NotJson(String),
    #[error("the plan's format is {found:?}, this lab reads {PLAN_FORMAT:?}")]
    Format { found: String },
    #[error("the plan names the cause {0:?}, which is not one of: {causes}", causes = causes().join(", "))]
    Cause(String),
    #[error("the plan has {0} commands; at most {MAX_COMMANDS}")]
    TooMany(usize),
    #[error("command {index} ({line:?}) is refused: {why}")]
    Command { index: usize, line: String, why: String },
}

/// Parses the agent's stdout as a plan and checks it; nothing runs here.
///
/// # Errors
/// A [`PlanError`] saying what is wrong with the plan.
pub fn parse(stdout: &str) -> Result<Plan, PlanError> {
    let text = stdout.trim();
    if text.is_empty() {
        return Err(PlanError::Empty);
    }
    let plan: Plan = serde_json::from_str(text).map_err(|e| PlanError::NotJson(e.to_string()))?;
    check(&plan)?;
    Ok(plan)
}

/// Checks a parsed plan: its format, its cause class, and every command against the allow-list.
///
/// # Errors
/// The first problem found.
pub fn check(plan: &Plan) -> Result<(), PlanError> {
    if plan.format != PLAN_FORMAT {
        return Err(PlanError::Format {
            found: plan.format.clone(),
        });
    }
    if !causes().contains(&plan.cause.as_str()) {
        return Err(PlanError::Cause(plan.cause.clone()));
    }
    if plan.commands.len() > MAX_COMMANDS {
        return Err(PlanError::TooMany(plan.commands.len()));
    }
    for (i, c) in plan.commands.iter().enumerate() {
        allowed(&c.argv).map_err(|why| PlanError::Command {
            index: i + 1,
            line: c.line(),
            why,
        })?;
    }
    Ok(())
}

/// Whether `argv` is a lab command a plan (or an agent's act) may run.
///
/// # Errors
/// Why it may not.
pub fn allowed(argv: &[String]) -> Result<(), String> {
    let Some((first, rest)) = argv.split_first() else {
        return Err("it is empty".into());
    };
    if first != "lab" {
        return Err(format!("only `lab` commands may run, not {first:?}"));
    }
    // An empty argument only as a flag's value (`--node-selector ''`: none); anywhere else it is a slip.
    let empty_out_of_place = |i: usize| i == 0 || !argv[i - 1].starts_with("--");
    if let Some((_, bad)) = argv
        .iter()
        .enumerate()
        .find(|(i, a)| a.contains('\0') || (a.is_empty() && empty_out_of_place(*i)))
    {
        return Err(format!("argument {bad:?} is empty or holds a NUL"));
    }
    if rest.iter().any(|a| a == "--name" || a.starts_with("--name=")) {
        return Err("a plan acts on the lab under test: `--name` is not allowed".into());
    }
    let ok = ALLOWED
        .iter()
        .any(|prefix| rest.len() >= prefix.len() && prefix.iter().zip(rest).all(|(p, a)| p == a));
    if !ok {
        let list: Vec<String> = ALLOWED.iter().map(|p| format!("lab {}", p.join(" "))).collect();
        return Err(format!("not on the allow-list ({})", list.join(", ")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(cmds: &[&[&str]]) -> String {
        serde_json::json!({
            "format": PLAN_FORMAT,
            "anomaly": true,
            "blame": ["storage-1"],
            "cause": "bad-network-path",
            "summary": "storage-1 is slow",
            "commands": cmds.iter().map(|c| serde_json::json!({"argv": c, "reason": "because"})).collect::<Vec<_>>(),
        })
        .to_string()
    }

    #[test]
    fn a_good_plan_parses() {
        let p = parse(&plan(&[
            &["lab", "scale", "ranks", "4"],
            &["lab", "config", "world-size", "4"],
        ]))
        .unwrap();
        assert_eq!(p.commands.len(), 2);
        assert_eq!(p.commands[0].line(), "lab scale ranks 4");
        // Checkpoint first: saving the run is a step a plan may take before its fix.
        let p = parse(&plan(&[
            &["lab", "checkpoint", "--timeout", "30s"],
            &["lab", "fault", "clear", "--all"],
        ]))
        .unwrap();
        assert_eq!(p.commands[0].line(), "lab checkpoint --timeout 30s");
    }

    #[test]
    fn an_empty_argument_is_a_flags_value_only() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // The seed's general fix for sync-replica: the standby's template without a node selector.
        assert_eq!(
            allowed(&argv(&["lab", "db", "template", "--node-selector", ""])),
            Ok(())
        );
        for bad in [
            &["lab", "db", "template", "", "--node-selector"][..],
            &["lab", "restart", "rank", ""][..],
        ] {
            let e = allowed(&argv(bad)).unwrap_err();
            assert!(e.contains("is empty"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn bad_plans_are_refused_with_why() {
        assert_eq!(parse("  \n"), Err(PlanError::Empty));
        assert!(matches!(parse("restart rank 1"), Err(PlanError::NotJson(_))));
        let e = parse(&plan(&[&["sh", "-c", "lab fault clear --all"]])).unwrap_err();
        assert!(e.to_string().contains("only `lab` commands"), "{e}");
        let e = parse(&plan(&[&["lab", "down"]])).unwrap_err();
        assert!(e.to_string().contains("allow-list"), "{e}");
        let e = parse(&plan(&[&["lab", "fault", "inject", "slow-storage"]])).unwrap_err();
        assert!(e.to_string().contains("allow-list"), "{e}");
        let e = parse(&plan(&[&["lab", "--name", "other", "restart", "rank", "1"]])).unwrap_err();
        assert!(e.to_string().contains("--name"), "{e}");
        let e = parse(&plan(&[&[]])).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let wrong = plan(&[]).replace(PLAN_FORMAT, "straggler-lab.plan/v0");
        assert!(matches!(parse(&wrong), Err(PlanError::Format { .. })));
        let cause = plan(&[]).replace("bad-network-path", "gremlins");
        assert!(matches!(parse(&cause), Err(PlanError::Cause(_))));
        let extra = plan(&[]).replace("\"anomaly\"", "\"shell\":\"rm -rf\",\"anomaly\"");
        assert!(matches!(parse(&extra), Err(PlanError::NotJson(_))));
        let many: Vec<&[&str]> = vec![&["lab", "status"]; MAX_COMMANDS + 1];
        assert_eq!(parse(&plan(&many)), Err(PlanError::TooMany(MAX_COMMANDS + 1)));
    }
}
