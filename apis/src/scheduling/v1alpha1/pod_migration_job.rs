//! PodMigrationJob: move one pod elsewhere, optionally reserving the target
//! first.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Time};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ReservationTemplateSpec;
use crate::extension::GoDuration;
use crate::wire_enum::wire_enum;

/// Which pod to migrate and how.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "scheduling.koordinator.sh",
    version = "v1alpha1",
    kind = "PodMigrationJob",
    plural = "podmigrationjobs",
    shortname = "pmj",
    status = "PodMigrationJobStatus",
    derive = "PartialEq",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase","description":"The phase of PodMigrationJob"}"#,
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.status","description":"The status of PodMigrationJob"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Reservation","type":"string","jsonPath":".spec.reservationOptions.reservationRef.name"}"#,
    printcolumn = r#"{"name":"PodNamespace","type":"string","jsonPath":".spec.podRef.namespace"}"#,
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".spec.podRef.name"}"#,
    printcolumn = r#"{"name":"NewPod","type":"string","jsonPath":".status.podRef.name"}"#,
    printcolumn = r#"{"name":"TTL","type":"string","jsonPath":".spec.ttl"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrationJobSpec {
    /// Hold the job without acting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Give up after this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<GoDuration>,
    /// Reserve first, or evict right away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PodMigrationJobMode>,
    /// The pod to migrate.
    #[schemars(schema_with = "crate::schema::atomic::<ObjectReference>")]
    pub pod_ref: ObjectReference,
    /// How to reserve the destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_options: Option<PodMigrateReservationOptions>,
    /// How to delete the old pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "delete_options_schema")]
    pub delete_options: Option<DeleteOptions>,
}

/// `metav1.DeleteOptions` with `dryRun` marked atomic, as upstream's schema has it.
fn delete_options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<DeleteOptions>();
    if let Some(dry_run) = schema
        .get_mut("properties")
        .and_then(|properties| properties.get_mut("dryRun"))
        .and_then(serde_json::Value::as_object_mut)
    {
        dry_run.insert("x-kubernetes-list-type".to_owned(), "atomic".into());
    }
    schema
}

wire_enum! {
    /// How the job migrates the pod.
    pub enum PodMigrationJobMode open {
        /// Reserve resources elsewhere, then evict.
        ReservationFirst = "ReservationFirst",
        /// Evict and let the pod be rescheduled.
        EvictDirectly = "EvictDirectly",
    }
}

/// The reservation made for the migrated pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrateReservationOptions {
    /// An existing reservation to use; the controller fills it in when it
    /// creates one from `template`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::atomic::<ObjectReference>")]
    pub reservation_ref: Option<ObjectReference>,
    /// The reservation to create.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::preserve_unknown_fields")]
    pub template: Option<ReservationTemplateSpec>,
    /// Preemption settings (none defined yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_options: Option<PodMigrationJobPreemptionOptions>,
}

/// Preemption settings of a migration; upstream defines no fields yet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PodMigrationJobPreemptionOptions {}

/// Progress of a migration.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrationJobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodMigrationJobPhase>,
    /// The step in progress (e.g. `ReservationCreated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<PodMigrationJobReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodMigrationJobCondition>>,
    /// The node the pod moves to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The replacement pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::atomic::<ObjectReference>")]
    pub pod_ref: Option<ObjectReference>,
    /// Pods preempted to make room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::list_of_atomic::<ObjectReference>")]
    pub preempted_pods_ref: Option<Vec<ObjectReference>>,
    /// Reservations made for the preempted pods.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "preemptedPodsReservation"
    )]
    pub preempted_pods_reservations: Option<Vec<PodMigrationJobPreemptedReservation>>,
}

/// A reservation created for a preempted pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrationJobPreemptedReservation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The reservation's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::atomic::<ObjectReference>")]
    pub preempted_pod_ref: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::list_of_atomic::<ObjectReference>")]
    pub pods_ref: Option<Vec<ObjectReference>>,
}

