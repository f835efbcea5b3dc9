//! `lab mcp`: the lab as an MCP server on stdin/stdout, for one agent.

use crate::exit::Exit;

use lab_session::Lab;
use lab_session::mcp::McpOptions;

use crate::cli::McpArgs;

pub async fn mcp(name: &str, a: McpArgs) -> anyhow::Result<Exit> {
    if let Some(file) = &a.replay {
        use lab_drills::agent::mcp::replay::{ReplayEvidence, ReplaySession};
        use lab_drills::agent::mcp::{CallLog, Server, Settings};
        let s = ReplaySession::load(file).map_err(anyhow::Error::msg)?;
        let evidence = ReplayEvidence::open(&s.recording, &s.drill).map_err(anyhow::Error::msg)?;
        let server = Server::new(
            evidence,
            Settings {
                name: format!("{} (recorded)", s.drill),
                level: s.evidence,
                // A replay runs nothing: every act is judged, and approving it changes nothing.
                approval: lab_drills::agent::Approval::auto(),
                log: std::sync::Arc::new(CallLog::new(Some(s.calls.clone()))),
            },
        );
        server.serve_stdio().await.map_err(anyhow::Error::msg)?;
        return Ok(Exit::Passed);
    }
    let server = match &a.session {
        Some(file) => {
            let s = lab_drills::agent::mcp::McpSession::load(file).map_err(anyhow::Error::msg)?;
            let lab = Lab::open(&s.lab).await?;
            lab.mcp_session_server(&s)?
        }
        None => {
            let lab = Lab::open(name).await?;
            lab.mcp_server(&McpOptions {
                evidence: a.evidence.level(),
                approve: a.approve.clone(),
                approvals: a.approvals.clone(),
                calls: a.calls.clone(),
            })?
        }
    };
    server.serve_stdio().await.map_err(anyhow::Error::msg)?;
    Ok(Exit::Passed)
}
