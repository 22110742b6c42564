#![allow(clippy::unwrap_used)]
//! The states informer against a fake kubelet (the shared fake API server
//! on a loopback port, serving `/pods/`) and its cluster adapters — watchers, the
//! pods fallback and the NodeMetric status patch — against a fake API server.

use std::sync::Arc;
use std::time::Duration;

use koord_common::testing::FakeApiServer;
use koord_common::{MetricsRegistry, Shutdown, ShutdownReason};
use koordlet::statesinformer::kubelet::{KubeletAuth, KubeletClient, KubeletError};
use koordlet::statesinformer::metrics::StatesMetrics;
use koordlet::statesinformer::{
    PodSource, PodSourceError, PodsOrigin, PodsSyncer, RequiredSyncs, StatesInformer,
};

const TIMEOUT: Duration = Duration::from_secs(2);

/// Upstream's kubelet path for the pod list.
const KUBELET_PODS: &str = "/pods/";

/// Makes the kubelet stand-in answer `GET /pods/` with `status` and `body`
/// from now on.
fn serve_pods(kubelet: &FakeApiServer, status: u16, body: &str) {
    kubelet.respond("GET", KUBELET_PODS, status, body);
}

/// A kubelet stand-in listing `pods`; it records every request.
fn fake_kubelet(pods: &str) -> FakeApiServer {
    let kubelet = FakeApiServer::start().unwrap();
    serve_pods(&kubelet, 200, pods);
    kubelet
}

fn pod_list(pods: &[(&str, &str)]) -> String {
    let items: Vec<serde_json::Value> = pods
        .iter()
        .map(|(name, uid)| {
            serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": uid},
                "spec": {"containers": [{"name": "app", "image": "busybox"}]},
                "status": {"phase": "Running", "qosClass": "Burstable", "containerStatuses": [
                    {"name": "app", "containerID": format!("containerd://{uid}-app"),
                     "image": "busybox", "imageID": "", "ready": true, "restartCount": 0}]}
            })
        })
        .collect();
    serde_json::json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
        .to_string()
}

fn syncer(kubelet: &FakeApiServer, states: &StatesInformer, metrics: StatesMetrics) -> PodsSyncer {
    let client = KubeletClient::new(&kubelet.url(), KubeletAuth::None, TIMEOUT)
        .unwrap()
        .with_metrics(metrics.clone());
    PodsSyncer::new(
        PodSource::Kubelet(client),
        states.clone(),
        Duration::from_secs(10),
    )
    .with_metrics(metrics)
}

