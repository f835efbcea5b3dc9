//! Remediation commands on the database (`lab db template`, `lab db delete-pod`): the actions a person
//! or an agent takes, right or wrong, each leaving a change record beside the fault's.

use std::collections::BTreeMap;

use lab_model::ChangeRecord;
use lab_model::change::ChangeSource;
use lab_model::db::{self, DbTemplate, parse_selector};
use lab_runtime::Runtime;
use lab_runtime::state::now_ms;

use crate::{FaultError, Ledger};

fn record_of(target: &str, what: &str, before: String, after: String) -> ChangeRecord {
    ChangeRecord {
        at_ms: now_ms(),
        source: ChangeSource::Remediation,
        target: target.into(),
        what: what.into(),
        before,
        after,
        note: None,
        fault_id: None,
        by: None,
    }
}

fn record(
    ledger: &Ledger,
    target: &str,
    what: &str,
    before: String,
    after: String,
) -> Result<ChangeRecord, FaultError> {
    let c = record_of(target, what, before, after);
    ledger.record(vec![c.clone()])?;
    Ok(c)
}

fn text(s: &BTreeMap<String, String>) -> String {
    DbTemplate {
        node_selector: s.clone(),
        revision: 0,
    }
    .selector_text()
}

/// `lab db template --node-selector K=V,...`: sets the standby StatefulSet's template; no pod changes.
///
/// # Errors
/// [`FaultError::Invalid`] for a selector that is not `KEY=VALUE` or a lab without a database (nothing
/// changed); the runtime's error.
pub async fn set_template(
    rt: &dyn Runtime,
    ledger: &Ledger,
    selector: &str,
) -> Result<ChangeRecord, FaultError> {
    let want = parse_selector(selector).map_err(FaultError::Invalid)?;
    let d = rt.database().await.map_err(invalid_or("reading the database"))?;
    if d.template.node_selector == want {
        // Nothing to set: the action is still recorded (an agent's plan ran it), saying it changed nothing.
        let c = ChangeRecord {
            note: Some("already so: nothing changed".into()),
            ..record_of(
                "statefulset/db",
                "template node selector",
                text(&want),
                text(&want),
            )
        };
        ledger.record(vec![c.clone()])?;
        return Ok(c);
    }
    rt.set_db_template(want.clone())
        .await
        .map_err(invalid_or("setting the standby's template"))?;
    record(
        ledger,
        "statefulset/db",
        "template node selector",
        text(&d.template.node_selector),
        text(&want),
    )
}

/// `lab db delete-pod NAME`: deletes a database pod; it is made again from its template as it is now.
///
/// # Errors
/// [`FaultError::Invalid`] for a name that is not a database pod or a lab without a database (nothing
/// changed); the runtime's error.
pub async fn delete_pod(rt: &dyn Runtime, ledger: &Ledger, name: &str) -> Result<ChangeRecord, FaultError> {
    let st = rt
        .status()
        .await
        .map_err(FaultError::runtime("reading the lab"))?;
    let before = st
        .pods
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.phase.to_string())
        .unwrap_or_else(|| "none".into());
    rt.delete_pod(name)
        .await
        .map_err(invalid_or("deleting the pod"))?;
    let after = if name == db::STANDBY {
        "deleted; made again from the template".to_string()
    } else {
        "deleted; made again".to_string()
    };
    record(ledger, name, "pod", before, after)
}

/// A runtime's refusal of the input is the caller's mistake: say it as such.
fn invalid_or(what: &'static str) -> impl FnOnce(lab_runtime::RuntimeError) -> FaultError {
    move |e| match e {
        lab_runtime::RuntimeError::InvalidInput(m) => FaultError::Invalid(m),
        other => FaultError::runtime(what)(other),
    }
}

#[cfg(test)]
mod tests {
    use lab_model::db::DbStatus;
    use lab_runtime::testing::FakeRuntime;

    use super::*;

    #[tokio::test]
    async fn a_template_already_so_is_recorded_as_unchanged_and_not_set() {
        let rt = FakeRuntime::new();
        rt.update(|l| l.database = Some(DbStatus::default()));
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::in_dir(dir.path());

        let set = set_template(&rt, &ledger, "lab/disk=nvme").await.unwrap();
        assert_eq!(
            (set.before.as_str(), set.note.as_deref()),
            ("none", None),
            "{set:?}"
        );
        assert_ne!(set.after, set.before);
        let again = set_template(&rt, &ledger, "lab/disk=nvme").await.unwrap();
        assert_eq!(again.before, again.after);
        assert_eq!(again.note.as_deref(), Some("already so: nothing changed"));
        let sets = rt
            .calls()
            .iter()
            .filter(|c| c.starts_with("set_db_template"))
            .count();
        assert_eq!(sets, 1, "the second call set nothing: {:?}", rt.calls());
        assert_eq!(rt.state().database.unwrap().template.revision, 1);
    }
}
