//! Koordlet eviction opt-in, order and allowed eviction features.

use super::annotations::{
    StringMap, parse_go_decimal_i32, parse_json_annotation, set_json_annotation,
};
use super::constants::{
    ANNOTATION_POD_EVICT_POLICY, ANNOTATION_POD_EVICTION_PRIORITY, LABEL_POD_EVICT_ENABLED,
};
use super::error::ExtensionError;

/// The pod opted in to koordlet eviction (`eviction-enabled=true`).
pub fn pod_evict_enabled(pod_labels: &StringMap) -> bool {
    pod_labels
        .get(LABEL_POD_EVICT_ENABLED)
        .is_some_and(|v| v == "true")
}

/// The pod's eviction priority (lower is evicted first); absent →
/// `Ok(None)`, which upstream treats as 0.
pub fn get_pod_eviction_priority(annotations: &StringMap) -> Result<Option<i32>, ExtensionError> {
    let key = ANNOTATION_POD_EVICTION_PRIORITY;
    match annotations.get(key) {
        None => Ok(None),
        Some(text) => parse_go_decimal_i32(text)
            .map(Some)
            .map_err(|reason| ExtensionError::invalid_value(key, text, reason)),
    }
}

pub fn set_pod_eviction_priority(annotations: &mut StringMap, priority: i32) {
    annotations.insert(
        ANNOTATION_POD_EVICTION_PRIORITY.to_owned(),
        priority.to_string(),
    );
}

/// The eviction features (e.g. `CPUEvict`, `MemoryEvict`) allowed to evict
/// the pod; absent → `Ok(None)`, meaning all are allowed.
pub fn get_pod_evict_policy(
    annotations: &StringMap,
) -> Result<Option<Vec<String>>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_POD_EVICT_POLICY)
}

pub fn set_pod_evict_policy(
    annotations: &mut StringMap,
    policies: &[String],
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_POD_EVICT_POLICY, policies)
}

/// Whether eviction feature `policy` may evict the pod: yes without the
/// annotation, no when the annotation is malformed (as upstream's koordlet).
pub fn is_eviction_policy_allowed(policy: &str, annotations: &StringMap) -> bool {
    match get_pod_evict_policy(annotations) {
        Ok(None) => true,
        Ok(Some(allowed)) => allowed.iter().any(|p| p == policy),
        Err(_) => false,
    }
}
