//! The rules: Prometheus rule files loaded, checked and evaluated in the lab, and each alert's pending →
//! firing state with its since-time.
//!
//! The lab's own rules are `manifests/rules/golden-signals.yaml`, the file it also ships to Prometheus,
//! embedded here ([`BUILTIN`]); a team adds its own with `lab up --rules FILE` ([`RuleSet::with`]). A
//! rule file is read the way Prometheus reads it: groups of recording and alerting rules, evaluated in
//! order at each tick, a recording rule's output written to the store where the rules after it (and the
//! rule itself, a tick later) read it. Everything a rule uses is checked when the file is loaded: a
//! construct the lab's evaluator cannot evaluate is refused there, naming the rule and the construct.
//!
//! The lab files every alert under one of its four golden signals: an alerting rule needs
//! `labels.signal` (`latency`, `throughput`, `errors` or `saturation`). Its `annotations.summary` may use
//! `{{ $labels.name }}` and `{{ $value }}`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Arc, OnceLock};

use lab_model::snapshot::GoldenSignal;
use serde::Deserialize;

use crate::error::{QueryError, RuleError};
use crate::labels::Labels;
use crate::promql::ast::NAME;
use crate::promql::eval::{Cache, Ctx, Value};
use crate::promql::lexer::{format_duration, parse_duration};
use crate::promql::{Expr, parse};
use crate::store::Store;
use crate::template::Template;

/// The rule file the lab ships to Prometheus, and evaluates itself.
pub const BUILTIN: &str = include_str!("../../manifests/rules/golden-signals.yaml");
/// Where [`BUILTIN`] lives in the project, as error messages name it.
pub const BUILTIN_ORIGIN: &str = "manifests/rules/golden-signals.yaml";

/// How far back any rule may read (a range plus its offset): the store keeps at least what the rules
/// read, and this bounds its memory.
pub const MAX_HISTORY_MS: i64 = 10 * 60_000;

/// Names of the recorded series the lab's own views read, as the built-in rule file records them.
pub mod recorded {
    /// `sum(rate(lab_samples_total[10s])) or vector(0)`: the job's throughput, steady.
    pub const JOB_SAMPLES: &str = "lab:job_samples_per_second";
    /// The same over 3 s: what the throughput rule compares with the baseline.
    pub const JOB_SAMPLES_SHORT: &str = "lab:job_samples_per_second:rate3s";
    /// The baseline latch: the rule that reads its own previous output.
    pub const JOB_SAMPLES_BASELINE: &str = "lab:job_samples_per_second:baseline";
    /// The job's median step time.
    pub const JOB_STEP_SECONDS: &str = "lab:job_step_seconds";
    /// Read p50 per `server`, as the ranks see it.
    pub const STORAGE_P50: &str = "lab:storage_read_p50_seconds";
    /// Read p99 per `server`, as the ranks see it.
    pub const STORAGE_P99: &str = "lab:storage_read_p99_seconds";
    /// GET p50 per storage `instance`, as SeaweedFS reports it.
    pub const STORAGE_SERVER_GET_P50: &str = "lab:storage_server_get_p50_seconds";
    /// Throttled CFS periods / periods, per rank `instance`.
    pub const RANK_CPU_THROTTLED_RATIO: &str = "lab:rank_cpu_throttled_ratio";
    /// The longest a read of an unstarved rank waited for each `server` in the window.
    pub const READ_WAITING_UNSTARVED: &str = "lab:storage_read_waiting_seconds:unstarved";
    /// The largest share of an unstarved rank's time spent waiting on each `server`'s reads.
    pub const READ_WAIT_SHARE_UNSTARVED: &str = "lab:storage_read_wait_share:unstarved";
    /// The same share over 10 s: steady where a server ends reads quickly between long waits.
    pub const READ_WAIT_SHARE_10S_UNSTARVED: &str = "lab:storage_read_wait_share_10s:unstarved";
    /// Compute seconds per step, per rank `instance`.
    pub const RANK_COMPUTE_PER_STEP: &str = "lab:rank_compute_seconds_per_step";

    /// Every name above: the built-in rule file must record each (checked by the tests).
    pub const ALL: [&str; 12] = [
        JOB_SAMPLES,
        JOB_SAMPLES_SHORT,
        JOB_SAMPLES_BASELINE,
        JOB_STEP_SECONDS,
        STORAGE_P50,
        STORAGE_P99,
        STORAGE_SERVER_GET_P50,
        RANK_CPU_THROTTLED_RATIO,
        READ_WAITING_UNSTARVED,
        READ_WAIT_SHARE_UNSTARVED,
        READ_WAIT_SHARE_10S_UNSTARVED,
        RANK_COMPUTE_PER_STEP,
    ];
}

