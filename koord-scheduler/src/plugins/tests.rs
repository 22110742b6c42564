//! Plugin tests on hand-built snapshots, through the framework.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::json;

use crate::framework::{ReserveError, ScoreOutcome};
use crate::testutil::*;

const GI: i64 = 1 << 30;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------- NodeResourcesFit ----------

#[test]
fn batch_resources_fit_counts_assumed_pods_and_rejects_when_full() {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node(
                "n1",
                &[
                    ("cpu", "8"),
                    ("kubernetes.io/batch-cpu", "4000"),
                    ("kubernetes.io/batch-memory", "8Gi"),
                ],
            ),
            node("n2", &[("cpu", "8")]),
            pod(PodSpec {
                name: "first",
                requests: &[
                    ("kubernetes.io/batch-cpu", "3000"),
                    ("kubernetes.io/batch-memory", "1Gi"),
                ],
                priority: Some(5500),
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "second",
                requests: &[("kubernetes.io/batch-cpu", "2000")],
                priority: Some(5500),
                ..PodSpec::default()
            }),
        ],
    );
    let outcome = filter(&s, "default/first", t0());
    assert_eq!(outcome.feasible, vec!["n1"]);
    assert_eq!(
        outcome.failed["n2"],
        "Insufficient kubernetes.io/batch-cpu, Insufficient kubernetes.io/batch-memory"
    );
    s.reserve("default/first", "n1", t0()).unwrap();
    assert_eq!(
        s.cache
            .node("n1")
            .unwrap()
            .requested
            .get("kubernetes.io/batch-cpu"),
        3000
    );
    // 4000 - 3000 assumed leaves 1000 < 2000: no node fits.
    let outcome = filter(&s, "default/second", t0());
    assert!(outcome.feasible.is_empty());
    assert_eq!(outcome.failed["n1"], "Insufficient kubernetes.io/batch-cpu");
    // Binding to a node that no longer fits is refused at reservation time.
    let err = s.reserve("default/second", "n1", t0()).unwrap_err();
    assert!(matches!(err, ReserveError::NoLongerFits { .. }), "{err}");
}

/// Objects that went through admission, as the watch and `/filter` deliver them.
fn admitted(objects: Vec<crate::cache::Object>) -> Vec<crate::cache::Object> {
    objects
        .into_iter()
        .map(|object| crate::admission::admit(object).unwrap().object)
        .collect()
}

#[test]
fn deprecated_batch_names_are_counted_as_the_current_ones() {
    let mut s = scheduler("");
    load(
        &mut s,
        admitted(vec![
            // A node and a bound pod from before the rename.
            node("n1", &[("cpu", "8"), ("koordinator.sh/batch-cpu", "4000")]),
            node("n2", &[("cpu", "8"), ("kubernetes.io/batch-cpu", "500")]),
            pod(PodSpec {
                name: "old",
                node: Some("n1"),
                requests: &[("koordinator.sh/batch-cpu", "3000")],
                priority: Some(5500),
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "big",
                requests: &[("koordinator.sh/batch-cpu", "2000")],
                priority: Some(5500),
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "small",
                requests: &[("koordinator.sh/batch-cpu", "1000")],
                priority: Some(5500),
                ..PodSpec::default()
            }),
        ]),
    );
    assert_eq!(
        s.cache
            .node("n1")
            .unwrap()
            .requested
            .get("kubernetes.io/batch-cpu"),
        3000
    );
    let outcome = filter(&s, "default/big", t0());
    assert!(outcome.feasible.is_empty(), "{outcome:?}");
    assert_eq!(outcome.failed["n1"], "Insufficient kubernetes.io/batch-cpu");
    assert_eq!(outcome.failed["n2"], "Insufficient kubernetes.io/batch-cpu");
    let outcome = filter(&s, "default/small", t0());
    assert_eq!(outcome.feasible, vec!["n1"]);
}

// ---------- LoadAwareScheduling ----------

fn load_aware_cluster(extra_config: &str) -> crate::framework::Scheduler {
    let mut s = scheduler(extra_config);
    let ten_cpus = [("cpu", "10"), ("memory", "100Gi")];
    let recent = t0() - secs(10);
    load(
        &mut s,
        vec![
            node("busy", &ten_cpus),
            node("idle", &ten_cpus),
            node("stale", &ten_cpus),
            node("no-metric", &ten_cpus),
            node_with(
                "custom",
                &ten_cpus,
                &[(
                    "scheduling.koordinator.sh/usage-thresholds",
                    r#"{"usageThresholds":{"cpu":35}}"#,
                )],
            ),
            node_metric(
                "busy",
                recent,
                &[("cpu", "6"), ("memory", "10Gi")],
                json!([]),
            ),
            node_metric(
                "idle",
                recent,
                &[("cpu", "3"), ("memory", "10Gi")],
                json!([]),
            ),
            node_metric(
                "stale",
                t0() - secs(200),
                &[("cpu", "1"), ("memory", "10Gi")],
                json!([]),
            ),
            node_metric(
                "custom",
                recent,
                &[("cpu", "3"), ("memory", "10Gi")],
                json!([]),
            ),
            pod(PodSpec {
                name: "incoming",
                requests: &[("cpu", "1")],
                ..PodSpec::default()
            }),
        ],
    );
    s
}

#[test]
fn load_aware_filters_on_estimated_usage_staleness_and_node_overrides() {
    let s = load_aware_cluster("");
    let outcome = filter(&s, "default/incoming", t0());
    // busy: 6000 + round(1000 × 85%) = 6850 of 10000 → 69% > 65%.
    assert_eq!(outcome.failed["busy"], "node(s) cpu usage exceed threshold");
    assert_eq!(outcome.failed["stale"], "node(s) nodeMetric expired");
    // custom: 3850 → 39% > the node's own 35%.
    assert_eq!(
        outcome.failed["custom"],
        "node(s) cpu usage exceed threshold"
    );
    assert_eq!(outcome.feasible, vec!["idle", "no-metric"]);
}

