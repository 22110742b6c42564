//! Reservation lifecycle decisions, kept pure (the clock is an argument):
//! the status a placed reservation gets, expiry, allocate-once completion,
//! owner bookkeeping and garbage collection. The API writes that carry them
//! out live in [`crate::reservation_controller`].

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use apis::extension::duration::GoDuration;
use apis::extension::reservation::{
    ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE, get_reservation_allocated,
};
use apis::scheduling::v1alpha1::{
    ConditionStatus, DEFAULT_RESERVATION_TTL, Reservation, ReservationCondition,
    ReservationConditionType, ReservationPhase, ReservationReason, ReservationStatus,
};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Deserialize;

use crate::cache::PodInfo;
use crate::resources::{InvalidAmount, Resources, exact_resources, pod_requests_checked, shown};

/// Where a placed reservation's allocatable is read from.
pub const STATUS_ALLOCATABLE: &str = "status.allocatable";

/// How long an expired or succeeded reservation is kept (upstream default).
pub const DEFAULT_GC_DURATION: Duration = Duration::from_secs(86_400);
/// How often ended reservations are checked for collection (upstream default).
pub const DEFAULT_GC_INTERVAL: Duration = Duration::from_secs(60);

/// `scheduling.koordinator.sh/reservation-resize-allocatable` value.
#[derive(Debug, Default, Deserialize)]
struct ResizeAllocatable {
    #[serde(default)]
    resources: BTreeMap<String, Quantity>,
}

fn time(at: SystemTime) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::try_from(at).ok().map(Time)
}

/// When the reservation stops being usable: the earlier of `expires` and
/// creation + `ttl` (the API server's 24h default when absent); never with
/// `ttl: 0`.
pub fn expiry_time(reservation: &Reservation) -> Option<SystemTime> {
    let spec = &reservation.spec;
    let ttl = spec
        .ttl
        .or_else(|| GoDuration::parse(DEFAULT_RESERVATION_TTL).ok())
        .and_then(|d| d.to_std());
    if ttl.is_some_and(|d| d.is_zero()) {
        return None;
    }
    let by_ttl = reservation
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|created| Some(SystemTime::from(created.0) + ttl?));
    let by_expires = spec.expires.as_ref().map(|at| SystemTime::from(at.0));
    match (by_ttl, by_expires) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether an unfinished reservation is past its expiry at `now`.
pub fn needs_expiration(reservation: &Reservation, now: SystemTime) -> bool {
    !reservation.is_terminated() && expiry_time(reservation).is_some_and(|at| at < now)
}

/// Where the resize-allocatable annotation is read from.
pub const RESIZE_ALLOCATABLE: &str =
    "metadata.annotations[scheduling.koordinator.sh/reservation-resize-allocatable]";

/// Where a reservation's template requests are read from.
pub const TEMPLATE_REQUESTS: &str = "spec.template";

/// What the reservation holds once placed: its template's requests, with the
/// resize-allocatable annotation's resources overriding them. Every amount
/// exact (not negative, not beyond 64 bits), and the annotation, when
/// present, a resource list; otherwise the first that is not: such a
/// reservation is not placed.
pub fn reservation_allocatable(reservation: &Reservation) -> Result<Resources, InvalidAmount> {
    let pod = Pod {
        spec: reservation.spec.template.spec.clone(),
        ..Default::default()
    };
    let (mut requests, refused) = pod_requests_checked(&pod);
    if let Some(reason) = refused {
        return Err(InvalidAmount::new(
            TEMPLATE_REQUESTS,
            TEMPLATE_REQUESTS.to_string(),
            reason,
        ));
    }
    let resize = reservation
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE));
    if let Some(text) = resize {
        let resize: ResizeAllocatable = serde_json::from_str(text).map_err(|err| {
            InvalidAmount::new(
                RESIZE_ALLOCATABLE,
                RESIZE_ALLOCATABLE.to_string(),
                format!("{:?} is not a resource list: {err}", shown(text)),
            )
        })?;
        for (name, amount) in exact_resources(&resize.resources, RESIZE_ALLOCATABLE)?.iter() {
            requests.set(name, amount);
        }
    }
    Ok(requests)
}

fn condition(
    type_: ReservationConditionType,
    status: ConditionStatus,
    reason: ReservationReason,
    now: SystemTime,
) -> ReservationCondition {
    ReservationCondition {
        type_: Some(type_),
        status: Some(status),
        reason: Some(reason),
        message: None,
        last_probe_time: time(now),
        last_transition_time: time(now),
    }
}

