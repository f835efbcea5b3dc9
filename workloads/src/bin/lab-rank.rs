//! `lab-rank`: one rank of the lab's synchronous data-parallel training job.
//!
//! Flags map onto [`RankOptions`]; everything else happens in [`lab_workloads::rank::run`].

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use lab_model::format::error_chain;
use lab_workloads::rank::{self, RankOptions};

/// One rank of the lab's training job: reads its batches from SeaweedFS, computes a gradient, sums it with
/// its peers in a TCP ring all-reduce, and checkpoints (rank 0).
///
/// Every flag can also be set through the environment variable named in brackets. The metrics endpoint
/// (/metrics, /readyz, /healthz) starts first and /readyz answers 200 from then on, even while the rank
/// waits for peers or is stalled: readiness says the process is up, not that the job makes progress.
///
/// Exit codes: 0 after --max-steps, 2 bad flags or data shape, 3 watchdog timeout (at rendezvous, at the
/// all-reduce, or reading data), 4 a peer went away, misbehaved or disagreed, 5 storage failure, 6 the
/// (simulated) accelerator failed (--device-fault-after).
#[derive(Debug, Parser)]
// A flag given twice takes its last value: the per-rank settings (--rank-settings) are added after the
// template's own flags and win over them, as a rank's own environment does on the local runtime.
#[command(name = "lab-rank", version, max_term_width = 110, args_override_self = true)]
struct Cli {
    /// This rank, 0 to world size − 1. Rank 0 hosts the rendezvous and writes checkpoints.
    #[arg(
        long,
        env = "LAB_RANK",
        required_unless_present = "rank_from_hostname",
        conflicts_with = "rank_from_hostname"
    )]
    rank: Option<u32>,

    /// Take the rank from the host name's trailing number: a StatefulSet pod `ranks-3` is rank 3.
    #[arg(long, env = "LAB_RANK_FROM_HOSTNAME")]
    rank_from_hostname: bool,

    /// The number of ranks the job needs; no rank takes a step until all of them have joined.
    #[arg(long, env = "LAB_WORLD_SIZE")]
    world_size: u32,

    /// The SeaweedFS master, HOST:PORT.
    #[arg(long, env = "LAB_MASTER")]
    master: String,

    /// Rank 0's rendezvous address, HOST:PORT: rank 0 listens there, the others connect (the name is
    /// resolved again on every attempt, so a DNS name or Service IP works).
    #[arg(long, env = "LAB_RENDEZVOUS")]
    rendezvous: String,

    /// What rank 0 binds for the rendezvous [default: the --rendezvous address, or all interfaces on
    /// its port when that address is not local].
    #[arg(long, env = "LAB_RENDEZVOUS_BIND")]
    rendezvous_bind: Option<String>,

    /// Where this rank listens for its ring neighbour, ADDR:PORT (port 0: any free port; the actual
    /// port is announced at rendezvous).
    #[arg(long, env = "LAB_LISTEN", default_value = "0.0.0.0:0")]
    listen: String,

    /// The host name or IP other ranks reach this rank's ring listener on [default: the local address
    /// of this rank's connection to the rendezvous].
    #[arg(long, env = "LAB_ADVERTISE")]
    advertise: Option<String>,

    /// Where the metrics endpoint listens, ADDR:PORT.
    #[arg(long, env = "LAB_METRICS_LISTEN", default_value = "0.0.0.0:9400")]
    metrics_listen: String,

    /// The dataset to train on, as seeded by lab-seeder.
    #[arg(long, env = "LAB_DATASET", default_value = "lab-train")]
    dataset: String,

    /// Samples per step on this rank (one HTTP range read of this many rows).
    #[arg(long, env = "LAB_BATCH_SIZE", default_value_t = 256)]
    batch_size: u32,

    /// Model parameters, which is also the length of the gradient every step all-reduces.
    #[arg(long, env = "LAB_MODEL_SIZE", default_value_t = 8192)]
    model_size: usize,

    /// Time each step spends on the accelerator after the host's work (decode, gradient, update), as a
    /// host thread waits for its GPU kernels: the rank sleeps, using no CPU. It sizes the job so that a
    /// healthy rank needs about two thirds of a 400m CPU limit and a cut limit binds. E.g. 20ms, 0s.
    #[arg(long, env = "LAB_DEVICE_TIME", default_value = "10ms", value_parser = duration)]
    device_time: Duration,

    /// SGD learning rate.
    #[arg(long, env = "LAB_LEARNING_RATE", default_value_t = 0.5)]
    learning_rate: f32,

    /// Rank 0 writes a checkpoint every this many steps (0: never).
    #[arg(long, env = "LAB_CHECKPOINT_EVERY", default_value_t = 100)]
    checkpoint_every: u64,

    /// The longest a rank waits at rendezvous, at the all-reduce, or for its data before it exits
    /// non-zero so that the job restarts from its checkpoint (like NCCL's watchdog). E.g. 120s, 2m.
    #[arg(long, env = "LAB_WATCHDOG_TIMEOUT", default_value = "120s", value_parser = duration)]
    watchdog_timeout: Duration,

    /// Timeout of one storage request (connect, or each read and write on the connection).
    #[arg(long, env = "LAB_STORAGE_TIMEOUT", default_value = "30s", value_parser = duration)]
    storage_timeout: Duration,

    /// Stop after this many steps and print a JSON summary (0: train forever).
    #[arg(long, env = "LAB_MAX_STEPS", default_value_t = 0)]
    max_steps: u64,

    /// Log a line every this many steps (0: never).
    #[arg(long, env = "LAB_LOG_EVERY", default_value_t = 100)]
    log_every: u64,

    /// SO_SNDBUF/SO_RCVBUF of the ring connections in bytes [default: the kernel's auto-tuning].
    #[arg(long, env = "LAB_SOCKET_BUFFER")]
    socket_buffer: Option<usize>,

    /// Simulate a failing accelerator: the rank exits (code 6) after this many steps of each restarted
    /// process (the pod's first failure: --device-fault-first), as a bad device or driver setting crashes
    /// one rank in a loop (0: never). Its peers see a collective error; the job restarts from its
    /// checkpoint and the steps since are lost.
    #[arg(long, env = "LAB_DEVICE_FAULT_AFTER", default_value_t = 0)]
    device_fault_after: u64,

    /// With --device-fault-after: the first failure in this pod comes after this many steps instead, so
    /// the fault shows within seconds (0: as --device-fault-after). The pod's failures are counted in
    /// --scratch-dir; without it every process runs --device-fault-after steps.
    #[arg(long, env = "LAB_DEVICE_FAULT_FIRST", default_value_t = lab_model::actions::DEVICE_FAULT_FIRST_STEPS)]
    device_fault_first: u64,

    /// A folder that outlives this rank's restarts but not its pod (an emptyDir volume on Kubernetes),
    /// where the rank keeps what a restarted process must know: its device's failures so far.
    #[arg(long, env = "LAB_SCRATCH_DIR")]
    scratch_dir: Option<std::path::PathBuf>,

    /// A folder of settings for single ranks, read once at start: a file `rank-<N>.<NAME>` sets NAME (one
    /// of the LAB_* variables above) for rank N alone, over the flags and the environment. On Kubernetes
    /// the job's ConfigMap mounted there: the ranks share one template, so this is how one rank gets a
    /// setting of its own.
    #[arg(long, env = "LAB_RANK_SETTINGS")]
    rank_settings: Option<std::path::PathBuf>,

    /// Settings for single ranks from the environment, read once at start: a variable `rank-<N>.<NAME>`
    /// sets NAME for rank N alone, as a `--rank-settings` file would. On Kubernetes the job's ConfigMap
    /// as the container's environment (`envFrom`), which the kubelet reads afresh at each start of the
    /// container, so a restarted container has the setting as it is now (a mounted ConfigMap is
    /// refreshed later, on the kubelet's own schedule).
    #[arg(long, env = "LAB_RANK_SETTINGS_FROM_ENV", conflicts_with = "rank_settings")]
    rank_settings_from_env: bool,

    /// The lab's control token (environment only, so it is not in the process's arguments): rank 0
    /// takes a checkpoint request (POST /checkpoint) only with it in the X-Lab-Control-Token header.
    /// Unset: from anyone who reaches the port (the local runtime's loopback).
    #[arg(long, hide = true, env = "LAB_CONTROL_TOKEN", hide_env_values = true)]
    control_token: Option<String>,
}

