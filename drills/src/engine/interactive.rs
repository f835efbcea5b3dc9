//! The remediation step with an interactive agent (`--mcp-agent`): the incident's bundle written, a session
//! file for the lab's MCP server (which lab, the evidence level, the incident, the trajectory file, the
//! approval, on whose behalf changes are recorded), and the agent started with the server's command line
//! in its environment. The agent is the MCP client: it starts the server, investigates and acts through
//! its tools, and exits when it is done. What it did is read back from the trajectory the server wrote.
//! An agent that crashes or does not finish in time ends the drill in an error; the fault is then cleared
//! by the drill's own cleanup, and the agent's process group is stopped with it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use lab_agents::command::{self, CommandSpec};
use lab_agents::mcp::calls::{self, Outcome};
use lab_agents::mcp::session::SESSION_FORMAT;
use lab_agents::mcp::{McpAgentOptions, McpAttempt, McpSession};
use lab_incident::FixBy;
use lab_runtime::state::now_ms;

use super::{Event, Session, SnapshotSource};
use lab_reports::report::{RemediationReport, StepName, StepReport, Verdict};

/// The environment variable that carries the server's command line, as a JSON array of strings.
pub const SERVER_ENV: &str = "LAB_MCP_SERVER";
/// The environment variable that names a client configuration file (`{"mcpServers": {...}}`).
pub const CONFIG_ENV: &str = "LAB_MCP_CONFIG";
/// The environment variable that says which attempt this is (1, 2, ...).
pub const ATTEMPT_ENV: &str = "LAB_ATTEMPT";
/// The server's name in the client configuration file.
pub const SERVER_NAME: &str = "straggler-lab";

