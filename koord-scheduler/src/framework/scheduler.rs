//! The [`Scheduler`]: the cache and the registered plugins, run through
//! pre-filter → filter → score → reserve → permit, plus the held pods'
//! bookkeeping.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::binding::Reserved;
use super::plugin::{
    AnnotationWrite, CycleState, MAX_NODE_SCORE, Permit, PermitRelease, PluginEntry, Reason,
    Rejection, StatusWrite,
};
use crate::cache::{CacheError, Change, ClusterCache, ClusterEvent, NodeInfo, PodInfo};
use crate::controller_plugins::ControllerPlugins;
use crate::filtered::FilterRecords;
use crate::permit::{HeldPod, HoldOutcome, PermitTable};
use crate::plugins::reservation::pre_allocation::{HandOver, STATE_HAND_OVER};
use crate::plugins::reservation::pre_allocation_settings::Settings as PreAllocationSettings;

/// Default of `--gang-bind-wait`: below the chart's extender `httpTimeout`
/// (5s), so a waiting `/bind` answers before kube-scheduler gives up on it.
pub const DEFAULT_PERMIT_BIND_WAIT: Duration = Duration::from_secs(3);

/// kube-scheduler's extender score range (`MaxExtenderPriority`).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// What `/bind` does after Permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermitStep {
    /// Bind these through the API now (the pod first; then the held pods of
    /// its group). `through_permit` says the pods were gated by a plugin
    /// ([`Scheduler::bound_after_permit`] wants to hear of their binding).
    Bind {
        pods: Vec<Reserved>,
        through_permit: bool,
    },
    /// The pod is held until `deadline` at the latest.
    Held { group: String, deadline: SystemTime },
}

/// A held pod released unbound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasedHold {
    pub pod_key: String,
    pub node: String,
    pub reason: String,
}

/// Logs holds released unbound (both shells expire holds).
pub fn log_released(released: &[ReleasedHold]) {
    for hold in released {
        tracing::warn!(pod = %hold.pod_key, node = %hold.node, reason = %hold.reason, "held pod released unbound");
    }
}

/// Filter result over a set of candidate nodes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FilterOutcome {
    pub feasible: Vec<String>,
    /// node → reason (preemption might help).
    pub failed: BTreeMap<String, Reason>,
    /// node → reason (preemption cannot help).
    pub failed_unresolvable: BTreeMap<String, Reason>,
    /// A node outside the candidates the pod is to be nominated to
    /// (`status.nominatedNodeName`), every candidate refused meanwhile; see
    /// [`crate::placement::filter_resolved_indexed`].
    pub nominated: Option<String>,
}

/// The reason for a candidate the cache does not know.
pub const REASON_NODE_NOT_FOUND: &str = "node not found in the scheduler cache";

/// Scores for the feasible nodes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ScoreOutcome {
    /// (node, Σ weight × normalized score), in the order given.
    pub totals: Vec<(String, i64)>,
    /// Σ weights, i.e. the top score is `weight_sum × 100`.
    pub weight_sum: i64,
}

impl ScoreOutcome {
    /// Scores scaled into the extender range 0..=10 (rounded).
    pub fn extender_scores(&self) -> Vec<(String, i64)> {
        let top = self.weight_sum * MAX_NODE_SCORE;
        self.totals
            .iter()
            .map(|(node, total)| (node.clone(), scale_to_extender(*total, top)))
            .collect()
    }

    /// [`ScoreOutcome::extender_scores`] consuming the names.
    pub fn into_extender_scores(self) -> Vec<(String, i64)> {
        let top = self.weight_sum * MAX_NODE_SCORE;
        self.totals
            .into_iter()
            .map(|(node, total)| (node, scale_to_extender(total, top)))
            .collect()
    }

    /// The highest total; ties go to the earliest node.
    pub fn best(&self) -> Option<&str> {
        let mut best: Option<&(String, i64)> = None;
        for entry in &self.totals {
            if best.is_none_or(|b| entry.1 > b.1) {
                best = Some(entry);
            }
        }
        best.map(|(node, _)| node.as_str())
    }
}

/// A total out of `top` scaled into 0..=10, rounded.
fn scale_to_extender(total: i64, top: i64) -> i64 {
    let scaled = if top <= 0 {
        0
    } else {
        (total * MAX_EXTENDER_PRIORITY * 2 + top) / (top * 2)
    };
    scaled.clamp(0, MAX_EXTENDER_PRIORITY)
}

/// Errors of the bind-time reservation.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReserveError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("pod {pod} no longer fits node {node}: {reason}")]
    NoLongerFits {
        pod: String,
        node: String,
        reason: String,
    },
    #[error("plugin {plugin} could not reserve pod {pod} on node {node}: {reason}")]
    Reserve {
        plugin: &'static str,
        pod: String,
        node: String,
        reason: String,
    },
    #[error("plugin {plugin} failed pre-bind for pod {pod}: {reason}")]
    PreBind {
        plugin: &'static str,
        pod: String,
        reason: String,
    },
}