fn uids(states: &StatesInformer) -> Vec<String> {
    states
        .pods()
        .map(|snapshot| {
            snapshot
                .pods
                .iter()
                .map(|pod| pod.metadata.uid.clone().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn fake_kubelet_pods_become_the_snapshot() {
    let kubelet = fake_kubelet(&pod_list(&[("a", "uid-a"), ("b", "uid-b")]));
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let registry = MetricsRegistry::new("koordlet");
    let metrics = StatesMetrics::register(&registry, "node-a");
    let mut syncer = syncer(&kubelet, &states, metrics);

    assert!(states.pods().is_none());
    assert_eq!(syncer.sync_once().await.unwrap(), 2);
    let snapshot = states.pods().unwrap();
    assert_eq!(snapshot.origin, PodsOrigin::Kubelet);
    assert_eq!(uids(&states), ["uid-a", "uid-b"]);
    let pod = snapshot.pod_by_uid("uid-b").unwrap();
    let container_id = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .container_id
        .clone();
    assert_eq!(container_id.as_deref(), Some("containerd://uid-b-app"));
    assert!(states.pending_syncs().is_empty());
    let targets: Vec<String> = kubelet.recorded().into_iter().map(|r| r.target).collect();
    assert_eq!(
        targets,
        ["/pods/?"],
        "upstream's path; the empty query is harmless"
    );
    let body = registry.encode().unwrap();
    assert!(
        body.contains(
            "koordlet_kubelet_request_duration_seconds_count{verb=\"get\",path=\"/pods/\",code=\"200\"} 1"
        ),
        "{body}"
    );
}

#[tokio::test]
async fn garbage_keeps_the_last_good_snapshot_and_counts_the_error() {
    let kubelet = fake_kubelet(&pod_list(&[("a", "uid-a")]));
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let registry = MetricsRegistry::new("koordlet");
    let metrics = StatesMetrics::register(&registry, "node-a");
    let mut syncer = syncer(&kubelet, &states, metrics);
    syncer.sync_once().await.unwrap();
    let good = states.pods().unwrap();

    serve_pods(&kubelet, 200, "<html>this is not a pod list</html>");
    let err = syncer.sync_once().await.unwrap_err();
    assert!(
        matches!(&err, PodSourceError::Kubelet(KubeletError::Body { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("not valid JSON"), "{err}");

    serve_pods(
        &kubelet,
        200,
        r#"{"kind":"PodList","items":[{"metadata":{"name":"x"}}]}"#,
    );
    let err = syncer.sync_once().await.unwrap_err();
    assert!(
        err.to_string().contains("metadata.namespace is missing"),
        "{err}"
    );

    serve_pods(&kubelet, 500, "kubelet is sad");
    let err = syncer.sync_once().await.unwrap_err();
    assert!(err.to_string().contains("HTTP 500"), "{err}");

    let kept = states.pods().unwrap();
    assert!(Arc::ptr_eq(&good, &kept), "the last good snapshot stays");
    assert_eq!(states.pods_stats().errors(), 3);
    assert_eq!(states.pods_stats().successes(), 1);
    let body = registry.encode().unwrap();
    assert!(
        body.contains("koordlet_pods_sync_errors_total{source=\"kubelet\"} 3"),
        "{body}"
    );

    serve_pods(&kubelet, 200, &pod_list(&[("b", "uid-b")]));
    syncer.sync_once().await.unwrap();
    assert_eq!(uids(&states), ["uid-b"]);
}

#[tokio::test]
async fn a_silent_kubelet_times_out_and_a_closed_port_is_an_error() {
    let kubelet = FakeApiServer::start().unwrap();
    // Far longer than the client's timeout: the kubelet stays silent.
    kubelet.respond_delayed("GET", KUBELET_PODS, 200, "", Duration::from_secs(60));
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let client = KubeletClient::new(
        &kubelet.url(),
        KubeletAuth::None,
        Duration::from_millis(300),
    )
    .unwrap();
    let mut syncer = PodsSyncer::new(PodSource::Kubelet(client), states.clone(), TIMEOUT);
    let started = std::time::Instant::now();
    let err = syncer.sync_once().await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "bounded by the timeout"
    );
    assert!(
        err.to_string().contains("no answer") || err.to_string().contains("timed out"),
        "{err}"
    );

    let closed = koord_common::testing::closed_local_addr().unwrap();
    let client =
        KubeletClient::new(&format!("http://{closed}"), KubeletAuth::None, TIMEOUT).unwrap();
    let mut syncer = PodsSyncer::new(PodSource::Kubelet(client), states.clone(), TIMEOUT);
    let err = syncer.sync_once().await.unwrap_err();
    assert!(err.to_string().contains(&closed.to_string()), "{err}");
    assert_eq!(states.pods_stats().errors(), 2);
    assert!(states.pods().is_none());
}

#[tokio::test]
async fn a_kubelet_that_suddenly_lists_nothing_is_believed_only_after_confirmations() {
    let kubelet = fake_kubelet(&pod_list(&[("a", "uid-a")]));
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let mut syncer = syncer(&kubelet, &states, StatesMetrics::unregistered("node-a"));
    syncer.sync_once().await.unwrap();
    serve_pods(&kubelet, 200, &pod_list(&[]));
    for _ in 1..koordlet::statesinformer::pods::EMPTY_LIST_CONFIRMATIONS {
        let err = syncer.sync_once().await.unwrap_err();
        assert!(
            matches!(err, PodSourceError::UnconfirmedEmpty { previous: 1 }),
            "{err}"
        );
        assert_eq!(uids(&states), ["uid-a"]);
    }
    assert_eq!(syncer.sync_once().await.unwrap(), 0);
    assert!(uids(&states).is_empty());
}

#[tokio::test]
async fn the_sync_loop_follows_the_kubelet_until_shutdown() {
    let kubelet = fake_kubelet(&pod_list(&[("a", "uid-a")]));
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let client = KubeletClient::new(&kubelet.url(), KubeletAuth::None, TIMEOUT).unwrap();
    let syncer = PodsSyncer::new(
        PodSource::Kubelet(client),
        states.clone(),
        Duration::from_millis(100),
    );
    let shutdown = Shutdown::new();
    let task = tokio::spawn(syncer.run(shutdown.clone()));
    let mut updates = states.subscribe_pods();
    tokio::time::timeout(
        Duration::from_secs(10),
        updates.wait_for(|snapshot| snapshot.is_some()),
    )
    .await
    .unwrap()
    .unwrap();
    serve_pods(&kubelet, 200, &pod_list(&[("a", "uid-a"), ("c", "uid-c")]));
    tokio::time::timeout(
        Duration::from_secs(10),
        updates.wait_for(|snapshot| snapshot.as_ref().is_some_and(|s| s.pods.len() == 2)),
    )
    .await
    .unwrap()
    .unwrap();
    shutdown.trigger(ShutdownReason::Requested("test".into()));
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the loop stops on shutdown")
        .unwrap();
}

// ---------------------------------------------------------------------------
// Cluster adapters against a fake API server
// ---------------------------------------------------------------------------

const NODE_NAME: &str = "node-a";

/// Lists of the node's objects by collection path.
fn node_lists() -> [(&'static str, serde_json::Value); 5] {
    let list = |api_version: &str, kind: &str, items: Vec<serde_json::Value>| {
        serde_json::json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"resourceVersion": "7"}, "items": items
        })
    };
    // A list of `kind`s holding only the node's own object.
    let slo_list = |kind: &str, spec: serde_json::Value| {
        let api_version = "slo.koordinator.sh/v1alpha1";
        let object = serde_json::json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": NODE_NAME, "resourceVersion": "7"}, "spec": spec
        });
        list(api_version, &format!("{kind}List"), vec![object])
    };
    [
        (
            "/api/v1/nodes",
            list(
                "v1",
                "NodeList",
                vec![serde_json::json!({
                    "metadata": {"name": NODE_NAME, "resourceVersion": "7"},
                    "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                               "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}
                })],
            ),
        ),
        (
            "/api/v1/pods",
            list(
                "v1",
                "PodList",
                vec![serde_json::json!({
                    "metadata": {"name": "from-apiserver", "namespace": "default", "uid": "uid-api", "resourceVersion": "7"},
                    "spec": {"nodeName": NODE_NAME, "containers": [{"name": "app"}]},
                    "status": {"qosClass": "BestEffort"}
                })],
            ),
        ),
        (
            "/apis/slo.koordinator.sh/v1alpha1/nodeslos",
            slo_list(
                "NodeSLO",
                serde_json::json!({"hostApplications": [{"name": "nginx", "qos": "LS"}]}),
            ),
        ),
        (
            "/apis/slo.koordinator.sh/v1alpha1/nodemetrics",
            slo_list(
                "NodeMetric",
                serde_json::json!({"metricCollectPolicy": {"reportIntervalSeconds": 45}}),
            ),
        ),
        (
            "/apis/scheduling.koordinator.sh/v1alpha1/devices",
            list("scheduling.koordinator.sh/v1alpha1", "DeviceList", vec![]),
        ),
    ]
}

/// An API server stand-in: answers lists of the node's objects, holds watch
/// requests open without events, and accepts NodeMetric status patches.
fn fake_api_server() -> FakeApiServer {
    let api = FakeApiServer::start().unwrap();
    for (path, list) in node_lists() {
        api.respond("GET", path, 200, &list.to_string());
    }
    api.hold_watches_open();
    let patched = serde_json::json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": NODE_NAME, "resourceVersion": "8"}, "spec": {}
    });
    api.respond(
        "PATCH",
        &format!("/apis/slo.koordinator.sh/v1alpha1/nodemetrics/{NODE_NAME}/status"),
        200,
        &patched.to_string(),
    );
    api
}

