#![allow(clippy::unwrap_used)]
//! Extender and simulator benchmark over a generated 5,000-node,
//! 50,000-pod cluster with every plugin on (`cargo bench -p koord-scheduler`).
//!
//! The cluster exercises every plugin: batch and prod pods under
//! ElasticQuotas, NodeMetrics for LoadAware, NodeResourceTopologies (every
//! 5th node) with LSR cpuset pods for NodeNUMAResource, Device CRs (every
//! 10th node, 8 GPUs) with shared-GPU pods for DeviceShare, Available
//! Reservations with owner pods, and gangs of 4 for Coscheduling.
//!
//! Reports `/filter` + `/prioritize` latency for one pod over real HTTP
//! (all 5,000 node names, `nodeCacheCapable`; the client encodes and
//! decodes typed bodies as kube-scheduler does, and the two HTTP exchanges
//! without that client work are reported too), alone and beside a writer
//! thread applying bound-pod updates through the watch's entry point at
//! BENCH_STORM_RATE per second (default 1,000), in alternating windows of
//! 25 pods (BENCH_ROUNDS pods each), and simulator throughput
//! (with per-node details recorded, as `simulate` does).
//! Sizes can be changed with BENCH_NODES / BENCH_PODS / BENCH_ROUNDS;
//! BENCH_PART2=0 runs the part-1 workload only, BENCH_DETAILS=0 skips the
//! simulator's per-node details, BENCH_SIMULATOR=0 the simulator;
//! BENCH_DIGEST=1 prints a digest of the simulator's placements;
//! BENCH_THP=1 keeps transparent huge pages on (the scheduler turns them off);
//! BENCH_KIND=<kind> (e.g. `LSR cpuset`, `reservation owner`) measures only
//! pending pods of that kind over HTTP, so its p99 rests on BENCH_ROUNDS
//! samples instead of the handful the mixed workload gives rare kinds.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use koord_common::testing::{Lcg, env_usize};
use koord_scheduler::admission;
use koord_scheduler::cache::{Change, Object};
use koord_scheduler::cluster::apply_watch_changes;
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::extender::{ExtenderFilterResult, ExtenderMetrics, ExtenderState, router};
use koord_scheduler::framework::{RecordingBinder, Scheduler, SharedScheduler};
use koord_scheduler::placement::schedule_one_indexed;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const CONFIG: &str = r#"
profiles:
- schedulerName: koord-scheduler
  plugins:
    score:
      enabled:
      - {name: LoadAwareScheduling, weight: 1}
      - {name: NodeResourcesFitPlus, weight: 1}
      - {name: ScarceResourceAvoidance, weight: 1}
  pluginConfig:
  - name: NodeResourcesFitPlus
    args:
      resources:
        cpu: {type: LeastAllocated, weight: 1}
        memory: {type: LeastAllocated, weight: 1}
        nvidia.com/gpu: {type: MostAllocated, weight: 2}
  - name: ScarceResourceAvoidance
    args:
      resources: [nvidia.com/gpu]
"#;

fn rfc3339(time: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .unwrap()
        .to_string()
}

/// Reservations in the cluster; pending pods with index % 100 == 60 own one.
const RESERVATIONS: usize = 500;

/// BENCH_PART2=0 leaves out the part-2 objects and pods (the part-1
/// workload: batch and prod pods, quotas, NodeMetrics), for comparison.
fn part2_enabled() -> bool {
    static ENABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENABLED.get_or_init(|| env_usize("BENCH_PART2", 1) != 0)
}

/// The part-2 kind of a pending pod (by its index), if any.
fn part2_kind(index: usize) -> Option<&'static str> {
    if !part2_enabled() {
        return None;
    }
    match index % 100 {
        20 | 70 => Some("LSR cpuset"),
        30 | 80 => Some("shared GPU"),
        40..=43 => Some("gang member"),
        60 => Some("reservation owner"),
        _ => None,
    }
}

