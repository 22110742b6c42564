#![allow(clippy::unwrap_used)]
//! One LowNodeLoad round over a generated 5,000-node, 50,000-pod snapshot
//! (`cargo bench -p koord-descheduler`).
//!
//! Every node carries 10 pods (Deployment-owned batch and prod pods, a
//! DaemonSet pod, some bare pods) and a NodeMetric; 10% of the nodes are hot
//! (about 90% cpu), 40% cold, the rest in between, so the round classifies
//! every node, sorts the hot ones, runs the fit check of every candidate
//! against the cold nodes and starts migrations under the MigrationController's
//! default limits. Sizes: BENCH_NODES, BENCH_PODS, BENCH_ROUNDS.
//!
//! Reports the time to digest the Kubernetes objects, to index them, and
//! per round the wall time and the process CPU time (from /proc/self/stat).

use std::time::{Duration, Instant};

use apis::slo::v1alpha1::NodeMetric;
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_descheduler::config;
use koord_descheduler::evictor::SnapshotEvictor;
use koord_descheduler::loadaware::{ClusterIndex, LowNodeLoad};
use koord_descheduler::model::{ClusterView, MetricView, NodeView, PodView};
use serde_json::json;

const CONFIG: &str = r#"
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
profiles:
- name: koord-descheduler
  plugins:
    balance:
      enabled:
      - name: LowNodeLoad
  pluginConfig:
  - name: LowNodeLoad
    args:
      lowThresholds: {cpu: 30, memory: 30}
      highThresholds: {cpu: 70, memory: 80}
      anomalyCondition: {consecutiveAbnormalities: 1, consecutiveNormalities: 1}
"#;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// User plus system CPU time of this process.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat; index from the state field (field 3).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on Linux.
    Some(Duration::from_millis((utime + stime) * 10))
}

fn generate(nodes: usize, pods: usize) -> ClusterView {
    let per_node = pods / nodes.max(1);
    let updated = "2024-05-01T11:59:30Z";
    let mut view = ClusterView::default();
    for n in 0..nodes {
        let name = format!("node-{n:05}");
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .unwrap();
        view.nodes.push(NodeView::of(&node));
        // Hot, cold or in between: pod cpu usage in milli-cores.
        let pod_cpu = match n % 10 {
            0 => 2800,
            1..=4 => 400,
            _ => 1600,
        };
        let mut pod_metrics = Vec::new();
        for p in 0..per_node {
            let pod_name = format!("{name}-pod-{p}");
            let (owner, labels) = match p {
                0 => (
                    json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds-agent", "controller": true}]),
                    json!({}),
                ),
                9 => (json!([]), json!({})),
                _ => (
                    json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("app-{}", (n + p) % 500), "uid": format!("rs-{}", (n + p) % 500), "controller": true}]),
                    if p % 2 == 0 {
                        json!({"koordinator.sh/priority-class": "koord-batch"})
                    } else {
                        json!({})
                    },
                ),
            };
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {
                    "name": pod_name, "namespace": format!("ns-{}", p % 7), "uid": format!("uid-{n}-{p}"),
                    "labels": labels, "ownerReferences": owner,
                    "creationTimestamp": format!("2024-05-01T10:{:02}:00Z", p * 5)
                },
                "spec": {
                    "nodeName": name, "schedulerName": "koord-scheduler",
                    "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}]
                },
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap();
            pod_metrics.push(json!({
                "namespace": format!("ns-{}", p % 7), "name": pod_name,
                "podUsage": {"resources": {"cpu": format!("{pod_cpu}m"), "memory": "2Gi"}}
            }));
            view.pods.push(PodView::of(&pod));
        }
        let metric: NodeMetric = serde_json::from_value(json!({
            "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
            "metadata": {"name": name},
            "status": {
                "updateTime": updated,
                "nodeMetric": {"systemUsage": {"resources": {"cpu": "1", "memory": "4Gi"}}},
                "podsMetric": pod_metrics
            }
        }))
        .unwrap();
        view.node_metrics.insert(name, MetricView::of(&metric));
    }
    view
}

fn main() {
    let nodes = env_usize("BENCH_NODES", 5000);
    let pods = env_usize("BENCH_PODS", 50_000);
    let rounds = env_usize("BENCH_ROUNDS", 5).max(1);
    let started = Instant::now();
    let view = generate(nodes, pods);
    println!(
        "generated and digested {} nodes, {} pods, {} NodeMetrics in {:.1?}",
        view.nodes.len(),
        view.pods.len(),
        view.node_metrics.len(),
        started.elapsed()
    );
    let configuration = config::load(CONFIG).unwrap();
    let profile = &configuration.profiles[0];
    let low_node_load = profile.low_node_load.clone().unwrap();
    let started = Instant::now();
    let index = ClusterIndex::new(&view);
    println!("indexed in {:.1?}", started.elapsed());
    let node_refs: Vec<&NodeView> = view.nodes.iter().collect();
    let now = k8s_openapi::jiff::Timestamp::from_second(1_714_564_800)
        .unwrap()
        .as_nanosecond();

    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    let mut migrations = 0;
    for _ in 0..rounds {
        let cpu_before = cpu_time();
        let started = Instant::now();
        let mut evictor = SnapshotEvictor::new(
            &index,
            &profile.migration_controller,
            low_node_load.evictable_namespaces.as_ref(),
            &low_node_load.pod_selectors,
            &Default::default(),
        )
        .unwrap();
        let mut plugin = LowNodeLoad::new(low_node_load.clone());
        let report = plugin.balance(&index, &node_refs, &mut evictor, now, now);
        let wall = started.elapsed();
        migrations = report.migrations().count();
        std::hint::black_box(&report);
        walls.push(wall);
        if let (Some(before), Some(after)) = (cpu_before, cpu_time()) {
            cpus.push(after.saturating_sub(before));
        }
    }
    walls.sort();
    cpus.sort();
    println!(
        "LowNodeLoad round over {} nodes / {} pods: {migrations} migrations; wall min {:.1?} median {:.1?} max {:.1?}",
        view.nodes.len(),
        view.pods.len(),
        walls[0],
        walls[walls.len() / 2],
        walls[walls.len() - 1]
    );
    if !cpus.is_empty() {
        println!(
            "CPU per round (10 ms resolution): min {:.0?} median {:.0?} max {:.0?}",
            cpus[0],
            cpus[cpus.len() / 2],
            cpus[cpus.len() - 1]
        );
    }
}