#[test]
fn load_aware_can_schedule_on_expired_metrics_when_configured() {
    let s = load_aware_cluster(&only(
        "LoadAwareScheduling",
        "{enableScheduleWhenNodeMetricsExpired: true}",
    ));
    let outcome = filter(&s, "default/incoming", t0());
    assert!(outcome.feasible.contains(&"stale".to_string()));
    // Expired metrics score 0; a missing metric scores 0 too.
    let scores = scores(
        &s,
        "default/incoming",
        &["stale", "no-metric", "idle"],
        t0(),
    );
    assert_eq!(&scores[..2], &[0, 0]);
    assert!(scores[2] > 0);
}

#[test]
fn load_aware_adds_pods_assigned_since_the_last_report() {
    let mut s = load_aware_cluster("");
    let report = t0() - secs(10);
    load(
        &mut s,
        vec![
            node("fresh", &[("cpu", "10"), ("memory", "100Gi")]),
            node("settled", &[("cpu", "10"), ("memory", "100Gi")]),
            node_metric("fresh", report, &[("cpu", "5")], json!([])),
            node_metric(
                "settled",
                report,
                &[("cpu", "5")],
                json!([{"namespace": "default", "name": "old", "podUsage": {"resources": {"cpu": "500m"}}}]),
            ),
            // Bound after the report, no usage yet: its estimate (1700m) counts.
            pod(PodSpec {
                name: "new",
                node: Some("fresh"),
                requests: &[("cpu", "2")],
                scheduled_at: Some(t0() - secs(5)),
                ..PodSpec::default()
            }),
            // Bound long ago and reported: only the report counts.
            pod(PodSpec {
                name: "old",
                node: Some("settled"),
                requests: &[("cpu", "2")],
                scheduled_at: Some(t0() - secs(1000)),
                ..PodSpec::default()
            }),
        ],
    );
    let outcome = filter(&s, "default/incoming", t0());
    // fresh: 5000 + 1700 + 850 = 7550 → 76%; settled: 5000 + 850 → 59%.
    assert_eq!(
        outcome.failed["fresh"],
        "node(s) cpu usage exceed threshold"
    );
    assert!(outcome.feasible.contains(&"settled".to_string()));
}

#[test]
fn load_aware_caps_an_absurd_custom_estimation_time_from_an_annotation() {
    let mut s = load_aware_cluster(&only(
        "LoadAwareScheduling",
        "{allowCustomizeEstimation: true}",
    ));
    load(
        &mut s,
        vec![
            node("settled", &[("cpu", "10"), ("memory", "100Gi")]),
            node_metric(
                "settled",
                t0() - secs(10),
                &[("cpu", "5")],
                json!([{"namespace": "default", "name": "old", "podUsage": {"resources": {"cpu": "500m"}}}]),
            ),
            // Bound long ago and reported, but it asks to be estimated for
            // i64::MAX seconds: that must not overflow the clock (a panic
            // here would poison the scheduler's lock); it is estimated for
            // the capped time, so its estimate still counts.
            pod(PodSpec {
                name: "old",
                node: Some("settled"),
                requests: &[("cpu", "2")],
                annotations: &[(
                    "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled",
                    "9223372036854775807",
                )],
                scheduled_at: Some(t0() - secs(1000)),
                ..PodSpec::default()
            }),
        ],
    );
    let outcome = filter(&s, "default/incoming", t0());
    // 5000 + (1700 − 500 reported) + 850 = 7050 → 71% > 65%.
    assert_eq!(
        outcome.failed["settled"],
        "node(s) cpu usage exceed threshold"
    );
}

/// A NodeMetric reported at `updated` with node usage, aggregated usages
/// (`[{"usage": {"p95": {"resources": ...}}, "duration": "5m0s"}]`) and pod usages.
fn node_metric_aggregated(
    node: &str,
    updated: std::time::SystemTime,
    usage: serde_json::Value,
    aggregated: serde_json::Value,
    pods: serde_json::Value,
) -> crate::cache::Object {
    crate::cache::Object::NodeMetric(
        serde_json::from_value(json!({
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {"name": node},
            "spec": {},
            "status": {
                "updateTime": rfc3339(updated),
                "nodeMetric": {
                    "nodeUsage": {"resources": usage},
                    "aggregatedNodeUsages": aggregated,
                },
                "podsMetric": pods,
            }
        }))
        .unwrap(),
    )
}

#[test]
fn load_aware_falls_back_to_full_estimates_when_the_aggregated_usage_is_missing() {
    let mut s = scheduler(&only(
        "LoadAwareScheduling",
        "{aggregated: {usageThresholds: {cpu: 65}, usageAggregationType: p95, \
         usageAggregatedDuration: 5m, scoreAggregationType: p95, scoreAggregatedDuration: 5m}, \
         resourceWeights: {cpu: 1}}",
    ));
    let ten_cpus = [("cpu", "10"), ("memory", "100Gi")];
    let report = t0() - secs(10);
    let mut objects = vec![
        node("loaded", &ten_cpus),
        node("reported", &ten_cpus),
        // Only a 1m window: the 5m one the args ask for is missing.
        node_metric_aggregated(
            "loaded",
            report,
            json!({"cpu": "2"}),
            json!([{"usage": {"p95": {"resources": {"cpu": "2"}}}, "duration": "1m0s"}]),
            json!([]),
        ),
        node_metric_aggregated(
            "reported",
            report,
            json!({"cpu": "2"}),
            json!([{"usage": {"p95": {"resources": {"cpu": "3"}}}, "duration": "5m0s"}]),
            json!([]),
        ),
        pod(PodSpec {
            name: "incoming",
            requests: &[("cpu", "1")],
            ..PodSpec::default()
        }),
    ];
    // Four pods of 2 cpus on `loaded`, bound long before the report.
    for name in ["w-0", "w-1", "w-2", "w-3"] {
        objects.push(pod(PodSpec {
            name,
            node: Some("loaded"),
            requests: &[("cpu", "2")],
            scheduled_at: Some(t0() - secs(3600)),
            ..PodSpec::default()
        }));
    }
    load(&mut s, objects);
    let outcome = filter(&s, "default/incoming", t0());
    // loaded: 4 × 1700 + 850 = 7650 → 77% > 65%; reported: 3000 + 850 → 39%.
    assert_eq!(
        outcome.failed["loaded"],
        "node(s) cpu aggregated usage exceed threshold"
    );
    assert_eq!(outcome.feasible, vec!["reported"]);
    // Scoring falls back the same way: (10000 − 7650)·100/10000 = 23;
    // reported: (10000 − 3850)·100/10000 = 61.
    assert_eq!(
        scores(&s, "default/incoming", &["loaded", "reported"], t0()),
        vec![23, 61]
    );
}

