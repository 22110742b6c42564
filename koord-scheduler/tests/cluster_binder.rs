#![allow(clippy::unwrap_used)]
//! `KubeBinder` against a fake API server: the exact merge patch and
//! Binding it sends, and what a failed Binding leaves behind (annotations
//! taken back off, the error in `ExtenderBindingResult.Error`, the
//! reservation rolled back).

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{api_calls, body, client, post};
use koord_common::testing::{FakeApiServer, RecordedRequest};
use koord_scheduler::cache::{Change, Object};
use koord_scheduler::cluster::KubeBinder;
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::extender::{ExtenderMetrics, ExtenderState};
use koord_scheduler::framework::{Binder, Reserved};
use serde_json::{Value, json};

const POD_PATH: &str = "/api/v1/namespaces/default/pods/lsr-a";
const BINDING_PATH: &str = "/api/v1/namespaces/default/pods/lsr-a/binding";
const RESOURCE_STATUS: &str = "scheduling.koordinator.sh/resource-status";

fn pod_object() -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lsr-a", "namespace": "default"}})
        .to_string()
}

fn status(code: u16, reason: &str, message: &str) -> String {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
    .to_string()
}

fn reserved(annotations: &[(&str, &str)]) -> Reserved {
    Reserved {
        pod_key: "default/lsr-a".into(),
        namespace: "default".into(),
        name: "lsr-a".into(),
        uid: "uid-lsr-a".into(),
        node: "numa-node".into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn expected_binding() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "lsr-a", "namespace": "default", "uid": "uid-lsr-a"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "numa-node"}
    })
}

/// A fake API server that accepts the pod patches and answers the Binding
/// POST with `code` and `body`.
fn api_answering_the_binding(code: u16, body: &str) -> FakeApiServer {
    let api = FakeApiServer::start().unwrap();
    api.respond("PATCH", POD_PATH, 200, &pod_object());
    api.respond("POST", BINDING_PATH, code, body);
    api
}

/// "METHOD path" per request, for comparing call sequences.
fn request_lines(calls: &[RecordedRequest]) -> Vec<String> {
    calls
        .iter()
        .map(|c| format!("{} {}", c.method, c.path()))
        .collect()
}

#[tokio::test]
async fn binder_merge_patches_the_annotations_then_creates_the_binding() {
    let api = api_answering_the_binding(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
            .to_string(),
    );
    let binder = KubeBinder {
        client: client(&api),
    };
    let reserved = reserved(&[
        (RESOURCE_STATUS, r#"{"cpuset":"0-1,4-5"}"#),
        ("scheduling.koordinator.sh/reservation-allocated", "{}"),
    ]);
    binder.bind(&reserved).await.unwrap();

    let calls = api_calls(&api);
    assert_eq!(
        request_lines(&calls),
        [format!("PATCH {POD_PATH}"), format!("POST {BINDING_PATH}")]
    );
    assert_eq!(
        calls[0].header("content-type"),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        body(&calls[0]),
        json!({"metadata": {"annotations": {
            RESOURCE_STATUS: r#"{"cpuset":"0-1,4-5"}"#,
            "scheduling.koordinator.sh/reservation-allocated": "{}"
        }}})
    );
    assert_eq!(body(&calls[1]), expected_binding());
}

#[tokio::test]
async fn binder_without_annotations_only_creates_the_binding() {
    let api = FakeApiServer::start().unwrap();
    api.respond("POST", BINDING_PATH, 201, "{}");
    let binder = KubeBinder {
        client: client(&api),
    };
    binder.bind(&reserved(&[])).await.unwrap();
    let calls = api_calls(&api);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        (calls[0].method.as_str(), calls[0].path()),
        ("POST", BINDING_PATH)
    );
    assert_eq!(body(&calls[0]), expected_binding());
}

