//! The HTML report on a fixed run: the whole page as a snapshot, and the structure a reader relies on —
//! one chart per drill, its lines and markers, the verdicts, and nothing that needs the network.

mod fixture;

use lab_reports::html;

#[test]
fn the_page_is_self_contained() {
    let page = html::render(&fixture::run());
    for needle in [
        "http://", "https://", "<script", "<link", "@import", "url(", "<iframe", "<img",
    ] {
        assert!(
            !page.contains(needle),
            "the page refers out or runs code: {needle:?} found"
        );
    }
    assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
}

#[test]
fn each_drill_has_one_chart_with_its_lines_and_markers() {
    let run = fixture::run();
    let page = html::render(&run);
    assert_eq!(
        page.matches("<svg ").count(),
        run.drills.len(),
        "one chart per drill"
    );
    let charts: Vec<&str> = page
        .split("<svg ")
        .skip(1)
        .map(|s| s.split("</svg>").next().unwrap())
        .collect();
    for (d, svg) in run.drills.iter().zip(&charts) {
        assert!(svg.contains(&format!("data-drill=\"{}\"", d.name)), "{}", d.name);
        assert!(
            svg.contains("class=\"series throughput\" points=\""),
            "{}: no throughput line",
            d.name
        );
        assert!(
            svg.contains("class=\"series suspect\" points=\""),
            "{}: no suspect line",
            d.name
        );
        assert!(
            svg.contains("class=\"ready-line\" points=\""),
            "{}: no Ready line",
            d.name
        );
        assert!(
            svg.contains("class=\"marker marker-inject\""),
            "{}: no inject marker",
            d.name
        );
        assert!(
            svg.contains("class=\"marker marker-detect\""),
            "{}: no detection marker",
            d.name
        );
        let remediations = d.steps.iter().filter(|s| s.step == "remediate").count();
        assert_eq!(
            svg.matches("class=\"marker marker-remediation\"").count(),
            remediations,
            "{}",
            d.name
        );
        assert_eq!(
            svg.contains("class=\"marker marker-baseline\""),
            d.figures.time_to_baseline_s.is_some(),
            "{}: back-to-baseline marker only when the job came back",
            d.name
        );
    }
    // The suspect of each fault, on the right axis.
    assert!(charts[0].contains("storage-1 read p50, ms"), "{}", charts[0]);
    assert!(charts[1].contains("rank-1 CPU, % of time"), "{}", charts[1]);
    assert!(charts[2].contains("world size the ranks expect"), "{}", charts[2]);
    // Ready is flat for slow-storage and says so; it dips for unplaceable-rank's restart and says that.
    assert!(charts[0].contains("pods Ready 4/4 throughout"));
    assert!(charts[2].contains("pods Ready: as low as 2/4"));
}

#[test]
fn the_summary_has_each_verdict_reason_and_figure() {
    let page = html::render(&fixture::run());
    assert!(page.contains("<td class=\"verdict verdict-pass\">PASS</td>"));
    assert!(page.contains("<td class=\"verdict verdict-fail\">FAIL</td>"));
    assert!(page.contains("verify: the job is not back 45 s after the remediation"));
    for figure in [
        "time to detect",
        "time to mitigate",
        "back to baseline",
        "throughput under fault",
        "steps lost",
    ] {
        assert!(page.contains(&format!("<th>{figure}</th>")), "{figure}");
    }
    assert!(
        page.contains("<li>rank-1 CPU throttled 86% of periods; limit 150m live, 400m in its template</li>")
    );
    assert!(page.contains("2 of 3 drills passed"));
}

#[test]
fn a_drill_that_never_ran_still_gets_its_section() {
    let mut run = fixture::run();
    let d = &mut run.drills[1];
    d.verdict = lab_reports::Verdict::Error;
    d.reason = "check: this drill needs enforced CPU limits <cgroup v1>".into();
    d.timeline.clear();
    d.steps.clear();
    d.remediations.clear();
    d.figures = Default::default();
    let page = html::render(&run);
    assert_eq!(page.matches("<svg ").count(), 3);
    assert!(page.contains("no timeline: the drill did not get as far as watching the job"));
    assert!(
        page.contains("needs enforced CPU limits &lt;cgroup v1&gt;"),
        "the reason is escaped"
    );
    assert!(page.contains("<td class=\"verdict verdict-error\">ERROR</td>"));
}

#[test]
fn a_machine_that_got_slower_shows_the_normal_the_job_was_judged_against() {
    let mut run = fixture::run();
    let d = &mut run.drills[1];
    let mut after = d.baseline.unwrap();
    after.samples_per_s *= 0.53;
    d.steady_after = Some(after);
    let page = html::render(&run);
    assert_eq!(
        page.matches("class=\"steady-after\"").count(),
        1,
        "only where it is off the baseline"
    );
    assert!(page.contains(">the lab&#39;s steady state after the cleanup (53%)</text>"));
    assert!(page.contains(
        "<th>steady after the cleanup</th><td>3521 samples/s, step 61 ms (53% of the baseline)</td>"
    ));
}

#[test]
fn the_page_is_as_reviewed() {
    insta::assert_snapshot!(html::render(&fixture::run()));
}
