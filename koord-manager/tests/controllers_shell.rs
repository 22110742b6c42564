#![allow(clippy::unwrap_used)]
//! The controllers' shell: a pass planned over a hand-built cache, and the
//! API requests the writes and the Lease elector send, checked on a
//! recording stand-in for kube-apiserver.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apis::configuration::SloControllerConfig;
use apis::slo::v1alpha1::{NodeMetric, NodeSLO};
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_manager::controllers::{Action, ClusterView, Enabled, apply_action, plan_pass};
use koord_manager::leader::{LeaderElector, LeaseTiming};
use koord_manager::metrics::ControllerMetrics;
use serde_json::{Value, json};

/// A request the stand-in received.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    content_type: String,
    body: String,
}

type Route = dyn Fn(&str, &str, &str) -> (u16, String) + Send + Sync;

/// Answers every request with `route(method, path, body)` and records it.
struct RecordingApi {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl RecordingApi {
    fn start(route: Box<Route>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let route: Arc<Route> = Arc::from(route);
        let shared = Arc::clone(&seen);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let (seen, route) = (Arc::clone(&shared), Arc::clone(&route));
                std::thread::spawn(move || serve(stream, &seen, &*route));
            }
        });
        RecordingApi { url, seen }
    }

    fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, route: &Route) {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        let mut content_type = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "content-type" => content_type = value.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let body = String::from_utf8(body).unwrap();
        let mut words = request_line.split_whitespace();
        let method = words.next().unwrap_or_default().to_owned();
        let path = words.next().unwrap_or_default().to_owned();
        let path = path.split('?').next().unwrap_or_default().to_owned();
        let (code, answer) = route(&method, &path, &body);
        seen.lock().unwrap().push(Seen {
            method,
            path,
            content_type,
            body,
        });
        let response = format!(
            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn not_found() -> (u16, String) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
            .to_string(),
    )
}

fn node(name: &str, uid: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": uid, "labels": {"pool": "a"}},
        "status": {
            "capacity": {"cpu": "10", "memory": "10Gi"},
            "allocatable": {"cpu": "10", "memory": "10Gi", "kubernetes.io/batch-cpu": "1k"},
        }
    }))
    .unwrap()
}

fn fresh_metric(name: &str, now: SystemTime) -> NodeMetric {
    let time = k8s_openapi::jiff::Timestamp::try_from(now).unwrap();
    serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": name},
        "spec": {"metricCollectPolicy": {"aggregateDurationSeconds": 300, "reportIntervalSeconds": 60,
            "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
            "nodeMemoryCollectPolicy": "usageWithoutPageCache"}},
        "status": {"updateTime": time.to_string(),
            "nodeMetric": {"systemUsage": {"resources": {"cpu": "0", "memory": "0"}}}},
    }))
    .unwrap()
}

fn colocation_config() -> SloControllerConfig {
    let data = [(
        "colocation-config".to_owned(),
        r#"{"enable": true}"#.to_owned(),
    )]
    .into_iter()
    .collect();
    SloControllerConfig::from_configmap_data(&data).unwrap()
}

