#![allow(clippy::unwrap_used)]
//! The states informer against a fake kubelet (a real HTTP server on a
//! loopback port serving `/pods`) and its cluster adapters — watchers, the
//! pods fallback and the NodeMetric status patch — against a fake API server.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use koord_common::{MetricsRegistry, Shutdown, ShutdownReason};
use koordlet::statesinformer::kubelet::{KubeletAuth, KubeletClient, KubeletError};
use koordlet::statesinformer::metrics::StatesMetrics;
use koordlet::statesinformer::{
    PodSource, PodSourceError, PodsOrigin, PodsSyncer, RequiredSyncs, StatesInformer,
};
use tokio::net::{TcpListener, TcpStream};

const TIMEOUT: Duration = Duration::from_secs(2);

/// What the fake answers next: status code and body, or silence.
#[derive(Clone)]
enum Reply {
    Ok(String),
    Status(u16, String),
    Hang,
}

/// A kubelet stand-in: answers every request with the current [`Reply`] and
/// records the request paths.
struct FakeKubelet {
    addr: SocketAddr,
    reply: Arc<Mutex<Reply>>,
    paths: Arc<Mutex<Vec<String>>>,
}

impl FakeKubelet {
    async fn start(reply: Reply) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reply = Arc::new(Mutex::new(reply));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let (shared_reply, shared_paths) = (Arc::clone(&reply), Arc::clone(&paths));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let reply = Arc::clone(&shared_reply);
                let paths = Arc::clone(&shared_paths);
                tokio::spawn(async move {
                    let Some(head) = read_head(&stream).await else {
                        return;
                    };
                    let head = String::from_utf8_lossy(&head).to_string();
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                    paths.lock().unwrap().push(path);
                    let reply = reply.lock().unwrap().clone();
                    let (code, body) = match reply {
                        Reply::Ok(body) => (200, body),
                        Reply::Status(code, body) => (code, body),
                        Reply::Hang => {
                            tokio::time::sleep(Duration::from_secs(60)).await;
                            return;
                        }
                    };
                    let response = format!(
                        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    write_all(&stream, response.as_bytes()).await;
                });
            }
        });
        Self { addr, reply, paths }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, reply: Reply) {
        *self.reply.lock().unwrap() = reply;
    }

    fn paths(&self) -> Vec<String> {
        self.paths.lock().unwrap().clone()
    }
}

