#![allow(clippy::unwrap_used)]
//! Two replicas must not write the same objects: the cluster-writing
//! background work (Reservation controller, PodGroup status) runs only on
//! the replica holding the `koord-scheduler-extender` Lease. Checked against
//! a fake API server that stores the Lease: a standby sends no writes while
//! another replica renews it and starts once it has taken the Lease over;
//! a leader that finds the Lease held by another stops at once, cancelling
//! the write in flight and undoing its planned change in the cache.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::{api_calls, body, client};
use koord_common::leader::{LeaderElector, Leadership, LeaseTiming, spawn_campaign};
use koord_common::testing::{FakeApiServer, RecordedRequest};
use koord_common::{Shutdown, ShutdownReason};
use koord_scheduler::cache::{Change, Object};
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::framework::SharedScheduler;
use serde_json::{Value, json};

const NAMESPACE: &str = "koordinator-system";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/koordinator-system/leases";
const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/koordinator-system/leases/koord-scheduler-extender";
const RESERVATION_STATUS: &str =
    "/apis/scheduling.koordinator.sh/v1alpha1/reservations/r-new/status";
const POD_GROUP: &str = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/default/podgroups/train";
const WAIT: Duration = Duration::from_secs(60);

/// Seconds instead of client-go's 15/10/2, so takeovers happen quickly.
fn fast_timing() -> LeaseTiming {
    LeaseTiming {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_secs(1),
        retry_period: Duration::from_millis(200),
    }
}

fn rfc3339(time: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .unwrap()
        .to_string()
}

fn lease(holder: &str, duration_seconds: u64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "koord-scheduler-extender", "namespace": NAMESPACE},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration_seconds,
                 "renewTime": rfc3339(SystemTime::now())}
    })
}

/// The Lease as the API server stores it: GET, create and replace, each
/// write bumping the resourceVersion.
type LeaseStore = Arc<Mutex<Option<Value>>>;

fn serve_lease(api: &FakeApiServer) -> LeaseStore {
    let stored: LeaseStore = Arc::new(Mutex::new(None));
    let store = Arc::clone(&stored);
    api.respond_with(move |request| {
        let mut lease = store.lock().unwrap();
        match (request.method.as_str(), request.path()) {
            ("GET", LEASE) => Some(match lease.as_ref() {
                Some(value) => (200, value.to_string()),
                None => (
                    404,
                    json!({"kind": "Status", "code": 404, "reason": "NotFound"}).to_string(),
                ),
            }),
            ("POST", LEASES) | ("PUT", LEASE) => {
                let mut value: Value = serde_json::from_str(&request.body).unwrap();
                let version = lease
                    .as_ref()
                    .and_then(|l| l["metadata"]["resourceVersion"].as_str()?.parse().ok())
                    .unwrap_or(0u64);
                value["metadata"]["resourceVersion"] = json!((version + 1).to_string());
                *lease = Some(value.clone());
                let status = if request.method == "POST" { 201 } else { 200 };
                Some((status, value.to_string()))
            }
            _ => None,
        }
    });
    stored
}

/// Replaces the stored Lease as another replica would, keeping its resourceVersion moving.
fn hold_as(stored: &LeaseStore, holder: &str, duration_seconds: u64) {
    let mut current = stored.lock().unwrap();
    let mut value = lease(holder, duration_seconds);
    let version = current
        .as_ref()
        .and_then(|l| l["metadata"]["resourceVersion"].as_str()?.parse().ok())
        .unwrap_or(0u64);
    value["metadata"]["resourceVersion"] = json!((version + 1).to_string());
    *current = Some(value);
}

