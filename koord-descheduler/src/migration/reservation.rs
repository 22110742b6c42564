//! The Reservation a ReservationFirst job makes for its pod's replacement
//! (upstream `CreateOrUpdateReservationOptions`), and how the controller
//! reads a Reservation's state.

use std::collections::BTreeMap;

use apis::extension::reservation::LABEL_RESERVATION_ORDER;
use apis::scheduling::v1alpha1::{
    ConditionStatus, PodMigrateReservationOptions, PodMigrationJob, Reservation,
    ReservationCondition, ReservationConditionType, ReservationControllerReference,
    ReservationOwner, ReservationPhase, ReservationReason, ReservationSpec,
    ReservationTemplateSpec,
};
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    ObjectReference, Pod, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;

use super::{CREATOR, LABEL_CREATED_BY};

/// Why no Reservation could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("the PodMigrationJob has no uid, which names its Reservation")]
    MissingJobUid,
    #[error("the pod has no spec to reserve for")]
    MissingPodSpec,
}

/// The pod's metadata as a template: what the server manages is dropped so
/// the Reservation does not carry another object's identity.
fn template_metadata(pod: &Pod) -> ObjectMeta {
    let meta = &pod.metadata;
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        labels: meta.labels.clone(),
        annotations: meta.annotations.clone(),
        owner_references: meta.owner_references.clone(),
        ..ObjectMeta::default()
    }
}

/// Upstream `GenerateReserveResourceOwners`: a pending pod the scheduler
/// could not place owns the reservation itself; otherwise the pod's
/// controller does (any pod of the workload may take it).
pub fn reservation_owners(pod: &Pod) -> Vec<ReservationOwner> {
    let status = pod.status.as_ref();
    let unscheduled = status.and_then(|s| s.phase.as_deref()) == Some("Pending")
        && status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|conditions| conditions.iter().find(|c| c.type_ == "PodScheduled"))
            .is_some_and(|c| c.status == "False");
    if unscheduled {
        return vec![ReservationOwner {
            object: Some(ObjectReference {
                uid: pod.metadata.uid.clone(),
                kind: Some("Pod".to_string()),
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                ..ObjectReference::default()
            }),
            ..ReservationOwner::default()
        }];
    }
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| {
            vec![ReservationOwner {
                controller: Some(ReservationControllerReference {
                    owner_reference: owner.clone(),
                    namespace: pod.metadata.namespace.clone(),
                }),
                ..ReservationOwner::default()
            }]
        })
        .unwrap_or_default()
}

/// Keeps the replacement off the pod's node: `metadata.name NotIn [node]`
/// added to every required node-affinity term (upstream `appendSkipNodeAffinity`).
fn skip_current_node(template: &mut PodTemplateSpec, node: &str) {
    let Some(spec) = template.spec.as_mut() else {
        return;
    };
    let requirement = NodeSelectorRequirement {
        key: "metadata.name".to_string(),
        operator: "NotIn".to_string(),
        values: Some(vec![node.to_string()]),
    };
    let required = spec
        .affinity
        .get_or_insert_with(Affinity::default)
        .node_affinity
        .get_or_insert_with(NodeAffinity::default)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default);
    if required.node_selector_terms.is_empty() {
        required.node_selector_terms.push(NodeSelectorTerm {
            match_fields: Some(vec![requirement]),
            ..NodeSelectorTerm::default()
        });
    } else {
        for term in &mut required.node_selector_terms {
            term.match_fields
                .get_or_insert_with(Vec::new)
                .push(requirement.clone());
        }
    }
}

