//! `lab mcp`: the lab as an MCP server on stdin/stdout, for one agent.

use crate::exit::Exit;

use lab_session::mcp::{McpOptions, Serve};

use crate::cli::McpArgs;

pub async fn mcp(name: &str, a: McpArgs) -> anyhow::Result<Exit> {
    let what = match (a.replay, a.session) {
        (Some(file), _) => Serve::Replay(file),
        (None, Some(file)) => Serve::Session(file),
        (None, None) => Serve::Lab(McpOptions {
            evidence: a.evidence.level(),
            approve: a.approve,
            approvals: a.approvals,
            calls: a.calls,
        }),
    };
    lab_session::mcp::serve(name, &what).await?;
    Ok(Exit::Passed)
}