impl<S: SnapshotSource> Session<'_, S> {
    /// Lets the interactive agent investigate and act, once.
    pub(super) async fn remediate_with_mcp_agent(
        &mut self,
        agent: &McpAgentOptions,
        checkpoint_first: bool,
    ) -> StepReport {
        let attempt = self.attempts.len() as u32 + 1;
        let what = format!(
            "let `{}` investigate over MCP ({} evidence, attempt {attempt})",
            agent.command, agent.evidence
        );
        let started = self.start(StepName::Remediate, &what);
        self.remediation_start_ms = Some(started);
        let last_checkpoint = self.last_checkpoint();
        let db = self.lab.runtime.database().await.ok();
        let cut = match self.write_bundle(agent.evidence, db.as_ref()) {
            Ok(p) => p,
            Err(e) => {
                let why = format!("cannot write the incident bundle: {e}");
                return self.finish(StepName::Remediate, started, false, why, vec![], Verdict::Error);
            }
        };
        let change_by = FixBy::Agent.tag(self.fixes.len() + 1);
        let dir = self
            .options
            .bundle_dir
            .join(format!("mcp-{started}-attempt-{attempt}"));
        let session_file = match self.write_session(agent, &dir, attempt, &change_by) {
            Ok(p) => p,
            Err(e) => {
                let why = format!("cannot write the MCP session: {e}");
                return self.finish(StepName::Remediate, started, false, why, vec![], Verdict::Error);
            }
        };
        let server: Vec<String> = vec![
            agent.lab_bin.display().to_string(),
            "mcp".into(),
            "--session".into(),
            session_file.display().to_string(),
        ];
        let config = dir.join("mcp-config.json");
        // Clients that start servers with a scrubbed environment still reach this lab.
        let env_map: serde_json::Map<String, serde_json::Value> = self
            .options
            .command_env
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect();
        let config_json = serde_json::json!({"mcpServers": {SERVER_NAME: {"command": server[0], "args": server[1..], "env": env_map}}});
        if let Err(e) = std::fs::write(&config, config_json.to_string()) {
            let why = format!("cannot write {}: {e}", config.display());
            return self.finish(StepName::Remediate, started, false, why, vec![], Verdict::Error);
        }
        let mut env = self.options.command_env.clone();
        env.push((
            SERVER_ENV.into(),
            serde_json::to_string(&server).unwrap_or_default(),
        ));
        env.push((CONFIG_ENV.into(), config.display().to_string()));
        env.push(("LAB_INCIDENT_BUNDLE".into(), cut.display().to_string()));
        env.push(("LAB_EVIDENCE".into(), agent.evidence.to_string()));
        env.push((ATTEMPT_ENV.into(), attempt.to_string()));
        let spec = CommandSpec {
            command: agent.command.clone(),
            timeout: agent.timeout,
            env,
            path_first: self.options.command_path.clone(),
        };
        let group = self.guard.group.clone();
        let observer = self.observer;
        // The agent's own output goes to the report, and to the display as it comes.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, bool)>();
        let sink: command::LineSink = Arc::new(move |l: &str, e| {
            let _ = tx.send((l.to_string(), e));
        });
        let run = async move { command::run(&spec, sink, &group).await };
        let out = {
            let mut run = std::pin::pin!(run);
            loop {
                tokio::select! {
                    out = &mut run => break out,
                    Some((line, stderr)) = rx.recv() => observer.event(&Event::Output { line: &line, stderr }),
                    s = self.source.next() => {
                        self.record(&s);
                        self.buffer.push_back(s);
                    }
                }
            }
        };
        while let Ok((line, stderr)) = rx.try_recv() {
            observer.event(&Event::Output { line: &line, stderr });
        }
        let mut calls = calls::read(&dir.join("calls.jsonl")).unwrap_or_default();
        for c in &mut calls {
            c.t_s = Some((self.rel_s(c.at_ms) * 10.0).round() / 10.0);
        }
        for c in &calls {
            let line = call_line(c, started);
            self.observer.event(&Event::Output {
                line: &line,
                stderr: false,
            });
        }
        let diagnosis = calls
            .iter()
            .rev()
            .filter(|c| c.tool == "diagnose" && c.outcome == Outcome::Ok)
            .find_map(|c| serde_json::from_value(c.arguments.clone()).ok());
        let mut report = McpAttempt {
            agent: agent.command.clone(),
            evidence: agent.evidence,
            attempt,
            exit_code: None,
            timed_out: false,
            duration_s: 0.0,
            problem: None,
            calls,
            diagnosis,
            session: session_file.display().to_string(),
            truth: Some(self.truth()),
            score: None,
        };
        let (mut stdout, mut stderr) = (String::new(), String::new());
        let (ok, summary, verdict) = match out {
            Err(e) => (
                false,
                format!("the agent could not be started: {e}"),
                Verdict::Error,
            ),
            Ok(o) => {
                report.exit_code = o.exit_code;
                report.timed_out = o.timed_out;
                report.duration_s = o.duration.as_secs_f64();
                stdout = o.stdout.clone();
                stderr = o.stderr.clone();
                let done = summary_of(&report);
                if o.timed_out {
                    (
                        false,
                        format!(
                            "the agent did not finish within {:.0} s and was stopped ({done})",
                            agent.timeout.as_secs_f64()
                        ),
                        Verdict::Error,
                    )
                } else if o.exit_code != Some(0) {
                    let code = o
                        .exit_code
                        .map_or("ended by a signal".into(), |c| format!("exit {c}"));
                    let last = o
                        .stderr
                        .lines()
                        .last()
                        .map_or(String::new(), |l| format!(": {l}"));
                    (
                        false,
                        format!("the agent failed ({code}){last} ({done})"),
                        Verdict::Error,
                    )
                } else {
                    (true, format!("the agent finished: {done}"), Verdict::Fail)
                }
            }
        };
        let end = now_ms();
        super::session::past_ms(end);
        let (ok, summary, verdict) =
            match self.checkpoint_first(ok && checkpoint_first, started, end, last_checkpoint) {
                Some(Ok(saved)) => (ok, format!("{summary}; {saved}"), verdict),
                Some(Err(why)) => (false, format!("the agent: {why}"), Verdict::Fail),
                None => (ok, summary, verdict),
            };
        if !ok {
            report.problem = Some(summary.clone());
        }
        self.fixes.push(FixBy::Agent);
        let changes = self.changes_between(started, end);
        self.mitigated_ms = Some(end);
        let mut ev: Vec<String> = changes.clone();
        ev.push(format!("trajectory: {}", dir.join("calls.jsonl").display()));
        self.remediations.push(RemediationReport {
            truth: Some(self.truth()),
            command: Some(agent.command.clone()),
            bundle: Some(cut.display().to_string()),
            exit_code: report.exit_code,
            timed_out: report.timed_out,
            duration_s: end.saturating_sub(started) as f64 / 1000.0,
            stdout,
            stderr,
            changes,
            agent: None,
            mcp: Some(report),
        });
        self.finish(StepName::Remediate, started, ok, summary, ev, verdict)
    }

    /// Writes the attempt's folder: the incident's whole bundle and the session file the server reads.
    fn write_session(
        &self,
        agent: &McpAgentOptions,
        dir: &Path,
        attempt: u32,
        change_by: &str,
    ) -> Result<PathBuf, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let incident = dir.join("incident.json");
        let full = self.full_bundles.last().ok_or("no bundle was written")?;
        std::fs::write(
            &incident,
            serde_json::to_vec_pretty(full).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("cannot write {}: {e}", incident.display()))?;
        let used = self
            .remediations
            .iter()
            .filter_map(|r| r.mcp.as_ref())
            .flat_map(|m| m.calls.iter())
            .filter(|c| {
                c.act
                    .as_ref()
                    .is_some_and(|a| a.decided_by.contains("approvals file"))
            })
            .count();
        let session = McpSession {
            format: SESSION_FORMAT.into(),
            lab: self.lab.name.clone(),
            evidence: agent.evidence,
            incident,
            calls: dir.join("calls.jsonl"),
            change_by: change_by.to_string(),
            fixes: self.fixes.clone(),
            normal_samples_per_s: self.baseline.map(|b| b.samples_per_s),
            approve: agent.approve.clone(),
            approvals: agent.approvals.clone(),
            approvals_used: used,
            approval_state: self.options.approval_state.clone().unwrap_or_default(),
            attempt,
        };
        let path = dir.join("session.json");
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&session).map_err(|e| e.to_string())?,
        )
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }
}

