//! PromQL in the lab: a parser ([`parse`]) into a positioned syntax tree ([`ast`]), and an evaluator
//! ([`eval`]) over the lab's store with Prometheus 2.x's semantics, for the subset the rule files use
//! (listed in `docs/telemetry.md`). The rules, the views and the query module all run on it.
//!
//! Written here, not taken from a crate: no crate evaluates PromQL over a caller's own store, and the
//! parser is the small half of the work. The field's parser (`promql-parser`) reads all of PromQL through
//! an LR grammar generator at build time; the lab needs the subset it can evaluate, with every other
//! construct refused by name at its line and column, which this parser does as it reads.

pub mod ast;
pub mod eval;
pub mod functions;
pub mod lexer;
pub mod parser;

pub use ast::Expr;
pub use functions::{
    Vector, avg_over_time, bucket_quantile, extrapolated_rate, histogram_quantile, min_over_time, quantile,
    stddev_over_time,
};
pub use parser::parse;