fn client(api: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(api.url().parse().unwrap())).unwrap()
}

async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn watchers_fill_the_node_objects_and_readiness_follows() {
    use koordlet::statesinformer::nodemetric::{NodeMetricReporter, ReportSink};
    let api = fake_api_server();
    let client = client(&api);
    let states = StatesInformer::new(NODE_NAME, RequiredSyncs::CLUSTER);
    let shutdown = Shutdown::new();
    koordlet::statesinformer::apiserver::spawn_node_watchers(&client, &states, &shutdown);
    eventually("the Node, NodeSLO and NodeMetric lists", || {
        states.pending_syncs() == ["pods"]
    })
    .await;
    assert_eq!(
        states.node().unwrap().metadata.name.as_deref(),
        Some(NODE_NAME)
    );
    assert_eq!(
        states.node_slo().unwrap().spec.host_applications[0].name,
        "nginx"
    );
    assert!(states.device().is_none(), "no Device for this node");
    let selectors: Vec<String> = api
        .recorded()
        .iter()
        .filter(|seen| seen.method == "GET" && !seen.target.contains("watch=true"))
        .map(|seen| seen.target.clone())
        .collect();
    assert!(
        selectors
            .iter()
            .all(|target| target.contains(&format!("fieldSelector=metadata.name%3D{NODE_NAME}"))),
        "{selectors:?}"
    );

    // The watched NodeMetric's spec sets the report interval.
    let cache = Arc::new(koordlet::metriccache::MetricCache::new(Default::default()).unwrap());
    let reporter = NodeMetricReporter::new(states.clone(), cache, ReportSink::ApiServer(client));
    assert_eq!(reporter.policy().report_interval, Duration::from_secs(45));
    shutdown.trigger(ShutdownReason::Requested("test".into()));
}

