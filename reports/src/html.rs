//! The run as one self-contained HTML page (`lab drill run --html FILE`), built from the same
//! [`RunReport`] as the JSON: for each drill a timeline chart in inline SVG — throughput as a percentage of
//! the pre-fault baseline, the suspect dependency's own signal on a second axis, markers for the injection,
//! the detection, each remediation and the return to baseline, and pods Ready drawn above it all (the lab's
//! point: Ready stays flat while throughput falls) — then the verdict with its figures and the evidence.
//!
//! Inline CSS, no scripts, no fonts, no links out: the page opens as it is from a CI artefact store or an
//! email attachment. Rendering is a pure function of the report, so the page is tested on fixed input.

use std::fmt::Write;

use lab_model::Fault;
use lab_model::format::opt_secs;

use crate::escape::esc;
use crate::report::{DrillReport, Point, RunReport, StepName, Verdict};

/// The page for a whole run.
pub fn render(report: &RunReport) -> String {
    let mut o = String::new();
    let passed = report
        .drills
        .iter()
        .filter(|d| d.verdict == Verdict::Pass)
        .count();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>Drill report: {passed} of {n} passed ({lab})</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        n = report.drills.len(),
        lab = esc(&report.lab),
    );
    let _ = writeln!(
        o,
        "<header><h1>Drill report</h1>\n<p class=\"meta\">lab <b>{}</b> · started {} · {} · \
         <span class=\"{}\">{passed} of {} drills passed</span> · {}</p></header>",
        esc(&report.lab),
        esc(&report.started_at),
        opt_secs(Some(report.duration_s)),
        if report.passed { "ok" } else { "bad" },
        report.drills.len(),
        esc(report.format),
    );
    overview(&mut o, report);
    for d in &report.drills {
        drill(&mut o, d);
    }
    o.push_str("</body>\n</html>\n");
    o
}

/// One row per drill, as the terminal's summary table.
fn overview(o: &mut String, report: &RunReport) {
    o.push_str(
        "<table class=\"overview\">\n<thead><tr><th>drill</th><th>verdict</th><th>time to detect</th>\
         <th>time to mitigate</th><th>back to baseline</th><th>throughput under fault</th>\
         <th>steps lost</th></tr></thead>\n<tbody>\n",
    );
    for d in &report.drills {
        let f = &d.figures;
        let _ = writeln!(
            o,
            "<tr><td><a href=\"#drill-{id}\">{name}</a></td>{verdict}<td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td></tr>",
            opt_secs(f.time_to_detect_s),
            opt_secs(f.time_to_mitigate_s),
            opt_secs(f.time_to_baseline_s),
            pct(f.fault_throughput_pct.or(f.lowest_throughput_pct)),
            f.steps_lost,
            id = anchor(&d.name),
            name = esc(&d.name),
            verdict = verdict_cell(d.verdict),
        );
    }
    o.push_str("</tbody>\n</table>\n");
}

fn drill(o: &mut String, d: &DrillReport) {
    let _ = writeln!(
        o,
        "<section class=\"drill\" id=\"drill-{}\">\n<h2>{} <span class=\"badge {}\">{}</span></h2>",
        anchor(&d.name),
        esc(&d.name),
        verdict_class(d.verdict),
        d.verdict,
    );
    if let Some(desc) = &d.description {
        let _ = writeln!(o, "<p class=\"desc\">{}</p>", esc(desc.trim()));
    }
    if !d.faults.is_empty() {
        let faults: Vec<String> = d.faults.iter().map(|f| esc(&f.to_string())).collect();
        let _ = writeln!(o, "<p class=\"fault\">fault: {}</p>", faults.join("; "));
    }
    o.push_str(&chart(d));
    summary(o, d);
    if !d.evidence.is_empty() {
        o.push_str("<h3>Evidence</h3>\n<ul class=\"evidence\">\n");
        for e in &d.evidence {
            let _ = writeln!(o, "<li>{}</li>", esc(e));
        }
        o.push_str("</ul>\n");
    }
    crate::agent_html::plans(o, d);
    crate::agent_html::attempts(o, d);
    steps(o, d);
    o.push_str("</section>\n");
}

