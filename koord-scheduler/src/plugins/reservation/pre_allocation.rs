//! Reservation pre-allocation (`spec.preAllocation: true`), upstream's
//! Default mode with one pod: a reservation may be placed on a node that is
//! full because of a running pod it owns; that pod is then recorded as
//! allocated from the reservation (`reservation-allocated`), so the
//! capacity stays reserved when the pod goes. Pure decisions over the
//! cache; the placement ([`crate::placement::place_reservation_pre_allocating`])
//! runs the plugins with the nominated pods out of the way, and the
//! controller writes the pod's annotation.

use apis::extension::device_share::ANNOTATION_DEVICE_ALLOCATED;
use apis::extension::numa_aware::ANNOTATION_RESOURCE_STATUS;
use apis::extension::reservation::{
    ANNOTATION_RESERVE_POD, get_reservation_affinity, is_pre_allocation_required,
};
use apis::scheduling::v1alpha1::{PreAllocationMode, Reservation, ReservationAllocatePolicy};

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{ReservationInfo, affinity_matches, allocated_from};
use crate::cache::{ClusterCache, PodInfo};
use crate::node_checks;
use crate::resources::Resources;

/// Upstream's reason when the reservation's other settings rule it out.
pub const REASON_UNSUPPORTED: &str =
    "node(s) reservation pre allocation is unsupported with current attributes";
/// Upstream's reason when pre-allocation is required and no pod matches.
pub const REASON_REQUIRED_NO_POD: &str =
    "node(s) no pod match reservation with pre allocation required";
/// Upstream's reason when pods match but none makes room on the node.
pub const REASON_NO_POD_FITS: &str = "node(s) no pod(s) to meet the pre-allocation requirements";

/// How a reservation asks for pre-allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A plain reservation: free capacity only.
    Off,
    /// `spec.preAllocation`; `required` (label
    /// `scheduling.koordinator.sh/pre-allocation-required=true`) allows no
    /// node without a pre-allocated pod.
    On { required: bool },
}

/// The reservation's pre-allocation mode, or why it cannot have one:
/// upstream pre-allocates only for Restricted reservations; the Cluster
/// mode (candidates by `pod.koordinator.sh/is-pre-allocatable`) is not
/// built here and is refused rather than treated as Default.
pub fn mode(reservation: &Reservation) -> Result<Mode, &'static str> {
    if reservation.spec.pre_allocation != Some(true) {
        return Ok(Mode::Off);
    }
    if reservation.spec.allocate_policy != Some(ReservationAllocatePolicy::Restricted) {
        return Err(REASON_UNSUPPORTED);
    }
    let cluster_mode = reservation
        .spec
        .pre_allocation_policy
        .as_ref()
        .and_then(|p| p.mode.as_ref())
        == Some(&PreAllocationMode::Cluster);
    if cluster_mode {
        return Err(REASON_UNSUPPORTED);
    }
    let labels = reservation.metadata.labels.clone().unwrap_or_default();
    Ok(Mode::On {
        required: is_pre_allocation_required(&labels),
    })
}

/// Whether `pod` may be pre-allocated to `reservation` (upstream's Default
/// mode): bound (the API confirmed it, not merely assumed), matched by an
/// owner with a label selector, allocated from no other reservation, not a
/// reserve pod, holding no cpuset or devices, and its own reservation
/// affinity allows this reservation.
pub fn is_candidate(reservation: &ReservationInfo, pod: &PodInfo, cache: &ClusterCache) -> bool {
    if pod.node.is_none() || pod.is_assumed() {
        return false;
    }
    // Already this reservation's (a placement whose status write failed
    // after the pod's was written) stays a candidate, so a retry finds it.
    if allocated_from(pod).is_some_and(|name| name != reservation.name) {
        return false;
    }
    if pod.annotations().contains_key(ANNOTATION_RESERVE_POD) {
        return false;
    }
    // Upstream hands a pre-allocated pod's CPUs and devices over to the
    // reservation; that hand-over is not built here, so such pods are left
    // out rather than have the reservation take their CPUs or devices twice.
    if pod.annotations().contains_key(ANNOTATION_RESOURCE_STATUS)
        || pod.annotations().contains_key(ANNOTATION_DEVICE_ALLOCATED)
    {
        return false;
    }
    let selected_by_a_selector = reservation
        .owner_selectors
        .iter()
        .flatten()
        .any(|selector| selector.matches(pod.labels()));
    if !selected_by_a_selector || !reservation.is_owner(pod) {
        return false;
    }
    match get_reservation_affinity(pod.annotations()) {
        Err(_) => false,
        Ok(None) => !reservation.unschedulable,
        Ok(Some(affinity)) => affinity_matches(&affinity, reservation, cache),
    }
}

