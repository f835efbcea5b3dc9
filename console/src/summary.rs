//! The words and figures both screens share: the one-glance headline, and how latencies, durations and
//! CPU quantities are written. Pure functions of a snapshot and a time.

use lab_model::Snapshot;
use lab_model::format::latency;
use lab_model::snapshot::{Alert, GoldenSignal};
use lab_model::status::{Phase, Role};

/// How a part of the headline should look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Good,
    Warn,
    Bad,
    Plain,
}

/// One part of the headline, e.g. `Kubernetes: 4/4 Ready`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub text: String,
    pub tone: Tone,
}

/// The alert a person should read first: the most specific cause before its effects.
pub fn lead_alert(alerts: &[Alert]) -> Option<&Alert> {
    let rank = |a: &Alert| match (a.signal, a.rule.as_str()) {
        (GoldenSignal::Latency, _) => 0,
        (GoldenSignal::Saturation, "LabRankCpuThrottled" | "LabRankHung") => 1,
        (GoldenSignal::Saturation, "LabRanksWaitingForPeers" | "LabRankComputeSlow") => 2,
        (GoldenSignal::Errors, _) => 3,
        (GoldenSignal::Saturation, _) => 4,
        (GoldenSignal::Throughput, _) => 5,
    };
    alerts.iter().min_by_key(|a| (rank(a), a.since_ms))
}

/// The headline: Kubernetes' view, the job's own view, and the lead alert, e.g.
/// `Kubernetes: 4/4 Ready · Training: 7% of normal · storage-1 read p50 488 ms (siblings 3 ms)`.
pub fn headline(s: &Snapshot) -> Vec<Segment> {
    let (ready, total) = s.status.ranks_ready();
    let pending: Vec<_> = s.status.ranks().filter(|p| p.phase == Phase::Pending).collect();
    let storage_down: Vec<_> = s
        .status
        .pods
        .iter()
        .filter(|p| p.role == Role::StorageServer && !p.is_running_ready())
        .collect();
    let mut k8s = format!("Kubernetes: {ready}/{total} Ready");
    if let Some(p) = pending.first() {
        k8s.push_str(&format!(", {} Pending", pending.len()));
        if let Some(r) = &p.reason {
            k8s.push_str(&format!(" ({r})"));
        }
    }
    for p in &storage_down {
        k8s.push_str(&format!(", {} not Ready", p.name));
    }
    let k8s_tone = if ready == total && storage_down.is_empty() {
        Tone::Good
    } else {
        Tone::Warn
    };
    let t = &s.training;
    let (training, tone) = match (t.pct_of_baseline, t.samples_per_s) {
        (Some(p), _) => (
            format!("Training: {}% of normal", fmt_pct(p)),
            if p < 50.0 {
                Tone::Bad
            } else if p < 90.0 {
                Tone::Warn
            } else {
                Tone::Good
            },
        ),
        (None, Some(v)) => (
            format!("Training: {v:.0} samples/s (learning its baseline)"),
            Tone::Plain,
        ),
        (None, None) => ("Training: no figures yet".to_string(), Tone::Plain),
    };
    let mut out = vec![
        Segment {
            text: k8s,
            tone: k8s_tone,
        },
        Segment { text: training, tone },
    ];
    match lead_alert(&s.alerts) {
        Some(a) => out.push(Segment {
            text: a.summary.clone(),
            tone: Tone::Bad,
        }),
        None => out.push(Segment {
            text: "no golden signal fires".to_string(),
            tone: Tone::Good,
        }),
    }
    out
}

/// The headline as one line of text.
pub fn headline_text(s: &Snapshot) -> String {
    headline(s)
        .into_iter()
        .map(|seg| seg.text)
        .collect::<Vec<_>>()
        .join(" · ")
}

/// What a rank that gave no metrics is doing: `Pending` (not placed), else `not scraped`.
pub fn rank_absent(s: &Snapshot, rank: &str) -> &'static str {
    match s.status.pods.iter().find(|p| p.name == rank).map(|p| p.phase) {
        Some(Phase::Pending) => "Pending",
        Some(Phase::Failed) => "Failed",
        _ => "not scraped",
    }
}

/// A percentage without false precision: `7`, `0.4`, `103`.
pub fn fmt_pct(p: f64) -> String {
    if p > 0.0 && p < 1.0 {
        format!("{p:.1}")
    } else {
        format!("{p:.0}")
    }
}

/// An optional latency, `-` when unmeasured.
pub fn fmt_opt_latency(s: Option<f64>) -> String {
    s.map_or_else(|| "-".to_string(), latency)
}

/// A span of time: `14s`, `2m05s`, `1h02m`.
pub fn fmt_span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// A share of time as a percentage: `93%`, `-` when unmeasured.
pub fn fmt_share(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{:.0}%", 100.0 * v))
}

/// The per-rank time split as a bar: `▒` read, `█` compute, `░` wait (transfer counts as compute).
pub fn split_bar(
    read: Option<f64>,
    compute: Option<f64>,
    wait: Option<f64>,
    transfer: Option<f64>,
    width: usize,
) -> String {
    let parts = [
        read.unwrap_or(0.0),
        compute.unwrap_or(0.0) + transfer.unwrap_or(0.0),
        wait.unwrap_or(0.0),
    ];
    let total: f64 = parts.iter().sum();
    if total <= 0.0 || !total.is_finite() {
        return " ".repeat(width);
    }
    let mut cells: Vec<usize> = parts
        .iter()
        .map(|p| (p / total * width as f64).round() as usize)
        .collect();
    // Rounding may over- or undershoot by a cell: give or take it from the largest part.
    let sum: usize = cells.iter().sum();
    let largest = (0..3).max_by(|a, b| parts[*a].total_cmp(&parts[*b])).unwrap_or(0);
    if sum > width {
        cells[largest] -= (sum - width).min(cells[largest]);
    } else {
        cells[largest] += width - sum;
    }
    format!(
        "{}{}{}",
        "▒".repeat(cells[0]),
        "█".repeat(cells[1]),
        "░".repeat(cells[2])
    )
}

/// A text sparkline of the last `width` values, scaled to `max`.
pub fn text_sparkline(values: &[f64], max: f64, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let start = values.len().saturating_sub(width);
    let mut s: String = values[start..]
        .iter()
        .map(|v| {
            if max <= 0.0 || !v.is_finite() {
                BARS[0]
            } else {
                BARS[((v / max).clamp(0.0, 1.0) * 7.0).round() as usize]
            }
        })
        .collect();
    while s.chars().count() < width {
        s.insert(0, ' ');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_span(14_999), "14s");
        assert_eq!(fmt_span(125_000), "2m05s");
        assert_eq!(fmt_span(3_720_000), "1h02m");
        assert_eq!(fmt_pct(7.2), "7");
        assert_eq!(fmt_pct(0.37), "0.4");
        assert_eq!(fmt_pct(0.0), "0");
    }

    #[test]
    fn split_bar_fills_its_width() {
        assert_eq!(split_bar(Some(0.1), Some(0.6), Some(0.3), None, 10), "▒██████░░░");
        assert_eq!(
            split_bar(Some(0.93), Some(0.02), Some(0.05), None, 10)
                .chars()
                .count(),
            10
        );
        assert_eq!(split_bar(None, None, None, None, 4), "    ");
    }

    #[test]
    fn sparkline_scales_and_pads() {
        assert_eq!(text_sparkline(&[0.0, 0.5, 1.0], 1.0, 5), "  ▁▅█");
        assert_eq!(text_sparkline(&[1.0; 8], 1.0, 3), "███");
    }
}
