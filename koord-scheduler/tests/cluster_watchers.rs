#![allow(clippy::unwrap_used)]
//! The cluster-mode watchers against a fake API server: lists and watch
//! events of Nodes, Pods and NodeMetrics reach the cache that `/filter`
//! reads, readiness follows the node and pod lists, and a bound pod that
//! the watch never confirms is released by the housekeeping, also on a
//! replica that does not hold the leader Lease.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use apis::extension::quantity::QuantityValue;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_common::Shutdown;
use koord_common::health::StatusCheck;
use koord_common::leader::Leadership;
use koord_common::testing::FakeApiServer;
use koord_scheduler::cluster::{KubeBinder, start_gated_housekeeping, start_watchers};
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::extender::{ExtenderMetrics, ExtenderState};
use koord_scheduler::framework::SharedScheduler;
use serde_json::{Value, json};

const NODES: &str = "/api/v1/nodes";
const PODS: &str = "/api/v1/pods";
const NODE_METRICS: &str = "/apis/slo.koordinator.sh/v1alpha1/nodemetrics";
const WAIT: Duration = Duration::from_secs(60);

fn rfc3339(time: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .unwrap()
        .to_string()
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "10"},
        "status": {"allocatable": {"cpu": "10", "memory": "10Gi", "pods": "110",
            "kubernetes.io/batch-cpu": "4000", "kubernetes.io/batch-memory": "8Gi"}}
    })
}

fn batch_pod(name: &str, batch_cpu: &str, node: Option<&str>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "resourceVersion": "20", "labels": {"koordinator.sh/qosClass": "BE"}},
        "spec": {"priority": 5500, "containers": [{"name": "main", "resources": {
            "requests": {"kubernetes.io/batch-cpu": batch_cpu, "kubernetes.io/batch-memory": "1Gi"},
            "limits": {"kubernetes.io/batch-cpu": batch_cpu, "kubernetes.io/batch-memory": "1Gi"}}}]},
        "status": {"phase": "Pending"}
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
        pod["status"]["phase"] = json!("Running");
    }
    pod
}

fn node_metric(name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": name, "resourceVersion": "30"},
        "spec": {},
        "status": {"updateTime": rfc3339(SystemTime::now() - Duration::from_secs(5)),
                   "nodeMetric": {"nodeUsage": {"resources": {"cpu": cpu, "memory": "1Gi"}}}}
    })
}

/// A fake API server holding n1..n3 (n1 nearly full of a bound pod, n2 busy
/// by its NodeMetric), the pending `batch-job`, and open watches.
fn cluster() -> FakeApiServer {
    let api = FakeApiServer::start().unwrap();
    api.respond(
        "GET",
        NODES,
        200,
        &common::list("NodeList", "v1", vec![node("n1"), node("n2"), node("n3")]),
    );
    api.respond(
        "GET",
        PODS,
        200,
        &common::list(
            "PodList",
            "v1",
            vec![
                batch_pod("filler", "3500", Some("n1")),
                batch_pod("batch-job", "1000", None),
            ],
        ),
    );
    api.respond(
        "GET",
        NODE_METRICS,
        200,
        &common::list(
            "NodeMetricList",
            "slo.koordinator.sh/v1alpha1",
            vec![
                node_metric("n1", "1"),
                node_metric("n2", "9"),
                node_metric("n3", "1"),
            ],
        ),
    );
    for path in [NODES, PODS, NODE_METRICS] {
        api.respond_watch(path);
    }
    api
}

struct Extender {
    addr: SocketAddr,
    scheduler: SharedScheduler,
    ready: StatusCheck,
    shutdown: Shutdown,
}

impl Drop for Extender {
    fn drop(&mut self) {
        self.shutdown
            .trigger(koord_common::ShutdownReason::Requested("test over".into()));
    }
}

/// A replica that never leads: it watches, serves and expires, but writes no status.
fn standby() -> Leadership {
    Leadership::from_receiver(tokio::sync::watch::channel(false).1)
}

