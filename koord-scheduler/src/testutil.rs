//! Builders for hand-made snapshots in unit tests.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::cache::{Change, Object};
use crate::config::SchedulerConfiguration;
use crate::framework::Scheduler;

/// The seeded generator of the randomized tests.
pub use koord_common::testing::Lcg;

/// A fixed "now" for tests.
pub fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

pub fn rfc3339(time: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(time)
        .unwrap()
        .to_string()
}

fn map(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect(),
    )
}

pub fn node(name: &str, allocatable: &[(&str, &str)]) -> Object {
    node_with(name, allocatable, &[])
}

pub fn node_with(name: &str, allocatable: &[(&str, &str)], annotations: &[(&str, &str)]) -> Object {
    Object::Node(
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": map(annotations)},
            "status": {"allocatable": map(allocatable)}
        }))
        .unwrap(),
    )
}

/// A pod; `spec` extras (limits, priority) go through `extra`.
pub struct PodSpec<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub node: Option<&'a str>,
    pub requests: &'a [(&'a str, &'a str)],
    pub limits: &'a [(&'a str, &'a str)],
    pub labels: &'a [(&'a str, &'a str)],
    pub annotations: &'a [(&'a str, &'a str)],
    pub priority: Option<i32>,
    pub scheduled_at: Option<SystemTime>,
}

impl Default for PodSpec<'_> {
    fn default() -> Self {
        Self {
            namespace: "default",
            name: "pod",
            node: None,
            requests: &[],
            limits: &[],
            labels: &[],
            annotations: &[],
            priority: None,
            scheduled_at: None,
        }
    }
}

/// A bound pod holding the given GPUs of `node` whole (its `device-allocated` annotation).
pub fn whole_gpu_holder(name: &str, node: &str, minors: &[i32]) -> Object {
    let entries: Vec<Value> = minors
        .iter()
        .map(|m| json!({"minor": m, "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"}}))
        .collect();
    let annotation = json!({"gpu": entries}).to_string();
    pod(PodSpec {
        name,
        node: Some(node),
        requests: &[("cpu", "1")],
        annotations: &[(
            apis::extension::device_share::ANNOTATION_DEVICE_ALLOCATED,
            &annotation,
        )],
        ..Default::default()
    })
}

