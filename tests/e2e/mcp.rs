//! The lab as an MCP server, end to end on the local runtime: clients nobody here wrote (the MCP Inspector's
//! CLI from npm, a client on the official MCP Python SDK) list its tools and call them; what a careless
//! client sends (garbage, an unknown tool, arguments of the wrong type, a command off the allow-list, an act
//! the approval declines) gets an error that names it, changes nothing and is recorded; a second agent on
//! the same lab is refused. Then the seed's three faults as drills with the reference MCP agent: each
//! passes, and the one whose first fix is not enough (the rank that cannot be placed, seen without the
//! wiring) passes on its second attempt, told why the first failed. An agent that hangs ends its drill in
//! an error, with the fault cleared and nothing of it left running.
//!
//! Needs `scripts/tools.sh mcp` (LAB_MCP_PYTHON, LAB_MCP_INSPECTOR): the test command installs them.

use std::path::{Path, PathBuf};
use std::process::Command;

use lab_tests::mcp::{McpClient, result_json};
use lab_tests::{Lab, serial, text};
use serde_json::{Value, json};

fn tool(var: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_default();
    assert!(
        p.is_file(),
        "{var} is not set to an installed client: run `eval \"$(scripts/tools.sh mcp)\"` (the test command does)"
    );
    p
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn reference_agent() -> String {
    format!(
        "{} {}",
        tool("LAB_MCP_PYTHON").display(),
        repo().join("examples/agents/mcp_reference.py").display()
    )
}

fn mcp(lab: &Lab, args: &[&str]) -> Command {
    let mut all = vec!["mcp"];
    all.extend_from_slice(args);
    lab.command(&all)
}

fn lab_bin(lab: &Lab) -> String {
    lab.command(&[]).get_program().to_string_lossy().into_owned()
}

#[test]
fn clients_nobody_here_wrote_list_and_call_the_tools_and_bad_input_is_named_and_recorded() {
    let _one = serial();
    let mut lab = Lab::up("e2e-mcp-clients", &[]);
    let state = lab.state().display().to_string();
    let bin = lab_bin(&lab);

    // The MCP Inspector's CLI: the tools of the metrics level, and `status`.
    let inspector = tool("LAB_MCP_INSPECTOR");
    let run_inspector = |extra: &[&str]| {
        let out = Command::new(&inspector)
            .args([
                "--cli",
                "-e",
                &format!("LAB_STATE_DIR={state}"),
                "-e",
                &format!("LAB_NAME={}", lab.name),
            ])
            .args(extra)
            .args([bin.as_str(), "mcp", "--evidence", "metrics"])
            .output()
            .expect("run the MCP Inspector");
        assert!(out.status.success(), "the Inspector failed:\n{}", text(&out));
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("the Inspector printed no JSON ({e}):\n{}", text(&out)));
        v
    };
    let listed = run_inspector(&["--method", "tools/list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for want in ["status", "incident", "checkpoint", "remediate", "diagnose"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    for above in ["dependencies", "changes", "processes"] {
        assert!(
            !names.contains(&above),
            "{above} is offered at metrics: {names:?}"
        );
    }
    for t in listed["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert!(t["description"].as_str().is_some_and(|d| d.len() > 20), "{t}");
    }
    let status = run_inspector(&["--method", "tools/call", "--tool-name", "status"]);
    let body: Value =
        serde_json::from_str(status["content"][0]["text"].as_str().expect("text")).expect("JSON");
    assert!(
        body["kubernetes"].as_str().unwrap().contains("4/4 ranks"),
        "{body}"
    );
    assert!(
        body["training"]["samples_per_s"]
            .as_f64()
            .is_some_and(|v| v > 0.0),
        "{body}"
    );

    // A client on the official Python SDK, with its calls recorded.
    let calls = lab.state().join("calls.jsonl");
    let out = Command::new(tool("LAB_MCP_PYTHON"))
        .arg(repo().join("tests/clients/mcp_sdk_client.py"))
        .args([
            bin.as_str(),
            "mcp",
            "--evidence",
            "metrics",
            "--calls",
            calls.to_str().unwrap(),
        ])
        .env("LAB_STATE_DIR", lab.state())
        .env("LAB_NAME", &lab.name)
        .output()
        .expect("run the Python SDK client");
    assert!(
        out.status.success(),
        "the Python SDK client failed:\n{}",
        text(&out)
    );
    let r: Value = serde_json::from_slice(&out.stdout).expect("the client prints JSON");
    assert_eq!(r["server"], "straggler-lab");
    assert_eq!(r["status"]["error"], false);
    assert!(r["unknown_tool"]["protocol_error"].as_bool().unwrap(), "{r}");
    assert!(
        r["unknown_tool"]["text"]
            .as_str()
            .unwrap()
            .contains("unknown tool \"no-such-tool\""),
        "{r}"
    );
    assert_eq!(r["bad_arguments"]["error"], true);
    assert!(
        r["bad_arguments"]["text"]
            .as_str()
            .unwrap()
            .contains("invalid type"),
        "{r}"
    );
    assert_eq!(r["off_the_list"]["error"], true);
    assert!(
        r["off_the_list"]["text"].as_str().unwrap().contains("allow-list"),
        "{r}"
    );
    let recorded: Vec<Value> = std::fs::read_to_string(&calls)
        .expect("the calls file")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outcomes: Vec<(&str, &str)> = recorded
        .iter()
        .map(|c| (c["tool"].as_str().unwrap(), c["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("status", "ok"),
            ("no-such-tool", "refused"),
            ("checkpoint", "refused"),
            ("remediate", "refused")
        ],
        "{recorded:?}"
    );
    assert!(
        recorded
            .iter()
            .all(|c| c["at_ms"].as_u64().is_some() && c.get("result_bytes").is_some())
    );

    // Garbage on the wire, an act the approval declines, and a second agent on the same lab.
    let mut c = McpClient::start(mcp(&lab, &["--approve", "never"]));
    c.send_line("this is not json");
    let e = c.recv();
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("not JSON"),
        "{e}"
    );
    let init = c.initialize();
    assert_eq!(init["result"]["serverInfo"]["name"], "straggler-lab", "{init}");
    let before = lab.ok(&["fault", "status"]);
    let d = c.call(
        "remediate",
        json!({"argv": ["lab", "restart", "rank", "1"], "reason": "try it", "cause": "hung-rank"}),
    );
    assert_eq!(d["result"]["isError"], true, "{d}");
    let declined = result_json(&d);
    assert_eq!(declined["approved"], false, "{declined}");
    assert!(
        declined["message"]
            .as_str()
            .unwrap()
            .contains("nothing was changed"),
        "{declined}"
    );
    // PromQL over the lab's own series, answered live by the lab's watcher: now, over a range, and an
    // expression it cannot parse named with its position.
    let q = c.call("query", json!({"expr": "sum(rate(lab_samples_total[10s]))"}));
    let now = result_json(&q);
    assert_eq!(now["data"]["resultType"], "vector", "{q}");
    let v: f64 = now["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value in {now}"));
    assert!(v > 0.0, "the job trains, yet the query says {v} samples/s: {now}");
    // The watcher has watched since `lab up` ended, seconds ago: the range holds a few steps once it has
    // watched long enough (a busy machine may have got here sooner than that).
    let range = json!({"expr": "max by (server) (rate(lab_storage_read_wait_seconds_total[3s]))", "range_s": 10, "step_s": 2});
    let mut over = Value::Null;
    for _ in 0..10 {
        let q = c.call("query", range.clone());
        over = result_json(&q);
        assert_eq!(over["data"]["resultType"], "matrix", "{q}");
        let series = over["data"]["result"].as_array().expect("result");
        if series.len() == 3
            && series
                .iter()
                .all(|s| s["values"].as_array().is_some_and(|v| v.len() >= 2))
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let series = over["data"]["result"].as_array().expect("result");
    assert_eq!(series.len(), 3, "one series per storage server: {over}");
    assert!(
        series
            .iter()
            .all(|s| s["values"].as_array().is_some_and(|v| v.len() >= 2)),
        "a few steps of the range after 10 s more: {over}"
    );
    let bad = c.call("query", json!({"expr": "sum(rate(lab_samples_total[10s])"}));
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    let second = mcp(&lab, &[])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run a second lab mcp");
    assert!(
        !second.status.success(),
        "a second agent was let in:\n{}",
        text(&second)
    );
    assert!(
        text(&second).contains("another agent is connected"),
        "{}",
        text(&second)
    );
    let (status, _) = c.close();
    assert!(
        status.success(),
        "lab mcp did not end cleanly when its client closed stdin"
    );
    assert_eq!(lab.ok(&["fault", "status"]), before, "the lab changed");
    let s = lab.snapshot();
    assert!(
        s.status.pods.iter().all(|p| p.restarts == 0),
        "a declined restart restarted something"
    );
    lab.down();
}

fn drills(lab: &Lab, names: &[&str], extra: &[&str], report: &Path) -> (bool, Value, String) {
    let agent = reference_agent();
    let mut args = vec!["drill", "run"];
    args.extend_from_slice(names);
    args.extend_from_slice(&["--mcp-agent", &agent, "--report", report.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let out = lab.run(&args);
    let r: Value = serde_json::from_slice(&std::fs::read(report).unwrap_or_default())
        .unwrap_or_else(|_| panic!("no report:\n{}", text(&out)));
    (out.status.success(), r, text(&out))
}

#[test]
fn the_seeds_three_faults_pass_with_the_reference_mcp_agent_and_the_loop_sends_a_failed_fix_back() {
    let _one = serial();
    let mut lab = Lab::up("e2e-mcp-drills", &[]);
    let dir = lab.state().to_path_buf();

    // Faults 1 and 2 at the full evidence level: everything right.
    let (ok, r, out) = drills(
        &lab,
        &["slow-storage", "throttled-rank"],
        &["--evidence", "full"],
        &dir.join("full.json"),
    );
    assert!(ok, "the drills failed:\n{out}");
    for d in r["drills"].as_array().unwrap() {
        let a = &d["agent"];
        assert_eq!(d["verdict"], "pass", "{}", d["reason"]);
        assert_eq!(a["protocol"], "mcp");
        assert_eq!(
            (&a["detected"], &a["localized"], &a["cause"], &a["mitigated"]),
            (&json!(true), &json!(true), &json!(true), &json!(true)),
            "{}: {a}",
            d["name"]
        );
        // One attempt where the machine is quiet; a verification that a busy machine fails sends the
        // agent round the loop once more, which is the loop working (two at most).
        assert!(
            a["attempts"].as_u64().is_some_and(|n| (1..=2).contains(&n)),
            "{a}"
        );
        assert!(a["harmful"].as_array().unwrap().is_empty(), "{a}");
        let m = &d["remediations"][0]["mcp"];
        let tools: Vec<&str> = m["calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["tool"].as_str().unwrap())
            .collect();
        for want in ["status", "dependencies", "changes", "diagnose", "remediate"] {
            assert!(
                tools.contains(&want),
                "{}: the agent never called {want}: {tools:?}",
                d["name"]
            );
        }
        assert!(d["idle_accelerator_s"].as_f64().is_some_and(|v| v > 0.0), "{d}");
    }

    // Fault 3 without the wiring: the first fix scales the ranks back and misses the configured world size;
    // verification fails and sends it back with the failure; the second attempt sets the world size.
    let (ok, r, out) = drills(
        &lab,
        &["unplaceable-rank"],
        &["--evidence", "metrics"],
        &dir.join("loop.json"),
    );
    assert!(ok, "unplaceable-rank failed:\n{out}");
    let d = &r["drills"][0];
    assert_eq!(d["agent"]["attempts"], 2, "{}", d["agent"]);
    let acts = |i: usize| -> Vec<String> {
        d["remediations"][i]["mcp"]["calls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["tool"] == "remediate" && c["outcome"] == "ok")
            .map(|c| {
                c["act"]["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    assert_eq!(acts(0), ["lab scale ranks 4"], "{out}");
    assert_eq!(acts(1), ["lab config world-size 4"], "{out}");
    // The first fix fails its verification and the second, given why, passes (judged again against
    // the steady state after the cleanup where the machine got slower meanwhile).
    let verifies: Vec<bool> = lab_tests::verifications(d)
        .iter()
        .map(|s| s["ok"].as_bool().unwrap())
        .collect();
    assert_eq!(verifies, [false, true], "{out}");
    let second: Value = serde_json::from_slice(
        &std::fs::read(
            d["remediations"][1]["mcp"]["session"]
                .as_str()
                .unwrap()
                .replace("session.json", "incident.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let tried = &second["previous_attempts"][0];
    assert_eq!(tried["commands"], json!(["lab scale ranks 4"]), "{second}");
    assert!(
        tried["verification"].as_str().unwrap().contains("not back"),
        "{tried}"
    );

    // An agent that hangs: an error after its timeout, the fault cleared, nothing of it left running.
    let marker = format!("hung-agent-{}", std::process::id());
    let hang = format!("sleep 600; : {marker}");
    let out = lab.run(&[
        "drill",
        "run",
        "slow-storage",
        "--mcp-agent",
        &hang,
        "--agent-timeout",
        "5s",
        "--report",
        dir.join("hang.json").to_str().unwrap(),
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    let r: Value = serde_json::from_slice(&std::fs::read(dir.join("hang.json")).unwrap()).unwrap();
    assert_eq!(r["drills"][0]["verdict"], "error", "{}", text(&out));
    assert!(
        r["drills"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("did not finish within 5 s"),
        "{}",
        r["drills"][0]["reason"]
    );
    assert!(
        lab.ok(&["fault", "status"]).contains("no fault"),
        "{}",
        lab.ok(&["fault", "status"])
    );
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&marker))
        .collect();
    assert!(left.is_empty(), "the hung agent is still running: {left:?}");
    lab.down();
}
