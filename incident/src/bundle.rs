//! The incident bundle: what an on-call engineer, or an agent under test, gets to read about the lab right
//! now — the wiring map, the change log, the golden signals firing, and per-dependency latency.
//!
//! It is built from one snapshot and shows evidence the way a real system would: pods with their
//! containers and their live resources against spec and template, the rank → storage edges the metrics
//! name, an audit log of changes (who, what, where, when, before → after). It never names the injected
//! fault as the answer: no ledger ids, no fault kinds, nothing that says a change was an injection.

use std::fmt::Write as _;

use lab_model::Snapshot;
use lab_model::change::ChangeSource;
use lab_model::format::latency;
use lab_model::snapshot::{GoldenSignal, RankView, StorageView};
use lab_model::status::{Phase, Role};
use serde::Serialize;

use lab_model::format::fmt_s;

use crate::redact::evidence_only;
pub use lab_model::clock::rfc3339;

/// How far back the change log and the signals reach.
pub const LOOKBACK_MS: u64 = 3 * 60 * 60 * 1000;

/// The format's identifier, versioned.
pub const FORMAT: &str = "straggler-lab.incident/v3";

/// The whole bundle (schema in `docs/incident.md`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bundle {
    pub format: &'static str,
    pub lab: String,
    pub runtime: String,
    /// When the bundle was made (RFC 3339, UTC) and in ms since the Unix epoch.
    pub generated_at: String,
    pub generated_at_ms: u64,
    /// One line each: what Kubernetes says and what the job says.
    pub kubernetes: String,
    pub training_line: String,
    pub signals_firing: Vec<Signal>,
    /// One line per dependency that moved, e.g. `storage-1 went from 2.0 ms to 414 ms while its two
    /// siblings stayed at 2.0 ms`.
    pub latency_summary: Vec<String>,
    /// Each storage server as its readers see it: the snapshot's own view (seconds, as in `lab status
    /// --json`).
    pub dependencies: Vec<StorageView>,
    pub training: TrainingView,
    pub wiring: Wiring,
    /// Changes to the lab in the last three hours, oldest first.
    pub changes: Vec<AuditEntry>,
    /// The database beside the job and its writer's signals (`lab up --database`); absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<crate::database::DatabaseSection>,
}

/// A golden-signal alert that is firing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signal {
    pub signal: GoldenSignal,
    pub rule: String,
    pub target: String,
    pub since: String,
    pub since_ms: u64,
    /// Seconds it has held, at the time of the bundle.
    pub for_s: f64,
    pub value: f64,
    pub summary: String,
}

/// The job's own signals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainingView {
    pub samples_per_s: Option<f64>,
    pub baseline_samples_per_s: Option<f64>,
    pub pct_of_baseline: Option<f64>,
    pub step_seconds: Option<f64>,
    pub baseline_step_seconds: Option<f64>,
    pub step: u64,
    pub steps_lost: u64,
    pub checkpoint_step: Option<u64>,
    /// When the job last wrote a checkpoint (RFC 3339, UTC) and in ms since the Unix epoch.
    pub checkpoint_at: Option<String>,
    pub checkpoint_at_ms: Option<u64>,
    /// The world size the ranks report, against the job's configuration and the replicas asked for.
    pub world_size_reported: Option<u32>,
    pub world_size_configured: u32,
    pub ranks_desired: u32,
    /// Where each rank's time goes: the snapshot's own view.
    pub ranks: Vec<RankView>,
}

/// The wiring map: every pod with its containers and resources, and the edges between pods.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Wiring {
    pub pods: Vec<Pod>,
    pub edges: Vec<Edge>,
    pub gpus_capacity: u32,
    pub gpu_resource: String,
}

/// One pod (or, on the local runtime, the supervised process group that stands for it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pod {
    pub name: String,
    pub role: Role,
    pub phase: Phase,
    pub ready: bool,
    pub restarts: u32,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub node: Option<String>,
    /// Every container in the pod, including any added to it after it started.
    pub containers: Vec<String>,
    pub cpu_live: Option<String>,
    pub cpu_spec: Option<String>,
    pub cpu_template: Option<String>,
    /// True when the live limit differs from the workload's template (changed in place).
    pub differs_from_template: bool,
    pub gpus: u32,
}

/// A directed edge of the wiring map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Edge {
    pub from: String,
    pub to: String,
    /// `reads-from` (a rank → its storage server).
    pub relation: String,
    /// Where the edge was learned.
    pub source: String,
}

