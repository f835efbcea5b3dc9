//! The command line: every flag, its help, and the option structs it maps onto.

use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use lab_session::{Fault, Millicores};

/// Straggler Lab: one slow component stalls a synchronous training job while Kubernetes says
/// every pod is Ready. Stand the lab up, break it the three ways the seed story did, watch Ready
/// against the job's own signals, and prove a fix on step time and throughput.
///
/// A first session:
///   lab up                            # storage, dataset, 4 ranks, learned baseline
///   lab console                       # live view (takes the terminal: open a second one)
///   lab fault inject slow-storage     # storage-1 answers 300 ms late
///   lab status                        # 4/4 Ready, training at a fraction of normal
///   lab fault clear --all
///   lab down                          # leaves nothing behind
#[derive(Debug, Parser)]
#[command(name = "lab", version, max_term_width = 110, verbatim_doc_comment)]
pub struct Cli {
    /// The lab to act on; several labs with different names can run side by side.
    #[arg(long, global = true, env = "LAB_NAME", default_value = "lab")]
    pub name: String,
    /// Log what the lab does on stderr: `-v` each step with its time, `-vv` debug detail, `-vvv` everything.
    /// `RUST_LOG` (for example `RUST_LOG=lab_runtime=debug`) overrides it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// The whole command line as clap sees it, with the exit statuses and the environment variables after the
/// help: what `lab --help`, the completions and the man page are made from.
pub fn command() -> clap::Command {
    Cli::command().after_help(format!("{}\n{}", crate::exit::Exit::help(), crate::env::help()))
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Stand the lab up: SeaweedFS, the dataset, the ranks, and a learned training baseline.
    Up(UpArgs),
    /// Stop everything the lab started and remove what it created (faults included).
    Down(JsonArg),
    /// One screen: the Kubernetes view beside the training view.
    Status(StatusArgs),
    /// Inject, list and clear faults.
    #[command(subcommand)]
    Fault(FaultCmd),
    /// Set the number of ranks (StatefulSet replicas). Does not change the job's world size.
    Scale(ScaleArgs),
    /// Change the job's configuration.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Change one rank's CPU limit in place (the template stays as it is).
    Resize(ResizeArgs),
    /// Replace one rank with a new one from the template.
    Restart(RestartArgs),
    /// Re-apply the rank template; ranks are replaced only if it changes.
    Apply(ApplyArgs),
    /// What runs beside one rank, inside its CPU limit: list it, stop what is not the rank.
    #[command(subcommand)]
    Rank(RankCmd),
    /// The jobs on the lab's storage (the training job and jobs of other teams): list, throttle, stop.
    #[command(subcommand)]
    Job(JobCmd),
    /// Move the job's data off a storage server, or back (the fix for a slow storage node).
    #[command(subcommand)]
    Storage(StorageCmd),
    /// The database beside the job (`lab up --database`): its pods, the standby's template, delete a pod.
    #[command(subcommand)]
    Db(DbCmd),
    /// The lab's container images, built offline from this machine's files into archives.
    #[command(subcommand)]
    Image(ImageCmd),
    /// Ask the training job to save a checkpoint now, and wait until it has: the run is safe before a fix.
    ///
    /// Rank 0 saves the model after the step it is in (to SeaweedFS, where a restarted job resumes from)
    /// and reports the step; the command prints that step and when it was written, and records the action
    /// in the change log (`lab incident` shows it). It changes nothing else. It fails, and records nothing,
    /// when the job is not training (rank 0 waits for its peers), when the job does not save within
    /// --timeout (stalled: no step finishes), or when rank 0 cannot be reached (the lab is down).
    ///
    /// Examples:
    ///   lab checkpoint                          # e.g. "checkpoint saved: step 1412 at 2026-…Z (0.3 s)"
    ///   lab checkpoint && lab fault clear --all # save the run first, then fix
    ///   lab checkpoint --json --timeout 2m
    #[command(verbatim_doc_comment)]
    Checkpoint(CheckpointArgs),
    /// The live console: per-storage-server latency against pod Ready. It takes the terminal (open a
    /// second one for commands); keys inject and clear the three seed faults unless --read-only.
    Console(ConsoleArgs),
    /// Every lab on this machine (under the state folder): its runtime, age and health.
    List(JsonArg),
    /// A component's log (a rank, a storage server, the master, the supervisor, the watcher …), on every
    /// runtime; an unknown name lists the lab's components.
    ///
    /// Examples:
    ///   lab logs rank-1 --tail 20
    ///   lab logs storage-1 -f        # follow, as tail -f (Ctrl-C ends it)
    #[command(verbatim_doc_comment)]
    Logs(LogsArgs),
    /// The lab's version, the git commit it was built from, and the versions of SeaweedFS, kind and
    /// Kubernetes the lab runs (of the running lab --name, else what `lab up` would use here).
    Version(JsonArg),
    /// Print a shell completion script.
    ///
    /// Examples:
    ///   lab completion bash > ~/.local/share/bash-completion/completions/lab
    ///   lab completion zsh > "${fpath[1]}/_lab"
    ///   lab completion fish > ~/.config/fish/completions/lab.fish
    #[command(verbatim_doc_comment)]
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `lab man > lab.1 && man ./lab.1`.
    Man,
    /// Run and check fault drills.
    #[command(subcommand)]
    Drill(DrillCmd),
    /// The incident bundle: wiring, changes, firing signals and per-dependency latency.
    Incident(IncidentArgs),
    /// The seed story end to end: each fault injected, detected, remediated and verified.
    Demo(DemoArgs),
    /// Score an agent against recorded incidents, without a lab (a folder from `lab drill run --record`).
    ///
    /// Each incident's bundle, cut to the evidence level, goes to the agent (its path in
    /// LAB_INCIDENT_BUNDLE); its plan is checked and scored against the recorded truth, and its commands
    /// against the plans verified live: a recorded right fix is `fixed`, a recorded trap `failed`, commands
    /// never run live `unknown` (never guessed). Example:
    ///   lab replay agents/tests/fixtures/recorded --agent examples/agents/reference.py --evidence full
    #[command(verbatim_doc_comment)]
    Replay(ReplayArgs),
    /// Serve the lab to an agent over the Model Context Protocol (MCP, JSON-RPC on stdin/stdout).
    ///
    /// The agent is the MCP client: it starts `lab mcp` as its server and calls its tools — status,
    /// incident, query, logs, dependencies, processes, changes (what the evidence level offers), and the
    /// acts checkpoint and remediate (one allowed `lab` command per call, gated by --approve), and diagnose
    /// (what it concluded). Every call is recorded (--calls). One agent at a time per lab. Nothing but
    /// protocol messages goes to stdout; logs go to stderr.
    ///
    /// A client's configuration (the `mcpServers` block most MCP clients read):
    ///   {"mcpServers": {"straggler-lab": {"command": "lab", "args": ["--name", "lab", "mcp", "--evidence", "full"]}}}
    ///
    /// Examples:
    ///   lab mcp --evidence wiring --approve ask        # a person approves each act on the terminal
    ///   lab mcp --approve never --calls calls.jsonl    # a read-only agent, its calls kept
    ///   lab mcp --approve policy.yaml                  # classes earn autonomy one verified fix at a time
    #[command(verbatim_doc_comment)]
    Mcp(McpArgs),
    /// Print the least RBAC a lab needs on a cluster you own (`lab up --kubeconfig`), to apply.
    ///
    /// A Role and RoleBinding in the lab's namespace and, unless --namespace-only, a ClusterRole and
    /// ClusterRoleBinding for what lies outside it (making and deleting the lab's own namespace, the
    /// nodes' GPUs, advertising GPUs). `lab up --kubeconfig` checks the same permissions first and lists
    /// every one that is missing.
    ///
    /// Examples:
    ///   lab rbac --user alice | kubectl apply -f -
    ///   lab rbac --namespace team-a --namespace-only --service-account ci/runner > lab-rbac.yaml
    #[command(verbatim_doc_comment)]
    Rbac(RbacArgs),
    /// Runs a local lab's supervisor (started by `lab up`; not for direct use).
    #[command(name = "__supervise", hide = true)]
    Supervise { dir: PathBuf },
    /// Runs the lab's watcher, which keeps its telemetry and alerts live for `lab status` (started by
    /// `lab up`; not for direct use).
    #[command(name = "__watch", hide = true)]
    Watch,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("subject").required(true).args(["user", "group", "service_account"])))]
