//! The live terminal console: Kubernetes' view (pods, Ready, restarts, CPU live against spec) beside the
//! job's own signals (throughput against baseline, step time, where each rank's time goes), per-server
//! storage latency with the outlier marked, the golden-signal alerts with their since-times, and the
//! change records. Keys inject and clear the lab's three faults.
//!
//! It consumes [`lab_model::Snapshot`]s and emits [`Action`]s; it never imports runtime, Kubernetes or
//! process code. [`render`] and [`State`] are pure and take the time as an argument; [`run`] is the
//! terminal loop around them; [`status_text`] is the plain-text screen of `lab status`.

pub mod action;
pub mod error;
pub mod state;
pub mod summary;
pub mod term;
pub mod text;
pub mod view;

#[cfg(test)]
mod fixtures;

pub use action::{Action, FaultKey, Feedback};
pub use error::ConsoleError;
pub use state::{Options, State};
pub use summary::headline_text;
pub use term::run;
pub use text::status_text;
pub use view::render;