/// Whether the reservation, holding `allocatable`, can take `pod` in
/// (Restricted): they share some resource, and for each the reservation
/// holds the pod asks no more than it holds.
pub fn pod_fits_reservation(allocatable: &Resources, pod: &PodInfo) -> bool {
    let mut shared = false;
    for (name, held) in allocatable.iter() {
        let wanted = pod.requests.get(name);
        if held <= 0 || wanted <= 0 {
            continue;
        }
        shared = true;
        if wanted > held {
            return false;
        }
    }
    shared
}

/// How much of the reservation `pod` would fill, 0–100 (the mean over the
/// resources it holds): candidates are tried fullest first, as upstream
/// nominates the pod its reservation scores (most allocated) best.
pub fn fill_percent(allocatable: &Resources, pod: &PodInfo) -> i64 {
    let mut sum = 0i128;
    let mut count = 0i128;
    for (name, held) in allocatable.iter() {
        if held <= 0 {
            continue;
        }
        let used = i128::from(pod.requests.get(name).clamp(0, held));
        sum += used * 100 / i128::from(held);
        count += 1;
    }
    if count == 0 {
        0
    } else {
        i64::try_from(sum / count).unwrap_or(0)
    }
}

/// What pre-allocation decides per node before the plugins run.
#[derive(Debug, Default)]
pub struct Nominations {
    /// Node → the pod whose place the reservation would take there.
    pub pods: BTreeMap<String, Arc<PodInfo>>,
    /// Node → why it is refused (pre-allocation required, no pod makes room).
    pub refused: BTreeMap<String, &'static str>,
}

