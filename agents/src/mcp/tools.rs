//! The tools the lab offers an agent over MCP: each with its name, the least evidence level that offers it,
//! whether it reads or acts, a one-line description an agent can act on, a JSON schema, and the checked
//! arguments it takes. A tool above the agent's evidence level is not offered at all.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::EvidenceLevel;

/// What a tool does to the lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Looks; changes nothing.
    Read,
    /// Changes the lab, once approved.
    Act,
    /// Says what the agent concluded; changes nothing, and is scored.
    Report,
}

/// One tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolDef {
    pub name: &'static str,
    pub level: EvidenceLevel,
    pub kind: Kind,
    pub description: &'static str,
    schema: fn() -> Value,
}

impl ToolDef {
    /// Its input schema (JSON Schema, an object).
    pub fn schema(&self) -> Value {
        (self.schema)()
    }
}

fn no_args() -> Value {
    json!({"type": "object", "properties": {}, "additionalProperties": false})
}

fn query_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "expr": {"type": "string", "minLength": 1, "maxLength": 2000,
                     "description": "A PromQL expression over the lab's series, e.g. lab:storage_read_p50_seconds or rate(lab_samples_total[10s])"},
            "range_s": {"type": "number", "minimum": 1, "maximum": MAX_RANGE_S,
                        "description": "Evaluate over the last this many seconds (a range query); leave out for an instant query"},
            "step_s": {"type": "number", "minimum": 1, "maximum": 60,
                       "description": "The range query's step, seconds (default 5)"}
        },
        "required": ["expr"],
        "additionalProperties": false
    })
}

fn processes_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"rank": {"type": "integer", "minimum": 0, "maximum": 63, "description": "The rank, e.g. 1 for rank-1"}},
        "required": ["rank"],
        "additionalProperties": false
    })
}

fn logs_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "component": {"type": "string", "description": "A component of the lab: rank-0, storage-1, master, db-0, writer, ..."},
            "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_LINES, "description": "How many of its last lines (default 50)"}
        },
        "required": ["component"],
        "additionalProperties": false
    })
}

fn remediate_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "argv": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 16,
                     "description": "One lab command as argv, starting with \"lab\", e.g. [\"lab\", \"resize\", \"rank\", \"1\", \"--cpu\", \"400m\"]"},
            "reason": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "Why this step"},
            "cause": {"type": "string", "enum": crate::plan::causes(), "description": "The cause class this step fixes (the approval policy keys on it)"}
        },
        "required": ["argv", "reason"],
        "additionalProperties": false
    })
}

fn checkpoint_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"timeout_s": {"type": "integer", "minimum": 1, "maximum": 600, "description": "How long to wait for the save (default 60)"}},
        "additionalProperties": false
    })
}

fn diagnose_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "anomaly": {"type": "boolean", "description": "Whether anything is wrong at all"},
            "blame": {"type": "array", "items": {"type": "string"}, "maxItems": 16,
                      "description": "The components at fault, by the names the lab uses: storage-1, rank-2, ranks, job config, db-1"},
            "cause": {"type": "string", "enum": crate::plan::causes(), "description": "The cause class"},
            "summary": {"type": "string", "maxLength": 2000, "description": "The reasoning in a sentence or two"}
        },
        "required": ["anomaly", "cause"],
        "additionalProperties": false
    })
}

/// The longest range a query may cover, seconds.
pub const MAX_RANGE_S: f64 = 600.0;
/// The most log lines a call returns.
pub const MAX_LOG_LINES: u32 = 500;

