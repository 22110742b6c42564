//! Amounts read from cluster objects are exact or the object is refused
//! (issue 16): node allocatable, NodeMetric usage, ElasticQuota min/max,
//! Device resources, Reservation allocatable, pod limits and device shares.
//! Each refusal points the safe way: a node that cannot be read is not
//! feasible, a metric that cannot be read counts as expired, a quota that
//! cannot be read admits nothing, a Device or Reservation that cannot be
//! read offers nothing.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{Value, json};

use crate::cache::{Change, Object};
use crate::framework::Plugin;
use crate::testutil::*;

const GI: i64 = 1 << 30;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// ---------- Node allocatable ----------

#[test]
fn a_node_whose_allocatable_is_not_an_exact_amount_is_filtered_out_with_the_reason() {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("ok", &[("cpu", "8"), ("memory", "16Gi"), ("pods", "110")]),
            node("cpu-1e400", &[("cpu", "1e400"), ("memory", "16Gi")]),
            node("cpu-abc", &[("cpu", "abc"), ("memory", "16Gi")]),
            node("memory-negative", &[("cpu", "8"), ("memory", "-1Gi")]),
            // 1e20 bytes: a quantity, but beyond what 64 bits count.
            node("memory-100E", &[("cpu", "8"), ("memory", "100E")]),
            node(
                "pods-abc",
                &[("cpu", "8"), ("memory", "16Gi"), ("pods", "abc")],
            ),
            pod(PodSpec {
                name: "small",
                requests: &[("memory", "1Gi")],
                ..PodSpec::default()
            }),
        ],
    );
    let outcome = filter(&s, "default/small", t0());
    assert_eq!(outcome.feasible, vec!["ok"]);
    for (node, value) in [
        ("cpu-1e400", "1e400"),
        ("cpu-abc", "abc"),
        ("memory-negative", "-1Gi"),
        ("memory-100E", "100E"),
        ("pods-abc", "abc"),
    ] {
        let reason = outcome
            .failed_unresolvable
            .get(node)
            .unwrap_or_else(|| panic!("{node} not refused: {outcome:?}"));
        assert!(
            reason.contains("status.allocatable") && reason.contains(value),
            "{node}: {reason}"
        );
    }
    // Bind-time reservation refuses it too.
    assert!(s.reserve("default/small", "cpu-abc", t0()).is_err());
}

#[test]
fn a_node_whose_allocatable_cannot_be_read_adds_nothing_to_the_quota_total() {
    let mut cache = crate::cache::ClusterCache::new();
    let mut plugin = super::elasticquota::ElasticQuota::new(Default::default());
    for object in [
        node("ok", &[("cpu", "4"), ("memory", "8Gi")]),
        node("bad", &[("cpu", "abc"), ("memory", "16Gi")]),
    ] {
        let event = cache.apply(Change::Upsert(object));
        plugin.on_event(&event, &cache);
    }
    let figures = plugin.compute_figures();
    let root = &figures.runtime[apis::extension::elastic_quota::ROOT_QUOTA_NAME];
    assert_eq!((root.get("cpu"), root.get("memory")), (4000, 8 * GI));
}

// ---------- NodeMetric usage ----------

