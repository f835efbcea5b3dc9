//! The lab's one line about each of its own alerts: what the console headline, `lab status` and an
//! agent reading the incident bundle see (`storage-1 read p50 488 ms (siblings 3 ms)`). The rule file
//! decides when an alert fires; this says what it means on this lab, with what only the lab knows beside
//! the series (a pod's live and template CPU limit, why it is Pending, the baseline). An alert the lab
//! has no line for (a team's own rule) is described by its rule's `annotations.summary`.

use lab_model::format::latency;
use lab_model::status::{LabStatus, PodStatus};

use crate::baseline::LearnedBaseline;
use crate::promql::quantile;
use crate::rules::ActiveAlert;
use crate::views::Figures;

/// A sibling blocked in its all-reduce longer than this, seconds, is named as waiting for a hung rank
/// (the built-in `LabRankHung` rule's threshold, `max(lab_collective_wait_seconds) > 2`).
const HUNG_SIBLING_WAIT_SECONDS: f64 = 2.0;
/// The built-in `LabStorageReadLatencyHigh` rule's ways in (its thresholds in the rule file): a read p50
/// over 50 ms, a read waiting over 1 s, a reader held over 75 % of 3 s or 40 % of 10 s. The line names the
/// first figure past its threshold.
const LATENCY_MIN_SECONDS: f64 = 0.05;
const LATENCY_WAITING_MIN_SECONDS: f64 = 1.0;
const LATENCY_WAIT_SHARE_MIN: f64 = 0.75;
const LATENCY_WAIT_SHARE_10S_MIN: f64 = 0.4;

fn pod<'a>(status: &'a LabStatus, name: &str) -> Option<&'a PodStatus> {
    status.pods.iter().find(|p| p.name == name)
}

/// The line for alert `a`: the lab's own for a built-in alert, else the rule's summary, else its name and
/// target.
pub fn describe(
    a: &ActiveAlert,
    f: &Figures,
    status: &LabStatus,
    baseline: Option<&LearnedBaseline>,
) -> String {
    own(a, f, status, baseline)
        .or_else(|| a.summary.clone().filter(|s| !s.trim().is_empty()))
        .unwrap_or_else(|| format!("{} on {}", a.name, a.target))
}

