//! Bad input meets a clear error or a counted metric, never a panic: flags, unreachable storage, a rank
//! with another world size, a job short of ranks, garbage on the rendezvous port, and a corrupted shard.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::*;
use lab_model::metrics as m;

fn run(bin: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(bin).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_flags_exit_2_with_a_reason() {
    let rank = env!("CARGO_BIN_EXE_lab-rank");
    let (code, err) = run(rank, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--world-size"), "{err}");
    let base = [
        "--world-size",
        "4",
        "--master",
        "127.0.0.1:1",
        "--rendezvous",
        "127.0.0.1:2",
    ];
    let with = |extra: &[&str]| -> Vec<String> { base.iter().chain(extra).map(|s| s.to_string()).collect() };
    let (code, err) = run(
        rank,
        &with(&["--rank", "5"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("rank 5 is not below the world size 4"), "{err}");
    let (code, err) = run(
        rank,
        &with(&["--rank", "1", "--watchdog-timeout", "10"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("10"), "{err}");
    let (code, err) = run(
        rank,
        &with(&["--rank", "1", "--dataset", "Bad/Name"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("dataset name"), "{err}");

    let seeder = env!("CARGO_BIN_EXE_lab-seeder");
    let (code, err) = run(
        seeder,
        &[
            "--master",
            "127.0.0.1:1",
            "--ranks",
            "4",
            "--seed",
            "1",
            "--placement",
            "0=disk-1",
        ],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is not rank=server"), "{err}");
    let (code, err) = run(
        seeder,
        &["--master", "127.0.0.1:1", "--ranks", "0", "--seed", "1"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--ranks"), "{err}");
    let (code, err) = run(
        seeder,
        &[
            "--master",
            "127.0.0.1:1",
            "--ranks",
            "2",
            "--seed",
            "1",
            "--wait",
            "1s",
        ],
    );
    assert_eq!(code, Some(5), "{err}");
    assert!(err.contains("the master is not answering"), "{err}");
}

#[test]
fn unreachable_storage_is_counted_then_a_clear_exit() {
    let dir = tempfile::tempdir().unwrap();
    let (metrics, master) = (free_port(), free_port());
    let args: Vec<String> = [
        "--rank",
        "0",
        "--world-size",
        "1",
        "--master",
        &format!("127.0.0.1:{master}"),
        "--rendezvous",
        &format!("127.0.0.1:{}", free_port()),
        "--metrics-listen",
        &format!("127.0.0.1:{metrics}"),
        "--watchdog-timeout",
        "4s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = Proc::spawn(
        "rank-0",
        Command::new(env!("CARGO_BIN_EXE_lab-rank")).args(&args),
        dir.path(),
    );
    let addr = format!("127.0.0.1:{metrics}");
    wait_until(Duration::from_secs(10), "a counted storage error", || {
        http_get(&addr, "/metrics").is_some_and(|t| {
            metric(
                &t,
                m::STORAGE_READ_ERRORS,
                &[("server", "master"), ("kind", "connect")],
            )
            .unwrap_or(0.0)
                >= 1.0
        })
    });
    assert!(
        http_get(&addr, "/readyz").is_some(),
        "/readyz answers while the rank cannot reach storage"
    );
    let status = p.wait_timeout(Duration::from_secs(15)).expect("the rank gave up");
    assert_eq!(status.code(), Some(3));
    let err = p.stderr_text();
    assert!(
        err.contains(&format!("rank 0: watchdog: waited 4 s for the dataset manifest: cannot connect to seaweedfs master at 127.0.0.1:{master}")),
        "{err}"
    );
}

#[test]
fn rendezvous_refuses_and_times_out_clearly_and_corrupt_shards_are_caught() {
    let weed = Weed::start();
    weed.seed(&[
        "--ranks",
        "4",
        "--seed",
        "5",
        "--samples-per-shard",
        "256",
        "--shards-per-rank",
        "1",
    ]);

    // Rank 0 expects 2 ranks; rank 1 was told 3. Nobody trains; both say why and give up.
    let rendezvous = format!("127.0.0.1:{}", free_port());
    let (p0, p1) = (free_port(), free_port());
    let flags = [
        "--watchdog-timeout",
        "5s",
        "--model-size",
        "64",
        "--batch-size",
        "16",
    ];
    let mut r0 = spawn_rank(
        &weed,
        "mismatch-rank-0",
        &rank_args(&weed, &rendezvous, 0, 2, p0, &flags),
    );
    let mut r1 = spawn_rank(
        &weed,
        "mismatch-rank-1",
        &rank_args(&weed, &rendezvous, 1, 3, p1, &flags),
    );
    let a0 = format!("127.0.0.1:{p0}");
    wait_until(
        Duration::from_secs(10),
        "rank 0 counting the world-size refusal",
        || {
            http_get(&a0, "/metrics").is_some_and(|t| {
                metric(&t, m::COLLECTIVE_ERRORS, &[("kind", "world_size")]).unwrap_or(0.0) >= 1.0
            })
        },
    );
    // Garbage on the rendezvous port is counted too.
    let mut junk = TcpStream::connect(&rendezvous).unwrap();
    junk.write_all(b"\x05\x00\x00\x00hello").unwrap();
    wait_until(Duration::from_secs(10), "rank 0 counting the garbage", || {
        http_get(&a0, "/metrics")
            .is_some_and(|t| metric(&t, m::COLLECTIVE_ERRORS, &[("kind", "protocol")]).unwrap_or(0.0) >= 1.0)
    });
    let t = http_get(&a0, "/metrics").unwrap();
    assert_eq!(metric(&t, m::RENDEZVOUS_WAITING, &[]), Some(1.0));
    assert_eq!(metric(&t, m::PEERS_CONNECTED, &[]), Some(1.0));
    assert!(
        http_get(&a0, "/readyz").is_some(),
        "ready while stuck at rendezvous: the lab's point"
    );
    for (name, p) in [("rank 0", &mut r0), ("rank 1", &mut r1)] {
        let status = p
            .wait_timeout(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{name} did not give up"));
        assert_eq!(status.code(), Some(3), "{name}: {}", p.stderr_text());
    }
    let e0 = r0.stderr_text();
    assert!(
        e0.contains("rank 0: rendezvous: rank 1 announced world size 3 but rank 0 expects 2"),
        "{e0}"
    );
    assert!(
        e0.contains("watchdog: waited 5 s at rendezvous for 2 ranks; 1 joined (missing: rank 1)"),
        "{e0}"
    );
    let e1 = r1.stderr_text();
    assert!(
        e1.contains("rank 0 refused this rank: rank 1 announced world size 3 but rank 0 expects 2"),
        "{e1}"
    );

    // World size 3 with only two ranks started (the unplaceable-rank fault): both wait, then time out.
    let rendezvous = format!("127.0.0.1:{}", free_port());
    let (p0, p1) = (free_port(), free_port());
    let mut r0 = spawn_rank(
        &weed,
        "short-rank-0",
        &rank_args(&weed, &rendezvous, 0, 3, p0, &flags),
    );
    let mut r1 = spawn_rank(
        &weed,
        "short-rank-1",
        &rank_args(&weed, &rendezvous, 1, 3, p1, &flags),
    );
    let a1 = format!("127.0.0.1:{p1}");
    wait_until(Duration::from_secs(10), "rank 1 seeing 2 of 3 joined", || {
        http_get(&a1, "/metrics").is_some_and(|t| {
            metric(&t, m::PEERS_CONNECTED, &[]) == Some(2.0)
                && metric(&t, m::RENDEZVOUS_WAITING, &[]) == Some(1.0)
        })
    });
    for p in [&mut r0, &mut r1] {
        let status = p.wait_timeout(Duration::from_secs(20)).expect("gave up");
        assert_eq!(status.code(), Some(3));
        assert!(
            p.stderr_text()
                .contains("at rendezvous for 3 ranks; 2 joined (missing: rank 2)"),
            "{}",
            p.stderr_text()
        );
    }

    // Corrupt the first row of rank 0's shard in SeaweedFS: the rank counts checksum errors and stops.
    let manifest_fid = weed.seed(&[
        "--ranks",
        "4",
        "--seed",
        "5",
        "--samples-per-shard",
        "256",
        "--shards-per-rank",
        "1",
    ])["manifest_fid"]
        .as_str()
        .unwrap()
        .to_string();
    let manifest: serde_json::Value =
        serde_json::from_str(&http_get(&weed.volumes[0], &format!("/{manifest_fid}")).unwrap()).unwrap();
    let shard0 = manifest["shards"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == 0)
        .unwrap();
    let fid = shard0["fid"].as_str().unwrap();
    let server = &weed.volumes[0];
    let mut bytes = get_bytes(server, &format!("/{fid}"));
    bytes[64 + 8] ^= 0x40;
    post_bytes(server, &format!("/{fid}"), &bytes);
    let p0 = free_port();
    let mut solo = spawn_rank(
        &weed,
        "corrupt-rank-0",
        &rank_args(
            &weed,
            &format!("127.0.0.1:{}", free_port()),
            0,
            1,
            p0,
            &[&flags[..], &["--max-steps", "5"]].concat(),
        ),
    );
    let status = solo
        .wait_timeout(Duration::from_secs(30))
        .expect("the rank stopped");
    assert_eq!(status.code(), Some(5), "{}", solo.stderr_text());
    let err = solo.stderr_text();
    assert_eq!(
        err.matches("read of shard 0 from storage-0 failed: shard 0 failed verification: row 0 crc32")
            .count(),
        3,
        "{err}"
    );
    assert!(
        err.contains("failed verification 3 times in a row: reseed the dataset"),
        "{err}"
    );
    // Seeding again notices the damage and rewrites the data; then the rank trains.
    let reseeded = weed.seed(&[
        "--ranks",
        "4",
        "--seed",
        "5",
        "--samples-per-shard",
        "256",
        "--shards-per-rank",
        "1",
    ]);
    assert_eq!(reseeded["action"], "overwritten", "{reseeded}");
    let mut solo = spawn_rank(
        &weed,
        "reseeded-rank-0",
        &rank_args(
            &weed,
            &format!("127.0.0.1:{}", free_port()),
            0,
            1,
            p0,
            &[&flags[..], &["--max-steps", "5"]].concat(),
        ),
    );
    let status = solo
        .wait_timeout(Duration::from_secs(30))
        .expect("the rank finished");
    assert!(status.success(), "{}", solo.stderr_text());
}

fn get_bytes(addr: &str, path: &str) -> Vec<u8> {
    let mut c = lab_workloads::http::HttpConn::new(addr, "volume server", Duration::from_secs(5));
    let mut body = Vec::new();
    assert_eq!(c.get(path, &mut body).unwrap().status, 200);
    body
}

fn post_bytes(addr: &str, path: &str, data: &[u8]) {
    let mut c = lab_workloads::http::HttpConn::new(addr, "volume server", Duration::from_secs(5));
    let mut body = Vec::new();
    let r = c
        .request(
            "POST",
            path,
            &[("Content-Type", "application/octet-stream")],
            data,
            &mut body,
        )
        .unwrap();
    assert!(r.status < 300, "{}", String::from_utf8_lossy(&body));
}
