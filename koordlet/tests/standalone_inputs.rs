//! Issue 16, finding 6: the standalone input files (`--pods-file`,
//! `--node-slo-file`) cannot wedge koordlet or wipe its state.
//!
//! - Only regular files are read: a FIFO, a device (a symlink to
//!   `/dev/zero`) or a directory is refused at once, never read. Each case
//!   runs on its own thread with a deadline, so a reader that blocks fails
//!   the test instead of hanging it.
//! - An empty, whitespace-only or `null` pods file is an error, not "no
//!   pods": the last good pods stay. An explicit empty list is still fine.
//! - The NodeSLO file is validated as the cluster validates NodeSLOs.
//! - The daemon keeps serving while its pods file is a FIFO, and readiness
//!   says what is wrong until the file is good again.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use koord_common::testing::{
    HTTP_WAIT, PROCESS_WAIT, TempDir, TestProcess, http_get_blocking, isolated_command,
    wait_for_http_status,
};
use koordlet::statesinformer::podsfile::read_pods_file;
use koordlet::statesinformer::standalone::read_node_slo_file;
use koordlet::statesinformer::{PodSource, PodsSyncer, RequiredSyncs, StatesInformer};

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");
/// How long a refusal may take; a blocked reader never answers.
const DEADLINE: Duration = Duration::from_secs(10);

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The special files a hostile or broken setup could leave at the path.
fn special_files(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let zero = dir.join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let directory = dir.join("directory");
    std::fs::create_dir(&directory).unwrap();
    vec![
        ("FIFO", fifo),
        ("/dev/zero", zero),
        ("directory", directory),
    ]
}

/// Runs `read` on a thread and waits at most [`DEADLINE`] for its answer.
fn within_deadline<T: Send + 'static>(what: &str, read: impl FnOnce() -> T + Send + 'static) -> T {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(read());
    });
    match receiver.recv_timeout(DEADLINE) {
        Ok(value) => value,
        Err(_) => panic!("reading {what} did not return within {DEADLINE:?}"),
    }
}

#[test]
fn special_pods_files_are_refused_without_blocking() {
    let dir = TempDir::new("pods-special").unwrap();
    for (what, path) in special_files(dir.path()) {
        let file = path.clone();
        let result = within_deadline(what, move || read_pods_file(&file).map(|pods| pods.len()));
        let error = result.expect_err(what).to_string();
        assert!(
            error.contains("not a regular file"),
            "{what} at {}: {error}",
            path.display()
        );
    }
}

#[test]
fn special_node_slo_files_are_refused_without_blocking() {
    let dir = TempDir::new("nodeslo-special").unwrap();
    for (what, path) in special_files(dir.path()) {
        let file = path.clone();
        let result = within_deadline(what, move || read_node_slo_file(&file).map(|_| ()));
        let error = result.expect_err(what).to_string();
        assert!(error.contains("not a regular file"), "{what}: {error}");
    }
}

#[test]
fn oversized_input_files_are_refused() {
    let dir = TempDir::new("inputs-oversized").unwrap();
    let path = dir.path().join("pods.yaml");
    // 17 MiB of spaces: valid YAML (null), larger than the 16 MiB bound.
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(17 << 20).unwrap();
    let file = path.clone();
    let error = within_deadline("a 17 MiB file", move || read_pods_file(&file).map(|_| ()))
        .unwrap_err()
        .to_string();
    assert!(error.contains("larger than"), "{error}");
}

fn one_pod() -> &'static str {
    r#"{"apiVersion":"v1","kind":"PodList","items":[
        {"metadata":{"name":"web","namespace":"default","uid":"u-web"},
         "status":{"phase":"Running","qosClass":"Burstable"}}]}"#
}

#[tokio::test]
async fn an_empty_or_null_pods_file_keeps_the_last_pods() {
    let dir = TempDir::new("pods-empty").unwrap();
    let path = dir.path().join("pods.json");
    std::fs::write(&path, one_pod()).unwrap();
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let mut syncer = PodsSyncer::new(
        PodSource::File(path.clone()),
        states.clone(),
        Duration::from_secs(10),
    );
    assert_eq!(syncer.sync_once().await.unwrap(), 1);

    for text in ["", "\n  \n", "null\n", "~", "---\n", "--- null\n...\n"] {
        std::fs::write(&path, text).unwrap();
        let result = syncer.sync_once().await;
        assert!(result.is_err(), "{text:?} was taken as a pod list");
        let pods = states.pods().unwrap();
        assert_eq!(pods.pods.len(), 1, "{text:?} dropped the pods");
    }

    // The node really has no pods: an explicit empty list says so.
    for text in [r#"{"apiVersion":"v1","kind":"PodList","items":[]}"#, "[]"] {
        std::fs::write(&path, one_pod()).unwrap();
        syncer.sync_once().await.unwrap();
        std::fs::write(&path, text).unwrap();
        assert_eq!(syncer.sync_once().await.unwrap(), 0, "{text}");
        assert!(states.pods().unwrap().pods.is_empty());
    }
}