/// One change, as an audit log shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditEntry {
    pub time: String,
    pub at_ms: u64,
    /// Who made it: `operator` for changes made with the lab's commands (a person, a script or an agent —
    /// they share the credential), `lab-lifecycle` for `lab up` and `lab down`.
    pub who: String,
    /// The object changed: `rank-1`, `storage-1`, `ranks`, `job config`.
    #[serde(rename = "where")]
    pub target: String,
    pub what: String,
    pub before: String,
    pub after: String,
    pub detail: Option<String>,
    /// The number (1, 2, ...) of the earlier remediation of this drill that made the change, if one did:
    /// a fix is not a suspect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remediation: Option<usize>,
    /// What the job did after the change: its median throughput (samples/s) over the window before the
    /// change and over the window after it, and the same as a percentage of the job's normal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// On whose behalf the change record says it was made (`remediation 1`, a person's name), if it says.
    #[serde(skip)]
    pub by: Option<String>,
}

/// The job's throughput around one change (see [`Bundle::annotate_changes`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Effect {
    pub samples_per_s_before: Option<f64>,
    pub samples_per_s_after: Option<f64>,
    pub pct_of_normal_before: Option<f64>,
    pub pct_of_normal_after: Option<f64>,
}

/// Who ran a remediation whose changes a later bundle shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FixBy {
    /// The remediate step's command, `--remediate`, or the lab's own clear.
    Remediation,
    /// An agent's approved plan (`--agent`).
    Agent,
}

impl FixBy {
    /// Its word in a bundle's change log: `remediation` or `agent`.
    pub fn word(self) -> &'static str {
        match self {
            FixBy::Remediation => "remediation",
            FixBy::Agent => "agent",
        }
    }

    /// What the `nth` remediation's changes carry in their `by` (1-based): `remediation 2`, `agent 1`.
    pub fn tag(self, nth: usize) -> String {
        format!("{} {nth}", self.word())
    }

    /// The remediation a recorded `by` names (the reverse of [`FixBy::tag`]), if it names one.
    pub fn parse(by: &str) -> Option<(FixBy, usize)> {
        let (word, n) = by.split_once(' ')?;
        let who = [FixBy::Remediation, FixBy::Agent]
            .into_iter()
            .find(|f| f.word() == word)?;
        Some((who, n.parse().ok().filter(|&n| n > 0)?))
    }
}

/// The windows over which a change's effect is measured: the throughput over the `EFFECT_WINDOW_MS`
/// before it, and over the same length after it once `EFFECT_SETTLE_MS` have passed (the job's rates
/// are measured over a few seconds, and a change takes a step or two to show).
pub const EFFECT_WINDOW_MS: u64 = 10_000;
pub const EFFECT_SETTLE_MS: u64 = 3_000;

/// `step 4800 at 2026-…Z (4 s ago)`, or what is known of it.
fn checkpoint_line(t: &TrainingView, now_ms: u64) -> String {
    match (t.checkpoint_step, t.checkpoint_at_ms) {
        (Some(s), Some(at)) => format!(
            "step {s} at {} ({} ago)",
            rfc3339(at),
            fmt_s(now_ms.saturating_sub(at) as f64 / 1000.0)
        ),
        (Some(s), None) => format!("step {s} (resumed from; not written since rank-0 started)"),
        _ => "none reported".into(),
    }
}