/// Reads up to the end of the request head (readiness-based I/O: the
/// workspace's tokio has no `io-util`).
async fn read_head(stream: &TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        stream.readable().await.ok()?;
        match stream.try_read(&mut buffer) {
            Ok(0) => return None,
            Ok(n) => head.extend_from_slice(&buffer[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
    Some(head)
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        if stream.writable().await.is_err() {
            return;
        }
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
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

fn syncer(kubelet: &FakeKubelet, states: &StatesInformer, metrics: StatesMetrics) -> PodsSyncer {
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
    let kubelet = FakeKubelet::start(Reply::Ok(pod_list(&[("a", "uid-a"), ("b", "uid-b")]))).await;
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
    assert_eq!(
        kubelet.paths(),
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
    let kubelet = FakeKubelet::start(Reply::Ok(pod_list(&[("a", "uid-a")]))).await;
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let registry = MetricsRegistry::new("koordlet");
    let metrics = StatesMetrics::register(&registry, "node-a");
    let mut syncer = syncer(&kubelet, &states, metrics);
    syncer.sync_once().await.unwrap();
    let good = states.pods().unwrap();

    kubelet.set(Reply::Ok("<html>this is not a pod list</html>".to_string()));
    let err = syncer.sync_once().await.unwrap_err();
    assert!(
        matches!(&err, PodSourceError::Kubelet(KubeletError::Body { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("not valid JSON"), "{err}");

    kubelet.set(Reply::Ok(
        r#"{"kind":"PodList","items":[{"metadata":{"name":"x"}}]}"#.into(),
    ));
    let err = syncer.sync_once().await.unwrap_err();
    assert!(
        err.to_string().contains("metadata.namespace is missing"),
        "{err}"
    );

    kubelet.set(Reply::Status(500, "kubelet is sad".into()));
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

    kubelet.set(Reply::Ok(pod_list(&[("b", "uid-b")])));
    syncer.sync_once().await.unwrap();
    assert_eq!(uids(&states), ["uid-b"]);
}

#[tokio::test]
async fn a_silent_kubelet_times_out_and_a_closed_port_is_an_error() {
    let kubelet = FakeKubelet::start(Reply::Hang).await;
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
    let kubelet = FakeKubelet::start(Reply::Ok(pod_list(&[("a", "uid-a")]))).await;
    let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
    let mut syncer = syncer(&kubelet, &states, StatesMetrics::unregistered("node-a"));
    syncer.sync_once().await.unwrap();
    kubelet.set(Reply::Ok(pod_list(&[])));
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
    let kubelet = FakeKubelet::start(Reply::Ok(pod_list(&[("a", "uid-a")]))).await;
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
    kubelet.set(Reply::Ok(pod_list(&[("a", "uid-a"), ("c", "uid-c")])));
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

/// One request the fake API server saw.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    content_type: String,
    body: String,
}

/// An API server stand-in: answers lists of the node's objects, holds watch
/// requests open without events, and accepts NodeMetric status patches.
struct FakeApiServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

const NODE_NAME: &str = "node-a";

fn list_body(path: &str) -> Option<serde_json::Value> {
    let (api_version, kind, items) = match path {
        "/api/v1/nodes" => (
            "v1",
            "NodeList",
            vec![serde_json::json!({
                "metadata": {"name": NODE_NAME, "resourceVersion": "7"},
                "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                           "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}
            })],
        ),
        "/api/v1/pods" => (
            "v1",
            "PodList",
            vec![serde_json::json!({
                "metadata": {"name": "from-apiserver", "namespace": "default", "uid": "uid-api", "resourceVersion": "7"},
                "spec": {"nodeName": NODE_NAME, "containers": [{"name": "app"}]},
                "status": {"qosClass": "BestEffort"}
            })],
        ),
        "/apis/slo.koordinator.sh/v1alpha1/nodeslos" => (
            "slo.koordinator.sh/v1alpha1",
            "NodeSLOList",
            vec![serde_json::json!({
                "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO",
                "metadata": {"name": NODE_NAME, "resourceVersion": "7"},
                "spec": {"hostApplications": [{"name": "nginx", "qos": "LS"}]}
            })],
        ),
        "/apis/slo.koordinator.sh/v1alpha1/nodemetrics" => (
            "slo.koordinator.sh/v1alpha1",
            "NodeMetricList",
            vec![serde_json::json!({
                "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                "metadata": {"name": NODE_NAME, "resourceVersion": "7"},
                "spec": {"metricCollectPolicy": {"reportIntervalSeconds": 45}}
            })],
        ),
        "/apis/scheduling.koordinator.sh/v1alpha1/devices" => {
            ("scheduling.koordinator.sh/v1alpha1", "DeviceList", vec![])
        }
        _ => return None,
    };
    Some(serde_json::json!({
        "apiVersion": api_version, "kind": kind,
        "metadata": {"resourceVersion": "7"}, "items": items
    }))
}

fn strip_nulls(value: &mut serde_json::Value) {
    if let Some(object) = value.as_object_mut() {
        object.retain(|_, member| !member.is_null());
        object.values_mut().for_each(strip_nulls);
    } else if let Some(items) = value.as_array_mut() {
        items.iter_mut().for_each(strip_nulls);
    }
}

/// Reads one request: head and (Content-Length) body.
async fn read_request(stream: &TcpStream) -> Option<(String, String)> {
    let mut raw = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_string();
            let length: usize = head
                .lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, value)| value.trim().parse().ok())
                .unwrap_or(0);
            if raw.len() >= end + 4 + length {
                let body = String::from_utf8_lossy(&raw[end + 4..end + 4 + length]).to_string();
                return Some((head, body));
            }
        }
        stream.readable().await.ok()?;
        match stream.try_read(&mut buffer) {
            Ok(0) => return None,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
}

async fn respond(stream: &TcpStream, code: u16, body: &str) {
    let response = format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    write_all(stream, response.as_bytes()).await;
}

impl FakeApiServer {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let seen = Arc::clone(&shared);
                tokio::spawn(async move {
                    let Some((head, body)) = read_request(&stream).await else {
                        return;
                    };
                    let mut words = head.split_whitespace();
                    let method = words.next().unwrap_or("").to_string();
                    let target = words.next().unwrap_or("").to_string();
                    let content_type = head
                        .lines()
                        .filter_map(|line| line.split_once(':'))
                        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
                        .map(|(_, value)| value.trim().to_string())
                        .unwrap_or_default();
                    seen.lock().unwrap().push(Seen {
                        method: method.clone(),
                        target: target.clone(),
                        content_type,
                        body: body.clone(),
                    });
                    let path = target.split('?').next().unwrap_or("");
                    let watch = target.contains("watch=true");
                    let status_path =
                        format!("/apis/slo.koordinator.sh/v1alpha1/nodemetrics/{NODE_NAME}/status");
                    if method == "PATCH" && path == status_path {
                        let mut patch: serde_json::Value =
                            serde_json::from_str(&body).unwrap_or_default();
                        // A merge patch deletes the keys it sets to null.
                        strip_nulls(&mut patch);
                        let object = serde_json::json!({
                            "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
                            "metadata": {"name": NODE_NAME, "resourceVersion": "8"},
                            "spec": {}, "status": patch["status"],
                        });
                        respond(&stream, 200, &object.to_string()).await;
                    } else if method == "GET" && watch {
                        // An open watch with no events.
                        write_all(
                            &stream,
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                        )
                        .await;
                        tokio::time::sleep(Duration::from_secs(600)).await;
                    } else if let Some(list) = list_body(path).filter(|_| method == "GET") {
                        respond(&stream, 200, &list.to_string()).await;
                    } else {
                        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#;
                        respond(&stream, 404, status).await;
                    }
                });
            }
        });
        Self { addr, seen }
    }

    fn client(&self) -> kube::Client {
        let config = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
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
    let api = FakeApiServer::start().await;
    let client = api.client();
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
        .seen()
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
    let api = FakeApiServer::start().await;
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
        api.client(),
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
        api.seen()
            .iter()
            .any(|seen| seen.target.starts_with("/api/v1/pods?")
                && seen
                    .target
                    .contains(&format!("fieldSelector=spec.nodeName%3D{NODE_NAME}"))),
        "{:?}",
        api.seen()
    );
    shutdown.trigger(ShutdownReason::Requested("test".into()));
}

#[tokio::test]
async fn the_reporter_patches_the_node_metric_status() {
    use koordlet::metriccache::{MetricCache, MetricKind, Sample, SeriesKey};
    use koordlet::statesinformer::PodsSnapshot;
    use koordlet::statesinformer::nodemetric::{NodeMetricReporter, ReportError, ReportSink};
    use std::time::SystemTime;

    let api = FakeApiServer::start().await;
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
        NodeMetricReporter::new(states.clone(), cache, ReportSink::ApiServer(api.client()));

    // koord-manager has not created the NodeMetric yet: nothing is written.
    let err = reporter.report_once().await.unwrap_err();
    assert!(matches!(err, ReportError::NoNodeMetric(_)), "{err}");
    assert!(api.seen().iter().all(|seen| seen.method != "PATCH"));

    states.set_node_metric(Some(apis::slo::v1alpha1::NodeMetric::new(
        NODE_NAME,
        Default::default(),
    )));
    reporter.report_once().await.unwrap();
    let patch = api
        .seen()
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
    assert_eq!(patch.content_type, "application/merge-patch+json");
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
