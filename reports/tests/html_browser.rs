//! The HTML report opened in a real browser (headless Chromium): what is drawn, not only what is written.
//!
//! The page is rendered from the fixed run in `fixture`, written under `target/test-artefacts/`, and
//! screenshotted there (`drill-report.png`) for a person to look at. A copy of the page with a measuring
//! script appended (the report itself has no scripts) reports the laid-out geometry through `--dump-dom`:
//! every chart drawn at its size, the lines with points and extent, the Ready line above every other line,
//! no two labels of a chart overlapping, and the verdict cells coloured apart.
//!
//! Chromium is a tool of the test command (`scripts/tools.sh chromium`); without it this test fails and
//! says how to install it: a browser check that skips itself is one nobody notices is gone.

mod fixture;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lab_reports::html;

/// Where the page and its screenshot are kept: `target/test-artefacts/`.
fn artefacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("test-artefacts");
    std::fs::create_dir_all(&dir).expect("create target/test-artefacts");
    dir
}

fn chromium() -> PathBuf {
    let candidates = ["chromium", "chromium-browser", "google-chrome"];
    if let Some(p) = std::env::var_os("LAB_CHROMIUM").map(PathBuf::from) {
        assert!(p.is_file(), "LAB_CHROMIUM={} is not a file", p.display());
        return p;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .flat_map(|d| candidates.map(|c| d.join(c)))
        .find(|p| p.is_file());
    match found {
        Some(p) => p,
        None => panic!(
            "chromium is not installed, and this test opens the drill report in it: \
             run `scripts/tools.sh chromium` (Debian's `apt-get install chromium`), or point LAB_CHROMIUM at a \
             Chromium or Chrome binary"
        ),
    }
}

/// Runs headless Chromium on `page` with `args`; its stdout. A fresh profile each time, nothing fetched.
fn run_chromium(page: &Path, args: &[&str]) -> String {
    let profile = tempfile::tempdir().expect("a profile folder");
    let url = format!("file://{}", page.display());
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .args((!args.iter().any(|a| a.starts_with("--window-size"))).then_some("--window-size=1400,2000"))
        .arg(&url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    // Read the pipes on threads, so a chatty browser never blocks on a full pipe while we wait.
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out_pipe, &mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err_pipe, &mut s).ok();
        s
    });
    // Generous: the machines that run this are often busy building.
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for chromium") {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            panic!("chromium did not finish within 180 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = out.join().unwrap();
    let err = err.join().unwrap();
    assert!(
        status.success(),
        "chromium {args:?} on {url} failed ({status}):\n{err}"
    );
    out
}

/// Appended to a copy of the page: measures what the browser laid out and writes it into the DOM as JSON.
const MEASURE: &str = r#"<script>
(() => {
  const box = (e) => { const r = e.getBoundingClientRect(); return {x: r.x, y: r.y, w: r.width, h: r.height}; };
  const charts = [...document.querySelectorAll('svg.timeline')].map((svg) => {
    const lines = (sel) => [...svg.querySelectorAll(sel)].map((p) => ({points: p.points.numberOfItems, ...box(p)}));
    const texts = [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim() !== '')
      .map((t) => ({text: t.textContent, ...box(t)}));
    const overlaps = [];
    for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
      const a = texts[i], b = texts[j];
      if (a.x < b.x + b.w - 1 && b.x < a.x + a.w - 1 && a.y < b.y + b.h - 1 && b.y < a.y + a.h - 1) overlaps.push([a.text, b.text]);
    }
    return {
      drill: svg.dataset.drill, ...box(svg),
      throughput: lines('polyline.throughput'), suspect: lines('polyline.suspect'), ready: lines('polyline.ready-line'),
      markers: [...svg.querySelectorAll('g.marker')].map((g) => ({kind: g.classList[1], label: g.querySelector('text').textContent, ...box(g.querySelector('line'))})),
      overlaps,
    };
  });
  const verdicts = [...document.querySelectorAll('td.verdict')].map((td) => ({text: td.textContent, bg: getComputedStyle(td).backgroundColor}));
  const pre = document.createElement('pre');
  pre.id = 'measured';
  const height = Math.ceil(document.documentElement.scrollHeight);
  pre.textContent = JSON.stringify({charts, verdicts, height});
  document.body.appendChild(pre);
})();
</script>
"#;

