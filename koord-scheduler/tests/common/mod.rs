//! Helpers shared by the integration tests: running a committed scenario
//! through `koord-scheduler simulate`, serving the extender on a loopback
//! port and posting to it, and talking to a `FakeApiServer`.
//! Each test file uses only some of them, hence the `dead_code` allows.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use koord_common::testing::{FakeApiServer, RecordedRequest};
use koord_scheduler::extender::{ExtenderState, router};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs tests/data/scenarios/<scenario>.yaml through `simulate --output
/// json` with `extra` arguments; returns the whole JSON report.
#[allow(dead_code)]
pub fn simulate_report(scenario: &str, extra: &[&str]) -> Value {
    let path = format!(
        "{}/tests/data/scenarios/{scenario}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let output = Command::new(env!("CARGO_BIN_EXE_koord-scheduler"))
        .args(["simulate", "--snapshot", &path, "--output", "json"])
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Like [`simulate_report`], keyed pod → placement.
#[allow(dead_code)]
pub fn simulate(scenario: &str, extra: &[&str]) -> BTreeMap<String, Value> {
    simulate_report(scenario, extra)["placements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["pod"].as_str().unwrap().to_string(), p.clone()))
        .collect()
}

/// Serves the extender routes on 127.0.0.1:0 in the background.
#[allow(dead_code)]
pub async fn serve_extender(state: ExtenderState) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, router(state)).await.unwrap();
    });
    addr
}

/// One JSON POST over a fresh connection; returns status code and body.
#[allow(dead_code)]
pub async fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    // Generous: the machine may be busy compiling.
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// [`post`] that must answer 200; returns the parsed JSON body.
#[allow(dead_code)]
pub async fn post_ok(addr: SocketAddr, path: &str, body: &str) -> Value {
    let (status, text) = post(addr, path, body).await;
    assert_eq!(status, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

/// A kube client pointed at the fake API server.
#[allow(dead_code)]
pub fn client(api: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap()
}

/// Requests other than the client's own `/version` probes, in order.
#[allow(dead_code)]
pub fn api_calls(api: &FakeApiServer) -> Vec<RecordedRequest> {
    api.recorded()
        .into_iter()
        .filter(|request| request.path() != "/version")
        .collect()
}

/// A recorded request's body as JSON.
#[allow(dead_code)]
pub fn body(request: &RecordedRequest) -> Value {
    serde_json::from_str(&request.body).unwrap()
}

/// A list response body of `items` at resourceVersion 100.
#[allow(dead_code)]
pub fn list(kind: &str, api_version: &str, items: Vec<Value>) -> String {
    serde_json::json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "100"}, "items": items})
        .to_string()
}

/// A pending Reservation `r-web` for `default/owner` (4 cpus, created now,
/// far from its 1h ttl).
#[allow(dead_code)]
pub fn pending_reservation() -> Value {
    serde_json::json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": "r-web", "uid": "r-web-uid", "resourceVersion": "30",
                     "creationTimestamp": k8s_openapi::jiff::Timestamp::now().to_string()},
        "spec": {"template": {"spec": {"schedulerName": "koord-scheduler",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}]}},
                 "owners": [{"object": {"name": "owner", "namespace": "default"}}],
                 "ttl": "1h"}
    })
}