#[test]
fn load_aware_stamps_pods_without_a_scheduled_condition_when_first_seen() {
    let mut s = load_aware_cluster("");
    let ten_cpus = [("cpu", "10"), ("memory", "100Gi")];
    let usage = |pod_name: &str| json!([{"namespace": "default", "name": pod_name, "podUsage": {"resources": {"cpu": "500m"}}}]);
    load(
        &mut s,
        vec![
            node("watched", &ten_cpus),
            node("placed", &ten_cpus),
            node_metric(
                "watched",
                t0() - secs(10),
                &[("cpu", "5")],
                usage("arrived"),
            ),
            node_metric("placed", t0() - secs(10), &[("cpu", "3500m")], json!([])),
            // Arrives bound through the watch, with no PodScheduled condition.
            pod(PodSpec {
                name: "arrived",
                node: Some("watched"),
                requests: &[("cpu", "2")],
                ..PodSpec::default()
            }),
            // Pending: this scheduler places it (3500 + 2550 → 61%).
            pod(PodSpec {
                name: "mine",
                requests: &[("cpu", "3")],
                ..PodSpec::default()
            }),
        ],
    );
    // Just seen: its estimate beyond the reported usage counts.
    // 5000 + (1700 − 500) + 850 = 7050 → 71% > 65%.
    let outcome = filter(&s, "default/incoming", t0());
    assert_eq!(
        outcome.failed["watched"],
        "node(s) cpu usage exceed threshold"
    );
    // The housekeeping tick stamps it at t0; this scheduler's own pod is
    // stamped when it is reserved.
    assert!(s.pending_status_writes(t0()).is_empty());
    s.reserve("default/mine", "placed", t0()).unwrap();
    // A report within one interval (60s) of the stamp still misses them...
    load(
        &mut s,
        vec![
            node_metric(
                "watched",
                t0() + secs(30),
                &[("cpu", "5")],
                usage("arrived"),
            ),
            node_metric("placed", t0() + secs(30), &[("cpu", "4")], usage("mine")),
        ],
    );
    let outcome = filter(&s, "default/incoming", t0() + secs(31));
    assert_eq!(
        outcome.failed["watched"],
        "node(s) cpu usage exceed threshold"
    );
    assert_eq!(
        outcome.failed["placed"],
        "node(s) cpu usage exceed threshold"
    );
    // (placed: 4000 + (2550 − 500) + 850 = 6900 → 69%)...
    // ...a later one covers them: only their reported usage counts now
    // (5000 + 850 → 59%, 4000 + 850 → 49%), where before they were
    // estimated forever.
    load(
        &mut s,
        vec![
            node_metric(
                "watched",
                t0() + secs(61),
                &[("cpu", "5")],
                usage("arrived"),
            ),
            node_metric("placed", t0() + secs(61), &[("cpu", "4")], usage("mine")),
        ],
    );
    let outcome = filter(&s, "default/incoming", t0() + secs(62));
    assert!(
        outcome.feasible.contains(&"watched".to_string())
            && outcome.feasible.contains(&"placed".to_string()),
        "{outcome:?}"
    );
}

#[test]
fn load_aware_scores_least_estimated_load_with_weights() {
    let s = load_aware_cluster(&only(
        "LoadAwareScheduling",
        "{resourceWeights: {cpu: 1, memory: 1}}",
    ));
    let scores = scores(&s, "default/incoming", &["idle", "busy"], t0());
    // idle: cpu (10000-3850)·100/10000 = 61; memory: 100Gi - 10Gi - 200Mi → 89; (61+89)/2 = 75.
    // busy: cpu (10000-6850)·100/10000 = 31; memory 89; (31+89)/2 = 60.
    assert_eq!(scores, vec![75, 60]);
}

#[test]
fn default_estimator_uses_defaults_limits_and_priority_resources() {
    use crate::cache::{Object, PodInfo};
    use std::sync::Arc;
    let info = |object: Object| match object {
        Object::Pod(p) => PodInfo::new(Arc::new(p)),
        _ => unreachable!(),
    };
    let empty = info(pod(PodSpec::default()));
    let estimate = super::loadaware::default_estimate(&empty);
    assert_eq!(estimate["cpu"], 250);
    assert_eq!(estimate["memory"], 200 * 1024 * 1024);
    let limited = info(pod(PodSpec {
        requests: &[("cpu", "1"), ("memory", "1Gi")],
        limits: &[("cpu", "2"), ("memory", "1Gi")],
        ..PodSpec::default()
    }));
    let estimate = super::loadaware::default_estimate(&limited);
    assert_eq!(estimate["cpu"], 1700);
    assert_eq!(estimate["memory"], (GI as f64 * 0.7).round() as i64);
    let batch = info(pod(PodSpec {
        requests: &[
            ("kubernetes.io/batch-cpu", "2000"),
            ("kubernetes.io/batch-memory", "2Gi"),
        ],
        priority: Some(5500),
        ..PodSpec::default()
    }));
    let estimate = super::loadaware::default_estimate(&batch);
    assert_eq!(estimate["cpu"], 1700);
    assert_eq!(estimate["memory"], (2.0 * GI as f64 * 0.7).round() as i64);
}

// ---------- NodeResourcesFitPlus and ScarceResourceAvoidance ----------

