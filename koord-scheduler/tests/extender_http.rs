#![allow(clippy::unwrap_used)]
//! The extender over real HTTP with the JSON kube-scheduler sends.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::post;
use koord_scheduler::cache::{Change, Object};
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::extender::{ExtenderMetrics, ExtenderState};
use koord_scheduler::framework::{Binder, RecordingBinder};
use serde_json::{Value, json};

fn rfc3339(time: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .unwrap()
        .to_string()
}

fn objects() -> Vec<Object> {
    let recent = rfc3339(SystemTime::now() - Duration::from_secs(5));
    let node = |name: &str, batch: bool| {
        let mut allocatable = json!({"cpu": "10", "memory": "10Gi"});
        if batch {
            allocatable["kubernetes.io/batch-cpu"] = json!("4000");
            allocatable["kubernetes.io/batch-memory"] = json!("8Gi");
        }
        Object::Node(
            serde_json::from_value(
                json!({"metadata": {"name": name}, "status": {"allocatable": allocatable}}),
            )
            .unwrap(),
        )
    };
    let metric = |name: &str, cpu: &str| {
        Object::NodeMetric(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {},
                "status": {"updateTime": recent, "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "0"}}}}
            }))
            .unwrap(),
        )
    };
    vec![
        node("n1", true),
        node("n2", false),
        node("n3", true),
        metric("n1", "2"),
        metric("n3", "5"),
        Object::Pod(serde_json::from_value(pod_json()).unwrap()),
    ]
}

/// A batch pod as kube-scheduler serializes it.
fn pod_json() -> Value {
    json!({
        "metadata": {"name": "batch-job", "namespace": "default", "uid": "6f0c6b7e-1", "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {
                "requests": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"},
                "limits": {"kubernetes.io/batch-cpu": "1000", "kubernetes.io/batch-memory": "1Gi"}
            }}],
            "priority": 5500,
            "schedulerName": "default-scheduler"
        },
        "status": {"phase": "Pending"}
    })
}

async fn serve(binder: Arc<dyn Binder>) -> SocketAddr {
    serve_shared(binder).await.0
}

/// [`serve`], also handing out the scheduler state, as the watch feeds it.
async fn serve_shared(
    binder: Arc<dyn Binder>,
) -> (SocketAddr, koord_scheduler::framework::SharedScheduler) {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    for object in objects() {
        scheduler.apply(Change::Upsert(object));
    }
    let shared = Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler));
    let state = ExtenderState {
        scheduler: shared.clone(),
        binder,
        metrics: ExtenderMetrics::new("koord-scheduler"),
    };
    (common::serve_extender(state).await, shared)
}

#[tokio::test]
async fn filter_with_node_names_returns_kube_scheduler_json() {
    let addr = serve(Arc::new(RecordingBinder::default())).await;
    let args = json!({"Pod": pod_json(), "Nodes": null, "NodeNames": ["n1", "n2", "n3", "gone"]});
    let (status, body) = post(addr, "/filter", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        result,
        json!({
            "Nodes": null,
            "NodeNames": ["n1", "n3"],
            "FailedNodes": {"n2": "Insufficient kubernetes.io/batch-cpu, Insufficient kubernetes.io/batch-memory"},
            "FailedAndUnresolvableNodes": {"gone": "node not found in the scheduler cache"},
            "Error": ""
        })
    );
}

#[tokio::test]
async fn filter_with_full_nodes_returns_the_filtered_node_list() {
    let addr = serve(Arc::new(RecordingBinder::default())).await;
    let nodes = json!({"metadata": {}, "items": [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]});
    let args = json!({"Pod": pod_json(), "Nodes": nodes, "NodeNames": null});
    let (status, body) = post(addr, "/filter", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result["NodeNames"], Value::Null);
    assert_eq!(result["Nodes"]["items"].as_array().unwrap().len(), 1);
    assert_eq!(result["Nodes"]["items"][0]["metadata"]["name"], "n1");
}

#[tokio::test]
async fn prioritize_returns_host_priority_list_in_extender_range() {
    let addr = serve(Arc::new(RecordingBinder::default())).await;
    let args = json!({"Pod": pod_json(), "NodeNames": ["n1", "n3"]});
    let (status, body) = post(addr, "/prioritize", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    // LoadAware (weight 1): n1 cpu (10000-2850)/100 = 71, memory 10Gi-1Gi·70% → 93: 82 → 8;
    // n3 cpu (10000-5850)/100 = 41, memory 93: 67 → 7.
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        result,
        json!([{"Host": "n1", "Score": 8}, {"Host": "n3", "Score": 7}])
    );
}

