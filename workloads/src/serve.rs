//! The rank's HTTP endpoint: `/metrics` (Prometheus text), `/readyz` and `/healthz`, and on rank 0
//! `/checkpoint` (`GET` its checkpoint state as JSON, `POST` to ask for a checkpoint now; see
//! [`crate::control`]).
//!
//! It starts before anything else the rank does and answers `/readyz` with 200 from then on, whatever the
//! training is doing: readiness means "the process is up", exactly what hides a stalled job from
//! Kubernetes, which is what the lab is built to show. Connections are served concurrently on the endpoint's
//! own thread, so a slow scraper holds up neither another nor the rank.

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

use crate::control::CheckpointControl;
use crate::error::{Result, WorkloadError};
use crate::metrics::Registry;

/// Called before every `/metrics` answer, to refresh values read on demand (the cgroup's CPU counters).
pub type Refresh = Arc<dyn Fn(&Registry) + Send + Sync>;

/// Connections served at once; one more waits for a free place, in the kernel's backlog.
const MAX_CONNECTIONS: usize = 32;
/// How long a client may take to send its request's headers, and to read the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
const TEXT: &str = "text/plain; charset=utf-8";

/// What every request sees.
struct Endpoint {
    registry: Arc<Registry>,
    refresh: Refresh,
    control: Option<Arc<CheckpointControl>>,
}

/// Binds `addr` and serves the endpoints on a background thread for the life of the process (HTTP/1.1 by
/// `hyper` on a runtime of that thread's own, so nothing the rank does waits on a client);
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
    // Bound here, not on the thread, so that a taken port is the caller's error at once.
    let listener = TcpListener::bind(addr).map_err(|source| WorkloadError::Connect {
        what: "metrics listen address (bind)".into(),
        addr: addr.to_string(),
        source,
    })?;
    let io = |e| WorkloadError::io("metrics listener", addr, e, Duration::ZERO);
    let local = listener.local_addr().map_err(io)?;
    listener.set_nonblocking(true).map_err(io)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WorkloadError::io("metrics server runtime", addr, e, Duration::ZERO))?;
    let endpoint = Arc::new(Endpoint {
        registry,
        refresh,
        control,
    });
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || runtime.block_on(serve(listener, endpoint)))
        .map_err(|e| WorkloadError::io("metrics server thread", addr, e, Duration::ZERO))?;
    Ok(local)
}

async fn serve(listener: TcpListener, endpoint: Arc<Endpoint>) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        eprintln!("metrics endpoint: the listener could not join the runtime; no /metrics for this process");
        return;
    };
    let places = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(place) = places.clone().acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let endpoint = endpoint.clone();
                async move { Ok::<_, Infallible>(answer(&endpoint, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(IO_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            // A client that stops reading is dropped after the timeout; its error is its own.
            let _ = tokio::time::timeout(IO_TIMEOUT * 2, conn).await;
            drop(place);
        });
    }
}

fn answer(endpoint: &Endpoint, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method();
    let read = method == Method::GET || method == Method::HEAD;
    match req.uri().path() {
        "/metrics" if read => {
            (endpoint.refresh)(&endpoint.registry);
            reply(
                StatusCode::OK,
                crate::metrics::CONTENT_TYPE,
                endpoint.registry.encode(),
            )
        }
        "/readyz" | "/healthz" if read => reply(StatusCode::OK, TEXT, "ok\n".into()),
        lab_model::checkpoint::PATH => {
            let token = req
                .headers()
                .get(crate::control::TOKEN_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::trim);
            let (status, content_type, body) = checkpoint(method, endpoint.control.as_deref(), token);
            reply(status, content_type, body)
        }
        _ if read => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found: try /metrics, /readyz, /healthz or /checkpoint\n".into(),
        ),
        _ => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "only GET and HEAD (and POST /checkpoint)\n".into(),
        ),
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// `GET /checkpoint`: the state; `POST /checkpoint`: a request counted, answered with the state (202: the
/// job saves it after the step it is in).
fn checkpoint(
    method: &Method,
    control: Option<&CheckpointControl>,
    token: Option<&str>,
) -> (StatusCode, &'static str, String) {
    const JSON: &str = "application/json";
    let Some(c) = control else {
        return (
            StatusCode::NOT_FOUND,
            TEXT,
            "this process saves no checkpoints: rank 0 does\n".into(),
        );
    };
    let (status, state) = match *method {
        Method::GET | Method::HEAD => (StatusCode::OK, c.state()),
        Method::POST if !c.allows(token) => {
            return (
                StatusCode::FORBIDDEN,
                TEXT,
                format!(
                    "a checkpoint request needs the lab's control token (header {}): ask through `lab checkpoint`\n",
                    crate::control::TOKEN_HEADER
                ),
            );
        }
        Method::POST => (StatusCode::ACCEPTED, c.request()),
        _ => {
            return (
                StatusCode::METHOD_NOT_ALLOWED,
                TEXT,
                "GET or POST /checkpoint\n".into(),
            );
        }
    };
    let body = serde_json::to_string(&state).unwrap_or_default() + "\n";
    (status, JSON, body)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

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

    #[test]
    fn the_endpoints_answer_head_unknown_paths_and_methods_while_a_client_stalls() {
        let addr = spawn(
            "127.0.0.1:0",
            Arc::new(Registry::new()),
            Arc::new(|_: &Registry| {}),
            None,
        )
        .unwrap();
        // A client that connects and says nothing holds up no one.
        let _stalled = TcpStream::connect(addr).unwrap();
        let ready = ask(addr, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            ready.starts_with("HTTP/1.1 200") && ready.ends_with("ok\n"),
            "{ready}"
        );
        let head = ask(addr, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "no body: {head}"
        );
        let missing = ask(addr, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            missing.starts_with("HTTP/1.1 404") && missing.contains("/metrics"),
            "{missing}"
        );
        let post = ask(
            addr,
            "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        );
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        let ckpt = ask(addr, "GET /checkpoint HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            ckpt.starts_with("HTTP/1.1 404") && ckpt.contains("rank 0"),
            "{ckpt}"
        );
        // A taken port is the caller's error.
        let err = spawn(
            &addr.to_string(),
            Arc::new(Registry::new()),
            Arc::new(|_: &Registry| {}),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("bind"), "{err}");
    }
}