fn pod_json(index: usize, node: Option<&str>, rng: &mut Lcg) -> Value {
    let quota = format!("team-{}", index % 10);
    let mut labels = json!({"quota.scheduling.koordinator.sh/name": quota, "app": "bench"});
    let mut annotations = json!({});
    let mut limits = json!({});
    let part2 = if part2_enabled() { index % 100 } else { 0 };
    let (requests, priority) = match (node, part2) {
        // Pending pods of the part-2 plugins; bound pods stay plain.
        (None, 20 | 70) => {
            labels["koordinator.sh/qosClass"] = json!("LSR");
            limits = json!({"cpu": "4", "memory": "8Gi"});
            (json!({"cpu": "4", "memory": "8Gi"}), 9000)
        }
        (None, 30 | 80) => {
            let shared =
                json!({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"});
            limits = shared.clone();
            let mut requests = shared;
            requests["cpu"] = json!("1");
            (requests, 9500)
        }
        (None, 40..=43) => {
            annotations = json!({"gang.scheduling.koordinator.sh/name": format!("gang-{}", index / 100),
                                 "gang.scheduling.koordinator.sh/min-available": "4"});
            (json!({"cpu": "2", "memory": "4Gi"}), 9500)
        }
        (None, 60) => {
            labels["reserve-for"] = json!(format!("r-{}", (index / 100) % RESERVATIONS));
            (json!({"cpu": "2", "memory": "4Gi"}), 9500)
        }
        _ if index.is_multiple_of(3) => (
            json!({"kubernetes.io/batch-cpu": format!("{}", 500 + rng.below(1500)), "kubernetes.io/batch-memory": "1Gi"}),
            5500,
        ),
        _ => (
            json!({"cpu": format!("{}m", 250 + rng.below(1750)), "memory": format!("{}Mi", 256 + rng.below(3840))}),
            9500,
        ),
    };
    let mut value = json!({
        "metadata": {"name": format!("pod-{index}"), "namespace": "bench", "uid": format!("uid-{index}"),
                     "labels": labels, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests, "limits": limits}}], "priority": priority},
        "status": {"phase": "Pending"}
    });
    if let Some(node) = node {
        value["spec"]["nodeName"] = json!(node);
        value["status"] = json!({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"}]});
    }
    value
}

/// A 64-CPU, 2-socket, 2-NUMA-node, 2-threads-per-core topology.
fn node_resource_topology(name: &str) -> Object {
    let detail: Vec<Value> = (0..64)
        .map(|id| {
            let core = id % 32;
            json!({"id": id, "core": core, "socket": core / 16, "node": core / 16})
        })
        .collect();
    Object::NodeResourceTopology(
        serde_json::from_value(json!({
            "apiVersion": "topology.node.k8s.io/v1alpha1",
            "kind": "NodeResourceTopology",
            "metadata": {"name": name, "annotations": {
                "node.koordinator.sh/cpu-topology": json!({"detail": detail}).to_string()}},
            "topologyPolicies": ["None"],
            "zones": []
        }))
        .unwrap(),
    )
}

fn gpu_device(name: &str) -> Object {
    let devices: Vec<Value> = (0..8)
        .map(|minor| {
            json!({"type": "gpu", "id": format!("GPU-{minor}"), "minor": minor, "health": true,
                   "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                                 "koordinator.sh/gpu-memory-ratio": "100"}})
        })
        .collect();
    Object::Device(
        serde_json::from_value(json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Device",
            "metadata": {"name": name},
            "spec": {"devices": devices}
        }))
        .unwrap(),
    )
}

fn reservation(index: usize, node: &str, now: SystemTime) -> Object {
    let resources = json!({"cpu": "2", "memory": "4Gi"});
    Object::Reservation(
        serde_json::from_value(json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": format!("r-{index}"), "uid": format!("r-uid-{index}"),
                         "creationTimestamp": rfc3339(now - Duration::from_secs(600))},
            "spec": {
                "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": resources}}]}},
                "owners": [{"labelSelector": {"matchLabels": {"reserve-for": format!("r-{index}")}}}],
                "ttl": "24h"
            },
            "status": {"phase": "Available", "nodeName": node, "allocatable": resources}
        }))
        .unwrap(),
    )
}

