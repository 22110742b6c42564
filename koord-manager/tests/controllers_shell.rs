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
use koord_common::leader::{LeaderElector, LeaseTiming};
use koord_manager::controllers::{
    Action, Caches, ClusterView, ControllerArgs, Enabled, PassPlan, Reconciler, apply_action, gate,
    plan_pass, write_lanes,
};
use koord_manager::metrics::ControllerMetrics;
use koord_manager::slo_controller::config::ConfigState;
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
        let target = words.next().unwrap_or_default().to_owned();
        let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
        let path = path.to_owned();
        if query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
        {
            // A watch: open an event stream that never sends anything, and
            // hold it until the client goes away.
            seen.lock().unwrap().push(Seen {
                method,
                path,
                content_type,
                body,
            });
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
            if writer.write_all(head.as_bytes()).is_err() {
                return;
            }
            let mut buf = [0u8; 64];
            while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
            return;
        }
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
    let PassPlan {
        actions,
        computed,
        refused,
        ..
    } = plan_pass(
        &view,
        &colocation_config(),
        Enabled::ALL,
        &HashMap::new(),
        now,
    );
    assert_eq!(computed.len(), 2);
    assert!(refused.is_empty(), "{refused:?}");
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

    // With only the node-resource controller on, nothing else is written
    // (its plugins write the status and the ratio annotations).
    let only_resources = Enabled {
        node_slo: false,
        node_metric: false,
        node_resource: true,
        quota_profile: false,
    };
    let actions = plan_pass(
        &view,
        &colocation_config(),
        only_resources,
        &HashMap::new(),
        now,
    )
    .actions;
    assert!(actions.iter().all(|a| matches!(
        a,
        Action::PatchNodeStatus { .. } | Action::PatchNodeMeta { .. }
    )));
    // Upstream's defaults: CPU normalization off, so every colocated node
    // gets the neutral ratio; no amplification ratio.
    let meta = actions
        .iter()
        .find_map(|a| match a {
            Action::PatchNodeMeta { node, patch, .. } if node == "worker" => Some(patch),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ratio patch: {actions:?}"));
    assert_eq!(
        meta,
        &json!({"metadata": {"annotations": {"node.koordinator.sh/cpu-normalization-ratio": "1.00"}}})
    );
}

#[test]
fn a_pass_writes_every_node_status_before_the_node_patches_and_other_kinds_beside_them() {
    let status = |node: &str| Action::PatchNodeStatus {
        node: node.into(),
        patch: json!({"status": {}}),
        reason: "batch".into(),
    };
    let meta = |node: &str| Action::PatchNodeMeta {
        node: node.into(),
        patch: json!({"metadata": {}}),
        reason: "ratio".into(),
    };
    // The plan's order: node by node.
    let actions = vec![
        Action::DeleteNodeSlo("a".into()),
        meta("a"),
        status("a"),
        Action::DeleteNodeMetric("a".into()),
        Action::DeleteNodeSlo("b".into()),
        meta("b"),
        status("b"),
    ];
    let lanes = write_lanes(actions);
    assert_eq!(
        lanes,
        vec![
            vec![status("a"), status("b"), meta("a"), meta("b")],
            vec![
                Action::DeleteNodeSlo("a".into()),
                Action::DeleteNodeSlo("b".into())
            ],
            vec![Action::DeleteNodeMetric("a".into())],
        ]
    );
    assert!(write_lanes(Vec::new()).is_empty());
}

fn metric_with(name: &str, now: SystemTime, status: Value) -> NodeMetric {
    let mut metric = fresh_metric(name, now);
    let mut value = serde_json::to_value(&metric).unwrap();
    for (key, field) in status.as_object().unwrap() {
        value["status"][key] = field.clone();
    }
    metric = serde_json::from_value(value).unwrap();
    metric
}

#[test]
fn bad_usage_or_duplicate_inputs_leave_the_node_status_alone() {
    let now = SystemTime::now();
    let usage = |cpu: &str| json!({"nodeMetric": {"systemUsage": {"resources": {"cpu": cpu, "memory": "0"}}}});
    let pod_metric = |cpu: &str| json!({"namespace": "d", "name": "web", "podUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}});
    let view = ClusterView {
        nodes: vec![
            Arc::new(node("good", "uid-1")),
            Arc::new(node("negative", "uid-2")),
            Arc::new(node("unreadable", "uid-3")),
            Arc::new(node("overflow", "uid-4")),
            Arc::new(node("twice", "uid-5")),
            Arc::new(node("metric-twice", "uid-6")),
        ],
        node_metrics: vec![
            Arc::new(metric_with("good", now, usage("1"))),
            // Negative usage would lend more than the node has.
            Arc::new(metric_with("negative", now, usage("-4"))),
            Arc::new(metric_with("unreadable", now, usage("four"))),
            Arc::new(metric_with("overflow", now, usage("1E"))),
            Arc::new(fresh_metric("twice", now)),
            // The same pod reported twice with different usage.
            Arc::new(metric_with(
                "metric-twice",
                now,
                json!({"podsMetric": [pod_metric("3"), pod_metric("1")]}),
            )),
        ],
        ..Default::default()
    };
    let mut view = view;
    // The same Node object twice in the input.
    view.nodes.push(Arc::new(node("twice", "uid-5b")));
    let plan = plan_pass(
        &view,
        &colocation_config(),
        Enabled::ALL,
        &HashMap::new(),
        now,
    );
    let actions = plan.actions;
    let patched: Vec<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::PatchNodeStatus { node, .. } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(patched, ["good"], "{actions:?}");
    // Each refusal names the node and why.
    let mut refused: Vec<(String, String)> = plan
        .refused
        .iter()
        .map(|r| (r.node.clone().unwrap_or_default(), r.reason.clone()))
        .collect();
    refused.sort();
    let expect = [
        ("metric-twice", "pod d/web is reported more than once"),
        (
            "negative",
            "systemUsage.resources.cpu: negative amount \"-4\"",
        ),
        (
            "overflow",
            "systemUsage.resources.cpu: invalid quantity \"1E\": beyond the 64-bit range",
        ),
        ("twice", "Node twice appears more than once"),
        (
            "unreadable",
            "systemUsage.resources.cpu: invalid quantity \"four\"",
        ),
    ];
    assert_eq!(refused.len(), expect.len(), "{refused:?}");
    for ((node, reason), (want_node, want)) in refused.iter().zip(expect) {
        assert_eq!(node, want_node);
        assert!(reason.contains(want), "{node}: {reason}");
    }
}

fn config_data(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// What a pass writes to Nodes, NodeSLOs and NodeMetrics.
fn slo_writes(actions: &[Action]) -> Vec<&Action> {
    actions
        .iter()
        .filter(|a| {
            !matches!(
                a,
                Action::LabelProfile { .. } | Action::CreateQuota(_) | Action::ReplaceQuota(_)
            )
        })
        .collect()
}

#[test]
fn nothing_is_planned_for_a_config_section_never_seen_valid() {
    let now = SystemTime::now();
    let view = ClusterView {
        nodes: vec![Arc::new(node("worker", "uid-1"))],
        node_metrics: vec![
            Arc::new(fresh_metric("worker", now)),
            Arc::new(fresh_metric("gone", now)),
        ],
        node_slos: vec![Arc::new(NodeSLO::new("gone", Default::default()))],
        ..Default::default()
    };
    let plan = |state: &ConfigState| {
        let (enabled, paused) = gate(Enabled::ALL, state);
        let actions = plan_pass(&view, state.current(), enabled, &HashMap::new(), now).actions;
        (actions, paused)
    };

    // Before the ConfigMap is read, no controller acts.
    let fresh = ConfigState::default();
    let (actions, paused) = plan(&fresh);
    assert!(slo_writes(&actions).is_empty(), "{actions:?}");
    let names: Vec<&str> = paused.iter().map(|p| p.controller).collect();
    assert_eq!(names, ["nodeslo", "nodemetric", "noderesource"]);

    // A restart with an invalid colocation-config: the NodeMetric and node
    // resource controllers hold back (no withdrawal of the node's batch-cpu,
    // no orphan clean-up); the NodeSLO controller runs, as upstream's does.
    let mut state = ConfigState::default();
    state.offer(Some(&config_data(&[(
        "colocation-config",
        r#"{"enable": true,"#,
    )])));
    let (actions, paused) = plan(&state);
    let names: Vec<&str> = paused.iter().map(|p| p.controller).collect();
    assert_eq!(names, ["nodemetric", "noderesource"]);
    assert!(
        paused[0].reason.contains("colocation-config"),
        "{}",
        paused[0].reason
    );
    assert!(
        actions
            .iter()
            .all(|a| matches!(a, Action::CreateNodeSlo(_) | Action::DeleteNodeSlo(_))),
        "{actions:?}"
    );
    assert!(actions.contains(&Action::DeleteNodeSlo("gone".into())));

    // Once it is valid, everything runs: the node status and the orphan
    // NodeMetric are written.
    state.offer(Some(&config_data(&[(
        "colocation-config",
        r#"{"enable": true}"#,
    )])));
    let (actions, paused) = plan(&state);
    assert!(paused.is_empty(), "{paused:?}");
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::PatchNodeStatus { node, .. } if node == "worker"))
    );
    assert!(actions.contains(&Action::DeleteNodeMetric("gone".into())));

    // A later invalid version keeps the last valid one in force.
    state.offer(Some(&config_data(&[("colocation-config", "{not json")])));
    let (_, paused) = plan(&state);
    assert!(paused.is_empty(), "{paused:?}");
    assert_eq!(
        state.current().colocation.as_ref().unwrap().strategy.enable,
        Some(true)
    );
}

fn list(kind: &str, api_version: &str, items: Value) -> String {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items})
        .to_string()
}

