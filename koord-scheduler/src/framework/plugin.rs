//! What a plugin is: the [`Plugin`] trait with its extension points, the
//! per-pod [`CycleState`], and the verdicts and writes a plugin hands back.
//! Plugins depend on this module only, never on the [`super::Scheduler`]
//! that drives them.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::cache::{ClusterCache, ClusterEvent, NodeInfo, PodInfo};

/// kube-scheduler's in-process score range.
pub const MAX_NODE_SCORE: i64 = 100;

/// The text of a refusal. A pod is often refused on thousands of nodes for
/// the same reason (an LSR pod on every node without a topology): a
/// constant reason costs no allocation per node, and a built one is shared
/// by reference count wherever it is copied (one per node in `/filter`'s
/// answer). Compares, prints and encodes as its text.
#[derive(Clone)]
pub enum Reason {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Reason {
    pub fn as_str(&self) -> &str {
        match self {
            Reason::Static(text) => text,
            Reason::Shared(text) => text,
        }
    }
}

impl std::ops::Deref for Reason {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for Reason {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Reason {}

impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Reason {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Reason> for &str {
    fn eq(&self, other: &Reason) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Reason> for String {
    fn eq(&self, other: &Reason) -> bool {
        self == other.as_str()
    }
}

impl From<&'static str> for Reason {
    fn from(text: &'static str) -> Self {
        Reason::Static(text)
    }
}

impl From<String> for Reason {
    fn from(text: String) -> Self {
        Reason::Shared(text.into())
    }
}

impl From<Reason> for String {
    fn from(reason: Reason) -> Self {
        reason.as_str().to_string()
    }
}

impl serde::Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for Reason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Reason::from)
    }
}

/// Why a pod cannot go to a node (or anywhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: Reason,
    /// Preemption would not help (kube-scheduler's UnschedulableAndUnresolvable).
    pub unresolvable: bool,
}

impl Rejection {
    pub fn unschedulable(reason: impl Into<Reason>) -> Self {
        Self {
            reason: reason.into(),
            unresolvable: false,
        }
    }

    pub fn unresolvable(reason: impl Into<Reason>) -> Self {
        Self {
            reason: reason.into(),
            unresolvable: true,
        }
    }
}

/// Per-pod scratch space, written in pre-filter and read afterwards.
/// A handful of entries read once per node: a linear scan beats hashing.
pub struct CycleState {
    pub now: SystemTime,
    data: Vec<(&'static str, Box<dyn Any + Send + Sync>)>,
}

impl CycleState {
    pub fn new(now: SystemTime) -> Self {
        Self {
            now,
            data: Vec::new(),
        }
    }

    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.data.retain(|(k, _)| *k != key);
        self.data.push((key, Box::new(value)));
    }

    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        // Keys are unique, so a pointer match (the usual case: the same
        // constant) is the entry; comparing text is the fallback.
        self.data
            .iter()
            .find(|(k, _)| std::ptr::eq(*k, key))
            .or_else(|| self.data.iter().find(|(k, _)| *k == key))
            .and_then(|(_, v)| v.downcast_ref())
    }
}

/// An object write a plugin asks the shell to make (e.g. quota status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationWrite {
    /// API resource, e.g. `elasticquotas.scheduling.sigs.k8s.io`.
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    pub annotations: BTreeMap<String, String>,
}

/// A merge patch a plugin asks the shell to apply (e.g. a status).
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    /// API resource, e.g. `podgroups.scheduling.sigs.k8s.io`.
    pub resource: &'static str,
    pub namespace: Option<String>,
    pub name: String,
    /// The merge-patch body, e.g. `{"status": {...}}`.
    pub patch: serde_json::Value,
}

/// One scheduling plugin. Every method has a neutral default, so a plugin
/// implements only the extension points it needs.
/// Copies a plugin for a published snapshot of the scheduler's state
/// (implemented for every `Clone` plugin; see [`crate::cow`] for state that
/// copies cheaply).
pub trait PluginClone {
    fn clone_box(&self) -> Box<dyn Plugin>;
}

impl<T: Plugin + Clone + 'static> PluginClone for T {
    fn clone_box(&self) -> Box<dyn Plugin> {
        Box::new(self.clone())
    }
}

pub trait Plugin: Send + Sync + PluginClone {
    fn name(&self) -> &'static str;