/// Nodes, metrics, quotas, bound pods (9 per node) and pending pods.
fn generate(nodes: usize, pods: usize, now: SystemTime) -> (Vec<Object>, Vec<Value>) {
    let mut rng = Lcg(42);
    let mut objects = Vec::new();
    let report = rfc3339(now - Duration::from_secs(20));
    for q in 0..10 {
        objects.push(Object::ElasticQuota(serde_json::from_value(json!({
            "metadata": {"name": format!("team-{q}"), "namespace": "quotas"},
            "spec": {"min": {"cpu": "10000", "memory": "40000Gi"}, "max": {"cpu": "100000", "memory": "400000Gi", "kubernetes.io/batch-cpu": "100000000"}}
        })).unwrap()));
    }
    let bound = pods.saturating_sub(nodes).min(nodes * 9);
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        let mut allocatable = json!({"cpu": "64", "memory": "256Gi", "pods": "110",
            "kubernetes.io/batch-cpu": "32000", "kubernetes.io/batch-memory": "128Gi"});
        if n.is_multiple_of(10) {
            allocatable["nvidia.com/gpu"] = json!("8");
        }
        objects.push(Object::Node(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"allocatable": allocatable}
            }))
            .unwrap(),
        ));
        if part2_enabled() && n.is_multiple_of(5) {
            objects.push(node_resource_topology(&name));
        }
        if part2_enabled() && n.is_multiple_of(10) {
            objects.push(gpu_device(&name));
        }
        let pods_metric: Vec<Value> = (0..9)
            .map(|i| json!({"namespace": "bench", "name": format!("pod-{}", n * 9 + i), "podUsage": {"resources": {"cpu": "500m", "memory": "1Gi"}}, "priority": "koord-prod"}))
            .collect();
        objects.push(Object::NodeMetric(serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"collectPolicy": {"reportIntervalSeconds": 60}},
            "status": {"updateTime": report, "nodeMetric": {"nodeUsage": {"resources": {
                "cpu": format!("{}m", 2000 + rng.below(30000)), "memory": format!("{}Gi", 16 + rng.below(120))}}},
                "podsMetric": pods_metric}
        })).unwrap()));
    }
    let reservations = if part2_enabled() {
        RESERVATIONS.min(nodes)
    } else {
        0
    };
    for index in 0..reservations {
        let node = format!("node-{:05}", rng.below(nodes as u64));
        objects.push(reservation(index, &node, now));
    }
    for index in 0..bound {
        let node = format!("node-{:05}", index / 9);
        objects.push(Object::Pod(
            serde_json::from_value(pod_json(index, Some(&node), &mut rng)).unwrap(),
        ));
    }
    let mut pending = Vec::new();
    for index in bound..pods {
        pending.push(pod_json(index, None, &mut rng));
    }
    (objects, pending)
}

fn build(objects: &[Object]) -> Scheduler {
    let config = SchedulerConfiguration::from_yaml(CONFIG).unwrap();
    let mut scheduler =
        koord_scheduler::build_scheduler(&config, Duration::from_secs(300)).unwrap();
    for object in objects {
        scheduler.apply(Change::Upsert(object.clone()));
    }
    scheduler
}

/// One keep-alive HTTP/1.1 connection.
struct Client {
    reader: BufReader<tokio::net::TcpStream>,
    addr: SocketAddr,
}

impl Client {
    async fn post(&mut self, path: &str, body: &[u8]) -> Vec<u8> {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        let stream = self.reader.get_mut();
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let mut length = 0usize;
        let mut status = String::new();
        self.reader.read_line(&mut status).await.unwrap();
        assert!(status.contains(" 200 "), "{status}");
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).await.unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        let mut response = vec![0u8; length];
        self.reader.read_exact(&mut response).await.unwrap();
        response
    }
}

/// This process's CPU time (user + system) from /proc, to separate our work
/// from waiting for a core on a busy machine; None off Linux.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (clock ticks, 100 Hz).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

/// Filter + prioritize latencies of one measuring pass, all and per kind.
struct Latencies {
    all: Vec<Duration>,
    by_kind: BTreeMap<&'static str, Vec<Duration>>,
    /// The two HTTP exchanges alone: from writing a request to having read
    /// its response, without the client's JSON work around them.
    exchanges: Vec<Duration>,
    exchanges_by_kind: BTreeMap<&'static str, Vec<Duration>>,
    feasible_total: usize,
}

/// Pods per measuring window; windows alternate between storm off and on,
/// so both see the same machine (the load on a shared machine drifts), and
/// each storm window measures the pods of the quiet window before it.
const STORM_WINDOW: usize = 25;

/// Turns the storm writer on and off between measuring windows.
#[derive(Default)]
struct StormSwitch {
    on: AtomicBool,
    stop: AtomicBool,
}