#[test]
fn fit_plus_scores_least_and_most_allocated_per_resource() {
    let cluster = |config: &str| {
        let mut s = scheduler(config);
        load(
            &mut s,
            vec![
                node("roomy", &[("cpu", "10"), ("memory", "10Gi")]),
                node("packed", &[("cpu", "10"), ("memory", "10Gi")]),
                pod(PodSpec {
                    name: "a",
                    node: Some("roomy"),
                    requests: &[("cpu", "2")],
                    ..PodSpec::default()
                }),
                pod(PodSpec {
                    name: "b",
                    node: Some("packed"),
                    requests: &[("cpu", "8")],
                    ..PodSpec::default()
                }),
                pod(PodSpec {
                    name: "incoming",
                    requests: &[("cpu", "1")],
                    ..PodSpec::default()
                }),
            ],
        );
        s
    };
    let least = cluster(&only(
        "NodeResourcesFitPlus",
        "{resources: {cpu: {type: LeastAllocated, weight: 1}}}",
    ));
    assert_eq!(
        scores(&least, "default/incoming", &["roomy", "packed"], t0()),
        vec![70, 10]
    );
    let most = cluster(&only(
        "NodeResourcesFitPlus",
        "{resources: {cpu: {type: MostAllocated, weight: 2}}}",
    ));
    // MostAllocated: 30 and 90, times the profile weight 1.
    assert_eq!(
        scores(&most, "default/incoming", &["roomy", "packed"], t0()),
        vec![30, 90]
    );
    let bad = crate::config::SchedulerConfiguration::from_yaml(&only(
        "NodeResourcesFitPlus",
        "{resources: {cpu: {type: Balanced, weight: 1}}}",
    ))
    .unwrap();
    assert!(crate::plugins::build_scheduler(&bad, secs(1)).is_err());
}

#[test]
fn scarce_resource_avoidance_keeps_plain_pods_off_gpu_nodes() {
    let mut s = scheduler(&only(
        "ScarceResourceAvoidance",
        "{resources: [nvidia.com/gpu]}",
    ));
    load(
        &mut s,
        vec![
            node(
                "gpu",
                &[
                    ("cpu", "10"),
                    ("memory", "10Gi"),
                    ("nvidia.com/gpu", "4"),
                    ("pods", "110"),
                ],
            ),
            node(
                "plain",
                &[("cpu", "10"), ("memory", "10Gi"), ("pods", "110")],
            ),
            pod(PodSpec {
                name: "cpu-only",
                requests: &[("cpu", "1")],
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "gpu-user",
                requests: &[("cpu", "1"), ("nvidia.com/gpu", "1")],
                ..PodSpec::default()
            }),
        ],
    );
    // gpu node: memory and gpu unrequested, one of two scarce → 50.
    assert_eq!(
        scores(&s, "default/cpu-only", &["gpu", "plain"], t0()),
        vec![50, 100]
    );
    assert_eq!(
        scores(&s, "default/gpu-user", &["gpu", "plain"], t0()),
        vec![100, 100]
    );
}

/// The plugin keeps each node's extra resource kinds from Node events; a
/// node that gains or loses its scarce kind must score as if read afresh.
#[test]
fn scarce_resource_avoidance_follows_a_node_gaining_and_losing_its_scarce_kind() {
    let mut s = scheduler(&only(
        "ScarceResourceAvoidance",
        "{resources: [nvidia.com/gpu]}",
    ));
    let plain = [("cpu", "10"), ("memory", "10Gi"), ("pods", "110")];
    load(
        &mut s,
        vec![
            node("n", &plain),
            pod(PodSpec {
                name: "cpu-only",
                requests: &[("cpu", "1")],
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "fpga-user",
                requests: &[("cpu", "1"), ("example.com/fpga", "1")],
                ..PodSpec::default()
            }),
        ],
    );
    assert_eq!(scores(&s, "default/cpu-only", &["n"], t0()), vec![100]);
    let with_gpu_and_fpga = [
        ("cpu", "10"),
        ("memory", "10Gi"),
        ("pods", "110"),
        ("nvidia.com/gpu", "1"),
        ("example.com/fpga", "2"),
    ];
    load(&mut s, vec![node("n", &with_gpu_and_fpga)]);
    // Unrequested: memory, gpu, fpga; scarce: gpu → (3 − 1) × 100 / 3.
    assert_eq!(scores(&s, "default/cpu-only", &["n"], t0()), vec![66]);
    // The fpga is asked for: memory and gpu left, one scarce → 50.
    assert_eq!(scores(&s, "default/fpga-user", &["n"], t0()), vec![50]);
    load(&mut s, vec![node("n", &plain)]);
    assert_eq!(scores(&s, "default/cpu-only", &["n"], t0()), vec![100]);
    // Memory gone: the gpu is all that is left idle, and it is scarce → 0.
    let gpu_without_memory = [("cpu", "10"), ("pods", "110"), ("nvidia.com/gpu", "1")];
    load(&mut s, vec![node("n", &gpu_without_memory)]);
    assert_eq!(scores(&s, "default/cpu-only", &["n"], t0()), vec![0]);
}

#[test]
fn extender_scores_scale_to_zero_through_ten() {
    let outcome = ScoreOutcome {
        totals: vec![
            ("a".into(), 200),
            ("b".into(), 100),
            ("c".into(), 89),
            ("d".into(), 0),
        ],
        weight_sum: 2,
    };
    let scaled: Vec<i64> = outcome
        .extender_scores()
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_eq!(scaled, vec![10, 5, 4, 0]);
    assert_eq!(outcome.best(), Some("a"));
}

// ---------- ElasticQuota ----------

fn quota_cluster(config: &str, team_b_used: &str) -> crate::framework::Scheduler {
    let mut s = scheduler(config);
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("memory", "16Gi")]),
            node("n2", &[("cpu", "4"), ("memory", "16Gi")]),
            quota(
                "team-a",
                &[("cpu", "2"), ("memory", "4Gi")],
                &[("cpu", "8"), ("memory", "16Gi")],
                &[],
                &[],
            ),
            quota(
                "team-b",
                &[("cpu", "2"), ("memory", "4Gi")],
                &[("cpu", "8"), ("memory", "16Gi")],
                &[],
                &[],
            ),
            pod(PodSpec {
                name: "a-running",
                node: Some("n1"),
                requests: &[("cpu", "2")],
                labels: &[("quota.scheduling.koordinator.sh/name", "team-a")],
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "b-running",
                node: Some("n2"),
                requests: &[("cpu", team_b_used)],
                labels: &[("quota.scheduling.koordinator.sh/name", "team-b")],
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "a-pending",
                requests: &[("cpu", "3")],
                labels: &[("quota.scheduling.koordinator.sh/name", "team-a")],
                ..PodSpec::default()
            }),
        ],
    );
    s
}