/// Every tool, in the order a person investigates: look, narrow down, act, say what it was.
pub const TOOLS: [ToolDef; 10] = [
    ToolDef {
        name: "status",
        level: EvidenceLevel::Pods,
        kind: Kind::Read,
        description: "The lab now: each pod's phase, Ready and restarts (what Kubernetes says) beside the training job's own throughput, step time and firing golden-signal alerts (what the job says).",
        schema: no_args,
    },
    ToolDef {
        name: "incident",
        level: EvidenceLevel::Pods,
        kind: Kind::Read,
        description: "The incident as it opened (the bundle, cut to your evidence level), with what earlier attempts tried and how their verification failed.",
        schema: no_args,
    },
    ToolDef {
        name: "query",
        level: EvidenceLevel::Metrics,
        kind: Kind::Read,
        description: "Evaluate a PromQL expression over the lab's own series (the subset the lab's rule evaluator supports), now or over a recent range.",
        schema: query_schema,
    },
    ToolDef {
        name: "logs",
        level: EvidenceLevel::Metrics,
        kind: Kind::Read,
        description: "The last lines one component of the lab wrote (rank-N, storage-N, master, db-N, writer).",
        schema: logs_schema,
    },
    ToolDef {
        name: "dependencies",
        level: EvidenceLevel::Wiring,
        kind: Kind::Read,
        description: "Per storage server: read latency p50/p99 as the ranks see it, the server's own latency measured directly, its baseline, its readers and its clients; which one stands out.",
        schema: no_args,
    },
    ToolDef {
        name: "processes",
        level: EvidenceLevel::Wiring,
        kind: Kind::Read,
        description: "What runs inside one rank's CPU limit: each process with its command and CPU time (the rank's own and anything beside it).",
        schema: processes_schema,
    },
    ToolDef {
        name: "changes",
        level: EvidenceLevel::Changes,
        kind: Kind::Read,
        description: "The change log of the last hours, oldest first: who changed what, where, from what to what, and what the job's throughput did after it (an earlier fix is marked as one).",
        schema: no_args,
    },
    ToolDef {
        name: "checkpoint",
        level: EvidenceLevel::Pods,
        kind: Kind::Act,
        description: "Ask the training job to save a checkpoint now and wait until it has: save the run before any other change.",
        schema: checkpoint_schema,
    },
    ToolDef {
        name: "remediate",
        level: EvidenceLevel::Pods,
        kind: Kind::Act,
        description: "Run one lab command (argv, no shell) to fix the incident, once approved: lab scale ranks N, lab config world-size N, lab resize rank N --cpu Q, lab restart rank N, lab fault clear ..., lab storage drain N, lab rank stop N --pid P, lab job throttle|stop NAME, lab db delete-pod NAME, ...",
        schema: remediate_schema,
    },
    ToolDef {
        name: "diagnose",
        level: EvidenceLevel::Pods,
        kind: Kind::Report,
        description: "Say what you concluded: whether there is an anomaly, the components at fault and the cause class. Call it before you act; it is what your localization and cause are scored on.",
        schema: diagnose_schema,
    },
];

/// The tool `name`, if the lab has one by that name.
pub fn find(name: &str) -> Option<&'static ToolDef> {
    TOOLS.iter().find(|t| t.name == name)
}

/// The tools offered at `level`.
pub fn offered(level: EvidenceLevel) -> impl Iterator<Item = &'static ToolDef> {
    TOOLS.iter().filter(move |t| t.level <= level)
}

/// `query`'s arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryArgs {
    pub expr: String,
    pub range_s: Option<f64>,
    pub step_s: Option<f64>,
}

/// `processes`' arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessesArgs {
    pub rank: u32,
}

/// `logs`' arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsArgs {
    pub component: String,
    pub lines: Option<u32>,
}

/// `remediate`'s arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemediateArgs {
    pub argv: Vec<String>,
    pub reason: String,
    pub cause: Option<String>,
}

/// `checkpoint`'s arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointArgs {
    pub timeout_s: Option<u32>,
}

/// `diagnose`'s arguments: what the agent concluded.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Diagnosis {
    pub anomaly: bool,
    #[serde(default)]
    pub blame: Vec<String>,
    pub cause: String,
    #[serde(default)]
    pub summary: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// Checked arguments of a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Args {
    None,
    Query(QueryArgs),
    Processes(ProcessesArgs),
    Logs(LogsArgs),
    Remediate(RemediateArgs),
    Checkpoint(CheckpointArgs),
    Diagnose(Diagnosis),
}

