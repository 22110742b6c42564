//! Reservation: capacity an Available Reservation holds on its node is
//! usable only by its owners. Owners may take it (Aligned: reservation plus
//! free node capacity; Restricted: the reserved resources only from the
//! reservation), non-owners see it as used. Allocate-once reservations close
//! after their first owner; expired ones (ttl / expires) hold nothing. The
//! owner pod gets the reservation-allocated annotation at bind.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use apis::configuration::selector::CompiledSelector;
use apis::extension::reservation::{
    ANNOTATION_RESERVATION_ALLOCATED, LABEL_RESERVATION_ORDER, ReservationAllocated,
    get_reservation_affinity, get_reservation_allocated, is_reservation_ignored,
};
use apis::scheduling::v1alpha1::{Reservation, ReservationAllocatePolicy, ReservationOwner};
use serde::Deserialize;

pub mod lifecycle;
pub mod pre_allocation;
pub mod pre_allocation_settings;

use crate::cache::{ClusterCache, ClusterEvent, NodeInfo, ObjectKind, PodInfo};
use crate::config::{ConfigError, parse_args};
use crate::cow::{CowMap, CowVec};
use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin, Rejection};
use crate::node_checks;
use crate::resources::{InvalidAmount, Resources, exact_resources};

pub const NAME: &str = "Reservation";

pub const REASON_AFFINITY_NOT_MATCHED: &str = "node(s) didn't match reservation affinity";
/// (ours) Why a feasible node is passed over for one where a reservation the
/// pod owns fits: upstream reaches the same placement through a score weight.
pub const REASON_RESERVATION_ELSEWHERE: &str =
    "node(s) passed over for a node where a reservation of the pod fits";

/// `ReservationArgs` (only the fields this extender uses).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationArgs {
    #[serde(default)]
    pub enable_preemption: Option<bool>,
    /// Seconds an expired or succeeded reservation is kept; 0 = the default (24h).
    #[serde(default)]
    pub gc_duration_seconds: i64,
    /// Seconds between garbage-collection passes; 0 = the default (60s).
    #[serde(default)]
    pub gc_interval_seconds: i64,
    #[serde(default)]
    pub disable_garbage_collection: bool,
    #[serde(default)]
    pub pre_allocation_config: Option<pre_allocation_settings::PreAllocationConfig>,
}

impl ReservationArgs {
    /// How long ended reservations are kept.
    pub fn gc_duration(&self) -> Duration {
        positive_secs(self.gc_duration_seconds).unwrap_or(lifecycle::DEFAULT_GC_DURATION)
    }

    /// Time between garbage-collection passes.
    pub fn gc_interval(&self) -> Duration {
        positive_secs(self.gc_interval_seconds).unwrap_or(lifecycle::DEFAULT_GC_INTERVAL)
    }

    /// `preAllocationConfig`, checked, with upstream's defaults.
    pub fn pre_allocation(&self) -> Result<pre_allocation_settings::Settings, ConfigError> {
        pre_allocation_settings::Settings::from_config(self.pre_allocation_config.as_ref()).map_err(
            |message| ConfigError::InvalidArgs {
                plugin: NAME.to_string(),
                message,
            },
        )
    }
}

fn positive_secs(seconds: i64) -> Option<Duration> {
    u64::try_from(seconds)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let raw: ReservationArgs = parse_args(NAME, args)?;
    // Read by the placement (see `build_scheduler`); refused here so a bad
    // key stops the scheduler at start.
    raw.pre_allocation()?;
    Ok(Box::new(ReservationPlugin::default()))
}

/// What the plugin keeps of one Reservation.
#[derive(Debug, Clone)]
pub struct ReservationInfo {
    pub name: String,
    pub uid: String,
    pub node: Option<String>,
    pub available: bool,
    pub labels: BTreeMap<String, String>,
    pub allocatable: Resources,
    pub owners: Vec<ReservationOwner>,
    /// Each owner's label selector parsed once (`None`: no selector, or one
    /// that does not parse and so matches no pod); every pod's pre-filter
    /// asks every reservation whether it is an owner.
    owner_selectors: Vec<Option<CompiledSelector>>,
    pub allocate_once: bool,
    pub restricted: bool,
    /// When it stops being usable.
    pub expires_at: Option<SystemTime>,
    pub order: i64,
    /// `spec.unschedulable`: closed to owners that do not tolerate it.
    pub unschedulable: bool,
    /// `spec.taints` owners with a reservation affinity must tolerate.
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
}

/// What a reservation holds: `status.allocatable` once placed, else its
/// template's requests with the resize annotation
/// ([`lifecycle::reservation_allocatable`]), every amount exact (not
/// negative, not beyond 64 bits); or the first that is not.
pub fn reservation_amounts(reservation: &Reservation) -> Result<Resources, InvalidAmount> {
    match reservation
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
    {
        Some(list) => exact_resources(list, lifecycle::STATUS_ALLOCATABLE),
        None => lifecycle::reservation_allocatable(reservation),
    }
}

impl ReservationInfo {
    /// The reservation as the plugin uses it; an error when an amount it
    /// holds cannot be read (see [`reservation_amounts`]): such a
    /// reservation is ignored — it holds nothing and serves nobody.
    pub fn from_crd(reservation: &Reservation) -> Result<Self, InvalidAmount> {
        let meta = &reservation.metadata;
        let spec = &reservation.spec;
        let allocatable = reservation_amounts(reservation)?;
        let expires_at = lifecycle::expiry_time(reservation);
        let labels = meta.labels.clone().unwrap_or_default();
        Ok(Self {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            node: reservation.node_name().map(str::to_string),
            available: reservation.is_available(),
            order: labels
                .get(LABEL_RESERVATION_ORDER)
                .and_then(|v| v.parse().ok())
                .unwrap_or(i64::MAX),
            labels,
            allocatable,
            owners: spec.owners.clone(),
            owner_selectors: spec
                .owners
                .iter()
                .map(|owner| {
                    owner
                        .label_selector
                        .as_ref()
                        .and_then(|selector| CompiledSelector::new(selector).ok())
                })
                .collect(),
            allocate_once: spec.allocate_once.unwrap_or(true),
            restricted: spec.allocate_policy == Some(ReservationAllocatePolicy::Restricted),
            expires_at,
            unschedulable: spec.unschedulable.unwrap_or(false),
            taints: spec.taints.clone().unwrap_or_default(),
        })
    }

    /// Index key of its owners' allocations: the uid, or the name without one.
    fn allocation_key(&self) -> &str {
        if self.uid.is_empty() {
            &self.name
        } else {
            &self.uid
        }
    }

    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }

    /// Whether `pod` is one of the owners.
    pub fn is_owner(&self, pod: &PodInfo) -> bool {
        if is_reservation_ignored(pod.labels()) {
            return false;
        }
        self.owners
            .iter()
            .zip(&self.owner_selectors)
            .any(|(owner, selector)| owner_matches(owner, selector.as_ref(), pod))
    }
}

/// `selector`: the owner's label selector, compiled (`None` when it has
/// none or it does not parse).
fn owner_matches(
    owner: &ReservationOwner,
    selector: Option<&CompiledSelector>,
    pod: &PodInfo,
) -> bool {
    let mut any_term = false;
    if let Some(object) = &owner.object {
        any_term = true;
        let uid_ok = object
            .uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || u == pod.uid);
        let name_ok = object
            .name
            .as_deref()
            .is_none_or(|n| n.is_empty() || n == pod.name);
        let ns_ok = object
            .namespace
            .as_deref()
            .is_none_or(|n| n.is_empty() || n == pod.namespace);
        if !(uid_ok && name_ok && ns_ok) {
            return false;
        }
    }
    if let Some(controller) = &owner.controller {
        any_term = true;
        let wanted = &controller.owner_reference;
        let ns_ok = controller
            .namespace
            .as_deref()
            .is_none_or(|n| n.is_empty() || n == pod.namespace);
        let owned = pod.pod.metadata.owner_references.iter().flatten().any(|r| {
            r.controller == Some(true)
                && (wanted.uid.is_empty() || r.uid == wanted.uid)
                && (wanted.name.is_empty() || r.name == wanted.name)
                && (wanted.kind.is_empty() || r.kind == wanted.kind)
        });
        if !(ns_ok && owned) {
            return false;
        }
    }
    if owner.label_selector.is_some() {
        any_term = true;
        // A selector that does not parse matches nothing.
        if !selector.is_some_and(|s| s.matches(pod.labels())) {
            return false;
        }
    }
    any_term
}

