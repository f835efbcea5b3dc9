//! The driver against real TCP endpoints on loopback: one healthy, one that accepts and never answers, one
//! that answers garbage. A tick still completes, the healthy target's figures arrive, and each broken one
//! is a line in `scrape_errors`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lab_model::scrape::{ScrapeTarget, TargetKind};
use lab_model::status::{LabStatus, RuntimeKind};
use lab_runtime::RuntimeError;
use lab_telemetry::{Collector, Driver, DriverConfig, NoLedger, Source, SourceError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Serves `body` to every request; `None` accepts and then never answers.
async fn serve(body: Option<&'static str>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            match body {
                Some(body) => {
                    tokio::spawn(async move {
                        let mut buf = [0u8; 1024];
                        let _ = sock.read(&mut buf).await;
                        let head = format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", body.len());
                        let _ = sock.write_all(head.as_bytes()).await;
                        let _ = sock.write_all(body.as_bytes()).await;
                    });
                }
                None => held.push(sock),
            }
        }
    });
    format!("{addr}")
}

/// The smallest runtime that scrapes over real HTTP; the lab's runtimes do the same through their own
/// clients. Only the calls telemetry makes are implemented.
#[derive(Debug)]
struct LoopbackRuntime {
    targets: Vec<ScrapeTarget>,
}

async fn http_get(addr: &str) -> Result<String, RuntimeError> {
    let io = |e| RuntimeError::io(format!("GET {addr}"), e);
    let mut sock = TcpStream::connect(addr).await.map_err(io)?;
    sock.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .map_err(io)?;
    let mut text = String::new();
    sock.read_to_string(&mut text).await.map_err(io)?;
    Ok(text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

#[async_trait]
impl Source for LoopbackRuntime {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Local
    }
    fn name(&self) -> &str {
        "loopback"
    }
    async fn status(&self) -> Result<LabStatus, SourceError> {
        Ok(LabStatus {
            lab: "loopback".into(),
            runtime: RuntimeKind::Local,
            pods: Vec::new(),
            gpus_capacity: 4,
            gpu_resource: "gpu".into(),
            ranks_desired: 3,
            world_size: 3,
            storage_servers: 0,
            delay_path: "proxy".into(),
            notes: Vec::new(),
        })
    }
    async fn scrape_targets(&self) -> Result<Vec<ScrapeTarget>, SourceError> {
        Ok(self.targets.clone())
    }
    async fn fetch_metrics(&self, target: &ScrapeTarget, timeout: Duration) -> Result<String, SourceError> {
        Ok(tokio::time::timeout(timeout, http_get(&target.address))
            .await
            .map_err(|_| RuntimeError::Timeout {
                what: target.address.clone(),
                seconds: timeout.as_secs_f64(),
            })??)
    }
}

fn target(rank: u32, address: String) -> ScrapeTarget {
    ScrapeTarget {
        instance: format!("rank-{rank}"),
        kind: TargetKind::Rank,
        index: rank,
        address,
    }
}

async fn lab() -> Arc<LoopbackRuntime> {
    let good = serve(Some("lab_samples_total 10\nlab_cpu_limit_cores 0.4\n")).await;
    let hung = serve(None).await;
    let garbage = serve(Some("<html>\u{1F600} not metrics</html>")).await;
    Arc::new(LoopbackRuntime {
        targets: vec![target(0, good), target(1, hung), target(2, garbage)],
    })
}

fn config() -> DriverConfig {
    DriverConfig {
        interval: Duration::from_millis(200),
        scrape_timeout: Duration::from_millis(300),
        status_timeout: Duration::from_millis(300),
    }
}

#[tokio::test]
async fn a_hung_or_garbage_target_never_stalls_a_tick() {
    let mut driver = Driver::new(lab().await, Arc::new(NoLedger), Collector::default(), config());
    // Generous outer bound: the point is that the tick returns at all while one target hangs forever.
    let snap = tokio::time::timeout(Duration::from_secs(10), driver.tick())
        .await
        .expect("tick completed");
    let errors = snap.scrape_errors.join("\n");
    assert!(errors.contains("rank-1: fetch failed: timed out"), "{errors}");
    assert!(
        errors.contains("rank-2: garbage metrics: metrics text line 1: invalid metric name"),
        "{errors}"
    );
    assert_eq!(snap.scrape_errors.len(), 2, "{errors}");
    let up: Vec<(String, bool)> = snap.ranks.iter().map(|r| (r.name.clone(), r.up)).collect();
    assert_eq!(up, vec![("rank-0".into(), true)]);
    assert_eq!(snap.ranks[0].cpu_limit_cores, Some(0.4));
}

#[tokio::test]
async fn run_publishes_snapshots_until_nobody_listens() {
    let driver = Driver::new(lab().await, Arc::new(NoLedger), Collector::default(), config());
    let (tx, mut rx) = watch::channel(None);
    let task = tokio::spawn(driver.run(tx));
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(10), rx.changed())
            .await
            .unwrap()
            .unwrap();
        assert!(rx.borrow_and_update().is_some());
    }
    drop(rx);
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("driver stopped")
        .unwrap();
}