fn metric_cluster(config: &str) -> crate::framework::Scheduler {
    let mut s = scheduler(config);
    let ten_cpus = [("cpu", "10"), ("memory", "100Gi")];
    let recent = t0() - secs(10);
    load(
        &mut s,
        vec![
            node("idle", &ten_cpus),
            node("negative", &ten_cpus),
            node("abc", &ten_cpus),
            node("pod-usage", &ten_cpus),
            node_metric(
                "idle",
                recent,
                &[("cpu", "3"), ("memory", "10Gi")],
                json!([]),
            ),
            // 9 cores really used, but a negative figure would make it look empty.
            node_metric(
                "negative",
                recent,
                &[("cpu", "-9"), ("memory", "10Gi")],
                json!([]),
            ),
            node_metric(
                "abc",
                recent,
                &[("cpu", "abc"), ("memory", "10Gi")],
                json!([]),
            ),
            node_metric(
                "pod-usage",
                recent,
                &[("cpu", "3"), ("memory", "10Gi")],
                json!([{"namespace": "default", "name": "running",
                        "podUsage": {"resources": {"cpu": "1e400"}}}]),
            ),
            pod(PodSpec {
                name: "running",
                node: Some("pod-usage"),
                requests: &[("cpu", "1")],
                scheduled_at: Some(t0() - secs(3600)),
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
}

#[test]
fn a_node_metric_with_negative_or_unreadable_usage_does_not_make_a_node_look_emptier() {
    let s = metric_cluster("");
    let outcome = filter(&s, "default/incoming", t0());
    assert_eq!(outcome.feasible, vec!["idle"]);
    for node in ["negative", "abc", "pod-usage"] {
        let reason = outcome
            .failed
            .get(node)
            .unwrap_or_else(|| panic!("{node} not refused: {outcome:?}"));
        assert_eq!(
            reason,
            super::loadaware::REASON_NODE_METRIC_INVALID,
            "{node}"
        );
    }
    // Where expired metrics may be used, such a node scores as one: 0.
    let s = metric_cluster(&only(
        "LoadAwareScheduling",
        "{enableScheduleWhenNodeMetricsExpired: true}",
    ));
    let scores = scores(
        &s,
        "default/incoming",
        &["negative", "abc", "pod-usage", "idle"],
        t0(),
    );
    assert_eq!(&scores[..3], &[0, 0, 0]);
    assert!(scores[3] > 0);
}

// ---------- ElasticQuota ----------

fn quota_pod(name: &'static str, quota: &'static str) -> Object {
    pod(PodSpec {
        name,
        requests: &[("cpu", "1")],
        labels: match quota {
            "neg-max" => &[("quota.scheduling.koordinator.sh/name", "neg-max")],
            "huge-max" => &[("quota.scheduling.koordinator.sh/name", "huge-max")],
            "word-min" => &[("quota.scheduling.koordinator.sh/name", "word-min")],
            "child" => &[("quota.scheduling.koordinator.sh/name", "child")],
            _ => &[("quota.scheduling.koordinator.sh/name", "ok")],
        },
        ..PodSpec::default()
    })
}

#[test]
fn a_quota_whose_min_or_max_is_not_an_exact_amount_admits_no_pod() {
    for config in ["", &only("ElasticQuota", "{enableRuntimeQuota: false}")] {
        let mut s = scheduler(config);
        load(
            &mut s,
            vec![
                node("n1", &[("cpu", "16"), ("memory", "64Gi")]),
                quota("ok", &[("cpu", "1")], &[("cpu", "4")], &[], &[]),
                quota("neg-max", &[("cpu", "1")], &[("cpu", "-1")], &[], &[]),
                quota("huge-max", &[("cpu", "1")], &[("cpu", "1e400")], &[], &[]),
                quota("word-min", &[("cpu", "abc")], &[("cpu", "4")], &[], &[]),
                quota(
                    "parent",
                    &[("cpu", "1")],
                    &[("cpu", "abc")],
                    &[("quota.scheduling.koordinator.sh/is-parent", "true")],
                    &[],
                ),
                quota(
                    "child",
                    &[("cpu", "1")],
                    &[("cpu", "4")],
                    &[("quota.scheduling.koordinator.sh/parent", "parent")],
                    &[],
                ),
                quota_pod("in-ok", "ok"),
                quota_pod("in-neg-max", "neg-max"),
                quota_pod("in-huge-max", "huge-max"),
                quota_pod("in-word-min", "word-min"),
                quota_pod("in-child", "child"),
            ],
        );
        assert_eq!(filter(&s, "default/in-ok", t0()).feasible, vec!["n1"]);
        for (pod, quota, value) in [
            ("in-neg-max", "neg-max", "-1"),
            ("in-huge-max", "huge-max", "1e400"),
            ("in-word-min", "word-min", "abc"),
            ("in-child", "parent", "abc"),
        ] {
            let outcome = filter(&s, &format!("default/{pod}"), t0());
            assert!(outcome.feasible.is_empty(), "{pod}: {outcome:?}");
            let reason = outcome
                .failed
                .get("n1")
                .or(outcome.failed_unresolvable.get("n1"))
                .unwrap();
            assert!(
                reason.contains(quota) && reason.contains(value) && reason.contains("spec."),
                "{pod}: {reason}"
            );
        }
    }
}

#[test]
fn quota_objects_in_upstreams_built_in_form_bound_nothing() {
    // Upstream's koord-scheduler creates its built-in quotas with max and
    // shared weight of MaxInt64/5 cores (beyond milli-cores in 64 bits); a
    // cluster moving from upstream keeps those objects.
    let huge = "1844674407370955161";
    let weight = format!("{{\"cpu\":\"{huge}\",\"memory\":\"{huge}\"}}");
    let upstream_form = |name| {
        quota(
            name,
            &[],
            &[("cpu", huge), ("memory", huge)],
            &[(
                "quota.scheduling.koordinator.sh/parent",
                "koordinator-root-quota",
            )],
            &[("quota.scheduling.koordinator.sh/shared-weight", &weight)],
        )
    };
    for config in ["", &only("ElasticQuota", "{enableRuntimeQuota: false}")] {
        let mut s = scheduler(config);
        load(
            &mut s,
            vec![
                node("n1", &[("cpu", "16"), ("memory", "64Gi")]),
                upstream_form("koordinator-default-quota"),
                upstream_form("team"),
                pod(PodSpec {
                    name: "in-default",
                    requests: &[("cpu", "1"), ("memory", "1Gi")],
                    ..PodSpec::default()
                }),
                pod(PodSpec {
                    name: "in-team",
                    requests: &[("cpu", "1"), ("memory", "1Gi")],
                    labels: &[("quota.scheduling.koordinator.sh/name", "team")],
                    ..PodSpec::default()
                }),
            ],
        );
        for pod in ["default/in-default", "default/in-team"] {
            let outcome = filter(&s, pod, t0());
            assert_eq!(outcome.feasible, vec!["n1"], "{pod}: {outcome:?}");
        }
    }
}

#[test]
fn quota_args_whose_built_in_max_cannot_be_read_are_refused_at_start() {
    for args in [
        "{defaultQuotaGroupMax: {cpu: abc}}",
        "{systemQuotaGroupMax: {memory: '-1Gi'}}",
    ] {
        let config =
            crate::config::SchedulerConfiguration::from_yaml(&only("ElasticQuota", args)).unwrap();
        let err = crate::plugins::build_scheduler(&config, secs(300))
            .err()
            .unwrap_or_else(|| panic!("{args} accepted"));
        assert!(err.to_string().contains("QuotaGroupMax"), "{err}");
    }
    // Upstream's own default (MaxInt64/5 cores) stays expressible.
    let config = crate::config::SchedulerConfiguration::from_yaml(&only(
        "ElasticQuota",
        "{defaultQuotaGroupMax: {cpu: '1844674407370955161', memory: '1844674407370955161'}}",
    ))
    .unwrap();
    assert!(crate::plugins::build_scheduler(&config, secs(300)).is_ok());
}

// ---------- Device ----------

fn gpu_device(node: &str, memory: [&str; 2]) -> Object {
    let devices: Vec<Value> = memory
        .iter()
        .enumerate()
        .map(|(minor, memory)| {
            json!({"type": "gpu", "id": format!("GPU-{minor}"), "minor": minor, "health": true,
                   "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": memory,
                                 "koordinator.sh/gpu-memory-ratio": "100"}})
        })
        .collect();
    Object::Device(
        serde_json::from_value(json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Device",
            "metadata": {"name": node},
            "spec": {"devices": devices}
        }))
        .unwrap(),
    )
}

fn gpu_pod(name: &str, gpus: &str) -> Object {
    let requests = [("nvidia.com/gpu", gpus)];
    pod(PodSpec {
        name,
        requests: &requests,
        limits: &requests,
        ..PodSpec::default()
    })
}

#[test]
fn a_device_whose_resources_are_not_exact_amounts_offers_nothing() {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("ok", &[("cpu", "8")]),
            gpu_device("ok", ["16Gi", "16Gi"]),
            node("abc", &[("cpu", "8")]),
            gpu_device("abc", ["abc", "16Gi"]),
            node("negative", &[("cpu", "8")]),
            gpu_device("negative", ["-16Gi", "16Gi"]),
            node("huge", &[("cpu", "8")]),
            gpu_device("huge", ["1e400", "16Gi"]),
            gpu_pod("one-gpu", "1"),
        ],
    );
    let outcome = filter(&s, "default/one-gpu", t0());
    assert_eq!(outcome.feasible, vec!["ok"]);
}

