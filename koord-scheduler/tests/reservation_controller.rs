#![allow(clippy::unwrap_used)]
//! The Reservation controller against a fake API server: the status patch
//! (URL and body) for a placed reservation, an expired one and an
//! allocate-once one whose owner bound; the DELETE of an ended one past the
//! GC duration; a failed write undone in the cache and retried.
//! A placed reservation's reserved GPU is written to its annotations before
//! its status.

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{api_calls, body, client};
use koord_common::testing::{FakeApiServer, RecordedRequest};
use koord_scheduler::cache::{Change, Object};
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::framework::SharedScheduler;
use koord_scheduler::reservation_controller::{ControllerSettings, ReservationController};
use serde_json::{Value, json};

const BASE: &str = "/apis/scheduling.koordinator.sh/v1alpha1/reservations";
const NOW: &str = "2026-01-01T12:00:00Z";

fn now() -> SystemTime {
    SystemTime::from(NOW.parse::<k8s_openapi::jiff::Timestamp>().unwrap())
}

fn reservation(name: &str, created: &str, scheduler: &str, status: Value) -> Value {
    json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": name, "uid": format!("{name}-uid"), "creationTimestamp": created},
        "spec": {
            "template": {"spec": {"schedulerName": scheduler,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
            "owners": [{"object": {"name": "owner", "namespace": "default"}}],
            "ttl": "1h"
        },
        "status": status
    })
}

fn scheduler(objects: Vec<Value>) -> SharedScheduler {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                      "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}});
    scheduler.apply(Change::Upsert(Object::Node(
        serde_json::from_value(node).unwrap(),
    )));
    for object in objects {
        scheduler.apply(Change::Upsert(Object::Reservation(
            serde_json::from_value(object).unwrap(),
        )));
    }
    Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler))
}

fn controller(api: &FakeApiServer, scheduler: &SharedScheduler) -> ReservationController {
    ReservationController::new(
        client(api),
        Arc::clone(scheduler),
        ControllerSettings::default(),
    )
}

fn call<'a>(calls: &'a [RecordedRequest], method: &str, path: &str) -> &'a RecordedRequest {
    calls
        .iter()
        .find(|r| r.method == method && r.path() == path)
        .unwrap_or_else(|| panic!("no {method} {path} in {calls:?}"))
}

/// (method, path) of every call, in order.
fn method_paths(calls: &[RecordedRequest]) -> Vec<(&str, &str)> {
    calls
        .iter()
        .map(|r| (r.method.as_str(), r.path()))
        .collect()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap()
}