/// The settings of rank `rank` alone among `vars` (`rank-<N>.<NAME>` names), by name.
fn rank_settings_in(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    rank: u32,
) -> std::collections::BTreeMap<String, String> {
    let prefix = format!("rank-{rank}.");
    vars.into_iter()
        .filter_map(|(k, v)| {
            let name = k.to_str()?.strip_prefix(&prefix)?.to_string();
            Some((name, v.to_string_lossy().trim().to_string()))
        })
        .collect()
}

/// The settings of rank `rank` alone in `dir` (`rank-<N>.<NAME>` files), by name; a missing folder has none.
fn rank_settings(
    dir: &std::path::Path,
    rank: u32,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("reading --rank-settings {}", dir.display())),
    };
    let prefix = format!("rank-{rank}.");
    for entry in entries {
        let entry = entry.with_context(|| format!("reading --rank-settings {}", dir.display()))?;
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(name) = file.strip_prefix(&prefix) else {
            continue;
        };
        let path = entry.path();
        let value = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the rank setting {}", path.display()))?;
        out.insert(name.to_string(), value.trim().to_string());
    }
    Ok(out)
}

/// The command line with this rank's own settings added as flags (the flag whose variable each names).
fn with_rank_settings(
    args: Vec<std::ffi::OsString>,
    settings: &std::collections::BTreeMap<String, String>,
) -> anyhow::Result<Vec<std::ffi::OsString>> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let mut args = args;
    for (name, value) in settings {
        let flag = cmd
            .get_arguments()
            .find(|a| a.get_env().is_some_and(|e| e == name.as_str()) && a.get_action().takes_values())
            .and_then(|a| a.get_long())
            .with_context(|| format!("the rank setting {name} is not a setting of lab-rank"))?;
        args.push(format!("--{flag}={value}").into());
    }
    Ok(args)
}

