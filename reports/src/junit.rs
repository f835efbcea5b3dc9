//! The run as JUnit XML, for CI, written by `quick-junit` (the writer nextest uses): one `testsuite`, one
//! `testcase` per drill; a failed drill carries a `failure` (an `error` when it could not run) whose message
//! is the verdict's reason and whose text is the evidence, and every testcase carries its step lines and
//! figures as `system-out`.

use std::io::Write;
use std::time::Duration;

use lab_model::format::opt_secs;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use crate::error::ReportError;
use crate::report::{DrillReport, RunReport, Verdict};

/// The name of the report and of its one suite.
const SUITE: &str = "lab drills";

/// Writes `report` as JUnit XML.
///
/// # Errors
/// [`ReportError::Xml`] when `out` cannot be written.
pub fn write(report: &RunReport, out: impl Write) -> Result<(), ReportError> {
    let mut suite = TestSuite::new(SUITE);
    suite.set_time(seconds(report.duration_s));
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(&report.started_at) {
        suite.set_timestamp(t);
    }
    suite.extra.insert("hostname".into(), report.lab.as_str().into());
    // With `--repeat`, each drill's pass rate and every figure's median and range, as suite properties
    // (`slow-storage.pass_rate`, `slow-storage.time_to_detect_s.median`, …); each run is its own case,
    // named `slow-storage #2`.
    if report.repeat > 1 {
        for st in &report.stats {
            suite.add_property((format!("{}.runs", st.name), st.runs.to_string()));
            suite.add_property((format!("{}.passed", st.name), st.passed.to_string()));
            suite.add_property((format!("{}.pass_rate", st.name), format!("{:.3}", st.pass_rate)));
            for (fig, sp) in &st.figures {
                for (what, v) in [("median", sp.median), ("min", sp.min), ("max", sp.max)] {
                    suite.add_property((format!("{}.{fig}.{what}", st.name), format!("{v:.3}")));
                }
            }
        }
    }
    // With `--agent`, each plan's scores as suite properties (`slow-storage.agent.1.recall`, with ` #2`
    // after the drill's name for a repeated run), as the JSON report has them.
    let mut runs: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    for d in &report.drills {
        let n = runs.entry(d.name.as_str()).or_default();
        *n += 1;
        let case = if report.repeat > 1 {
            format!("{} #{n}", d.name)
        } else {
            d.name.clone()
        };
        for (i, a) in d.remediations.iter().filter_map(|r| r.agent.as_ref()).enumerate() {
            let key = |k: &str| format!("{case}.agent.{}.{k}", i + 1);
            suite.add_property((key("evidence"), a.evidence.to_string()));
            suite.add_property((key("outcome"), format!("{:?}", a.outcome).to_lowercase()));
            if let Some(s) = &a.score {
                suite.add_property((key("detection"), s.detection.to_string()));
                let p = s.precision.map_or("-".into(), |p| format!("{p:.3}"));
                suite.add_property((key("precision"), p));
                suite.add_property((key("recall"), format!("{:.3}", s.recall)));
                suite.add_property((key("cause"), s.cause.to_string()));
                suite.add_property((key("mitigation"), format!("{:?}", s.mitigation).to_lowercase()));
                if let Some(t) = s.plan_at_s {
                    suite.add_property((key("plan_at_s"), format!("{t:.1}")));
                }
            }
        }
    }
    // With an agent, the drill's agent summary (`slow-storage.agent.mitigated`, `.tool_calls`, ...).
    let mut runs: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    for d in &report.drills {
        let n = runs.entry(d.name.as_str()).or_default();
        *n += 1;
        let case = if report.repeat > 1 {
            format!("{} #{n}", d.name)
        } else {
            d.name.clone()
        };
        if let Some(a) = &d.agent {
            let key = |k: &str| format!("{case}.agent.{k}");
            for (k, v) in [
                ("protocol", a.protocol.clone()),
                ("detected", a.detected.to_string()),
                ("localized", a.localized.to_string()),
                ("cause", a.cause.to_string()),
                ("mitigated", a.mitigated.to_string()),
                ("attempts", a.attempts.to_string()),
                ("tool_calls", a.tool_calls.to_string()),
                ("declined", a.declined.to_string()),
                ("refused", a.refused.to_string()),
                ("harmful", a.harmful.len().to_string()),
            ] {
                suite.add_property((key(k), v));
            }
            if let Some(t) = a.incident_to_fix_s {
                suite.add_property((key("incident_to_fix_s"), format!("{t:.1}")));
            }
        }
        if let Some(v) = d.idle_accelerator_s {
            suite.add_property((format!("{case}.idle_accelerator_s"), format!("{v:.1}")));
        }
    }
    let mut seen: std::collections::HashMap<&str, u32> = std::collections::HashMap::new();
    suite.add_test_cases(report.drills.iter().map(|d| {
        let n = seen.entry(d.name.as_str()).or_default();
        *n += 1;
        let mut c = case(d);
        if report.repeat > 1 {
            c.name = format!("{} #{n}", d.name).into();
        }
        c
    }));
    let mut junit = Report::new(SUITE);
    junit.set_time(seconds(report.duration_s));
    junit.add_test_suite(suite);
    junit.serialize(out).map_err(ReportError::Xml)
}