/// One call as a line for the display: `+1.2s status ok (4.1 kB)`, `+3.0s remediate lab restart rank 1 → declined (ask: ...)`.
fn call_line(c: &lab_agents::mcp::ToolCall, started_ms: u64) -> String {
    let t = c.at_ms.saturating_sub(started_ms) as f64 / 1000.0;
    let what = match &c.act {
        Some(a) => format!("{} ", a.argv.join(" ")),
        None if c.tool == "diagnose" => format!(
            "{} blames [{}] ",
            c.arguments.get("cause").and_then(|v| v.as_str()).unwrap_or("?"),
            c.arguments
                .get("blame")
                .and_then(|v| v.as_array())
                .map(|a| a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        ),
        None => String::new(),
    };
    let outcome = match c.outcome {
        Outcome::Ok => format!("ok ({} B)", c.result_bytes),
        o => format!(
            "{} — {}",
            serde_json::to_value(o)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            c.message.as_deref().unwrap_or("")
        ),
    };
    format!("mcp +{t:>5.1}s {} {what}{outcome}", c.tool)
}

/// What the agent did, in one phrase.
fn summary_of(a: &McpAttempt) -> String {
    let acts: Vec<String> = a
        .acts()
        .filter(|x| x.approved)
        .map(|x| format!("`{}`", x.argv.join(" ")))
        .collect();
    format!(
        "{} calls, {} acts run{}{}{}",
        a.calls.len(),
        acts.len(),
        if acts.is_empty() {
            String::new()
        } else {
            format!(" ({})", acts.join(", "))
        },
        match a.declined() {
            0 => String::new(),
            n => format!(", {n} declined"),
        },
        match a.refused() {
            0 => String::new(),
            n => format!(", {n} refused"),
        }
    )
}
