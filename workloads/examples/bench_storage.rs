//! The storage client's throughput (`scripts/bench/storage.sh` runs it beside wrk).
//!
//! Finds rank 0's first shard through the dataset manifest, exactly as a rank does, then reads it for
//! `--seconds` over `--connections` keep-alive connections (one thread each): either batch-sized HTTP
//! ranges (`--mode range`, what a rank reads every step; with `--verify` also decoded and checksum-checked
//! as in training) or the whole shard (`--mode whole`). Prints one JSON line: reads/s and payload MB/s.

use std::time::{Duration, Instant};

use clap::Parser;
use lab_workloads::checkpoint::JobStore;
use lab_workloads::dataset::{self, HEADER_LEN};
use lab_workloads::storage::Storage;

#[derive(Debug, Parser)]
struct Args {
    #[arg(long)]
    master: String,
    #[arg(long, default_value = "lab-train")]
    dataset: String,
    #[arg(long, default_value = "range")]
    mode: String,
    /// Rows per range read (the rank's batch size).
    #[arg(long, default_value_t = 256)]
    batch: u64,
    #[arg(long)]
    verify: bool,
    #[arg(long, default_value_t = 1)]
    connections: usize,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Print the URL, the Range header (`-` for none) and the payload size a wrk run should use, and exit.
    #[arg(long)]
    print_target: bool,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut store = JobStore::new(&a.master, &a.dataset, Duration::from_secs(10));
    let manifest = store.load_manifest()?;
    let shard = manifest.shards_for(0)[0].clone();
    let rl = dataset::row_len(manifest.features) as u64;
    let range = (a.mode == "range").then(|| (HEADER_LEN as u64, HEADER_LEN as u64 + a.batch * rl - 1));
    if a.print_target {
        let mut s = Storage::new(&a.master, Duration::from_secs(10));
        let loc = s.locate(lab_workloads::storage::volume_of(&shard.fid)?)?;
        let header = range
            .map(|(x, y)| format!("Range: bytes={x}-{y}"))
            .unwrap_or_else(|| "-".into());
        println!(
            "http://{}/{}\t{}\t{}",
            loc.public_url,
            shard.fid,
            header,
            range.map_or(shard.bytes, |(x, y)| y - x + 1)
        );
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    let started = Instant::now();
    let results: Vec<anyhow::Result<(u64, u64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..a.connections)
            .map(|_| {
                let (master, fid, seed, features) = (&a.master, &shard.fid, manifest.seed, manifest.features);
                let (verify, id) = (a.verify, shard.id);
                scope.spawn(move || -> anyhow::Result<(u64, u64)> {
                    let mut s = Storage::new(master, Duration::from_secs(10));
                    let (mut body, mut x, mut y) = (Vec::new(), Vec::new(), Vec::new());
                    let (mut reads, mut bytes) = (0u64, 0u64);
                    while Instant::now() < deadline {
                        s.read(fid, range, &mut body)?
                            .ok_or_else(|| anyhow::anyhow!("shard missing"))?;
                        if verify {
                            let rows = if range.is_some() {
                                &body[..]
                            } else {
                                &body[HEADER_LEN..]
                            };
                            dataset::decode_rows(rows, seed, id, 0, features, &mut x, &mut y)?;
                        }
                        reads += 1;
                        bytes += body.len() as u64;
                    }
                    Ok((reads, bytes))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("reader thread"))
            .collect()
    });
    let elapsed = started.elapsed().as_secs_f64();
    let (mut reads, mut bytes) = (0, 0);
    for r in results {
        let (n, b) = r?;
        reads += n;
        bytes += b;
    }
    println!(
        "{{\"impl\":\"lab-client\",\"mode\":\"{}\",\"verify\":{},\"connections\":{},\"reads_per_s\":{:.0},\"mb_per_s\":{:.1},\"bytes_per_read\":{}}}",
        a.mode,
        a.verify,
        a.connections,
        reads as f64 / elapsed,
        bytes as f64 / elapsed / 1e6,
        bytes / reads.max(1)
    );
    Ok(())
}
