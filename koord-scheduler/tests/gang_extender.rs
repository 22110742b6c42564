#![allow(clippy::unwrap_used)]
//! A gang through the extender's HTTP API as kube-scheduler drives it:
//! members are held in /filter while the whole gang cannot fit; once it
//! fits, each member's /bind assumes it (Permit) and the API bindings of
//! all members happen when the last needed member is assumed. A gang whose
//! wait runs out releases what its members held.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use koord_scheduler::cache::{Change, Object};
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::extender::{ExtenderMetrics, ExtenderState};
use koord_scheduler::framework::{RecordingBinder, SharedScheduler};
use serde_json::{Value, json};

fn node(name: &str) -> Object {
    Object::Node(
        serde_json::from_value(
            json!({"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}),
        )
        .unwrap(),
    )
}

fn member_json(name: &str) -> Value {
    gang_member_json(name, "Strict")
}

fn gang_member_json(name: &str, mode: &str) -> Value {
    json!({
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "annotations": {
                "gang.scheduling.koordinator.sh/name": "job",
                "gang.scheduling.koordinator.sh/min-available": "3",
                "gang.scheduling.koordinator.sh/mode": mode,
                "gang.scheduling.koordinator.sh/waiting-time": "1s",
            },
        },
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "3"}}}]},
        "status": {"phase": "Pending"},
    })
}

async fn serve(binder: Arc<RecordingBinder>) -> (SocketAddr, SharedScheduler) {
    serve_with(binder, &["n0", "n1"], "Strict", Duration::ZERO).await
}

/// The extender over `nodes` and gang members a, b, c (min 3, `mode`,
/// waiting time 1s), with `bind_wait` as `--gang-bind-wait`.
async fn serve_with(
    binder: Arc<RecordingBinder>,
    nodes: &[&str],
    mode: &str,
    bind_wait: Duration,
) -> (SocketAddr, SharedScheduler) {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    scheduler.permit_bind_wait = bind_wait;
    for name in nodes {
        scheduler.apply(Change::Upsert(node(name)));
    }
    for name in ["a", "b", "c"] {
        let pod = serde_json::from_value(gang_member_json(name, mode)).unwrap();
        scheduler.apply(Change::Upsert(Object::Pod(pod)));
    }
    let shared = Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler));
    let state = ExtenderState {
        scheduler: Arc::clone(&shared),
        binder,
        metrics: ExtenderMetrics::new("koord-scheduler"),
    };
    let addr = common::serve_extender(state).await;
    (addr, shared)
}

async fn post(addr: SocketAddr, path: &str, body: &Value) -> Value {
    common::post_ok(addr, path, &body.to_string()).await
}

async fn filter(addr: SocketAddr, name: &str, nodes: &[&str]) -> Value {
    let args = json!({"Pod": member_json(name), "Nodes": null, "NodeNames": nodes});
    post(addr, "/filter", &args).await
}

async fn bind(addr: SocketAddr, name: &str, node: &str) -> Value {
    let args = json!({"PodName": name, "PodNamespace": "default", "PodUID": format!("uid-{name}"), "Node": node});
    post(addr, "/bind", &args).await
}

