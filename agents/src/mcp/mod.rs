//! The lab as an MCP server (the Model Context Protocol, JSON-RPC over stdio): an agent that investigates
//! through tools — looks, queries, acts, looks again — plugs into a live lab or a recorded incident with one
//! line of configuration, and the lab records and scores what it did, call by call.
//!
//! [`tools`] is the catalogue (each tool's level, schema and checked arguments), [`server`] the MCP side
//! over a source of [`server::Evidence`] (a live lab in `lab_session`, a recording in [`replay`]), and
//! [`calls`] the trajectory every call is written to.

pub mod attempt;
pub mod calls;
pub mod replay;
pub mod server;
pub mod session;
pub mod tools;
pub mod wire;

pub use attempt::{McpAgentOptions, McpAttempt};
pub use calls::{CallLog, ToolCall};
pub use server::{Acted, Evidence, Server, Settings};
pub use session::McpSession;
pub use tools::Diagnosis;
