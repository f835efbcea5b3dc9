//! `lab status` as plain text: one screen with the Kubernetes-style view beside the training view, then
//! storage, alerts and changes. A pure function of the snapshot; times are relative to the snapshot's own.

use lab_model::Snapshot;
use lab_model::format::latency;
use lab_model::status::Phase;

use crate::summary::{fmt_opt_latency, fmt_pct, fmt_share, fmt_span, headline_text, lead_alert, split_bar};

/// The Kubernetes column is as wide as its widest line, within these bounds.
const LEFT: (usize, usize) = (56, 84);

fn pad(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n >= width {
        s.chars().take(width).collect()
    } else {
        format!("{s}{}", " ".repeat(width - n))
    }
}

fn kubernetes(s: &Snapshot) -> Vec<String> {
    let st = &s.status;
    let (ranks_ready, ranks) = st.ranks_ready();
    let (servers_ready, servers) = st.servers_ready();
    let mut out = vec![format!(
        "KUBERNETES  ranks {ranks_ready}/{ranks} Ready · storage {servers_ready}/{servers} Ready · GPUs {}",
        st.gpus_capacity
    )];
    // A node column only where the pods span several nodes (a multi-node kind cluster).
    let nodes: std::collections::BTreeSet<&str> = st.pods.iter().filter_map(|p| p.node.as_deref()).collect();
    let node_col = |n: &str| {
        if nodes.len() > 1 {
            let w = nodes.iter().map(|n| n.len()).max().unwrap_or(4).max(4);
            format!("{n:<w$} ")
        } else {
            String::new()
        }
    };
    out.push(format!(
        "{:<15} {}{:<9} {:<5} {:<8} {:<13} {:<3} {}",
        "NAME",
        node_col("NODE"),
        "PHASE",
        "READY",
        "RESTARTS",
        "CPU live/spec",
        "GPU",
        "REASON"
    ));
    for p in &st.pods {
        let r = &p.resources;
        let cpu = r.cpu_live_spec();
        let cpu = if r.drifted() { format!("{cpu}*") } else { cpu };
        out.push(format!(
            "{:<15} {}{:<9} {:<5} {:<8} {:<13} {:<3} {}",
            p.name,
            node_col(p.node.as_deref().unwrap_or("-")),
            p.phase.to_string(),
            if p.ready { "1/1" } else { "0/1" },
            p.restarts,
            cpu,
            if r.gpus > 0 {
                r.gpus.to_string()
            } else {
                "-".into()
            },
            p.reason.clone().unwrap_or_default()
        ));
    }
    if st.pods.iter().any(|p| p.resources.drifted()) {
        out.push("* live limit differs from the template".into());
    }
    if st.pods.iter().any(|p| p.phase == Phase::Pending) {
        out.push(format!(
            "world size {} · ranks asked for {}",
            st.world_size, st.ranks_desired
        ));
    }
    out
}

fn training(s: &Snapshot) -> Vec<String> {
    let t = &s.training;
    let throughput = match (t.samples_per_s, t.baseline) {
        (Some(v), Some(b)) => format!(
            "{}% of normal · {v:.0} samples/s, baseline {:.0}",
            fmt_pct(t.pct_of_baseline.unwrap_or(0.0)),
            b.samples_per_s
        ),
        (Some(v), None) => format!("{v:.0} samples/s · learning its baseline"),
        _ => "-".into(),
    };
    let mut step = t.step_seconds.map_or("-".to_string(), latency);
    if let Some(b) = t.baseline.filter(|b| b.step_seconds > 0.0) {
        step.push_str(&format!(" (baseline {})", latency(b.step_seconds)));
    }
    let mut out = vec![
        "TRAINING".to_string(),
        format!("throughput  {throughput}"),
        format!(
            "step time   {step} · step {} · world size {}",
            t.step,
            t.world_size.map_or("-".into(), |w| w.to_string())
        ),
        format!(
            "{:<7} {:<10} {:<10} {:>4} {:>7} {:>4} {:>8}  {}",
            "RANK", "READS FROM", "SPLIT", "READ", "COMPUTE", "WAIT", "READ p50", "STATE"
        ),
    ];
    for r in &s.ranks {
        let state = if !r.up {
            crate::summary::rank_absent(s, &r.name).to_string()
        } else if r.waiting_for_peers {
            "waiting for peers".to_string()
        } else if r.throttled.is_some_and(|v| v > 0.25) {
            format!("throttled {}", fmt_share(r.throttled))
        } else {
            String::new()
        };
        out.push(format!(
            "{:<7} {:<10} {:<10} {:>4} {:>7} {:>4} {:>8}  {state}",
            r.name,
            r.server.clone().unwrap_or_else(|| "-".into()),
            split_bar(r.read, r.compute, r.wait, r.transfer, 10),
            fmt_share(r.read),
            fmt_share(r.compute.map(|c| c + r.transfer.unwrap_or(0.0))),
            fmt_share(r.wait),
            fmt_opt_latency(r.read_p50)
        ));
    }
    out
}