/// The built-in rules, parsed once.
///
/// # Panics
/// Never in a released lab: the embedded file is checked by the crate's tests.
pub fn builtin() -> Arc<RuleSet> {
    static RULES: OnceLock<Arc<RuleSet>> = OnceLock::new();
    Arc::clone(RULES.get_or_init(|| {
        Arc::new(
            RuleSet::parse(BUILTIN, BUILTIN_ORIGIN)
                .expect("the built-in rule file loads (checked by the tests)"),
        )
    }))
}

/// Loaded rule files: their groups, in order.
#[derive(Debug, Clone)]
pub struct RuleSet {
    groups: Vec<Group>,
}

/// One group of rules, evaluated in order.
#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    /// The file it came from.
    pub origin: String,
    /// Its `interval:`; `None` evaluates it every tick (about once a second).
    pub interval_ms: Option<i64>,
    pub rules: Vec<Rule>,
}

/// One rule.
#[derive(Debug, Clone)]
pub struct Rule {
    pub kind: RuleKind,
    pub expr: Expr,
    /// The expression as written.
    pub expr_text: String,
}

/// A recording or an alerting rule.
#[derive(Debug, Clone)]
pub enum RuleKind {
    Record { name: String, labels: Labels },
    Alert(AlertRule),
}

impl Rule {
    /// The alert's or the recorded series' name.
    pub fn name(&self) -> &str {
        match &self.kind {
            RuleKind::Record { name, .. } => name,
            RuleKind::Alert(a) => &a.name,
        }
    }
}

/// An alerting rule's settings.
#[derive(Debug, Clone)]
pub struct AlertRule {
    pub name: String,
    /// Its `labels.signal`.
    pub signal: GoldenSignal,
    /// `for:`, ms.
    pub for_ms: i64,
    /// `keep_firing_for:`, ms: a firing alert whose condition lapses stays firing this long.
    pub keep_firing_ms: i64,
    /// Its labels, each a template.
    pub labels: Vec<(String, Template)>,
    /// `annotations.summary`.
    pub summary: Option<Template>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    groups: Vec<RawGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    name: String,
    #[serde(default)]
    interval: Option<String>,
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    rules: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    record: Option<String>,
    #[serde(default)]
    alert: Option<String>,
    expr: String,
    #[serde(default, rename = "for")]
    for_: Option<String>,
    #[serde(default)]
    keep_firing_for: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// The signal an alert's `labels.signal` names.
fn signal_of(s: &str) -> Option<GoldenSignal> {
    Some(match s {
        "latency" => GoldenSignal::Latency,
        "throughput" => GoldenSignal::Throughput,
        "errors" => GoldenSignal::Errors,
        "saturation" => GoldenSignal::Saturation,
        _ => return None,
    })
}

impl RuleSet {
    /// Parses and checks a Prometheus rule file; `origin` names it in errors.
    ///
    /// # Errors
    /// [`RuleError`] naming the rule and what is wrong: YAML that is not a rule file, a rule without a
    /// name or a signal, an expression that is not PromQL or uses PromQL the lab does not evaluate, a
    /// template action it cannot fill in, a window longer than the lab keeps.
    pub fn parse(text: &str, origin: &str) -> Result<RuleSet, RuleError> {
        let raw: RawFile = serde_norway::from_str(text).map_err(|source| RuleError::Yaml {
            origin: origin.to_string(),
            source,
        })?;
        let mut groups = Vec::new();
        let mut seen_groups = HashSet::new();
        for g in raw.groups {
            let invalid = |rule: &str, problem: String| RuleError::Invalid {
                origin: origin.to_string(),
                group: g.name.clone(),
                rule: rule.to_string(),
                problem,
            };
            if g.name.trim().is_empty() {
                return Err(invalid("the group", "a group needs a name".into()));
            }
            if !seen_groups.insert(g.name.clone()) {
                return Err(invalid("the group", "another group has the same name".into()));
            }
            if g.limit.is_some_and(|l| l > 0) {
                return Err(invalid(
                    "the group",
                    "limit is not supported by the lab's evaluator: remove it".into(),
                ));
            }
            let interval_ms = match &g.interval {
                None => None,
                Some(s) => match parse_duration(s) {
                    Some(ms) if ms >= 1_000 => Some(ms),
                    _ => {
                        return Err(invalid(
                            "the group",
                            format!("interval {s:?} is not a duration of 1s or more (e.g. 1s, 30s)"),
                        ));
                    }
                },
            };
            let mut rules = Vec::new();
            for (i, r) in g.rules.into_iter().enumerate() {
                rules.push(check_rule(origin, &g.name, i, r)?);
            }
            groups.push(Group {
                name: g.name,
                origin: origin.to_string(),
                interval_ms,
                rules,
            });
        }
        let set = RuleSet { groups };
        let mut records = HashSet::new();
        for (group, rule) in set.rules() {
            if let RuleKind::Record { name, .. } = &rule.kind
                && !records.insert(name.as_str())
            {
                return Err(RuleError::Invalid {
                    origin: origin.to_string(),
                    group: group.name.clone(),
                    rule: format!("record {name}"),
                    problem: "another rule records the same name: the two would overwrite each other".into(),
                });
            }
        }
        Ok(set)
    }