/// The verdict, its reason and the figures.
fn summary(o: &mut String, d: &DrillReport) {
    let f = &d.figures;
    let baseline = d.baseline.map_or("-".to_string(), |b| {
        format!(
            "{:.0} samples/s, step {:.0} ms (over {:.0} s before the fault)",
            b.samples_per_s,
            b.step_seconds * 1000.0,
            b.window_s
        )
    });
    let mut rows: Vec<(&str, String)> = vec![
        ("reason", esc(&d.reason)),
        ("time to detect", opt_secs(f.time_to_detect_s)),
        ("time to mitigate", opt_secs(f.time_to_mitigate_s)),
        ("back to baseline", opt_secs(f.time_to_baseline_s)),
        ("throughput under fault", pct(f.fault_throughput_pct)),
        ("lowest throughput", pct(f.lowest_throughput_pct)),
        ("steps lost", f.steps_lost.to_string()),
        ("baseline", esc(&baseline)),
        (
            "run",
            esc(&format!(
                "{} on {} ({}), seed {}, started {}, took {}",
                d.origin,
                d.lab,
                d.runtime,
                d.seed,
                d.started_at,
                opt_secs(Some(d.duration_s))
            )),
        ),
    ];
    if let (Some(b), Some(a)) = (d.baseline, d.steady_after) {
        rows.insert(
            8,
            (
                "steady after the cleanup",
                format!(
                    "{:.0} samples/s, step {:.0} ms ({:.0}% of the baseline)",
                    a.samples_per_s,
                    a.step_seconds * 1000.0,
                    b.pct(a.samples_per_s)
                ),
            ),
        );
    }
    o.push_str("<h3>Summary</h3>\n<table class=\"summary\">\n<tbody>\n");
    let _ = writeln!(o, "<tr><th>verdict</th>{}</tr>", verdict_cell(d.verdict));
    for (k, v) in rows {
        let _ = writeln!(o, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    o.push_str("</tbody>\n</table>\n");
    o.push_str(
        "<p class=\"note\">Times to detect, mitigate and back to baseline are counted from the injection; \
         throughput is a percentage of the baseline measured just before it.</p>\n",
    );
}

/// Every step and remediation, folded away.
fn steps(o: &mut String, d: &DrillReport) {
    if d.steps.is_empty() && d.remediations.is_empty() {
        return;
    }
    o.push_str("<details>\n<summary>Steps and remediations</summary>\n<table class=\"steps\">\n<thead><tr><th></th><th>step</th><th>at</th><th>took</th><th>what happened</th></tr></thead>\n<tbody>\n");
    for s in &d.steps {
        let ev: String = s
            .evidence
            .iter()
            .map(|e| format!("<br><span class=\"ev\">{}</span>", esc(e)))
            .collect();
        let _ = writeln!(
            o,
            "<tr><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}{ev}</td></tr>",
            if s.ok { "ok" } else { "bad" },
            if s.ok { "✓" } else { "✗" },
            esc(s.step.as_str()),
            opt_secs(Some(s.started_s)),
            opt_secs(Some(s.duration_s)),
            esc(&s.summary),
        );
    }
    o.push_str("</tbody>\n</table>\n");
    for (i, r) in d.remediations.iter().enumerate() {
        let cmd = r.command.as_deref().unwrap_or("the lab's own clear");
        let exit = match (r.exit_code, r.timed_out) {
            (_, true) => "timed out".to_string(),
            (Some(c), _) => format!("exit {c}"),
            (None, _) => "no exit code".to_string(),
        };
        let _ = writeln!(
            o,
            "<p class=\"remediation\">remediation {}: <code>{}</code> · {} · {}</p>",
            i + 1,
            esc(cmd),
            exit,
            opt_secs(Some(r.duration_s))
        );
        for c in &r.changes {
            let _ = writeln!(o, "<p class=\"ev\">{}</p>", esc(c));
        }
        for (name, text) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
            if !text.trim().is_empty() {
                let _ = writeln!(o, "<pre title=\"{name}\">{}</pre>", esc(text.trim_end()));
            }
        }
    }
    if !d.cleanup.summary.is_empty() {
        let _ = writeln!(o, "<p class=\"ev\">cleanup: {}</p>", esc(&d.cleanup.summary));
    }
    o.push_str("</details>\n");
}

// ---- the chart ---------------------------------------------------------------------------------------

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = WIDTH - 84.0;
/// The Ready strip, above the marker labels and the plot.
const READY_TOP: f64 = 30.0;
const READY_BOTTOM: f64 = 62.0;
/// Marker labels sit in rows between the Ready strip and the plot, so they never cover a line.
const LABEL_ROW0: f64 = 84.0;
const LABEL_ROW_H: f64 = 17.0;
const LABEL_ROWS: usize = 3;
const PLOT_TOP: f64 = LABEL_ROW0 + LABEL_ROW_H * LABEL_ROWS as f64;
const PLOT_BOTTOM: f64 = PLOT_TOP + 280.0;
const LEGEND_ROW0: f64 = PLOT_BOTTOM + 66.0;
const LEGEND_ROW_H: f64 = 20.0;
const HEIGHT: f64 = LEGEND_ROW0 + LEGEND_ROW_H + 8.0;
/// An average glyph's width at the labels' 12 px, for laying labels out without a font.
const CHAR_W: f64 = 6.8;

const C_THROUGHPUT: &str = "#1f4e9c";
const C_SUSPECT: &str = "#e06c00";
const C_OTHER: &str = "#4a4a4a";
const C_FAULT: &str = "#c62828";
const C_STEADY: &str = "#6d4c41";

/// How a legend entry is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Swatch {
    Line,
    Dotted,
    Dashed,
    Band,
    Tick,
}
const C_READY: &str = "#138a5a";
/// The agent's calls: reads, acts, and those refused or declined.
const C_CALL_READ: &str = "#5c6bc0";
const C_CALL_ACT: &str = "#ef6c00";
const C_CALL_BAD: &str = "#c62828";
/// How tall a call's tick stands on the plot's floor.
const CALL_TICK: f64 = 14.0;

