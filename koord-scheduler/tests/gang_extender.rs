#![allow(clippy::unwrap_used)]
//! A gang through the extender's HTTP API as kube-scheduler drives it:
//! members are held in /filter and their /bind fails until the whole gang
//! fits; then every member passes and binds.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

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
    json!({
        "metadata": {
            "name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "annotations": {
                "gang.scheduling.koordinator.sh/name": "job",
                "gang.scheduling.koordinator.sh/min-available": "3",
            },
        },
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "3"}}}]},
        "status": {"phase": "Pending"},
    })
}

async fn serve(binder: Arc<RecordingBinder>) -> (SocketAddr, SharedScheduler) {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    for object in [node("n0"), node("n1")] {
        scheduler.apply(Change::Upsert(object));
    }
    for name in ["a", "b", "c"] {
        let pod = serde_json::from_value(member_json(name)).unwrap();
        scheduler.apply(Change::Upsert(Object::Pod(pod)));
    }
    let shared = Arc::new(RwLock::new(scheduler));
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

    // A third node: the gang is admitted as a whole and every member binds.
    scheduler.write().unwrap().apply(Change::Upsert(node("n2")));
    let all = ["n0", "n1", "n2"];
    for (name, node) in [("a", "n0"), ("b", "n1"), ("c", "n2")] {
        let result = filter(addr, name, &all).await;
        assert_eq!(result["NodeNames"], json!(all), "{name}: {result}");
        let bound = bind(addr, name, node).await;
        assert_eq!(bound, json!({"Error": ""}), "{name}");
    }
    let bound: Vec<(String, String)> = binder
        .bound
        .lock()
        .unwrap()
        .iter()
        .map(|r| (r.name.clone(), r.node.clone()))
        .collect();
    assert_eq!(
        bound,
        [
            ("a".to_string(), "n0".to_string()),
            ("b".to_string(), "n1".to_string()),
            ("c".to_string(), "n2".to_string())
        ]
    );
}