#[tokio::test]
async fn failed_patch_stops_before_the_binding() {
    let api = FakeApiServer::start().unwrap();
    api.respond(
        "PATCH",
        POD_PATH,
        403,
        &status(
            403,
            "Forbidden",
            "pods \"lsr-a\" is forbidden: no patch for you",
        ),
    );
    let binder = KubeBinder {
        client: client(&api),
    };
    let err = binder
        .bind(&reserved(&[(RESOURCE_STATUS, "{}")]))
        .await
        .unwrap_err();
    assert_eq!(err.metric_label(), "patch_annotations", "{err:?}");
    assert!(
        err.to_string().starts_with("patching pod annotations: "),
        "{err:?}"
    );
    assert!(err.to_string().contains("no patch for you"), "{err:?}");
    let calls = api_calls(&api);
    assert!(
        calls.iter().all(|c| c.path() != BINDING_PATH),
        "no Binding after a failed patch: {calls:?}"
    );
}

/// A NUMA node and one LSR pod whose bind writes a cpuset annotation.
fn numa_scheduler() -> koord_scheduler::framework::Scheduler {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    let cpus: Vec<Value> = (0..8)
        .map(|id| json!({"id": id, "core": id % 4, "socket": (id % 4) / 2, "node": (id % 4) / 2}))
        .collect();
    let objects = [
        Object::Node(
            serde_json::from_value(json!({
                "metadata": {"name": "numa-node", "labels": {"node.koordinator.sh/numa-topology-policy": "SingleNUMANode"}},
                "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
            }))
            .unwrap(),
        ),
        Object::NodeResourceTopology(
            serde_json::from_value(json!({
                "metadata": {"name": "numa-node", "annotations": {
                    "node.koordinator.sh/cpu-topology": json!({"detail": cpus}).to_string()
                }},
                "topologyPolicies": ["None"],
                "zones": []
            }))
            .unwrap(),
        ),
        Object::Pod(
            serde_json::from_value(json!({
                "metadata": {"name": "lsr-a", "namespace": "default", "uid": "uid-lsr-a",
                             "labels": {"koordinator.sh/qosClass": "LSR"}},
                "spec": {"priority": 9000, "containers": [{"name": "main", "resources": {
                    "requests": {"cpu": "4", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "1Gi"}}}]},
                "status": {"phase": "Pending"}
            }))
            .unwrap(),
        ),
    ];
    for object in objects {
        scheduler.apply(Change::Upsert(object));
    }
    scheduler
}

async fn serve_extender(binder: KubeBinder) -> SocketAddr {
    common::serve_extender(ExtenderState {
        scheduler: Arc::new(koord_scheduler::framework::SchedulerCore::new(
            numa_scheduler(),
        )),
        binder: Arc::new(binder),
        metrics: ExtenderMetrics::new("koord-scheduler"),
    })
    .await
}

fn annotations_of(patch: &RecordedRequest) -> BTreeMap<String, Value> {
    serde_json::from_value(body(patch)["metadata"]["annotations"].clone()).unwrap()
}