/// Whether an owner with reservation affinity `affinity` may use `r`: by
/// name alone when it names one; else `r` must not be unschedulable (unless
/// tolerated), its NoSchedule/NoExecute taints tolerated, and its labels laid
/// over its node's labels must match the selector and the selector terms
/// (`metadata.name` in match fields is the reservation's name).
fn affinity_matches(
    affinity: &apis::extension::reservation::ReservationAffinity,
    r: &ReservationInfo,
    cache: &ClusterCache,
) -> bool {
    use k8s_openapi::api::core::v1::Taint;

    if !affinity.name.is_empty() {
        return affinity.name == r.name;
    }
    let tolerated = |taint: &Taint| {
        affinity
            .tolerations
            .iter()
            .any(|t| node_checks::tolerates(t, taint))
    };
    let cordon = Taint {
        key: node_checks::TAINT_UNSCHEDULABLE.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    if r.unschedulable && !tolerated(&cordon) {
        return false;
    }
    let blocking = |t: &&Taint| t.effect == "NoSchedule" || t.effect == "NoExecute";
    if r.taints.iter().filter(blocking).any(|t| !tolerated(t)) {
        return false;
    }
    let mut labels = r
        .node
        .as_deref()
        .and_then(|n| cache.node(n))
        .map(|n| n.labels().clone())
        .unwrap_or_default();
    labels.extend(r.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    let selector_ok = affinity
        .reservation_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v));
    let terms_ok = affinity
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .is_none_or(|required| {
            required
                .reservation_selector_terms
                .iter()
                .any(|term| node_checks::term_matches(term, &labels, &r.name))
        });
    selector_ok && terms_ok
}

/// The pod's choice of reservation, made in pre-filter.
#[derive(Debug, Clone, Default)]
struct PodState {
    /// Reservation names the pod owns and may use (affinity applied), best first.
    candidates: Vec<String>,
    /// The pod must run on a reservation (reservation affinity).
    required: bool,
}

const STATE_KEY: &str = "Reservation/pod";

/// See the module docs.
///
/// Every map and per-node array is a copy-on-write container
/// ([`crate::cow`]): a clone (a published snapshot of the state) shares
/// them, and a write after it copies one shard or chunk.
#[derive(Default, Clone)]
pub struct ReservationPlugin {
    /// Reservation key (its name) → what the plugin keeps of it. Unordered:
    /// [`Plugin::pre_filter`] sorts what it takes from it.
    reservations: CowMap<String, ReservationInfo>,
    /// Node name → keys of the reservations placed on it; per-node checks
    /// run for every node of every pod, so they must not scan them all.
    by_node: CowMap<String, BTreeSet<String>>,
    /// Reservation uid → pod key → requests of the owner pod on it (read
    /// for each reservation on a node in per-node checks). The inner map
    /// holds the owners on one reservation (so on one node): a shard copy
    /// copies those of about 1/256 of the reservations.
    allocated: CowMap<String, HashMap<String, Resources>>,
    /// Pod key → reservation chosen in reserve, for pre-bind.
    pending: CowMap<String, (String, String)>,
    /// By [`NodeInfo::index`]: whether [`Self::by_node`] lists the node,
    /// kept on Node and Reservation events. A node known to have none holds
    /// nothing for owners, so the per-node check of a pod owning no
    /// reservation skips it without looking it up by name. `None` (or past
    /// the end): not known, e.g. a node only pods have named so far.
    node_marks: CowVec<Option<bool>>,
    /// By [`NodeInfo::index`]: what [`Self::held`] sums for the node with
    /// nothing skipped, over the reservations usable but for expiry, valid
    /// while none of them has expired. Non-owner pods check every node
    /// with reservations on every cycle; this keeps that check from
    /// summing each reservation's allocations again. Kept on the events,
    /// reserves and unreserves that change reservations or allocations.
    /// `None` (or past the end): not known, [`Self::held`] answers.
    held_by_node: CowVec<Option<HeldOnNode>>,
}

/// [`ReservationPlugin::held_by_node`]'s entry.
#[derive(Debug, Clone)]
struct HeldOnNode {
    held: Resources,
    /// The earliest expiry among the summed reservations: from then on the
    /// sum may count one that holds nothing.
    valid_until: Option<SystemTime>,
}

impl ReservationPlugin {
    /// Whether reservations may hold capacity on the node.
    fn may_hold_on(&self, node: &NodeInfo) -> bool {
        !matches!(self.node_marks.get(node.index), Some(Some(false)))
    }

    /// Recomputes the mark of the node named `node`; a node gone from the
    /// cache keeps a stale mark nobody reads (indexes are never reused).
    fn refresh_node_mark(&mut self, node: &str, cache: &ClusterCache) {
        let Some(info) = cache.node(node) else {
            return;
        };
        if self.node_marks.len() <= info.index {
            self.node_marks.resize(info.index + 1, None);
        }
        let mark = Some(self.by_node.contains_key(node));
        if let Some(slot) = self.node_marks.get_mut(info.index) {
            *slot = mark;
        }
    }

    /// Recomputes [`Self::held_by_node`] for the node named `node`.
    fn refresh_held(&mut self, node: &str, cache: &ClusterCache) {
        let Some(info) = cache.node(node) else {
            return;
        };
        let mut held = Resources::new();
        let mut valid_until: Option<SystemTime> = None;
        for info in self
            .by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|key| self.reservations.get(key))
            .filter(|r| self.usable_but_for_expiry(r))
        {
            held.add(&self.remaining(info));
            if let Some(at) = info.expires_at {
                valid_until = Some(valid_until.map_or(at, |until| until.min(at)));
            }
        }
        if self.held_by_node.len() <= info.index {
            self.held_by_node.resize(info.index + 1, None);
        }
        if let Some(slot) = self.held_by_node.get_mut(info.index) {
            *slot = Some(HeldOnNode { held, valid_until });
        }
    }

    /// Refreshes the nodes of the reservations whose allocations are kept
    /// under `allocation_key`.
    fn refresh_held_for_allocation(&mut self, allocation_key: &str, cache: &ClusterCache) {
        let nodes: Vec<String> = self
            .reservations
            .values()
            .filter(|r| r.allocation_key() == allocation_key)
            .filter_map(|r| r.node.clone())
            .collect();
        for node in nodes {
            self.refresh_held(&node, cache);
        }
    }

    /// [`Self::held`] with nothing skipped, from [`Self::held_by_node`]
    /// when that is known and still valid at `now`.
    fn held_cached(&self, node: &NodeInfo, now: SystemTime) -> Option<&Resources> {
        self.held_by_node
            .get(node.index)?
            .as_ref()
            .filter(|entry| entry.valid_until.is_none_or(|until| now < until))
            .map(|entry| &entry.held)
    }

    fn allocated_of(&self, info: &ReservationInfo) -> Resources {
        let mut total = Resources::new();
        for requests in self
            .allocated
            .get(info.allocation_key())
            .into_iter()
            .flat_map(|m| m.values())
        {
            total.add(requests);
        }
        total
    }

    /// Open for allocation at `now`.
    fn usable(&self, info: &ReservationInfo, now: SystemTime) -> bool {
        !info.is_expired(now) && self.usable_but_for_expiry(info)
    }

    /// [`Self::usable`] at a time before its expiry.
    fn usable_but_for_expiry(&self, info: &ReservationInfo) -> bool {
        info.available
            && info.node.is_some()
            && !(info.allocate_once
                && self
                    .allocated
                    .get(info.allocation_key())
                    .is_some_and(|m| !m.is_empty()))
    }

    /// What a reservation still holds for its owners.
    fn remaining(&self, info: &ReservationInfo) -> Resources {
        let mut remaining = info.allocatable.clone();
        remaining.sub(&self.allocated_of(info));
        let mut clamped = Resources::new();
        for (name, amount) in remaining.iter() {
            clamped.set(name, amount.max(0));
        }
        clamped
    }

    fn on_node<'a>(
        &'a self,
        node: &'a str,
        now: SystemTime,
    ) -> impl Iterator<Item = &'a ReservationInfo> + 'a {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|key| self.reservations.get(key))
            .filter(move |r| self.usable(r, now))
    }

    fn forget_placement(&mut self, key: &str) {
        let Some(node) = self.reservations.get(key).and_then(|r| r.node.clone()) else {
            return;
        };
        if let Some(keys) = self.by_node.get_mut(&node) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_node.remove(&node);
            }
        }
    }

    /// Capacity on the node held for owners, except `skip`'s.
    fn held(&self, node: &str, now: SystemTime, skip: Option<&str>) -> Resources {
        let mut held = Resources::new();
        for info in self.on_node(node, now) {
            if Some(info.name.as_str()) != skip {
                held.add(&self.remaining(info));
            }
        }
        held
    }

    /// Checks `pod` against the node's free capacity minus `held`; resources
    /// nothing holds are left to kube-scheduler's own fit check.
    fn fits(pod: &PodInfo, node: &NodeInfo, held: &Resources) -> Result<(), String> {
        for (name, amount) in pod.requests.iter() {
            let held_here = held.get(name);
            if held_here == 0 {
                continue;
            }
            let free = node.allocatable.get(name) - node.requested.get(name) - held_here;
            if amount > free {
                return Err(format!("Insufficient {name} (held by reservations)"));
            }
        }
        Ok(())
    }

    /// The first candidate reservation on the node the pod fits in.
    fn choose(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        state: &PodState,
        now: SystemTime,
    ) -> Option<&ReservationInfo> {
        state
            .candidates
            .iter()
            .filter_map(|name| self.reservations.get(name))
            .filter(|r| r.node.as_deref() == Some(&*node.name))
            .find(|info| {
                let remaining = self.remaining(info);
                if info.restricted
                    && info
                        .allocatable
                        .iter()
                        .any(|(name, _)| pod.requests.get(name) > remaining.get(name))
                {
                    return false;
                }
                // The reservation's own capacity is not in `requested`, so
                // only the other reservations on the node count against it.
                let held = self.held(&node.name, now, Some(&info.name));
                Self::fits(pod, node, &held).is_ok()
            })
    }
}

