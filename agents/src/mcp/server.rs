//! The MCP server: the tools of [`super::tools`] over one source of evidence (a live lab, or a recorded
//! incident), cut to the agent's evidence level, acts gated by the approval, every call recorded. Calls are
//! served one at a time, in the order they come: an agent's acts never interleave.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

use super::calls::{ActRecord, CallLog, Outcome, ToolCall};
use super::tools::{self, Args, Diagnosis, Kind, QueryArgs, ToolDef};
use crate::approval::Approval;
use crate::{EvidenceLevel, Mitigation, evidence};

/// What an act did, as the source that ran it saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Acted {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The change records it wrote, one line each.
    pub changes: Vec<String>,
    /// The components those changes touched.
    pub touched: Vec<String>,
    /// In a replay: what live verification said of the act.
    pub judged: Option<(Mitigation, String)>,
}

/// Where the tools' answers come from: a live lab, or a recording.
#[async_trait]
pub trait Evidence: Send + Sync + 'static {
    /// The whole bundle of the lab as it is now (or, in a replay, as recorded at this moment).
    async fn now(&self) -> Result<Value, String>;
    /// The incident's bundle as it opened, whole, with `previous_attempts`.
    async fn incident(&self) -> Result<Value, String>;
    /// A PromQL expression over the lab's series, now or over a recent range.
    async fn query(&self, q: &QueryArgs) -> Result<Value, String>;
    /// What runs in rank `rank`'s CPU limit.
    async fn processes(&self, rank: u32) -> Result<Value, String>;
    /// The last `lines` lines of `component`'s log.
    async fn logs(&self, component: &str, lines: u32) -> Result<Value, String>;
    /// Runs one checked `lab` command.
    async fn act(&self, argv: &[String]) -> Result<Acted, String>;
    /// Whether this source answers `tool` (a recording may hold no series for `query`).
    fn answers(&self, _tool: &str) -> bool {
        true
    }
    /// Called after every call: a replay's clock moves on.
    fn after_call(&self) {}
}

/// How the server is set up.
#[derive(Debug)]
pub struct Settings {
    /// The lab (or the recorded incident) it serves, for the server's instructions.
    pub name: String,
    pub level: EvidenceLevel,
    pub approval: Approval,
    pub log: Arc<CallLog>,
}

/// The lab as an MCP server.
pub struct Server<E: Evidence> {
    inner: Arc<Inner<E>>,
}

impl<E: Evidence> Clone for Server<E> {
    fn clone(&self) -> Self {
        Server {
            inner: self.inner.clone(),
        }
    }
}

impl<E: Evidence> std::fmt::Debug for Server<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.inner.settings.name)
            .field("level", &self.inner.settings.level)
            .finish_non_exhaustive()
    }
}

struct Inner<E> {
    evidence: E,
    settings: Settings,
    /// One call at a time; holds the agent's latest diagnosis.
    serial: tokio::sync::Mutex<Option<Diagnosis>>,
}

/// The most of a command's output an act hands back.
const OUTPUT_TAIL: usize = 4000;