fn holder(stored: &LeaseStore) -> Option<String> {
    stored.lock().unwrap().as_ref().and_then(|l| {
        l["spec"]["holderIdentity"]
            .as_str()
            .map(ToString::to_string)
    })
}

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn pending_reservation(name: &str) -> Value {
    json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": name, "uid": format!("{name}-uid"), "resourceVersion": "5",
                     "creationTimestamp": rfc3339(SystemTime::now() - Duration::from_secs(60))},
        "spec": {
            "template": {"spec": {"schedulerName": "koord-scheduler",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
            "owners": [{"object": {"name": "owner", "namespace": "default"}}],
            "ttl": "1h"
        },
        "status": {}
    })
}

fn member(name: &str) -> Object {
    Object::Pod(object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "labels": {"pod-group.scheduling.sigs.k8s.io": "train"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train-job", "uid": "j1"}],
        },
        "spec": {"containers": [{"name": "main"}]},
    })))
}

/// A cache with node n1, the pending reservation `r-new` (a leader places it
/// and patches its status) and the gang `train` (a leader patches its status).
fn scheduler() -> SharedScheduler {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                      "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}});
    let pod_group = json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"minMember": 2}, "status": {"phase": "Pending"},
    });
    for change in [
        Object::Node(object(node)),
        Object::Reservation(object(pending_reservation("r-new"))),
        Object::PodGroup(object(pod_group)),
        member("t-0"),
        member("t-1"),
    ] {
        scheduler.apply(Change::Upsert(change));
    }
    Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler))
}

/// One replica: a campaign as `identity` and the gated background work.
fn start_replica(
    api: &FakeApiServer,
    scheduler: &SharedScheduler,
    identity: &str,
    shutdown: &Shutdown,
) -> Leadership {
    let client = client(api);
    let elector = LeaderElector::new(
        client.clone(),
        NAMESPACE,
        koord_scheduler::DEFAULT_LEASE_NAME,
        identity.to_string(),
        fast_timing(),
    );
    let leadership = spawn_campaign(elector, std::future::ready(()), shutdown.clone());
    koord_scheduler::cluster::start_background_work(
        &client,
        scheduler,
        &SchedulerConfiguration::default(),
        Duration::from_millis(100),
        &leadership,
        shutdown,
    );
    leadership
}

/// Requests that write something other than the Lease.
fn cluster_writes(calls: &[RecordedRequest]) -> Vec<&RecordedRequest> {
    calls
        .iter()
        .filter(|r| r.method != "GET" && !r.path().starts_with(LEASES))
        .collect()
}

fn reservation_node(scheduler: &SharedScheduler, name: &str) -> Option<String> {
    scheduler
        .read()
        .unwrap()
        .cache
        .reservations
        .get(name)
        .and_then(|r| r.status.as_ref()?.node_name.clone())
}