/// A line on the right axis.
struct Series {
    label: String,
    color: &'static str,
    width: f64,
    dashed: bool,
    values: Vec<(f64, Option<f64>)>,
}

/// What the right axis shows: the suspect dependency's signal.
struct Suspect {
    axis: String,
    series: Vec<Series>,
    /// A share in %: drawn on the throughput's own scale, so one grid serves both axes.
    percent: bool,
}

fn suspect(d: &DrillReport) -> Option<Suspect> {
    let ts = &d.timeline;
    let fault = d.faults.first()?;
    let values = |f: &dyn Fn(&Point) -> Option<f64>| -> Vec<(f64, Option<f64>)> {
        ts.iter().map(|p| (p.t_s, f(p))).collect()
    };
    let rank_cpu = |rank: u32| {
        let name = lab_model::names::rank(rank);
        Suspect {
            axis: format!("{name} CPU, % of time"),
            series: vec![
                Series {
                    label: format!("{name} CPU periods throttled (%)"),
                    color: C_SUSPECT,
                    width: 2.5,
                    dashed: false,
                    values: values(&|p| p.throttled.get(&name).map(|v| v * 100.0)),
                },
                Series {
                    label: format!("{name} time computing (%)"),
                    color: C_OTHER,
                    width: 2.0,
                    dashed: true,
                    values: values(&|p| p.compute.get(&name).map(|v| v * 100.0)),
                },
            ],
            percent: true,
        }
    };
    Some(match fault {
        // A competing job shows where a slow path does: on the server the ranks wait for.
        Fault::SlowStorage(lab_model::fault::SlowStorage { server, .. })
        | Fault::CompetingJob(lab_model::fault::CompetingJob { server, .. })
        | Fault::SlowDisk(lab_model::fault::SlowDisk { server, .. }) => {
            let name = lab_model::names::storage(*server);
            let others = values(&|p| {
                median(
                    p.read_p50_ms
                        .iter()
                        .filter(|(k, _)| **k != name)
                        .map(|(_, v)| *v)
                        .collect(),
                )
            });
            let mut series = vec![Series {
                label: format!("{name} read p50 (ms)"),
                color: C_SUSPECT,
                width: 2.5,
                dashed: false,
                values: values(&|p| p.read_p50_ms.get(&name).copied()),
            }];
            if others.iter().any(|(_, v)| v.is_some()) {
                series.push(Series {
                    label: "other servers' read p50 (median, ms)".into(),
                    color: C_OTHER,
                    width: 2.0,
                    dashed: true,
                    values: others,
                });
            }
            Suspect {
                axis: format!("{name} read p50, ms"),
                series,
                percent: false,
            }
        }
        // A rank slowed by its limit, by a process beside it, or frozen: its CPU throttling against the
        // time it spends computing.
        Fault::ThrottledRank(lab_model::fault::ThrottledRank { rank, .. })
        | Fault::RankHang(lab_model::fault::RankHang { rank })
        | Fault::RankCrash(lab_model::fault::RankCrash { rank, .. }) => rank_cpu(*rank),
        Fault::SlowCompute(lab_model::fault::SlowCompute { ranks }) => rank_cpu(*ranks.first()?),
        // The report's points carry no database signals yet: no suspect chart.
        Fault::SyncReplica(_) => return None,
        Fault::UnplaceableRank(_) | Fault::StuckRollout(_) => Suspect {
            axis: "ranks".into(),
            series: vec![
                Series {
                    label: "ranks desired".into(),
                    color: C_SUSPECT,
                    width: 2.5,
                    dashed: false,
                    values: values(&|p| Some(p.ranks_ready.1 as f64)),
                },
                Series {
                    label: "world size the ranks expect".into(),
                    color: C_OTHER,
                    width: 2.5,
                    dashed: true,
                    values: values(&|p| p.world_size.map(f64::from)),
                },
            ],
            percent: false,
        },
    })
}

/// A vertical line with a label: something that happened.
struct Marker {
    kind: &'static str,
    t: f64,
    label: String,
    title: String,
    color: &'static str,
}

