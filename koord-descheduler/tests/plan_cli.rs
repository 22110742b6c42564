#![allow(clippy::unwrap_used)]
//! `koord-descheduler plan` run as a process over the scenario fixtures:
//! hot and cold nodes, a PodDisruptionBudget allowing no disruption,
//! DaemonSet and bare pods, the per-node migration limit.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn plan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_koord-descheduler"))
        .arg("plan")
        .args(args)
        .output()
        .expect("run koord-descheduler")
}

fn plan_json(extra: &[&str]) -> Value {
    let config = fixture("config.yaml");
    let snapshot = fixture("hot-and-cold.yaml");
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "--snapshot",
        snapshot.to_str().unwrap(),
        "--output",
        "json",
        "--now",
        "2024-05-01T12:00:00Z",
    ];
    args.extend_from_slice(extra);
    let output = plan(&args);
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("plan prints JSON")
}

fn skipped_reason<'a>(source: &'a Value, pod: &str) -> &'a str {
    source["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == pod)
        .and_then(|s| s["reason"].as_str())
        .unwrap_or_else(|| panic!("{pod} not skipped: {source}"))
}

#[test]
fn hot_node_gives_up_the_youngest_batch_pods_within_the_limits() {
    let plan = plan_json(&[]);
    assert_eq!(plan["formatVersion"], 1);
    assert_eq!(plan["nodes"], 5);
    assert_eq!(plan["ignoredKinds"]["Service"], 1);
    let profile = &plan["profiles"][0];
    assert_eq!(profile["name"], "koord-descheduler");
    // consecutiveAbnormalities 2: the node must be hot in 3 rounds in a row.
    assert_eq!(profile["round"], 3);
    assert_eq!(profile["deschedulingIntervalSeconds"], 10.0);
    let migrations: Vec<(&str, &str)> = profile["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        migrations,
        [
            (
                "web-6",
                "node is overutilized, node cpu usage(100.00%)>threshold(70.00%)"
            ),
            (
                "web-5",
                "node is overutilized, node cpu usage(87.50%)>threshold(70.00%)"
            ),
        ]
    );
    let pool = &profile["lowNodeLoad"]["pools"][0];
    assert_eq!(pool["name"], "__default_node_pool__");
    assert_eq!(pool["skippedNodes"][0]["node"], "no-metric");
    assert_eq!(pool["skippedNodes"][0]["reason"], "no NodeMetric");
    let class = |node: &str| {
        pool["classification"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["node"] == node)
            .unwrap()
            .clone()
    };
    assert_eq!(class("hot-1")["class"], "high");
    assert_eq!(class("hot-1")["usage"]["cpu"]["usage"], 8000);
    assert_eq!(class("hot-1")["usage"]["cpu"]["highThreshold"], 5600);
    assert_eq!(class("hot-1")["anomaly"]["state"], "anomaly");
    assert_eq!(class("cold-1")["class"], "bothLow");
    assert_eq!(class("cordoned")["class"], "appropriate");

    let source = &pool["sources"][0];
    assert_eq!(source["node"], "hot-1");
    assert_eq!(source["prod"], false);
    assert!(
        skipped_reason(source, "api-1")
            .contains("PodDisruptionBudget default/api allows no more disruptions")
    );
    assert_eq!(
        skipped_reason(source, "agent-hot"),
        "namespace kube-system is excluded by LowNodeLoad evictableNamespaces"
    );
    assert_eq!(
        skipped_reason(source, "bare"),
        "pod does not have any ownerRefs"
    );
    assert!(
        skipped_reason(source, "web-4").starts_with("maxMigratingPerNode 2 reached on node hot-1")
    );
}

#[test]
fn fewer_rounds_than_the_anomaly_condition_start_nothing() {
    let plan = plan_json(&["--rounds", "2"]);
    let profile = &plan["profiles"][0];
    assert_eq!(profile["round"], 2);
    assert_eq!(profile["migrations"].as_array().unwrap().len(), 0);
    let pool = &profile["lowNodeLoad"]["pools"][0];
    assert_eq!(
        pool["nothingToDo"],
        "no node above its high thresholds has been so for enough consecutive rounds"
    );
    let hot = pool["classification"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["node"] == "hot-1")
        .unwrap();
    assert_eq!(hot["anomaly"]["state"], "ok");
    assert_eq!(hot["anomaly"]["consecutiveAbnormalRounds"], 2);
}

#[test]
fn expired_metrics_leave_every_node_out() {
    // Ten minutes later the NodeMetrics are older than 180 s.
    let plan = plan_json(&["--now", "2024-05-01T12:10:00Z"]);
    let pool = &plan["profiles"][0]["lowNodeLoad"]["pools"][0];
    assert_eq!(pool["skippedNodes"].as_array().unwrap().len(), 5);
    assert_eq!(
        pool["nothingToDo"],
        "all nodes are under their high thresholds"
    );
}

#[test]
fn errors_are_clear_and_fail_the_command() {
    let snapshot = fixture("hot-and-cold.yaml");
    // The default configuration does not enable LowNodeLoad.
    let output = plan(&["--snapshot", snapshot.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no profile enables the LowNodeLoad balance plugin"),
        "{stderr}"
    );

    let dir = std::env::temp_dir().join(format!("koord-descheduler-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: [1]}}\n",
    )
    .unwrap();
    let config = fixture("config.yaml");
    let output = plan(&[
        "--config",
        config.to_str().unwrap(),
        "--snapshot",
        bad.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("document 1: Node \"n1\""), "{stderr}");
    let output = plan(&[
        "--config",
        config.to_str().unwrap(),
        "--snapshot",
        dir.join("missing.yaml").to_str().unwrap(),
    ]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read"));
    let output = plan(&[
        "--config",
        config.to_str().unwrap(),
        "--snapshot",
        snapshot.to_str().unwrap(),
        "--max-snapshot-bytes",
        "100",
    ]);
    assert!(String::from_utf8_lossy(&output.stderr).contains("more than the limit of 100"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn write_config_to_writes_the_defaulted_configuration() {
    let dir = std::env::temp_dir().join(format!("koord-descheduler-wct-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("written.yaml");
    let status = Command::new(env!("CARGO_BIN_EXE_koord-descheduler"))
        .arg(format!("--config={}", fixture("config.yaml").display()))
        .arg(format!("--write-config-to={}", out.display()))
        .status()
        .unwrap();
    assert!(status.success());
    let written: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        written["leaderElection"]["resourceName"],
        "koord-descheduler"
    );
    assert_eq!(
        written["profiles"][0]["pluginConfig"][1]["args"]["nodeMetricExpirationSeconds"],
        180
    );
    std::fs::remove_dir_all(&dir).ok();
}