impl Bundle {
    /// The bundle for the lab as `s` shows it.
    pub fn from_snapshot(s: &Snapshot) -> Bundle {
        let st = &s.status;
        let since = s.at_ms.saturating_sub(LOOKBACK_MS);
        let signals_firing = s
            .alerts
            .iter()
            .map(|a| Signal {
                signal: a.signal,
                rule: a.rule.clone(),
                target: a.target.clone(),
                since: rfc3339(a.since_ms),
                since_ms: a.since_ms,
                for_s: s.at_ms.saturating_sub(a.since_ms) as f64 / 1000.0,
                value: a.value,
                summary: a.summary.clone(),
            })
            .collect();
        let dependencies = s.storage.clone();
        let t = &s.training;
        let training = TrainingView {
            samples_per_s: t.samples_per_s,
            baseline_samples_per_s: t.baseline.map(|b| b.samples_per_s),
            pct_of_baseline: t.pct_of_baseline,
            step_seconds: t.step_seconds,
            baseline_step_seconds: t.baseline.map(|b| b.step_seconds),
            step: t.step,
            steps_lost: t.steps_lost,
            checkpoint_step: t.checkpoint_step,
            checkpoint_at: t.checkpoint_at_ms.map(rfc3339),
            checkpoint_at_ms: t.checkpoint_at_ms,
            world_size_reported: t.world_size,
            world_size_configured: st.world_size,
            ranks_desired: st.ranks_desired,
            ranks: s.ranks.clone(),
        };
        let pods = st
            .pods
            .iter()
            .map(|p| Pod {
                name: p.name.clone(),
                role: p.role,
                phase: p.phase,
                ready: p.ready,
                restarts: p.restarts,
                reason: p.reason.as_deref().and_then(evidence_only),
                message: p.message.as_deref().and_then(evidence_only),
                node: p.node.clone(),
                containers: p.containers.clone(),
                cpu_live: p.resources.cpu_live.map(|m| m.to_string()),
                cpu_spec: p.resources.cpu_spec.map(|m| m.to_string()),
                cpu_template: p.resources.cpu_template.map(|m| m.to_string()),
                differs_from_template: p.resources.drifted(),
                gpus: p.resources.gpus,
            })
            .collect();
        let mut edges: Vec<Edge> = s
            .ranks
            .iter()
            .filter_map(|r| {
                r.server.as_ref().map(|srv| Edge {
                    from: r.name.clone(),
                    to: srv.clone(),
                    relation: "reads-from".into(),
                    source: format!("metric label `{}`", lab_model::metrics::LABEL_SERVER),
                })
            })
            .collect();
        // A rank that is not scraped right now still shows as a reader of its server.
        for v in &s.storage {
            for r in &v.readers {
                if !edges.iter().any(|e| &e.from == r && e.to == v.name) {
                    edges.push(Edge {
                        from: r.clone(),
                        to: v.name.clone(),
                        relation: "reads-from".into(),
                        source: format!("metric label `{}`", lab_model::metrics::LABEL_SERVER),
                    });
                }
            }
        }
        edges.sort_by(|a, b| (&a.from, &a.to).cmp(&(&b.from, &b.to)));
        let mut changes: Vec<AuditEntry> = s
            .changes
            .iter()
            .filter(|c| c.at_ms >= since)
            .map(|c| AuditEntry {
                time: rfc3339(c.at_ms),
                at_ms: c.at_ms,
                // Who the change says made it; a remediation of this drill is marked by
                // `annotate_changes`, which knows the drill's numbering.
                who: match (c.source, c.by.as_deref()) {
                    (ChangeSource::Lifecycle, _) => "lab-lifecycle".into(),
                    (_, Some(by)) if FixBy::parse(by).is_none() => by.to_string(),
                    _ => "operator".into(),
                },
                target: c.target.clone(),
                what: c.what.clone(),
                before: c.before.clone(),
                after: c.after.clone(),
                detail: c.note.as_deref().and_then(evidence_only),
                remediation: None,
                effect: None,
                by: c.by.clone(),
            })
            .collect();
        changes.sort_by_key(|c| c.at_ms);
        let (ready, total) = st.ranks_ready();
        let pending = st.ranks().filter(|p| p.phase == Phase::Pending).count();
        let mut kubernetes = format!("{ready}/{total} ranks Running and Ready");
        if pending > 0 {
            kubernetes.push_str(&format!(", {pending} Pending"));
        }
        let (servers_ready, servers) = st.servers_ready();
        kubernetes.push_str(&format!("; storage {servers_ready}/{servers} Ready"));
        let training_line = match (t.pct_of_baseline, t.samples_per_s) {
            (Some(p), Some(v)) => format!(
                "training at {p:.0}% of normal ({v:.0} of {:.0} samples/s), step time {}",
                t.baseline.map_or(0.0, |b| b.samples_per_s),
                t.step_seconds.map_or("unknown".into(), fmt_s)
            ),
            (_, Some(v)) => format!("training at {v:.0} samples/s (no baseline learned)"),
            _ => "no training figures".into(),
        };
        Bundle {
            format: FORMAT,
            lab: st.lab.clone(),
            runtime: st.runtime.to_string(),
            generated_at: rfc3339(s.at_ms),
            generated_at_ms: s.at_ms,
            kubernetes,
            training_line,
            signals_firing,
            latency_summary: latency_summary(&dependencies),
            dependencies,
            training,
            wiring: Wiring {
                pods,
                edges,
                gpus_capacity: st.gpus_capacity,
                gpu_resource: st.gpu_resource.clone(),
            },
            changes,
            database: crate::database::DatabaseSection::from_snapshot(s),
        }
    }

    /// Adds what the runtime says of the database (its template, the version the standby pod was made
    /// from, the primary's settings), which a snapshot does not carry. Nothing for a lab without one.
    pub fn set_database(&mut self, d: &lab_model::db::DbStatus) {
        if let Some(sec) = &mut self.database {
            sec.set_status(d);
        }
    }