fn markers(d: &DrillReport) -> Vec<Marker> {
    let mut out = Vec::new();
    let inject = d
        .steps
        .iter()
        .find(|s| s.step == StepName::Inject)
        .map(|s| s.started_s);
    for s in d.steps.iter().filter(|s| s.step == StepName::Inject) {
        out.push(Marker {
            kind: "inject",
            t: s.started_s,
            label: "inject".into(),
            title: s.summary.clone(),
            color: "#c62828",
        });
    }
    let f = &d.figures;
    if let (Some(i), Some(dt)) = (inject, f.time_to_detect_s) {
        out.push(Marker {
            kind: "detect",
            t: i + dt,
            label: format!("detected +{dt:.1} s"),
            title: d
                .steps
                .iter()
                .find(|s| s.step == StepName::Expect)
                .map_or_else(String::new, |s| s.summary.clone()),
            color: "#7b1fa2",
        });
    }
    let remediations: Vec<_> = d.steps.iter().filter(|s| s.step == StepName::Remediate).collect();
    for (n, s) in remediations.iter().enumerate() {
        let what = d
            .remediations
            .get(n)
            .map(|r| r.command.clone().unwrap_or_else(|| "the lab's clear".into()));
        let label = match (&what, remediations.len()) {
            (Some(w), 1) => format!("remediation: {}", shorten(w, 40)),
            (Some(w), _) => format!("remediation {}: {}", n + 1, shorten(w, 32)),
            (None, 1) => "remediation".into(),
            (None, _) => format!("remediation {}", n + 1),
        };
        out.push(Marker {
            kind: "remediation",
            t: s.started_s,
            label,
            title: format!("{}; {}", what.unwrap_or_default(), s.summary),
            color: "#37474f",
        });
    }
    if let (Some(i), Some(dt)) = (inject, f.time_to_baseline_s) {
        out.push(Marker {
            kind: "baseline",
            t: i + dt,
            label: format!("back to baseline +{dt:.1} s"),
            title: d
                .steps
                .iter()
                .rfind(|s| s.step == StepName::Verify)
                .map_or_else(String::new, |s| s.summary.clone()),
            color: "#2e7d32",
        });
    }
    out.sort_by(|a, b| a.t.total_cmp(&b.t));
    out
}