/// A cluster with one node (carrying batch-cpu), its fresh NodeMetric, no
/// NodeSLO, and `colocation` as the ConfigMap's `colocation-config`.
fn cluster(colocation: &'static str) -> RecordingApi {
    let metric = serde_json::to_value(fresh_metric("worker", SystemTime::now())).unwrap();
    cluster_with(colocation, metric)
}

/// [`cluster`] with the given NodeMetric for the worker.
fn cluster_with(colocation: &'static str, metric: Value) -> RecordingApi {
    // Listed at version 10; every write answers with version 11, which the
    // watch never delivers (a cache lagging behind the API server).
    let mut listed = node("worker", "uid-1");
    listed.metadata.resource_version = Some("10".into());
    let worker = serde_json::to_string(&listed).unwrap();
    let mut written = listed.clone();
    written.metadata.resource_version = Some("11".into());
    let written = serde_json::to_string(&written).unwrap();
    RecordingApi::start(Box::new(move |method, path, body| match (method, path) {
        ("GET", "/api/v1/nodes") => (
            200,
            list(
                "NodeList",
                "v1",
                json!([serde_json::from_str::<Value>(&worker).unwrap()]),
            ),
        ),
        ("GET", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics") => (
            200,
            list(
                "NodeMetricList",
                "slo.koordinator.sh/v1alpha1",
                json!([metric]),
            ),
        ),
        ("GET", "/apis/slo.koordinator.sh/v1alpha1/nodeslos") => (
            200,
            list("NodeSLOList", "slo.koordinator.sh/v1alpha1", json!([])),
        ),
        ("GET", "/api/v1/pods") => (200, list("PodList", "v1", json!([]))),
        ("GET", "/api/v1/namespaces/koordinator-system/configmaps") => (
            200,
            list(
                "ConfigMapList",
                "v1",
                json!([{
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system",
                                 "resourceVersion": "7", "uid": "cm-uid"},
                    "data": {"colocation-config": colocation},
                }]),
            ),
        ),
        ("GET", "/apis/quota.koordinator.sh/v1alpha1/elasticquotaprofiles") => (
            200,
            list(
                "ElasticQuotaProfileList",
                "quota.koordinator.sh/v1alpha1",
                json!([]),
            ),
        ),
        ("GET", "/apis/scheduling.sigs.k8s.io/v1alpha1/elasticquotas") => (
            200,
            list(
                "ElasticQuotaList",
                "scheduling.sigs.k8s.io/v1alpha1",
                json!([]),
            ),
        ),
        ("PATCH", "/api/v1/nodes/worker/status" | "/api/v1/nodes/worker") => (200, written.clone()),
        ("POST", _) => (201, body.to_owned()),
        _ => not_found(),
    }))
}

