//! The reconciler's foreign jobs: a job of another team runs in its own process and cgroup once storage
//! is up, is replaced when its rate changes (as a Deployment rolls its pod), stops when asked, and bad
//! requests — a rank's name, an unknown server, a zero rate — are refused with the spec unchanged.

use std::time::Instant;

use lab_model::Millicores;
use lab_model::jobs::ForeignJob;
use lab_model::status::{Phase, Role};
use nix::sys::signal::Signal;

use super::{all_ready, lab, ok, pod, storage_up};
use crate::proto::{Request, Response};
use lab_runtime::TargetKind;

fn etl(rate: Option<f64>) -> ForeignJob {
    ForeignJob {
        name: "nightly-etl".into(),
        server: 1,
        threads: 64,
        rate,
    }
}

fn refused(r: Response, want: &str) {
    match r {
        Response::Error { message } => assert!(message.contains(want), "{message}"),
        other => panic!("expected a refusal with {want:?}, got {other:?}"),
    }
}

#[test]
fn a_foreign_job_runs_on_its_own_is_replaced_on_a_new_rate_and_stops() {
    let (_d, mut sup, procs) = lab();
    let t0 = Instant::now();
    storage_up(&mut sup, t0);
    ok(sup.request(Request::RunJob { job: etl(None) }, t0));
    sup.reconcile(t0);
    let cmd = procs.last_command("nightly-etl");
    assert!(cmd.program.ends_with("lab-reader"), "{cmd:?}");
    assert!(cmd.args.contains(&"--server=storage-1".to_string()), "{cmd:?}");
    assert!(!cmd.args.iter().any(|a| a.starts_with("--rate")), "{cmd:?}");
    assert_eq!(cmd.cpu, Some(Millicores(500)), "a cgroup of its own");
    all_ready(&mut sup);
    let p = pod(&sup, "nightly-etl");
    assert_eq!(
        (p.role, p.phase, p.resources.gpus),
        (Role::ForeignJob, Phase::Running, 0)
    );
    let st = sup.status();
    assert!(
        st.targets
            .iter()
            .any(|t| t.kind == TargetKind::Job && t.instance == "nightly-etl")
    );
    assert_eq!(st.foreign_jobs, vec![etl(None)]);

    // The same settings again change nothing; a rate replaces the process.
    let first = procs.live("nightly-etl").unwrap();
    ok(sup.request(Request::RunJob { job: etl(None) }, t0));
    sup.reconcile(t0);
    assert_eq!(procs.starts("nightly-etl"), 1);
    ok(sup.request(Request::RunJob { job: etl(Some(20.0)) }, t0));
    sup.reconcile(t0);
    assert_eq!(procs.signals(first), [Signal::SIGTERM]);
    sup.reconcile(t0);
    assert_eq!(procs.starts("nightly-etl"), 2);
    assert!(
        procs
            .last_command("nightly-etl")
            .args
            .contains(&"--rate=20".to_string())
    );

    ok(sup.request(
        Request::StopJob {
            name: "nightly-etl".into(),
        },
        t0,
    ));
    sup.reconcile(t0);
    sup.reconcile(t0);
    assert!(procs.live("nightly-etl").is_none());
    assert!(sup.status().foreign_jobs.is_empty());
}

#[test]
fn what_is_not_a_foreign_job_or_a_sane_setting_is_refused_and_nothing_changes() {
    let (_d, mut sup, _procs) = lab();
    let t0 = Instant::now();
    let spec = sup.spec.clone();
    let bad = |f: fn(&mut ForeignJob)| {
        let mut j = etl(None);
        f(&mut j);
        Request::RunJob { job: j }
    };
    refused(sup.request(bad(|j| j.name = "rank-1".into()), t0), "taken");
    refused(sup.request(bad(|j| j.name = "svc".into()), t0), "taken");
    refused(sup.request(bad(|j| j.server = 9), t0), "does not exist");
    refused(sup.request(bad(|j| j.threads = 0), t0), "threads");
    refused(sup.request(bad(|j| j.rate = Some(0.0)), t0), "more than 0");
    refused(
        sup.request(
            Request::StopJob {
                name: "rank-0".into(),
            },
            t0,
        ),
        "training job",
    );
    refused(
        sup.request(Request::StopJob { name: "nope".into() }, t0),
        "none runs",
    );
    assert_eq!(sup.spec, spec);
    // A job cannot move to another server under the same name.
    ok(sup.request(Request::RunJob { job: etl(None) }, t0));
    refused(sup.request(bad(|j| j.server = 0), t0), "stop it first");
}
