//! The drill file: its schema, its defaults, and the parser that gives every error a line and a column.
//!
//! A drill is YAML (schema in `docs/drills.md`). Unknown keys are errors, and so are steps in an order that
//! cannot be run (a verify with no remediation before it, a remediation never verified). Checks that need
//! the surrounding values run inside the deserializer of the mapping they concern, so that the parser
//! reports them at that mapping's position rather than at the top of the file.

use std::collections::BTreeSet;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use lab_model::parse_duration;
use lab_model::quantity::format_duration;
use lab_model::snapshot::GoldenSignal;
use lab_model::status::RuntimeKind;
use lab_model::{Fault, FaultKind};
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::error::SpecError;

/// A parsed, checked drill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drill {
    /// `slow-storage`: lowercase letters, digits and `-`.
    pub name: String,
    pub description: Option<String>,
    /// The dataset seed the lab must have been started with (`lab up --seed`), so a run can be replayed.
    pub seed: u64,
    /// What the lab must be to run this drill.
    pub runtime: Requirements,
    /// How long to watch the lab before measuring the baseline (rates settle, a previous drill's cleanup ends).
    #[serde(with = "secs")]
    pub warmup: Duration,
    /// The window over which the pre-fault baseline is measured; the lab must be steady over it.
    #[serde(with = "secs")]
    pub baseline: Duration,
    /// How long the steady state may take to come back after the drill's own cleanup.
    #[serde(with = "secs")]
    pub cleanup_deadline: Duration,
    pub steps: Vec<Step>,
    /// The fixes this drill knows: the right one and the traps (look-alikes' fixes that must fail).
    #[serde(default, skip_serializing_if = "Fixes::is_empty")]
    pub fixes: Fixes,
}

/// A drill's known fixes, as remediation commands, one per remediate step separated by ` | ` (a chained
/// drill has one per incident), with `{server}`, `{rank}`, `{ranks}`, `{cpu}`, ... standing for the
/// parameters of the fault the drill injects (so a variant's fix follows its drawn values). An empty right
/// fix is the lab's own clear.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixes {
    #[serde(default)]
    pub right: Option<String>,
    #[serde(default)]
    pub traps: Vec<String>,
}

impl Fixes {
    fn is_empty(&self) -> bool {
        self.right.is_none() && self.traps.is_empty()
    }
}

/// Which of a drill's known fixes to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixChoice {
    Right,
    /// The `n`th trap, from 1.
    Trap(usize),
}

impl FixChoice {
    /// `right`, `trap` (the first) or `trap:N`.
    ///
    /// # Errors
    /// A message saying what is accepted.
    pub fn parse(s: &str) -> Result<FixChoice, String> {
        match s {
            "right" => Ok(FixChoice::Right),
            "trap" => Ok(FixChoice::Trap(1)),
            _ => s
                .strip_prefix("trap:")
                .and_then(|n| n.parse().ok())
                .filter(|&n| n >= 1)
                .map(FixChoice::Trap)
                .ok_or_else(|| format!("--fix {s:?}: give right, trap, or trap:N (N from 1)")),
        }
    }
}