#[tokio::test]
async fn a_gang_is_held_in_filter_until_it_fits_and_then_binds_entirely() {
    let binder = Arc::new(RecordingBinder::default());
    let (addr, scheduler) = serve(Arc::clone(&binder)).await;

    // Room for 2 of 3: every member is held on every node, and a /bind
    // kube-scheduler might still send is refused.
    for name in ["a", "b", "c"] {
        let result = filter(addr, name, &["n0", "n1"]).await;
        assert_eq!(result["NodeNames"], json!([]), "{name}: {result}");
        for node in ["n0", "n1"] {
            assert_eq!(
                result["FailedNodes"][node],
                "waiting for gang default/job: only 2 of 3 members can be placed together",
                "{name}: {result}"
            );
        }
    }
    let refused = bind(addr, "a", "n0").await;
    assert!(
        refused["Error"]
            .as_str()
            .unwrap()
            .contains("node n0 was not feasible for pod default/a"),
        "{refused}"
    );
    assert!(binder.bound.lock().unwrap().is_empty());

    // A third node: the gang is admitted as a whole. The first two binds
    // only assume their member (answered "still waiting" at once with
    // --gang-bind-wait=0); the third binds all three.
    scheduler.write().unwrap().apply(Change::Upsert(node("n2")));
    let all = ["n0", "n1", "n2"];
    // b no longer fits n0, which holds a's CPU.
    for (name, node, fits) in [("a", "n0", &all[..]), ("b", "n1", &all[1..])] {
        let result = filter(addr, name, &all).await;
        assert_eq!(result["NodeNames"], json!(fits), "{name}: {result}");
        let held = bind(addr, name, node).await;
        let error = held["Error"].as_str().unwrap();
        assert!(
            error.contains(&format!(
                "pod default/{name} is assumed on node {node} and held until"
            )) && error.contains("for its gang group [default/job]"),
            "{name}: {held}"
        );
        assert!(binder.bound.lock().unwrap().is_empty(), "{name}");
    }
    // kube-scheduler retries a held member: it fits only where it is held.
    let retried = filter(addr, "a", &all).await;
    assert_eq!(retried["NodeNames"], json!(["n0"]), "{retried}");
    assert_eq!(
        retried["FailedNodes"]["n1"],
        "pod is held on node n0 for its gang group [default/job]"
    );
    // Its retried bind rejoins the hold (Permit again: still waiting); a
    // bind elsewhere is refused.
    let rejoined = bind(addr, "a", "n0").await;
    assert!(
        rejoined["Error"].as_str().unwrap().contains("held until"),
        "{rejoined}"
    );
    let elsewhere = bind(addr, "a", "n1").await;
    assert!(
        elsewhere["Error"]
            .as_str()
            .unwrap()
            .contains("pod default/a is held on node n0 for its gang group [default/job]: bind to node n1 refused"),
        "{elsewhere}"
    );
    assert_eq!(scheduler.read().unwrap().permits.len(), 2);
    assert!(binder.bound.lock().unwrap().is_empty());
    let result = filter(addr, "c", &all).await;
    assert_eq!(result["NodeNames"], json!(["n2"]), "{result}");
    assert_eq!(bind(addr, "c", "n2").await, json!({"Error": ""}));
    assert_eq!(
        bound_pods(&binder),
        [("a", "n0"), ("b", "n1"), ("c", "n2")].map(|(p, n)| (p.to_string(), n.to_string()))
    );
    // The retried bind of a member bound with its group succeeds, binding nothing more.
    assert_eq!(bind(addr, "a", "n0").await, json!({"Error": ""}));
    assert_eq!(binder.bound.lock().unwrap().len(), 3);
    assert!(scheduler.read().unwrap().permits.is_empty());
}

/// Sorted (pod, node) of the recorded bindings.
fn bound_pods(binder: &RecordingBinder) -> Vec<(String, String)> {
    let mut bound: Vec<(String, String)> = binder
        .bound
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.name.clone(), r.node.clone()))
        .collect();
    bound.sort();
    bound
}

/// Polls until `count` pods are held.
async fn until_held(scheduler: &SharedScheduler, count: usize) {
    for _ in 0..600 {
        if scheduler.read().unwrap().permits.len() == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{count} pods were never held");
}

#[tokio::test]
async fn waiting_binds_answer_once_the_third_member_binds_the_whole_gang() {
    let binder = Arc::new(RecordingBinder::default());
    let all = ["n0", "n1", "n2"];
    let (addr, scheduler) =
        serve_with(Arc::clone(&binder), &all, "Strict", Duration::from_secs(30)).await;
    let mut waiting = Vec::new();
    for (name, node, fits) in [("a", "n0", &all[..]), ("b", "n1", &all[1..])] {
        let result = filter(addr, name, &all).await;
        assert_eq!(result["NodeNames"], json!(fits), "{name}: {result}");
        waiting.push(tokio::spawn(bind(addr, name, node)));
        until_held(&scheduler, waiting.len()).await;
    }
    // Two members assumed and their calls open: no API binding yet, and
    // their resources are held (n0 and n1 have 1 CPU left each).
    assert!(binder.bound.lock().unwrap().is_empty());
    let result = filter(addr, "c", &all).await;
    assert_eq!(result["NodeNames"], json!(["n2"]), "{result}");
    assert_eq!(bind(addr, "c", "n2").await, json!({"Error": ""}));
    for call in waiting {
        assert_eq!(call.await.unwrap(), json!({"Error": ""}));
    }
    assert_eq!(
        bound_pods(&binder),
        [("a", "n0"), ("b", "n1"), ("c", "n2")].map(|(p, n)| (p.to_string(), n.to_string()))
    );
}

fn other_pod_json() -> Value {
    json!({
        "metadata": {"name": "other", "namespace": "default", "uid": "uid-other"},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "3"}}}]},
        "status": {"phase": "Pending"},
    })
}

/// Holds a and b (on n0, n1), a first; returns their hold deadlines.
async fn hold_two(addr: SocketAddr, scheduler: &SharedScheduler) -> (SystemTime, SystemTime) {
    let all = ["n0", "n1", "n2"];
    for (name, node) in [("a", "n0"), ("b", "n1")] {
        filter(addr, name, &all).await;
        let held = bind(addr, name, node).await;
        assert!(
            held["Error"].as_str().unwrap().contains("held until"),
            "{held}"
        );
    }
    let scheduler = scheduler.read().unwrap();
    let deadline = |key: &str| scheduler.permits.get(key).unwrap().deadline;
    (deadline("default/a"), deadline("default/b"))
}

async fn fits_other(addr: SocketAddr, node: &str) -> bool {
    let args = json!({"Pod": other_pod_json(), "Nodes": null, "NodeNames": [node]});
    post(addr, "/filter", &args).await["NodeNames"] == json!([node])
}

