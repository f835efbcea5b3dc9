//! The lab's evaluator and promtool agree on the rule file: this test reads the rule file's own promtool
//! tests (`manifests/rules/golden-signals.test.yaml`), feeds each scenario's series tick by tick through
//! [`Collector::observe`] as scrapes (the lab evaluating the file it ships to Prometheus), and expects
//! exactly the alerts promtool expects, at the same times. It also checks that the lab loads every rule of
//! the file the runtime ships, with its `for`, `keep_firing_for` and signal.
//! `AGREEMENT_TRACE=1 cargo test -p lab-telemetry --test agreement -- --nocapture` prints the second each
//! alert first fires in each scenario, which is where the test file pins both evaluators.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use lab_model::scrape::{ScrapeTarget, TargetKind};
use lab_model::status::{LabStatus, RuntimeKind};
use lab_telemetry::{Collector, rules};
use serde::Deserialize;

fn rules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../manifests/rules")
}

#[derive(Debug, Deserialize)]
struct TestFile {
    evaluation_interval: String,
    tests: Vec<TestGroup>,
}

#[derive(Debug, Deserialize)]
struct TestGroup {
    name: String,
    interval: String,
    input_series: Vec<InputSeries>,
    #[serde(default)]
    alert_rule_test: Vec<AlertTest>,
}

#[derive(Debug, Deserialize)]
struct InputSeries {
    series: String,
    values: String,
}

#[derive(Debug, Deserialize)]
struct AlertTest {
    eval_time: String,
    alertname: String,
    #[serde(default)]
    exp_alerts: Vec<ExpAlert>,
}

#[derive(Debug, Deserialize)]
struct ExpAlert {
    #[serde(default)]
    exp_labels: BTreeMap<String, String>,
}

/// `100s`, `2m`, `500ms` in ms.
fn duration_ms(s: &str) -> i64 {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num.parse().unwrap_or_else(|_| panic!("bad duration {s:?}"));
    match unit {
        "ms" => n,
        "s" => n * 1000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        _ => panic!("bad duration unit in {s:?}"),
    }
}

/// promtool's series notation: `a`, `a+bxn`, `a-bxn`, `axn`, `stale` (None). `_` is refused: Prometheus
/// keeps showing a gauge's last value across a gap, the lab (scraping a target that stopped exporting a
/// series) marks it stale, so the shared test file writes `stale`.
fn expand(values: &str) -> Vec<Option<f64>> {
    let mut out = Vec::new();
    for tok in values.split_whitespace() {
        assert_ne!(tok, "_", "use `stale`, not `_`, in the shared test file");
        if tok == "stale" {
            out.push(None);
            continue;
        }
        let Some((head, n)) = tok.rsplit_once('x') else {
            out.push(Some(tok.parse().unwrap_or_else(|_| panic!("bad value {tok:?}"))));
            continue;
        };
        let n: usize = n.parse().unwrap_or_else(|_| panic!("bad repeat in {tok:?}"));
        let split = head
            .char_indices()
            .skip(1)
            .find(|(i, c)| matches!(c, '+' | '-') && !matches!(head.as_bytes()[i - 1], b'e' | b'E'));
        let (start, step) = match split {
            Some((i, sign)) => {
                let step: f64 = head[i + 1..].parse().unwrap();
                (
                    head[..i].parse::<f64>().unwrap(),
                    if sign == '-' { -step } else { step },
                )
            }
            None => (head.parse::<f64>().unwrap(), 0.0),
        };
        for k in 0..=n {
            out.push(Some(start + step * k as f64));
        }
    }
    out
}

fn status() -> LabStatus {
    LabStatus::default_shape("agreement", RuntimeKind::Local)
}

struct Series {
    instance: String,
    line_head: String,
    values: Vec<Option<f64>>,
}

fn series_of(group: &TestGroup) -> Vec<Series> {
    group
        .input_series
        .iter()
        .map(|s| {
            let mut parsed = lab_telemetry::expo::parse(&format!("{} 0", s.series))
                .unwrap_or_else(|e| panic!("series {:?}: {e}", s.series));
            let mut sample = parsed.remove(0);
            let instance = sample
                .labels
                .remove("instance")
                .expect("every input series names its instance");
            Series {
                instance,
                line_head: format!("{}{}", sample.name, sample.labels),
                values: expand(&s.values),
            }
        })
        .collect()
}

fn target(instance: &str) -> ScrapeTarget {
    let (kind, prefix) = if instance.starts_with("storage") {
        (TargetKind::Storage, "storage")
    } else if instance == lab_model::db::WRITER {
        (TargetKind::Writer, "writer")
    } else {
        (TargetKind::Rank, "rank")
    };
    ScrapeTarget {
        instance: instance.to_string(),
        kind,
        index: lab_model::names::index_of(instance, prefix).unwrap_or(0),
        address: String::new(),
    }
}