/// Per node, the candidates fullest first; the first whose place lets
/// `reserve_pod` fit (kube-scheduler's resource fit and pod count, without
/// that pod) is nominated. With `required`, a node without one is refused.
pub fn nominate(
    cache: &ClusterCache,
    reserve_pod: &PodInfo,
    reservation: &Reservation,
    allocatable: &Resources,
    required: bool,
) -> Nominations {
    let mut nominations = Nominations::default();
    let Ok(owned_by) = ReservationInfo::from_crd(reservation) else {
        return nominations;
    };
    for node in cache.nodes_sorted() {
        let mut candidates: Vec<&Arc<PodInfo>> = cache
            .pods_on_node(&node.name)
            .filter(|p| is_candidate(&owned_by, p, cache) && pod_fits_reservation(allocatable, p))
            .collect();
        candidates.sort_by(|a, b| {
            fill_percent(allocatable, b)
                .cmp(&fill_percent(allocatable, a))
                .then_with(|| a.key.cmp(&b.key))
        });
        let had_candidates = !candidates.is_empty();
        let making_room = candidates.into_iter().find(|candidate| {
            node_checks::check_resources_without(reserve_pod, node, Some(candidate)).is_ok()
        });
        match making_room {
            Some(candidate) => {
                nominations
                    .pods
                    .insert(node.name.to_string(), Arc::clone(candidate));
            }
            None if required => {
                let reason = if had_candidates {
                    REASON_NO_POD_FITS
                } else {
                    REASON_REQUIRED_NO_POD
                };
                nominations.refused.insert(node.name.to_string(), reason);
            }
            None => {}
        }
    }
    nominations
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::*;
    use crate::cache::Object;
    use crate::framework::Scheduler;
    use crate::placement::{PASSED_OVER_FOR_PRE_ALLOCATION, place_reservation_pre_allocating};
    use crate::plugins::reservation::allocated_from;
    use crate::testutil::{self, PodSpec, ReservationSpec, t0};

    /// n1 runs `web-1` (an owner, 6 of 8 CPUs), n2 runs `busy` (no owner, 6 of 8).
    fn cluster(extra: Vec<Object>) -> Scheduler {
        let mut s = testutil::scheduler("");
        let mut objects = vec![
            testutil::node("n1", &[("cpu", "8"), ("memory", "16Gi"), ("pods", "10")]),
            testutil::node("n2", &[("cpu", "8"), ("memory", "16Gi"), ("pods", "10")]),
            bound("web-1", "n1", "6", &[("app", "web")], &[]),
            bound("busy", "n2", "6", &[("app", "db")], &[]),
        ];
        objects.extend(extra);
        testutil::load(&mut s, objects);
        s
    }

    fn bound(
        name: &str,
        node: &str,
        cpu: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Object {
        testutil::pod(PodSpec {
            name,
            node: Some(node),
            requests: &[("cpu", cpu)],
            labels,
            annotations,
            ..Default::default()
        })
    }

    /// A pending pre-allocating reservation of `cpu` owned by pods labelled app=web.
    fn pre_allocating(cpu: &str, labels: &[(&str, &str)], spec_extra: Value) -> Reservation {
        let mut spec = json!({
            "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            "preAllocation": true,
            "allocatePolicy": "Restricted",
        });
        for (key, value) in spec_extra.as_object().unwrap() {
            spec[key] = value.clone();
        }
        testutil::reservation(ReservationSpec {
            name: "r1",
            template: testutil::reservation_template(&[("cpu", cpu)]),
            labels,
            spec_extra: spec,
            ..Default::default()
        })
    }

    fn pod_of(s: &Scheduler, name: &str) -> std::sync::Arc<PodInfo> {
        s.cache.pod(&format!("default/{name}")).cloned().unwrap()
    }

    #[test]
    fn a_full_node_takes_the_reservation_in_place_of_a_running_owner() {
        let mut s = cluster(vec![]);
        let (placement, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("6", &[], json!({})), t0());
        assert_eq!(placement.node.as_deref(), Some("n1"), "{placement:?}");
        assert_eq!(placement.reasons["n2"], "Insufficient cpu");
        // The pod as it was comes back for the API write; the cache has it allocated.
        let pre_allocated = pre_allocated.unwrap();
        assert_eq!(pre_allocated.allocation, r#"{"name":"r1","uid":"r1-uid"}"#);
        let before = &pre_allocated.before;
        assert_eq!(before.metadata.name.as_deref(), Some("web-1"));
        assert!(
            before
                .metadata
                .annotations
                .as_ref()
                .is_none_or(|a| a.is_empty())
        );
        assert_eq!(allocated_from(&pod_of(&s, "web-1")).as_deref(), Some("r1"));
        assert!(s.cache.reservations["r1"].is_available());
        // Both pods are still in the cache, on their nodes.
        assert_eq!(pod_of(&s, "busy").node.as_deref(), Some("n2"));
        assert_eq!(s.cache.pods_on_node("n1").count(), 1);
    }

    #[test]
    fn a_plain_reservation_does_not_pre_allocate() {
        let mut s = cluster(vec![]);
        let mut reservation = pre_allocating("6", &[], json!({}));
        reservation.spec.pre_allocation = None;
        let (placement, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &reservation, t0());
        assert_eq!(placement.node, None);
        assert!(pre_allocated.is_none());
        assert_eq!(placement.reasons["n1"], "Insufficient cpu");
        assert_eq!(allocated_from(&pod_of(&s, "web-1")), None);
    }

    #[test]
    fn only_restricted_default_mode_reservations_pre_allocate() {
        for extra in [
            json!({"allocatePolicy": "Aligned"}),
            json!({"preAllocationPolicy": {"mode": "Cluster"}}),
        ] {
            let mut s = cluster(vec![]);
            let (placement, pre_allocated) =
                place_reservation_pre_allocating(&mut s, &pre_allocating("6", &[], extra), t0());
            assert_eq!(placement.node, None);
            assert!(pre_allocated.is_none());
            assert_eq!(placement.reasons["n1"], REASON_UNSUPPORTED);
            assert_eq!(placement.reasons["n2"], REASON_UNSUPPORTED);
        }
    }

    #[test]
    fn a_pod_larger_than_the_reservation_or_anothers_is_no_candidate() {
        // web-1 asks 6 CPUs: a 4-CPU reservation cannot take it in.
        let mut s = cluster(vec![]);
        let (placement, _) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("4", &[], json!({})), t0());
        assert_eq!(placement.node, None);
        // Allocated from another reservation already.
        let other = r#"{"name":"r0","uid":"r0-uid"}"#;
        let allocated = apis::extension::reservation::ANNOTATION_RESERVATION_ALLOCATED;
        assert_eq!(lone_owner_placement(&[(allocated, other)]), None);
        // Holding a cpuset (its hand-over to the reservation is not built).
        let cpuset = r#"{"cpuset":"0-5"}"#;
        assert_eq!(
            lone_owner_placement(&[(ANNOTATION_RESOURCE_STATUS, cpuset)]),
            None
        );
        // The same pod without these annotations is pre-allocated.
        assert_eq!(lone_owner_placement(&[]).as_deref(), Some("n1"));
    }

    /// Where a 6-CPU pre-allocating reservation goes when n1 (8 CPUs) runs only
    /// `web-1` (6 CPUs, an owner) with `annotations`.
    fn lone_owner_placement(annotations: &[(&str, &str)]) -> Option<String> {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "8"), ("pods", "10")]),
                bound("web-1", "n1", "6", &[("app", "web")], annotations),
            ],
        );
        let (placement, _) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("6", &[], json!({})), t0());
        placement.node
    }

    #[test]
    fn a_node_with_a_pod_to_pre_allocate_wins_over_a_free_one() {
        let mut s = cluster(vec![testutil::node(
            "n0-free",
            &[("cpu", "8"), ("memory", "16Gi"), ("pods", "10")],
        )]);
        let (placement, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("6", &[], json!({})), t0());
        assert_eq!(placement.node.as_deref(), Some("n1"));
        assert_eq!(placement.reasons["n0-free"], PASSED_OVER_FOR_PRE_ALLOCATION);
        assert!(pre_allocated.is_some());
    }

    #[test]
    fn required_pre_allocation_refuses_nodes_without_a_pod_that_makes_room() {
        let required = [("scheduling.koordinator.sh/pre-allocation-required", "true")];
        // No owner anywhere: every node says so, the free one included.
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![testutil::node("free", &[("cpu", "8"), ("pods", "10")])],
        );
        let (placement, _) = place_reservation_pre_allocating(
            &mut s,
            &pre_allocating("2", &required, json!({})),
            t0(),
        );
        assert_eq!(placement.node, None);
        assert_eq!(placement.reasons["free"], REASON_REQUIRED_NO_POD);
        // An owner too small to make room: named as such.
        let mut s = cluster(vec![bound("web-2", "n2", "1", &[("app", "web")], &[])]);
        let (placement, _) = place_reservation_pre_allocating(
            &mut s,
            &pre_allocating("6", &required, json!({})),
            t0(),
        );
        assert_eq!(placement.node.as_deref(), Some("n1"));
        assert_eq!(placement.reasons["n2"], REASON_NO_POD_FITS);
    }

    #[test]
    fn the_fullest_candidate_is_pre_allocated() {
        // Either pod's place would do on n1 (10 CPUs, 8 requested); web-b fills all of the
        // 5-CPU reservation, web-a three fifths.
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "10"), ("pods", "10")]),
                bound("web-a", "n1", "3", &[("app", "web")], &[]),
                bound("web-b", "n1", "5", &[("app", "web")], &[]),
            ],
        );
        let (placement, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("5", &[], json!({})), t0());
        assert_eq!(placement.node.as_deref(), Some("n1"));
        assert_eq!(
            pre_allocated.unwrap().before.metadata.name.as_deref(),
            Some("web-b")
        );
        assert_eq!(allocated_from(&pod_of(&s, "web-a")), None);
    }

    #[test]
    fn pods_nominated_on_nodes_not_chosen_come_back_unallocated() {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "8"), ("pods", "10")]),
                bound("web-b", "n1", "5", &[("app", "web")], &[]),
                bound("other-1", "n1", "2", &[("app", "db")], &[]),
                testutil::node("n2", &[("cpu", "8"), ("pods", "10")]),
                bound("web-z", "n2", "4", &[("app", "web")], &[]),
                bound("other-2", "n2", "2", &[("app", "db")], &[]),
            ],
        );
        let (placement, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("6", &[], json!({})), t0());
        let (chosen, left, left_node) = match placement.node.as_deref() {
            Some("n1") => ("web-b", "web-z", "n2"),
            Some("n2") => ("web-z", "web-b", "n1"),
            other => panic!("placed on {other:?}"),
        };
        assert_eq!(
            pre_allocated.unwrap().before.metadata.name.as_deref(),
            Some(chosen)
        );
        assert_eq!(allocated_from(&pod_of(&s, chosen)).as_deref(), Some("r1"));
        assert_eq!(pod_of(&s, left).node.as_deref(), Some(left_node));
        assert_eq!(allocated_from(&pod_of(&s, left)), None);
    }
}
