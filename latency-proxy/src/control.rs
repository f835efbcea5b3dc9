//! The control API: a few HTTP/1.1 endpoints to read and set the delay, for the lab on the same machine
//! or through the Kubernetes API server's pod proxy.
//!
//! `GET /delay`, `PUT /delay` (JSON [`DelaySetting`]), `GET /healthz`, `GET /metrics` (Prometheus text).
//! Requests are small and rare, so each connection serves one request and closes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::{DelaySetting, SharedDelay};

const MAX_HEAD: usize = 16 * 1024;
const MAX_BODY: usize = 4 * 1024;

/// Serves the control API on `listener` forever.
pub async fn serve(listener: TcpListener, delay: Arc<SharedDelay>) {
    loop {
        if let Ok((conn, _)) = listener.accept().await {
            let delay = delay.clone();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(10), handle(conn, delay)).await;
            });
        }
    }
}

async fn handle(mut conn: TcpStream, delay: Arc<SharedDelay>) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        let mut chunk = [0u8; 2048];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return respond(&mut conn, 431, "text/plain", "request head too large\n").await;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.lines();
    let mut first = lines.next().unwrap_or("").split_whitespace();
    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let length = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    if length > MAX_BODY {
        return respond(&mut conn, 413, "text/plain", "body too large\n").await;
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 1024];
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);

    match (method, path) {
        ("GET", "/healthz") | ("GET", "/readyz") => respond(&mut conn, 200, "text/plain", "ok\n").await,
        ("GET", "/delay") => {
            let json = serde_json::to_string(&delay.get()).unwrap_or_default();
            respond(&mut conn, 200, "application/json", &json).await
        }
        ("PUT", "/delay") | ("POST", "/delay") => match serde_json::from_slice::<DelaySetting>(&body) {
            Ok(d) => match d.validate() {
                Ok(()) => {
                    delay.set(d);
                    let json = serde_json::to_string(&delay.get()).unwrap_or_default();
                    respond(&mut conn, 200, "application/json", &json).await
                }
                Err(e) => respond(&mut conn, 400, "text/plain", &format!("{e}\n")).await,
            },
            Err(e) => {
                let msg = format!("body must be JSON like {{\"delay_ms\":300,\"jitter_ms\":0}}: {e}\n");
                respond(&mut conn, 400, "text/plain", &msg).await
            }
        },
        ("GET", "/metrics") => respond(&mut conn, 200, "text/plain; version=0.0.4", &metrics(&delay)).await,
        (_, "/delay") => respond(&mut conn, 405, "text/plain", "use GET or PUT\n").await,
        _ => {
            respond(
                &mut conn,
                404,
                "text/plain",
                "not found: try /delay, /healthz or /metrics\n",
            )
            .await
        }
    }
}

fn metrics(d: &SharedDelay) -> String {
    let s = d.get();
    format!(
        "# HELP lab_proxy_added_delay_seconds Delay the proxy adds to every chunk the server sends.\n\
         # TYPE lab_proxy_added_delay_seconds gauge\nlab_proxy_added_delay_seconds {}\n\
         # HELP lab_proxy_jitter_seconds Jitter, plus or minus, around the added delay.\n\
         # TYPE lab_proxy_jitter_seconds gauge\nlab_proxy_jitter_seconds {}\n\
         # HELP lab_proxy_connections_total Client connections accepted.\n\
         # TYPE lab_proxy_connections_total counter\nlab_proxy_connections_total {}\n\
         # HELP lab_proxy_bytes_total Bytes forwarded, by direction.\n\
         # TYPE lab_proxy_bytes_total counter\n\
         lab_proxy_bytes_total{{direction=\"to_server\"}} {}\nlab_proxy_bytes_total{{direction=\"to_client\"}} {}\n\
         # HELP lab_proxy_delayed_chunks_total Chunks held for a delay.\n\
         # TYPE lab_proxy_delayed_chunks_total counter\nlab_proxy_delayed_chunks_total {}\n",
        s.delay_ms / 1000.0,
        s.jitter_ms / 1000.0,
        d.connections.load(Ordering::Relaxed),
        d.bytes_up.load(Ordering::Relaxed),
        d.bytes_down.load(Ordering::Relaxed),
        d.delayed_chunks.load(Ordering::Relaxed),
    )
}

async fn respond(conn: &mut TcpStream, code: u16, ctype: &str, body: &str) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        _ => "Request Header Fields Too Large",
    };
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body.as_bytes()).await?;
    conn.shutdown().await
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
