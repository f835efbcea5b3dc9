//! Errors from writing reports.

/// A report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The JUnit report could not be serialised.
    #[error("cannot write the JUnit report")]
    Xml(#[source] quick_junit::SerializeError),
}
