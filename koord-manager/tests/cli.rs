#![allow(clippy::unwrap_used)]
//! Runs the real koord-manager binary.

use std::process::Command;

use koord_common::testing::{
    FakeApiServer, HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess, check_healthz,
    check_version_flag, command_with_kubeconfig, expect_failed_exit, http_get_blocking,
    unreachable_kubeconfig, write_kubeconfig,
};

const BIN: &str = env!("CARGO_BIN_EXE_koord-manager");

/// The binary with a kubeconfig and no inherited cluster settings.
fn manager(kubeconfig: &std::path::Path) -> Command {
    let mut command = command_with_kubeconfig(BIN, kubeconfig);
    command.args([
        "--metrics-addr",
        "127.0.0.1:0",
        "--health-probe-addr",
        "127.0.0.1:0",
        // An OS-picked loopback port, so parallel tests never collide on 9876.
        "--webhook-port=0",
        "--webhook-bind-address=127.0.0.1",
    ]);
    command
}

#[test]
fn version_flag_prints_the_version() {
    check_version_flag(BIN, "koord-manager", env!("CARGO_PKG_VERSION")).unwrap();
}

#[test]
fn unreachable_api_server_is_a_clear_non_zero_exit() {
    let dir = TempDir::new("manager-unreachable").unwrap();
    let (kubeconfig, closed) = unreachable_kubeconfig(dir.path()).unwrap();
    let mut command = manager(&kubeconfig);
    command.args(["--cluster-connect-timeout", "5s"]);
    expect_failed_exit(
        command,
        WAIT,
        &[
            "cannot reach the Kubernetes API server at",
            &closed.to_string(),
            "koord-manager needs a cluster",
        ],
    )
    .unwrap();
}

#[test]
fn with_a_cluster_it_serves_probes_and_stops_cleanly_on_sigterm() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("manager-fake-api").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut process = TestProcess::spawn(manager(&kubeconfig)).unwrap();

    let addr = process.serving_addr("health and metrics", WAIT).unwrap();
    process
        .expect_line("connected to the Kubernetes API server", WAIT)
        .unwrap();
    assert!(
        api.requests()
            .iter()
            .any(|line| line.starts_with("GET /version"))
    );

    check_healthz(addr).unwrap();

    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    // The fake API server lists nothing, so the controllers never sync.
    assert!(
        readyz.body.contains("[-]controllers failed: "),
        "{}",
        readyz.body
    );
    assert!(readyz.body.contains("[+]cluster ok"), "{}", readyz.body);

    let metrics = http_get_blocking(addr, "/metrics", HTTP).unwrap();
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains("process_start_time_seconds "),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("koord_manager_build_info{"),
        "{}",
        metrics.body
    );

    let output = process.stop_cleanly("TERM", WAIT).unwrap();
    assert!(output.contains("received SIGTERM"), "{output}");
}

#[test]
fn sigint_during_a_slow_connect_exits_zero() {
    // Accepts but never answers, so the manager is still connecting when SIGINT arrives.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = TempDir::new("manager-sigint").unwrap();
    let kubeconfig = write_kubeconfig(
        dir.path(),
        &format!("http://{}", silent.local_addr().unwrap()),
    )
    .unwrap();
    let mut command = manager(&kubeconfig);
    command.args(["--cluster-connect-timeout", "60s"]);
    let mut process = TestProcess::spawn(command).unwrap();
    let addr = process.serving_addr("health and metrics", WAIT).unwrap();
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert!(
        readyz.body.contains("[-]cluster failed: "),
        "{}",
        readyz.body
    );
    process
        .expect_line("connecting to the Kubernetes API server", WAIT)
        .unwrap();
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert!(
        readyz
            .body
            .contains("[-]cluster failed: connecting to the Kubernetes API server"),
        "{}",
        readyz.body
    );

    process.stop_cleanly("INT", WAIT).unwrap();
    drop(silent);
}

#[test]
fn upstream_flags_are_accepted_and_inert_ones_are_warned_about_once_logging_is_up() {
    let dir = TempDir::new("manager-upstream-flags").unwrap();
    let (kubeconfig, closed) = unreachable_kubeconfig(dir.path()).unwrap();
    let mut command = manager(&kubeconfig);
    command.args([
        "--cluster-connect-timeout=5s",
        // The upstream chart's flags (the listeners stay on the test's ports).
        "--enable-leader-election",
        "--logtostderr=true",
        "--leader-election-namespace=koordinator-system",
        "--v=4",
        "--feature-gates=",
        "--sync-period=0",
        "--config-namespace=koordinator-system",
        // Honoured upstream flags, in Go spellings.
        "-rest-config-qps=40",
        "--rest-config-burst",
        "80",
        "-node-strategy-name-need-check=false",
        "--quota-update-retry-jitter=50ms",
        "--colocation-profile-reconcile-interval",
        "30s",
        "-controllers",
        "-quotaprofile",
        "-noderesource-plugins=*,-GPUDeviceResource",
        "-binding-admission-dry-run",
        "-binding-admission-namespaces",
        "*",
        // Upstream flags that do nothing here.
        "-pprof-addr",
        ":6060",
        "-disable-no-deepcopy",
        "-log_dir",
        "/var/log/koordinator",
        "-log_dir=/var/log/again",
        "-enable-pprof=false",
    ]);
    let output = expect_failed_exit(
        command,
        WAIT,
        &[
            "flag -pprof-addr is accepted",
            "flag -disable-no-deepcopy is accepted",
            "flag -enable-pprof is accepted",
            "cannot reach the Kubernetes API server at",
            &closed.to_string(),
        ],
    )
    .unwrap();
    assert!(!output.contains("unexpected argument"), "{output}");
    assert!(
        !output.contains("flag -quota-update-retry-jitter"),
        "{output}"
    );
    assert!(!output.contains("flag -binding-admission"), "{output}");
    assert_eq!(output.matches("flag -log_dir ").count(), 1, "{output}");
    // Logged through the logger, as warnings.
    let line = output
        .lines()
        .find(|line| line.contains("flag -enable-pprof "))
        .unwrap();
    assert!(line.contains("WARN"), "{line}");
}

#[test]
fn a_misspelled_flag_still_stops_the_binary_with_clap_usage() {
    let output = Command::new(BIN)
        .args(["--enable-leader-electon", "--noderesource-plugins=*"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unexpected argument '--enable-leader-electon'"),
        "{stderr}"
    );
}
