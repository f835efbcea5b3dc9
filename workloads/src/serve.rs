//! The rank's HTTP endpoint: `/metrics` (Prometheus text), `/readyz` and `/healthz`, and on rank 0
//! `/checkpoint` (`GET` its checkpoint state as JSON, `POST` to ask for a checkpoint now; see
//! [`crate::control`]).
//!
//! It starts before anything else the rank does and answers `/readyz` with 200 from then on, whatever the
//! training is doing: readiness means "the process is up", exactly what hides a stalled job from
//! Kubernetes, which is what the lab is built to show. Each connection gets its own short-lived thread, so
//! a slow scraper cannot hold up another.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::control::CheckpointControl;
use crate::error::{Result, WorkloadError};
use crate::metrics::Registry;

/// Called before every `/metrics` answer, to refresh values read on demand (the cgroup's CPU counters).
pub type Refresh = Arc<dyn Fn(&Registry) + Send + Sync>;

const MAX_CONNECTIONS: usize = 32;

/// Binds `addr` and serves the endpoints on a background thread for the life of the process;
/// `/checkpoint` when `control` is given (rank 0).
///
/// # Errors
/// [`WorkloadError::Connect`] when the address cannot be bound (in use, or not an address of this host).
pub fn spawn(
    addr: &str,
    registry: Arc<Registry>,
    refresh: Refresh,
    control: Option<Arc<CheckpointControl>>,
) -> Result<SocketAddr> {
    let listener = TcpListener::bind(addr).map_err(|source| WorkloadError::Connect {
        what: "metrics listen address (bind)".into(),
        addr: addr.to_string(),
        source,
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| WorkloadError::io("metrics listener", addr, e, Duration::ZERO))?;
    let open = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                    drop(stream);
                    continue;
                }
                open.fetch_add(1, Ordering::Relaxed);
                let (registry, refresh, open) = (registry.clone(), refresh.clone(), open.clone());
                let control = control.clone();
                let spawned = std::thread::Builder::new()
                    .name("metrics-conn".into())
                    .spawn(move || {
                        let _ = handle(stream, &registry, &refresh, control.as_deref());
                        open.fetch_sub(1, Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    // Out of threads: the scrape fails, the rank goes on.
                }
            }
        })
        .map_err(|e| WorkloadError::io("metrics server thread", addr, e, Duration::ZERO))?;
    Ok(local)
}

fn handle(
    stream: TcpStream,
    registry: &Registry,
    refresh: &Refresh,
    control: Option<&CheckpointControl>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.by_ref().take(8192).read_line(&mut request_line)?;
    let mut token = None;
    loop {
        let mut line = String::new();
        let n = reader.by_ref().take(8192).read_line(&mut line)?;
        if n == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.trim().eq_ignore_ascii_case(crate::control::TOKEN_HEADER)
        {
            token = Some(value.trim().to_string());
        }
    }
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            refresh(registry);
            ("200 OK", crate::metrics::CONTENT_TYPE, registry.encode())
        }
        ("GET" | "HEAD", "/readyz" | "/healthz") => {
            ("200 OK", "text/plain; charset=utf-8", "ok\n".to_string())
        }
        (_, lab_model::checkpoint::PATH) => checkpoint(method, control, token.as_deref()),
        ("GET" | "HEAD", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: try /metrics, /readyz, /healthz or /checkpoint\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD (and POST /checkpoint)\n".to_string(),
        ),
    };
    let mut out = stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if method != "HEAD" {
        out.write_all(body.as_bytes())?;
    }
    out.flush()
}

/// `GET /checkpoint`: the state; `POST /checkpoint`: a request counted, answered with the state (202: the
/// job saves it after the step it is in).
fn checkpoint(
    method: &str,
    control: Option<&CheckpointControl>,
    token: Option<&str>,
) -> (&'static str, &'static str, String) {
    const JSON: &str = "application/json";
    let Some(c) = control else {
        return (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "this process saves no checkpoints: rank 0 does\n".into(),
        );
    };
    let (status, state) = match method {
        "GET" | "HEAD" => ("200 OK", c.state()),
        "POST" if !c.allows(token) => {
            return (
                "403 Forbidden",
                "text/plain; charset=utf-8",
                format!(
                    "a checkpoint request needs the lab's control token (header {}): ask through `lab checkpoint`\n",
                    crate::control::TOKEN_HEADER
                ),
            );
        }
        "POST" => ("202 Accepted", c.request()),
        _ => {
            return (
                "405 Method Not Allowed",
                "text/plain; charset=utf-8",
                "GET or POST /checkpoint\n".into(),
            );
        }
    };
    let body = serde_json::to_string(&state).unwrap_or_default() + "\n";
    (status, JSON, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::TOKEN_HEADER;

    fn ask(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_checkpoint_request_without_the_labs_token_is_refused_and_changes_nothing() {
        let control = Arc::new(CheckpointControl::new(1).with_token(Some("s3cret".into())));
        let addr = spawn(
            "127.0.0.1:0",
            Arc::new(Registry::new()),
            Arc::new(|_: &Registry| {}),
            Some(control.clone()),
        )
        .unwrap();
        let post = |extra: &str| {
            ask(
                addr,
                &format!("POST /checkpoint HTTP/1.1\r\nHost: x\r\n{extra}\r\n"),
            )
        };
        let refused = post("");
        assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
        assert!(refused.contains("control token"), "{refused}");
        let wrong = post(&format!("{TOKEN_HEADER}: s3creT\r\n"));
        assert!(wrong.starts_with("HTTP/1.1 403"), "{wrong}");
        assert_eq!(control.state().requested, 0, "a refused request is not counted");
        // Reading the state needs no token; asking with it is counted.
        let read = ask(addr, "GET /checkpoint HTTP/1.1\r\n\r\n");
        assert!(read.starts_with("HTTP/1.1 200"), "{read}");
        let ok = post("X-Lab-Control-Token: s3cret\r\n");
        assert!(ok.starts_with("HTTP/1.1 202"), "{ok}");
        assert_eq!(control.state().requested, 1);
        // Without a token set (the local runtime), anyone on the port may ask.
        let open = Arc::new(CheckpointControl::new(1).with_token(Some(String::new())));
        assert!(open.allows(None));
    }
}
