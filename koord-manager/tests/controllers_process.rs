#![allow(clippy::unwrap_used)]
//! The real binary's controllers against koord_common's fake API server:
//! caches fill from canned lists, the first pass creates the NodeSLO and
//! patches the node status, and readiness flips.

use std::time::{Duration, SystemTime};

use koord_common::testing::{
    FakeApiServer, HTTP_WAIT, TempDir, TestProcess, command_with_kubeconfig, http_get_blocking,
    write_kubeconfig,
};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_koord-manager");
const WAIT: Duration = Duration::from_secs(60);

fn list(kind: &str, api_version: &str, items: Value) -> String {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items})
        .to_string()
}

#[test]
fn controllers_write_node_slo_and_node_status_and_become_ready() {
    let api = FakeApiServer::start().unwrap();
    let now = k8s_openapi::jiff::Timestamp::try_from(SystemTime::now()).unwrap();
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker", "uid": "uid-1", "resourceVersion": "1", "labels": {"pool": "a"}},
        "status": {"capacity": {"cpu": "16", "memory": "64Gi"}, "allocatable": {"cpu": "15", "memory": "60Gi"}},
    });
    api.respond(
        "GET",
        "/api/v1/nodes",
        200,
        &list("NodeList", "v1", json!([node])),
    );
    api.respond(
        "GET",
        "/apis/slo.koordinator.sh/v1alpha1/nodemetrics",
        200,
        &list(
            "NodeMetricList",
            "slo.koordinator.sh/v1alpha1",
            json!([{
                "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": "worker", "resourceVersion": "1"},
                "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 300, "reportIntervalSeconds": 60,
                    "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
                    "nodeMemoryCollectPolicy": "usageWithoutPageCache"}},
                "status": {"updateTime": now.to_string(),
                    "nodeMetric": {"systemUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}}},
            }]),
        ),
    );
    api.respond(
        "GET",
        "/apis/slo.koordinator.sh/v1alpha1/nodeslos",
        200,
        &list("NodeSLOList", "slo.koordinator.sh/v1alpha1", json!([])),
    );
    api.respond(
        "GET",
        "/api/v1/pods",
        200,
        &list("PodList", "v1", json!([])),
    );
    api.respond(
        "GET",
        "/api/v1/namespaces/koordinator-system/configmaps",
        200,
        &list(
            "ConfigMapList",
            "v1",
            json!([{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system", "resourceVersion": "1"},
                "data": {"colocation-config": "{\"enable\": true}"},
            }]),
        ),
    );
    api.respond(
        "PATCH",
        "/api/v1/nodes/worker/status",
        200,
        &node.to_string(),
    );
    api.respond(
        "POST",
        "/apis/slo.koordinator.sh/v1alpha1/nodeslos",
        201,
        &json!({"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                "metadata": {"name": "worker"}, "spec": {}})
        .to_string(),
    );

    let dir = TempDir::new("manager-controllers").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args([
        "--metrics-addr",
        "127.0.0.1:0",
        "--health-probe-addr",
        "127.0.0.1:0",
        "--enable-leader-election=false",
        // Tests run in parallel: never the fixed webhook port 9876.
        "--webhook-port=0",
        "--webhook-bind-address=127.0.0.1",
    ]);
    let mut process = TestProcess::spawn(command).unwrap();
    let addr = process
        .wait_for_serving_addr("health and metrics", WAIT)
        .unwrap_or_else(|| panic!("no serving line:\n{}", process.output()));

    let patch = api
        .wait_for_request("PATCH", "/api/v1/nodes/worker/status", WAIT)
        .unwrap_or_else(|| panic!("no status patch:\n{}", process.output()));
    assert_eq!(
        patch.header("content-type"),
        Some("application/merge-patch+json")
    );
    let body: Value = serde_json::from_str(&patch.body).unwrap();
    // 16000m − 40% margin 6400m − max(system 500m, kubelet reserved 1000m) = 8600.
    assert_eq!(
        body["status"]["allocatable"]["kubernetes.io/batch-cpu"],
        "8600"
    );
    assert_eq!(
        body["status"]["capacity"]["kubernetes.io/batch-cpu"],
        "8600"
    );

    let created = api
        .wait_for_request("POST", "/apis/slo.koordinator.sh/v1alpha1/nodeslos", WAIT)
        .unwrap_or_else(|| panic!("no NodeSLO create:\n{}", process.output()));
    let slo: Value = serde_json::from_str(&created.body).unwrap();
    assert_eq!(slo["metadata"]["name"], "worker");
    assert_eq!(
        slo["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"],
        65
    );

    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let readyz = http_get_blocking(addr, "/readyz?verbose", HTTP_WAIT).unwrap();
        if readyz.body.contains("[+]controllers ok") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{}\n{}",
            readyz.body,
            process.output()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let metrics = http_get_blocking(addr, "/metrics", HTTP_WAIT).unwrap();
    assert!(
        metrics
            .body
            .contains("slo_controller_node_resource_reconcile_count{status=\"succeeded\",reason=\"updateNodeStatus\"} "),
        "{}",
        metrics.body
    );

    process.signal("TERM").unwrap();
    let status = process.wait_exit(WAIT).unwrap().expect("stops on SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", process.output());
}

#[test]
fn an_invalid_configmap_is_refused_with_an_event() {
    let api = FakeApiServer::start().unwrap();
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "worker", "uid": "uid-1", "resourceVersion": "1"},
        "status": {"capacity": {"cpu": "16", "memory": "64Gi"}, "allocatable": {"cpu": "15", "memory": "60Gi"}},
    });
    api.respond(
        "GET",
        "/api/v1/nodes",
        200,
        &list("NodeList", "v1", json!([node])),
    );
    for (path, kind) in [
        (
            "/apis/slo.koordinator.sh/v1alpha1/nodemetrics",
            "NodeMetricList",
        ),
        ("/apis/slo.koordinator.sh/v1alpha1/nodeslos", "NodeSLOList"),
    ] {
        api.respond(
            "GET",
            path,
            200,
            &list(kind, "slo.koordinator.sh/v1alpha1", json!([])),
        );
    }
    api.respond(
        "GET",
        "/api/v1/pods",
        200,
        &list("PodList", "v1", json!([])),
    );
    api.respond(
        "GET",
        "/api/v1/namespaces/koordinator-system/configmaps",
        200,
        &list(
            "ConfigMapList",
            "v1",
            json!([{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system",
                             "resourceVersion": "3", "uid": "cm-uid"},
                "data": {"resource-threshold-config": "{\"clusterStrategy\": {\"cpuSuppressThresholdPercent\": 250}}"},
            }]),
        ),
    );

    let dir = TempDir::new("manager-invalid-config").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args([
        "--metrics-addr",
        "0",
        "--health-probe-addr",
        "0",
        "--enable-leader-election=false",
        // Tests run in parallel: never the fixed webhook port 9876.
        "--webhook-port=0",
        "--webhook-bind-address=127.0.0.1",
    ]);
    let mut process = TestProcess::spawn(command).unwrap();
    let event = api
        .wait_for_request(
            "POST",
            "/apis/events.k8s.io/v1/namespaces/koordinator-system/events",
            WAIT,
        )
        .unwrap_or_else(|| panic!("no event:\n{}", process.output()));
    let event: Value = serde_json::from_str(&event.body).unwrap();
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "InvalidConfig");
    assert_eq!(event["regarding"]["name"], "slo-controller-config");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("cpuSuppressThresholdPercent"),
        "{event}"
    );
    // The defaults stay in force: the NodeSLO carries the default threshold.
    let created = api
        .wait_for_request("POST", "/apis/slo.koordinator.sh/v1alpha1/nodeslos", WAIT)
        .unwrap_or_else(|| panic!("no NodeSLO create:\n{}", process.output()));
    let slo: Value = serde_json::from_str(&created.body).unwrap();
    assert_eq!(
        slo["spec"]["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"],
        65
    );
    process.signal("TERM").unwrap();
    let status = process.wait_exit(WAIT).unwrap().expect("stops on SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", process.output());
}
