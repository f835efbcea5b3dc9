//! Whether a lab can run a drill as it is: the runtime, the sizes and the dataset seed the drill was
//! written for, enforced CPU limits and the optional database when it needs them, and the alerts its
//! expect steps name among those the lab evaluates.

use lab_model::status::LabStatus;

use lab_drill_file::spec::{Drill, Requirements, Step};

/// Refuses a drill whose expect steps name an alert the lab does not evaluate (`known`: the lab's own
/// alerts and those of its `lab up --rules` files).
///
/// # Errors
/// A message naming the first unknown alert and what the lab evaluates.
pub fn unknown_alerts(drill: &Drill, known: &[String]) -> Result<(), String> {
    for step in &drill.steps {
        let Step::Expect(e) = step else { continue };
        if let Some(a) = e.alerts.iter().find(|a| !known.contains(&a.rule)) {
            return Err(format!(
                "the drill expects alert {}, which this lab does not evaluate (it evaluates {}): start the lab \
                 with the rule file that defines it, `lab up --rules FILE`",
                a.rule,
                known.join(", ")
            ));
        }
    }
    Ok(())
}

/// Why a lab cannot run a drill as it is, if it cannot.
pub fn unsuitable(drill: &Drill, status: &LabStatus, lab_seed: Option<u64>) -> Option<String> {
    let req: &Requirements = &drill.runtime;
    if !req.kinds.contains(&status.runtime) {
        let kinds: Vec<String> = req.kinds.iter().map(ToString::to_string).collect();
        return Some(format!(
            "this drill runs on the {} runtime; the lab runs on {}",
            kinds.join(" or "),
            status.runtime
        ));
    }
    let checks = [
        ("ranks", req.ranks, status.ranks_desired, "--ranks"),
        (
            "storage servers",
            req.storage_servers,
            status.storage_servers,
            "--storage-servers",
        ),
        ("GPUs", req.gpus, status.gpus_capacity, "--gpus"),
    ];
    for (what, want, have, flag) in checks {
        if let Some(want) = want
            && want != have
        {
            return Some(format!(
                "this drill needs {want} {what}; the lab has {have}: `lab down`, then `lab up {flag} {want}`"
            ));
        }
    }
    if req.cpu_limits
        && let Some(p) = status.ranks().find(|p| p.resources.cpu_live.is_none())
    {
        let why = status
            .notes
            .first()
            .cloned()
            .unwrap_or_else(|| format!("{}'s limit cannot be read", p.name));
        return Some(format!("this drill needs enforced CPU limits: {why}"));
    }
    if req.database && !status.pods.iter().any(|p| p.name == lab_model::db::PRIMARY) {
        return Some(
            "this drill needs the lab's database (a PostgreSQL primary, its standby and a writer): `lab down`, then \
             `lab up --database`"
                .into(),
        );
    }
    if let Some(seed) = lab_seed
        && seed != drill.seed
    {
        return Some(format!(
            "this drill is written for dataset seed {}; the lab was started with --seed {seed}: `lab down`, then `lab up --seed {}`",
            drill.seed, drill.seed
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use lab_model::Millicores;

    use super::*;
    use lab_model::testing::snap;

    fn drill(text: &str) -> Drill {
        lab_drill_file::spec::parse(text).unwrap()
    }

    #[test]
    fn a_lab_that_does_not_fit_is_told_what_to_do() {
        let d = drill(
            "name: x\nseed: 42\nruntime:\n  kinds: [kind]\n  ranks: 4\nsteps:\n  - inject:\n      kind: slow-storage\n  - remediate:\n  - verify:\n",
        );
        let s = snap(0, Some(1.0), Some(1.0), 1);
        assert!(
            unsuitable(&d, &s.status, Some(42))
                .unwrap()
                .contains("runs on the kind runtime")
        );
        let d = drill(
            "name: x\nseed: 42\nruntime:\n  ranks: 8\n  cpu_limits: true\nsteps:\n  - inject:\n      kind: slow-storage\n  - remediate:\n  - verify:\n",
        );
        assert!(
            unsuitable(&d, &s.status, Some(42))
                .unwrap()
                .contains("needs 8 ranks; the lab has 4: `lab down`, then `lab up --ranks 8`")
        );
        let d = drill(
            "name: x\nseed: 42\nruntime:\n  cpu_limits: true\nsteps:\n  - inject:\n      kind: slow-storage\n  - remediate:\n  - verify:\n",
        );
        let mut st = s.status.clone();
        st.notes = vec!["CPU limits are not enforced: no cgroups".into()];
        assert!(unsuitable(&d, &st, None).unwrap().contains("no cgroups"));
        for p in &mut st.pods {
            p.resources.cpu_live = Some(Millicores(400));
        }
        assert_eq!(unsuitable(&d, &st, None), None);
        assert!(unsuitable(&d, &st, Some(7)).unwrap().contains("lab up --seed 42"));
    }

    #[test]
    fn a_drill_on_the_database_refuses_a_lab_without_one() {
        let d = lab_drill_file::builtin::builtin("sync-replica").unwrap().drill;
        let mut st = snap(0, Some(1.0), Some(1.0), 1).status;
        let why = unsuitable(&d, &st, Some(42)).unwrap();
        assert!(
            why.contains("needs the lab's database") && why.contains("lab up --database"),
            "{why}"
        );
        st.pods.push(lab_model::status::PodStatus::new(
            lab_model::db::PRIMARY,
            lab_model::status::Role::Database,
            Some(0),
        ));
        assert_eq!(unsuitable(&d, &st, Some(42)), None);
    }

    #[test]
    fn a_drill_may_expect_a_rule_of_the_labs_own_files_and_no_other() {
        let d = drill(
            "name: x\nseed: 42\nsteps:\n  - inject:\n      kind: slow-storage\n  - expect:\n      alerts:\n        - rule: TeamStorageQuiet\n          target: storage-1\n  - remediate:\n  - verify:\n",
        );
        let mut known: Vec<String> = vec!["LabStorageReadLatencyHigh".into()];
        let why = unknown_alerts(&d, &known).unwrap_err();
        assert!(
            why.starts_with("the drill expects alert TeamStorageQuiet, which this lab does not evaluate")
                && why.contains("lab up --rules FILE"),
            "{why}"
        );
        known.push("TeamStorageQuiet".into());
        assert_eq!(unknown_alerts(&d, &known), Ok(()));
    }
}
