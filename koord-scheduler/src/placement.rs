//! The placement cycle: the framework's steps for one pod (pre-filter →
//! filter → score → reserve) in the order every caller runs them. The
//! extender calls the filter and score halves per request ([`filter_candidates`],
//! [`extender_scores`]; kube-scheduler drives the cycle and checks nodes
//! itself); the simulator ([`schedule_one`]) and the Reservation controller
//! ([`place_reservation`]) run the whole cycle here, with kube-scheduler's
//! node checks from [`crate::node_checks`] since no kube-scheduler filters
//! ahead of them.
//!
//! This module sits above both the framework and the plugins (it knows the
//! Reservation plugin's reserve pods); neither imports it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use apis::extension::annotations::format_json_annotation;
use apis::extension::reservation::{ANNOTATION_RESERVATION_ALLOCATED, ReservationAllocated};
use apis::scheduling::v1alpha1::Reservation;
use serde::Serialize;

use crate::cache::{Change, NodeInfo, Object, PodInfo};
use crate::framework::{FilterOutcome, Reason, Scheduler};
use crate::node_checks;
use crate::node_map::NodeMap;
use crate::plugins::reservation::{
    KEPT_ANNOTATIONS, is_pending, lifecycle, pre_allocation, reserve_pod,
};

/// One pod's outcome; the JSON contract documented in `docs/simulate.md`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    /// `namespace/name`.
    pub pod: String,
    /// The chosen node, or null when none fits.
    pub node: Option<String>,
    /// Rejected node → reason. A simulation names every node for every
    /// pod, so the nodes are kept by position in the cache's name table.
    pub reasons: NodeMap<String>,
    /// Feasible node → Σ weight × normalized plugin score.
    pub scores: NodeMap<i64>,
    /// Annotations the bind wrote (or would write) on the pod.
    pub annotations: BTreeMap<String, String>,
}

/// A filter's refusals as the report's texts.
fn named_reasons(refusals: BTreeMap<String, Reason>) -> impl Iterator<Item = (Arc<str>, String)> {
    refusals
        .into_iter()
        .map(|(node, reason)| (node.into(), reason.into()))
}

/// The extender's `/filter` over `candidates`: pre-filter, then the
/// plugins' filters; a pre-filter rejection rejects every candidate.
pub fn filter_candidates(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: &[String],
    now: SystemTime,
) -> FilterOutcome {
    match scheduler.pre_filter(pod, now) {
        Ok(state) => scheduler.filter(pod, Some(candidates), &state),
        Err(rejection) => Scheduler::reject_all(candidates, &rejection),
    }
}

/// [`filter_candidates`] over names taken by value and already looked up
/// (`nodes[i]` is `candidates[i]`'s node), also returning the cache
/// indexes of the feasible nodes.
pub fn filter_resolved_indexed(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: Vec<String>,
    nodes: &[Option<&NodeInfo>],
    now: SystemTime,
) -> (FilterOutcome, Vec<usize>) {
    match scheduler.pre_filter(pod, now) {
        Ok(cycle) => {
            let (outcome, feasible) = scheduler.filter_resolved(pod, candidates, nodes, &cycle);
            match scheduler.preferred_outside(pod, &outcome, &cycle) {
                Some(node) => (nominate_outside(outcome, node), Vec::new()),
                None => (outcome, feasible),
            }
        }
        Err(rejection) => (Scheduler::reject_all(&candidates, &rejection), Vec::new()),
    }
}

/// (ours) Why every candidate is refused while the pod is nominated to a
/// node kube-scheduler's sample left out.
pub const REASON_NOMINATED_OUTSIDE_CANDIDATES: &str = "node(s) passed over: the pod is nominated to a node outside the candidates, where a reservation of the pod fits";

