#![allow(clippy::unwrap_used)]
//! The reservation controller as wired into `koord-scheduler` in cluster
//! mode: the binary lists a pending Reservation from a fake API server,
//! places it on the only node that fits and patches it Available; an owner
//! pod bound from a watch event then turns it Succeeded.

mod common;

use koord_common::testing::{
    FakeApiServer, PROCESS_WAIT as WAIT, TempDir, TestProcess, command_with_kubeconfig,
    write_kubeconfig,
};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_koord-scheduler");
const NODES: &str = "/api/v1/nodes";
const PODS: &str = "/api/v1/pods";
const RESERVATIONS: &str = "/apis/scheduling.koordinator.sh/v1alpha1/reservations";

fn node(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "resourceVersion": "10"},
           "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}})
}

fn patches(api: &FakeApiServer) -> Vec<Value> {
    api.recorded()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path() == format!("{RESERVATIONS}/r-web/status"))
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect()
}

/// The first status patch with `phase` (the fake's static list may make the
/// controller see the pending version again after a re-list).
fn wait_for_patch(api: &FakeApiServer, phase: &str) -> Value {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let seen = patches(api);
        if let Some(found) = seen.iter().find(|p| p["status"]["phase"] == phase) {
            return found.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {phase} status patch among {seen:?}; requests: {:?}",
            api.requests()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn cluster_mode_places_a_pending_reservation_and_completes_it_when_its_owner_binds() {
    let api = FakeApiServer::start().unwrap();
    // Only n2 has room for the 4 reserved cpus.
    api.respond(
        "GET",
        NODES,
        200,
        &common::list("NodeList", "v1", vec![node("n1", "2"), node("n2", "8")]),
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
    for path in [NODES, PODS, RESERVATIONS] {
        api.respond_watch(path);
    }
    api.respond(
        "PATCH",
        &format!("{RESERVATIONS}/r-web/status"),
        200,
        &common::pending_reservation().to_string(),
    );
    let dir = TempDir::new("scheduler-reservations").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args(["--port", "0", "--leader-elect=false"]);
    let mut process = TestProcess::spawn(command).unwrap();

    let placed = wait_for_patch(&api, "Available");
    assert_eq!(placed["status"]["nodeName"], "n2");
    assert_eq!(placed["status"]["allocatable"], json!({"cpu": "4"}));

    // The owner binds (as kube-scheduler would after /bind) and the watch says so.
    let owner = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "owner", "namespace": "default", "uid": "uid-owner", "resourceVersion": "200",
                     "annotations": {"scheduling.koordinator.sh/reservation-allocated": r#"{"name":"r-web","uid":"r-web-uid"}"#}},
        "spec": {"nodeName": "n2", "containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]},
        "status": {"phase": "Running"}
    });
    api.push_watch_event(PODS, "ADDED", &owner.to_string());
    let used = wait_for_patch(&api, "Succeeded");
    assert_eq!(
        used["status"]["currentOwners"],
        json!([{"namespace": "default", "name": "owner", "uid": "uid-owner"}])
    );
    assert_eq!(used["status"]["allocated"], json!({"cpu": "3"}));

    process.stop_cleanly("TERM", WAIT).unwrap();
}
