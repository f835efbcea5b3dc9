//! Replayable fault drills that pass only when the job's own signals recover.

pub mod error;
pub mod spec;
pub mod judge;