#[test]
fn quota_runtime_grows_into_idle_sibling_share() {
    // team-b uses only 1 of its min 2: team-a may borrow up to its request.
    let s = quota_cluster("", "1");
    let outcome = filter(&s, "default/a-pending", t0());
    assert_eq!(outcome.feasible, vec!["n1", "n2"]);
}

#[test]
fn quota_exhausted_when_sibling_claims_its_share() {
    // 8 cpus: both request 5 > min 2 → 2 + 2 each, then 4 split evenly → runtime 4 each.
    let s = quota_cluster("", "5");
    let outcome = filter(&s, "default/a-pending", t0());
    assert!(outcome.feasible.is_empty());
    let reason = &outcome.failed["n1"];
    assert!(
        reason.starts_with("Insufficient quotas, quotaName: team-a, runtime: [cpu=4"),
        "{reason}"
    );
    assert!(reason.contains("exceedDimensions: [cpu]"), "{reason}");
    // Checking against max instead of runtime admits it (2 + 3 ≤ 8).
    let s = quota_cluster(&only("ElasticQuota", "{enableRuntimeQuota: false}"), "5");
    assert_eq!(filter(&s, "default/a-pending", t0()).feasible.len(), 2);
}

#[test]
fn non_preemptible_pods_are_bounded_by_min() {
    let mut s = quota_cluster("", "1");
    load(
        &mut s,
        vec![pod(PodSpec {
            name: "a-guaranteed",
            requests: &[("cpu", "3")],
            labels: &[
                ("quota.scheduling.koordinator.sh/name", "team-a"),
                ("quota.scheduling.koordinator.sh/preemptible", "false"),
            ],
            ..PodSpec::default()
        })],
    );
    let outcome = filter(&s, "default/a-guaranteed", t0());
    assert!(outcome.feasible.is_empty());
    assert!(
        outcome.failed["n1"]
            .starts_with("Insufficient non-preemptible quotas, quotaName: team-a, min: [cpu=2"),
        "{}",
        outcome.failed["n1"]
    );
}

/// `object` (an ElasticQuota) moved to `namespace`.
fn in_namespace(object: crate::cache::Object, namespace: &str) -> crate::cache::Object {
    match object {
        crate::cache::Object::ElasticQuota(mut quota) => {
            quota.metadata.namespace = Some(namespace.to_string());
            crate::cache::Object::ElasticQuota(quota)
        }
        other => other,
    }
}

/// A standalone ElasticQuota plugin fed from the scheduler's cache.
fn quota_plugin(s: &crate::framework::Scheduler) -> super::elasticquota::ElasticQuota {
    let mut plugin = super::elasticquota::ElasticQuota::new(Default::default());
    // The event the framework sends for a quota change rebuilds the tree from the cache.
    let key = s.cache.elastic_quotas.keys().next().cloned().unwrap();
    crate::framework::Plugin::on_event(
        &mut plugin,
        &crate::cache::ClusterEvent::Object {
            kind: crate::cache::ObjectKind::ElasticQuota,
            key,
        },
        &s.cache,
    );
    plugin
}

#[test]
fn pods_map_to_quotas_by_label_namespace_namespaces_annotation_then_default() {
    let mut s = scheduler("");
    let unlabelled = |name: &'static str, namespace: &'static str| {
        pod(PodSpec {
            name,
            namespace,
            ..PodSpec::default()
        })
    };
    load(
        &mut s,
        vec![
            quota("team-a", &[], &[("cpu", "8")], &[], &[]),
            // Named after its own namespace.
            in_namespace(quota("web", &[], &[("cpu", "8")], &[], &[]), "web"),
            // Named after a namespace it does not live in.
            quota("elsewhere", &[], &[("cpu", "8")], &[], &[]),
            quota(
                "shared",
                &[],
                &[("cpu", "8")],
                &[],
                &[(
                    "quota.scheduling.koordinator.sh/namespaces",
                    r#"["ns-1","ns-2","elsewhere"]"#,
                )],
            ),
            pod(PodSpec {
                name: "labelled",
                namespace: "web",
                labels: &[("quota.scheduling.koordinator.sh/name", "team-a")],
                ..PodSpec::default()
            }),
            // The label names a quota that does not exist: the default
            // quota, not the namespace's quota.
            pod(PodSpec {
                name: "missing-label",
                namespace: "web",
                labels: &[("quota.scheduling.koordinator.sh/name", "no-such-quota")],
                ..PodSpec::default()
            }),
            // The root is not a quota pods can be charged to.
            pod(PodSpec {
                name: "root-label",
                namespace: "web",
                labels: &[(
                    "quota.scheduling.koordinator.sh/name",
                    "koordinator-root-quota",
                )],
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "system-label",
                namespace: "other",
                labels: &[(
                    "quota.scheduling.koordinator.sh/name",
                    "koordinator-system-quota",
                )],
                ..PodSpec::default()
            }),
            unlabelled("by-namespace", "web"),
            unlabelled("by-annotation", "ns-2"),
            unlabelled("not-by-name", "elsewhere"),
            unlabelled("fallback", "other"),
        ],
    );
    let plugin = quota_plugin(&s);
    let quota_of = |key: &str| plugin.quota_of(s.cache.pod(key).unwrap());
    assert_eq!(quota_of("web/labelled"), "team-a");
    assert_eq!(quota_of("web/missing-label"), "koordinator-default-quota");
    assert_eq!(quota_of("web/root-label"), "koordinator-default-quota");
    assert_eq!(quota_of("other/system-label"), "koordinator-system-quota");
    assert_eq!(quota_of("web/by-namespace"), "web");
    assert_eq!(quota_of("ns-2/by-annotation"), "shared");
    // The quota called `elsewhere` lives in `quotas`: the namespace's pods
    // go by the namespaces annotation instead.
    assert_eq!(quota_of("elsewhere/not-by-name"), "shared");
    assert_eq!(quota_of("other/fallback"), "koordinator-default-quota");
}