/// kube-scheduler hands the extender only the nodes its sample found
/// (`percentageOfNodesToScore`, at least 100): a node where the pod is
/// preferred (its reservation) may be missing. Then every candidate is
/// refused (preemption cannot help) and the pod is to be nominated to that
/// node, which kube-scheduler evaluates first in the next cycle.
fn nominate_outside(mut outcome: FilterOutcome, node: String) -> FilterOutcome {
    let reason = Reason::Static(REASON_NOMINATED_OUTSIDE_CANDIDATES);
    for name in std::mem::take(&mut outcome.feasible) {
        outcome.failed_unresolvable.insert(name, reason.clone());
    }
    for (name, _) in std::mem::take(&mut outcome.failed) {
        outcome.failed_unresolvable.insert(name, reason.clone());
    }
    outcome.nominated = Some(node);
    outcome
}

/// The extender's `/prioritize` scores (0..=10) of `candidates`, already
/// looked up (`nodes[i]` is `candidates[i]`'s node); all 0 when pre-filter
/// rejects the pod.
pub fn extender_scores(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: Vec<String>,
    nodes: &[Option<&NodeInfo>],
    now: SystemTime,
) -> Vec<(String, i64)> {
    match scheduler.pre_filter(pod, now) {
        Ok(state) => scheduler
            .score_resolved(pod, candidates, nodes, &state)
            .into_extender_scores(),
        Err(_) => candidates.into_iter().map(|n| (n, 0)).collect(),
    }
}

/// A placement whose per-node reasons and scores are still kept by cache
/// node index ([`NodeInfo::index`]): naming ~5,000 nodes per pod (a string
/// copy each, then a map sorted by name) cost the simulator about a sixth
/// of its time, so names are written only when a caller asks
/// ([`Self::resolve`]).
#[derive(Debug)]
pub struct ScheduledPod {
    placement: Placement,
    /// Rejected node index → reason, in the order the reasons came.
    reasons: Vec<(usize, String)>,
    /// Feasible node index → total.
    scores: Vec<(usize, i64)>,
}

impl ScheduledPod {
    /// The chosen node (the details are not needed to read it).
    pub fn node(&self) -> Option<&str> {
        self.placement.node.as_deref()
    }

    /// The placement with its details named, read from `cache`: the cache
    /// the pod was scheduled in, with the same nodes (bound pods do not
    /// matter; node numbers are never reused, and a node dropped since
    /// would be left out of the details).
    pub fn resolve(self, cache: &crate::cache::ClusterCache) -> Placement {
        let ScheduledPod {
            mut placement,
            reasons,
            scores,
        } = self;
        if !reasons.is_empty() {
            // A node is rejected once (were it twice, the later reason
            // would win, as with inserting).
            placement.reasons = NodeMap::from_indexed(cache, reasons);
        }
        if !scores.is_empty() {
            placement.scores = NodeMap::from_indexed(cache, scores);
        }
        placement
    }

    /// Names the details now (while the cache is the one they were taken
    /// in), for a path that goes on by name.
    fn resolve_now(&mut self, cache: &crate::cache::ClusterCache) {
        let pending = ScheduledPod {
            placement: std::mem::replace(&mut self.placement, Placement::empty("")),
            reasons: std::mem::take(&mut self.reasons),
            scores: std::mem::take(&mut self.scores),
        };
        self.placement = pending.resolve(cache);
    }
}

impl Placement {
    fn empty(pod: &str) -> Self {
        Placement {
            pod: pod.to_string(),
            node: None,
            reasons: NodeMap::new(),
            scores: NodeMap::new(),
            annotations: BTreeMap::new(),
        }
    }
}

/// Schedules one pending pod already in the cache; `record_details` = false
/// skips collecting per-node reasons and scores (throughput measurement).
pub fn schedule_one(
    scheduler: &mut Scheduler,
    pod_key: &str,
    now: SystemTime,
    record_details: bool,
) -> Placement {
    schedule_one_indexed(scheduler, pod_key, now, record_details).resolve(&scheduler.cache)
}