/// The status of a reservation just placed on `node`: Available, with its
/// allocatable (see [`reservation_allocatable`]) and fresh Scheduled /
/// Ready conditions.
pub fn available_status(
    reservation: &Reservation,
    node: &str,
    allocatable: &Resources,
    now: SystemTime,
) -> ReservationStatus {
    ReservationStatus {
        phase: Some(ReservationPhase::Available),
        node_name: Some(node.to_string()),
        allocatable: Some(allocatable.to_list()),
        conditions: Some(vec![
            condition(
                ReservationConditionType::Scheduled,
                ConditionStatus::True,
                ReservationReason::Scheduled,
                now,
            ),
            condition(
                ReservationConditionType::Ready,
                ConditionStatus::True,
                ReservationReason::Available,
                now,
            ),
        ]),
        ..reservation.status.clone().unwrap_or_default()
    }
}

/// The status recording a failed placement attempt (the phase stays, so it
/// is retried); `None` when the same message is already recorded.
pub fn unschedulable_status(
    reservation: &Reservation,
    message: &str,
    now: SystemTime,
) -> Option<ReservationStatus> {
    let mut status = reservation.status.clone().unwrap_or_default();
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions
        .iter_mut()
        .rfind(|c| c.type_ == Some(ReservationConditionType::Scheduled))
    {
        None => {
            let mut fresh = condition(
                ReservationConditionType::Scheduled,
                ConditionStatus::False,
                ReservationReason::Unschedulable,
                now,
            );
            fresh.message = Some(message.to_string());
            conditions.push(fresh);
        }
        // Placed after all: nothing to record.
        Some(existing) if existing.status == Some(ConditionStatus::True) => return None,
        Some(existing) => {
            if existing.reason == Some(ReservationReason::Unschedulable)
                && existing.message.as_deref() == Some(message)
            {
                return None;
            }
            existing.reason = Some(ReservationReason::Unschedulable);
            existing.message = Some(message.to_string());
            existing.last_probe_time = time(now);
        }
    }
    Some(status)
}

/// Sets `phase` and a not-ready condition with `reason`; a ready condition
/// turning false gets a new transition time.
fn ended_status(
    reservation: &Reservation,
    phase: ReservationPhase,
    reason: ReservationReason,
    now: SystemTime,
) -> ReservationStatus {
    let mut status = reservation.status.clone().unwrap_or_default();
    status.phase = Some(phase);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    match conditions
        .iter_mut()
        .rfind(|c| c.type_ == Some(ReservationConditionType::Ready))
    {
        None => conditions.push(condition(
            ReservationConditionType::Ready,
            ConditionStatus::False,
            reason,
            now,
        )),
        Some(ready) => {
            if ready.status != Some(ConditionStatus::False) {
                ready.last_transition_time = time(now);
            }
            ready.status = Some(ConditionStatus::False);
            ready.reason = Some(reason);
            ready.last_probe_time = time(now);
        }
    }
    status
}

/// Failed with the Ready condition false for `Expired`.
pub fn expired_status(reservation: &Reservation, now: SystemTime) -> ReservationStatus {
    ended_status(
        reservation,
        ReservationPhase::Failed,
        ReservationReason::Expired,
        now,
    )
}

/// Succeeded (an allocate-once reservation was used).
pub fn succeeded_status(reservation: &Reservation, now: SystemTime) -> ReservationStatus {
    ended_status(
        reservation,
        ReservationPhase::Succeeded,
        ReservationReason::Succeeded,
        now,
    )
}

/// Whether `pod` was allocated from `reservation` (by uid; by name when the
/// reservation has no uid).
pub fn is_allocated_from(pod: &PodInfo, reservation: &Reservation) -> bool {
    let Ok(Some(allocated)) = get_reservation_allocated(pod.annotations()) else {
        return false;
    };
    match reservation
        .metadata
        .uid
        .as_deref()
        .filter(|u| !u.is_empty())
    {
        Some(uid) => allocated.uid == uid,
        None => reservation.metadata.name.as_deref() == Some(allocated.name.as_str()),
    }
}