impl Plugin for ReservationPlugin {
    fn held_on_node(&self, node: &NodeInfo, now: SystemTime) -> Option<Resources> {
        if !self.may_hold_on(node) {
            return None;
        }
        Some(match self.held_cached(node, now) {
            Some(held) => held.clone(),
            None => self.held(&node.name, now, None),
        })
    }

    fn name(&self) -> &'static str {
        NAME
    }

    /// A pod running on a reservation's resources may only be evicted for
    /// another owner of that reservation: the capacity is the owners', so
    /// evicting it frees nothing for anyone else (upstream: pods outside a
    /// reservation cannot preempt pods in it).
    fn protects_victims(
        &self,
        preemptor: &PodInfo,
        victims: &[&PodInfo],
        _cache: &ClusterCache,
    ) -> Vec<Option<String>> {
        victims
            .iter()
            .map(|victim| {
                let reservation = allocated_from(victim)?;
                match self.reservations.get(&reservation) {
                    Some(info) if !info.is_owner(preemptor) => Some(format!(
                        "pod runs on reservation {reservation}, and the preemptor is not one of its owners"
                    )),
                    // An owner may preempt; a reservation gone from the
                    // cache leaves plain node capacity.
                    _ => None,
                }
            })
            .collect()
    }

    fn on_event(&mut self, event: &ClusterEvent, cache: &ClusterCache) {
        match event {
            ClusterEvent::Object {
                kind: ObjectKind::Reservation,
                key,
            } => {
                let old_node = self.reservations.get(key).and_then(|r| r.node.clone());
                self.forget_placement(key);
                // One whose amounts cannot be read is ignored (the shell
                // reported it where it entered).
                let new_node = match cache
                    .reservations
                    .get(key)
                    .and_then(|r| ReservationInfo::from_crd(r).ok())
                {
                    Some(info) => {
                        if let Some(node) = &info.node {
                            self.by_node
                                .get_or_insert_with(node.clone(), BTreeSet::new)
                                .insert(key.clone());
                        }
                        let node = info.node.clone();
                        self.reservations.insert(key.clone(), info);
                        node
                    }
                    None => {
                        self.reservations.remove(key);
                        None
                    }
                };
                for node in old_node.iter().chain(&new_node) {
                    self.refresh_node_mark(node, cache);
                    self.refresh_held(node, cache);
                }
            }
            ClusterEvent::Object {
                kind: ObjectKind::Node,
                key,
            } => {
                self.refresh_node_mark(key, cache);
                self.refresh_held(key, cache);
            }
            ClusterEvent::Pod { old, new, .. } => {
                let mut changed: Vec<String> = Vec::new();
                if let Some(old) = old {
                    // Found by reading first: only the entries that hold the
                    // pod are written (and their shards copied).
                    let holding: Vec<String> = self
                        .allocated
                        .iter()
                        .filter(|(_, pods)| pods.contains_key(&old.key))
                        .map(|(allocation_key, _)| allocation_key.clone())
                        .collect();
                    for allocation_key in holding {
                        if let Some(pods) = self.allocated.get_mut(&allocation_key)
                            && pods.remove(&old.key).is_some()
                        {
                            changed.push(allocation_key);
                        }
                    }
                }
                if let Some(new) = new
                    && new.node.is_some()
                {
                    self.pending.remove(&new.key);
                    if let Ok(Some(allocated)) = get_reservation_allocated(new.annotations()) {
                        let allocation_key = if allocated.uid.is_empty() {
                            allocated.name
                        } else {
                            allocated.uid
                        };
                        self.allocated
                            .get_or_insert_with(allocation_key.clone(), HashMap::new)
                            .insert(new.key.clone(), new.requests.clone());
                        changed.push(allocation_key);
                    }
                }
                for allocation_key in changed {
                    self.refresh_held_for_allocation(&allocation_key, cache);
                }
            }
            _ => {}
        }
    }

    fn pre_filter(
        &self,
        pod: &PodInfo,
        cache: &ClusterCache,
        state: &mut CycleState,
    ) -> Result<(), Rejection> {
        if self.reservations.is_empty() {
            return Ok(());
        }
        let affinity = get_reservation_affinity(pod.annotations())
            .map_err(|e| Rejection::unresolvable(e.to_string()))?;
        let now = state.now;
        let mut candidates: Vec<&ReservationInfo> = self
            .reservations
            .values()
            .filter(|r| self.usable(r, now) && r.is_owner(pod))
            .filter(|r| match &affinity {
                None => !r.unschedulable,
                Some(a) => affinity_matches(a, r, cache),
            })
            .collect();
        candidates.sort_by(|a, b| a.order.cmp(&b.order).then_with(|| a.name.cmp(&b.name)));
        state.write(
            STATE_KEY,
            PodState {
                candidates: candidates.iter().map(|r| r.name.clone()).collect(),
                required: affinity.is_some(),
            },
        );
        Ok(())
    }

    fn filter(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        let Some(pod_state) = state.read::<PodState>(STATE_KEY) else {
            return Ok(());
        };
        if !pod_state.candidates.is_empty()
            && self.choose(pod, node, pod_state, state.now).is_some()
        {
            return Ok(());
        }
        if pod_state.required {
            return Err(Rejection::unresolvable(REASON_AFFINITY_NOT_MATCHED));
        }
        if !self.may_hold_on(node) {
            // Nothing is held here: `held` would be empty and `fits` pass.
            return Ok(());
        }
        match self.held_cached(node, state.now) {
            Some(held) => Self::fits(pod, node, held),
            None => Self::fits(pod, node, &self.held(&node.name, state.now, None)),
        }
        .map_err(Rejection::unschedulable)
    }

    /// An owner pod goes to a node where one of its reservations fits
    /// whenever a feasible node has one (upstream's weight 5000).
    fn prefers(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> Option<bool> {
        let pod_state = state.read::<PodState>(STATE_KEY)?;
        if pod_state.candidates.is_empty() {
            return None;
        }
        // Fully, not just against other reservations' holds: the node is
        // only worth insisting on if the pod really fits there.
        let Some(chosen) = self.choose(pod, node, pod_state, state.now) else {
            return Some(false);
        };
        let held = self.held(&node.name, state.now, Some(&chosen.name));
        let fits = pod.requests.iter().all(|(name, amount)| {
            amount <= node.allocatable.get(name) - node.requested.get(name) - held.get(name)
        });
        Some(fits)
    }

    fn has_preferences(&self, _pod: &PodInfo, state: &CycleState) -> bool {
        state
            .read::<PodState>(STATE_KEY)
            .is_some_and(|s| !s.candidates.is_empty())
    }

    fn preference_reason(&self) -> &'static str {
        REASON_RESERVATION_ELSEWHERE
    }

    /// The nodes of the pod's reservations, in the order they are chosen.
    fn preferred_nodes(&self, _pod: &PodInfo, state: &CycleState) -> Vec<String> {
        let Some(pod_state) = state.read::<PodState>(STATE_KEY) else {
            return Vec::new();
        };
        let mut nodes: Vec<String> = Vec::new();
        for node in pod_state
            .candidates
            .iter()
            .filter_map(|name| self.reservations.get(name))
            .filter_map(|r| r.node.clone())
        {
            if !nodes.contains(&node) {
                nodes.push(node);
            }
        }
        nodes
    }

    /// Only with reservations around, so the extender's score scaling is
    /// unchanged in clusters that have none.
    fn scores(&self) -> bool {
        !self.reservations.is_empty()
    }

    /// Owner pods prefer nodes where one of their reservations fits them.
    fn score(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> i64 {
        match state.read::<PodState>(STATE_KEY) {
            Some(s) if self.choose(pod, node, s, state.now).is_some() => MAX_NODE_SCORE,
            _ => 0,
        }
    }

    /// A pod owning no reservation scores 0 everywhere ([`Self::choose`]
    /// has nothing to choose from), without asking node by node.
    fn score_all(
        &self,
        pod: &PodInfo,
        nodes: &[Option<&NodeInfo>],
        _cache: &ClusterCache,
        state: &CycleState,
        scores: &mut [i64],
    ) {
        let pod_state = state
            .read::<PodState>(STATE_KEY)
            .filter(|s| !s.candidates.is_empty());
        for (slot, info) in scores.iter_mut().zip(nodes) {
            *slot = match (pod_state, info) {
                (Some(s), Some(node)) if self.choose(pod, node, s, state.now).is_some() => {
                    MAX_NODE_SCORE
                }
                _ => 0,
            };
        }
    }

    fn reserve(
        &mut self,
        pod: &PodInfo,
        node: &str,
        cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        let Some(pod_state) = state.read::<PodState>(STATE_KEY) else {
            return Ok(());
        };
        let Some(info) = cache.node(node) else {
            return Ok(());
        };
        let Some(chosen) = self.choose(pod, info, pod_state, state.now) else {
            return Ok(());
        };
        let (name, uid) = (chosen.name.clone(), chosen.uid.clone());
        let allocation_key = chosen.allocation_key().to_string();
        self.allocated
            .get_or_insert_with(allocation_key.clone(), HashMap::new)
            .insert(pod.key.clone(), pod.requests.clone());
        self.pending.insert(pod.key.clone(), (name, uid));
        self.refresh_held_for_allocation(&allocation_key, cache);
        Ok(())
    }

    fn unreserve(&mut self, pod: &PodInfo, _node: &str, cache: &ClusterCache) {
        if let Some((name, uid)) = self.pending.remove(&pod.key) {
            let allocation_key = if uid.is_empty() { name } else { uid };
            if let Some(pods) = self.allocated.get_mut(&allocation_key) {
                pods.remove(&pod.key);
                self.refresh_held_for_allocation(&allocation_key, cache);
            }
        }
    }

    fn pre_bind(
        &self,
        pod: &PodInfo,
        _node: &str,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<BTreeMap<String, String>, Rejection> {
        let Some((name, uid)) = self.pending.get(&pod.key) else {
            return Ok(BTreeMap::new());
        };
        let value = serde_json::to_string(&ReservationAllocated {
            name: name.clone(),
            uid: uid.clone(),
        })
        .map_err(|e| Rejection::unresolvable(e.to_string()))?;
        Ok(BTreeMap::from([(
            ANNOTATION_RESERVATION_ALLOCATED.to_string(),
            value,
        )]))
    }
}

/// The reservations the pod owns and may use (affinity applied, names,
/// best first) and whether it must use one (reservation affinity), as this
/// cycle's pre-filter found them. The device and cpuset plugins free these
/// reservations' holds for it.
pub fn owned_reservations(state: &CycleState) -> (&[String], bool) {
    state
        .read::<PodState>(STATE_KEY)
        .map_or((&[], false), |s| (s.candidates.as_slice(), s.required))
}

/// Reserve-pod annotations a placed Reservation keeps: the devices and the
/// cpuset it holds for its owners.
pub const KEPT_ANNOTATIONS: [&str; 2] = [
    apis::extension::device_share::ANNOTATION_DEVICE_ALLOCATED,
    apis::extension::numa_aware::ANNOTATION_RESOURCE_STATUS,
];

/// The names of the placed Reservations a plugin keeps, by node, so its
/// per-node checks look at that node's reservations only instead of
/// scanning every reservation that holds cpusets or devices for every node
/// (a cost that grows with such reservations × nodes × pods).
///
/// Copy-on-write ([`CowMap`]): a clone of the plugin keeping it shares it.
#[derive(Debug, Clone, Default)]
pub struct PlacedByNode(CowMap<String, BTreeSet<String>>);

impl PlacedByNode {
    /// Records that reservation `name`, on node `from` before (if it was
    /// kept), is now on node `to` (None: no longer kept).
    pub fn moved(&mut self, name: &str, from: Option<&str>, to: Option<&str>) {
        if let Some(from) = from
            && let Some(names) = self.0.get_mut(from)
        {
            names.remove(name);
            if names.is_empty() {
                self.0.remove(from);
            }
        }
        if let Some(to) = to {
            self.0
                .get_or_insert_with(to.to_string(), BTreeSet::new)
                .insert(name.to_string());
        }
    }

    /// The reservations on `node`, in name order.
    pub fn on<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a String> + 'a {
        self.0.get(node).into_iter().flatten()
    }

    /// Whether any reservation is on `node`.
    pub fn any_on(&self, node: &str) -> bool {
        self.0.contains_key(node)
    }
}

