//! Elastic quota keys: the quota tree labels and the resource-list
//! annotations the scheduler and quota controller maintain on ElasticQuota
//! objects.

use super::annotations::{StringMap, parse_json_annotation_non_empty, set_json_annotation};
use super::error::ExtensionError;
use super::quantity::QuantityValue;
use super::resource::ResourceList;

pub const SYSTEM_QUOTA_NAME: &str = "koordinator-system-quota";
pub const ROOT_QUOTA_NAME: &str = "koordinator-root-quota";
pub const DEFAULT_QUOTA_NAME: &str = "koordinator-default-quota";

pub const QUOTA_KOORDINATOR_PREFIX: &str = "quota.scheduling.koordinator.sh";
/// Quota label: `true` when the quota has children.
pub const LABEL_QUOTA_IS_PARENT: &str = "quota.scheduling.koordinator.sh/is-parent";
/// Quota label: the parent quota's name (absent = the root quota).
pub const LABEL_QUOTA_PARENT: &str = "quota.scheduling.koordinator.sh/parent";
/// Quota label: `false` stops the quota lending unused resources.
pub const LABEL_ALLOW_LENT_RESOURCE: &str = "quota.scheduling.koordinator.sh/allow-lent-resource";
/// Pod label: the quota the pod is charged to.
pub const LABEL_QUOTA_NAME: &str = "quota.scheduling.koordinator.sh/name";
pub const LABEL_QUOTA_PROFILE: &str = "quota.scheduling.koordinator.sh/profile";
/// Quota label: `true` for the root of a quota tree.
pub const LABEL_QUOTA_IS_ROOT: &str = "quota.scheduling.koordinator.sh/is-root";
pub const LABEL_QUOTA_TREE_ID: &str = "quota.scheduling.koordinator.sh/tree-id";
pub const LABEL_QUOTA_IGNORE_DEFAULT_TREE: &str =
    "quota.scheduling.koordinator.sh/ignore-default-tree";
/// Pod label: `false` marks the pod non-preemptible within its quota.
pub const LABEL_PREEMPTIBLE: &str = "quota.scheduling.koordinator.sh/preemptible";
pub const LABEL_ALLOW_FORCE_UPDATE: &str = "quota.scheduling.koordinator.sh/allow-force-update";
pub const ANNOTATION_SHARED_WEIGHT: &str = "quota.scheduling.koordinator.sh/shared-weight";
pub const ANNOTATION_RUNTIME: &str = "quota.scheduling.koordinator.sh/runtime";
pub const ANNOTATION_REQUEST: &str = "quota.scheduling.koordinator.sh/request";
pub const ANNOTATION_CHILD_REQUEST: &str = "quota.scheduling.koordinator.sh/child-request";
/// ElasticQuotaProfile annotation: JSON list of resource names to manage
/// (default `["cpu","memory"]`).
pub const ANNOTATION_RESOURCE_KEYS: &str = "quota.scheduling.koordinator.sh/resource-keys";
pub const ANNOTATION_TOTAL_RESOURCE: &str = "quota.scheduling.koordinator.sh/total-resource";
pub const ANNOTATION_UNSCHEDULABLE_RESOURCE: &str =
    "quota.scheduling.koordinator.sh/unschedulable-resource";
/// Quota annotation: JSON list of namespaces whose pods use the quota.
pub const ANNOTATION_QUOTA_NAMESPACES: &str = "quota.scheduling.koordinator.sh/namespaces";
pub const ANNOTATION_GUARANTEED: &str = "quota.scheduling.koordinator.sh/guaranteed";
pub const ANNOTATION_ALLOCATED: &str = "quota.scheduling.koordinator.sh/allocated";
pub const ANNOTATION_NON_PREEMPTIBLE_REQUEST: &str =
    "quota.scheduling.koordinator.sh/non-preemptible-request";
pub const ANNOTATION_NON_PREEMPTIBLE_USED: &str =
    "quota.scheduling.koordinator.sh/non-preemptible-used";
pub const ANNOTATION_ADMISSION: &str = "quota.scheduling.koordinator.sh/admission";
/// Quota annotation: JSON list of resources whose max is checked strictly.
pub const ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS: &str =
    "quota.scheduling.koordinator.sh/max-strict-check-resource-keys";

/// Resource keys a profile manages when it does not say.
pub const DEFAULT_QUOTA_RESOURCE_KEYS: &[&str] = &["cpu", "memory"];

/// The parent of quota `quota_name`: its parent label, else the root quota
/// (the root quota itself has no parent: empty).
pub fn parent_quota_name<'a>(quota_name: &str, quota_labels: &'a StringMap) -> &'a str {
    match quota_labels.get(LABEL_QUOTA_PARENT).map(String::as_str) {
        Some(parent) if !parent.is_empty() => parent,
        _ if quota_name != ROOT_QUOTA_NAME => ROOT_QUOTA_NAME,
        _ => "",
    }
}

pub fn is_parent_quota(quota_labels: &StringMap) -> bool {
    label_is(quota_labels, LABEL_QUOTA_IS_PARENT, "true")
}

/// Lending is on unless the label is exactly `false`.
pub fn is_allow_lent_resource(quota_labels: &StringMap) -> bool {
    !label_is(quota_labels, LABEL_ALLOW_LENT_RESOURCE, "false")
}