#[test]
fn the_report_renders_in_a_browser() {
    let dir = artefacts();
    let page = dir.join("drill-report.html");
    let report = html::render(&fixture::run());
    std::fs::write(&page, &report).expect("write the page");

    // The DOM as the browser built it: the charts are SVG elements, not text.
    let dom = run_chromium(&page, &["--dump-dom"]);
    assert_eq!(dom.matches("<svg class=\"timeline\"").count(), 3, "{dom}");
    for label in [
        "inject",
        "detected +10.9 s",
        "remediation: the lab's clear",
        "back to baseline +20.0 s",
        "remediation 2: lab scale ranks 4 &amp;&amp; lab config…",
    ] {
        assert!(
            dom.contains(&format!(">{label}</text>")),
            "marker label {label:?} not in the DOM"
        );
    }
    assert!(dom.contains("<td class=\"verdict verdict-pass\">PASS</td>"));
    assert!(dom.contains("<td class=\"verdict verdict-fail\">FAIL</td>"));

    // The geometry the browser laid out.
    let measured_page = dir.join("drill-report-measured.html");
    std::fs::write(
        &measured_page,
        report.replace("</body>", &format!("{MEASURE}</body>")),
    )
    .unwrap();
    let dom = run_chromium(&measured_page, &["--dump-dom"]);
    let json = dom
        .split("<pre id=\"measured\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("the measuring script did not run:\n{dom}"));
    let json = json
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let m: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));

    let charts = m["charts"].as_array().unwrap();
    assert_eq!(charts.len(), 3);
    let f = |v: &serde_json::Value| v.as_f64().unwrap();
    for c in charts {
        let drill = c["drill"].as_str().unwrap();
        assert!(
            f(&c["w"]) > 1000.0 && f(&c["h"]) > 400.0,
            "{drill}: the chart is not drawn at its size: {c}"
        );
        for series in ["throughput", "suspect", "ready"] {
            let lines = c[series].as_array().unwrap();
            assert!(!lines.is_empty(), "{drill}: no {series} line drawn");
            assert!(
                lines
                    .iter()
                    .any(|l| f(&l["points"]) >= 10.0 && f(&l["w"]) > 500.0),
                "{drill}: the {series} line has no extent: {lines:?}"
            );
        }
        // Ready sits above every other line.
        let ready_bottom = c["ready"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| f(&l["y"]) + f(&l["h"]))
            .fold(0.0, f64::max);
        let others_top = ["throughput", "suspect"]
            .iter()
            .flat_map(|s| c[*s].as_array().unwrap().iter().map(|l| f(&l["y"])))
            .fold(f64::INFINITY, f64::min);
        assert!(
            ready_bottom < others_top,
            "{drill}: the Ready line ({ready_bottom}) is not above the others ({others_top})"
        );
        // Every marker's line crosses the plot.
        for mk in c["markers"].as_array().unwrap() {
            assert!(
                f(&mk["h"]) > 250.0,
                "{drill}: marker {mk} does not cross the plot"
            );
        }
        let overlaps = c["overlaps"].as_array().unwrap();
        assert!(
            overlaps.is_empty(),
            "{drill}: labels drawn over each other: {overlaps:?}"
        );
    }
    // slow-storage: Ready is flat (a line with no height) while throughput falls to a quarter.
    let slow = &charts[0];
    assert!(
        slow["ready"].as_array().unwrap().iter().all(|l| f(&l["h"]) < 1.0),
        "slow-storage Ready is not flat: {slow}"
    );
    let kinds: Vec<&str> = slow["markers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "marker-inject",
            "marker-detect",
            "marker-remediation",
            "marker-baseline"
        ]
    );

    let verdicts = m["verdicts"].as_array().unwrap();
    let bg = |text: &str| {
        verdicts
            .iter()
            .find(|v| v["text"] == text)
            .map(|v| v["bg"].as_str().unwrap().to_string())
    };
    assert_ne!(
        bg("PASS"),
        bg("FAIL"),
        "pass and fail look the same: {verdicts:?}"
    );

    // What a person sees, kept for them: the whole page, as tall as the browser laid it out.
    let height = m["height"].as_f64().unwrap_or(2000.0).clamp(2000.0, 16_000.0) as u32;
    let shot = dir.join("drill-report.png");
    let _ = std::fs::remove_file(&shot);
    run_chromium(
        &page,
        &[
            &format!("--screenshot={}", shot.display()),
            &format!("--window-size=1400,{height}"),
        ],
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", shot.display()));
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "the screenshot is not a picture of anything"
    );
    eprintln!("screenshot: {}", shot.display());
}