async fn start(api: &FakeApiServer, assumed_pod_ttl: Duration, leadership: Leadership) -> Extender {
    let client = common::client(api);
    let scheduler: SharedScheduler = Arc::new(koord_scheduler::framework::SchedulerCore::new(
        koord_scheduler::build_scheduler(&SchedulerConfiguration::default(), assumed_pod_ttl)
            .unwrap(),
    ));
    let ready = StatusCheck::failing("not synced");
    let shutdown = Shutdown::new();
    start_watchers(&client, &scheduler, ready.clone(), &shutdown);
    start_gated_housekeeping(
        &client,
        &scheduler,
        Duration::from_millis(100),
        leadership,
        &shutdown,
    );
    let state = ExtenderState {
        scheduler: Arc::clone(&scheduler),
        binder: Arc::new(KubeBinder { client }),
        metrics: ExtenderMetrics::new("koord-scheduler"),
    };
    let addr = common::serve_extender(state).await;
    Extender {
        addr,
        scheduler,
        ready,
        shutdown,
    }
}

async fn filter(addr: SocketAddr, nodes: &[&str]) -> Value {
    let args = json!({"Pod": batch_pod("batch-job", "1000", None), "NodeNames": nodes});
    common::post_ok(addr, "/filter", &args.to_string()).await
}