fn controller_args() -> ControllerArgs {
    ControllerArgs {
        enable_leader_election: false,
        leader_election_namespace: "koordinator-system".into(),
        leader_elect_resource_lock: "leases".into(),
        config_namespace: "koordinator-system".into(),
        slo_config_name: "slo-controller-config".into(),
        node_strategy_name_need_check: "false".into(),
        sync_period: Duration::from_secs(60),
        controllers: vec!["*".into()],
        noderesource_plugins: None,
        sync_gpu_shared_resource: false,
    }
}

/// Starts the caches on `api` and waits for them; a reconciler beside them.
async fn started(api: &RecordingApi) -> (Caches, Reconciler) {
    let client = api.client();
    let args = controller_args();
    let notify = Arc::new(tokio::sync::Notify::new());
    let caches = Caches::start(&client, &args, &notify);
    tokio::time::timeout(Duration::from_secs(30), caches.wait_until_ready())
        .await
        .expect("caches sync")
        .unwrap();
    let reconciler = Reconciler::new(client, args, ControllerMetrics::default());
    (caches, reconciler)
}

/// [`started`], then one pass.
async fn one_pass(api: &RecordingApi) -> Reconciler {
    let (caches, mut reconciler) = started(api).await;
    reconciler.pass(&caches).await;
    reconciler
}

