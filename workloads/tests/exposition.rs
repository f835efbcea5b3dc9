//! The rank's `/metrics` text, held against a recorded exposition: the rules in `manifests/rules/`, the
//! lab's telemetry and the dashboards read these names, labels, types and help texts, so none may drift.
//!
//! The recorded text is what the rank exposed for the same calls; series may come in another order within
//! a family and a number may be spelled another way (`0` or `0.0`), the same value either way.

use std::collections::BTreeMap;

use lab_model::metrics as m;
use lab_workloads::metrics::Registry;
use lab_workloads::rank::{register_metrics, start_series};

/// The calls a rank makes from start-up through two steps, with fixed values.
fn rank_after_two_steps() -> Registry {
    let r = Registry::new();
    register_metrics(&r);
    start_series(&r, 4);
    r.set(m::CPU_PERIODS, &[], 120.0);
    r.set(m::CPU_THROTTLED_PERIODS, &[], 7.0);
    r.set(m::CPU_THROTTLED_SECONDS, &[], 0.25);
    r.set(m::CPU_LIMIT_CORES, &[], 0.4);
    for server in ["storage-1", "storage-2"] {
        for kind in ["connect", "http", "timeout", "checksum"] {
            r.touch(m::STORAGE_READ_ERRORS, &[("server", server), ("kind", kind)]);
        }
        r.touch(m::STORAGE_READ_BYTES, &[("server", server)]);
        r.touch(m::STORAGE_CHECKSUMS_VERIFIED, &[("server", server)]);
    }
    r.set(
        m::RANK_INFO,
        &[("rank", "1"), ("world_size", "4"), ("server", "storage-2")],
        1.0,
    );
    r.set(m::PEERS_CONNECTED, &[], 1.0);
    r.inc(m::COLLECTIVE_ERRORS, &[("kind", "timeout")], 1.0);
    r.set(m::RENDEZVOUS_WAITING, &[], 0.0);
    r.set(m::PEERS_CONNECTED, &[], 4.0);
    r.set(m::STEP, &[], 10.0);
    r.set(m::CHECKPOINT_STEP, &[], 10.0);
    r.set(m::STEPS_LOST, &[], 3.0);
    r.set(m::RESUMES, &[], 1.0);
    for (read, step, crc, loss) in [(0.0031, 0.034, 12.0, 0.5), (0.42, 0.61, 3_735_928_559.0, 0.0123)] {
        r.observe(m::STORAGE_READ_DURATION, &[("server", "storage-2")], read);
        r.inc(m::STORAGE_READ_BYTES, &[("server", "storage-2")], 65_536.0);
        r.inc(m::STORAGE_CHECKSUMS_VERIFIED, &[("server", "storage-2")], 64.0);
        r.inc(m::STEPS, &[], 1.0);
        r.inc(m::SAMPLES, &[], 32.0);
        r.set(m::STEP, &[], r.get(m::STEPS, &[]).unwrap() + 10.0);
        r.observe(m::STEP_DURATION, &[], step);
        for (phase, s) in [
            ("read", read),
            ("compute", 0.0125),
            ("wait", 0.0),
            ("transfer", 0.002),
        ] {
            r.inc(m::PHASE_SECONDS, &[("phase", phase)], s);
        }
        r.set(m::LOSS, &[], loss);
        r.set(m::MODEL_CHECKSUM, &[], crc);
    }
    r.inc(
        m::STORAGE_READ_ERRORS,
        &[("server", "master"), ("kind", "connect")],
        1.0,
    );
    r.inc(m::CHECKPOINT_WRITE_ERRORS, &[], 1.0);
    // A read in flight, seen at the scrape.
    r.set(m::STORAGE_READ_WAITING, &[("server", "storage-2")], 0.25);
    r.set(m::STORAGE_READ_WAIT_SECONDS, &[("server", "storage-2")], 1.5);
    r
}

/// A family in the text: its `# HELP` and `# TYPE` lines in order, and its samples by series.
#[derive(Debug, PartialEq)]
struct Family {
    comments: Vec<String>,
    samples: BTreeMap<String, f64>,
}

/// The families of an exposition in the order they come, each with its samples by series (the number
/// parsed, so that `0` and `0.0` are the same sample).
fn families(text: &str) -> Vec<(String, Family)> {
    let mut out: Vec<(String, Family)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap().to_string();
            out.push((
                name,
                Family {
                    comments: vec![line.to_string()],
                    samples: BTreeMap::new(),
                },
            ));
        } else if line.starts_with("# TYPE ") {
            out.last_mut()
                .expect("TYPE after HELP")
                .1
                .comments
                .push(line.to_string());
        } else if !line.is_empty() {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
            let value: f64 = value.parse().unwrap_or_else(|e| panic!("{line:?}: {e}"));
            let fam = &mut out.last_mut().expect("a sample after HELP").1;
            assert!(
                fam.samples.insert(series.to_string(), value).is_none(),
                "{series} twice"
            );
        }
    }
    out
}

#[test]
fn the_rank_exposes_the_recorded_names_labels_types_help_and_values() {
    let want = include_str!("fixtures/rank-metrics.prom");
    let got = rank_after_two_steps().encode();
    let (want, got) = (families(want), families(&got));
    let names = |f: &[(String, Family)]| f.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&got), names(&want), "families or their order differ");
    for ((name, g), (_, w)) in got.iter().zip(&want) {
        assert_eq!(g, w, "family {name}");
    }
}