impl Drill {
    /// The remediation commands of the fix `choice`, one per remediate step, placeholders filled from the
    /// drill's faults (the first fault's parameters, then each later fault's where they differ by step).
    ///
    /// # Errors
    /// A message when the drill does not know that fix, or its commands do not match its remediate steps.
    pub fn fix(&self, choice: FixChoice) -> Result<Vec<String>, String> {
        let text = match choice {
            FixChoice::Right => self.fixes.right.clone(),
            FixChoice::Trap(n) => self.fixes.traps.get(n - 1).cloned(),
        }
        .ok_or_else(|| match choice {
            FixChoice::Right => format!("drill {} names no right fix (its `fixes.right`)", self.name),
            FixChoice::Trap(n) => format!(
                "drill {} has {} trap(s) (its `fixes.traps`), not a trap {n}",
                self.name,
                self.fixes.traps.len()
            ),
        })?;
        let steps = self
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Remediate(_)))
            .count();
        let parts: Vec<String> = text.split(" | ").map(|p| p.trim().to_string()).collect();
        if parts.len() != steps {
            return Err(format!(
                "drill {}: the fix {text:?} has {} part(s) for {steps} remediate step(s)",
                self.name,
                parts.len()
            ));
        }
        // Each remediate step's fault: the latest injected before it.
        let mut faults = Vec::new();
        let mut last = None;
        for s in &self.steps {
            match s {
                Step::Inject(f) => last = Some(f),
                Step::Remediate(_) => faults.push(last),
                _ => {}
            }
        }
        Ok(parts
            .into_iter()
            .zip(faults)
            .map(|(p, f)| f.map_or(p.clone(), |f| fill(&p, f)))
            .collect())
    }

    /// `n` variants of this drill, drawn reproducibly from `seed`: each fault's parameters drawn within its
    /// kind's ranges ([`Fault::vary`]), the alerts it expects moved to the components the variant is on, its
    /// fixes following through their placeholders; named `NAME-v1`, `NAME-v2`, ....
    pub fn vary(&self, n: u32, seed: u64) -> Vec<Drill> {
        use rand::{Rng as _, SeedableRng as _};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let shape = lab_model::fault::Shape {
            ranks: self.runtime.ranks.unwrap_or(4),
            storage_servers: self.runtime.storage_servers.unwrap_or(3),
            gpus: self.runtime.gpus.unwrap_or(4),
        };
        (1..=n)
            .map(|i| {
                let mut d = self.clone();
                d.name = format!("{}-v{i}", self.name);
                let mut renamed: Vec<(String, String)> = Vec::new();
                for s in &mut d.steps {
                    if let Step::Inject(f) = s {
                        let v = f.vary(shape, &mut |lo, hi| rng.random_range(lo..=hi));
                        renamed.extend(f.components().into_iter().zip(v.components()));
                        *f = v;
                    }
                }
                for s in &mut d.steps {
                    if let Step::Expect(e) = s {
                        for a in &mut e.alerts {
                            if let Some((_, to)) = renamed.iter().find(|(from, _)| &a.target == from) {
                                a.target = to.clone();
                            }
                        }
                    }
                }
                let params: Vec<String> = d.faults().iter().map(ToString::to_string).collect();
                d.description = Some(format!(
                    "{} (variant {i} of seed {seed}: {})",
                    self.description.as_deref().unwrap_or(&self.name),
                    params.join(", ")
                ));
                d
            })
            .collect()
    }
}

impl Drill {
    /// This drill with the fix `choice` as the command of each remediate step (the lab's own clear where
    /// the fix's part is empty).
    ///
    /// # Errors
    /// As [`Drill::fix`].
    pub fn with_fix(&self, choice: FixChoice) -> Result<Drill, String> {
        let parts = self.fix(choice)?;
        let mut d = self.clone();
        let mut parts = parts.into_iter();
        for s in &mut d.steps {
            if let Step::Remediate(r) = s {
                r.command = parts.next().filter(|p| !p.trim().is_empty());
            }
        }
        Ok(d)
    }
}

/// `text` with `{name}` replaced by `fault`'s parameter of that name.
fn fill(text: &str, fault: &Fault) -> String {
    let mut out = text.to_string();
    for (k, v) in fault.placeholders() {
        out = out.replace(&format!("{{{k}}}"), &v);
    }
    out
}

impl Drill {
    /// The faults its steps inject, in order.
    pub fn faults(&self) -> Vec<Fault> {
        self.steps
            .iter()
            .filter_map(|s| match s {
                Step::Inject(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }
}

/// What the lab must be for the drill to mean anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Requirements {
    /// The runtimes it can run on (default: any).
    #[serde(default = "all_runtimes")]
    pub kinds: Vec<RuntimeKind>,
    /// The number of ranks the lab must run.
    #[serde(default)]
    pub ranks: Option<u32>,
    /// The number of storage servers.
    #[serde(default)]
    pub storage_servers: Option<u32>,
    /// The counted GPUs of the node.
    #[serde(default)]
    pub gpus: Option<u32>,
    /// Whether ranks' CPU limits must be enforced (cgroups writable).
    #[serde(default)]
    pub cpu_limits: bool,
    /// Whether the lab must run its optional database and writer (`lab up --database`).
    #[serde(default)]
    pub database: bool,
}

fn all_runtimes() -> Vec<RuntimeKind> {
    vec![RuntimeKind::Local, RuntimeKind::Kind, RuntimeKind::Cluster]
}

impl Default for Requirements {
    fn default() -> Self {
        Requirements {
            kinds: all_runtimes(),
            ranks: None,
            storage_servers: None,
            gpus: None,
            cpu_limits: false,
            database: false,
        }
    }
}

/// One step of a drill.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Inject a fault (and prove it took effect).
    Inject(Fault),
    /// Expect the golden signals to catch it.
    Expect(Expect),
    /// Remediate: a command, or the lab's own clear.
    Remediate(Remediate),
    /// Verify the job is back to its pre-fault baseline on its own signals.
    Verify(Verify),
}

impl Step {
    /// The step's key in the file.
    pub fn key(&self) -> &'static str {
        match self {
            Step::Inject(_) => "inject",
            Step::Expect(_) => "expect",
            Step::Remediate(_) => "remediate",
            Step::Verify(_) => "verify",
        }
    }
}

