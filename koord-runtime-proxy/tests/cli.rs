#![allow(clippy::unwrap_used)]
//! Runs the real koord-runtime-proxy binary.

use std::os::unix::net::UnixListener;
use std::process::Command;
use std::time::Duration;

use koord_common::testing::{
    HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess, check_healthz,
    check_version_flag, expect_failed_exit, http_get_blocking, isolated_command,
    wait_for_http_status,
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
fn probe_flags_are_validated() {
    let dir = TempDir::new("proxy-flags").unwrap();
    for (flag, value, message) in [
        (
            "--backend-failure-threshold",
            "0",
            "--backend-failure-threshold",
        ),
        ("--backend-probe-interval", "0", "too short"),
        ("--backend-probe-interval", "soon", "invalid duration"),
    ] {
        let mut command = proxy(&dir, &dir.path().join("containerd.sock"));
        command.args([flag, value]);
        expect_failed_exit(command, WAIT, &[message]).unwrap();
    }
}

/// A minimal dockerd on a unix socket for the binary's start-up: it answers
/// `/info`, an empty container list and `/_ping`, one request per connection.
fn serve_fake_dockerd(path: &std::path::Path) {
    use std::io::{BufRead, BufReader, Write};
    let listener = UnixListener::bind(path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            // The rest of the head; the requests the proxy sends here have no body.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let body = if request_line.contains("/info") {
                r#"{"CgroupDriver":"cgroupfs"}"#
            } else if request_line.contains("/containers/json") {
                "[]"
            } else {
                "OK"
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

#[test]
fn docker_mode_serves_the_engine_api_once_the_store_is_rebuilt() {
    use std::io::{Read, Write};
    let dir = TempDir::new("proxy-docker").unwrap();
    let engine = dir.path().join("docker.sock");
    serve_fake_dockerd(&engine);
    let mut command = proxy(&dir, &engine);
    command.args(["--backend-runtime-mode", "Docker"]);
    let mut process = TestProcess::spawn(command).unwrap();
    let addr = process.serving_addr("health and metrics", WAIT).unwrap();
    let readyz = wait_for_http_status(addr, "/readyz", 200, Duration::from_secs(30)).unwrap();
    assert!(readyz.body.contains("ok"), "{}", readyz.body);

    // The proxy socket answers Engine API calls with the engine's answers.
    let socket = dir.path().join("runtimeproxy.sock");
    let deadline = std::time::Instant::now() + WAIT;
    let mut stream = loop {
        match std::os::unix::net::UnixStream::connect(&socket) {
            Ok(stream) => break stream,
            Err(error) if std::time::Instant::now() > deadline => panic!("{error}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    stream.set_read_timeout(Some(HTTP)).unwrap();
    stream
        .write_all(b"GET /v1.41/_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("OK"), "{answer}");
    process.stop_cleanly("TERM", WAIT).unwrap();
}

#[test]
fn serves_probes_reports_backend_and_stops_cleanly_on_sigterm() {
    let dir = TempDir::new("proxy-run").unwrap();
    let backend_path = dir.path().join("containerd.sock");
    let backend = UnixListener::bind(&backend_path).unwrap();
    let mut command = proxy(&dir, &backend_path);
    // Liveness fails after 5 failed probes 1 s apart: never sooner than 4 s.
    command.args([
        "--backend-probe-interval",
        "1s",
        "--backend-failure-threshold",
        "5",
    ]);
    let mut process = TestProcess::spawn(command).unwrap();

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

    // The backend going away shows up at once in the readiness check `backend`;
    // liveness is unaffected until several probes in a row have failed.
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

    // Then /healthz reports the runtime unreachable, naming its socket.
    let healthz = wait_for_http_status(addr, "/healthz", 503, Duration::from_secs(30)).unwrap();
    let expected = format!(
        "[-]backend-reachable failed: runtime {} unreachable in the last 5 probe(s), 1s apart; \
         latest: runtime socket {} does not exist",
        backend_path.display(),
        backend_path.display()
    );
    assert!(healthz.body.contains(&expected), "{}", healthz.body);
    let readyz = http_get_blocking(addr, "/readyz", HTTP).unwrap();
    assert!(readyz.body.contains(&expected), "{}", readyz.body);

    // One successful probe makes it live again.
    let backend = UnixListener::bind(&backend_path).unwrap();
    let healthz = wait_for_http_status(addr, "/healthz", 200, Duration::from_secs(30)).unwrap();
    assert_eq!(healthz.body, "ok");
    drop(backend);

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