async fn wait_for_request(api: &Arc<FakeApiServer>, method: &str, path: &str) -> RecordedRequest {
    let (server, wanted_method, wanted_path) =
        (Arc::clone(api), method.to_string(), path.to_string());
    tokio::task::spawn_blocking(move || server.wait_for_request(&wanted_method, &wanted_path, WAIT))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no {method} {path} within {WAIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_writes_nothing_while_another_replica_leads_then_takes_over() {
    let api = Arc::new(FakeApiServer::start().unwrap());
    let stored = serve_lease(&api);
    api.respond(
        "PATCH",
        RESERVATION_STATUS,
        200,
        &pending_reservation("r-new").to_string(),
    );
    api.respond("PATCH", POD_GROUP, 200, "{}");
    hold_as(&stored, "replica-a", 2);
    // replica-a renews well within its 2 s lease until told to stop.
    let replica_a_alive = Arc::new(AtomicBool::new(true));
    let renewer = {
        let (stored, alive) = (Arc::clone(&stored), Arc::clone(&replica_a_alive));
        tokio::spawn(async move {
            while alive.load(Ordering::Relaxed) {
                hold_as(&stored, "replica-a", 2);
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let shutdown = Shutdown::new();
    let scheduler = scheduler();
    let leadership = start_replica(&api, &scheduler, "replica-b", &shutdown);

    // Longer than a Reservation sync period (3 s) and many housekeeping ticks.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = api_calls(&api);
    assert!(
        calls.iter().any(|r| r.path() == LEASE),
        "the standby never looked at the lease: {calls:?}"
    );
    assert!(!leadership.is_leader());
    assert_eq!(holder(&stored).as_deref(), Some("replica-a"));
    assert!(
        cluster_writes(&calls).is_empty(),
        "a standby wrote: {:?}",
        cluster_writes(&calls)
    );
    assert_eq!(
        reservation_node(&scheduler, "r-new"),
        None,
        "a standby planned a placement"
    );

    // replica-a goes away; once its lease expires replica-b takes over and writes.
    replica_a_alive.store(false, Ordering::Relaxed);
    renewer.await.unwrap();
    let placed = wait_for_request(&api, "PATCH", RESERVATION_STATUS).await;
    assert_eq!(body(&placed)["status"]["nodeName"], "n1");
    wait_for_request(&api, "PATCH", POD_GROUP).await;
    assert!(leadership.is_leader());
    assert_eq!(holder(&stored).as_deref(), Some("replica-b"));

    // Every write came after replica-b's takeover of the lease.
    let calls = api_calls(&api);
    let takeover = calls
        .iter()
        .position(|r| {
            r.method == "PUT"
                && r.path() == LEASE
                && body(r)["spec"]["holderIdentity"] == "replica-b"
        })
        .expect("no takeover recorded");
    let first_write = calls
        .iter()
        .position(|r| r.method != "GET" && !r.path().starts_with(LEASES))
        .unwrap();
    assert!(takeover < first_write, "{calls:?}");
    shutdown.trigger(ShutdownReason::Requested("test over".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_the_lease_stops_writing_at_once() {
    let api = Arc::new(FakeApiServer::start().unwrap());
    let stored = serve_lease(&api);
    // The placement write hangs, so it is still in flight when the lease goes.
    api.respond_delayed(
        "PATCH",
        RESERVATION_STATUS,
        200,
        &pending_reservation("r-new").to_string(),
        Duration::from_secs(30),
    );
    api.respond("PATCH", POD_GROUP, 200, "{}");
    let shutdown = Shutdown::new();
    let scheduler = scheduler();
    let leadership = start_replica(&api, &scheduler, "replica-b", &shutdown);

    // Free lease: replica-b leads, places r-new in its cache and starts writing it.
    wait_for_request(&api, "PATCH", RESERVATION_STATUS).await;
    assert!(leadership.is_leader());
    assert_eq!(reservation_node(&scheduler, "r-new").as_deref(), Some("n1"));

    // replica-a now holds the lease (replica-b was cut off, say).
    let taken = Instant::now();
    hold_as(&stored, "replica-a", 60);
    while leadership.is_leader() {
        assert!(taken.elapsed() < WAIT, "never noticed the new holder");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The hanging write was cancelled and its placement left the cache,
    // long before the server would have answered.
    while reservation_node(&scheduler, "r-new").is_some() {
        assert!(
            taken.elapsed() < Duration::from_secs(20),
            "the cancelled placement stayed in the cache"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // r-new is pending again, so a leader would place it on its next pass
    // (every 3 s); this replica must not.
    let writes_at_loss = cluster_writes(&api_calls(&api)).len();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let calls = api_calls(&api);
    let placements = calls
        .iter()
        .filter(|r| r.method == "PATCH" && r.path() == RESERVATION_STATUS)
        .count();
    assert_eq!(placements, 1, "placed again without the lease: {calls:?}");
    assert_eq!(
        cluster_writes(&calls).len(),
        writes_at_loss,
        "wrote without the lease: {calls:?}"
    );
    assert!(!leadership.is_leader());
    assert_eq!(reservation_node(&scheduler, "r-new"), None);
    shutdown.trigger(ShutdownReason::Requested("test over".into()));
}
