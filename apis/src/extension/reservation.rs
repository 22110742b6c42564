//! Reservation keys: which reservation a pod consumed, how a pod selects
//! reservations, restricted and exact-match options, and the internal
//! reserve-pod annotations the scheduler uses.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, Toleration};
use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, null_as_default, parse_json_annotation, parse_json_annotation_non_empty,
    set_json_annotation,
};
use super::error::ExtensionError;
use super::quantity::QuantityValue;
use super::resource::ResourceList;

/// Pod label: `true` schedules the pod ignoring reservations, and no
/// reservation counts it as an owner.
pub const LABEL_RESERVATION_IGNORED: &str = "scheduling.koordinator.sh/reservation-ignored";
/// Reservation label: `true` requires pre-allocating from a running pod.
pub const LABEL_PRE_ALLOCATION_REQUIRED: &str = "scheduling.koordinator.sh/pre-allocation-required";
/// Reservation label: preference order; lower first, 0 falls back to scoring.
pub const LABEL_RESERVATION_ORDER: &str = "scheduling.koordinator.sh/reservation-order";
/// Pod annotation: the reservation the pod was allocated from ([`ReservationAllocated`]).
pub const ANNOTATION_RESERVATION_ALLOCATED: &str =
    "scheduling.koordinator.sh/reservation-allocated";
/// Pod annotation: which reservations the pod may use ([`ReservationAffinity`]).
pub const ANNOTATION_RESERVATION_AFFINITY: &str = "scheduling.koordinator.sh/reservation-affinity";
/// Pod annotation: [`ReservationRestrictedOptions`].
pub const ANNOTATION_RESERVATION_RESTRICTED_OPTIONS: &str =
    "scheduling.koordinator.sh/reservation-restricted-options";
/// Pod annotation: [`ExactMatchReservationSpec`].
pub const ANNOTATION_EXACT_MATCH_RESERVATION_SPEC: &str =
    "scheduling.koordinator.sh/exact-match-reservation";

/// Internal: marks the placeholder pod that stands for a reservation
/// (upstream `pkg/util/reservation`).
pub const ANNOTATION_RESERVE_POD: &str = "scheduling.koordinator.sh/reserve-pod";
/// Internal: the reservation a reserve pod stands for.
pub const ANNOTATION_RESERVATION_NAME: &str = "scheduling.koordinator.sh/reservation-name";
/// Internal: the node the reservation asks for.
pub const ANNOTATION_RESERVATION_NODE: &str = "scheduling.koordinator.sh/reservation-node";
/// Internal: the reservation's allocatable is to be resized.
pub const ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE: &str =
    "scheduling.koordinator.sh/reservation-resize-allocatable";
/// Internal: the reserve pod pre-allocates from running pods.
pub const ANNOTATION_IS_PRE_ALLOCATION: &str = "scheduling.koordinator.sh/is-pre-allocation";

/// Value of `scheduling.koordinator.sh/reservation-allocated`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationAllocated {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

/// Value of `scheduling.koordinator.sh/reservation-affinity`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReservationAffinity {
    /// A reservation by name; the other fields are then ignored.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Reservations the pod must match (terms ORed).
    #[serde(
        rename = "requiredDuringSchedulingIgnoredDuringExecution",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub required_during_scheduling_ignored_during_execution: Option<ReservationAffinitySelector>,
    /// Labels a reservation must carry.
    #[serde(
        rename = "reservationSelector",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub reservation_selector: BTreeMap<String, String>,
    /// Taints of reservations the pod tolerates.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tolerations: Vec<Toleration>,
}

/// Reservation selector terms, in the shape of node selector terms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReservationAffinitySelector {
    #[serde(
        rename = "reservationSelectorTerms",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub reservation_selector_terms: Vec<NodeSelectorTerm>,
}

/// Value of `scheduling.koordinator.sh/reservation-restricted-options`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationRestrictedOptions {
    /// Resources the pod may take only up to the reserved amount.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resources: Vec<String>,
}