/// [`schedule_one`] with the per-node details left by node index (see
/// [`ScheduledPod`]).
pub fn schedule_one_indexed(
    scheduler: &mut Scheduler,
    pod_key: &str,
    now: SystemTime,
    record_details: bool,
) -> ScheduledPod {
    let mut scheduled = ScheduledPod {
        placement: Placement::empty(pod_key),
        reasons: Vec::new(),
        scores: Vec::new(),
    };
    let placement = &mut scheduled.placement;
    let Some(pod) = scheduler.cache.pod(pod_key).cloned() else {
        placement
            .reasons
            .insert("", "pod not found in the snapshot".into());
        return scheduled;
    };
    let state = match scheduler.pre_filter(&pod, now) {
        Ok(state) => state,
        Err(rejection) => {
            if record_details {
                placement.reasons = NodeMap::for_nodes_of(&scheduler.cache);
                for node in scheduler.cache.nodes_sorted() {
                    let reason = rejection.reason.to_string();
                    placement.reasons.insert(&*node.name, reason);
                }
            }
            return scheduled;
        }
    };
    // Nodes are handled by reference and recorded by index; names are
    // copied only for the chosen node (and by `resolve`).
    // No kube-scheduler filters ahead of the simulator, so its node checks
    // (cordon, taints, selector, affinity) apply here; their reason wins.
    // A pod choosing no nodes itself passes every node that is neither
    // cordoned nor tainted without looking at the Node object.
    let selects_nodes = node_checks::selects_nodes(&pod);
    let node_check = |pod: &PodInfo, node: &NodeInfo| {
        if selects_nodes || node.cordoned_or_tainted {
            node_checks::check_pod_on_node(pod, node)
        } else {
            Ok(())
        }
    };
    let best = {
        let reasons = &mut scheduled.reasons;
        let mut feasible = scheduler.filter_all_nodes(&pod, &state, |node, rejection| {
            if record_details {
                let reason = node_check(&pod, node)
                    .err()
                    .unwrap_or_else(|| rejection.reason.into());
                reasons.push((node.index, reason));
            }
        });
        feasible.retain(|node| match node.map(|n| (n, node_check(&pod, n))) {
            Some((n, Err(reason))) => {
                if record_details {
                    reasons.push((n.index, reason));
                }
                false
            }
            _ => true,
        });
        let (totals, _) = scheduler.score_nodes(&pod, &feasible, &state);
        if record_details {
            scheduled.scores = feasible
                .iter()
                .zip(&totals)
                .filter_map(|(node, total)| node.map(|n| (n.index, *total)))
                .collect();
        }
        // The highest total; ties go to the earliest node in name order.
        let mut best: Option<(usize, i64)> = None;
        for (index, total) in totals.iter().enumerate() {
            if best.is_none_or(|(_, top)| *total > top) {
                best = Some((index, *total));
            }
        }
        best.and_then(|(index, _)| feasible[index])
            .map(|node| node.name.to_string())
    };
    let Some(best) = best else {
        return scheduled;
    };
    // Nothing changed since pre-filter: the reservation can reuse its state.
    match scheduler.reserve_prepared(pod_key, &best, now, Some(state)) {
        Ok(reserved) => {
            scheduled.placement.node = Some(best);
            scheduled.placement.annotations = reserved.annotations;
            return scheduled;
        }
        Err(err) => {
            // Rolled back: the cache is the one the details were taken in.
            scheduled.resolve_now(&scheduler.cache);
            scheduled.placement.scores.remove(best.as_str());
            scheduled
                .placement
                .reasons
                .insert(best.as_str(), err.to_string());
        }
    }
    let placement = &mut scheduled.placement;
    // The best node failed (and was rolled back): rank the rest, from a fresh
    // pre-filter over the unchanged cache.
    let Ok(state) = scheduler.pre_filter(&pod, now) else {
        return scheduled;
    };
    let mut filtered = scheduler.filter(&pod, None, &state);
    let feasible = std::mem::take(&mut filtered.feasible);
    let scores = scheduler.score_owned(&pod, feasible, &state);
    let ranked: Vec<(String, i64)> = scores
        .totals
        .into_iter()
        .filter(|(n, _)| {
            *n != best
                && scheduler
                    .cache
                    .node(n)
                    .is_none_or(|node| node_check(&pod, node).is_ok())
        })
        .collect();
    reserve_best(scheduler, pod_key, ranked, now, placement);
    scheduled
}

