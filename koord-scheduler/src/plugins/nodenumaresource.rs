//! NodeNUMAResource: exclusive cpusets for LSE/LSR prod pods, picked from the
//! CPU topology koordlet reports on the NodeResourceTopology, honouring bind
//! policies (FullPCPUs / SpreadByPCPUs), NUMA topology policies, exclusive
//! policies and reserved CPUs. The result goes to the pod's resource-status
//! annotation. Allocation happens in `reserve`, which the framework runs under
//! the scheduler's write lock, so concurrent binds can never overlap.
//!
//! A placed Reservation keeps its reserve pod's resource-status annotation
//! and holds that cpuset: other pods cannot get those CPUs; its owners take
//! them first, and a Restricted reservation's owners only them.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use koord_common::sync::MutexExt;
use std::time::SystemTime;

use crate::resources::format_amount;
use apis::extension::node_reservation::get_node_reservation;
use apis::extension::numa_aware::{
    ANNOTATION_NODE_CPU_TOPOLOGY, ANNOTATION_RESOURCE_STATUS, CPUBindPolicy, CPUExclusivePolicy,
    CPUInfo, NUMAAllocateStrategy, NUMANodeResource, NUMATopologyPolicy, NodeCPUBindPolicy,
    NumaNodeStatus, NumaTopologyExclusive, ResourceStatus, get_cpu_topology,
    get_kubelet_cpu_manager_policy, get_numa_topology_spec, get_pod_cpu_allocs, get_resource_spec,
    get_resource_status, node_cpu_bind_policy, node_numa_allocate_strategy,
    node_numa_topology_policy,
};
use apis::extension::priority::PriorityClass;
use apis::extension::qos::{QoSClass, pod_qos_class_raw};
use apis::topology::v1alpha1::NodeResourceTopology;
use serde::Deserialize;

mod accumulator;
#[cfg(test)]
mod feasibility_tests;
pub mod topologymanager;

use self::accumulator::{CpuLayout, HeldCpu, TakeRequest, take_preferred_cpus};
use self::topologymanager::{NumaMask, generate_hints, merge};
use crate::cache::{ClusterCache, ClusterEvent, NodeInfo, ObjectKind, PodInfo};
use crate::config::{ConfigError, parse_args};
use crate::cow::{CowMap, CowVec};
use crate::framework::{CycleState, Plugin, Rejection};
use crate::plugins::reservation::pre_allocation::{self, HandOver};
use crate::plugins::reservation::{Holder, PlacedByNode, allocated_from, owned_reservations};

pub const NAME: &str = "NodeNUMAResource";

pub const ERR_NOT_MATCH_NUMA_TOPOLOGY: &str = "node(s) NUMA Topology policy not match";
pub const ERR_INVALID_REQUESTED_CPUS: &str = "the requested CPUs must be integer";
pub const ERR_INVALID_CPU_TOPOLOGY: &str = "node(s) invalid CPU Topology";
pub const ERR_SMT_ALIGNMENT: &str = "node(s) requested cpus not multiple cpus per core";
pub const ERR_CPU_BIND_POLICY_CONFLICT: &str =
    "node(s) cpu bind policy conflicts with pod's required cpu bind policy";
pub const ERR_NOT_ENOUGH_CPUS: &str = "not enough cpus available to satisfy request";
pub const ERR_UNSATISFIED_NUMA_CPU: &str = "Unsatisfied NUMA cpu";
pub const ERR_MISSING_NUMA_RESOURCES: &str = "node(s) missing NUMA resources";
/// A pre-allocating reservation's cpuset cannot cover the CPUs of the pods
/// it would take in.
pub const ERR_CPUSET_NOT_TAKEN_OVER: &str =
    "node(s) cannot take over the cpuset of the pods the reservation pre-allocates";

const STATE_KEY: &str = "NodeNUMAResource/request";
const STATE_PLACEMENTS: &str = "NodeNUMAResource/placements";

/// `NodeNUMAResourceArgs` (only the fields this extender uses).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeNUMAResourceArgs {
    #[serde(default, rename = "defaultCPUBindPolicy")]
    pub default_cpu_bind_policy: Option<CPUBindPolicy>,
    /// How nodes are scored on the NUMA nodes a pod gets.
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
    /// How candidate sets of NUMA nodes are scored against each other.
    #[serde(default, rename = "numaScoringStrategy")]
    pub numa_scoring_strategy: Option<ScoringStrategy>,
}

/// Upstream's `ScoringStrategy`: `LeastAllocated` (the default) or
/// `MostAllocated`, over weighted resources (default cpu 1, memory 1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScoringStrategy {
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    #[serde(default)]
    pub resources: Vec<ResourceWeight>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResourceWeight {
    pub name: String,
    #[serde(default)]
    pub weight: i64,
}

/// A validated scoring strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaScorer {
    most_allocated: bool,
    weights: BTreeMap<String, i64>,
}

impl Default for NumaScorer {
    fn default() -> Self {
        Self {
            most_allocated: false,
            weights: BTreeMap::from([("cpu".to_string(), 1), ("memory".to_string(), 1)]),
        }
    }
}

impl NumaScorer {
    fn from_args(args: Option<ScoringStrategy>, field: &str) -> Result<Self, ConfigError> {
        let Some(args) = args else {
            return Ok(Self::default());
        };
        let most_allocated = match args.type_.as_deref() {
            None | Some("") | Some("LeastAllocated") => false,
            Some("MostAllocated") => true,
            Some(other) => {
                return Err(ConfigError::InvalidArgs {
                    plugin: NAME.to_string(),
                    message: format!(
                        "{field}.type {other:?} is not LeastAllocated or MostAllocated"
                    ),
                });
            }
        };
        let mut weights = BTreeMap::new();
        for resource in args.resources {
            if !(0..=100).contains(&resource.weight) {
                return Err(ConfigError::InvalidArgs {
                    plugin: NAME.to_string(),
                    message: format!(
                        "{field}.resources[{}].weight {} is not within 0..=100",
                        resource.name, resource.weight
                    ),
                });
            }
            weights.insert(resource.name, resource.weight);
        }
        if weights.is_empty() {
            weights = Self::default().weights;
        }
        Ok(Self {
            most_allocated,
            weights,
        })
    }

    /// Upstream's least/most-allocated score (0..=100) of `requested` (the
    /// pod's request included) against `allocatable`, weighted; resources
    /// with no allocatable are left out.
    pub fn score(
        &self,
        requested: &BTreeMap<String, i64>,
        allocatable: &BTreeMap<String, i64>,
    ) -> i64 {
        let (mut total, mut weight_sum) = (0i128, 0i128);
        for (name, weight) in &self.weights {
            let capacity = allocatable.get(name).copied().unwrap_or(0);
            if capacity <= 0 {
                continue;
            }
            let used = requested.get(name).copied().unwrap_or(0).max(0);
            let (capacity, used) = (i128::from(capacity), i128::from(used));
            let score = if used > capacity {
                0
            } else if self.most_allocated {
                used * 100 / capacity
            } else {
                (capacity - used) * 100 / capacity
            };
            total += score * i128::from(*weight);
            weight_sum += i128::from(*weight);
        }
        if weight_sum == 0 {
            return 0;
        }
        i64::try_from(total / weight_sum).unwrap_or(0)
    }
}

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let raw: NodeNUMAResourceArgs = parse_args(NAME, args)?;
    // Upstream's default is FullPCPUs.
    let default_policy = match raw.default_cpu_bind_policy {
        None | Some(CPUBindPolicy::Default) => CPUBindPolicy::FullPCPUs,
        Some(policy) => policy,
    };
    let mut plugin = NodeNUMAResource::new(default_policy);
    plugin.scorer = NumaScorer::from_args(raw.scoring_strategy, "scoringStrategy")?;
    plugin.numa_scorer = NumaScorer::from_args(raw.numa_scoring_strategy, "numaScoringStrategy")?;
    Ok(Box::new(plugin))
}

pub use crate::cpuset::{CpuListError, CpuSet, MAX_CPU_ID};

/// Parses a Linux cpu list (`0-3,8`) under [`crate::cpuset`]'s bounds.
pub fn parse_cpuset(text: &str) -> Result<CpuSet, CpuListError> {
    CpuSet::parse_each_cpu_once(text)
}

/// Formats a cpu set as a Linux cpu list with ranges.
pub fn format_cpuset(cpus: &BTreeSet<i32>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = cpus.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// What a pod asks of this plugin, decided once in pre-filter.
#[derive(Debug, Clone)]
struct Request {
    cpus: usize,
    /// None: the pod does not need a cpuset (only a NUMA policy may apply).
    bind_policy: Option<CPUBindPolicy>,
    required_policy: Option<CPUBindPolicy>,
    exclusive: Option<CPUExclusivePolicy>,
    pod_numa_policy: NUMATopologyPolicy,
    numa_exclusive: Option<NumaTopologyExclusive>,
    /// A pre-allocating reserve pod's: node → the CPUs of the running pods
    /// it takes in there, which it must take over (empty for other pods).
    taking_over: BTreeMap<String, CpuSet>,
}

impl Request {
    /// The CPUs the reserve pod must take over on the node, if any.
    fn taking_over_on(&self, node: &str) -> Option<&CpuSet> {
        if self.taking_over.is_empty() {
            return None;
        }
        self.taking_over.get(node)
    }
}

/// Per NUMA node: resource → amount (cpu in milli-CPUs).
type NumaAmounts = BTreeMap<i32, BTreeMap<String, i64>>;

/// How a placement is worked out. `Allocate` (reserve, at bind time) picks
/// the cpuset; `Check` (filter and score) only finds whether one exists and
/// which NUMA nodes it would use, from counts of free CPUs, which costs a
/// few additions per node instead of an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Allocate,
    Check,
}

/// Which of the node's free CPUs a reservation leaves to the pod.
#[derive(Debug, Clone, Copy)]
enum Restriction<'a> {
    Unrestricted,
    Within(&'a CpuSet),
    Without(&'a CpuSet),
}

impl Restriction<'_> {
    fn allows(self, cpu: i32) -> bool {
        match self {
            Self::Unrestricted => true,
            Self::Within(cpus) => cpus.contains(cpu),
            Self::Without(cpus) => !cpus.contains(cpu),
        }
    }
}

/// The candidates a required bind policy leaves of the free CPUs (as
/// [`cpus_for_required_policy`] does), as an index into [`FreeCounts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Narrowing {
    AnyCpu = 0,
    WholeCores = 1,
    OnePerCore = 2,
}

impl Narrowing {
    fn of(required: Option<CPUBindPolicy>) -> Self {
        match required {
            Some(CPUBindPolicy::FullPCPUs) => Self::WholeCores,
            Some(CPUBindPolicy::SpreadByPCPUs) => Self::OnePerCore,
            _ => Self::AnyCpu,
        }
    }
}

/// Free CPUs counted under each [`Narrowing`]: in all, and per NUMA node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct FreeCounts {
    total: [usize; 3],
    per_numa: BTreeMap<i32, [usize; 3]>,
}

impl FreeCounts {
    /// Counts the CPUs `is_free` accepts, core by core: every one; those of
    /// cores with all `cpus_per_core` threads free; each core's lowest.
    fn of(topology: &NodeTopology, is_free: impl Fn(i32) -> bool) -> Self {
        let mut counts = Self::default();
        let per_core = topology.layout.cpus_per_core();
        let mut threads: Vec<(i32, i32)> = Vec::new();
        for core in &topology.cores {
            threads.clear();
            threads.extend(core.iter().copied().filter(|(cpu, _)| is_free(*cpu)));
            let Some((_, first_numa)) = threads.first().copied() else {
                continue;
            };
            counts.add(first_numa, Narrowing::OnePerCore);
            let whole = threads.len() == per_core;
            for (_, numa) in &threads {
                counts.add(*numa, Narrowing::AnyCpu);
                if whole {
                    counts.add(*numa, Narrowing::WholeCores);
                }
            }
        }
        counts
    }

    fn add(&mut self, numa: i32, narrowing: Narrowing) {
        let index = narrowing as usize;
        self.total[index] += 1;
        // A mask names NUMA nodes 0..=63 only; others count in the total.
        if (0..=NumaMask::MAX_NODE).contains(&numa) {
            self.per_numa.entry(numa).or_default()[index] += 1;
        }
    }

    /// The candidates on the mask's NUMA nodes (None: anywhere).
    fn within(&self, narrowing: Narrowing, mask: Option<NumaMask>) -> usize {
        let index = narrowing as usize;
        match mask {
            None => self.total[index],
            Some(mask) => self
                .per_numa
                .iter()
                .filter(|(numa, _)| mask.contains(**numa))
                .map(|(_, counts)| counts[index])
                .sum(),
        }
    }
}

/// One node's CPUs left after kubelet's, the node's reservation and every
/// placed pod's cpusets, and their counts; refreshed whenever one of those
/// changes, so filter only reads them.
#[derive(Debug, Clone, Default)]
struct NodeFree {
    cpus: CpuSet,
    counts: FreeCounts,
}

/// What a cpuset pod may be given on one node.
struct CpuOffer<'a> {
    counts: Cow<'a, FreeCounts>,
    narrowing: Narrowing,
    required: Option<CPUBindPolicy>,
    take_request: TakeRequest,
    /// The candidate CPUs (narrowed) and what other pods hold, for a real
    /// allocation: always in allocate mode, in check mode only where the
    /// counts cannot decide.
    cpus: Option<(BTreeSet<i32>, BTreeMap<i32, HeldCpu>)>,
}

impl CpuOffer<'_> {
    /// How many candidate CPUs lie on the mask's NUMA nodes (None: all).
    fn available(&self, within: Option<NumaMask>) -> usize {
        self.counts.within(self.narrowing, within)
    }

    /// The cpuset on the mask's NUMA nodes (None: anywhere): allocated in
    /// allocate mode; in check mode an empty set when one exists. The
    /// accumulator always finds `count` CPUs among at least as many
    /// candidates, and with a required policy the candidates are whole
    /// cores / one thread per core, so the count alone decides except where
    /// [`NodeNUMAResource::cpu_offer`] kept the CPUs for a real allocation.
    fn pick(
        &self,
        topology: &NodeTopology,
        within: Option<NumaMask>,
        preferred: &BTreeSet<i32>,
        mode: Mode,
    ) -> Option<BTreeSet<i32>> {
        let Some((free, held)) = &self.cpus else {
            return (self.available(within) >= self.take_request.count).then(BTreeSet::new);
        };
        let free: BTreeSet<i32> = match within {
            None => free.clone(),
            Some(mask) => free
                .iter()
                .copied()
                .filter(|cpu| {
                    topology
                        .cpus
                        .get(cpu)
                        .is_some_and(|i| mask.contains(i.node))
                })
                .collect(),
        };
        let chosen =
            take_preferred_cpus(&topology.layout, &free, preferred, held, self.take_request)
                .filter(|chosen| {
                    self.required
                        .is_none_or(|r| satisfies_policy(topology, chosen, r))
                })?;
        Some(if mode == Mode::Check {
            BTreeSet::new()
        } else {
            chosen
        })
    }
}

/// Which plugin step asks for a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Filter,
    Score,
}

/// Check-mode placements per node index that filter worked out for score
/// in the same cycle; each tagged with the plugin's state generation it was
/// computed at, so a change in between is never answered from it.
#[derive(Default)]
struct Placements(Mutex<HashMap<usize, (u64, PlacementResult)>>);

type PlacementResult = Result<Option<Choice>, Rejection>;

impl Placements {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, (u64, PlacementResult)>> {
        // Inserts are whole, so a map poisoned by a panic elsewhere is sound.
        self.0.lock_or_recover()
    }
}

