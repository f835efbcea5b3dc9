//! Talking to `lab mcp` over its stdio the way any MCP client does, one JSON-RPC message per line, for the
//! tests that send what a careless client sends (garbage, an unknown tool, arguments of the wrong type).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// A running `lab mcp` and the client end of its pipes.
#[derive(Debug)]
pub struct McpClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: u64,
}

impl McpClient {
    /// Starts `cmd` (a `lab mcp` command) with its stdin and stdout piped.
    pub fn start(mut cmd: Command) -> McpClient {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lab mcp");
        let stdout: ChildStdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        McpClient {
            child,
            stdin,
            lines: rx,
            next_id: 1,
        }
    }

    /// Sends one line as it is.
    pub fn send_line(&mut self, line: &str) {
        let s = self.stdin.as_mut().expect("stdin open");
        writeln!(s, "{line}").expect("write to lab mcp");
        s.flush().expect("flush");
    }

    /// The next message the server sends, within 30 s.
    pub fn recv(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a message from lab mcp within 30 s");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("lab mcp sent a line that is not JSON ({e}): {line}"))
    }

    /// Sends a request and returns the response to it.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(&msg.to_string());
        loop {
            let m = self.recv();
            if m.get("id") == Some(&json!(id)) {
                return m;
            }
        }
    }

    /// The handshake: `initialize`, then `notifications/initialized`; returns the server's answer.
    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "lab-tests", "version": "0"}}),
        );
        self.send_line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        r
    }

    /// `tools/call NAME ARGS`: the whole response (a `result`, or an `error`).
    pub fn call(&mut self, name: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": args}))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes stdin (the client is done) and waits for the server to exit; returns its exit status and
    /// stderr.
    pub fn close(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        self.child.wait_with_output_in_time(Duration::from_secs(20))
    }
}

trait WaitInTime {
    fn wait_with_output_in_time(&mut self, limit: Duration) -> (std::process::ExitStatus, String);
}

impl WaitInTime for Child {
    fn wait_with_output_in_time(&mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.try_wait().expect("wait for lab mcp") {
                let mut err = String::new();
                if let Some(mut e) = self.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return (status, err);
            }
            if start.elapsed() > limit {
                let _ = self.kill();
                panic!("lab mcp did not exit within {limit:?} of its client closing stdin");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        // By its own pid: a test that failed half-way leaves no server behind.
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The text of a tool result's first content block, parsed as JSON when it is.
pub fn result_json(response: &Value) -> Value {
    let text = response["result"]["content"][0]["text"].as_str().unwrap_or("");
    serde_json::from_str(text).unwrap_or(Value::String(text.to_string()))
}
