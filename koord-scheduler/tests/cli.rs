#![allow(clippy::unwrap_used)]
//! Runs the real koord-scheduler binary.

use std::process::Command;

use koord_common::testing::{
    FakeApiServer, HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess, check_healthz,
    check_version_flag, closed_local_addr, command_with_kubeconfig, expect_failed_exit,
    http_get_blocking, unreachable_kubeconfig, write_kubeconfig,
};

const BIN: &str = env!("CARGO_BIN_EXE_koord-scheduler");

/// The binary with a kubeconfig, a free loopback port and no inherited cluster settings.
fn scheduler(kubeconfig: &std::path::Path, port: u16) -> Command {
    let mut command = command_with_kubeconfig(BIN, kubeconfig);
    command.args(["--address", "127.0.0.1", "--port", &port.to_string()]);
    command
}

#[test]
fn version_flag_prints_the_version() {
    check_version_flag(BIN, "koord-scheduler", env!("CARGO_PKG_VERSION")).unwrap();
}

#[test]
fn unreachable_api_server_is_a_clear_non_zero_exit() {
    let dir = TempDir::new("scheduler-unreachable").unwrap();
    let (kubeconfig, closed) = unreachable_kubeconfig(dir.path()).unwrap();
    let mut command = scheduler(&kubeconfig, 0);
    command.args(["--cluster-connect-timeout", "5s"]);
    expect_failed_exit(
        command,
        WAIT,
        &[
            "cannot reach the Kubernetes API server at",
            &closed.to_string(),
            "koord-scheduler needs a cluster",
        ],
    )
    .unwrap();
}

#[test]
fn with_a_cluster_it_serves_probes_and_stops_cleanly_on_sigterm() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("scheduler-fake-api").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    // --port 0 means "off" upstream, so pick a free port here.
    let port = closed_local_addr().unwrap().port();
    let mut process = TestProcess::spawn(scheduler(&kubeconfig, port)).unwrap();

    let addr = process.serving_addr("health and metrics", WAIT).unwrap();
    assert_eq!(addr.port(), port);
    process
        .expect_line("connected to the Kubernetes API server", WAIT)
        .unwrap();

    check_healthz(addr).unwrap();
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    // The fake API server lists nothing, so the scheduler's caches never sync.
    assert!(
        readyz.body.contains("[-]scheduler failed: "),
        "{}",
        readyz.body
    );
    let metrics = http_get_blocking(addr, "/metrics", HTTP).unwrap();
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains("process_start_time_seconds "),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("scheduler_build_info{"),
        "{}",
        metrics.body
    );

    process.stop_cleanly("TERM", WAIT).unwrap();
}