    /// Reads and parses the rule file at `path`.
    ///
    /// # Errors
    /// [`RuleError::Read`] when it cannot be read, else as [`RuleSet::parse`].
    pub fn load(path: &std::path::Path) -> Result<RuleSet, RuleError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RuleError::Read {
            origin: origin.clone(),
            source,
        })?;
        RuleSet::parse(&text, &origin)
    }

    /// These rules and then `more`'s (a team's own after the lab's).
    ///
    /// # Errors
    /// [`RuleError::Invalid`] when `more` records a series these rules record, or names an alert as one
    /// of these does: the lab's views and descriptions read them by name.
    pub fn with(mut self, more: RuleSet) -> Result<RuleSet, RuleError> {
        let records: BTreeMap<&str, &str> = self
            .rules()
            .filter_map(|(g, r)| match &r.kind {
                RuleKind::Record { name, .. } => Some((name.as_str(), g.origin.as_str())),
                RuleKind::Alert(_) => None,
            })
            .collect();
        let alerts: BTreeMap<&str, &str> = self
            .rules()
            .filter_map(|(g, r)| match &r.kind {
                RuleKind::Alert(a) => Some((a.name.as_str(), g.origin.as_str())),
                RuleKind::Record { .. } => None,
            })
            .collect();
        for (g, r) in more.rules() {
            let (kind, clash) = match &r.kind {
                RuleKind::Record { name, .. } => ("record", records.get(name.as_str())),
                RuleKind::Alert(a) => ("alert", alerts.get(a.name.as_str())),
            };
            if let Some(first) = clash {
                return Err(RuleError::Invalid {
                    origin: g.origin.clone(),
                    group: g.name.clone(),
                    rule: format!("{kind} {}", r.name()),
                    problem: format!("{first} already has a rule of that name: give yours another"),
                });
            }
        }
        self.groups.extend(more.groups);
        Ok(self)
    }

    /// Every rule with its group, in evaluation order.
    pub fn rules(&self) -> impl Iterator<Item = (&Group, &Rule)> {
        self.groups
            .iter()
            .flat_map(|g| g.rules.iter().map(move |r| (g, r)))
    }

    /// The groups, in evaluation order.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// Every alerting rule, in order.
    pub fn alerts(&self) -> impl Iterator<Item = &AlertRule> {
        self.rules().filter_map(|(_, r)| match &r.kind {
            RuleKind::Alert(a) => Some(a),
            RuleKind::Record { .. } => None,
        })
    }

    /// The first alerting rule named `name`.
    pub fn alert(&self, name: &str) -> Option<&AlertRule> {
        self.alerts().find(|a| a.name == name)
    }

    /// The alert names, each once, in order.
    pub fn alert_names(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.alerts()
            .map(|a| a.name.as_str())
            .filter(|n| seen.insert(*n))
            .collect()
    }

    /// The names of the recorded series, in order.
    pub fn records(&self) -> Vec<&str> {
        self.rules()
            .filter_map(|(_, r)| match &r.kind {
                RuleKind::Record { name, .. } => Some(name.as_str()),
                RuleKind::Alert(_) => None,
            })
            .collect()
    }

    /// The alert names (each once) and the recorded series of the rules that came from `origin`.
    pub fn names_from(&self, origin: &str) -> (Vec<&str>, Vec<&str>) {
        let mut alerts: Vec<&str> = Vec::new();
        let mut records = Vec::new();
        for (_, r) in self.rules().filter(|(g, _)| g.origin == origin) {
            match &r.kind {
                RuleKind::Alert(a) if !alerts.contains(&a.name.as_str()) => alerts.push(&a.name),
                RuleKind::Alert(_) => {}
                RuleKind::Record { name, .. } => records.push(name.as_str()),
            }
        }
        (alerts, records)
    }

    /// The files the rules came from, in order, each once.
    pub fn origins(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for g in &self.groups {
            if !out.contains(&g.origin.as_str()) {
                out.push(&g.origin);
            }
        }
        out
    }

    /// The longest any rule reads back (a range plus its offset), ms.
    pub fn longest_window_ms(&self) -> i64 {
        self.rules()
            .flat_map(|(_, r)| r.expr.selectors())
            .map(|(s, range)| range + s.offset_ms.max(0))
            .max()
            .unwrap_or(0)
    }
}

