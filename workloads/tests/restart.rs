//! A rank that stops answering makes the others fail like an NCCL watchdog (or see the peer gone), and
//! the restarted job resumes from rank 0's checkpoint with the steps lost counted.

mod common;

use std::time::Duration;

use common::*;
use lab_model::metrics as m;
use nix::sys::signal::Signal;

#[test]
fn a_stuck_rank_trips_the_watchdog_and_the_job_resumes_from_its_checkpoint() {
    let weed = Weed::start();
    weed.seed(&[
        "--ranks",
        "4",
        "--seed",
        "11",
        "--samples-per-shard",
        "1024",
        "--shards-per-rank",
        "2",
    ]);
    let rendezvous = format!("127.0.0.1:{}", free_port());
    let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
    let common_flags = [
        "--batch-size",
        "64",
        "--model-size",
        "4096",
        "--checkpoint-every",
        "40",
        "--log-every",
        "20",
    ];
    let start = |extra: &[&str], tag: &str| -> Vec<Proc> {
        let flags: Vec<&str> = common_flags.iter().chain(extra).copied().collect();
        (0..4u32)
            .map(|r| {
                spawn_rank(
                    &weed,
                    &format!("{tag}-rank-{r}"),
                    &rank_args(&weed, &rendezvous, r, 4, ports[r as usize], &flags),
                )
            })
            .collect()
    };

    // First incarnation: train past the first checkpoint and half-way to the next, then freeze rank 2.
    let mut first = start(&["--watchdog-timeout", "5s"], "first");
    let rank0 = format!("127.0.0.1:{}", ports[0]);
    wait_until(
        Duration::from_secs(60),
        "rank 0 past step 60 with a checkpoint",
        || {
            http_get(&rank0, "/metrics").is_some_and(|t| {
                metric(&t, m::STEP, &[]).unwrap_or(0.0) >= 60.0
                    && metric(&t, m::CHECKPOINT_STEP, &[]).unwrap_or(0.0) >= 40.0
            })
        },
    );
    first[2].signal(Signal::SIGSTOP);
    let mut watchdog_fired = 0;
    for r in [0usize, 1, 3] {
        let p = &mut first[r];
        let status = p
            .wait_timeout(Duration::from_secs(30))
            .unwrap_or_else(|| panic!("rank {r} did not give up"));
        let err = p.stderr_text();
        assert!(!status.success(), "rank {r} exited 0");
        let last = err.lines().last().unwrap_or_default().to_string();
        assert!(
            last.contains("exiting so the job can restart from the checkpoint at step"),
            "rank {r}: {last}"
        );
        if last.contains("watchdog: waited 5 s at all-reduce step") {
            assert_eq!(status.code(), Some(3), "rank {r}: {last}");
            watchdog_fired += 1;
        } else {
            assert!(
                last.contains("closed the connection at all-reduce step"),
                "rank {r}: {last}"
            );
            assert_eq!(status.code(), Some(4), "rank {r}: {last}");
        }
    }
    assert!(watchdog_fired >= 1, "no rank reported the watchdog");
    first[2].signal(Signal::SIGKILL);
    let _ = first[2].wait_timeout(Duration::from_secs(5));
    // How far rank 0 got: the all-reduce step it was stuck at is the number of steps it had completed.
    let reached = reached_step(&first[0].stderr_text());
    let checkpoint = reached / 40 * 40;
    assert!(reached >= 60 && checkpoint >= 40, "reached {reached}");
    drop(first);

    // Second incarnation: everyone resumes from the checkpoint, and the lost steps are counted. Then one
    // rank is killed outright: its neighbours see it gone at once, well before the watchdog.
    let lost1 = reached - checkpoint;
    let mut second = start(&["--watchdog-timeout", "30s"], "second");
    let mut seen = None;
    wait_until(
        Duration::from_secs(60),
        "the restarted job 20 steps past its checkpoint",
        || {
            let t = http_get(&format!("127.0.0.1:{}", ports[1]), "/metrics").unwrap_or_default();
            if metric(&t, m::STEP, &[]).unwrap_or(0.0) >= (checkpoint + 20) as f64 {
                seen = Some((metric(&t, m::STEPS_LOST, &[]), metric(&t, m::RESUMES, &[])));
            }
            seen.is_some()
        },
    );
    assert_eq!(
        seen.unwrap(),
        (Some(lost1 as f64), Some(1.0)),
        "job-wide totals on rank 1"
    );
    let log0 = second[0].stderr_text();
    let resumed =
        format!("resuming from the checkpoint at step {checkpoint} ({lost1} steps lost in this restart");
    assert!(log0.contains(&resumed), "{log0}");
    second[3].signal(Signal::SIGKILL);
    let _ = second[3].wait_timeout(Duration::from_secs(5));
    let mut named = 0;
    for r in [0usize, 1, 2] {
        let p = &mut second[r];
        let status = p
            .wait_timeout(Duration::from_secs(15))
            .unwrap_or_else(|| panic!("rank {r} did not notice"));
        let last = p.stderr_text().lines().last().unwrap_or_default().to_string();
        assert_eq!(status.code(), Some(4), "rank {r}: {last}");
        assert!(
            last.contains("closed the connection at all-reduce step"),
            "rank {r}: {last}"
        );
        // The first to notice names rank 3; the others may see the neighbour that gave up before them.
        named += usize::from(last.contains("rank 3 closed the connection"));
    }
    assert!(named >= 1, "nobody named the rank that died");
    let reached2 = reached_step(&second[0].stderr_text());
    let checkpoint2 = reached2 / 40 * 40;
    let lost2 = reached2 - checkpoint2;
    drop(second);

    // Third incarnation: the totals accumulate over the job's life.
    let mut third = start(&["--watchdog-timeout", "30s", "--max-steps", "20"], "third");
    let mut crcs = Vec::new();
    for (r, p) in third.iter_mut().enumerate() {
        let status = p
            .wait_timeout(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("rank {r} still running"));
        assert!(status.success(), "rank {r}: {}", tail(&p.stderr_text(), 10));
        let s: serde_json::Value = serde_json::from_str(p.stdout_text().trim()).unwrap();
        assert_eq!(
            s["start_step"], checkpoint2,
            "rank {r} did not resume from the checkpoint: {s}"
        );
        assert_eq!(s["steps_lost"], lost2, "rank {r}: {s}");
        assert_eq!(s["steps_lost_total"], lost1 + lost2, "rank {r}: {s}");
        assert_eq!(s["resumes_total"], 2, "rank {r}: {s}");
        assert_eq!(s["final_step"], checkpoint2 + 20);
        crcs.push(s["model_crc"].clone());
    }
    assert!(
        crcs.iter().all(|c| *c == crcs[0]),
        "ranks resumed into different models: {crcs:?}"
    );
}

/// The all-reduce step in a rank's last log line: the number of steps it had completed when it stopped.
fn reached_step(stderr: &str) -> u64 {
    stderr
        .lines()
        .last()
        .and_then(|l| l.split("all-reduce step ").nth(1))
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no all-reduce step in the last line: {}", tail(stderr, 3)))
}