/// One node's CPU topology and the CPUs nobody may get.
#[derive(Debug, Clone, Default)]
struct NodeTopology {
    cpus: BTreeMap<i32, CPUInfo>,
    cpus_per_core: usize,
    /// Reserved by kubelet or held by kubelet-managed pods (from the NRT).
    kubelet_reserved: CpuSet,
    kubelet_full_pcpus_only: bool,
    nrt_numa_policy: NUMATopologyPolicy,
    /// NUMA node → allocatable amounts, from the NRT's `node-<id>` zones, or
    /// (no zones) the CPUs the topology lists per NUMA node.
    numa_resources: NumaAmounts,
    /// `cpus` arranged for the accumulator.
    layout: CpuLayout,
    /// Each core's threads as (cpu, NUMA node), ascending ids, for counting.
    cores: Vec<Vec<(i32, i32)>>,
    /// Every core has exactly `layout.cpus_per_core()` threads, all on one
    /// NUMA node: then whole-core counts decide a FullPCPUs allocation.
    regular: bool,
}

/// One pod's cpuset on a node.
#[derive(Debug, Clone)]
struct Allocation {
    cpus: CpuSet,
    exclusive: Option<CPUExclusivePolicy>,
    /// The NUMA amounts its resource-status records.
    numa: NumaAmounts,
}

/// See the module docs.
///
/// Node-keyed maps hash with aHash (as [`FastMap`](crate::cache::FastMap)
/// does): a cpuset pod's filter looks a node up in them on every node, and
/// SipHash was a quarter of it. Every map of pods, nodes or reservations is
/// a [`CowMap`] and the per-node-index array a [`CowVec`], so a clone of the
/// plugin (the published state) costs a few hundred reference counts, and a
/// write after it copies one shard or chunk.
#[derive(Clone)]
pub struct NodeNUMAResource {
    default_policy: CPUBindPolicy,
    /// Shared with [`Self::slots`].
    topologies: CowMap<String, Arc<NodeTopology>>,
    /// node → pod key → cpuset (the inner map is copied with its shard).
    allocations: CowMap<String, HashMap<String, Allocation>>,
    /// Cpusets chosen in reserve, for pre-bind (pod key → status).
    pending: CowMap<String, ResourceStatus>,
    /// Pod key → node of its allocation, so removal does not scan every node.
    pod_nodes: CowMap<String, String>,
    /// Reservation name → the cpuset it holds for its owners (looked up by
    /// name only; `reserved_on` gives a node's names in order).
    reserved: CowMap<String, (Holder, CpuSet)>,
    /// The names in `reserved` by node (every cpuset pod's filter asks on
    /// every node whether the node has any).
    reserved_on: PlacedByNode,
    /// Node name → the CPUs its `node.koordinator.sh/reservation` keeps
    /// from pods (read when the Node changes, not on every filter).
    node_reserved: CowMap<String, CpuSet>,
    /// Pod key → the reservation it was allocated from.
    owners: CowMap<String, String>,
    /// Node name → its free CPUs and their counts (check mode reads them).
    /// Shared with [`Self::slots`].
    free: CowMap<String, Arc<NodeFree>>,
    /// Bumped on every change of the plugin's state, so per-cycle
    /// placements computed before a change are not reused after it.
    generation: u64,
    /// Node score on the NUMA nodes a pod gets (`scoringStrategy`).
    scorer: NumaScorer,
    /// Score of a candidate NUMA node set (`numaScoringStrategy`).
    numa_scorer: NumaScorer,
    /// [`NodeInfo::index`] → the node's NUMA topology policy
    /// ([`Self::node_policy_from`]), kept on Node and NodeResourceTopology
    /// events: every pod with requests needs it on every node, and reading
    /// the node's label and topology by name there was most of the filter's
    /// cost. `None` (or past the end): not known yet, e.g. a node only pods
    /// have named so far; it is computed where needed then.
    node_policies: CowVec<Option<NUMATopologyPolicy>>,
    /// [`NodeInfo::index`] → what a check reads of the node by name
    /// (`reserved_on`, `allocations`, `topologies`, `free`), refreshed
    /// whenever one of those changes for the node: a cpuset pod's filter
    /// looked the node's name up in four maps, most of its ~400 ns per
    /// node. `None` (or past the end): not known, read by name.
    slots: CowVec<Option<NodeSlot>>,
    /// Node name → its [`NodeInfo::index`], for nodes with a Node object
    /// (kept on Node events): which slot a change by name refreshes.
    node_indexes: CowMap<String, usize>,
}

/// One node's entries of the name-keyed maps a check reads; see
/// [`NodeNUMAResource::slots`].
#[derive(Debug, Clone, Default)]
struct NodeSlot {
    /// `reserved_on` names a reservation there.
    reserved: bool,
    /// `allocations` holds some pod's cpuset there.
    allocated: bool,
    topology: Option<Arc<NodeTopology>>,
    free: Option<Arc<NodeFree>>,
}

fn core_key(info: &CPUInfo) -> (i32, i32) {
    (info.socket, info.core)
}

fn topology_from_nrt(nrt: &NodeResourceTopology) -> NodeTopology {
    let annotations = nrt.metadata.annotations.clone().unwrap_or_default();
    let mut topology = topology_from(&annotations, &nrt.topology_policies);
    let zones = numa_zone_resources(&nrt.zones);
    if !zones.is_empty() {
        topology.numa_resources = zones;
    }
    topology
}

/// Allocatable amounts of the NRT's NUMA zones (type `Node`, named
/// `node-<id>`, id 0..=63); zones or amounts that do not parse are left out.
fn numa_zone_resources(zones: &[apis::topology::v1alpha1::Zone]) -> NumaAmounts {
    let mut out = NumaAmounts::new();
    for zone in zones.iter().filter(|z| z.type_ == "Node") {
        let Some(id) = zone
            .name
            .strip_prefix("node-")
            .and_then(|id| id.parse::<i32>().ok())
            .filter(|id| (0..=NumaMask::MAX_NODE).contains(id))
        else {
            continue;
        };
        let resources = out.entry(id).or_default();
        for resource in zone.resources.iter().flatten() {
            if let Ok(amount) =
                crate::resources::exact_amount(&resource.name, &resource.allocatable)
            {
                resources.insert(resource.name.clone(), amount);
            }
        }
    }
    out
}

fn topology_from(
    annotations: &BTreeMap<String, String>,
    policies: &[apis::topology::v1alpha1::TopologyManagerPolicy],
) -> NodeTopology {
    let mut topology = NodeTopology::default();
    if let Ok(Some(cpu_topology)) = get_cpu_topology(annotations) {
        topology.cpus = cpu_topology.detail.iter().map(|c| (c.id, *c)).collect();
        // Each CPU once, within the ids a cpuset can name; anything else is
        // an invalid topology (no cpuset is handed out on it).
        let valid = topology.cpus.len() == cpu_topology.detail.len()
            && topology.cpus.keys().all(|id| (0..=MAX_CPU_ID).contains(id));
        if !valid {
            topology.cpus.clear();
        }
    }
    let mut per_core: HashMap<(i32, i32), usize> = HashMap::new();
    for info in topology.cpus.values() {
        *per_core.entry(core_key(info)).or_default() += 1;
    }
    topology.cpus_per_core = per_core.values().copied().max().unwrap_or(0);
    topology.layout = CpuLayout::new(&topology.cpus);
    let mut cores: BTreeMap<(i32, i32), Vec<(i32, i32)>> = BTreeMap::new();
    for (cpu, info) in &topology.cpus {
        cores
            .entry(core_key(info))
            .or_default()
            .push((*cpu, info.node));
    }
    topology.cores = cores.into_values().collect();
    topology.regular = topology.cores.iter().all(|threads| {
        threads.len() == topology.layout.cpus_per_core()
            && threads.iter().all(|(_, numa)| *numa == threads[0].1)
    });
    for info in topology.cpus.values() {
        if (0..=NumaMask::MAX_NODE).contains(&info.node) {
            *topology
                .numa_resources
                .entry(info.node)
                .or_default()
                .entry("cpu".to_string())
                .or_default() += 1000;
        }
    }
    if let Ok(Some(policy)) = get_kubelet_cpu_manager_policy(annotations) {
        topology
            .kubelet_reserved
            .union_with(&parse_cpuset(&policy.reserved_cpus).unwrap_or_default());
        topology.kubelet_full_pcpus_only = node_cpu_bind_policy(&BTreeMap::new(), Some(&policy))
            == NodeCPUBindPolicy::FullPCPUsOnly;
    }
    if let Ok(Some(allocs)) = get_pod_cpu_allocs(annotations) {
        for alloc in allocs.iter().filter(|a| a.managed_by_kubelet) {
            topology
                .kubelet_reserved
                .union_with(&parse_cpuset(&alloc.cpuset).unwrap_or_default());
        }
    }
    topology.nrt_numa_policy = policies
        .iter()
        .find_map(|p| {
            let text = p.as_str();
            if text.starts_with("SingleNUMANode") {
                Some(NUMATopologyPolicy::SingleNUMANode)
            } else if text.starts_with("Restricted") {
                Some(NUMATopologyPolicy::Restricted)
            } else if text.starts_with("BestEffort") {
                Some(NUMATopologyPolicy::BestEffort)
            } else {
                None
            }
        })
        .unwrap_or_default();
    topology
}

/// Node → the CPUs the pods a pre-allocating reservation takes in hold
/// there (nodes where they hold none left out).
fn cpus_handed_over(hand_over: &HandOver) -> BTreeMap<String, CpuSet> {
    let mut taken = BTreeMap::new();
    for (node, pods) in &hand_over.pods {
        let mut cpus = CpuSet::new();
        for allocation in pods.iter().filter_map(|pod| allocation_of(pod)) {
            cpus.union_with(&allocation.cpus);
        }
        if !cpus.is_empty() {
            taken.insert(node.clone(), cpus);
        }
    }
    taken
}

/// The cpuset a bound pod holds according to its resource-status annotation.
fn allocation_of(pod: &PodInfo) -> Option<Allocation> {
    let status = get_resource_status(pod.annotations()).ok()??;
    let cpus = parse_cpuset(&status.cpuset).ok()?;
    let exclusive = get_resource_spec(pod.annotations())
        .ok()
        .flatten()
        .and_then(|s| s.preferred_cpu_exclusive_policy);
    let mut numa = NumaAmounts::new();
    for entry in &status.numa_node_resources {
        if !(0..=NumaMask::MAX_NODE).contains(&entry.node) {
            continue;
        }
        for (name, quantity) in &entry.resources {
            if let Ok(amount) = crate::resources::exact_amount(name, quantity) {
                numa.entry(entry.node)
                    .or_default()
                    .insert(name.clone(), amount);
            }
        }
    }
    if cpus.is_empty() && numa.is_empty() {
        return None;
    }
    Some(Allocation {
        cpus,
        exclusive,
        numa,
    })
}

/// A chosen cpuset and the NUMA nodes it spans (in check mode: no CPUs,
/// and only the amounts spread over NUMA nodes besides pinned CPUs).
#[derive(Debug, Clone, PartialEq)]
struct Choice {
    cpus: BTreeSet<i32>,
    numa: NumaAmounts,
    /// The NUMA nodes the topology manager chose.
    affinity: Option<NumaMask>,
    /// Check mode, pinned CPUs on a set of several NUMA nodes that the
    /// spread amounts do not all touch: only an allocation tells which of
    /// them the CPUs would be on.
    cpu_numa_unknown: bool,
}

impl NodeNUMAResource {
    pub fn new(default_policy: CPUBindPolicy) -> Self {
        Self {
            default_policy,
            topologies: CowMap::new(),
            allocations: CowMap::new(),
            pending: CowMap::new(),
            pod_nodes: CowMap::new(),
            reserved: CowMap::new(),
            reserved_on: PlacedByNode::default(),
            node_reserved: CowMap::new(),
            owners: CowMap::new(),
            free: CowMap::new(),
            generation: 0,
            scorer: NumaScorer::default(),
            numa_scorer: NumaScorer::default(),
            node_policies: CowVec::new(),
            slots: CowVec::new(),
            node_indexes: CowMap::new(),
        }
    }

    /// The node's slot, when kept.
    fn slot(&self, node: &NodeInfo) -> Option<&NodeSlot> {
        self.slots.get(node.index).and_then(Option::as_ref)
    }

    /// Whether a reservation holds a cpuset on the node.
    fn reserved_on_node(&self, node: &NodeInfo) -> bool {
        match self.slot(node) {
            Some(slot) => slot.reserved,
            None => self.reserved_on.any_on(&node.name),
        }
    }

    fn topology_of(&self, node: &NodeInfo) -> Option<&NodeTopology> {
        match self.slot(node) {
            Some(slot) => slot.topology.as_deref(),
            None => self.topologies.get(&*node.name).map(Arc::as_ref),
        }
    }

    fn free_of(&self, node: &NodeInfo) -> Option<&NodeFree> {
        match self.slot(node) {
            Some(slot) => slot.free.as_deref(),
            None => self.free.get(&*node.name).map(Arc::as_ref),
        }
    }

    /// Whether the pod holds a cpuset on the node.
    fn holds_cpus_on(&self, node: &NodeInfo, pod_key: &str) -> bool {
        if self.slot(node).is_some_and(|slot| !slot.allocated) {
            return false;
        }
        self.allocations
            .get(&*node.name)
            .is_some_and(|a| a.contains_key(pod_key))
    }

    /// Rewrites the slot of the node named `name` from the name-keyed maps
    /// (after one of them changed for it); nothing for a node without a
    /// Node object, whose Node event rewrites it when it gets one.
    fn refresh_slot(&mut self, name: &str) {
        let Some(&index) = self.node_indexes.get(name) else {
            return;
        };
        let slot = NodeSlot {
            reserved: self.reserved_on.any_on(name),
            allocated: self.allocations.get(name).is_some_and(|a| !a.is_empty()),
            topology: self.topologies.get(name).cloned(),
            free: self.free.get(name).cloned(),
        };
        if self.slots.len() <= index {
            self.slots.resize(index + 1, None);
        }
        if let Some(entry) = self.slots.get_mut(index) {
            *entry = Some(slot);
        }
    }

    /// The node's NUMA topology policy: its label, or (no label, `None`, or
    /// one that does not parse) its topology's.
    fn node_policy_from(&self, node: &NodeInfo) -> NUMATopologyPolicy {
        match node_numa_topology_policy(node.labels()) {
            Ok(NUMATopologyPolicy::None) | Err(_) => self
                .topologies
                .get(&*node.name)
                .map_or_else(NUMATopologyPolicy::default, |t| t.nrt_numa_policy),
            Ok(policy) => policy,
        }
    }

    /// [`Self::node_policy_from`], read from [`Self::node_policies`] when known.
    fn node_policy(&self, node: &NodeInfo) -> NUMATopologyPolicy {
        match self.node_policies.get(node.index) {
            Some(Some(policy)) => *policy,
            _ => self.node_policy_from(node),
        }
    }

    /// Recomputes the kept policy of the node named `key` (after its labels
    /// or its topology changed). A node gone from the cache keeps a stale
    /// entry nobody reads: indexes are never reused.
    fn refresh_node_policy(&mut self, key: &str, cache: &ClusterCache) {
        let Some(node) = cache.node(key) else {
            return;
        };
        let policy = self.node_policy_from(node);
        if self.node_policies.len() <= node.index {
            self.node_policies.resize(node.index + 1, None);
        }
        if let Some(slot) = self.node_policies.get_mut(node.index) {
            *slot = Some(policy);
        }
    }

