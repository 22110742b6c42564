//! CPU normalization: a per-node ratio that scales CPU capacity to a common
//! baseline across CPU models, and the CPU basic info it is derived from.

use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, format_json_annotation, is_false, parse_finite_f64, parse_go_bool,
    parse_json_annotation,
};
use super::error::ExtensionError;

/// Node annotation: the CPU normalization ratio (float, two decimals).
pub const ANNOTATION_CPU_NORMALIZATION_RATIO: &str = "node.koordinator.sh/cpu-normalization-ratio";
/// Node label: turns normalization on or off, over the node strategy.
pub const LABEL_CPU_NORMALIZATION_ENABLED: &str = "node.koordinator.sh/cpu-normalization-enabled";
/// Node annotation: [`CPUBasicInfo`].
pub const ANNOTATION_CPU_BASIC_INFO: &str = "node.koordinator.sh/cpu-basic-info";
/// Ratios closer than this are considered equal.
pub const NORMALIZATION_RATIO_DIFF_EPSILON: f64 = 0.01;

/// The node's normalization ratio; absent → `Ok(None)` (upstream: -1); not a
/// number or not positive → error.
pub fn get_cpu_normalization_ratio(
    node_annotations: &StringMap,
) -> Result<Option<f64>, ExtensionError> {
    let key = ANNOTATION_CPU_NORMALIZATION_RATIO;
    let Some(text) = node_annotations.get(key) else {
        return Ok(None);
    };
    let ratio = parse_finite_f64(text)
        .map_err(|reason| ExtensionError::invalid_value(key, text, reason))?;
    if ratio <= 0.0 {
        return Err(ExtensionError::invalid_value(
            key,
            text,
            "ratio must be positive",
        ));
    }
    Ok(Some(ratio))
}

/// The annotation text upstream writes for a ratio (two decimals).
pub fn format_cpu_normalization_ratio(ratio: f64) -> String {
    format!("{ratio:.2}")
}

/// Writes the ratio; returns whether the annotation text changed.
pub fn set_cpu_normalization_ratio(node_annotations: &mut StringMap, ratio: f64) -> bool {
    let text = format_cpu_normalization_ratio(ratio);
    if node_annotations.get(ANNOTATION_CPU_NORMALIZATION_RATIO) == Some(&text) {
        return false;
    }
    node_annotations.insert(ANNOTATION_CPU_NORMALIZATION_RATIO.to_owned(), text);
    true
}

/// The enabled label as Go's `strconv.ParseBool` reads it; absent → `Ok(None)`.
pub fn get_cpu_normalization_enabled(
    node_labels: &StringMap,
) -> Result<Option<bool>, ExtensionError> {
    let key = LABEL_CPU_NORMALIZATION_ENABLED;
    match node_labels.get(key) {
        None => Ok(None),
        Some(text) => parse_go_bool(text)
            .map(Some)
            .ok_or_else(|| ExtensionError::invalid_value(key, text, "not a boolean")),
    }
}

/// Whether two ratios differ by more than [`NORMALIZATION_RATIO_DIFF_EPSILON`].
pub fn is_cpu_normalization_ratio_different(old: f64, new: f64) -> bool {
    old > new + NORMALIZATION_RATIO_DIFF_EPSILON || old < new - NORMALIZATION_RATIO_DIFF_EPSILON
}

/// Value of `node.koordinator.sh/cpu-basic-info`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CPUBasicInfo {
    #[serde(rename = "cpuModel", default, skip_serializing_if = "String::is_empty")]
    pub cpu_model: String,
    #[serde(
        rename = "hyperThreadEnabled",
        default,
        skip_serializing_if = "is_false"
    )]
    pub hyper_thread_enabled: bool,
    #[serde(rename = "turboEnabled", default, skip_serializing_if = "is_false")]
    pub turbo_enabled: bool,
    #[serde(
        rename = "catL3CbmMask",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cat_l3_cbm_mask: String,
    #[serde(rename = "vendorID", default, skip_serializing_if = "String::is_empty")]
    pub vendor_id: String,
}

impl CPUBasicInfo {
    /// `model_HT_turbo`, the lookup key into the normalization ratio model.
    pub fn key(&self) -> String {
        format!(
            "{}_{}_{}",
            self.cpu_model, self.hyper_thread_enabled, self.turbo_enabled
        )
    }
}

pub fn get_cpu_basic_info(
    node_annotations: &StringMap,
) -> Result<Option<CPUBasicInfo>, ExtensionError> {
    parse_json_annotation(node_annotations, ANNOTATION_CPU_BASIC_INFO)
}

/// Writes the info; returns whether the annotation text changed.
pub fn set_cpu_basic_info(
    node_annotations: &mut StringMap,
    info: &CPUBasicInfo,
) -> Result<bool, ExtensionError> {
    let text = format_json_annotation(ANNOTATION_CPU_BASIC_INFO, info)?;
    if node_annotations.get(ANNOTATION_CPU_BASIC_INFO) == Some(&text) {
        return Ok(false);
    }
    node_annotations.insert(ANNOTATION_CPU_BASIC_INFO.to_owned(), text);
    Ok(true)
}
