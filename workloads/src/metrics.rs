//! The rank's metrics on `prometheus-client`: families registered by name, so that each call site in the rank
//! stays one line, and written by its Prometheus text encoder (format 0.0.4).
//!
//! Names come from [`lab_model::metrics`], and every one is described in `docs/metrics.md`. Every family is
//! keyed by its label pairs, an unlabelled series too, so that a series exists only once the rank sets or
//! touches it (`lab_loss` is absent until the first step), and a gauge that no longer applies can go.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, prometheus_text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// Label pairs of one series, in the order the caller gives them.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

/// What kind of metric a family is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A count of events, written as an integer.
    Counter,
    /// A counter of a measured amount, such as seconds.
    FloatCounter,
    /// A whole number that goes up and down, written as an integer.
    Gauge,
    /// A measured value that goes up and down.
    FloatGauge,
    /// With the upper bounds of its buckets, ascending (`+Inf` is implied).
    Histogram(Vec<f64>),
}

type Key = Vec<(String, String)>;
type FloatCounter = Counter<f64, AtomicU64>;
type FloatGauge = Gauge<f64, AtomicU64>;

/// Makes a family's histograms with its buckets.
#[derive(Debug, Clone)]
struct Buckets(std::sync::Arc<[f64]>);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// A family whose `# HELP` and `# TYPE` lines are written before its first series too, as the rank has
/// always written them (`prometheus-client` leaves an empty family out of the text).
#[derive(Debug)]
struct Described<F>(F);

impl<F: EncodeMetric> EncodeMetric for Described<F> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}

#[derive(Debug)]
enum Metric {
    Counter(Family<Key, Counter>),
    FloatCounter(Family<Key, FloatCounter>),
    Gauge(Family<Key, Gauge>),
    FloatGauge(Family<Key, FloatGauge>),
    Histogram(Family<Key, Histogram, Buckets>),
}

