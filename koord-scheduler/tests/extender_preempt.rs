#![allow(clippy::unwrap_used)]
//! `/preempt` over real HTTP with kube-scheduler's `ExtenderPreemptionArgs`
//! (`k8s.io/kube-scheduler/extender/v1`), in both of its shapes.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::post;
use koord_scheduler::cache::{Change, Object};
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::extender::{ExtenderMetrics, ExtenderState};
use koord_scheduler::framework::RecordingBinder;
use serde_json::{Value, json};

fn node(name: &str) -> Value {
    json!({"metadata": {"name": name}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})
}

/// A bound pod of priority 0 as the watch shows it.
fn running(name: &str, node: &str, labels: Value, annotations: Value) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "labels": labels, "annotations": annotations},
        "spec": {"nodeName": node, "priority": 0, "containers": [{"name": "c", "image": "busybox",
                 "resources": {"requests": {"cpu": "2"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    })
}

/// n1: a low-priority gang member (its gang has a second member on n2)
/// and a plain low-priority pod; n2: the other gang member and a pod of
/// quota team-b, which uses exactly its min.
fn cluster() -> Vec<Value> {
    let gang = json!({"gang.scheduling.koordinator.sh/name": "job", "gang.scheduling.koordinator.sh/min-available": "2"});
    vec![
        node("n1"),
        node("n2"),
        json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": "team-b", "namespace": "default"},
            "spec": {"min": {"cpu": "2"}, "max": {"cpu": "8"}}
        }),
        running("gang-1", "n1", json!({}), gang.clone()),
        running("plain", "n1", json!({}), json!({})),
        running("gang-2", "n2", json!({}), gang),
        running(
            "team-b-pod",
            "n2",
            json!({"quota.scheduling.koordinator.sh/name": "team-b"}),
            json!({}),
        ),
    ]
}

fn preemptor() -> Value {
    json!({
        "metadata": {"name": "urgent", "namespace": "default", "uid": "uid-urgent"},
        "spec": {"priority": 1000, "schedulerName": "koord-scheduler",
                 "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}]},
        "status": {"phase": "Pending"}
    })
}

fn state() -> ExtenderState {
    state_with(cluster(), preemptor())
}

/// A scheduler whose cache holds `objects` and the pending `preemptor`.
fn state_with(objects: Vec<Value>, preemptor: Value) -> ExtenderState {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    for value in objects {
        let object = match value["kind"].as_str() {
            Some("ElasticQuota") => Object::ElasticQuota(serde_json::from_value(value).unwrap()),
            Some("Device") => Object::Device(serde_json::from_value(value).unwrap()),
            _ if value["spec"].get("containers").is_some() => {
                Object::Pod(serde_json::from_value(value).unwrap())
            }
            _ => Object::Node(serde_json::from_value(value).unwrap()),
        };
        scheduler.apply(Change::Upsert(object));
    }
    scheduler.apply(Change::Upsert(Object::Pod(
        serde_json::from_value(preemptor).unwrap(),
    )));
    ExtenderState {
        scheduler: Arc::new(koord_scheduler::framework::SchedulerCore::new(scheduler)),
        binder: Arc::new(RecordingBinder::default()),
        metrics: ExtenderMetrics::new("koord-scheduler"),
    }
}

async fn serve() -> SocketAddr {
    common::serve_extender(state()).await
}

fn meta(uids: &[&str], pdb: i64) -> Value {
    json!({"Pods": uids.iter().map(|u| json!({"UID": u})).collect::<Vec<_>>(), "NumPDBViolations": pdb})
}

#[tokio::test]
async fn meta_victims_keep_the_gang_whole_and_the_quota_at_min() {
    let addr = serve().await;
    // As kube-scheduler sends it with nodeCacheCapable: true.
    let args = json!({
        "Pod": preemptor(),
        "NodeNameToVictims": null,
        "NodeNameToMetaVictims": {
            "n1": meta(&["uid-gang-1", "uid-plain"], 0),
            "n2": meta(&["uid-gang-2", "uid-team-b-pod"], 1),
        }
    });
    let (status, body) = post(addr, "/preempt", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    // n1: the gang member stays (its gang has a member on n2), `plain`
    // alone makes room. n2: neither victim may go (the gang would split,
    // team-b would fall below its min): dropped, so kube-scheduler never
    // sees an empty victim list.
    assert_eq!(
        result,
        json!({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-plain"}], "NumPDBViolations": 0}}})
    );
}

#[tokio::test]
async fn full_victims_are_answered_with_meta_victims() {
    let addr = serve().await;
    // nodeCacheCapable: false sends whole pods; the answer is always meta.
    let victims: Vec<Value> = cluster()
        .into_iter()
        .filter(|v| v["metadata"]["name"] == "plain")
        .collect();
    let args = json!({
        "Pod": preemptor(),
        "NodeNameToVictims": {"n1": {"Pods": victims, "NumPDBViolations": 0}},
        "NodeNameToMetaVictims": null
    });
    let (status, body) = post(addr, "/preempt", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        result,
        json!({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-plain"}], "NumPDBViolations": 0}}})
    );
}

#[tokio::test]
async fn a_whole_gang_on_the_victim_list_goes() {
    let addr = serve().await;
    // Both members listed, but on two nodes: each node's list alone would
    // split the gang, so neither node keeps them. On n1 the extender adds
    // `plain` instead, which kube-scheduler did not need to name; on n2
    // the only other pod keeps team-b at its min.
    let args = json!({
        "Pod": preemptor(),
        "NodeNameToMetaVictims": {"n1": meta(&["uid-gang-1"], 0), "n2": meta(&["uid-gang-2"], 0)}
    });
    let (status, body) = post(addr, "/preempt", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        result,
        json!({"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "uid-plain"}], "NumPDBViolations": 0}}})
    );
}

#[tokio::test]
async fn a_gpu_holder_kube_scheduler_does_not_see_is_added_to_its_victims() {
    let gpu = json!({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi",
                     "koordinator.sh/gpu-memory-ratio": "100"});
    let objects = vec![
        json!({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "110"}}}),
        json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
            "metadata": {"name": "n1"},
            "spec": {"devices": [{"type": "gpu", "id": "GPU-0", "minor": 0, "health": true, "resources": gpu}]}
        }),
        json!({
            "metadata": {"name": "gpu-holder", "namespace": "default", "uid": "uid-gpu-holder",
                         "annotations": {"scheduling.koordinator.sh/device-allocated":
                            json!({"gpu": [{"minor": 0, "resources": gpu}]}).to_string()}},
            "spec": {"nodeName": "n1", "priority": 0, "containers": [{"name": "c", "image": "busybox",
                     "resources": {"requests": {"cpu": "500m", "koordinator.sh/gpu": "100"},
                                   "limits": {"koordinator.sh/gpu": "100"}}}]},
            "status": {"phase": "Running"}
        }),
        running("cpu-low", "n1", json!({}), json!({})),
        running("cpu-low-2", "n1", json!({}), json!({})),
        running("cpu-low-3", "n1", json!({}), json!({})),
    ];
    let gpu_preemptor = json!({
        "metadata": {"name": "trainer", "namespace": "default", "uid": "uid-trainer"},
        "spec": {"priority": 1000, "schedulerName": "koord-scheduler",
                 "containers": [{"name": "c", "image": "busybox", "resources": {
                     "requests": {"cpu": "2", "koordinator.sh/gpu": "100"},
                     "limits": {"koordinator.sh/gpu": "100"}}}]},
        "status": {"phase": "Pending"}
    });
    let addr = common::serve_extender(state_with(objects, gpu_preemptor.clone())).await;
    // kube-scheduler (koordinator.sh/gpu is ignoredByScheduler) evicts one
    // 2-cpu pod for cpu; the GPU stays taken unless its holder goes too.
    let args = json!({
        "Pod": gpu_preemptor,
        "NodeNameToVictims": null,
        "NodeNameToMetaVictims": {"n1": meta(&["uid-cpu-low"], 1)}
    });
    let (status, body) = post(addr, "/preempt", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    // The PDB count is kube-scheduler's, for its own victims.
    assert_eq!(
        result,
        json!({"NodeNameToMetaVictims": {"n1": {
            "Pods": [{"UID": "uid-cpu-low"}, {"UID": "uid-gpu-holder"}],
            "NumPDBViolations": 1
        }}})
    );
}

#[tokio::test]
async fn malformed_preemption_args_get_400() {
    let addr = serve().await;
    for (body, message) in [
        ("[]".to_string(), "expected a JSON object"),
        ("{".to_string(), "malformed ExtenderPreemptionArgs"),
        (
            json!({"NodeNameToMetaVictims": {}}).to_string(),
            "Pod is missing",
        ),
        (json!({"Pod": preemptor()}).to_string(), "neither"),
        (
            json!({"Pod": preemptor(), "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": 7}]}}})
                .to_string(),
            "malformed ExtenderPreemptionArgs",
        ),
    ] {
        let (status, text) = post(addr, "/preempt", &body).await;
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.contains(message), "{body}: {text}");
    }
}

