//! The built-in drills, one per fault of the seed story, embedded from `drill-file/builtin/*.yaml`, and finding
//! a drill by name or by path.

use std::path::Path;

use crate::error::LoadError;
use crate::spec::{self, Drill};

/// `(name, text)` of every built-in drill, in the seed story's order.
pub const BUILTIN: [(&str, &str); 10] = [
    ("slow-storage", include_str!("../builtin/slow-storage.yaml")),
    ("throttled-rank", include_str!("../builtin/throttled-rank.yaml")),
    (
        "unplaceable-rank",
        include_str!("../builtin/unplaceable-rank.yaml"),
    ),
    ("stuck-rollout", include_str!("../builtin/stuck-rollout.yaml")),
    ("rank-crash", include_str!("../builtin/rank-crash.yaml")),
    ("rank-hang", include_str!("../builtin/rank-hang.yaml")),
    ("slow-compute", include_str!("../builtin/slow-compute.yaml")),
    // Not a chapter of the seed story: one of the four causes of its Figure 4.
    ("competing-job", include_str!("../builtin/competing-job.yaml")),
    ("slow-disk", include_str!("../builtin/slow-disk.yaml")),
    // The seed's general version: a synchronous database replica that cannot be scheduled.
    ("sync-replica", include_str!("../builtin/sync-replica.yaml")),
];

/// `(name, text)` of the built-in drills that chain several faults, after the one-fault drills.
pub const CHAINED: [(&str, &str); 1] = [
    // The seed's week: fault 1 fixed, then fault 2 with that fix in the change log.
    ("chained-week", include_str!("../builtin/chained-week.yaml")),
];

/// A drill and where it came from (`builtin:slow-storage`, or the file's path).
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub origin: String,
    pub drill: Drill,
}

/// The built-in drill `name`, parsed.
///
/// # Errors
/// [`LoadError::NotFound`] for an unknown name; [`LoadError::Spec`] if the embedded file is broken (a
/// unit test keeps that from shipping).
pub fn builtin(name: &str) -> Result<Loaded, LoadError> {
    let (n, text) = BUILTIN
        .iter()
        .chain(CHAINED.iter())
        .find(|(n, _)| *n == name)
        .ok_or_else(|| LoadError::NotFound(name.to_string()))?;
    let origin = format!("builtin:{n}");
    let drill = spec::parse(text).map_err(|spec| LoadError::Spec {
        origin: origin.clone(),
        spec,
    })?;
    Ok(Loaded { origin, drill })
}

/// Every built-in drill, parsed.
///
/// # Errors
/// As [`builtin`].
pub fn all() -> Result<Vec<Loaded>, LoadError> {
    BUILTIN
        .iter()
        .chain(CHAINED.iter())
        .map(|(n, _)| builtin(n))
        .collect()
}

/// Reads and checks the drill file at `path`.
///
/// # Errors
/// [`LoadError::Read`] or [`LoadError::Spec`] (printed as `FILE:LINE:COL: message`).
pub fn load_file(path: &Path) -> Result<Loaded, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let origin = path.display().to_string();
    let drill = spec::parse(&text).map_err(|spec| LoadError::Spec {
        origin: origin.clone(),
        spec,
    })?;
    Ok(Loaded { origin, drill })
}