/// What must be seen after the injection, and within how long.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Expect {
    /// Deadline from the start of the injection.
    #[serde(with = "secs")]
    pub within: Duration,
    /// Golden signals that must fire (any rule of that signal).
    pub signals: Vec<GoldenSignal>,
    /// Alerts that must fire on a named target: the rule that names the cause, not only its effect.
    pub alerts: Vec<ExpectedAlert>,
    /// The job's throughput must drop below this percentage of the pre-fault baseline.
    pub throughput_below_pct: Option<f64>,
    /// At least this many ranks must be Running and Ready from detection on, through the hold: while the
    /// signals say the job is broken, Kubernetes sees nothing wrong.
    pub ranks_ready: Option<u32>,
    /// After detection, keep watching this long before going on (measures the fault's steady effect).
    #[serde(with = "secs")]
    pub hold: Duration,
}

/// One alert an expect step waits for: a rule the lab evaluates, firing on one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedAlert {
    /// The rule's name: an `alert:` of `manifests/rules/golden-signals.yaml` (`LabRankHung`) or of a rule
    /// file the lab was started with (`lab up --rules FILE`).
    pub rule: String,
    /// What it must fire for: `rank-1`, `storage-1`, `job`.
    pub target: String,
}

impl std::fmt::Display for ExpectedAlert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} on {}", self.rule, self.target)
    }
}

/// How the drill remediates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Remediate {
    /// A shell command (`sh -c`); `None` is the lab's own clear of what the drill injected.
    pub command: Option<String>,
    /// How long the command may run before it is stopped (and the drill fails).
    #[serde(with = "secs")]
    pub timeout: Duration,
    /// The remediation must save the run first: it fails unless a checkpoint was saved on request
    /// (`lab checkpoint`) after the fault was detected and before its first change to the lab.
    pub checkpoint_before_fix: bool,
}

/// What "recovered" means: the job's own signals, never Ready and never the fault being gone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verify {
    /// Whose signals: the training job's (the default) or the database writer's.
    pub job: VerifyJob,
    /// Training: throughput at least, and step time at most, this many percent away from the pre-fault
    /// baseline. Writer: commits per second at least this many percent under the pre-fault baseline.
    pub within_pct: f64,
    /// Training: ... for this many training steps in a row.
    pub consecutive_steps: u64,
    /// Writer: ... for this long in a row.
    #[serde(with = "secs")]
    pub hold: Duration,
    /// ... reached within this long after the remediation ended.
    #[serde(with = "secs")]
    pub deadline: Duration,
}

/// The job a verify step judges by its own signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerifyJob {
    /// The training job: throughput and step time.
    #[default]
    Training,
    /// The database writer beside it (`lab up --database`): commits per second.
    Writer,
}

/// Defaults a drill file may leave out.
pub mod defaults {
    use std::time::Duration;

    pub const WARMUP: Duration = Duration::from_secs(10);
    pub const BASELINE: Duration = Duration::from_secs(20);
    pub const CLEANUP_DEADLINE: Duration = Duration::from_secs(180);
    pub const EXPECT_WITHIN: Duration = Duration::from_secs(60);
    pub const REMEDIATE_TIMEOUT: Duration = Duration::from_secs(300);
    pub const VERIFY_WITHIN_PCT: f64 = 20.0;
    pub const VERIFY_STEPS: u64 = 30;
    /// How long the writer's commits must stay back (`verify: job: writer`).
    pub const VERIFY_HOLD: Duration = Duration::from_secs(10);
    pub const VERIFY_DEADLINE: Duration = Duration::from_secs(180);
}

/// Parses and checks a drill file's text.
///
/// # Errors
/// [`SpecError`] with the line and column of the offending value.
pub fn parse(text: &str) -> Result<Drill, SpecError> {
    let blank = text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
    if blank {
        return Err(SpecError {
            line: 1,
            column: 1,
            message: "the file is empty: a drill needs at least `name`, `seed` and `steps`".into(),
        });
    }
    match serde_norway::from_str::<Checked<RawDrill>>(text) {
        Ok(Checked(d)) => Ok(d),
        Err(e) => Err(spec_error(&e)),
    }
}

fn spec_error(e: &serde_norway::Error) -> SpecError {
    // An error with no position (an empty file) is about the document as a whole: its start.
    let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
    // The parser writes positions into its messages; they are in `line` and `column` already.
    let message = without_positions(&e.to_string());
    SpecError {
        line,
        column,
        message,
    }
}

