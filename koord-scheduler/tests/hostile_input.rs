#![allow(clippy::unwrap_used)]
//! Hostile input (issue 16): an annotation anyone who may create a pod can
//! write must not wedge the scheduler or change what other pods get.
//!
//! - A bound pod or an Available Reservation whose resource-status cpuset
//!   repeats a range is refused (the cpuset holds nothing), instead of being
//!   expanded once per repetition.
//! - The same annotation at its largest (tens of thousands of repetitions of
//!   `0-65535`, still under the API server's 256 KiB annotation limit)
//!   arriving through the watch leaves `/filter` answering: the test's client
//!   gives up after a fixed wait, so a wedged cache fails it instead of
//!   hanging it.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use koord_common::Shutdown;
use koord_common::health::StatusCheck;
use koord_common::testing::FakeApiServer;
use koord_scheduler::cache::{Change, Object, PodInfo};
use koord_scheduler::cluster::start_watchers;
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::extender::{ExtenderMetrics, ExtenderState, run_filter};
use koord_scheduler::framework::{RecordingBinder, SharedScheduler};
use serde_json::{Value, json};

const RESOURCE_STATUS: &str = "scheduling.koordinator.sh/resource-status";
const CPU_TOPOLOGY: &str = "node.koordinator.sh/cpu-topology";

/// `range` written `times` times, comma-separated.
fn repeated(range: &str, times: usize) -> String {
    vec![range; times].join(",")
}

fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "10"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
    })
}

/// 2 NUMA nodes × 2 cores × 2 threads (cpus 0-7).
fn topology(name: &str) -> Value {
    let detail: Vec<Value> = (0..8)
        .map(|id| {
            let core = id % 4;
            json!({"id": id, "core": core, "socket": core / 2, "node": core / 2})
        })
        .collect();
    json!({
        "apiVersion": "topology.node.k8s.io/v1alpha1", "kind": "NodeResourceTopology",
        "metadata": {"name": name, "resourceVersion": "11",
                     "annotations": {CPU_TOPOLOGY: json!({"detail": detail}).to_string()}},
        "topologyPolicies": ["None"],
        "zones": []
    })
}

/// An LSR prod pod asking for `cpu` whole CPUs, bound to `node` with
/// `cpuset` in its resource-status when given.
fn lsr_pod(name: &str, cpu: &str, node: Option<&str>, cpuset: Option<&str>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "resourceVersion": "20", "labels": {"koordinator.sh/qosClass": "LSR"}},
        "spec": {"priority": 9000, "containers": [{"name": "main", "resources": {
            "requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": "Pending"}
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
        pod["status"]["phase"] = json!("Running");
    }
    if let Some(cpuset) = cpuset {
        pod["metadata"]["annotations"] =
            json!({RESOURCE_STATUS: json!({"cpuset": cpuset}).to_string()});
    }
    pod
}

/// An Available Reservation on `node` for `default/someone-else`, holding 2
/// CPUs' worth of capacity and `cpuset`.
fn reservation(name: &str, node: &str, cpuset: &str) -> Value {
    json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": name, "uid": format!("{name}-uid"), "resourceVersion": "30",
                     "creationTimestamp": k8s_openapi::jiff::Timestamp::now().to_string(),
                     "annotations": {RESOURCE_STATUS: json!({"cpuset": cpuset}).to_string()}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}},
                 "owners": [{"object": {"name": "someone-else", "namespace": "default"}}],
                 "ttl": "1h"},
        "status": {"phase": "Available", "nodeName": node, "allocatable": {"cpu": "2"}}
    })
}

fn scheduler_with(objects: Vec<Object>) -> koord_scheduler::framework::Scheduler {
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(300),
    )
    .unwrap();
    for object in objects {
        scheduler.apply(Change::Upsert(object));
    }
    scheduler
}

fn filter_web(scheduler: &koord_scheduler::framework::Scheduler) -> Vec<String> {
    let web: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(lsr_pod("web", "4", None, None)).unwrap();
    let web = PodInfo::new(Arc::new(web));
    let outcome = run_filter(scheduler, &web, &["n1".to_string()], SystemTime::now());
    // Fits, or not for want of CPUs: nothing else may turn it away here.
    for reason in outcome
        .failed
        .values()
        .chain(outcome.failed_unresolvable.values())
    {
        assert!(reason.contains("not enough cpus"), "{outcome:?}");
    }
    outcome.feasible
}