#[test]
fn quota_status_is_written_when_changed_and_at_a_bounded_rate() {
    let mut s = quota_cluster("", "1");
    let writes = s.pending_writes(t0());
    assert_eq!(writes.len(), 2);
    let team_a = writes.iter().find(|w| w.name == "team-a").unwrap();
    assert_eq!(team_a.namespace.as_deref(), Some("quotas"));
    // Requests 2 running + 3 pending = 5 cpus; runtime grows to 5.
    assert_eq!(
        team_a.annotations["quota.scheduling.koordinator.sh/request"],
        r#"{"cpu":"5"}"#
    );
    assert_eq!(
        team_a.annotations["quota.scheduling.koordinator.sh/runtime"],
        r#"{"cpu":"5"}"#
    );
    // Nothing changed: nothing to write.
    assert!(s.pending_writes(t0() + secs(2)).is_empty());
    // A new pending pod raises team-a's request; within the interval nothing is written.
    load(
        &mut s,
        vec![pod(PodSpec {
            name: "a-more",
            requests: &[("cpu", "1")],
            labels: &[("quota.scheduling.koordinator.sh/name", "team-a")],
            ..PodSpec::default()
        })],
    );
    assert!(
        s.pending_writes(t0() + Duration::from_millis(2500))
            .is_empty()
    );
    let later = s.pending_writes(t0() + secs(4));
    assert_eq!(later.len(), 1, "{later:?}");
    assert_eq!(later[0].name, "team-a");
    assert_eq!(
        later[0].annotations["quota.scheduling.koordinator.sh/request"],
        r#"{"cpu":"6"}"#
    );
    assert!(s.pending_writes(t0() + secs(6)).is_empty());
}

/// The quota status writes (annotations, `status.used`) due at `now`.
fn quota_writes(
    s: &mut crate::framework::Scheduler,
    now: std::time::SystemTime,
) -> (
    Vec<crate::framework::AnnotationWrite>,
    Vec<crate::framework::StatusWrite>,
) {
    let annotations = s.pending_writes(now);
    let status = s
        .pending_status_writes(now)
        .into_iter()
        .filter(|w| w.resource == super::elasticquota::RESOURCE)
        .collect();
    (annotations, status)
}

/// Applies quota writes to the cached quotas, as the API server and the
/// watch would (a JSON merge patch).
fn land_quota_writes(
    s: &mut crate::framework::Scheduler,
    annotations: &[crate::framework::AnnotationWrite],
    status: &[crate::framework::StatusWrite],
) {
    fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
        match (target.as_object_mut(), patch.as_object()) {
            (Some(target), Some(patch)) => {
                for (key, value) in patch {
                    if value.is_null() {
                        target.remove(key);
                    } else {
                        merge(
                            target.entry(key.clone()).or_insert(serde_json::Value::Null),
                            value,
                        );
                    }
                }
            }
            _ => *target = patch.clone(),
        }
    }
    let patches = annotations
        .iter()
        .map(|w| {
            (
                w.namespace.clone(),
                w.name.clone(),
                json!({"metadata": {"annotations": w.annotations}}),
            )
        })
        .chain(
            status
                .iter()
                .map(|w| (w.namespace.clone(), w.name.clone(), w.patch.clone())),
        );
    for (namespace, name, patch) in patches {
        let key = crate::cache::object_key(namespace.as_deref(), &name);
        let mut object = serde_json::to_value(&*s.cache.elastic_quotas[&key]).unwrap();
        merge(&mut object, &patch);
        s.apply(crate::cache::Change::Upsert(
            crate::cache::Object::ElasticQuota(serde_json::from_value(object).unwrap()),
        ));
    }
}