    /// The CPUs a reservation still holds at `now`: its cpuset minus its
    /// owner pods' cpusets; None once it holds nothing.
    fn still_held(&self, name: &str, now: SystemTime) -> Option<CpuSet> {
        let (holder, cpus) = self.reserved.get(name)?;
        let owner_pods: Vec<&String> = self
            .owners
            .iter()
            .filter(|(_, r)| *r == name)
            .map(|(pod, _)| pod)
            .collect();
        if !holder.holds(now, !owner_pods.is_empty()) {
            return None;
        }
        let on_node = self.allocations.get(&holder.node);
        let mut left = cpus.clone();
        for pod in owner_pods {
            if let Some(allocation) = on_node.and_then(|a| a.get(pod)) {
                left.difference_with(&allocation.cpus);
            }
        }
        Some(left)
    }

    /// What every reservation on the node still holds, except `freed`'s.
    fn held_on(&self, node: &str, now: SystemTime, freed: Option<&str>) -> CpuSet {
        let mut held = CpuSet::new();
        for name in self
            .reserved_on
            .on(node)
            .filter(|name| Some(name.as_str()) != freed)
        {
            if let Some(cpus) = self.still_held(name, now) {
                held.union_with(&cpus);
            }
        }
        held
    }

    /// [`Self::choose`] with reserved cpusets applied. Owners try their
    /// reservations on the node in order: within the reservation's CPUs
    /// first, then (not Restricted) with its hold freed; failing those (and
    /// not `required` to use one), like any other pod, to which every
    /// reservation's CPUs are taken.
    fn choose_with_reservations(
        &self,
        pod: &PodInfo,
        request: &Request,
        node: &NodeInfo,
        (owned, required): (&[String], bool),
        now: SystemTime,
        mode: Mode,
    ) -> Result<Option<Choice>, Rejection> {
        if !self.reserved_on_node(node) {
            return self.choose(pod, request, node, Restriction::Unrestricted, mode);
        }
        for name in owned {
            let Some((holder, _)) = self
                .reserved
                .get(name)
                .filter(|(h, _)| *h.node == *node.name)
            else {
                continue;
            };
            let Some(left) = self.still_held(name, now) else {
                continue;
            };
            let within = self.choose(pod, request, node, Restriction::Within(&left), mode);
            if let Ok(choice) = within {
                return Ok(choice);
            }
            if !holder.restricted {
                // The CPUs it still holds first, the rest from the free
                // CPUs other reservations do not hold.
                let others = self.held_on(&node.name, now, Some(name));
                let preferred: BTreeSet<i32> = left.to_btree();
                let freed = self.choose_preferring(
                    pod,
                    request,
                    node,
                    Restriction::Without(&others),
                    &preferred,
                    mode,
                );
                if let Ok(choice) = freed {
                    return Ok(choice);
                }
            }
        }
        if required && !owned.is_empty() {
            return Err(Rejection::unschedulable(ERR_NOT_ENOUGH_CPUS));
        }
        let held = self.held_on(&node.name, now, None);
        self.choose(pod, request, node, Restriction::Without(&held), mode)
    }

    /// [`Self::choose_with_reservations`] for the pod of `state`'s cycle; a
    /// pre-allocating reserve pod on a node where it takes in pods holding
    /// cpusets gets [`Self::choose_taking_over`] instead.
    fn choose_in_cycle(
        &self,
        pod: &PodInfo,
        request: &Request,
        node: &NodeInfo,
        state: &CycleState,
        mode: Mode,
    ) -> PlacementResult {
        match request.taking_over_on(&node.name) {
            Some(cpus) => self.choose_taking_over(pod, request, node, cpus, state.now),
            None => self.choose_with_reservations(
                pod,
                request,
                node,
                owned_reservations(state),
                state.now,
                mode,
            ),
        }
    }

    /// A pre-allocating reserve pod's cpuset where the pods it takes in hold
    /// `taken`: their CPUs first, then free ones no reservation holds, and
    /// refused unless it covers all of `taken` (as upstream, which checks
    /// the reserve pod's CPUs are a superset of the pre-allocated pod's).
    /// Once pre-allocated, those pods count inside the reservation, so a
    /// CPU of theirs left outside it would be counted twice. Always a real
    /// allocation, even in check mode: reserve pods are few.
    fn choose_taking_over(
        &self,
        pod: &PodInfo,
        request: &Request,
        node: &NodeInfo,
        taken: &CpuSet,
        now: SystemTime,
    ) -> PlacementResult {
        let held = self.held_on(&node.name, now, None);
        let preferred: BTreeSet<i32> = taken.to_btree();
        let choice = self.choose_preferring(
            pod,
            request,
            node,
            Restriction::Without(&held),
            &preferred,
            Mode::Allocate,
        )?;
        match choice {
            Some(choice) if preferred.is_subset(&choice.cpus) => Ok(Some(choice)),
            _ => Err(Rejection::unschedulable(ERR_CPUSET_NOT_TAKEN_OVER)),
        }
    }

    /// The check-mode placement of the pod on the node. Filter computes it
    /// and keeps the costly ones (a NUMA node set chosen by the topology
    /// manager) for score; score reads those and computes the rest, which
    /// are a few counter reads. Keeping every node's result cost more than
    /// recomputing the cheap ones (a map insert per node for every pod).
    fn placement(
        &self,
        pod: &PodInfo,
        request: &Request,
        node: &NodeInfo,
        state: &CycleState,
        step: Step,
    ) -> PlacementResult {
        let memo = || state.read::<Placements>(STATE_PLACEMENTS);
        if step == Step::Score
            && let Some(memo) = memo()
            && let Some((generation, result)) = memo.lock().get(&node.index)
            && *generation == self.generation
        {
            return result.clone();
        }
        let result = self.choose_in_cycle(pod, request, node, state, Mode::Check);
        if step == Step::Filter
            && let Ok(Some(choice)) = &result
            && choice.affinity.is_some()
            && let Some(memo) = memo()
        {
            memo.lock()
                .insert(node.index, (self.generation, result.clone()));
        }
        result
    }

    fn request_of(&self, pod: &PodInfo) -> Result<Option<Request>, Rejection> {
        let numa_spec = get_numa_topology_spec(pod.annotations())
            .map_err(|e| Rejection::unresolvable(e.to_string()))?
            .unwrap_or_default();
        let spec = get_resource_spec(pod.annotations())
            .map_err(|e| Rejection::unresolvable(e.to_string()))?
            .unwrap_or_default();
        let milli_cpu = pod.requests.get("cpu");
        if pod.requests.is_zero() {
            return Ok(None);
        }
        let qos = pod_qos_class_raw(&pod.pod);
        let allowed = matches!(qos, QoSClass::LSE | QoSClass::LSR)
            && pod.priority_class == PriorityClass::Prod;
        let mut request = Request {
            cpus: usize::try_from(milli_cpu / 1000).unwrap_or(0),
            bind_policy: None,
            required_policy: None,
            exclusive: None,
            pod_numa_policy: numa_spec.numa_topology_policy,
            numa_exclusive: numa_spec.single_numa_node_exclusive,
            taking_over: BTreeMap::new(),
        };
        if allowed {
            let resolve = |p: CPUBindPolicy| {
                if p == CPUBindPolicy::Default {
                    self.default_policy
                } else {
                    p
                }
            };
            let required = spec.required_cpu_bind_policy.map(resolve);
            let policy = required.unwrap_or_else(|| {
                spec.preferred_cpu_bind_policy
                    .map_or(self.default_policy, resolve)
            });
            if matches!(
                policy,
                CPUBindPolicy::FullPCPUs | CPUBindPolicy::SpreadByPCPUs
            ) {
                if milli_cpu % 1000 != 0 {
                    return Err(Rejection::unresolvable(ERR_INVALID_REQUESTED_CPUS));
                }
                if milli_cpu > 0 {
                    request.bind_policy = Some(policy);
                    request.required_policy = required;
                    request.exclusive = spec.preferred_cpu_exclusive_policy;
                }
            }
        }
        // A node's NUMA policy applies to every pod, so the request is kept
        // even without a cpuset or pod-level policy.
        Ok(Some(request))
    }

    /// Places the pod on the node against current allocations (see
    /// [`Mode`]); `restrict` narrows the free CPUs (reservations).
    fn choose(
        &self,
        pod: &PodInfo,
        request: &Request,
        node: &NodeInfo,
        restrict: Restriction<'_>,
        mode: Mode,
    ) -> Result<Option<Choice>, Rejection> {
        self.choose_preferring(pod, request, node, restrict, &BTreeSet::new(), mode)
    }

    /// [`Self::choose`], taking CPUs of `preferred` before any other.
    fn choose_preferring(
        &self,
        pod: &PodInfo,
        request: &Request,
        node: &NodeInfo,
        restrict: Restriction<'_>,
        preferred: &BTreeSet<i32>,
        mode: Mode,
    ) -> Result<Option<Choice>, Rejection> {
        let node_policy = self.node_policy(node);
        let numa_policy = if !node_policy.is_none()
            && !request.pod_numa_policy.is_none()
            && node_policy != request.pod_numa_policy
        {
            return Err(Rejection::unresolvable(ERR_NOT_MATCH_NUMA_TOPOLOGY));
        } else if request.pod_numa_policy.is_none() {
            node_policy
        } else {
            request.pod_numa_policy
        };
        if request.bind_policy.is_none() && numa_policy.is_none() {
            return Ok(None);
        }
        // Only now: most pods on most nodes need neither cpuset nor NUMA
        // nodes, and are answered above without it.
        let empty = NodeTopology::default();
        let found = self.topology_of(node);
        let topology = found.unwrap_or(&empty);
        let offer = match request.bind_policy {
            Some(policy) => Some(self.cpu_offer(
                pod,
                request,
                (node, found),
                policy,
                (restrict, preferred),
                mode,
            )?),
            None => None,
        };
        if offer
            .as_ref()
            .is_some_and(|o| o.available(None) < request.cpus)
        {
            return Err(Rejection::unschedulable(ERR_NOT_ENOUGH_CPUS));
        }
        // The cpuset within a set of NUMA nodes (None: anywhere); in check
        // mode an empty set stands for "one exists".
        let pick = |within: Option<NumaMask>| -> Option<BTreeSet<i32>> {
            offer.as_ref()?.pick(topology, within, preferred, mode)
        };
        if numa_policy.is_none() {
            let Some(cpus) = pick(None) else {
                return Err(Rejection::unschedulable(ERR_NOT_ENOUGH_CPUS));
            };
            return Ok(Some(Choice {
                cpus,
                numa: BTreeMap::new(),
                affinity: None,
                cpu_numa_unknown: false,
            }));
        }

        // A NUMA topology policy: upstream's topology manager decides which
        // NUMA nodes the pod may use, then the pod is placed on them.
        let numa_nodes: Vec<i32> = topology.numa_resources.keys().copied().collect();
        if numa_nodes.is_empty() {
            return Err(Rejection::unresolvable(ERR_MISSING_NUMA_RESOURCES));
        }
        let available = self.numa_available(node, topology, &pod.key);
        let pinned = offer.is_some();
        // The pod's requests the NUMA nodes account for; with a cpuset the
        // CPU part is decided by the free CPUs, not by amounts.
        let numa_requests: BTreeMap<String, i64> = pod
            .requests
            .iter()
            .filter(|(name, amount)| {
                *amount > 0
                    && topology
                        .numa_resources
                        .values()
                        .any(|resources| resources.contains_key(*name))
            })
            .map(|(name, amount)| (name.to_string(), amount))
            .collect();
        let resources: BTreeSet<String> = numa_requests.keys().cloned().collect();
        let free_cpus_on = |numa: i32| {
            offer
                .as_ref()
                .zip(NumaMask::of(&[numa]))
                .map_or(0, |(offer, mask)| offer.available(Some(mask)))
        };
        let lacking: BTreeMap<String, Vec<i32>> = resources
            .iter()
            .map(|name| {
                let nodes = numa_nodes
                    .iter()
                    .copied()
                    .filter(|numa| {
                        if pinned && name == "cpu" {
                            free_cpus_on(*numa) == 0
                        } else {
                            available
                                .get(numa)
                                .and_then(|r| r.get(name))
                                .is_none_or(|amount| *amount <= 0)
                        }
                    })
                    .collect();
                (name.clone(), nodes)
            })
            .collect();
        let amounts_fit = |mask: NumaMask| {
            numa_requests.iter().all(|(name, wanted)| {
                if pinned && name == "cpu" {
                    return true;
                }
                let sum: i64 = mask
                    .nodes()
                    .iter()
                    .filter_map(|n| available.get(n).and_then(|r| r.get(name)))
                    .sum();
                sum >= *wanted
            })
        };
        let hints = generate_hints(&numa_nodes, &resources, &lacking, numa_policy, |mask| {
            let cpus_fit = !pinned || pick(Some(mask)).is_some();
            (cpus_fit && amounts_fit(mask))
                .then(|| self.numa_score(topology, &available, &numa_requests, mask))
        });
        let exclusive = request
            .numa_exclusive
            .unwrap_or(if request.pod_numa_policy.is_none() {
                NumaTopologyExclusive::Preferred
            } else {
                NumaTopologyExclusive::Required
            });
        let statuses = self.numa_statuses(node, topology, &pod.key, &numa_nodes);
        let merged = merge(numa_policy, &numa_nodes, &[hints], exclusive, &statuses);
        if !merged.admit {
            return Err(Rejection::unschedulable(merged.reasons.join("; ")));
        }
        let mask = merged.hint.affinity;
        let cpus = if pinned {
            match pick(mask).or_else(|| pick(None).filter(|_| mask.is_none())) {
                Some(cpus) => cpus,
                None => return Err(Rejection::unschedulable(ERR_NOT_ENOUGH_CPUS)),
            }
        } else {
            BTreeSet::new()
        };
        let Some(mask) = mask else {
            // No NUMA node set chosen (nothing NUMA-accounted requested).
            return Ok(Some(Choice {
                cpus,
                numa: BTreeMap::new(),
                affinity: None,
                cpu_numa_unknown: false,
            }));
        };
        let mut numa: BTreeMap<i32, BTreeMap<String, i64>> = BTreeMap::new();
        let mut spread_requests = numa_requests.clone();
        if pinned {
            spread_requests.remove("cpu");
            for cpu in &cpus {
                if let Some(info) = topology.cpus.get(cpu) {
                    *numa
                        .entry(info.node)
                        .or_default()
                        .entry("cpu".to_string())
                        .or_default() += 1000;
                }
            }
        }
        let spread = distribute_evenly(&spread_requests, &available, mask)
            .map_err(Rejection::unschedulable)?;
        for (numa_node, amounts) in spread {
            numa.entry(numa_node).or_default().extend(amounts);
        }
        // Check mode has no CPUs to place: on a one-node set they all go
        // there; on a wider set the NUMA nodes are still exact when the
        // spread amounts already touch every node of the set.
        let mut cpu_numa_unknown = false;
        if pinned && mode == Mode::Check {
            if let [only] = mask.nodes()[..] {
                let milli = i64::try_from(request.cpus).unwrap_or(i64::MAX / 1000) * 1000;
                numa.entry(only)
                    .or_default()
                    .insert("cpu".to_string(), milli);
            } else {
                cpu_numa_unknown = mask.nodes().iter().any(|n| !numa.contains_key(n));
            }
        }
        Ok(Some(Choice {
            cpus,
            numa,
            affinity: Some(mask),
            cpu_numa_unknown,
        }))
    }