fn case(d: &DrillReport) -> TestCase {
    let status = match d.verdict {
        Verdict::Pass => TestCaseStatus::success(),
        Verdict::Fail | Verdict::Error | Verdict::Declined => {
            let (kind, ty) = if d.verdict == Verdict::Error {
                (NonSuccessKind::Error, "error")
            } else {
                (NonSuccessKind::Failure, "failure")
            };
            let mut s = TestCaseStatus::non_success(kind);
            s.set_message(d.reason.as_str())
                .set_type(ty)
                .set_description(d.evidence.join("\n"));
            s
        }
    };
    let mut case = TestCase::new(d.name.as_str(), status);
    case.set_classname(format!("lab.drills.{}", d.runtime))
        .set_time(seconds(d.duration_s))
        .set_system_out(system_out(d));
    case.extra.insert("file".into(), d.origin.as_str().into());
    case
}

/// The drill's step lines and its figures, as a person reads them in a CI log.
fn system_out(d: &DrillReport) -> String {
    let mut out = String::new();
    for s in &d.steps {
        out.push_str(&format!(
            "{} {:<9} {:>6.1}s  {}\n",
            if s.ok { "✓" } else { "✗" },
            s.step,
            s.duration_s,
            s.summary
        ));
    }
    for m in d.remediations.iter().filter_map(|r| r.mcp.as_ref()) {
        for c in &m.calls {
            let what = c
                .act
                .as_ref()
                .map_or(String::new(), |a| format!(" {}", a.argv.join(" ")));
            let outcome = serde_json::to_value(c.outcome)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            out.push_str(&format!(
                "  mcp attempt {} {} {}{what} → {outcome}{}\n",
                m.attempt,
                c.t_s.map_or("-".into(), |t| format!("+{t:.1}s")),
                c.tool,
                c.message.as_deref().map_or(String::new(), |w| format!(": {w}"))
            ));
        }
    }
    let f = &d.figures;
    out.push_str(&format!(
        "time to detect {}, to mitigate {}, back to baseline {}, steps lost {}\n",
        opt_secs(f.time_to_detect_s),
        opt_secs(f.time_to_mitigate_s),
        opt_secs(f.time_to_baseline_s),
        f.steps_lost
    ));
    out
}