/// The resources kube-scheduler checks itself and forgets for a pod whose
/// `/bind` failed: a pod held at Permit after a "still waiting" answer is
/// in kube-scheduler's cache no more, so the extender holds these for it.
const HELD_RESOURCES: [&str; 3] = [
    apis::extension::resource::RESOURCE_CPU,
    apis::extension::resource::RESOURCE_MEMORY,
    crate::resources::RESOURCE_PODS,
];

/// On a node with pods held at Permit: whether `pod` still fits its cpu,
/// memory and pod count with the held pods counted (they are assumed, so
/// in `node.requested` and `node.pods`).
fn fits_beside_held_pods(pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    let mut insufficient = Vec::new();
    for name in HELD_RESOURCES {
        let (request, used) = if name == crate::resources::RESOURCE_PODS {
            (1, node.pods.len() as i64)
        } else {
            (pod.requests.get(name), node.requested.get(name))
        };
        let allocatable = node.allocatable.get(name);
        if request > 0 && allocatable > 0 && request > allocatable - used {
            insufficient.push(format!("Insufficient {name}"));
        }
    }
    if insufficient.is_empty() {
        Ok(())
    } else {
        Err(Rejection::unschedulable(format!(
            "{} (held for pods waiting for their gang)",
            insufficient.join(", ")
        )))
    }
}

/// kube-scheduler's NodeResourcesFit as it sees the node: every requested
/// resource (and one pod slot) within allocatable minus what the pods on
/// the node request. The `koordinator.sh/` names are left to DeviceShare:
/// the chart lists them as ignored by kube-scheduler.
fn kube_resource_fit(pod: &PodInfo, node: &NodeInfo) -> Result<(), String> {
    let mut insufficient = Vec::new();
    let pod_slots = node.allocatable.get(crate::resources::RESOURCE_PODS);
    if pod_slots > 0 && node.pods.len() as i64 >= pod_slots {
        insufficient.push(format!("Insufficient {}", crate::resources::RESOURCE_PODS));
    }
    for (name, request) in pod.requests.iter() {
        if request <= 0 || name.starts_with("koordinator.sh/") {
            continue;
        }
        let free = node
            .allocatable
            .get(name)
            .saturating_sub(node.requested.get(name));
        if request > free {
            insufficient.push(format!("Insufficient {name}"));
        }
    }
    if insufficient.is_empty() {
        Ok(())
    } else {
        Err(insufficient.join(", "))
    }
}

/// Why a node whose allocatable is not an exact count fits no pod (the
/// refused amount follows).
pub const REASON_INVALID_ALLOCATABLE: &str = "node(s) had an invalid allocatable";

/// The cache and the plugins, mutated together under one lock by the shells.
#[derive(Clone)]
pub struct Scheduler {
    pub cache: ClusterCache,
    plugins: Vec<PluginEntry>,
    /// How long a bound pod stays assumed without watch confirmation.
    pub assume_ttl: Duration,
    /// The extender's `/filter` results, which `/bind` checks; written by
    /// `/filter` under the shared (read) lock, hence its own small lock;
    /// one table for every copy of the state.
    pub filtered: Arc<std::sync::Mutex<FilterRecords>>,
    /// Which controller plugins' writes go out (`--controller-plugins`).
    pub controllers: ControllerPlugins,
    /// Pods held at Permit (see [`crate::permit`]).
    pub permits: PermitTable,
    /// How long a `/bind` call of a held pod waits for its group before it
    /// answers "still waiting" (the hold itself lasts until its deadline).
    pub permit_bind_wait: Duration,
    /// Reservation pre-allocation settings (`ReservationArgs.preAllocationConfig`).
    pub pre_allocation: PreAllocationSettings,
    /// Set only while a pre-allocating reservation is being placed: the
    /// pods it would take in, written into its reserve pod's cycle state.
    pub hand_over: Option<Arc<HandOver>>,
}

impl Scheduler {
    pub fn new(plugins: Vec<PluginEntry>, assume_ttl: Duration) -> Self {
        Self {
            cache: ClusterCache::new(),
            plugins,
            assume_ttl,
            filtered: Arc::new(std::sync::Mutex::new(FilterRecords::new())),
            controllers: ControllerPlugins::default(),
            permits: PermitTable::default(),
            permit_bind_wait: DEFAULT_PERMIT_BIND_WAIT,
            pre_allocation: PreAllocationSettings::default(),
            hand_over: None,
        }
    }

    /// Builds what readers of a published copy would otherwise each build
    /// for themselves on first use (the cache's node name table).
    pub fn prepare_for_readers(&mut self) {
        let _ = self.cache.node_names();
    }