/// Reserves the pod on the best of `ranked` (highest total; ties: name
/// order) that accepts it; a node that refuses loses its score and gets the
/// refusal as its reason.
fn reserve_best(
    scheduler: &mut Scheduler,
    pod_key: &str,
    mut ranked: Vec<(String, i64)>,
    now: SystemTime,
    placement: &mut Placement,
) {
    // Worst first, so `pop` yields the best (ties: name order).
    ranked.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)));
    while let Some((node, _)) = ranked.pop() {
        match scheduler.reserve(pod_key, &node, now) {
            Ok(reserved) => {
                placement.node = Some(node);
                placement.annotations = reserved.annotations;
                return;
            }
            Err(err) => {
                placement.scores.remove(node.as_str());
                placement.reasons.insert(node, err.to_string());
            }
        }
    }
}

/// Places one reservation as a reserve pod: kube-scheduler's own node
/// checks first ([`node_checks`]; no kube-scheduler ever sees a reserve pod,
/// and they also honour a `nodeName` the template pins), then the plugin
/// pipeline, best score first. On success the cache holds the reservation as
/// Available on the chosen node (see [`lifecycle::available_status`]); the
/// placeholder itself is gone either way. Reported as `Reservation/<name>`.
pub fn place_reservation(
    scheduler: &mut Scheduler,
    reservation: &Reservation,
    now: SystemTime,
) -> Placement {
    place_reservation_pre_allocating(scheduler, reservation, now).0
}

/// Why a feasible node is passed over for one where the reservation
/// pre-allocates a pod (upstream weights such nodes above all others).
pub const PASSED_OVER_FOR_PRE_ALLOCATION: &str =
    "node(s) passed over for a node where the reservation pre-allocates a pod";
/// (`enableMultiple`) Why a feasible node is passed over for one where the
/// reservation takes fewer pods' places (upstream scores a node
/// 100/(1 + pods), weighted above all others).
pub const PASSED_OVER_FOR_FEWER_PRE_ALLOCATED: &str =
    "node(s) passed over for a node where the reservation pre-allocates fewer pods";

/// The running pods a placement pre-allocated to its reservation.
#[derive(Debug, Clone, PartialEq)]
pub struct PreAllocated {
    /// The pods as they were, in the order chosen: put back in the cache
    /// if the writes fail.
    pub pods: Vec<Arc<k8s_openapi::api::core::v1::Pod>>,
    /// Their `reservation-allocated` value (the cache's copies have it already).
    pub allocation: String,
}

