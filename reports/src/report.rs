//! What a drill run reports: per drill the verdict with its reason and evidence, the figures (time to
//! detect, to mitigate, back to baseline, steps lost), every step, the remediations with their output, the
//! cleanup, and a per-second timeline of the job's own signals. JSON schema in `docs/drills.md`.

use std::collections::BTreeMap;

use lab_model::Fault;
use serde::Serialize;

use lab_model::snapshot::Baseline;

pub use lab_model::Verdict;

/// The job's normal, measured just before the drill injects anything.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PreFault {
    /// Mean samples per second over the window.
    pub samples_per_s: f64,
    /// Mean step time over the window (one over the mean steps per second), seconds.
    pub step_seconds: f64,
    /// How long the window was, seconds.
    pub window_s: f64,
    /// The baseline the golden-signal rules compared with until then (learned at `lab up`, or the
    /// previous drill's), for comparison.
    pub learned: Option<Baseline>,
    /// The database writer's mean commits per second over the window, when the lab runs one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commits_per_s: Option<f64>,
}

impl PreFault {
    /// Throughput as a percentage of this baseline.
    pub fn pct(&self, samples_per_s: f64) -> f64 {
        if self.samples_per_s > 0.0 {
            100.0 * samples_per_s / self.samples_per_s
        } else {
            0.0
        }
    }
}

/// The figures of a drill, in seconds from the start of the (first) injection.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Until every expected signal was seen.
    pub time_to_detect_s: Option<f64>,
    /// Until the remediation that was verified (or the last one) ended.
    pub time_to_mitigate_s: Option<f64>,
    /// Until the run of good steps that verified recovery began: when the job was back.
    pub time_to_baseline_s: Option<f64>,
    /// Training steps lost to restarts during the drill.
    pub steps_lost: u64,
    /// The lowest throughput seen while the fault was in, as a percentage of the pre-fault baseline.
    pub lowest_throughput_pct: Option<f64>,
    /// The median throughput from detection to remediation, as a percentage of the pre-fault baseline.
    pub fault_throughput_pct: Option<f64>,
}

/// The steps a drill runs: the drill file's own (inject, expect, remediate, verify) and the engine's
/// around them (check, baseline, cleanup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepName {
    Check,
    Baseline,
    Inject,
    Expect,
    Remediate,
    Verify,
    Cleanup,
}

impl StepName {
    /// Every step, in the order a drill runs them.
    pub const ALL: [StepName; 7] = [
        StepName::Check,
        StepName::Baseline,
        StepName::Inject,
        StepName::Expect,
        StepName::Remediate,
        StepName::Verify,
        StepName::Cleanup,
    ];

    /// The step named `s` (`verify`), if any.
    pub fn parse(s: &str) -> Option<StepName> {
        StepName::ALL.into_iter().find(|n| n.as_str() == s)
    }

    /// The step's name in reports and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            StepName::Check => "check",
            StepName::Baseline => "baseline",
            StepName::Inject => "inject",
            StepName::Expect => "expect",
            StepName::Remediate => "remediate",
            StepName::Verify => "verify",
            StepName::Cleanup => "cleanup",
        }
    }
}

/// Lets a test or a reader of the JSON compare with the name as written (`s.step == "verify"`).
impl PartialEq<&str> for StepName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl std::fmt::Display for StepName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, so that `{step:<9}` lines the steps up.
        f.pad(self.as_str())
    }
}

/// A drill's first failure: the step that failed, the verdict it leads to, why, and the evidence.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub step: StepName,
    pub verdict: Verdict,
    /// `step: summary`, as the report's reason says it.
    pub reason: String,
    pub evidence: Vec<String>,
}

/// One step as it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepReport {
    pub step: StepName,
    pub ok: bool,
    /// Seconds from the start of the drill.
    pub started_s: f64,
    pub duration_s: f64,
    /// One line: what was seen or done, or why it failed.
    pub summary: String,
    /// Further lines of evidence.
    pub evidence: Vec<String>,
}