/// `currentOwners` and `allocated` from the pods on the reservation's node
/// that were allocated from it; `None` when the status already says so, or
/// when its `status.allocatable` cannot be read (the scheduler ignores such
/// a reservation, and its status is left as it is). An allocate-once
/// reservation whose owners changed becomes Succeeded.
pub fn owners_status<'a>(
    reservation: &Reservation,
    pods_on_node: impl IntoIterator<Item = &'a PodInfo>,
    now: SystemTime,
) -> Option<ReservationStatus> {
    let current = reservation.status.clone().unwrap_or_default();
    let allocatable = match current.allocatable.as_ref() {
        Some(list) => exact_resources(list, STATUS_ALLOCATABLE).ok()?,
        None => Resources::new(),
    };
    let mut owners = Vec::new();
    let mut allocated = Resources::new();
    for pod in pods_on_node {
        if !is_allocated_from(pod, reservation) {
            continue;
        }
        owners.push(ObjectReference {
            namespace: Some(pod.namespace.clone()),
            name: Some(pod.name.clone()),
            uid: Some(pod.uid.clone()),
            ..Default::default()
        });
        allocated.add(&pod.requests);
    }
    owners.sort_by(|a, b| a.uid.cmp(&b.uid));
    // Only what the reservation holds counts as allocated from it.
    let mut masked = Resources::new();
    for (name, amount) in allocated.iter() {
        if allocatable.get(name) != 0 {
            masked.set(name, amount);
        }
    }
    let allocated = masked.to_list();
    let mut recorded_owners = current.current_owners.clone().unwrap_or_default();
    recorded_owners.sort_by(|a, b| a.uid.cmp(&b.uid));
    // A recorded figure that cannot be read differs: it is rewritten.
    let recorded_allocated = match current.allocated.as_ref() {
        Some(list) => exact_resources(list, "status.allocated")
            .ok()
            .map(|r| r.to_list()),
        None => Some(BTreeMap::new()),
    };
    if recorded_owners == owners && recorded_allocated.as_ref() == Some(&allocated) {
        return None;
    }
    let mut updated = reservation.clone();
    let status = updated.status.get_or_insert_with(Default::default);
    status.current_owners = (!owners.is_empty()).then_some(owners);
    status.allocated = (!allocated.is_empty()).then_some(allocated);
    if reservation.spec.allocate_once_or_default() {
        return Some(succeeded_status(&updated, now));
    }
    updated.status
}

/// Failed because its Ready condition says Expired.
pub fn is_expired(reservation: &Reservation) -> bool {
    reservation.phase() == ReservationPhase::Failed
        && reservation
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == Some(ReservationConditionType::Ready))
            })
            .is_some_and(|c| {
                c.status == Some(ConditionStatus::False)
                    && c.reason == Some(ReservationReason::Expired)
            })
}

/// Whether an expired (since its transition) or succeeded (since its last
/// probe) reservation has been ended longer than `gc_duration`.
pub fn needs_cleanup(reservation: &Reservation, now: SystemTime, gc_duration: Duration) -> bool {
    let (reason, use_probe) = if is_expired(reservation) {
        (ReservationReason::Expired, false)
    } else if reservation.phase() == ReservationPhase::Succeeded {
        (ReservationReason::Succeeded, true)
    } else {
        return false;
    };
    let conditions = reservation
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let Some(ended) = conditions
        .iter()
        .find(|c| c.reason.as_ref() == Some(&reason))
    else {
        return false;
    };
    let at = if use_probe {
        &ended.last_probe_time
    } else {
        &ended.last_transition_time
    };
    at.as_ref()
        .is_some_and(|t| SystemTime::from(t.0) + gc_duration < now)
}

/// What to do with one reservation.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Keep,
    UpdateStatus(ReservationStatus),
    Delete,
}