/// `message` without its ` at line N column M` parts.
fn without_positions(message: &str) -> String {
    let mut out = String::new();
    let mut rest = message;
    while let Some(i) = rest.find(" at line ") {
        out.push_str(&rest[..i]);
        let after = &rest[i + " at line ".len()..];
        let digits = |s: &str| s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let n = digits(after);
        match after[n..].strip_prefix(" column ") {
            Some(col) if n > 0 => rest = &col[digits(col)..],
            _ => {
                out.push_str(" at line ");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A value checked after its mapping was read, inside the parser's call for that mapping.
trait Check: Sized {
    type Out;
    fn check(self) -> Result<Self::Out, String>;
}

struct Checked<T: Check>(T::Out);

impl<'de, T> Deserialize<'de> for Checked<T>
where
    T: Check + Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Check + Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = T::Out;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of keys to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T::Out, A::Error> {
                let raw = T::deserialize(MapAccessDeserializer::new(map))?;
                raw.check().map_err(de::Error::custom)
            }
        }
        d.deserialize_map(V::<T>(PhantomData)).map(Checked)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDrill {
    #[serde(deserialize_with = "name")]
    name: String,
    #[serde(default)]
    description: Option<String>,
    seed: u64,
    #[serde(default)]
    runtime: Requirements,
    #[serde(default, deserialize_with = "opt_duration")]
    warmup: Option<Duration>,
    #[serde(default, deserialize_with = "opt_duration")]
    baseline: Option<Duration>,
    #[serde(default, deserialize_with = "opt_duration")]
    cleanup_deadline: Option<Duration>,
    #[serde(deserialize_with = "steps")]
    steps: Vec<Step>,
    #[serde(default)]
    fixes: Fixes,
}

impl Check for RawDrill {
    type Out = Drill;
    fn check(self) -> Result<Drill, String> {
        let baseline = self.baseline.unwrap_or(defaults::BASELINE);
        if baseline < Duration::from_secs(5) {
            return Err(format!(
                "baseline: {} is too short to measure a steady rate: use at least 5s",
                format_duration(baseline)
            ));
        }
        if self.runtime.kinds.is_empty() {
            return Err("runtime.kinds: list at least one of local, kind, cluster".into());
        }
        let judges_writer = self
            .steps
            .iter()
            .any(|s| matches!(s, Step::Verify(v) if v.job == VerifyJob::Writer));
        if judges_writer && !self.runtime.database {
            return Err(
                "a verify step judges the database writer (job: writer): set `runtime.database: true`, so the drill \
                 refuses a lab started without `--database`"
                    .into(),
            );
        }
        Ok(Drill {
            name: self.name,
            description: self.description,
            seed: self.seed,
            runtime: self.runtime,
            warmup: self.warmup.unwrap_or(defaults::WARMUP),
            baseline,
            cleanup_deadline: self.cleanup_deadline.unwrap_or(defaults::CLEANUP_DEADLINE),
            steps: self.steps,
            fixes: self.fixes,
        })
    }
}

/// A step's `inject:`: the fault's `kind` and any of its parameters, as its catalogue entry names them
/// (`lab_model::fault`); what is left out takes the fault's defaults. With `kind` first (as every drill
/// here writes it) the parameters are read as they come, so an error points at the value.
struct RawInject(Fault);

impl<'de> Deserialize<'de> for RawInject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fault;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of the fault's `kind` and its parameters (e.g. kind: slow-storage)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fault, A::Error> {
                let Some(first) = map.next_key::<String>()? else {
                    return Err(de::Error::custom("`kind` is missing (e.g. kind: slow-storage)"));
                };
                if first == "kind" {
                    let kind: FaultKind = map.next_value()?;
                    return kind.read_params(Only {
                        map,
                        kind,
                        takes: kind.fields(),
                    });
                }
                // `kind` later on: the whole mapping first, then the fault from it.
                let mut all = serde_norway::Mapping::new();
                all.insert(first.into(), map.next_value()?);
                while let Some((k, v)) = map.next_entry::<serde_norway::Value, serde_norway::Value>()? {
                    all.insert(k, v);
                }
                let kind = all
                    .get("kind")
                    .ok_or_else(|| de::Error::custom("`kind` is missing (e.g. kind: slow-storage)"))?;
                let kind: FaultKind = serde_norway::from_value(kind.clone()).map_err(de::Error::custom)?;
                let takes = kind.fields();
                if let Some(bad) = all
                    .keys()
                    .filter_map(serde_norway::Value::as_str)
                    .find(|k| *k != "kind" && !takes.iter().any(|t| t == k))
                {
                    return Err(de::Error::custom(does_not_apply(bad, kind, &takes)));
                }
                serde_norway::from_value(serde_norway::Value::Mapping(all)).map_err(de::Error::custom)
            }
        }
        d.deserialize_map(V).map(RawInject)
    }
}

