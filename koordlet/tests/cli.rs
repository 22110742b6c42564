#![allow(clippy::unwrap_used)]
//! Runs the real koordlet binary.

use std::process::Command;

use koord_common::testing::{
    FakeApiServer, HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess, check_healthz,
    check_version_flag, command_with_kubeconfig, expect_failed_exit, http_get_blocking,
    unreachable_kubeconfig, write_kubeconfig,
};

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");

/// The binary with a kubeconfig, a node name and no inherited cluster settings.
/// Uses upstream's single-dash spelling for `-addr`.
fn koordlet(kubeconfig: &std::path::Path) -> Command {
    let mut command = command_with_kubeconfig(BIN, kubeconfig);
    command.env("NODE_NAME", "test-node-1").args([
        "-addr=127.0.0.1:0",
        "--logtostderr=true",
        "--v=4",
    ]);
    command
}

#[test]
fn version_flag_prints_the_version() {
    check_version_flag(BIN, "koordlet", env!("CARGO_PKG_VERSION")).unwrap();
}

#[test]
fn missing_node_name_is_a_clear_non_zero_exit() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("koordlet-no-node").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = koordlet(&kubeconfig);
    command.env_remove("NODE_NAME");
    expect_failed_exit(
        command,
        WAIT,
        &["the NODE_NAME environment variable is not set"],
    )
    .unwrap();
    assert!(
        api.requests().is_empty(),
        "no cluster contact without a node name"
    );
}

#[test]
fn upstream_chart_arguments_and_inert_upstream_flags_start_with_one_warning_each() {
    // The v1.8 chart's arguments (its -addr aside: the helper binds
    // 127.0.0.1:0) plus flags that have no effect here. Without NODE_NAME the
    // daemon stops right after start-up, so the warnings are all there is.
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("koordlet-inert-flags").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = koordlet(&kubeconfig);
    command.env_remove("NODE_NAME").args([
        "-cgroup-root-dir=/host-cgroup/",
        "-feature-gates=BECPUEvict=true,BEMemoryEvict=true,CgroupReconcile=true,Accelerators=true",
        "-runtime-hooks-host-endpoint=/var/run/koordlet/koordlet.sock",
        "-tsdb-path=/metric-data/",
        "--enable-pprof",
        "-housekeeping_interval",
        "10s",
        "-tsdb-path",
        "/again/",
    ]);
    let output = expect_failed_exit(
        command,
        WAIT,
        &[
            "flag -tsdb-path is accepted for compatibility with upstream Koordinator and has no effect here",
            "flag -enable-pprof is accepted",
            "flag -housekeeping_interval is accepted",
            "the NODE_NAME environment variable is not set",
        ],
    )
    .unwrap();
    assert_eq!(
        output.matches("flag -tsdb-path is accepted").count(),
        1,
        "{output}"
    );
    assert!(output.contains("WARN"), "{output}");
}

#[test]
fn a_misspelled_upstream_flag_is_refused_before_start() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("koordlet-misspelled").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = koordlet(&kubeconfig);
    command.arg("-tsdb-pth=/metric-data/");
    expect_failed_exit(command, WAIT, &["unexpected argument '--tsdb-pth'"]).unwrap();
    assert!(api.requests().is_empty(), "no cluster contact");
}

#[test]
fn unreachable_api_server_is_a_clear_non_zero_exit() {
    let dir = TempDir::new("koordlet-unreachable").unwrap();
    let (kubeconfig, closed) = unreachable_kubeconfig(dir.path()).unwrap();
    let mut command = koordlet(&kubeconfig);
    command.args(["--cluster-connect-timeout", "5s"]);
    expect_failed_exit(
        command,
        WAIT,
        &[
            "cannot reach the Kubernetes API server at",
            &closed.to_string(),
            "koordlet needs a cluster",
        ],
    )
    .unwrap();
}

#[test]
fn with_a_cluster_it_serves_probes_and_stops_cleanly_on_sigterm() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("koordlet-fake-api").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut process = TestProcess::spawn(koordlet(&kubeconfig)).unwrap();

    let addr = process.serving_addr("health and metrics", WAIT).unwrap();
    process
        .expect_line("connected to the Kubernetes API server", WAIT)
        .unwrap();

    check_healthz(addr).unwrap();
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    // The fake API server knows no Node, NodeSLO, NodeMetric or Device and
    // there is no kubelet: the states informer never completes its first sync.
    assert!(
        readyz
            .body
            .contains("[-]states failed: waiting for the first sync of pods"),
        "{}",
        readyz.body
    );
    assert!(readyz.body.contains("[+]cluster ok"), "{}", readyz.body);
    let metrics = http_get_blocking(addr, "/metrics", HTTP).unwrap();
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .body
            .contains("koordlet_start_time{node=\"test-node-1\"} "),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("koordlet_build_info{"),
        "{}",
        metrics.body
    );

    let output = process.stop_cleanly("TERM", WAIT).unwrap();
    assert!(output.contains("received SIGTERM"), "{output}");
}