/// The job's reservation options completed from the pod, as upstream
/// completes them: named after the job's uid, the pod's template, owners
/// matching the workload, allocate once, the pod's node excluded, the
/// creator and order labels, the job's TTL when the template sets none.
pub fn reservation_options(
    job: &PodMigrationJob,
    pod: &Pod,
    now: Timestamp,
) -> Result<PodMigrateReservationOptions, TemplateError> {
    let job_uid = job
        .metadata
        .uid
        .clone()
        .filter(|uid| !uid.is_empty())
        .ok_or(TemplateError::MissingJobUid)?;
    let pod_spec = pod.spec.clone().ok_or(TemplateError::MissingPodSpec)?;
    let mut options = job.spec.reservation_options.clone().unwrap_or_default();
    let template = options
        .template
        .get_or_insert_with(ReservationTemplateSpec::default);
    let metadata = template.metadata.get_or_insert_with(ObjectMeta::default);
    if metadata.name.as_deref().unwrap_or_default().is_empty() {
        metadata.name = Some(job_uid);
    }
    let labels = metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(LABEL_CREATED_BY.to_string(), CREATOR.to_string());
    labels.insert(
        LABEL_RESERVATION_ORDER.to_string(),
        now.as_millisecond().to_string(),
    );
    let spec = template.spec.get_or_insert_with(|| ReservationSpec {
        template: PodTemplateSpec::default(),
        owners: Vec::new(),
        ttl: None,
        expires: None,
        pre_allocation: None,
        allocate_once: None,
        allocate_policy: None,
        unschedulable: None,
        taints: None,
        pre_allocation_policy: None,
    });
    if spec.template.spec.is_none() {
        spec.template = PodTemplateSpec {
            metadata: Some(template_metadata(pod)),
            spec: Some(pod_spec),
        };
    }
    if spec.owners.is_empty() {
        spec.owners = reservation_owners(pod);
    }
    // A migration's reservation is not reused once consumed.
    spec.allocate_once = Some(true);
    if let Some(pod_spec) = spec.template.spec.as_mut() {
        pod_spec.node_name = None;
    }
    if spec.ttl.is_none()
        && spec.expires.is_none()
        && let Some(ttl) = job.spec.ttl
        && ttl.as_nanos() > 0
    {
        spec.ttl = Some(ttl);
    }
    if let Some(node) = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|node| !node.is_empty())
    {
        skip_current_node(&mut spec.template, node);
    }
    Ok(options)
}

/// The Reservation object of completed options.
pub fn reservation_from_options(options: &PodMigrateReservationOptions) -> Option<Reservation> {
    let template = options.template.as_ref()?;
    let spec = template.spec.clone()?;
    let mut reservation = Reservation::new(
        template
            .metadata
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .unwrap_or_default(),
        spec,
    );
    if let Some(metadata) = &template.metadata {
        reservation.metadata.labels = metadata.labels.clone();
        reservation.metadata.annotations = metadata.annotations.clone();
    }
    Some(reservation)
}

/// A reference to a created Reservation, as upstream writes it into the job
/// (its `apiVersion` is the bare version).
pub fn reservation_ref(reservation: &Reservation) -> ObjectReference {
    ObjectReference {
        kind: Some("Reservation".to_string()),
        api_version: Some("v1alpha1".to_string()),
        name: reservation.metadata.name.clone(),
        uid: reservation.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

fn find_condition<'a>(
    reservation: &'a Reservation,
    type_: &ReservationConditionType,
    reason: Option<&ReservationReason>,
) -> Option<&'a ReservationCondition> {
    reservation
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| {
            c.type_.as_ref() == Some(type_) && reason.is_none_or(|r| c.reason.as_ref() == Some(r))
        })
}

/// The scheduler's `Scheduled`/`Unschedulable` condition, if any.
pub fn unschedulable_condition(reservation: &Reservation) -> Option<&ReservationCondition> {
    find_condition(
        reservation,
        &ReservationConditionType::Scheduled,
        Some(&ReservationReason::Unschedulable),
    )
}

/// Upstream `IsReservationPending`: no phase, or `Pending`.
pub fn is_pending(reservation: &Reservation) -> bool {
    reservation.phase() == ReservationPhase::Pending
}

/// Upstream `IsReservationScheduled`: a node and a true `Scheduled` condition.
pub fn is_scheduled(reservation: &Reservation) -> bool {
    reservation.node_name().is_some()
        && find_condition(
            reservation,
            &ReservationConditionType::Scheduled,
            Some(&ReservationReason::Scheduled),
        )
        .is_some_and(|c| c.status == Some(ConditionStatus::True))
}

/// Upstream `IsReservationExpired`: `Failed` with a `Ready`/`Expired` condition.
pub fn is_expired(reservation: &Reservation) -> bool {
    reservation.phase() == ReservationPhase::Failed
        && find_condition(
            reservation,
            &ReservationConditionType::Ready,
            Some(&ReservationReason::Expired),
        )
        .is_some()
}

/// Upstream `IsReservationSucceeded`.
pub fn is_succeeded(reservation: &Reservation) -> bool {
    reservation.phase() == ReservationPhase::Succeeded
}

/// The pod that took the reservation (its first current owner).
pub fn bound_pod(reservation: &Reservation) -> Option<&ObjectReference> {
    reservation
        .status
        .as_ref()
        .and_then(|status| status.current_owners.as_deref())
        .and_then(|owners| owners.first())
}

/// Upstream `IsMigratePendingPod`: the reservation is owned by one object
/// (the pending pod itself), not by a controller or selector.
pub fn migrates_pending_pod(reservation: &Reservation) -> bool {
    reservation.spec.owners.iter().any(|owner| {
        owner.object.is_some() && owner.controller.is_none() && owner.label_selector.is_none()
    })
}