#[test]
fn a_pass_creates_missing_objects_cleans_up_orphans_and_patches_status() {
    let now = SystemTime::now();
    let gone_slo = NodeSLO::new("gone", Default::default());
    let view = ClusterView {
        nodes: vec![
            Arc::new(node("worker", "uid-1")),
            Arc::new(node("fresh", "uid-2")),
        ],
        node_metrics: vec![
            Arc::new(fresh_metric("worker", now)),
            Arc::new(fresh_metric("gone", now)),
        ],
        node_slos: vec![Arc::new(gone_slo)],
        pods: Vec::<Arc<Pod>>::new(),
        ..Default::default()
    };
    let (actions, computed) = plan_pass(
        &view,
        &colocation_config(),
        Enabled::ALL,
        &HashMap::new(),
        now,
    );
    assert_eq!(computed.len(), 2);
    let created_slos: Vec<String> = actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateNodeSlo(slo) => slo.metadata.name.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(created_slos, ["worker", "fresh"]);
    assert!(actions.contains(&Action::DeleteNodeSlo("gone".into())));
    assert!(actions.contains(&Action::DeleteNodeMetric("gone".into())));
    let created_metric = actions
        .iter()
        .find_map(|a| match a {
            Action::CreateNodeMetric(m) => Some(m),
            _ => None,
        })
        .expect("the node without a NodeMetric gets one");
    assert_eq!(created_metric.metadata.name.as_deref(), Some("fresh"));
    let owner = &created_metric.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Node", "uid-2"));

    // worker: 10000 − 40% margin = 6000 milli; 1000 today is far beyond 10%.
    let patch = actions
        .iter()
        .find_map(|a| match a {
            Action::PatchNodeStatus { node, patch, .. } if node == "worker" => Some(patch),
            _ => None,
        })
        .expect("worker's status is patched");
    assert_eq!(
        patch["status"]["allocatable"]["kubernetes.io/batch-cpu"],
        "6k"
    );
    assert_eq!(patch["status"]["capacity"]["kubernetes.io/batch-cpu"], "6k");
    // The origin batch amounts ride along, as upstream's status update does.
    let origin: Value = serde_json::from_str(
        patch["metadata"]["annotations"]["node.koordinator.sh/originExtendedAllocatable"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(origin["resources"]["kubernetes.io/batch-cpu"], "6k");
    // fresh has no NodeMetric: the resources are removed.
    let removal = actions
        .iter()
        .find_map(|a| match a {
            Action::PatchNodeStatus { node, patch, .. } if node == "fresh" => Some(patch),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        removal["status"]["allocatable"]["kubernetes.io/batch-cpu"],
        Value::Null
    );

    // With only the node-resource controller on, nothing else is written.
    let only_resources = Enabled {
        node_slo: false,
        node_metric: false,
        node_resource: true,
        quota_profile: false,
    };
    let (actions, _) = plan_pass(
        &view,
        &colocation_config(),
        only_resources,
        &HashMap::new(),
        now,
    );
    assert!(
        actions
            .iter()
            .all(|a| matches!(a, Action::PatchNodeStatus { .. }))
    );
}

#[tokio::test]
async fn node_status_is_written_as_a_merge_patch_of_the_status_subresource() {
    let api = RecordingApi::start(Box::new(|method, path, _| {
        if method == "PATCH" && path == "/api/v1/nodes/worker/status" {
            (
                200,
                serde_json::to_string(&node("worker", "uid-1")).unwrap(),
            )
        } else {
            not_found()
        }
    }));
    let patch = json!({"status": {
        "capacity": {"kubernetes.io/batch-cpu": "6k", "kubernetes.io/mid-cpu": null},
        "allocatable": {"kubernetes.io/batch-cpu": "6k", "kubernetes.io/mid-cpu": null},
    }});
    let written = apply_action(
        &api.client(),
        &ControllerMetrics::default(),
        Action::PatchNodeStatus {
            node: "worker".into(),
            patch: patch.clone(),
            reason: "test".into(),
        },
    )
    .await;
    assert_eq!(written.map(|(node, _)| node).as_deref(), Some("worker"));
    let seen = api.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, "PATCH");
    assert_eq!(seen[0].path, "/api/v1/nodes/worker/status");
    assert_eq!(seen[0].content_type, "application/merge-patch+json");
    let body: Value = serde_json::from_str(&seen[0].body).unwrap();
    assert_eq!(body, patch);

    // A failed write is not remembered as a sync.
    let failed = apply_action(
        &api.client(),
        &ControllerMetrics::default(),
        Action::PatchNodeStatus {
            node: "other".into(),
            patch,
            reason: "test".into(),
        },
    )
    .await;
    assert!(failed.is_none());
}

#[tokio::test]
async fn the_elector_creates_the_lease_then_renews_it_and_yields_to_a_live_holder() {
    let lease_path =
        "/apis/coordination.k8s.io/v1/namespaces/koordinator-system/leases/koordinator-manager";
    let stored: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    let state = Arc::clone(&stored);
    let api = RecordingApi::start(Box::new(move |method, path, body| {
        let mut lease = state.lock().unwrap();
        match (method, path) {
            ("GET", p) if p == lease_path => match lease.as_ref() {
                Some(value) => (200, value.to_string()),
                None => not_found(),
            },
            ("POST", "/apis/coordination.k8s.io/v1/namespaces/koordinator-system/leases")
            | ("PUT", _) => {
                let mut value: Value = serde_json::from_str(body).unwrap();
                value["metadata"]["resourceVersion"] = json!("1");
                *lease = Some(value.clone());
                (if method == "POST" { 201 } else { 200 }, value.to_string())
            }
            _ => not_found(),
        }
    }));
    let elector = LeaderElector::new(
        api.client(),
        "koordinator-system",
        "koordinator-manager",
        "me".into(),
        LeaseTiming::default(),
    );
    assert!(elector.try_acquire_or_renew().await.unwrap());
    let created: Value = serde_json::from_str(&api.seen()[1].body).unwrap();
    assert_eq!(api.seen()[1].method, "POST");
    assert_eq!(created["spec"]["holderIdentity"], "me");
    assert_eq!(created["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(created["spec"]["leaseTransitions"], 0);

    assert!(elector.try_acquire_or_renew().await.unwrap());
    let renewal = api.seen().last().unwrap().clone();
    assert_eq!(renewal.method, "PUT");
    let renewed: Value = serde_json::from_str(&renewal.body).unwrap();
    assert_eq!(renewed["metadata"]["resourceVersion"], "1");

    // Another replica holding a fresh lease keeps it.
    let other = LeaderElector::new(
        api.client(),
        "koordinator-system",
        "koordinator-manager",
        "other".into(),
        LeaseTiming::default(),
    );
    let writes_before = api.seen().iter().filter(|s| s.method != "GET").count();
    assert!(!other.try_acquire_or_renew().await.unwrap());
    let writes_after = api.seen().iter().filter(|s| s.method != "GET").count();
    assert_eq!(writes_before, writes_after);
}
