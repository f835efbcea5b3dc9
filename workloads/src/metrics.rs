//! The rank's metrics: a small registry of counters, gauges and histograms, and its Prometheus text
//! exposition (format 0.0.4).
//!
//! Names come from [`lab_model::metrics`], and every one is described in `docs/metrics.md`. The registry
//! is one mutex over plain numbers: a rank touches it a dozen times per step, far below anything that
//! would show in a step time.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Mutex;

/// Label pairs of one series, in the order the caller gives them.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

/// What kind of metric a family is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Counter,
    Gauge,
    /// With the upper bounds of its buckets, ascending (`+Inf` is implied).
    Histogram(Vec<f64>),
}

#[derive(Debug, Clone)]
enum Series {
    Value(f64),
    Histogram { buckets: Vec<u64>, sum: f64, count: u64 },
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    series: BTreeMap<Vec<(String, String)>, Series>,
}

#[derive(Debug, Default)]
struct Inner {
    families: Vec<Family>,
    index: HashMap<&'static str, usize>,
}

/// A set of metric families, encoded in the order they were registered.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a family (again registering the same name is a no-op).
    pub fn register(&self, name: &'static str, help: &'static str, kind: Kind) {
        let mut inner = self.lock();
        if inner.index.contains_key(name) {
            return;
        }
        let i = inner.families.len();
        inner.families.push(Family {
            name,
            help,
            kind,
            series: BTreeMap::new(),
        });
        inner.index.insert(name, i);
    }

    /// Registers a counter.
    pub fn counter(&self, name: &'static str, help: &'static str) {
        self.register(name, help, Kind::Counter);
    }

    /// Registers a gauge.
    pub fn gauge(&self, name: &'static str, help: &'static str) {
        self.register(name, help, Kind::Gauge);
    }

    /// Registers a histogram with the given bucket upper bounds.
    pub fn histogram(&self, name: &'static str, help: &'static str, bounds: &[f64]) {
        self.register(name, help, Kind::Histogram(bounds.to_vec()));
    }

    /// Adds `v` to a counter (or a gauge), creating the series at zero first.
    pub fn inc(&self, name: &str, labels: Labels<'_>, v: f64) {
        self.with_series(name, labels, |s, _| {
            if let Series::Value(x) = s {
                *x += v;
            }
        });
    }

    /// Sets a gauge (or a counter read from elsewhere, such as the cgroup's own counters).
    pub fn set(&self, name: &str, labels: Labels<'_>, v: f64) {
        self.with_series(name, labels, |s, _| {
            if let Series::Value(x) = s {
                *x = v;
            }
        });
    }

    /// Records one observation in a histogram.
    pub fn observe(&self, name: &str, labels: Labels<'_>, v: f64) {
        self.with_series(name, labels, |s, kind| {
            if let (Series::Histogram { buckets, sum, count }, Kind::Histogram(bounds)) = (s, kind) {
                if let Some(i) = bounds.iter().position(|b| v <= *b) {
                    buckets[i] += 1;
                }
                *sum += v;
                *count += 1;
            }
        });
    }

    /// Makes a series exist (at zero) so that rates over it are defined before the first event.
    pub fn touch(&self, name: &str, labels: Labels<'_>) {
        self.with_series(name, labels, |_, _| {});
    }

    /// Removes one series (a gauge that no longer applies, such as a CPU limit that was lifted).
    pub fn remove(&self, name: &str, labels: Labels<'_>) {
        let mut inner = self.lock();
        if let Some(&i) = inner.index.get(name) {
            inner.families[i].series.remove(&key(labels));
        }
    }

    /// The value of a counter or gauge series, or the count of a histogram series.
    pub fn get(&self, name: &str, labels: Labels<'_>) -> Option<f64> {
        let inner = self.lock();
        let i = *inner.index.get(name)?;
        match inner.families[i].series.get(&key(labels))? {
            Series::Value(v) => Some(*v),
            Series::Histogram { count, .. } => Some(*count as f64),
        }
    }

    /// The whole registry in the Prometheus text format, version 0.0.4.
    pub fn encode(&self) -> String {
        let inner = self.lock();
        let mut out = String::with_capacity(8 * 1024);
        for f in &inner.families {
            let kind = match f.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram(_) => "histogram",
            };
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
            let _ = writeln!(out, "# TYPE {} {kind}", f.name);
            for (labels, s) in &f.series {
                match (s, &f.kind) {
                    (Series::Value(v), _) => {
                        let _ = writeln!(out, "{}{} {}", f.name, label_text(labels, None), fmt_value(*v));
                    }
                    (Series::Histogram { buckets, sum, count }, Kind::Histogram(bounds)) => {
                        let mut cumulative = 0;
                        for (b, n) in bounds.iter().zip(buckets) {
                            cumulative += n;
                            let le = fmt_value(*b);
                            let _ = writeln!(
                                out,
                                "{}_bucket{} {cumulative}",
                                f.name,
                                label_text(labels, Some(&le))
                            );
                        }
                        let _ = writeln!(
                            out,
                            "{}_bucket{} {count}",
                            f.name,
                            label_text(labels, Some("+Inf"))
                        );
                        let _ = writeln!(
                            out,
                            "{}_sum{} {}",
                            f.name,
                            label_text(labels, None),
                            fmt_value(*sum)
                        );
                        let _ = writeln!(out, "{}_count{} {count}", f.name, label_text(labels, None));
                    }
                    _ => {}
                }
            }
        }
        out
    }

    fn with_series(&self, name: &str, labels: Labels<'_>, f: impl FnOnce(&mut Series, &Kind)) {
        let mut inner = self.lock();
        let Some(&i) = inner.index.get(name) else {
            debug_assert!(false, "metric {name} used before it was registered");
            return;
        };
        let fam = &mut inner.families[i];
        let series = fam.series.entry(key(labels)).or_insert_with(|| match &fam.kind {
            Kind::Histogram(b) => Series::Histogram {
                buckets: vec![0; b.len()],
                sum: 0.0,
                count: 0,
            },
            _ => Series::Value(0.0),
        });
        f(series, &fam.kind);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain numbers behind, still fine to read.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn key(labels: Labels<'_>) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

fn label_text(labels: &[(String, String)], le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut s = String::from("{");
    let mut first = true;
    for (k, v) in labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(le.map(|le| ("le", le)))
    {
        if !first {
            s.push(',');
        }
        first = false;
        let _ = write!(s, "{k}=\"{}\"", escape_label(v));
    }
    s.push('}');
    s
}

/// A sample value as Prometheus writes it (`NaN`, `+Inf`, `-Inf`, or a plain decimal).
pub fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v == f64::INFINITY {
        "+Inf".to_string()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_string()
    } else {
        format!("{v}")
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_gauges_and_histograms() {
        let r = Registry::new();
        r.counter("lab_steps_total", "Training steps.");
        r.gauge("lab_loss", "Loss of the last step.");
        r.histogram("lab_read_seconds", "Read latency.", &[0.001, 0.01, 0.1]);
        r.counter("lab_errors_total", "Errors.");
        r.inc("lab_steps_total", &[], 1.0);
        r.inc("lab_steps_total", &[], 2.0);
        r.set("lab_loss", &[], 0.25);
        r.observe("lab_read_seconds", &[("server", "storage-1")], 0.0005);
        r.observe("lab_read_seconds", &[("server", "storage-1")], 0.05);
        r.observe("lab_read_seconds", &[("server", "storage-1")], 3.0);
        r.touch("lab_errors_total", &[("server", "a\"b\\c\nd"), ("kind", "http")]);
        let want = "\
# HELP lab_steps_total Training steps.
# TYPE lab_steps_total counter
lab_steps_total 3
# HELP lab_loss Loss of the last step.
# TYPE lab_loss gauge
lab_loss 0.25
# HELP lab_read_seconds Read latency.
# TYPE lab_read_seconds histogram
lab_read_seconds_bucket{server=\"storage-1\",le=\"0.001\"} 1
lab_read_seconds_bucket{server=\"storage-1\",le=\"0.01\"} 1
lab_read_seconds_bucket{server=\"storage-1\",le=\"0.1\"} 2
lab_read_seconds_bucket{server=\"storage-1\",le=\"+Inf\"} 3
lab_read_seconds_sum{server=\"storage-1\"} 3.0505
lab_read_seconds_count{server=\"storage-1\"} 3
# HELP lab_errors_total Errors.
# TYPE lab_errors_total counter
lab_errors_total{server=\"a\\\"b\\\\c\\nd\",kind=\"http\"} 0
";
        assert_eq!(r.encode(), want);
        assert_eq!(r.get("lab_read_seconds", &[("server", "storage-1")]), Some(3.0));
        assert_eq!(r.get("lab_loss", &[]), Some(0.25));
    }

    #[test]
    fn special_values_and_removal() {
        let r = Registry::new();
        r.gauge("g", "G.");
        r.set("g", &[("a", "1")], f64::NAN);
        r.set("g", &[("a", "2")], f64::INFINITY);
        r.set("g", &[("a", "3")], 1e-7);
        let text = r.encode();
        assert!(text.contains("g{a=\"1\"} NaN\n"));
        assert!(text.contains("g{a=\"2\"} +Inf\n"));
        assert!(text.contains("g{a=\"3\"} 0.0000001\n"));
        r.remove("g", &[("a", "1")]);
        assert!(!r.encode().contains("a=\"1\""));
    }
}