pub fn is_allow_force_update(quota_labels: &StringMap) -> bool {
    label_is(quota_labels, LABEL_ALLOW_FORCE_UPDATE, "true")
}

pub fn is_tree_root_quota(quota_labels: &StringMap) -> bool {
    label_is(quota_labels, LABEL_QUOTA_IS_ROOT, "true")
}

/// The pod is labelled `preemptible=false`.
pub fn is_pod_non_preemptible(pod_labels: &StringMap) -> bool {
    label_is(pod_labels, LABEL_PREEMPTIBLE, "false")
}

/// The quota tree ID; empty when unlabelled.
pub fn quota_tree_id(quota_labels: &StringMap) -> &str {
    quota_labels
        .get(LABEL_QUOTA_TREE_ID)
        .map_or("", String::as_str)
}

/// The quota a pod is charged to by label; empty when unlabelled.
pub fn quota_name_of_pod(pod_labels: &StringMap) -> &str {
    pod_labels.get(LABEL_QUOTA_NAME).map_or("", String::as_str)
}

/// The system and root quotas may not be modified.
pub fn is_forbidden_modify(quota_name: &str) -> bool {
    quota_name == SYSTEM_QUOTA_NAME || quota_name == ROOT_QUOTA_NAME
}

/// The shared weight as written; absent or empty → `Ok(None)`.
pub fn get_shared_weight(annotations: &StringMap) -> Result<Option<ResourceList>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_SHARED_WEIGHT)
}

/// The effective shared weight: the annotation when it parses (quantities
/// included) and is not all zero, else the quota's max (upstream
/// `GetSharedWeight`).
pub fn shared_weight_or_max(annotations: &StringMap, max: &ResourceList) -> ResourceList {
    let Ok(Some(weight)) = get_shared_weight(annotations) else {
        return max.clone();
    };
    let values: Result<Vec<QuantityValue>, _> = weight.values().map(QuantityValue::of).collect();
    match values {
        Ok(values) if values.iter().any(|v| !v.is_zero()) => weight,
        _ => max.clone(),
    }
}

macro_rules! resource_list_annotation {
    ($get:ident, $set:ident, $key:ident) => {
        #[doc = concat!("Reads `", stringify!($key), "`; absent or empty → `Ok(None)`.")]
        pub fn $get(annotations: &StringMap) -> Result<Option<ResourceList>, ExtensionError> {
            parse_json_annotation_non_empty(annotations, $key)
        }

        #[doc = concat!("Writes `", stringify!($key), "`.")]
        pub fn $set(
            annotations: &mut StringMap,
            list: &ResourceList,
        ) -> Result<(), ExtensionError> {
            set_json_annotation(annotations, $key, list)
        }
    };
}

resource_list_annotation!(get_quota_runtime, set_quota_runtime, ANNOTATION_RUNTIME);
resource_list_annotation!(get_quota_request, set_quota_request, ANNOTATION_REQUEST);
resource_list_annotation!(
    get_quota_child_request,
    set_quota_child_request,
    ANNOTATION_CHILD_REQUEST
);
resource_list_annotation!(
    get_quota_guaranteed,
    set_quota_guaranteed,
    ANNOTATION_GUARANTEED
);
resource_list_annotation!(
    get_quota_allocated,
    set_quota_allocated,
    ANNOTATION_ALLOCATED
);
resource_list_annotation!(
    get_quota_non_preemptible_request,
    set_quota_non_preemptible_request,
    ANNOTATION_NON_PREEMPTIBLE_REQUEST
);
resource_list_annotation!(
    get_quota_non_preemptible_used,
    set_quota_non_preemptible_used,
    ANNOTATION_NON_PREEMPTIBLE_USED
);
resource_list_annotation!(
    get_quota_unschedulable_resource,
    set_quota_unschedulable_resource,
    ANNOTATION_UNSCHEDULABLE_RESOURCE
);
resource_list_annotation!(
    get_quota_admission,
    set_quota_admission,
    ANNOTATION_ADMISSION
);
resource_list_annotation!(
    get_quota_total_resource,
    set_quota_total_resource,
    ANNOTATION_TOTAL_RESOURCE
);

/// Namespaces bound to the quota; absent or empty → `Ok(None)`.
pub fn get_quota_namespaces(
    annotations: &StringMap,
) -> Result<Option<Vec<String>>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_QUOTA_NAMESPACES)
}

pub fn set_quota_namespaces(
    annotations: &mut StringMap,
    namespaces: &[String],
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_QUOTA_NAMESPACES, namespaces)
}

/// Resources checked strictly against max; absent or empty → `Ok(None)`.
pub fn get_max_strict_check_resource_keys(
    annotations: &StringMap,
) -> Result<Option<Vec<String>>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS)
}

/// Resource keys of an ElasticQuotaProfile; absent or empty → `Ok(None)`
/// (callers then use [`DEFAULT_QUOTA_RESOURCE_KEYS`]).
pub fn get_quota_resource_keys(
    annotations: &StringMap,
) -> Result<Option<Vec<String>>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_RESOURCE_KEYS)
}

fn label_is(labels: &StringMap, key: &str, expected: &str) -> bool {
    labels.get(key).is_some_and(|v| v == expected)
}
