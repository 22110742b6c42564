//! The cluster cache: in-memory indexes of the objects the plugins read,
//! fed synchronously by watch events (cluster mode) or a YAML snapshot
//! (simulator). Reads never call the API server.
//!
//! Pods bound by this scheduler are *assumed*: they count on their node from
//! the moment of reservation until the watch shows them bound, and fall back
//! to pending when that never happens before their deadline.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use apis::extension::priority::{PriorityClass, priority_class_of_pod};
use apis::scheduling::v1alpha1::{Device, Reservation};
use apis::scheduling_sigs::v1alpha1::{ElasticQuota, PodGroup};
use apis::slo::v1alpha1::NodeMetric;
use apis::topology::v1alpha1::NodeResourceTopology;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::cow::{CowMap, CowVec};
use crate::resources::{
    InvalidAmount, Resources, exact_resources, pod_limits_checked, pod_non_zero_requests,
    pod_requests_checked,
};

/// `namespace/name` for namespaced objects, `name` otherwise.
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// A pod with the figures every plugin needs, computed once.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Bound or assumed node.
    pub node: Option<String>,
    pub requests: Resources,
    /// Limits, counted as requests are (LoadAware's estimates).
    pub limits: Resources,
    /// Why a request or limit could not be counted exactly (malformed,
    /// negative or beyond `i64`): such a pod is refused at pre-filter,
    /// never counted as requesting nothing.
    pub invalid_requests: Option<String>,
    /// cpu/memory requests with kube-scheduler's non-zero defaults.
    pub non_zero_requests: (i64, i64),
    pub priority_class: PriorityClass,
    /// Set while the pod is assumed: when the assumption lapses.
    pub assumed_until: Option<SystemTime>,
    /// The pod as it was before we assumed it (restored on rollback or expiry).
    pub pre_assume: Option<Arc<Pod>>,
    /// Assumed and held at Permit: it counts on its node, but its binding
    /// waits for its gang (see [`crate::permit`]); not bound through the API.
    pub held: bool,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        let (requests, invalid_requests) = pod_requests_checked(&pod);
        let (limits, invalid_limits) = pod_limits_checked(&pod);
        Self {
            key: object_key(Some(&namespace), &name),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            requests,
            limits,
            invalid_requests: invalid_requests.or(invalid_limits),
            non_zero_requests: pod_non_zero_requests(&pod),
            priority_class: priority_class_of_pod(&pod),
            namespace,
            name,
            node,
            assumed_until: None,
            pre_assume: None,
            held: false,
            pod,
        }
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.pod.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    pub fn annotations(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.pod.metadata.annotations.as_ref().unwrap_or(&EMPTY)
    }

    pub fn is_assumed(&self) -> bool {
        self.assumed_until.is_some()
    }

    /// True for DaemonSet-owned pods (LoadAware lets them through).
    pub fn is_daemonset_pod(&self) -> bool {
        self.pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|owner| owner.kind == "DaemonSet")
    }
}

/// A pod's priority (`spec.priority`, 0 when unset).
pub fn pod_priority(pod: &PodInfo) -> i32 {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.priority)
        .unwrap_or_default()
}

/// Where a Node's allocatable is read from.
pub const NODE_ALLOCATABLE: &str = "status.allocatable";

/// A Node's `status.allocatable`, every amount exact (absent: nothing).
pub fn node_allocatable(node: &Node) -> Result<Resources, InvalidAmount> {
    match node.status.as_ref().and_then(|s| s.allocatable.as_ref()) {
        Some(list) => exact_resources(list, NODE_ALLOCATABLE),
        None => Ok(Resources::new()),
    }
}

fn pod_phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref().and_then(|s| s.phase.as_deref())
}

fn is_terminated(pod: &Pod) -> bool {
    matches!(pod_phase(pod), Some("Succeeded" | "Failed"))
}

/// How maps keyed by node and pod names hash. The names are chosen by users,
/// so the hasher is keyed at random per process (aHash): crafted names cannot
/// pile into one bucket, and short strings hash about as fast as with FNV.
pub type NameHasher = ahash::RandomState;

/// Hash maps keyed by node or pod names.
pub type FastMap<K, V> = HashMap<K, V, NameHasher>;

/// A node with precomputed aggregates of the pods on it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Shared (not copied) by everything that names the node per pod, such
    /// as the simulator's per-node details.
    pub name: Arc<str>,
    /// Dense, never reused number: plugins index per-node arrays with it.
    pub index: usize,
    /// Absent while only pods mention the node.
    pub node: Option<Arc<Node>>,
    /// Empty when [`Self::invalid_allocatable`] is set.
    pub allocatable: Resources,
    /// The amount of `status.allocatable` that is not an exact count: such
    /// a node is feasible for no pod and adds nothing to any total.
    pub invalid_allocatable: Option<InvalidAmount>,
    /// Sum of requests of bound and assumed pods.
    pub requested: Resources,
    pub non_zero_requested: (i64, i64),
    pub pods: HashSet<String>,
    /// The Node is cordoned or has a NoSchedule/NoExecute taint: only then
    /// can kube-scheduler's node checks turn away a pod that names no node,
    /// selector or required affinity (lets per-node walks skip them).
    pub cordoned_or_tainted: bool,
}