impl<E: Evidence> Server<E> {
    /// A server over `evidence`.
    pub fn new(evidence: E, settings: Settings) -> Server<E> {
        Server {
            inner: Arc::new(Inner {
                evidence,
                settings,
                serial: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// The tools offered, as MCP lists them.
    pub fn tools(&self) -> Vec<Tool> {
        tools::offered(self.inner.settings.level)
            .filter(|t| self.inner.evidence.answers(t.name))
            .map(|t| {
                let schema = match t.schema() {
                    Value::Object(o) => o,
                    _ => serde_json::Map::new(),
                };
                Tool::new(t.name, t.description, schema)
            })
            .collect()
    }

    /// Serves the MCP protocol on stdin and stdout until the client closes it. A line that is not a
    /// JSON-RPC message is answered with the JSON-RPC error that names what is wrong (and recorded) here,
    /// before the protocol engine sees it: a client that sent garbage learns why.
    ///
    /// # Errors
    /// A message when the protocol cannot start (the client never initialises) or breaks.
    pub async fn serve_stdio(self) -> Result<(), String> {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (from_server, mut to_server) = tokio::io::split(ours);
        let out = Arc::new(tokio::sync::Mutex::new(tokio::io::stdout()));
        let log = self.inner.settings.log.clone();
        let filter = {
            let out = out.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
                let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    match super::wire::check(&line) {
                        Ok(()) => {
                            if to_server.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                                break;
                            }
                        }
                        Err(bad) => {
                            log.push(bad.call(log.next_seq(), &line));
                            let mut o = out.lock().await;
                            let _ = o.write_all(format!("{}\n", bad.response()).as_bytes()).await;
                            let _ = o.flush().await;
                        }
                    }
                }
                let _ = to_server.shutdown().await;
            })
        };
        let copier = tokio::spawn(async move {
            use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
            let mut lines = tokio::io::BufReader::new(from_server).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut o = out.lock().await;
                if o.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                    break;
                }
                let _ = o.flush().await;
            }
        });
        let (r, w) = tokio::io::split(theirs);
        let result = match self.serve((r, w)).await {
            Err(e) => Err(format!("the MCP session did not start: {e}")),
            Ok(running) => running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| format!("the MCP session ended abnormally: {e}")),
        };
        filter.abort();
        let _ = copier.await;
        result
    }

    /// Handles one call: checks it, answers it, records it. `Err` is a protocol error (an unknown tool, one
    /// above the evidence level); every other problem is the tool's own error, for the agent to read.
    pub async fn call(&self, name: &str, arguments: Value) -> Result<CallToolResult, ErrorData> {
        let mut diagnosis = self.inner.serial.lock().await;
        let started = Instant::now();
        let at_ms = lab_model::clock::now_ms();
        let log = &self.inner.settings.log;
        let level = self.inner.settings.level;
        let record = |outcome, message: Option<String>, bytes, act| {
            log.push(ToolCall {
                seq: log.next_seq(),
                at_ms,
                t_s: None,
                tool: name.to_string(),
                arguments: arguments.clone(),
                outcome,
                message,
                result_bytes: bytes,
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                act,
            });
        };
        let tool = match tools::find(name) {
            Some(t) if t.level <= level && self.inner.evidence.answers(t.name) => t,
            Some(t) if t.level > level => {
                let why = format!(
                    "{name} is not offered at evidence level {level} (it needs {}): `tools/list` shows what is",
                    t.level
                );
                record(Outcome::Refused, Some(why.clone()), 0, None);
                return Err(ErrorData::invalid_params(why, None));
            }
            _ => {
                let offered: Vec<&str> = self.tools_names();
                let why = format!("unknown tool {name:?}: this lab offers {}", offered.join(", "));
                record(Outcome::Refused, Some(why.clone()), 0, None);
                return Err(ErrorData::invalid_params(why, None));
            }
        };
        let args = match tools::parse(tool, &arguments) {
            Ok(a) => a,
            Err(why) => {
                let why = format!("{name}: {why}; nothing was changed");
                record(Outcome::Refused, Some(why.clone()), why.len(), None);
                return Ok(error_result(&why));
            }
        };
        let answer = self.answer(tool, args, &mut diagnosis).await;
        self.inner.evidence.after_call();
        match answer {
            Answer::Value(v) => {
                let text = serde_json::to_string(&v).unwrap_or_default();
                record(Outcome::Ok, None, text.len(), None);
                Ok(value_result(v, text))
            }
            Answer::Failed(why) => {
                record(Outcome::Failed, Some(why.clone()), why.len(), None);
                Ok(error_result(&why))
            }
            Answer::Act { outcome, value, act } => {
                let text = serde_json::to_string(&value).unwrap_or_default();
                let message = (outcome != Outcome::Ok).then(|| {
                    value
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                });
                record(outcome, message, text.len(), Some(*act));
                if outcome == Outcome::Ok {
                    Ok(value_result(value, text))
                } else {
                    let mut r = value_result(value, text);
                    r.is_error = Some(true);
                    Ok(r)
                }
            }
        }
    }

    fn tools_names(&self) -> Vec<&'static str> {
        tools::offered(self.inner.settings.level)
            .filter(|t| self.inner.evidence.answers(t.name))
            .map(|t| t.name)
            .collect()
    }

    async fn answer(&self, tool: &ToolDef, args: Args, diagnosis: &mut Option<Diagnosis>) -> Answer {
        let level = self.inner.settings.level;
        let ev = &self.inner.evidence;
        let read = |r: Result<Value, String>| match r {
            Ok(v) => Answer::Value(v),
            Err(e) => Answer::Failed(format!("{}: {e}", tool.name)),
        };
        match (tool.name, args) {
            ("status", _) => read(ev.now().await.map(|b| status_view(&b, level))),
            ("incident", _) => read(ev.incident().await.map(|b| evidence::limit(&b, level))),
            ("dependencies", _) => read(ev.now().await.map(|b| dependencies_view(&b, level))),
            ("changes", _) => read(ev.now().await.map(|b| {
                let cut = evidence::limit(&b, level);
                json!({"changes": cut.get("changes").cloned().unwrap_or(Value::Array(vec![]))})
            })),
            ("query", Args::Query(q)) => read(ev.query(&q).await),
            ("processes", Args::Processes(p)) => read(ev.processes(p.rank).await),
            ("logs", Args::Logs(l)) => read(ev.logs(&l.component, l.lines.unwrap_or(50)).await),
            ("diagnose", Args::Diagnose(d)) => {
                let v = json!({"recorded": true, "cause": d.cause, "blame": d.blame});
                *diagnosis = Some(d);
                Answer::Value(v)
            }
            ("checkpoint", Args::Checkpoint(c)) => {
                let argv: Vec<String> = ["lab", "checkpoint", "--timeout"]
                    .iter()
                    .map(|s| (*s).to_string())
                    .chain([format!("{}s", c.timeout_s.unwrap_or(60))])
                    .collect();
                // Saving the run changes nothing of the job's: it needs no approval.
                self.act(
                    argv,
                    "save the run first".into(),
                    None,
                    "checkpoint: no approval needed".into(),
                    true,
                )
                .await
            }
            ("remediate", Args::Remediate(r)) => {
                let cause = r
                    .cause
                    .clone()
                    .or_else(|| diagnosis.as_ref().map(|d| d.cause.clone()));
                let line = r.argv.join(" ");
                let d = self
                    .inner
                    .settings
                    .approval
                    .decide(&line, &r.reason, cause.as_deref())
                    .await;
                self.act(r.argv, r.reason, cause, d.by, d.approved).await
            }
            (name, _) => Answer::Failed(format!("{name}: arguments of another tool")),
        }
    }

    async fn act(
        &self,
        argv: Vec<String>,
        reason: String,
        cause: Option<String>,
        decided_by: String,
        approved: bool,
    ) -> Answer {
        let mut rec = ActRecord {
            argv: argv.clone(),
            reason,
            cause,
            approved,
            decided_by: decided_by.clone(),
            exit_code: None,
            changes: Vec::new(),
            touched: Vec::new(),
            judged: None,
        };
        if !approved {
            let message = format!(
                "`{}` was declined ({decided_by}); nothing was changed",
                argv.join(" ")
            );
            return Answer::Act {
                outcome: Outcome::Declined,
                value: json!({"approved": false, "decided_by": decided_by, "message": message}),
                act: Box::new(rec),
            };
        }
        match self.inner.evidence.act(&argv).await {
            Err(e) => {
                let message = format!("`{}` could not run: {e}", argv.join(" "));
                Answer::Act {
                    outcome: Outcome::Failed,
                    value: json!({"approved": true, "decided_by": decided_by, "message": message}),
                    act: Box::new(rec),
                }
            }
            Ok(a) => {
                rec.exit_code = a.exit_code;
                rec.changes = a.changes.clone();
                rec.touched = a.touched.clone();
                rec.judged = a.judged.clone();
                let ok = a.exit_code == Some(0);
                let mut value = json!({
                    "approved": true,
                    "decided_by": decided_by,
                    "exit_code": a.exit_code,
                    "stdout": tail(&a.stdout),
                    "stderr": tail(&a.stderr),
                    "changes": a.changes,
                });
                if !ok {
                    value["message"] = Value::String(format!(
                        "`{}` failed ({}): {}",
                        argv.join(" "),
                        a.exit_code
                            .map_or("ended by a signal".into(), |c| format!("exit {c}")),
                        a.stderr.lines().last().unwrap_or("")
                    ));
                }
                Answer::Act {
                    outcome: if ok { Outcome::Ok } else { Outcome::Failed },
                    value,
                    act: Box::new(rec),
                }
            }
        }
    }

    /// The agent's latest diagnosis.
    pub async fn diagnosis(&self) -> Option<Diagnosis> {
        self.inner.serial.lock().await.clone()
    }
}

