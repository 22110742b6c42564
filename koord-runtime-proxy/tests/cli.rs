#![allow(clippy::unwrap_used)]
//! Runs the real koord-runtime-proxy binary.

use std::os::unix::net::UnixListener;
use std::process::Command;

use koord_common::testing::{
    HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess, check_healthz,
    check_version_flag, expect_failed_exit, http_get_blocking, isolated_command,
};

const BIN: &str = env!("CARGO_BIN_EXE_koord-runtime-proxy");

fn proxy(dir: &TempDir, backend: &std::path::Path) -> Command {
    let mut command = isolated_command(BIN);
    command.args([
        "--metrics-addr",
        "127.0.0.1:0",
        "--koord-runtimeproxy-endpoint",
        dir.path().join("runtimeproxy.sock").to_str().unwrap(),
        "--remote-runtime-service-endpoint",
        backend.to_str().unwrap(),
    ]);
    command
}

#[test]
fn version_flag_prints_the_version() {
    check_version_flag(BIN, "koord-runtime-proxy", env!("CARGO_PKG_VERSION")).unwrap();
}

#[test]
fn docker_mode_is_refused() {
    let dir = TempDir::new("proxy-docker").unwrap();
    let mut command = proxy(&dir, &dir.path().join("containerd.sock"));
    command.args(["--backend-runtime-mode", "Docker"]);
    expect_failed_exit(command, WAIT, &["Docker is not supported"]).unwrap();
}

#[test]
fn serves_probes_reports_backend_and_stops_cleanly_on_sigterm() {
    let dir = TempDir::new("proxy-run").unwrap();
    let backend_path = dir.path().join("containerd.sock");
    let backend = UnixListener::bind(&backend_path).unwrap();
    let mut process = TestProcess::spawn(proxy(&dir, &backend_path)).unwrap();

    let addr = process.serving_addr("health and metrics", WAIT).unwrap();
    check_healthz(addr).unwrap();

    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    // The fake backend accepts connections but never answers CRI, so the
    // metadata store cannot be rebuilt and the proxy does not report ready.
    assert!(
        readyz.body.contains("[-]cri-proxy failed: "),
        "{}",
        readyz.body
    );
    assert!(readyz.body.contains("[+]backend ok"), "{}", readyz.body);

    // The backend going away shows up in the backend check; liveness is unaffected.
    drop(backend);
    std::fs::remove_file(&backend_path).unwrap();
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert!(
        readyz.body.contains("[-]backend failed: runtime socket"),
        "{}",
        readyz.body
    );
    assert!(readyz.body.contains("does not exist"), "{}", readyz.body);
    assert_eq!(
        http_get_blocking(addr, "/healthz", HTTP).unwrap().status,
        200
    );

    let metrics = http_get_blocking(addr, "/metrics", HTTP).unwrap();
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.body.contains("process_start_time_seconds "),
        "{}",
        metrics.body
    );
    assert!(
        metrics.body.contains("koord_runtime_proxy_build_info{"),
        "{}",
        metrics.body
    );

    let output = process.stop_cleanly("TERM", WAIT).unwrap();
    assert!(output.contains("received SIGTERM"), "{output}");
}