#[tokio::test]
async fn bind_reserves_and_reports_errors_in_the_binding_result() {
    let recording = Arc::new(RecordingBinder::default());
    let addr = serve(recording.clone()).await;
    // kube-scheduler filters, then binds to a node the filter returned.
    let filter = json!({"Pod": pod_json(), "NodeNames": ["n1", "n3"]});
    common::post_ok(addr, "/filter", &filter.to_string()).await;
    let args = json!({"PodName": "batch-job", "PodNamespace": "default", "PodUID": "6f0c6b7e-1", "Node": "n1"});
    let (status, body) = post(addr, "/bind", &args.to_string()).await;
    assert_eq!((status, body.as_str()), (200, r#"{"Error":""}"#));
    let bound = recording.bound.lock().unwrap().clone();
    assert_eq!(bound.len(), 1);
    assert_eq!(bound[0].node, "n1");
    // The pod now counts on n1: binding it again is an error, not a crash.
    let (status, body) = post(addr, "/bind", &args.to_string()).await;
    assert_eq!(status, 200);
    let result: Value = serde_json::from_str(&body).unwrap();
    assert!(
        result["Error"]
            .as_str()
            .unwrap()
            .contains("already on node n1"),
        "{body}"
    );
    // Unknown pods are errors too.
    let unknown =
        json!({"PodName": "nope", "PodNamespace": "default", "PodUID": "x", "Node": "n1"});
    let (_, body) = post(addr, "/bind", &unknown.to_string()).await;
    assert!(body.contains("was not filtered"), "{body}");
    // Filtered but not in the cache (kube-scheduler's view ran ahead of the watch).
    let mut stranger = pod_json();
    stranger["metadata"]["name"] = json!("nope");
    stranger["metadata"]["uid"] = json!("x");
    let filter = json!({"Pod": stranger, "NodeNames": ["n1"]});
    common::post_ok(addr, "/filter", &filter.to_string()).await;
    let (_, body) = post(addr, "/bind", &unknown.to_string()).await;
    assert!(body.contains("not in the scheduler cache"), "{body}");
}

#[tokio::test]
async fn a_bind_that_runs_ahead_of_the_watch_waits_for_the_pod() {
    let recording = Arc::new(RecordingBinder::default());
    let (addr, scheduler) = serve_shared(recording.clone()).await;
    // kube-scheduler's informer has the pod; this process's watch has not
    // delivered it yet.
    let mut late = pod_json();
    late["metadata"]["name"] = json!("late");
    late["metadata"]["uid"] = json!("late-uid");
    let filter = json!({"Pod": late, "NodeNames": ["n1"]});
    common::post_ok(addr, "/filter", &filter.to_string()).await;
    let watch = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let pod = Object::Pod(serde_json::from_value(late).unwrap());
        scheduler.write().unwrap().apply(Change::Upsert(pod));
    });
    let args =
        json!({"PodName": "late", "PodNamespace": "default", "PodUID": "late-uid", "Node": "n1"});
    let (status, body) = post(addr, "/bind", &args.to_string()).await;
    watch.await.unwrap();
    assert_eq!((status, body.as_str()), (200, r#"{"Error":""}"#));
    let bound = recording.bound.lock().unwrap().clone();
    assert_eq!(bound.len(), 1);
    assert_eq!(
        (bound[0].name.as_str(), bound[0].node.as_str()),
        ("late", "n1")
    );
}

#[tokio::test]
async fn failing_binder_rolls_back_and_returns_the_error() {
    let binder = Arc::new(RecordingBinder {
        fail_with: Some("pods \"batch-job\" is forbidden".into()),
        ..Default::default()
    });
    let addr = serve(binder).await;
    let filter = json!({"Pod": pod_json(), "NodeNames": ["n1"]});
    common::post_ok(addr, "/filter", &filter.to_string()).await;
    let args = json!({"PodName": "batch-job", "PodNamespace": "default", "PodUID": "6f0c6b7e-1", "Node": "n1"});
    let (status, body) = post(addr, "/bind", &args.to_string()).await;
    assert_eq!(status, 200);
    let result: Value = serde_json::from_str(&body).unwrap();
    assert!(
        result["Error"].as_str().unwrap().contains("forbidden"),
        "{body}"
    );
    // Rolled back: the pod still fits everywhere it did before.
    let filter = json!({"Pod": pod_json(), "NodeNames": ["n1", "n3"]});
    let (_, body) = post(addr, "/filter", &filter.to_string()).await;
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result["NodeNames"], json!(["n1", "n3"]));
}

#[tokio::test]
async fn malformed_bodies_get_400_with_a_message() {
    let addr = serve(Arc::new(RecordingBinder::default())).await;
    for (path, body, expected) in [
        ("/filter", "not json", "malformed ExtenderArgs"),
        ("/prioritize", "{\"Pod\": 3}", "malformed ExtenderArgs"),
        (
            "/filter",
            "{\"NodeNames\": [\"n1\"]}",
            "ExtenderArgs.Pod is missing",
        ),
        (
            "/filter",
            &json!({"Pod": pod_json()}).to_string(),
            "neither NodeNames nor Nodes",
        ),
        ("/bind", "[]", "malformed ExtenderBindingArgs"),
        ("/bind", "{\"PodName\": \"x\"}", "needs PodName and Node"),
        // Nameless and duplicate objects are refused, not skipped.
        (
            "/filter",
            &json!({"Pod": {"metadata": {"namespace": "default"}}, "NodeNames": ["n1"]})
                .to_string(),
            "ExtenderArgs.Pod: Pod without metadata.name refused",
        ),
        (
            "/filter",
            &json!({"Pod": pod_json(), "NodeNames": ["n1", "n3", "n1"]}).to_string(),
            "ExtenderArgs.NodeNames lists node n1 twice",
        ),
        // Names the cache does not know are checked too, and /prioritize
        // and the Nodes list check the same way.
        (
            "/prioritize",
            &json!({"Pod": pod_json(), "NodeNames": ["ghost", "n1", "ghost"]}).to_string(),
            "ExtenderArgs.NodeNames lists node ghost twice",
        ),
        (
            "/prioritize",
            &json!({"Pod": pod_json(), "NodeNames": ["n3", "n3"]}).to_string(),
            "ExtenderArgs.NodeNames lists node n3 twice",
        ),
        (
            "/filter",
            &json!({"Pod": pod_json(), "Nodes": {"items": [{"metadata": {"name": "n3"}}, {"metadata": {"name": "n3"}}]}})
                .to_string(),
            "ExtenderArgs.Nodes.items lists node n3 twice",
        ),
        (
            "/prioritize",
            &json!({"Pod": pod_json(), "NodeNames": ["n1", ""]}).to_string(),
            "ExtenderArgs.NodeNames[1] has no name",
        ),
        (
            "/filter",
            &json!({"Pod": pod_json(), "Nodes": {"items": [{"metadata": {"name": "n1"}}, {"metadata": {}}]}})
                .to_string(),
            "ExtenderArgs.Nodes.items[1] has no metadata.name",
        ),
    ] {
        let (status, text) = post(addr, path, body).await;
        assert_eq!(status, 400, "{path} {body}: {text}");
        assert!(text.contains(expected), "{path} {body}: {text}");
    }
    // The server is still up.
    let (status, _) = post(
        addr,
        "/filter",
        &json!({"Pod": pod_json(), "NodeNames": []}).to_string(),
    )
    .await;
    assert_eq!(status, 200);
}

fn bind_args(node: &str) -> String {
    json!({"PodName": "batch-job", "PodNamespace": "default", "PodUID": "6f0c6b7e-1", "Node": node})
        .to_string()
}

async fn bind_error(addr: SocketAddr, node: &str) -> String {
    let (status, body) = post(addr, "/bind", &bind_args(node)).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    result["Error"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn bind_refuses_a_pod_that_was_not_filtered_or_a_node_it_was_not_filtered_for() {
    let recording = Arc::new(RecordingBinder::default());
    let addr = serve(recording.clone()).await;
    // Never filtered: refused, although it would fit n1.
    let error = bind_error(addr, "n1").await;
    assert!(error.contains("was not filtered"), "{error}");
    assert!(recording.bound.lock().unwrap().is_empty());

    // Filtered over n1 and n2: n1 is feasible, n2 is not (no batch
    // capacity), n3 was never asked about although the pod would fit there.
    let filter = json!({"Pod": pod_json(), "NodeNames": ["n1", "n2"]});
    let result = common::post_ok(addr, "/filter", &filter.to_string()).await;
    assert_eq!(result["NodeNames"], json!(["n1"]));
    for node in ["n2", "n3", "elsewhere"] {
        let error = bind_error(addr, node).await;
        assert!(
            error.contains(&format!("node {node} was not feasible")),
            "{node}: {error}"
        );
    }
    // A different pod UID under the same name is not the filtered pod.
    let (_, body) = post(
        addr,
        "/bind",
        &json!({"PodName": "batch-job", "PodNamespace": "default", "PodUID": "another", "Node": "n1"})
            .to_string(),
    )
    .await;
    assert!(body.contains("UID"), "{body}");
    assert!(recording.bound.lock().unwrap().is_empty());

    // The node it was filtered for binds.
    assert_eq!(bind_error(addr, "n1").await, "");
    let bound = recording.bound.lock().unwrap().clone();
    assert_eq!(bound.len(), 1);
    assert_eq!(bound[0].node, "n1");
}

/// [`pod_json`] with its batch-cpu request (and limit) set to `amount`.
fn pod_requesting_batch_cpu(amount: &str) -> Value {
    let mut pod = pod_json();
    let resources = &mut pod["spec"]["containers"][0]["resources"];
    resources["requests"]["kubernetes.io/batch-cpu"] = json!(amount);
    resources["limits"]["kubernetes.io/batch-cpu"] = json!(amount);
    pod
}

#[tokio::test]
async fn a_pod_with_an_unparseable_or_overflowing_request_fits_no_node() {
    let addr = serve(Arc::new(RecordingBinder::default())).await;
    // A request that parses still fits n1 and n3.
    let args = json!({"Pod": pod_requesting_batch_cpu("1000"), "NodeNames": ["n1", "n2", "n3"]});
    let result = common::post_ok(addr, "/filter", &args.to_string()).await;
    assert_eq!(result["NodeNames"], json!(["n1", "n3"]));
    // Beyond what the scheduler can count (1e40 units), not a number,
    // or negative: never zero, refused everywhere with the reason.
    for amount in ["1e40", "999999999999999999999999999999999", "lots", "-1000"] {
        let args =
            json!({"Pod": pod_requesting_batch_cpu(amount), "NodeNames": ["n1", "n2", "n3"]});
        let result = common::post_ok(addr, "/filter", &args.to_string()).await;
        assert_eq!(result["NodeNames"], json!([]), "{amount}: {result}");
        for node in ["n1", "n2", "n3"] {
            let reason = result["FailedAndUnresolvableNodes"][node]
                .as_str()
                .unwrap_or_default();
            assert!(
                reason.contains("kubernetes.io/batch-cpu") && reason.contains(amount),
                "{amount} on {node}: {result}"
            );
        }
    }
}

#[tokio::test]
async fn a_body_beyond_the_limit_is_refused_with_413() {
    use tower::ServiceExt as _;
    let state = ExtenderState {
        scheduler: Arc::new(koord_scheduler::framework::SchedulerCore::new(
            koord_scheduler::build_scheduler(
                &SchedulerConfiguration::default(),
                Duration::from_secs(300),
            )
            .unwrap(),
        )),
        binder: Arc::new(RecordingBinder::default()),
        metrics: ExtenderMetrics::new("koord-scheduler"),
    };
    let limit = koord_scheduler::extender::MAX_BODY_BYTES;
    for (size, expected) in [(limit + 1, 413), (limit, 400)] {
        let request = axum::http::Request::post("/filter")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(vec![b' '; size]))
            .unwrap();
        let response = koord_scheduler::extender::router(state.clone())
            .oneshot(request)
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), expected, "{size} bytes");
    }
}