#[test]
fn in_lab_evaluator_fires_what_promtool_expects() {
    let text = std::fs::read_to_string(rules_dir().join("golden-signals.test.yaml")).unwrap();
    let file: TestFile = serde_norway::from_str(&text).unwrap();
    let eval_ms = duration_ms(&file.evaluation_interval);
    let mut checked = 0;
    for group in &file.tests {
        let step = duration_ms(&group.interval);
        assert_eq!(
            step, eval_ms,
            "{}: the lab scrapes and evaluates on the same tick",
            group.name
        );
        let series = series_of(group);
        let end = group
            .alert_rule_test
            .iter()
            .map(|a| duration_ms(&a.eval_time))
            .max()
            .unwrap_or(0);
        let instances: BTreeSet<&str> = series.iter().map(|s| s.instance.as_str()).collect();
        let mut collector = Collector::default();
        let mut t = 0;
        while t <= end {
            let i = usize::try_from(t / step).unwrap();
            let mut texts: BTreeMap<&str, String> = instances.iter().map(|i| (*i, String::new())).collect();
            for s in &series {
                let v = s.values.get(i).unwrap_or_else(|| {
                    panic!(
                        "{}: {} ends before {t} ms; every series must cover the run",
                        group.name, s.line_head
                    )
                });
                if let Some(v) = v {
                    let text = texts.get_mut(s.instance.as_str()).unwrap();
                    text.push_str(&format!("{} {v}\n", s.line_head));
                }
            }
            let scrapes = texts.into_iter().map(|(i, text)| (target(i), Ok(text))).collect();
            let snapshot = collector.observe(
                u64::try_from(t).unwrap(),
                status(),
                scrapes,
                Vec::new(),
                Vec::new(),
            );
            assert!(snapshot.scrape_errors.is_empty(), "{:?}", snapshot.scrape_errors);
            if std::env::var("AGREEMENT_TRACE").is_ok() {
                for a in &snapshot.alerts {
                    if a.since_ms + rules::builtin().alert(&a.rule).unwrap().for_ms as u64 == t as u64 {
                        println!(
                            "{} | {} {} first fires at {t}",
                            group.name.split(':').next().unwrap(),
                            a.rule,
                            a.target
                        );
                    }
                }
            }
            for test in group
                .alert_rule_test
                .iter()
                .filter(|a| duration_ms(&a.eval_time) == t)
            {
                let got: BTreeSet<String> = snapshot
                    .alerts
                    .iter()
                    .filter(|a| a.rule == test.alertname)
                    .map(|a| a.target.clone())
                    .collect();
                let want: BTreeSet<String> = test
                    .exp_alerts
                    .iter()
                    .map(|e| {
                        e.exp_labels
                            .get("server")
                            .or_else(|| e.exp_labels.get("instance"))
                            .or_else(|| e.exp_labels.get("pod"))
                            .cloned()
                            .unwrap_or_else(|| "job".to_string())
                    })
                    .collect();
                assert_eq!(
                    got, want,
                    "{}: {} at {}",
                    group.name, test.alertname, test.eval_time
                );
                checked += 1;
            }
            t += step;
        }
    }
    assert!(checked >= 30, "only {checked} alert checks ran");
}

#[test]
fn the_lab_evaluates_every_rule_of_the_file_it_ships() {
    // The runtime ships this very text to Prometheus; the lab evaluates it.
    assert_eq!(rules::BUILTIN, lab_runtime_kube::manifests::RULES);
    let text = std::fs::read_to_string(rules_dir().join("golden-signals.yaml")).unwrap();
    assert_eq!(text, rules::BUILTIN);
    let doc: serde_norway::Value = serde_norway::from_str(&text).unwrap();
    let mut alerts = BTreeMap::new();
    let mut records = Vec::new();
    for group in doc["groups"].as_sequence().unwrap() {
        assert_eq!(group["interval"].as_str(), Some("1s"));
        for rule in group["rules"].as_sequence().unwrap() {
            if let Some(name) = rule["alert"].as_str() {
                let for_ms = rule["for"].as_str().map_or(0, duration_ms);
                let keep_ms = rule["keep_firing_for"].as_str().map_or(0, duration_ms);
                let signal = rule["labels"]["signal"].as_str().unwrap().to_string();
                alerts.insert(name.to_string(), (for_ms, keep_ms, signal));
            }
            if let Some(name) = rule["record"].as_str() {
                records.push(name.to_string());
            }
        }
    }
    let lab = rules::builtin();
    let loaded: BTreeMap<String, (i64, i64, String)> = lab
        .alerts()
        .map(|a| (a.name.clone(), (a.for_ms, a.keep_firing_ms, a.signal.to_string())))
        .collect();
    assert_eq!(alerts, loaded);
    assert_eq!(records, lab.records());
    for name in rules::recorded::ALL {
        assert!(
            records.iter().any(|r| r == name),
            "{name} is not recorded by the rule file"
        );
    }
    // The baseline's window and thresholds, as `lab up` describes them when none comes.
    let latch = lab
        .rules()
        .find(|(_, r)| r.name() == rules::recorded::JOB_SAMPLES_BASELINE)
        .unwrap()
        .1
        .expr_text
        .clone();
    use lab_telemetry::baseline::{BASELINE_MAX_VARIATION, BASELINE_MIN_SAMPLES, BASELINE_WINDOW_MS};
    assert!(latch.contains(&format!(
        "[{}s]) >= {}",
        BASELINE_WINDOW_MS / 1000,
        BASELINE_MIN_SAMPLES
    )));
    assert!(latch.contains(&format!("< {} * avg_over_time", BASELINE_MAX_VARIATION)));
}

#[test]
fn series_notation() {
    assert_eq!(
        expand("1+2x2 stale 5x1 7-1x1 3"),
        vec![
            Some(1.0),
            Some(3.0),
            Some(5.0),
            None,
            Some(5.0),
            Some(5.0),
            Some(7.0),
            Some(6.0),
            Some(3.0)
        ]
    );
}