/// `rounds` pods without and `rounds` beside the storm (after 20
/// unmeasured ones), in alternating windows: `/filter`, then
/// `/prioritize` over the feasible nodes.
async fn measure(
    client: &mut Client,
    pending: &[Value],
    names: &[String],
    rounds: usize,
    storm: &StormSwitch,
) -> (Latencies, Latencies) {
    let new = || Latencies {
        all: Vec::with_capacity(rounds),
        by_kind: BTreeMap::new(),
        exchanges: Vec::with_capacity(rounds),
        exchanges_by_kind: BTreeMap::new(),
        feasible_total: 0,
    };
    let (mut quiet, mut stormy) = (new(), new());
    for round in 0..2 * rounds + 20 {
        let window_on = round
            .checked_sub(20)
            .is_some_and(|measured| (measured / STORM_WINDOW) % 2 == 1);
        if storm.on.swap(window_on, Ordering::Relaxed) != window_on {
            // Let the writer get going (or drain) before measuring.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Each storm window repeats the pods of the quiet window before it,
        // so both conditions measure the same pods (kinds come in runs).
        let index = match round.checked_sub(20) {
            None => round,
            Some(measured) => {
                20 + (measured / (2 * STORM_WINDOW)) * STORM_WINDOW + measured % STORM_WINDOW
            }
        };
        let pod = &pending[index % pending.len()];
        let filter_body =
            serde_json::to_vec(&json!({"Pod": pod, "Nodes": null, "NodeNames": names})).unwrap();
        let begin = Instant::now();
        let filtered = client.post("/filter", &filter_body).await;
        let mut exchanges = begin.elapsed();
        // Decoded into the typed result, as kube-scheduler decodes it.
        let result: ExtenderFilterResult = serde_json::from_slice(&filtered).unwrap();
        if round == 0 && std::env::var_os("BENCH_DEBUG").is_some() {
            println!("first /filter response: {result:?}");
        }
        let feasible = result.node_names.unwrap_or_default();
        let prioritize_body =
            serde_json::to_vec(&json!({"Pod": pod, "Nodes": null, "NodeNames": feasible})).unwrap();
        let sent = Instant::now();
        let scores = client.post("/prioritize", &prioritize_body).await;
        exchanges += sent.elapsed();
        let elapsed = begin.elapsed();
        assert!(!scores.is_empty());
        if round >= 20 {
            let latencies = if window_on { &mut stormy } else { &mut quiet };
            latencies.all.push(elapsed);
            let index: usize = pod["metadata"]["name"].as_str().unwrap()[4..]
                .parse()
                .unwrap();
            let kind = part2_kind(index).unwrap_or("plain");
            latencies.by_kind.entry(kind).or_default().push(elapsed);
            latencies.exchanges.push(exchanges);
            latencies
                .exchanges_by_kind
                .entry(kind)
                .or_default()
                .push(exchanges);
            latencies.feasible_total += feasible.len();
        }
    }
    storm.on.store(false, Ordering::Relaxed);
    (quiet, stormy)
}

fn report_latencies(label: &str, nodes: usize, rounds: usize, latencies: &Latencies) {
    println!(
        "/filter + /prioritize over HTTP {label}: average feasible nodes per pod {}",
        latencies.feasible_total / rounds.max(1)
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (kind, times) in &latencies.by_kind {
        let mut times = times.clone();
        times.sort();
        let mut exchanges = latencies.exchanges_by_kind[kind].clone();
        exchanges.sort();
        println!(
            "  {kind}: {} pods, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; HTTP exchanges alone p50 {:.2} ms, max {:.2} ms",
            times.len(),
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.99)),
            ms(*times.last().unwrap()),
            ms(percentile(&exchanges, 0.5)),
            ms(*exchanges.last().unwrap()),
        );
    }
    println!(
        "HTTP exchanges alone (request written → response read, without the client's JSON work) {label}: {}",
        spread(&latencies.exchanges)
    );
    println!(
        "/filter + /prioritize over HTTP {label}, {nodes} node names, {rounds} pods: {} (target p99 < 10 ms)",
        spread(&latencies.all)
    );
}

/// "p50 …, p90 …, p99 …, max … ms" of `times`.
fn spread(times: &[Duration]) -> String {
    let mut sorted = times.to_vec();
    sorted.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(percentile(&sorted, 0.5)),
        ms(percentile(&sorted, 0.9)),
        ms(percentile(&sorted, 0.99)),
        ms(*sorted.last().unwrap()),
    )
}

