//! Errors from reading metrics: a text-format parse error, and why one target could not be scraped.

use std::time::Duration;

/// Why a line of Prometheus text exposition could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// The metric name is missing or has characters outside `[a-zA-Z0-9_:]`.
    MetricName,
    /// A label name is missing or has characters outside `[a-zA-Z0-9_]`.
    LabelName,
    /// A label is not written `name="value"`.
    LabelSyntax,
    /// A label value uses an escape other than `\\`, `\"` or `\n`.
    Escape,
    /// The `{...}` label set is not closed.
    Unterminated,
    /// The same label name appears twice in one sample.
    DuplicateLabel,
    /// The sample has no value.
    MissingValue,
    /// The value is not a float (`1.5`, `1e3`, `NaN`, `+Inf`).
    Value,
    /// The timestamp is not an integer of milliseconds.
    Timestamp,
    /// Something follows the timestamp.
    Trailing,
}

impl std::fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ParseErrorKind::MetricName => "invalid metric name",
            ParseErrorKind::LabelName => "invalid label name",
            ParseErrorKind::LabelSyntax => "expected name=\"value\" in the label set",
            ParseErrorKind::Escape => "invalid escape in a label value",
            ParseErrorKind::Unterminated => "label set not closed",
            ParseErrorKind::DuplicateLabel => "duplicate label name",
            ParseErrorKind::MissingValue => "missing sample value",
            ParseErrorKind::Value => "sample value is not a number",
            ParseErrorKind::Timestamp => "timestamp is not an integer",
            ParseErrorKind::Trailing => "unexpected text after the sample",
        })
    }
}

/// A metrics text that is not valid Prometheus text exposition (format 0.0.4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metrics text line {line}: {kind}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    pub kind: ParseErrorKind,
}

/// Why one scrape target gave no samples on a tick. Shown in the snapshot's `scrape_errors`.
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    /// The endpoint did not answer within the scrape timeout.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The runtime could not fetch the endpoint.
    #[error("fetch failed")]
    Fetch(#[source] crate::driver::SourceError),
    /// The endpoint answered with text that is not Prometheus text exposition.
    #[error("garbage metrics")]
    Parse(#[source] ParseError),
    /// The endpoint answered with more text than a lab target ever writes.
    #[error("metrics text too large ({bytes} bytes)")]
    TooLarge { bytes: usize },
}
