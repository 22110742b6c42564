#![allow(clippy::unwrap_used)]
//! The states informer against a fake kubelet: a real HTTP server on a
//! loopback port serving `/pods`.

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