fn duration(s: &str) -> Result<Duration, String> {
    lab_model::parse_duration(s).map_err(|e| e.to_string())
}

/// The trailing number of a host name: `ranks-3` → 3, `ranks-3.ranks.lab.svc` → 3.
fn rank_from_hostname(name: &str) -> Option<u32> {
    let short = name.split('.').next()?;
    let (_, n) = short.rsplit_once('-')?;
    n.parse().ok()
}

/// The parsed command line, with this rank's own settings from --rank-settings applied.
fn parse(args: Vec<std::ffi::OsString>) -> anyhow::Result<Cli> {
    let cli = Cli::try_parse_from(args.clone())?;
    let settings = match (&cli.rank_settings, cli.rank_settings_from_env) {
        (Some(dir), _) => rank_settings(dir, rank_of(&cli)?)?,
        (None, true) => rank_settings_in(std::env::vars_os(), rank_of(&cli)?),
        (None, false) => return Ok(cli),
    };
    if settings.is_empty() {
        return Ok(cli);
    }
    Ok(Cli::try_parse_from(with_rank_settings(args, &settings)?)?)
}

fn rank_of(cli: &Cli) -> anyhow::Result<u32> {
    Ok(match (cli.rank, cli.rank_from_hostname) {
        (Some(r), _) => r,
        (None, true) => {
            let name = match std::env::var("HOSTNAME") {
                Ok(h) if !h.is_empty() => h,
                _ => nix::unistd::gethostname()
                    .context("cannot read the host name for --rank-from-hostname")?
                    .to_string_lossy()
                    .into_owned(),
            };
            rank_from_hostname(&name).with_context(|| {
                format!("--rank-from-hostname: host name {name:?} does not end in -<number> (like ranks-3)")
            })?
        }
        (None, false) => bail!("give --rank (LAB_RANK) or --rank-from-hostname"),
    })
}

fn options(cli: Cli) -> anyhow::Result<RankOptions> {
    let rank = rank_of(&cli)?;
    Ok(RankOptions {
        rank,
        world_size: cli.world_size,
        master: cli.master,
        rendezvous: cli.rendezvous,
        rendezvous_bind: cli.rendezvous_bind,
        listen: cli.listen,
        advertise: cli.advertise,
        metrics_listen: cli.metrics_listen,
        dataset: cli.dataset,
        batch_size: cli.batch_size,
        model_size: cli.model_size,
        device_time: cli.device_time,
        learning_rate: cli.learning_rate,
        checkpoint_every: cli.checkpoint_every,
        watchdog_timeout: cli.watchdog_timeout,
        storage_timeout: cli.storage_timeout,
        max_steps: cli.max_steps,
        log_every: cli.log_every,
        socket_buffer: cli.socket_buffer,
        device_fault_after: cli.device_fault_after,
        device_fault_first: cli.device_fault_first,
        scratch_dir: cli.scratch_dir,
        control_token: cli.control_token,
    })
}

/// The signals the rank acts on, blocked in the calling thread and so in every thread started after it.
///
/// In a container the rank is PID 1, and the kernel delivers to a PID namespace's init only the signals it
/// has a handler for: without one, SIGTERM does nothing and every deletion of a rank pod waited out the
/// whole grace period (5 s) for the SIGKILL, while the rank went on training with its peers. The signals
/// are blocked in every thread (they inherit the mask) and one thread waits for them
/// ([`on_signals`]), so no signal handler runs in the middle of the training loop.
fn block_signals() -> anyhow::Result<nix::sys::signal::SigSet> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGUSR1);
    set.thread_block().context("blocking SIGTERM and SIGUSR1")?;
    Ok(set)
}