#[test]
fn a_device_share_that_cannot_be_read_counts_as_the_whole_device() {
    let mut s = scheduler("");
    let allocated = r#"{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"abc","koordinator.sh/gpu-memory-ratio":"-100"}}]}"#;
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "8")]),
            gpu_device("n1", ["16Gi", "16Gi"]),
            pod(PodSpec {
                name: "holder",
                node: Some("n1"),
                annotations: &[("scheduling.koordinator.sh/device-allocated", allocated)],
                ..PodSpec::default()
            }),
            gpu_pod("two-gpus", "2"),
            gpu_pod("one-gpu", "1"),
        ],
    );
    assert!(filter(&s, "default/two-gpus", t0()).feasible.is_empty());
    assert_eq!(filter(&s, "default/one-gpu", t0()).feasible, vec!["n1"]);
}

// ---------- Pod limits ----------

#[test]
fn a_pod_whose_limits_are_not_exact_amounts_fits_no_node() {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![
            node("n1", &[("cpu", "8"), ("memory", "16Gi")]),
            pod(PodSpec {
                name: "abc-limit",
                requests: &[("cpu", "1")],
                limits: &[("cpu", "abc")],
                ..PodSpec::default()
            }),
        ],
    );
    let outcome = filter(&s, "default/abc-limit", t0());
    assert!(outcome.feasible.is_empty());
    let reason = &outcome.failed_unresolvable["n1"];
    assert!(
        reason.contains("limits") && reason.contains("abc"),
        "{reason}"
    );
}

