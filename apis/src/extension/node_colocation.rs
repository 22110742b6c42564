//! Per-node colocation overrides: a node-level colocation strategy and
//! reclaim/reserve ratio labels that take precedence over the
//! slo-controller-config.

use serde::de::DeserializeOwned;

use super::annotations::{StringMap, parse_finite_f64, parse_json_annotation};
use super::error::ExtensionError;

/// Node annotation: a JSON ColocationStrategy merged over the cluster's.
pub const ANNOTATION_NODE_COLOCATION_STRATEGY: &str = "node.koordinator.sh/colocation-strategy";
/// Node label: CPU reclaim ratio (float, 0.65 = 65%).
pub const LABEL_CPU_RECLAIM_RATIO: &str = "node.koordinator.sh/cpu-reclaim-ratio";
/// Node label: memory reclaim ratio (float).
pub const LABEL_MEMORY_RECLAIM_RATIO: &str = "node.koordinator.sh/memory-reclaim-ratio";
/// Node label: share of CPU statically reserved for mid pods (float).
pub const LABEL_MID_STATIC_CPU_RESERVED_RATIO: &str =
    "node.koordinator.sh/mid-static-cpu-reserved-ratio";
/// Node label: share of memory statically reserved for mid pods (float).
pub const LABEL_MID_STATIC_MEMORY_RESERVED_RATIO: &str =
    "node.koordinator.sh/mid-static-memory-reserved-ratio";

/// The node's colocation strategy override, decoded as `T` (the
/// slo-controller-config ColocationStrategy type); absent → `Ok(None)`.
pub fn get_node_colocation_strategy<T: DeserializeOwned>(
    node_annotations: &StringMap,
) -> Result<Option<T>, ExtensionError> {
    parse_json_annotation(node_annotations, ANNOTATION_NODE_COLOCATION_STRATEGY)
}

/// A ratio label as a whole percent (`0.655` → 65, truncated as upstream).
/// Absent → `Ok(None)`; not a number or negative → error (upstream ignores
/// such labels).
pub fn get_node_ratio_label_percent(
    node_labels: &StringMap,
    key: &str,
) -> Result<Option<i64>, ExtensionError> {
    let Some(text) = node_labels.get(key) else {
        return Ok(None);
    };
    let ratio = parse_finite_f64(text)
        .map_err(|reason| ExtensionError::invalid_value(key, text, reason))?;
    if ratio < 0.0 {
        return Err(ExtensionError::invalid_value(key, text, "negative ratio"));
    }
    // Float → integer `as` saturates, matching the intent for absurd ratios.
    Ok(Some((ratio * 100.0) as i64))
}