#[tokio::test]
async fn an_unreachable_kubelet_falls_back_to_the_api_server_pods() {
    use koordlet::statesinformer::apiserver::ApiServerPods;
    let api = fake_api_server();
    let states = StatesInformer::new(NODE_NAME, RequiredSyncs::PODS_ONLY);
    let shutdown = Shutdown::new();
    let closed = koord_common::testing::closed_local_addr().unwrap();
    let kubelet =
        KubeletClient::new(&format!("http://{closed}"), KubeletAuth::None, TIMEOUT).unwrap();
    let mut syncer = PodsSyncer::new(
        PodSource::Kubelet(kubelet),
        states.clone(),
        Duration::from_secs(10),
    )
    .with_fallback(ApiServerPods::new(
        client(&api),
        NODE_NAME,
        shutdown.clone(),
    ));

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        assert!(syncer.sync_once().await.is_err(), "the kubelet is down");
        if states.pods().is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "fallback never listed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let snapshot = states.pods().unwrap();
    assert_eq!(snapshot.origin, PodsOrigin::ApiServer);
    assert_eq!(snapshot.pods[0].metadata.uid.as_deref(), Some("uid-api"));
    assert!(
        api.recorded()
            .iter()
            .any(|seen| seen.target.starts_with("/api/v1/pods?")
                && seen
                    .target
                    .contains(&format!("fieldSelector=spec.nodeName%3D{NODE_NAME}"))),
        "{:?}",
        api.recorded()
    );
    shutdown.trigger(ShutdownReason::Requested("test".into()));
}