#[tokio::test]
async fn places_expires_and_collects_reservations() {
    let api = FakeApiServer::start().unwrap();
    let placed = reservation(
        "r-new",
        "2026-01-01T11:30:00Z",
        "koord-scheduler",
        json!({}),
    );
    let old = reservation(
        "r-old",
        "2026-01-01T10:00:00Z",
        "koord-scheduler",
        json!({"phase": "Available", "nodeName": "n1", "allocatable": {"cpu": "2"}}),
    );
    // Expired 25h ago: past the 24h GC duration.
    let done = reservation(
        "r-done",
        "2025-12-30T00:00:00Z",
        "koord-scheduler",
        json!({"phase": "Failed", "nodeName": "n1", "conditions": [
            {"type": "Ready", "status": "False", "reason": "Expired",
             "lastProbeTime": "2025-12-31T11:00:00Z", "lastTransitionTime": "2025-12-31T11:00:00Z"}]}),
    );
    let foreign = reservation(
        "r-foreign",
        "2026-01-01T11:30:00Z",
        "other-scheduler",
        json!({}),
    );
    for (name, object) in [("r-new", &placed), ("r-old", &old)] {
        api.respond(
            "PATCH",
            &format!("{BASE}/{name}/status"),
            200,
            &object.to_string(),
        );
    }
    api.respond("DELETE", &format!("{BASE}/r-done"), 200, &done.to_string());
    let scheduler = scheduler(vec![placed, old, done, foreign]);

    let failures = controller(&api, &scheduler).sync(now(), true).await;
    assert!(failures.is_empty(), "{failures:?}");
    let calls = api_calls(&api);

    let patch = call(&calls, "PATCH", &format!("{BASE}/r-new/status"));
    assert_eq!(
        patch.header("content-type"),
        Some("application/merge-patch+json")
    );
    let sent = body(patch);
    assert_eq!(sent["status"]["phase"], "Available");
    assert_eq!(sent["status"]["nodeName"], "n1");
    assert_eq!(sent["status"]["allocatable"], json!({"cpu": "2"}));
    assert_eq!(sent["status"]["currentOwners"], Value::Null);
    for (type_, reason) in [("Scheduled", "Scheduled"), ("Ready", "Available")] {
        let c = condition(&sent["status"], type_);
        assert_eq!(c["status"], "True");
        assert_eq!(c["reason"], reason);
        assert_eq!(c["lastTransitionTime"], NOW);
    }

    let expired = body(call(&calls, "PATCH", &format!("{BASE}/r-old/status")));
    assert_eq!(expired["status"]["phase"], "Failed");
    let ready = condition(&expired["status"], "Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("Expired"))
    );

    call(&calls, "DELETE", &format!("{BASE}/r-done"));
    assert!(
        calls.iter().all(|r| !r.path().contains("r-foreign")),
        "another scheduler's reservation was touched: {calls:?}"
    );
    assert_eq!(calls.len(), 3, "{calls:?}");

    // The cache already holds the outcome, so filters see it at once.
    {
        let guard = scheduler.read().unwrap();
        let cached = &guard.cache.reservations["r-new"];
        assert_eq!(cached.node_name(), Some("n1"));
        assert!(cached.is_available());
        assert!(guard.cache.reservations["r-old"].is_terminated());
    }

    // A late watch event shows r-new Pending again: it is not placed twice.
    let stale = reservation(
        "r-new",
        "2026-01-01T11:30:00Z",
        "koord-scheduler",
        json!({}),
    );
    scheduler
        .write()
        .unwrap()
        .apply(Change::Upsert(Object::Reservation(
            serde_json::from_value(stale).unwrap(),
        )));
    let controller = controller(&api, &scheduler);
    let later = now() + Duration::from_secs(3);
    let first = controller.sync(later, false).await;
    assert!(first.is_empty(), "{first:?}");
    let new_patches = |api: &FakeApiServer| {
        api.recorded()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path() == format!("{BASE}/r-new/status"))
            .count()
    };
    // This controller is new, so it places it (once); a second pass does not.
    assert_eq!(new_patches(&api), 2);
    scheduler
        .write()
        .unwrap()
        .apply(Change::Upsert(Object::Reservation(
            serde_json::from_value(reservation(
                "r-new",
                "2026-01-01T11:30:00Z",
                "koord-scheduler",
                json!({}),
            ))
            .unwrap(),
        )));
    assert!(
        controller
            .sync(later + Duration::from_secs(3), false)
            .await
            .is_empty()
    );
    assert_eq!(new_patches(&api), 2);
}

#[tokio::test]
async fn an_owner_binding_completes_an_allocate_once_reservation() {
    let api = FakeApiServer::start().unwrap();
    let available = reservation(
        "r-web",
        "2026-01-01T11:30:00Z",
        "koord-scheduler",
        json!({"phase": "Available", "nodeName": "n1", "allocatable": {"cpu": "2"},
               "conditions": [{"type": "Ready", "status": "True", "reason": "Available",
                               "lastProbeTime": "2026-01-01T11:30:00Z", "lastTransitionTime": "2026-01-01T11:30:00Z"}]}),
    );
    api.respond(
        "PATCH",
        &format!("{BASE}/r-web/status"),
        200,
        &available.to_string(),
    );
    let scheduler = scheduler(vec![available]);
    let controller = controller(&api, &scheduler);
    // Nothing to write before the owner binds.
    assert!(controller.sync(now(), false).await.is_empty());
    assert!(api_calls(&api).is_empty(), "{:?}", api_calls(&api));

    // The extender reserves the owner on n1 (the Reservation plugin gives it
    // r-web): assumed, not yet bound, so nothing is written.
    let pending_owner = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "owner", "namespace": "default", "uid": "uid-owner"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]}
    });
    let mut bound: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pending_owner).unwrap();
    let reserved = {
        let mut guard = scheduler.write().unwrap();
        guard.apply(Change::Upsert(Object::Pod(bound.clone())));
        guard.reserve("default/owner", "n1", now()).unwrap()
    };
    assert_eq!(
        reserved.annotations["scheduling.koordinator.sh/reservation-allocated"],
        r#"{"name":"r-web","uid":"r-web-uid"}"#
    );
    assert!(controller.sync(now(), false).await.is_empty());
    assert!(api_calls(&api).is_empty(), "{:?}", api_calls(&api));

    // The watch confirms the binding.
    bound.metadata.annotations = Some(reserved.annotations.clone());
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    scheduler
        .write()
        .unwrap()
        .apply(Change::Upsert(Object::Pod(bound)));
    assert!(controller.sync(now(), false).await.is_empty());
    let calls = api_calls(&api);
    let sent = body(call(&calls, "PATCH", &format!("{BASE}/r-web/status")));
    assert_eq!(sent["status"]["phase"], "Succeeded");
    assert_eq!(
        sent["status"]["currentOwners"],
        json!([{"namespace": "default", "name": "owner", "uid": "uid-owner"}])
    );
    // Only the resources the reservation holds.
    assert_eq!(sent["status"]["allocated"], json!({"cpu": "1500m"}));
    let ready = condition(&sent["status"], "Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("Succeeded"))
    );
    assert_eq!(ready["lastProbeTime"], NOW);
}

