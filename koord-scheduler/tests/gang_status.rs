#![allow(clippy::unwrap_used)]
//! Cluster mode: the housekeeping loop merge-patches PodGroup status onto
//! the PodGroup (no status subresource upstream) through the API server.

use std::sync::Arc;
use std::time::Duration;

use koord_common::Shutdown;
use koord_common::testing::{FakeApiServer, RecordedRequest};
use koord_scheduler::cache::{Change, Object};
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::framework::Scheduler;
use serde_json::{Value, json};

const PATH: &str = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/default/podgroups/train";

fn object<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap()
}

fn pod_group(status: Value) -> Value {
    json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"minMember": 2},
        "status": status,
    })
}

fn member(name: &str) -> Object {
    Object::Pod(object(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "labels": {"pod-group.scheduling.sigs.k8s.io": "train"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train-job", "uid": "j1"}],
        },
        "spec": {"containers": [{"name": "main"}]},
    })))
}

/// Runs housekeeping every 50ms over `scheduler` and waits (up to 60s) for
/// it to PATCH `path`; hands back that request, the server and the
/// housekeeping's shutdown.
async fn housekeep_until_patch(
    api: FakeApiServer,
    scheduler: Scheduler,
    path: &'static str,
) -> (Option<RecordedRequest>, FakeApiServer, Shutdown) {
    let client = kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap();
    let scheduler = Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler));
    let shutdown = Shutdown::new();
    koord_scheduler::cluster::start_housekeeping(
        &client,
        &scheduler,
        Duration::from_millis(50),
        &shutdown,
    );
    let (found, api) = tokio::task::spawn_blocking(move || {
        let found = api.wait_for_request("PATCH", path, Duration::from_secs(60));
        (found, api)
    })
    .await
    .unwrap();
    (found, api, shutdown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn housekeeping_merge_patches_pod_group_status() {
    let api = FakeApiServer::start().unwrap();
    api.respond("PATCH", PATH, 200, &pod_group(json!({})).to_string());

    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(60),
    )
    .unwrap();
    for object in [
        Object::PodGroup(object(pod_group(json!({"phase": "Pending"})))),
        member("t-0"),
        member("t-1"),
    ] {
        scheduler.apply(Change::Upsert(object));
    }
    let (found, api, shutdown) = housekeep_until_patch(api, scheduler, PATH).await;
    let request = found.expect("no PodGroup patch within 60s");
    assert_eq!(
        request.header("content-type"),
        Some("application/merge-patch+json")
    );
    let body: Value = serde_json::from_str(&request.body).unwrap();
    let status = &body["status"];
    assert_eq!(status["phase"], "Scheduling", "{body}");
    assert_eq!(status["occupiedBy"], "default/train-job");
    assert_eq!(status["scheduled"], 0);
    assert_eq!(status["running"], 0);
    assert!(status["scheduleStartTime"].is_string(), "{body}");
    assert_eq!(
        body.as_object().unwrap().len(),
        1,
        "only status is patched: {body}"
    );

    // The same status is not written again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let patches = api
        .recorded()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(patches, 1);
    shutdown.trigger(koord_common::ShutdownReason::Requested("test done".into()));
}

fn timed_member(name: &str) -> Object {
    Object::Pod(object(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "annotations": {
                "gang.scheduling.koordinator.sh/name": "job",
                "gang.scheduling.koordinator.sh/min-available": "2",
                "gang.scheduling.koordinator.sh/waiting-time": "1m",
            },
        },
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "2"}}}]},
    })))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn housekeeping_marks_members_of_a_timed_out_gang() {
    let api = FakeApiServer::start().unwrap();
    let pod_path = "/api/v1/namespaces/default/pods/a";
    api.respond(
        "PATCH",
        pod_path,
        200,
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "default"}})
            .to_string(),
    );
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(60),
    )
    .unwrap();
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"},
                      "status": {"allocatable": {"cpu": "2"}}});
    for object in [
        Object::Node(self::object(node)),
        timed_member("a"),
        timed_member("b"),
    ] {
        scheduler.apply(Change::Upsert(object));
    }
    // One of the two fits: the gang started waiting an hour ago.
    let pod = scheduler.cache.pod("default/a").unwrap().clone();
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    assert!(scheduler.pre_filter(&pod, an_hour_ago).is_err());

    let (found, _api, shutdown) = housekeep_until_patch(api, scheduler, pod_path).await;
    let request = found.expect("no pod patch within 60s");
    let body: Value = serde_json::from_str(&request.body).unwrap();
    assert_eq!(
        body,
        json!({"metadata": {"annotations": {"gang.scheduling.koordinator.sh/timeout": "true"}}})
    );
    shutdown.trigger(koord_common::ShutdownReason::Requested("test done".into()));
}