fn writes(api: &RecordingApi) -> Vec<Seen> {
    api.seen()
        .into_iter()
        .filter(|s| s.method != "GET")
        .collect()
}

#[tokio::test]
async fn a_restart_with_an_invalid_colocation_config_writes_no_node_or_node_metric() {
    let api = cluster(r#"{"enable": true,"#);
    let reconciler = one_pass(&api).await;
    let paused: Vec<&str> = reconciler.paused().iter().map(|p| p.controller).collect();
    assert_eq!(paused, ["nodemetric", "noderesource"]);
    let writes = writes(&api);
    // Neither the node status (its batch-cpu would be withdrawn under the
    // defaults) nor any NodeMetric is touched.
    assert!(
        writes
            .iter()
            .all(|w| !w.path.starts_with("/api/v1/nodes") && !w.path.contains("/nodemetrics")),
        "{writes:?}"
    );
    // The NodeSLO controller reads other keys and runs, as upstream's does.
    assert!(
        writes
            .iter()
            .any(|w| w.method == "POST" && w.path.ends_with("/nodeslos")),
        "{writes:?}"
    );
    // A Warning Event on the ConfigMap says why.
    let event = writes
        .iter()
        .find(|w| {
            w.path
                .starts_with("/apis/events.k8s.io/v1/namespaces/koordinator-system/events")
        })
        .unwrap_or_else(|| panic!("no event: {writes:?}"));
    let event: Value = serde_json::from_str(&event.body).unwrap();
    assert_eq!(event["reason"], "InvalidConfig");
    assert_eq!(event["regarding"]["name"], "slo-controller-config");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.contains("colocation-config") && note.contains("noderesource"),
        "{note}"
    );
}

