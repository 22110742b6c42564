//! Domain prefixes and the general pod keys (upstream `constants.go`), plus
//! keys upstream defines outside `apis/extension` that other components
//! share, and readers for the oom-score-adj annotations.
//!
//! Note the trailing slash: [`DOMAIN_PREFIX`] and [`RESOURCE_DOMAIN_PREFIX`]
//! end with `/`, the other domain constants do not.

use std::collections::BTreeMap;

use super::annotations::{StringMap, parse_go_decimal_i64, parse_json_annotation_non_empty};
use super::error::ExtensionError;
use crate::wire_enum::wire_enum;

/// `koordinator.sh/`
pub const DOMAIN_PREFIX: &str = "koordinator.sh/";
/// `kubernetes.io/`, the prefix of the batch and mid extended resources.
pub const RESOURCE_DOMAIN_PREFIX: &str = "kubernetes.io/";
pub const SCHEDULING_DOMAIN_PREFIX: &str = "scheduling.koordinator.sh";
pub const INTERNAL_SCHEDULING_DOMAIN_PREFIX: &str = "internal.scheduling.koordinator.sh";
pub const NODE_DOMAIN_PREFIX: &str = "node.koordinator.sh";
pub const POD_DOMAIN_PREFIX: &str = "pod.koordinator.sh";

/// Pod label: the Koordinator QoS class.
pub const LABEL_POD_QOS: &str = "koordinator.sh/qosClass";
/// Pod label: sub-priority within the priority class (an integer).
pub const LABEL_POD_PRIORITY: &str = "koordinator.sh/priority";
/// Pod label: the priority class, overriding the band of `spec.priority`
/// (for pods that were running before Koordinator was installed).
pub const LABEL_POD_PRIORITY_CLASS: &str = "koordinator.sh/priority-class";
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Pod label: `true` asks the webhook to mutate the pod on update too.
pub const LABEL_POD_MUTATING_UPDATE: &str = "pod.koordinator.sh/mutating-update";
/// Pod annotation: network bandwidth limits (bps).
pub const ANNOTATION_NETWORK_QOS: &str = "koordinator.sh/networkQOS";
/// Pod label: `true` lets koordlet evict the pod under resource pressure.
pub const LABEL_POD_EVICT_ENABLED: &str = "koordinator.sh/eviction-enabled";
/// Pod annotation: JSON list of eviction features allowed to evict the pod;
/// absent means no restriction.
pub const ANNOTATION_POD_EVICT_POLICY: &str = "koordinator.sh/eviction-policy";
/// Pod annotation: eviction order (int32, lower goes first, absent = 0).
pub const ANNOTATION_POD_EVICTION_PRIORITY: &str = "koordinator.sh/eviction-priority";
/// Pod label: opts the pod out of the enhanced validation webhook.
pub const LABEL_POD_SKIP_ENHANCED_VALIDATION: &str = "pod.koordinator.sh/skip-enhanced-validation";
/// Pod label: `true` marks the pod as a pre-allocation candidate.
pub const LABEL_POD_PRE_ALLOCATABLE: &str = "pod.koordinator.sh/is-pre-allocatable";
/// Pod annotation: numeric preference among pre-allocatable pods (higher first).
pub const ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY: &str =
    "pod.koordinator.sh/pre-allocatable-priority";
/// Pod annotation: default `oom_score_adj` for the pod's processes, [-1000, 1000].
pub const ANNOTATION_OOM_SCORE_ADJ: &str = "koordinator.sh/oom-score-adj";
/// Pod annotation: per-container `oom_score_adj`, JSON `{"container": value}`.
pub const ANNOTATION_OOM_SCORE_ADJ_SPEC: &str = "koordinator.sh/oom-score-adj-spec";

/// Pod label: the binding-admission webhook lets the pod through
/// (upstream `pkg/webhook/pod/validating`, the default bypass key).
pub const LABEL_BINDING_ADMISSION_BYPASS: &str = "koordinator.sh/binding-admission-bypass";
/// Pod annotation: koord-runtime-proxy skips the hook server for the pod
/// (upstream `cmd/koord-runtime-proxy/options`).
pub const ANNOTATION_SKIP_HOOK_SERVER: &str = "runtimeproxy.koordinator.sh/skip-hookserver";

wire_enum! {
    /// Statistic used to aggregate node usage over a window.
    pub enum AggregationType closed {
        Avg = "avg",
        P99 = "p99",
        P95 = "p95",
        P90 = "p90",
        P50 = "p50",
    }
}

/// Lowest and highest `oom_score_adj` the kernel accepts.
pub const OOM_SCORE_ADJ_RANGE: std::ops::RangeInclusive<i64> = -1000..=1000;

/// The pod-level `oom_score_adj`; absent or empty → `Ok(None)`.
pub fn get_pod_oom_score_adj(annotations: &StringMap) -> Result<Option<i64>, ExtensionError> {
    let key = ANNOTATION_OOM_SCORE_ADJ;
    match annotations.get(key).filter(|text| !text.is_empty()) {
        None => Ok(None),
        Some(text) => {
            let value = parse_go_decimal_i64(text)
                .map_err(|reason| ExtensionError::invalid_value(key, text, reason))?;
            check_oom_score_adj(key, text, value).map(Some)
        }
    }
}

/// The per-container `oom_score_adj` map; absent or empty → `Ok(None)`.
pub fn get_pod_oom_score_adj_spec(
    annotations: &StringMap,
) -> Result<Option<BTreeMap<String, i64>>, ExtensionError> {
    let key = ANNOTATION_OOM_SCORE_ADJ_SPEC;
    let spec: Option<BTreeMap<String, i64>> = parse_json_annotation_non_empty(annotations, key)?;
    if let (Some(spec), Some(text)) = (&spec, annotations.get(key)) {
        for value in spec.values() {
            check_oom_score_adj(key, text, *value)?;
        }
    }
    Ok(spec)
}

/// The `oom_score_adj` koordlet applies to a container: its entry in the
/// per-container spec, else the pod-level value, else `None` (leave as is).
pub fn oom_score_adj_for_container(
    annotations: &StringMap,
    container_name: &str,
) -> Result<Option<i64>, ExtensionError> {
    if let Some(value) =
        get_pod_oom_score_adj_spec(annotations)?.and_then(|spec| spec.get(container_name).copied())
    {
        return Ok(Some(value));
    }
    get_pod_oom_score_adj(annotations)
}

fn check_oom_score_adj(key: &str, text: &str, value: i64) -> Result<i64, ExtensionError> {
    if OOM_SCORE_ADJ_RANGE.contains(&value) {
        Ok(value)
    } else {
        Err(ExtensionError::invalid_value(
            key,
            text,
            format!("oom_score_adj {value} is outside [-1000, 1000]"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_built_from_their_domains() {
        assert_eq!(LABEL_POD_QOS, format!("{DOMAIN_PREFIX}qosClass"));
        assert_eq!(
            LABEL_POD_MUTATING_UPDATE,
            format!("{POD_DOMAIN_PREFIX}/mutating-update")
        );
        assert_eq!(
            ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY,
            format!("{POD_DOMAIN_PREFIX}/pre-allocatable-priority")
        );
    }
}