// ---------- Reservation ----------

fn available(name: &str, allocatable: &[(&str, &str)]) -> Object {
    Object::Reservation(reservation(ReservationSpec {
        name,
        template: reservation_template(&[("cpu", "2")]),
        status: available_on("n1", allocatable),
        ..ReservationSpec::default()
    }))
}

fn allocated_from(annotations: &std::collections::BTreeMap<String, String>) -> Option<String> {
    annotations
        .get(apis::extension::reservation::ANNOTATION_RESERVATION_ALLOCATED)
        .cloned()
}

#[test]
fn a_reservation_whose_allocatable_cannot_be_read_is_ignored() {
    for allocatable in [[("cpu", "abc")], [("cpu", "-2")], [("memory", "100E")]] {
        let mut s = scheduler("");
        load(
            &mut s,
            vec![
                node("n1", &[("cpu", "8"), ("memory", "16Gi")]),
                available("bad", &allocatable),
                pod(PodSpec {
                    name: "stranger",
                    requests: &[("cpu", "1"), ("memory", "1Gi")],
                    ..PodSpec::default()
                }),
                pod(PodSpec {
                    name: "owner",
                    requests: &[("cpu", "1")],
                    ..PodSpec::default()
                }),
            ],
        );
        // It holds nothing: a stranger fits.
        assert_eq!(
            filter(&s, "default/stranger", t0()).feasible,
            vec!["n1"],
            "{allocatable:?}"
        );
        // And serves nobody: the owner is placed without it.
        let reserved = s.reserve("default/owner", "n1", t0()).unwrap();
        assert_eq!(
            allocated_from(&reserved.annotations),
            None,
            "{allocatable:?}"
        );
    }
}

#[test]
fn a_reservation_whose_resize_annotation_cannot_be_read_is_not_placed() {
    let mut s = scheduler("");
    load(
        &mut s,
        vec![node("n1", &[("cpu", "8"), ("memory", "16Gi")])],
    );
    for resize in [
        r#"{"resources":{"cpu":"abc"}}"#,
        r#"{"resources":{"cpu":"-1"}}"#,
        "not json",
    ] {
        let pending = reservation(ReservationSpec {
            name: "resized",
            annotations: &[(
                "scheduling.koordinator.sh/reservation-resize-allocatable",
                resize,
            )],
            ..ReservationSpec::default()
        });
        let placement = crate::placement::place_reservation(&mut s, &pending, t0());
        assert_eq!(placement.node, None, "{resize}");
        let reason = &placement.reasons["n1"];
        assert!(
            reason.contains("reservation-resize-allocatable"),
            "{resize}: {reason}"
        );
    }
}

// ---------- Reporting where the object enters ----------

/// `object` with `metadata.resourceVersion` set.
fn at_version(mut object: Object, version: &str) -> Object {
    let meta = match &mut object {
        Object::Node(o) => &mut o.metadata,
        Object::Pod(o) => &mut o.metadata,
        Object::NodeMetric(o) => &mut o.metadata,
        Object::Reservation(o) => &mut o.metadata,
        Object::ElasticQuota(o) => &mut o.metadata,
        Object::Device(o) => &mut o.metadata,
        Object::PodGroup(o) => &mut o.metadata,
        Object::NodeResourceTopology(o) => &mut o.metadata,
        Object::PodDisruptionBudget(o) => &mut o.metadata,
    };
    meta.resource_version = Some(version.to_string());
    object
}