/// A remediation as it ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemediationReport {
    /// The shell command, or `None` for the lab's own clear.
    pub command: Option<String>,
    /// The incident bundle handed to it.
    pub bundle: Option<String>,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub duration_s: f64,
    /// Its output (the end of it, when long).
    pub stdout: String,
    pub stderr: String,
    /// The changes to the lab made while it ran, as lines.
    pub changes: Vec<String>,
    /// With `--agent`: the plan, what was approved and run, and its score.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<lab_agents::AgentReport>,
    /// With `--mcp-agent`: the attempt, every call the agent made, what it concluded, and its score.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp: Option<lab_agents::mcp::McpAttempt>,
    /// What the ledger said was wrong when it ran (kept for `--record`, whoever remediated).
    #[serde(skip)]
    pub truth: Option<lab_agents::Truth>,
}

/// The drill's own cleanup: what it cleared, and whether the lab came back to steady state after it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CleanupReport {
    pub ok: bool,
    /// What the drill cleared after the remediation (empty when the remediation already had).
    pub cleared: Vec<String>,
    /// Whether the job's own signals were back at the pre-fault baseline after the cleanup.
    pub steady: bool,
    pub summary: String,
}

/// One point of the timeline, once a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Seconds from the start of the drill.
    pub t_s: f64,
    pub samples_per_s: Option<f64>,
    /// Percent of the pre-fault baseline, once it is known.
    pub pct: Option<f64>,
    pub step_seconds: Option<f64>,
    pub step: Option<u64>,
    /// Ranks Running and Ready, and ranks.
    pub ranks_ready: (usize, usize),
    /// Golden signals firing.
    pub firing: Vec<String>,
    /// Each storage server's read p50 as the ranks see it, in ms, by server (`storage-1`); a server not
    /// measured at that instant is absent. The suspect dependency of a slow-storage drill.
    pub read_p50_ms: BTreeMap<String, f64>,
    /// Each rank's share of CFS periods throttled (0..1), by rank (`rank-1`).
    pub throttled: BTreeMap<String, f64>,
    /// Each rank's share of its time spent computing (0..1), by rank.
    pub compute: BTreeMap<String, f64>,
    /// The world size the ranks report.
    pub world_size: Option<u32>,
}

/// An agent's whole incident, scored: what it found, whether its fix held, what it cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentSummary {
    /// `plan` (`--agent`) or `mcp` (`--mcp-agent`).
    pub protocol: String,
    pub agent: String,
    pub evidence: lab_agents::EvidenceLevel,
    /// It saw an anomaly.
    pub detected: bool,
    /// It blamed (or acted on) the components really at fault, and only those, in its last attempt.
    pub localized: bool,
    /// It named the cause class of what was injected, in its last attempt.
    pub cause: bool,
    /// Its fix held: verified on the job's own signals.
    pub mitigated: bool,
    /// Tries it took (each after a failed verification).
    pub attempts: u32,
    /// Seconds from the incident's opening (detection) to the verified fix.
    pub incident_to_fix_s: Option<f64>,
    /// Calls it made (MCP), or commands it proposed (plans).
    pub tool_calls: usize,
    /// Acts declined by the approval, and calls refused as wrong.
    pub declined: usize,
    pub refused: usize,
    /// Approved acts that changed only parts that were not at fault.
    pub harmful: Vec<String>,
}

/// Accelerator-seconds idle over `timeline` from `from_s` to `to_s` (seconds from the drill's start): each
/// point's `ranks` × (1 − its share of the baseline's throughput), over the time to the next point. A point
/// with no throughput (no rank reports) counts as all idle.
pub fn idle_accelerator_s(timeline: &[Point], from_s: f64, to_s: f64, ranks: usize) -> f64 {
    let mut total = 0.0;
    for w in timeline.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let (lo, hi) = (a.t_s.max(from_s), b.t_s.min(to_s));
        if hi <= lo {
            continue;
        }
        let share = a.pct.map_or(0.0, |p| (p / 100.0).clamp(0.0, 1.0));
        total += ranks as f64 * (1.0 - share) * (hi - lo);
    }
    (total * 10.0).round() / 10.0
}

