//! Reservation pre-allocation (`spec.preAllocation: true`): a reservation
//! may be placed on a node that is full because of running pods it can take
//! in; those pods are then recorded as allocated from the reservation
//! (`reservation-allocated`), so the capacity stays reserved when they go.
//! Upstream's two modes: Default (candidates are the reservation's owners)
//! and Cluster (candidates carry a label, ordered by a priority
//! annotation), each with one pod or, with `enableMultiple`, several. Pure
//! decisions over the cache; the placement
//! ([`crate::placement::place_reservation_pre_allocating`]) runs the plugins
//! with the nominated pods out of the way, and the controller writes the
//! pods' annotation.

use apis::extension::reservation::{
    ANNOTATION_RESERVE_POD, get_reservation_affinity, is_pre_allocation_required,
};
use apis::scheduling::v1alpha1::{PreAllocationMode, Reservation, ReservationAllocatePolicy};
use std::collections::BTreeMap;
use std::sync::Arc;

pub use super::pre_allocation_settings::{PreAllocationConfig, Settings};
use super::{ReservationInfo, affinity_matches, allocated_from};
use crate::cache::{ClusterCache, PodInfo};
use crate::framework::CycleState;
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
/// Upstream's reason for a Cluster-mode reservation while the scheduler's
/// `preAllocationConfig.enableClusterMode` is off.
pub const REASON_CLUSTER_MODE_DISABLED: &str =
    "reservation requires cluster mode pre-allocation which is disabled";

/// How a reservation asks for pre-allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A plain reservation: free capacity only.
    Off,
    On(PreAllocating),
}

/// A pre-allocating reservation's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreAllocating {
    /// Label `scheduling.koordinator.sh/pre-allocation-required=true`: no
    /// node without a pre-allocated pod.
    pub required: bool,
    /// `preAllocationPolicy.mode: Cluster`: candidates by label, not owners.
    pub cluster: bool,
    /// `preAllocationPolicy.enableMultiple`: several pods may be taken in.
    pub multiple: bool,
}

/// The reservation's pre-allocation mode, or why it cannot have one:
/// upstream pre-allocates only for Restricted reservations, and Cluster
/// mode only when the scheduler enables it.
pub fn mode(reservation: &Reservation, settings: &Settings) -> Result<Mode, &'static str> {
    if reservation.spec.pre_allocation != Some(true) {
        return Ok(Mode::Off);
    }
    if reservation.spec.allocate_policy != Some(ReservationAllocatePolicy::Restricted) {
        return Err(REASON_UNSUPPORTED);
    }
    let policy = reservation.spec.pre_allocation_policy.as_ref();
    let cluster = policy.and_then(|p| p.mode.as_ref()) == Some(&PreAllocationMode::Cluster);
    if cluster && !settings.cluster_mode {
        return Err(REASON_CLUSTER_MODE_DISABLED);
    }
    let labels = reservation.metadata.labels.clone().unwrap_or_default();
    Ok(Mode::On(PreAllocating {
        required: is_pre_allocation_required(&labels),
        cluster,
        multiple: policy.and_then(|p| p.enable_multiple) == Some(true),
    }))
}

/// Whether `pod` may be pre-allocated to `reservation`: bound (the API
/// confirmed it, not merely assumed), allocated from no other reservation,
/// not a reserve pod, its own reservation affinity allows this reservation, and it is chosen by the mode — in
/// Default mode matched by an owner with a label selector (upstream lists
/// candidates this way), in Cluster mode labelled `<cluster label>=true`.
pub fn is_candidate(
    reservation: &ReservationInfo,
    pod: &PodInfo,
    cache: &ClusterCache,
    options: PreAllocating,
    settings: &Settings,
) -> bool {
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
    let chosen = if options.cluster {
        pod.labels()
            .get(&settings.cluster_label_key)
            .is_some_and(|v| v == "true")
    } else {
        let selected_by_a_selector = reservation
            .owner_selectors
            .iter()
            .flatten()
            .any(|selector| selector.matches(pod.labels()));
        selected_by_a_selector && reservation.is_owner(pod)
    };
    if !chosen {
        return false;
    }
    match get_reservation_affinity(pod.annotations()) {
        Err(_) => false,
        Ok(None) => !reservation.unschedulable,
        Ok(Some(affinity)) => affinity_matches(&affinity, reservation, cache),
    }
}

