//! What the supervisor runs, by kind, and each instance's name (its key, its log file, its process record).

use lab_model::names;

/// One instance of a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Master,
    Volume(u32),
    Proxy(u32),
    Seeder,
    Rank(u32),
    /// A foreign job (a job of another team), by its id in the spec.
    Job(u32),
    /// The database's primary (`db-0`).
    DbPrimary,
    /// The database's standby (`db-1`).
    DbStandby,
    /// The application committing to the database (`lab-writer`).
    Writer,
}

/// The instance's name: its key, its log file and its process record.
pub(crate) fn inst_name(kind: Kind) -> String {
    match kind {
        Kind::Master => names::STORAGE_MASTER.to_string(),
        Kind::Volume(i) => names::storage(i),
        Kind::Proxy(i) => format!("{}-proxy", names::storage(i)),
        Kind::Seeder => "seeder".to_string(),
        Kind::Rank(r) => names::rank(r),
        Kind::Job(id) => format!("job-{id}"),
        Kind::DbPrimary => lab_model::db::PRIMARY.to_string(),
        Kind::DbStandby => lab_model::db::STANDBY.to_string(),
        Kind::Writer => lab_model::db::WRITER.to_string(),
    }
}