/// The exact bytes of `/filter` answers with refusals from several
/// plugins (NodeResourcesFit, LoadAware, NodeNUMAResource) and the
/// scheduler's own "not found": how refusals are built and encoded may
/// change, what kube-scheduler reads may not.
#[tokio::test]
async fn filter_refusals_are_encoded_byte_for_byte() {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    let recent = rfc3339(SystemTime::now() - Duration::from_secs(5));
    let mut objects = objects();
    objects.push(Object::Node(
        serde_json::from_value(json!({"metadata": {"name": "n4"}, "status": {"allocatable": {
            "cpu": "10", "memory": "10Gi", "kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "8Gi"}}}))
        .unwrap(),
    ));
    objects.push(Object::NodeMetric(
        serde_json::from_value(json!({
            "metadata": {"name": "n4"},
            "spec": {},
            "status": {"updateTime": recent, "nodeMetric": {"nodeUsage": {"resources": {"cpu": "9", "memory": "0"}}}}
        }))
        .unwrap(),
    ));
    for object in objects {
        scheduler.apply(Change::Upsert(object));
    }
    let addr = common::serve_extender(ExtenderState {
        scheduler: Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler)),
        binder: Arc::new(RecordingBinder::default()),
        metrics: ExtenderMetrics::new("koord-scheduler"),
    })
    .await;

    let args =
        json!({"Pod": pod_json(), "Nodes": null, "NodeNames": ["n4", "gone", "n2", "n1", "n3"]});
    let (status, body) = post(addr, "/filter", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        concat!(
            r#"{"Nodes":null,"NodeNames":["n1","n3"],"#,
            r#""FailedNodes":{"n2":"Insufficient kubernetes.io/batch-cpu, Insufficient kubernetes.io/batch-memory","n4":"node(s) cpu usage exceed threshold"},"#,
            r#""FailedAndUnresolvableNodes":{"gone":"node not found in the scheduler cache"},"Error":""}"#
        )
    );

    // An LSR pod wants a cpuset: nodes without a NodeResourceTopology
    // refuse it (the bench's 4,000 refusals per LSR pod).
    let lsr = json!({
        "metadata": {"name": "lsr", "namespace": "default", "uid": "6f0c6b7e-2", "labels": {"koordinator.sh/qosClass": "LSR"}},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {
                "requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}
            }}],
            "priority": 9000,
            "schedulerName": "default-scheduler"
        },
        "status": {"phase": "Pending"}
    });
    let args = json!({"Pod": lsr, "Nodes": null, "NodeNames": ["n1", "n2", "n4", "gone"]});
    let (status, body) = post(addr, "/filter", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        concat!(
            r#"{"Nodes":null,"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{"#,
            r#""gone":"node not found in the scheduler cache","n1":"node(s) invalid CPU Topology","#,
            r#""n2":"node(s) invalid CPU Topology","n4":"node(s) invalid CPU Topology"},"Error":""}"#
        )
    );
}