/// The lifecycle step for a reservation at `now`. `node_exists` says whether
/// its node is known; `gc_duration` is `Some` on garbage-collection passes.
/// Pending reservations are placed by the scheduler, not here.
pub fn decide<'a>(
    reservation: &Reservation,
    node_exists: bool,
    pods_on_node: impl IntoIterator<Item = &'a PodInfo>,
    now: SystemTime,
    gc_duration: Option<Duration>,
) -> Decision {
    let ended = is_expired(reservation) || reservation.phase() == ReservationPhase::Succeeded;
    if ended {
        let node_gone = reservation.node_name().is_some() && !node_exists;
        return match gc_duration {
            Some(gc) if node_gone || needs_cleanup(reservation, now, gc) => Decision::Delete,
            _ => Decision::Keep,
        };
    }
    if reservation.is_terminated() {
        return Decision::Keep;
    }
    if needs_expiration(reservation, now) {
        return Decision::UpdateStatus(expired_status(reservation, now));
    }
    if reservation.node_name().is_none() {
        return Decision::Keep;
    }
    if !node_exists {
        return Decision::UpdateStatus(expired_status(reservation, now));
    }
    match owners_status(reservation, pods_on_node, now) {
        Some(status) => Decision::UpdateStatus(status),
        None => Decision::Keep,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::testutil::{self, ReservationSpec, rfc3339, t0};

    fn reservation(spec_extra: Value, status: Value) -> Reservation {
        testutil::reservation(ReservationSpec {
            template: testutil::reservation_template(&[("cpu", "2"), ("memory", "1Gi")]),
            spec_extra,
            status,
            ..Default::default()
        })
    }

    fn available() -> Value {
        testutil::available_on("n1", &[("cpu", "2"), ("memory", "1Gi")])
    }

    fn owner_pod(name: &str, uid: &str, reservation_uid: &str) -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": uid,
                         "annotations": {"scheduling.koordinator.sh/reservation-allocated":
                            json!({"name": "r1", "uid": reservation_uid}).to_string()}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"}}}]}
        }))
        .unwrap();
        PodInfo::new(Arc::new(pod))
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn expiry_follows_ttl_expires_and_ttl_zero() {
        let r = reservation(json!({}), json!({}));
        assert_eq!(expiry_time(&r), Some(t0() + secs(3600)));
        assert!(!needs_expiration(&r, t0() + secs(3600)));
        assert!(needs_expiration(&r, t0() + secs(3601)));
        // The earlier of expires and ttl.
        let expires = rfc3339(t0() + secs(60));
        let r = reservation(json!({"expires": expires, "ttl": "10h"}), json!({}));
        assert_eq!(expiry_time(&r), Some(t0() + secs(60)));
        let r = reservation(json!({"ttl": "0s"}), json!({}));
        assert_eq!(expiry_time(&r), None);
        // Without ttl the API server's 24h default applies.
        let mut r = reservation(json!({}), json!({}));
        r.spec.ttl = None;
        assert_eq!(expiry_time(&r), Some(t0() + secs(86_400)));
        // Ended reservations are not expired again.
        let r = reservation(json!({}), json!({"phase": "Succeeded"}));
        assert!(!needs_expiration(&r, t0() + secs(7200)));
    }

    #[test]
    fn placed_reservation_is_available_with_conditions_and_allocatable() {
        let mut r = reservation(json!({}), json!({}));
        r.metadata.annotations = Some(BTreeMap::from([(
            ANNOTATION_RESERVATION_RESIZE_ALLOCATABLE.to_string(),
            r#"{"resources":{"cpu":"3"}}"#.to_string(),
        )]));
        let status = available_status(&r, "n1", &reservation_allocatable(&r).unwrap(), t0());
        let value = serde_json::to_value(&status).unwrap();
        let at = rfc3339(t0());
        assert_eq!(
            value,
            json!({
                "phase": "Available",
                "nodeName": "n1",
                "allocatable": {"cpu": "3", "memory": "1073741824"},
                "conditions": [
                    {"type": "Scheduled", "status": "True", "reason": "Scheduled", "lastProbeTime": at, "lastTransitionTime": at},
                    {"type": "Ready", "status": "True", "reason": "Available", "lastProbeTime": at, "lastTransitionTime": at},
                ]
            })
        );
    }

    #[test]
    fn unschedulable_is_recorded_once_per_message() {
        let r = reservation(json!({}), json!({}));
        let status = unschedulable_status(&r, "0/2 nodes fit", t0()).unwrap();
        let scheduled = &status.conditions.as_ref().unwrap()[0];
        assert_eq!(scheduled.status, Some(ConditionStatus::False));
        assert_eq!(scheduled.reason, Some(ReservationReason::Unschedulable));
        assert_eq!(status.phase, None);
        let mut again = r.clone();
        again.status = Some(status);
        assert_eq!(unschedulable_status(&again, "0/2 nodes fit", t0()), None);
        let changed = unschedulable_status(&again, "0/3 nodes fit", t0() + secs(5)).unwrap();
        assert_eq!(
            changed.conditions.unwrap()[0].message.as_deref(),
            Some("0/3 nodes fit")
        );
    }

    #[test]
    fn expiry_turns_ready_false_and_fails_the_reservation() {
        let r = reservation(json!({}), json!({}));
        let mut placed = r.clone();
        placed.status = Some(available_status(
            &r,
            "n1",
            &reservation_allocatable(&r).unwrap(),
            t0(),
        ));
        let later = t0() + secs(3601);
        let Decision::UpdateStatus(status) = decide(&placed, true, [], later, None) else {
            panic!("expected an expiry");
        };
        assert_eq!(status.phase, Some(ReservationPhase::Failed));
        let ready = status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == Some(ReservationConditionType::Ready))
            .unwrap();
        assert_eq!(ready.status, Some(ConditionStatus::False));
        assert_eq!(ready.reason, Some(ReservationReason::Expired));
        assert_eq!(ready.last_transition_time, time(later));
        let mut expired = placed.clone();
        expired.status = Some(status);
        assert!(is_expired(&expired));
        // A reservation whose node disappeared expires too.
        let Decision::UpdateStatus(status) = decide(&placed, false, [], t0(), None) else {
            panic!("expected an expiry for the missing node");
        };
        assert_eq!(status.phase, Some(ReservationPhase::Failed));
    }

    #[test]
    fn owners_are_recorded_and_allocate_once_succeeds() {
        let r = reservation(json!({}), available());
        let owner = owner_pod("owner", "uid-b", "r1-uid");
        let other = owner_pod("other", "uid-a", "another-uid");
        let Decision::UpdateStatus(status) = decide(&r, true, [&owner, &other], t0(), None) else {
            panic!("expected an owner update");
        };
        assert_eq!(status.phase, Some(ReservationPhase::Succeeded));
        assert_eq!(
            serde_json::to_value(&status.current_owners).unwrap(),
            json!([{"namespace": "default", "name": "owner", "uid": "uid-b"}])
        );
        // Masked to what the reservation holds (no GPU), and not more than the pod asked.
        assert_eq!(
            serde_json::to_value(&status.allocated).unwrap(),
            json!({"cpu": "1", "memory": "2147483648"})
        );
        // Allocate-many: owners recorded, phase kept; no change → Keep.
        let r = reservation(json!({"allocateOnce": false}), available());
        let Decision::UpdateStatus(status) = decide(&r, true, [&owner], t0(), None) else {
            panic!("expected an owner update");
        };
        assert_eq!(status.phase, Some(ReservationPhase::Available));
        let mut recorded = r.clone();
        recorded.status = Some(status);
        assert_eq!(
            decide(&recorded, true, [&owner], t0(), None),
            Decision::Keep
        );
        assert_eq!(decide(&recorded, true, [], t0(), None).clone(), {
            let mut expected = recorded.status.clone().unwrap();
            expected.current_owners = None;
            expected.allocated = None;
            Decision::UpdateStatus(expected)
        });
    }

    #[test]
    fn ended_reservations_are_collected_after_the_gc_duration() {
        let gc = Some(DEFAULT_GC_DURATION);
        let r = reservation(json!({}), available());
        let expired_at = t0() + secs(3601);
        let mut expired = r.clone();
        expired.status = Some(expired_status(&r, expired_at));
        assert_eq!(
            decide(&expired, true, [], expired_at + secs(60), gc),
            Decision::Keep
        );
        // Not on a pass without GC.
        let late = expired_at + DEFAULT_GC_DURATION + secs(1);
        assert_eq!(decide(&expired, true, [], late, None), Decision::Keep);
        assert_eq!(decide(&expired, true, [], late, gc), Decision::Delete);
        // Node gone: collected right away.
        assert_eq!(
            decide(&expired, false, [], expired_at, gc),
            Decision::Delete
        );

        let mut succeeded = r.clone();
        succeeded.status = Some(succeeded_status(&r, t0()));
        assert_eq!(
            decide(&succeeded, true, [], t0() + secs(10), gc),
            Decision::Keep
        );
        assert_eq!(
            decide(
                &succeeded,
                true,
                [],
                t0() + DEFAULT_GC_DURATION + secs(1),
                gc
            ),
            Decision::Delete
        );
        // Failed for another reason: left alone.
        let failed = reservation(json!({}), json!({"phase": "Failed"}));
        assert_eq!(decide(&failed, true, [], late, gc), Decision::Keep);
    }
}