#[tokio::test]
async fn a_failed_placement_write_is_undone_and_retried() {
    let api = FakeApiServer::start().unwrap();
    let pending = reservation(
        "r-new",
        "2026-01-01T11:30:00Z",
        "koord-scheduler",
        json!({}),
    );
    let scheduler = scheduler(vec![pending.clone()]);
    api.respond(
        "PATCH",
        &format!("{BASE}/r-new/status"),
        409,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409}).to_string(),
    );
    let controller = controller(&api, &scheduler);
    let failures = controller.sync(now(), false).await;
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].name, "r-new");
    {
        let guard = scheduler.read().unwrap();
        let cached = &guard.cache.reservations["r-new"];
        assert_eq!(cached.node_name(), None, "the placement must be undone");
        // The reserve pod is gone too: nothing holds n1's cpus.
        assert_eq!(guard.cache.pods().count(), 0);
    }
    api.respond(
        "PATCH",
        &format!("{BASE}/r-new/status"),
        200,
        &pending.to_string(),
    );
    assert!(controller.sync(now(), false).await.is_empty());
    let patches = api_calls(&api)
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(patches, 2);
    assert!(scheduler.read().unwrap().cache.reservations["r-new"].is_available());
}

#[tokio::test]
async fn an_unschedulable_reservation_gets_a_condition_once() {
    let api = FakeApiServer::start().unwrap();
    let mut huge = reservation(
        "r-huge",
        "2026-01-01T11:30:00Z",
        "koord-scheduler",
        json!({}),
    );
    huge["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("64");
    api.respond(
        "PATCH",
        &format!("{BASE}/r-huge/status"),
        200,
        &huge.to_string(),
    );
    let scheduler = scheduler(vec![huge]);
    let controller = controller(&api, &scheduler);
    assert!(controller.sync(now(), false).await.is_empty());
    let calls_after_first = api_calls(&api);
    let sent = body(call(
        &calls_after_first,
        "PATCH",
        &format!("{BASE}/r-huge/status"),
    ));
    assert_eq!(sent["status"]["phase"], Value::Null);
    let scheduled = condition(&sent["status"], "Scheduled");
    assert_eq!(scheduled["status"], "False");
    assert_eq!(scheduled["reason"], "Unschedulable");
    assert_eq!(
        scheduled["message"],
        "0/1 nodes are available: 1 Insufficient cpu."
    );
    // Same outcome on the next pass: nothing new to write.
    assert!(controller.sync(now(), false).await.is_empty());
    assert_eq!(api_calls(&api).len(), calls_after_first.len());
}

#[tokio::test]
async fn a_placed_reservation_gets_its_reserved_gpu_annotation_before_its_status() {
    let api = FakeApiServer::start().unwrap();
    let mut pending = reservation(
        "r-gpu",
        "2026-01-01T11:30:00Z",
        "koord-scheduler",
        json!({}),
    );
    pending["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "2", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}});
    let scheduler = scheduler(vec![pending.clone()]);
    let device = json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
        "metadata": {"name": "n1"},
        "spec": {"devices": [{"type": "gpu", "minor": 0, "health": true, "resources": {
            "koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi",
            "koordinator.sh/gpu-memory-ratio": "100"}}]}
    });
    scheduler
        .write()
        .unwrap()
        .apply(Change::Upsert(Object::Device(
            serde_json::from_value(device).unwrap(),
        )));
    api.respond("PATCH", &format!("{BASE}/r-gpu"), 200, &pending.to_string());
    api.respond(
        "PATCH",
        &format!("{BASE}/r-gpu/status"),
        200,
        &pending.to_string(),
    );

    let failures = controller(&api, &scheduler).sync(now(), false).await;
    assert!(failures.is_empty(), "{failures:?}");
    let calls = api_calls(&api);
    let paths = method_paths(&calls);
    let metadata_path = format!("{BASE}/r-gpu");
    let status_path = format!("{BASE}/r-gpu/status");
    assert_eq!(
        paths,
        vec![
            ("PATCH", metadata_path.as_str()),
            ("PATCH", status_path.as_str())
        ]
    );
    let metadata = call(&calls, "PATCH", &metadata_path);
    assert_eq!(
        metadata.header("content-type"),
        Some("application/merge-patch+json")
    );
    let sent = body(metadata);
    let allocated: Value = serde_json::from_str(
        sent["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocated"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(allocated["gpu"][0]["minor"], 0);
    assert_eq!(
        allocated["gpu"][0]["resources"]["koordinator.sh/gpu-core"],
        "100"
    );
    assert_eq!(sent.as_object().unwrap().len(), 1, "{sent}");
    // The cache keeps the annotation too, so the GPU stays held.
    let guard = scheduler.read().unwrap();
    let cached = &guard.cache.reservations["r-gpu"];
    assert!(cached.is_available());
    assert!(
        cached
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key("scheduling.koordinator.sh/device-allocated")
    );
}

/// A bound pod `web-1` (labelled app=web) using 6 of n1's 8 CPUs, and a pending
/// pre-allocating reservation of 6 CPUs owned by app=web pods: it fits n1 only in
/// web-1's place.
fn pre_allocation_case() -> (SharedScheduler, Value) {
    pre_allocation_case_of(&[("web-1", "6")], json!({}))
}

/// Bound app=web pods on n1 (`(name, cpu)`) and a pending pre-allocating
/// reservation of 6 CPUs they own, with `policy` as its `preAllocationPolicy`.
fn pre_allocation_case_of(pods: &[(&str, &str)], policy: Value) -> (SharedScheduler, Value) {
    let mut pending = reservation("r-pa", "2026-01-01T11:30:00Z", "koord-scheduler", json!({}));
    pending["spec"]["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "6"}});
    pending["spec"]["owners"] = json!([{"labelSelector": {"matchLabels": {"app": "web"}}}]);
    pending["spec"]["preAllocation"] = json!(true);
    pending["spec"]["preAllocationPolicy"] = policy;
    pending["spec"]["allocatePolicy"] = json!("Restricted");
    pending["spec"]["allocateOnce"] = json!(false);
    let scheduler = scheduler(vec![pending.clone()]);
    for (name, cpu) in pods {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"),
                         "resourceVersion": "7", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c",
                     "resources": {"requests": {"cpu": cpu}}}]},
            "status": {"phase": "Running"}});
        scheduler.write().unwrap().apply(Change::Upsert(Object::Pod(
            serde_json::from_value(pod).unwrap(),
        )));
    }
    (scheduler, pending)
}

