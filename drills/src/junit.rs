//! The run as JUnit XML, for CI: one `testsuite`, one `testcase` per drill; a failed drill carries a
//! `failure` (an `error` when it could not run) whose message is the verdict's reason and whose text is the
//! evidence, and every testcase carries its step lines as `system-out`.

use std::io::Write;

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};

use crate::error::DrillError;
use crate::report::{RunReport, Verdict};

/// Writes `report` as JUnit XML.
///
/// # Errors
/// [`DrillError::Xml`] when `out` cannot be written.
pub fn write(report: &RunReport, out: impl Write) -> Result<(), DrillError> {
    let mut w = Writer::new_with_indent(out, b' ', 2);
    let failures = report
        .drills
        .iter()
        .filter(|d| d.verdict == Verdict::Fail)
        .count();
    let errors = report
        .drills
        .iter()
        .filter(|d| d.verdict == Verdict::Error)
        .count();
    let io = |e: std::io::Error| DrillError::Xml(e);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))
        .map_err(io)?;
    let tests = report.drills.len().to_string();
    let failures = failures.to_string();
    let errors = errors.to_string();
    let time = format!("{:.3}", report.duration_s);
    let suite = BytesStart::new("testsuite").with_attributes([
        ("name", "lab drills"),
        ("tests", tests.as_str()),
        ("failures", failures.as_str()),
        ("errors", errors.as_str()),
        ("skipped", "0"),
        ("time", time.as_str()),
        ("timestamp", report.started_at.as_str()),
        ("hostname", report.lab.as_str()),
    ]);
    w.write_event(Event::Start(suite)).map_err(io)?;
    for d in &report.drills {
        let time = format!("{:.3}", d.duration_s);
        let case = BytesStart::new("testcase").with_attributes([
            ("classname", format!("lab.drills.{}", d.runtime).as_str()),
            ("name", d.name.as_str()),
            ("file", d.origin.as_str()),
            ("time", time.as_str()),
        ]);
        w.write_event(Event::Start(case)).map_err(io)?;
        if d.verdict != Verdict::Pass {
            let tag = if d.verdict == Verdict::Error {
                "error"
            } else {
                "failure"
            };
            let el = BytesStart::new(tag).with_attributes([("message", d.reason.as_str()), ("type", tag)]);
            w.write_event(Event::Start(el)).map_err(io)?;
            let body = d.evidence.join("\n");
            w.write_event(Event::Text(BytesText::new(&body))).map_err(io)?;
            w.write_event(Event::End(BytesEnd::new(tag))).map_err(io)?;
        }
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
        let f = &d.figures;
        out.push_str(&format!(
            "time to detect {}, to mitigate {}, back to baseline {}, steps lost {}\n",
            opt(f.time_to_detect_s),
            opt(f.time_to_mitigate_s),
            opt(f.time_to_baseline_s),
            f.steps_lost
        ));
        w.write_event(Event::Start(BytesStart::new("system-out")))
            .map_err(io)?;
        w.write_event(Event::Text(BytesText::new(&out))).map_err(io)?;
        w.write_event(Event::End(BytesEnd::new("system-out")))
            .map_err(io)?;
        w.write_event(Event::End(BytesEnd::new("testcase"))).map_err(io)?;
    }
    w.write_event(Event::End(BytesEnd::new("testsuite")))
        .map_err(io)?;
    w.into_inner().write_all(b"\n").map_err(io)?;
    Ok(())
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1} s"))
}

/// A JUnit document read back: what a CI system would see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub suites: usize,
    pub tests: usize,
    /// `(name, failure or error message)` per testcase.
    pub cases: Vec<(String, Option<String>)>,
}

/// Reads JUnit XML back, checking it is well-formed (every element closed, in order).
///
/// # Errors
/// A message saying where the document is malformed.
pub fn parse(xml: &str) -> Result<Parsed, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{CleanupReport, DrillReport, Figures, StepReport};

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
    fn malformed_documents_are_refused() {
        assert!(parse("<testsuite tests=\"1\"><testcase name=\"a\"></testsuite>").is_err());
        assert!(parse("<testsuite tests=\"2\"><testcase name=\"a\"/></testsuite>").is_err());
        assert!(parse("").is_err());
        assert!(parse("<testsuite tests=\"1\"><testcase name=\"a\"/></testsuite>").is_ok());
    }
}