pub fn pod(spec: PodSpec<'_>) -> Object {
    let mut pod_spec = json!({
        "containers": [{"name": "main", "resources": {"requests": map(spec.requests), "limits": map(spec.limits)}}]
    });
    if let Some(node) = spec.node {
        pod_spec["nodeName"] = json!(node);
    }
    if let Some(priority) = spec.priority {
        pod_spec["priority"] = json!(priority);
    }
    let mut value = json!({
        "metadata": {
            "namespace": spec.namespace,
            "name": spec.name,
            "uid": format!("uid-{}-{}", spec.namespace, spec.name),
            "labels": map(spec.labels),
            "annotations": map(spec.annotations),
        },
        "spec": pod_spec,
    });
    if let Some(at) = spec.scheduled_at {
        value["status"] = json!({"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(at)}]});
    }
    Object::Pod(serde_json::from_value(value).unwrap())
}

/// A NodeMetric reported at `updated` with node usage and pod usages.
pub fn node_metric(node: &str, updated: SystemTime, usage: &[(&str, &str)], pods: Value) -> Object {
    Object::NodeMetric(
        serde_json::from_value(json!({
            "apiVersion": "slo.koordinator.sh/v1alpha1",
            "kind": "NodeMetric",
            "metadata": {"name": node},
            "spec": {},
            "status": {
                "updateTime": rfc3339(updated),
                "nodeMetric": {"nodeUsage": {"resources": map(usage)}},
                "podsMetric": pods,
            }
        }))
        .unwrap(),
    )
}

pub fn quota(
    name: &str,
    min: &[(&str, &str)],
    max: &[(&str, &str)],
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> Object {
    Object::ElasticQuota(
        serde_json::from_value(json!({
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": "quotas", "labels": map(labels), "annotations": map(annotations)},
            "spec": {"min": map(min), "max": map(max)}
        }))
        .unwrap(),
    )
}

/// A Reservation owned by `default/owner`, created at [`t0`] with a 1 h ttl.
pub struct ReservationSpec<'a> {
    pub name: &'a str,
    /// The reserve pod template (see [`reservation_template`]).
    pub template: Value,
    pub labels: &'a [(&'a str, &'a str)],
    pub annotations: &'a [(&'a str, &'a str)],
    /// Top-level spec fields set over the defaults (owners, ttl, expires, allocateOnce, ...).
    pub spec_extra: Value,
    /// The status as JSON; `Value::Null` leaves the reservation pending.
    pub status: Value,
}

impl Default for ReservationSpec<'_> {
    fn default() -> Self {
        Self {
            name: "r1",
            template: reservation_template(&[("cpu", "2")]),
            labels: &[],
            annotations: &[],
            spec_extra: json!({}),
            status: Value::Null,
        }
    }
}

/// A reserve pod template with one container requesting `requests`.
pub fn reservation_template(requests: &[(&str, &str)]) -> Value {
    json!({"spec": {"containers": [{"name": "c", "resources": {"requests": map(requests)}}]}})
}

/// The status of a reservation placed on `node` and Available with `allocatable`.
pub fn available_on(node: &str, allocatable: &[(&str, &str)]) -> Value {
    json!({"phase": "Available", "nodeName": node, "allocatable": map(allocatable)})
}

pub fn reservation(spec: ReservationSpec<'_>) -> apis::scheduling::v1alpha1::Reservation {
    let mut reservation_spec = json!({
        "template": spec.template,
        "owners": [{"object": {"name": "owner", "namespace": "default"}}],
        "ttl": "1h",
    });
    for (key, value) in spec.spec_extra.as_object().unwrap() {
        reservation_spec[key] = value.clone();
    }
    let mut value = json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {
            "name": spec.name,
            "uid": format!("{}-uid", spec.name),
            "creationTimestamp": rfc3339(t0()),
            "labels": map(spec.labels),
            "annotations": map(spec.annotations),
        },
        "spec": reservation_spec,
    });
    if !spec.status.is_null() {
        value["status"] = spec.status;
    }
    serde_json::from_value(value).unwrap()
}

/// A scheduler from a configuration YAML (empty → defaults).
pub fn scheduler(config_yaml: &str) -> Scheduler {
    let config = if config_yaml.is_empty() {
        SchedulerConfiguration::default()
    } else {
        SchedulerConfiguration::from_yaml(config_yaml).unwrap()
    };
    crate::plugins::build_scheduler(&config, Duration::from_secs(300)).unwrap()
}

pub fn load(scheduler: &mut Scheduler, objects: Vec<Object>) {
    for object in objects {
        scheduler.apply(Change::Upsert(object));
    }
}

/// Filters every node for a pending pod in the cache: (feasible, failed reasons).
pub fn filter(
    scheduler: &Scheduler,
    key: &str,
    now: SystemTime,
) -> crate::framework::FilterOutcome {
    let pod = scheduler.cache.pod(key).unwrap().clone();
    match scheduler.pre_filter(&pod, now) {
        Ok(state) => scheduler.filter(&pod, None, &state),
        Err(rejection) => Scheduler::reject_all(&scheduler.cache.node_names_sorted(), &rejection),
    }
}

/// Combined scores of the given nodes for a pending pod.
pub fn scores(scheduler: &Scheduler, key: &str, nodes: &[&str], now: SystemTime) -> Vec<i64> {
    let pod = scheduler.cache.pod(key).unwrap().clone();
    let state = scheduler.pre_filter(&pod, now).unwrap();
    let names: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    scheduler
        .score(&pod, &names, &state)
        .totals
        .into_iter()
        .map(|(_, s)| s)
        .collect()
}

/// Only the named plugin enabled (for scoring tests).
pub fn only(plugin: &str, args: &str) -> String {
    format!(
        "profiles:\n- plugins:\n    multiPoint:\n      disabled: [{{name: '*'}}]\n      enabled: [{{name: {plugin}}}]\n  pluginConfig:\n  - name: {plugin}\n    args: {args}\n"
    )
}