#[tokio::test]
async fn a_start_with_a_valid_colocation_config_writes_the_node_status() {
    let api = cluster(r#"{"enable": true}"#);
    let reconciler = one_pass(&api).await;
    assert!(reconciler.paused().is_empty());
    let writes = writes(&api);
    let patch = writes
        .iter()
        .find(|w| w.method == "PATCH" && w.path == "/api/v1/nodes/worker/status")
        .unwrap_or_else(|| panic!("no status patch: {writes:?}"));
    let body: Value = serde_json::from_str(&patch.body).unwrap();
    assert_eq!(
        body["status"]["allocatable"]["kubernetes.io/batch-cpu"],
        "6k"
    );
    assert!(
        body["metadata"]["annotations"]["node.koordinator.sh/originExtendedAllocatable"]
            .is_string(),
        "{body}"
    );
    assert!(
        !writes
            .iter()
            .any(|w| w.path.starts_with("/apis/events.k8s.io")),
        "{writes:?}"
    );
}

#[tokio::test]
async fn a_pass_does_not_repeat_a_node_write_its_cache_has_not_shown_yet() {
    let api = cluster(r#"{"enable": true}"#);
    let (caches, mut reconciler) = started(&api).await;
    let node_writes = |api: &RecordingApi| {
        writes(api)
            .into_iter()
            .filter(|w| w.path.starts_with("/api/v1/nodes/worker"))
            .count()
    };
    reconciler.pass(&caches).await;
    let first = node_writes(&api);
    assert!(first >= 1, "{:?}", writes(&api));
    // The cache still holds version 10, planned from before the write: the
    // node would look as if it still needed its batch resources.
    reconciler.pass(&caches).await;
    assert_eq!(node_writes(&api), first, "{:?}", writes(&api));
}

#[tokio::test]
async fn negative_usage_leaves_the_node_status_alone_with_an_event_on_the_node() {
    let metric = metric_with(
        "worker",
        SystemTime::now(),
        json!({"nodeMetric": {"systemUsage": {"resources": {"cpu": "-4", "memory": "0"}}}}),
    );
    let api = cluster_with(r#"{"enable": true}"#, serde_json::to_value(metric).unwrap());
    let _reconciler = one_pass(&api).await;
    let writes = writes(&api);
    // The status is left alone; the ratio annotations do not read the
    // refused amounts and are still written.
    assert!(
        !writes
            .iter()
            .any(|w| w.path.starts_with("/api/v1/nodes") && w.path != "/api/v1/nodes/worker"),
        "{writes:?}"
    );
    for write in writes.iter().filter(|w| w.path == "/api/v1/nodes/worker") {
        let body: Value = serde_json::from_str(&write.body).unwrap();
        let annotations = body["metadata"]["annotations"].as_object().unwrap();
        assert!(
            annotations.keys().all(|k| k.ends_with("-ratio")) && body.get("status").is_none(),
            "{body}"
        );
    }
    let event = writes
        .iter()
        .find(|w| w.path.starts_with("/apis/events.k8s.io"))
        .unwrap_or_else(|| panic!("no event: {writes:?}"));
    let event: Value = serde_json::from_str(&event.body).unwrap();
    assert_eq!(event["reason"], "InvalidInput");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["kind"], "Node");
    assert_eq!(event["regarding"]["name"], "worker");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.contains("NodeMetric worker")
            && note.contains("systemUsage.resources.cpu: negative amount"),
        "{note}"
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

/// A NodeResourceTopology as koordlet reports it: two NUMA zones of 5 CPUs
/// and 5Gi each.
fn topology(name: &str, resource_version: &str) -> apis::topology::v1alpha1::NodeResourceTopology {
    let zones: Vec<Value> = [0, 1]
        .iter()
        .map(|i| {
            json!({
                "name": format!("node-{i}"), "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": "5", "allocatable": "5", "available": "5"},
                    {"name": "memory", "capacity": "5Gi", "allocatable": "5Gi", "available": "5Gi"},
                ],
            })
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
        "metadata": {"name": name, "resourceVersion": resource_version},
        "topologyPolicies": ["None"],
        "zones": zones,
    }))
    .unwrap()
}

