//! ClusterColocationProfile: rules the manager's pod webhook applies to
//! matching pods (QoS class, priority, labels, scheduler, patches).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::extension::QoSClass;

/// Which pods a profile applies to and what it sets on them.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "config.koordinator.sh",
    version = "v1alpha1",
    kind = "ClusterColocationProfile",
    plural = "clustercolocationprofiles",
    status = "ClusterColocationProfileStatus",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterColocationProfileSpec {
    /// Namespaces whose pods are considered; unset matches every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub namespace_selector: Option<LabelSelector>,
    /// Pods considered; unset matches every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub selector: Option<LabelSelector>,
    /// Chance the profile applies to a matching pod (`"50%"` or a number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::int_or_string")]
    pub probability: Option<IntOrString>,
    /// Koordinator QoS class written to the `koordinator.sh/qosClass` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "profile_qos_class")]
    pub qos_class: Option<QoSClass>,
    /// PriorityClass whose name and value are set on the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Sub-priority written to the `koordinator.sh/priority` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub koordinator_priority: Option<i32>,
    /// Labels added to the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations added to the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// For each `from: to` entry, copies the pod's label `from` to label `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_keys_mapping: Option<BTreeMap<String, String>>,
    /// For each `from: to` entry, copies annotation `from` to annotation `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_keys_mapping: Option<BTreeMap<String, String>>,
    /// Suffixes appended to the values of the named pod labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_suffixes: Option<BTreeMap<String, String>>,
    /// Scheduler set on the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// A strategic-merge patch applied to the pod, kept as raw JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_fields")]
    pub patch: Option<serde_json::Value>,
}

/// The classes a profile may set (every Koordinator class except "none").
pub const PROFILE_QOS_CLASSES: [QoSClass; 5] = [
    QoSClass::LSE,
    QoSClass::LSR,
    QoSClass::LS,
    QoSClass::BE,
    QoSClass::System,
];

fn profile_qos_class(_: &mut SchemaGenerator) -> Schema {
    let values: Vec<&str> = PROFILE_QOS_CLASSES
        .iter()
        .map(|class| class.as_str())
        .collect();
    json_schema!({ "type": "string", "enum": values })
}

/// Upstream defines no status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterColocationProfileStatus {}
