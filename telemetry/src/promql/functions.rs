//! The arithmetic of PromQL's functions, computed the way Prometheus 2.x computes them, so that the lab's
//! evaluator gives the numbers Prometheus gives on the same series.
//!
//! `rate` extrapolates to the window's edges and corrects counter resets (a restarted rank never gives a
//! negative rate); `histogram_quantile` interpolates inside the bucket that holds the rank; `quantile` is
//! the aggregation operator. Each function names the Prometheus behaviour it mirrors.

use std::collections::BTreeMap;

use crate::labels::Labels;

/// An instant vector: one value per label set.
pub type Vector = Vec<(Labels, f64)>;

/// `rate()` / `increase()` over one series' samples in `[end - range, end]`, as Prometheus'
/// `extrapolatedRate`: the increase between the first and last sample, plus every value a counter reset
/// dropped, extrapolated towards the window's edges (all the way when the gap is under 1.1 sample
/// intervals, else half an interval; never below the counter's zero point). `None` with fewer than two
/// samples.
pub fn extrapolated_rate(points: &[(i64, f64)], end: i64, range_ms: i64, is_rate: bool) -> Option<f64> {
    let (first, last) = match points {
        [first, .., last] => (*first, *last),
        _ => return None,
    };
    let start = end - range_ms;
    let mut result = last.1 - first.1;
    for w in points.windows(2) {
        if w[1].1 < w[0].1 {
            result += w[0].1;
        }
    }
    let sampled = (last.0 - first.0) as f64 / 1000.0;
    if sampled <= 0.0 {
        return None;
    }
    let mut to_start = (first.0 - start) as f64 / 1000.0;
    let mut to_end = (end - last.0) as f64 / 1000.0;
    let average = sampled / (points.len() - 1) as f64;
    let threshold = average * 1.1;
    if to_start >= threshold {
        to_start = average / 2.0;
    }
    if result > 0.0 && first.1 >= 0.0 {
        let to_zero = sampled * (first.1 / result);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    if to_end >= threshold {
        to_end = average / 2.0;
    }
    let mut factor = (sampled + to_start + to_end) / sampled;
    if is_rate {
        factor /= range_ms as f64 / 1000.0;
    }
    Some(result * factor)
}

/// `histogram_quantile(q, v)` over classic buckets: groups `v` by every label but `le`, and reads the
/// quantile from each group's cumulative counts. Series whose `le` is not a number are ignored; a group
/// whose quantile is undefined (no `+Inf` bucket, no observations) gives NaN, as in Prometheus.
pub fn histogram_quantile(q: f64, v: Vector) -> Vector {
    let mut groups: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
    for (l, count) in v {
        let Some(le) = l.get("le").and_then(|s| s.parse::<f64>().ok()) else {
            continue;
        };
        groups.entry(l.without(&["le"])).or_default().push((le, count));
    }
    groups
        .into_iter()
        .map(|(l, mut b)| (l, bucket_quantile(q, &mut b)))
        .collect()
}

/// The quantile of one histogram, from `(upper bound, cumulative count)` buckets (Prometheus'
/// `bucketQuantile`): sorted, equal bounds merged, counts made monotonic, then linear interpolation
/// inside the bucket that holds rank `q × total`; the highest finite bound when the rank falls in `+Inf`.
pub fn bucket_quantile(q: f64, buckets: &mut Vec<(f64, f64)>) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if buckets.last().is_none_or(|b| b.0 != f64::INFINITY) {
        return f64::NAN;
    }
    buckets.dedup_by(|later, kept| {
        if later.0 == kept.0 {
            kept.1 += later.1;
            true
        } else {
            false
        }
    });
    let mut max = f64::NEG_INFINITY;
    for b in buckets.iter_mut() {
        if b.1 > max {
            max = b.1;
        } else {
            b.1 = max;
        }
    }
    let n = buckets.len();
    if n < 2 {
        return f64::NAN;
    }
    let observations = buckets[n - 1].1;
    if observations == 0.0 || observations.is_nan() {
        return f64::NAN;
    }
    let mut rank = q * observations;
    let b = buckets[..n - 1].iter().position(|x| x.1 >= rank).unwrap_or(n - 1);
    if b == n - 1 {
        return buckets[n - 2].0;
    }
    if b == 0 && buckets[0].0 <= 0.0 {
        return buckets[0].0;
    }
    let (mut start, end, mut count) = (0.0, buckets[b].0, buckets[b].1);
    if b > 0 {
        start = buckets[b - 1].0;
        count -= buckets[b - 1].1;
        rank -= buckets[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

/// The `quantile(q, v)` aggregation: linear interpolation between the sorted values at rank `q × (n-1)`.
/// NaN for an empty vector. NaN elements sort below every number, as in Prometheus 2.x, so a median over
/// servers that had no reads can itself be NaN (and then no comparison with it holds).
pub fn quantile(q: f64, values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    if q < 0.0 {
        return f64::NEG_INFINITY;
    }
    if q > 1.0 {
        return f64::INFINITY;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        (false, false) => a.total_cmp(b),
    });
    let n = v.len() as f64;
    let rank = q * (n - 1.0);
    let lower = rank.floor().max(0.0);
    let upper = (lower + 1.0).min(n - 1.0);
    let weight = rank - rank.floor();
    v[lower as usize] * (1.0 - weight) + v[upper as usize] * weight
}

/// `avg_over_time`.
pub fn avg_over_time(points: &[(i64, f64)]) -> f64 {
    if points.is_empty() {
        return f64::NAN;
    }
    points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64
}

/// `min_over_time`.
pub fn min_over_time(points: &[(i64, f64)]) -> f64 {
    points
        .iter()
        .map(|p| p.1)
        .fold(f64::NAN, |m, x| if m.is_nan() || x < m { x } else { m })
}

/// `stddev_over_time`: the population standard deviation.
pub fn stddev_over_time(points: &[(i64, f64)]) -> f64 {
    let (mut count, mut mean, mut m2) = (0.0, 0.0, 0.0);
    for &(_, x) in points {
        count += 1.0;
        let delta = x - mean;
        mean += delta / count;
        m2 += delta * (x - mean);
    }
    if count == 0.0 {
        f64::NAN
    } else {
        (m2 / count).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn rate_of_a_steady_counter_is_exact() {
        let pts: Vec<(i64, f64)> = (0..=10).map(|i| (i * 1000, i as f64 * 100.0)).collect();
        assert!(close(
            extrapolated_rate(&pts, 10_000, 10_000, true).unwrap(),
            100.0
        ));
    }

    #[test]
    fn rate_extrapolates_no_further_than_the_counters_zero() {
        // Two samples one second apart starting at zero, in a 10 s window: Prometheus gives 100/10.
        let pts = [(0, 0.0), (1000, 100.0)];
        assert!(close(extrapolated_rate(&pts, 1000, 10_000, true).unwrap(), 10.0));
        // Starting far from zero and far from the window start: extrapolated by half an interval.
        let pts = [(5000, 1000.0), (6000, 1100.0), (7000, 1200.0)];
        let r = extrapolated_rate(&pts, 7000, 10_000, true).unwrap();
        assert!(close(r, 200.0 * (2.0 + 0.5) / 2.0 / 10.0));
    }

    #[test]
    fn counter_reset_never_gives_a_negative_rate() {
        // A rank restarts: its counter goes 500, 600, then 0, 100, 200.
        let pts = [
            (0, 500.0),
            (1000, 600.0),
            (2000, 0.0),
            (3000, 100.0),
            (4000, 200.0),
        ];
        let r = extrapolated_rate(&pts, 4000, 4000, false).unwrap();
        assert!(close(r, 300.0), "{r}");
        assert!(extrapolated_rate(&[(0, 1.0)], 0, 10_000, true).is_none());
    }

    #[test]
    fn histogram_quantile_interpolates_within_the_bucket() {
        let mut b = vec![(0.001, 0.0), (0.005, 50.0), (0.01, 100.0), (f64::INFINITY, 100.0)];
        assert!(close(bucket_quantile(0.5, &mut b), 0.005));
        let mut b = vec![(f64::INFINITY, 10.0), (0.1, 2.0), (0.5, 10.0)];
        assert!(close(bucket_quantile(0.5, &mut b), 0.1 + 0.4 * (3.0 / 8.0)));
        // Rank in +Inf: the highest finite bound.
        let mut b = vec![(0.1, 0.0), (f64::INFINITY, 5.0)];
        assert!(close(bucket_quantile(0.5, &mut b), 0.1));
        assert!(bucket_quantile(0.5, &mut vec![(0.1, 0.0), (f64::INFINITY, 0.0)]).is_nan());
        assert!(bucket_quantile(0.5, &mut vec![(0.1, 1.0), (1.0, 1.0)]).is_nan());
        // Non-monotonic counts (scraped mid-update) are made monotonic.
        let mut b = vec![(0.1, 5.0), (0.2, 4.0), (f64::INFINITY, 10.0)];
        assert!(close(bucket_quantile(0.5, &mut b), 0.1));
    }

    #[test]
    fn histogram_quantile_groups_by_all_but_le() {
        let v = vec![
            (Labels::from_pairs([("server", "s1"), ("le", "0.1")]), 10.0),
            (Labels::from_pairs([("server", "s1"), ("le", "+Inf")]), 10.0),
            (Labels::from_pairs([("server", "s2"), ("le", "1")]), 0.0),
            (Labels::from_pairs([("server", "s2"), ("le", "+Inf")]), 4.0),
            (Labels::from_pairs([("server", "s2"), ("le", "bad")]), 4.0),
        ];
        let q = histogram_quantile(0.5, v);
        assert_eq!(q.len(), 2);
        assert!(close(q[0].1, 0.05));
        assert!(close(q[1].1, 1.0));
    }

    #[test]
    fn quantile_aggregation_matches_promql() {
        assert!(close(quantile(0.5, &[0.5, 0.003, 0.002]), 0.003));
        assert!(close(quantile(0.5, &[1.0, 2.0, 3.0, 4.0]), 2.5));
        assert!(quantile(0.5, &[]).is_nan());
        assert!(close(quantile(0.5, &[0.5, f64::NAN, 0.003]), 0.003));
        assert!(quantile(0.5, &[0.5, f64::NAN, f64::NAN]).is_nan());
    }

    #[test]
    fn over_time_functions() {
        let pts = [(0, 1.0), (1, 3.0)];
        assert!(close(avg_over_time(&pts), 2.0));
        assert!(close(min_over_time(&pts), 1.0));
        assert!(close(stddev_over_time(&pts), 1.0));
        assert!(min_over_time(&[]).is_nan());
    }
}
