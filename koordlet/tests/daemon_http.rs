#![allow(clippy::unwrap_used)]
//! The daemon's HTTP server as wired by `run()`: the real binary, standalone
//! with an empty pods file (no root, no cluster), serves the resource
//! executor's audit trail next to /metrics, and /metrics carries the
//! capability and resource-update families.

use std::fs;

use koord_common::testing::{
    HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess, http_get_blocking,
    isolated_command, wait_for_http_status,
};

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");

#[test]
fn standalone_daemon_serves_the_audit_trail_and_executor_metrics() {
    let dir = TempDir::new("daemon-http").unwrap();
    let pods_file = dir.path().join("pods.json");
    fs::write(
        &pods_file,
        r#"{"apiVersion":"v1","kind":"PodList","items":[]}"#,
    )
    .unwrap();
    let mut command = isolated_command(BIN);
    command
        .args([
            "--addr=127.0.0.1:0",
            "--node-name=daemon-http-node",
            "--collect-res-used-interval=1s",
        ])
        .arg("--pods-file")
        .arg(&pods_file);
    let mut koordlet = TestProcess::spawn(command).unwrap();
    let addr = koordlet.serving_addr("health and metrics", WAIT).unwrap();

    // Ready once the empty pods file has been read.
    if let Err(err) = wait_for_http_status(addr, "/readyz", 200, WAIT) {
        panic!("never ready ({err}):\n{}", koordlet.output());
    }

    for path in [
        "/resource-executor/writes",
        "/resource-executor/writes?limit=3",
    ] {
        let writes = http_get_blocking(addr, path, HTTP).unwrap();
        assert_eq!(writes.status, 200, "{path}: {}", writes.body);
        assert!(
            writes
                .header("content-type")
                .is_some_and(|value| value.starts_with("application/json")),
            "{path}: {:?}",
            writes.header("content-type")
        );
        let body: serde_json::Value = serde_json::from_str(&writes.body)
            .unwrap_or_else(|err| panic!("{path} is not JSON ({err}): {}", writes.body));
        // Nothing in this build writes cgroups on its own yet: an empty array.
        assert_eq!(body, serde_json::json!([]), "{path}");
    }
    let bad_limit = http_get_blocking(addr, "/resource-executor/writes?limit=many", HTTP).unwrap();
    assert_eq!(bad_limit.status, 400, "{}", bad_limit.body);

    let metrics = http_get_blocking(addr, "/metrics", HTTP).unwrap();
    assert_eq!(metrics.status, 200);
    // The duration histogram appears with the first write; the result
    // counters are exported from the start.
    for family in [
        "# TYPE koordlet_node_capability gauge",
        "koordlet_node_capability{capability=\"cpu_burst\"}",
        "# TYPE koordlet_resource_updates counter",
        "koordlet_resource_updates_total{type=\"cgroup\",result=\"written\"} 0",
    ] {
        assert!(
            metrics.body.contains(family),
            "{family} missing from /metrics:\n{}",
            metrics.body
        );
    }

    koordlet.stop_cleanly("TERM", WAIT).unwrap();
}

/// Issue 16, finding 8: `/qos/explain` and the audit trail show pods,
/// cgroup paths and values; they are served on loopback only. Given an
/// address on every interface (upstream's `-addr=:9316`), koordlet serves
/// there what upstream serves — `/metrics`, plus the probes — and nothing
/// else; `--health-addr` adds a listener with the probes alone.
#[test]
fn cluster_data_endpoints_are_served_on_loopback_only() {
    let dir = TempDir::new("daemon-http-exposure").unwrap();
    let pods_file = dir.path().join("pods.json");
    fs::write(
        &pods_file,
        r#"{"apiVersion":"v1","kind":"PodList","items":[]}"#,
    )
    .unwrap();
    let mut command = isolated_command(BIN);
    command
        .args([
            "--addr=0.0.0.0:0",
            // Another address (the same one would be merged into one listener).
            "--health-addr=127.0.0.1:0",
            "--node-name=daemon-http-node",
            "--enable-nri-runtime-hook=false",
        ])
        .arg("--pods-file")
        .arg(&pods_file);
    let mut koordlet = TestProcess::spawn(command).unwrap();
    let open = koordlet.serving_addr("health and metrics", WAIT).unwrap();
    let probes = koordlet.serving_addr("health probes", WAIT).unwrap();
    if let Err(err) = wait_for_http_status(open, "/readyz", 200, WAIT) {
        panic!("never ready ({err}):\n{}", koordlet.output());
    }
    for path in [
        "/qos/explain",
        "/qos/explain?tier=be",
        "/resource-executor/writes",
    ] {
        let response = http_get_blocking(open, path, HTTP).unwrap();
        assert_eq!(
            response.status, 404,
            "{path} served on {open}: {}",
            response.body
        );
    }
    assert_eq!(
        http_get_blocking(open, "/metrics", HTTP).unwrap().status,
        200
    );
    assert_eq!(
        http_get_blocking(open, "/healthz", HTTP).unwrap().status,
        200
    );

    // The probe listener serves the probes and nothing else.
    assert_eq!(
        http_get_blocking(probes, "/readyz", HTTP).unwrap().status,
        200
    );
    assert_eq!(
        http_get_blocking(probes, "/healthz", HTTP).unwrap().status,
        200
    );
    for path in ["/metrics", "/qos/explain", "/resource-executor/writes"] {
        assert_eq!(
            http_get_blocking(probes, path, HTTP).unwrap().status,
            404,
            "{path} on the probe listener"
        );
    }
    koordlet.stop_cleanly("TERM", WAIT).unwrap();
}
