//! More storage servers than the lab's default: 8 ranks seeded over 5 servers. Every server holds shards
//! and has readers (rank r reads storage-(r mod 5), through that server's public URL), and all ranks end
//! on the same model.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;

const RANKS: u32 = 8;
const SERVERS: u32 = 5;
const STEPS: u64 = 40;

#[test]
fn eight_ranks_read_from_all_five_servers() {
    let weed = Weed::start_with(SERVERS);
    let seeded = weed.seed(&[
        "--ranks",
        &RANKS.to_string(),
        "--servers",
        &SERVERS.to_string(),
        "--seed",
        "11",
        "--samples-per-shard",
        "512",
        "--shards-per-rank",
        "2",
    ]);
    assert_eq!(seeded["action"], "created", "{seeded}");
    let placement: BTreeMap<String, String> = serde_json::from_value(seeded["placement"].clone()).unwrap();
    for r in 0..RANKS {
        assert_eq!(placement[&r.to_string()], format!("storage-{}", r % SERVERS));
    }

    let rendezvous = format!("127.0.0.1:{}", free_port());
    let extra = [
        "--max-steps",
        &STEPS.to_string(),
        "--batch-size",
        "32",
        "--model-size",
        "1024",
        "--checkpoint-every",
        "0",
        "--log-every",
        "0",
        "--watchdog-timeout",
        "90s",
    ];
    // Metrics on a port each rank binds itself: eight ports picked ahead and released could be taken by
    // another process's connection before the rank binds them.
    let mut ranks: Vec<Proc> = (0..RANKS)
        .map(|r| {
            spawn_rank(
                &weed,
                &format!("rank-{r}"),
                &rank_args(&weed, &rendezvous, r, RANKS, 0, &extra),
            )
        })
        .collect();
    // Every rank is waited for before any is judged, so a failure shows each rank that failed, not only
    // the first one waited on (rank 0 fails whenever any other rank never joins).
    let statuses: Vec<_> = ranks
        .iter_mut()
        .map(|p| p.wait_timeout(Duration::from_secs(150)))
        .collect();
    let failed: Vec<String> = statuses
        .iter()
        .zip(&ranks)
        .enumerate()
        .filter(|(_, (status, _))| !status.is_some_and(|s| s.success()))
        .map(|(r, (status, p))| {
            let how = status.map_or("still running".to_string(), |s| format!("exited {s}"));
            format!("rank {r} {how}:\n{}", tail(&p.stderr_text(), 20))
        })
        .collect();
    assert!(failed.is_empty(), "{}\n{}", failed.join("\n"), weed.logs());
    let summaries: Vec<serde_json::Value> = ranks
        .iter()
        .map(|p| serde_json::from_str(p.stdout_text().trim()).unwrap())
        .collect();
    for (r, s) in summaries.iter().enumerate() {
        assert_eq!(s["final_step"], STEPS, "rank {r}");
        assert_eq!(
            s["model_crc"], summaries[0]["model_crc"],
            "rank {r} ends with another model"
        );
        assert_eq!(s["server"], format!("storage-{}", r as u32 % SERVERS), "rank {r}");
    }
    // Every server was read, through its public URL, by the ranks placed on it.
    for (i, proxy) in weed.proxies.iter().enumerate() {
        assert!(proxy.bytes() > 0, "nothing was read from storage-{i}");
    }
}