fn check_rule(origin: &str, group: &str, index: usize, r: RawRule) -> Result<Rule, RuleError> {
    let label = match (&r.record, &r.alert) {
        (Some(n), None) => format!("record {n}"),
        (None, Some(n)) => format!("alert {n}"),
        _ => format!("rule {}", index + 1),
    };
    let invalid = |problem: String| RuleError::Invalid {
        origin: origin.to_string(),
        group: group.to_string(),
        rule: label.clone(),
        problem,
    };
    let expr = parse(&r.expr).map_err(|source| RuleError::Expr {
        origin: origin.to_string(),
        group: group.to_string(),
        rule: label.clone(),
        source,
    })?;
    let t = expr.value_type();
    if t != crate::promql::ast::ValueType::Vector && t != crate::promql::ast::ValueType::Scalar {
        return Err(invalid(format!(
            "its expr is a {t}: a rule needs an instant vector or a scalar"
        )));
    }
    for (s, range) in expr.selectors() {
        let back = range + s.offset_ms.max(0);
        if back > MAX_HISTORY_MS {
            return Err(invalid(format!(
                "it reads {} back ({}), and the lab keeps {} of samples: shorten the range",
                format_duration(back),
                s.name,
                format_duration(MAX_HISTORY_MS)
            )));
        }
        if s.offset_ms < 0 {
            return Err(invalid(
                "a negative offset reads the future: the lab evaluates at the newest scrape".into(),
            ));
        }
    }
    for l in r.labels.keys() {
        if !is_label_name(l) || l == NAME {
            return Err(invalid(format!("{l:?} is not a valid label name")));
        }
    }
    let duration = |field: &str, v: &Option<String>| -> Result<i64, RuleError> {
        match v {
            None => Ok(0),
            Some(s) => parse_duration(s)
                .ok_or_else(|| invalid(format!("{field}: {s:?} is not a duration (e.g. 2s, 1m, 1h30m)"))),
        }
    };
    let kind = match (r.record, r.alert) {
        (Some(name), None) => {
            if !is_metric_name(&name) {
                return Err(invalid(format!("{name:?} is not a valid metric name")));
            }
            if r.for_.is_some() || r.keep_firing_for.is_some() || !r.annotations.is_empty() {
                return Err(invalid(
                    "for, keep_firing_for and annotations belong to alerting rules".into(),
                ));
            }
            RuleKind::Record {
                name,
                labels: Labels::from_pairs(r.labels),
            }
        }
        (None, Some(name)) => {
            if name.trim().is_empty() {
                return Err(invalid("an alert needs a name".into()));
            }
            let signal = match r.labels.get("signal") {
                Some(s) => signal_of(s).ok_or_else(|| {
                    invalid(format!(
                        "labels.signal is {s:?}: one of latency, throughput, errors, saturation"
                    ))
                })?,
                None => {
                    return Err(invalid(
                        "it needs labels.signal: one of latency, throughput, errors, saturation (the lab files every alert under one of its four golden signals)"
                            .into(),
                    ));
                }
            };
            let mut labels = Vec::new();
            for (k, v) in &r.labels {
                let t = Template::parse(v).map_err(|e| invalid(format!("labels.{k}: {e}")))?;
                labels.push((k.clone(), t));
            }
            let summary = r
                .annotations
                .get("summary")
                .map(|s| Template::parse(s).map_err(|e| invalid(format!("annotations.summary: {e}"))))
                .transpose()?;
            RuleKind::Alert(AlertRule {
                signal,
                for_ms: duration("for", &r.for_)?,
                keep_firing_ms: duration("keep_firing_for", &r.keep_firing_for)?,
                labels,
                summary,
                name,
            })
        }
        _ => return Err(invalid("a rule needs either record or alert, not both".into())),
    };
    Ok(Rule {
        kind,
        expr,
        expr_text: r.expr,
    })
}

/// An alert whose condition holds (pending or firing), or that is kept firing after it lapsed.
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveAlert {
    /// The alert's name (`alertname`).
    pub name: String,
    pub signal: GoldenSignal,
    /// Its labels: the expression's, the rule's, and `alertname`.
    pub labels: Labels,
    /// What it fires for: its `server`, `instance` or `pod` label, else `job`.
    pub target: String,
    /// The expression's value for it (`$value`).
    pub value: f64,
    /// Since when its condition has held without a break, ms.
    pub since_ms: i64,
    /// Whether it has held for the rule's `for`.
    pub firing: bool,
    /// True when its condition no longer holds and it only stays firing for `keep_firing_for`.
    pub kept: bool,
    /// Its `annotations.summary`, filled in.
    pub summary: Option<String>,
}