enum Answer {
    Value(Value),
    Failed(String),
    Act {
        outcome: Outcome,
        value: Value,
        act: Box<ActRecord>,
    },
}

fn tail(s: &str) -> String {
    if s.len() <= OUTPUT_TAIL {
        return s.to_string();
    }
    let mut start = s.len() - OUTPUT_TAIL;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

fn value_result(v: Value, text: String) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    if v.is_object() {
        r.structured_content = Some(v);
    }
    r
}

fn error_result(why: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(why.to_string())])
}

/// `status`: the pods (their health; with the wiring, their containers and resources too) beside the job's
/// own signals and the firing alerts (from `metrics` on).
pub fn status_view(bundle: &Value, level: EvidenceLevel) -> Value {
    let cut = evidence::limit(bundle, level);
    let pods: Vec<Value> = bundle
        .pointer("/wiring/pods")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    // What a pod's health shows at every level; its containers and resources are wiring.
                    if level >= EvidenceLevel::Wiring {
                        p.clone()
                    } else {
                        evidence::health_of(p)
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let mut out = json!({
        "generated_at": bundle.get("generated_at"),
        "kubernetes": bundle.get("kubernetes"),
        "pods": pods,
    });
    if level >= EvidenceLevel::Metrics {
        out["training_line"] = cut.get("training_line").cloned().unwrap_or(Value::Null);
        out["training"] = cut.get("training").cloned().unwrap_or(Value::Null);
        out["signals_firing"] = cut.get("signals_firing").cloned().unwrap_or(Value::Array(vec![]));
        if let Some(d) = cut.get("database") {
            out["database"] = d.clone();
        }
    } else if let Some(d) = cut.get("database_pods") {
        out["database_pods"] = d.clone();
    }
    out
}

/// `dependencies`: each storage server as its readers see it (with the lab's one-line summary at `full`).
pub fn dependencies_view(bundle: &Value, level: EvidenceLevel) -> Value {
    let cut = evidence::limit(bundle, level);
    let mut out = json!({"dependencies": cut.get("dependencies").cloned().unwrap_or(Value::Array(vec![]))});
    if let Some(s) = cut.get("latency_summary") {
        out["latency_summary"] = s.clone();
    }
    out
}

const INSTRUCTIONS: &str = "You are connected to Straggler Lab, a lab where a synchronous training job stalls on one slow \
component while Kubernetes says every pod is Ready. Investigate as a person would: `status` (what Kubernetes says beside \
what the job says), then the tools your evidence level offers (`dependencies`, `processes`, `changes`, `query`, `logs`), \
say what you concluded with `diagnose`, save the run with `checkpoint` where the job trains, and fix the cause with \
`remediate` (one lab command per call). Ready is not fixed: the lab verifies on the job's own step time and throughput. \
When a verification failed before, `incident` says what was tried and why it did not hold.";

impl<E: Evidence> ServerHandler for Server<E> {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("straggler-lab", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "{INSTRUCTIONS} Lab: {}; evidence level: {}.",
                self.inner.settings.name, self.inner.settings.level
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.map(Value::Object).unwrap_or_else(|| json!({}));
        self.call(&request.name, args).await.map(CallToolResponse::from)
    }
}

/// The kinds of tool, for reports: what each call did to the lab.
pub fn kind_of(tool: &str) -> Option<Kind> {
    tools::find(tool).map(|t| t.kind)
}
