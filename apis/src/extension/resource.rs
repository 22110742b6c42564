//! Colocation resource names (batch and mid), the priority → extended
//! resource mapping, the extended-resource-spec annotation and the
//! replace-resources annotation.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use super::annotations::{StringMap, null_as_default, parse_json_annotation, set_json_annotation};
use super::error::ExtensionError;
use super::priority::PriorityClass;

/// A Kubernetes resource list (`corev1.ResourceList`).
pub type ResourceList = BTreeMap<String, Quantity>;

pub const RESOURCE_CPU: &str = "cpu";
pub const RESOURCE_MEMORY: &str = "memory";
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// Reclaimed CPU for batch pods, in milli-cores.
pub const BATCH_CPU: &str = "kubernetes.io/batch-cpu";
/// Reclaimed memory for batch pods, in bytes.
pub const BATCH_MEMORY: &str = "kubernetes.io/batch-memory";
/// Reclaimed CPU for mid pods, in milli-cores.
pub const MID_CPU: &str = "kubernetes.io/mid-cpu";
/// Reclaimed memory for mid pods, in bytes.
pub const MID_MEMORY: &str = "kubernetes.io/mid-memory";

/// Pod annotation: requests/limits of extended resources per container, for
/// koordlet and the runtime proxy, which only see CRI requests.
pub const ANNOTATION_EXTENDED_RESOURCE_SPEC: &str = "node.koordinator.sh/extended-resource-spec";
/// Pod annotation: `from:to,...` renames resources before scheduling and
/// admission; an empty `to` erases `from`.
pub const ANNOTATION_POD_REPLACE_RESOURCES: &str = "pod.koordinator.sh/replace-resources";

/// Which extended resource replaces cpu/memory for each priority class
/// (upstream `ResourceNameMap`; only batch and mid have one).
pub const RESOURCE_NAME_MAP: &[(PriorityClass, &[(&str, &str)])] = &[
    (
        PriorityClass::Batch,
        &[(RESOURCE_CPU, BATCH_CPU), (RESOURCE_MEMORY, BATCH_MEMORY)],
    ),
    (
        PriorityClass::Mid,
        &[(RESOURCE_CPU, MID_CPU), (RESOURCE_MEMORY, MID_MEMORY)],
    ),
];

/// The extended resource a pod of `priority_class` requests instead of
/// `resource_name` (`cpu` → `kubernetes.io/batch-cpu` for batch), if any.
pub fn extended_resource_name(
    priority_class: PriorityClass,
    resource_name: &str,
) -> Option<&'static str> {
    RESOURCE_NAME_MAP
        .iter()
        .find(|(class, _)| *class == priority_class)
        .and_then(|(_, names)| names.iter().find(|(from, _)| *from == resource_name))
        .map(|(_, to)| *to)
}

/// The priority class an extended resource belongs to (upstream
/// `ReverseResourceNameMap`): batch-* → batch, mid-* → mid.
pub fn priority_class_of_extended_resource(resource_name: &str) -> Option<PriorityClass> {
    RESOURCE_NAME_MAP
        .iter()
        .find(|(_, names)| names.iter().any(|(_, to)| *to == resource_name))
        .map(|(class, _)| *class)
}

/// The resource a pod of `priority_class` uses for `resource_name`: prod and
/// none keep the name, batch and mid map cpu/memory to their extended
/// resources. `None` where upstream returns the empty name (e.g. free, or
/// batch with a resource that has no batch counterpart).
pub fn translate_resource_name_by_priority_class(
    priority_class: PriorityClass,
    resource_name: &str,
) -> Option<&str> {
    match priority_class {
        PriorityClass::Prod | PriorityClass::None => Some(resource_name),
        class => extended_resource_name(class, resource_name),
    }
}

/// Value of `node.koordinator.sh/extended-resource-spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtendedResourceSpec {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub containers: BTreeMap<String, ExtendedResourceContainerSpec>,
}

/// Extended-resource requirements of one container.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtendedResourceContainerSpec {
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub limits: ResourceList,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub requests: ResourceList,
}

pub fn get_extended_resource_spec(
    annotations: &StringMap,
) -> Result<Option<ExtendedResourceSpec>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_EXTENDED_RESOURCE_SPEC)
}

pub fn set_extended_resource_spec(
    annotations: &mut StringMap,
    spec: &ExtendedResourceSpec,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_EXTENDED_RESOURCE_SPEC, spec)
}

/// Parsed `pod.koordinator.sh/replace-resources`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaceResourcesConfig {
    /// Resources to drop from the pod spec (`name:` entries).
    pub erase_names: Vec<String>,
    /// Resources to rename (`from:to` entries).
    pub replace_mappings: BTreeMap<String, String>,
}

/// Reads `pod.koordinator.sh/replace-resources`. Entries that are not
/// `from:to` are skipped, as upstream does; absent or empty → empty config.
pub fn get_pod_replace_resources_config(annotations: &StringMap) -> ReplaceResourcesConfig {
    let mut config = ReplaceResourcesConfig::default();
    let Some(text) = annotations.get(ANNOTATION_POD_REPLACE_RESOURCES) else {
        return config;
    };
    for mapping in text.split(',').filter(|m| !m.is_empty()) {
        let mut parts = mapping.split(':');
        let (Some(from), Some(to), None) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let (from, to) = (from.trim(), to.trim());
        if to.is_empty() {
            config.erase_names.push(from.to_owned());
        } else {
            config
                .replace_mappings
                .insert(from.to_owned(), to.to_owned());
        }
    }
    config
}