/// `count` watch updates of bound pods, as the pod watch would deliver them
/// after admission: each changes a label, the pod's main request (cpu or
/// batch-cpu) and a status condition; successive updates of one pod differ.
fn storm_updates(objects: &[Object], count: usize) -> Vec<Object> {
    let bound: Vec<&Object> = objects
        .iter()
        .filter(|o| matches!(o, Object::Pod(_)))
        .collect();
    if bound.is_empty() {
        return Vec::new();
    }
    (0..count)
        .map(|k| {
            // A stride coprime with the bound count visits every pod.
            let Object::Pod(pod) = bound[(k * 7919) % bound.len()] else {
                unreachable!("filtered to pods")
            };
            let mut value = serde_json::to_value(pod).unwrap();
            value["metadata"]["labels"]["revision"] = json!(k.to_string());
            let requests = &mut value["spec"]["containers"][0]["resources"]["requests"];
            if requests.get("cpu").is_some() {
                requests["cpu"] = json!(format!("{}m", 250 + (k * 37) % 1750));
            } else {
                requests["kubernetes.io/batch-cpu"] = json!(format!("{}", 500 + (k * 37) % 1500));
            }
            value["status"]["conditions"] = json!([
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"},
                {"type": "Ready", "status": if k % 2 == 0 { "True" } else { "False" }, "lastTransitionTime": "2025-01-01T00:00:00Z"}
            ]);
            let object = Object::Pod(serde_json::from_value(value).unwrap());
            admission::admit(object).unwrap().object
        })
        .collect()
}

/// What the storm writer achieved.
struct StormReport {
    applied: usize,
    elapsed: Duration,
    /// Sorted; each is one call of the watch's entry point.
    /// (`elapsed` counts only the windows the storm was on.)
    apply_times: Vec<Duration>,
}

/// Applies `updates` round-robin at `rate` per second through the watch's
/// entry point while the switch is on, until it is stopped; behind
/// schedule it does not sleep (catches up within the window).
fn run_storm(
    shared: &SharedScheduler,
    updates: &[Object],
    rate: usize,
    storm: &StormSwitch,
) -> StormReport {
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut active = Duration::ZERO;
    let mut apply_times = Vec::new();
    let mut applied = 0usize;
    while !storm.stop.load(Ordering::Relaxed) && !updates.is_empty() {
        if !storm.on.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let window = Instant::now();
        let mut in_window = 0u32;
        while storm.on.load(Ordering::Relaxed) && !storm.stop.load(Ordering::Relaxed) {
            if let Some(wait) =
                (window + interval * in_window).checked_duration_since(Instant::now())
            {
                std::thread::sleep(wait);
            }
            let change = Change::Upsert(updates[applied % updates.len()].clone());
            let started = Instant::now();
            assert!(apply_watch_changes(shared, vec![change]));
            apply_times.push(started.elapsed());
            applied += 1;
            in_window += 1;
        }
        active += window.elapsed();
    }
    apply_times.sort();
    if apply_times.is_empty() {
        apply_times.push(Duration::ZERO);
    }
    StormReport {
        applied,
        elapsed: active,
        apply_times,
    }
}

/// FNV-1a over bytes: a digest stable across processes and builds.
struct Fnv(u64);

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// This process's resident set size from /proc, in MiB; None off Linux.
fn rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

fn cow_lookup_probe() {
    use koord_scheduler::cache::FastMap;
    use koord_scheduler::cow::CowMap;
    let names: Vec<String> = (0..5000).map(|n| format!("node-{n:05}")).collect();
    let fast: FastMap<String, usize> = names.iter().cloned().zip(0..).collect();
    let cow: CowMap<String, usize> = names.iter().cloned().zip(0..).collect();
    for round in 0..3 {
        let started = Instant::now();
        let mut sum = 0;
        for _ in 0..100 {
            for name in &names {
                sum += fast.get(name.as_str()).copied().unwrap_or(0);
            }
        }
        let fast_took = started.elapsed();
        let started = Instant::now();
        for _ in 0..100 {
            for name in &names {
                sum += cow.get(name.as_str()).copied().unwrap_or(0);
            }
        }
        let cow_took = started.elapsed();
        println!(
            "round {round}: 500,000 lookups: FastMap {fast_took:.2?}, CowMap {cow_took:.2?} ({sum})"
        );
    }
}