    /// The node's bind policy applied to the pod's: the required policy
    /// (None: only preferred) and the policy to allocate by; rejects with
    /// upstream's reasons for conflicts and whole-core misalignment.
    fn bind_policies(
        request: &Request,
        node: &NodeInfo,
        topology: &NodeTopology,
        mut policy: CPUBindPolicy,
    ) -> Result<(Option<CPUBindPolicy>, CPUBindPolicy), Rejection> {
        if topology.cpus.is_empty() || topology.cpus_per_core == 0 {
            return Err(Rejection::unresolvable(ERR_INVALID_CPU_TOPOLOGY));
        }
        let node_bind = if topology.kubelet_full_pcpus_only {
            NodeCPUBindPolicy::FullPCPUsOnly
        } else {
            node_cpu_bind_policy(node.labels(), None)
        };
        let mut required = request.required_policy;
        match node_bind {
            NodeCPUBindPolicy::FullPCPUsOnly => {
                if required.is_some_and(|r| r != CPUBindPolicy::FullPCPUs) {
                    return Err(Rejection::unresolvable(ERR_CPU_BIND_POLICY_CONFLICT));
                }
                required = Some(CPUBindPolicy::FullPCPUs);
            }
            NodeCPUBindPolicy::SpreadByPCPUs => {
                if required.is_some_and(|r| r != CPUBindPolicy::SpreadByPCPUs) {
                    return Err(Rejection::unresolvable(ERR_CPU_BIND_POLICY_CONFLICT));
                }
                required = Some(CPUBindPolicy::SpreadByPCPUs);
            }
            _ => {}
        }
        if let Some(r) = required {
            policy = r;
        }
        let whole_cores = required == Some(CPUBindPolicy::FullPCPUs);
        if whole_cores && !request.cpus.is_multiple_of(topology.cpus_per_core) {
            return Err(Rejection::unresolvable(ERR_SMT_ALIGNMENT));
        }
        Ok((required, policy))
    }

    /// What a cpuset pod may be given on the node. In check mode, counts of
    /// the free CPUs per NUMA node: the node's precomputed counts, or (a
    /// reservation narrows the CPUs, or the pod already holds some there)
    /// counts over the node's CPUs. Counts decide every case but two with
    /// FullPCPUs required, where the accumulator may fail to find whole
    /// cores the counts promise: an irregular topology (cores of unequal
    /// size, or split over NUMA nodes), and CPUs `preferred` first (a
    /// reservation's, which may hold half a core). Those cases, and
    /// allocate mode, get the free CPUs themselves for a real allocation.
    fn cpu_offer<'a>(
        &'a self,
        pod: &PodInfo,
        request: &Request,
        // The node and its topology, looked up once by the caller.
        (node, topology): (&NodeInfo, Option<&'a NodeTopology>),
        policy: CPUBindPolicy,
        (restrict, preferred): (Restriction<'_>, &BTreeSet<i32>),
        mode: Mode,
    ) -> Result<CpuOffer<'a>, Rejection> {
        let Some(topology) = topology else {
            return Err(Rejection::unresolvable(ERR_INVALID_CPU_TOPOLOGY));
        };
        let (required, policy) = Self::bind_policies(request, node, topology, policy)?;
        let strategy = node_numa_allocate_strategy(node.labels())
            .unwrap_or(NUMAAllocateStrategy::MostAllocated);
        let take_request = TakeRequest {
            count: request.cpus,
            bind_policy: policy,
            exclusive: request.exclusive,
            strategy,
            max_ref_count: 1,
        };
        let counts_decide = required != Some(CPUBindPolicy::FullPCPUs)
            || (topology.regular && preferred.is_empty());
        if mode == Mode::Check && counts_decide {
            let holds_cpus_here = self.holds_cpus_on(node, &pod.key);
            let base = self.free_of(node);
            let counts = match (base, restrict, holds_cpus_here) {
                (Some(base), Restriction::Unrestricted, false) => Cow::Borrowed(&base.counts),
                (Some(base), _, false) => Cow::Owned(FreeCounts::of(topology, |cpu| {
                    base.cpus.contains(cpu) && restrict.allows(cpu)
                })),
                _ => {
                    let free = self.free_cpus(&node.name, topology, Some(&pod.key));
                    Cow::Owned(FreeCounts::of(topology, |cpu| {
                        free.contains(cpu) && restrict.allows(cpu)
                    }))
                }
            };
            return Ok(CpuOffer {
                counts,
                narrowing: Narrowing::of(required),
                required,
                take_request,
                cpus: None,
            });
        }
        let (free, held) = self.free_and_held(pod, node, topology, restrict, required);
        let counts = FreeCounts::of(topology, |cpu| free.contains(&cpu));
        Ok(CpuOffer {
            counts: Cow::Owned(counts),
            narrowing: Narrowing::AnyCpu,
            required,
            take_request,
            cpus: Some((free, held)),
        })
    }

    /// The free CPUs a cpuset pod may get on the node (kubelet-reserved,
    /// node-reserved and other pods' CPUs removed, `restrict` applied, a
    /// required bind policy's narrowing done), and what other pods hold.
    fn free_and_held(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        topology: &NodeTopology,
        restrict: Restriction<'_>,
        required: Option<CPUBindPolicy>,
    ) -> (BTreeSet<i32>, BTreeMap<i32, HeldCpu>) {
        // Free CPUs: topology minus reserved minus every other pod's cpuset.
        // Every walk is over the node's own CPUs (or a smaller cpuset), so a
        // huge cpuset on some pod costs no more than the node's CPU count.
        let node_reserved = self.node_reserved.get(&*node.name);
        let mut free: BTreeSet<i32> = topology
            .cpus
            .keys()
            .copied()
            .filter(|cpu| {
                !topology.kubelet_reserved.contains(*cpu)
                    && !node_reserved.is_some_and(|r| r.contains(*cpu))
            })
            .collect();
        // CPUs other pods hold, with the exclusive policy they hold them
        // under: the accumulator keeps an exclusive pod off those cores /
        // NUMA nodes when it can (upstream treats exclusivity as preferred).
        let mut held: BTreeMap<i32, HeldCpu> = BTreeMap::new();
        if let Some(allocations) = self.allocations.get(&*node.name) {
            for (key, allocation) in allocations {
                if *key == pod.key {
                    continue;
                }
                let mut take = |cpu: i32| {
                    free.remove(&cpu);
                    let entry = held.entry(cpu).or_default();
                    entry.ref_count += 1;
                    if allocation
                        .exclusive
                        .is_some_and(|p| p != CPUExclusivePolicy::None)
                    {
                        entry.exclusive = allocation.exclusive;
                    }
                };
                if allocation.cpus.len() <= topology.cpus.len() {
                    for cpu in allocation.cpus.iter_as::<i32>() {
                        if topology.cpus.contains_key(&cpu) {
                            take(cpu);
                        }
                    }
                } else {
                    for cpu in topology.cpus.keys() {
                        if allocation.cpus.contains(*cpu) {
                            take(*cpu);
                        }
                    }
                }
            }
        }
        free.retain(|cpu| restrict.allows(*cpu));
        // A required policy narrows the candidates as upstream does: whole
        // free cores for FullPCPUs, one thread per core for SpreadByPCPUs.
        if let Some(required) = required {
            free = cpus_for_required_policy(topology, &free, required);
        }
        (free, held)
    }

    /// The node's CPUs nobody but `skip_pod` holds and no reservation of
    /// kubelet or the node keeps, as a set (the source of the counts).
    fn free_cpus(&self, node: &str, topology: &NodeTopology, skip_pod: Option<&str>) -> CpuSet {
        let node_reserved = self.node_reserved.get(node);
        let mut free = CpuSet::new();
        for cpu in topology.cpus.keys() {
            if !topology.kubelet_reserved.contains(*cpu)
                && !node_reserved.is_some_and(|r| r.contains(*cpu))
            {
                free.insert(*cpu);
            }
        }
        for (key, allocation) in self.allocations.get(node).into_iter().flatten() {
            if Some(key.as_str()) == skip_pod {
                continue;
            }
            if allocation.cpus.len() <= free.len() {
                for cpu in allocation.cpus.iter() {
                    free.remove(cpu);
                }
            } else {
                free.difference_with(&allocation.cpus);
            }
        }
        free
    }

    /// Recounts the node's free CPUs after its topology, reserved CPUs or
    /// allocations changed.
    fn refresh_free(&mut self, node: &str) {
        match self.topologies.get(node) {
            Some(topology) => {
                let cpus = self.free_cpus(node, topology, None);
                let counts = FreeCounts::of(topology, |cpu| cpus.contains(cpu));
                self.free
                    .insert(node.to_string(), Arc::new(NodeFree { cpus, counts }));
            }
            None => {
                self.free.remove(node);
            }
        }
        self.refresh_slot(node);
    }

    /// Per NUMA node, what is left for this pod: allocatable minus the NUMA
    /// amounts other pods hold (a cpuset without recorded amounts counts its
    /// CPUs on their NUMA nodes), never below zero.
    fn numa_available(
        &self,
        node: &NodeInfo,
        topology: &NodeTopology,
        pod_key: &str,
    ) -> NumaAmounts {
        let mut available = topology.numa_resources.clone();
        let Some(allocations) = self.allocations.get(&*node.name) else {
            return available;
        };
        for (key, allocation) in allocations {
            if key == pod_key {
                continue;
            }
            let mut used = allocation.numa.clone();
            if used.is_empty() && allocation.cpus.len() <= topology.cpus.len() {
                for cpu in allocation.cpus.iter_as::<i32>() {
                    if let Some(info) = topology.cpus.get(&cpu) {
                        *used
                            .entry(info.node)
                            .or_default()
                            .entry("cpu".to_string())
                            .or_default() += 1000;
                    }
                }
            }
            for (numa, amounts) in used {
                if let Some(left) = available.get_mut(&numa) {
                    for (name, amount) in amounts {
                        if let Some(value) = left.get_mut(&name) {
                            *value = value.saturating_sub(amount).max(0);
                        }
                    }
                }
            }
        }
        available
    }

    /// The NUMA score of a candidate set (`numaScoringStrategy`): what its
    /// nodes already have allocated plus the pod, against their allocatable.
    fn numa_score(
        &self,
        topology: &NodeTopology,
        available: &NumaAmounts,
        pod_requests: &BTreeMap<String, i64>,
        mask: NumaMask,
    ) -> i64 {
        let (allocatable, requested) = numa_usage(topology, available, pod_requests, mask);
        self.numa_scorer.score(&requested, &allocatable)
    }

    /// Upstream's NUMA node statuses for the exclusive check: idle, held by
    /// single-NUMA pods only, or shared by a pod spanning several.
    fn numa_statuses(
        &self,
        node: &NodeInfo,
        topology: &NodeTopology,
        pod_key: &str,
        numa_nodes: &[i32],
    ) -> Vec<NumaNodeStatus> {
        let width = numa_nodes.iter().max().map_or(0, |max| *max as usize + 1);
        let mut statuses = vec![NumaNodeStatus::Idle; width];
        let Some(allocations) = self.allocations.get(&*node.name) else {
            return statuses;
        };
        for (key, allocation) in allocations {
            if key == pod_key {
                continue;
            }
            let mut used: BTreeSet<i32> = allocation.numa.keys().copied().collect();
            if used.is_empty() && allocation.cpus.len() <= topology.cpus.len() {
                used = allocation
                    .cpus
                    .iter_as::<i32>()
                    .filter_map(|cpu| topology.cpus.get(&cpu).map(|i| i.node))
                    .collect();
            }
            let spans = used.len();
            for numa in used {
                let Some(status) = usize::try_from(numa).ok().and_then(|i| statuses.get_mut(i))
                else {
                    continue;
                };
                *status = match (spans, *status) {
                    (1, NumaNodeStatus::Idle) => NumaNodeStatus::Single,
                    (1, current) => current,
                    _ => NumaNodeStatus::Shared,
                };
            }
        }
        statuses
    }

    fn remove_pod(&mut self, key: &str) {
        if let Some(node) = self.pod_nodes.remove(key)
            && let Some(allocations) = self.allocations.get_mut(&node)
            && allocations.remove(key).is_some()
        {
            self.refresh_free(&node);
        }
    }

    fn add_pod(&mut self, key: &str, node: &str, allocation: Allocation) {
        self.remove_pod(key);
        self.pod_nodes.insert(key.to_string(), node.to_string());
        self.allocations
            .get_or_insert_with(node.to_string(), HashMap::new)
            .insert(key.to_string(), allocation);
        self.refresh_free(node);
    }
}

/// Allocatable and allocated-plus-pod amounts summed over a set of NUMA nodes.
fn numa_usage(
    topology: &NodeTopology,
    available: &NumaAmounts,
    pod_requests: &BTreeMap<String, i64>,
    mask: NumaMask,
) -> (BTreeMap<String, i64>, BTreeMap<String, i64>) {
    let mut allocatable: BTreeMap<String, i64> = BTreeMap::new();
    let mut requested: BTreeMap<String, i64> = BTreeMap::new();
    for numa in mask.nodes() {
        let Some(total) = topology.numa_resources.get(&numa) else {
            continue;
        };
        for (name, amount) in total {
            let left = available
                .get(&numa)
                .and_then(|r| r.get(name))
                .copied()
                .unwrap_or(0);
            *allocatable.entry(name.clone()).or_default() += amount;
            *requested.entry(name.clone()).or_default() += amount.saturating_sub(left).max(0);
        }
    }
    for (name, amount) in pod_requests {
        *requested.entry(name.clone()).or_default() += amount;
    }
    (allocatable, requested)
}

/// Spreads each request over the set's NUMA nodes as upstream does: nodes
/// with less of the resource first, each taking an equal share of what is
/// still wanted (or all it has), the last one the rest. Err names the
/// first resource that does not fit (upstream's reason).
fn distribute_evenly(
    requests: &BTreeMap<String, i64>,
    available: &NumaAmounts,
    mask: NumaMask,
) -> Result<NumaAmounts, String> {
    let nodes = mask.nodes();
    let mut out = NumaAmounts::new();
    for (name, wanted) in requests {
        let left_on = |numa: i32| {
            available
                .get(&numa)
                .and_then(|r| r.get(name))
                .copied()
                .unwrap_or(0)
                .max(0)
        };
        let mut ordered = nodes.clone();
        ordered.sort_by_key(|numa| (left_on(*numa), *numa));
        let mut remaining = *wanted;
        for (i, numa) in ordered.iter().enumerate() {
            let share_count = i64::try_from(ordered.len() - i).unwrap_or(1);
            // Equal shares of what is still wanted; the last node's share is
            // all of it.
            let taken = (remaining / share_count).min(left_on(*numa));
            if taken > 0 {
                out.entry(*numa).or_default().insert(name.clone(), taken);
                remaining -= taken;
            }
        }
        if remaining > 0 {
            return Err(format!("Insufficient NUMA {name}"));
        }
    }
    Ok(out)
}

/// The CPUs a pod with a required bind policy may get: cores whose threads
/// are all free for FullPCPUs, the lowest free thread of each core for
/// SpreadByPCPUs.
fn cpus_for_required_policy(
    topology: &NodeTopology,
    free: &BTreeSet<i32>,
    required: CPUBindPolicy,
) -> BTreeSet<i32> {
    let mut by_core: BTreeMap<(i32, i32), Vec<i32>> = BTreeMap::new();
    for cpu in free {
        if let Some(info) = topology.cpus.get(cpu) {
            by_core.entry(core_key(info)).or_default().push(*cpu);
        }
    }
    match required {
        CPUBindPolicy::FullPCPUs => by_core
            .into_values()
            .filter(|threads| threads.len() == topology.layout.cpus_per_core())
            .flatten()
            .collect(),
        CPUBindPolicy::SpreadByPCPUs => by_core
            .into_values()
            .filter_map(|threads| threads.first().copied())
            .collect(),
        _ => free.clone(),
    }
}