/// A report's seconds as a duration (a negative or non-finite figure, which a clock step can give, is zero).
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{CleanupReport, Figures, StepReport};
    use quick_xml::events::Event;

    /// A JUnit document read back: what a CI system would see.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Parsed {
        suites: usize,
        tests: usize,
        /// `(name, failure or error message)` per testcase.
        cases: Vec<(String, Option<String>)>,
    }

    /// Reads JUnit XML back, checking it is well-formed (every element closed, in order).
    ///
    /// # Errors
    /// A message saying where the document is malformed.
    fn parse(xml: &str) -> Result<Parsed, String> {
        let mut r = quick_xml::Reader::from_str(xml);
        r.config_mut().check_end_names = true;
        let mut stack: Vec<String> = Vec::new();
        let mut parsed = Parsed {
            suites: 0,
            tests: 0,
            cases: Vec::new(),
        };
        loop {
            let pos = r.buffer_position();
            let ev = r.read_event().map_err(|e| format!("at byte {pos}: {e}"))?;
            let (e, empty) = match ev {
                Event::Start(e) => (e, false),
                Event::Empty(e) => (e, true),
                Event::End(e) => {
                    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
                    match stack.pop() {
                        Some(open) if open == name => {}
                        other => return Err(format!("at byte {pos}: </{name}> closes {other:?}")),
                    }
                    continue;
                }
                Event::Eof => break,
                _ => continue,
            };
            let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
            let attr = |k: &str| -> Result<Option<String>, String> {
                for a in e.attributes() {
                    let a = a.map_err(|e| format!("at byte {pos}: {e}"))?;
                    if a.key.as_ref() == k.as_bytes() {
                        let v = a.unescape_value().map_err(|e| format!("at byte {pos}: {e}"))?;
                        return Ok(Some(v.into_owned()));
                    }
                }
                Ok(None)
            };
            match name.as_str() {
                "testsuite" => {
                    parsed.suites += 1;
                    parsed.tests += attr("tests")?
                        .and_then(|t| t.parse::<usize>().ok())
                        .ok_or("a testsuite without a numeric `tests` attribute")?;
                }
                "testcase" => parsed
                    .cases
                    .push((attr("name")?.ok_or("a testcase without a name")?, None)),
                "failure" | "error" => {
                    let msg = attr("message")?.ok_or("a failure without a message")?;
                    let case = parsed.cases.last_mut().ok_or("a failure outside a testcase")?;
                    case.1 = Some(msg);
                }
                _ => {}
            }
            if !empty {
                stack.push(name);
            }
        }
        if !stack.is_empty() {
            return Err(format!("unclosed elements at the end: {stack:?}"));
        }
        if parsed.suites == 0 {
            return Err("no testsuite".into());
        }
        if parsed.tests != parsed.cases.len() {
            return Err(format!(
                "the suite says {} tests but has {} testcases",
                parsed.tests,
                parsed.cases.len()
            ));
        }
        Ok(parsed)
    }

    fn drill(name: &str, verdict: Verdict, reason: &str) -> DrillReport {
        DrillReport {
            name: name.into(),
            origin: format!("builtin:{name}"),
            description: None,
            faults: vec![],
            seed: 42,
            lab: "lab".into(),
            runtime: "local".into(),
            started_at: "2026-01-01T00:00:00Z".into(),
            duration_s: 61.5,
            verdict,
            reason: reason.into(),
            evidence: vec!["rank-0 <waits> & \"sleeps\"".into(), "]]> in text".into()],
            figures: Figures {
                time_to_detect_s: Some(8.0),
                ..Figures::default()
            },
            baseline: None,
            steady_after: None,
            steps: vec![StepReport {
                step: crate::report::StepName::Verify,
                ok: verdict == Verdict::Pass,
                started_s: 1.0,
                duration_s: 2.0,
                summary: "throughput 0% < 80% & step time \u{2192} unknown".into(),
                evidence: vec![],
            }],
            remediations: vec![],
            cleanup: CleanupReport::default(),
            timeline: vec![],
            agent: None,
            idle_accelerator_s: None,
            full_bundles: vec![],
            replay: Default::default(),
        }
    }

    #[test]
    fn junit_is_well_formed_with_one_case_per_drill_and_the_reason_as_message() {
        let report = RunReport::new(
            "lab",
            1_700_000_000_000,
            200.0,
            vec![
                drill("slow-storage", Verdict::Pass, "detected in 8.0 s"),
                drill(
                    "unplaceable-rank",
                    Verdict::Fail,
                    "verify: the job is not back <90 s> & \"stalled\"",
                ),
                drill(
                    "throttled-rank",
                    Verdict::Error,
                    "check: this drill needs enforced CPU limits",
                ),
            ],
        );
        let mut out = Vec::new();
        write(&report, &mut out).unwrap();
        let xml = String::from_utf8(out).unwrap();
        let parsed = parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        assert_eq!(parsed.suites, 1);
        assert_eq!(parsed.tests, 3);
        assert_eq!(
            parsed.cases,
            vec![
                ("slow-storage".to_string(), None),
                (
                    "unplaceable-rank".to_string(),
                    Some("verify: the job is not back <90 s> & \"stalled\"".to_string())
                ),
                (
                    "throttled-rank".to_string(),
                    Some("check: this drill needs enforced CPU limits".to_string())
                ),
            ]
        );
        assert!(
            xml.contains("failures=\"1\"") && xml.contains("errors=\"1\""),
            "{xml}"
        );
        assert!(xml.contains("<error message="), "{xml}");
    }

    #[test]
    fn the_whole_document_carries_names_failures_times_and_figures() {
        let report = RunReport::new(
            "lab-2",
            1_700_000_000_000,
            200.0,
            vec![
                drill("slow-storage", Verdict::Pass, "detected in 8.0 s"),
                drill(
                    "unplaceable-rank",
                    Verdict::Fail,
                    "verify: not back <90 s> & \"stalled\"",
                ),
            ],
        );
        let mut out = Vec::new();
        write(&report, &mut out).unwrap();
        let want = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="lab drills" tests="2" skipped="0" failures="1" errors="0" time="200.000">
    <testsuite name="lab drills" tests="2" skipped="0" errors="0" failures="1" timestamp="2023-11-14T22:13:20.000+00:00" time="200.000" hostname="lab-2">
        <testcase name="slow-storage" classname="lab.drills.local" time="61.500" file="builtin:slow-storage">
            <system-out>✓ verify       2.0s  throughput 0% &lt; 80% &amp; step time → unknown
time to detect 8.0 s, to mitigate -, back to baseline -, steps lost 0
</system-out>
        </testcase>
        <testcase name="unplaceable-rank" classname="lab.drills.local" time="61.500" file="builtin:unplaceable-rank">
            <failure message="verify: not back &lt;90 s&gt; &amp; &quot;stalled&quot;" type="failure">rank-0 &lt;waits&gt; &amp; &quot;sleeps&quot;
]]&gt; in text</failure>
            <system-out>✗ verify       2.0s  throughput 0% &lt; 80% &amp; step time → unknown