/// What the device and cpuset plugins keep of a placed Reservation.
#[derive(Debug, Clone)]
pub struct Holder {
    pub name: String,
    pub node: String,
    pub allocate_once: bool,
    pub restricted: bool,
    pub expires_at: Option<SystemTime>,
}

impl Holder {
    /// None unless Available on a node.
    pub fn of(reservation: &Reservation) -> Option<Self> {
        if !reservation.is_available() {
            return None;
        }
        Some(Self {
            name: reservation.metadata.name.clone().unwrap_or_default(),
            node: reservation.node_name()?.to_string(),
            allocate_once: reservation.spec.allocate_once.unwrap_or(true),
            restricted: reservation.spec.allocate_policy
                == Some(ReservationAllocatePolicy::Restricted),
            expires_at: lifecycle::expiry_time(reservation),
        })
    }

    /// Whether it still holds at `now`, given whether an owner has used it.
    pub fn holds(&self, now: SystemTime, used_by_owner: bool) -> bool {
        self.expires_at.is_none_or(|at| at > now) && !(self.allocate_once && used_by_owner)
    }
}

/// The reservation (by name) a bound or assumed pod was allocated from.
pub fn allocated_from(pod: &PodInfo) -> Option<String> {
    get_reservation_allocated(pod.annotations())
        .ok()
        .flatten()
        .map(|a| a.name)
        .filter(|n| !n.is_empty())
}

/// Whether the reservation waits to be placed: Pending, on no node, not expired.
pub fn is_pending(reservation: &Reservation, now: SystemTime) -> bool {
    reservation.node_name().is_none()
        && reservation.phase() == apis::scheduling::v1alpha1::ReservationPhase::Pending
        && !lifecycle::needs_expiration(reservation, now)
}