/// The report of one drill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrillReport {
    pub name: String,
    /// `builtin:slow-storage` or the file's path.
    pub origin: String,
    pub description: Option<String>,
    /// The faults the drill injects, as its file writes them: what the HTML report charts as the suspect.
    pub faults: Vec<Fault>,
    pub seed: u64,
    pub lab: String,
    pub runtime: String,
    pub started_at: String,
    pub duration_s: f64,
    pub verdict: Verdict,
    /// Why, in one sentence; for a pass, the headline figures.
    pub reason: String,
    /// The lines that back the verdict.
    pub evidence: Vec<String>,
    pub figures: Figures,
    pub baseline: Option<PreFault>,
    /// The lab's steady state measured after the drill's cleanup; when the machine got slower during the
    /// drill, a failed verification is judged again against it.
    pub steady_after: Option<PreFault>,
    pub steps: Vec<StepReport>,
    pub remediations: Vec<RemediationReport>,
    pub cleanup: CleanupReport,
    pub timeline: Vec<Point>,
    /// With an agent (`--agent` or `--mcp-agent`): what it did over the whole incident, scored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSummary>,
    /// The cost of the slowness: accelerator-seconds the job's ranks sat idle (their share of the
    /// baseline's throughput not reached) from the fault to the verified fix (or the end of the drill).
    pub idle_accelerator_s: Option<f64>,
    /// Every incident bundle handed out, whole, for `--record` (not in the JSON report: the bundles' files
    /// are, cut to the evidence level).
    #[serde(skip)]
    pub full_bundles: Vec<serde_json::Value>,
    /// For `--record`: the lab as it was from the detection to the first remediation, and what ran in each
    /// rank then (not in the JSON report).
    #[serde(skip)]
    pub replay: lab_agents::record::ReplayData,
}

impl DrillReport {
    /// Whether the drill ran its cleanup and it failed: the lab is not as the drill found it.
    pub fn cleanup_failed(&self) -> bool {
        !self.cleanup.ok && self.steps.iter().any(|s| s.step == StepName::Cleanup)
    }

    /// The report of a drill that was not run, with why.
    pub fn not_run(
        drill: &lab_drill_file::spec::Drill,
        origin: &str,
        lab: &str,
        runtime: &str,
        reason: String,
    ) -> Self {
        DrillReport {
            name: drill.name.clone(),
            origin: origin.to_string(),
            description: drill.description.clone(),
            faults: drill.faults(),
            seed: drill.seed,
            lab: lab.to_string(),
            runtime: runtime.to_string(),
            started_at: lab_model::clock::rfc3339(lab_model::clock::now_ms()),
            duration_s: 0.0,
            verdict: Verdict::Error,
            reason,
            evidence: Vec::new(),
            figures: Figures::default(),
            baseline: None,
            steady_after: None,
            steps: Vec::new(),
            remediations: Vec::new(),
            cleanup: CleanupReport::default(),
            timeline: Vec::new(),
            agent: None,
            idle_accelerator_s: None,
            full_bundles: Vec::new(),
            replay: Default::default(),
        }
    }
}

/// The median, minimum and maximum of one figure over a drill's runs that reported it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// How many runs reported the figure (a failed run may not reach detection, say).
    pub runs: usize,
}

impl Spread {
    /// `None` for no values. The median of an even count is the mean of the middle two.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: v[0],
            max: v[n - 1],
            runs: n,
        })
    }
}

/// Reads one figure from a drill's [`Figures`].
type FigureOf = fn(&Figures) -> Option<f64>;

/// One drill over its repeated runs (`lab drill run --repeat N`): how often it passed, and the spread of
/// every figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrillStats {
    pub name: String,
    pub runs: usize,
    pub passed: usize,
    /// `passed / runs`, 0 to 1.
    pub pass_rate: f64,
    /// Figure name (as in [`Figures`]) → its spread over the runs that reported it.
    pub figures: std::collections::BTreeMap<&'static str, Spread>,
}