time to detect 8.0 s, to mitigate -, back to baseline -, steps lost 0
</system-out>
        </testcase>
    </testsuite>
</testsuites>
"#;
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn repeated_runs_are_numbered_cases_with_pass_rate_and_spread_as_properties() {
        let slow = |detect: f64, verdict: Verdict| {
            let mut d = drill("slow-storage", verdict, "r");
            d.figures.time_to_detect_s = Some(detect);
            d
        };
        let report = RunReport::new(
            "lab",
            1_700_000_000_000,
            200.0,
            vec![
                slow(8.0, Verdict::Pass),
                slow(6.0, Verdict::Fail),
                slow(7.0, Verdict::Pass),
            ],
        );
        let mut out = Vec::new();
        write(&report, &mut out).unwrap();
        let xml = String::from_utf8(out).unwrap();
        let parsed = parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        let names: Vec<&str> = parsed.cases.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(names, ["slow-storage #1", "slow-storage #2", "slow-storage #3"]);
        for prop in [
            r#"name="slow-storage.runs" value="3""#,
            r#"name="slow-storage.passed" value="2""#,
            r#"name="slow-storage.pass_rate" value="0.667""#,
            r#"name="slow-storage.time_to_detect_s.median" value="7.000""#,
            r#"name="slow-storage.time_to_detect_s.min" value="6.000""#,
            r#"name="slow-storage.time_to_detect_s.max" value="8.000""#,
        ] {
            assert!(xml.contains(prop), "{prop} missing:\n{xml}");
        }
    }

    #[test]
    fn malformed_documents_are_refused() {
        assert!(parse("<testsuite tests=\"1\"><testcase name=\"a\"></testsuite>").is_err());
        assert!(parse("<testsuite tests=\"2\"><testcase name=\"a\"/></testsuite>").is_err());
        assert!(parse("").is_err());
        assert!(parse("<testsuite tests=\"1\"><testcase name=\"a\"/></testsuite>").is_ok());
    }

    #[test]
    fn agent_plans_are_suite_properties_and_a_declined_plan_is_a_failure() {
        use lab_agents::{AgentReport, EvidenceLevel, Mitigation, PlanOutcome, Score};
        let mut d = drill(
            "slow-storage",
            Verdict::Declined,
            "remediate: command 1 of 1 was declined",
        );
        d.remediations.push(crate::report::RemediationReport {
            truth: None,
            command: Some("agent".into()),
            bundle: None,
            exit_code: Some(0),
            timed_out: false,
            duration_s: 1.0,
            stdout: String::new(),
            stderr: String::new(),
            changes: vec![],
            mcp: None,
            agent: Some(AgentReport {
                agent: "agent".into(),
                evidence: EvidenceLevel::Wiring,
                exit_code: Some(0),
                timed_out: false,
                duration_s: 0.2,
                outcome: PlanOutcome::Declined,
                problem: None,
                plan: None,
                commands: vec![],
                plan_at_s: Some(21.5),
                truth: None,
                score: Some(Score {
                    detection: true,
                    precision: Some(0.5),
                    recall: 1.0,
                    cause: false,
                    cause_named: "slow-node".into(),
                    cause_expected: "bad-network-path".into(),
                    mitigation: Mitigation::NotRun,
                    plan_at_s: Some(21.5),
                    mitigated_at_s: None,
                }),
            }),
        });
        let report = RunReport::new("lab", 1_700_000_000_000, 70.0, vec![d]);
        let mut out = Vec::new();
        write(&report, &mut out).unwrap();
        let xml = String::from_utf8(out).unwrap();
        let parsed = parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
        assert!(
            parsed.cases[0]
                .1
                .as_deref()
                .is_some_and(|m| m.contains("declined")),
            "{xml}"
        );
        for prop in [
            r#"name="slow-storage.agent.1.evidence" value="wiring""#,
            r#"name="slow-storage.agent.1.outcome" value="declined""#,
            r#"name="slow-storage.agent.1.detection" value="true""#,
            r#"name="slow-storage.agent.1.precision" value="0.500""#,
            r#"name="slow-storage.agent.1.recall" value="1.000""#,
            r#"name="slow-storage.agent.1.cause" value="false""#,
            r#"name="slow-storage.agent.1.mitigation" value="notrun""#,
            r#"name="slow-storage.agent.1.plan_at_s" value="21.5""#,
        ] {
            assert!(xml.contains(prop), "{prop} missing:\n{xml}");
        }
    }
}