/// Value of `scheduling.koordinator.sh/exact-match-reservation`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactMatchReservationSpec {
    /// Resources whose request must equal the reservation's allocatable.
    #[serde(
        rename = "resourceNames",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_names: Vec<String>,
}

/// The pod is labelled `reservation-ignored=true`.
pub fn is_reservation_ignored(pod_labels: &StringMap) -> bool {
    pod_labels
        .get(LABEL_RESERVATION_IGNORED)
        .is_some_and(|v| v == "true")
}

/// The reservation is labelled `pre-allocation-required=true`.
pub fn is_pre_allocation_required(reservation_labels: &StringMap) -> bool {
    reservation_labels
        .get(LABEL_PRE_ALLOCATION_REQUIRED)
        .is_some_and(|v| v == "true")
}

pub fn get_reservation_allocated(
    annotations: &StringMap,
) -> Result<Option<ReservationAllocated>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_RESERVATION_ALLOCATED)
}

pub fn set_reservation_allocated(
    annotations: &mut StringMap,
    allocated: &ReservationAllocated,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_RESERVATION_ALLOCATED, allocated)
}

/// Removes the reservation-allocated annotation if it points at the
/// reservation with `reservation_uid`; returns whether it was removed.
pub fn remove_reservation_allocated(
    annotations: &mut StringMap,
    reservation_uid: &str,
) -> Result<bool, ExtensionError> {
    match get_reservation_allocated(annotations)? {
        Some(allocated) if allocated.uid == reservation_uid => {
            annotations.remove(ANNOTATION_RESERVATION_ALLOCATED);
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The pod's reservation affinity. Present but empty reads as an empty
/// affinity (the pod must use some reservation), as upstream.
pub fn get_reservation_affinity(
    annotations: &StringMap,
) -> Result<Option<ReservationAffinity>, ExtensionError> {
    match annotations.get(ANNOTATION_RESERVATION_AFFINITY) {
        Some(text) if text.is_empty() => Ok(Some(ReservationAffinity::default())),
        _ => parse_json_annotation(annotations, ANNOTATION_RESERVATION_AFFINITY),
    }
}

pub fn set_reservation_affinity(
    annotations: &mut StringMap,
    affinity: &ReservationAffinity,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_RESERVATION_AFFINITY, affinity)
}

/// Absent or empty → `Ok(None)` (upstream: empty options).
pub fn get_reservation_restricted_options(
    annotations: &StringMap,
) -> Result<Option<ReservationRestrictedOptions>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_RESERVATION_RESTRICTED_OPTIONS)
}

pub fn set_reservation_restricted_options(
    annotations: &mut StringMap,
    options: &ReservationRestrictedOptions,
) -> Result<(), ExtensionError> {
    set_json_annotation(
        annotations,
        ANNOTATION_RESERVATION_RESTRICTED_OPTIONS,
        options,
    )
}

/// Absent or empty → `Ok(None)`.
pub fn get_exact_match_reservation_spec(
    annotations: &StringMap,
) -> Result<Option<ExactMatchReservationSpec>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_EXACT_MATCH_RESERVATION_SPEC)
}

pub fn set_exact_match_reservation_spec(
    annotations: &mut StringMap,
    spec: &ExactMatchReservationSpec,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_EXACT_MATCH_RESERVATION_SPEC, spec)
}

/// Whether the pod's requests equal the reservation's allocatable for every
/// resource the spec names. Follows upstream exactly, including its early
/// `true` when it meets a named resource that neither side has.
pub fn exact_match_reservation(
    pod_requests: &ResourceList,
    reservation_allocatable: &ResourceList,
    spec: Option<&ExactMatchReservationSpec>,
) -> bool {
    let Some(spec) = spec else {
        return true;
    };
    for name in &spec.resource_names {
        match (reservation_allocatable.get(name), pod_requests.get(name)) {
            (None, None) => return true,
            (Some(allocatable), Some(request)) => {
                let equal = match (QuantityValue::of(allocatable), QuantityValue::of(request)) {
                    (Ok(a), Ok(r)) => a == r,
                    // Unparsable on either side: only identical text matches.
                    _ => allocatable.0 == request.0,
                };
                if !equal {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}