/// What an alert fires for: its `server`, `instance` or `pod` label, else the job as a whole.
pub fn target_of(labels: &Labels) -> String {
    ["server", "instance", "pod"]
        .iter()
        .find_map(|l| labels.get(l))
        .unwrap_or("job")
        .to_string()
}

#[derive(Debug, Clone)]
struct Active {
    since: i64,
    firing: bool,
    keep_since: Option<i64>,
    value: f64,
    summary: Option<String>,
}

/// Evaluates a [`RuleSet`] tick by tick: recording rules into the store, alerting rules into their
/// pending → firing state, as Prometheus' rule manager does.
#[derive(Debug)]
pub struct Engine {
    rules: Arc<RuleSet>,
    /// When each group was last evaluated.
    last: Vec<Option<i64>>,
    /// Each alert by (group, rule, labels).
    active: BTreeMap<(usize, usize, Labels), Active>,
    /// The errors of the last evaluation, one line per failed rule.
    errors: Vec<String>,
}

impl Engine {
    /// An engine for `rules` with no alert active.
    pub fn new(rules: Arc<RuleSet>) -> Self {
        Engine {
            last: vec![None; rules.groups.len()],
            rules,
            active: BTreeMap::new(),
            errors: Vec::new(),
        }
    }

    /// The rules it evaluates.
    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// The rules that failed on the last evaluation, each `rule <name>: <why>`. A failed rule writes
    /// nothing and leaves its alerts as they were, as in Prometheus.
    pub fn errors(&self) -> &[String] {
        &self.errors
    }

    /// Evaluates every group due at `t` over `store` (recording into it), and returns every active alert,
    /// in rule order. `earliest` cuts ranges to what a young collector watched (see [`Ctx::earliest`]).
    pub fn evaluate(&mut self, store: &mut Store, t: i64, earliest: Option<i64>) -> Vec<ActiveAlert> {
        self.evaluate_cached(store, t, earliest, &Cache::default())
    }

    /// [`Engine::evaluate`], sharing the range selections it reads through `cache` (with the views of
    /// the same tick).
    pub fn evaluate_cached(
        &mut self,
        store: &mut Store,
        t: i64,
        earliest: Option<i64>,
        cache: &Cache,
    ) -> Vec<ActiveAlert> {
        self.errors.clear();
        let rules = Arc::clone(&self.rules);
        for (gi, group) in rules.groups.iter().enumerate() {
            // A group with an interval runs when it is due; half a tick early counts, as ticks drift.
            if let (Some(every), Some(last)) = (group.interval_ms, self.last[gi])
                && t - last < every - 500
            {
                continue;
            }
            self.last[gi] = Some(t);
            for (ri, rule) in group.rules.iter().enumerate() {
                let ctx = Ctx {
                    store: &*store,
                    t,
                    earliest,
                    cache: Some(cache),
                };
                let result = ctx.eval(&rule.expr).map(|v| match v {
                    Value::Scalar(s) => vec![(Labels::new(), s)],
                    Value::Vector(v) => v,
                    // Refused at load.
                    Value::Matrix(_) | Value::String(_) => Vec::new(),
                });
                let outcome = match &rule.kind {
                    RuleKind::Record { name, labels } => result.and_then(|v| {
                        let v = relabel(v, labels)?;
                        store.record(name, t, &v);
                        cache.forget(name);
                        Ok(())
                    }),
                    RuleKind::Alert(a) => result.and_then(|v| self.step(gi, ri, a, v, t)),
                };
                if let Err(e) = outcome {
                    self.errors.push(format!("rule {}: {e}", rule.name()));
                }
            }
        }
        self.collect()
    }

    /// Prometheus' alert state machine for one rule's result at `t`: a new alert is pending from `t` and
    /// fires once it has held for `for`; one whose condition lapsed ends, unless it was firing and
    /// `keep_firing_for` has not run out.
    fn step(
        &mut self,
        gi: usize,
        ri: usize,
        rule: &AlertRule,
        result: Vec<(Labels, f64)>,
        t: i64,
    ) -> Result<(), QueryError> {
        let mut holding: BTreeMap<Labels, (f64, Option<String>)> = BTreeMap::new();
        for (l, v) in result {
            let mut labels = l.without(&[NAME]);
            for (k, tmpl) in &rule.labels {
                labels.set(k.as_str(), tmpl.render(&l, v));
            }
            labels.set("alertname", rule.name.as_str());
            let summary = rule.summary.as_ref().map(|s| s.render(&l, v));
            if holding.insert(labels, (v, summary)).is_some() {
                return Err(QueryError::eval(
                    "vector contains metrics with the same labelset after applying alert labels",
                ));
            }
        }
        let mine: Vec<(usize, usize, Labels)> = self
            .active
            .range((gi, ri, Labels::new())..)
            .take_while(|(k, _)| k.0 == gi && k.1 == ri)
            .map(|(k, _)| k.clone())
            .collect();
        for key in mine {
            if holding.contains_key(&key.2) {
                continue;
            }
            let keep = match self.active.get_mut(&key) {
                Some(a) if a.firing && rule.keep_firing_ms > 0 => {
                    let since = *a.keep_since.get_or_insert(t);
                    t - since < rule.keep_firing_ms
                }
                _ => false,
            };
            if !keep {
                self.active.remove(&key);
            }
        }
        for (labels, (value, summary)) in holding {
            let a = self.active.entry((gi, ri, labels)).or_insert(Active {
                since: t,
                firing: false,
                keep_since: None,
                value,
                summary: None,
            });
            a.keep_since = None;
            a.value = value;
            a.summary = summary;
        }
        for (_, a) in self
            .active
            .range_mut((gi, ri, Labels::new())..)
            .take_while(|(k, _)| k.0 == gi && k.1 == ri)
        {
            if !a.firing && t - a.since >= rule.for_ms {
                a.firing = true;
            }
        }
        Ok(())
    }

