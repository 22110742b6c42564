//! PodGroup: a gang of pods scheduled all-or-nothing. Pods join a group with
//! the `pod-group.scheduling.sigs.k8s.io` label
//! (`apis::extension::LABEL_POD_GROUP`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hand_built::{CrdDescription, hand_built_resource};
use crate::wire_enum::wire_enum;

/// PodGroup's CRD names. Upstream has a `status` field but no status
/// subresource, so the root is hand-built.
pub const POD_GROUP_CRD: CrdDescription = CrdDescription {
    group: super::GROUP,
    version: super::VERSION,
    kind: "PodGroup",
    plural: "podgroups",
    singular: "podgroup",
    namespaced: true,
    short_names: &[],
    annotations: &[(super::API_APPROVED_ANNOTATION, super::API_APPROVED_URL)],
};

hand_built_resource! {
    /// A gang of pods.
    pub struct PodGroup {
        crd: POD_GROUP_CRD,
        scope: Namespaced,
        spec: PodGroupSpec,
        status: PodGroupStatus,
    }
}

impl PodGroup {
    /// The phase; a group without one has not been seen by the scheduler.
    pub fn phase(&self) -> Option<&PodGroupPhase> {
        self.status
            .as_ref()
            .and_then(|status| status.phase.as_ref())
    }
}

/// What the gang needs before any member may run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Members that must be schedulable together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// Resources that must be available together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::resource_list")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// How long members wait for the rest of the gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Observed state of a gang.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodGroupPhase>,
    /// UID of the workload that owns the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupied_by: Option<String>,
    /// Members scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<i32>,
    /// Members running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Members succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Members failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// When the gang started scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_start_time: Option<Time>,
}

wire_enum! {
    /// Lifecycle phase of a gang.
    pub enum PodGroupPhase open {
        /// Accepted, but resources for the whole gang are not available.
        Pending = "Pending",
        /// At least `minMember` members are running.
        Running = "Running",
        /// All members wait to be scheduled.
        PreScheduling = "PreScheduling",
        /// Some members are scheduled, fewer than `minMember`.
        Scheduling = "Scheduling",
        /// `minMember` members are scheduled.
        Scheduled = "Scheduled",
        /// Some members run while others cannot be scheduled.
        Unknown = "Unknown",
        /// All members finished successfully.
        Finished = "Finished",
        /// At least one member failed.
        Failed = "Failed",
    }
}