impl DrillStats {
    /// The stats of each drill in `drills`, grouped by name, in the order the names first appear.
    pub fn of(drills: &[DrillReport]) -> Vec<DrillStats> {
        let mut names: Vec<&str> = Vec::new();
        for d in drills {
            if !names.contains(&d.name.as_str()) {
                names.push(&d.name);
            }
        }
        names
            .into_iter()
            .map(|name| {
                let runs: Vec<&DrillReport> = drills.iter().filter(|d| d.name == name).collect();
                let passed = runs.iter().filter(|d| d.verdict == Verdict::Pass).count();
                let mut figures = std::collections::BTreeMap::new();
                let all: [(&'static str, FigureOf); 6] = [
                    ("time_to_detect_s", |f| f.time_to_detect_s),
                    ("time_to_mitigate_s", |f| f.time_to_mitigate_s),
                    ("time_to_baseline_s", |f| f.time_to_baseline_s),
                    ("steps_lost", |f| Some(f.steps_lost as f64)),
                    ("lowest_throughput_pct", |f| f.lowest_throughput_pct),
                    ("fault_throughput_pct", |f| f.fault_throughput_pct),
                ];
                // A run that never started has no figures, and its zero steps lost is not one.
                let ran: Vec<&&DrillReport> = runs.iter().filter(|d| !d.steps.is_empty()).collect();
                for (key, get) in all {
                    let values: Vec<f64> = ran.iter().filter_map(|d| get(&d.figures)).collect();
                    if let Some(sp) = Spread::of(&values) {
                        figures.insert(key, sp);
                    }
                }
                DrillStats {
                    name: name.to_string(),
                    runs: runs.len(),
                    passed,
                    pass_rate: passed as f64 / runs.len() as f64,
                    figures,
                }
            })
            .collect()
    }
}

/// The report of a whole `lab drill run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    pub format: &'static str,
    pub lab: String,
    pub started_at: String,
    pub duration_s: f64,
    /// True only if every drill (every run of it, with `--repeat`) passed.
    pub passed: bool,
    /// Runs of each drill (`--repeat`, 1 by default).
    pub repeat: u32,
    /// Per drill: pass rate and the median, minimum and maximum of every figure over its runs.
    pub stats: Vec<DrillStats>,
    /// Every run of every drill, in the order they ran.
    pub drills: Vec<DrillReport>,
    /// The drills' idle accelerator-seconds, added up.
    pub idle_accelerator_s: f64,
}

/// The report format's identifier.
pub const FORMAT: &str = "straggler-lab.drill-report/v1";

impl RunReport {
    /// A run's report from its drills.
    pub fn new(lab: &str, started_ms: u64, duration_s: f64, drills: Vec<DrillReport>) -> Self {
        let stats = DrillStats::of(&drills);
        RunReport {
            format: FORMAT,
            lab: lab.to_string(),
            started_at: lab_model::clock::rfc3339(started_ms),
            duration_s,
            passed: !drills.is_empty() && drills.iter().all(|d| d.verdict == Verdict::Pass),
            repeat: stats.iter().map(|s| s.runs as u32).max().unwrap_or(1),
            stats,
            idle_accelerator_s: (drills.iter().filter_map(|d| d.idle_accelerator_s).sum::<f64>() * 10.0)
                .round()
                / 10.0,
            drills,
        }
    }