/// [`place_reservation`], also returning the pods the reservation
/// pre-allocated (`spec.preAllocation`, see [`pre_allocation`]): the cache
/// then has them allocated from the reservation, and the caller writes that
/// annotation to the API server (or puts the pods back).
///
/// Per node, [`pre_allocation::nominate`] picks the pods whose place the
/// reservation takes. Nominated pods leave the cache while the plugins
/// decide (so they see the room the reservation takes over) and come back
/// after; NodeNUMAResource and DeviceShare get them as a
/// [`pre_allocation::HandOver`] and make the reservation take their cpusets
/// and devices. One pod: feasible nodes with a nominated pod win over the
/// others; several (`enableMultiple`): the feasible nodes with the fewest
/// nominated pods win, a node taking none first. With pre-allocation
/// required, no node without a nomination is feasible.
pub fn place_reservation_pre_allocating(
    scheduler: &mut Scheduler,
    reservation: &Reservation,
    now: SystemTime,
) -> (Placement, Option<PreAllocated>) {
    let name = reservation.metadata.name.clone().unwrap_or_default();
    let mut placement = Placement {
        pod: format!("Reservation/{name}"),
        node: None,
        reasons: NodeMap::for_nodes_of(&scheduler.cache),
        scores: NodeMap::for_nodes_of(&scheduler.cache),
        annotations: BTreeMap::new(),
    };
    // What it would hold must be readable before it is placed anywhere.
    let checked = match lifecycle::reservation_allocatable(reservation) {
        Ok(allocatable) => pre_allocation::mode(reservation, &scheduler.pre_allocation)
            .map(|mode| (allocatable, mode))
            .map_err(str::to_string),
        Err(invalid) => Err(format!("reservation {name} is invalid: {invalid}")),
    };
    let (allocatable, mode) = match checked {
        Ok(fine) => fine,
        Err(reason) => {
            for node in scheduler.cache.nodes_sorted() {
                placement.reasons.insert(node.name.clone(), reason.clone());
            }
            return (placement, None);
        }
    };
    let template_spec = reservation.spec.template.spec.clone().unwrap_or_default();
    let pod = reserve_pod(reservation);
    let key = PodInfo::new(std::sync::Arc::new(pod.clone())).key;
    scheduler.apply(Change::Upsert(Object::Pod(pod.clone())));
    let mut nominated = pre_allocation::Nominations::default();
    if let Some(info) = scheduler.cache.pod(&key).cloned() {
        if let pre_allocation::Mode::On(options) = mode {
            let request = pre_allocation::Request {
                reserve_pod: &info,
                reservation,
                allocatable: &allocatable,
                options,
                settings: &scheduler.pre_allocation,
            };
            nominated = pre_allocation::nominate(&scheduler.cache, &request);
        }
        let mut eligible = Vec::new();
        for node in scheduler.cache.nodes_sorted() {
            if let Some(reason) = nominated.refused.get(&*node.name) {
                placement
                    .reasons
                    .insert(node.name.clone(), reason.to_string());
                continue;
            }
            let gone: Vec<&PodInfo> = nominated.on(&node.name).iter().map(|p| &**p).collect();
            let fit = node
                .node
                .as_deref()
                .map_or(Ok(()), |n| node_checks::check_node(&template_spec, n))
                .and_then(|()| node_checks::check_resources_without(&info, node, &gone));
            match fit {
                Ok(()) => eligible.push(node.name.to_string()),
                Err(reason) => {
                    placement.reasons.insert(node.name.clone(), reason);
                }
            }
        }
        for candidate in nominated.pods.values().flatten() {
            scheduler.apply(Change::Delete(Object::Pod((*candidate.pod).clone())));
        }
        if !nominated.pods.is_empty() {
            scheduler.hand_over = Some(Arc::new(pre_allocation::HandOver {
                reserve_pod: key.clone(),
                pods: nominated.pods.clone(),
            }));
        }
        match scheduler.pre_filter(&info, now) {
            Err(rejection) => {
                for node in eligible {
                    placement.reasons.insert(node, rejection.reason.to_string());
                }
            }
            Ok(state) => {
                let mut filtered = scheduler.filter_owned(&info, eligible, &state);
                placement.reasons.extend(named_reasons(filtered.failed));
                placement
                    .reasons
                    .extend(named_reasons(filtered.failed_unresolvable));
                if let pre_allocation::Mode::On(options) = mode {
                    let (kept, passed) =
                        prefer_pre_allocating(filtered.feasible, &nominated, options.multiple);
                    let reason = if options.multiple {
                        PASSED_OVER_FOR_FEWER_PRE_ALLOCATED
                    } else {
                        PASSED_OVER_FOR_PRE_ALLOCATION
                    };
                    for node in passed {
                        placement.reasons.insert(node, reason.to_string());
                    }
                    filtered.feasible = kept;
                }
                let mut totals = scheduler
                    .score_owned(&info, filtered.feasible, &state)
                    .totals;
                // kube-scheduler's own resource score, which it would have added (weight 1).
                for (node, total) in &mut totals {
                    if let Some(node_info) = scheduler.cache.node(node) {
                        let held = scheduler.held_on_node(node_info, now);
                        *total += node_checks::least_allocated_score(&info, node_info, &held);
                    }
                }
                placement
                    .scores
                    .extend(totals.iter().map(|(node, total)| (node.as_str(), *total)));
                reserve_best(scheduler, &key, totals, now, &mut placement);
            }
        }
        scheduler.hand_over = None;
        for candidate in nominated.pods.values().flatten() {
            scheduler.apply(Change::Upsert(Object::Pod((*candidate.pod).clone())));
        }
    }
    // The reservation, not its placeholder, holds the capacity from here on.
    scheduler.apply(Change::Delete(Object::Pod(pod)));
    let Some(node) = placement.node.clone() else {
        return (placement, None);
    };
    let mut placed = reservation.clone();
    // The devices and cpuset the reserve pod got stay with the reservation.
    let kept: Vec<(String, String)> = KEPT_ANNOTATIONS
        .iter()
        .filter_map(|key| {
            let value = placement.annotations.get(*key)?;
            Some((key.to_string(), value.clone()))
        })
        .collect();
    if !kept.is_empty() {
        placed
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend(kept);
    }
    placed.status = Some(lifecycle::available_status(
        reservation,
        &node,
        &allocatable,
        now,
    ));
    scheduler.apply(Change::Upsert(Object::Reservation(placed)));
    let chosen = nominated.pods.remove(&node).unwrap_or_default();
    let pre_allocated = pre_allocate(scheduler, reservation, &chosen);
    (placement, pre_allocated)
}

