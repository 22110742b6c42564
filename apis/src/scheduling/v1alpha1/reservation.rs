//! Reservation: resources held on a node for specific future owners.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ObjectReference, PodTemplateSpec, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::extension::GoDuration;
use crate::wire_enum::wire_enum;

/// The TTL upstream's schema defaults to.
pub const DEFAULT_RESERVATION_TTL: &str = "24h";

/// What a Reservation reserves and for whom.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.koordinator.sh",
    version = "v1alpha1",
    kind = "Reservation",
    plural = "reservations",
    status = "ReservationStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"The phase of reservation"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"TTL","type":"string","jsonPath":".spec.ttl"}"#,
    printcolumn = r#"{"name":"Expires","type":"string","jsonPath":".spec.expires"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ReservationSpec {
    /// The pod the scheduler places as if it were real; a set
    /// `template.spec.nodeName` pins the reservation to that node.
    #[schemars(schema_with = "crate::schema::preserve_unknown_fields")]
    pub template: PodTemplateSpec,
    /// Who may consume the reserved resources (any matching entry wins).
    #[schemars(length(min = 1))]
    pub owners: Vec<ReservationOwner>,
    /// Lifetime; exclusive with `expires`. The API server defaults it to 24h;
    /// `0` disables expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = DEFAULT_RESERVATION_TTL))]
    pub ttl: Option<GoDuration>,
    /// Absolute expiry; checked before `ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Time>,
    /// Schedule even when the node lacks free resources, waiting for them
    /// to be released (overcommit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_allocation: Option<bool>,
    /// Only the first owner may allocate the reservation (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub allocate_once: Option<bool>,
    /// How owners' requests are split between reservation and node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocate_policy: Option<ReservationAllocatePolicy>,
    /// Stops new pods from allocating this reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<bool>,
    /// Taints owners must tolerate (NoExecute is not enforced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
    /// Which running pods may be pre-allocated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_allocation_policy: Option<PreAllocationPolicy>,
}

impl ReservationSpec {
    /// Whether the reservation is consumed by its first owner, applying
    /// upstream's default.
    pub fn allocate_once_or_default(&self) -> bool {
        self.allocate_once.unwrap_or(true)
    }
}

wire_enum! {
    /// How a pod's requests are served by a reservation. Upstream's deprecated
    /// empty value means `Aligned` and is rejected by the schema.
    pub enum ReservationAllocatePolicy closed {
        /// Reservation first, the node for the remainder, never mixing two
        /// reservations.
        Aligned = "Aligned",
        /// Resources the reservation holds must come from it; others may come
        /// from the node.
        Restricted = "Restricted",
    }
}

/// Which pods may be pre-allocated to a reservation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreAllocationPolicy {
    /// Source of the candidate selector (defaults to `Default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Default"))]
    pub mode: Option<PreAllocationMode>,
    /// Allow several pods to be pre-allocated (defaults to false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enable_multiple: Option<bool>,
}

wire_enum! {
    /// Where pre-allocation candidates come from.
    pub enum PreAllocationMode closed {
        /// The reservation's own owner matchers.
        Default = "Default",
        /// Cluster-wide label/annotation selectors.
        Cluster = "Cluster",
    }
}

/// One owner matcher; at least one of its fields is set and all set fields
/// must match.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct ReservationOwner {
    /// A specific object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::atomic::<ObjectReference>")]
    pub object: Option<ObjectReference>,
    /// Pods controlled by this controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::atomic::<ReservationControllerReference>")]
    pub controller: Option<ReservationControllerReference>,
    /// Pods carrying these labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub label_selector: Option<LabelSelector>,
}

/// An owner reference that may point into another namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationControllerReference {
    #[serde(flatten)]
    pub owner_reference: OwnerReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A Reservation as embedded in another object (PodMigrationJob).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_object")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ReservationSpec>,
}

/// What the scheduler observed about a reservation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationStatus {
    /// Lifecycle phase; the API server defaults it to `Pending`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Pending"))]
    pub phase: Option<ReservationPhase>,
    /// Why the reservation is (not yet) available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<ReservationCondition>>,
    /// Owners currently holding part of the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::list_of_atomic::<ObjectReference>")]
    pub current_owners: Option<Vec<ObjectReference>>,
    /// The node the reservation was placed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Resources reserved for owners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::resource_list")]
    pub allocatable: Option<BTreeMap<String, Quantity>>,
    /// Resources already taken by current owners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::resource_list")]
    pub allocated: Option<BTreeMap<String, Quantity>>,
}

impl Reservation {
    /// The phase, treating a missing status or phase as `Pending` as upstream does.
    pub fn phase(&self) -> ReservationPhase {
        self.status
            .as_ref()
            .and_then(|status| status.phase.clone())
            .unwrap_or(ReservationPhase::Pending)
    }

    /// The node the reservation is placed on, if any.
    pub fn node_name(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|status| status.node_name.as_deref())
            .filter(|name| !name.is_empty())
    }

    /// Whether owners may allocate from it now.
    pub fn is_available(&self) -> bool {
        self.phase() == ReservationPhase::Available
    }

    /// Whether it reached a final phase (succeeded or failed).
    pub fn is_terminated(&self) -> bool {
        matches!(
            self.phase(),
            ReservationPhase::Succeeded | ReservationPhase::Failed
        )
    }
}

wire_enum! {
    /// Lifecycle phase of a reservation.
    pub enum ReservationPhase open {
        /// Not yet scheduled, or unschedulable for now.
        Pending = "Pending",
        /// Scheduled and open for allocation.
        Available = "Available",
        /// Consumed by an owner; no longer allocatable.
        Succeeded = "Succeeded",
        /// Scheduled, but the reserved resources are not free yet
        /// (pre-allocation).
        Waiting = "Waiting",
        /// Expired or otherwise unusable; will be cleaned up.
        Failed = "Failed",
    }
}

wire_enum! {
    /// Condition types of a reservation.
    pub enum ReservationConditionType open {
        Scheduled = "Scheduled",
        Ready = "Ready",
    }
}

wire_enum! {
    /// Status of a condition.
    pub enum ConditionStatus open {
        True = "True",
        False = "False",
        Unknown = "Unknown",
    }
}

wire_enum! {
    /// Reasons the scheduler writes on reservation conditions.
    pub enum ReservationReason open {
        Scheduled = "Scheduled",
        Unschedulable = "Unschedulable",
        Available = "Available",
        Succeeded = "Succeeded",
        Expired = "Expired",
    }
}

/// One observation about a reservation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationCondition {
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub type_: Option<ReservationConditionType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ConditionStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<ReservationReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}
