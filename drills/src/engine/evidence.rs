//! The evidence behind a verdict: what the job and Kubernetes show in a snapshot, in lines a person
//! reads.

use lab_model::Snapshot;

use crate::judge::fmt_s;

/// Lines that say what the job and Kubernetes show in `s`: the evidence behind a verdict.
pub fn evidence(s: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    let st = &s.status;
    let (ready, total) = st.ranks_ready();
    let mut k = format!(
        "Kubernetes: {ready}/{total} ranks Running and Ready; ranks asked for {}, world size configured {}",
        st.ranks_desired, st.world_size
    );
    for p in st.ranks().filter(|p| !p.is_running_ready()) {
        k.push_str(&format!(
            "; {} {}{}",
            p.name,
            p.phase,
            p.reason.as_ref().map_or(String::new(), |r| format!(" ({r})"))
        ));
    }
    let restarted: Vec<String> = st
        .ranks()
        .filter(|p| p.restarts > 0)
        .map(|p| format!("{} {}", p.name, p.restarts))
        .collect();
    if !restarted.is_empty() {
        k.push_str(&format!("; restarts: {}", restarted.join(", ")));
    }
    out.push(k);
    let t = &s.training;
    out.push(format!(
        "training: {} samples/s, step time {}, step {}, world size reported {}",
        t.samples_per_s.map_or("unknown".into(), |v| format!("{v:.0}")),
        crate::judge::step_time(s).map_or("unknown".into(), fmt_s),
        t.step,
        t.world_size.map_or("?".into(), |w| w.to_string())
    ));
    let waiting: Vec<&str> = s
        .ranks
        .iter()
        .filter(|r| r.waiting_for_peers)
        .map(|r| r.name.as_str())
        .collect();
    if !waiting.is_empty() {
        out.push(format!(
            "{} waiting at rendezvous for peers that have not joined",
            waiting.join(", ")
        ));
    }
    for p in st.ranks().filter(|p| p.resources.drifted()) {
        out.push(format!(
            "{} CPU limit live {} against template {}",
            p.name,
            p.resources.cpu_live.map_or("?".into(), |m| m.to_string()),
            p.resources.cpu_template.map_or("?".into(), |m| m.to_string())
        ));
    }
    for a in &s.alerts {
        out.push(format!("firing: {} ({}): {}", a.rule, a.signal, a.summary));
    }
    for v in s.storage.iter().filter(|v| v.outlier) {
        out.push(format!(
            "{} read p50 {} (baseline {})",
            v.name,
            v.client_p50.map_or("?".into(), fmt_s),
            v.baseline_p50.map_or("?".into(), fmt_s)
        ));
    }
    let straggler = s
        .alerts
        .iter()
        .any(|a| a.signal != lab_model::snapshot::GoldenSignal::Throughput);
    let slower = match (s.training.pct_of_baseline, crate::judge::step_time(s)) {
        (Some(p), Some(_)) => p < 90.0,
        _ => false,
    };
    if slower && !straggler && waiting.is_empty() {
        // Said as a hint, not a verdict: a busier machine and a fault that left no signal look alike.
        out.push(
            "no latency, error or saturation signal fires: every rank is slower alike, which is also what \
             other heavy work on this machine looks like"
                .into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_model::testing::snap;

    #[test]
    fn evidence_reads_the_stalled_job() {
        let mut s = snap(0, Some(0.0), None, 300);
        s.status.ranks_desired = 5;
        s.status.world_size = 5;
        let mut p = lab_model::PodStatus::new("rank-4", lab_model::Role::Rank, Some(4));
        p.reason = Some("Insufficient gpu".into());
        s.status.pods.push(p);
        for r in &mut s.ranks {
            r.waiting_for_peers = true;
        }
        let ev = evidence(&s);
        assert!(ev[0].contains("4/5 ranks Running and Ready; ranks asked for 5, world size configured 5; rank-4 Pending (Insufficient gpu)"), "{ev:?}");
        assert!(
            ev.iter()
                .any(|l| l.starts_with("rank-0, rank-1, rank-2, rank-3 waiting at rendezvous")),
            "{ev:?}"
        );
    }
}
