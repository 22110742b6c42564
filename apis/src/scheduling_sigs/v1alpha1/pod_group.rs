//! PodGroup: a gang of pods scheduled all-or-nothing. Pods join a group with
//! the `pod-group.scheduling.sigs.k8s.io` label
//! (`apis::extension::LABEL_POD_GROUP`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::core::Resource;
use schemars::JsonSchema;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use crate::scheduling::hand_built::CrdDescription;
use crate::scheduling::hand_built_resource;
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

/// A gang of pods.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::scheduling::hand_built::without_property_defaults)]
pub struct PodGroup {
    #[serde(default)]
    #[schemars(skip)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodGroupSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodGroupStatus>,
}

hand_built_resource!(PodGroup, POD_GROUP_CRD, Namespaced);

impl PodGroup {
    /// A PodGroup named `name` (set the namespace on `metadata`).
    pub fn new(name: &str, spec: PodGroupSpec) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }

    /// The phase; a group without one has not been seen by the scheduler.
    pub fn phase(&self) -> Option<&PodGroupPhase> {
        self.status
            .as_ref()
            .and_then(|status| status.phase.as_ref())
    }
}

impl Serialize for PodGroup {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state =
            serializer.serialize_struct("PodGroup", 4 + usize::from(self.status.is_some()))?;
        state.serialize_field("apiVersion", &Self::api_version(&()))?;
        state.serialize_field("kind", &Self::kind(&()))?;
        state.serialize_field("metadata", &self.metadata)?;
        state.serialize_field("spec", &self.spec)?;
        if let Some(status) = &self.status {
            state.serialize_field("status", status)?;
        }
        state.end()
    }
}

impl kube::core::object::HasSpec for PodGroup {
    type Spec = PodGroupSpec;
    fn spec(&self) -> &PodGroupSpec {
        &self.spec
    }
    fn spec_mut(&mut self) -> &mut PodGroupSpec {
        &mut self.spec
    }
}

impl kube::core::object::HasStatus for PodGroup {
    type Status = PodGroupStatus;
    fn status(&self) -> Option<&PodGroupStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<PodGroupStatus> {
        &mut self.status
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