fn cached_pod_allocation(scheduler: &SharedScheduler) -> Option<String> {
    cached_allocation_of(scheduler, "web-1")
}

fn cached_allocation_of(scheduler: &SharedScheduler, name: &str) -> Option<String> {
    let guard = scheduler.read().unwrap();
    guard.cache.pod(&format!("default/{name}")).and_then(|p| {
        p.pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("scheduling.koordinator.sh/reservation-allocated"))
            .cloned()
    })
}

/// web-1 and web-2 (3 CPUs each, owners) and `db` (1 CPU) fill n1's 8 CPUs
/// but one: the 6-CPU reservation (`enableMultiple`) needs both owners' places.
fn two_owners_beside_a_db() -> (SharedScheduler, Value) {
    let (scheduler, pending) = pre_allocation_case_of(
        &[("web-1", "3"), ("web-2", "3")],
        json!({"enableMultiple": true}),
    );
    let other = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db", "namespace": "default", "uid": "db-uid"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c",
                 "resources": {"requests": {"cpu": "1"}}}]}});
    scheduler.write().unwrap().apply(Change::Upsert(Object::Pod(
        serde_json::from_value(other).unwrap(),
    )));
    (scheduler, pending)
}

#[tokio::test]
async fn a_reservation_pre_allocating_several_pods_patches_each_then_its_status() {
    let api = FakeApiServer::start().unwrap();
    let (scheduler, pending) = two_owners_beside_a_db();
    let (web_1, web_2) = (
        "/api/v1/namespaces/default/pods/web-1",
        "/api/v1/namespaces/default/pods/web-2",
    );
    let status_path = format!("{BASE}/r-pa/status");
    api.respond("PATCH", web_1, 200, "{}");
    api.respond("PATCH", web_2, 200, "{}");
    api.respond("PATCH", &status_path, 200, &pending.to_string());

    let failures = controller(&api, &scheduler).sync(now(), false).await;
    assert!(failures.is_empty(), "{failures:?}");
    let calls = api_calls(&api);
    assert_eq!(
        method_paths(&calls),
        vec![
            ("PATCH", web_1),
            ("PATCH", web_2),
            ("PATCH", status_path.as_str())
        ]
    );
    assert_eq!(
        body(call(&calls, "PATCH", web_2))["metadata"]["uid"],
        "web-2-uid"
    );
    assert!(
        cached_allocation_of(&scheduler, "web-2")
            .unwrap()
            .contains("r-pa")
    );
    assert_eq!(cached_allocation_of(&scheduler, "db"), None);

    // The second pod's patch refused: no status, both pods back as they were.
    let api = FakeApiServer::start().unwrap();
    let (scheduler, _) = two_owners_beside_a_db();
    api.respond("PATCH", web_1, 200, "{}");
    api.respond(
        "PATCH",
        web_2,
        404,
        &json!({"kind": "Status", "apiVersion": "v1",
        "status": "Failure", "reason": "NotFound", "code": 404})
        .to_string(),
    );
    let failures = controller(&api, &scheduler).sync(now(), false).await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    let calls = api_calls(&api);
    assert_eq!(
        method_paths(&calls),
        vec![("PATCH", web_1), ("PATCH", web_2)]
    );
    assert_eq!(cached_allocation_of(&scheduler, "web-1"), None);
    assert_eq!(cached_allocation_of(&scheduler, "web-2"), None);
    assert!(!scheduler.read().unwrap().cache.reservations["r-pa"].is_available());
}