    /// Keeps the plugin's own indexes current; called after every cache change.
    fn on_event(&mut self, _event: &ClusterEvent, _cache: &ClusterCache) {}

    /// Pod-level checks and per-pod precomputation; a rejection fails every node.
    fn pre_filter(
        &self,
        _pod: &PodInfo,
        _cache: &ClusterCache,
        _state: &mut CycleState,
    ) -> Result<(), Rejection> {
        Ok(())
    }

    fn filter(
        &self,
        _pod: &PodInfo,
        _node: &NodeInfo,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<(), Rejection> {
        Ok(())
    }

    /// Whether the pod must go to this feasible node when any feasible node
    /// qualifies: `Some(true)` where the plugin wants the pod (an owner pod
    /// where one of its reservations fits), `Some(false)` elsewhere, `None`
    /// when the plugin has no such preference for the pod. This is how the
    /// extender gives a preference the weight upstream's profile gives it
    /// (Reservation scores 5000 times a normal plugin there), which an
    /// extender's 0-10 score cannot.
    fn prefers(
        &self,
        _pod: &PodInfo,
        _node: &NodeInfo,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Option<bool> {
        None
    }

    /// Whether [`Plugin::prefers`] can answer anything but `None` for this
    /// pod; the preference pass asks only the plugins that say so, so a
    /// plugin implementing [`Plugin::prefers`] must implement this too.
    fn has_preferences(&self, _pod: &PodInfo, _state: &CycleState) -> bool {
        false
    }

    /// Why a node was left out by [`Plugin::prefers`].
    fn preference_reason(&self) -> &'static str {
        "node(s) not preferred"
    }

    /// The nodes, in the plugin's order, where [`Plugin::prefers`] may say
    /// `Some(true)` for this pod, among the candidates or not (Reservation:
    /// the nodes of the owner's reservations). When kube-scheduler's node
    /// sample left all of them out, the extender nominates the pod to one
    /// (see [`crate::placement::filter_resolved_indexed`]).
    fn preferred_nodes(&self, _pod: &PodInfo, _state: &CycleState) -> Vec<String> {
        Vec::new()
    }

    /// Capacity on the node the plugin keeps aside for pods that are not
    /// there (Reservation: what reservations still hold for their owners).
    /// Placements no kube-scheduler sees count it as taken when they rank
    /// nodes as kube-scheduler would.
    fn held_on_node(
        &self,
        _node: &NodeInfo,
        _now: SystemTime,
    ) -> Option<crate::resources::Resources> {
        None
    }

    /// Whether [`Plugin::score`] means anything.
    fn scores(&self) -> bool {
        false
    }

    /// Whether the plugin sits this pod's scoring out, weight included
    /// (upstream's PreScore Skip: DeviceShare for a pod without devices).
    fn skips_scoring(&self, _state: &CycleState) -> bool {
        false
    }

    /// Raw score of one feasible node.
    fn score(
        &self,
        _pod: &PodInfo,
        _node: &NodeInfo,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> i64 {
        0
    }

    /// Raw scores of `nodes` into `scores` (as long as `nodes`; a missing
    /// node scores 0). The default asks [`Plugin::score`] node by node; a
    /// plugin overrides it to do its per-pod work once (e.g. answer 0
    /// everywhere for a pod its score cannot tell nodes apart for).
    fn score_all(
        &self,
        pod: &PodInfo,
        nodes: &[Option<&NodeInfo>],
        cache: &ClusterCache,
        state: &CycleState,
        scores: &mut [i64],
    ) {
        for (slot, info) in scores.iter_mut().zip(nodes) {
            *slot = info.map_or(0, |node| self.score(pod, node, cache, state));
        }
    }

    /// Maps the raw scores of all feasible nodes into 0..=100; the default
    /// clamps (for plugins whose raw score already is in range).
    fn normalize_scores(&self, scores: &mut [i64]) {
        for score in scores {
            *score = (*score).clamp(0, MAX_NODE_SCORE);
        }
    }

    /// Allocates for the pod on the node at bind time; must be undone by
    /// [`Plugin::unreserve`].
    fn reserve(
        &mut self,
        _pod: &PodInfo,
        _node: &str,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<(), Rejection> {
        Ok(())
    }

    fn unreserve(&mut self, _pod: &PodInfo, _node: &str, _cache: &ClusterCache) {}

    /// Upstream's Permit, run at `/bind` once the pod is reserved and
    /// assumed: let it bind, hold it until its group can bind together, or
    /// (with a rejection) refuse it. Held pods of the cache carry
    /// [`PodInfo::held`]; `pod` itself is assumed but not held yet.
    fn permit(
        &mut self,
        _pod: &PodInfo,
        _node: &str,
        _cache: &ClusterCache,
    ) -> Result<Permit, Rejection> {
        Ok(Permit::Allow)
    }

    /// A held pod's wait ended unbound (timed out or gone): which other
    /// held pods go with it (upstream's Unreserve of a waiting pod).
    fn permit_release_scope(&self, _pod: &PodInfo, _cache: &ClusterCache) -> PermitRelease {
        PermitRelease::Member
    }

    /// A pod that went through Permit was bound through the API.
    fn post_bind(&mut self, _pod: &PodInfo, _cache: &ClusterCache) {}

    /// Annotations to persist on the pod before the Binding is created.
    fn pre_bind(
        &self,
        _pod: &PodInfo,
        _node: &str,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<BTreeMap<String, String>, Rejection> {
        Ok(BTreeMap::new())
    }

    /// Preemption (`/preempt`): for each of one node's proposed `victims`,
    /// why this plugin's rules forbid evicting it for `preemptor`, or `None`
    /// when they allow it. Node-level, because a rule may depend on what
    /// the other victims take (a quota's min).
    fn protects_victims(
        &self,
        _preemptor: &PodInfo,
        victims: &[&PodInfo],
        _cache: &ClusterCache,
    ) -> Vec<Option<String>> {
        vec![None; victims.len()]
    }

    /// Preemption: the unit `pod` is evicted with as a whole (a gang), if
    /// any; every bound member of the unit goes, or none does.
    fn preemption_unit(&self, _pod: &PodInfo, _cache: &ClusterCache) -> Option<String> {
        None
    }

    /// Status writes that are due; the shell calls this at a bounded rate.
    fn pending_writes(&mut self, _cache: &ClusterCache, _now: SystemTime) -> Vec<AnnotationWrite> {
        Vec::new()
    }

    /// Status patches that are due; the shell calls this at a bounded rate.
    fn pending_status_writes(
        &mut self,
        _cache: &ClusterCache,
        _now: SystemTime,
    ) -> Vec<StatusWrite> {
        Vec::new()
    }
}

/// A plugin's Permit verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permit {
    /// Bind now, alone.
    Allow,
    /// Hold the pod (assumed, its resources counted) for at most `timeout`
    /// until a member of `group` lets the group go.
    Wait { group: String, timeout: Duration },
    /// Bind now, together with every held pod of `group`.
    AllowGroup { group: String },
}

/// What goes with a held pod whose wait ended unbound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermitRelease {
    Member,
    /// Every held pod of its group.
    Group,
}

/// A registered plugin and where it takes part.
pub struct PluginEntry {
    pub plugin: Box<dyn Plugin>,
    pub filter: bool,
    pub score_weight: i64,
}

impl Clone for PluginEntry {
    fn clone(&self) -> Self {
        Self {
            plugin: self.plugin.clone_box(),
            filter: self.filter,
            score_weight: self.score_weight,
        }
    }
}

#[cfg(test)]
mod reason_tests {
    #![allow(clippy::unwrap_used)]
    use super::Reason;

    #[test]
    fn a_reason_compares_prints_and_encodes_as_its_text() {
        let constant = Reason::from("node(s) invalid CPU Topology");
        let built = Reason::from(String::from("node(s) invalid CPU Topology"));
        assert!(matches!(constant, Reason::Static(_)));
        assert!(matches!(built, Reason::Shared(_)));
        assert_eq!(constant, built);
        assert_eq!(built, "node(s) invalid CPU Topology");
        assert_ne!(built, "node(s) invalid CPU");
        assert_eq!(format!("{built}"), "node(s) invalid CPU Topology");
        assert_eq!(format!("{built:?}"), r#""node(s) invalid CPU Topology""#);
        let quoted = Reason::from(String::from("a \"quoted\"\nline"));
        assert_eq!(
            serde_json::to_string(&quoted).unwrap(),
            serde_json::to_string("a \"quoted\"\nline").unwrap()
        );
        let back: Reason = serde_json::from_str(r#""a \"quoted\"\nline""#).unwrap();
        assert_eq!(back, quoted);
        assert_eq!(String::from(back), "a \"quoted\"\nline");
    }
}
