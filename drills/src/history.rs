//! The lab's recent past, as a steady-state window sees it. The lab watches itself between commands (the
//! watcher beside `lab up`) and a drill run keeps ticking between drills; both keep the last minute of
//! [`SteadyPoint`]s. A drill's baseline may then start from that past instead of waiting for a new window:
//! only the moments since the lab's last change plus the drill's warm-up, with no fault injected and every
//! rank Ready, count — the same judgement a live window makes, on moments already seen.

use std::collections::VecDeque;
use std::path::Path;

use lab_model::Snapshot;
use lab_model::snapshot::{Baseline, GoldenSignal, step_time};
use serde::{Deserialize, Serialize};

/// How much of the past is kept.
pub const KEEP_MS: u64 = 60_000;
/// The newest kept moment must be this recent for the past to be used.
pub const FRESH_MS: u64 = 3_000;

/// One moment of the lab, as a steady-state window needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyPoint {
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
    pub samples_per_s: Option<f64>,
    pub step_seconds: Option<f64>,
    /// Why the lab was not steady at that moment (a rank not Ready, a signal firing, no training).
    pub unsteady: Option<String>,
    /// The baseline the golden-signal rules compared with at that moment.
    pub learned: Option<Baseline>,
    /// Faults injected at that moment.
    pub faults: usize,
    /// The newest change the lab had recorded by then, ms since the Unix epoch.
    pub last_change_ms: Option<u64>,
    /// The database writer's commits per second, when the lab runs one.
    #[serde(default)]
    pub commits_per_s: Option<f64>,
}

impl SteadyPoint {
    /// The moment `s` describes.
    pub fn of(s: &Snapshot) -> Self {
        SteadyPoint {
            at_ms: s.at_ms,
            samples_per_s: s.training.samples_per_s,
            step_seconds: step_time(s),
            unsteady: unsteady_now(s),
            learned: s.training.baseline,
            faults: s.faults.len(),
            last_change_ms: s.changes.iter().map(|c| c.at_ms).max(),
            commits_per_s: s.database.as_ref().map(|d| d.commits_per_s),
        }
    }
}

/// Why the lab is not steady in this snapshot, if it is not.
pub fn unsteady_now(s: &Snapshot) -> Option<String> {
    let st = &s.status;
    let (ready, total) = st.ranks_ready();
    if total == 0 {
        return Some("no ranks reported yet".into());
    }
    if ready != total || total != st.ranks_desired as usize {
        return Some(format!(
            "{ready}/{total} ranks Running and Ready ({} asked for)",
            st.ranks_desired
        ));
    }
    // The throughput rule compares with the baseline the lab had; a drill measures its own and rebases the
    // rule on it, so only the other signals say the lab is not steady.
    if let Some(a) = s.alerts.iter().find(|a| a.signal != GoldenSignal::Throughput) {
        return Some(format!("{} is firing: {}", a.rule, a.summary));
    }
    match (s.training.samples_per_s, step_time(s)) {
        (Some(v), Some(_)) if v > 0.0 => None,
        _ => Some("the job is not training".into()),
    }
}

/// The last [`KEEP_MS`] of moments, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Recent {
    points: VecDeque<SteadyPoint>,
}

impl Recent {
    /// Keeps `p`, forgetting what is older than [`KEEP_MS`] before it.
    pub fn push(&mut self, p: SteadyPoint) {
        let at = p.at_ms;
        self.points.push_back(p);
        while self
            .points
            .front()
            .is_some_and(|q| at.saturating_sub(q.at_ms) > KEEP_MS)
        {
            self.points.pop_front();
        }
    }

    /// The moments a baseline may start from at `now_ms` with a warm-up of `warmup_ms`: empty unless the
    /// newest is fresh; only those after the last change plus the warm-up, with no fault injected, and after
    /// the last moment that was not steady (a window must be steady all through).
    pub fn usable(&self, now_ms: u64, warmup_ms: u64) -> Vec<SteadyPoint> {
        let Some(last) = self.points.back() else {
            return Vec::new();
        };
        if last.at_ms > now_ms || now_ms - last.at_ms > FRESH_MS || last.faults > 0 {
            return Vec::new();
        }
        let from = last.last_change_ms.map_or(0, |c| c + warmup_ms);
        let mut out: Vec<SteadyPoint> = Vec::new();
        for p in self.points.iter().filter(|p| p.at_ms >= from) {
            if p.unsteady.is_some() || p.faults > 0 || p.last_change_ms != last.last_change_ms {
                out.clear();
            } else {
                out.push(p.clone());
            }
        }
        out
    }

    /// Reads what the lab's watcher kept at `path`; empty when there is none or it cannot be read.
    pub fn read(path: &Path) -> Self {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The newest moment kept.
    pub fn newest(&self) -> Option<&SteadyPoint> {
        self.points.back()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The moments kept, oldest first.
    pub fn points(&self) -> impl Iterator<Item = &SteadyPoint> {
        self.points.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(at_ms: u64, change: Option<u64>, unsteady: bool, faults: usize) -> SteadyPoint {
        SteadyPoint {
            at_ms,
            samples_per_s: Some(1000.0),
            step_seconds: Some(0.03),
            unsteady: unsteady.then(|| "rank-1 not Ready".to_string()),
            learned: None,
            faults,
            last_change_ms: change,
            commits_per_s: None,
        }
    }

    fn recent(points: impl IntoIterator<Item = SteadyPoint>) -> Recent {
        let mut r = Recent::default();
        for q in points {
            r.push(q);
        }
        r
    }

    #[test]
    fn keeps_one_minute() {
        let r = recent((0..100).map(|i| p(i * 1000, None, false, 0)));
        assert_eq!(r.points.len(), 61);
        assert_eq!(r.points.front().unwrap().at_ms, 39_000);
    }

    #[test]
    fn only_moments_after_the_last_change_and_its_warm_up_count() {
        let r = recent((0..30).map(|i| p(i * 1000, Some(10_000), false, 0)));
        let u = r.usable(29_500, 5_000);
        assert_eq!(u.first().unwrap().at_ms, 15_000);
        assert_eq!(u.len(), 15);
    }

    #[test]
    fn a_moment_that_was_not_steady_starts_over() {
        let r = recent((0..30).map(|i| p(i * 1000, None, i == 20, 0)));
        let u = r.usable(29_000, 0);
        assert_eq!(u.first().unwrap().at_ms, 21_000);
    }

    #[test]
    fn a_newer_change_or_a_fault_or_a_stale_past_gives_nothing_before_it() {
        // A change recorded at 25 s is seen from the moment at 26 s on.
        let r = recent((0..30).map(|i| p(i * 1000, if i > 25 { Some(25_000) } else { None }, false, 0)));
        assert_eq!(r.usable(29_000, 0).first().unwrap().at_ms, 26_000);
        let r = recent((0..30).map(|i| p(i * 1000, None, false, usize::from(i == 29))));
        assert!(r.usable(29_000, 0).is_empty());
        let r = recent((0..30).map(|i| p(i * 1000, None, false, 0)));
        assert!(r.usable(29_000 + FRESH_MS + 1, 0).is_empty());
        assert!(
            r.usable(28_000, 0).is_empty(),
            "a past from the future is not used"
        );
        assert!(Recent::default().usable(0, 0).is_empty());
    }
}