    /// With `--repeat`: per drill its pass rate and each figure's median and range over the runs.
    pub fn repeat_table(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{:<24} {:>9} {:>20} {:>20} {:>20} {:>16}",
            "DRILL", "PASSED", "DETECT", "MITIGATE", "BACK TO BASE", "UNDER FAULT"
        );
        let secs = |s: Option<&Spread>| {
            s.map_or("-".into(), |s| {
                format!("{:.1} s ({:.1}–{:.1})", s.median, s.min, s.max)
            })
        };
        for st in &self.stats {
            let pct = st
                .figures
                .get("fault_throughput_pct")
                .or(st.figures.get("lowest_throughput_pct"))
                .map_or("-".into(), |s| {
                    format!("{:.0}% ({:.0}–{:.0})", s.median, s.min, s.max)
                });
            let _ = writeln!(
                o,
                "{:<24} {:>9} {:>20} {:>20} {:>20} {:>16}",
                st.name,
                format!("{}/{}", st.passed, st.runs),
                secs(st.figures.get("time_to_detect_s")),
                secs(st.figures.get("time_to_mitigate_s")),
                secs(st.figures.get("time_to_baseline_s")),
                pct,
            );
        }
        o
    }

    /// The summary table printed at the end of a run.
    pub fn summary_table(&self) -> String {
        use std::fmt::Write;
        let secs = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} s"));
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{:<24} {:<7} {:>10} {:>11} {:>13} {:>10} {:>11}",
            "DRILL", "VERDICT", "DETECT", "MITIGATE", "BACK TO BASE", "STEPS LOST", "UNDER FAULT"
        );
        for d in &self.drills {
            let f = &d.figures;
            let _ = writeln!(
                o,
                "{:<24} {:<7} {:>10} {:>11} {:>13} {:>10} {:>11}",
                d.name,
                d.verdict.to_string(),
                secs(f.time_to_detect_s),
                secs(f.time_to_mitigate_s),
                secs(f.time_to_baseline_s),
                f.steps_lost,
                f.fault_throughput_pct
                    .or(f.lowest_throughput_pct)
                    .map_or("-".into(), |p| format!("{p:.0}%")),
            );
        }
        for d in self.drills.iter().filter(|d| d.verdict != Verdict::Pass) {
            let _ = writeln!(o, "{} {}: {}", d.verdict, d.name, d.reason);
        }
        let passed = self.drills.iter().filter(|d| d.verdict == Verdict::Pass).count();
        let _ = writeln!(
            o,
            "{passed} of {} drills passed in {:.0} s",
            self.drills.len(),
            self.duration_s
        );
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, verdict: Verdict, detect: Option<f64>, ran: bool) -> DrillReport {
        let drill = lab_drill_file::spec::parse(
            &format!(
                "name: {name}\nseed: 1\nsteps:\n  - inject:\n      kind: slow-storage\n  - expect:\n      signals: [latency]\n  - remediate:\n  - verify:\n"
            ),
        )
        .unwrap();
        let mut r = DrillReport::not_run(&drill, "t.yaml", "lab", "local", "why".into());
        r.verdict = verdict;
        r.figures.time_to_detect_s = detect;
        r.figures.steps_lost = 2;
        if ran {
            r.steps.push(StepReport {
                step: StepName::Check,
                ok: true,
                started_s: 0.0,
                duration_s: 0.0,
                summary: String::new(),
                evidence: Vec::new(),
            });
        }
        r
    }

    #[test]
    fn spread_gives_median_and_range() {
        assert_eq!(Spread::of(&[]), None);
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.runs), (2.0, 1.0, 3.0, 3));
        let s = Spread::of(&[4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 10.0));
        assert_eq!(Spread::of(&[f64::NAN]), None);
    }

    #[test]
    fn stats_group_runs_by_drill_and_count_passes() {
        let drills = vec![
            run("a", Verdict::Pass, Some(4.0), true),
            run("a", Verdict::Fail, Some(6.0), true),
            run("a", Verdict::Pass, Some(5.0), true),
            run("b", Verdict::Error, None, false),
            run("b", Verdict::Pass, Some(9.0), true),
        ];
        let r = RunReport::new("lab", 0, 1.0, drills);
        assert!(!r.passed);
        assert_eq!(r.repeat, 3);
        let a = &r.stats[0];
        assert_eq!((a.name.as_str(), a.runs, a.passed), ("a", 3, 2));
        assert!((a.pass_rate - 2.0 / 3.0).abs() < 1e-12);
        let d = a.figures["time_to_detect_s"];
        assert_eq!((d.median, d.min, d.max, d.runs), (5.0, 4.0, 6.0, 3));
        let b = &r.stats[1];
        assert_eq!((b.runs, b.passed), (2, 1));
        assert_eq!(b.figures["time_to_detect_s"].runs, 1);
        // The run that never started does not count towards steps lost.
        assert_eq!(b.figures["steps_lost"].runs, 1);
        let table = r.repeat_table();
        assert!(
            table.contains("a") && table.contains("2/3") && table.contains("5.0 s (4.0–6.0)"),
            "{table}"
        );
        assert!(table.contains("1/2"), "{table}");
    }
}
