#![allow(clippy::unwrap_used)]
//! Runs the real koordlet binary.

use std::process::Command;
use std::time::Duration;

use koord_common::testing::{
    FakeApiServer, TempDir, TestProcess, closed_local_addr, http_get_blocking, write_kubeconfig,
};

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");
const WAIT: Duration = Duration::from_secs(20);
const HTTP: Duration = Duration::from_secs(5);

/// The binary with a kubeconfig, a node name and no inherited cluster settings.
/// Uses upstream's single-dash spelling for `-addr`.
fn koordlet(kubeconfig: &std::path::Path) -> Command {
    let mut command = Command::new(BIN);
    command
        .env("KUBECONFIG", kubeconfig)
        .env("NODE_NAME", "test-node-1")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        .args(["-addr=127.0.0.1:0", "--logtostderr=true", "--v=4"]);
    command
}

#[test]
fn version_flag_prints_the_version() {
    let output = Command::new(BIN).arg("--version").output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.starts_with("koordlet "), "{stdout}");
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")), "{stdout}");
}

#[test]
fn missing_node_name_is_a_clear_non_zero_exit() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("koordlet-no-node").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = koordlet(&kubeconfig);
    command.env_remove("NODE_NAME");
    let mut process = TestProcess::spawn(command).unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koordlet should exit on its own");
    let output = process.output();
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("the NODE_NAME environment variable is not set"),
        "{output}"
    );
    assert!(
        api.requests().is_empty(),
        "no cluster contact without a node name"
    );
}

#[test]
fn unreachable_api_server_is_a_clear_non_zero_exit() {
    let dir = TempDir::new("koordlet-unreachable").unwrap();
    let closed = closed_local_addr().unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &format!("http://{closed}")).unwrap();
    let mut command = koordlet(&kubeconfig);
    command.args(["--cluster-connect-timeout", "5s"]);
    let mut process = TestProcess::spawn(command).unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koordlet should exit on its own");
    let output = process.output();
    assert!(!status.success(), "{output}");
    assert!(
        output.contains("cannot reach the Kubernetes API server at"),
        "{output}"
    );
    assert!(output.contains(&closed.to_string()), "{output}");
    assert!(output.contains("koordlet needs a cluster"), "{output}");
}

#[test]
fn with_a_cluster_it_serves_probes_and_stops_cleanly_on_sigterm() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("koordlet-fake-api").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut process = TestProcess::spawn(koordlet(&kubeconfig)).unwrap();

    let addr = process
        .wait_for_serving_addr("health and metrics", WAIT)
        .unwrap_or_else(|| panic!("no serving line:\n{}", process.output()));
    process
        .wait_for_line("connected to the Kubernetes API server", WAIT)
        .unwrap_or_else(|| panic!("never connected:\n{}", process.output()));

    let healthz = http_get_blocking(addr, "/healthz", HTTP).unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));
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

    process.signal("TERM").unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koordlet should stop after SIGTERM");
    let output = process.output();
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(output.contains("received SIGTERM"), "{output}");
}