#[tokio::test]
async fn a_pre_allocating_reservation_patches_its_pod_before_its_status() {
    let api = FakeApiServer::start().unwrap();
    let (scheduler, pending) = pre_allocation_case();
    let pod_path = "/api/v1/namespaces/default/pods/web-1";
    api.respond("PATCH", pod_path, 200, "{}");
    api.respond(
        "PATCH",
        &format!("{BASE}/r-pa/status"),
        200,
        &pending.to_string(),
    );

    let failures = controller(&api, &scheduler).sync(now(), false).await;
    assert!(failures.is_empty(), "{failures:?}");
    let calls = api_calls(&api);
    let paths = method_paths(&calls);
    let status_path = format!("{BASE}/r-pa/status");
    assert_eq!(
        paths,
        vec![("PATCH", pod_path), ("PATCH", status_path.as_str())]
    );
    let sent = body(call(&calls, "PATCH", pod_path));
    // The uid makes the API server refuse the patch for a pod recreated under this name.
    assert_eq!(sent["metadata"]["uid"], "web-1-uid");
    let allocated: Value = serde_json::from_str(
        sent["metadata"]["annotations"]["scheduling.koordinator.sh/reservation-allocated"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(allocated, json!({"name": "r-pa", "uid": "r-pa-uid"}));
    let status = body(call(&calls, "PATCH", &status_path));
    assert_eq!(status["status"]["phase"], "Available");
    assert_eq!(status["status"]["nodeName"], "n1");
    assert!(cached_pod_allocation(&scheduler).unwrap().contains("r-pa"));
}

#[tokio::test]
async fn a_refused_pod_patch_leaves_the_reservation_pending_and_the_pod_as_it_was() {
    let api = FakeApiServer::start().unwrap();
    let (scheduler, _) = pre_allocation_case();
    let pod_path = "/api/v1/namespaces/default/pods/web-1";
    let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "reason": "Conflict", "code": 409, "message": "uid mismatch"});
    api.respond("PATCH", pod_path, 409, &conflict.to_string());

    let failures = controller(&api, &scheduler).sync(now(), false).await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    let calls = api_calls(&api);
    assert!(
        calls.iter().all(|r| !r.path().ends_with("/status")),
        "no status write after a refused pod patch: {calls:?}"
    );
    assert_eq!(cached_pod_allocation(&scheduler), None);
    let guard = scheduler.read().unwrap();
    assert!(!guard.cache.reservations["r-pa"].is_available());
}