impl NodeInfo {
    fn empty(name: &str, index: usize) -> Self {
        Self {
            name: Arc::from(name),
            index,
            node: None,
            allocatable: Resources::new(),
            invalid_allocatable: None,
            requested: Resources::new(),
            non_zero_requested: (0, 0),
            pods: HashSet::new(),
            cordoned_or_tainted: false,
        }
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .unwrap_or(&EMPTY)
    }

    pub fn annotations(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.node
            .as_ref()
            .and_then(|n| n.metadata.annotations.as_ref())
            .unwrap_or(&EMPTY)
    }

    fn add_pod(&mut self, pod: &PodInfo) {
        if self.pods.insert(pod.key.clone()) {
            self.requested.add(&pod.requests);
            // Saturating, as `Resources` sums (a bound pod's refused amount
            // counts as `i64::MAX`).
            let (cpu, memory) = &mut self.non_zero_requested;
            *cpu = cpu.saturating_add(pod.non_zero_requests.0);
            *memory = memory.saturating_add(pod.non_zero_requests.1);
        }
    }

    fn remove_pod(&mut self, pod: &PodInfo) {
        if self.pods.remove(&pod.key) {
            self.requested.sub(&pod.requests);
            let (cpu, memory) = &mut self.non_zero_requested;
            *cpu = cpu.saturating_sub(pod.non_zero_requests.0);
            *memory = memory.saturating_sub(pod.non_zero_requests.1);
        }
    }
}

/// Every kind the cache stores.
#[derive(Debug, Clone)]
pub enum Object {
    Node(Node),
    Pod(Pod),
    NodeMetric(NodeMetric),
    Reservation(Reservation),
    ElasticQuota(ElasticQuota),
    PodGroup(PodGroup),
    Device(Device),
    NodeResourceTopology(NodeResourceTopology),
    PodDisruptionBudget(PodDisruptionBudget),
}

/// The kind of an [`Object`], for events and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    Node,
    Pod,
    NodeMetric,
    Reservation,
    ElasticQuota,
    PodGroup,
    Device,
    NodeResourceTopology,
    PodDisruptionBudget,
}

impl Object {
    pub fn kind(&self) -> ObjectKind {
        match self {
            Object::Node(_) => ObjectKind::Node,
            Object::Pod(_) => ObjectKind::Pod,
            Object::NodeMetric(_) => ObjectKind::NodeMetric,
            Object::Reservation(_) => ObjectKind::Reservation,
            Object::ElasticQuota(_) => ObjectKind::ElasticQuota,
            Object::PodGroup(_) => ObjectKind::PodGroup,
            Object::Device(_) => ObjectKind::Device,
            Object::NodeResourceTopology(_) => ObjectKind::NodeResourceTopology,
            Object::PodDisruptionBudget(_) => ObjectKind::PodDisruptionBudget,
        }
    }

    fn metadata(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Object::Node(o) => &o.metadata,
            Object::Pod(o) => &o.metadata,
            Object::NodeMetric(o) => &o.metadata,
            Object::Reservation(o) => &o.metadata,
            Object::ElasticQuota(o) => &o.metadata,
            Object::PodGroup(o) => &o.metadata,
            Object::Device(o) => &o.metadata,
            Object::NodeResourceTopology(o) => &o.metadata,
            Object::PodDisruptionBudget(o) => &o.metadata,
        }
    }

    /// `metadata.resourceVersion`, when set.
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata().resource_version.as_deref()
    }

    /// `namespace/name` or `name`.
    pub fn key(&self) -> String {
        let meta = self.metadata();
        object_key(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or(""),
        )
    }
}

/// A watch event.
#[derive(Debug, Clone)]
pub enum Change {
    Upsert(Object),
    Delete(Object),
}

/// A pod in phase Succeeded or Failed, as the watch reported it.
#[derive(Debug, Clone)]
pub struct EndedPod {
    pub pod: Arc<PodInfo>,
    pub succeeded: bool,
    /// The pod object was deleted (it no longer counts anywhere).
    pub deleted: bool,
}

/// What changed, for the plugins' own indexes.
#[derive(Debug, Clone)]
pub enum ClusterEvent {
    /// A pod appeared, changed, was assumed, confirmed, rolled back or removed.
    Pod {
        old: Option<Arc<PodInfo>>,
        new: Option<Arc<PodInfo>>,
        /// Set when the watch reported the pod Succeeded or Failed (it leaves
        /// the cache, as it holds nothing any more) or deleted such a pod;
        /// kept for status bookkeeping such as PodGroup's succeeded/failed
        /// counts.
        ended: Option<EndedPod>,
    },
    /// Another object changed; `key` is its cache key.
    Object { kind: ObjectKind, key: String },
}