/// A drill by path when such a file exists, else a built-in drill by name.
///
/// # Errors
/// As [`load_file`] and [`builtin`].
pub fn resolve(arg: &str) -> Result<Loaded, LoadError> {
    let p = Path::new(arg);
    if p.exists() {
        return load_file(p);
    }
    match builtin(arg) {
        Err(LoadError::NotFound(_))
            if arg.ends_with(".yaml") || arg.ends_with(".yml") || arg.contains('/') =>
        {
            Err(LoadError::Read {
                path: p.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            })
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use lab_model::FaultKind;

    use super::*;
    use crate::spec::Step;

    /// Every built-in drill knows its right fix and at least one trap, with one part per remediate step;
    /// a variant's fixes and expected alerts follow its drawn parameters, and the same seed draws the
    /// same variants.
    #[test]
    fn fixes_and_variants_follow_the_drawn_parameters() {
        use crate::spec::FixChoice;
        for l in all().unwrap() {
            let d = &l.drill;
            let right = d.fix(FixChoice::Right).unwrap_or_else(|e| panic!("{e}"));
            assert!(!d.fixes.traps.is_empty(), "{} has no trap", d.name);
            let trap = d.fix(FixChoice::Trap(1)).unwrap();
            assert_ne!(right, trap, "{}", d.name);
            assert!(
                right.iter().chain(&trap).all(|c| !c.contains('{')),
                "{}: {right:?} {trap:?}",
                d.name
            );
            assert!(d.fix(FixChoice::Trap(9)).unwrap_err().contains("trap(s)"));
            let a = d.vary(4, 7);
            assert_eq!(
                a,
                d.vary(4, 7),
                "{}: the same seed draws the same variants",
                d.name
            );
            assert_ne!(a, d.vary(4, 8), "{}: another seed draws others", d.name);
            assert_eq!(a[0].name, format!("{}-v1", d.name));
            for v in &a {
                for f in v.faults() {
                    f.validate().unwrap_or_else(|e| panic!("{}: {f}: {e}", v.name));
                }
                // Each expected alert is on a component the variant's faults are on (or the job's).
                let on: Vec<String> = v.faults().iter().flat_map(lab_model::Fault::components).collect();
                for s in &v.steps {
                    if let Step::Expect(e) = s {
                        for x in &e.alerts {
                            assert!(
                                on.contains(&x.target) || !x.target.starts_with("rank-"),
                                "{}: {x} not on {on:?}",
                                v.name
                            );
                        }
                    }
                }
                v.fix(FixChoice::Right).unwrap();
            }
        }
        let t = builtin("throttled-rank").unwrap().drill;
        let v = t.vary(8, 1);
        let fixes: Vec<String> = v
            .iter()
            .map(|d| d.fix(FixChoice::Right).unwrap()[0].clone())
            .collect();
        let ranks: Vec<String> = v
            .iter()
            .map(|d| match &d.faults()[0] {
                lab_model::Fault::ThrottledRank(lab_model::fault::ThrottledRank { rank, .. }) => {
                    format!("lab resize rank {rank} --cpu 400m")
                }
                f => panic!("{f}"),
            })
            .collect();
        assert_eq!(fixes, ranks);
        assert!(
            ranks.iter().collect::<std::collections::BTreeSet<_>>().len() > 1,
            "{ranks:?}"
        );
        let w = builtin("sync-replica")
            .unwrap()
            .drill
            .with_fix(FixChoice::Right)
            .unwrap();
        let cmd = w.steps.iter().find_map(|s| match s {
            Step::Remediate(r) => r.command.clone(),
            _ => None,
        });
        assert_eq!(
            cmd.as_deref(),
            Some("lab db template --node-selector '' && lab db delete-pod db-1")
        );
        let c = builtin("slow-compute")
            .unwrap()
            .drill
            .with_fix(FixChoice::Right)
            .unwrap();
        assert!(
            c.steps
                .iter()
                .all(|s| !matches!(s, Step::Remediate(r) if r.command.is_some())),
            "'' is the lab's clear"
        );
    }

    #[test]
    fn every_builtin_parses_and_injects_its_own_fault() {
        let all = all().unwrap();
        let kinds = FaultKind::ALL;
        assert_eq!(all.len(), kinds.len() + CHAINED.len());
        for (l, kind) in all.iter().zip(kinds) {
            assert_eq!(l.drill.name, kind.name());
            assert_eq!(l.origin, format!("builtin:{}", kind.name()));
            assert!(matches!(&l.drill.steps[0], Step::Inject(f) if f.kind() == kind));
            assert!(matches!(l.drill.steps.last(), Some(Step::Verify(_))));
            // The lab's own clear is the default remediation of a built-in drill.
            assert!(
                l.drill
                    .steps
                    .iter()
                    .any(|s| matches!(s, Step::Remediate(r) if r.command.is_none()))
            );
        }
    }

    #[test]
    fn the_chained_week_injects_fault_2_after_fault_1_is_verified() {
        let l = builtin("chained-week").unwrap();
        let keys: Vec<&str> = l.drill.steps.iter().map(Step::key).collect();
        assert_eq!(
            keys,
            [
                "inject",
                "expect",
                "remediate",
                "verify",
                "inject",
                "expect",
                "remediate",
                "verify"
            ]
        );
        let kinds: Vec<FaultKind> = l
            .drill
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Inject(f) => Some(f.kind()),
                _ => None,
            })
            .collect();
        assert_eq!(kinds, [FaultKind::SlowStorage, FaultKind::ThrottledRank]);
        assert!(all().unwrap().iter().any(|d| d.drill.name == "chained-week"));
    }

    /// The database drill judges the writer, the job it is about: the training job beside it never
    /// noticed the fault, so its throughput would pass the trap.
    #[test]
    fn the_sync_replica_drill_needs_the_database_and_verifies_the_writer() {
        let d = builtin("sync-replica").unwrap().drill;
        assert!(d.runtime.database);
        let Some(Step::Verify(v)) = d.steps.last() else {
            panic!("no verify step")
        };
        assert_eq!(v.job, crate::spec::VerifyJob::Writer);
        let Some(Step::Expect(e)) = d.steps.get(1) else {
            panic!("no expect step")
        };
        assert_eq!(e.alerts[0].rule, "LabCommitsStalled");
        assert_eq!(e.alerts[0].target, "lab-writer");
    }

    #[test]
    fn names_and_paths() {
        assert_eq!(resolve("slow-storage").unwrap().drill.name, "slow-storage");
        assert!(matches!(resolve("slow-nfs"), Err(LoadError::NotFound(_))));
        assert!(matches!(resolve("nope/x.yaml"), Err(LoadError::Read { .. })));
    }
}
