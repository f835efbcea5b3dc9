//! Errors from loading and running drills, outside a drill's own verdict (which a report carries).

/// A drill that cannot be found, read or parsed, a command that cannot be started, a report that cannot be
/// written.
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error(transparent)]
    Load(#[from] lab_drill_file::LoadError),
    #[error(transparent)]
    Command(#[from] lab_agents::error::CommandError),
    #[error(transparent)]
    Report(#[from] lab_reports::ReportError),
}