pub struct RbacArgs {
    /// The lab's namespace [default: straggler-lab-<name>, the one `lab up` makes].
    #[arg(long)]
    pub namespace: Option<String>,
    /// Grant it to this user (as the cluster's authentication names them).
    #[arg(long)]
    pub user: Option<String>,
    /// Grant it to this group.
    #[arg(long)]
    pub group: Option<String>,
    /// Grant it to this service account, NAMESPACE/NAME.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub service_account: Option<String>,
    /// Only the Role and RoleBinding: the namespace exists (pass it to `lab up --namespace`) and the lab
    /// needs nothing cluster-wide (no --advertise-gpus).
    #[arg(long)]
    pub namespace_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RuntimeArg {
    /// kind when Docker and kind are usable, else local.
    Auto,
    /// Supervised processes on this machine.
    Local,
    /// A kind cluster the lab creates (needs Docker and kind).
    Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DelayPathArg {
    /// tc netem where the node kernel has sch_netem, else the latency proxy.
    Auto,
    /// Only tc netem; fail where the kernel lacks it.
    Netem,
    /// Only the latency proxy beside each storage server.
    Proxy,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Where to run. With --kubeconfig, an existing cluster is used instead.
    #[arg(long, value_enum, default_value_t = RuntimeArg::Auto)]
    pub runtime: RuntimeArg,
    /// Training ranks.
    #[arg(long, default_value_t = 4)]
    pub ranks: u32,
    /// SeaweedFS volume servers.
    #[arg(long, default_value_t = 3)]
    pub storage_servers: u32,
    /// Counted GPUs on the node; each rank needs one.
    #[arg(long, default_value_t = 4)]
    pub gpus: u32,
    /// Each rank's CPU limit.
    #[arg(long, default_value = "400m")]
    pub cpu: Millicores,
    /// The dataset's seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// How long a rank waits at the collective or rendezvous before its watchdog fails it (e.g. 120s).
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub watchdog: std::time::Duration,
    /// Take the local lab's ports in order from here (each must be free) instead of free ones.
    #[arg(long)]
    pub port_base: Option<u16>,
    /// Keep what was created when a step fails, for debugging.
    #[arg(long)]
    pub retain: bool,
    /// Also run a database beside the job: a PostgreSQL primary (db-0), a streaming standby (db-1, a
    /// StatefulSet's pod with a template) and a writer committing to the primary (lab-writer), for the
    /// sync-replica fault. Needs PostgreSQL installed (or LAB_PG_BIN): the local runtime runs it, the kind
    /// runtime builds its image from it.
    #[arg(long)]
    pub database: bool,
    /// Use the existing cluster of this kubeconfig (no cluster is created or deleted).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context.
    #[arg(long, requires = "kubeconfig")]
    pub context: Option<String>,
    /// The namespace (default straggler-lab-<name>, created and deleted by the lab).
    #[arg(long)]
    pub namespace: Option<String>,
    /// The counted GPU resource on Kubernetes (e.g. nvidia.com/gpu on a real cluster).
    #[arg(long, default_value = "lab.dev/gpu")]
    pub gpu_resource: String,
    /// Advertise --gpus of --gpu-resource on the nodes (default: on for kind, off for an existing cluster).
    #[arg(long)]
    pub advertise_gpus: Option<bool>,
    /// The lab image on Kubernetes.
    #[arg(long)]
    pub image: Option<String>,
    /// The image pull policy on Kubernetes (IfNotPresent, or Never for nodes without a registry).
    #[arg(long)]
    pub pull_policy: Option<String>,
    /// How the slow-storage fault adds its delay on Kubernetes: tc netem in a container added to the storage
    /// pod where the node kernel has sch_netem, else the latency proxy (auto); or only one of them.
    #[arg(long, value_enum, default_value_t = DelayPathArg::Auto)]
    pub delay_path: DelayPathArg,
    /// Deploy Prometheus with the golden-signal rules (default: on for kind, off for an existing cluster).
    #[arg(long)]
    pub monitoring: Option<bool>,
    /// kind: the node image (pinned by digest by default; Kubernetes 1.33 or newer). Where it cannot be
    /// pulled, the offline image scripts/env/kind/node-image.sh builds (straggler-lab/kind-node:v1.34.4).
    #[arg(long)]
    pub node_image: Option<String>,
    /// kind: nodes in the cluster, 1 to 4 (a control plane, the rest workers); every node runs ranks and
    /// the --gpus are split across them (4 GPUs on 2 nodes: 2 + 2).
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// kind: use the lab image already in Docker (--image) instead of building it from the Dockerfile.
    #[arg(long)]
    pub no_build: bool,
    /// Kubernetes: how long any one wait (a rollout, the seeding job, a resize) may take.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    pub wait_timeout: std::time::Duration,
    /// How long to wait for training to reach a steady baseline.
    #[arg(long, default_value = "180s", value_parser = parse_duration)]
    pub baseline_timeout: std::time::Duration,
    /// Also evaluate this Prometheus rule file (repeat for more): its alerts join the lab's own in the
    /// console, `lab status` and the drills. Each alert needs `labels.signal` (latency, throughput, errors
    /// or saturation); PromQL the lab cannot evaluate is refused before anything starts
    /// (docs/telemetry.md lists what it evaluates).
    #[arg(long = "rules", value_name = "FILE")]
    pub rules: Vec<PathBuf>,
    /// Print the result as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Keys change nothing (no inject, no clear): for a demo where a stray key must not break the lab.
    #[arg(long)]
    pub read_only: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The component, as `lab status` names it (rank-1, storage-0, storage-master, …), or `supervisor`
    /// (local) or `watcher`.
    pub component: String,
    /// Keep printing lines as they are written.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines written so far.
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

#[derive(Debug, Args)]
pub struct CheckpointArgs {
    /// How long to wait for the job to save it (e.g. 30s, 2m).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// Print the checkpoint saved as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print the whole snapshot as JSON (schema: docs/telemetry.md, "The snapshot").
    #[arg(long)]
    pub json: bool,
    /// Watch the job this long before answering, instead of reading the lab's live snapshot. Without it,
    /// status answers at once from the snapshot the lab's watcher keeps (telemetry and alerts evaluated
    /// every second since `lab up`), and watches for 6 s only when there is no fresh one. Rates need two
    /// scrapes, and a golden signal fires only once its rule has held for its `for` (up to 5 s).
    #[arg(long, value_parser = parse_duration)]
    pub window: Option<std::time::Duration>,
}

#[derive(Debug, Subcommand)]
pub enum FaultCmd {
    /// The catalogue: each fault with its parameters.
    List(JsonArg),
    /// Inject a fault and prove it took effect; with --for it clears itself when the time is up.
    Inject(InjectArgs),
    /// Clear a fault by id (or by kind), or every fault with --all, restoring exactly what was there.
    Clear(ClearArgs),
    /// The faults in the ledger and their change records.
    Status(JsonArg),
}

#[derive(Debug, Args)]
pub struct InjectArgs {
    /// Clear the fault this long after it took effect (e.g. 60s, 5m), even after this command has exited:
    /// the lab's watcher clears it and the change log says so.
    #[arg(long = "for", value_name = "DURATION", global = true, value_parser = parse_duration)]
    pub lifetime: Option<std::time::Duration>,
    /// Print the ledger entry and its changes as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// The fault and its parameters, as the catalogue defines them (`lab fault list`).
    #[command(subcommand)]
    pub fault: Fault,
}

/// `lab db …`: the database beside the job (`lab up --database`).
///
/// Its standby `db-1` is a StatefulSet's pod: it is made from the template as the template is when the
/// pod is made, and keeps that version. Changing the template changes no pod that exists — not even one
/// stuck Pending on the old version; delete that pod by name and it is made again from the template.
///
///   lab db status                          # pods, template, the primary's synchronous_standby_names
///   lab db template --node-selector ''     # the template asks for no node label
///   lab db delete-pod db-1                 # made again from the template as it is now
#[derive(Debug, Subcommand)]
pub enum DbCmd {
    /// The database's pods, the standby's template and the version its pod was made from, the primary's
    /// synchronous_standby_names and the writer's signals.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Set the standby StatefulSet's template: its node selector (KEY=VALUE,...; '' for none). Pods that
    /// exist keep the version they were made from.
    Template {
        /// Node labels the standby's pods ask for: KEY=VALUE,... ('' for none).
        #[arg(long)]
        node_selector: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete a database pod by name (db-0, db-1, lab-writer): it is made again from its template.
    DeletePod {
        /// The pod (db-1 is the standby).
        pod: String,
        #[arg(long)]
        json: bool,
    },
}

/// `lab image …`.
#[derive(Debug, Subcommand)]
pub enum ImageCmd {
    /// Build the lab's images offline, without Docker or a registry, as `docker save` archives in a
    /// folder: for a cluster without a registry (`ctr -n k8s.io images import`, `kind load
    /// image-archive`) or for pushing (`docker load -i`, then `docker push`).
    ///
    /// The lab image is the workspace's binaries beside this `lab` with the libraries they load, weed
    /// (LAB_WEED, PATH or .tools/bin), tc and busybox; the database image is this machine's PostgreSQL;
    /// Prometheus is the `prometheus` on PATH; pause is the project's pod sandbox program, compiled
    /// static with `cc` (or CC). One line per image: reference, archive, image id. An archive whose inputs
    /// did not change is kept as it is (same inputs, same id).
    ///
    /// Examples:
    ///   lab image build                                  # all four, into ~/.cache/straggler-lab/images
    ///   lab image build --only pause,lab --out /srv/images --json
    ///   docker load -i "$(lab image build --only lab --json | jq -r '.images[0].archive')"
    #[command(verbatim_doc_comment)]
    Build(ImageBuildArgs),
}

/// An image `lab image build` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImageArg {
    /// The pod sandbox of a bare node (straggler-lab/pause).
    Pause,
    /// The lab image every lab container runs (straggler-lab/lab).
    Lab,
    /// The database image of `lab up --database` (straggler-lab/db).
    Db,
    /// Prometheus from the `prometheus` on PATH (straggler-lab/prometheus).
    Prometheus,
}

#[derive(Debug, Args)]
pub struct ImageBuildArgs {
    /// The folder the archives go to (default: the machine's image cache, LAB_CACHE/images, which `lab up
    /// --runtime kind` reads).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Which images, comma-separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "IMAGE,...")]
    pub only: Vec<ImageArg>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `lab job …`.
///
/// A noisy neighbour (another team's job reading hard from the storage server a rank depends on) is fixed
/// at its source: hold that job to a read rate, or stop it. Draining the server or restarting the rank
/// leaves the neighbour where it is.
///
/// Examples:
///   lab job list                             # every job, with the reads per second it makes
///   lab job throttle nightly-etl --rate 20   # hold it to 20 reads/s
///   lab job stop nightly-etl
#[derive(Debug, Subcommand)]
#[command(verbatim_doc_comment)]
pub enum JobCmd {
    /// Every job on the lab's storage: the training job and jobs of other teams, with their read rates.
    List(JobListArgs),
    /// Hold a job of another team to a read rate (its process is replaced with the new setting).
    Throttle(JobThrottleArgs),
    /// Stop a job of another team.
    Stop(JobStopArgs),
}

#[derive(Debug, Args)]
pub struct JobListArgs {
    /// Measure read rates over this long.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub window: std::time::Duration,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JobThrottleArgs {
    /// The job (from `lab job list`); a rank or the training job is refused.
    pub job: String,
    /// Reads per second: `20`, `20/s` or `20r/s`; more than 0 (to stop it, use `lab job stop`).
    #[arg(long, value_parser = parse_rate)]
    pub rate: f64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct JobStopArgs {
    /// The job (from `lab job list`); a rank or the training job is refused.
    pub job: String,
    #[arg(long)]
    pub json: bool,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    lab_session::parse_read_rate(s)
}

#[derive(Debug, Args)]
pub struct ClearArgs {
    /// The fault's id (from `lab fault status`) or its kind.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub id: Option<String>,
    /// Clear every injected fault.
    #[arg(long)]
    pub all: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ScaleArgs {
    /// What to scale (only `ranks`).
    #[arg(value_parser = ["ranks"])]
    pub what: String,
    /// The new count.
    pub count: u32,
}

#[derive(Debug, Subcommand)]
pub enum StorageCmd {
    /// Move every volume off storage server N to the healthy servers with SeaweedFS's own tools; the
    /// ranks find the new place through the master. Refused for an unknown server, one already drained,
    /// or the last healthy one (nothing is changed then).
    ///
    /// Example: lab storage drain 1
    Drain(DrainArgs),
    /// Move back to storage server N the volumes its drain moved away.
    ///
    /// Example: lab storage undrain 1
    Undrain(DrainArgs),
}

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// The storage server (0, 1, 2, …).
    pub server: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Set the world size every rank expects; running ranks restart to pick it up.
    WorldSize { size: u32 },
}

#[derive(Debug, Args)]
pub struct ResizeArgs {
    /// What to resize (only `rank`).
    #[arg(value_parser = ["rank"])]
    pub what: String,
    /// The rank.
    pub rank: u32,
    /// The new CPU limit (e.g. 400m).
    #[arg(long)]
    pub cpu: Millicores,
}

#[derive(Debug, Args)]
pub struct RestartArgs {
    /// What to restart (only `rank`).
    #[arg(value_parser = ["rank"])]
    pub what: String,
    /// The rank.
    pub rank: u32,
}

#[derive(Debug, Subcommand)]
pub enum RankCmd {
    /// Every process in the rank's CPU limit (its cgroup), the rank's own included, with the CPU time each
    /// used. Something beside the rank slows it down without any change to its spec or the template.
    Procs {
        /// The rank.
        rank: u32,
        #[arg(long)]
        json: bool,
    },
    /// The settings of this rank alone (LAB_* variables beside the template's), or change one: the rank
    /// restarts to pick it up. E.g. `lab rank env 1 --unset LAB_DEVICE_FAULT_AFTER`.
    Env {
        /// The rank.
        rank: u32,
        /// Set NAME=VALUE.
        #[arg(long, value_name = "NAME=VALUE", conflicts_with = "unset")]
        set: Option<String>,
        /// Remove the setting NAME.
        #[arg(long, value_name = "NAME")]
        unset: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Stop one process beside the rank (from `lab rank procs`). The rank's own process is refused:
    /// `lab restart rank N` replaces the rank.
    Stop {
        /// The rank.
        rank: u32,
        /// The process to stop.
        #[arg(long)]
        pid: u32,
    },
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The CPU limit the template should say.
    #[arg(long)]
    pub cpu: Millicores,
}

#[derive(Debug, Subcommand)]
pub enum DrillCmd {
    /// Check drill files without running them; errors give line and column.
    Validate { files: Vec<PathBuf> },
    /// Run drills against the running lab: exit 0 if every drill passed, 1 if one failed, 3 if one
    /// errored or its cleanup failed, 130 if interrupted (docs/cli.md).
    Run(Box<DrillRunArgs>),
    /// The built-in drills.
    List(JsonArg),
}

#[derive(Debug, Args)]
pub struct DrillRunArgs {
    /// Drill files, or names of built-in drills (`lab drill list`: slow-storage, throttled-rank,
    /// unplaceable-rank, stuck-rollout, rank-crash, rank-hang, slow-compute, competing-job, slow-disk,
    /// sync-replica (needs `lab up --database`), chained-week).
    #[arg(required = true)]
    pub files: Vec<String>,
    /// A remediation command to run instead of the drill's own (gets LAB_INCIDENT_BUNDLE in its environment).
    /// Given once, it replaces every remediate step's command; given once per remediate step (a chained
    /// drill such as chained-week has two), each step runs its own, in order.
    #[arg(long, value_name = "CMD")]
    pub remediate: Vec<String>,
    /// Write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write a JUnit XML report here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write a self-contained HTML page here: per drill a timeline chart, the verdict, figures and evidence.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Remediate with the drill's own known fix instead of its remediate steps' commands: `right`, or a trap
    /// (`trap` for the first, `trap:N`), as the drill file's `fixes` names them (placeholders filled from
    /// what the drill injects). `lab drill list` shows them.
    #[arg(long, value_name = "right|trap|trap:N", value_parser = parse_fix, conflicts_with_all = ["remediate", "agents"])]
    pub fix: Option<lab_session::drills::FixChoice>,
    /// Run K variants of each drill instead of the drill itself: each fault's parameters drawn within its
    /// ranges (another server or rank, another delay, CPU cut, rank count, neighbour or crash pace), the
    /// expected alerts and the fixes following the drawn values. The same --seed draws the same variants;
    /// the report lists each variant's parameters.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=50))]
    pub vary: Option<u32>,
    /// The seed the variants are drawn from.
    #[arg(long, default_value_t = 1, requires = "vary")]
    pub seed: u64,
    /// Run each drill N times in a row (1 to 100). The summary, the JSON report and the JUnit file give
    /// each drill's pass rate and the median, minimum and maximum of every figure; the run passes only if
    /// every run of every drill passed.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Ask this agent for a plan at each remediation instead of running a command. It is run with `sh -c`,
    /// finds the incident bundle's path in LAB_INCIDENT_BUNDLE (and the level in LAB_EVIDENCE), and
    /// prints a plan on stdout (JSON, docs/agents.md); the lab checks the plan (only allowed `lab`
    /// commands, run as argv), records it, runs it, and scores it against what was injected.
    #[arg(long, value_name = "CMD", conflicts_with_all = ["remediate", "mcp_agent"], group = "agents")]
    pub agent: Option<String>,
    /// Let this agent investigate and act through the lab's MCP server at each remediation. It is run with
    /// `sh -c` and is the MCP client: it starts the server as LAB_MCP_SERVER says (a JSON argv, e.g.
    /// ["/usr/bin/lab", "mcp", "--session", "…/session.json"]; LAB_MCP_CONFIG names the same as an
    /// `mcpServers` file) and calls its tools until it is done, then exits. The drill verifies on the job's
    /// own signals; when that fails, the agent is started again, told why (the incident's
    /// previous_attempts), up to --attempts times. Every call is recorded and scored (docs/agents.md).
    #[arg(long, value_name = "CMD", conflicts_with = "remediate", group = "agents")]
    pub mcp_agent: Option<String>,
    /// How many tries an agent gets at each incident: after a failed verification it is asked again, with
    /// the failure as context (the seed's loop).
    #[arg(long, default_value_t = 2, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=5), requires = "agents")]
    pub attempts: u32,
    /// How much of the incident the agent sees: pods (pod health alone), metrics, wiring (+ pods' resources and
    /// rank → server edges), changes (+ the change log) or full (+ the latency summary).
    #[arg(long, value_enum, default_value_t = EvidenceArg::Full, requires = "agents")]
    pub evidence: EvidenceArg,
    /// Who approves the agent's acts: auto (each checked command runs), ask (each is asked: from
    /// --approvals, else on the terminal, else declined), never, or the path of an approval policy file
    /// (each cause class starts at ask and runs on its own after K verified fixes in a row; the record is
    /// kept in the lab's folder across drills). A declined command ends the attempt; a plan's declined
    /// command ends the drill with the verdict DECLINED.
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|ask|never|POLICY",
        requires = "agents"
    )]
    pub approve: String,
    /// Answers to the asks, one per line (`yes` or `no`), in the order they are asked.
    #[arg(long, value_name = "FILE", requires = "agents")]
    pub approvals: Option<PathBuf>,
    /// How long the agent may take (per attempt).
    #[arg(long, default_value = "120s", value_parser = parse_duration, requires = "agents")]
    pub agent_timeout: std::time::Duration,
    /// Keep each incident for `lab replay`: its whole bundle, the lab from the detection to the first
    /// remediation, the ranks' processes, the ledger's truth, the timeline, and the verified outcome of every
    /// fix tried — an agent's plan or acts, or a remediation made of `lab` commands (`--fix`, `--remediate`)
    /// — added to what DIR already holds.
    #[arg(long, value_name = "DIR")]
    pub record: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct McpArgs {
    /// How much the agent may see: pods (pod health alone), metrics (+ the golden signals, queries and
    /// logs), wiring (+ dependencies, processes, resources against templates), changes (+ the change log) or
    /// full (+ the latency summary). Tools above it are not offered.
    #[arg(long, value_enum, default_value_t = EvidenceArg::Full)]
    pub evidence: EvidenceArg,
    /// Who approves the agent's remediate calls: auto (each allowed command runs), ask (each is asked: from
    /// --approvals, else on the terminal, else declined), never (a read-only agent), or the path of an
    /// approval policy file (each cause class starts at ask and runs on its own after K verified fixes in a
    /// row; docs/agents.md).
    #[arg(long, default_value = "auto", value_name = "auto|ask|never|POLICY")]
    pub approve: String,
    /// Answers to the asks, one per line (`yes` or `no`), in order.
    #[arg(long, value_name = "FILE")]
    pub approvals: Option<PathBuf>,
    /// Append every call (time, tool, arguments, outcome, result size, what an act changed) to FILE as JSON
    /// lines.
    #[arg(long, value_name = "FILE")]
    pub calls: Option<PathBuf>,
    /// Serve one attempt of a drill as the session file written by `lab drill run --mcp-agent` says (the
    /// lab, the level, the incident, the approval); the other flags are then ignored.
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    pub session: Option<PathBuf>,
    /// Serve a recorded incident, without a lab, as the replay session file written by `lab replay
    /// --mcp-agent` says: reads answer from the recording, acts are judged against what was verified live.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EvidenceArg {
    Pods,
    Metrics,
    Wiring,
    Changes,
    Full,
}

impl EvidenceArg {
    pub fn level(self) -> lab_session::EvidenceLevel {
        use lab_session::EvidenceLevel as L;
        match self {
            EvidenceArg::Pods => L::Pods,
            EvidenceArg::Metrics => L::Metrics,
            EvidenceArg::Wiring => L::Wiring,
            EvidenceArg::Changes => L::Changes,
            EvidenceArg::Full => L::Full,
        }
    }
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("replayed").required(true).args(["agent", "mcp_agent"])))]
pub struct ReplayArgs {
    /// The recording folder.
    pub dir: PathBuf,
    /// A planning agent, as for `lab drill run --agent`: it reads each incident's bundle and prints a plan.
    #[arg(long, value_name = "CMD", conflicts_with = "mcp_agent")]
    pub agent: Option<String>,
    /// An interactive agent, as for `lab drill run --mcp-agent`: it investigates each incident through the
    /// lab's MCP tools, served from the recording (`lab mcp --replay`), and its acts are judged against what
    /// was verified live instead of being run.
    #[arg(long, value_name = "CMD")]
    pub mcp_agent: Option<String>,
    /// The evidence level the agent reads (repeat it, or give several, for each in turn).
    #[arg(long, value_enum, num_args = 1.., default_values_t = [EvidenceArg::Full])]
    pub evidence: Vec<EvidenceArg>,
    /// How long the agent may take per incident.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub agent_timeout: std::time::Duration,
    /// Fail (exit 1) unless exactly N incidents are fixed at every level given; for a regression test.
    #[arg(long, value_name = "N")]
    pub expect_fixed: Option<usize>,
    /// Replay everything twice and fail (exit 1) unless every score is the same both times.
    #[arg(long)]
    pub expect_stable: bool,
    /// Print the replay as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct IncidentArgs {
    /// Print the bundle as JSON.
    #[arg(long)]
    pub json: bool,
    /// Watch the job this long before answering, instead of reading the lab's live snapshot. Without it,
    /// the bundle comes at once from the snapshot the lab's watcher keeps, and from 6 s of watching only
    /// when there is no fresh one (long enough for the rules' `for`, up to 5 s, to pass).
    #[arg(long, value_parser = parse_duration)]
    pub window: Option<std::time::Duration>,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the lab running after the demo (default: take it down).
    #[arg(long)]
    pub keep: bool,
    /// Where to run the demo.
    #[arg(long, value_enum, default_value_t = RuntimeArg::Auto)]
    pub runtime: RuntimeArg,
}

fn parse_fix(s: &str) -> Result<lab_session::drills::FixChoice, String> {
    lab_session::drills::FixChoice::parse(s)
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    lab_session::parse_duration(s).map_err(|e| e.to_string())
}
