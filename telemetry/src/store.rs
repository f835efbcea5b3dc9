//! Bounded in-memory time series, fed by scrapes and by the rules' own recorded results.
//!
//! The store keeps what the rules and views read, and no more: samples older than the retention are
//! dropped every tick, and so are series that went stale. Staleness follows Prometheus: when a target
//! fails its scrape, disappears, or stops exporting a series, the series gets a stale marker, so an
//! instant lookup no longer sees its last value (range functions simply skip the marker).

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::expo::Sample;
use crate::labels::Labels;

/// The label the store adds to every scraped sample: the instance the target belongs to (`rank-1`).
pub const INSTANCE: &str = "instance";

/// How far back an instant lookup searches for the latest sample, as in Prometheus.
pub const LOOKBACK_MS: i64 = 5 * 60 * 1000;

#[derive(Debug, Clone, Copy)]
struct Entry {
    t: i64,
    v: f64,
    stale: bool,
}

/// Samples of many series, by metric name and label set.
#[derive(Debug)]
pub struct Store {
    series: HashMap<String, HashMap<Labels, VecDeque<Entry>>>,
    /// The series each target (or each recorded rule, keyed `rule:<name>`) wrote on its last write.
    owners: HashMap<String, BTreeSet<(String, Labels)>>,
    retention_ms: i64,
}

impl Store {
    /// An empty store that keeps `retention_ms` of history.
    pub fn new(retention_ms: i64) -> Self {
        Store {
            series: HashMap::new(),
            owners: HashMap::new(),
            retention_ms,
        }
    }

    /// Adds one successful scrape of `instance` taken at `t`. Series the target exported last time but not
    /// now get a stale marker. A sample's own `instance` label is kept as `exported_instance`.
    pub fn ingest(&mut self, instance: &str, t: i64, samples: Vec<Sample>) {
        let mut now_seen = BTreeSet::new();
        for s in samples {
            let mut labels = s.labels;
            if let Some(v) = labels.remove(INSTANCE) {
                labels.set("exported_instance", v);
            }
            labels.set(INSTANCE, instance);
            self.push(
                &s.name,
                &labels,
                Entry {
                    t,
                    v: s.value,
                    stale: false,
                },
            );
            now_seen.insert((s.name, labels));
        }
        self.replace_owned(instance.to_string(), now_seen, t);
    }

    /// Marks every series of `instance` stale at `t`: its scrape failed or the target is gone.
    pub fn mark_stale(&mut self, instance: &str, t: i64) {
        self.replace_owned(instance.to_string(), BTreeSet::new(), t);
    }

    /// Writes a rule's result vector at `t`, as a recording rule does: one sample per element, and a stale
    /// marker for each series the rule wrote last time but not now.
    pub fn record(&mut self, name: &str, t: i64, vector: &[(Labels, f64)]) {
        let mut now_seen = BTreeSet::new();
        for (labels, v) in vector {
            self.push(
                name,
                labels,
                Entry {
                    t,
                    v: *v,
                    stale: false,
                },
            );
            now_seen.insert((name.to_string(), labels.clone()));
        }
        self.replace_owned(format!("rule:{name}"), now_seen, t);
    }

    /// Forgets every series named `name` and that the rule of that name wrote them: a recording rule that
    /// reads its own output (the baseline latch) starts again from nothing.
    pub fn forget(&mut self, name: &str) {
        self.series.remove(name);
        self.owners.remove(&format!("rule:{name}"));
    }

    /// The instances that wrote series on their last scrape.
    pub fn instances(&self) -> impl Iterator<Item = &str> {
        self.owners
            .iter()
            .filter(|(k, v)| !k.starts_with("rule:") && !v.is_empty())
            .map(|(k, _)| k.as_str())
    }

    fn replace_owned(&mut self, owner: String, now_seen: BTreeSet<(String, Labels)>, t: i64) {
        // Series keys carry the instance (or a rule's own name), so no two owners share a series.
        let gone: Vec<(String, Labels)> = match self.owners.get(&owner) {
            Some(before) => before.difference(&now_seen).cloned().collect(),
            None => Vec::new(),
        };
        self.owners.insert(owner, now_seen);
        for (name, labels) in gone {
            self.push(
                &name,
                &labels,
                Entry {
                    t,
                    v: f64::NAN,
                    stale: true,
                },
            );
        }
    }

    fn push(&mut self, name: &str, labels: &Labels, e: Entry) {
        let by_labels = match self.series.get_mut(name) {
            Some(m) => m,
            None => self.series.entry(name.to_string()).or_default(),
        };
        let q = match by_labels.get_mut(labels) {
            Some(q) => q,
            None => by_labels.entry(labels.clone()).or_default(),
        };
        // A second sample for the same instant, or one from the past, is dropped as Prometheus drops it.
        if q.back().is_some_and(|last| last.t >= e.t) {
            return;
        }
        if e.stale && q.back().is_none_or(|last| last.stale) {
            return;
        }
        q.push_back(e);
    }

