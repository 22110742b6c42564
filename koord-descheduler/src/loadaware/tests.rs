//! Cases transcribed from upstream's `low_node_load_test.go` tables (nodes,
//! pods, thresholds and the expected evictions, as facts), run through the
//! core with the snapshot evictor configured like upstream's test evictor
//! (no migration limits, no reservation requirement).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

use super::*;
use crate::config::types::MigrationControllerArgs;
use crate::config::{AnomalyCondition, LowNodeLoadConfig, NodePoolConfig};
use crate::evictor::SnapshotEvictor;
use crate::model::{MetricView, NodeView, PodView};

const SECOND: i128 = 1_000_000_000;

fn node(name: &str, milli_cpu: i64, memory: i64, pods: i64) -> Value {
    json!({
        "metadata": {"name": name, "labels": {}},
        "status": {
            "allocatable": {"cpu": format!("{milli_cpu}m"), "memory": memory.to_string(), "pods": pods.to_string()},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

fn unschedulable(mut node: Value) -> Value {
    node["spec"] = json!({"unschedulable": true});
    node
}

fn pod(name: &str, milli_cpu: i64, memory: i64, node: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": format!("{milli_cpu}m"), "memory": memory.to_string()}}}]
        }
    })
}

fn rs_owned(mut pod: Value) -> Value {
    pod["metadata"]["ownerReferences"] =
        json!([{"kind": "ReplicaSet", "apiVersion": "apps/v1", "name": "replicaset-1", "uid": ""}]);
    pod
}

fn ds_owned(mut pod: Value) -> Value {
    pod["metadata"]["ownerReferences"] =
        json!([{"kind": "DaemonSet", "apiVersion": "apps/v1", "name": "ds", "uid": ""}]);
    pod
}

/// Upstream's "local storage, mirror" pod: owned by a Pod, hostPath and emptyDir, mirror annotations.
fn local_storage_mirror(mut pod: Value) -> Value {
    pod["metadata"]["ownerReferences"] =
        json!([{"kind": "Pod", "apiVersion": "v1", "name": "", "uid": ""}]);
    pod["spec"]["volumes"] = json!([{"name": "sample", "hostPath": {"path": "somePath"}, "emptyDir": {"sizeLimit": "10"}}]);
    pod["metadata"]["annotations"] = json!({
        "kubernetes.io/config.source": "api",
        "kubernetes.io/config.mirror": "mirror"
    });
    pod
}

fn critical(mut pod: Value) -> Value {
    pod["metadata"]["namespace"] = json!("kube-system");
    pod["spec"]["priority"] = json!(2_000_000_000);
    pod
}

fn in_namespace(mut pod: Value, namespace: &str) -> Value {
    pod["metadata"]["namespace"] = json!(namespace);
    pod
}

fn with_priority(mut pod: Value, priority: i32) -> Value {
    pod["spec"]["priority"] = json!(priority);
    pod
}

fn with_label(mut pod: Value, key: &str, value: &str) -> Value {
    pod["metadata"]["labels"] = json!({ key: value });
    pod
}

/// Upstream's test NodeMetrics: each pod's usage is its request.
fn cluster(nodes: Vec<Value>, pods: Vec<Value>) -> ClusterView {
    let nodes: Vec<NodeView> = nodes
        .into_iter()
        .map(|v| NodeView::of(&serde_json::from_value::<Node>(v).unwrap()))
        .collect();
    let pods: Vec<PodView> = pods
        .into_iter()
        .map(|v| PodView::of(&serde_json::from_value::<Pod>(v).unwrap()))
        .collect();
    let mut view = ClusterView {
        nodes,
        pods,
        ..Default::default()
    };
    for node in &view.nodes {
        let pods = view
            .pods
            .iter()
            .filter(|pod| pod.node_name == node.name)
            .map(|pod| (pod.key().to_string(), pod.requests.clone()))
            .collect();
        view.node_metrics.insert(
            node.name.clone(),
            MetricView {
                node: node.name.clone(),
                update_time: Some(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap()),
                has_node_metric: true,
                pods,
                ..Default::default()
            },
        );
    }
    view
}

fn thresholds(entries: &[(&str, f64)]) -> ResourceThresholds {
    entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

struct Case {
    low: ResourceThresholds,
    high: ResourceThresholds,
    prod_low: ResourceThresholds,
    prod_high: ResourceThresholds,
    deviation: bool,
    evictable_namespaces: Option<crate::config::types::Namespaces>,
}

impl Default for Case {
    fn default() -> Self {
        Case {
            low: thresholds(&[("cpu", 30.0), ("pods", 30.0)]),
            high: thresholds(&[("cpu", 50.0), ("pods", 50.0)]),
            prod_low: ResourceThresholds::new(),
            prod_high: ResourceThresholds::new(),
            deviation: false,
            evictable_namespaces: None,
        }
    }
}

impl Case {
    fn config(&self) -> LowNodeLoadConfig {
        LowNodeLoadConfig {
            paused: false,
            dry_run: false,
            number_of_nodes: 0,
            node_metric_expiration_seconds: Some(180),
            evictable_namespaces: self.evictable_namespaces.clone(),
            pod_selectors: Vec::new(),
            node_fit: true,
            detector_cache_timeout: Duration::from_secs(300),
            node_pools: vec![NodePoolConfig {
                name: "pool".into(),
                node_selector: None,
                use_deviation_thresholds: self.deviation,
                low_thresholds: self.low.clone(),
                high_thresholds: self.high.clone(),
                prod_low_thresholds: self.prod_low.clone(),
                prod_high_thresholds: self.prod_high.clone(),
                resource_weights: [("cpu".to_string(), 1), ("memory".to_string(), 1)].into(),
                anomaly_condition: Some(AnomalyCondition {
                    timeout: Duration::ZERO,
                    consecutive_abnormalities: 1,
                    consecutive_normalities: 1,
                }),
            }],
        }
    }

    /// Runs one round; the evicted pods' names in order.
    fn run(&self, view: &ClusterView) -> (Vec<String>, RoundReport) {
        let args = test_evictor_args();
        let index = ClusterIndex::new(view);
        let config = self.config();
        let mut evictor = SnapshotEvictor::new(
            &index,
            &args,
            config.evictable_namespaces.as_ref(),
            &config.pod_selectors,
            &Default::default(),
        )
        .unwrap();
        let nodes: Vec<&NodeView> = view.nodes.iter().collect();
        let mut plugin = LowNodeLoad::new(config.clone());
        let report = plugin.balance(&index, &nodes, &mut evictor, 1000 * SECOND, 1000 * SECOND);
        let names = report.migrations().map(|m| m.name.clone()).collect();
        (names, report)
    }
}

/// Upstream's test evictor: the protective checks without migration limits.
fn test_evictor_args() -> MigrationControllerArgs {
    let mut args = MigrationControllerArgs::default();
    crate::config::defaults::set_migration_controller_defaults(&mut args);
    args.default_job_mode = "EvictDirectly".into();
    args.max_migrating_per_node = Some(0);
    args
}

fn three_nodes() -> Vec<Value> {
    vec![
        node("n1", 4000, 3000, 9),
        node("n2", 4000, 3000, 10),
        unschedulable(node("n3", 4000, 3000, 10)),
    ]
}

/// p6 (DaemonSet), p7 (local storage, mirror), p8 (system critical) on n1.
fn protected_pods(memory: i64) -> Vec<Value> {
    vec![
        ds_owned(pod("p6", 400, memory, "n1")),
        local_storage_mirror(pod("p7", 400, memory, "n1")),
        critical(pod("p8", 400, memory, "n1")),
    ]
}

#[test]
fn no_evictable_pods() {
    let mut pods: Vec<Value> = (1..=4)
        .map(|i| ds_owned(pod(&format!("p{i}"), 400, 0, "n1")))
        .collect();
    pods.push(local_storage_mirror(pod("p5", 400, 0, "n1")));
    pods.push(critical(pod("p6", 400, 0, "n1")));
    pods.push(rs_owned(pod("p9", 400, 0, "n2")));
    let (evicted, report) = Case::default().run(&cluster(three_nodes(), pods));
    assert!(evicted.is_empty(), "{evicted:?}");
    let source = &report.pools[0].sources[0];
    assert_eq!(source.node, "n1");
    assert_eq!(source.stopped, "no removable pods");
    let reasons: BTreeMap<&str, &str> = source
        .skipped
        .iter()
        .map(|s| (s.name.as_str(), s.reason.as_str()))
        .collect();
    assert_eq!(reasons["p1"], "pod is a DaemonSet pod");
    assert!(
        reasons["p5"].contains("pod is a mirror pod"),
        "{}",
        reasons["p5"]
    );
    assert!(reasons["p5"].contains("local storage"), "{}", reasons["p5"]);
    assert!(
        reasons["p6"].contains("system critical priority"),
        "{}",
        reasons["p6"]
    );
}

#[test]
fn without_priorities_four_pods_move_until_the_cold_node_is_full() {
    let mut pods: Vec<Value> = (1..=5)
        .map(|i| rs_owned(pod(&format!("p{i}"), 400, 0, "n1")))
        .collect();
    pods.extend(protected_pods(0));
    pods.push(rs_owned(pod("p9", 400, 0, "n2")));
    let view = cluster(three_nodes(), pods);
    let (evicted, report) = Case::default().run(&view);
    assert_eq!(evicted.len(), 4, "{evicted:?}");
    let pool = &report.pools[0];
    let class = |name: &str| {
        pool.classification
            .iter()
            .find(|c| c.node == name)
            .map(|c| c.class)
            .unwrap()
    };
    assert_eq!(class("n1"), NodeClass::High);
    // n2's pods are Burstable, hence prod, and under the (100%) prod thresholds too.
    assert_eq!(class("n2"), NodeClass::BothLow);
    assert_eq!(class("n3"), NodeClass::Appropriate);
    let n1 = &pool.classification[0];
    assert_eq!(n1.usage["cpu"].usage, 3200);
    assert_eq!(n1.usage["cpu"].high_threshold, 2000);
    assert_eq!(n1.usage["pods"].high_threshold, 4);
    // The fifth pod would have pushed n2 over its cpu threshold.
    let source = &pool.sources[0];
    assert!(
        source
            .skipped
            .iter()
            .any(|s| s.name == "p5" && s.reason.contains("1 would go over their high thresholds")),
        "{:?}",
        source.skipped
    );
}

#[test]
fn excluded_namespaces_protect_every_candidate() {
    let mut pods: Vec<Value> = (1..=5)
        .map(|i| in_namespace(pod(&format!("p{i}"), 400, 0, "n1"), "namespace1"))
        .collect();
    pods.extend(protected_pods(0));
    pods.push(rs_owned(pod("p9", 400, 0, "n2")));
    let case = Case {
        evictable_namespaces: Some(crate::config::types::Namespaces {
            include: Vec::new(),
            exclude: vec!["namespace1".into()],
        }),
        ..Default::default()
    };
    let (evicted, report) = case.run(&cluster(three_nodes(), pods));
    assert!(evicted.is_empty(), "{evicted:?}");
    assert!(
        report.pools[0].sources[0]
            .skipped
            .iter()
            .any(|s| s.name == "p1"
                && s.reason
                    == "namespace namespace1 is excluded by LowNodeLoad evictableNamespaces")
    );
}

#[test]
fn included_namespace_only() {
    let mut pods = vec![
        rs_owned(pod("p1", 400, 0, "n1")),
        rs_owned(pod("p2", 400, 0, "n1")),
        in_namespace(pod("p3", 400, 0, "n1"), "namespace3"),
        in_namespace(pod("p4", 400, 0, "n1"), "namespace4"),
        in_namespace(pod("p5", 400, 0, "n1"), "namespace5"),
    ];
    pods.extend(protected_pods(0));
    pods.push(rs_owned(pod("p9", 400, 0, "n2")));
    let case = Case {
        evictable_namespaces: Some(crate::config::types::Namespaces {
            include: vec!["default".into()],
            exclude: Vec::new(),
        }),
        ..Default::default()
    };
    let (mut evicted, _) = case.run(&cluster(three_nodes(), pods));
    evicted.sort();
    assert_eq!(evicted, ["p1", "p2"]);
}

#[test]
fn stops_when_the_cold_nodes_memory_is_used_up() {
    let mut pods: Vec<Value> = (1..=5)
        .map(|i| rs_owned(pod(&format!("p{i}"), 400, 300, "n1")))
        .collect();
    pods.extend(protected_pods(300));
    pods.push(rs_owned(pod("p9", 400, 2100, "n2")));
    let (evicted, report) = Case::default().run(&cluster(three_nodes(), pods));
    // Four candidates by pod count, three before memory runs out.
    assert_eq!(evicted.len(), 3, "{evicted:?}");
    assert_eq!(
        report.pools[0].sources[0].stopped,
        "every removable pod was taken"
    );
}

#[test]
fn with_priorities_the_low_priority_pod_goes_first() {
    let high = 10_000;
    let low = 0;
    let mut pods: Vec<Value> = (1..=4)
        .map(|i| with_priority(rs_owned(pod(&format!("p{i}"), 400, 0, "n1")), high))
        .collect();
    pods.push(with_priority(rs_owned(pod("p5", 400, 0, "n1")), low));
    pods.push(with_priority(ds_owned(pod("p6", 400, 0, "n1")), high));
    pods.push(with_priority(
        local_storage_mirror(pod("p7", 400, 0, "n1")),
        low,
    ));
    pods.push(critical(pod("p8", 400, 0, "n1")));
    pods.push(rs_owned(pod("p9", 400, 0, "n2")));
    let (evicted, report) = Case::default().run(&cluster(three_nodes(), pods));
    assert_eq!(evicted.len(), 4, "{evicted:?}");
    // The fit check runs in pod order and fills n2 before p5's turn.
    assert!(
        report.pools[0].sources[0]
            .skipped
            .iter()
            .any(|s| s.name == "p5" && s.reason.contains("would go over"))
    );
}

fn view_of(pod: Value) -> PodView {
    PodView::of(&serde_json::from_value::<Pod>(pod).unwrap())
}

#[test]
fn victim_order_follows_upstreams_pod_sorter() {
    let best_effort = |name: &str| {
        let mut p = pod(name, 0, 0, "n1");
        p["spec"]["containers"][0]["resources"] = json!({});
        p
    };
    let pods = [
        // Prod (Burstable), priority 0.
        view_of(pod("burstable", 100, 0, "n1")),
        // Batch by label: a lower priority class goes first.
        view_of(with_label(
            pod("batch", 100, 0, "n1"),
            "koordinator.sh/priority-class",
            "koord-batch",
        )),
        // Free beats batch.
        view_of(with_label(
            pod("free", 100, 0, "n1"),
            "koordinator.sh/priority-class",
            "koord-free",
        )),
        // Same class as `burstable` but BestEffort: Kubernetes QoS decides.
        view_of(with_label(
            best_effort("best-effort"),
            "koordinator.sh/priority-class",
            "koord-prod",
        )),
        // Prod by label with a higher priority value than `prod-low`.
        view_of(with_priority(
            with_label(
                pod("prod-high", 100, 0, "n1"),
                "koordinator.sh/priority-class",
                "koord-prod",
            ),
            9500,
        )),
        view_of(with_priority(
            with_label(
                pod("prod-low", 100, 0, "n1"),
                "koordinator.sh/priority-class",
                "koord-prod",
            ),
            9100,
        )),
    ];
    let mut candidates: Vec<sort::Candidate<'_>> = pods
        .iter()
        .map(|pod| sort::Candidate {
            pod,
            usage_score: Some(0.0),
        })
        .collect();
    candidates.sort_by(sort::compare_victims);
    let order: Vec<&str> = candidates.iter().map(|c| c.pod.name.as_str()).collect();
    assert_eq!(
        order,
        [
            "free",
            "batch",
            "best-effort",
            "burstable",
            "prod-low",
            "prod-high"
        ]
    );

    // Equal otherwise: the pod covering the excess best first, no metric last, then the youngest.
    let mut young = view_of(pod("young", 100, 0, "n1"));
    young.created_at = Some(2);
    let mut old = view_of(pod("old", 100, 0, "n1"));
    old.created_at = Some(1);
    let big = view_of(pod("big", 100, 0, "n1"));
    let unmeasured = view_of(pod("unmeasured", 100, 0, "n1"));
    let mut candidates = [
        sort::Candidate {
            pod: &unmeasured,
            usage_score: None,
        },
        sort::Candidate {
            pod: &old,
            usage_score: Some(0.5),
        },
        sort::Candidate {
            pod: &young,
            usage_score: Some(0.5),
        },
        sort::Candidate {
            pod: &big,
            usage_score: Some(1.9),
        },
    ];
    candidates.sort_by(sort::compare_victims);
    let order: Vec<&str> = candidates.iter().map(|c| c.pod.name.as_str()).collect();
    assert_eq!(order, ["big", "young", "old", "unmeasured"]);
}

#[test]
fn deviation_thresholds_around_the_average() {
    let mut pods: Vec<Value> = (1..=5)
        .map(|i| rs_owned(pod(&format!("p{i}"), 400, 0, "n1")))
        .collect();
    pods.extend(protected_pods(0));
    pods.push(rs_owned(pod("p9", 400, 0, "n2")));
    let case = Case {
        low: thresholds(&[("cpu", 5.0), ("pods", 5.0)]),
        high: thresholds(&[("cpu", 5.0), ("pods", 5.0)]),
        deviation: true,
        ..Default::default()
    };
    let (evicted, _) = case.run(&cluster(three_nodes(), pods));
    assert_eq!(evicted.len(), 2, "{evicted:?}");
}

#[test]
fn prod_usage_over_its_thresholds_moves_prod_pods_only() {
    let mut pods = vec![
        rs_owned(pod("p1", 400, 0, "n1")),
        rs_owned(pod("p2", 400, 0, "n1")),
    ];
    for i in 3..=5 {
        pods.push(with_label(
            rs_owned(pod(&format!("p{i}"), 400, 0, "n1")),
            "koordinator.sh/priority-class",
            "koord-batch",
        ));
    }
    pods.extend(protected_pods(0));
    pods.push(rs_owned(pod("p9", 400, 0, "n2")));
    let case = Case {
        high: thresholds(&[("cpu", 90.0), ("pods", 90.0)]),
        prod_low: thresholds(&[("cpu", 20.0), ("pods", 20.0)]),
        prod_high: thresholds(&[("cpu", 40.0), ("pods", 40.0)]),
        ..Default::default()
    };
    let (mut evicted, report) = case.run(&cluster(three_nodes(), pods));
    evicted.sort();
    assert_eq!(evicted, ["p1", "p2"]);
    let n1 = report.pools[0]
        .classification
        .iter()
        .find(|c| c.node == "n1")
        .unwrap();
    assert_eq!(n1.class, NodeClass::ProdHigh);
    assert!(report.pools[0].sources.iter().all(|s| s.prod));
}

#[test]
fn anomaly_condition_delays_the_first_migration() {
    let mut pods: Vec<Value> = (1..=5)
        .map(|i| rs_owned(pod(&format!("p{i}"), 400, 0, "n1")))
        .collect();
    pods.extend(protected_pods(0));
    pods.push(rs_owned(pod("p9", 400, 0, "n2")));
    let view = cluster(three_nodes(), pods);
    let index = ClusterIndex::new(&view);
    let mut config = Case::default().config();
    config.node_pools[0].anomaly_condition = Some(AnomalyCondition {
        timeout: Duration::from_secs(60),
        consecutive_abnormalities: 2,
        consecutive_normalities: 1,
    });
    let args = test_evictor_args();
    let nodes: Vec<&NodeView> = view.nodes.iter().collect();
    let mut plugin = LowNodeLoad::new(config);
    let mut migrations_per_round = Vec::new();
    for round in 0..3 {
        let mut evictor =
            SnapshotEvictor::new(&index, &args, None, &[], &Default::default()).unwrap();
        let now = (1000 + round * 10) * SECOND;
        let report = plugin.balance(&index, &nodes, &mut evictor, now, 1000 * SECOND);
        let n1 = report.pools[0]
            .classification
            .iter()
            .find(|c| c.node == "n1")
            .unwrap();
        let anomaly = n1.anomaly.as_ref().unwrap();
        assert_eq!(anomaly.required_more_than, 2);
        migrations_per_round.push(report.migrations().count());
    }
    // Hot for 1, 2, then 3 (> 2) rounds in a row.
    assert_eq!(migrations_per_round, [0, 0, 4]);
}

#[test]
fn expired_node_metrics_leave_the_node_out() {
    let pods = vec![rs_owned(pod("p1", 400, 0, "n1"))];
    let view = cluster(three_nodes(), pods);
    let index = ClusterIndex::new(&view);
    let args = test_evictor_args();
    let nodes: Vec<&NodeView> = view.nodes.iter().collect();
    let mut plugin = LowNodeLoad::new(Case::default().config());
    let mut evictor = SnapshotEvictor::new(&index, &args, None, &[], &Default::default()).unwrap();
    // Metrics were updated at 1000 s; 180 s later they count as expired.
    let report = plugin.balance(&index, &nodes, &mut evictor, 1180 * SECOND, 1180 * SECOND);
    assert_eq!(report.pools[0].skipped_nodes.len(), 3);
    assert_eq!(
        report.pools[0].skipped_nodes[0].reason,
        "NodeMetric expired (older than 180s)"
    );
    let report = plugin.balance(&index, &nodes, &mut evictor, 1179 * SECOND, 1179 * SECOND);
    assert!(report.pools[0].skipped_nodes.is_empty());
}

#[test]
fn new_thresholds_fill_in_like_upstream() {
    let pool = NodePoolConfig {
        name: "p".into(),
        node_selector: None,
        use_deviation_thresholds: false,
        low_thresholds: thresholds(&[("pods", 30.0)]),
        high_thresholds: thresholds(&[("cpu", 70.0), ("pods", 50.0)]),
        prod_low_thresholds: ResourceThresholds::new(),
        prod_high_thresholds: ResourceThresholds::new(),
        resource_weights: Default::default(),
        anomaly_condition: None,
    };
    let filled = pool_thresholds(&pool);
    assert_eq!(filled.resources, ["cpu", "memory", "pods"]);
    // cpu has no low threshold: both low and high become 100 (the high 70 is overwritten, as upstream).
    assert_eq!(filled.low["cpu"], 100.0);
    assert_eq!(filled.high["cpu"], 100.0);
    assert_eq!(filled.high["pods"], 50.0);
    assert_eq!(filled.prod_high["memory"], 100.0);
    let deviation = NodePoolConfig {
        use_deviation_thresholds: true,
        ..pool
    };
    assert_eq!(pool_thresholds(&deviation).low["memory"], 0.0);
}
