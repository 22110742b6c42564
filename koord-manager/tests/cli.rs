#![allow(clippy::unwrap_used)]
//! Runs the real koord-manager binary.

use std::process::Command;
use std::time::Duration;

use koord_common::testing::{
    FakeApiServer, TempDir, TestProcess, closed_local_addr, http_get_blocking, write_kubeconfig,
};

const BIN: &str = env!("CARGO_BIN_EXE_koord-manager");
const WAIT: Duration = Duration::from_secs(20);
const HTTP: Duration = Duration::from_secs(5);

/// The binary with a kubeconfig and no inherited cluster settings.
fn manager(kubeconfig: &std::path::Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--health-probe-addr",
            "127.0.0.1:0",
        ]);
    command
}

#[test]
fn version_flag_prints_the_version() {
    let output = Command::new(BIN).arg("--version").output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")), "{stdout}");
    assert!(stdout.starts_with("koord-manager "), "{stdout}");
}

#[test]
fn unreachable_api_server_is_a_clear_non_zero_exit() {
    let dir = TempDir::new("manager-unreachable").unwrap();
    let closed = closed_local_addr().unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &format!("http://{closed}")).unwrap();
    let mut command = manager(&kubeconfig);
    command.args(["--cluster-connect-timeout", "5s"]);
    let mut process = TestProcess::spawn(command).unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koord-manager should exit on its own");
    let output = process.output();
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("cannot reach the Kubernetes API server at"),
        "{output}"
    );
    assert!(output.contains(&closed.to_string()), "{output}");
    assert!(output.contains("koord-manager needs a cluster"), "{output}");
}

#[test]
fn with_a_cluster_it_serves_probes_and_stops_cleanly_on_sigterm() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("manager-fake-api").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut process = TestProcess::spawn(manager(&kubeconfig)).unwrap();

    let addr = process
        .wait_for_serving_addr("health and metrics", WAIT)
        .unwrap_or_else(|| panic!("no serving line:\n{}", process.output()));
    process
        .wait_for_line("connected to the Kubernetes API server", WAIT)
        .unwrap_or_else(|| panic!("never connected:\n{}", process.output()));
    assert!(
        api.requests()
            .iter()
            .any(|line| line.starts_with("GET /version"))
    );

    let healthz = http_get_blocking(addr, "/healthz", HTTP).unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));

    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    assert!(
        readyz
            .body
            .contains("[-]controllers failed: not implemented in this build"),
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

    process.signal("TERM").unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koord-manager should stop after SIGTERM");
    let output = process.output();
    assert_eq!(status.code(), Some(0), "{output}");
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
    let addr = process
        .wait_for_serving_addr("health and metrics", WAIT)
        .unwrap();
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert!(
        readyz.body.contains("[-]cluster failed: "),
        "{}",
        readyz.body
    );
    process
        .wait_for_line("connecting to the Kubernetes API server", WAIT)
        .unwrap();
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert!(
        readyz
            .body
            .contains("[-]cluster failed: connecting to the Kubernetes API server"),
        "{}",
        readyz.body
    );

    process.signal("INT").unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koord-manager should stop after SIGINT");
    assert_eq!(status.code(), Some(0), "{}", process.output());
    drop(silent);
}