#[tokio::test]
async fn the_reporter_patches_the_node_metric_status() {
    use koordlet::metriccache::{MetricCache, MetricKind, Sample, SeriesKey};
    use koordlet::statesinformer::PodsSnapshot;
    use koordlet::statesinformer::nodemetric::{NodeMetricReporter, ReportError, ReportSink};
    use std::time::SystemTime;

    let api = fake_api_server();
    let states = StatesInformer::new(NODE_NAME, RequiredSyncs::PODS_ONLY);
    let cache = Arc::new(MetricCache::new(Default::default()).unwrap());
    let now = SystemTime::now();
    let mut samples = Vec::new();
    for second in (1..=20u64).rev() {
        let at = now - Duration::from_secs(second);
        samples.push(Sample::new(
            SeriesKey::node(MetricKind::NodeCpuUsage),
            at,
            1.5,
        ));
        samples.push(Sample::new(
            SeriesKey::node(MetricKind::NodeMemoryUsage),
            at,
            2048.0,
        ));
        samples.push(Sample::new(
            SeriesKey::pod(MetricKind::PodCpuUsage, "uid-a"),
            at,
            0.25,
        ));
        samples.push(Sample::new(
            SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-a"),
            at,
            1024.0,
        ));
    }
    cache.append(&samples);
    states.set_pods(PodsSnapshot {
        pods: vec![
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a", "namespace": "default", "uid": "uid-a"},
                "status": {"qosClass": "Burstable"}
            }))
            .unwrap(),
        ],
        origin: PodsOrigin::File,
        synced_at: now,
    });
    let reporter =
        NodeMetricReporter::new(states.clone(), cache, ReportSink::ApiServer(client(&api)));

    // koord-manager has not created the NodeMetric yet: nothing is written.
    let err = reporter.report_once().await.unwrap_err();
    assert!(matches!(err, ReportError::NoNodeMetric(_)), "{err}");
    assert!(api.recorded().iter().all(|seen| seen.method != "PATCH"));

    states.set_node_metric(Some(apis::slo::v1alpha1::NodeMetric::new(
        NODE_NAME,
        Default::default(),
    )));
    reporter.report_once().await.unwrap();
    let patch = api
        .recorded()
        .into_iter()
        .find(|seen| seen.method == "PATCH")
        .expect("a status patch");
    assert!(
        patch.target.starts_with(&format!(
            "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/{NODE_NAME}/status"
        )),
        "{}",
        patch.target
    );
    assert_eq!(
        patch.header("content-type"),
        Some("application/merge-patch+json")
    );
    let body: serde_json::Value = serde_json::from_str(&patch.body).unwrap();
    let status = &body["status"];
    assert_eq!(
        status["nodeMetric"]["nodeUsage"]["resources"],
        serde_json::json!({"cpu": "1500m", "memory": "2Ki"})
    );
    assert_eq!(status["podsMetric"][0]["name"], "a");
    assert_eq!(
        status["podsMetric"][0]["podUsage"]["resources"],
        serde_json::json!({"cpu": "250m", "memory": "1Ki"})
    );
    assert_eq!(status["podsMetric"][0]["qos"], "LS");
    for omitted in ["prodPeakMetric", "hostApplicationMetric"] {
        assert_eq!(
            status.get(omitted),
            Some(&serde_json::Value::Null),
            "omitted fields are cleared explicitly: {status}"
        );
    }
    // No Node and no trained models yet: upstream still sends an empty
    // reclaimable metric.
    assert_eq!(status["prodReclaimableMetric"], serde_json::json!({}));
    assert!(status["updateTime"].is_string(), "{status}");
}