#[test]
fn quota_status_carries_used_and_is_sent_again_until_the_watch_shows_it() {
    const RUNTIME: &str = "quota.scheduling.koordinator.sh/runtime";
    const REQUEST: &str = "quota.scheduling.koordinator.sh/request";
    const CHILD_REQUEST: &str = "quota.scheduling.koordinator.sh/child-request";
    const GUARANTEED: &str = "quota.scheduling.koordinator.sh/guaranteed";
    let mut s = quota_cluster("", "1");
    let (annotations, status) = quota_writes(&mut s, t0());
    let team_a = annotations.iter().find(|w| w.name == "team-a").unwrap();
    // A leaf's child request is its pods' requests (2 running + 3 pending).
    assert_eq!(team_a.annotations[CHILD_REQUEST], r#"{"cpu":"5"}"#);
    assert_eq!(team_a.annotations[REQUEST], r#"{"cpu":"5"}"#);
    // All seven upstream annotations; guaranteed and allocated are empty
    // (upstream's ElasticQuotaGuaranteeUsage gate is off).
    assert_eq!(team_a.annotations.len(), 7, "{team_a:?}");
    assert_eq!(team_a.annotations[GUARANTEED], "{}");
    assert_eq!(
        team_a.annotations["quota.scheduling.koordinator.sh/allocated"],
        "{}"
    );
    // status.used: what the quota's bound pods use.
    let used_of = |status: &[crate::framework::StatusWrite], name: &str| {
        status
            .iter()
            .find(|w| w.name == name)
            .map(|w| w.patch["status"]["used"].clone())
    };
    assert_eq!(used_of(&status, "team-a"), Some(json!({"cpu": "2"})));
    assert_eq!(used_of(&status, "team-b"), Some(json!({"cpu": "1"})));
    assert_eq!(status[0].namespace.as_deref(), Some("quotas"));

    // Sent, not yet seen by the watch: not repeated at once...
    let (annotations, status) = quota_writes(&mut s, t0() + secs(2));
    assert!(annotations.is_empty() && status.is_empty());
    // ...but after the retry interval, as the quotas still show old values
    // (the write may have failed).
    let (annotations, status) = quota_writes(&mut s, t0() + secs(12));
    assert_eq!(annotations.len(), 2, "{annotations:?}");
    assert_eq!(status.len(), 2, "{status:?}");
    assert_eq!(used_of(&status, "team-a"), Some(json!({"cpu": "2"})));
    // Once the watch shows them, nothing more is written.
    land_quota_writes(&mut s, &annotations, &status);
    let (annotations, status) = quota_writes(&mut s, t0() + secs(14));
    assert!(
        annotations.is_empty() && status.is_empty(),
        "{annotations:?} {status:?}"
    );
    let (annotations, status) = quota_writes(&mut s, t0() + secs(40));
    assert!(
        annotations.is_empty() && status.is_empty(),
        "{annotations:?} {status:?}"
    );

    // The same figures spelled differently (zeros, other units, an empty
    // list left out) count as written.
    let mut object = serde_json::to_value(&*s.cache.elastic_quotas["quotas/team-a"]).unwrap();
    object["metadata"]["annotations"][RUNTIME] = json!(r#"{"cpu":"5000m","memory":"0"}"#);
    object["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(GUARANTEED);
    s.apply(crate::cache::Change::Upsert(
        crate::cache::Object::ElasticQuota(serde_json::from_value(object).unwrap()),
    ));
    let (annotations, _) = quota_writes(&mut s, t0() + secs(41));
    assert!(annotations.is_empty(), "{annotations:?}");

    // Someone edits the figures: a stale guaranteed, a runtime that is not
    // a resource list, a used entry that is no longer used.
    let mut object = serde_json::to_value(&*s.cache.elastic_quotas["quotas/team-a"]).unwrap();
    object["metadata"]["annotations"][GUARANTEED] = json!(r#"{"cpu":"3"}"#);
    object["metadata"]["annotations"][RUNTIME] = json!("not json");
    object["status"]["used"]["memory"] = json!("1Gi");
    s.apply(crate::cache::Change::Upsert(
        crate::cache::Object::ElasticQuota(serde_json::from_value(object).unwrap()),
    ));
    let (annotations, status) = quota_writes(&mut s, t0() + secs(42));
    assert_eq!(annotations.len(), 1, "{annotations:?}");
    assert_eq!(annotations[0].name, "team-a");
    let repaired = &annotations[0].annotations;
    assert_eq!(repaired[GUARANTEED], "{}");
    assert_eq!(repaired[RUNTIME], r#"{"cpu":"5"}"#);
    assert_eq!(
        used_of(&status, "team-a"),
        Some(json!({"cpu": "2", "memory": null}))
    );
    land_quota_writes(&mut s, &annotations, &status);
    let (annotations, status) = quota_writes(&mut s, t0() + secs(44));
    assert!(
        annotations.is_empty() && status.is_empty(),
        "{annotations:?} {status:?}"
    );
}

#[test]
fn a_quota_that_does_not_lend_asks_its_parent_for_its_min() {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4")]),
            node("n2", &[("cpu", "4")]),
            quota(
                "parent",
                &[],
                &[("cpu", "8")],
                &[("quota.scheduling.koordinator.sh/is-parent", "true")],
                &[],
            ),
            quota(
                "keeps-min",
                &[("cpu", "2")],
                &[("cpu", "8")],
                &[
                    ("quota.scheduling.koordinator.sh/parent", "parent"),
                    (
                        "quota.scheduling.koordinator.sh/allow-lent-resource",
                        "false",
                    ),
                ],
                &[],
            ),
            quota(
                "busy",
                &[],
                &[("cpu", "8")],
                &[("quota.scheduling.koordinator.sh/parent", "parent")],
                &[],
            ),
            pod(PodSpec {
                name: "big",
                requests: &[("cpu", "6")],
                labels: &[("quota.scheduling.koordinator.sh/name", "busy")],
                ..PodSpec::default()
            }),
        ],
    );
    // The parent asks the root for 2 (kept) + 6, so `busy` gets its 6.
    assert_eq!(filter(&s, "default/big", t0()).feasible, vec!["n1", "n2"]);
    let (annotations, _) = quota_writes(&mut s, t0());
    let of = |name: &str, key: &str| {
        annotations
            .iter()
            .find(|w| w.name == name)
            .and_then(|w| {
                w.annotations
                    .get(&format!("quota.scheduling.koordinator.sh/{key}"))
            })
            .cloned()
    };
    assert_eq!(
        of("parent", "child-request").as_deref(),
        Some(r#"{"cpu":"8"}"#)
    );
    assert_eq!(of("parent", "runtime").as_deref(), Some(r#"{"cpu":"8"}"#));
    assert_eq!(
        of("keeps-min", "request").as_deref(),
        Some(r#"{"cpu":"2"}"#)
    );
    assert_eq!(of("keeps-min", "child-request").as_deref(), Some("{}"));
    assert_eq!(
        of("keeps-min", "runtime").as_deref(),
        Some(r#"{"cpu":"2"}"#)
    );
    assert_eq!(of("busy", "runtime").as_deref(), Some(r#"{"cpu":"6"}"#));
}

#[test]
fn a_quota_labelled_is_root_shares_the_one_tree() {
    // MultiQuotaTree is off (upstream's default): `is-root` does not start a
    // tree of its own, so its capacity is not handed out a second time.
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4")]),
            node("n2", &[("cpu", "4")]),
            quota(
                "tree-root",
                &[("cpu", "4")],
                &[("cpu", "8")],
                &[
                    ("quota.scheduling.koordinator.sh/is-root", "true"),
                    ("quota.scheduling.koordinator.sh/is-parent", "true"),
                ],
                &[],
            ),
            quota(
                "tree-leaf",
                &[("cpu", "4")],
                &[("cpu", "8")],
                &[("quota.scheduling.koordinator.sh/parent", "tree-root")],
                &[],
            ),
            quota("sibling", &[], &[("cpu", "8")], &[], &[]),
            pod(PodSpec {
                name: "in-tree",
                requests: &[("cpu", "4")],
                labels: &[("quota.scheduling.koordinator.sh/name", "tree-leaf")],
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "sibling-all",
                requests: &[("cpu", "8")],
                labels: &[("quota.scheduling.koordinator.sh/name", "sibling")],
                ..PodSpec::default()
            }),
            pod(PodSpec {
                name: "sibling-half",
                requests: &[("cpu", "4")],
                labels: &[("quota.scheduling.koordinator.sh/name", "sibling")],
                ..PodSpec::default()
            }),
        ],
    );
    let (annotations, _) = quota_writes(&mut s, t0());
    let runtime = |name: &str| {
        annotations
            .iter()
            .find(|w| w.name == name)
            .map(|w| w.annotations["quota.scheduling.koordinator.sh/runtime"].clone())
    };
    // 8 cpus: tree-root keeps its min 4 (requested by its leaf), the sibling
    // gets the other 4 — not all 8 next to tree-root's 4.
    assert_eq!(runtime("tree-root").as_deref(), Some(r#"{"cpu":"4"}"#));
    assert_eq!(runtime("tree-leaf").as_deref(), Some(r#"{"cpu":"4"}"#));
    assert_eq!(runtime("sibling").as_deref(), Some(r#"{"cpu":"4"}"#));
    assert_eq!(filter(&s, "default/in-tree", t0()).feasible.len(), 2);
    let outcome = filter(&s, "default/sibling-all", t0());
    assert!(
        outcome.failed["n1"]
            .starts_with("Insufficient quotas, quotaName: sibling, runtime: [cpu=4"),
        "{outcome:?}"
    );
}

// ---------- Bind-time reservation, rollback and expiry ----------

fn bind_cluster() -> crate::framework::Scheduler {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "4"), ("kubernetes.io/batch-cpu", "4000")]),
            quota(
                "team-a",
                &[("cpu", "1")],
                &[("cpu", "2"), ("kubernetes.io/batch-cpu", "3000")],
                &[],
                &[],
            ),
            pod(PodSpec {
                name: "job",
                requests: &[("kubernetes.io/batch-cpu", "3000")],
                priority: Some(5500),
                labels: &[("quota.scheduling.koordinator.sh/name", "team-a")],
                ..PodSpec::default()
            }),
        ],
    );
    s
}

#[tokio::test]
async fn failed_binding_rolls_back_node_and_quota_accounting() {
    use crate::extender::{ExtenderBindingArgs, ExtenderMetrics, ExtenderState, bind_pod};
    use crate::framework::RecordingBinder;
    use std::sync::Arc;
    let scheduler = Arc::new(crate::framework::SchedulerCore::new(bind_cluster()));
    {
        // kube-scheduler filters before it binds.
        let s = scheduler.read().unwrap();
        let pod = s.cache.pod("default/job").unwrap().clone();
        let outcome = crate::extender::filter_and_record(
            &s,
            &pod,
            vec!["n1".into()],
            std::time::SystemTime::now(),
        );
        assert_eq!(outcome.feasible, vec!["n1"]);
    }
    let args = ExtenderBindingArgs {
        pod_name: "job".into(),
        pod_namespace: "default".into(),
        pod_uid: "uid-default-job".into(),
        node: "n1".into(),
    };
    let failing = ExtenderState {
        scheduler: Arc::clone(&scheduler),
        binder: Arc::new(RecordingBinder {
            fail_with: Some("apiserver said no".into()),
            ..Default::default()
        }),
        metrics: ExtenderMetrics::new("test"),
    };
    let err = bind_pod(&failing, &args).await.unwrap_err();
    assert!(err.contains("apiserver said no"), "{err}");
    {
        let s = scheduler.read().unwrap();
        assert_eq!(
            s.cache
                .node("n1")
                .unwrap()
                .requested
                .get("kubernetes.io/batch-cpu"),
            0
        );
        assert!(s.cache.pod("default/job").unwrap().node.is_none());
        // The quota charge was undone too: the same pod is admitted again.
        assert_eq!(filter(&s, "default/job", t0()).feasible, vec!["n1"]);
    }
    let recording = Arc::new(RecordingBinder::default());
    let working = ExtenderState {
        binder: recording.clone(),
        ..failing
    };
    bind_pod(&working, &args).await.unwrap();
    assert_eq!(recording.bound.lock().unwrap().len(), 1);
    {
        let s = scheduler.read().unwrap();
        assert_eq!(
            s.cache
                .node("n1")
                .unwrap()
                .requested
                .get("kubernetes.io/batch-cpu"),
            3000
        );
        assert!(s.cache.pod("default/job").unwrap().is_assumed());
    }
    // A wrong UID is refused before anything is reserved.
    let wrong = ExtenderBindingArgs {
        pod_uid: "other".into(),
        ..args
    };
    assert!(
        bind_pod(&working, &wrong)
            .await
            .unwrap_err()
            .contains("UID")
    );
}

#[test]
fn quota_charge_blocks_a_second_pod_until_the_assumption_expires() {
    let mut s = bind_cluster();
    load(
        &mut s,
        vec![pod(PodSpec {
            name: "job-2",
            requests: &[("kubernetes.io/batch-cpu", "1000")],
            priority: Some(5500),
            labels: &[("quota.scheduling.koordinator.sh/name", "team-a")],
            ..PodSpec::default()
        })],
    );
    s.reserve("default/job", "n1", t0()).unwrap();
    // 3000 used of max 3000 batch-cpu: quota exhausted.
    let outcome = filter(&s, "default/job-2", t0());
    assert!(
        outcome.failed["n1"].starts_with("Insufficient quotas, quotaName: team-a"),
        "{:?}",
        outcome
    );
    // Never confirmed by the watch: after the TTL the pod is pending again.
    assert_eq!(s.expire_assumed(t0() + secs(299)), 0);
    assert_eq!(s.expire_assumed(t0() + secs(300)), 1);
    assert!(s.cache.pod("default/job").unwrap().node.is_none());
    assert_eq!(filter(&s, "default/job-2", t0()).feasible, vec!["n1"]);
}

#[test]
fn a_pod_filtered_before_the_watch_delivers_it_counts_in_its_quota() {
    // kube-scheduler can call Filter before the extender's own watch has the pod: its request
    // must count into its quota's runtime as a cached pending pod's does (team-b uses 1 of its
    // min 2, so team-a may borrow up to what it requests).
    let cached = quota_cluster("", "1");
    let pod_info = cached.cache.pod("default/a-pending").unwrap().clone();
    let mut uncached = quota_cluster("", "1");
    uncached.apply(crate::cache::Change::Delete(pod(PodSpec {
        name: "a-pending",
        requests: &[("cpu", "3")],
        labels: &[("quota.scheduling.koordinator.sh/name", "team-a")],
        ..PodSpec::default()
    })));
    assert!(uncached.cache.pod("default/a-pending").is_none());
    let state = uncached
        .pre_filter(&pod_info, t0())
        .unwrap_or_else(|rejection| panic!("refused: {rejection:?}"));
    assert_eq!(
        uncached.filter(&pod_info, None, &state).feasible,
        vec!["n1", "n2"]
    );
}