/// The placeholder pod that stands for `reservation` in the pipeline: its
/// template, with the reservation's labels and annotations laid over the
/// template's, marked as a reserve pod. A node pinned in the template is
/// cleared here (the pod would otherwise count as bound); see
/// [`crate::placement::place_reservation`].
pub fn reserve_pod(reservation: &Reservation) -> k8s_openapi::api::core::v1::Pod {
    use apis::extension::reservation::{ANNOTATION_RESERVATION_NAME, ANNOTATION_RESERVE_POD};

    let name = reservation.metadata.name.clone().unwrap_or_default();
    let template = &reservation.spec.template;
    let mut metadata = template.metadata.clone().unwrap_or_default();
    metadata.name = Some(name.clone());
    metadata.namespace = None;
    metadata.uid = reservation.metadata.uid.clone();
    let labels = metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.extend(reservation.metadata.labels.clone().unwrap_or_default());
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.extend(reservation.metadata.annotations.clone().unwrap_or_default());
    annotations.insert(ANNOTATION_RESERVE_POD.to_string(), "true".to_string());
    annotations.insert(ANNOTATION_RESERVATION_NAME.to_string(), name);
    let mut spec = template.spec.clone();
    if let Some(spec) = spec.as_mut() {
        spec.node_name = None;
    }
    k8s_openapi::api::core::v1::Pod {
        metadata,
        spec,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::*;
    use crate::cache::Object;
    use crate::framework::{FilterOutcome, Scheduler};
    use crate::placement::place_reservation;
    use crate::testutil::{self, PodSpec, ReservationSpec, rfc3339, t0};

    fn reservation(name: &str, node: &str, cpu: &str, spec_extra: Value) -> Object {
        Object::Reservation(testutil::reservation(ReservationSpec {
            name,
            template: testutil::reservation_template(&[("cpu", cpu)]),
            labels: &[("pool", "a")],
            spec_extra,
            status: testutil::available_on(node, &[("cpu", cpu)]),
            ..Default::default()
        }))
    }

    fn cpu_pod(name: &str, cpu: &str, annotations: &[(&str, &str)]) -> Object {
        testutil::pod(PodSpec {
            name,
            requests: &[("cpu", cpu)],
            annotations,
            ..Default::default()
        })
    }

    fn cluster(objects: Vec<Object>) -> Scheduler {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "8"), ("memory", "16Gi")]),
                testutil::node("n2", &[("cpu", "8"), ("memory", "16Gi")]),
                testutil::pod(PodSpec {
                    name: "busy",
                    node: Some("n2"),
                    requests: &[("cpu", "6")],
                    ..Default::default()
                }),
            ],
        );
        testutil::load(&mut s, objects);
        s
    }

    fn allocated_of(annotations: &BTreeMap<String, String>) -> Option<ReservationAllocated> {
        annotations
            .get(ANNOTATION_RESERVATION_ALLOCATED)
            .map(|v| serde_json::from_str(v).unwrap())
    }

    /// The plugin's verdict on `node` for the pod `key`, pre-filter first.
    fn verdict(
        plugin: &ReservationPlugin,
        cache: &ClusterCache,
        key: &str,
        node: &str,
    ) -> Result<(), String> {
        let pod = cache.pod(key).unwrap().clone();
        let mut state = CycleState::new(t0());
        plugin
            .pre_filter(&pod, cache, &mut state)
            .map_err(|r| r.reason.to_string())?;
        plugin
            .filter(&pod, cache.node(node).unwrap(), cache, &state)
            .map_err(|r| r.reason.to_string())
    }

    #[test]
    fn a_clone_keeps_answering_as_before_while_the_original_changes() {
        use crate::cache::Change;
        let mut cache = ClusterCache::new();
        let mut plugin = ReservationPlugin::default();
        let apply = |plugin: &mut ReservationPlugin, cache: &mut ClusterCache, object| {
            let event = cache.apply(Change::Upsert(object));
            plugin.on_event(&event, cache);
        };
        for object in [
            testutil::node("n1", &[("cpu", "8")]),
            testutil::node("n2", &[("cpu", "8")]),
            reservation("r1", "n1", "4", json!({})),
            cpu_pod("stranger", "6", &[]),
            cpu_pod("owner", "6", &[]),
        ] {
            apply(&mut plugin, &mut cache, object);
        }
        let held = "Insufficient cpu (held by reservations)";
        let (snapshot, snapshot_cache) = (plugin.clone(), cache.clone());

        // The owner takes r1 (allocate-once: it closes), and r2 comes on n2.
        let owner = cache.pod("default/owner").unwrap().clone();
        let mut state = CycleState::new(t0());
        plugin.pre_filter(&owner, &cache, &mut state).unwrap();
        plugin.reserve(&owner, "n1", &cache, &state).unwrap();
        apply(
            &mut plugin,
            &mut cache,
            reservation("r2", "n2", "4", json!({})),
        );

        let ask = |plugin: &ReservationPlugin, cache: &ClusterCache| {
            let owner = cache.pod("default/owner").unwrap().clone();
            let state = CycleState::new(t0());
            let annotations = plugin.pre_bind(&owner, "n1", cache, &state).unwrap();
            (
                verdict(plugin, cache, "default/stranger", "n1"),
                verdict(plugin, cache, "default/stranger", "n2"),
                annotations.contains_key(ANNOTATION_RESERVATION_ALLOCATED),
            )
        };
        assert_eq!(
            ask(&snapshot, &snapshot_cache),
            (Err(held.to_string()), Ok(()), false)
        );
        assert_eq!(ask(&plugin, &cache), (Ok(()), Err(held.to_string()), true));

        // The owner's reservation gone in the original only: the snapshot
        // still lets the owner use it.
        let event = cache.apply(Change::Delete(reservation("r1", "n1", "4", json!({}))));
        plugin.on_event(&event, &cache);
        assert_eq!(
            verdict(&snapshot, &snapshot_cache, "default/owner", "n1"),
            Ok(())
        );
        assert_eq!(
            verdict(&snapshot, &snapshot_cache, "default/stranger", "n1"),
            Err(held.to_string())
        );
        assert!(plugin.reservations.get("r1").is_none());
        assert!(snapshot.reservations.get("r1").is_some());
    }

    #[test]
    fn non_owners_cannot_use_reserved_capacity_and_owners_consume_it_once() {
        let mut s = cluster(vec![
            reservation("r1", "n1", "4", json!({})),
            cpu_pod("stranger", "6", &[]),
            cpu_pod("owner", "6", &[]),
        ]);
        let outcome = testutil::filter(&s, "default/stranger", t0());
        assert_eq!(
            outcome.failed["n1"],
            "Insufficient cpu (held by reservations)"
        );
        // (n2's own fullness is kube-scheduler's to check, not this plugin's.)
        assert!(!outcome.feasible.contains(&"n1".to_string()));

        // The owner fits on n1: 4 reserved + 4 free.
        let outcome = testutil::filter(&s, "default/owner", t0());
        assert!(outcome.feasible.contains(&"n1".to_string()));
        let reserved = s.reserve("default/owner", "n1", t0()).unwrap();
        assert_eq!(
            allocated_of(&reserved.annotations),
            Some(ReservationAllocated {
                name: "r1".into(),
                uid: "r1-uid".into()
            })
        );
        // Allocate-once: the reservation is closed and holds nothing any more;
        // the 2 cpus left on n1 are anybody's.
        testutil::load(&mut s, vec![cpu_pod("small", "2", &[])]);
        let outcome = testutil::filter(&s, "default/small", t0());
        assert_eq!(outcome.feasible, vec!["n1".to_string(), "n2".to_string()]);
        let with_big = s.reserve("default/small", "n1", t0());
        assert!(with_big.is_ok());
    }

    /// Every answer the plugin gives a pod: filter, score (node by node
    /// and all at once) and preference per node, and whether it prefers.
    type Answers = Vec<(String, Result<(), Rejection>, i64, i64, Option<bool>)>;

    fn answers_of(
        plugin: &ReservationPlugin,
        cache: &ClusterCache,
        pod: &PodInfo,
        state: &CycleState,
    ) -> (Answers, bool) {
        let nodes: Vec<Option<&NodeInfo>> = cache.nodes_sorted().map(Some).collect();
        let mut scores = vec![-1; nodes.len()];
        plugin.score_all(pod, &nodes, cache, state, &mut scores);
        let per_node = nodes
            .iter()
            .flatten()
            .zip(scores)
            .map(|(node, score_all)| {
                let filtered = plugin.filter(pod, node, cache, state);
                // The per-node check without any shortcut.
                let checked = match state.read::<PodState>(STATE_KEY) {
                    None => Ok(()),
                    Some(s) if plugin.choose(pod, node, s, state.now).is_some() => Ok(()),
                    Some(s) if s.required => {
                        Err(Rejection::unresolvable(REASON_AFFINITY_NOT_MATCHED))
                    }
                    Some(_) => {
                        let held = plugin.held(&node.name, state.now, None);
                        ReservationPlugin::fits(pod, node, &held).map_err(Rejection::unschedulable)
                    }
                };
                assert_eq!(filtered, checked, "pod {}, node {}", pod.key, node.name);
                (
                    node.name.to_string(),
                    filtered,
                    plugin.score(pod, node, cache, state),
                    score_all,
                    plugin.prefers(pod, node, cache, state),
                )
            })
            .collect();
        (per_node, plugin.has_preferences(pod, state))
    }

    /// The per-pod shortcuts (nodes without reservations skipped by index,
    /// scores of a pod owning none answered at once, the preference pass
    /// skipped for it) give the answers of the per-node checks: over random
    /// reservations placed, moved and deleted (on nodes that exist or not
    /// yet), nodes added and bound pods, for strangers, owners and a pod
    /// whose reservation affinity names a reservation.
    #[test]
    fn per_pod_shortcuts_answer_as_the_per_node_checks() {
        use crate::cache::Change;
        use koord_common::testing::Lcg;
        let affinity = apis::extension::reservation::ANNOTATION_RESERVATION_AFFINITY;
        let mut cache = ClusterCache::new();
        let mut plugin = ReservationPlugin::default();
        let apply = |plugin: &mut ReservationPlugin, cache: &mut ClusterCache, change| {
            let event = cache.apply(change);
            plugin.on_event(&event, cache);
        };
        let pods = [
            cpu_pod("stranger", "3", &[]),
            cpu_pod("small-stranger", "1", &[]),
            cpu_pod("owner", "3", &[]),
            cpu_pod("pinned", "2", &[(affinity, r#"{"name": "r1"}"#)]),
        ];
        for pod in pods {
            apply(&mut plugin, &mut cache, Change::Upsert(pod));
        }
        let keys = [
            "default/stranger",
            "default/small-stranger",
            "default/owner",
            "default/pinned",
        ];
        let mut rng = Lcg(11);
        let (mut shortcut_nodes, mut skipped_preferences, mut held_rejections) = (0, 0, 0);
        let mut cached_holds = 0;
        for step in 0..600 {
            let node = format!("n{}", rng.below(6));
            let change = match rng.below(8) {
                0 => Change::Upsert(testutil::node(&node, &[("cpu", "8")])),
                4 => Change::Delete(testutil::node(&node, &[])),
                1 | 2 => {
                    let cpu = format!("{}", 1 + rng.below(4));
                    let name = format!("r{}", rng.below(4));
                    // Expiring at different times (0 = never), some open
                    // to more than one owner.
                    let ttl = ["0", "30m", "2h", "2h"][rng.below(4) as usize];
                    let once = rng.below(4) == 0;
                    Change::Upsert(reservation(
                        &name,
                        &node,
                        &cpu,
                        json!({"ttl": ttl, "allocateOnce": once}),
                    ))
                }
                6 => {
                    // An owner bound on one of the reservations' capacity
                    // (three of them, each moving between reservations).
                    let name = format!("r{}", rng.below(4));
                    let allocated = format!(r#"{{"name": "{name}", "uid": "{name}-uid"}}"#);
                    let pod = format!("bound-owner-{}", rng.below(3));
                    Change::Upsert(testutil::pod(PodSpec {
                        name: &pod,
                        node: Some(&node),
                        requests: &[("cpu", "1")],
                        annotations: &[(ANNOTATION_RESERVATION_ALLOCATED, &allocated)],
                        ..Default::default()
                    }))
                }
                7 => {
                    // The owner reserved where its reservation fits, and
                    // sometimes rolled back.
                    let owner = cache.pod("default/owner").unwrap().clone();
                    let mut state = CycleState::new(t0());
                    if plugin.pre_filter(&owner, &cache, &mut state).is_ok() {
                        plugin.reserve(&owner, &node, &cache, &state).ok();
                        if rng.below(2) == 0 {
                            plugin.unreserve(&owner, &node, &cache);
                        }
                    }
                    continue;
                }
                3 => Change::Delete(reservation(
                    &format!("r{}", rng.below(4)),
                    "n0",
                    "1",
                    json!({}),
                )),
                _ => {
                    let name = format!("bound-{step}");
                    let cpu = format!("{}", 1 + rng.below(3));
                    Change::Upsert(testutil::pod(PodSpec {
                        name: &name,
                        node: Some(&node),
                        requests: &[("cpu", &cpu)],
                        ..Default::default()
                    }))
                }
            };
            apply(&mut plugin, &mut cache, change);
            for key in keys {
                let pod = cache.pod(key).unwrap().clone();
                // Before, between and after the reservations' expiries.
                let now = t0() + Duration::from_secs(60 * [0, 0, 45, 150][rng.below(4) as usize]);
                let mut state = CycleState::new(now);
                if plugin.pre_filter(&pod, &cache, &mut state).is_err() {
                    continue;
                }
                let (fast, prefers) = answers_of(&plugin, &cache, &pod, &state);
                shortcut_nodes += cache
                    .nodes_sorted()
                    .filter(|n| !plugin.may_hold_on(n))
                    .count();
                skipped_preferences += usize::from(!prefers);
                cached_holds += cache
                    .nodes_sorted()
                    .filter(|n| {
                        plugin
                            .held_cached(n, now)
                            .is_some_and(|h| h.iter().any(|(_, amount)| amount > 0))
                    })
                    .count();
                // Without the marks and the kept sums every node is
                // checked by name.
                let marks = std::mem::take(&mut plugin.node_marks);
                let held = std::mem::take(&mut plugin.held_by_node);
                let (slow, _) = answers_of(&plugin, &cache, &pod, &state);
                plugin.node_marks = marks;
                plugin.held_by_node = held;
                assert_eq!(fast, slow, "step {step}, pod {key}");
                held_rejections += fast
                    .iter()
                    .filter(|(_, filtered, ..)| {
                        filtered
                            .as_ref()
                            .is_err_and(|r| r.reason.contains("held by reservations"))
                    })
                    .count();
                for (node, _, score, score_all, preference) in &fast {
                    assert_eq!(score, score_all, "step {step}, pod {key}, node {node}");
                    if !prefers {
                        assert_eq!(*preference, None, "step {step}, pod {key}, node {node}");
                    }
                }
            }
        }
        assert!(
            shortcut_nodes > 100 && skipped_preferences > 100 && held_rejections > 100,
            "{shortcut_nodes} {skipped_preferences} {held_rejections}"
        );
        assert!(cached_holds > 100, "{cached_holds}");
    }

    /// Owner selectors compiled once answer as parsing them for every pod:
    /// labels, expressions, and selectors that do not parse (no owner).
    #[test]
    fn compiled_owner_selectors_match_as_parsing_each_time() {
        use apis::configuration::selector::label_selector_matches;
        let selectors = [
            json!({"matchLabels": {"app": "web"}}),
            json!({"matchLabels": {"app": "web", "tier": "front"}}),
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
            json!({"matchLabels": {"bad key!": "web"}}),
            json!({"matchExpressions": [{"key": "app", "operator": "Near", "values": ["web"]}]}),
            json!({}),
        ];
        let label_sets: [&[(&str, &str)]; 4] = [
            &[],
            &[("app", "web")],
            &[("app", "db"), ("tier", "front")],
            &[("app", "web"), ("tier", "front")],
        ];
        for selector in &selectors {
            let owners = json!([{"labelSelector": selector}]);
            let Object::Reservation(crd) = reservation("r", "n1", "1", json!({"owners": owners}))
            else {
                unreachable!("reservation builds a Reservation");
            };
            let info = ReservationInfo::from_crd(&crd).unwrap();
            let parsed: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
                serde_json::from_value(selector.clone()).unwrap();
            for labels in label_sets {
                let Object::Pod(pod) = testutil::pod(PodSpec {
                    name: "p",
                    labels,
                    ..Default::default()
                }) else {
                    unreachable!("pod builds a Pod");
                };
                let pod = PodInfo::new(std::sync::Arc::new(pod));
                let expected = label_selector_matches(&parsed, pod.labels()).unwrap_or(false);
                assert_eq!(info.is_owner(&pod), expected, "{selector} on {labels:?}");
            }
        }
    }

    #[test]
    fn an_owner_goes_to_the_node_where_its_reservation_fits() {
        // n2 is busy (6 of 8 cpus) and its last 2 are reserved for "owner";
        // n1 is empty, so any load or fit score would pick n1.
        let mut s = cluster(vec![
            reservation("r1", "n2", "2", json!({})),
            cpu_pod("owner", "2", &[]),
        ]);
        let outcome = testutil::filter(&s, "default/owner", t0());
        assert_eq!(outcome.feasible, vec!["n2".to_string()]);
        assert_eq!(outcome.failed["n1"], REASON_RESERVATION_ELSEWHERE);
        let reserved = s.reserve("default/owner", "n2", t0()).unwrap();
        assert!(allocated_of(&reserved.annotations).is_some());

        // Wider than the reservation: it fits nowhere reserved, so no node
        // is passed over for one.
        let mut s = cluster(vec![
            reservation("r1", "n2", "2", json!({})),
            cpu_pod("owner", "3", &[]),
        ]);
        // (n2's own fullness is kube-scheduler's to check.)
        let outcome = testutil::filter(&s, "default/owner", t0());
        assert_eq!(outcome.feasible, vec!["n1".to_string(), "n2".to_string()]);
        assert!(
            !outcome
                .failed
                .values()
                .any(|r| r == REASON_RESERVATION_ELSEWHERE)
        );
        // Others are not steered: a stranger keeps n1 and is kept off n2.
        testutil::load(&mut s, vec![cpu_pod("stranger", "1", &[])]);
        let outcome = testutil::filter(&s, "default/stranger", t0());
        assert_eq!(outcome.feasible, vec!["n1".to_string()]);
    }

    /// The extender's filter over `candidates` only, as kube-scheduler's sample hands them.
    fn filter_sampled(s: &Scheduler, pod: &PodInfo, candidates: &[&str]) -> FilterOutcome {
        let candidates: Vec<String> = candidates.iter().map(|n| n.to_string()).collect();
        let nodes: Vec<Option<&NodeInfo>> = candidates.iter().map(|n| s.cache.node(n)).collect();
        crate::placement::filter_resolved_indexed(s, pod, candidates.clone(), &nodes, t0()).0
    }

    #[test]
    fn an_owner_whose_reservation_the_sample_left_out_is_nominated_there() {
        use crate::placement::REASON_NOMINATED_OUTSIDE_CANDIDATES;
        let s = cluster(vec![
            reservation("r1", "n2", "2", json!({})),
            cpu_pod("owner", "2", &[]),
            cpu_pod("stranger", "1", &[]),
        ]);
        let owner = s.cache.pod("default/owner").unwrap().clone();
        let outcome = filter_sampled(&s, &owner, &["n1"]);
        assert_eq!(outcome.nominated.as_deref(), Some("n2"), "{outcome:?}");
        assert!(outcome.feasible.is_empty());
        assert_eq!(
            outcome.failed_unresolvable["n1"],
            REASON_NOMINATED_OUTSIDE_CANDIDATES
        );
        // Already nominated there: kube-scheduler tried n2 first and it did not
        // fit, so the candidates serve.
        let mut nominated = (*owner.pod).clone();
        nominated
            .status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some("n2".into());
        let outcome = filter_sampled(&s, &PodInfo::new(std::sync::Arc::new(nominated)), &["n1"]);
        assert_eq!(outcome.nominated, None);
        assert_eq!(outcome.feasible, vec!["n1".to_string()]);
        // With n2 among the candidates it is simply preferred.
        let outcome = filter_sampled(&s, &owner, &["n1", "n2"]);
        assert_eq!(outcome.nominated, None);
        assert_eq!(outcome.feasible, vec!["n2".to_string()]);
        // Not an owner: nothing to nominate.
        let stranger = s.cache.pod("default/stranger").unwrap().clone();
        let outcome = filter_sampled(&s, &stranger, &["n1"]);
        assert_eq!(outcome.nominated, None);
        assert_eq!(outcome.feasible, vec!["n1".to_string()]);
        // Wider than its reservation: it fits nowhere reserved.
        let s = cluster(vec![
            reservation("r1", "n2", "2", json!({})),
            cpu_pod("owner", "3", &[]),
        ]);
        let owner = s.cache.pod("default/owner").unwrap().clone();
        let outcome = filter_sampled(&s, &owner, &["n1"]);
        assert_eq!(outcome.nominated, None);
        assert_eq!(outcome.feasible, vec!["n1".to_string()]);
    }

    #[test]
    fn rollback_returns_the_reservation_to_its_owners() {
        let mut s = cluster(vec![
            reservation("r1", "n1", "4", json!({})),
            cpu_pod("owner", "6", &[]),
            cpu_pod("stranger", "6", &[]),
        ]);
        let reserved = s.reserve("default/owner", "n1", t0()).unwrap();
        s.rollback(&reserved);
        // Held again: the stranger is still kept off n1.
        let outcome = testutil::filter(&s, "default/stranger", t0());
        assert!(outcome.failed.contains_key("n1"));
        let again = s.reserve("default/owner", "n1", t0()).unwrap();
        assert!(allocated_of(&again.annotations).is_some());
    }

    #[test]
    fn expired_reservations_hold_nothing_and_serve_nobody() {
        let later = t0() + Duration::from_secs(3601);
        let mut s = cluster(vec![
            reservation("ttl", "n1", "4", json!({})),
            cpu_pod("stranger", "6", &[]),
            cpu_pod("owner", "6", &[]),
        ]);
        assert!(
            testutil::filter(&s, "default/stranger", t0())
                .failed
                .contains_key("n1")
        );
        let outcome = testutil::filter(&s, "default/stranger", later);
        assert!(outcome.feasible.contains(&"n1".to_string()));
        let reserved = s.reserve("default/owner", "n1", later).unwrap();
        assert!(allocated_of(&reserved.annotations).is_none());

        // `expires` wins over ttl.
        let expires = rfc3339(t0() + Duration::from_secs(10));
        let mut s = cluster(vec![
            reservation("abs", "n1", "4", json!({"expires": expires, "ttl": "10h"})),
            cpu_pod("stranger", "6", &[]),
        ]);
        let at = t0() + Duration::from_secs(11);
        assert_eq!(
            testutil::filter(&s, "default/stranger", at).feasible,
            vec!["n1".to_string(), "n2".to_string()]
        );
        let _ = &mut s;
    }

    #[test]
    fn reservations_spread_over_free_nodes_as_kube_scheduler_would_place_them() {
        // Nothing but kube-scheduler's resource score tells these nodes apart: each
        // reservation takes the node left freest (ties in name order), so ten reservations
        // go to ten nodes, not all to the first node in name order.
        let mut s = testutil::scheduler("");
        let nodes = (0..20)
            .map(|i| {
                testutil::node(
                    &format!("n-{i:02}"),
                    &[("cpu", "32"), ("memory", "128Gi"), ("pods", "110")],
                )
            })
            .collect();
        testutil::load(&mut s, nodes);
        let mut placed = std::collections::BTreeSet::new();
        for i in 0..10 {
            let placement =
                place_reservation(&mut s, &pending(&format!("r{i}"), "2", json!({})), t0());
            assert!(placed.insert(placement.node.unwrap()), "reservation r{i}");
        }
        assert_eq!(placed.len(), 10);

        // What other reservations keep for their owners counts as taken: "a" is empty but
        // holds a 20-CPU reservation, "b" runs a 10-CPU pod, so "b" is freer.
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("a", &[("cpu", "32"), ("memory", "128Gi"), ("pods", "110")]),
                testutil::node("b", &[("cpu", "32"), ("memory", "128Gi"), ("pods", "110")]),
                testutil::pod(PodSpec {
                    name: "busy",
                    node: Some("b"),
                    requests: &[("cpu", "10")],
                    ..Default::default()
                }),
                reservation("big", "a", "20", json!({})),
            ],
        );
        let placement = place_reservation(&mut s, &pending("r1", "2", json!({})), t0());
        assert_eq!(placement.node.as_deref(), Some("b"));
        assert!(placement.scores["b"] > placement.scores["a"]);
    }

    /// A pending reservation owned by any pod named `owner`.
    fn pending(name: &str, cpu: &str, template_spec_extra: Value) -> Reservation {
        let mut template = testutil::reservation_template(&[("cpu", cpu)]);
        for (k, v) in template_spec_extra.as_object().unwrap() {
            template["spec"][k] = v.clone();
        }
        testutil::reservation(ReservationSpec {
            name,
            template,
            spec_extra: json!({"owners": [{"object": {"name": "owner"}}]}),
            ..Default::default()
        })
    }

    #[test]
    fn reserve_pods_get_kube_schedulers_node_checks_and_resource_fit() {
        let mut s = testutil::scheduler("");
        let mut cordoned = testutil::node("a-cordoned", &[("cpu", "8"), ("pods", "10")]);
        if let Object::Node(node) = &mut cordoned {
            node.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        }
        testutil::load(
            &mut s,
            vec![
                cordoned,
                testutil::node("b-full", &[("cpu", "8"), ("pods", "10")]),
                testutil::node("c-free", &[("cpu", "8"), ("pods", "10")]),
                testutil::pod(PodSpec {
                    name: "busy",
                    node: Some("b-full"),
                    requests: &[("cpu", "7")],
                    ..Default::default()
                }),
            ],
        );
        let placement = place_reservation(&mut s, &pending("r1", "2", json!({})), t0());
        assert_eq!(placement.pod, "Reservation/r1");
        assert_eq!(placement.node.as_deref(), Some("c-free"));
        assert_eq!(
            placement.reasons["a-cordoned"],
            node_checks::REASON_UNSCHEDULABLE
        );
        assert_eq!(placement.reasons["b-full"], "Insufficient cpu");
        // The cache now holds it Available there, and the placeholder is gone.
        let placed = &s.cache.reservations["r1"];
        assert!(placed.is_available());
        assert_eq!(placed.node_name(), Some("c-free"));
        assert!(s.cache.pod("r1").is_none() && s.cache.pods().all(|p| p.name != "r1"));
        // Its 2 cpus count against c-free for strangers now.
        testutil::load(&mut s, vec![cpu_pod("stranger", "7", &[])]);
        assert_eq!(
            testutil::filter(&s, "default/stranger", t0()).failed["c-free"],
            "Insufficient cpu (held by reservations)"
        );

        // A template pinning a node is only tried there.
        let placement = place_reservation(
            &mut s,
            &pending("r2", "1", json!({"nodeName": "b-full"})),
            t0(),
        );
        assert_eq!(placement.node.as_deref(), Some("b-full"));
        assert_eq!(placement.reasons["c-free"], node_checks::REASON_NODE_NAME);
        // Expired pending reservations are not placed.
        assert!(!is_pending(
            &pending("r3", "1", json!({})),
            t0() + Duration::from_secs(3601)
        ));
    }

    fn web_pod(name: &str, affinity: Option<Value>) -> Object {
        let value = affinity.map(|a| a.to_string());
        let annotations: Vec<(&str, &str)> = value
            .as_deref()
            .map(|v| vec![("scheduling.koordinator.sh/reservation-affinity", v)])
            .unwrap_or_default();
        testutil::pod(PodSpec {
            name,
            requests: &[("cpu", "1")],
            labels: &[("app", "web")],
            annotations: &annotations,
            ..Default::default()
        })
    }

    fn used_reservation(s: &mut Scheduler, pod: &str) -> Result<Option<String>, String> {
        s.reserve(&format!("default/{pod}"), "n1", t0())
            .map(|r| allocated_of(&r.annotations).map(|a| a.name))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn unschedulable_taints_and_selector_terms_gate_owners() {
        let owners = json!([{"labelSelector": {"matchLabels": {"app": "web"}}}]);
        let closed = json!({"owners": owners, "unschedulable": true, "allocateOnce": false});
        let mut s = cluster(vec![
            reservation("closed", "n1", "2", closed),
            web_pod("plain", None),
            web_pod(
                "tolerant",
                Some(
                    json!({"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}),
                ),
            ),
        ]);
        assert_eq!(used_reservation(&mut s, "plain"), Ok(None));
        assert_eq!(
            used_reservation(&mut s, "tolerant"),
            Ok(Some("closed".into()))
        );

        let tainted = json!({"owners": owners, "allocateOnce": false,
                             "taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]});
        let mut s = cluster(vec![reservation("tainted", "n1", "2", tainted)]);
        if let Some(node) = s.cache.node("n1").and_then(|n| n.node.clone()) {
            let mut labelled = (*node).clone();
            labelled.metadata.labels = Some(BTreeMap::from([("zone".into(), "z1".into())]));
            testutil::load(&mut s, vec![Object::Node(labelled)]);
        }
        let term = |zone: &str| {
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"reservationSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]},
                   "tolerations": [{"key": "team", "operator": "Exists"}]})
        };
        testutil::load(
            &mut s,
            vec![
                // Without a reservation affinity, taints do not apply (as upstream).
                web_pod("no-affinity", None),
                web_pod(
                    "intolerant",
                    Some(json!({"reservationSelector": {"pool": "a"}})),
                ),
                web_pod(
                    "tolerating",
                    Some(json!({"reservationSelector": {"pool": "a"},
                                "tolerations": [{"key": "team", "operator": "Equal", "value": "a"}]})),
                ),
                // Selector terms see the node's labels under the reservation's.
                web_pod("zone-z1", Some(term("z1"))),
                web_pod("zone-z2", Some(term("z2"))),
            ],
        );
        assert_eq!(
            used_reservation(&mut s, "no-affinity"),
            Ok(Some("tainted".into()))
        );
        let refused = used_reservation(&mut s, "intolerant").unwrap_err();
        assert!(refused.contains(REASON_AFFINITY_NOT_MATCHED), "{refused}");
        assert_eq!(
            used_reservation(&mut s, "tolerating"),
            Ok(Some("tainted".into()))
        );
        assert_eq!(
            used_reservation(&mut s, "zone-z1"),
            Ok(Some("tainted".into()))
        );
        assert!(used_reservation(&mut s, "zone-z2").is_err());
    }

    #[test]
    fn owner_mismatch_restricted_policy_and_affinity() {
        let restricted = json!({"allocatePolicy": "Restricted", "allocateOnce": false});
        let selector_owner =
            json!({"owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}]});
        let mut s = cluster(vec![
            reservation("r1", "n1", "4", restricted),
            reservation("r2", "n2", "2", selector_owner),
            // Named "owner" but in another namespace: not an owner.
            testutil::pod(PodSpec {
                namespace: "other",
                name: "owner",
                requests: &[("cpu", "6")],
                ..Default::default()
            }),
            cpu_pod("owner", "6", &[]),
            testutil::pod(PodSpec {
                name: "web",
                requests: &[("cpu", "2")],
                labels: &[("app", "web")],
                annotations: &[(
                    "scheduling.koordinator.sh/reservation-affinity",
                    r#"{"reservationSelector":{"pool":"a"}}"#,
                )],
                ..Default::default()
            }),
            testutil::pod(PodSpec {
                name: "pinned",
                requests: &[("cpu", "1")],
                annotations: &[(
                    "scheduling.koordinator.sh/reservation-affinity",
                    r#"{"name":"missing"}"#,
                )],
                ..Default::default()
            }),
        ]);
        assert!(
            testutil::filter(&s, "other/owner", t0())
                .failed
                .contains_key("n1")
        );
        // Restricted: 6 cpus do not fit in the 4 reserved, so the owner is a stranger.
        assert!(
            testutil::filter(&s, "default/owner", t0())
                .failed
                .contains_key("n1")
        );
        // Label-selector owner with a matching affinity takes r2 on the busy node.
        let web = s.reserve("default/web", "n2", t0()).unwrap();
        assert_eq!(allocated_of(&web.annotations).unwrap().name, "r2");
        let outcome = testutil::filter(&s, "default/pinned", t0());
        assert_eq!(
            outcome.failed_unresolvable["n1"],
            REASON_AFFINITY_NOT_MATCHED
        );
    }
}