#[test]
fn a_repeated_cpuset_on_a_bound_pod_is_refused_and_holds_no_cpus() {
    let base = || {
        vec![
            Object::Node(serde_json::from_value(node("n1")).unwrap()),
            Object::NodeResourceTopology(serde_json::from_value(topology("n1")).unwrap()),
        ]
    };
    // A well-formed cpuset holds its CPUs: web (4 CPUs) cannot have 0-7.
    let mut objects = base();
    objects.push(Object::Pod(
        serde_json::from_value(lsr_pod("hog", "1", Some("n1"), Some("0-7"))).unwrap(),
    ));
    assert!(filter_web(&scheduler_with(objects)).is_empty());

    // The same CPUs listed 200 times: refused, the hog holds nothing.
    let mut objects = base();
    objects.push(Object::Pod(
        serde_json::from_value(lsr_pod("hog", "1", Some("n1"), Some(&repeated("0-7", 200))))
            .unwrap(),
    ));
    let scheduler = scheduler_with(objects);
    assert!(scheduler.cache.pod("default/hog").is_some());
    assert_eq!(filter_web(&scheduler), ["n1"]);

    // Overlapping ranges are repetition too.
    let mut objects = base();
    objects.push(Object::Pod(
        serde_json::from_value(lsr_pod("hog", "1", Some("n1"), Some("0-5,2-7"))).unwrap(),
    ));
    assert_eq!(filter_web(&scheduler_with(objects)), ["n1"]);
}

#[test]
fn a_repeated_cpuset_on_a_reservation_is_refused_and_holds_no_cpus() {
    let with = |cpuset: &str| {
        scheduler_with(vec![
            Object::Node(serde_json::from_value(node("n1")).unwrap()),
            Object::NodeResourceTopology(serde_json::from_value(topology("n1")).unwrap()),
            Object::Reservation(serde_json::from_value(reservation("r1", "n1", cpuset)).unwrap()),
        ])
    };
    assert!(filter_web(&with("0-7")).is_empty());
    let scheduler = with(&repeated("0-7", 200));
    assert!(scheduler.cache.reservations.contains_key("r1"));
    assert_eq!(filter_web(&scheduler), ["n1"]);
}

/// One blocking JSON POST that gives up after `wait`.
fn post_within(addr: SocketAddr, path: &str, body: &str, wait: Duration) -> Result<Value, String> {
    let mut stream = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(wait))
        .map_err(|e| e.to_string())?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| format!("no answer from {path} within {wait:?}: {e}"))?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("{head}\n{body}"));
    }
    serde_json::from_str(body).map_err(|e| format!("{e}: {body}"))
}

/// Shuts its runtime down without waiting for tasks: on a wedged cache a
/// worker may be busy for minutes, and the test must fail rather than wait.
struct Background(Option<tokio::runtime::Runtime>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

#[test]
fn a_huge_repeated_cpuset_from_the_watch_leaves_filter_answering() {
    // 30,000 × "0-65535": 240,000 bytes, under the API server's 256 KiB
    // limit, and 2 billion CPU ids if each repetition were expanded.
    let hostile = repeated("0-65535", 30_000);
    assert!(hostile.len() < 256 * 1024);
    let api = FakeApiServer::start().unwrap();
    let list = |path: &str, kind: &str, version: &str, items: Vec<Value>| {
        api.respond("GET", path, 200, &common::list(kind, version, items));
        api.respond_watch(path);
    };
    list("/api/v1/nodes", "NodeList", "v1", vec![node("n1")]);
    list(
        "/api/v1/pods",
        "PodList",
        "v1",
        vec![lsr_pod("hog", "1", Some("n1"), Some(&hostile))],
    );
    list(
        "/apis/scheduling.koordinator.sh/v1alpha1/reservations",
        "ReservationList",
        "scheduling.koordinator.sh/v1alpha1",
        vec![reservation("r1", "n1", &hostile)],
    );
    list(
        "/apis/topology.node.k8s.io/v1alpha1/noderesourcetopologies",
        "NodeResourceTopologyList",
        "topology.node.k8s.io/v1alpha1",
        vec![topology("n1")],
    );

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let shutdown = Shutdown::new();
    let scheduler: SharedScheduler = Arc::new(koord_scheduler::framework::SchedulerCore::new(
        koord_scheduler::build_scheduler(
            &SchedulerConfiguration::default(),
            Duration::from_secs(300),
        )
        .unwrap(),
    ));
    let addr = runtime.block_on(async {
        let client = common::client(&api);
        start_watchers(
            &client,
            &scheduler,
            StatusCheck::failing("not synced"),
            &shutdown,
        );
        common::serve_extender(ExtenderState {
            scheduler: Arc::clone(&scheduler),
            binder: Arc::new(RecordingBinder::default()),
            metrics: ExtenderMetrics::new("koord-scheduler"),
        })
        .await
    });
    let _background = Background(Some(runtime));

    // The web pod fits once the cache holds node, topology, hog and
    // reservation: their cpusets are refused, so they hold no CPUs.
    let args = json!({"Pod": lsr_pod("web", "4", None, None), "NodeNames": ["n1"]}).to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let result = post_within(addr, "/filter", &args, Duration::from_secs(20)).unwrap();
        let synced = scheduler.read().is_ok_and(|s| {
            s.cache.pod("default/hog").is_some()
                && s.cache.reservations.contains_key("r1")
                && s.cache.node_resource_topologies.contains_key("n1")
        });
        if synced && result["NodeNames"] == json!(["n1"]) {
            break;
        }
        assert!(Instant::now() < deadline, "never fit: {result}");
        std::thread::sleep(Duration::from_millis(50));
    }
    shutdown.trigger(koord_common::ShutdownReason::Requested("test over".into()));
}