/// The drill's timeline as an inline SVG.
fn chart(d: &DrillReport) -> String {
    let mut o = String::new();
    let name = esc(&d.name);
    let _ = writeln!(
        o,
        "<figure class=\"chart\">\n<svg class=\"timeline\" data-drill=\"{name}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" \
         aria-label=\"{name}: throughput, the suspect's signal and pods Ready over time\">"
    );
    let ts = &d.timeline;
    let markers = markers(d);
    let t_max = ts
        .iter()
        .map(|p| p.t_s)
        .chain(markers.iter().map(|m| m.t))
        .chain(
            d.remediations
                .iter()
                .filter_map(|r| r.mcp.as_ref())
                .flat_map(|m| m.calls.iter().filter_map(|c| c.t_s)),
        )
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let x = |t: f64| LEFT + (RIGHT - LEFT) * t / t_max;

    // Throughput as % of the baseline; points before the baseline was known take it from the report.
    let pcts: Vec<(f64, Option<f64>)> = ts
        .iter()
        .map(|p| {
            let v = p.pct.or_else(|| {
                let b = d.baseline?;
                Some(b.pct(p.samples_per_s?))
            });
            (p.t_s, v)
        })
        .collect();
    let top_pct = pcts.iter().filter_map(|(_, v)| *v).fold(120.0_f64, f64::max);
    let pct_step = nice_step(top_pct / 6.0);
    let pct_max = (top_pct / pct_step).ceil() * pct_step;
    let yl = |v: f64| PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) * v / pct_max;

    let suspect = suspect(d);
    let r_max = suspect.as_ref().map(|s| {
        if s.percent {
            return pct_max;
        }
        let top = s
            .series
            .iter()
            .flat_map(|s| s.values.iter().filter_map(|(_, v)| *v))
            .fold(0.0_f64, f64::max);
        let top = if top <= 0.0 { 1.0 } else { top * 1.1 };
        let step = nice_step(top / 5.0);
        (top / step).ceil() * step
    });
    let yr = |v: f64| PLOT_BOTTOM - (PLOT_BOTTOM - PLOT_TOP) * v / r_max.unwrap_or(1.0);

    let inject = markers.iter().find(|m| m.kind == "inject").map(|m| m.t);
    // The fault is in until the remediation that brought the job back ended; without one, until the
    // drill's own cleanup cleared it.
    let fault_end = inject.map(
        |i| match (d.figures.time_to_baseline_s, d.figures.time_to_mitigate_s) {
            (Some(_), Some(m)) => i + m,
            _ => d
                .steps
                .iter()
                .find(|s| s.step == StepName::Cleanup)
                .map_or(t_max, |s| s.started_s),
        },
    );
    if let (Some(a), Some(b)) = (inject, fault_end) {
        let _ = writeln!(
            o,
            "<rect class=\"fault-window\" x=\"{:.1}\" y=\"{PLOT_TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{C_FAULT}\" fill-opacity=\"0.07\"><title>the fault in: from the injection until the remediation that brought the job back, or the drill's own cleanup</title></rect>",
            x(a),
            (x(b) - x(a)).max(1.0),
            PLOT_BOTTOM - PLOT_TOP
        );
    }

    // Grid, axes and their labels.
    o.push_str("<g class=\"axes\" font-size=\"12\" fill=\"#444\">\n");
    let mut v = 0.0;
    while v <= pct_max + 1e-9 {
        let _ = writeln!(
            o,
            "<line x1=\"{LEFT}\" x2=\"{RIGHT}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}%</text>",
            LEFT - 6.0,
            yl(v) + 4.0,
            y = yl(v)
        );
        v += pct_step;
    }
    let t_step = nice_step(t_max / 10.0);
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = writeln!(
            o,
            "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{PLOT_BOTTOM}\" y2=\"{:.1}\" stroke=\"#888\"/>\
             <text x=\"{xx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            PLOT_BOTTOM + 5.0,
            PLOT_BOTTOM + 19.0,
            trim_num(t),
            xx = x(t)
        );
        t += t_step;
    }
    let _ = writeln!(
        o,
        "<line x1=\"{LEFT}\" x2=\"{RIGHT}\" y1=\"{PLOT_BOTTOM}\" y2=\"{PLOT_BOTTOM}\" stroke=\"#888\"/>\
         <line x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{PLOT_TOP}\" y2=\"{PLOT_BOTTOM}\" stroke=\"#888\"/>\
         <text class=\"axis-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">seconds from the start of the drill</text>\
         <text class=\"axis-label\" transform=\"translate(18 {:.1}) rotate(-90)\" text-anchor=\"middle\" fill=\"{C_THROUGHPUT}\">throughput, % of baseline</text>",
        (LEFT + RIGHT) / 2.0,
        PLOT_BOTTOM + 38.0,
        (PLOT_TOP + PLOT_BOTTOM) / 2.0,
    );
    if let (Some(s), Some(r_max)) = (&suspect, r_max) {
        let (r_step, unit) = if s.percent {
            (pct_step, "%")
        } else {
            (nice_step(r_max / 5.0), "")
        };
        let mut v = 0.0;
        while v <= r_max + 1e-9 {
            let _ = writeln!(
                o,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{C_SUSPECT}\">{}{unit}</text>",
                RIGHT + 6.0,
                yr(v) + 4.0,
                trim_num(v)
            );
            v += r_step;
        }
        let _ = writeln!(
            o,
            "<line x1=\"{RIGHT}\" x2=\"{RIGHT}\" y1=\"{PLOT_TOP}\" y2=\"{PLOT_BOTTOM}\" stroke=\"{C_SUSPECT}\"/>\
             <text class=\"axis-label\" transform=\"translate({:.1} {:.1}) rotate(90)\" text-anchor=\"middle\" fill=\"{C_SUSPECT}\">{}</text>",
            WIDTH - 14.0,
            (PLOT_TOP + PLOT_BOTTOM) / 2.0,
            esc(&s.axis)
        );
    }
    o.push_str("</g>\n");

    // The baseline, 100 %, and, when the machine got slower during the drill, the lab's normal after the
    // cleanup, which the job was judged against too (or a pass below the baseline reads as a
    // contradiction). Named in the legend, so no label covers a line.
    let _ = writeln!(
        o,
        "<line class=\"baseline\" x1=\"{LEFT}\" x2=\"{RIGHT}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{C_THROUGHPUT}\" stroke-width=\"1.2\" stroke-dasharray=\"8 5\" stroke-opacity=\"0.6\"><title>the baseline measured just before the fault</title></line>",
        y = yl(100.0)
    );
    let steady_after = d
        .baseline
        .zip(d.steady_after)
        .map(|(b, a)| b.pct(a.samples_per_s))
        .filter(|p| (p - 100.0).abs() > 10.0);
    if let Some(p) = steady_after {
        let _ = writeln!(
            o,
            "<line class=\"steady-after\" x1=\"{LEFT}\" x2=\"{RIGHT}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{C_STEADY}\" stroke-width=\"1.2\" stroke-dasharray=\"8 5\"><title>the lab's steady state after the cleanup: {p:.0}% of the baseline</title></line>",
            y = yl(p)
        );
    }

    if ts.is_empty() {
        let _ = writeln!(
            o,
            "<text class=\"empty\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"15\" fill=\"#888\">no timeline: the drill did not get as far as watching the job</text>",
            (LEFT + RIGHT) / 2.0,
            (PLOT_TOP + PLOT_BOTTOM) / 2.0
        );
    }

    // The suspect's lines under the throughput, which is the verdict's signal.
    if let Some(s) = &suspect {
        for series in &s.series {
            polylines(
                &mut o,
                "series suspect",
                &series.label,
                series.color,
                series.width,
                series.dashed,
                &series.values,
                &x,
                &yr,
            );
        }
    }
    polylines(
        &mut o,
        "series throughput",
        "throughput, % of baseline",
        C_THROUGHPUT,
        2.5,
        false,
        &pcts,
        &x,
        &yl,
    );

    ready_strip(&mut o, ts, &x);
    let calls = calls_strip(&mut o, d, &x);

    // Markers: a line through the plot, its label in the first row where it does not cover another.
    let mut row_end = [f64::NEG_INFINITY; LABEL_ROWS];
    for m in &markers {
        let w = m.label.chars().count() as f64 * CHAR_W + 6.0;
        let mx = x(m.t);
        let (start, anchor) = if mx + w > WIDTH - 4.0 {
            (mx - w, "end")
        } else {
            (mx, "start")
        };
        let row = (0..LABEL_ROWS)
            .find(|&r| row_end[r] + 6.0 <= start)
            .unwrap_or_else(|| {
                (0..LABEL_ROWS)
                    .min_by(|&a, &b| row_end[a].total_cmp(&row_end[b]))
                    .unwrap_or(0)
            });
        row_end[row] = start + w;
        let ly = LABEL_ROW0 + LABEL_ROW_H * row as f64 + 12.0;
        let tx = if anchor == "end" { mx - 4.0 } else { mx + 4.0 };
        let _ = writeln!(
            o,
            "<g class=\"marker marker-{kind}\" data-t=\"{t:.1}\"><title>{title}</title>\
             <line x1=\"{mx:.1}\" x2=\"{mx:.1}\" y1=\"{:.1}\" y2=\"{PLOT_BOTTOM}\" stroke=\"{c}\" stroke-width=\"1.5\" stroke-dasharray=\"4 3\"/>\
             <text x=\"{tx:.1}\" y=\"{ly:.1}\" text-anchor=\"{anchor}\" font-size=\"12\" font-weight=\"600\" fill=\"{c}\">{label}</text></g>",
            ly - 12.0,
            kind = m.kind,
            t = m.t,
            title = esc(&m.title),
            c = m.color,
            label = esc(&m.label),
        );
    }

    // The legend, under the axis, wrapping onto a second row when it must.
    let mut items: Vec<(String, &str, Swatch)> =
        vec![("throughput, % of baseline".into(), C_THROUGHPUT, Swatch::Line)];
    if let Some(s) = &suspect {
        for series in &s.series {
            let measured = series.values.iter().any(|(_, v)| v.is_some());
            let label = if measured {
                series.label.clone()
            } else {
                format!("{} (not measured)", series.label)
            };
            let swatch = if series.dashed {
                Swatch::Dotted
            } else {
                Swatch::Line
            };
            items.push((label, series.color, swatch));
        }
    }
    items.push(("pods Ready of desired".into(), C_READY, Swatch::Line));
    if calls > 0 {
        items.push(("agent's calls: read".into(), C_CALL_READ, Swatch::Tick));
        items.push(("act".into(), C_CALL_ACT, Swatch::Tick));
        items.push(("refused or declined".into(), C_CALL_BAD, Swatch::Tick));
    }
    items.push(("baseline (100%)".into(), C_THROUGHPUT, Swatch::Dashed));
    if let Some(p) = steady_after {
        items.push((
            format!("the lab's steady state after the cleanup ({p:.0}%)"),
            C_STEADY,
            Swatch::Dashed,
        ));
    }
    if fault_end.is_some() {
        items.push(("fault in".into(), C_FAULT, Swatch::Band));
    }
    o.push_str("<g class=\"legend\" font-size=\"12\" fill=\"#333\">\n");
    let mut lx = LEFT;
    let mut ly = LEGEND_ROW0;
    for (label, color, swatch) in items {
        let w = 28.0 + label.chars().count() as f64 * CHAR_W;
        if lx + w > RIGHT && lx > LEFT {
            lx = LEFT;
            ly += LEGEND_ROW_H;
        }
        let mark = match swatch {
            Swatch::Tick => format!(
                "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{color}\" stroke-width=\"3\"/>",
                lx + 11.0,
                lx + 11.0,
                ly - 12.0,
                ly + 1.0
            ),
            Swatch::Band => format!(
                "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"22\" height=\"12\" fill=\"{color}\" fill-opacity=\"0.12\"/>",
                ly - 10.0
            ),
            _ => format!(
                "<line x1=\"{lx:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"{color}\" stroke-width=\"{}\"{}/>",
                lx + 22.0,
                if swatch == Swatch::Dashed { 1.5 } else { 3.0 },
                match swatch {
                    Swatch::Dotted => " stroke-dasharray=\"2 4\"",
                    Swatch::Dashed => " stroke-dasharray=\"8 5\"",
                    _ => "",
                },
                y = ly - 4.0
            ),
        };
        let _ = writeln!(
            o,
            "{mark}<text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            lx + 28.0,
            esc(&label)
        );
        lx += w + 22.0;
    }
    o.push_str("</g>\n</svg>\n</figure>\n");
    o
}

