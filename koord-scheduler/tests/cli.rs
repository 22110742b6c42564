#![allow(clippy::unwrap_used)]
//! Runs the real koord-scheduler binary.

use std::process::Command;
use std::time::Duration;

use koord_common::testing::{
    FakeApiServer, TempDir, TestProcess, closed_local_addr, http_get_blocking, write_kubeconfig,
};

const BIN: &str = env!("CARGO_BIN_EXE_koord-scheduler");
const WAIT: Duration = Duration::from_secs(20);
const HTTP: Duration = Duration::from_secs(5);

/// The binary with a kubeconfig, a free loopback port and no inherited cluster settings.
fn scheduler(kubeconfig: &std::path::Path, port: u16) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .args(["--address", "127.0.0.1", "--port", &port.to_string()]);
    command
}

#[test]
fn version_flag_prints_the_version() {
    let output = Command::new(BIN).arg("--version").output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.starts_with("koord-scheduler "), "{stdout}");
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")), "{stdout}");
}

#[test]
fn unreachable_api_server_is_a_clear_non_zero_exit() {
    let dir = TempDir::new("scheduler-unreachable").unwrap();
    let closed = closed_local_addr().unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &format!("http://{closed}")).unwrap();
    let mut command = scheduler(&kubeconfig, 0);
    command.args(["--cluster-connect-timeout", "5s"]);
    let mut process = TestProcess::spawn(command).unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koord-scheduler should exit on its own");
    let output = process.output();
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("cannot reach the Kubernetes API server at"),
        "{output}"
    );
    assert!(output.contains(&closed.to_string()), "{output}");
    assert!(
        output.contains("koord-scheduler needs a cluster"),
        "{output}"
    );
}

#[test]
fn with_a_cluster_it_serves_probes_and_stops_cleanly_on_sigterm() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("scheduler-fake-api").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    // --port 0 means "off" upstream, so pick a free port here.
    let port = closed_local_addr().unwrap().port();
    let mut process = TestProcess::spawn(scheduler(&kubeconfig, port)).unwrap();

    let addr = process
        .wait_for_serving_addr("health and metrics", WAIT)
        .unwrap_or_else(|| panic!("no serving line:\n{}", process.output()));
    assert_eq!(addr.port(), port);
    process
        .wait_for_line("connected to the Kubernetes API server", WAIT)
        .unwrap_or_else(|| panic!("never connected:\n{}", process.output()));

    let healthz = http_get_blocking(addr, "/healthz", HTTP).unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    assert!(
        readyz
            .body
            .contains("[-]scheduler failed: not implemented in this build"),
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

    process.signal("TERM").unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koord-scheduler should stop after SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", process.output());
}
