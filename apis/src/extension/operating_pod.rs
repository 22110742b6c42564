//! Pods operating as reservations: the operating-mode label and the owner
//! annotations of a reservation-mode pod.

use k8s_openapi::api::core::v1::ObjectReference;

use super::annotations::{StringMap, parse_json_annotation_non_empty, set_json_annotation};
use super::error::ExtensionError;
use crate::scheduling::v1alpha1::ReservationOwner;
use crate::wire_enum::wire_enum;

/// Pod label: [`PodOperatingMode`].
pub const LABEL_POD_OPERATING_MODE: &str = "scheduling.koordinator.sh/operating-mode";
/// Pod annotation: JSON list of [`ReservationOwner`] allowed to use the reserved resources.
pub const ANNOTATION_RESERVATION_OWNERS: &str = "scheduling.koordinator.sh/reservation-owners";
/// Pod annotation: the object currently using the reserved resources.
pub const ANNOTATION_RESERVATION_CURRENT_OWNER: &str =
    "scheduling.koordinator.sh/reservation-current-owner";

wire_enum! {
    pub enum PodOperatingMode closed {
        /// An ordinary pod, run by kubelet once bound.
        Runnable = "Runnable",
        /// A scheduling and reservation unit, never run.
        Reservation = "Reservation",
    }
}

/// The pod is labelled `operating-mode=Reservation`.
pub fn is_reservation_operating_mode(pod_labels: &StringMap) -> bool {
    pod_labels
        .get(LABEL_POD_OPERATING_MODE)
        .is_some_and(|v| v == PodOperatingMode::Reservation.as_str())
}

/// Absent or empty → `Ok(None)`.
pub fn get_reservation_owners(
    annotations: &StringMap,
) -> Result<Option<Vec<ReservationOwner>>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_RESERVATION_OWNERS)
}

pub fn set_reservation_owners(
    annotations: &mut StringMap,
    owners: &[ReservationOwner],
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_RESERVATION_OWNERS, owners)
}

/// Absent or empty → `Ok(None)`.
pub fn get_reservation_current_owner(
    annotations: &StringMap,
) -> Result<Option<ObjectReference>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_RESERVATION_CURRENT_OWNER)
}

pub fn set_reservation_current_owner(
    annotations: &mut StringMap,
    owner: &ObjectReference,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_RESERVATION_CURRENT_OWNER, owner)
}

pub fn remove_reservation_current_owner(annotations: &mut StringMap) {
    annotations.remove(ANNOTATION_RESERVATION_CURRENT_OWNER);
}