#[tokio::test]
async fn a_strict_gang_that_times_out_releases_every_held_member_so_another_pod_fits() {
    let binder = Arc::new(RecordingBinder::default());
    let (addr, scheduler) = serve_with(
        Arc::clone(&binder),
        &["n0", "n1", "n2"],
        "Strict",
        Duration::ZERO,
    )
    .await;
    let other = serde_json::from_value(other_pod_json()).unwrap();
    scheduler
        .write()
        .unwrap()
        .apply(Change::Upsert(Object::Pod(other)));
    let (a_deadline, b_deadline) = hold_two(addr, &scheduler).await;
    assert!(a_deadline < b_deadline);
    assert!(!fits_other(addr, "n0").await && !fits_other(addr, "n1").await);

    // The housekeeping tick at a's deadline (1s waiting time): a timed out,
    // and Strict rejects the whole group, b too, though its own wait is not over.
    let released = scheduler.write().unwrap().expire_permits(a_deadline);
    let released: Vec<&str> = released.iter().map(|r| r.pod_key.as_str()).collect();
    assert_eq!(released, ["default/a", "default/b"]);
    assert!(scheduler.read().unwrap().permits.is_empty());
    assert!(fits_other(addr, "n0").await && fits_other(addr, "n1").await);
    assert!(binder.bound.lock().unwrap().is_empty());
    let cache = &scheduler.read().unwrap().cache;
    assert!(cache.pod("default/a").unwrap().node.is_none());
    assert!(cache.pod("default/b").unwrap().node.is_none());
}

#[tokio::test]
async fn a_non_strict_member_that_times_out_releases_only_itself() {
    let binder = Arc::new(RecordingBinder::default());
    let (addr, scheduler) = serve_with(
        Arc::clone(&binder),
        &["n0", "n1", "n2"],
        "NonStrict",
        Duration::ZERO,
    )
    .await;
    let (a_deadline, b_deadline) = hold_two(addr, &scheduler).await;
    let released = scheduler.write().unwrap().expire_permits(a_deadline);
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].pod_key, "default/a");
    assert!(
        released[0].reason.contains("timed out"),
        "{:?}",
        released[0]
    );
    assert!(fits_other(addr, "n0").await);
    assert!(!fits_other(addr, "n1").await);
    assert!(scheduler.read().unwrap().permits.get("default/b").is_some());
    let released = scheduler.write().unwrap().expire_permits(b_deadline);
    assert_eq!(released.len(), 1);
    assert!(fits_other(addr, "n1").await);
}

/// The same gang against a fake API server through the real binder: the
/// first two `/bind` calls send nothing to the API, the third sends all
/// three Bindings.
#[tokio::test]
async fn the_api_sees_no_binding_until_the_third_member_and_then_all_three() {
    let api = koord_common::testing::FakeApiServer::start().unwrap();
    for name in ["a", "b", "c"] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}});
        api.respond(
            "POST",
            &format!("/api/v1/namespaces/default/pods/{name}/binding"),
            201,
            &pod.to_string(),
        );
    }
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    scheduler.permit_bind_wait = Duration::ZERO;
    let all = ["n0", "n1", "n2"];
    for name in all {
        scheduler.apply(Change::Upsert(node(name)));
    }
    for name in ["a", "b", "c"] {
        let pod = serde_json::from_value(member_json(name)).unwrap();
        scheduler.apply(Change::Upsert(Object::Pod(pod)));
    }
    let addr = common::serve_extender(ExtenderState {
        scheduler: Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler)),
        binder: Arc::new(koord_scheduler::cluster::KubeBinder {
            client: common::client(&api),
        }),
        metrics: ExtenderMetrics::new("koord-scheduler"),
    })
    .await;
    let bindings = || {
        let mut posted: Vec<(String, Value)> = common::api_calls(&api)
            .iter()
            .filter(|call| call.method == "POST")
            .map(|call| {
                (
                    call.path().to_string(),
                    common::body(call)["target"]["name"].clone(),
                )
            })
            .collect();
        posted.sort_by(|x, y| x.0.cmp(&y.0));
        posted
    };
    for (name, node) in [("a", "n0"), ("b", "n1")] {
        filter(addr, name, &all).await;
        let held = bind(addr, name, node).await;
        assert!(
            held["Error"].as_str().unwrap().contains("held until"),
            "{held}"
        );
        assert!(bindings().is_empty(), "{name}: {:?}", bindings());
    }
    filter(addr, "c", &all).await;
    assert_eq!(bind(addr, "c", "n2").await, json!({"Error": ""}));
    assert_eq!(
        bindings(),
        [("a", "n0"), ("b", "n1"), ("c", "n2")].map(|(pod, node)| (
            format!("/api/v1/namespaces/default/pods/{pod}/binding"),
            json!(node)
        ))
    );
}
