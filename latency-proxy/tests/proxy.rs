//! The proxy over real loopback sockets: no added latency at zero, the delay when set, the control API.

use std::time::{Duration, Instant};

use lab_latency_proxy::{DelaySetting, SharedDelay, control, pump};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server that answers each 8-byte request with 8 bytes, like a tiny keep-alive protocol.
async fn echo_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 8];
                while c.read_exact(&mut b).await.is_ok() {
                    if c.write_all(&b).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

async fn proxy(upstream: &str) -> (String, String) {
    let data = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ctl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (d, c) = (
        data.local_addr().unwrap().to_string(),
        ctl.local_addr().unwrap().to_string(),
    );
    let delay = SharedDelay::new(DelaySetting::default());
    tokio::spawn(pump::serve(data, upstream.to_string(), delay.clone()));
    tokio::spawn(control::serve(ctl, delay));
    (d, c)
}

async fn round_trips(conn: &mut TcpStream, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        conn.write_all(&(i as u64).to_le_bytes()).await.unwrap();
        let mut b = [0u8; 8];
        conn.read_exact(&mut b).await.unwrap();
        assert_eq!(
            u64::from_le_bytes(b),
            i as u64,
            "bytes must arrive unchanged and in order"
        );
        out.push(t.elapsed());
    }
    out
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn http(control: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut c = TcpStream::connect(control).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let mut resp = String::new();
    c.read_to_string(&mut resp).await.unwrap();
    let code = resp[9..12].parse().unwrap();
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (code, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_delay_adds_nothing_measurable_and_a_delay_applies_to_open_connections() {
    let upstream = echo_server().await;
    let (data, control) = proxy(&upstream).await;

    let mut direct = TcpStream::connect(&upstream).await.unwrap();
    direct.set_nodelay(true).unwrap();
    let mut via = TcpStream::connect(&data).await.unwrap();
    via.set_nodelay(true).unwrap();
    round_trips(&mut via, 50).await; // warm up
    let d = median(round_trips(&mut direct, 200).await);
    let p = median(round_trips(&mut via, 200).await);
    assert!(
        p < d + Duration::from_millis(1),
        "proxy at zero delay: median {p:?} vs direct {d:?}"
    );

    let (code, body) = http(&control, "PUT", "/delay", r#"{"delay_ms":100,"jitter_ms":0}"#).await;
    assert_eq!(code, 200, "{body}");
    let slow = median(round_trips(&mut via, 5).await);
    assert!(
        slow >= Duration::from_millis(100),
        "delay set to 100 ms, measured {slow:?}"
    );
    assert!(
        slow < Duration::from_millis(150),
        "delay must not compound: {slow:?}"
    );

    let (code, _) = http(&control, "PUT", "/delay", r#"{"delay_ms":0}"#).await;
    assert_eq!(code, 200);
    let back = median(round_trips(&mut via, 50).await);
    assert!(
        back < Duration::from_millis(5),
        "cleared delay still slow: {back:?}"
    );
}

#[tokio::test]
async fn control_api_refuses_bad_input_and_changes_nothing() {
    let upstream = echo_server().await;
    let (_, control) = proxy(&upstream).await;
    let (code, _) = http(&control, "PUT", "/delay", r#"{"delay_ms":50,"jitter_ms":5}"#).await;
    assert_eq!(code, 200);
    for bad in [
        r#"{"delay_ms":-3}"#,
        r#"{"delay_ms":10,"jitter_ms":20}"#,
        "garbage",
        r#"{"delay_ms":1e9}"#,
    ] {
        let (code, body) = http(&control, "PUT", "/delay", bad).await;
        assert_eq!(code, 400, "{bad} → {body}");
    }
    let (code, body) = http(&control, "GET", "/delay", "").await;
    assert_eq!(code, 200);
    let now: DelaySetting = serde_json::from_str(&body).unwrap();
    assert_eq!(
        now,
        DelaySetting {
            delay_ms: 50.0,
            jitter_ms: 5.0
        }
    );
    let (code, metrics) = http(&control, "GET", "/metrics", "").await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("lab_proxy_added_delay_seconds 0.05"),
        "{metrics}"
    );
    assert_eq!(http(&control, "GET", "/nope", "").await.0, 404);
}