/// Splits the feasible nodes into those kept and those passed over for a
/// node where the reservation pre-allocates: one pod, nodes with a
/// nomination win (when any is feasible); several, the nodes with the
/// fewest nominated pods win.
fn prefer_pre_allocating(
    feasible: Vec<String>,
    nominated: &pre_allocation::Nominations,
    multiple: bool,
) -> (Vec<String>, Vec<String>) {
    let count = |node: &String| nominated.on(node).len();
    let wanted = if multiple {
        feasible.iter().map(count).min()
    } else {
        feasible.iter().map(count).max().filter(|&most| most > 0)
    };
    match wanted {
        Some(wanted) if multiple => feasible.into_iter().partition(|n| count(n) == wanted),
        Some(_) => feasible.into_iter().partition(|n| count(n) > 0),
        None => (feasible, Vec::new()),
    }
}

/// Marks `chosen` (pods on the reservation's node) allocated from it in
/// the cache and returns them as they were, with the annotation's value
/// the caller writes through; `None` when there are none.
fn pre_allocate(
    scheduler: &mut Scheduler,
    reservation: &Reservation,
    chosen: &[Arc<PodInfo>],
) -> Option<PreAllocated> {
    if chosen.is_empty() {
        return None;
    }
    let record = ReservationAllocated {
        name: reservation.metadata.name.clone().unwrap_or_default(),
        uid: reservation.metadata.uid.clone().unwrap_or_default(),
    };
    let allocation = format_json_annotation(ANNOTATION_RESERVATION_ALLOCATED, &record).ok()?;
    for candidate in chosen {
        // Only the pod's own copy in the cache: the caller writes it through.
        let mut allocated = (*candidate.pod).clone();
        allocated
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(
                ANNOTATION_RESERVATION_ALLOCATED.to_string(),
                allocation.clone(),
            );
        scheduler.apply(Change::Upsert(Object::Pod(allocated)));
    }
    Some(PreAllocated {
        pods: chosen.iter().map(|c| Arc::clone(&c.pod)).collect(),
        allocation,
    })
}

/// One line summing up why a placement found no node (for the Unschedulable
/// condition), in kube-scheduler's "0/N nodes are available" style.
pub fn unschedulable_message(placement: &Placement, nodes: usize) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for reason in placement.reasons.values() {
        *counts.entry(reason.as_str()).or_default() += 1;
    }
    let details: Vec<String> = counts
        .iter()
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect();
    if details.is_empty() {
        format!("0/{nodes} nodes are available.")
    } else {
        format!("0/{nodes} nodes are available: {}.", details.join(", "))
    }
}

