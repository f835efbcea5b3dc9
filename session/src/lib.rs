//! The lab's life behind one door, under a thin CLI: [`lifecycle::up`] (the runtime's steps, then the
//! training baseline, torn down on failure), [`lifecycle::down`] (faults cleared first), and an opened
//! [`Lab`] with its guarded faults, its telemetry and its drills. The demo is the three built-in drills run
//! through the same drill runner ([`demo`]).
//!
//! Every reader of the lab's state takes [`Snapshot`]s from here: one at a time ([`Lab::snapshot`]), or a
//! stream from the lab watching itself ([`Lab::watch`], the home of the continuous telemetry and rule
//! evaluation). End-to-end tests may call this crate directly; a fake runtime drives it in unit tests.

pub mod baseline;
pub mod demo;
pub mod drills;
pub mod error;
pub mod expiry;
pub mod guard;
pub mod labs;
pub mod lifecycle;
pub mod live;
pub mod logs;
pub mod mcp;
pub mod rules;
pub mod version;
pub mod watch;

use std::sync::Arc;
use std::time::Duration;

use lab_faults::Ledger;
use lab_model::Snapshot;
use lab_runtime::Runtime;
use lab_telemetry::{Driver, RuleSet};

pub use error::{Result, SessionError};
pub use guard::Guarded;
pub use lab_runtime::RuntimeSource;
pub use lifecycle::{Place, Up, UpPlan};
pub use watch::Watch;

/// A running lab, opened: its runtime, its fault ledger and the rules it evaluates.
#[derive(Debug, Clone)]
pub struct Lab {
    name: String,
    runtime: Arc<dyn Runtime>,
    ledger: Ledger,
    rules: Arc<RuleSet>,
}

impl Lab {
    /// Opens the running lab `name`.
    ///
    /// # Errors
    /// [`SessionError::Runtime`] when no such lab runs, or its runtime does not answer;
    /// [`SessionError::Rules`] or [`SessionError::KeptRules`] when the rule files it was started with no
    /// longer load.
    pub async fn open(name: &str) -> Result<Lab> {
        let runtime = lab_runtime::open::open(name).await?;
        let rules = rules::of_lab(name)?;
        Ok(Lab::with_runtime(name, runtime).with_rules(rules))
    }

    /// The lab `name` on `runtime` (a fake one in tests), with its ledger in the lab's folder.
    pub fn with_runtime(name: &str, runtime: Arc<dyn Runtime>) -> Lab {
        Lab::with_parts(name, runtime, Ledger::of_lab(name))
    }

    /// The lab `name` on `runtime`, keeping its faults in `ledger`, evaluating the lab's own rules.
    pub fn with_parts(name: &str, runtime: Arc<dyn Runtime>, ledger: Ledger) -> Lab {
        Lab {
            name: name.to_string(),
            runtime,
            ledger,
            rules: lab_telemetry::rules::builtin(),
        }
    }

    /// The same lab evaluating `rules` (the lab's own and a team's, from [`rules::load`]).
    #[must_use]
    pub fn with_rules(mut self, rules: Arc<RuleSet>) -> Lab {
        self.rules = rules;
        self
    }

    /// The rules the lab evaluates.
    pub fn rules(&self) -> &Arc<RuleSet> {
        &self.rules
    }

    /// The lab's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The runtime the lab runs on.
    pub fn runtime(&self) -> &Arc<dyn Runtime> {
        &self.runtime
    }

    /// The lab's fault ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// A telemetry driver for the lab, starting from the baseline learned at `lab up`.
    pub fn driver(&self) -> Driver {
        baseline::driver(
            &self.name,
            self.runtime.clone(),
            self.ledger.clone(),
            self.rules.clone(),
        )
    }

    /// Watches the lab for `window` and returns the last snapshot (rates need at least two scrapes).
    pub async fn snapshot(&self, window: Duration) -> Snapshot {
        let mut d = self.driver();
        let mut every = tokio::time::interval(Duration::from_secs(1));
        let mut last = None;
        for _ in 0..snapshot_ticks(window) {
            every.tick().await;
            last = Some(d.tick().await);
        }
        last.expect("at least one tick")
    }

    /// The lab watching itself: telemetry and rule evaluation about once a second, for as long as the
    /// returned [`Watch`] lives.
    pub fn watch(&self) -> Watch {
        Watch::start(self.driver())
    }

    /// The lab live for a reader that follows it (the console): the watcher's snapshots as it writes
    /// them, or this process's own telemetry loop where no watcher keeps them fresh ([`Watch::follow`]).
    pub fn follow(&self) -> Watch {
        Watch::follow(self.name.clone(), self.driver())
    }

    /// The lab as the drill engine sees it.
    pub fn drill_lab(&self) -> lab_drills::Lab {
        lab_drills::Lab {
            name: self.name.clone(),
            runtime: self.runtime.clone(),
            ledger: self.ledger.clone(),
        }
    }
}

/// How many scrapes [`Lab::snapshot`] takes over `window`: one per second, plus the first.
pub fn snapshot_ticks(window: Duration) -> u32 {
    (window.as_secs_f64().max(1.0)).ceil() as u32 + 1
}
