//! Load-aware scheduling overrides: per-node usage thresholds and per-pod
//! load estimation settings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, empty_as_none, null_as_default, parse_go_decimal_i64, parse_json_annotation,
    parse_json_annotation_non_empty, set_json_annotation,
};
use super::constants::AggregationType;
use super::duration::GoDuration;
use super::error::ExtensionError;

/// Node annotation: [`CustomUsageThresholds`].
pub const ANNOTATION_CUSTOM_USAGE_THRESHOLDS: &str = "scheduling.koordinator.sh/usage-thresholds";
/// Pod annotation: JSON map resource → percent used to estimate the pod's load.
pub const ANNOTATION_CUSTOM_ESTIMATED_SCALING_FACTORS: &str =
    "scheduling.koordinator.sh/load-estimated-scaling-factors";
/// Pod annotation: seconds after scheduling during which the estimate is forced.
pub const ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED: &str =
    "scheduling.koordinator.sh/load-estimated-seconds-after-pod-scheduled";
/// Pod annotation: seconds after initialization during which the estimate is forced.
pub const ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_INITIALIZED: &str =
    "scheduling.koordinator.sh/load-estimated-seconds-after-initialized";

/// Value of `scheduling.koordinator.sh/usage-thresholds` (percent per resource).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomUsageThresholds {
    /// Whole-node usage limits.
    #[serde(
        rename = "usageThresholds",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub usage_thresholds: BTreeMap<String, i64>,
    /// Limits on prod pods' usage relative to the node.
    #[serde(
        rename = "prodUsageThresholds",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub prod_usage_thresholds: BTreeMap<String, i64>,
    /// Limits on percentile usage.
    #[serde(
        rename = "aggregatedUsage",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub aggregated_usage: Option<CustomAggregatedUsage>,
}

/// Percentile-based usage limits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomAggregatedUsage {
    #[serde(
        rename = "usageThresholds",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub usage_thresholds: BTreeMap<String, i64>,
    #[serde(
        rename = "usageAggregationType",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub usage_aggregation_type: Option<AggregationType>,
    /// The window the percentile is taken over.
    #[serde(
        rename = "usageAggregatedDuration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub usage_aggregated_duration: Option<GoDuration>,
}

pub fn get_custom_usage_thresholds(
    annotations: &StringMap,
) -> Result<Option<CustomUsageThresholds>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_CUSTOM_USAGE_THRESHOLDS)
}

pub fn set_custom_usage_thresholds(
    annotations: &mut StringMap,
    thresholds: &CustomUsageThresholds,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_CUSTOM_USAGE_THRESHOLDS, thresholds)
}

/// Absent or empty → `Ok(None)`. Upstream ignores a malformed value; here it
/// is an error the caller may ignore.
pub fn get_custom_estimated_scaling_factors(
    annotations: &StringMap,
) -> Result<Option<BTreeMap<String, i64>>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_CUSTOM_ESTIMATED_SCALING_FACTORS)
}

/// Absent or empty → `Ok(None)` (upstream: -1).
pub fn get_custom_estimated_seconds_after_pod_scheduled(
    annotations: &StringMap,
) -> Result<Option<i64>, ExtensionError> {
    non_empty_i64(
        annotations,
        ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
    )
}

/// Absent or empty → `Ok(None)` (upstream: -1).
pub fn get_custom_estimated_seconds_after_initialized(
    annotations: &StringMap,
) -> Result<Option<i64>, ExtensionError> {
    non_empty_i64(
        annotations,
        ANNOTATION_CUSTOM_ESTIMATED_SECONDS_AFTER_INITIALIZED,
    )
}

fn non_empty_i64(annotations: &StringMap, key: &str) -> Result<Option<i64>, ExtensionError> {
    match annotations.get(key).filter(|text| !text.is_empty()) {
        None => Ok(None),
        Some(text) => parse_go_decimal_i64(text)
            .map(Some)
            .map_err(|reason| ExtensionError::invalid_value(key, text, reason)),
    }
}