    /// Marks the changes an earlier remediation of this drill made (`fixes`, in order) with who made them
    /// and which remediation it was, and gives every change its effect on the job's throughput from
    /// `series` (`(at_ms, samples/s)`, oldest first), as a percentage of `normal` samples/s when known.
    /// The window after a change ends where the next change begins, so that each effect is its own.
    pub fn annotate_changes(&mut self, fixes: &[FixBy], series: &[(u64, f64)], normal: Option<f64>) {
        let now = self.generated_at_ms;
        let starts: Vec<u64> = self.changes.iter().map(|c| c.at_ms).collect();
        for c in &mut self.changes {
            // A change is a remediation's when it says so (its `by`, from the command's environment or
            // the lab's own clear), and this drill ran that remediation: never by its time alone, so a
            // fault injected in the fix's millisecond is not taken for the fix.
            let fix =
                c.by.as_deref()
                    .and_then(FixBy::parse)
                    .filter(|&(who, n)| fixes.get(n - 1) == Some(&who));
            if let Some((who, n)) = fix {
                c.remediation = Some(n);
                c.who = who.word().into();
            }
            // Changes made together (one command's records) share their window.
            let next = starts.iter().copied().filter(|&t| t > c.at_ms + 1_000).min();
            let after_from = c.at_ms + EFFECT_SETTLE_MS;
            let after_to = next.unwrap_or(now).min(after_from + EFFECT_WINDOW_MS);
            let before_from = c.at_ms.saturating_sub(EFFECT_WINDOW_MS);
            let prev_end = starts.iter().copied().filter(|&t| t + 1_000 < c.at_ms).max();
            let before_from = prev_end.map_or(before_from, |p| before_from.max(p + EFFECT_SETTLE_MS));
            let before = median_between(series, before_from, c.at_ms);
            let after = median_between(series, after_from, after_to);
            if before.is_none() && after.is_none() {
                continue;
            }
            let pct = |v: Option<f64>| {
                v.zip(normal.filter(|n| *n > 0.0))
                    .map(|(v, n)| (v / n * 1000.0).round() / 10.0)
            };
            c.effect = Some(Effect {
                samples_per_s_before: before.map(f64::round),
                samples_per_s_after: after.map(f64::round),
                pct_of_normal_before: pct(before),
                pct_of_normal_after: pct(after),
            });
        }
    }

    /// The bundle as text for a person.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "INCIDENT  lab {:?} · {} runtime · {}",
            self.lab, self.runtime, self.generated_at
        );
        let _ = writeln!(o, "Kubernetes: {}", self.kubernetes);
        let _ = writeln!(o, "Training:   {}", self.training_line);
        let _ = writeln!(o, "\nSIGNALS FIRING");
        if self.signals_firing.is_empty() {
            let _ = writeln!(o, "  none");
        }
        for a in &self.signals_firing {
            let _ = writeln!(
                o,
                "  {:<10} {:<29} for {:>4.0}s  {}",
                a.signal.to_string(),
                a.rule,
                a.for_s,
                a.summary
            );
        }
        let _ = writeln!(o, "\nDEPENDENCY LATENCY  storage reads as the ranks see them");
        for l in &self.latency_summary {
            let _ = writeln!(o, "  {l}");
        }
        let opt = |v: Option<f64>| v.map_or("-".into(), latency);
        let _ = writeln!(
            o,
            "  {:<12} {:>9} {:>9} {:>9} {:>9} {:>9}  READERS",
            "SERVER", "p50", "p99", "OWN", "HANDLER", "BASELINE"
        );
        for d in &self.dependencies {
            let _ = writeln!(
                o,
                "  {:<12} {:>9} {:>9} {:>9} {:>9} {:>9}  {}",
                d.name,
                opt(d.client_p50),
                opt(d.client_p99),
                opt(d.own_probe),
                opt(d.server_p50),
                opt(d.baseline_p50),
                d.readers.join(", ")
            );
        }
        // Who loads each server: only when a client other than the ranks reads one (a healthy lab's
        // bundle reads as it always did).
        if self
            .dependencies
            .iter()
            .any(|d| d.clients.iter().any(|c| c.kind != "rank"))
        {
            let _ = writeln!(o, "\nREADS BY CLIENT  reads/s each server served, and who asked");
            for d in &self.dependencies {
                let _ = writeln!(
                    o,
                    "  {:<12} {:>7}  {}",
                    d.name,
                    d.served_per_s.map_or("-".into(), |v| format!("{v:.0}")),
                    clients_line(&d.clients)
                );
            }
        }
        let t = &self.training;
        let _ = writeln!(
            o,
            "\nTRAINING  step {} · world size reported {} · configured {} · ranks asked for {} · steps lost {}",
            t.step,
            t.world_size_reported.map_or("?".into(), |w| w.to_string()),
            t.world_size_configured,
            t.ranks_desired,
            t.steps_lost
        );
        let _ = writeln!(
            o,
            "  last checkpoint: {}",
            checkpoint_line(t, self.generated_at_ms)
        );
        let pct = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0));
        let _ = writeln!(
            o,
            "  {:<8} {:<11} {:>5} {:>7} {:>5} {:>8} {:>9} {:>9} {:>6}  STATE",
            "RANK", "READS FROM", "READ", "COMPUTE", "WAIT", "TRANSFER", "READ p50", "THROTTLED", "CPU"
        );
        for r in &t.ranks {
            let state = if !r.up {
                "not scraped"
            } else if r.waiting_for_peers {
                "waiting for peers"
            } else {
                ""
            };
            let _ = writeln!(
                o,
                "  {:<8} {:<11} {:>5} {:>7} {:>5} {:>8} {:>9} {:>9} {:>6}  {state}",
                r.name,
                r.server.as_deref().unwrap_or("-"),
                pct(r.read),
                pct(r.compute),
                pct(r.wait),
                pct(r.transfer),
                opt(r.read_p50),
                pct(r.throttled),
                r.cpu_limit_cores
                    .map_or("-".into(), |c| format!("{:.0}m", c * 1000.0)),
            );
        }
        if let Some(d) = &self.database {
            d.write_text(&mut o);
        }
        let _ = writeln!(
            o,
            "\nWIRING  edges from the metrics; containers and CPU live/spec/template per pod"
        );
        for e in &self.wiring.edges {
            let _ = writeln!(o, "  {} → {}  ({}, {})", e.from, e.to, e.relation, e.source);
        }
        let _ = writeln!(
            o,
            "  {:<15} {:<9} {:<5} {:<8} {:<20} {:<30} REASON",
            "POD", "PHASE", "READY", "RESTARTS", "CPU live/spec/tmpl", "CONTAINERS"
        );
        for p in &self.wiring.pods {
            let cpu = format!(
                "{}/{}/{}{}",
                p.cpu_live.as_deref().unwrap_or("-"),
                p.cpu_spec.as_deref().unwrap_or("-"),
                p.cpu_template.as_deref().unwrap_or("-"),
                if p.differs_from_template { " ≠" } else { "" }
            );
            let _ = writeln!(
                o,
                "  {:<15} {:<9} {:<5} {:<8} {:<20} {:<30} {}",
                p.name,
                p.phase.to_string(),
                if p.ready { "1/1" } else { "0/1" },
                p.restarts,
                cpu,
                p.containers.join(","),
                p.reason.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(o, "\nCHANGES  audit log, last 3 hours, oldest first");
        if self.changes.is_empty() {
            let _ = writeln!(o, "  none");
        }
        for c in &self.changes {
            let who = match c.remediation {
                Some(n) => format!("{} {n}", c.who),
                None => c.who.clone(),
            };
            let _ = writeln!(
                o,
                "  {}  {:<13} {:<13} {} {} → {}{}{}",
                c.time,
                who,
                c.target,
                c.what,
                c.before,
                c.after,
                c.detail.as_ref().map_or(String::new(), |d| format!("  ({d})")),
                c.effect
                    .as_ref()
                    .map_or(String::new(), |e| format!("  · {}", e.line()))
            );
        }
        o
    }
}