/// The error for a parameter `key` that fault `kind` does not take.
fn does_not_apply(key: &str, kind: FaultKind, takes: &[String]) -> String {
    format!("`{key}` does not apply to {kind}: it takes {}", takes.join(", "))
}

/// The rest of an `inject:` mapping, passing on only the parameters its fault takes.
struct Only<A> {
    map: A,
    kind: FaultKind,
    takes: Vec<String>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Only<A> {
    type Error = A::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.map.next_key_seed(Taken(self.kind, &self.takes))? else {
            return Ok(None);
        };
        seed.deserialize(de::IntoDeserializer::<A::Error>::into_deserializer(key))
            .map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A parameter's name, refused (where it stands in the file) when its fault does not take it.
struct Taken<'a>(FaultKind, &'a [String]);

impl<'de> DeserializeSeed<'de> for Taken<'_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        struct V<'a>(FaultKind, &'a [String]);
        impl Visitor<'_> for V<'_> {
            type Value = String;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "one of {}", self.1.join(", "))
            }
            fn visit_str<E: de::Error>(self, key: &str) -> Result<String, E> {
                if self.1.iter().any(|t| t == key) {
                    Ok(key.to_string())
                } else {
                    Err(E::custom(does_not_apply(key, self.0, self.1)))
                }
            }
        }
        d.deserialize_str(V(self.0, self.1))
    }
}

impl Check for RawInject {
    type Out = Fault;
    fn check(self) -> Result<Fault, String> {
        self.0.validate().map_err(|e| e.to_string().replace("--", ""))?;
        Ok(self.0)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(default, deserialize_with = "opt_duration")]
    within: Option<Duration>,
    #[serde(default)]
    signals: Vec<GoldenSignal>,
    #[serde(default)]
    alerts: Vec<ExpectedAlert>,
    #[serde(default, deserialize_with = "opt_pct")]
    throughput_below_pct: Option<f64>,
    #[serde(default)]
    ranks_ready: Option<u32>,
    #[serde(default, deserialize_with = "opt_duration")]
    hold: Option<Duration>,
}