/// The agent's calls as ticks along the bottom of the plot, one per call at its time, coloured by what it
/// did (read, act, refused or declined); each says what it was. Returns how many were drawn.
fn calls_strip(o: &mut String, d: &DrillReport, x: &dyn Fn(f64) -> f64) -> usize {
    use lab_agents::mcp::calls::Outcome;
    let mut n = 0;
    // A drill without an interactive agent draws no strip at all.
    if !d
        .remediations
        .iter()
        .filter_map(|r| r.mcp.as_ref())
        .any(|m| m.calls.iter().any(|c| c.t_s.is_some()))
    {
        return 0;
    }
    o.push_str("<g class=\"calls\">\n");
    for m in d.remediations.iter().filter_map(|r| r.mcp.as_ref()) {
        for c in &m.calls {
            let Some(t) = c.t_s else { continue };
            let color = match (c.outcome, c.act.is_some()) {
                (Outcome::Refused | Outcome::Declined, _) => C_CALL_BAD,
                (_, true) => C_CALL_ACT,
                _ => C_CALL_READ,
            };
            let what = match &c.act {
                Some(a) => a.argv.join(" "),
                None => c.tool.clone(),
            };
            let outcome = serde_json::to_value(c.outcome)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let title = format!(
                "+{t:.1} s · attempt {} · {what} → {outcome}{}",
                m.attempt,
                c.message.as_deref().map_or(String::new(), |w| format!(": {w}"))
            );
            let _ = writeln!(
                o,
                "<line class=\"call call-{outcome}\" data-t=\"{t:.1}\" data-tool=\"{}\" x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{:.1}\" y2=\"{PLOT_BOTTOM}\" stroke=\"{color}\" stroke-width=\"3\"><title>{}</title></line>",
                esc(&c.tool),
                PLOT_BOTTOM - CALL_TICK,
                esc(&title),
                xx = x(t),
            );
            n += 1;
        }
    }
    o.push_str("</g>\n");
    n
}

