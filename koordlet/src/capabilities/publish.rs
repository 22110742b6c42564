//! Publishing the matrix: Node labels and annotation (as a JSON merge patch
//! body) and the `koordlet_node_capability` gauge family.

use std::collections::BTreeMap;

use koord_common::metrics::MetricsRegistry;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::NodeCapabilities;

/// Prefix of every capability label: `node.koordinator.sh/capability-<name>`.
pub const CAPABILITY_LABEL_PREFIX: &str = "node.koordinator.sh/capability-";

/// Annotation holding the whole matrix as JSON (the `--output json` object).
pub const ANNOTATION_CAPABILITIES: &str = "node.koordinator.sh/capabilities";

/// Full name of the gauge family registered by [`CapabilityMetrics`].
pub const CAPABILITY_METRIC: &str = "koordlet_node_capability";

/// The boolean capabilities, by snake_case name, in a fixed order. Labels
/// use the same names with `-` (`capability-cpu-burst`), the gauge uses them
/// as the `capability` label value.
pub fn capability_flags(caps: &NodeCapabilities) -> Vec<(&'static str, bool)> {
    let memory = &caps.memory_qos;
    vec![
        ("cpu_burst", caps.cpu_burst),
        ("cpu_idle", caps.cpu_idle),
        ("psi", caps.psi),
        ("psi_cgroup", caps.psi_cgroup),
        ("core_sched", caps.core_sched),
        ("group_identity", caps.group_identity),
        ("resctrl", caps.resctrl.supported),
        ("resctrl_cat", caps.resctrl.cat),
        ("resctrl_mba", caps.resctrl.mba),
        ("smt", caps.smt),
        ("memory_min", memory.min),
        ("memory_low", memory.low),
        ("memory_high", memory.high),
        (
            "memory_wmark",
            memory.wmark_ratio && memory.wmark_scale_factor && memory.wmark_min_adj,
        ),
        (
            "memory_priority",
            memory.priority && memory.use_priority_oom,
        ),
        ("memory_oom_group", memory.oom_group),
        (
            "memory_pagecache_limit",
            memory.pagecache_limit_enable
                && memory.pagecache_limit_size
                && memory.pagecache_limit_sync,
        ),
    ]
}

/// Makes `value` a valid label value: characters outside `[A-Za-z0-9._-]`
/// become `_`, at most 63 characters, starting and ending alphanumeric;
/// `unknown` if nothing is left.
pub fn label_value(value: &str) -> String {
    let replaced: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    let trimmed = replaced.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        "unknown".to_string()
    } else {
        trimmed.to_string()
    }
}

/// Labels (one per capability, for node selectors and affinities) and the
/// annotation with the full matrix.
pub fn node_labels_and_annotations(
    caps: &NodeCapabilities,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut labels = BTreeMap::new();
    let mut label = |name: &str, value: String| {
        labels.insert(format!("{CAPABILITY_LABEL_PREFIX}{name}"), value);
    };
    label("cgroup-version", caps.cgroup.version.as_str().to_string());
    label("cgroup-driver", caps.cgroup.driver.as_str().to_string());
    label("numa-nodes", caps.numa_nodes.to_string());
    label("kernel", label_value(&caps.kernel));
    for (name, supported) in capability_flags(caps) {
        label(&name.replace('_', "-"), supported.to_string());
    }
    // Serialising plain structs with string map keys cannot fail; an empty
    // annotation would only mean "no matrix", never a wrong one.
    let matrix = serde_json::to_string(caps).unwrap_or_default();
    let annotations = BTreeMap::from([(ANNOTATION_CAPABILITIES.to_string(), matrix)]);
    (labels, annotations)
}

/// JSON merge patch body for the Node (`PATCH` with
/// `application/merge-patch+json`) setting the capability labels and
/// annotation. Other labels and annotations are left as they are.
pub fn node_patch(caps: &NodeCapabilities) -> serde_json::Value {
    let (labels, annotations) = node_labels_and_annotations(caps);
    serde_json::json!({
        "metadata": {
            "labels": labels,
            "annotations": annotations,
        }
    })
}

/// `koordlet_node_capability{capability="cpu_burst"} 1`: 1 when supported, 0 when not.
#[derive(Clone, Default)]
pub struct CapabilityMetrics {
    family: Family<Vec<(String, String)>, Gauge>,
}

impl CapabilityMetrics {
    /// Registers the family under the registry's component prefix (`koordlet_`).
    pub fn register(metrics: &MetricsRegistry) -> Self {
        let this = Self::default();
        let family = this.family.clone();
        metrics.register_component(|registry| {
            registry.register(
                "node_capability",
                "whether the node supports a capability koordlet can use (1) or not (0)",
                family,
            );
        });
        this
    }

    /// Sets every gauge from a (re-)detection.
    pub fn update(&self, caps: &NodeCapabilities) {
        for (name, supported) in capability_flags(caps) {
            self.family
                .get_or_create(&vec![("capability".to_string(), name.to_string())])
                .set(i64::from(supported));
        }
    }
}
