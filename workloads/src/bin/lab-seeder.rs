//! `lab-seeder`: writes the lab's synthetic dataset into SeaweedFS, each rank's shards on its server.
//!
//! Flags map onto [`SeedOptions`]; everything else happens in [`lab_workloads::seeder::seed`].

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lab_model::format::error_chain;
use lab_workloads::dataset::parse_placement;
use lab_workloads::seeder::{self, SeedOptions};

/// Seeds the lab's training dataset: a deterministic synthetic regression dataset, cut into shards, each
/// rank's shards placed on the storage server chosen for it, plus a manifest, all in SeaweedFS.
///
/// Storage servers are found by rack name in the master's topology: start each volume server with
/// `weed volume -rack storage-<i> -dataCenter lab`. Rank r's shards go to storage-(r mod servers) unless
/// --placement says otherwise. Running it again with the same parameters verifies the stored data and
/// reuses it (keeping the job's checkpoint); different parameters, or --fresh, overwrite it (and clear
/// the checkpoint). Prints one line of JSON saying what it did. Every flag can also be set through the
/// environment variable named in brackets.
#[derive(Debug, Parser)]
#[command(name = "lab-seeder", version, max_term_width = 110)]
struct Cli {
    /// The SeaweedFS master, HOST:PORT.
    #[arg(long, env = "LAB_MASTER")]
    master: String,

    /// The number of ranks to cut the data for.
    #[arg(long, env = "LAB_RANKS")]
    ranks: u32,

    /// The dataset seed: the same seed gives the same bytes.
    #[arg(long, env = "LAB_SEED")]
    seed: u64,

    /// The dataset's name (a SeaweedFS collection; a-z, 0-9, - and _).
    #[arg(long, env = "LAB_DATASET", default_value = "lab-train")]
    dataset: String,

    /// Samples (rows) in each shard.
    #[arg(long, env = "LAB_SAMPLES_PER_SHARD", default_value_t = 4096)]
    samples_per_shard: u32,

    /// Shards for each rank.
    #[arg(long, env = "LAB_SHARDS_PER_RANK", default_value_t = 4)]
    shards_per_rank: u32,

    /// Input features per sample.
    #[arg(long, env = "LAB_FEATURES", default_value_t = 32)]
    features: u32,

    /// The storage servers to wait for and place on: storage-0 .. storage-(N−1).
    #[arg(long, env = "LAB_SERVERS", default_value_t = 3)]
    servers: u32,

    /// Placement overrides, rank=server pairs: `0=storage-2,3=1`.
    #[arg(long, env = "LAB_PLACEMENT", default_value = "")]
    placement: String,

    /// Rewrite the dataset even if an identical one is stored (and clear the job's checkpoint).
    #[arg(long, env = "LAB_FRESH")]
    fresh: bool,

    /// Write nothing: check that the stored dataset is the one these flags describe, that every shard
    /// reads back intact from its server and the checkpoint passes its checksums; exit 5 if not.
    #[arg(long, env = "LAB_VERIFY", conflicts_with = "fresh")]
    verify: bool,

    /// How long to wait for the master and the storage servers to appear. E.g. 60s.
    #[arg(long, env = "LAB_SEED_WAIT", default_value = "60s", value_parser = duration)]
    wait: Duration,

    /// Timeout of one storage request.
    #[arg(long, env = "LAB_STORAGE_TIMEOUT", default_value = "30s", value_parser = duration)]
    storage_timeout: Duration,
}

fn duration(s: &str) -> Result<Duration, String> {
    lab_model::parse_duration(s).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let placement = match parse_placement(&cli.placement) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("lab-seeder: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = SeedOptions {
        master: cli.master,
        dataset: cli.dataset,
        ranks: cli.ranks,
        seed: cli.seed,
        features: cli.features,
        samples_per_shard: cli.samples_per_shard,
        shards_per_rank: cli.shards_per_rank,
        servers: cli.servers,
        placement,
        fresh: cli.fresh,
        verify: cli.verify,
        wait: cli.wait,
        request_timeout: cli.storage_timeout,
    };
    match seeder::seed(&opts, &|line| eprintln!("lab-seeder: {line}")) {
        Ok(summary) => {
            println!("{}", serde_json::to_string(&summary).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("lab-seeder: {}", error_chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