/// Pods Ready as a line in its own strip above everything: flat at the top while every rank is Ready.
fn ready_strip(o: &mut String, ts: &[Point], x: &dyn Fn(f64) -> f64) {
    let y = |(ready, desired): (usize, usize)| {
        let share = if desired == 0 {
            0.0
        } else {
            ready as f64 / desired as f64
        };
        READY_BOTTOM - (READY_BOTTOM - READY_TOP - 6.0) * share.min(1.0)
    };
    let _ = writeln!(
        o,
        "<g class=\"ready\">\n<rect x=\"{LEFT}\" y=\"{READY_TOP}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{C_READY}\" fill-opacity=\"0.06\"/>",
        RIGHT - LEFT,
        READY_BOTTOM - READY_TOP
    );
    // A step line: Ready holds its value until the next snapshot.
    let mut pts = String::new();
    for (i, p) in ts.iter().enumerate() {
        let yy = y(p.ranks_ready);
        if i > 0 {
            let _ = write!(pts, "{:.1},{yy:.1} ", x(p.t_s));
        }
        let next = ts.get(i + 1).map_or(p.t_s, |n| n.t_s);
        let _ = write!(pts, "{:.1},{yy:.1} ", x(p.t_s), yy = yy);
        if next > p.t_s {
            let _ = write!(pts, "{:.1},{yy:.1} ", x(next));
        }
    }
    if !pts.is_empty() {
        let _ = writeln!(
            o,
            "<polyline class=\"ready-line\" points=\"{}\" fill=\"none\" stroke=\"{C_READY}\" stroke-width=\"3\"><title>pods Ready of desired</title></polyline>",
            pts.trim_end()
        );
    }
    let caption = match ts.first() {
        None => "pods Ready: not seen".to_string(),
        Some(first) => {
            let low = ts
                .iter()
                .min_by(|a, b| {
                    let s = |p: &Point| p.ranks_ready.0 as f64 / p.ranks_ready.1.max(1) as f64;
                    s(a).total_cmp(&s(b))
                })
                .unwrap_or(first);
            let (r, n) = low.ranks_ready;
            if ts.iter().all(|p| p.ranks_ready == first.ranks_ready) {
                format!("pods Ready {r}/{n} throughout")
            } else if r < n {
                format!("pods Ready: as low as {r}/{n} at {:.0} s", low.t_s)
            } else {
                let (r, n) = ts[ts.len() - 1].ranks_ready;
                format!("pods Ready, all along; {r}/{n} at the end")
            }
        }
    };
    let last = ts.last().map_or_else(String::new, |p| {
        format!("{}/{}", p.ranks_ready.0, p.ranks_ready.1)
    });
    let _ = writeln!(
        o,
        "<text class=\"ready-caption\" x=\"{LEFT}\" y=\"{:.1}\" font-size=\"12\" font-weight=\"600\" fill=\"{C_READY}\">{}</text>\
         <text class=\"ready-last\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" font-weight=\"600\" fill=\"{C_READY}\">{last}</text>\n</g>",
        READY_TOP - 6.0,
        esc(&caption),
        RIGHT + 6.0,
        READY_TOP + 10.0,
    );
}

