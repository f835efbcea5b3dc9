//! The drill file: a YAML document that names a fault to inject, what the golden signals must show, how to
//! remediate and what "recovered" means ([`spec`]), and the built-in drills the lab ships ([`builtin`]).
//! Parsing is pure: nothing here touches a lab, so the fuzz target and a drill's linter use it alone.

pub mod builtin;
pub mod error;
pub mod spec;

pub use builtin::{Loaded, resolve};
pub use error::{LoadError, SpecError};
pub use spec::Drill;