/// Places every pending Reservation in the cache (name order) with
/// [`place_reservation`] (simulator).
pub fn schedule_pending_reservations(scheduler: &mut Scheduler, now: SystemTime) -> Vec<Placement> {
    let pending: Vec<Reservation> = scheduler
        .cache
        .reservations
        .values()
        .filter(|r| is_pending(r, now))
        .map(|r| (**r).clone())
        .collect();
    pending
        .iter()
        .map(|reservation| place_reservation(scheduler, reservation, now))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::cache::ClusterCache;
    use crate::framework::{CycleState, Plugin, PluginEntry, Rejection};
    use crate::testutil::*;

    fn cluster() -> Vec<Object> {
        let mut objects = vec![quota(
            "team",
            &[("cpu", "4")],
            &[("cpu", "40"), ("kubernetes.io/batch-cpu", "20000")],
            &[],
            &[],
        )];
        for (index, cpu) in ["4", "2", "8", "2"].iter().enumerate() {
            objects.push(node(
                &format!("n{index}"),
                &[
                    ("cpu", cpu),
                    ("memory", "32Gi"),
                    ("pods", "110"),
                    ("kubernetes.io/batch-cpu", "3000"),
                ],
            ));
        }
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i"];
        for (index, name) in names.iter().enumerate() {
            // Five batch pods for four nodes with room for one each.
            let requests: &[(&str, &str)] = if index % 2 == 1 {
                &[("cpu", "3"), ("memory", "1Gi")]
            } else {
                &[("kubernetes.io/batch-cpu", "2000")]
            };
            objects.push(pod(PodSpec {
                name,
                requests,
                labels: &[("quota.scheduling.koordinator.sh/name", "team")],
                priority: Some(if index % 2 == 1 { 9500 } else { 5500 }),
                ..PodSpec::default()
            }));
        }
        objects
    }

    /// Reference: the extender's path (filter, score by name, full reserve).
    fn schedule_by_name(scheduler: &mut Scheduler, key: &str, now: SystemTime) -> Placement {
        let pod = scheduler.cache.pod(key).unwrap().clone();
        let mut placement = Placement {
            pod: key.to_string(),
            node: None,
            reasons: NodeMap::new(),
            scores: NodeMap::new(),
            annotations: BTreeMap::new(),
        };
        let Ok(state) = scheduler.pre_filter(&pod, now) else {
            for node in scheduler.cache.nodes_sorted() {
                placement
                    .reasons
                    .insert(Arc::clone(&node.name), "pre-filter".into());
            }
            return placement;
        };
        let mut filtered = scheduler.filter(&pod, None, &state);
        let feasible = std::mem::take(&mut filtered.feasible);
        let scores = scheduler.score_owned(&pod, feasible, &state);
        placement.reasons = named_reasons(filtered.failed).collect();
        placement
            .reasons
            .extend(named_reasons(filtered.failed_unresolvable));
        placement.scores = scores
            .totals
            .iter()
            .map(|(node, total)| (node.as_str(), *total))
            .collect();
        if let Some(best) = scores.best().map(str::to_string) {
            let reserved = scheduler.reserve(key, &best, now).unwrap();
            placement.node = Some(best);
            placement.annotations = reserved.annotations;
        }
        placement
    }

    #[test]
    fn reusing_the_pre_filter_state_places_pods_like_the_by_name_path() {
        let mut fast = scheduler("");
        let mut reference = scheduler("");
        load(&mut fast, cluster());
        load(&mut reference, cluster());
        let mut placed = 0;
        for name in ["a", "b", "c", "d", "e", "f", "g", "h", "i"] {
            let key = format!("default/{name}");
            let got = schedule_one(&mut fast, &key, t0(), true);
            let want = schedule_by_name(&mut reference, &key, t0());
            assert_eq!(got.node, want.node, "{key}");
            assert_eq!(got.scores, want.scores, "{key}");
            assert_eq!(got.annotations, want.annotations, "{key}");
            if want.reasons.values().all(|r| r != "pre-filter") {
                assert_eq!(got.reasons, want.reasons, "{key}");
            }
            placed += usize::from(got.node.is_some());
        }
        // The cluster is sized so that some pods fit and some do not.
        assert!(placed > 0 && placed < 9, "placed {placed}");
    }

    /// Details kept by node index and named once every pod is placed (as
    /// `simulate` does) equal the by-name path's, taken right after each
    /// pod; without details only the chosen nodes and annotations are
    /// reported.
    #[test]
    fn details_named_at_the_end_match_details_named_per_pod() {
        let mut deferred = scheduler("");
        let mut at_once = scheduler("");
        let mut lean = scheduler("");
        for s in [&mut deferred, &mut at_once, &mut lean] {
            load(s, cluster());
        }
        let keys: Vec<String> = ["a", "b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .map(|name| format!("default/{name}"))
            .collect();
        let kept: Vec<ScheduledPod> = keys
            .iter()
            .map(|key| schedule_one_indexed(&mut deferred, key, t0(), true))
            .collect();
        let named: Vec<Placement> = kept
            .into_iter()
            .map(|s| s.resolve(&deferred.cache))
            .collect();
        let mut rejected = 0;
        for (key, got) in keys.iter().zip(named) {
            let want = schedule_by_name(&mut at_once, key, t0());
            assert_eq!(got.node, want.node, "{key}");
            assert_eq!(got.scores, want.scores, "{key}");
            assert_eq!(got.annotations, want.annotations, "{key}");
            if want.reasons.values().all(|r| r != "pre-filter") {
                assert_eq!(got.reasons, want.reasons, "{key}");
            } else {
                assert_eq!(
                    got.reasons.keys().collect::<Vec<_>>(),
                    want.reasons.keys().collect::<Vec<_>>()
                );
            }
            let bare = schedule_one(&mut lean, key, t0(), false);
            assert_eq!(
                (&bare.node, &bare.annotations),
                (&want.node, &want.annotations)
            );
            assert!(bare.reasons.is_empty() && bare.scores.is_empty(), "{key}");
            rejected += want.reasons.len();
            assert_eq!(
                want.reasons.len() + want.scores.len(),
                4,
                "{key}: every node once"
            );
        }
        assert!(
            rejected > 0,
            "some nodes are refused, so reasons are compared"
        );
    }

    /// Scores `refused` highest but refuses to reserve on it.
    #[derive(Clone)]
    struct RefuseBest {
        refused: &'static str,
    }

    impl Plugin for RefuseBest {
        fn name(&self) -> &'static str {
            "RefuseBest"
        }

        fn scores(&self) -> bool {
            true
        }

        fn score(&self, _: &PodInfo, node: &NodeInfo, _: &ClusterCache, _: &CycleState) -> i64 {
            if *node.name == *self.refused {
                100
            } else if &*node.name == "n2" {
                50
            } else {
                10
            }
        }

        fn reserve(
            &mut self,
            _: &PodInfo,
            node: &str,
            _: &ClusterCache,
            _: &CycleState,
        ) -> Result<(), Rejection> {
            if node == self.refused {
                Err(Rejection::unschedulable("refused for the test"))
            } else {
                Ok(())
            }
        }
    }

    /// Answers `prefers` but leaves `has_preferences` at its default.
    #[derive(Clone)]
    struct PrefersWithoutSaying;

    impl Plugin for PrefersWithoutSaying {
        fn name(&self) -> &'static str {
            "PrefersWithoutSaying"
        }

        fn prefers(
            &self,
            _: &PodInfo,
            node: &NodeInfo,
            _: &ClusterCache,
            _: &CycleState,
        ) -> Option<bool> {
            Some(&*node.name == "n2")
        }
    }

    #[test]
    #[should_panic(expected = "PrefersWithoutSaying answers prefers()")]
    fn a_plugin_answering_prefers_without_has_preferences_fails_in_debug_builds() {
        let plugin = PluginEntry {
            plugin: Box::new(PrefersWithoutSaying),
            filter: true,
            score_weight: 1,
        };
        let mut scheduler = Scheduler::new(vec![plugin], std::time::Duration::from_secs(60));
        load(&mut scheduler, cluster());
        schedule_one(&mut scheduler, "default/a", t0(), true);
    }

    #[test]
    fn a_failed_reservation_on_the_best_node_falls_back_to_the_next_best() {
        let plugin = PluginEntry {
            plugin: Box::new(RefuseBest { refused: "n1" }),
            filter: true,
            score_weight: 1,
        };
        let mut scheduler = Scheduler::new(vec![plugin], std::time::Duration::from_secs(60));
        load(&mut scheduler, cluster());
        let placement = schedule_one(&mut scheduler, "default/a", t0(), true);
        assert_eq!(placement.node.as_deref(), Some("n2"));
        assert!(
            placement.reasons["n1"].contains("refused for the test"),
            "{:?}",
            placement.reasons
        );
        assert!(!placement.scores.contains_key("n1"));
        assert_eq!(placement.scores["n2"], 50);
        assert_eq!(
            scheduler.cache.pod("default/a").unwrap().node.as_deref(),
            Some("n2")
        );
    }
}
