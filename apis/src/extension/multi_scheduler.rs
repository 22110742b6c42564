//! Multiple scheduler profiles: the scheduler-name override label and the
//! internal scheduling hint.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, labels_of, null_as_default, parse_json_annotation_non_empty, set_json_annotation,
};
use super::error::ExtensionError;

/// Pod label: the scheduler profile that handles the pod, overriding
/// `spec.schedulerName`.
pub const LABEL_SCHEDULER_NAME: &str = "scheduling.koordinator.sh/scheduler-name";
/// Internal: `spec.schedulerName` before it was rewritten, for restoring it.
pub const ANNOTATION_ORIGINAL_SCHEDULER_NAME: &str =
    "internal.scheduling.koordinator.sh/original-scheduler-name";
/// Deprecated: use [`ANNOTATION_SCHEDULING_HINT`].
pub const DEPRECATED_ANNOTATION_SCHEDULING_HINT: &str = "scheduling.koordinator.sh/scheduling-hint";
/// Internal: a [`SchedulingHint`] plugins may honour.
pub const ANNOTATION_SCHEDULING_HINT: &str = "internal.scheduling.koordinator.sh/scheduling-hint";

/// Value of `internal.scheduling.koordinator.sh/scheduling-hint`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulingHint {
    /// Nodes the pod must go to.
    #[serde(
        rename = "nodeNames",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub node_names: Vec<String>,
    /// Nodes to try first, in order.
    #[serde(
        rename = "preferredNodeNames",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub preferred_node_names: Vec<String>,
    /// Free-form hints for individual plugins.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub extensions: BTreeMap<String, serde_json::Value>,
}

/// The scheduler profile for the pod: the label, else `spec.schedulerName`
/// (empty when neither is set).
pub fn scheduler_name_of_pod(pod: &Pod) -> &str {
    if let Some(name) = labels_of(&pod.metadata).get(LABEL_SCHEDULER_NAME) {
        return name;
    }
    pod.spec
        .as_ref()
        .and_then(|spec| spec.scheduler_name.as_deref())
        .unwrap_or("")
}

/// The scheduling hint under the internal key, else the deprecated key;
/// empty values count as absent.
pub fn get_scheduling_hint(
    annotations: &StringMap,
) -> Result<Option<SchedulingHint>, ExtensionError> {
    match parse_json_annotation_non_empty(annotations, ANNOTATION_SCHEDULING_HINT)? {
        Some(hint) => Ok(Some(hint)),
        None => parse_json_annotation_non_empty(annotations, DEPRECATED_ANNOTATION_SCHEDULING_HINT),
    }
}

pub fn set_scheduling_hint(
    annotations: &mut StringMap,
    hint: &SchedulingHint,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_SCHEDULING_HINT, hint)
}
