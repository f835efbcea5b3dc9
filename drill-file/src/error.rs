//! Errors from reading and checking drill files.

use std::path::PathBuf;

/// A drill file that does not parse or does not make sense, with where in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {message}")]
pub struct SpecError {
    /// 1-based line (1 when the parser gave no position: the error is about the whole document).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong, with the path to the key (e.g. `steps[1].expect: unknown field ...`).
    pub message: String,
}

/// A drill that cannot be found, read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The drill file cannot be read.
    #[error("{path}: cannot read the drill file")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The drill file is not a valid drill; printed as `FILE:LINE:COL: message`.
    #[error("{origin}:{spec}")]
    Spec { origin: String, spec: SpecError },
    /// Neither a file nor a built-in drill has that name.
    #[error("no drill file or built-in drill named {0:?}: `lab drill list` shows the built-in ones")]
    NotFound(String),
}