/// Waits, in a thread of its own, for the signals [`block_signals`] blocked:
/// - SIGTERM: the rank stops as asked (exit 0, which no crash rule counts);
/// - SIGUSR1: its simulated accelerator fails now (exit 6, the device's code, counted in `scratch` as
///   the pod's failures are). The lab sends it when a device fault is set on a rank whose settings take
///   effect through a restart of its container (Kubernetes): that restart is the device's first failure.
fn on_signals(
    set: nix::sys::signal::SigSet,
    rank: u32,
    scratch: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    use nix::sys::signal::Signal;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || match set.wait() {
            Ok(Signal::SIGUSR1) => {
                let device = lab_workloads::device::DeviceFault {
                    after: 0,
                    first: 0,
                    scratch,
                };
                if let Err(e) = device.record() {
                    eprintln!("rank {rank}: cannot record the device's failure in --scratch-dir: {e}");
                }
                eprintln!(
                    "rank {rank}: the accelerator failed as its fault took effect (simulated device fault, SIGUSR1)"
                );
                std::process::exit(i32::from(rank::DEVICE_FAULT_EXIT));
            }
            Ok(_) => {
                eprintln!("lab-rank: SIGTERM: stopping");
                std::process::exit(0);
            }
            Err(e) => eprintln!("lab-rank: waiting for signals: {e}"),
        })
        .context("starting the signal thread")?;
    Ok(())
}

fn main() -> ExitCode {
    let signals = match block_signals() {
        Ok(set) => set,
        Err(e) => {
            eprintln!("lab-rank: {e:#}");
            return ExitCode::from(2);
        }
    };
    let cli = match parse(std::env::args_os().collect()) {
        Ok(c) => c,
        Err(e) => match e.downcast::<clap::Error>() {
            // --help, --version and bad flags as clap prints them.
            Ok(e) => e.exit(),
            Err(e) => {
                eprintln!("lab-rank: {e:#}");
                return ExitCode::from(2);
            }
        },
    };
    let opts = match options(cli) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("lab-rank: {e:#}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = on_signals(signals, opts.rank, opts.scratch_dir.clone()) {
        eprintln!("lab-rank: {e:#}");
        return ExitCode::from(2);
    }
    match rank::run(&opts) {
        Ok(summary) => {
            println!("{}", serde_json::to_string(&summary).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rank {}: {}", opts.rank, error_chain(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_statefulset_host_names() {
        assert_eq!(rank_from_hostname("ranks-3"), Some(3));
        assert_eq!(
            rank_from_hostname("lab-ranks-12.ranks.lab.svc.cluster.local"),
            Some(12)
        );
        assert_eq!(rank_from_hostname("ranks"), None);
        assert_eq!(rank_from_hostname("ranks-x"), None);
    }

    #[test]
    fn a_rank_setting_wins_over_the_template_flag_for_that_rank_only() {
        let dir = std::env::temp_dir().join(format!("lab-rank-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rank-1.LAB_DEVICE_FAULT_AFTER"), "150\n").unwrap();
        std::fs::write(dir.join("rank-12.LAB_DEVICE_FAULT_AFTER"), "7").unwrap();
        std::fs::write(dir.join("world-size"), "4").unwrap();
        let args = |rank: &str| -> Vec<std::ffi::OsString> {
            [
                "lab-rank",
                "--rank",
                rank,
                "--world-size=4",
                "--master=m:9333",
                "--rendezvous=r:29500",
                "--device-fault-after=0",
                &format!("--rank-settings={}", dir.display()),
            ]
            .iter()
            .map(Into::into)
            .collect()
        };
        assert_eq!(parse(args("1")).unwrap().device_fault_after, 150);
        assert_eq!(parse(args("12")).unwrap().device_fault_after, 7);
        assert_eq!(parse(args("2")).unwrap().device_fault_after, 0);
        std::fs::write(dir.join("rank-2.LAB_NO_SUCH_THING"), "1").unwrap();
        let e = parse(args("2")).unwrap_err().to_string();
        assert!(
            e.contains("LAB_NO_SUCH_THING is not a setting of lab-rank"),
            "{e}"
        );
        std::fs::write(dir.join("rank-3.LAB_DEVICE_FAULT_AFTER"), "soon").unwrap();
        assert!(parse(args("3")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
        // No folder: no settings.
        let mut a = args("1");
        a.pop();
        a.push("--rank-settings=/nonexistent-lab-rank-settings".into());
        assert_eq!(parse(a).unwrap().device_fault_after, 0);
    }

    #[test]
    fn rank_settings_from_the_environment_are_this_ranks_own() {
        let vars = [
            ("rank-1.LAB_DEVICE_FAULT_AFTER", "150\n"),
            ("rank-12.LAB_DEVICE_FAULT_AFTER", "7"),
            ("world-size", "4"),
            ("PATH", "/bin"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let one = rank_settings_in(vars.clone(), 1);
        assert_eq!(one.len(), 1);
        assert_eq!(one["LAB_DEVICE_FAULT_AFTER"], "150");
        assert_eq!(rank_settings_in(vars.clone(), 12)["LAB_DEVICE_FAULT_AFTER"], "7");
        assert!(rank_settings_in(vars, 2).is_empty());
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