impl Effect {
    /// `training 100% → 9% of normal after it` (or samples/s when no normal is known).
    pub fn line(&self) -> String {
        let show = |pct: Option<f64>, v: Option<f64>| match (pct, v) {
            (Some(p), _) => format!("{p:.0}%"),
            (None, Some(v)) => format!("{v:.0} samples/s"),
            (None, None) => "?".into(),
        };
        let unit = if self.pct_of_normal_before.or(self.pct_of_normal_after).is_some() {
            " of normal"
        } else {
            ""
        };
        format!(
            "training {} → {}{unit} after it",
            show(self.pct_of_normal_before, self.samples_per_s_before),
            show(self.pct_of_normal_after, self.samples_per_s_after)
        )
    }
}

/// The median of the values of `series` at `from <= at < to`.
fn median_between(series: &[(u64, f64)], from: u64, to: u64) -> Option<f64> {
    let mut v: Vec<f64> = series
        .iter()
        .filter(|(at, x)| *at >= from && *at < to && x.is_finite())
        .map(|(_, x)| *x)
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Whether a dependency's latency moved from its baseline: more than twice as slow and 10 ms slower.
fn moved(d: &StorageView) -> bool {
    matches!((d.baseline_p50, d.client_p50), (Some(b), Some(n)) if n > 2.0 * b && n > b + 0.010)
}

fn range(values: &[f64]) -> String {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.is_empty() {
        "-".into()
    } else if latency(lo) == latency(hi) {
        latency(lo)
    } else {
        format!("{}–{}", latency(lo).trim_end_matches(" ms"), latency(hi))
    }
}

fn count_word(n: usize) -> String {
    match n {
        1 => "its sibling".into(),
        2 => "its two siblings".into(),
        3 => "its three siblings".into(),
        n => format!("its {n} siblings"),
    }
}

/// One line per storage server that moved, compared with its siblings; one line when none did.
pub fn latency_summary(deps: &[StorageView]) -> Vec<String> {
    let known: Vec<&StorageView> = deps.iter().filter(|d| d.client_p50.is_some()).collect();
    let mut out = Vec::new();
    for d in deps.iter().filter(|d| moved(d)) {
        let siblings: Vec<&&StorageView> = known.iter().filter(|s| s.name != d.name).collect();
        let (b, n) = (d.baseline_p50.unwrap_or(0.0), d.client_p50.unwrap_or(0.0));
        let mut line = format!("{} went from {} to {}", d.name, latency(b), latency(n));
        if siblings.is_empty() {
        } else if siblings.iter().all(|s| !moved(s)) {
            let now: Vec<f64> = siblings.iter().filter_map(|s| s.client_p50).collect();
            line.push_str(&format!(
                " while {} stayed at {}",
                count_word(siblings.len()),
                range(&now)
            ));
        } else {
            let others: Vec<String> = siblings
                .iter()
                .map(|s| format!("{} {}", s.name, s.client_p50.map_or("-".into(), latency)))
                .collect();
            line.push_str(&format!("; siblings now {}", others.join(", ")));
        }
        if !d.readers.is_empty() {
            line.push_str(&format!(" (read by {})", d.readers.join(", ")));
        }
        out.push(line);
    }
    if out.is_empty() && !known.is_empty() {
        let now: Vec<f64> = known.iter().filter_map(|d| d.client_p50).collect();
        let before: Vec<f64> = known.iter().filter_map(|d| d.baseline_p50).collect();
        let names: Vec<&str> = known.iter().map(|d| d.name.as_str()).collect();
        let mut line = format!("{} steady at {}", names.join(", "), range(&now));
        if !before.is_empty() {
            line.push_str(&format!(" ({} at baseline)", range(&before)));
        }
        out.push(line);
    }
    for d in deps.iter().filter(|d| d.client_p50.is_none()) {
        out.push(format!("{}: no reads measured in the last window", d.name));
    }
    out
}

/// `nightly-etl 1040 (job) · rank-1 12 (rank)`: a server's clients, busiest first.
pub fn clients_line(clients: &[lab_model::snapshot::ClientReads]) -> String {
    clients
        .iter()
        .map(|c| format!("{} {:.0} ({})", c.client, c.reads_per_s, c.kind))
        .collect::<Vec<_>>()
        .join(" · ")
}

#[cfg(test)]
mod tests {
    use lab_model::ChangeRecord;
    use lab_model::Millicores;
    use lab_model::snapshot::{ActiveFault, StorageView};
    use lab_model::status::PodStatus;

    use super::*;
    use lab_model::testing::{alert, snap};

    fn storage(i: u32, base: f64, now: f64, readers: &[&str]) -> StorageView {
        StorageView {
            index: i,
            name: lab_model::names::storage(i),
            client_p50: Some(now),
            client_p99: Some(now * 1.3),
            baseline_p50: Some(base),
            readers: readers.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// The slow-storage picture, with everything the ledger would add that the bundle must not show.
    fn slow_storage() -> Snapshot {
        let mut s = snap(100, Some(36.0), Some(3.2), 500);
        for (i, r) in s.ranks.iter_mut().enumerate() {
            r.server = Some(lab_model::names::storage(i as u32 % 3));
        }
        s.storage = vec![
            storage(0, 0.002, 0.0021, &["rank-0", "rank-3"]),
            storage(1, 0.002, 0.414, &["rank-1"]),
            storage(2, 0.002, 0.0019, &["rank-2"]),
        ];
        let mut srv = PodStatus::new("storage-1", Role::StorageServer, Some(1));
        srv.phase = Phase::Running;
        srv.ready = true;
        srv.containers = vec!["weed-volume".into(), "latency-proxy".into()];
        s.status.pods.push(srv);
        alert(&mut s, GoldenSignal::Latency, "LabStorageReadLatencyHigh");
        s.faults = vec![ActiveFault {
            id: "slow-storage-3".into(),
            kind: "slow-storage".into(),
            target: "storage-1".into(),
            phase: "injected".into(),
        }];
        let change = |at: u64, source, note: &str, after: &str| ChangeRecord {
            at_ms: s.at_ms - at,
            source,
            target: "storage-1".into(),
            what: "added delay".into(),
            before: "0 ms".into(),
            after: after.into(),
            note: Some(note.into()),
            fault_id: Some("slow-storage-3".into()),
            by: None,
        };
        s.changes = vec![
            change(30_000, ChangeSource::Fault, "via latency proxy", "300 ms"),
            change(4 * 3_600_000, ChangeSource::Fault, "cleared", "0 ms"),
        ];
        s
    }

    #[test]
    fn the_seed_line_compares_a_server_with_its_siblings() {
        let b = Bundle::from_snapshot(&slow_storage());
        assert_eq!(
            b.latency_summary,
            vec![
                "storage-1 went from 2.0 ms to 414 ms while its two siblings stayed at 1.9–2.1 ms (read by rank-1)"
            ]
        );
        let steady = latency_summary(&[
            StorageView {
                client_p50: Some(0.002),
                ..dep("storage-0")
            },
            StorageView {
                client_p50: Some(0.002),
                ..dep("storage-1")
            },
        ]);
        assert_eq!(
            steady,
            vec!["storage-0, storage-1 steady at 2.0 ms (2.0 ms at baseline)"]
        );
    }

    fn dep(name: &str) -> StorageView {
        StorageView {
            name: name.into(),
            baseline_p50: Some(0.002),
            ..StorageView::default()
        }
    }

    #[test]
    fn the_wiring_map_has_edges_containers_and_drift() {
        let mut s = slow_storage();
        s.status.pods[1].resources.cpu_live = Some(Millicores(150));
        s.status.pods[1].resources.cpu_template = Some(Millicores(400));
        let b = Bundle::from_snapshot(&s);
        assert!(
            b.wiring
                .edges
                .iter()
                .any(|e| e.from == "rank-1" && e.to == "storage-1")
        );
        assert_eq!(b.wiring.edges.len(), 4);
        let srv = b.wiring.pods.iter().find(|p| p.name == "storage-1").unwrap();
        assert_eq!(srv.containers, vec!["weed-volume", "latency-proxy"]);
        let r1 = b.wiring.pods.iter().find(|p| p.name == "rank-1").unwrap();
        assert!(r1.differs_from_template);
        assert_eq!(r1.cpu_live.as_deref(), Some("150m"));
        assert!(b.text().contains("150m/-/400m ≠"), "{}", b.text());
    }

    /// The seed's week at its second incident: storage-1's delay added (fault 1) and removed by the first
    /// remediation, then rank-1's limit cut in place (fault 2). The newest change before the incident is
    /// the fix; the change log must say so, and show what each change did to the job.
    #[test]
    fn a_change_that_says_who_made_it_is_theirs_whatever_its_time() {
        let mut s = slow_storage();
        let t0 = s.at_ms - 100_000;
        let record = |at: u64, after: &str, by: Option<&str>| ChangeRecord {
            at_ms: t0 + at,
            source: ChangeSource::Fault,
            target: "storage-1".into(),
            what: "added delay".into(),
            before: "0 ms".into(),
            after: after.into(),
            note: None,
            fault_id: Some("x".into()),
            by: by.map(str::to_string),
        };
        // The injection shares the fix's first millisecond but says nothing: it is not the fix's. The
        // fix's own change came after its window closed (a slow clock, a late write) and still is. A
        // person's name is kept; a remediation this drill never ran is nobody's remediation.
        s.changes = vec![
            record(39_500, "300 ms", None),
            record(45_000, "0 ms", Some("remediation 1")),
            record(60_000, "5 ms", Some("alice")),
            record(70_000, "9 ms", Some("remediation 4")),
        ];
        let fixes = [FixBy::Remediation];
        let mut b = Bundle::from_snapshot(&s);
        b.annotate_changes(&fixes, &[], None);
        let who: Vec<(&str, Option<usize>)> = b
            .changes
            .iter()
            .map(|c| (c.who.as_str(), c.remediation))
            .collect();
        assert_eq!(
            who,
            [
                ("operator", None),
                ("remediation", Some(1)),
                ("alice", None),
                ("operator", None)
            ]
        );
        assert_eq!(FixBy::parse(&FixBy::Agent.tag(2)), Some((FixBy::Agent, 2)));
        assert_eq!(FixBy::parse("remediation 0"), None);
        assert_eq!(FixBy::parse("remediation"), None);
    }

    #[test]
    fn the_change_log_tells_an_earlier_fix_from_the_new_cause() {
        let mut s = slow_storage();
        let t0 = s.at_ms - 100_000;
        let record = |at: u64, target: &str, what: &str, before: &str, after: &str| ChangeRecord {
            at_ms: t0 + at,
            source: ChangeSource::Fault,
            target: target.into(),
            what: what.into(),
            before: before.into(),
            after: after.into(),
            note: None,
            fault_id: Some("x".into()),
            by: None,
        };
        let by = |by: &str, c: ChangeRecord| ChangeRecord {
            by: Some(by.into()),
            ..c
        };
        s.changes = vec![
            record(10_000, "storage-1", "added delay", "0 ms", "300 ms"),
            by(
                "remediation 1",
                record(40_000, "storage-1", "added delay", "300 ms", "0 ms"),
            ),
            record(70_000, "rank-1", "cpu limit", "400m", "150m"),
        ];
        // 1000 samples/s before fault 1, 90 while it holds, 1000 after its fix, 700 after fault 2.
        let series: Vec<(u64, f64)> = (0..100u64)
            .map(|i| {
                let v = match i {
                    0..10 => 1000.0,
                    10..40 => 90.0,
                    40..70 => 1000.0,
                    _ => 700.0,
                };
                (t0 + i * 1000, v)
            })
            .collect();
        let fixes = [FixBy::Remediation];
        let mut b = Bundle::from_snapshot(&s);
        b.annotate_changes(&fixes, &series, Some(1000.0));
        let who: Vec<(&str, Option<usize>)> = b
            .changes
            .iter()
            .map(|c| (c.who.as_str(), c.remediation))
            .collect();
        assert_eq!(
            who,
            [("operator", None), ("remediation", Some(1)), ("operator", None)]
        );
        let pcts: Vec<(Option<f64>, Option<f64>)> = b
            .changes
            .iter()
            .map(|c| {
                let e = c.effect.unwrap();
                (e.pct_of_normal_before, e.pct_of_normal_after)
            })
            .collect();
        assert_eq!(
            pcts,
            [
                (Some(100.0), Some(9.0)),
                (Some(9.0), Some(100.0)),
                (Some(100.0), Some(70.0))
            ]
        );
        let text = b.text();
        assert!(
            text.contains("remediation 1 storage-1     added delay 300 ms → 0 ms  · training 9% → 100% of normal after it"),
            "{text}"
        );
        assert!(
            text.contains(
                "operator      rank-1        cpu limit 400m → 150m  · training 100% → 70% of normal after it"
            ),
            "{text}"
        );
        // An agent's plan is named as such; a change before any record of the job has no effect to show.
        let agent = [FixBy::Agent];
        s.changes[1].by = Some(FixBy::Agent.tag(1));
        let mut b = Bundle::from_snapshot(&s);
        b.annotate_changes(&agent, &series[30..], None);
        assert_eq!(b.changes[1].who, "agent");
        assert_eq!(b.changes[0].effect, None, "{:?}", b.changes[0]);
        assert_eq!(
            b.changes[2].effect.unwrap().line(),
            "training 1000 samples/s → 700 samples/s after it"
        );
        // Unannotated, the JSON keeps its old shape.
        let json = serde_json::to_value(Bundle::from_snapshot(&s)).unwrap();
        assert!(
            json["changes"][0].get("effect").is_none() && json["changes"][0].get("remediation").is_none()
        );
    }

    #[test]
    fn the_bundle_never_names_the_injection() {
        let b = Bundle::from_snapshot(&slow_storage());
        let json = serde_json::to_string(&b).unwrap().to_lowercase();
        for word in ["fault", "inject", "slow-storage-3", "slow-storage\"", "cleared"] {
            assert!(!json.contains(word), "{word:?} in {json}");
        }
        let text = b.text().to_lowercase();
        assert!(!text.contains("fault") && !text.contains("inject"), "{text}");
        // The change itself is there, as an audit log shows it; the one older than three hours is not.
        assert_eq!(b.changes.len(), 1);
        let c = &b.changes[0];
        assert_eq!(
            (
                c.who.as_str(),
                c.target.as_str(),
                c.what.as_str(),
                c.before.as_str(),
                c.after.as_str()
            ),
            ("operator", "storage-1", "added delay", "0 ms", "300 ms")
        );
        assert_eq!(c.detail.as_deref(), Some("via latency proxy"));
        assert!(c.time.ends_with('Z') && c.time.contains('T'), "{}", c.time);
        // The database's section: the writer's signals and the standby's drift, and no word of the cause.
        let (mut s, d) = crate::database::tests::stuck();
        s.changes = vec![lab_model::ChangeRecord {
            at_ms: s.at_ms - 20_000,
            source: ChangeSource::Fault,
            target: "db-1".into(),
            what: "pod".into(),
            before: "Running".into(),
            after: "deleted; made again from the new template".into(),
            note: Some("cleared".into()),
            fault_id: Some("sync-replica-1".into()),
            by: None,
        }];
        let mut b = Bundle::from_snapshot(&s);
        b.set_database(&d);
        let json = serde_json::to_string(&b).unwrap().to_lowercase();
        for word in ["fault", "inject", "sync-replica", "cleared"] {
            assert!(!json.contains(word), "{word:?} in {json}");
        }
        let db = b.database.as_ref().unwrap();
        assert_eq!(db.writer.as_ref().unwrap().commits_per_s, 0.0);
        assert!(
            db.pods
                .iter()
                .any(|p| p.name == "db-1" && p.differs_from_template)
        );
        let text = b.text().to_lowercase();
        assert!(!text.contains("fault") && !text.contains("inject"), "{text}");
        assert!(text.contains("database  the writer's own signals"), "{text}");
    }
}