fn zone_patches(actions: &[Action]) -> Vec<(&str, &Value)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::PatchTopologyZones { node, patch, .. } => Some((node.as_str(), patch)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_pass_writes_numa_zone_batch_resources_once() {
    use koord_manager::controllers::{PassSettings, plan_pass_with};
    use koord_manager::slo_controller::node_meta::NodeResourcePlugins;

    let now = SystemTime::now();
    let mut view = ClusterView {
        nodes: vec![Arc::new(node("worker", "uid-1"))],
        node_metrics: vec![Arc::new(fresh_metric("worker", now))],
        topologies: vec![Arc::new(topology("worker", "9"))],
        ..Default::default()
    };
    let only_resources = Enabled {
        node_slo: false,
        node_metric: false,
        node_resource: true,
        quota_profile: false,
    };
    let settings = PassSettings::default();
    let plan = plan_pass_with(
        &view,
        &colocation_config(),
        only_resources,
        &settings,
        &HashMap::new(),
        now,
    );
    let patches = zone_patches(&plan.actions);
    assert_eq!(patches.len(), 1, "{:?}", plan.actions);
    let (patched, patch) = patches[0];
    assert_eq!(patched, "worker");
    // Guarded by the cached version: a concurrent koordlet write conflicts.
    assert_eq!(patch["metadata"]["resourceVersion"], "9");
    // Each zone: 5 CPUs - 40% margin (default cpuReclaimThresholdPercent 60).
    for zone in patch["zones"].as_array().unwrap() {
        let resources = zone["resources"].as_array().unwrap();
        let names: Vec<&str> = resources
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "cpu",
                "kubernetes.io/batch-cpu",
                "kubernetes.io/batch-memory",
                "memory"
            ]
        );
        let batch_cpu = &resources[1];
        for field in ["capacity", "allocatable", "available"] {
            assert_eq!(batch_cpu[field], "3k", "{zone}");
        }
        assert_eq!(
            resources[0]["allocatable"], "5",
            "koordlet's resources stay"
        );
    }

    // Once written (and remembered), the same values are not written again.
    let mut written = topology("worker", "10");
    written.zones = serde_json::from_value(patch["zones"].clone()).unwrap();
    view.topologies = vec![Arc::new(written)];
    let settings = PassSettings {
        topology_last_synced: HashMap::from([("worker".to_owned(), now)]),
        ..PassSettings::default()
    };
    let plan = plan_pass_with(
        &view,
        &colocation_config(),
        only_resources,
        &settings,
        &HashMap::new(),
        now,
    );
    assert!(zone_patches(&plan.actions).is_empty(), "{:?}", plan.actions);

    // BatchResource off: the zones are not the manager's to write.
    let view = ClusterView {
        nodes: vec![Arc::new(node("worker", "uid-1"))],
        node_metrics: vec![Arc::new(fresh_metric("worker", now))],
        topologies: vec![Arc::new(topology("worker", "9"))],
        ..Default::default()
    };
    let without_batch = PassSettings {
        plugins: NodeResourcePlugins::from_flag(Some(&[
            "*".to_owned(),
            "-BatchResource".to_owned(),
        ])),
        ..PassSettings::default()
    };
    let plan = plan_pass_with(
        &view,
        &colocation_config(),
        only_resources,
        &without_batch,
        &HashMap::new(),
        now,
    );
    assert!(zone_patches(&plan.actions).is_empty(), "{:?}", plan.actions);

    // An unreadable zone amount: the zones are refused and named; the node
    // status is still written.
    let mut broken = topology("worker", "9");
    broken.zones[1].resources.as_mut().unwrap()[0].allocatable =
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("five".into());
    let view = ClusterView {
        topologies: vec![Arc::new(broken)],
        ..view
    };
    let plan = plan_pass_with(
        &view,
        &colocation_config(),
        only_resources,
        &PassSettings::default(),
        &HashMap::new(),
        now,
    );
    assert!(zone_patches(&plan.actions).is_empty());
    assert!(
        plan.actions
            .iter()
            .any(|a| matches!(a, Action::PatchNodeStatus { node, .. } if node == "worker"))
    );
    assert_eq!(plan.refused.len(), 1, "{:?}", plan.refused);
    let reason = &plan.refused[0].reason;
    assert!(
        reason.contains("NodeResourceTopology worker")
            && reason.contains("zones[1](node-1).resources.allocatable.cpu")
            && reason.contains("NUMA-zone batch resources are left as they are"),
        "{reason}"
    );
}

#[tokio::test]
async fn topology_zones_are_written_as_a_merge_patch_of_the_object() {
    use koord_manager::controllers::{Synced, apply_action_synced};

    let path = "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies/worker";
    let api = RecordingApi::start(Box::new(move |method, request, _| {
        if method == "PATCH" && request == path {
            (
                200,
                serde_json::to_string(&topology("worker", "10")).unwrap(),
            )
        } else if method == "PATCH" {
            (
                409,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409})
                    .to_string(),
            )
        } else {
            not_found()
        }
    }));
    let patch = json!({"metadata": {"resourceVersion": "9"}, "zones": []});
    let action = |node: &str| Action::PatchTopologyZones {
        node: node.into(),
        patch: patch.clone(),
        reason: "test".into(),
    };
    let written = apply_action_synced(
        &api.client(),
        &ControllerMetrics::default(),
        action("worker"),
    )
    .await;
    assert!(
        matches!(&written, Some(Synced::TopologyZones { node, .. }) if node == "worker"),
        "{written:?}"
    );
    let seen = api.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].path, path);
    assert_eq!(seen[0].content_type, "application/merge-patch+json");
    assert_eq!(serde_json::from_str::<Value>(&seen[0].body).unwrap(), patch);

    // A conflict (koordlet wrote meanwhile) is not remembered as a sync.
    let conflicted = apply_action_synced(
        &api.client(),
        &ControllerMetrics::default(),
        action("other"),
    )
    .await;
    assert_eq!(conflicted, None);
}