#[test]
fn an_invalid_node_slo_file_is_refused() {
    let dir = TempDir::new("nodeslo-invalid").unwrap();
    let path = dir.path().join("nodeslo.yaml");
    for (text, field) in [
        (
            "spec:\n  resourceUsedThresholdWithBE:\n    enable: true\n    cpuSuppressThresholdPercent: 500\n",
            "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent",
        ),
        (
            "spec:\n  resourceUsedThresholdWithBE:\n    memoryEvictThresholdPercent: -20\n",
            "spec.resourceUsedThresholdWithBE.memoryEvictThresholdPercent",
        ),
        (
            "spec:\n  cpuBurstStrategy:\n    cpuBurstPercent: -1\n",
            "spec.cpuBurstStrategy.cpuBurstPercent",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let error = read_node_slo_file(&path).expect_err(text).to_string();
        assert!(error.contains(field), "{text}: {error}");
    }
    std::fs::write(
        &path,
        "spec:\n  resourceUsedThresholdWithBE:\n    enable: true\n    cpuSuppressThresholdPercent: 65\n",
    )
    .unwrap();
    read_node_slo_file(&path).unwrap();
}

/// `/readyz?verbose` until `accept` holds, at most `timeout`.
fn wait_readyz(
    addr: std::net::SocketAddr,
    timeout: Duration,
    accept: impl Fn(u16, &str) -> bool,
) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    while Instant::now() < deadline {
        match http_get_blocking(addr, "/readyz?verbose", HTTP_WAIT) {
            Ok(response) if accept(response.status, &response.body) => return Ok(response.body),
            Ok(response) => last = format!("{} {}", response.status, response.body),
            Err(err) => last = err.to_string(),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last)
}

#[test]
fn the_daemon_keeps_serving_and_reports_a_bad_pods_file() {
    let dir = TempDir::new("standalone-inputs").unwrap();
    let pods_file = dir.path().join("pods.json");
    std::fs::write(&pods_file, one_pod()).unwrap();
    let slo_file = dir.path().join("nodeslo.yaml");
    std::fs::write(&slo_file, "spec: {}\n").unwrap();
    let mut command = isolated_command(BIN);
    command
        .args([
            "--addr=127.0.0.1:0",
            "--node-name=standalone-inputs",
            "--kubelet-sync-interval=1s",
            "--enable-nri-runtime-hook=false",
        ])
        .arg(format!("--pods-file={}", pods_file.display()))
        .arg(format!("--node-slo-file={}", slo_file.display()));
    let mut koordlet = TestProcess::spawn(command).unwrap();
    let addr = koordlet
        .serving_addr("health and metrics", PROCESS_WAIT)
        .unwrap();
    if let Err(err) = wait_for_http_status(addr, "/readyz", 200, PROCESS_WAIT) {
        panic!("never ready ({err}):\n{}", koordlet.output());
    }

    // The pods file becomes a FIFO nobody writes to.
    let fifo = dir.path().join("pods.fifo");
    mkfifo(&fifo);
    std::fs::rename(&fifo, &pods_file).unwrap();
    let body = wait_readyz(addr, Duration::from_secs(15), |status, body| {
        status == 503 && body.contains("not a regular file")
    })
    .unwrap_or_else(|last| {
        panic!(
            "readiness never reported the FIFO (last: {last}):\n{}",
            koordlet.output()
        )
    });
    assert!(body.contains("pods.json"), "{body}");

    // An invalid NodeSLO is reported too, and the old one kept.
    std::fs::write(
        &slo_file,
        "spec:\n  resourceUsedThresholdWithBE:\n    cpuSuppressThresholdPercent: 500\n",
    )
    .unwrap();
    wait_readyz(addr, Duration::from_secs(15), |status, body| {
        status == 503 && body.contains("cpuSuppressThresholdPercent")
    })
    .unwrap_or_else(|last| panic!("invalid NodeSLO not reported (last: {last})"));

    // Good files again: ready again.
    std::fs::remove_file(&pods_file).unwrap();
    std::fs::write(&pods_file, one_pod()).unwrap();
    std::fs::write(&slo_file, "spec: {}\n").unwrap();
    if let Err(err) = wait_for_http_status(addr, "/readyz", 200, Duration::from_secs(30)) {
        panic!("not ready again ({err}):\n{}", koordlet.output());
    }
    koordlet.stop_cleanly("TERM", PROCESS_WAIT).unwrap();
}
