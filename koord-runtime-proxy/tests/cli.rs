#![allow(clippy::unwrap_used)]
//! Runs the real koord-runtime-proxy binary.

use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::Duration;

use koord_common::testing::{TempDir, TestProcess, http_get_blocking};

const BIN: &str = env!("CARGO_BIN_EXE_koord-runtime-proxy");
const WAIT: Duration = Duration::from_secs(20);
const HTTP: Duration = Duration::from_secs(5);

fn proxy(dir: &TempDir, backend: &std::path::Path) -> Command {
    let mut command = Command::new(BIN);
    command.env_remove("RUST_LOG").args([
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
    let output = Command::new(BIN).arg("--version").output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(stdout.starts_with("koord-runtime-proxy "), "{stdout}");
    assert!(stdout.contains(env!("CARGO_PKG_VERSION")), "{stdout}");
}

#[test]
fn docker_mode_is_refused() {
    let dir = TempDir::new("proxy-docker").unwrap();
    let mut command = proxy(&dir, &dir.path().join("containerd.sock"));
    command.args(["--backend-runtime-mode", "Docker"]);
    let mut process = TestProcess::spawn(command).unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koord-runtime-proxy should exit on its own");
    let output = process.output();
    assert!(!status.success(), "{output}");
    assert!(output.contains("Docker is not supported"), "{output}");
}

#[test]
fn serves_probes_reports_backend_and_stops_cleanly_on_sigterm() {
    let dir = TempDir::new("proxy-run").unwrap();
    let backend_path = dir.path().join("containerd.sock");
    let backend = UnixListener::bind(&backend_path).unwrap();
    let mut process = TestProcess::spawn(proxy(&dir, &backend_path)).unwrap();

    let addr = process
        .wait_for_serving_addr("health and metrics", WAIT)
        .unwrap_or_else(|| panic!("no serving line:\n{}", process.output()));
    let healthz = http_get_blocking(addr, "/healthz", HTTP).unwrap();
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));

    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    assert!(
        readyz
            .body
            .contains("[-]cri-proxy failed: not implemented in this build"),
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

    // Not proxying yet, so it must not have created the CRI socket.
    assert!(!dir.path().join("runtimeproxy.sock").exists());

    process.signal("TERM").unwrap();
    let status = process
        .wait_exit(WAIT)
        .unwrap()
        .expect("koord-runtime-proxy should stop after SIGTERM");
    let output = process.output();
    assert_eq!(status.code(), Some(0), "{output}");
    assert!(output.contains("received SIGTERM"), "{output}");
}