fn main() {
    if env_usize("BENCH_COW_PROBE", 0) == 1 {
        cow_lookup_probe();
        return;
    }
    // As the scheduler binary does; BENCH_THP=1 keeps huge pages to compare.
    if env_usize("BENCH_THP", 0) == 0 {
        koord_scheduler::disable_transparent_huge_pages();
    }
    let nodes = env_usize("BENCH_NODES", 5000);
    let pods = env_usize("BENCH_PODS", 50_000);
    let rounds = env_usize("BENCH_ROUNDS", 300);
    let now = SystemTime::now();
    let started = Instant::now();
    let (objects, pending) = generate(nodes, pods, now);
    println!(
        "generated {nodes} nodes, {} bound + {} pending pods in {:.1?}",
        pods - pending.len(),
        pending.len(),
        started.elapsed()
    );

    // HTTP: /filter + /prioritize for one pod over all nodes, first alone,
    // then beside a storm of pod updates.
    let started = Instant::now();
    // The watch delivers pending pods too (their requests count toward quota requests).
    let build_served = || {
        let mut scheduler = build(&objects);
        for pod in &pending {
            scheduler.apply(Change::Upsert(Object::Pod(
                serde_json::from_value(pod.clone()).unwrap(),
            )));
        }
        scheduler
    };
    let shared = Arc::new(koord_scheduler::framework::SchedulerCore::new(
        build_served(),
    ));
    println!(
        "cache and plugin indexes built in {:.1?}; process RSS {} MiB",
        started.elapsed(),
        rss_mib().map_or("?".to_string(), |m| m.to_string())
    );
    // What one publish costs when nothing was written since the last: the
    // copy shares every part (see `koord_scheduler::cow`).
    let mut clone_times: Vec<Duration> = (0..50)
        .map(|_| {
            let snapshot = shared.read().unwrap();
            let started = Instant::now();
            let copy = (*snapshot).clone();
            let took = started.elapsed();
            drop(copy);
            took
        })
        .collect();
    clone_times.sort();
    println!(
        "state copy for a publish: p50 {:.3} ms, max {:.3} ms (50 copies)",
        percentile(&clone_times, 0.5).as_secs_f64() * 1e3,
        clone_times.last().unwrap().as_secs_f64() * 1e3,
    );
    let storm = storm_updates(&objects, env_usize("BENCH_STORM_UPDATES", 4000));
    let storm_rate = env_usize("BENCH_STORM_RATE", 1000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let state = ExtenderState {
        scheduler: Arc::clone(&shared),
        binder: Arc::new(RecordingBinder::default()),
        metrics: ExtenderMetrics::new("koord-scheduler"),
    };
    let names: Vec<String> = (0..nodes).map(|n| format!("node-{n:05}")).collect();
    let measured: Vec<Value> = match std::env::var("BENCH_KIND") {
        Ok(only) => {
            let of_kind: Vec<Value> = pending
                .iter()
                .filter(|pod| {
                    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                    let index = name.get(4..).and_then(|i| i.parse().ok());
                    index.map(|i| part2_kind(i).unwrap_or("plain")) == Some(only.as_str())
                })
                .cloned()
                .collect();
            assert!(
                !of_kind.is_empty(),
                "BENCH_KIND={only:?}: no pending pod of that kind"
            );
            println!("measuring only {only:?} pods ({} pending)", of_kind.len());
            of_kind
        }
        Err(_) => pending.clone(),
    };
    let (quiet, stormy, writer) = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router(state)).await.unwrap() });
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let mut client = Client {
            reader: BufReader::new(stream),
            addr,
        };
        let switch = Arc::new(StormSwitch::default());
        let writer = {
            let shared = Arc::clone(&shared);
            let switch = Arc::clone(&switch);
            std::thread::spawn(move || run_storm(&shared, &storm, storm_rate, &switch))
        };
        let (quiet, stormy) = measure(&mut client, &measured, &names, rounds, &switch).await;
        switch.stop.store(true, Ordering::Relaxed);
        (quiet, stormy, writer.join().unwrap())
    });
    report_latencies("alone", nodes, rounds, &quiet);
    report_latencies(
        &format!("beside a storm of {storm_rate} pod updates/s"),
        nodes,
        rounds,
        &stormy,
    );
    println!(
        "storm writer: {} pod updates over {:.2?} of storm windows = {:.0}/s (asked {storm_rate}/s); apply p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        writer.applied,
        writer.elapsed,
        writer.applied as f64 / writer.elapsed.as_secs_f64().max(1e-9),
        percentile(&writer.apply_times, 0.5).as_secs_f64() * 1e3,
        percentile(&writer.apply_times, 0.99).as_secs_f64() * 1e3,
        writer.apply_times.last().unwrap().as_secs_f64() * 1e3,
    );
    let publishes = shared.publish_stats();
    println!(
        "publishes: {} (every write, storm and setup), mean {:.3} ms, slowest {:.3} ms",
        publishes.published,
        publishes.total.as_secs_f64() * 1e3 / publishes.published.max(1) as f64,
        publishes.slowest.as_secs_f64() * 1e3,
    );
    println!(
        "process RSS after the HTTP runs: {} MiB",
        rss_mib().map_or("?".to_string(), |m| m.to_string())
    );
    drop(runtime);
    drop(shared);

    if env_usize("BENCH_SIMULATOR", 1) == 0 {
        return;
    }
    // Simulator throughput: filter → score → reserve for each pending pod,
    // recording per-node details as `simulate` does.
    let mut scheduler = build(&objects);
    let keys: Vec<String> = pending
        .iter()
        .map(|p| format!("bench/{}", p["metadata"]["name"].as_str().unwrap()))
        .collect();
    for pod in &pending {
        scheduler.apply(Change::Upsert(Object::Pod(
            serde_json::from_value(pod.clone()).unwrap(),
        )));
    }
    let begin = Instant::now();
    let cpu_begin = cpu_time();
    let mut placed = 0usize;
    // (pending, placed) per part-2 kind, to show those plugins really ran.
    let mut by_kind: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    // BENCH_DETAILS=0 skips the per-node details (what `simulate` records).
    let details = env_usize("BENCH_DETAILS", 1) != 0;
    // BENCH_DIGEST=1 prints a digest of every placement (node, reasons,
    // scores, annotations), to check two builds decide alike; it costs CPU
    // inside the timed loop, so its throughput figures do not count.
    let mut digest = (env_usize("BENCH_DIGEST", 0) != 0).then_some(Fnv(0xcbf2_9ce4_8422_2325));
    // Naming the details (what `simulate` does once all pods are placed)
    // is timed apart: the loop records them by node index.
    let mut naming = Duration::ZERO;
    for key in &keys {
        let scheduled = schedule_one_indexed(&mut scheduler, key, now, details);
        let bound = scheduled.node().is_some();
        if details || digest.is_some() {
            let started = Instant::now();
            let placement = scheduled.resolve(&scheduler.cache);
            naming += started.elapsed();
            if let Some(digest) = &mut digest {
                digest.write(serde_json::to_string(&placement).unwrap().as_bytes());
            }
        }
        placed += usize::from(bound);
        let index: usize = key.rsplit('-').next().unwrap().parse().unwrap();
        let Some(kind) = part2_kind(index) else {
            continue;
        };
        let entry = by_kind.entry(kind).or_default();
        entry.0 += 1;
        entry.1 += usize::from(bound);
    }
    let elapsed = begin.elapsed();
    if let Some(digest) = digest {
        println!("placement digest: {:016x}", digest.0);
    }
    for (kind, (pending, bound)) in &by_kind {
        println!("  {kind}: {bound} of {pending} placed");
    }
    if let (Some(start), Some(end)) = (cpu_begin, cpu_time()) {
        let cpu = end.saturating_sub(start);
        println!(
            "simulator CPU time: {:.2?} ({:.0} pods per CPU-second; wall time includes waiting for a core)",
            cpu,
            keys.len() as f64 / cpu.as_secs_f64().max(1e-9)
        );
        if details {
            let placing = cpu.saturating_sub(naming);
            println!(
                "  of which naming the details (wall): {naming:.2?}; without it {:.0} pods per CPU-second",
                keys.len() as f64 / placing.as_secs_f64().max(1e-9)
            );
        }
    }
    println!(
        "simulator: {} pods ({placed} placed) over {nodes} nodes in {:.2?}: {:.0} pods/s (target >= 1000)",
        keys.len(),
        elapsed,
        keys.len() as f64 / elapsed.as_secs_f64()
    );
}