#[test]
fn the_topology_cache_keeps_zones_version_and_cpu_basic_info_only() {
    let mut cached = topology("worker", "9");
    cached.metadata.annotations = Some(
        [
            (
                "node.koordinator.sh/cpu-basic-info",
                "{\"cpuModel\":\"Xeon\"}",
            ),
            ("node.koordinator.sh/cpu-topology", "{\"detail\":[]}"),
            ("node.koordinator.sh/pod-cpu-allocs", "[]"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    cached.metadata.managed_fields = Some(vec![Default::default()]);
    let zones = cached.zones.clone();
    koord_manager::controllers::trim_topology(&mut cached);
    let keys: Vec<&String> = cached
        .metadata
        .annotations
        .as_ref()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["node.koordinator.sh/cpu-basic-info"]);
    assert_eq!(cached.metadata.managed_fields, None);
    assert_eq!(cached.metadata.resource_version.as_deref(), Some("9"));
    assert_eq!(cached.zones, zones);
}

/// A Device for `name`: two healthy 16 GiB GPUs, one unhealthy, one
/// healthy RDMA NIC, labelled as an NVIDIA A100 node.
fn gpu_device(name: &str) -> apis::scheduling::v1alpha1::Device {
    let gpu = |minor: i32, health: bool| {
        json!({"type": "gpu", "id": format!("GPU-{minor}"), "minor": minor, "health": health,
               "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi",
                             "koordinator.sh/gpu-memory-ratio": "100"}})
    };
    serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
        "metadata": {"name": name, "labels": {
            "node.koordinator.sh/gpu-vendor": "nvidia", "node.koordinator.sh/gpu-model": "A100"}},
        "spec": {"devices": [gpu(0, true), gpu(1, true), gpu(2, false),
                             {"type": "rdma", "id": "0000:1f:00.0", "minor": 0, "health": true}]}
    }))
    .unwrap()
}

