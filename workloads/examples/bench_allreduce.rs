//! One rank of the all-reduce benchmark (`scripts/bench/allreduce.sh` starts `--world` of them).
//!
//! The ranks meet through the same rendezvous and connection setup as `lab-rank`, then, for each size, run a
//! few warm-up all-reduces and `--iters` timed ones. Before each timed operation a one-value all-reduce
//! lines the ranks up (a barrier), as the OpenMPI comparison program does with `MPI_Barrier`. Rank 0
//! prints one JSON line per size with the median time, the algorithm bandwidth (bytes / time) and the
//! algorithm used (the one `lab-rank` would pick, unless `--algorithm` forces one), and every rank checks
//! the sums it got.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use clap::Parser;
use lab_workloads::allreduce::{self, Algorithm, RingOptions, RingSpec};
use lab_workloads::rendezvous::{self, Hello, Observer, Resume};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long)]
    rank: u32,
    #[arg(long)]
    world: u32,
    /// Rank 0's rendezvous address.
    #[arg(long)]
    rendezvous: String,
    /// Sizes to measure in KiB, comma-separated.
    #[arg(long, default_value = "4,32,256,1024,16384,65536", value_delimiter = ',')]
    kib: Vec<usize>,
    /// Force one algorithm (recursive-doubling, halving-doubling, ring) instead of choosing by size.
    #[arg(long, value_parser = |s: &str| Algorithm::from_name(s).ok_or_else(|| format!("unknown algorithm {s}")))]
    algorithm: Option<Algorithm>,
    #[arg(long, default_value_t = 20)]
    iters: usize,
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// SO_SNDBUF/SO_RCVBUF of the ring sockets.
    #[arg(long)]
    socket_buffer: Option<usize>,
}

struct Quiet;
impl Observer for Quiet {
    fn joined(&self, _: u32, _: u32) {}
    fn error(&self, kind: &str, message: &str) {
        eprintln!("rendezvous {kind}: {message}");
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let deadline = Instant::now() + Duration::from_secs(60);
    let hello = |ip: IpAddr| Hello {
        protocol: rendezvous::PROTOCOL.into(),
        rank: a.rank,
        world_size: a.world,
        ring_addr: SocketAddr::new(ip, port).to_string(),
        dataset: "bench".into(),
        model_size: 0,
    };
    let outcome = if a.rank == 0 {
        let host = rendezvous::Host::bind(&a.rendezvous, None)?;
        host.run(&hello("127.0.0.1".parse()?), deadline, &Quiet, || {
            Ok((Resume::default(), Vec::new()))
        })?
    } else {
        rendezvous::join(&a.rendezvous, &hello, deadline, &Quiet)?
    };
    let spec = RingSpec {
        rank: a.rank,
        world: a.world,
        peers: &outcome.peers,
        generation: outcome.generation,
        deadline,
        opts: RingOptions {
            socket_buffer: a.socket_buffer,
        },
    };
    let mut ring = allreduce::connect_ring(&spec, &listener, &|w| eprintln!("{w}"))?;
    let timeout = Duration::from_secs(120);
    let mut seq = 0u64;
    let mut barrier = [0.0f32];
    for kib in &a.kib {
        let len = kib * 1024 / 4;
        let algorithm = a.algorithm.unwrap_or_else(|| Algorithm::for_len(len));
        let mut data = vec![0.0f32; len];
        let mut times = Vec::with_capacity(a.iters);
        let (mut wait, mut transfer) = (Duration::ZERO, Duration::ZERO);
        for i in 0..a.warmup + a.iters {
            // Small integers keep the sums exact, so every element can be checked.
            data.iter_mut()
                .enumerate()
                .for_each(|(j, v)| *v = ((j + a.rank as usize) % 7) as f32);
            ring.allreduce(&mut barrier, seq, 0, timeout)?;
            seq += 1;
            let t = Instant::now();
            let stats = ring.allreduce_with(algorithm, &mut data, seq, 0, timeout)?;
            let took = t.elapsed();
            seq += 1;
            for j in [0, len / 3, len - 1] {
                let want: f32 = (0..a.world as usize).map(|r| ((j + r) % 7) as f32).sum();
                anyhow::ensure!(data[j] == want, "element {j}: {} instead of {want}", data[j]);
            }
            if i >= a.warmup {
                times.push(took.as_secs_f64());
                wait += stats.wait;
                transfer += stats.transfer;
            }
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        if a.rank == 0 {
            println!(
                "{{\"impl\":\"lab\",\"algorithm\":\"{}\",\"world\":{},\"kib\":{kib},\"median_s\":{median:.6},\"min_s\":{:.6},\"algbw_mb_s\":{:.1},\"wait_share\":{:.2}}}",
                algorithm.name(),
                a.world,
                times[0],
                (kib * 1024) as f64 / median / 1e6,
                wait.as_secs_f64() / (wait + transfer).as_secs_f64().max(1e-9),
            );
        }
    }
    Ok(())
}