/// Errors of cache operations started by the scheduler itself.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CacheError {
    #[error("pod {0} is not in the scheduler cache")]
    PodNotFound(String),
    #[error("pod {pod} is already on node {node}")]
    AlreadyAssigned { pod: String, node: String },
    #[error("node {0} is not in the scheduler cache")]
    NodeNotFound(String),
}

/// The nodes with a Node object at one moment, in name order, and where
/// each [`NodeInfo::index`] stands among them: per-node details kept by
/// position are named only when read (see `crate::node_map`).
#[derive(Debug)]
pub struct NodeNames {
    names: Vec<Arc<str>>,
    /// By [`NodeInfo::index`]; [`Self::ABSENT`] for a node without a Node
    /// object (or added since).
    position_by_index: Vec<u32>,
}

impl NodeNames {
    const ABSENT: u32 = u32::MAX;

    /// The position of the node entry numbered `index`.
    pub fn position_of_index(&self, index: usize) -> Option<u32> {
        self.position_by_index
            .get(index)
            .copied()
            .filter(|p| *p != Self::ABSENT)
    }

    /// The position of the node called `name`.
    pub fn position_of(&self, name: &str) -> Option<u32> {
        self.names
            .binary_search_by(|n| (**n).cmp(name))
            .ok()
            .map(|p| p as u32)
    }

    /// The name at `position` (a position this table gave).
    pub fn name(&self, position: u32) -> &Arc<str> {
        &self.names[position as usize]
    }
}

/// The cache itself; see the module docs.
#[derive(Debug, Default, Clone)]
pub struct ClusterCache {
    /// Node entries by [`NodeInfo::index`]; a dropped entry leaves `None`
    /// (indexes are never reused), so per-node walks read a dense array
    /// instead of probing a hash map per node.
    /// In [`CowVec`] chunks: a clone of the cache (a published snapshot)
    /// shares them, and a write copies the entries of one chunk. Entries
    /// stay inline, not behind an `Arc` each: per-node walks read them in
    /// order, and 5,000 scattered entries made every walk ~3× slower.
    node_slots: CowVec<Option<NodeInfo>>,
    /// Node name → index into `node_slots`.
    ///
    /// One table behind an `Arc`, not a [`CowMap`]: every `/filter` and
    /// `/prioritize` looks up each candidate's name here (10,000 lookups a
    /// pod at 5,000 nodes), and a `CowMap` hashes each name twice. A node
    /// that comes or goes after a publish copies the table (~0.3 ms at
    /// 5,000 nodes); a watch list arrives as one write, so the initial sync
    /// copies it at most once.
    node_index: Arc<FastMap<String, usize>>,
    /// Indexes of the nodes with a Node object, in name order (copied by a
    /// write after a clone: only when a node comes or goes).
    sorted_nodes: Arc<Vec<usize>>,
    /// [`NodeNames`] of `sorted_nodes`, built when first asked for after a
    /// node came or went.
    names: std::sync::OnceLock<Arc<NodeNames>>,
    pods: CowMap<String, Arc<PodInfo>>,
    pod_keys_by_uid: CowMap<String, String>,
    pub node_metrics: CowMap<String, Arc<NodeMetric>>,
    /// Copied whole by the first write after a clone: reservations are few
    /// and change rarely, and readers walk them in name order.
    pub reservations: Arc<BTreeMap<String, Arc<Reservation>>>,
    pub elastic_quotas: BTreeMap<String, Arc<ElasticQuota>>,
    pub pod_groups: BTreeMap<String, Arc<PodGroup>>,
    /// By node name, one per node.
    pub devices: CowMap<String, Arc<Device>>,
    /// By node name, one per node.
    pub node_resource_topologies: CowMap<String, Arc<NodeResourceTopology>>,
    /// `policy/v1` PodDisruptionBudgets by `namespace/name` (preemption
    /// counts the victims it adds against them).
    pub disruption_budgets: BTreeMap<String, Arc<PodDisruptionBudget>>,
}

