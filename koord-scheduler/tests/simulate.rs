#![allow(clippy::unwrap_used)]
//! `koord-scheduler simulate` on the committed snapshot in tests/data.

use std::process::Command;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_koord-scheduler");

fn data(file: &str) -> String {
    format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"))
}

fn simulate(extra: &[&str]) -> (bool, String, String) {
    let output = Command::new(BIN)
        .arg("simulate")
        .args([
            "--snapshot",
            &data("snapshot.yaml"),
            "--pods",
            &data("pods.yaml"),
        ])
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

#[test]
fn json_output_follows_the_documented_contract() {
    let (ok, stdout, stderr) = simulate(&["--output", "json"]);
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let placements = report["placements"].as_array().unwrap();
    let order: Vec<&str> = placements
        .iter()
        .map(|p| p["pod"].as_str().unwrap())
        .collect();
    assert_eq!(
        order,
        [
            "default/web-1",
            "default/quota-1",
            "default/quota-2",
            "default/batch-1",
            "default/batch-huge"
        ]
    );
    // web-1: node-c's report is 5 minutes older than the snapshot (> 180s).
    // node-a: cpu (16000-2700)/160 = 83, memory (64Gi-18.8Gi)/64Gi = 70 → 76;
    // node-b: cpu (16000-9700)/160 = 39, memory 45 → 42.
    assert_eq!(
        placements[0],
        json!({
            "pod": "default/web-1",
            "node": "node-a",
            "reasons": {"node-c": "node(s) nodeMetric expired"},
            "scores": {"node-a": 76, "node-b": 42},
            "annotations": {}
        })
    );
    // quota-1 takes 3 of team-a's 4 cpus; quota-2 cannot have 3 more anywhere.
    assert_eq!(placements[1]["node"], "node-a");
    assert_eq!(placements[2]["node"], Value::Null);
    let reasons = placements[2]["reasons"].as_object().unwrap();
    assert_eq!(reasons.len(), 3);
    for reason in reasons.values() {
        let reason = reason.as_str().unwrap();
        assert!(
            reason.starts_with("Insufficient quotas, quotaName: team-a, runtime: [cpu=4"),
            "{reason}"
        );
    }
    assert_eq!(placements[3]["node"], "node-a");
    assert_eq!(
        placements[3]["reasons"]["node-b"],
        "node(s) cpu usage exceed threshold"
    );
    assert_eq!(placements[4]["node"], Value::Null);
    assert_eq!(
        placements[4]["reasons"]["node-a"],
        "Insufficient kubernetes.io/batch-cpu"
    );
    assert_eq!(placements[4]["scores"], json!({}));
}

#[test]
fn table_output_lists_each_pod() {
    let (ok, stdout, stderr) = simulate(&[]);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("POD"), "{stdout}");
    assert_eq!(lines.len(), 6, "{stdout}");
    assert!(
        lines[1].starts_with("default/web-1") && lines[1].contains("node-a"),
        "{stdout}"
    );
    assert!(lines[5].contains("<none>"), "{stdout}");
}

#[test]
fn a_later_clock_makes_every_metric_stale() {
    let (ok, stdout, stderr) = simulate(&["--output", "json", "--now", "2026-01-01T01:00:00Z"]);
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let web = &report["placements"][0];
    assert_eq!(web["node"], Value::Null);
    assert_eq!(web["reasons"]["node-a"], "node(s) nodeMetric expired");
}

#[test]
fn bad_input_is_a_clear_error() {
    let output = Command::new(BIN)
        .args(["simulate", "--snapshot", "/nonexistent/snapshot.yaml"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("cannot read /nonexistent/snapshot.yaml"),
        "{stderr}"
    );

    let dir = std::env::temp_dir().join(format!("koord-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "kind: Node\nmetadata: 7\n").unwrap();
    let output = Command::new(BIN)
        .args(["simulate", "--snapshot", bad.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("document 0: malformed Node"), "{stderr}");
}

#[test]
fn nameless_and_duplicate_objects_are_errors_and_bad_cpusets_are_reported() {
    let dir = std::env::temp_dir().join(format!("koord-sim-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let output = Command::new(BIN)
            .args(["simulate", "--snapshot", path.to_str().unwrap()])
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    let node = "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '8'}}\n";
    let (ok, stderr) = run(
        "nameless.yaml",
        &format!("{node}---\nkind: Pod\nmetadata: {{namespace: default}}\n"),
    );
    assert!(!ok);
    assert!(
        stderr.contains("document 1: Pod without metadata.name refused"),
        "{stderr}"
    );
    let (ok, stderr) = run("duplicate.yaml", &format!("{node}---\n{node}"));
    assert!(!ok);
    assert!(
        stderr.contains("document 1: Node n1 refused: listed more than once"),
        "{stderr}"
    );
    let hog = "kind: Pod\nmetadata:\n  name: hog\n  namespace: default\n  annotations:\n    scheduling.koordinator.sh/resource-status: '{\"cpuset\": \"0-7,0-7\"}'\nspec:\n  nodeName: n1\n  containers: [{name: c}]\n";
    let (ok, stderr) = run("refused.yaml", &format!("{node}---\n{hog}"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("Pod default/hog: annotation scheduling.koordinator.sh/resource-status refused (not used): cpuset: cpu list entry 2 \"0-7\" repeats CPUs listed before it"),
        "{stderr}"
    );
}