/// A series as polylines, one per run of measured points (a gap is a gap, not a line to zero).
#[allow(clippy::too_many_arguments)]
fn polylines(
    o: &mut String,
    class: &str,
    label: &str,
    color: &str,
    width: f64,
    dashed: bool,
    values: &[(f64, Option<f64>)],
    x: &dyn Fn(f64) -> f64,
    y: &dyn Fn(f64) -> f64,
) {
    // Dotted, so a secondary line never reads as the dashed baseline.
    let dash = if dashed { " stroke-dasharray=\"2 4\"" } else { "" };
    for run in values.split(|(_, v)| v.is_none()) {
        if run.is_empty() {
            continue;
        }
        let pts: Vec<String> = run
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(v.unwrap_or_default())))
            .collect();
        let _ = writeln!(
            o,
            "<polyline class=\"{class}\" points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"{width}\" stroke-linejoin=\"round\"{dash}><title>{}</title></polyline>",
            pts.join(" "),
            esc(label)
        );
    }
}

// ---- small helpers ----------------------------------------------------------------------------------

/// A step of 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

fn trim_num(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let cut: String = s.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}%"))
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "verdict-pass",
        Verdict::Fail => "verdict-fail",
        Verdict::Error => "verdict-error",
        Verdict::Declined => "verdict-declined",
    }
}

fn verdict_cell(v: Verdict) -> String {
    format!("<td class=\"verdict {}\">{v}</td>", verdict_class(v))
}

/// A drill's name as an `id` (names are `[a-z0-9-]`, but a report may come from anywhere).
fn anchor(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

const CSS: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;margin:24px 32px;max-width:1260px}
h1{margin:0 0 4px;font-size:26px}h2{margin:36px 0 4px;font-size:21px;border-top:1px solid #ddd;padding-top:20px}
h3{font-size:15px;margin:18px 0 6px}
.meta,.desc,.fault,.note{color:#555;margin:4px 0}.note{font-size:12px}
.ok{color:#1b5e20}.bad{color:#b71c1c}
table{border-collapse:collapse;font-size:14px;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 10px;text-align:left;vertical-align:top}
thead th,.summary th{background:#f4f4f4;font-weight:600}.summary th{width:190px}
.verdict{font-weight:700}
.verdict-pass{background:#e6f4ea;color:#1b5e20}.verdict-fail{background:#fdecea;color:#b71c1c}
.verdict-error{background:#fff4e0;color:#8a4b00}.verdict-declined{background:#eef0f4;color:#334}
.badge{font-size:13px;padding:2px 8px;border-radius:4px;vertical-align:middle}
.chart{margin:12px 0}svg{display:block;background:#fff;border:1px solid #eee;max-width:100%;height:auto}
.evidence{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:13px;padding-left:20px}
.evidence li{margin:2px 0}
.ev{color:#555;font-size:12px;font-family:ui-monospace,'DejaVu Sans Mono',monospace;margin:2px 0}
pre{background:#f7f7f7;padding:6px;font-size:12px;white-space:pre-wrap}
details{margin:10px 0}summary{cursor:pointer;color:#1f4e9c}
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_everywhere() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(anchor("slow storage/1"), "slow_storage_1");
    }

    #[test]
    fn steps_are_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(nice_step(17.0), 20.0);
        assert_eq!(nice_step(3.1), 5.0);
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(100.0), 100.0);
        assert_eq!(nice_step(0.0), 1.0);
    }

    #[test]
    fn a_gap_in_a_series_is_drawn_as_a_gap() {
        let mut o = String::new();
        let v = [(0.0, Some(1.0)), (1.0, Some(2.0)), (2.0, None), (3.0, Some(1.0))];
        polylines(&mut o, "s", "s", "#000", 1.0, false, &v, &|t| t, &|v| v);
        assert_eq!(o.matches("<polyline").count(), 2, "{o}");
        assert!(o.contains("points=\"0.0,1.0 1.0,2.0\""), "{o}");
        assert!(o.contains("points=\"3.0,1.0\""), "{o}");
    }
}