fn own(
    a: &ActiveAlert,
    f: &Figures,
    status: &LabStatus,
    baseline: Option<&LearnedBaseline>,
) -> Option<String> {
    let value = if a.value.is_finite() { a.value } else { 0.0 };
    let target = a.target.as_str();
    Some(match a.name.as_str() {
        "LabStorageReadLatencyHigh" => {
            let sv = f.servers.get(target);
            let others: Vec<f64> = f
                .servers
                .iter()
                .filter(|(k, _)| k.as_str() != target)
                .filter_map(|(_, v)| v.client_p50.filter(|x| x.is_finite()))
                .collect();
            let siblings = quantile(0.5, &others);
            let mine = sv.and_then(|v| v.client_p50).filter(|v| v.is_finite());
            let waiting = sv.and_then(|v| v.read_waiting_unstarved);
            let share = sv.and_then(|v| v.read_wait_share_unstarved);
            let share_10s = sv.and_then(|v| v.read_wait_share_10s_unstarved);
            let p50_text = |mine: f64| {
                if siblings.is_finite() {
                    format!(
                        "{target} read p50 {} (siblings {})",
                        latency(mine),
                        latency(siblings)
                    )
                } else {
                    format!("{target} read p50 {}", latency(mine))
                }
            };
            // Said by the figure that shows the slowness: a p50 under the built-in rule's floor (most
            // reads quick, the rest after a long wait) would read as a healthy server.
            if let Some(m) = mine.filter(|m| *m > LATENCY_MIN_SECONDS) {
                p50_text(m)
            } else if let Some(w) = waiting.filter(|w| *w > LATENCY_WAITING_MIN_SECONDS) {
                // Too few reads ended in the window: what the readers are waiting through.
                format!("{target} holds a read {} and counting", latency(w))
            } else if let Some(s) = share.filter(|s| *s > LATENCY_WAIT_SHARE_MIN) {
                format!("{target} holds a reader waiting {:.0}% of the time", 100.0 * s)
            } else if let Some(s) = share_10s.filter(|s| *s > LATENCY_WAIT_SHARE_10S_MIN) {
                // Its reads end quickly between long waits: the p50 says little, the time held does.
                format!(
                    "{target} holds a reader waiting {:.0}% of the last 10 s{}",
                    100.0 * s,
                    mine.map_or(String::new(), |m| format!(" (read p50 {})", latency(m)))
                )
            } else if let Some(m) = mine {
                p50_text(m)
            } else {
                format!("{target} reads slow")
            }
        }
        "LabTrainingThroughputLow" => match baseline {
            Some(b) if b.job.samples_per_s > 0.0 => format!(
                "training at {:.0}% of normal ({:.0} of {:.0} samples/s)",
                100.0 * value / b.job.samples_per_s,
                value,
                b.job.samples_per_s
            ),
            _ => format!("training at {value:.0} samples/s"),
        },
        "LabStorageReadErrors" => format!("{target} read errors {value:.1}/s"),
        "LabCollectiveErrors" => format!("{target} collective errors {value:.1}/s"),
        "LabRankCrashLooping" => {
            let restarts = pod(status, target)
                .map(|p| format!(", {} restarts in all", p.restarts))
                .unwrap_or_default();
            let lost = f
                .ranks
                .values()
                .filter_map(|r| r.steps_lost)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                .map(|v| format!("; the job lost {} steps to restarts", v as u64))
                .unwrap_or_default();
            format!(
                "{target} crashes in a loop: restarted after exit code {value:.0}{restarts}, its peers after it{lost}"
            )
        }
        "LabRankCpuThrottled" => {
            let limits = pod(status, target)
                .map(|p| match (p.resources.cpu_live, p.resources.cpu_template) {
                    (Some(l), Some(t)) => format!(" (limit {l}, template {t})"),
                    (Some(l), None) => format!(" (limit {l})"),
                    _ => String::new(),
                })
                .unwrap_or_default();
            format!(
                "{target} CPU throttled in {:.0}% of periods{limits}",
                100.0 * value
            )
        }
        "LabRankPending" => {
            let why = pod(status, target)
                .and_then(|p| p.reason.clone())
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            format!(
                "{target} Pending{why}: {} ranks wanted, {} GPUs",
                status.ranks_desired, status.gpus_capacity
            )
        }
        "LabRanksWaitingAtCollective" => {
            format!("ranks wait {:.0}% of each step at the collective", 100.0 * value)
        }
        "LabRankHung" => {
            let mut waiting: Vec<&str> = f
                .ranks
                .iter()
                .filter(|(k, r)| {
                    k.as_str() != target && r.collective_wait_s.is_some_and(|w| w > HUNG_SIBLING_WAIT_SECONDS)
                })
                .map(|(k, _)| k.as_str())
                .collect();
            waiting.sort_unstable();
            let longest = f
                .ranks
                .values()
                .filter_map(|r| r.collective_wait_s)
                .fold(0.0, f64::max);
            let step = f
                .ranks
                .get(target)
                .and_then(|r| r.step)
                .map(|v| format!(" at step {}", v as u64))
                .unwrap_or_default();
            format!(
                "{target} makes no progress{step} while its metrics answer; {} wait for it at the all-reduce (longest {longest:.0} s)",
                if waiting.is_empty() {
                    "its siblings".to_string()
                } else {
                    waiting.join(", ")
                },
            )
        }
        "LabRankComputeSlow" => {
            let limits = pod(status, target)
                .map(|p| match (p.resources.cpu_live, p.resources.cpu_template) {
                    (Some(l), Some(t)) if l == t => format!("; limit {l} as in the template"),
                    (Some(l), Some(t)) => format!("; limit {l}, template {t}"),
                    _ => String::new(),
                })
                .unwrap_or_default();
            let q25 = f.compute_per_step_q25;
            format!(
                "{target} computes {:.0} ms per step, {:.1}x the fastest ranks' {:.0} ms{limits}",
                1000.0 * value,
                value / q25,
                1000.0 * q25
            )
        }
        "LabCommitsStalled" => {
            format!("{target}: no commit completed for {value:.1} s, the age of the commit in flight")
        }
        "LabRanksWaitingForPeers" => {
            let n = f.ranks.values().filter(|r| r.waiting_for_peers).count();
            let world = f
                .ranks
                .values()
                .filter_map(|r| r.world_size)
                .fold(f64::NAN, f64::max);
            let world = if world.is_finite() {
                world as u32
            } else {
                status.world_size
            };
            let ranks = if n == 1 {
                "1 rank waits".to_string()
            } else {
                format!("{n} ranks wait")
            };
            format!("{ranks} at rendezvous for peers (world size {world})")
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latency_lines_thresholds_are_the_built_in_rules() {
        let text = crate::rules::BUILTIN;
        for (series, min) in [
            ("lab:storage_read_p50_seconds:unstarved", LATENCY_MIN_SECONDS),
            (
                "lab:storage_read_waiting_seconds:unstarved",
                LATENCY_WAITING_MIN_SECONDS,
            ),
            ("lab:storage_read_wait_share:unstarved", LATENCY_WAIT_SHARE_MIN),
            (
                "lab:storage_read_wait_share_10s:unstarved",
                LATENCY_WAIT_SHARE_10S_MIN,
            ),
        ] {
            assert!(text.contains(&format!("{series} > {min}")), "{series} > {min}");
        }
    }
}