/// Whether a chosen cpuset honours a required bind policy.
fn satisfies_policy(
    topology: &NodeTopology,
    chosen: &BTreeSet<i32>,
    required: CPUBindPolicy,
) -> bool {
    let cores: BTreeSet<(i32, i32)> = chosen
        .iter()
        .filter_map(|cpu| topology.cpus.get(cpu).map(core_key))
        .collect();
    match required {
        CPUBindPolicy::FullPCPUs => cores.len() * topology.layout.cpus_per_core() == chosen.len(),
        CPUBindPolicy::SpreadByPCPUs => cores.len() == chosen.len(),
        _ => true,
    }
}

impl Plugin for NodeNUMAResource {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_event(&mut self, event: &ClusterEvent, cache: &ClusterCache) {
        self.generation = self.generation.wrapping_add(1);
        match event {
            ClusterEvent::Pod { old, new, .. } => {
                if let Some(old) = old {
                    self.remove_pod(&old.key);
                    self.owners.remove(&old.key);
                }
                // Assumed or bound: the annotation now carries the cpuset.
                if let Some(new) = new
                    && new.node.is_some()
                {
                    self.pending.remove(&new.key);
                    if let Some(reservation) = allocated_from(new) {
                        self.owners.insert(new.key.clone(), reservation);
                    }
                }
                if let Some(new) = new
                    && let Some(node) = &new.node
                    && let Some(allocation) = allocation_of(new)
                {
                    self.add_pod(&new.key, node, allocation);
                }
            }
            ClusterEvent::Object {
                kind: ObjectKind::Reservation,
                key,
            } => {
                let placed = cache.reservations.get(key).and_then(|r| {
                    let holder = Holder::of(r)?;
                    let status = get_resource_status(r.metadata.annotations.as_ref()?)
                        .ok()
                        .flatten()?;
                    let cpus = parse_cpuset(&status.cpuset)
                        .ok()
                        .filter(|c| !c.is_empty())?;
                    Some((holder, cpus))
                });
                let node = placed.as_ref().map(|(holder, _)| holder.node.clone());
                let previous = match placed {
                    Some(held) => self.reserved.insert(key.clone(), held),
                    None => self.reserved.remove(key),
                };
                let from = previous.as_ref().map(|(holder, _)| holder.node.as_str());
                self.reserved_on.moved(key, from, node.as_deref());
                for moved in [from, node.as_deref()].into_iter().flatten() {
                    self.refresh_slot(moved);
                }
            }
            ClusterEvent::Object {
                kind: ObjectKind::NodeResourceTopology,
                key,
            } => {
                match cache.node_resource_topologies.get(key) {
                    Some(nrt) => {
                        self.topologies
                            .insert(key.clone(), Arc::new(topology_from_nrt(nrt)));
                    }
                    None => {
                        self.topologies.remove(key);
                    }
                }
                self.refresh_free(key);
                self.refresh_node_policy(key, cache);
            }
            ClusterEvent::Object {
                kind: ObjectKind::Node,
                key,
            } => {
                // Before any slot is refreshed below: the index may be new.
                match cache.node(key) {
                    Some(node) => {
                        self.node_indexes.insert(key.clone(), node.index);
                    }
                    None => {
                        // A deleted node's index is never reused: its slot
                        // only held memory.
                        if let Some(index) = self.node_indexes.remove(key)
                            && let Some(slot) = self.slots.get_mut(index)
                        {
                            *slot = None;
                        }
                    }
                }
                let reserved = cache.node(key).and_then(|node| {
                    let reservation = get_node_reservation(node.annotations()).ok()??;
                    parse_cpuset(&reservation.reserved_cpus)
                        .ok()
                        .filter(|cpus| !cpus.is_empty())
                });
                match reserved {
                    Some(cpus) => self.node_reserved.insert(key.clone(), cpus),
                    None => self.node_reserved.remove(key),
                };
                // A node may carry the cpu-topology annotation itself; one
                // that lost it (or had it refused) has no topology any more.
                if !cache.node_resource_topologies.contains_key(key) {
                    match cache.node(key).filter(|node| {
                        node.annotations()
                            .contains_key(ANNOTATION_NODE_CPU_TOPOLOGY)
                    }) {
                        Some(node) => {
                            self.topologies.insert(
                                key.clone(),
                                Arc::new(topology_from(node.annotations(), &[])),
                            );
                        }
                        None => {
                            self.topologies.remove(key);
                        }
                    }
                }
                self.refresh_free(key);
                self.refresh_node_policy(key, cache);
            }
            _ => {}
        }
    }

    fn pre_filter(
        &self,
        pod: &PodInfo,
        _cache: &ClusterCache,
        state: &mut CycleState,
    ) -> Result<(), Rejection> {
        if let Some(mut request) = self.request_of(pod)? {
            // A reservation without a cpuset takes in pods with theirs
            // as they are (upstream skips such a reserve pod here too).
            if request.bind_policy.is_some()
                && let Some(hand_over) = pre_allocation::hand_over(state)
            {
                request.taking_over = cpus_handed_over(hand_over);
            }
            state.write(STATE_KEY, request);
            state.write(STATE_PLACEMENTS, Placements::default());
        }
        Ok(())
    }

    fn filter(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        match state.read::<Request>(STATE_KEY) {
            None => Ok(()),
            // Neither a cpuset nor NUMA nodes to find here (what
            // `choose_preferring` answers first, reservations or not).
            Some(request)
                if request.bind_policy.is_none()
                    && request.pod_numa_policy.is_none()
                    && self.node_policy(node).is_none()
                    && request.taking_over_on(&node.name).is_none() =>
            {
                Ok(())
            }
            Some(request) => self
                .placement(pod, request, node, state, Step::Filter)
                .map(|_| ()),
        }
    }

    fn scores(&self) -> bool {
        true
    }

