//! The training job: the `lab-rank` and `lab-seeder` binaries and the library they are made of.
//!
//! A rank reads its batches from SeaweedFS ([`storage`], [`dataset`]), computes a gradient ([`model`]; its simulated accelerator's fault: [`device`]),
//! sums it with its peers over a TCP ring ([`allreduce`], after [`rendezvous`]), checkpoints
//! ([`checkpoint`]), and exports what it does ([`metrics`], [`serve`], [`cgroup`]); [`rank`] ties these
//! together and [`seeder`] writes the dataset they read. Beside the job, the optional database: [`db`]
//! (the PostgreSQL pods) and [`writer`] (the application committing to it, over `tokio-postgres`). [`beside`] is what the lab runs inside a rank's
//! container through `exec` on Kubernetes (the `lab-beside` binary).

pub mod allreduce;
pub mod beside;
pub mod cgroup;
pub mod checkpoint;
pub mod control;
pub mod dataset;
pub mod db;
pub mod device;
pub mod error;
pub mod http;
pub mod metrics;
pub mod model;
pub mod rank;
pub mod reader;
pub mod reading;
pub mod rendezvous;
pub mod seeder;
pub mod serve;
pub mod storage;
pub mod writer;

pub use error::{Result, WorkloadError};