impl Check for RawExpect {
    type Out = Expect;
    fn check(self) -> Result<Expect, String> {
        if self.signals.is_empty() && self.alerts.is_empty() && self.throughput_below_pct.is_none() {
            return Err(
                "an expect step needs something to detect: `signals` (latency, throughput, errors, saturation), `alerts` and/or `throughput_below_pct`"
                    .into(),
            );
        }
        let unique: BTreeSet<_> = self.signals.iter().collect();
        if unique.len() != self.signals.len() {
            return Err("signals: a signal is listed twice".into());
        }
        // Any alert name: the lab's own rules and those of its `lab up --rules` files are known only to
        // the lab, and the drill's check step refuses a name the lab does not evaluate.
        for a in &self.alerts {
            if a.rule.trim().is_empty() || a.rule.chars().any(char::is_whitespace) {
                return Err(format!(
                    "alerts: {:?} is not an alert name: a rule's `alert:` (LabStorageReadLatencyHigh, or one of \
                     a rule file given to `lab up --rules`)",
                    a.rule
                ));
            }
            if a.target.trim().is_empty() {
                return Err(format!(
                    "alerts: {} needs a target (rank-1, storage-1, job)",
                    a.rule
                ));
            }
        }
        let unique: BTreeSet<_> = self.alerts.iter().map(|a| (&a.rule, &a.target)).collect();
        if unique.len() != self.alerts.len() {
            return Err("alerts: an alert is listed twice".into());
        }
        let within = self.within.unwrap_or(defaults::EXPECT_WITHIN);
        if within.is_zero() {
            return Err("within: must be more than 0 (e.g. 60s)".into());
        }
        Ok(Expect {
            within,
            signals: self.signals,
            alerts: self.alerts,
            throughput_below_pct: self.throughput_below_pct,
            ranks_ready: self.ranks_ready,
            hold: self.hold.unwrap_or(Duration::ZERO),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRemediate {
    #[serde(default)]
    command: Option<String>,
    #[serde(default, deserialize_with = "opt_duration")]
    timeout: Option<Duration>,
    #[serde(default, deserialize_with = "flag")]
    checkpoint_before_fix: bool,
}

impl Check for RawRemediate {
    type Out = Remediate;
    fn check(self) -> Result<Remediate, String> {
        if self.command.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err("command: is empty; leave it out to use the lab's own clear".into());
        }
        let timeout = self.timeout.unwrap_or(defaults::REMEDIATE_TIMEOUT);
        if timeout.is_zero() {
            return Err("timeout: must be more than 0 (e.g. 120s)".into());
        }
        Ok(Remediate {
            command: self.command,
            timeout,
            checkpoint_before_fix: self.checkpoint_before_fix,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVerify {
    #[serde(default)]
    job: VerifyJob,
    #[serde(default, deserialize_with = "opt_pct")]
    within_pct: Option<f64>,
    #[serde(default)]
    consecutive_steps: Option<u64>,
    #[serde(default, deserialize_with = "opt_duration")]
    hold: Option<Duration>,
    #[serde(default, deserialize_with = "opt_duration")]
    deadline: Option<Duration>,
}

impl Check for RawVerify {
    type Out = Verify;
    fn check(self) -> Result<Verify, String> {
        match self.job {
            VerifyJob::Writer if self.consecutive_steps.is_some() => {
                return Err(
                    "consecutive_steps counts training steps: the writer's commits are held for a time (`hold: 10s`)"
                        .into(),
                );
            }
            VerifyJob::Training if self.hold.is_some() => {
                return Err(
                    "hold is for the writer's commits (job: writer): the training job is held for `consecutive_steps`"
                        .into(),
                );
            }
            _ => {}
        }
        let consecutive_steps = self.consecutive_steps.unwrap_or(defaults::VERIFY_STEPS);
        if consecutive_steps == 0 {
            return Err("consecutive_steps: must be at least 1".into());
        }
        let hold = self.hold.unwrap_or(defaults::VERIFY_HOLD);
        if hold.is_zero() {
            return Err("hold: must be more than 0 (e.g. 10s)".into());
        }
        let deadline = self.deadline.unwrap_or(defaults::VERIFY_DEADLINE);
        if deadline.is_zero() {
            return Err("deadline: must be more than 0 (e.g. 180s)".into());
        }
        Ok(Verify {
            job: self.job,
            within_pct: self.within_pct.unwrap_or(defaults::VERIFY_WITHIN_PCT),
            consecutive_steps,
            hold,
            deadline,
        })
    }
}

const STEP_KEYS: &str = "inject, expect, remediate or verify";

/// Reads one step, checking it against the steps before it.
struct StepSeed<'a> {
    prior: &'a [Step],
}

impl<'de> DeserializeSeed<'de> for StepSeed<'_> {
    type Value = Step;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Step, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for StepSeed<'_> {
    type Value = Step;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a step: a mapping with one key, {STEP_KEYS}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Step, A::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::custom(format!(
                "an empty step: give one of {STEP_KEYS}"
            )));
        };
        let step = match key.as_str() {
            "inject" => Step::Inject(map.next_value::<Checked<RawInject>>()?.0),
            "expect" => Step::Expect(map.next_value::<Checked<RawExpect>>()?.0),
            "remediate" => Step::Remediate(map.next_value::<Option<Checked<RawRemediate>>>()?.map_or(
                Remediate {
                    command: None,
                    timeout: defaults::REMEDIATE_TIMEOUT,
                    checkpoint_before_fix: false,
                },
                |c| c.0,
            )),
            "verify" => Step::Verify(map.next_value::<Option<Checked<RawVerify>>>()?.map_or(
                Verify {
                    job: VerifyJob::Training,
                    within_pct: defaults::VERIFY_WITHIN_PCT,
                    consecutive_steps: defaults::VERIFY_STEPS,
                    hold: defaults::VERIFY_HOLD,
                    deadline: defaults::VERIFY_DEADLINE,
                },
                |c| c.0,
            )),
            other => {
                return Err(de::Error::custom(format!(
                    "unknown step `{other}`: a step is one of {STEP_KEYS}"
                )));
            }
        };
        if let Some(extra) = map.next_key::<String>()? {
            return Err(de::Error::custom(format!(
                "a step has exactly one key, but `{key}` is followed by `{extra}`: start another step with `- {extra}:`"
            )));
        }
        order_error(self.prior, &step).map_or(Ok(step), |e| Err(de::Error::custom(e)))
    }
}

/// Why `step` cannot follow `prior`, if it cannot.
fn order_error(prior: &[Step], step: &Step) -> Option<String> {
    if prior.is_empty() && !matches!(step, Step::Inject(_)) {
        return Some(format!(
            "the first step must be `inject` (found `{}`): a drill starts by injecting a fault",
            step.key()
        ));
    }
    let last_fix = prior
        .iter()
        .rev()
        .find(|s| matches!(s, Step::Remediate(_) | Step::Verify(_)));
    match step {
        Step::Inject(f) => prior.iter().find_map(|s| match s {
            Step::Inject(g) if g.kind() == f.kind() => Some(format!(
                "{} is injected twice: the lab holds one fault of each kind at a time",
                f.kind()
            )),
            _ => None,
        }),
        Step::Verify(_) if !matches!(last_fix, Some(Step::Remediate(_))) => {
            Some("a `verify` step must follow a `remediate` step: there is nothing to verify yet".into())
        }
        Step::Remediate(_) if matches!(last_fix, Some(Step::Remediate(_))) => {
            Some("two remediations in a row: verify the first one (a `verify` step) before the next".into())
        }
        _ => None,
    }
}

fn steps<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Step>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<Step>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a list of steps, each one of {STEP_KEYS}")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Step>, A::Error> {
            let mut out: Vec<Step> = Vec::new();
            while let Some(step) = seq.next_element_seed(StepSeed { prior: &out })? {
                out.push(step);
            }
            if out.is_empty() {
                return Err(de::Error::custom(
                    "no steps: a drill needs at least inject, remediate and verify",
                ));
            }
            match out
                .iter()
                .rev()
                .find(|s| matches!(s, Step::Remediate(_) | Step::Verify(_)))
            {
                None => Err(de::Error::custom(
                    "no `remediate` step: a drill must remediate and then verify the job is back",
                )),
                Some(Step::Remediate(_)) => Err(de::Error::custom(
                    "the last `remediate` step is never verified: add a `verify` step after it",
                )),
                _ => Ok(out),
            }
        }
    }
    d.deserialize_seq(V)
}

fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a drill name of lowercase letters, digits and '-'")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            let ok = !v.is_empty()
                && v.len() <= 64
                && v.starts_with(|c: char| c.is_ascii_lowercase())
                && v.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
            if ok {
                Ok(v.to_string())
            } else {
                Err(E::custom(format!(
                    "drill name {v:?} is not valid: use 1-64 lowercase letters, digits and '-', starting with a letter"
                )))
            }
        }
    }
    d.deserialize_str(V)
}

fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Duration;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration with a unit, such as 300ms, 60s or 2m")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            parse_duration(v).map_err(|_| {
                E::custom(format!(
                    "{v:?} is not a duration: write a number and a unit, such as 300ms, 60s or 2m"
                ))
            })
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
            Err(E::custom(format!(
                "{v} has no unit: write {v}s or {v}ms (the unit matters too much to guess)"
            )))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
            Err(E::custom(format!("{v} is not a duration: write one such as 60s")))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
            Err(E::custom(format!(
                "{v} has no unit: write {v}s or {v}ms (the unit matters too much to guess)"
            )))
        }
    }
    d.deserialize_any(V).map(Some)
}

fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("true or false")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<bool, E> {
            Ok(v)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
            Err(E::custom(format!("{v:?} is not true or false")))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<bool, E> {
            Err(E::custom(format!("{v} is not true or false")))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<bool, E> {
            Err(E::custom(format!("{v} is not true or false")))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<bool, E> {
            Err(E::custom(format!("{v} is not true or false")))
        }
        fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
            Err(E::custom("no value: write true or false"))
        }
    }
    d.deserialize_any(V)
}

fn opt_pct<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a percentage between 0 and 100 (a number, without %)")
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            if v.is_finite() && v > 0.0 && v < 100.0 {
                Ok(v)
            } else {
                Err(E::custom(format!(
                    "{v} is not a percentage between 0 and 100 (exclusive)"
                )))
            }
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            self.visit_f64(v as f64)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            self.visit_f64(v as f64)
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
            Err(E::custom(format!(
                "{v:?} is not a number: write the percentage as a plain number, e.g. 50"
            )))
        }
    }
    d.deserialize_any(V).map(Some)
}

/// Durations in reports and the parsed form, as seconds.
mod secs {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "\
name: mini
seed: 42
steps:
  - inject:
      kind: slow-storage
  - remediate:
  - verify:
";

    #[test]
    fn a_minimal_drill_takes_the_defaults() {
        let d = parse(MINIMAL).unwrap();
        assert_eq!(d.name, "mini");
        assert_eq!(d.warmup, defaults::WARMUP);
        assert_eq!(d.runtime, Requirements::default());
        assert_eq!(d.steps.len(), 3);
        assert_eq!(d.steps[0], Step::Inject(FaultKind::SlowStorage.default_fault()));
        assert_eq!(
            d.steps[1],
            Step::Remediate(Remediate {
                command: None,
                timeout: defaults::REMEDIATE_TIMEOUT,
                checkpoint_before_fix: false,
            })
        );
    }