/// Whether the reservation, holding `allocatable`, can take in pods asking
/// `requests` in all (Restricted): they share some resource, and for each
/// the reservation holds they ask no more than it holds.
pub fn fits_reservation(allocatable: &Resources, requests: &Resources) -> bool {
    let mut shared = false;
    for (name, held) in allocatable.iter() {
        let wanted = requests.get(name);
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

/// Whether the pod asks for any resource the reservation holds (upstream
/// skips the others without counting them).
fn shares_a_resource(allocatable: &Resources, pod: &PodInfo) -> bool {
    allocatable
        .iter()
        .any(|(name, held)| held > 0 && pod.requests.get(name) > 0)
}

/// How much of the reservation `pod` would fill, 0–100 (the mean over the
/// resources it holds): Default-mode candidates are tried fullest first, as
/// upstream nominates the pod its reservation scores (most allocated) best.
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

/// A Cluster-mode candidate's priority: the annotation as an integer,
/// 0 when absent or not one (as upstream).
pub fn cluster_priority(pod: &PodInfo, settings: &Settings) -> i64 {
    pod.annotations()
        .get(&settings.cluster_priority_key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What pre-allocation decides per node before the plugins run.
#[derive(Debug, Default)]
pub struct Nominations {
    /// Node → the pods whose place the reservation would take there, in
    /// the order they were chosen (one unless `enableMultiple`).
    pub pods: BTreeMap<String, Vec<Arc<PodInfo>>>,
    /// Node → why it is refused (pre-allocation required, no pod makes room).
    pub refused: BTreeMap<String, &'static str>,
}

impl Nominations {
    /// The pods nominated on `node` (none: empty).
    pub fn on(&self, node: &str) -> &[Arc<PodInfo>] {
        self.pods.get(node).map_or(&[], Vec::as_slice)
    }
}

/// Cycle-state key of the [`HandOver`] a pre-allocating reserve pod's
/// plugins read.
pub const STATE_HAND_OVER: &str = "Reservation/preAllocationHandOver";

/// The running pods a pre-allocating reservation would take in, per node,
/// for the plugins that hand their cpusets and devices over to it
/// (NodeNUMAResource, DeviceShare). Those pods are out of the cache while
/// the plugins decide, so what they hold is free there; the reserve pod
/// must take all of it (preferred before anything else), or the node is
/// refused, since once pre-allocated the pods count inside the reservation.
#[derive(Debug, Default)]
pub struct HandOver {
    /// The reserve pod's cache key: only its cycle gets this state.
    pub reserve_pod: String,
    /// Node → the nominated pods there.
    pub pods: BTreeMap<String, Vec<Arc<PodInfo>>>,
}

impl HandOver {
    /// The pods handed over on `node` (none: empty).
    pub fn on(&self, node: &str) -> &[Arc<PodInfo>] {
        self.pods.get(node).map_or(&[], Vec::as_slice)
    }
}

/// The hand-over of the pod's cycle, if it is a pre-allocating reserve pod
/// with pods nominated somewhere.
pub fn hand_over(state: &CycleState) -> Option<&HandOver> {
    state
        .read::<Arc<HandOver>>(STATE_HAND_OVER)
        .map(|h| &**h)
        .filter(|h| !h.pods.is_empty())
}

/// What one reservation's nomination works from.
pub struct Request<'a> {
    /// The reservation's placeholder pod, already in the cache.
    pub reserve_pod: &'a PodInfo,
    pub reservation: &'a Reservation,
    /// What the reservation holds.
    pub allocatable: &'a Resources,
    pub options: PreAllocating,
    pub settings: &'a Settings,
}

/// Per node, the candidates in the mode's order (Default: fullest first;
/// Cluster: priority, highest first, then uid). One pod: the first whose
/// place lets the reserve pod fit (kube-scheduler's resource fit and pod
/// count, without that pod). Several: candidates are taken in that order,
/// skipping any that would overfill the reservation, until the reserve pod
/// fits without them all. With `preferNoPreAllocatedPods` (not required), a
/// node where the reserve pod fits as it is takes none. With `required`, a
/// node without a nomination is refused.
pub fn nominate(cache: &ClusterCache, request: &Request<'_>) -> Nominations {
    let mut nominations = Nominations::default();
    let Ok(owned_by) = ReservationInfo::from_crd(request.reservation) else {
        return nominations;
    };
    let options = request.options;
    let allocatable = request.allocatable;
    for node in cache.nodes_sorted() {
        if !options.required
            && request.settings.prefer_no_pre_allocated_pods
            && node_checks::check_resources(request.reserve_pod, node).is_ok()
        {
            continue;
        }
        let mut candidates: Vec<&Arc<PodInfo>> = cache
            .pods_on_node(&node.name)
            .filter(|p| {
                shares_a_resource(allocatable, p)
                    && is_candidate(&owned_by, p, cache, options, request.settings)
            })
            .collect();
        if options.cluster {
            candidates.sort_by_cached_key(|p| {
                (
                    std::cmp::Reverse(cluster_priority(p, request.settings)),
                    p.uid.clone(),
                )
            });
        } else {
            candidates.sort_by(|a, b| {
                fill_percent(allocatable, b)
                    .cmp(&fill_percent(allocatable, a))
                    .then_with(|| a.key.cmp(&b.key))
            });
        }
        let had_candidates = !candidates.is_empty();
        let chosen = if options.multiple {
            accumulate(request, node, &candidates)
        } else {
            candidates
                .into_iter()
                .find(|candidate| {
                    fits_reservation(allocatable, &candidate.requests)
                        && node_checks::check_resources_without(
                            request.reserve_pod,
                            node,
                            &[&***candidate],
                        )
                        .is_ok()
                })
                .map(|candidate| vec![Arc::clone(candidate)])
        };
        match chosen {
            Some(pods) => {
                nominations.pods.insert(node.name.to_string(), pods);
            }
            None if options.required => {
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

/// `enableMultiple`: candidates in order, each kept only if the ones kept
/// so far plus it still fit inside the reservation, until the reserve pod
/// fits on the node without all of them (upstream's accumulation).
fn accumulate(
    request: &Request<'_>,
    node: &crate::cache::NodeInfo,
    candidates: &[&Arc<PodInfo>],
) -> Option<Vec<Arc<PodInfo>>> {
    let mut taken: Vec<Arc<PodInfo>> = Vec::new();
    let mut taken_requests = Resources::new();
    for candidate in candidates {
        let mut trial = taken_requests.clone();
        trial.add(&candidate.requests);
        if !fits_reservation(request.allocatable, &trial) {
            continue;
        }
        taken_requests = trial;
        taken.push(Arc::clone(candidate));
        let gone: Vec<&PodInfo> = taken.iter().map(|p| &**p).collect();
        if node_checks::check_resources_without(request.reserve_pod, node, &gone).is_ok() {
            return Some(taken);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::*;
    use crate::cache::Object;
    use crate::config::SchedulerConfiguration;
    use crate::framework::Scheduler;
    use crate::placement::{
        PASSED_OVER_FOR_FEWER_PRE_ALLOCATED, PASSED_OVER_FOR_PRE_ALLOCATION,
        place_reservation_pre_allocating,
    };
    use crate::plugins::reservation::allocated_from;
    use crate::testutil::{self, PodSpec, ReservationSpec, t0};
    use apis::extension::constants::{
        ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY, LABEL_POD_PRE_ALLOCATABLE,
    };

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
        assert_eq!(pre_allocated.pods.len(), 1);
        let before = &pre_allocated.pods[0];
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
    fn only_restricted_reservations_pre_allocate_and_cluster_mode_only_when_enabled() {
        for (extra, reason) in [
            (json!({"allocatePolicy": "Aligned"}), REASON_UNSUPPORTED),
            (
                json!({"preAllocationPolicy": {"mode": "Cluster"}}),
                REASON_CLUSTER_MODE_DISABLED,
            ),
        ] {
            let mut s = cluster(vec![]);
            let (placement, pre_allocated) =
                place_reservation_pre_allocating(&mut s, &pre_allocating("6", &[], extra), t0());
            assert_eq!(placement.node, None);
            assert!(pre_allocated.is_none());
            assert_eq!(placement.reasons["n1"], reason);
            assert_eq!(placement.reasons["n2"], reason);
        }
    }

    /// A scheduler whose Reservation args carry `pre_allocation_config` (YAML flow).
    fn configured(pre_allocation_config: &str) -> Scheduler {
        testutil::scheduler(&format!(
            "profiles:\n- pluginConfig:\n  - name: Reservation\n    args:\n      preAllocationConfig: {pre_allocation_config}\n"
        ))
    }

    fn names(pre_allocated: Option<crate::placement::PreAllocated>) -> Vec<String> {
        pre_allocated
            .map(|p| p.pods)
            .unwrap_or_default()
            .iter()
            .map(|pod| pod.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn cluster_mode_takes_labelled_pods_highest_priority_first() {
        let labelled = |name, cpu, priority: &'static str| {
            let mut labels = vec![(LABEL_POD_PRE_ALLOCATABLE, "true")];
            labels.push(("app", "batch"));
            bound(
                name,
                "n1",
                cpu,
                &labels,
                &[(ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY, priority)],
            )
        };
        let objects = vec![
            // 1 CPU free.
            testutil::node("n1", &[("cpu", "11"), ("pods", "10")]),
            // An owner, but not labelled: Cluster mode does not look at owners.
            bound("web-1", "n1", "4", &[("app", "web")], &[]),
            labelled("low", "3", "5"),
            labelled("high", "2", "10"),
            // Not a number: priority 0.
            labelled("odd", "1", "ten"),
        ];
        let cluster_mode = json!({"preAllocationPolicy": {"mode": "Cluster"}});
        let mut s = configured("{enableClusterMode: true}");
        testutil::load(&mut s, objects.clone());
        // Either `high` or `low` makes room for 3 CPUs; `low` would fill more of it.
        let (placement, pre_allocated) = place_reservation_pre_allocating(
            &mut s,
            &pre_allocating("3", &[], cluster_mode.clone()),
            t0(),
        );
        assert_eq!(placement.node.as_deref(), Some("n1"), "{placement:?}");
        assert_eq!(names(pre_allocated), ["high"]);
        // With several pods: by priority, until it fits (1 free + 2 + 3 ≥ 5 CPUs).
        let mut s = configured("{enableClusterMode: true}");
        testutil::load(&mut s, objects.clone());
        let mut several = cluster_mode.clone();
        several["preAllocationPolicy"]["enableMultiple"] = json!(true);
        let (_, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("5", &[], several), t0());
        assert_eq!(names(pre_allocated), ["high", "low"]);
        // Another label key: the default one no longer marks candidates.
        let mut s = configured(
            "{enableClusterMode: true, clusterLabelKey: example.com/spare, clusterPriorityAnnotationKey: example.com/rank}",
        );
        testutil::load(&mut s, objects);
        let (placement, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("3", &[], cluster_mode), t0());
        assert_eq!(placement.node, None);
        assert!(pre_allocated.is_none());
    }

    #[test]
    fn a_bad_cluster_label_key_is_refused_at_start() {
        let config = SchedulerConfiguration::from_yaml(
            "profiles:\n- pluginConfig:\n  - name: Reservation\n    args:\n      preAllocationConfig: {clusterLabelKey: 'bad key'}\n",
        )
        .unwrap();
        let error = crate::plugins::build_scheduler(&config, std::time::Duration::from_secs(1))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("clusterLabelKey"), "{error}");
        let settings = Settings::from_config(Some(&PreAllocationConfig {
            cluster_priority_annotation_key: "a/b/c".into(),
            ..Default::default()
        }));
        assert!(settings.is_err());
        assert_eq!(Settings::from_config(None).unwrap(), Settings::default());
    }

    /// n1 (6 CPUs, full) runs owners of 3, 2 and 1 CPUs.
    fn three_owners(extra: Vec<Object>) -> Scheduler {
        let mut s = testutil::scheduler("");
        let mut objects = vec![
            testutil::node("n1", &[("cpu", "6"), ("pods", "10")]),
            bound("web-3", "n1", "3", &[("app", "web")], &[]),
            bound("web-2", "n1", "2", &[("app", "web")], &[]),
            bound("web-1", "n1", "1", &[("app", "web")], &[]),
        ];
        objects.extend(extra);
        testutil::load(&mut s, objects);
        s
    }

    #[test]
    fn several_pods_are_taken_fullest_first_skipping_one_that_overfills() {
        let multiple = json!({"preAllocationPolicy": {"enableMultiple": true}});
        // 4 CPUs: web-3 leaves 3 free, web-3 + web-2 would overfill it, web-1 completes it.
        let mut s = three_owners(vec![]);
        let (placement, pre_allocated) = place_reservation_pre_allocating(
            &mut s,
            &pre_allocating("4", &[], multiple.clone()),
            t0(),
        );
        assert_eq!(placement.node.as_deref(), Some("n1"), "{placement:?}");
        assert_eq!(names(pre_allocated), ["web-3", "web-1"]);
        assert_eq!(allocated_from(&pod_of(&s, "web-1")).as_deref(), Some("r1"));
        assert_eq!(allocated_from(&pod_of(&s, "web-2")), None);
        // Without enableMultiple, no single pod makes room for 4 CPUs.
        let mut s = three_owners(vec![]);
        let (placement, _) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("4", &[], json!({})), t0());
        assert_eq!(placement.node, None);
    }

    #[test]
    fn with_several_pods_the_node_taking_fewest_wins() {
        let multiple = json!({"preAllocationPolicy": {"enableMultiple": true}});
        // n2 (4 CPUs, full) makes room for 4 CPUs with one pod; n1 needs two.
        let n2 = vec![
            testutil::node("n2", &[("cpu", "4"), ("pods", "10")]),
            bound("web-4", "n2", "4", &[("app", "web")], &[]),
        ];
        let mut s = three_owners(n2.clone());
        let (placement, pre_allocated) = place_reservation_pre_allocating(
            &mut s,
            &pre_allocating("4", &[], multiple.clone()),
            t0(),
        );
        assert_eq!(placement.node.as_deref(), Some("n2"), "{placement:?}");
        assert_eq!(names(pre_allocated), ["web-4"]);
        assert_eq!(placement.reasons["n1"], PASSED_OVER_FOR_FEWER_PRE_ALLOCATED);
        // A free node taking none wins over both.
        let mut objects = n2;
        objects.push(testutil::node("n0-free", &[("cpu", "8"), ("pods", "10")]));
        let mut s = three_owners(objects);
        let (placement, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("4", &[], multiple), t0());
        assert_eq!(placement.node.as_deref(), Some("n0-free"), "{placement:?}");
        assert!(pre_allocated.is_none());
        assert_eq!(placement.reasons["n2"], PASSED_OVER_FOR_FEWER_PRE_ALLOCATED);
    }

    #[test]
    fn preferring_no_pre_allocated_pods_takes_none_where_the_reservation_fits() {
        // n1 (8 CPUs) runs web-1 (2 CPUs): a 4-CPU reservation fits beside it.
        let objects = || {
            vec![
                testutil::node("n1", &[("cpu", "8"), ("pods", "10")]),
                bound("web-1", "n1", "2", &[("app", "web")], &[]),
            ]
        };
        let mut s = testutil::scheduler("");
        testutil::load(&mut s, objects());
        let (_, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("4", &[], json!({})), t0());
        assert_eq!(names(pre_allocated), ["web-1"]);
        let mut s = configured("{preferNoPreAllocatedPods: true}");
        testutil::load(&mut s, objects());
        let (placement, pre_allocated) =
            place_reservation_pre_allocating(&mut s, &pre_allocating("4", &[], json!({})), t0());
        assert_eq!(placement.node.as_deref(), Some("n1"));
        assert!(pre_allocated.is_none());
        assert_eq!(allocated_from(&pod_of(&s, "web-1")), None);
        // Required pre-allocation still takes the pod.
        let required = [("scheduling.koordinator.sh/pre-allocation-required", "true")];
        let mut s = configured("{preferNoPreAllocatedPods: true}");
        testutil::load(&mut s, objects());
        let (_, pre_allocated) = place_reservation_pre_allocating(
            &mut s,
            &pre_allocating("4", &required, json!({})),
            t0(),
        );
        assert_eq!(names(pre_allocated), ["web-1"]);
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
        // The same pod without that annotation is pre-allocated; holding a
        // cpuset it is too (a reservation without one takes it as it is).
        let cpuset = r#"{"cpuset":"0-5"}"#;
        let resource_status = apis::extension::numa_aware::ANNOTATION_RESOURCE_STATUS;
        assert_eq!(
            lone_owner_placement(&[(resource_status, cpuset)]).as_deref(),
            Some("n1")
        );
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
            pre_allocated.unwrap().pods[0].metadata.name.as_deref(),
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
            pre_allocated.unwrap().pods[0].metadata.name.as_deref(),
            Some(chosen)
        );
        assert_eq!(allocated_from(&pod_of(&s, chosen)).as_deref(), Some("r1"));
        assert_eq!(pod_of(&s, left).node.as_deref(), Some(left_node));
        assert_eq!(allocated_from(&pod_of(&s, left)), None);
    }
}
