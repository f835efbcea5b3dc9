//! Readiness probes: every running instance's health endpoint, asked once a second, sets its Ready as a
//! kubelet would with the lab's manifests (a 1 s timeout; one pass makes it Ready, three failures in a row
//! not Ready: see [`Inst::probed`](super::reconcile::Inst::probed)); one that is not Ready yet is asked four
//! times a second, so a lab comes up without waiting out whole seconds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::instance::Kind;
use super::reconcile::Sup;
use crate::spec::{LocalConfig, LocalSpec};

fn probe_url(cfg: &LocalConfig, spec: &LocalSpec, kind: Kind) -> Option<String> {
    match kind {
        Kind::Master => Some(format!("http://{}/cluster/status", cfg.master())),
        Kind::Volume(i) => Some(format!(
            "http://127.0.0.1:{}/status",
            cfg.storage.get(i as usize)?.weed
        )),
        Kind::Proxy(i) => Some(format!(
            "http://127.0.0.1:{}/healthz",
            cfg.storage.get(i as usize)?.control
        )),
        Kind::Rank(r) => Some(format!(
            "http://127.0.0.1:{}/readyz",
            spec.rank_ports.get(&r)?.metrics
        )),
        Kind::Job(id) => Some(format!(
            "http://127.0.0.1:{}/readyz",
            spec.foreign_jobs.values().find(|j| j.id == id)?.metrics_port
        )),
        Kind::Seeder => None,
        // A database answers on its port: Ready, whatever its commits do (a TCP probe, as its pods have).
        Kind::DbPrimary => Some(format!(
            "tcp://127.0.0.1:{}",
            spec.database.as_ref()?.primary_port
        )),
        Kind::DbStandby => Some(format!(
            "tcp://127.0.0.1:{}",
            spec.database.as_ref()?.standby_port
        )),
        Kind::Writer => Some(format!(
            "http://127.0.0.1:{}/readyz",
            spec.database.as_ref()?.writer_metrics_port
        )),
    }
}

/// How often instances that are not Ready are probed.
const PROBE_TICK: Duration = Duration::from_millis(250);
/// Every this many ticks (once a second) every instance is probed, Ready or not.
const PROBE_ALL_EVERY: u32 = 4;
/// How long a probe waits for its answer: Kubernetes' default `timeoutSeconds`.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Probes every running instance's readiness endpoint once a second, and those not Ready every tick.
pub(super) async fn probe_loop(sup: Arc<Mutex<Sup>>) {
    let mut tick = tokio::time::interval(PROBE_TICK);
    // After a round that waited out a timeout, no burst of catch-up rounds at a server that is slow.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ticks: u32 = 0;
    loop {
        tick.tick().await;
        let all = ticks.is_multiple_of(PROBE_ALL_EVERY);
        ticks = ticks.wrapping_add(1);
        let probes: Vec<(String, String)> = {
            let s = sup.lock().expect("supervisor state");
            if s.shutting_down {
                return;
            }
            s.insts
                .iter()
                .filter(|(_, i)| i.running.as_ref().is_some_and(|r| r.terminating.is_none()))
                .filter(|(_, i)| all || !i.ready)
                .filter_map(|(n, i)| probe_url(&s.cfg, &s.spec, i.kind).map(|u| (n.clone(), u)))
                .collect()
        };
        let results = futures::future::join_all(probes.into_iter().map(|(name, url)| async move {
            let ok = match url.strip_prefix("tcp://") {
                Some(addr) => {
                    tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr.to_string()))
                        .await
                        .is_ok_and(|c| c.is_ok())
                }
                None => crate::http::get(&url, PROBE_TIMEOUT)
                    .await
                    .is_ok_and(|(code, _)| code == 200),
            };
            (name, ok)
        }))
        .await;
        let mut s = sup.lock().expect("supervisor state");
        for (name, ok) in results {
            if let Some(i) = s.insts.get_mut(&name)
                && i.running.is_some()
            {
                i.probed(ok);
            }
        }
    }
}