    /// Upstream's NodeNUMAResource score under `scoringStrategy`: on a node
    /// where the pod gets NUMA nodes, their allocated amounts plus the pod
    /// against their allocatable; elsewhere the node's requested plus the
    /// pod against its allocatable.
    fn score(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> i64 {
        let pod_requests: BTreeMap<String, i64> = pod
            .requests
            .iter()
            .map(|(name, amount)| (name.to_string(), amount))
            .collect();
        if let Some(request) = state.read::<Request>(STATE_KEY)
            && let Some(topology) = self.topology_of(node)
            && let Ok(Some(checked)) = self.placement(pod, request, node, state, Step::Score)
            && let Some(choice) = if checked.cpu_numa_unknown {
                // Only an allocation tells which NUMA nodes the CPUs get.
                self.choose_in_cycle(pod, request, node, state, Mode::Allocate)
                    .ok()
                    .flatten()
            } else {
                Some(checked)
            }
            && let Some(mask) = NumaMask::of(&choice.numa.keys().copied().collect::<Vec<_>>())
            && mask.count() > 0
        {
            let available = self.numa_available(node, topology, &pod.key);
            let (allocatable, requested) = numa_usage(topology, &available, &pod_requests, mask);
            return self.scorer.score(&requested, &allocatable);
        }
        let allocatable: BTreeMap<String, i64> = node
            .allocatable
            .iter()
            .map(|(name, amount)| (name.to_string(), amount))
            .collect();
        let mut requested: BTreeMap<String, i64> = node
            .requested
            .iter()
            .map(|(name, amount)| (name.to_string(), amount))
            .collect();
        for (name, amount) in pod_requests {
            *requested.entry(name).or_default() += amount;
        }
        self.scorer.score(&requested, &allocatable)
    }

    fn reserve(
        &mut self,
        pod: &PodInfo,
        node: &str,
        cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        let Some(request) = state.read::<Request>(STATE_KEY) else {
            return Ok(());
        };
        let info = cache
            .node(node)
            .ok_or_else(|| Rejection::unresolvable("node not found"))?;
        self.generation = self.generation.wrapping_add(1);
        let Some(choice) = self.choose_in_cycle(pod, request, info, state, Mode::Allocate)? else {
            return Ok(());
        };
        if choice.cpus.is_empty() && choice.numa.is_empty() {
            return Ok(());
        }
        let numa_node_resources = choice
            .numa
            .iter()
            .map(|(numa, amounts)| NUMANodeResource {
                node: *numa,
                resources: amounts
                    .iter()
                    .map(|(name, amount)| (name.clone(), format_amount(name, *amount)))
                    .collect(),
            })
            .collect();
        self.pending.insert(
            pod.key.clone(),
            ResourceStatus {
                cpuset: format_cpuset(&choice.cpus),
                numa_node_resources,
            },
        );
        self.add_pod(
            &pod.key,
            node,
            Allocation {
                cpus: choice.cpus.iter().copied().collect(),
                exclusive: request.exclusive,
                numa: choice.numa,
            },
        );
        Ok(())
    }

    fn unreserve(&mut self, pod: &PodInfo, _node: &str, _cache: &ClusterCache) {
        self.generation = self.generation.wrapping_add(1);
        // Only pods being bound are unreserved, so their cpuset is ours to drop.
        self.pending.remove(&pod.key);
        self.remove_pod(&pod.key);
    }

    fn pre_bind(
        &self,
        pod: &PodInfo,
        _node: &str,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<BTreeMap<String, String>, Rejection> {
        let Some(status) = self.pending.get(&pod.key) else {
            return Ok(BTreeMap::new());
        };
        let mut annotations = BTreeMap::new();
        apis::extension::numa_aware::set_resource_status(&mut annotations, status)
            .map_err(|e| Rejection::unresolvable(e.to_string()))?;
        debug_assert!(annotations.contains_key(ANNOTATION_RESOURCE_STATUS));
        Ok(annotations)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, RwLock};

    use serde_json::json;

    use super::*;
    use crate::cache::{Change, Object};
    use crate::framework::Scheduler;
    use crate::testutil::{self, PodSpec, t0};

    /// 2 NUMA nodes × 2 cores × 2 threads: NUMA 0 = cores 0,1 = cpus {0,4},{1,5};
    /// NUMA 1 = cores 2,3 = cpus {2,6},{3,7}.
    fn nrt(name: &str, policies: &[&str], extra: &[(&str, String)]) -> Object {
        let detail: Vec<_> = (0..8)
            .map(|id| {
                let core = id % 4;
                json!({"id": id, "core": core, "socket": core / 2, "node": core / 2})
            })
            .collect();
        let mut annotations = serde_json::Map::new();
        annotations.insert(
            ANNOTATION_NODE_CPU_TOPOLOGY.into(),
            json!(json!({"detail": detail}).to_string()),
        );
        for (k, v) in extra {
            annotations.insert(k.to_string(), json!(v));
        }
        Object::NodeResourceTopology(
            serde_json::from_value(json!({
                "apiVersion": "topology.node.k8s.io/v1alpha1",
                "kind": "NodeResourceTopology",
                "metadata": {"name": name, "annotations": annotations},
                "topologyPolicies": policies,
                "zones": []
            }))
            .unwrap(),
        )
    }

    fn node(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Object {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
        };
        Object::Node(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": map(labels), "annotations": map(annotations)},
                "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}
            }))
            .unwrap(),
        )
    }

    fn lsr_pod(name: &str, cpu: &str, annotations: &[(&str, &str)]) -> Object {
        testutil::pod(PodSpec {
            name,
            requests: &[("cpu", cpu), ("memory", "1Gi")],
            limits: &[("cpu", cpu), ("memory", "1Gi")],
            labels: &[("koordinator.sh/qosClass", "LSR")],
            annotations,
            priority: Some(9000),
            ..Default::default()
        })
    }

    fn scheduler_with(objects: Vec<Object>) -> Scheduler {
        let mut s = testutil::scheduler("");
        testutil::load(&mut s, objects);
        s
    }

    fn status_of(annotations: &BTreeMap<String, String>) -> ResourceStatus {
        serde_json::from_str(&annotations[ANNOTATION_RESOURCE_STATUS]).unwrap()
    }

    fn bind(s: &mut Scheduler, pod: &str, node: &str) -> Result<ResourceStatus, String> {
        s.reserve(&format!("default/{pod}"), node, t0())
            .map(|r| status_of(&r.annotations))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn cpuset_lists_parse_and_format() {
        let set = parse_cpuset("0-2, 5,7-8").unwrap().to_btree();
        assert_eq!(set, BTreeSet::from([0, 1, 2, 5, 7, 8]));
        assert_eq!(format_cpuset(&set), "0-2,5,7-8");
        assert!(parse_cpuset("3-1").is_err());
        assert!(parse_cpuset("x").is_err());
        assert_eq!(format_cpuset(&BTreeSet::new()), "");
        // Annotation input: ids past the limit and repetitions are refused, not expanded.
        assert!(parse_cpuset("0-2147483647").is_err());
        assert!(parse_cpuset("65536").is_err());
        assert!(parse_cpuset("0-7,0-7").is_err());
        assert_eq!(
            parse_cpuset("65535").unwrap().to_btree(),
            BTreeSet::from([MAX_CPU_ID])
        );
    }

    #[test]
    fn full_pcpus_takes_whole_cores_of_one_numa_node_until_exhausted() {
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            lsr_pod("a", "4", &[]),
            lsr_pod("b", "4", &[]),
            lsr_pod("c", "2", &[]),
        ]);
        let a = bind(&mut s, "a", "n1").unwrap();
        assert_eq!(a.cpuset, "0-1,4-5");
        // Without a NUMA policy no per-NUMA amounts are recorded.
        assert!(a.numa_node_resources.is_empty());
        let b = bind(&mut s, "b", "n1").unwrap();
        assert_eq!(b.cpuset, "2-3,6-7");
        let outcome = testutil::filter(&s, "default/c", t0());
        assert_eq!(outcome.failed["n1"], ERR_NOT_ENOUGH_CPUS);
        let err = bind(&mut s, "c", "n1").unwrap_err();
        assert!(err.contains(ERR_NOT_ENOUGH_CPUS), "{err}");
    }

    #[test]
    fn whole_core_rounding_required_rejects_and_preferred_fills_a_half_core() {
        let required = r#"{"requiredCPUBindPolicy":"FullPCPUs"}"#;
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            lsr_pod(
                "odd-required",
                "3",
                &[("scheduling.koordinator.sh/resource-spec", required)],
            ),
            lsr_pod("odd-preferred", "3", &[]),
            lsr_pod("fraction", "1500m", &[]),
        ]);
        let outcome = testutil::filter(&s, "default/odd-required", t0());
        assert_eq!(outcome.failed_unresolvable["n1"], ERR_SMT_ALIGNMENT);
        let odd = bind(&mut s, "odd-preferred", "n1").unwrap();
        // One whole core (0,4) plus one thread of the next core in the same NUMA node.
        assert_eq!(odd.cpuset, "0-1,4");
        let outcome = testutil::filter(&s, "default/fraction", t0());
        assert_eq!(
            outcome.failed_unresolvable["n1"],
            ERR_INVALID_REQUESTED_CPUS
        );
    }

    #[test]
    fn spread_by_pcpus_puts_each_cpu_on_its_own_core() {
        let spread = r#"{"preferredCPUBindPolicy":"SpreadByPCPUs"}"#;
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            lsr_pod(
                "a",
                "2",
                &[("scheduling.koordinator.sh/resource-spec", spread)],
            ),
        ]);
        assert_eq!(bind(&mut s, "a", "n1").unwrap().cpuset, "0-1");
    }

    #[test]
    fn single_numa_node_policy_rejects_a_pod_wider_than_any_numa_node() {
        let mut s = scheduler_with(vec![
            node(
                "n1",
                &[("node.koordinator.sh/numa-topology-policy", "SingleNUMANode")],
                &[],
            ),
            nrt("n1", &[], &[]),
            node("n2", &[], &[]),
            nrt("n2", &["SingleNUMANodePodLevel"], &[]),
            lsr_pod("wide", "6", &[]),
            lsr_pod("narrow", "4", &[]),
            lsr_pod(
                "restricted",
                "2",
                &[(
                    "scheduling.koordinator.sh/numa-topology-spec",
                    r#"{"numaTopologyPolicy":"Restricted"}"#,
                )],
            ),
        ]);
        // Upstream's reason: CPUs fit only on both NUMA nodes together.
        let unaligned = "Unaligned NUMA Hint cause cpu prefer [11] among [11]";
        let outcome = testutil::filter(&s, "default/wide", t0());
        assert_eq!(outcome.failed["n1"], unaligned);
        // The kubelet policy reported on the NRT counts the same as the label.
        assert_eq!(outcome.failed["n2"], unaligned);
        let narrow = bind(&mut s, "narrow", "n1").unwrap();
        assert_eq!(narrow.cpuset, "0-1,4-5");
        assert_eq!(narrow.numa_node_resources.len(), 1);
        assert_eq!(narrow.numa_node_resources[0].node, 0);
        assert_eq!(narrow.numa_node_resources[0].resources["cpu"].0, "4");
        // A pod policy that differs from the node's never matches.
        let outcome = testutil::filter(&s, "default/restricted", t0());
        assert_eq!(
            outcome.failed_unresolvable["n1"],
            ERR_NOT_MATCH_NUMA_TOPOLOGY
        );
    }

    #[test]
    fn a_node_topology_listing_a_cpu_twice_or_dropped_from_the_node_hands_out_nothing() {
        let detail = |ids: &[i32]| {
            let cpus: Vec<_> = ids
                .iter()
                .map(|id| json!({"id": id, "core": id % 4, "socket": 0, "node": 0}))
                .collect();
            json!({"detail": cpus}).to_string()
        };
        let good = detail(&[0, 1, 2, 3, 4, 5, 6, 7]);
        let mut s = scheduler_with(vec![
            node("n1", &[], &[(ANNOTATION_NODE_CPU_TOPOLOGY, good.as_str())]),
            lsr_pod("a", "2", &[]),
        ]);
        assert_eq!(testutil::filter(&s, "default/a", t0()).feasible, ["n1"]);
        // CPU 3 twice: an invalid topology, not a silently merged one.
        let twice = detail(&[0, 1, 2, 3, 3, 5, 6, 7]);
        testutil::load(
            &mut s,
            vec![node(
                "n1",
                &[],
                &[(ANNOTATION_NODE_CPU_TOPOLOGY, twice.as_str())],
            )],
        );
        let outcome = testutil::filter(&s, "default/a", t0());
        assert_eq!(outcome.failed_unresolvable["n1"], ERR_INVALID_CPU_TOPOLOGY);
        // Valid again, then the annotation goes: the old topology goes with it.
        testutil::load(
            &mut s,
            vec![node(
                "n1",
                &[],
                &[(ANNOTATION_NODE_CPU_TOPOLOGY, good.as_str())],
            )],
        );
        assert_eq!(testutil::filter(&s, "default/a", t0()).feasible, ["n1"]);
        testutil::load(&mut s, vec![node("n1", &[], &[])]);
        let outcome = testutil::filter(&s, "default/a", t0());
        assert_eq!(outcome.failed_unresolvable["n1"], ERR_INVALID_CPU_TOPOLOGY);
    }

    #[test]
    fn reserved_cpus_and_kubelet_reserved_cpus_are_never_handed_out() {
        let kubelet = (
            "kubelet.koordinator.sh/cpu-manager-policy",
            r#"{"policy":"static","reservedCPUs":"2"}"#.to_string(),
        );
        let mut s = scheduler_with(vec![
            node(
                "n1",
                &[],
                &[(
                    "node.koordinator.sh/reservation",
                    r#"{"reservedCPUs":"0-1"}"#,
                )],
            ),
            nrt("n1", &[], &[kubelet]),
            lsr_pod("a", "2", &[]),
            lsr_pod("b", "2", &[]),
        ]);
        // Cores 0,1,2 are partly reserved; only core 3 (3,7) is whole.
        assert_eq!(bind(&mut s, "a", "n1").unwrap().cpuset, "3,7");
        // What is left (4,5,6) has no whole core; preferred FullPCPUs takes threads.
        let b = parse_cpuset(&bind(&mut s, "b", "n1").unwrap().cpuset)
            .unwrap()
            .to_btree();
        assert!(b.is_subset(&BTreeSet::from([4, 5, 6])), "{b:?}");
    }

    #[test]
    fn pods_without_cpuset_needs_and_nodes_without_topology() {
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            node("bare", &[], &[]),
            testutil::pod(PodSpec {
                name: "ls",
                requests: &[("cpu", "2")],
                priority: Some(9000),
                ..Default::default()
            }),
            lsr_pod("lsr", "2", &[]),
        ]);
        let ls = s.reserve("default/ls", "n1", t0()).unwrap();
        assert!(!ls.annotations.contains_key(ANNOTATION_RESOURCE_STATUS));
        let outcome = testutil::filter(&s, "default/lsr", t0());
        assert_eq!(
            outcome.failed_unresolvable["bare"],
            ERR_INVALID_CPU_TOPOLOGY
        );
        assert_eq!(outcome.feasible, vec!["n1".to_string()]);
    }

    #[test]
    fn rollback_frees_the_cpuset_and_watched_pods_hold_theirs() {
        let held = r#"{"cpuset":"0-1,4-5"}"#;
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            lsr_pod("a", "4", &[]),
            lsr_pod("b", "4", &[]),
        ]);
        // A pod already running with a cpuset (from its annotation).
        let mut running = match lsr_pod("running", "4", &[(ANNOTATION_RESOURCE_STATUS, held)]) {
            Object::Pod(p) => p,
            _ => unreachable!(),
        };
        running.spec.as_mut().unwrap().node_name = Some("n1".into());
        s.apply(Change::Upsert(Object::Pod(running)));
        let reserved = s.reserve("default/a", "n1", t0()).unwrap();
        assert_eq!(status_of(&reserved.annotations).cpuset, "2-3,6-7");
        assert!(bind(&mut s, "b", "n1").is_err());
        s.rollback(&reserved);
        assert_eq!(bind(&mut s, "b", "n1").unwrap().cpuset, "2-3,6-7");
    }

    #[test]
    fn concurrent_binds_never_overlap() {
        let mut objects = vec![node("n1", &[], &[]), nrt("n1", &[], &[])];
        let names: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
        for name in &names {
            objects.push(lsr_pod(name, "2", &[]));
        }
        let shared = Arc::new(RwLock::new(scheduler_with(objects)));
        let handles: Vec<_> = names
            .iter()
            .map(|name| {
                let shared = Arc::clone(&shared);
                let key = format!("default/{name}");
                std::thread::spawn(move || {
                    shared
                        .write()
                        .unwrap()
                        .reserve(&key, "n1", t0())
                        .ok()
                        .map(|r| {
                            parse_cpuset(&status_of(&r.annotations).cpuset)
                                .unwrap()
                                .to_btree()
                        })
                })
            })
            .collect();
        let sets: Vec<BTreeSet<i32>> = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect();
        assert_eq!(sets.len(), 4, "8 cpus hold four 2-cpu pods");
        let mut union = BTreeSet::new();
        for set in &sets {
            assert_eq!(set.len(), 2);
            assert!(union.is_disjoint(set), "{sets:?}");
            union.extend(set.iter().copied());
        }
        assert_eq!(union.len(), 8);
    }

    /// An Available reservation on n1 for `default/owner` holding `cpuset`.
    fn cpu_reservation(cpuset: &str, cpu: &str, spec_extra: serde_json::Value) -> Object {
        let status = json!({"cpuset": cpuset}).to_string();
        Object::Reservation(testutil::reservation(testutil::ReservationSpec {
            template: testutil::reservation_template(&[("cpu", cpu)]),
            annotations: &[(ANNOTATION_RESOURCE_STATUS, &status)],
            spec_extra,
            status: testutil::available_on("n1", &[("cpu", cpu)]),
            ..Default::default()
        }))
    }

    /// The per-node index of placed reservations follows every Reservation
    /// event (placed, moved, pending again, deleted, or its cpuset gone):
    /// after each one it lists exactly what a scan of all of them finds on
    /// each node, in name order.
    #[test]
    fn reservations_by_node_follow_every_reservation_event() {
        let mut cache = crate::cache::ClusterCache::new();
        let mut plugin = NodeNUMAResource::new(CPUBindPolicy::FullPCPUs);
        let nodes = ["n1", "n2", "n3"];
        let names = ["r1", "r2", "r3", "r4", "r5"];
        let mut rng = crate::testutil::Lcg(0x5eed);
        let mut next = |bound: usize| rng.below(bound as u64) as usize;
        for step in 0..2_000 {
            let name = names[next(names.len())];
            let node = nodes[next(nodes.len())];
            let cpuset = ["0-1", "", "2"][next(3)];
            let status = json!({"cpuset": cpuset}).to_string();
            let available = next(4) != 0;
            let reservation =
                Object::Reservation(testutil::reservation(testutil::ReservationSpec {
                    name,
                    template: testutil::reservation_template(&[("cpu", "2")]),
                    annotations: &[(ANNOTATION_RESOURCE_STATUS, &status)],
                    status: if available {
                        testutil::available_on(node, &[("cpu", "2")])
                    } else {
                        serde_json::Value::Null
                    },
                    ..Default::default()
                }));
            let change = if next(4) == 0 {
                Change::Delete(reservation)
            } else {
                Change::Upsert(reservation)
            };
            let event = cache.apply(change);
            plugin.on_event(&event, &cache);
            for node in nodes {
                let mut scanned: Vec<&String> = plugin
                    .reserved
                    .iter()
                    .filter(|(_, (holder, _))| holder.node == node)
                    .map(|(name, _)| name)
                    .collect();
                scanned.sort();
                let indexed: Vec<&String> = plugin.reserved_on.on(node).collect();
                assert_eq!(indexed, scanned, "step {step}, {node}");
                assert_eq!(
                    plugin.reserved_on.any_on(node),
                    !scanned.is_empty(),
                    "step {step}, {node}"
                );
            }
        }
    }

    fn cpus(status: &ResourceStatus) -> BTreeSet<i32> {
        parse_cpuset(&status.cpuset).unwrap().to_btree()
    }

    #[test]
    fn reserved_cpus_are_refused_to_non_owners() {
        let base = || vec![node("n1", &[], &[]), nrt("n1", &[], &[])];
        // Without a reservation the first pod gets core 0.
        let mut s = scheduler_with([base(), vec![lsr_pod("a", "2", &[])]].concat());
        assert_eq!(bind(&mut s, "a", "n1").unwrap().cpuset, "0,4");

        let mut s = scheduler_with(
            [
                base(),
                vec![
                    cpu_reservation("0,4", "2", json!({})),
                    lsr_pod("a", "2", &[]),
                ],
            ]
            .concat(),
        );
        assert_eq!(bind(&mut s, "a", "n1").unwrap().cpuset, "1,5");
        // Six CPUs are left outside it; a pod needing all of them gets exactly those.
        let mut s = scheduler_with(
            [
                base(),
                vec![
                    cpu_reservation("0,4", "2", json!({})),
                    lsr_pod("six", "6", &[]),
                ],
            ]
            .concat(),
        );
        assert_eq!(bind(&mut s, "six", "n1").unwrap().cpuset, "1-3,5-7");
    }

    #[test]
    fn an_owner_gets_exactly_the_reserved_cpus() {
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            cpu_reservation("2,6", "2", json!({})),
            lsr_pod("owner", "2", &[]),
        ]);
        let status = bind(&mut s, "owner", "n1").unwrap();
        assert_eq!(status.cpuset, "2,6");
        // Used up (allocate-once): the next pod may take any free core.
        testutil::load(&mut s, vec![lsr_pod("next", "6", &[])]);
        assert_eq!(bind(&mut s, "next", "n1").unwrap().cpuset, "0-1,3-5,7");
    }

    #[test]
    fn a_restricted_owner_takes_nothing_beyond_the_reserved_cpus() {
        // Aligned: the reserved core plus one more.
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            cpu_reservation("2,6", "4", json!({})),
            lsr_pod("owner", "4", &[]),
        ]);
        let aligned = cpus(&bind(&mut s, "owner", "n1").unwrap());
        assert_eq!(aligned.len(), 4);
        assert!(aligned.contains(&2) && aligned.contains(&6), "{aligned:?}");

        // Restricted: its two CPUs cannot hold four, and the pod must use it.
        let affinity = [(
            apis::extension::reservation::ANNOTATION_RESERVATION_AFFINITY,
            r#"{"name": "r1"}"#,
        )];
        let restricted = json!({"allocatePolicy": "Restricted"});
        let s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            cpu_reservation("2,6", "4", restricted.clone()),
            lsr_pod("owner", "4", &affinity),
        ]);
        let outcome = testutil::filter(&s, "default/owner", t0());
        assert!(outcome.feasible.is_empty(), "{outcome:?}");
        // Without a required affinity it may run outside the reservation,
        // but never on the reserved CPUs.
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            cpu_reservation("2,6", "4", restricted.clone()),
            lsr_pod("owner", "4", &[]),
        ]);
        let outside = cpus(&bind(&mut s, "owner", "n1").unwrap());
        assert!(
            !outside.contains(&2) && !outside.contains(&6),
            "{outside:?}"
        );
        // Within it, the restricted owner gets the reserved CPUs.
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            cpu_reservation("2,6", "2", restricted),
            lsr_pod("owner", "2", &[]),
        ]);
        assert_eq!(bind(&mut s, "owner", "n1").unwrap().cpuset, "2,6");
    }

    #[test]
    fn a_placed_reservation_keeps_its_reserve_pods_cpuset() {
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            lsr_pod("stranger", "2", &[]),
        ]);
        let pending = testutil::reservation(testutil::ReservationSpec {
            template: json!({
                "metadata": {"labels": {"koordinator.sh/qosClass": "LSR"}},
                "spec": {"priority": 9000, "containers": [{"name": "c", "resources": {
                    "requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}}]}}),
            ..Default::default()
        });
        let placement = crate::placement::place_reservation(&mut s, &pending, t0());
        assert_eq!(placement.node.as_deref(), Some("n1"), "{placement:?}");
        let placed = &s.cache.reservations["r1"];
        let kept = get_resource_status(placed.metadata.annotations.as_ref().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(kept.cpuset, "0,4");
        // The placeholder is gone, yet a stranger does not get core 0.
        assert_eq!(bind(&mut s, "stranger", "n1").unwrap().cpuset, "1,5");
    }

    /// A running LSR pod on n1 holding `cpuset`, labelled app=`app`.
    fn running_lsr(name: &str, app: &str, cpu: &str, cpuset: &str) -> Object {
        let status = json!({ "cpuset": cpuset }).to_string();
        testutil::pod(PodSpec {
            name,
            node: Some("n1"),
            requests: &[("cpu", cpu), ("memory", "1Gi")],
            limits: &[("cpu", cpu), ("memory", "1Gi")],
            labels: &[("koordinator.sh/qosClass", "LSR"), ("app", app)],
            annotations: &[(ANNOTATION_RESOURCE_STATUS, &status)],
            priority: Some(9000),
            ..Default::default()
        })
    }

    /// A pending pre-allocating (Restricted, allocate-many) LSR reservation of
    /// `cpu` CPUs owned by app=web pods; `resource_spec` goes on its template.
    fn pre_allocating_lsr(
        cpu: &str,
        resource_spec: Option<&str>,
    ) -> apis::scheduling::v1alpha1::Reservation {
        let annotations: serde_json::Map<String, serde_json::Value> = resource_spec
            .map(|spec| {
                (
                    "scheduling.koordinator.sh/resource-spec".to_string(),
                    json!(spec),
                )
            })
            .into_iter()
            .collect();
        testutil::reservation(testutil::ReservationSpec {
            template: json!({
                "metadata": {"labels": {"koordinator.sh/qosClass": "LSR"}, "annotations": annotations},
                "spec": {"priority": 9000, "containers": [{"name": "c", "resources": {
                    "requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}}]}}),
            spec_extra: json!({
                "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
                "preAllocation": true,
                "allocatePolicy": "Restricted",
                "allocateOnce": false,
            }),
            ..Default::default()
        })
    }

    fn kept_cpuset(s: &Scheduler) -> String {
        let placed = &s.cache.reservations["r1"];
        get_resource_status(placed.metadata.annotations.as_ref().unwrap())
            .unwrap()
            .unwrap()
            .cpuset
    }

    #[test]
    fn a_pre_allocating_reservation_takes_over_the_pods_cpuset() {
        // web-1 holds cores 1 and 3 (one on each NUMA node); a filler without
        // a cpuset makes the node full. Left alone, the allocator would give
        // the 4-CPU reservation two cores of one NUMA node; taking web-1 in,
        // it must keep web-1's CPUs.
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            running_lsr("web-1", "web", "4", "1,3,5,7"),
            testutil::pod(PodSpec {
                name: "filler",
                node: Some("n1"),
                requests: &[("cpu", "4")],
                ..Default::default()
            }),
        ]);
        let (placement, pre_allocated) = crate::placement::place_reservation_pre_allocating(
            &mut s,
            &pre_allocating_lsr("4", None),
            t0(),
        );
        assert_eq!(placement.node.as_deref(), Some("n1"), "{placement:?}");
        assert_eq!(pre_allocated.unwrap().pods.len(), 1);
        assert_eq!(kept_cpuset(&s), "1,3,5,7");
        let gone = |s: &mut Scheduler, name: &str| {
            let pod = s.cache.pod(&format!("default/{name}")).unwrap().pod.clone();
            s.apply(Change::Delete(Object::Pod((*pod).clone())));
        };
        // web-1 counts inside the reservation, so nothing is held twice: with
        // the filler gone a stranger gets the free cores, not web-1's.
        gone(&mut s, "filler");
        testutil::load(&mut s, vec![lsr_pod("stranger", "4", &[])]);
        assert_eq!(bind(&mut s, "stranger", "n1").unwrap().cpuset, "0,2,4,6");
        // Once web-1 is gone its CPUs are the reservation's again, and an
        // owner gets them.
        gone(&mut s, "web-1");
        let Object::Pod(mut owner) = lsr_pod("web-2", "4", &[]) else {
            unreachable!("lsr_pod builds a pod");
        };
        let labels = owner.metadata.labels.get_or_insert_with(Default::default);
        labels.insert("app".into(), "web".into());
        testutil::load(&mut s, vec![Object::Pod(owner)]);
        assert_eq!(bind(&mut s, "web-2", "n1").unwrap().cpuset, "1,3,5,7");
    }

    #[test]
    fn a_reservation_whose_cpuset_cannot_cover_the_pods_cpus_is_refused() {
        // web-1 holds both threads of core 1; one CPU per core cannot cover them.
        let cluster = || {
            scheduler_with(vec![
                node("n1", &[], &[]),
                nrt("n1", &[], &[]),
                running_lsr("web-1", "web", "2", "1,5"),
                testutil::pod(PodSpec {
                    name: "filler",
                    node: Some("n1"),
                    requests: &[("cpu", "6")],
                    ..Default::default()
                }),
            ])
        };
        let spread = r#"{"requiredCPUBindPolicy":"SpreadByPCPUs"}"#;
        let mut s = cluster();
        let (placement, pre_allocated) = crate::placement::place_reservation_pre_allocating(
            &mut s,
            &pre_allocating_lsr("2", Some(spread)),
            t0(),
        );
        assert_eq!(placement.node, None);
        assert!(pre_allocated.is_none());
        assert_eq!(placement.reasons["n1"], ERR_CPUSET_NOT_TAKEN_OVER);
        let web = s.cache.pod("default/web-1").unwrap();
        assert_eq!(allocated_from(web), None);
        // Whole cores cover them: the same reservation is placed with them.
        let mut s = cluster();
        let (placement, _) = crate::placement::place_reservation_pre_allocating(
            &mut s,
            &pre_allocating_lsr("2", None),
            t0(),
        );
        assert_eq!(placement.node.as_deref(), Some("n1"), "{placement:?}");
        assert_eq!(kept_cpuset(&s), "1,5");
    }

    /// [`nrt`] with `node-0` / `node-1` zones of 4 CPUs and `memory` each.
    fn nrt_with_zones(name: &str, memory: &str) -> Object {
        let Object::NodeResourceTopology(mut topology) = nrt(name, &[], &[]) else {
            unreachable!("nrt builds a NodeResourceTopology");
        };
        topology.zones = serde_json::from_value(json!([0, 1].map(|id| json!({
            "name": format!("node-{id}"),
            "type": "Node",
            "resources": [
                {"name": "cpu", "capacity": "4", "allocatable": "4", "available": "4"},
                {"name": "memory", "capacity": memory, "allocatable": memory, "available": memory}
            ]
        }))))
        .unwrap();
        Object::NodeResourceTopology(topology)
    }

    fn plain_pod(name: &str, cpu: &str, memory: &str, annotations: &[(&str, &str)]) -> Object {
        testutil::pod(PodSpec {
            name,
            requests: &[("cpu", cpu), ("memory", memory)],
            annotations,
            ..Default::default()
        })
    }

    fn numa_amounts(status: &ResourceStatus) -> Vec<(i32, i64, i64)> {
        status
            .numa_node_resources
            .iter()
            .map(|n| {
                let get = |name: &str| {
                    n.resources
                        .get(name)
                        .map_or(0, |q| crate::resources::exact_amount(name, q).unwrap())
                };
                (n.node, get("cpu"), get("memory"))
            })
            .collect()
    }

    const GI: i64 = 1 << 30;

    #[test]
    fn topology_policies_admit_align_and_record_numa_amounts_as_upstream() {
        let policy = "node.koordinator.sh/numa-topology-policy";
        let mut s = scheduler_with(vec![
            node("single", &[(policy, "SingleNUMANode")], &[]),
            nrt_with_zones("single", "16Gi"),
            node("restricted", &[(policy, "Restricted")], &[]),
            nrt_with_zones("restricted", "16Gi"),
            node("best", &[(policy, "BestEffort")], &[]),
            nrt_with_zones("best", "16Gi"),
            plain_pod("small", "4", "8Gi", &[]),
            plain_pod("big-memory", "2", "20Gi", &[]),
            plain_pod("too-big", "2", "40Gi", &[]),
        ]);

        // 20Gi fits only on both NUMA nodes: SingleNUMANode rejects with
        // upstream's reason, Restricted admits (every fitting set is
        // preferred) and spreads evenly, BestEffort admits too.
        let outcome = testutil::filter(&s, "default/big-memory", t0());
        assert_eq!(
            outcome.failed["single"],
            "Unaligned NUMA Hint cause cpu prefer [11] among [11],memory prefer [11] among [11]"
        );
        assert!(outcome.feasible.contains(&"restricted".to_string()));
        assert!(outcome.feasible.contains(&"best".to_string()));
        let big = bind(&mut s, "big-memory", "restricted").unwrap();
        assert_eq!(numa_amounts(&big), [(0, 1000, 10 * GI), (1, 1000, 10 * GI)]);

        // Upstream's TestReserveByNUMANode: a plain pod on a SingleNUMANode
        // node gets its CPU and memory amounts on NUMA node 0.
        let small = bind(&mut s, "small", "single").unwrap();
        assert_eq!(small.cpuset, "");
        assert_eq!(numa_amounts(&small), [(0, 4000, 8 * GI)]);

        // More than the NUMA nodes hold: no set fits, each resource fits
        // nowhere (SingleNUMANode and Restricted); BestEffort admits the
        // hint but cannot spread the amounts (upstream's reason at reserve).
        let outcome = testutil::filter(&s, "default/too-big", t0());
        let unsatisfied = format!(
            "{}; {}",
            topologymanager::unsatisfied_numa_resource("cpu"),
            topologymanager::unsatisfied_numa_resource("memory")
        );
        assert_eq!(
            unsatisfied,
            format!("{ERR_UNSATISFIED_NUMA_CPU}; Unsatisfied NUMA memory")
        );
        assert_eq!(outcome.failed["single"], unsatisfied);
        assert_eq!(outcome.failed["restricted"], unsatisfied);
        assert_eq!(outcome.failed["best"], "Insufficient NUMA memory");
    }

    #[test]
    fn numa_amounts_held_by_placed_pods_narrow_the_next_pods_choice() {
        let policy = "node.koordinator.sh/numa-topology-policy";
        let mut s = scheduler_with(vec![
            node("n1", &[(policy, "SingleNUMANode")], &[]),
            nrt_with_zones("n1", "16Gi"),
            plain_pod("a", "1", "12Gi", &[]),
            plain_pod("b", "1", "12Gi", &[]),
            plain_pod("c", "1", "12Gi", &[]),
        ]);
        assert_eq!(
            numa_amounts(&bind(&mut s, "a", "n1").unwrap()),
            [(0, 1000, 12 * GI)]
        );
        // NUMA node 0 has 4Gi left: b goes to node 1, c fits nowhere.
        assert_eq!(
            numa_amounts(&bind(&mut s, "b", "n1").unwrap()),
            [(1, 1000, 12 * GI)]
        );
        // 4Gi left on each NUMA node: even both together do not hold 12Gi.
        let outcome = testutil::filter(&s, "default/c", t0());
        assert_eq!(
            outcome.failed["n1"],
            "Unsatisfied NUMA cpu; Unsatisfied NUMA memory"
        );
    }

    #[test]
    fn a_pod_level_single_numa_policy_requires_exclusive_numa_nodes_by_default() {
        let spec = r#"{"numaTopologyPolicy":"SingleNUMANode"}"#;
        let shared_ok =
            r#"{"numaTopologyPolicy":"SingleNUMANode","singleNUMANodeExclusive":"Preferred"}"#;
        let numa_spec = "scheduling.koordinator.sh/numa-topology-spec";
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt_with_zones("n1", "16Gi"),
            plain_pod(
                "wide",
                "6",
                "2Gi",
                &[(numa_spec, r#"{"numaTopologyPolicy":"Restricted"}"#)],
            ),
            plain_pod("single", "1", "1Gi", &[(numa_spec, spec)]),
            plain_pod("tolerant", "1", "1Gi", &[(numa_spec, shared_ok)]),
        ]);
        // A Restricted pod spanning both NUMA nodes makes them shared.
        let wide = bind(&mut s, "wide", "n1").unwrap();
        assert_eq!(numa_amounts(&wide).len(), 2);
        // Required exclusivity: a single-NUMA pod may not join shared nodes.
        let outcome = testutil::filter(&s, "default/single", t0());
        assert!(
            outcome.failed["n1"].starts_with("Unaligned NUMA Hint cause"),
            "{:?}",
            outcome.failed
        );
        // Preferred exclusivity lets it in.
        assert_eq!(
            testutil::filter(&s, "default/tolerant", t0()).feasible,
            ["n1"]
        );
    }

    #[test]
    fn kubelet_full_pcpus_only_requires_whole_cores_and_reserved_cpus_stay_out() {
        let kubelet = (
            "kubelet.koordinator.sh/cpu-manager-policy",
            r#"{"policy":"static","options":{"full-pcpus-only":"true"},"reservedCPUs":"0,4"}"#
                .to_string(),
        );
        let spread = r#"{"preferredCPUBindPolicy":"SpreadByPCPUs"}"#;
        let mut s = scheduler_with(vec![
            node("n1", &[], &[]),
            nrt("n1", &[], &[kubelet]),
            lsr_pod("odd", "3", &[]),
            lsr_pod(
                "even",
                "6",
                &[("scheduling.koordinator.sh/resource-spec", spread)],
            ),
            lsr_pod("more", "2", &[]),
        ]);
        // Upstream's message for a request that is not whole cores.
        let outcome = testutil::filter(&s, "default/odd", t0());
        assert_eq!(outcome.failed_unresolvable["n1"], ERR_SMT_ALIGNMENT);
        // A preferred spread becomes whole cores; core (0,4) is kubelet's.
        let even = bind(&mut s, "even", "n1").unwrap();
        assert_eq!(even.cpuset, "1-3,5-7");
        let outcome = testutil::filter(&s, "default/more", t0());
        assert_eq!(outcome.failed["n1"], ERR_NOT_ENOUGH_CPUS);
    }

    #[test]
    fn score_reuses_filter_placements_only_while_nothing_changed() {
        let policy = "node.koordinator.sh/numa-topology-policy";
        let config = "profiles:\n- plugins:\n    multiPoint:\n      disabled: [{name: '*'}]\n      enabled: [{name: NodeNUMAResource, weight: 1}]\n  pluginConfig:\n  - name: NodeNUMAResource\n    args: {numaScoringStrategy: {type: MostAllocated}}\n";
        let mut s = testutil::scheduler(config);
        testutil::load(
            &mut s,
            vec![
                node("busy", &[(policy, "SingleNUMANode")], &[]),
                nrt_with_zones("busy", "16Gi"),
                node("idle", &[(policy, "SingleNUMANode")], &[]),
                nrt_with_zones("idle", "16Gi"),
                plain_pod("first", "3", "12Gi", &[]),
                plain_pod("next", "2", "8Gi", &[]),
            ],
        );
        let names = vec!["busy".to_string(), "idle".to_string()];
        let pod = s.cache.pod("default/next").unwrap().clone();
        let scored = |s: &Scheduler, state: &CycleState| s.score(&pod, &names, state).totals;
        let fresh = |s: &Scheduler| scored(s, &s.pre_filter(&pod, t0()).unwrap());
        // Filter keeps the NUMA placements (NUMA node 0 on both nodes);
        // score in the same cycle gives what score alone gives.
        let state = s.pre_filter(&pod, t0()).unwrap();
        let filtered = s.filter(&pod, Some(&names[..]), &state);
        assert_eq!(filtered.feasible.len(), 2, "{filtered:?}");
        assert_eq!(scored(&s, &state), fresh(&s));
        // A bind in between leaves busy's NUMA node 0 too small for the
        // pod: the cycle's kept placement there is stale, and score works
        // out NUMA node 1 again instead of scoring the full node 0.
        bind(&mut s, "first", "busy").unwrap();
        assert_eq!(scored(&s, &state), fresh(&s));
    }

    #[test]
    fn numa_scoring_strategies_prefer_fuller_or_emptier_numa_nodes() {
        let policy = "node.koordinator.sh/numa-topology-policy";
        let scores = |args: &str| {
            let config = format!(
                "profiles:\n- plugins:\n    multiPoint:\n      disabled: [{{name: '*'}}]\n      enabled: [{{name: NodeNUMAResource, weight: 1}}]\n  pluginConfig:\n  - name: NodeNUMAResource\n    args: {args}\n"
            );
            let mut s = testutil::scheduler(&config);
            testutil::load(
                &mut s,
                vec![
                    node("busy", &[(policy, "SingleNUMANode")], &[]),
                    nrt_with_zones("busy", "16Gi"),
                    node("idle", &[(policy, "SingleNUMANode")], &[]),
                    nrt_with_zones("idle", "16Gi"),
                    plain_pod("first", "2", "8Gi", &[]),
                    plain_pod("next", "1", "4Gi", &[]),
                ],
            );
            bind(&mut s, "first", "busy").unwrap();
            testutil::scores(&s, "default/next", &["busy", "idle"], t0())
        };
        // Default (least allocated) NUMA scoring sends the pod to busy's
        // empty NUMA node 1: 1 of 4 CPUs and 4 of 16Gi on either node.
        assert_eq!(scores("{}"), [75, 75]);
        // Most-allocated NUMA scoring packs it onto busy's NUMA node 0 (3 of
        // 4 CPUs, 12 of 16Gi), which the node score then sees.
        assert_eq!(
            scores("{numaScoringStrategy: {type: MostAllocated}}"),
            [25, 75]
        );
        let most = "{type: MostAllocated, resources: [{name: memory, weight: 1}]}";
        assert_eq!(
            scores(&format!(
                "{{scoringStrategy: {most}, numaScoringStrategy: {most}}}"
            )),
            [75, 25]
        );
        // Bad strategy args are refused.
        assert!(
            NumaScorer::from_args(
                Some(ScoringStrategy {
                    type_: Some("Balanced".into()),
                    resources: vec![],
                }),
                "scoringStrategy",
            )
            .is_err()
        );
    }

    /// Every pod's filter and score on every node, and each node's policy.
    fn answers(
        plugin: &NodeNUMAResource,
        cache: &ClusterCache,
        pods: &[&str],
    ) -> Vec<(String, String, Result<(), Rejection>, i64)> {
        let mut out = Vec::new();
        for key in pods {
            let pod = cache.pod(key).unwrap();
            let mut state = CycleState::new(t0());
            if let Err(rejection) = plugin.pre_filter(pod, cache, &mut state) {
                out.push((key.to_string(), String::new(), Err(rejection), 0));
                continue;
            }
            for node in cache.nodes_sorted() {
                let filtered = plugin.filter(pod, node, cache, &state);
                // The full check, without the filter's shortcut.
                let checked = match state.read::<Request>(STATE_KEY) {
                    None => Ok(()),
                    Some(request) => plugin
                        .choose_with_reservations(
                            pod,
                            request,
                            node,
                            owned_reservations(&state),
                            state.now,
                            Mode::Check,
                        )
                        .map(|_| ()),
                };
                assert_eq!(filtered, checked, "pod {key}, node {}", node.name);
                let score = plugin.score(pod, node, cache, &state);
                out.push((key.to_string(), node.name.to_string(), filtered, score));
            }
        }
        out
    }

    /// The per-node policies kept from events answer exactly as reading each
    /// node's label and topology again: over random Node, NRT and pod
    /// events (topology before or after its Node, labels changed, removed or
    /// invalid, Nodes deleted, nodes only pods name), filter and score give
    /// the same answers with the kept policies as without them.
    #[test]
    fn kept_node_policies_answer_as_reading_labels_and_topologies() {
        use koord_common::testing::Lcg;
        let label = apis::extension::numa_aware::LABEL_NUMA_TOPOLOGY_POLICY;
        let spec = apis::extension::numa_aware::ANNOTATION_NUMA_TOPOLOGY_SPEC;
        let labels = [
            None,
            Some("None"),
            Some("SingleNUMANode"),
            Some("BestEffort"),
            Some("Restricted"),
            Some("bogus"),
        ];
        let nrt_policies: [&[&str]; 5] = [
            &[],
            &["None"],
            &["SingleNUMANodePodLevel"],
            &["BestEffortPodLevel"],
            &["Restricted"],
        ];
        let Object::NodeResourceTopology(sample) = nrt("x", &[], &[]) else {
            unreachable!("nrt builds a NodeResourceTopology");
        };
        let topology_annotation =
            sample.metadata.annotations.unwrap()[ANNOTATION_NODE_CPU_TOPOLOGY].clone();
        let mut cache = ClusterCache::new();
        let mut plugin = NodeNUMAResource::new(CPUBindPolicy::FullPCPUs);
        let apply = |plugin: &mut NodeNUMAResource, cache: &mut ClusterCache, change| {
            let event = cache.apply(change);
            plugin.on_event(&event, cache);
        };
        let single = r#"{"numaTopologyPolicy":"SingleNUMANode"}"#;
        for pod in [
            plain_pod("plain", "2", "4Gi", &[]),
            plain_pod("pod-policy", "2", "4Gi", &[(spec, single)]),
            lsr_pod("lsr", "2", &[]),
        ] {
            apply(&mut plugin, &mut cache, Change::Upsert(pod));
        }
        let pods = ["default/plain", "default/pod-policy", "default/lsr"];
        let mut rng = Lcg(7);
        let mut checked_known = 0;
        for step in 0..400 {
            let name = format!("n{}", rng.below(4));
            let change = match rng.below(6) {
                0 | 1 => {
                    let mut node_labels = Vec::new();
                    if let Some(value) = labels[rng.below(labels.len() as u64) as usize] {
                        node_labels.push((label, value));
                    }
                    let annotations: Vec<(&str, &str)> = if rng.below(3) == 0 {
                        vec![(ANNOTATION_NODE_CPU_TOPOLOGY, topology_annotation.as_str())]
                    } else {
                        Vec::new()
                    };
                    Change::Upsert(node(&name, &node_labels, &annotations))
                }
                2 => Change::Delete(node(&name, &[], &[])),
                3 => {
                    let policies = nrt_policies[rng.below(nrt_policies.len() as u64) as usize];
                    Change::Upsert(nrt(&name, policies, &[]))
                }
                4 => Change::Delete(nrt(&name, &[], &[])),
                _ => {
                    // A bound pod on a node that may not exist yet.
                    let pod_name = format!("bound-{step}");
                    Change::Upsert(testutil::pod(PodSpec {
                        name: &pod_name,
                        node: Some(&name),
                        requests: &[("cpu", "1")],
                        ..Default::default()
                    }))
                }
            };
            apply(&mut plugin, &mut cache, change);
            for node in cache.nodes_sorted() {
                assert_eq!(
                    plugin.node_policy(node),
                    plugin.node_policy_from(node),
                    "step {step}, node {}",
                    node.name
                );
                if matches!(plugin.node_policies.get(node.index), Some(Some(_))) {
                    checked_known += 1;
                }
            }
            let with_kept = answers(&plugin, &cache, &pods);
            let kept = std::mem::take(&mut plugin.node_policies);
            let without = answers(&plugin, &cache, &pods);
            plugin.node_policies = kept;
            assert_eq!(with_kept, without, "step {step}");
        }
        // The kept policies were really read, not just computed again.
        assert!(checked_known > 400, "{checked_known}");
    }

    /// The per-node slots answer exactly as the name-keyed maps they mirror:
    /// over random Node, NRT, cpuset pod and reservation events (topology
    /// before or after its Node, Nodes deleted and back, nodes only pods
    /// name, reservations moved), every kept slot equals what the maps hold
    /// for its node, and filter and score answer the same without slots.
    #[test]
    fn kept_slots_answer_as_the_name_keyed_maps() {
        use koord_common::testing::Lcg;
        let mut cache = ClusterCache::new();
        let mut plugin = NodeNUMAResource::new(CPUBindPolicy::FullPCPUs);
        let apply = |plugin: &mut NodeNUMAResource, cache: &mut ClusterCache, change| {
            let event = cache.apply(change);
            plugin.on_event(&event, cache);
        };
        for pod in [
            lsr_pod("small", "2", &[]),
            lsr_pod("wide", "6", &[]),
            plain_pod("plain", "2", "4Gi", &[]),
        ] {
            apply(&mut plugin, &mut cache, Change::Upsert(pod));
        }
        let pods = ["default/small", "default/wide", "default/plain"];
        let cpusets = ["0-1", "2-3,6-7", "4-5", "0,4"];
        let mut rng = Lcg(11);
        let mut checked_slots = 0;
        for step in 0..400 {
            let name = format!("n{}", rng.below(4));
            let change = match rng.below(8) {
                0 | 1 => Change::Upsert(node(&name, &[], &[])),
                2 => Change::Delete(node(&name, &[], &[])),
                3 => Change::Upsert(nrt(&name, &[], &[])),
                4 => Change::Delete(nrt(&name, &[], &[])),
                5 | 6 => {
                    // A cpuset pod bound to a node that may not exist yet,
                    // or one of them gone again.
                    let pod_name = format!("bound-{}", rng.below(6));
                    let status = json!({"cpuset": cpusets[rng.below(4) as usize]}).to_string();
                    let pod = testutil::pod(PodSpec {
                        name: &pod_name,
                        node: Some(&name),
                        requests: &[("cpu", "2")],
                        annotations: &[(ANNOTATION_RESOURCE_STATUS, &status)],
                        ..Default::default()
                    });
                    if rng.below(3) == 0 {
                        Change::Delete(pod)
                    } else {
                        Change::Upsert(pod)
                    }
                }
                _ => {
                    let status = json!({"cpuset": cpusets[rng.below(4) as usize]}).to_string();
                    let reservation =
                        Object::Reservation(testutil::reservation(testutil::ReservationSpec {
                            name: ["r1", "r2"][rng.below(2) as usize],
                            template: testutil::reservation_template(&[("cpu", "2")]),
                            annotations: &[(ANNOTATION_RESOURCE_STATUS, &status)],
                            status: testutil::available_on(&name, &[("cpu", "2")]),
                            ..Default::default()
                        }));
                    if rng.below(3) == 0 {
                        Change::Delete(reservation)
                    } else {
                        Change::Upsert(reservation)
                    }
                }
            };
            apply(&mut plugin, &mut cache, change);
            for node in cache.nodes_sorted() {
                let Some(slot) = plugin.slot(node) else {
                    continue;
                };
                checked_slots += 1;
                let name = &*node.name;
                let context = format!("step {step}, node {name}");
                assert_eq!(slot.reserved, plugin.reserved_on.any_on(name), "{context}");
                assert_eq!(
                    slot.allocated,
                    plugin.allocations.get(name).is_some_and(|a| !a.is_empty()),
                    "{context}"
                );
                let same = |a: Option<&Arc<NodeTopology>>, b: Option<&Arc<NodeTopology>>| {
                    a.map(Arc::as_ptr) == b.map(Arc::as_ptr)
                };
                assert!(
                    same(slot.topology.as_ref(), plugin.topologies.get(name)),
                    "{context}"
                );
                assert_eq!(
                    slot.free.as_ref().map(Arc::as_ptr),
                    plugin.free.get(name).map(Arc::as_ptr),
                    "{context}"
                );
            }
            let with_slots = answers(&plugin, &cache, &pods);
            let kept = std::mem::take(&mut plugin.slots);
            let without = answers(&plugin, &cache, &pods);
            plugin.slots = kept;
            assert_eq!(with_slots, without, "step {step}");
        }
        // The slots were really read, not just left empty.
        assert!(checked_slots > 400, "{checked_slots}");
    }

    /// A clone of the plugin (the published state) keeps answering as it
    /// did when the original changes after it: a pod's cpuset freed, another
    /// pod's taken, a node's NUMA policy changed; the original shows them.
    #[test]
    fn a_clone_answers_as_before_after_the_original_changes() {
        let held_status = r#"{"cpuset":"0-1,4-5"}"#;
        let late_status = r#"{"cpuset":"2-3,6-7"}"#;
        let bound = |name: &str, node: &str, status: &str| {
            testutil::pod(PodSpec {
                name,
                node: Some(node),
                requests: &[("cpu", "4"), ("memory", "1Gi")],
                limits: &[("cpu", "4"), ("memory", "1Gi")],
                labels: &[("koordinator.sh/qosClass", "LSR")],
                annotations: &[(ANNOTATION_RESOURCE_STATUS, status)],
                priority: Some(9000),
                ..Default::default()
            })
        };
        let mut cache = ClusterCache::new();
        let mut plugin = NodeNUMAResource::new(CPUBindPolicy::FullPCPUs);
        let apply = |plugin: &mut NodeNUMAResource, cache: &mut ClusterCache, change| {
            let event = cache.apply(change);
            plugin.on_event(&event, cache);
        };
        for object in [
            node("n1", &[], &[]),
            nrt("n1", &[], &[]),
            node("n2", &[], &[]),
            nrt("n2", &[], &[]),
            bound("held", "n1", held_status),
            lsr_pod("probe", "6", &[]),
            lsr_pod("small", "2", &[]),
        ] {
            apply(&mut plugin, &mut cache, Change::Upsert(object));
        }
        let probes = ["default/probe", "default/small"];
        let before = answers(&plugin, &cache, &probes);
        let fits = |answers: &[(String, String, Result<(), Rejection>, i64)], pod: &str, node| {
            answers
                .iter()
                .find(|(p, n, _, _)| p == pod && n == node)
                .unwrap()
                .2
                .is_ok()
        };
        // Four CPUs are held on n1: the 6-CPU probe fits on n2 only.
        assert!(!fits(&before, "default/probe", "n1"));
        assert!(fits(&before, "default/probe", "n2"));

        let snapshot = plugin.clone();
        let snapshot_cache = cache.clone();
        apply(
            &mut plugin,
            &mut cache,
            Change::Delete(bound("held", "n1", held_status)),
        );
        apply(
            &mut plugin,
            &mut cache,
            Change::Upsert(bound("late", "n2", late_status)),
        );
        let single = [("node.koordinator.sh/numa-topology-policy", "SingleNUMANode")];
        apply(
            &mut plugin,
            &mut cache,
            Change::Upsert(node("n2", &single, &[])),
        );

        assert_eq!(answers(&snapshot, &snapshot_cache, &probes), before);
        assert!(
            snapshot
                .allocations
                .get("n1")
                .is_some_and(|a| a.contains_key("default/held"))
        );
        assert_eq!(
            snapshot.pod_nodes.get("default/held").map(String::as_str),
            Some("n1")
        );
        assert!(snapshot.pod_nodes.get("default/late").is_none());
        let n2 = snapshot_cache.node("n2").unwrap();
        assert_eq!(snapshot.node_policy(n2), NUMATopologyPolicy::None);

        let after = answers(&plugin, &cache, &probes);
        // n1 is free again; n2 is half taken and single-NUMA now.
        assert!(fits(&after, "default/probe", "n1"));
        assert!(!fits(&after, "default/probe", "n2"));
        assert!(fits(&after, "default/small", "n2"));
        assert!(
            plugin
                .allocations
                .get("n1")
                .is_some_and(|a| !a.contains_key("default/held"))
        );
        assert_eq!(
            plugin.pod_nodes.get("default/late").map(String::as_str),
            Some("n2")
        );
        let n2 = cache.node("n2").unwrap();
        assert_eq!(plugin.node_policy(n2), NUMATopologyPolicy::SingleNUMANode);
        assert_eq!(
            plugin.free.get("n1").unwrap().counts.total,
            [8, 8, 4],
            "every CPU of n1 is free in the original"
        );
        assert_eq!(snapshot.free.get("n1").unwrap().counts.total, [4, 4, 2]);
    }
}
