//! `lab console` in a real terminal (tmux) against a live local lab: the headline shows Kubernetes' view
//! beside the job's, the slow-storage key injects the fault, and the headline changes to name the slow
//! server while every rank stays Ready; `c` clears it, `q` quits and gives the terminal back.

use std::time::{Duration, Instant};

use lab_tests::{Lab, Tmux, bin_dir, serial, weed};

fn headline(pane: &str) -> String {
    pane.lines().next().unwrap_or_default().trim_end().to_string()
}

/// The percentage in `Training: N% of normal`.
fn training_pct(headline: &str) -> f64 {
    let after = headline.split("Training: ").nth(1).unwrap_or_default();
    after
        .split('%')
        .next()
        .unwrap_or_default()
        .parse()
        .unwrap_or(f64::NAN)
}

#[test]
fn console_key_injects_slow_storage_and_the_headline_names_the_slow_server() {
    let _one = serial();
    let mut lab = Lab::up("e2e-console", &[]);
    let ports = lab.ports();
    let t = Tmux::start("lab-e2e-console", 160, 50);
    let line = format!(
        "clear; env LAB_STATE_DIR='{}' LAB_NAME='{}' LAB_WEED='{}' '{}' console; echo EXITED $?",
        lab.state().display(),
        lab.name,
        weed().display(),
        bin_dir().join("lab").display()
    );
    t.keys(&[&line, "Enter"]);

    // Healthy first: every rank Ready, training near its baseline, nothing firing.
    let pane = t.wait_for("% of normal · no golden signal fires", Duration::from_secs(60));
    let before = headline(&pane);
    assert!(
        before.starts_with("Kubernetes: 4/4 Ready · Training: "),
        "{before}"
    );
    assert!(training_pct(&before) >= 50.0, "{before}");

    // The key, then the headline: the slow server named, its siblings beside it, Kubernetes still Ready.
    t.keys(&["s"]);
    let pane = t.wait_for("storage-1 read p50", Duration::from_secs(90));
    let first = headline(&pane);
    // Throughput is a 10 s rate, so it keeps falling for a few seconds after the latency alert names the
    // server; the headline settles below half of normal.
    let until = Instant::now() + Duration::from_secs(30);
    let (pane, after) = loop {
        let pane = t.pane();
        let h = headline(&pane);
        if training_pct(&h) < 50.0 || Instant::now() > until {
            break (pane, h);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    println!("before:        {before}\nfirst alert:   {first}\nsettled:       {after}");
    assert!(after.starts_with("Kubernetes: 4/4 Ready · Training: "), "{after}");
    assert!(
        after.contains(" · storage-1 read p50 ") && after.contains("(siblings "),
        "{after}"
    );
    let pct = training_pct(&after);
    assert!(
        pct < 50.0,
        "training at {pct}% of normal with slow storage: {after}"
    );
    assert!(pane.contains("storage-1 ▲"), "the outlier is not marked:\n{pane}");
    assert!(
        pane.contains("slow-storage on storage-1"),
        "the active fault is not shown:\n{pane}"
    );

    // Clear from the console, then quit: the shell gets its terminal back.
    // Only the clear's own status line says `cleared slow-storage-<n>` (the Changes panel's title says
    // "cleared" from the start); then the active fault leaves the Changes panel.
    t.keys(&["c"]);
    t.wait_for("cleared slow-storage-", Duration::from_secs(60));
    t.wait_gone("slow-storage on storage-1", Duration::from_secs(30));
    t.keys(&["q"]);
    let pane = t.wait_for("EXITED 0", Duration::from_secs(30));
    assert!(
        !pane.contains("┌ Kubernetes"),
        "the console's screen is still shown:\n{pane}"
    );
    drop(t);

    let ledger: serde_json::Value = serde_json::from_str(&lab.ok(&["fault", "status", "--json"])).unwrap();
    let phases: Vec<&str> = ledger["faults"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["phase"].as_str())
        .collect();
    assert_eq!(
        phases,
        vec!["cleared"],
        "the console's fault is not cleared: {ledger}"
    );
    lab.down();
    let left = lab.leftovers(&ports);
    assert!(left.is_empty(), "left behind after lab down: {left:?}");
}