    fn err(text: &str) -> SpecError {
        parse(text).unwrap_err()
    }

    #[test]
    fn unknown_keys_are_errors_at_their_line() {
        let e = err(
            "name: x\nseed: 1\nsteps:\n  - inject:\n      kind: slow-storage\n      servr: 2\n  - remediate:\n  - verify:\n",
        );
        assert_eq!(e.line, 6, "{e}");
        assert!(
            e.message.contains("`servr` does not apply to slow-storage"),
            "{e}"
        );
        assert!(e.message.starts_with("steps[0].inject"), "{e}");
    }

    #[test]
    fn bad_values_point_at_the_value() {
        let e = err(
            "name: x\nseed: 1\nsteps:\n  - inject:\n      kind: slow-storage\n      delay: 300\n  - remediate:\n  - verify:\n",
        );
        assert_eq!((e.line, e.column), (6, 14), "{e}");
        assert!(e.message.contains("\"300\" is not a duration"), "{e}");
    }

    #[test]
    fn order_errors_point_at_the_step() {
        let e = err("name: x\nseed: 1\nsteps:\n  - inject:\n      kind: slow-storage\n  - verify:\n");
        assert_eq!(e.line, 6, "{e}");
        assert!(e.message.contains("must follow a `remediate`"), "{e}");
    }

    /// Every file in `tests/fixtures/valid` parses; every file in `tests/fixtures/invalid` fails where its
    /// first line (`# error: LINE:COL: words`) says, with those words in the message.
    #[test]
    fn fixtures() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
        let files = |dir: &str| {
            let mut v: Vec<_> = std::fs::read_dir(root.join(dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
                .collect();
            v.sort();
            v
        };
        let valid = files("valid");
        assert!(valid.len() >= 4);
        for f in valid {
            let text = std::fs::read_to_string(&f).unwrap();
            if let Err(e) = parse(&text) {
                panic!("{}:{e}", f.display());
            }
        }
        let invalid = files("invalid");
        assert!(invalid.len() >= 15);
        for f in invalid {
            let text = std::fs::read_to_string(&f).unwrap();
            let want = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# error: "))
                .unwrap_or_else(|| panic!("{} has no `# error: LINE:COL: words` first line", f.display()));
            let mut parts = want.splitn(3, ':');
            let line: usize = parts.next().unwrap().parse().unwrap();
            let column: usize = parts.next().unwrap().parse().unwrap();
            let words = parts.next().unwrap().trim();
            let e = parse(&text).expect_err(&f.display().to_string());
            assert_eq!((e.line, e.column), (line, column), "{}: {e}", f.display());
            assert!(e.message.contains(words), "{}: {e}", f.display());
        }
    }

    #[test]
    fn positions_are_taken_out_of_messages() {
        assert_eq!(
            without_positions(
                "did not find expected key at line 6 column 6, while parsing a block mapping at line 4 column 7"
            ),
            "did not find expected key, while parsing a block mapping"
        );
        assert_eq!(without_positions("at line noon"), "at line noon");
        assert!(err("# only a comment\n").message.contains("empty"));
    }

    #[test]
    fn kind_may_come_after_the_parameters() {
        let d = parse(
            "name: x\nseed: 1\nsteps:\n  - inject:\n      server: 2\n      kind: slow-storage\n  - remediate:\n  - verify:\n",
        )
        .unwrap();
        let Step::Inject(Fault::SlowStorage(p)) = &d.steps[0] else {
            panic!("{:?}", d.steps[0]);
        };
        assert_eq!((p.server, p.delay), (2, Duration::from_millis(300)));
        let e = err(
            "name: x\nseed: 1\nsteps:\n  - inject:\n      rank: 2\n      kind: slow-storage\n  - remediate:\n  - verify:\n",
        );
        assert!(e.message.contains("`rank` does not apply to slow-storage"), "{e}");
    }

    #[test]
    fn fields_of_another_fault_are_refused() {
        let e = err(
            "name: x\nseed: 1\nsteps:\n  - inject:\n      kind: slow-storage\n      rank: 2\n  - remediate:\n  - verify:\n",
        );
        assert_eq!((e.line, e.column), (6, 7), "{e}");
        assert!(e.message.contains("`rank` does not apply to slow-storage"), "{e}");
    }
}
