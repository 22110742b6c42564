#![allow(clippy::unwrap_used)]
//! The real binary with leader election on (the default): it takes the
//! Lease named by the flags, in the namespace the flags give, then places a
//! pending Reservation, and reports leading on `/metrics`. Bad timing flags
//! stop it at start with the reason.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use koord_common::testing::{
    FakeApiServer, HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess,
    closed_local_addr, command_with_kubeconfig, expect_failed_exit, http_get_blocking,
    write_kubeconfig,
};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_koord-scheduler");
const NODES: &str = "/api/v1/nodes";
const PODS: &str = "/api/v1/pods";
const RESERVATIONS: &str = "/apis/scheduling.koordinator.sh/v1alpha1/reservations";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/koord-test/leases";

/// Stores the Lease named `name` in namespace koord-test (GET, create, replace).
fn serve_lease(api: &FakeApiServer, name: &str) -> Arc<Mutex<Option<Value>>> {
    let stored: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    let store = Arc::clone(&stored);
    let lease_path = format!("{LEASES}/{name}");
    api.respond_with(move |request| {
        let mut lease = store.lock().unwrap();
        let path = request.path();
        match request.method.as_str() {
            "GET" if path == lease_path => Some(match lease.as_ref() {
                Some(value) => (200, value.to_string()),
                None => (
                    404,
                    json!({"kind": "Status", "code": 404, "reason": "NotFound"}).to_string(),
                ),
            }),
            "POST" if path == LEASES => {
                let mut value: Value = serde_json::from_str(&request.body).unwrap();
                value["metadata"]["resourceVersion"] = json!("1");
                *lease = Some(value.clone());
                Some((201, value.to_string()))
            }
            "PUT" if path == lease_path => {
                let mut value: Value = serde_json::from_str(&request.body).unwrap();
                value["metadata"]["resourceVersion"] = json!("2");
                *lease = Some(value.clone());
                Some((200, value.to_string()))
            }
            _ => None,
        }
    });
    stored
}

#[test]
fn the_binary_leads_through_the_named_lease_before_placing_reservations() {
    let api = FakeApiServer::start().unwrap();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "resourceVersion": "10"},
                      "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}});
    api.respond(
        "GET",
        NODES,
        200,
        &common::list("NodeList", "v1", vec![node]),
    );
    api.respond("GET", PODS, 200, &common::list("PodList", "v1", vec![]));
    api.respond(
        "GET",
        RESERVATIONS,
        200,
        &common::list(
            "ReservationList",
            "scheduling.koordinator.sh/v1alpha1",
            vec![common::pending_reservation()],
        ),
    );
    api.hold_watches_open();
    let status_path = format!("{RESERVATIONS}/r-web/status");
    api.respond(
        "PATCH",
        &status_path,
        200,
        &common::pending_reservation().to_string(),
    );
    let stored = serve_lease(&api, "lead-test");

    let dir = TempDir::new("scheduler-leader").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let port = closed_local_addr().unwrap().port();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args([
        "--address",
        "127.0.0.1",
        "--port",
        &port.to_string(),
        "--leader-elect-resource-namespace=koord-test",
        "--leader-elect-resource-name=lead-test",
    ]);
    let mut process = TestProcess::spawn(command).unwrap();
    let addr = process.serving_addr("health and metrics", WAIT).unwrap();

    let placed = api
        .wait_for_request("PATCH", &status_path, WAIT)
        .expect("the reservation was never placed");
    let placed: Value = serde_json::from_str(&placed.body).unwrap();
    assert_eq!(placed["status"]["nodeName"], "n1");
    let calls = api.recorded();
    let created = calls
        .iter()
        .position(|r| r.method == "POST" && r.path() == LEASES)
        .expect("no Lease created in the flag's namespace");
    let first_placement = calls
        .iter()
        .position(|r| r.method == "PATCH" && r.path() == status_path)
        .unwrap();
    assert!(created < first_placement, "placed before leading");
    let holder = stored.lock().unwrap().as_ref().unwrap()["spec"]["holderIdentity"].clone();
    assert!(holder.as_str().is_some_and(|h| !h.is_empty()), "{holder}");

    let deadline = Instant::now() + WAIT;
    let wanted = r#"leader_election_master_status{name="lead-test"} 1"#;
    loop {
        let metrics = http_get_blocking(addr, "/metrics", HTTP).unwrap();
        if metrics.body.contains(wanted) {
            break;
        }
        assert!(Instant::now() < deadline, "no {wanted} in {}", metrics.body);
        std::thread::sleep(Duration::from_millis(100));
    }
    process.stop_cleanly("TERM", WAIT).unwrap();
}

#[test]
fn leader_election_timing_that_could_overlap_leaders_is_refused_at_start() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("scheduler-leader-timing").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args([
        "--port",
        "0",
        "--leader-elect-lease-duration=5s",
        "--leader-elect-renew-deadline=10s",
    ]);
    expect_failed_exit(
        command,
        WAIT,
        &[
            "invalid leader-election timing",
            "must be shorter than the lease duration",
        ],
    )
    .unwrap();
}
