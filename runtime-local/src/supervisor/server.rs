//! The control socket: one JSON request line in, one JSON response line out. Requests that change the
//! desired state go to the reconciler; a delay is set on the storage server's proxy first and recorded
//! once the proxy took it; a shutdown is answered once every process has stopped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::reconcile::Sup;
use crate::proto::{Request, Response};
use lab_runtime::Delay;

pub(super) async fn handle(
    sup: Arc<Mutex<Sup>>,
    stream: UnixStream,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let (r, mut w) = stream.into_split();
    let mut line = String::new();
    if BufReader::new(r).read_line(&mut line).await.is_err() {
        return;
    }
    let resp = match serde_json::from_str::<Request>(&line) {
        Err(e) => Response::Error {
            message: format!("unreadable request: {e}"),
        },
        Ok(Request::SetDelay { server, delay }) => set_delay(&sup, server, delay).await,
        Ok(Request::Shutdown) => {
            sup.lock().expect("supervisor state").shutting_down = true;
            // The main loop stops everything; answer once it is done so the caller can rely on it.
            match stopped.wait_for(|s| *s).await {
                Ok(_) => Response::Ok,
                Err(_) => Response::Error {
                    message: "the supervisor stopped before confirming".into(),
                },
            }
        }
        Ok(req) => {
            let mut s = sup.lock().expect("supervisor state");
            let now = Instant::now();
            let r = s.request(req, now);
            s.reconcile(now);
            r
        }
    };
    let mut out =
        serde_json::to_string(&resp).unwrap_or_else(|_| r#"{"result":"error","message":"?"}"#.into());
    out.push('\n');
    let _ = w.write_all(out.as_bytes()).await;
}

async fn set_delay(sup: &Arc<Mutex<Sup>>, server: u32, delay: Option<Delay>) -> Response {
    let control = {
        let s = sup.lock().expect("supervisor state");
        match s.cfg.storage.get(server as usize) {
            Some(p) => p.control,
            None => {
                return Response::Error {
                    message: format!(
                        "storage-{server} does not exist (servers 0..{})",
                        s.cfg.storage.len()
                    ),
                };
            }
        }
    };
    let body = crate::proxy_body(delay);
    match crate::http::put(
        &format!("http://127.0.0.1:{control}/delay"),
        body,
        Duration::from_secs(3),
    )
    .await
    {
        Ok(_) => {
            let mut s = sup.lock().expect("supervisor state");
            match delay {
                Some(d) => s.spec.delays.insert(server, d),
                None => s.spec.delays.remove(&server),
            };
            s.save_spec();
            Response::Ok
        }
        Err(e) => Response::Error {
            message: format!("cannot set the delay on storage-{server}'s proxy: {e}"),
        },
    }
}