#[test]
fn every_refused_amount_is_reported_with_object_field_and_value() {
    use crate::admission::admit;

    let long = format!("1{}", "0".repeat(10_000));
    let cases: Vec<(Object, &str)> = vec![
        (
            node("n1", &[("cpu", "1e400")]),
            "Node n1: status.allocatable cpu: invalid quantity \"1e400\"",
        ),
        (
            node("n2", &[("memory", &long)]),
            "…(10001 bytes)\": value out of range",
        ),
        (
            node_metric("n1", t0(), &[("cpu", "-9")], json!([])),
            "NodeMetric n1: status.nodeMetric.nodeUsage cpu: quantity \"-9\" is negative",
        ),
        (
            node_metric(
                "n1",
                t0(),
                &[],
                json!([{"namespace": "default", "name": "p", "podUsage": {"resources": {"memory": "x"}}}]),
            ),
            "status.podsMetric.podUsage memory of pod default/p: invalid quantity \"x\"",
        ),
        (
            quota("q", &[], &[("cpu", "-1")], &[], &[]),
            "ElasticQuota quotas/q: spec.max cpu: quantity \"-1\" is negative",
        ),
        (
            gpu_device("n1", ["abc", "16Gi"]),
            "Device n1: spec.devices[].resources koordinator.sh/gpu-memory of Gpu device minor 0",
        ),
        (
            available("r1", &[("cpu", "abc")]),
            "Reservation r1: status.allocatable cpu: invalid quantity \"abc\"",
        ),
        (
            pod(PodSpec {
                name: "p",
                limits: &[("memory", "-1")],
                ..PodSpec::default()
            }),
            "Pod default/p: spec: container \"main\" limits memory: quantity \"-1\" is negative",
        ),
        (
            pod(PodSpec {
                name: "holder",
                annotations: &[(
                    "scheduling.koordinator.sh/device-allocated",
                    r#"{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"abc"}}]}"#,
                )],
                ..PodSpec::default()
            }),
            "device-allocated] koordinator.sh/gpu-core of gpu minor 1: invalid quantity \"abc\"",
        ),
    ];
    for (object, expected) in cases {
        let refused = admit(object).unwrap().invalid_amount.unwrap();
        let text = refused.to_string();
        assert!(text.contains(expected), "{text}\nwanted: {expected}");
        assert!(text.len() < 600, "{text}");
    }
    // Good objects carry no refusal.
    for object in [
        node("ok", &[("cpu", "8"), ("memory", "16Gi")]),
        node_metric("ok", t0(), &[("cpu", "1")], json!([])),
        quota("ok", &[("cpu", "1")], &[("cpu", "2")], &[], &[]),
        gpu_device("ok", ["16Gi", "16Gi"]),
        available("ok", &[("cpu", "2")]),
    ] {
        assert_eq!(admit(object).unwrap().invalid_amount, None);
    }
}

#[test]
fn a_refusal_is_reported_and_counted_once_per_object_version() {
    use crate::admission::{InputMetrics, Reports, Seen, admit};

    let mut reports = Reports::default();
    let metrics = InputMetrics::default();
    let mut observe = |object: Object| {
        let admitted = admit(object).unwrap();
        let seen = reports.observe(&admitted);
        if seen == Seen::New {
            metrics.refused_parts(&admitted);
        }
        seen
    };
    let bad = |version| at_version(node("n1", &[("cpu", "abc")]), version);
    assert_eq!(observe(bad("1")), Seen::New);
    // A relist, or the same event again: not reported again.
    assert_eq!(observe(bad("1")), Seen::Again);
    // A new version that is still wrong is reported.
    assert_eq!(observe(bad("2")), Seen::New);
    assert_eq!(
        metrics.count(crate::cache::ObjectKind::Node, "status.allocatable"),
        2
    );
    // Fixed: cleared once, then nothing.
    let good = at_version(node("n1", &[("cpu", "8")]), "3");
    assert_eq!(observe(good.clone()), Seen::Cleared);
    assert_eq!(observe(good), Seen::Clean);
    assert!(reports.is_empty());

    let registry = koord_common::metrics::MetricsRegistry::new("scheduler");
    metrics.register(&registry);
    let text = registry.encode().unwrap();
    assert!(
        text.contains(r#"scheduler_invalid_input_total{kind="Node",field="status.allocatable"} 2"#),
        "{text}"
    );
}