/// RFC 7386 merge patch, for applying the planned writes to a node.
fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge_patch(target.entry(key.clone()).or_insert(json!({})), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

fn node_writes(actions: &[Action], name: &str) -> (Option<Value>, Option<Value>) {
    let mut status = None;
    let mut meta = None;
    for action in actions {
        match action {
            Action::PatchNodeStatus { node, patch, .. } if node == name => {
                status = Some(patch.clone())
            }
            Action::PatchNodeMeta { node, patch, .. } if node == name => meta = Some(patch.clone()),
            _ => {}
        }
    }
    (status, meta)
}

#[test]
fn a_pass_turns_the_device_into_node_resources_and_labels_and_resets_them_when_it_goes() {
    let now = SystemTime::now();
    let only_resources = Enabled {
        node_slo: false,
        node_metric: false,
        node_resource: true,
        quota_profile: false,
    };
    let mut view = ClusterView {
        nodes: vec![Arc::new(node("worker", "uid-1"))],
        node_metrics: vec![Arc::new(fresh_metric("worker", now))],
        devices: Some(vec![Arc::new(gpu_device("worker"))]),
        ..Default::default()
    };
    let plan = plan_pass(
        &view,
        &colocation_config(),
        only_resources,
        &HashMap::new(),
        now,
    );
    assert!(plan.refused.is_empty(), "{:?}", plan.refused);
    assert_eq!(
        plan.plugin_runs,
        [("GPUDeviceResource", true), ("RDMADeviceResource", true)]
    );
    let (status, meta) = node_writes(&plan.actions, "worker");
    let status = status.expect("the status is written");
    for list in ["allocatable", "capacity"] {
        let resources = &status["status"][list];
        // Two healthy GPUs of three; nvidia.com/gpu is the device plugin's.
        assert_eq!(resources["koordinator.sh/gpu-core"], "200", "{status}");
        assert_eq!(resources["koordinator.sh/gpu-memory-ratio"], "200");
        assert_eq!(resources["koordinator.sh/gpu-memory"], "32Gi");
        assert_eq!(resources["koordinator.sh/gpu"], "200");
        assert_eq!(resources["koordinator.sh/rdma"], "100");
        assert_eq!(resources["kubernetes.io/batch-cpu"], "6k");
        assert!(resources.get("nvidia.com/gpu").is_none());
        // gpu.shared only with EnableSyncGPUSharedResource.
        assert!(resources.get("koordinator.sh/gpu.shared").is_none());
    }
    let meta = meta.expect("labels are written");
    assert_eq!(
        meta["metadata"]["labels"],
        json!({"node.koordinator.sh/gpu-vendor": "nvidia", "node.koordinator.sh/gpu-model": "A100"})
    );

    // Applied (and remembered), nothing more is due.
    let mut settled = serde_json::to_value(&*view.nodes[0]).unwrap();
    merge_patch(&mut settled, &status);
    merge_patch(&mut settled, &meta);
    let settled: Node = serde_json::from_value(settled).unwrap();
    view.nodes = vec![Arc::new(settled.clone())];
    let synced = HashMap::from([("worker".to_owned(), now)]);
    let plan = plan_pass(&view, &colocation_config(), only_resources, &synced, now);
    assert_eq!(node_writes(&plan.actions, "worker"), (None, None));

    // The Device cache not synced yet: the node is left as it is.
    view.devices = None;
    let plan = plan_pass(&view, &colocation_config(), only_resources, &synced, now);
    assert_eq!(node_writes(&plan.actions, "worker"), (None, None));
    assert!(plan.plugin_runs.is_empty());

    // The Device deleted: every GPU resource and rdma go; the labels stay.
    view.devices = Some(Vec::new());
    let plan = plan_pass(&view, &colocation_config(), only_resources, &synced, now);
    let (status, meta) = node_writes(&plan.actions, "worker");
    let status = status.expect("the resources are reset");
    for name in [
        "koordinator.sh/gpu-core",
        "koordinator.sh/gpu-memory",
        "koordinator.sh/gpu-memory-ratio",
        "koordinator.sh/gpu",
        "koordinator.sh/rdma",
    ] {
        assert_eq!(
            status["status"]["allocatable"][name],
            Value::Null,
            "{status}"
        );
        assert!(
            status["status"]["allocatable"].get(name).is_some(),
            "{name} not removed"
        );
    }
    assert_eq!(meta, None);

    // Colocation off for the cluster: batch goes, devices are left alone.
    let off = SloControllerConfig::from_configmap_data(
        &[(
            "colocation-config".to_owned(),
            r#"{"enable": false}"#.to_owned(),
        )]
        .into_iter()
        .collect(),
    )
    .unwrap();
    let plan = plan_pass(&view, &off, only_resources, &synced, now);
    let (status, _) = node_writes(&plan.actions, "worker");
    let status = status.expect("batch is withdrawn");
    assert!(
        status["status"]["allocatable"]
            .get("koordinator.sh/gpu-core")
            .is_none()
    );
    assert!(plan.plugin_runs.is_empty());

    // Batch inputs refused: the device resources are still written alone.
    view.nodes = vec![Arc::new(node("worker", "uid-1"))];
    view.node_metrics = vec![Arc::new(metric_with(
        "worker",
        now,
        json!({"nodeMetric": {"systemUsage": {"resources": {"cpu": "-4", "memory": "0"}}}}),
    ))];
    view.devices = Some(vec![Arc::new(gpu_device("worker"))]);
    let plan = plan_pass(
        &view,
        &colocation_config(),
        only_resources,
        &HashMap::new(),
        now,
    );
    assert_eq!(plan.refused.len(), 1, "{:?}", plan.refused);
    let (status, _) = node_writes(&plan.actions, "worker");
    let status = status.expect("device resources are written");
    assert_eq!(
        status["status"]["allocatable"]["koordinator.sh/gpu-core"],
        "200"
    );
    assert!(
        status["status"]["allocatable"]
            .get("kubernetes.io/batch-cpu")
            .is_none()
    );

    // A Device with an unreadable amount: the GPU plugin fails, named on
    // the node; RDMA still runs.
    let mut broken = gpu_device("worker");
    broken.spec.devices.as_mut().unwrap()[0]
        .resources
        .as_mut()
        .unwrap()
        .insert(
            "koordinator.sh/gpu-core".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()),
        );
    view.node_metrics = vec![Arc::new(fresh_metric("worker", now))];
    view.devices = Some(vec![Arc::new(broken)]);
    let plan = plan_pass(
        &view,
        &colocation_config(),
        only_resources,
        &HashMap::new(),
        now,
    );
    assert_eq!(
        plan.plugin_runs,
        [("GPUDeviceResource", false), ("RDMADeviceResource", true)]
    );
    assert!(
        plan.refused[0]
            .reason
            .contains("spec.devices[0].resources[koordinator.sh/gpu-core]"),
        "{:?}",
        plan.refused
    );
    let (status, meta) = node_writes(&plan.actions, "worker");
    let status = status.unwrap();
    assert!(
        status["status"]["allocatable"]
            .get("koordinator.sh/gpu-core")
            .is_none()
    );
    assert_eq!(
        status["status"]["allocatable"]["koordinator.sh/rdma"],
        "100"
    );
    assert!(meta.unwrap()["metadata"].get("labels").is_none());
}