    pub fn plugin_names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.plugin.name()).collect()
    }

    fn broadcast(&mut self, event: &ClusterEvent) {
        for entry in &mut self.plugins {
            entry.plugin.on_event(event, &self.cache);
        }
    }

    /// Applies a watch event to the cache and the plugins' indexes.
    pub fn apply(&mut self, change: Change) {
        let event = self.cache.apply(change);
        self.broadcast(&event);
    }

    /// Reverts assumed pods past their deadline; returns how many.
    pub fn expire_assumed(&mut self, now: SystemTime) -> usize {
        let events = self.cache.expire_assumed(now);
        for event in &events {
            self.broadcast(event);
        }
        events.len()
    }

    /// Runs every plugin's pre-filter. A pod whose requests cannot be
    /// counted exactly fits nowhere.
    pub fn pre_filter(&self, pod: &PodInfo, now: SystemTime) -> Result<CycleState, Rejection> {
        if let Some(reason) = &pod.invalid_requests {
            return Err(Rejection::unresolvable(format!(
                "pod {} cannot be scheduled: {reason}",
                pod.key
            )));
        }
        let mut state = CycleState::new(now);
        if let Some(hand_over) = self.hand_over.as_ref().filter(|h| h.reserve_pod == pod.key) {
            state.write(STATE_HAND_OVER, Arc::clone(hand_over));
        }
        for entry in &self.plugins {
            entry.plugin.pre_filter(pod, &self.cache, &mut state)?;
        }
        Ok(state)
    }

    /// Preemption: for each of one node's proposed victims, the first
    /// plugin rule that forbids evicting it for `preemptor`, as
    /// `plugin: reason`.
    pub fn victim_protections(
        &self,
        preemptor: &PodInfo,
        victims: &[&PodInfo],
    ) -> Vec<Option<String>> {
        let mut reasons: Vec<Option<String>> = vec![None; victims.len()];
        for entry in &self.plugins {
            let verdicts = entry
                .plugin
                .protects_victims(preemptor, victims, &self.cache);
            for (slot, verdict) in reasons.iter_mut().zip(verdicts) {
                if slot.is_none() {
                    *slot = verdict.map(|reason| format!("{}: {reason}", entry.plugin.name()));
                }
            }
        }
        reasons
    }

    /// Preemption: the unit (gang) `pod` is evicted with, if any.
    pub fn preemption_unit(&self, pod: &PodInfo) -> Option<String> {
        self.plugins
            .iter()
            .find_map(|entry| entry.plugin.preemption_unit(pod, &self.cache))
    }

    /// Whether `pod` fits `node` once the cached pods `victims` are gone:
    /// kube-scheduler's own resource fit (which it does not re-check after
    /// an extender shrinks its victims) and every plugin's pre-filter and
    /// filter. The victims are taken out of the cache (and the plugins'
    /// indexes) for the check and put back exactly as they were; the
    /// caller holds the write lock, so no reader sees the interim.
    pub fn fits_without(
        &mut self,
        pod: &PodInfo,
        node: &str,
        victims: &[String],
        now: SystemTime,
    ) -> Result<(), String> {
        let detached = self.detach_pods(victims);
        let verdict = self.fits_now(pod, node, now);
        self.reattach_pods(&detached);
        verdict
    }

    /// Takes the cached pods `keys` out of the cache and the plugins'
    /// indexes for a what-if (unknown keys are skipped);
    /// [`Scheduler::reattach_pods`] puts them back exactly as they were.
    /// The caller holds the write lock throughout.
    pub fn detach_pods(&mut self, keys: &[String]) -> Vec<Arc<PodInfo>> {
        let mut detached = Vec::with_capacity(keys.len());
        for key in keys {
            if let Some((info, event)) = self.cache.detach_pod(key) {
                self.broadcast(&event);
                detached.push(info);
            }
        }
        detached
    }

    /// Undoes [`Scheduler::detach_pods`], last taken out first back.
    pub fn reattach_pods(&mut self, detached: &[Arc<PodInfo>]) {
        for info in detached.iter().rev() {
            let event = self.cache.reattach_pod(info);
            self.broadcast(&event);
        }
    }

    fn fits_now(&self, pod: &PodInfo, node: &str, now: SystemTime) -> Result<(), String> {
        let Some(info) = self.cache.node(node) else {
            return Err(format!("node {node} is not in the scheduler cache"));
        };
        kube_resource_fit(pod, info)?;
        let state = self.pre_filter(pod, now).map_err(|r| r.reason)?;
        self.filter_node(pod, info, &state)
            .map_err(|r| r.reason.into())
    }

    /// Runs the filters on one node; the first rejection wins. A node whose
    /// allocatable cannot be read fits no pod.
    pub fn filter_node(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        if let Some(invalid) = &node.invalid_allocatable {
            return Err(Rejection::unresolvable(format!(
                "{REASON_INVALID_ALLOCATABLE}: {invalid}"
            )));
        }
        if self.permits.holds_on(&node.name) {
            fits_beside_held_pods(pod, node)?;
        }
        for entry in self.plugins.iter().filter(|e| e.filter) {
            entry.plugin.filter(pod, node, &self.cache, state)?;
        }
        Ok(())
    }

    /// Filters the named candidates (all nodes, in name order, when `None`).
    pub fn filter(
        &self,
        pod: &PodInfo,
        candidates: Option<&[String]>,
        state: &CycleState,
    ) -> FilterOutcome {
        let mut outcome = FilterOutcome::default();
        let mut check = |name: &str, node: Option<&NodeInfo>| match node {
            None => {
                outcome
                    .failed_unresolvable
                    .insert(name.to_string(), REASON_NODE_NOT_FOUND.into());
            }
            Some(node) => match self.filter_node(pod, node, state) {
                Ok(()) => outcome.feasible.push(name.to_string()),
                Err(rejection) if rejection.unresolvable => {
                    outcome
                        .failed_unresolvable
                        .insert(name.to_string(), rejection.reason);
                }
                Err(rejection) => {
                    outcome.failed.insert(name.to_string(), rejection.reason);
                }
            },
        };
        match candidates {
            Some(names) => names.iter().for_each(|n| check(n, self.cache.node(n))),
            None => self
                .cache
                .nodes_sorted()
                .for_each(|n| check(&n.name, Some(n))),
        }
        self.apply_preferences(pod, &mut outcome, state);
        outcome
    }

    /// [`Scheduler::filter`] over named candidates taken by value: each name
    /// moves into the outcome instead of being copied.
    pub fn filter_owned(
        &self,
        pod: &PodInfo,
        candidates: Vec<String>,
        state: &CycleState,
    ) -> FilterOutcome {
        let nodes: Vec<Option<&NodeInfo>> = candidates.iter().map(|n| self.cache.node(n)).collect();
        self.filter_resolved(pod, candidates, &nodes, state).0
    }

    /// [`Scheduler::filter_owned`] over candidates the caller has already
    /// looked up (`nodes[i]` is `candidates[i]`'s node, `None` when the
    /// cache has none), so a request looks each name up once; also returns
    /// the cache indexes ([`NodeInfo::index`]) of the feasible nodes, in
    /// the same order.
    pub fn filter_resolved(
        &self,
        pod: &PodInfo,
        candidates: Vec<String>,
        nodes: &[Option<&NodeInfo>],
        state: &CycleState,
    ) -> (FilterOutcome, Vec<usize>) {
        let mut outcome = FilterOutcome {
            feasible: Vec::with_capacity(candidates.len()),
            ..FilterOutcome::default()
        };
        let mut indexes = Vec::with_capacity(candidates.len());
        // The feasible nodes themselves, for the preferences: looking each
        // name up again cost as much as the first lookup.
        let mut infos: Vec<&NodeInfo> = Vec::with_capacity(candidates.len());
        // Refusals are listed and the maps built once from the lists (a
        // sort, cheap for names in order, instead of thousands of inserts).
        let mut failed = Vec::new();
        let mut failed_unresolvable = Vec::new();
        for (name, node) in candidates.into_iter().zip(nodes) {
            let Some(node) = *node else {
                failed_unresolvable.push((name, Reason::Static(REASON_NODE_NOT_FOUND)));
                continue;
            };
            match self.filter_node(pod, node, state) {
                Ok(()) => {
                    outcome.feasible.push(name);
                    indexes.push(node.index);
                    infos.push(node);
                }
                Err(rejection) if rejection.unresolvable => {
                    failed_unresolvable.push((name, rejection.reason));
                }
                Err(rejection) => failed.push((name, rejection.reason)),
            }
        }
        // Later refusals of a repeated name win, as with inserts.
        outcome.failed = failed.into_iter().collect();
        outcome.failed_unresolvable = failed_unresolvable.into_iter().collect();
        if let Some((keep, reasons)) = self.preferred_mask(pod, &infos, state) {
            let feasible = std::mem::take(&mut outcome.feasible);
            let all_indexes = std::mem::take(&mut indexes);
            for (((name, index), kept), reason) in
                feasible.into_iter().zip(all_indexes).zip(keep).zip(reasons)
            {
                if kept {
                    outcome.feasible.push(name);
                    indexes.push(index);
                } else {
                    outcome.failed.insert(name, Reason::Static(reason));
                }
            }
        }
        (outcome, indexes)
    }

    /// A node outside the candidates where a plugin prefers the pod
    /// ([`super::Plugin::preferred_nodes`]) when no feasible candidate is
    /// preferred: the first, in the plugin's order, that passes
    /// kube-scheduler's own checks as [`crate::node_checks`] knows them and
    /// every plugin's filter, and that the plugin still prefers. A node the
    /// pod is already nominated to is skipped: kube-scheduler tried it
    /// first, and it did not fit.
    pub fn preferred_outside(
        &self,
        pod: &PodInfo,
        outcome: &FilterOutcome,
        state: &CycleState,
    ) -> Option<String> {
        let nominated_already = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref());
        let is_candidate = |name: &str| {
            outcome.feasible.iter().any(|n| n == name)
                || outcome.failed.contains_key(name)
                || outcome.failed_unresolvable.contains_key(name)
        };
        let no_spec = k8s_openapi::api::core::v1::PodSpec::default();
        let spec = pod.pod.spec.as_ref().unwrap_or(&no_spec);
        let prefers_node = |entry: &PluginEntry, name: &str| {
            self.cache.node(name).is_some_and(|node| {
                entry.plugin.prefers(pod, node, &self.cache, state) == Some(true)
            })
        };
        for entry in self
            .plugins
            .iter()
            .filter(|e| e.plugin.has_preferences(pod, state))
        {
            let preferred = entry.plugin.preferred_nodes(pod, state);
            let preferred_among_feasible = preferred.iter().any(|name| {
                outcome.feasible.iter().any(|n| n == name) && prefers_node(entry, name)
            });
            if preferred_among_feasible {
                return None;
            }
            for name in preferred {
                if is_candidate(&name) || nominated_already == Some(name.as_str()) {
                    continue;
                }
                let Some(node) = self.cache.node(&name) else {
                    continue;
                };
                let passes_kube_scheduler = node.node.as_deref().is_some_and(|n| {
                    crate::node_checks::check_node(spec, n).is_ok()
                        && crate::node_checks::check_resources(pod, node).is_ok()
                });
                if passes_kube_scheduler
                    && self.filter_node(pod, node, state).is_ok()
                    && prefers_node(entry, &name)
                {
                    return Some(name);
                }
            }
        }
        None
    }

    /// Which feasible nodes to keep under the plugins' preferences
    /// ([`super::Plugin::prefers`]): for each preferring plugin in turn, when any
    /// remaining node is wanted, the others are dropped with its reason.
    /// None when no plugin narrows anything.
    pub fn preferred_mask(
        &self,
        pod: &PodInfo,
        feasible: &[&NodeInfo],
        state: &CycleState,
    ) -> Option<(Vec<bool>, Vec<&'static str>)> {
        let preferring: Vec<&PluginEntry> = self
            .plugins
            .iter()
            .filter(|e| {
                let has = e.plugin.has_preferences(pod, state);
                // The contract `has_preferences`' default relies on, checked
                // in debug builds (the tests): a plugin answering `prefers`
                // without saying so would otherwise be skipped silently.
                if cfg!(debug_assertions)
                    && !has
                    && let Some(node) = feasible.first()
                {
                    debug_assert!(
                        e.plugin.prefers(pod, node, &self.cache, state).is_none(),
                        "plugin {} answers prefers() but its has_preferences() is false",
                        e.plugin.name()
                    );
                }
                has
            })
            .collect();
        if preferring.is_empty() {
            return None;
        }
        let mut keep = vec![true; feasible.len()];
        let mut reasons = vec![""; feasible.len()];
        let mut narrowed = false;
        for entry in preferring {
            let mut wanted = Vec::with_capacity(feasible.len());
            let mut any = false;
            for (node, kept) in feasible.iter().zip(&keep) {
                let want =
                    *kept && entry.plugin.prefers(pod, node, &self.cache, state) == Some(true);
                any |= want;
                wanted.push(want);
            }
            if !any {
                continue;
            }
            for ((kept, reason), want) in keep.iter_mut().zip(&mut reasons).zip(wanted) {
                if *kept && !want {
                    *kept = false;
                    *reason = entry.plugin.preference_reason();
                    narrowed = true;
                }
            }
        }
        narrowed.then_some((keep, reasons))
    }

    /// Moves feasible nodes the preferences leave out into `failed`.
    fn apply_preferences(&self, pod: &PodInfo, outcome: &mut FilterOutcome, state: &CycleState) {
        if !self
            .plugins
            .iter()
            .any(|e| e.plugin.has_preferences(pod, state))
        {
            return;
        }
        let infos: Vec<&NodeInfo> = outcome
            .feasible
            .iter()
            .filter_map(|n| self.cache.node(n))
            .collect();
        if infos.len() != outcome.feasible.len() {
            return;
        }
        let Some((keep, reasons)) = self.preferred_mask(pod, &infos, state) else {
            return;
        };
        let feasible = std::mem::take(&mut outcome.feasible);
        for ((name, kept), reason) in feasible.into_iter().zip(keep).zip(reasons) {
            if kept {
                outcome.feasible.push(name);
            } else {
                outcome.failed.insert(name, Reason::Static(reason));
            }
        }
    }

    /// Fails every candidate with the same pre-filter rejection.
    pub fn reject_all(candidates: &[String], rejection: &Rejection) -> FilterOutcome {
        let mut outcome = FilterOutcome::default();
        let target = if rejection.unresolvable {
            &mut outcome.failed_unresolvable
        } else {
            &mut outcome.failed
        };
        for name in candidates {
            target.insert(name.clone(), rejection.reason.clone());
        }
        outcome
    }

    /// Scores the given nodes: per plugin raw → normalized → × weight, summed.
    pub fn score(&self, pod: &PodInfo, nodes: &[String], state: &CycleState) -> ScoreOutcome {
        self.score_owned(pod, nodes.to_vec(), state)
    }

    /// [`Scheduler::score`] taking the names by value (no copies of 5,000 names).
    pub fn score_owned(
        &self,
        pod: &PodInfo,
        nodes: Vec<String>,
        state: &CycleState,
    ) -> ScoreOutcome {
        let infos: Vec<Option<&NodeInfo>> = nodes.iter().map(|n| self.cache.node(n)).collect();
        self.score_resolved(pod, nodes, &infos, state)
    }

    /// [`Scheduler::score_owned`] over nodes the caller has already looked
    /// up (`infos[i]` is `nodes[i]`'s node).
    pub fn score_resolved(
        &self,
        pod: &PodInfo,
        nodes: Vec<String>,
        infos: &[Option<&NodeInfo>],
        state: &CycleState,
    ) -> ScoreOutcome {
        let (totals, weight_sum) = self.score_nodes(pod, infos, state);
        ScoreOutcome {
            totals: nodes.into_iter().zip(totals).collect(),
            weight_sum,
        }
    }

    /// Every node in name order through the filters, without touching names:
    /// returns the feasible nodes and hands each rejection to `rejected`.
    pub fn filter_all_nodes<'a>(
        &'a self,
        pod: &PodInfo,
        state: &CycleState,
        mut rejected: impl FnMut(&'a NodeInfo, Rejection),
    ) -> Vec<Option<&'a NodeInfo>> {
        let mut feasible = Vec::with_capacity(self.cache.node_count());
        for node in self.cache.nodes_sorted() {
            match self.filter_node(pod, node, state) {
                Ok(()) => feasible.push(Some(node)),
                Err(rejection) => rejected(node, rejection),
            }
        }
        let infos: Vec<&NodeInfo> = feasible.iter().flatten().copied().collect();
        if let Some((keep, reasons)) = self.preferred_mask(pod, &infos, state) {
            let mut kept_nodes = Vec::with_capacity(infos.len());
            for ((node, kept), reason) in infos.into_iter().zip(keep).zip(reasons) {
                if kept {
                    kept_nodes.push(Some(node));
                } else {
                    rejected(node, Rejection::unschedulable(reason));
                }
            }
            return kept_nodes;
        }
        feasible
    }

    /// What the plugins keep aside on the node ([`Plugin::held_on_node`]), summed.
    pub fn held_on_node(&self, node: &NodeInfo, now: SystemTime) -> crate::resources::Resources {
        let mut held = crate::resources::Resources::new();
        for entry in &self.plugins {
            if let Some(amounts) = entry.plugin.held_on_node(node, now) {
                held.add(&amounts);
            }
        }
        held
    }

    /// Σ weight × normalized score per node (a missing node scores 0 raw in
    /// every plugin), and Σ weights.
    pub fn score_nodes(
        &self,
        pod: &PodInfo,
        nodes: &[Option<&NodeInfo>],
        state: &CycleState,
    ) -> (Vec<i64>, i64) {
        let mut totals = vec![0i64; nodes.len()];
        let mut weight_sum = 0;
        let mut raw = vec![0i64; nodes.len()];
        for entry in self
            .plugins
            .iter()
            .filter(|e| e.score_weight > 0 && e.plugin.scores() && !e.plugin.skips_scoring(state))
        {
            weight_sum += entry.score_weight;
            entry
                .plugin
                .score_all(pod, nodes, &self.cache, state, &mut raw);
            entry.plugin.normalize_scores(&mut raw);
            for (total, score) in totals.iter_mut().zip(&raw) {
                *total += score * entry.score_weight;
            }
        }
        (totals, weight_sum)
    }

    /// Bind-time reservation: re-checks the node, lets every plugin reserve,
    /// gathers their pre-bind annotations and assumes the pod in the cache.
    /// On any failure everything done so far is undone.
    pub fn reserve(
        &mut self,
        pod_key: &str,
        node: &str,
        now: SystemTime,
    ) -> Result<Reserved, ReserveError> {
        self.reserve_prepared(pod_key, node, now, None)
    }

    /// [`Scheduler::reserve`] reusing the cycle state of a pre-filter run for
    /// the same cached pod at the same `now` with no cache or plugin change in
    /// between (the simulator's exclusive borrow guarantees that); pre-filter
    /// is a pure function of those, so running it again would give the same
    /// state. `None` runs pre-filter.
    pub fn reserve_prepared(
        &mut self,
        pod_key: &str,
        node: &str,
        now: SystemTime,
        prepared: Option<CycleState>,
    ) -> Result<Reserved, ReserveError> {
        let pod = self
            .cache
            .pod(pod_key)
            .cloned()
            .ok_or_else(|| CacheError::PodNotFound(pod_key.to_string()))?;
        if let Some(bound) = &pod.node {
            return Err(CacheError::AlreadyAssigned {
                pod: pod_key.to_string(),
                node: bound.clone(),
            }
            .into());
        }
        let no_longer_fits = |reason: String| ReserveError::NoLongerFits {
            pod: pod_key.to_string(),
            node: node.to_string(),
            reason,
        };
        let state = match prepared {
            Some(state) => state,
            None => self
                .pre_filter(&pod, now)
                .map_err(|r| no_longer_fits(r.reason.into()))?,
        };
        let node_info = self
            .cache
            .node(node)
            .ok_or_else(|| CacheError::NodeNotFound(node.to_string()))?;
        self.filter_node(&pod, node_info, &state)
            .map_err(|r| no_longer_fits(r.reason.into()))?;

        let mut reserved_count = 0;
        let mut failure = None;
        for entry in &mut self.plugins {
            match entry.plugin.reserve(&pod, node, &self.cache, &state) {
                Ok(()) => reserved_count += 1,
                Err(rejection) => {
                    failure = Some(ReserveError::Reserve {
                        plugin: entry.plugin.name(),
                        pod: pod_key.to_string(),
                        node: node.to_string(),
                        reason: rejection.reason.into(),
                    });
                    break;
                }
            }
        }
        let mut annotations = BTreeMap::new();
        if failure.is_none() {
            for entry in &self.plugins {
                match entry.plugin.pre_bind(&pod, node, &self.cache, &state) {
                    Ok(patch) => annotations.extend(patch),
                    Err(rejection) => {
                        failure = Some(ReserveError::PreBind {
                            plugin: entry.plugin.name(),
                            pod: pod_key.to_string(),
                            reason: rejection.reason.into(),
                        });
                        break;
                    }
                }
            }
        }
        if failure.is_none() {
            match self
                .cache
                .assume(pod_key, node, &annotations, now + self.assume_ttl)
            {
                Ok(event) => self.broadcast(&event),
                Err(err) => failure = Some(err.into()),
            }
        }
        if let Some(err) = failure {
            for entry in self.plugins.iter_mut().take(reserved_count).rev() {
                entry.plugin.unreserve(&pod, node, &self.cache);
            }
            return Err(err);
        }
        Ok(Reserved {
            pod_key: pod_key.to_string(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            node: node.to_string(),
            annotations,
        })
    }

    /// Runs the plugins' Permit for a pod just reserved (assumed). Allowed:
    /// what to bind now. Held: the pod stays assumed, marked held, until
    /// its deadline (its assumption lasts that long too). Refused: the
    /// reservation is rolled back.
    pub fn permit(&mut self, reserved: Reserved, now: SystemTime) -> Result<PermitStep, String> {
        let Some(pod) = self.cache.pod(&reserved.pod_key).cloned() else {
            return Err(format!("pod {} left the cache", reserved.pod_key));
        };
        let verdict = self.run_permit(&pod, &reserved.node);
        match verdict {
            Err(rejection) => {
                self.rollback(&reserved);
                Err(format!(
                    "pod {} refused at permit: {}",
                    reserved.pod_key, rejection.reason
                ))
            }
            Ok(Permit::Allow) => Ok(PermitStep::Bind {
                pods: vec![reserved],
                through_permit: false,
            }),
            Ok(Permit::AllowGroup { group }) => {
                let mut pods = vec![reserved];
                pods.extend(self.release_group_for_binding(&group, now));
                Ok(PermitStep::Bind {
                    pods,
                    through_permit: true,
                })
            }
            Ok(Permit::Wait { group, timeout }) => {
                let deadline = now + timeout;
                self.cache
                    .set_held(&reserved.pod_key, true, deadline + self.assume_ttl);
                self.permits.hold(HeldPod {
                    reserved,
                    group: group.clone(),
                    since: now,
                    deadline,
                });
                Ok(PermitStep::Held { group, deadline })
            }
        }
    }

    /// Permit again for a pod already held (a `/bind` retried by
    /// kube-scheduler): its group may have become ready meanwhile.
    pub fn recheck_held(&mut self, pod_key: &str, now: SystemTime) -> Option<PermitStep> {
        let held = self.permits.get(pod_key)?.clone();
        let pod = self.cache.pod(pod_key).cloned()?;
        match self.run_permit(&pod, &held.reserved.node) {
            Ok(Permit::AllowGroup { group }) | Ok(Permit::Wait { group, .. })
                if group != held.group =>
            {
                // The gang's group changed while it was held: the hold stays
                // under its old group and ends at its deadline at the latest.
                Some(PermitStep::Held {
                    group: held.group,
                    deadline: held.deadline,
                })
            }
            Ok(Permit::AllowGroup { group }) => Some(PermitStep::Bind {
                pods: self.release_group_for_binding(&group, now),
                through_permit: true,
            }),
            Ok(Permit::Allow) => {
                self.permits.take(pod_key);
                self.cache.set_held(pod_key, false, now + self.assume_ttl);
                Some(PermitStep::Bind {
                    pods: vec![held.reserved],
                    through_permit: true,
                })
            }
            Ok(Permit::Wait { .. }) | Err(_) => Some(PermitStep::Held {
                group: held.group,
                deadline: held.deadline,
            }),
        }
    }

    /// Every plugin's Permit: the first refusal wins, then a group to
    /// release, then the shortest wait.
    fn run_permit(&mut self, pod: &PodInfo, node: &str) -> Result<Permit, Rejection> {
        let mut verdict = Permit::Allow;
        for entry in &mut self.plugins {
            match entry.plugin.permit(pod, node, &self.cache)? {
                Permit::Allow => {}
                group @ Permit::AllowGroup { .. } => verdict = group,
                Permit::Wait { group, timeout } => match &verdict {
                    Permit::AllowGroup { .. } => {}
                    Permit::Wait {
                        timeout: shorter, ..
                    } if shorter <= &timeout => {}
                    _ => verdict = Permit::Wait { group, timeout },
                },
            }
        }
        Ok(verdict)
    }

    /// Takes the held pods of `group` out of the table for binding; they
    /// stay assumed (no longer held) for the assumed-pod TTL.
    fn release_group_for_binding(&mut self, group: &str, now: SystemTime) -> Vec<Reserved> {
        let mut pods = Vec::new();
        for held in self.permits.take_group(group) {
            if self
                .cache
                .set_held(&held.reserved.pod_key, false, now + self.assume_ttl)
            {
                pods.push(held.reserved);
            }
        }
        pods
    }

    /// Tells the plugins that a pod allowed through Permit is bound, and
    /// records it for `/bind` calls waiting on it.
    pub fn bound_after_permit(&mut self, reserved: &Reserved, now: SystemTime) {
        if let Some(pod) = self.cache.pod(&reserved.pod_key).cloned() {
            for entry in &mut self.plugins {
                entry.plugin.post_bind(&pod, &self.cache);
            }
        }
        self.permits.record(
            &reserved.pod_key,
            &reserved.uid,
            HoldOutcome::Bound {
                node: reserved.node.clone(),
            },
            now,
        );
    }

    /// A binding after Permit failed: rolls it back and records why.
    pub fn binding_failed_after_permit(
        &mut self,
        reserved: &Reserved,
        reason: String,
        now: SystemTime,
    ) {
        self.rollback(reserved);
        self.permits.record(
            &reserved.pod_key,
            &reserved.uid,
            HoldOutcome::Released(reason),
            now,
        );
    }

    /// Releases held pods whose deadline passed, with whatever their plugins
    /// release along (a Strict gang's whole group), and held pods that left
    /// the cache or were bound by someone else. Each released pod's
    /// assumption and reservations are undone, so its resources are free.
    pub fn expire_permits(&mut self, now: SystemTime) -> Vec<ReleasedHold> {
        self.permits.forget_old_outcomes(now);
        if self.permits.is_empty() {
            return Vec::new();
        }
        let mut released = Vec::new();
        let vanished: Vec<String> = self
            .permits
            .iter()
            .filter(|h| {
                self.cache
                    .pod(&h.reserved.pod_key)
                    .is_none_or(|p| !p.held || p.uid != h.reserved.uid)
            })
            .map(|h| h.reserved.pod_key.clone())
            .collect();
        for key in vanished {
            if let Some(held) = self.permits.take(&key) {
                let reason = format!(
                    "pod {key} was deleted or bound elsewhere while it waited for its group"
                );
                self.permits.record(
                    &key,
                    &held.reserved.uid,
                    HoldOutcome::Released(reason.clone()),
                    now,
                );
                released.push(ReleasedHold {
                    pod_key: key,
                    node: held.reserved.node,
                    reason,
                });
            }
        }
        for key in self.permits.expired(now) {
            let Some(held) = self.permits.take(&key) else {
                // Already released with its group.
                continue;
            };
            let scope = self.cache.pod(&key).cloned().map(|pod| {
                self.plugins
                    .iter()
                    .map(|e| e.plugin.permit_release_scope(&pod, &self.cache))
                    .fold(PermitRelease::Member, |wider, scope| {
                        if scope == PermitRelease::Group {
                            scope
                        } else {
                            wider
                        }
                    })
            });
            let waited = held.deadline.duration_since(held.since).unwrap_or_default();
            let reason = format!(
                "pod {key} waited {}s on node {} for group [{}] and timed out; released",
                waited.as_secs(),
                held.reserved.node,
                held.group
            );
            let mut group_members = Vec::new();
            if scope == Some(PermitRelease::Group) {
                group_members = self.permits.take_group(&held.group);
            }
            self.release_held(held, reason.clone(), now, &mut released);
            for member in group_members {
                let why = format!(
                    "gang group [{}] rejected: member {key} timed out waiting",
                    member.group
                );
                self.release_held(member, why, now, &mut released);
            }
        }
        released
    }

    fn release_held(
        &mut self,
        held: HeldPod,
        reason: String,
        now: SystemTime,
        released: &mut Vec<ReleasedHold>,
    ) {
        self.rollback(&held.reserved);
        self.permits.record(
            &held.reserved.pod_key,
            &held.reserved.uid,
            HoldOutcome::Released(reason.clone()),
            now,
        );
        released.push(ReleasedHold {
            pod_key: held.reserved.pod_key,
            node: held.reserved.node,
            reason,
        });
    }

    /// Undoes a reservation whose binding failed.
    pub fn rollback(&mut self, reserved: &Reserved) {
        let pod = self.cache.pod(&reserved.pod_key).cloned();
        if let Some(event) = self.cache.forget(&reserved.pod_key) {
            self.broadcast(&event);
        }
        if let Some(pod) = pod {
            for entry in self.plugins.iter_mut().rev() {
                entry.plugin.unreserve(&pod, &reserved.node, &self.cache);
            }
        }
    }

    /// Collects the plugins' due status writes.
    pub fn pending_writes(&mut self, now: SystemTime) -> Vec<AnnotationWrite> {
        let cache = &self.cache;
        let controllers = &self.controllers;
        self.plugins
            .iter_mut()
            .flat_map(|entry| entry.plugin.pending_writes(cache, now))
            .filter(|write| controllers.allows_write_to(write.resource))
            .collect()
    }

    /// Collects the plugins' due status patches.
    pub fn pending_status_writes(&mut self, now: SystemTime) -> Vec<StatusWrite> {
        let cache = &self.cache;
        let controllers = &self.controllers;
        self.plugins
            .iter_mut()
            .flat_map(|entry| entry.plugin.pending_status_writes(cache, now))
            .filter(|write| controllers.allows_write_to(write.resource))
            .collect()
    }
}
