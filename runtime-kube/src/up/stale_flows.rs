//! Connections to a Service that went out before kube-proxy wrote its rule, reset while a kind lab comes
//! up.
//!
//! On a cluster just made, a pod that dials a Service's address before kube-proxy has written the
//! Service's rule sends its first packet untranslated. The node's connection tracking remembers that
//! flow as it was, untranslated, so every retransmission of the same SYN goes untranslated too, and the
//! client waits out its whole connect timeout: CoreDNS's first call to the API server waited about 30 s
//! ("waiting for Kubernetes API"), and the lab's `deploy database` with it. Deleting such a flow (one
//! whose reply would come from the Service's address itself: no endpoint was put in) lets the client's
//! next retransmission, a second or a few later, be translated by the rule now written.
//!
//! [`Sweeper`] does that on every node of the lab's own kind cluster, once a second, from the cluster's
//! creation to the end of `lab up`. Only unanswered flows to the Service network whose reply side was
//! never translated are deleted; a connection that reached an endpoint is never touched.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::process::Command;

use super::super::kind::SERVICE_SUBNET;

/// How often the nodes are swept.
const EVERY: Duration = Duration::from_secs(1);

/// The script run in each node: list the unanswered TCP flows to the Service network, keep those whose
/// reply source is the address dialled (untranslated), delete each by its exact tuple, and print it.
fn script() -> String {
    format!(
        "conntrack -L -p tcp -d {SERVICE_SUBNET} 2>/dev/null | awk '/UNREPLIED/ {{ n = 0; for (i = 1; i <= NF; i++) {{ \
         split($i, kv, \"=\"); if (kv[1] == \"src\" || kv[1] == \"dst\" || kv[1] == \"sport\" || kv[1] == \"dport\") \
         {{ n++; v[n] = kv[2] }} }} if (n >= 5 && v[5] == v[2]) print v[1], v[2], v[3], v[4] }}' | \
         while read -r s d sp dp; do conntrack -D -p tcp -s \"$s\" -d \"$d\" --sport \"$sp\" --dport \"$dp\" \
         > /dev/null 2>&1 && echo \"$s:$sp -> $d:$dp\"; done"
    )
}

/// Sweeps the nodes until dropped; counts the flows it reset.
pub(super) struct Sweeper {
    task: tokio::task::JoinHandle<()>,
    reset: Arc<AtomicUsize>,
}

impl Sweeper {
    /// Starts sweeping `nodes` (their container names).
    pub(super) fn start(nodes: Vec<String>) -> Self {
        let reset = Arc::new(AtomicUsize::new(0));
        let counted = reset.clone();
        let task = tokio::spawn(async move {
            let script = script();
            loop {
                for node in &nodes {
                    let out = tokio::time::timeout(
                        Duration::from_secs(10),
                        Command::new("docker")
                            .args(["exec", node, "sh", "-c", &script])
                            .stdin(std::process::Stdio::null())
                            .kill_on_drop(true)
                            .output(),
                    )
                    .await;
                    match out {
                        Ok(Ok(o)) if o.status.success() => {
                            let text = String::from_utf8_lossy(&o.stdout);
                            for flow in text.lines().filter(|l| !l.trim().is_empty()) {
                                tracing::info!(
                                    "{node}: reset a connection to a Service sent before its rule: {flow}"
                                );
                                counted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Ok(Ok(o)) => tracing::debug!(
                            "{node}: sweeping stale flows: {}",
                            String::from_utf8_lossy(&o.stderr).trim()
                        ),
                        Ok(Err(e)) => tracing::debug!("{node}: sweeping stale flows: {e}"),
                        Err(_) => tracing::debug!("{node}: sweeping stale flows timed out"),
                    }
                }
                tokio::time::sleep(EVERY).await;
            }
        });
        Sweeper { task, reset }
    }

    /// How many flows it reset so far.
    pub(super) fn reset(&self) -> usize {
        self.reset.load(Ordering::Relaxed)
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script's filter, run by the machine's own sh and awk over `conntrack -L` lines as conntrack
    /// 1.4.7 prints them: the untranslated flow is picked, the translated one and the answered one are not.
    #[test]
    fn only_unanswered_untranslated_flows_are_picked() {
        let lines = "\
tcp      6 118 SYN_SENT src=203.0.113.5 dst=198.51.100.129 sport=41234 dport=443 [UNREPLIED] src=198.51.100.129 dst=203.0.113.5 sport=443 dport=41234 mark=0 use=1
tcp      6 118 SYN_SENT src=203.0.113.6 dst=198.51.100.129 sport=41235 dport=443 [UNREPLIED] src=172.18.0.2 dst=203.0.113.6 sport=6443 dport=41235 mark=0 use=1
tcp      6 86398 ESTABLISHED src=203.0.113.7 dst=198.51.100.130 sport=50000 dport=9333 src=203.0.113.9 dst=203.0.113.7 sport=9333 dport=50000 [ASSURED] mark=0 use=1
";
        let script = script();
        let awk = script.split(" | ").nth(1).expect("the script's awk stage");
        let out = std::process::Command::new("sh")
            .args(["-c", &format!("printf '%s' \"$LINES\" | {awk}")])
            .env("LINES", lines)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "203.0.113.5 198.51.100.129 41234 443\n"
        );
    }
}