impl ClusterCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Any node entry, also one only pods mention.
    fn entry(&self, name: &str) -> Option<&NodeInfo> {
        let index = *self.node_index.get(name)?;
        self.node_slots.get(index)?.as_ref()
    }

    fn entry_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        let index = *self.node_index.get(name)?;
        self.node_slots.get_mut(index)?.as_mut()
    }

    /// The entry for `name`, created (with the next index) when missing.
    fn entry_or_insert(&mut self, name: &str) -> &mut NodeInfo {
        let index = match self.node_index.get(name) {
            Some(index) => *index,
            None => {
                let index = self.node_slots.len();
                self.node_slots.push(Some(NodeInfo::empty(name, index)));
                Arc::make_mut(&mut self.node_index).insert(name.to_string(), index);
                index
            }
        };
        let slot = self
            .node_slots
            .get_mut(index)
            .expect("node_index names only slots that exist");
        slot.get_or_insert_with(|| NodeInfo::empty(name, index))
    }

    fn drop_entry(&mut self, name: &str) {
        if let Some(index) = Arc::make_mut(&mut self.node_index).remove(name)
            && let Some(slot) = self.node_slots.get_mut(index)
        {
            *slot = None;
        }
    }

    /// Where `name` is (`Ok`) or belongs (`Err`) in `sorted_nodes`.
    fn sorted_position(&self, name: &str) -> Result<usize, usize> {
        self.sorted_nodes.binary_search_by(|index| {
            self.node_slots[*index]
                .as_ref()
                .map_or("", |n| &*n.name)
                .cmp(name)
        })
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.entry(name).filter(|n| n.node.is_some())
    }

    /// Nodes that have a Node object, in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes_sorted()
    }

    /// Node names sorted, for deterministic iteration.
    pub fn node_names_sorted(&self) -> Vec<String> {
        self.nodes_sorted().map(|n| n.name.to_string()).collect()
    }

    /// Nodes in name order without copying names.
    pub fn nodes_sorted(&self) -> impl Iterator<Item = &NodeInfo> {
        self.sorted_nodes
            .iter()
            .filter_map(|index| self.node_slots.get(*index)?.as_ref())
    }

    /// The name of the node entry numbered `index` ([`NodeInfo::index`]),
    /// None once that entry was dropped (numbers are never reused).
    pub fn node_name_at(&self, index: usize) -> Option<&Arc<str>> {
        let node = self.node_slots.get(index)?.as_ref()?;
        Some(&node.name)
    }

    pub fn node_count(&self) -> usize {
        self.sorted_nodes.len()
    }

    /// The names of the nodes with a Node object, shared: one clone per
    /// caller, built once per change of the node set.
    pub fn node_names(&self) -> Arc<NodeNames> {
        let names = self.names.get_or_init(|| {
            let mut position_by_index = vec![NodeNames::ABSENT; self.node_slots.len()];
            let mut names = Vec::with_capacity(self.sorted_nodes.len());
            for &index in self.sorted_nodes.iter() {
                if let Some(node) = self.node_slots.get(index).and_then(Option::as_ref) {
                    position_by_index[index] = names.len() as u32;
                    names.push(Arc::clone(&node.name));
                }
            }
            Arc::new(NodeNames {
                names,
                position_by_index,
            })
        });
        Arc::clone(names)
    }

    /// One more than the largest [`NodeInfo::index`] handed out.
    pub fn node_index_bound(&self) -> usize {
        self.node_slots.len()
    }

    pub fn pod(&self, key: &str) -> Option<&Arc<PodInfo>> {
        self.pods.get(key)
    }

    pub fn pod_by_uid(&self, uid: &str) -> Option<&Arc<PodInfo>> {
        self.pod_keys_by_uid.get(uid).and_then(|k| self.pods.get(k))
    }

    pub fn pods(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        self.pods.values()
    }

    pub fn pods_on_node<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a Arc<PodInfo>> + 'a {
        self.entry(node)
            .into_iter()
            .flat_map(|n| n.pods.iter())
            .filter_map(|key| self.pods.get(key))
    }

    /// Pods without a node, sorted by key.
    pub fn pending_pods(&self) -> Vec<Arc<PodInfo>> {
        let mut pending: Vec<_> = self
            .pods
            .values()
            .filter(|p| p.node.is_none())
            .cloned()
            .collect();
        pending.sort_by(|a, b| a.key.cmp(&b.key));
        pending
    }

    /// The cached objects of one kind (clones; for relists, which are rare).
    pub fn objects_of(&self, kind: ObjectKind) -> Vec<Object> {
        self.objects_where(kind, |_| true)
    }

    /// Clones of the cached objects of one kind whose key passes `wanted`
    /// (only those are copied).
    fn objects_where(&self, kind: ObjectKind, wanted: impl Fn(&str) -> bool) -> Vec<Object> {
        fn wrap<'a, T: Clone + 'a>(
            objects: impl Iterator<Item = (&'a String, &'a Arc<T>)>,
            wanted: &dyn Fn(&str) -> bool,
            variant: fn(T) -> Object,
        ) -> Vec<Object> {
            objects
                .filter(|(key, _)| wanted(key))
                .map(|(_, o)| variant((**o).clone()))
                .collect()
        }
        let wanted: &dyn Fn(&str) -> bool = &wanted;
        match kind {
            ObjectKind::Node => self
                .node_slots
                .iter()
                .flatten()
                .filter(|info| wanted(&info.name))
                .filter_map(|info| info.node.as_ref())
                .map(|node| Object::Node((**node).clone()))
                .collect(),
            ObjectKind::Pod => self
                .pods
                .iter()
                .filter(|(key, _)| wanted(key))
                .map(|(_, info)| Object::Pod((*info.pod).clone()))
                .collect(),
            ObjectKind::NodeMetric => self
                .node_metrics
                .iter()
                .filter(|(key, _)| wanted(key))
                .map(|(_, metric)| Object::NodeMetric((**metric).clone()))
                .collect(),
            ObjectKind::Reservation => wrap(self.reservations.iter(), wanted, Object::Reservation),
            ObjectKind::ElasticQuota => {
                wrap(self.elastic_quotas.iter(), wanted, Object::ElasticQuota)
            }
            ObjectKind::PodGroup => wrap(self.pod_groups.iter(), wanted, Object::PodGroup),
            ObjectKind::Device => wrap(self.devices.iter(), wanted, Object::Device),
            ObjectKind::NodeResourceTopology => wrap(
                self.node_resource_topologies.iter(),
                wanted,
                Object::NodeResourceTopology,
            ),
            ObjectKind::PodDisruptionBudget => wrap(
                self.disruption_budgets.iter(),
                wanted,
                Object::PodDisruptionBudget,
            ),
        }
    }

    /// The changes that turn this cache's objects of `kind` into exactly
    /// `listed` (a watch relist): deletions for what the list no longer has
    /// (deleted while the watch was down), then every listed object.
    pub fn relist_changes(&self, kind: ObjectKind, listed: Vec<Object>) -> Vec<Change> {
        let listed_keys: HashSet<String> = listed.iter().map(Object::key).collect();
        let mut changes: Vec<Change> = self
            .objects_where(kind, |key| !listed_keys.contains(key))
            .into_iter()
            .map(Change::Delete)
            .collect();
        changes.extend(listed.into_iter().map(Change::Upsert));
        changes
    }

    /// Applies one watch event and says what changed.
    pub fn apply(&mut self, change: Change) -> ClusterEvent {
        let (object, deleted) = match change {
            Change::Upsert(object) => (object, false),
            Change::Delete(object) => (object, true),
        };
        let key = object.key();
        let kind = object.kind();
        match object {
            Object::Pod(pod) => {
                if deleted || is_terminated(&pod) {
                    let succeeded = pod_phase(&pod) == Some("Succeeded");
                    let ended = is_terminated(&pod).then(|| EndedPod {
                        pod: Arc::new(PodInfo::new(Arc::new(pod))),
                        succeeded,
                        deleted,
                    });
                    let mut event = self.remove_pod(&key);
                    if let ClusterEvent::Pod { ended: slot, .. } = &mut event {
                        *slot = ended;
                    }
                    event
                } else {
                    self.upsert_pod(pod)
                }
            }
            Object::Node(node) => {
                if deleted {
                    if let Ok(position) = self.sorted_position(&key) {
                        Arc::make_mut(&mut self.sorted_nodes).remove(position);
                        self.names = std::sync::OnceLock::new();
                    }
                    if let Some(info) = self.entry_mut(&key) {
                        info.node = None;
                        info.allocatable = Resources::new();
                        info.invalid_allocatable = None;
                        info.cordoned_or_tainted = false;
                        if info.pods.is_empty() {
                            self.drop_entry(&key);
                        }
                    }
                } else {
                    let (allocatable, invalid_allocatable) = match node_allocatable(&node) {
                        Ok(allocatable) => (allocatable, None),
                        Err(invalid) => (Resources::new(), Some(invalid)),
                    };
                    let cordoned_or_tainted = node.spec.as_ref().is_some_and(|spec| {
                        spec.unschedulable == Some(true)
                            || spec.taints.iter().flatten().any(|taint| {
                                taint.effect == "NoSchedule" || taint.effect == "NoExecute"
                            })
                    });
                    let info = self.entry_or_insert(&key);
                    let index = info.index;
                    info.allocatable = allocatable;
                    info.invalid_allocatable = invalid_allocatable;
                    info.cordoned_or_tainted = cordoned_or_tainted;
                    info.node = Some(Arc::new(node));
                    if let Err(position) = self.sorted_position(&key) {
                        Arc::make_mut(&mut self.sorted_nodes).insert(position, index);
                        self.names = std::sync::OnceLock::new();
                    }
                }
                ClusterEvent::Object { kind, key }
            }
            Object::NodeMetric(o) => {
                store(&mut self.node_metrics, &key, o, deleted);
                ClusterEvent::Object { kind, key }
            }
            Object::Reservation(o) => {
                store_sorted(Arc::make_mut(&mut self.reservations), kind, key, o, deleted)
            }
            Object::ElasticQuota(o) => {
                store_sorted(&mut self.elastic_quotas, kind, key, o, deleted)
            }
            Object::PodGroup(o) => store_sorted(&mut self.pod_groups, kind, key, o, deleted),
            Object::Device(o) => {
                store(&mut self.devices, &key, o, deleted);
                ClusterEvent::Object { kind, key }
            }
            Object::NodeResourceTopology(o) => {
                store(&mut self.node_resource_topologies, &key, o, deleted);
                ClusterEvent::Object { kind, key }
            }
            Object::PodDisruptionBudget(o) => {
                store_sorted(&mut self.disruption_budgets, kind, key, o, deleted)
            }
        }
    }

    /// The PodDisruptionBudgets of one namespace, in name order (keys are
    /// `namespace/name`, so they sit together in the sorted map).
    pub fn disruption_budgets_in<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Arc<PodDisruptionBudget>> + 'a {
        self.disruption_budgets
            .range(format!("{namespace}/")..)
            .take_while(move |(key, _)| {
                key.strip_prefix(namespace)
                    .is_some_and(|rest| rest.starts_with('/'))
            })
            .map(|(_, budget)| budget)
    }

    fn upsert_pod(&mut self, pod: Pod) -> ClusterEvent {
        let mut info = PodInfo::new(Arc::new(pod));
        let old = self.pods.get(&info.key).cloned();
        if let Some(previous) = &old
            && previous.is_assumed()
        {
            match &info.node {
                // The watch confirms our binding: the pod is now simply bound.
                Some(node) if Some(node) == previous.node.as_ref() => {}
                // A stale view from before the binding: keep our assumption,
                // but remember the newer pod for a rollback.
                None => {
                    let mut kept = (**previous).clone();
                    kept.pre_assume = Some(Arc::clone(&info.pod));
                    return self.replace_pod(old, kept);
                }
                // Bound elsewhere (by someone else): the watch wins.
                Some(_) => {}
            }
        }
        info.assumed_until = None;
        info.pre_assume = None;
        self.replace_pod(old, info)
    }

    fn replace_pod(&mut self, old: Option<Arc<PodInfo>>, new: PodInfo) -> ClusterEvent {
        if let Some(previous) = &old {
            self.unaccount(previous);
        }
        let new = Arc::new(new);
        self.account(&new);
        self.pods.insert(new.key.clone(), Arc::clone(&new));
        if !new.uid.is_empty() {
            self.pod_keys_by_uid
                .insert(new.uid.clone(), new.key.clone());
        }
        ClusterEvent::Pod {
            old,
            new: Some(new),
            ended: None,
        }
    }

    fn remove_pod(&mut self, key: &str) -> ClusterEvent {
        let old = self.pods.remove(key);
        if let Some(previous) = &old {
            self.unaccount(previous);
            if self.pod_keys_by_uid.get(&previous.uid).map(String::as_str) == Some(key) {
                self.pod_keys_by_uid.remove(&previous.uid);
            }
        }
        ClusterEvent::Pod {
            old,
            new: None,
            ended: None,
        }
    }

    fn account(&mut self, pod: &PodInfo) {
        if let Some(node) = &pod.node {
            self.entry_or_insert(node).add_pod(pod);
        }
    }

    fn unaccount(&mut self, pod: &PodInfo) {
        if let Some(node) = &pod.node
            && let Some(info) = self.entry_mut(node)
        {
            info.remove_pod(pod);
            if info.node.is_none() && info.pods.is_empty() {
                self.drop_entry(node);
            }
        }
    }

    /// Takes a pod out of the cache as it is (assumed or held state
    /// included), for a what-if evaluation that [`ClusterCache::reattach_pod`]
    /// undoes exactly.
    pub fn detach_pod(&mut self, key: &str) -> Option<(Arc<PodInfo>, ClusterEvent)> {
        let pod = self.pods.get(key).cloned()?;
        Some((pod, self.remove_pod(key)))
    }

    /// Puts back a pod taken out by [`ClusterCache::detach_pod`].
    pub fn reattach_pod(&mut self, pod: &PodInfo) -> ClusterEvent {
        let old = self.pods.get(&pod.key).cloned();
        self.replace_pod(old, pod.clone())
    }

    /// Assumes a pending pod onto `node` with `annotations` merged in, until
    /// the watch confirms it or `until` passes.
    pub fn assume(
        &mut self,
        key: &str,
        node: &str,
        annotations: &BTreeMap<String, String>,
        until: SystemTime,
    ) -> Result<ClusterEvent, CacheError> {
        let previous = self
            .pods
            .get(key)
            .cloned()
            .ok_or_else(|| CacheError::PodNotFound(key.to_string()))?;
        if let Some(bound) = &previous.node {
            return Err(CacheError::AlreadyAssigned {
                pod: key.to_string(),
                node: bound.clone(),
            });
        }
        if self.node(node).is_none() {
            return Err(CacheError::NodeNotFound(node.to_string()));
        }
        let mut pod = (*previous.pod).clone();
        if !annotations.is_empty() {
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .extend(annotations.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        let mut info = PodInfo::new(Arc::new(pod));
        info.assumed_until = Some(until);
        info.pre_assume = Some(Arc::clone(&previous.pod));
        Ok(self.replace_pod(Some(previous), info))
    }

    /// Undoes [`ClusterCache::assume`]: the pod is pending again. A pod that
    /// is no longer assumed (the watch already confirmed it) is left alone.
    pub fn forget(&mut self, key: &str) -> Option<ClusterEvent> {
        let previous = self.pods.get(key).cloned()?;
        let original = previous
            .pre_assume
            .clone()
            .filter(|_| previous.is_assumed())?;
        let info = PodInfo::new(original);
        Some(self.replace_pod(Some(previous), info))
    }

    /// Marks an assumed pod as held at Permit (or no longer held) and moves
    /// its assumption deadline to `until`; nothing is re-accounted (the pod
    /// stays on its node). False when the pod is not assumed.
    pub fn set_held(&mut self, key: &str, held: bool, until: SystemTime) -> bool {
        let Some(previous) = self.pods.get(key).filter(|p| p.is_assumed()) else {
            return false;
        };
        let mut info = (**previous).clone();
        info.held = held;
        info.assumed_until = Some(until);
        self.pods.insert(key.to_string(), Arc::new(info));
        true
    }

    /// Reverts assumed pods whose deadline passed without confirmation.
    pub fn expire_assumed(&mut self, now: SystemTime) -> Vec<ClusterEvent> {
        let expired: Vec<String> = self
            .pods
            .values()
            .filter(|p| p.assumed_until.is_some_and(|until| until <= now))
            .map(|p| p.key.clone())
            .collect();
        expired.iter().filter_map(|key| self.forget(key)).collect()
    }
}

fn store<T>(map: &mut CowMap<String, Arc<T>>, key: &str, object: T, deleted: bool) {
    if deleted {
        map.remove(key);
    } else {
        map.insert(key.to_string(), Arc::new(object));
    }
}

fn store_sorted<T>(
    map: &mut BTreeMap<String, Arc<T>>,
    kind: ObjectKind,
    key: String,
    object: T,
    deleted: bool,
) -> ClusterEvent {
    if deleted {
        map.remove(&key);
    } else {
        map.insert(key.clone(), Arc::new(object));
    }
    ClusterEvent::Object { kind, key }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn node(name: &str, cpu: &str) -> Object {
        Object::Node(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": cpu, "memory": "8Gi"}}
            }))
            .unwrap(),
        )
    }

    fn pod(name: &str, node: Option<&str>, cpu: &str) -> Object {
        let mut spec =
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]});
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        Object::Pod(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
                "spec": spec
            }))
            .unwrap(),
        )
    }

    #[test]
    fn bound_pods_add_to_their_node_and_deletion_removes_them() {
        let mut cache = ClusterCache::new();
        cache.apply(Change::Upsert(node("n1", "4")));
        cache.apply(Change::Upsert(pod("a", Some("n1"), "1")));
        cache.apply(Change::Upsert(pod("b", None, "1")));
        assert_eq!(cache.node("n1").unwrap().requested.get("cpu"), 1000);
        assert_eq!(cache.pending_pods().len(), 1);
        cache.apply(Change::Delete(pod("a", Some("n1"), "1")));
        assert_eq!(cache.node("n1").unwrap().requested.get("cpu"), 0);
        assert!(cache.pod_by_uid("uid-a").is_none());
    }

    #[test]
    fn a_relist_deletes_what_disappeared_while_the_watch_was_down() {
        let mut cache = ClusterCache::new();
        for change in [node("n1", "4"), node("n2", "4")] {
            cache.apply(Change::Upsert(change));
        }
        cache.apply(Change::Upsert(pod("a", Some("n1"), "1")));
        cache.apply(Change::Upsert(pod("b", Some("n2"), "2")));
        // The watch reconnects: b and n2 were deleted meanwhile, c is new.
        let pods = cache.relist_changes(
            ObjectKind::Pod,
            vec![pod("a", Some("n1"), "1"), pod("c", None, "1")],
        );
        let nodes = cache.relist_changes(ObjectKind::Node, vec![node("n1", "4")]);
        for change in pods.into_iter().chain(nodes) {
            cache.apply(change);
        }
        assert!(cache.pod("default/b").is_none());
        assert!(cache.pod("default/c").is_some());
        assert!(cache.node("n2").is_none());
        assert_eq!(cache.node_names_sorted(), vec!["n1".to_string()]);
        assert_eq!(cache.node("n1").unwrap().requested.get("cpu"), 1000);
        // Other kinds are untouched by a relist of pods.
        assert!(
            cache
                .relist_changes(ObjectKind::Reservation, Vec::new())
                .is_empty()
        );
    }

    #[test]
    fn assumed_pod_counts_until_confirmed_and_expires_if_never_confirmed() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut cache = ClusterCache::new();
        cache.apply(Change::Upsert(node("n1", "4")));
        cache.apply(Change::Upsert(pod("a", None, "1")));
        cache.apply(Change::Upsert(pod("b", None, "2")));
        let annotations = BTreeMap::from([("k".to_string(), "v".to_string())]);
        cache
            .assume(
                "default/a",
                "n1",
                &annotations,
                t0 + Duration::from_secs(30),
            )
            .unwrap();
        cache
            .assume(
                "default/b",
                "n1",
                &BTreeMap::new(),
                t0 + Duration::from_secs(30),
            )
            .unwrap();
        assert_eq!(cache.node("n1").unwrap().requested.get("cpu"), 3000);
        assert_eq!(cache.pod("default/a").unwrap().annotations()["k"], "v");
        // A stale pending view of `a` does not undo the assumption.
        cache.apply(Change::Upsert(pod("a", None, "1")));
        assert!(cache.pod("default/a").unwrap().is_assumed());
        // The watch confirms `a`; `b` is never confirmed.
        cache.apply(Change::Upsert(pod("a", Some("n1"), "1")));
        assert!(!cache.pod("default/a").unwrap().is_assumed());
        assert!(
            cache
                .expire_assumed(t0 + Duration::from_secs(29))
                .is_empty()
        );
        let events = cache.expire_assumed(t0 + Duration::from_secs(30));
        assert_eq!(events.len(), 1);
        assert_eq!(cache.node("n1").unwrap().requested.get("cpu"), 1000);
        assert!(cache.pod("default/b").unwrap().node.is_none());
        // Confirmed pods cannot be forgotten.
        assert!(cache.forget("default/a").is_none());
    }

    #[test]
    fn nodes_walk_in_name_order_and_indexes_are_never_reused() {
        let mut cache = ClusterCache::new();
        for name in ["n3", "n1", "n2"] {
            cache.apply(Change::Upsert(node(name, "4")));
        }
        // A pod on a node without a Node object makes an unlisted entry.
        cache.apply(Change::Upsert(pod("a", Some("n0"), "1")));
        assert_eq!(cache.node_names_sorted(), ["n1", "n2", "n3"]);
        assert!(cache.node("n0").is_none());
        assert_eq!(cache.pods_on_node("n0").count(), 1);
        let n2 = cache.node("n2").unwrap().index;
        cache.apply(Change::Delete(node("n2", "4")));
        assert_eq!(cache.node_names_sorted(), ["n1", "n3"]);
        assert_eq!(cache.node_count(), 2);
        cache.apply(Change::Upsert(node("n2", "4")));
        let again = cache.node("n2").unwrap().index;
        assert_ne!(again, n2);
        assert_eq!(again + 1, cache.node_index_bound());
        // The pod-only entry becomes a listed node, keeping its pod.
        cache.apply(Change::Upsert(node("n0", "4")));
        assert_eq!(cache.node_names_sorted(), ["n0", "n1", "n2", "n3"]);
        assert_eq!(cache.node("n0").unwrap().requested.get("cpu"), 1000);
        let names: Vec<_> = cache.nodes().map(|n| &*n.name).collect();
        assert_eq!(names, ["n0", "n1", "n2", "n3"]);
    }

    #[test]
    fn cordons_and_blocking_taints_are_flagged() {
        let mut cache = ClusterCache::new();
        let with_spec = |name: &str, spec: serde_json::Value| {
            Object::Node(
                serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap(),
            )
        };
        let taint = |effect: &str| json!({"taints": [{"key": "k", "effect": effect}]});
        cache.apply(Change::Upsert(with_spec("plain", json!({}))));
        cache.apply(Change::Upsert(with_spec(
            "cordoned",
            json!({"unschedulable": true}),
        )));
        cache.apply(Change::Upsert(with_spec(
            "prefer",
            taint("PreferNoSchedule"),
        )));
        cache.apply(Change::Upsert(with_spec(
            "no-schedule",
            taint("NoSchedule"),
        )));
        cache.apply(Change::Upsert(with_spec("no-execute", taint("NoExecute"))));
        let flagged: Vec<_> = cache
            .nodes_sorted()
            .filter(|n| n.cordoned_or_tainted)
            .map(|n| &*n.name)
            .collect();
        assert_eq!(flagged, ["cordoned", "no-execute", "no-schedule"]);
        // Uncordoned by an update.
        cache.apply(Change::Upsert(with_spec("cordoned", json!({}))));
        assert!(!cache.node("cordoned").unwrap().cordoned_or_tainted);
    }

    #[test]
    fn assume_rejects_unknown_and_bound_pods() {
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(10_000);
        let mut cache = ClusterCache::new();
        cache.apply(Change::Upsert(node("n1", "4")));
        cache.apply(Change::Upsert(pod("a", Some("n1"), "1")));
        assert!(matches!(
            cache.assume("default/x", "n1", &BTreeMap::new(), far),
            Err(CacheError::PodNotFound(_))
        ));
        assert!(matches!(
            cache.assume("default/a", "n1", &BTreeMap::new(), far),
            Err(CacheError::AlreadyAssigned { .. })
        ));
    }
}