#[tokio::test]
async fn a_preempt_body_beyond_the_limit_is_refused_with_413() {
    use tower::ServiceExt as _;
    let state = state();
    let limit = koord_scheduler::extender::MAX_BODY_BYTES;
    for (size, expected) in [(limit + 1, 413), (limit, 400)] {
        let request = axum::http::Request::post("/preempt")
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

#[tokio::test]
async fn a_gang_preemptor_preempts_only_when_its_whole_gang_can_follow() {
    let small = |name: &str| json!({"metadata": {"name": name}, "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}}});
    let member = |name: &str| {
        json!({
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                         "annotations": {"gang.scheduling.koordinator.sh/name": "trainers",
                                         "gang.scheduling.koordinator.sh/min-available": "2"}},
            "spec": {"priority": 1000, "schedulerName": "koord-scheduler",
                     "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}]},
            "status": {"phase": "Pending"}
        })
    };
    let objects = vec![
        small("n1"),
        small("n2"),
        running("low-1", "n1", json!({}), json!({})),
        running("low-2", "n2", json!({}), json!({})),
        member("trainer-b"),
    ];
    let addr = common::serve_extender(state_with(objects, member("trainer-a"))).await;
    // Both nodes proposed: with the other node's victim counted as gone,
    // trainer-b can follow trainer-a; both nodes stay candidates.
    let args = json!({
        "Pod": member("trainer-a"),
        "NodeNameToMetaVictims": {"n1": meta(&["uid-low-1"], 0), "n2": meta(&["uid-low-2"], 0)}
    });
    let (status, body) = post(addr, "/preempt", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        result,
        json!({"NodeNameToMetaVictims": {
            "n1": {"Pods": [{"UID": "uid-low-1"}], "NumPDBViolations": 0},
            "n2": {"Pods": [{"UID": "uid-low-2"}], "NumPDBViolations": 0}
        }})
    );
    // One node proposed: trainer-b would have nowhere to go, so nothing
    // is evicted for trainer-a.
    let args = json!({
        "Pod": member("trainer-a"),
        "NodeNameToMetaVictims": {"n1": meta(&["uid-low-1"], 0)}
    });
    let (status, body) = post(addr, "/preempt", &args.to_string()).await;
    assert_eq!(status, 200, "{body}");
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result, json!({"NodeNameToMetaVictims": {}}));
}
