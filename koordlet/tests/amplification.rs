//! Issue 16, finding 4: one request must not cost megabytes of logs or of
//! audit trail. The real daemon serves the RuntimeHookService; a BE pod's
//! sandbox request carries a cgroup parent of about 3 MB (the gRPC limit is
//! 4 MiB), sent several times. What koordlet logs and what its audit trail
//! then serves stay small: path-like values are cut to 256 bytes (plus the
//! length) wherever they are logged or audited, and the hostile parent is
//! refused before any write is tried.
//!
//! The audit ring's byte bound and the 10 MB cases are unit tests in
//! `resourceexecutor/audit.rs` and `resourceexecutor/executor.rs`.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use apis::runtime::v1alpha1 as wire;
use apis::runtime::v1alpha1::runtime_hook_service_client::RuntimeHookServiceClient;
use hyper_util::rt::TokioIo;
use koord_common::testing::{
    HTTP_WAIT, PROCESS_WAIT, TempDir, TestProcess, http_get_blocking, isolated_command,
    wait_for_http_status,
};
use tonic::transport::{Endpoint, Uri};

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");
const UID: &str = "3b2a1908-0706-4504-8302-0100f0e0d0c0";
/// Requests sent; each would log and audit the parent at least once.
const ROUNDS: usize = 4;
/// What all of them together may add to the log and what the audit trail
/// may hold afterwards.
const LOG_BUDGET: usize = 64 * 1024;
const AUDIT_BUDGET: usize = 64 * 1024;

/// `/kubepods/besteffort/pod<uid>/` followed by 200-byte components up to
/// about 3 MB.
fn huge_parent() -> String {
    let mut parent = format!("/kubepods/besteffort/pod{UID}");
    let component = "a".repeat(200);
    while parent.len() < 3_000_000 {
        parent.push('/');
        parent.push_str(&component);
    }
    parent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_megabyte_cgroup_parent_costs_bounded_logs_and_audit() {
    let dir = TempDir::new("amplification").unwrap();
    let pods_file = dir.path().join("pods.json");
    std::fs::write(
        &pods_file,
        r#"{"apiVersion":"v1","kind":"PodList","items":[]}"#,
    )
    .unwrap();
    let socket: PathBuf = dir.path().join("koordlet.sock");
    let mut command = isolated_command(BIN);
    command
        .args([
            "--addr=127.0.0.1:0",
            "--node-name=amplification-node",
            "--enable-nri-runtime-hook=false",
            "--runtime-hooks-states-sync-timeout=1s",
        ])
        .arg(format!("--pods-file={}", pods_file.display()))
        .arg(format!("--runtime-hooks-addr={}", socket.display()))
        .arg(format!(
            "--runtime-hooks-config-path={}",
            dir.path().join("hookserver.d").display()
        ));
    let mut koordlet = TestProcess::spawn(command).unwrap();
    let addr = koordlet
        .serving_addr("health and metrics", PROCESS_WAIT)
        .unwrap();
    if let Err(err) = wait_for_http_status(addr, "/readyz", 200, PROCESS_WAIT) {
        panic!("never ready ({err}):\n{}", koordlet.output());
    }

    let path = socket.clone();
    let channel = Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
            }
        }))
        .await
        .unwrap();
    let mut client = RuntimeHookServiceClient::new(channel);

    let parent = huge_parent();
    let spec = r#"{"containers":{"main":{"requests":{"kubernetes.io/batch-cpu":"500"},
        "limits":{"kubernetes.io/batch-cpu":"1000","kubernetes.io/batch-memory":"256Mi"}}}}"#;
    let request = wire::PodSandboxHookRequest {
        pod_meta: Some(wire::PodSandboxMetadata {
            name: "amplifier".into(),
            uid: UID.into(),
            namespace: "tenant".into(),
            attempt: 0,
        }),
        labels: BTreeMap::from([("koordinator.sh/qosClass".to_string(), "BE".to_string())]),
        annotations: BTreeMap::from([(
            "node.koordinator.sh/extended-resource-spec".to_string(),
            spec.to_string(),
        )]),
        cgroup_parent: parent.clone(),
        ..Default::default()
    };
    let logged_before = koordlet.output().len();
    for _ in 0..ROUNDS {
        // The call may succeed (Ignore) or be refused; either way it returns.
        let _ = client
            .pre_run_pod_sandbox_hook(request.clone())
            .await
            .map(|_| ());
    }
    // Let the log pipe drain.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let output = koordlet.output();
    let logged = output.len().saturating_sub(logged_before);
    assert!(
        logged < LOG_BUDGET,
        "{ROUNDS} requests with a {} byte cgroup parent added {logged} bytes of log; the longest line has {} bytes",
        parent.len(),
        output.lines().map(str::len).max().unwrap_or(0)
    );

    let audit = http_get_blocking(addr, "/resource-executor/writes?limit=1000", HTTP_WAIT).unwrap();
    assert_eq!(audit.status, 200);
    assert!(
        audit.body.len() < AUDIT_BUDGET,
        "the audit trail serves {} bytes after {ROUNDS} hostile requests",
        audit.body.len()
    );
    koordlet.stop_cleanly("TERM", PROCESS_WAIT).unwrap();
}
