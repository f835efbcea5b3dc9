//! A rank asked to stop (SIGTERM) stops at once, with exit code 0, whatever it is doing: it handles the
//! signal itself. In a container the rank is PID 1, which the kernel spares every signal it has no handler
//! for, so without the handler a pod's deletion waited its whole grace period for the SIGKILL. SIGUSR1 ends
//! it as its simulated device's failure (exit 6), how a device fault set on a running rank takes effect.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

/// Rank 0 of 2, started with `extra` flags, waiting at rendezvous for rank 1 (which never comes): its
/// metrics endpoint answers from the start, and it still runs.
fn waiting_rank(dir: &std::path::Path, extra: &[String]) -> Proc {
    let [rendezvous, metrics] = free_ports::<2>();
    let mut args = vec![
        "--rank=0".to_string(),
        "--world-size=2".into(),
        "--master=127.0.0.1:1".into(),
        format!("--rendezvous=127.0.0.1:{rendezvous}"),
        format!("--metrics-listen=127.0.0.1:{metrics}"),
        "--watchdog-timeout=60s".into(),
    ];
    args.extend(extra.iter().cloned());
    let mut rank = Proc::spawn(
        "rank-0",
        Command::new(env!("CARGO_BIN_EXE_lab-rank")).args(&args),
        dir,
    );
    assert!(
        wait_for(Duration::from_secs(10), || {
            http_get(&format!("127.0.0.1:{metrics}"), "/readyz").is_some()
        }),
        "rank 0 never answered /readyz: {}",
        rank.stderr_text()
    );
    assert!(
        rank.child.try_wait().unwrap().is_none(),
        "rank 0 ended before it was asked to: {}",
        rank.stderr_text()
    );
    rank
}

#[test]
fn a_rank_waiting_for_its_peers_stops_on_sigterm_with_exit_code_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut rank = waiting_rank(dir.path(), &[]);
    let asked = Instant::now();
    rank.signal(Signal::SIGTERM);
    let status = rank
        .wait_timeout(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("rank 0 still runs 5 s after SIGTERM: {}", rank.stderr_text()));
    assert_eq!(
        status.code(),
        Some(0),
        "rank 0 did not stop by itself (killed by the signal, or another exit): {status:?} {}",
        rank.stderr_text()
    );
    assert!(asked.elapsed() < Duration::from_secs(2), "{:?}", asked.elapsed());
    assert!(
        rank.stderr_text().contains("SIGTERM: stopping"),
        "{}",
        rank.stderr_text()
    );
}

/// SIGUSR1 is the lab's "your accelerator failed now" (a device fault set on a running rank): the rank
/// counts the failure in its scratch folder, as its own device faults are, and exits with the device's code.
#[test]
fn a_rank_told_its_device_failed_exits_with_the_devices_code_and_counts_the_failure() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("scratch");
    let mut rank = waiting_rank(dir.path(), &[format!("--scratch-dir={}", scratch.display())]);
    rank.signal(Signal::SIGUSR1);
    let status = rank
        .wait_timeout(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("rank 0 still runs 5 s after SIGUSR1: {}", rank.stderr_text()));
    assert_eq!(
        status.code(),
        Some(i32::from(lab_model::actions::DEVICE_FAULT_EXIT)),
        "{status:?} {}",
        rank.stderr_text()
    );
    assert!(
        rank.stderr_text().contains("the accelerator failed"),
        "{}",
        rank.stderr_text()
    );
    let record = std::fs::read_to_string(scratch.join(lab_workloads::device::RECORD)).unwrap();
    assert_eq!(record.trim(), "1");
}
