//! Errors of telemetry: a metrics text that does not parse, a target that could not be scraped, a PromQL
//! expression the lab cannot evaluate, a rule file it cannot load.

use std::time::Duration;

pub use lab_model::expo::{ParseError, ParseErrorKind};

/// Why one scrape target gave no samples on a tick. Shown in the snapshot's `scrape_errors`.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The endpoint did not answer within the scrape timeout.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The runtime could not fetch the endpoint.
    #[error("fetch failed")]
    Fetch(#[source] SourceError),
    /// The endpoint answered with text that is not Prometheus text exposition.
    #[error("garbage metrics")]
    Parse(#[source] ParseError),
    /// The endpoint answered with more text than a lab target ever writes.
    #[error("metrics text too large ({bytes} bytes)")]
    TooLarge { bytes: usize },
}

/// Where in an expression: line and column, both from 1 (the column in characters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` in `src`.
    pub fn of(src: &str, offset: usize) -> Position {
        let before = &src[..offset.min(src.len())];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Position {
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// A PromQL expression the lab cannot evaluate, or whose evaluation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Not PromQL, or its types do not fit (`rate` of an instant vector).
    #[error("{at}: {message}")]
    Syntax { at: Position, message: String },
    /// PromQL the lab's evaluator does not evaluate: a function, an aggregation, a modifier.
    #[error(
        "{at}: {construct} is not supported by the lab's evaluator (docs/telemetry.md lists what it evaluates)"
    )]
    Unsupported { at: Position, construct: String },
    /// The evaluation failed where Prometheus' fails too (vector matching that is not one-to-one).
    #[error("{message}")]
    Eval { message: String },
}

impl QueryError {
    pub(crate) fn syntax(src: &str, offset: usize, message: impl Into<String>) -> Self {
        QueryError::Syntax {
            at: Position::of(src, offset),
            message: message.into(),
        }
    }

    pub(crate) fn unsupported(src: &str, offset: usize, construct: impl Into<String>) -> Self {
        QueryError::Unsupported {
            at: Position::of(src, offset),
            construct: construct.into(),
        }
    }

    pub(crate) fn eval(message: impl Into<String>) -> Self {
        QueryError::Eval {
            message: message.into(),
        }
    }
}

/// A rule file the lab cannot load, naming the file, the group and the rule.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// The file could not be read.
    #[error("cannot read the rule file {origin}")]
    Read {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    /// The file is not YAML in the rule file's shape (`groups:` of `name:` and `rules:`).
    #[error("{origin} is not a Prometheus rule file")]
    Yaml {
        origin: String,
        #[source]
        source: serde_norway::Error,
    },
    /// A rule (or its group) is not one the lab can evaluate.
    #[error("{origin}: group {group:?}, {rule}: {problem}")]
    Invalid {
        origin: String,
        group: String,
        /// `alert LabX`, `record lab:x`, `rule 3` or `the group`.
        rule: String,
        problem: String,
    },
    /// A rule's expression is not PromQL the lab evaluates.
    #[error("{origin}: group {group:?}, {rule}: its expr")]
    Expr {
        origin: String,
        group: String,
        rule: String,
        #[source]
        source: QueryError,
    },
}

/// What a runtime behind the telemetry says when it cannot answer (its own error, boxed).
pub type SourceError = Box<dyn std::error::Error + Send + Sync>;