/// Reads and checks `tool`'s arguments; `args` is what the call carried (an absent object is `{}`).
///
/// # Errors
/// A message naming the argument that is wrong and why, for the agent to correct.
pub fn parse(tool: &ToolDef, args: &Value) -> Result<Args, String> {
    fn typed<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T, String> {
        serde_json::from_value(v.clone()).map_err(|e| format!("invalid arguments: {e}"))
    }
    let a = match tool.name {
        "query" => {
            let q: QueryArgs = typed(args)?;
            if q.expr.trim().is_empty() || q.expr.len() > 2000 {
                return Err("expr must be a PromQL expression of 1 to 2000 characters".into());
            }
            if let Some(r) = q.range_s
                && !(1.0..=MAX_RANGE_S).contains(&r)
            {
                return Err(format!(
                    "range_s is {r}: give 1 to {MAX_RANGE_S} seconds, or leave it out"
                ));
            }
            if let Some(s) = q.step_s
                && !(1.0..=60.0).contains(&s)
            {
                return Err(format!("step_s is {s}: give 1 to 60 seconds"));
            }
            Args::Query(q)
        }
        "processes" => {
            let p: ProcessesArgs = typed(args)?;
            if p.rank > 63 {
                return Err(format!(
                    "rank is {}: the lab's ranks are numbered 0 to 63 at most",
                    p.rank
                ));
            }
            Args::Processes(p)
        }
        "logs" => {
            let l: LogsArgs = typed(args)?;
            if let Some(n) = l.lines
                && !(1..=MAX_LOG_LINES).contains(&n)
            {
                return Err(format!("lines is {n}: give 1 to {MAX_LOG_LINES}"));
            }
            if l.component.is_empty() || !l.component.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(format!(
                    "component {:?} is not a component's name (rank-1, storage-0, master, ...)",
                    l.component
                ));
            }
            Args::Logs(l)
        }
        "remediate" => {
            let r: RemediateArgs = typed(args)?;
            if r.reason.trim().is_empty() {
                return Err("reason is empty: say why this step".into());
            }
            if let Some(c) = &r.cause
                && !crate::plan::causes().contains(&c.as_str())
            {
                return Err(format!(
                    "cause {c:?} is not one of: {}",
                    crate::plan::causes().join(", ")
                ));
            }
            crate::plan::allowed(&r.argv)
                .map_err(|why| format!("command {:?} is refused: {why}", r.argv.join(" ")))?;
            Args::Remediate(r)
        }
        "checkpoint" => {
            let c: CheckpointArgs = typed(args)?;
            if let Some(t) = c.timeout_s
                && !(1..=600).contains(&t)
            {
                return Err(format!("timeout_s is {t}: give 1 to 600 seconds"));
            }
            Args::Checkpoint(c)
        }
        "diagnose" => {
            let d: Diagnosis = typed(args)?;
            if !crate::plan::causes().contains(&d.cause.as_str()) {
                return Err(format!(
                    "cause {:?} is not one of: {}",
                    d.cause,
                    crate::plan::causes().join(", ")
                ));
            }
            Args::Diagnose(d)
        }
        _ => {
            let _: NoArgs = typed(args)?;
            Args::None
        }
    };
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_offers_the_tools_at_or_below_it() {
        let names = |l| offered(l).map(|t| t.name).collect::<Vec<_>>();
        assert_eq!(
            names(EvidenceLevel::Pods),
            ["status", "incident", "checkpoint", "remediate", "diagnose"]
        );
        let m = names(EvidenceLevel::Metrics);
        assert!(m.contains(&"query") && m.contains(&"logs"));
        assert!(!m.contains(&"dependencies") && !m.contains(&"changes"), "{m:?}");
        assert!(names(EvidenceLevel::Wiring).contains(&"dependencies"));
        assert!(!names(EvidenceLevel::Wiring).contains(&"changes"));
        assert_eq!(names(EvidenceLevel::Full).len(), TOOLS.len());
        for t in TOOLS {
            assert!(
                !t.description.is_empty() && t.description.len() < 400,
                "{}",
                t.name
            );
            assert_eq!(t.schema()["type"], "object", "{}", t.name);
        }
    }

    #[test]
    fn bad_arguments_are_named() {
        let e = |tool: &str, v: Value| parse(find(tool).unwrap(), &v).unwrap_err();
        assert!(e("status", json!({"x": 1})).contains("unknown field `x`"));
        assert!(e("processes", json!({"rank": "one"})).contains("invalid type"));
        assert!(e("processes", json!({})).contains("missing field `rank`"));
        assert!(e("processes", json!({"rank": 99})).contains("0 to 63"));
        assert!(e("logs", json!({"component": "../etc"})).contains("not a component"));
        assert!(e("logs", json!({"component": "rank-1", "lines": 0})).contains("1 to 500"));
        assert!(e("query", json!({"expr": "up", "range_s": 9999})).contains("range_s"));
        let r = e("remediate", json!({"argv": ["lab", "down"], "reason": "r"}));
        assert!(r.contains("refused") && r.contains("allow-list"), "{r}");
        assert!(e("remediate", json!({"argv": ["sh", "-c", "x"], "reason": "r"})).contains("only `lab`"));
        assert!(
            e("remediate", json!({"argv": ["lab", "status"], "reason": " "})).contains("reason is empty")
        );
        assert!(e("diagnose", json!({"anomaly": true, "cause": "gremlins"})).contains("not one of"));
        let ok = parse(
            find("remediate").unwrap(),
            &json!({"argv": ["lab", "scale", "ranks", "4"], "reason": "fits", "cause": "over-scaled"}),
        );
        assert!(matches!(ok, Ok(Args::Remediate(_))));
    }
}