/// An owner pod whose reservation is on a node kube-scheduler's sample left
/// out: every candidate is refused and the pod is nominated to that node
/// through the binder (`status.nominatedNodeName`).
#[tokio::test]
async fn an_owner_is_nominated_to_its_reservation_outside_the_candidates() {
    let recording = Arc::new(RecordingBinder::default());
    let binder: Arc<dyn Binder> = recording.clone();
    let (addr, shared) = serve_shared(binder).await;
    let created = rfc3339(SystemTime::now() - Duration::from_secs(5));
    let reservation = json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": "r-owner", "uid": "r-owner-uid", "creationTimestamp": created},
        "spec": {
            "template": {"spec": {"containers": [{"name": "c",
                "resources": {"requests": {"cpu": "2"}}}]}},
            "owners": [{"object": {"name": "owner", "namespace": "default"}}],
            "ttl": "1h"
        },
        "status": {"phase": "Available", "nodeName": "n3", "allocatable": {"cpu": "2"}}
    });
    shared
        .write()
        .unwrap()
        .apply(Change::Upsert(Object::Reservation(
            serde_json::from_value(reservation).unwrap(),
        )));
    let owner = json!({
        "metadata": {"name": "owner", "namespace": "default", "uid": "owner-uid"},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                 "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Pending"}
    });
    let args = json!({"Pod": owner, "NodeNames": ["n1", "n2"]});
    let (status, body) = post(addr, "/filter", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result["NodeNames"], json!([]), "{body}");
    let refused = result["FailedAndUnresolvableNodes"]["n1"].as_str().unwrap();
    assert!(refused.contains("nominated"), "{body}");
    let mut nominated = Vec::new();
    for _ in 0..100 {
        nominated = recording.nominated.lock().unwrap().clone();
        if !nominated.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(nominated.len(), 1);
    assert_eq!(
        (
            nominated[0].namespace.as_str(),
            nominated[0].name.as_str(),
            nominated[0].uid.as_str(),
            nominated[0].node.as_str()
        ),
        ("default", "owner", "owner-uid", "n3")
    );
    // Nominated there already (kube-scheduler tried n3 first): the candidates serve.
    let mut owner = args["Pod"].clone();
    owner["status"]["nominatedNodeName"] = json!("n3");
    let args = json!({"Pod": owner, "NodeNames": ["n1", "n2"]});
    let (_, body) = post(addr, "/filter", &args.to_string()).await;
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result["NodeNames"], json!(["n1", "n2"]), "{body}");
    // And on n3 itself, it fits in its reservation.
    let args = json!({"Pod": owner, "NodeNames": ["n3"]});
    let (_, body) = post(addr, "/filter", &args.to_string()).await;
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result["NodeNames"], json!(["n3"]), "{body}");
    assert_eq!(recording.nominated.lock().unwrap().len(), 1);
}