    /// Every series named `name` whose labels pass `keep`, with its non-stale samples in `[t - range, t]`
    /// (both ends included, as Prometheus 2.x selects a range). Series with no sample there are left out.
    pub fn range(
        &self,
        name: &str,
        t: i64,
        range_ms: i64,
        keep: impl Fn(&Labels) -> bool,
    ) -> Vec<(Labels, Vec<(i64, f64)>)> {
        let Some(m) = self.series.get(name) else {
            return Vec::new();
        };
        let start = t - range_ms;
        let mut out: Vec<(Labels, Vec<(i64, f64)>)> = m
            .iter()
            .filter(|(l, _)| keep(l))
            .filter_map(|(l, q)| {
                // Samples are in time order: skip to the window's start.
                let from = q.partition_point(|e| e.t < start);
                let pts: Vec<(i64, f64)> = q
                    .range(from..)
                    .take_while(|e| e.t <= t)
                    .filter(|e| !e.stale)
                    .map(|e| (e.t, e.v))
                    .collect();
                (!pts.is_empty()).then(|| (l.clone(), pts))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every series named `name` whose labels pass `keep`, with its latest value at `t`: the newest sample
    /// no older than the lookback, unless that is a stale marker.
    pub fn instant(&self, name: &str, t: i64, keep: impl Fn(&Labels) -> bool) -> Vec<(Labels, f64)> {
        let Some(m) = self.series.get(name) else {
            return Vec::new();
        };
        let mut out: Vec<(Labels, f64)> = m
            .iter()
            .filter(|(l, _)| keep(l))
            .filter_map(|(l, q)| {
                let e = q.iter().rev().find(|e| e.t <= t)?;
                (!e.stale && e.t > t - LOOKBACK_MS).then(|| (l.clone(), e.v))
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Drops samples older than the retention, and series with nothing left but a stale marker.
    pub fn gc(&mut self, now: i64) {
        let oldest = now - self.retention_ms;
        for m in self.series.values_mut() {
            m.retain(|_, q| {
                // Keep the newest sample even when old, so an instant lookup within the lookback still
                // finds a gauge that a slow target wrote once.
                while q.len() > 1 && q.front().is_some_and(|e| e.t < oldest) {
                    q.pop_front();
                }
                !(q.len() == 1 && q.front().is_some_and(|e| e.stale && e.t < oldest))
            });
        }
        self.series.retain(|_, m| !m.is_empty());
    }

    /// How many series and samples the store holds (for the console's own figures and tests).
    pub fn size(&self) -> (usize, usize) {
        let series = self.series.values().map(HashMap::len).sum();
        let samples = self
            .series
            .values()
            .flat_map(|m| m.values())
            .map(VecDeque::len)
            .sum();
        (series, samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expo::parse;

    fn any(_: &Labels) -> bool {
        true
    }

    #[test]
    fn scraped_series_carry_the_instance() {
        let mut s = Store::new(60_000);
        s.ingest("rank-1", 1000, parse("x{instance=\"pod\"} 1").unwrap());
        let v = s.instant("x", 1000, any);
        assert_eq!(v[0].0.get(INSTANCE), Some("rank-1"));
        assert_eq!(v[0].0.get("exported_instance"), Some("pod"));
    }

    #[test]
    fn failed_scrape_hides_gauges_but_not_ranges() {
        let mut s = Store::new(60_000);
        s.ingest("rank-1", 1000, parse("x 1").unwrap());
        s.ingest("rank-1", 2000, parse("x 2").unwrap());
        s.mark_stale("rank-1", 3000);
        assert!(s.instant("x", 3000, any).is_empty());
        assert_eq!(s.instant("x", 2500, any).len(), 1);
        assert_eq!(
            s.range("x", 3000, 10_000, any)[0].1,
            vec![(1000, 1.0), (2000, 2.0)]
        );
        s.ingest("rank-1", 4000, parse("x 4").unwrap());
        assert_eq!(s.instant("x", 4000, any)[0].1, 4.0);
    }

    #[test]
    fn vanished_series_go_stale() {
        let mut s = Store::new(60_000);
        s.ingest("rank-1", 1000, parse("x 1\ny 1").unwrap());
        s.ingest("rank-1", 2000, parse("x 2").unwrap());
        assert!(s.instant("y", 2000, any).is_empty());
        assert_eq!(s.instant("x", 2000, any).len(), 1);
    }

    #[test]
    fn recorded_results_go_stale_when_the_rule_stops_producing_them() {
        let mut s = Store::new(60_000);
        let l = Labels::from_pairs([("server", "storage-1")]);
        s.record("r", 1000, &[(l.clone(), 1.0)]);
        assert_eq!(s.instant("r", 1000, any).len(), 1);
        s.record("r", 2000, &[]);
        assert!(s.instant("r", 2000, any).is_empty());
    }

    #[test]
    fn range_includes_both_ends_and_gc_bounds_memory() {
        let mut s = Store::new(5_000);
        for i in 0..20 {
            s.ingest("rank-1", i * 1000, parse(&format!("x {i}")).unwrap());
            s.gc(i * 1000);
        }
        assert_eq!(s.range("x", 19_000, 3_000, any)[0].1.len(), 4);
        assert_eq!(s.size(), (1, 6));
        s.mark_stale("rank-1", 20_000);
        s.gc(30_000);
        assert_eq!(s.size(), (0, 0));
    }

    #[test]
    fn duplicate_and_out_of_order_samples_are_dropped() {
        let mut s = Store::new(60_000);
        s.ingest("a", 2000, parse("x 1\nx 5").unwrap());
        s.ingest("a", 1000, parse("x 7").unwrap());
        assert_eq!(s.range("x", 2000, 10_000, any)[0].1, vec![(2000, 1.0)]);
    }
}