/// The whole of `lab status` for one snapshot.
pub fn status_text(s: &Snapshot) -> String {
    let mut out = String::new();
    out.push_str(&headline_text(s));
    out.push('\n');
    out.push_str(&format!(
        "lab {} · {} runtime\n\n",
        s.status.lab, s.status.runtime
    ));
    let (left, right) = (kubernetes(s), training(s));
    let width = left
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(LEFT.0, LEFT.1);
    for i in 0..left.len().max(right.len()) {
        let l = left.get(i).map_or("", String::as_str);
        let r = right.get(i).map_or("", String::as_str);
        out.push_str(format!("{} │ {r}", pad(l, width)).trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "\nSTORAGE  read latency as the ranks see it\n{:<12} {:>8} {:>8} {:>8} {:>8}  {}\n",
        "SERVER", "p50", "p99", "OWN p50", "BASELINE", "READERS"
    ));
    for v in &s.storage {
        let name = if v.outlier {
            format!("{} ▲", v.name)
        } else {
            v.name.clone()
        };
        out.push_str(&format!(
            "{:<12} {:>8} {:>8} {:>8} {:>8}  {}\n",
            name,
            fmt_opt_latency(v.client_p50),
            fmt_opt_latency(v.client_p99),
            fmt_opt_latency(v.server_p50),
            fmt_opt_latency(v.baseline_p50),
            v.readers.join(",")
        ));
    }
    // Who loads each server, only when a client other than the ranks reads one.
    if s.storage
        .iter()
        .any(|v| v.clients.iter().any(|c| c.kind != "rank"))
    {
        out.push_str("\nREADS BY CLIENT  reads/s each server served, and who asked\n");
        for v in &s.storage {
            let clients: Vec<String> = v
                .clients
                .iter()
                .map(|c| format!("{} {:.0} ({})", c.client, c.reads_per_s, c.kind))
                .collect();
            out.push_str(&format!(
                "{:<12} {:>7}  {}\n",
                v.name,
                v.served_per_s.map_or("-".into(), |x| format!("{x:.0}")),
                clients.join(" · ")
            ));
        }
    }
    // The database beside the job, by its writer's own signals (only with `lab up --database`).
    if let Some(d) = &s.database {
        out.push_str(&format!(
            "\nDATABASE  lab-writer on db-0: {:.1} commits/s · commit p50 {} p99 {} · waiting {:.1} s · {:.1} reads/s\n",
            d.commits_per_s,
            latency(d.commit_p50_s),
            latency(d.commit_p99_s),
            d.commit_waiting_s,
            d.reads_per_s
        ));
    }
    out.push_str(&format!("\nALERTS  golden signals firing: {}\n", s.alerts.len()));
    let mut alerts: Vec<_> = s.alerts.iter().collect();
    alerts.sort_by_key(|a| (a.since_ms, a.rule.clone(), a.target.clone()));
    for a in alerts {
        let lead = lead_alert(&s.alerts).is_some_and(|l| std::ptr::eq(l, a));
        out.push_str(&format!(
            "{} {:<10} for {:<7} {:<28} {}\n",
            if lead { "▶" } else { " " },
            a.signal.to_string(),
            fmt_span(s.at_ms.saturating_sub(a.since_ms)),
            a.rule,
            a.summary
        ));
    }
    if !s.faults.is_empty() || !s.changes.is_empty() {
        out.push_str("\nCHANGES\n");
        for f in &s.faults {
            out.push_str(&format!("  active  {} on {} ({})\n", f.kind, f.target, f.phase));
        }
        let mut changes: Vec<_> = s.changes.iter().collect();
        changes.sort_by_key(|c| std::cmp::Reverse(c.at_ms));
        for c in changes.into_iter().take(8) {
            out.push_str(&format!(
                "  {:>7} ago  {}\n",
                fmt_span(s.at_ms.saturating_sub(c.at_ms)),
                c.line()
            ));
        }
    }
    if !s.scrape_errors.is_empty() {
        out.push_str("\nSCRAPE ERRORS\n");
        for e in &s.scrape_errors {
            out.push_str(&format!("  {e}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn a_node_column_appears_only_when_pods_span_several_nodes() {
        let one = status_text(&fixtures::healthy());
        assert!(!one.contains("NODE"), "{one}");
        let mut s = fixtures::healthy();
        for (i, p) in s.status.pods.iter_mut().enumerate() {
            p.node = Some(format!(
                "lab-demo-{}",
                if i % 2 == 0 { "control-plane" } else { "worker" }
            ));
        }
        let two = status_text(&s);
        let header = two.lines().find(|l| l.starts_with("NAME")).unwrap();
        assert!(header.contains(" NODE "), "{two}");
        assert!(
            two.lines()
                .any(|l| l.starts_with("rank-1") && l.contains("lab-demo-worker")),
            "{two}"
        );
    }

    #[test]
    fn status_text_baseline() {
        insta::assert_snapshot!(status_text(&fixtures::healthy()));
    }

    #[test]
    fn status_text_slow_storage() {
        let t = status_text(&fixtures::slow_storage());
        assert!(t.starts_with("Kubernetes: 4/4 Ready · Training: 7% of normal · storage-1 read p50 488 ms"));
        insta::assert_snapshot!(t);
    }

    #[test]
    fn status_text_unplaceable_rank() {
        let t = status_text(&fixtures::unplaceable_rank());
        assert!(
            t.starts_with("Kubernetes: 4/5 Ready, 1 Pending (Insufficient gpu) · Training: 0% of normal"),
            "{t}"
        );
        insta::assert_snapshot!(t);
    }
}