/// One observation about a migration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMigrationJobCondition {
    #[serde(rename = "type")]
    pub type_: PodMigrationJobConditionType,
    pub status: PodMigrationJobConditionStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<PodMigrationJobReason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

wire_enum! {
    /// Lifecycle phase of a migration.
    pub enum PodMigrationJobPhase open {
        Pending = "Pending",
        Running = "Running",
        Succeeded = "Succeeded",
        Failed = "Failed",
        /// Stopped by a user or policy before finishing.
        Aborted = "Aborted",
    }
}

wire_enum! {
    /// Condition types of a migration, one per step.
    pub enum PodMigrationJobConditionType open {
        ReservationCreated = "ReservationCreated",
        ReservationScheduled = "ReservationScheduled",
        Preemption = "Preemption",
        Eviction = "Eviction",
        PodScheduled = "PodScheduled",
        PodBoundReservation = "PodBoundReservation",
        BoundPodReady = "BoundPodReady",
        ReservationBound = "ReservationBound",
    }
}

wire_enum! {
    /// Status of a migration condition.
    pub enum PodMigrationJobConditionStatus open {
        True = "True",
        False = "False",
        Unknown = "Unknown",
    }
}

wire_enum! {
    /// Reasons the migration controller reports.
    pub enum PodMigrationJobReason open {
        Timeout = "Timeout",
        FailedCreateReservation = "FailedCreateReservation",
        ReservationExpired = "ReservationExpired",
        Unschedulable = "Unschedulable",
        ForbiddenMigratePod = "ForbiddenMigratePod",
        MissingPod = "MissingPod",
        MissingReservation = "MissingReservation",
        Preempting = "Preempting",
        PreemptComplete = "PreemptComplete",
        Evicting = "Evicting",
        FailedEvict = "FailedEvict",
        EvictComplete = "EvictComplete",
        WaitForPodBindReservation = "WaitForPodBindReservation",
        WaitForBoundPodReady = "WaitForBoundPodReady",
    }
}

impl PodMigrationJob {
    /// The phase; a job without one has not been picked up yet.
    pub fn phase(&self) -> PodMigrationJobPhase {
        self.status
            .as_ref()
            .and_then(|status| status.phase.clone())
            .unwrap_or(PodMigrationJobPhase::Pending)
    }

    /// Whether the job reached a final phase.
    pub fn is_finished(&self) -> bool {
        matches!(
            self.phase(),
            PodMigrationJobPhase::Succeeded
                | PodMigrationJobPhase::Failed
                | PodMigrationJobPhase::Aborted
        )
    }
}

/// PodMigrationJob's CRD in controller-gen style. Upstream marks the
/// condition timestamps `+nullable` (Go writes a zero time as `null`), so
/// those two keep `nullable: true`.
pub(super) fn pod_migration_job_crd() -> CustomResourceDefinition {
    let mut crd = PodMigrationJob::crd();
    crate::schema::controller_gen_style(&mut crd);
    for version in &mut crd.spec.versions {
        let condition = version
            .schema
            .as_mut()
            .and_then(|schema| schema.open_api_v3_schema.as_mut())
            .and_then(|root| property(root, "status"))
            .and_then(|status| property(status, "conditions"))
            .and_then(|conditions| match conditions.items.as_mut() {
                Some(JSONSchemaPropsOrArray::Schema(item)) => Some(&mut **item),
                _ => None,
            });
        if let Some(condition) = condition {
            for time in ["lastProbeTime", "lastTransitionTime"] {
                if let Some(field) = property(condition, time) {
                    field.nullable = Some(true);
                }
            }
        }
    }
    crd
}

fn property<'a>(schema: &'a mut JSONSchemaProps, name: &str) -> Option<&'a mut JSONSchemaProps> {
    schema.properties.as_mut()?.get_mut(name)
}