#[derive(Debug, Default)]
struct Inner {
    registry: prometheus_client::registry::Registry,
    families: HashMap<&'static str, Metric>,
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
    ///
    /// `name` is the name the samples carry, a counter's with its `_total`; `help` ends with a full stop.
    /// The encoder writes both suffixes itself, so they are taken off here.
    pub fn register(&self, name: &'static str, help: &'static str, kind: Kind) {
        let mut inner = self.lock();
        if inner.families.contains_key(name) {
            return;
        }
        debug_assert!(help.ends_with('.'), "help of {name} ends with a full stop");
        let help = help.strip_suffix('.').unwrap_or(help);
        let counter = |name: &'static str| {
            debug_assert!(name.ends_with("_total"), "counter {name} ends with _total");
            name.strip_suffix("_total").unwrap_or(name)
        };
        let Inner { registry, families } = &mut *inner;
        let metric = match kind {
            Kind::Counter => {
                let f = Family::<Key, Counter>::default();
                registry.register(counter(name), help, Described(f.clone()));
                Metric::Counter(f)
            }
            Kind::FloatCounter => {
                let f = Family::<Key, FloatCounter>::default();
                registry.register(counter(name), help, Described(f.clone()));
                Metric::FloatCounter(f)
            }
            Kind::Gauge => {
                let f = Family::<Key, Gauge>::default();
                registry.register(name, help, Described(f.clone()));
                Metric::Gauge(f)
            }
            Kind::FloatGauge => {
                let f = Family::<Key, FloatGauge>::default();
                registry.register(name, help, Described(f.clone()));
                Metric::FloatGauge(f)
            }
            Kind::Histogram(bounds) => {
                let f = Family::new_with_constructor(Buckets(bounds.into()));
                registry.register(name, help, Described(f.clone()));
                Metric::Histogram(f)
            }
        };
        families.insert(name, metric);
    }

    /// Registers a counter of events.
    pub fn counter(&self, name: &'static str, help: &'static str) {
        self.register(name, help, Kind::Counter);
    }

    /// Registers a counter of a measured amount (seconds).
    pub fn float_counter(&self, name: &'static str, help: &'static str) {
        self.register(name, help, Kind::FloatCounter);
    }

    /// Registers a gauge of whole numbers.
    pub fn gauge(&self, name: &'static str, help: &'static str) {
        self.register(name, help, Kind::Gauge);
    }

    /// Registers a gauge of measured values.
    pub fn float_gauge(&self, name: &'static str, help: &'static str) {
        self.register(name, help, Kind::FloatGauge);
    }

    /// Registers a histogram with the given bucket upper bounds.
    pub fn histogram(&self, name: &'static str, help: &'static str, bounds: &[f64]) {
        self.register(name, help, Kind::Histogram(bounds.to_vec()));
    }

    /// Adds `v` to a counter (or a gauge), creating the series at zero first. An integer metric takes `v`
    /// rounded down.
    pub fn inc(&self, name: &str, labels: Labels<'_>, v: f64) {
        let inner = self.lock();
        let k = key(labels);
        match inner.families.get(name) {
            Some(Metric::Counter(f)) => {
                f.get_or_create(&k).inc_by(v as u64);
            }
            Some(Metric::FloatCounter(f)) => {
                f.get_or_create(&k).inc_by(v);
            }
            Some(Metric::Gauge(f)) => {
                f.get_or_create(&k).inc_by(v as i64);
            }
            Some(Metric::FloatGauge(f)) => {
                f.get_or_create(&k).inc_by(v);
            }
            other => unregistered(name, other),
        }
    }

    /// Sets a gauge (or a counter read from elsewhere, such as the cgroup's own counters).
    pub fn set(&self, name: &str, labels: Labels<'_>, v: f64) {
        Self::set_in(&self.lock(), name, labels, v);
    }

    /// Sets several at once: a scrape sees them all before or all after (a rank's step and the checksum
    /// of its model at that step, which peers at the same step must share).
    pub fn set_together(&self, values: &[(&str, Labels<'_>, f64)]) {
        let inner = self.lock();
        for (name, labels, v) in values {
            Self::set_in(&inner, name, labels, *v);
        }
    }

    fn set_in(inner: &Inner, name: &str, labels: Labels<'_>, v: f64) {
        let k = key(labels);
        match inner.families.get(name) {
            // A counter kept elsewhere is copied in as it is: its atomic is the one way to do that.
            Some(Metric::Counter(f)) => f.get_or_create(&k).inner().store(v as u64, Ordering::Relaxed),
            Some(Metric::FloatCounter(f)) => {
                f.get_or_create(&k).inner().store(v.to_bits(), Ordering::Relaxed)
            }
            Some(Metric::Gauge(f)) => {
                f.get_or_create(&k).set(v as i64);
            }
            Some(Metric::FloatGauge(f)) => {
                f.get_or_create(&k).set(v);
            }
            other => unregistered(name, other),
        }
    }

    /// Records one observation in a histogram.
    pub fn observe(&self, name: &str, labels: Labels<'_>, v: f64) {
        let inner = self.lock();
        match inner.families.get(name) {
            Some(Metric::Histogram(f)) => f.get_or_create(&key(labels)).observe(v),
            other => unregistered(name, other),
        }
    }

    /// Makes a series exist (at zero) so that rates over it are defined before the first event.
    pub fn touch(&self, name: &str, labels: Labels<'_>) {
        let inner = self.lock();
        let k = key(labels);
        match inner.families.get(name) {
            Some(Metric::Counter(f)) => drop(f.get_or_create(&k)),
            Some(Metric::FloatCounter(f)) => drop(f.get_or_create(&k)),
            Some(Metric::Gauge(f)) => drop(f.get_or_create(&k)),
            Some(Metric::FloatGauge(f)) => drop(f.get_or_create(&k)),
            Some(Metric::Histogram(f)) => drop(f.get_or_create(&k)),
            None => unregistered(name, None),
        }
    }

    /// Removes one series (a gauge that no longer applies, such as a CPU limit that was lifted).
    pub fn remove(&self, name: &str, labels: Labels<'_>) {
        let inner = self.lock();
        let k = key(labels);
        match inner.families.get(name) {
            Some(Metric::Counter(f)) => f.remove(&k),
            Some(Metric::FloatCounter(f)) => f.remove(&k),
            Some(Metric::Gauge(f)) => f.remove(&k),
            Some(Metric::FloatGauge(f)) => f.remove(&k),
            Some(Metric::Histogram(f)) => f.remove(&k),
            None => false,
        };
    }

    /// The value of a counter or gauge series (`None` for a histogram, whose value is its buckets).
    pub fn get(&self, name: &str, labels: Labels<'_>) -> Option<f64> {
        let inner = self.lock();
        let k = key(labels);
        match inner.families.get(name)? {
            Metric::Counter(f) => f.get(&k).map(|c| c.get() as f64),
            Metric::FloatCounter(f) => f.get(&k).map(|c| c.get()),
            Metric::Gauge(f) => f.get(&k).map(|g| g.get() as f64),
            Metric::FloatGauge(f) => f.get(&k).map(|g| g.get()),
            Metric::Histogram(_) => None,
        }
    }

    /// The whole registry in the Prometheus text format, version 0.0.4.
    pub fn encode(&self) -> String {
        let inner = self.lock();
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &inner.registry);
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the families as they were, still fine to read.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The `Content-Type` of [`Registry::encode`]'s text.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

fn unregistered(name: &str, found: Option<&Metric>) {
    debug_assert!(
        false,
        "metric {name} used before it was registered, or as another kind: {found:?}"
    );
}

fn key(labels: Labels<'_>) -> Key {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_set_together_are_scraped_together() {
        let r = std::sync::Arc::new(Registry::new());
        r.gauge("lab_step", "Step.");
        r.float_gauge("lab_model_checksum", "Checksum.");
        r.set_together(&[("lab_step", &[], 0.0), ("lab_model_checksum", &[], 0.0)]);
        let w = r.clone();
        let writer = std::thread::spawn(move || {
            for i in 0..20_000 {
                let v = f64::from(i);
                w.set_together(&[("lab_step", &[], v), ("lab_model_checksum", &[], v)]);
            }
        });
        let value = |text: &str, name: &str| -> String {
            let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap();
            line.rsplit(' ')
                .next()
                .unwrap()
                .trim_end_matches(".0")
                .to_string()
        };
        let mut scrapes = 0;
        while !writer.is_finished() || scrapes == 0 {
            let text = r.encode();
            assert_eq!(
                value(&text, "lab_step"),
                value(&text, "lab_model_checksum"),
                "{text}"
            );
            scrapes += 1;
        }
        writer.join().unwrap();
    }

    #[test]
    fn encodes_counters_gauges_and_histograms() {
        let r = Registry::new();
        r.counter("lab_steps_total", "Training steps.");
        r.float_gauge("lab_loss", "Loss of the last step.");
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
        assert_eq!(r.get("lab_steps_total", &[]), Some(3.0));
        assert_eq!(r.get("lab_loss", &[]), Some(0.25));
    }

    #[test]
    fn a_family_without_series_keeps_its_help_and_type() {
        let r = Registry::new();
        r.gauge("lab_world_size", "The world size.");
        r.counter("lab_steps_total", "Steps.");
        r.touch("lab_steps_total", &[]);
        assert_eq!(
            r.encode(),
            "# HELP lab_world_size The world size.\n# TYPE lab_world_size gauge\n\
             # HELP lab_steps_total Steps.\n# TYPE lab_steps_total counter\nlab_steps_total 0\n"
        );
    }

    #[test]
    fn special_values_and_removal() {
        let r = Registry::new();
        r.float_gauge("g", "G.");
        r.set("g", &[("a", "1")], f64::NAN);
        r.set("g", &[("a", "2")], f64::INFINITY);
        r.set("g", &[("a", "3")], 1e-7);
        let text = r.encode();
        assert!(text.contains("g{a=\"1\"} NaN\n"));
        assert!(text.contains("g{a=\"2\"} +Inf\n"));
        // The shortest form that reads back as the same number.
        assert!(text.contains("g{a=\"3\"} 1e-7\n"), "{text}");
        r.remove("g", &[("a", "1")]);
        assert!(!r.encode().contains("a=\"1\""));
    }
}