    fn collect(&self) -> Vec<ActiveAlert> {
        self.active
            .iter()
            .filter_map(|((gi, ri, labels), a)| {
                let RuleKind::Alert(rule) = &self.rules.groups[*gi].rules[*ri].kind else {
                    return None;
                };
                Some(ActiveAlert {
                    name: rule.name.clone(),
                    signal: rule.signal,
                    target: target_of(labels),
                    labels: labels.clone(),
                    value: a.value,
                    since_ms: a.since,
                    firing: a.firing,
                    kept: a.keep_since.is_some(),
                    summary: a.summary.clone(),
                })
            })
            .collect()
    }
}

/// A recording rule's result as it is written: the metric name dropped, the rule's labels set.
fn relabel(v: Vec<(Labels, f64)>, labels: &Labels) -> Result<Vec<(Labels, f64)>, QueryError> {
    let mut out: Vec<(Labels, f64)> = v
        .into_iter()
        .map(|(l, x)| {
            let mut l = l.without(&[NAME]);
            for (k, val) in labels.iter() {
                l.set(k, val);
            }
            (l, x)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    if out.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(QueryError::eval(
            "vector contains metrics with the same labelset after applying rule labels",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expo::parse as expo;

    fn set(yaml: &str) -> Arc<RuleSet> {
        Arc::new(RuleSet::parse(yaml, "team.yaml").unwrap_or_else(|e| panic!("{}", error_text(&e))))
    }

    fn error_text(e: &RuleError) -> String {
        lab_model::format::error_chain(e)
    }

    fn refused(yaml: &str) -> String {
        error_text(&RuleSet::parse(yaml, "team.yaml").unwrap_err())
    }

    /// `x{instance}` gauges at `t`, each `(instance, value)`.
    fn scrape(store: &mut Store, t: i64, metric: &str, values: &[(&str, f64)]) {
        for (instance, v) in values {
            store.ingest(instance, t, expo(&format!("{metric} {v}")).unwrap());
        }
    }

    fn names(alerts: &[ActiveAlert]) -> Vec<(&str, &str, bool)> {
        alerts
            .iter()
            .map(|a| (a.name.as_str(), a.target.as_str(), a.firing))
            .collect()
    }

    const THROTTLED: &str = r#"
groups:
  - name: g
    rules:
      - alert: Throttled
        expr: x > 0.25
        for: 2s
        keep_firing_for: 10s
        labels: {signal: saturation, severity: "{{ $labels.instance }}-sev"}
        annotations: {summary: "{{ $labels.instance }} at {{ $value }}"}
"#;

    #[test]
    fn the_builtin_file_loads_and_records_what_the_views_read() {
        let b = builtin();
        assert_eq!(b.alert_names().len(), 12);
        for name in recorded::ALL {
            assert!(
                b.records().contains(&name),
                "{name} is not recorded by the rule file"
            );
        }
        assert_eq!(b.longest_window_ms(), 60_000);
        let latency = b.alert("LabStorageReadLatencyHigh").unwrap();
        assert_eq!((latency.signal, latency.for_ms), (GoldenSignal::Latency, 0));
        let throttled = b.alert("LabRankCpuThrottled").unwrap();
        assert_eq!((throttled.for_ms, throttled.keep_firing_ms), (2_000, 10_000));
    }

    #[test]
    fn for_durations_and_since_times() {
        let mut e = Engine::new(set(THROTTLED));
        let mut store = Store::new(60_000);
        let mut at = |store: &mut Store, t: i64, v: f64| {
            scrape(store, t, "x", &[("rank-1", v)]);
            e.evaluate(store, t, None)
        };
        let pending = vec![("Throttled", "rank-1", false)];
        assert_eq!(names(&at(&mut store, 20_000, 0.3)), pending);
        assert_eq!(names(&at(&mut store, 21_500, 0.3)), pending);
        let a = at(&mut store, 22_000, 0.4);
        assert_eq!(names(&a), vec![("Throttled", "rank-1", true)]);
        assert_eq!((a[0].since_ms, a[0].value), (20_000, 0.4));
        assert_eq!(a[0].summary.as_deref(), Some("rank-1 at 0.4"));
        assert_eq!(a[0].labels.get("severity"), Some("rank-1-sev"));
        assert_eq!(a[0].labels.get("alertname"), Some("Throttled"));
        // A break of a pending alert resets its since-time.
        let mut e = Engine::new(set(THROTTLED));
        let mut store = Store::new(60_000);
        scrape(&mut store, 1_000, "x", &[("rank-1", 0.3)]);
        e.evaluate(&mut store, 1_000, None);
        scrape(&mut store, 2_000, "x", &[("rank-1", 0.1)]);
        assert!(e.evaluate(&mut store, 2_000, None).is_empty());
        scrape(&mut store, 3_000, "x", &[("rank-1", 0.3)]);
        assert_eq!(e.evaluate(&mut store, 3_000, None)[0].since_ms, 3_000);
    }

    #[test]
    fn keep_firing_for_bridges_a_lapse_of_a_firing_alert_only() {
        let mut e = Engine::new(set(THROTTLED));
        let mut store = Store::new(60_000);
        let mut at = |t: i64, v: f64| {
            scrape(&mut store, t, "x", &[("rank-1", v)]);
            e.evaluate(&mut store, t, None)
        };
        // Pending, then lapsing: gone at once.
        at(10_000, 0.3);
        assert!(at(11_000, 0.0).is_empty());
        // Firing, then lapsing: kept for 10 s, with its since-time.
        for t in (20_000..=23_000).step_by(1000) {
            at(t, 0.3);
        }
        let kept = at(24_000, 0.0);
        assert_eq!(names(&kept), vec![("Throttled", "rank-1", true)]);
        assert!(kept[0].kept && kept[0].since_ms == 20_000);
        assert_eq!(at(33_000, 0.0).len(), 1);
        // Back before the time runs out: the same alert, no longer kept.
        let back = at(33_500, 0.3);
        assert!(!back[0].kept && back[0].since_ms == 20_000);
        at(34_000, 0.0);
        assert!(at(44_000, 0.0).is_empty());
    }

    #[test]
    fn a_recording_rule_reads_its_own_previous_output() {
        // The latch's shape: once x has been at least 5, the first such value stays.
        let rules = set(r#"
groups:
  - name: g
    rules:
      - record: job:x
        expr: sum(x)
      - record: job:latched
        expr: job:latched or (job:x >= 5)
      - alert: Low
        expr: job:x < 0.5 * job:latched
        labels: {signal: throughput}
"#);
        let mut e = Engine::new(rules);
        let mut store = Store::new(60_000);
        let mut fired = Vec::new();
        for (i, v) in [1.0, 6.0, 8.0, 2.0, 3.5].iter().enumerate() {
            let t = 1000 * i as i64;
            scrape(&mut store, t, "x", &[("rank-0", *v)]);
            if !e.evaluate(&mut store, t, None).is_empty() {
                fired.push(t);
            }
        }
        assert_eq!(store.instant("job:latched", 4000, |_| true)[0].1, 6.0);
        // 2 < 3 fires; 3.5 does not.
        assert_eq!(fired, vec![3000]);
    }

    #[test]
    fn a_group_with_an_interval_runs_when_it_is_due() {
        let rules = set(r#"
groups:
  - name: slow
    interval: 5s
    rules:
      - record: seen
        expr: x
"#);
        let mut e = Engine::new(rules);
        let mut store = Store::new(60_000);
        for t in (0..=10_000).step_by(1000) {
            scrape(&mut store, t, "x", &[("a", t as f64)]);
            e.evaluate(&mut store, t, None);
        }
        let pts = &store.range("seen", 10_000, 10_000, |_| true)[0].1;
        assert_eq!(
            pts.iter().map(|p| p.0).collect::<Vec<_>>(),
            vec![0, 5_000, 10_000]
        );
    }

    #[test]
    fn a_failing_rule_says_why_and_leaves_its_alerts() {
        let rules = set(r#"
groups:
  - name: g
    rules:
      - alert: Clash
        expr: x + on () y
        labels: {signal: errors}
"#);
        let mut e = Engine::new(rules);
        let mut store = Store::new(60_000);
        store.ingest("a", 0, expo("x 1\ny 1").unwrap());
        assert_eq!(e.evaluate(&mut store, 0, None).len(), 1);
        store.ingest("a", 1000, expo("x 1\ny 1").unwrap());
        store.ingest("b", 1000, expo("y 2").unwrap());
        let a = e.evaluate(&mut store, 1000, None);
        assert_eq!(a.len(), 1, "the alert stays as it was");
        assert_eq!(e.errors().len(), 1);
        assert!(
            e.errors()[0].starts_with("rule Clash: found duplicate series"),
            "{:?}",
            e.errors()
        );
    }

    #[test]
    fn targets_come_from_the_labels() {
        let t = |pairs: &[(&str, &str)]| target_of(&Labels::from_pairs(pairs.iter().copied()));
        assert_eq!(t(&[("server", "storage-1"), ("instance", "rank-1")]), "storage-1");
        assert_eq!(t(&[("instance", "rank-1"), ("pod", "rank-1")]), "rank-1");
        assert_eq!(t(&[("pod", "rank-4")]), "rank-4");
        assert_eq!(t(&[("alertname", "X")]), "job");
    }

    #[test]
    fn what_the_lab_cannot_evaluate_is_refused_with_the_rule_named() {
        let rule = |body: &str| format!("groups:\n  - name: team\n    rules:\n{body}");
        assert_eq!(
            refused(&rule(
                "      - alert: TeamSlow\n        expr: label_replace(up, \"a\", \"$1\", \"b\", \"(.*)\")\n        labels: {signal: latency}\n"
            )),
            "team.yaml: group \"team\", alert TeamSlow: its expr: line 1, column 1: function label_replace is \
             not supported by the lab's evaluator (docs/telemetry.md lists what it evaluates)"
        );
        assert!(
            refused(&rule("      - alert: TeamSlow\n        expr: up > 1\n"))
                .contains("alert TeamSlow: it needs labels.signal: one of latency, throughput")
        );
        assert!(
            refused(&rule(
                "      - alert: TeamSlow\n        expr: up > 1\n        labels: {signal: speed}\n"
            ))
            .contains("labels.signal is \"speed\"")
        );
        assert!(
            refused(&rule(
                "      - alert: TeamSlow\n        expr: up > 1\n        labels: {signal: latency}\n        annotations: {summary: \"{{ $value | humanize }}\"}\n"
            ))
            .contains("annotations.summary: the template action {{ $value | humanize }} is not supported")
        );
        assert!(
            refused(&rule("      - record: team:x\n        expr: rate(x[1h])\n"))
                .contains("record team:x: it reads 1h back (x), and the lab keeps 10m of samples")
        );
        assert!(
            refused(&rule("      - record: team:x\n        expr: x[5m]\n"))
                .contains("its expr is a range vector")
        );
        assert!(
            refused(&rule("      - record: bad name\n        expr: x\n")).contains("not a valid metric name")
        );
        assert!(
            refused(&rule(
                "      - record: team:x\n        expr: x\n        for: 1m\n"
            ))
            .contains("belong to alerting rules")
        );
        assert!(refused(&rule("      - expr: x\n")).contains("rule 1: a rule needs either record or alert"));
        assert!(
            refused(&rule(
                "      - alert: A\n        expr: x\n        for: soon\n        labels: {signal: errors}\n"
            ))
            .contains("for: \"soon\" is not a duration")
        );
        let e = refused("groups:\n  - name: team\n    query_offset: 1m\n    rules: []\n");
        assert!(
            e.starts_with("team.yaml is not a Prometheus rule file: ")
                && e.contains("unknown field `query_offset`"),
            "{e}"
        );
        assert!(
            refused("groups: [{name: a, rules: []}, {name: a, rules: []}]")
                .contains("another group has the same name")
        );
        assert!(
            refused("groups: [{name: a, rules: [{record: r, expr: x}, {record: r, expr: y}]}]")
                .contains("another rule records the same name")
        );
    }

    #[test]
    fn a_teams_rules_come_after_the_labs_under_names_of_their_own() {
        let team = RuleSet::parse(
            "groups: [{name: team, rules: [{alert: TeamQuiet, expr: 'up == 0', labels: {signal: errors}}]}]",
            "team.yaml",
        )
        .unwrap();
        let all = (*builtin()).clone().with(team).unwrap();
        assert_eq!(all.alert_names().last(), Some(&"TeamQuiet"));
        assert_eq!(all.origins(), vec![BUILTIN_ORIGIN, "team.yaml"]);
        let clash = RuleSet::parse(
            "groups: [{name: team, rules: [{alert: LabRankHung, expr: 'up == 0', labels: {signal: errors}}]}]",
            "team.yaml",
        )
        .unwrap();
        let e = error_text(&(*builtin()).clone().with(clash).unwrap_err());
        assert_eq!(
            e,
            "team.yaml: group \"team\", alert LabRankHung: manifests/rules/golden-signals.yaml already has a rule \
             of that name: give yours another"
        );
    }
}