/// Polls `/filter` until `done` holds for its result; returns that result.
async fn filter_until(
    addr: SocketAddr,
    nodes: &[&str],
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let result = filter(addr, nodes).await;
        if done(&result) {
            return result;
        }
        assert!(Instant::now() < deadline, "never {what}; last: {result}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn feasible(result: &Value) -> Vec<String> {
    serde_json::from_value(result["NodeNames"].clone()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_and_watched_objects_reach_filter() {
    let api = cluster();
    // Arrives on the open watch after the list.
    api.push_watch_event(NODES, "ADDED", &node("n4").to_string());
    let extender = start(&api, Duration::from_secs(300), Leadership::unconditional()).await;

    let all = ["n1", "n2", "n3", "n4"];
    let result = filter_until(extender.addr, &all, "saw n4", |r| {
        feasible(r).contains(&"n4".to_string())
    })
    .await;
    assert_eq!(result["NodeNames"], json!(["n3", "n4"]), "{result}");
    // n1: the listed bound pod holds 3500 of 4000 batch-cpu.
    assert_eq!(
        result["FailedNodes"]["n1"], "Insufficient kubernetes.io/batch-cpu",
        "{result}"
    );
    // n2: its NodeMetric reports 90% cpu.
    assert_eq!(
        result["FailedNodes"]["n2"], "node(s) cpu usage exceed threshold",
        "{result}"
    );
    assert_eq!(result["FailedAndUnresolvableNodes"], json!({}), "{result}");
    assert_eq!(extender.ready.current(), Ok(()));

    // A node deleted on the watch leaves the cache.
    api.push_watch_event(NODES, "DELETED", &node("n4").to_string());
    let result = filter_until(extender.addr, &all, "dropped n4", |r| {
        r["FailedAndUnresolvableNodes"]["n4"].is_string()
    })
    .await;
    assert_eq!(result["NodeNames"], json!(["n3"]), "{result}");

    // Quota, reservation, ... CRDs are absent (404): only warnings.
    let requested = api.recorded();
    for path in [NODES, PODS, NODE_METRICS] {
        assert!(
            requested
                .iter()
                .any(|r| r.path() == path && r.target.contains("watch=true")),
            "no watch of {path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_confirms_bound_pods_and_housekeeping_releases_unconfirmed_ones() {
    let api = cluster();
    api.respond(
        "POST",
        "/api/v1/namespaces/default/pods/batch-job/binding",
        201,
        "{}",
    );
    // A standby: the expiry below is local cache work, not leader work.
    let extender = start(&api, Duration::from_secs(2), standby()).await;
    filter_until(extender.addr, &["n3"], "synced", |r| feasible(r) == ["n3"]).await;

    // Bind batch-job (1000) to n3: it is assumed there.
    let bind = json!({"PodName": "batch-job", "PodNamespace": "default", "PodUID": "uid-batch-job", "Node": "n3"});
    let result = common::post_ok(extender.addr, "/bind", &bind.to_string()).await;
    assert_eq!(result, json!({"Error": ""}));
    api.wait_for_request(
        "POST",
        "/api/v1/namespaces/default/pods/batch-job/binding",
        WAIT,
    )
    .unwrap();
    let assumed_on_n3 = |scheduler: &SharedScheduler| {
        scheduler
            .read()
            .unwrap()
            .cache
            .pod("default/batch-job")
            .and_then(|pod| pod.node.clone())
    };
    assert_eq!(assumed_on_n3(&extender.scheduler).as_deref(), Some("n3"));

    // Never confirmed: after the 2 s TTL the housekeeping releases it.
    let deadline = Instant::now() + WAIT;
    while assumed_on_n3(&extender.scheduler).is_some() {
        assert!(Instant::now() < deadline, "assumed pod never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Bound again and this time confirmed by the watch: it stays.
    let result = common::post_ok(extender.addr, "/bind", &bind.to_string()).await;
    assert_eq!(result, json!({"Error": ""}));
    api.push_watch_event(
        PODS,
        "MODIFIED",
        &batch_pod("batch-job", "1000", Some("n3")).to_string(),
    );
    let deadline = Instant::now() + WAIT;
    while extender
        .scheduler
        .read()
        .unwrap()
        .cache
        .pod("default/batch-job")
        .is_some_and(|pod| pod.is_assumed())
    {
        assert!(
            Instant::now() < deadline,
            "the watch never confirmed the pod"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Confirmed, so past the TTL it stays.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(assumed_on_n3(&extender.scheduler).as_deref(), Some("n3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_status_is_written_back_once_while_unchanged() {
    let quotas = "/apis/scheduling.sigs.k8s.io/v1alpha1/elasticquotas";
    let quota_path =
        "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/default/elasticquotas/default";
    let quota = json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": {"name": "default", "namespace": "default", "resourceVersion": "40"},
        "spec": {
            "min": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"},
            "max": {"kubernetes.io/batch-cpu": "100000", "kubernetes.io/batch-memory": "100Gi"}
        }
    });
    let api = cluster();
    api.respond(
        "GET",
        quotas,
        200,
        &common::list(
            "ElasticQuotaList",
            "scheduling.sigs.k8s.io/v1alpha1",
            vec![quota.clone()],
        ),
    );
    api.respond_watch(quotas);
    api.respond("PATCH", quota_path, 200, &quota.to_string());
    let _extender = start(&api, Duration::from_secs(300), Leadership::unconditional()).await;

    // Two merge patches reach the object (ElasticQuota has no status
    // subresource): the status annotations and `status.used`.
    let deadline = Instant::now() + WAIT;
    let quota_patches = || -> Vec<Value> {
        api.recorded()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path() == quota_path)
            .inspect(|r| {
                assert_eq!(
                    r.header("content-type"),
                    Some("application/merge-patch+json")
                );
            })
            .map(|r| serde_json::from_str(&r.body).unwrap())
            .collect()
    };
    while quota_patches().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let patches = quota_patches();
    let body = patches
        .iter()
        .find(|p| p["metadata"]["annotations"].is_object())
        .unwrap_or_else(|| panic!("no annotation patch: {patches:?}"))
        .clone();
    let used = patches
        .iter()
        .find(|p| p["status"]["used"].is_object())
        .unwrap_or_else(|| panic!("no status.used patch: {patches:?}"));
    // Used: only the bound filler (3500 batch-cpu); the pending job is requested, not used.
    let used: BTreeMap<String, Quantity> =
        serde_json::from_value(used["status"]["used"].clone()).unwrap();
    assert_eq!(
        QuantityValue::of(&used["kubernetes.io/batch-cpu"])
            .unwrap()
            .value(),
        3500,
        "{used:?}"
    );
    let annotations = &body["metadata"]["annotations"];
    let figure = |key: &str| -> Value {
        serde_json::from_str(annotations[key].as_str().unwrap_or("null")).unwrap()
    };
    // The bound filler (3500) and the pending batch-job (1000) in namespace
    // default, as quantities (any spelling of the same amount will do).
    let request: BTreeMap<String, Quantity> =
        serde_json::from_value(figure("quota.scheduling.koordinator.sh/request")).unwrap();
    let amounts: BTreeMap<&str, i64> = request
        .iter()
        .map(|(name, q)| (name.as_str(), QuantityValue::of(q).unwrap().value()))
        .collect();
    assert_eq!(
        amounts,
        BTreeMap::from([
            ("kubernetes.io/batch-cpu", 4500),
            ("kubernetes.io/batch-memory", 2 << 30)
        ]),
        "{body}"
    );
    for key in [
        "quota.scheduling.koordinator.sh/runtime",
        "quota.scheduling.koordinator.sh/child-request",
        "quota.scheduling.koordinator.sh/non-preemptible-request",
        "quota.scheduling.koordinator.sh/non-preemptible-used",
    ] {
        assert!(annotations[key].is_string(), "{key} missing: {body}");
    }
    // Nothing changed: later housekeeping rounds write nothing more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let patches = api
        .recorded()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path() == quota_path)
        .count();
    assert_eq!(patches, 2, "{:?}", quota_patches());
}
