//! ScheduleExplanation labels.

use super::annotations::StringMap;

/// Label on a ScheduleExplanation: the object it explains.
pub const LABEL_QUESTIONED_OBJECT_KEY: &str = "scheduling.koordinator.sh/questioned-object-key";
/// Pod label: the topology key to break the explanation down by.
pub const LABEL_TOPOLOGY_KEY_TO_EXPLAIN: &str = "scheduling.koordinator.sh/topology-key-to-explain";

/// The questioned object key; empty when unlabelled.
pub fn explanation_key(labels: &StringMap) -> &str {
    labels
        .get(LABEL_QUESTIONED_OBJECT_KEY)
        .map_or("", String::as_str)
}

/// The topology key to explain by; empty when unlabelled.
pub fn topology_key_to_explain(pod_labels: &StringMap) -> &str {
    pod_labels
        .get(LABEL_TOPOLOGY_KEY_TO_EXPLAIN)
        .map_or("", String::as_str)
}