#[tokio::test]
async fn failed_binding_removes_the_annotations_and_bind_returns_the_error() {
    let api = api_answering_the_binding(
        409,
        &status(
            409,
            "Conflict",
            "pod lsr-a is already assigned to node \"other\"",
        ),
    );
    let addr = serve_extender(KubeBinder {
        client: client(&api),
    })
    .await;
    // kube-scheduler filters before it binds (the pod as the cache has it).
    let pod = json!({
        "metadata": {"name": "lsr-a", "namespace": "default", "uid": "uid-lsr-a",
                     "labels": {"koordinator.sh/qosClass": "LSR"}},
        "spec": {"priority": 9000, "containers": [{"name": "main", "resources": {
            "requests": {"cpu": "4", "memory": "1Gi"}, "limits": {"cpu": "4", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending"}
    });
    let filter = json!({"Pod": pod, "NodeNames": ["numa-node"]}).to_string();
    let filtered = common::post_ok(addr, "/filter", &filter).await;
    assert_eq!(filtered["NodeNames"], json!(["numa-node"]), "{filtered}");
    let args = json!({"PodName": "lsr-a", "PodNamespace": "default", "PodUID": "uid-lsr-a", "Node": "numa-node"})
        .to_string();

    let (code, text) = post(addr, "/bind", &args).await;
    assert_eq!(code, 200, "{text}");
    let result: Value = serde_json::from_str(&text).unwrap();
    let error = result["Error"].as_str().unwrap();
    assert!(error.contains("creating the Binding"), "{text}");
    assert!(error.contains("already assigned to node"), "{text}");

    let calls = api_calls(&api);
    assert_eq!(
        request_lines(&calls),
        [
            format!("PATCH {POD_PATH}"),
            format!("POST {BINDING_PATH}"),
            format!("PATCH {POD_PATH}"),
        ]
    );
    let written = annotations_of(&calls[0]);
    let status_annotation: Value =
        serde_json::from_str(written[RESOURCE_STATUS].as_str().unwrap()).unwrap();
    assert_eq!(status_annotation["cpuset"], "0-1,4-5", "{written:?}");
    // The clean-up patch nulls exactly the keys the first one set.
    let removed = annotations_of(&calls[2]);
    assert_eq!(
        removed.keys().collect::<Vec<_>>(),
        written.keys().collect::<Vec<_>>()
    );
    assert!(removed.values().all(Value::is_null), "{removed:?}");
    assert_eq!(
        calls[2].header("content-type"),
        Some("application/merge-patch+json")
    );

    // Rolled back: once the API server accepts, the same cpus are handed out again.
    api.respond("POST", BINDING_PATH, 201, "{}");
    let (code, text) = post(addr, "/bind", &args).await;
    assert_eq!((code, text.as_str()), (200, r#"{"Error":""}"#));
    let calls = api_calls(&api);
    assert_eq!(calls.len(), 5, "{calls:?}");
    assert_eq!(annotations_of(&calls[3]), written);
    assert_eq!(calls[4].path(), BINDING_PATH);
    assert_eq!(body(&calls[4])["target"]["name"], "numa-node");
}

#[tokio::test]
async fn status_writes_reach_their_objects_as_merge_patches() {
    let api = FakeApiServer::start().unwrap();
    let quota_path = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/quotas/elasticquotas/team-a";
    let group_path = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/default/podgroups/train";
    api.respond("PATCH", quota_path, 200, r#"{"apiVersion":"scheduling.sigs.k8s.io/v1alpha1","kind":"ElasticQuota","metadata":{"name":"team-a","namespace":"quotas"},"spec":{}}"#);
    api.respond("PATCH", group_path, 200, r#"{"apiVersion":"scheduling.sigs.k8s.io/v1alpha1","kind":"PodGroup","metadata":{"name":"train","namespace":"default"},"spec":{}}"#);
    let client = client(&api);
    let used = json!({"status": {"used": {"cpu": "3"}}});
    for (resource, namespace, name, patch) in [
        (
            koord_scheduler::plugins::elasticquota::RESOURCE,
            "quotas",
            "team-a",
            &used,
        ),
        (
            koord_scheduler::plugins::coscheduling::POD_GROUP_RESOURCE,
            "default",
            "train",
            &json!({"status": {"phase": "Pending"}}),
        ),
    ] {
        let write = koord_scheduler::framework::StatusWrite {
            resource,
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
            patch: patch.clone(),
        };
        koord_scheduler::cluster::write_status(&client, &write)
            .await
            .unwrap();
    }
    let calls = api_calls(&api);
    assert_eq!(
        request_lines(&calls),
        [format!("PATCH {quota_path}"), format!("PATCH {group_path}")]
    );
    assert_eq!(body(&calls[0]), used);
    assert_eq!(
        calls[0].header("content-type"),
        Some("application/merge-patch+json")
    );
}
