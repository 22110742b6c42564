//! GPU partitions (upstream's `allocateByPartition`): sets of GPUs joined by
//! fast links (NVLink, HCCS) that a multi-GPU pod should get together.
//!
//! - The node's table comes from its Device annotation
//!   `scheduling.koordinator.sh/gpu-partitions` (GPU count → partitions,
//!   each with an `allocationScore`), and the Device label
//!   `node.koordinator.sh/gpu-partition-policy` says whether it binds
//!   (`Honor`) or is preferred (`Prefer`, the default). Without a table,
//!   NVIDIA H100 / H800 / H20 nodes (by the node's `gpu-model` label) use
//!   the built-in Hopper table and the node's own policy label, as upstream.
//! - A pod's `scheduling.koordinator.sh/gpu-partition-spec` makes the table
//!   binding for it; its `allocatePolicy` `Restricted` allows only the first
//!   score tier, `BestEffort` (the default) moves on to the next tier when
//!   one has no free partition; `ringBusBandwidth` keeps only partitions
//!   with at least that bandwidth.
//! - Only whole-GPU requests use partitions. When they are not binding,
//!   any failure here falls back to the ordinary placement.
//! - Among the free partitions of the chosen tier, the one that leaves the
//!   most larger partitions whole wins (bin packing): each still-free
//!   partition of 8, 4 and 2 GPUs (of the table's first tier of that size,
//!   sizes not below the request) counts 10000, 100 and 1 times its
//!   allocation score.
//!
//! Score tiers are tried from the lowest `allocationScore` up: that is the
//! order upstream's code sorts them in (its comments speak of preferring
//! higher scores; the code is what schedules).

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use apis::extension::QuantityValue;
use apis::extension::device_share::{
    GPU_VENDOR_NVIDIA, GPUPartitionAllocatePolicy, GPUPartitionPolicy, GPUPartitionTable,
    LABEL_GPU_MODEL, LABEL_GPU_VENDOR, get_gpu_partition_spec, gpu_partition_policy,
};

/// Why the partition table refuses a request. The plugin turns it into its
/// `Rejection`; this module stays below the framework.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionRefusal {
    pub reason: &'static str,
    /// Preemption would not help (kube-scheduler's UnschedulableAndUnresolvable).
    pub unresolvable: bool,
}

impl PartitionRefusal {
    const fn unresolvable(reason: &'static str) -> Self {
        Self {
            reason,
            unresolvable: true,
        }
    }

    const fn unschedulable(reason: &'static str) -> Self {
        Self {
            reason,
            unresolvable: false,
        }
    }
}

pub const ERR_INSUFFICIENT_PARTITIONED_DEVICE: &str = "Insufficient Partitioned GPU Devices";
pub const ERR_NODE_MISSING_GPU_PARTITION_TABLE: &str = "node(s) missing GPU Partition Table";
pub const ERR_UNSUPPORTED_GPU_REQUESTS: &str = "node(s) Unsupported number of GPU requests";

/// The largest minor a partition may name (minors are kept in a 128-bit
/// set; upstream's 64-bit `1 << minor` hash has the same kind of limit).
pub const MAX_PARTITION_MINOR: i32 = 127;
/// The GPU models that get the built-in Hopper table (upstream's list).
pub const HOPPER_MODELS: [&str; 3] = ["H100", "H800", "H20"];

/// A set of GPU minors in `0..=MAX_PARTITION_MINOR`; others are never in it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MinorSet(u128);

impl MinorSet {
    pub fn of(minors: impl IntoIterator<Item = i32>) -> Self {
        let mut bits = 0u128;
        for minor in minors {
            if (0..=MAX_PARTITION_MINOR).contains(&minor) {
                bits |= 1 << minor;
            }
        }
        MinorSet(bits)
    }

    fn overlaps(self, other: MinorSet) -> bool {
        self.0 & other.0 != 0
    }

    fn contains_all(self, other: MinorSet) -> bool {
        self.0 & other.0 == other.0
    }

    fn union(self, other: MinorSet) -> MinorSet {
        MinorSet(self.0 | other.0)
    }
}

/// One partition of the node's table.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Sorted, as the table lists them.
    pub minors: Vec<i32>,
    set: MinorSet,
    ring_bus_bandwidth: Option<QuantityValue>,
    allocation_score: i64,
}

/// The partitions of one GPU count that share one allocation score.
#[derive(Debug, Clone, PartialEq)]
struct Tier {
    allocation_score: i64,
    partitions: Vec<Partition>,
}

/// A node's partition table, indexed: GPU count → score tiers, lowest
/// score first (upstream's `GPUPartitionIndexer`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionIndex {
    by_count: BTreeMap<i64, Vec<Tier>>,
}

impl PartitionIndex {
    /// Indexes `table`. A partition without minors, with a minor outside
    /// `0..=MAX_PARTITION_MINOR` or with an unreadable bandwidth is left out
    /// (one sentence each in the second value).
    pub fn from_table(table: &GPUPartitionTable) -> (Self, Vec<String>) {
        let mut problems = Vec::new();
        let mut by_count: BTreeMap<i64, Vec<Tier>> = BTreeMap::new();
        for (count, partitions) in table {
            for partition in partitions {
                let bad_minor = partition
                    .minors
                    .iter()
                    .find(|m| !(0..=MAX_PARTITION_MINOR).contains(*m));
                if partition.minors.is_empty() || bad_minor.is_some() {
                    problems.push(format!(
                        "partition {:?} of {count} GPUs needs minors from 0 to {MAX_PARTITION_MINOR}; left out",
                        partition.minors
                    ));
                    continue;
                }
                let bandwidth = match &partition.ring_bus_bandwidth {
                    None => None,
                    Some(quantity) => match QuantityValue::of(quantity) {
                        Ok(value) => Some(value),
                        Err(err) => {
                            problems.push(format!(
                                "partition {:?}: ringBusBandwidth: {err}; left out",
                                partition.minors
                            ));
                            continue;
                        }
                    },
                };
                let tiers = by_count.entry(i64::from(*count)).or_default();
                let score = i64::from(partition.allocation_score);
                let position = match tiers.iter().position(|t| t.allocation_score == score) {
                    Some(position) => position,
                    None => {
                        tiers.push(Tier {
                            allocation_score: score,
                            partitions: Vec::new(),
                        });
                        tiers.len() - 1
                    }
                };
                tiers[position].partitions.push(Partition {
                    minors: partition.minors.clone(),
                    set: MinorSet::of(partition.minors.iter().copied()),
                    ring_bus_bandwidth: bandwidth,
                    allocation_score: score,
                });
            }
        }
        for tiers in by_count.values_mut() {
            tiers.sort_by_key(|tier| tier.allocation_score);
        }
        (PartitionIndex { by_count }, problems)
    }

    /// Upstream's built-in table of 8-GPU NVIDIA Hopper boards: every GPU
    /// alone, pairs (0,1)…(6,7), quads (0–3) and (4–7), and all eight, each
    /// NVLink with allocation score 1.
    pub fn nvidia_hopper() -> Arc<PartitionIndex> {
        static HOPPER: LazyLock<Arc<PartitionIndex>> = LazyLock::new(|| {
            let mut table = GPUPartitionTable::new();
            for size in [1, 2, 4, 8] {
                let partitions = (0..8 / size)
                    .map(|group| apis::extension::GPUPartition {
                        minors: (group * size..(group + 1) * size).collect(),
                        gpu_link_type: Some(apis::extension::GPULinkType::NVLink),
                        ring_bus_bandwidth: None,
                        allocation_score: 1,
                    })
                    .collect();
                table.insert(size, partitions);
            }
            Arc::new(PartitionIndex::from_table(&table).0)
        });
        Arc::clone(&HOPPER)
    }

    fn tiers(&self, count: i64) -> Option<&[Tier]> {
        self.by_count
            .get(&count)
            .map(Vec::as_slice)
            .filter(|tiers| !tiers.is_empty())
    }
}

/// A node's partitions as DeviceShare uses them.
#[derive(Debug, Clone, Default)]
pub struct NodePartitions {
    pub index: Option<Arc<PartitionIndex>>,
    /// The partitions bind every pod (policy `Honor`).
    pub honor: bool,
}

impl NodePartitions {
    /// Upstream's fallback for a Device without a table: the built-in Hopper
    /// table for NVIDIA (or vendor-less) H100 / H800 / H20 nodes, and the
    /// node's own policy label.
    pub fn designated(node_labels: &BTreeMap<String, String>) -> NodePartitions {
        let vendor = node_labels.get(LABEL_GPU_VENDOR).map_or("", String::as_str);
        let model = node_labels.get(LABEL_GPU_MODEL).map_or("", String::as_str);
        let nvidia = vendor.is_empty() || vendor == GPU_VENDOR_NVIDIA;
        NodePartitions {
            index: (nvidia && HOPPER_MODELS.contains(&model)).then(PartitionIndex::nvidia_hopper),
            honor: gpu_partition_policy(node_labels) == GPUPartitionPolicy::Honor,
        }
    }
}

/// What a pod's `gpu-partition-spec` asks (its presence makes partitions
/// binding for the pod).
#[derive(Debug, Clone, PartialEq)]
pub struct PodPartitionSpec {
    /// `Restricted`: only the first score tier.
    pub restricted: bool,
    pub ring_bus_bandwidth: Option<QuantityValue>,
}

/// The pod's partition request; `Ok(None)` without the annotation, the
/// reason when it is not a partition spec.
pub fn pod_partition_spec(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<PodPartitionSpec>, String> {
    let Some(spec) = get_gpu_partition_spec(annotations).map_err(|err| err.to_string())? else {
        return Ok(None);
    };
    let ring_bus_bandwidth = spec
        .ring_bus_bandwidth
        .as_ref()
        .map(QuantityValue::of)
        .transpose()
        .map_err(|err| format!("ringBusBandwidth: {err}"))?;
    Ok(Some(PodPartitionSpec {
        restricted: spec.allocate_policy == Some(GPUPartitionAllocatePolicy::Restricted),
        ring_bus_bandwidth,
    }))
}

/// The partition inputs of one placement.
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    pub node: &'a NodePartitions,
    pub pod: Option<&'a PodPartitionSpec>,
}

/// What the devices look like to the partition allocator.
#[derive(Debug, Clone, Copy)]
pub struct Occupancy {
    /// GPUs any pod or reservation holds a share of.
    pub used: MinorSet,
    /// GPUs that can be allocated at all (healthy, and within the
    /// reservation when allocating from one).
    pub total: MinorSet,
}

/// Upstream's `allocateByPartition`: `Ok(Some(minors))` when a partition
/// was chosen, `Ok(None)` to fall back to the ordinary placement (a shared
/// request, or partitions that are not binding and did not fit).
pub fn allocate(
    placement: Placement<'_>,
    count: i64,
    shared: bool,
    occupancy: Occupancy,
) -> Result<Option<Vec<i32>>, PartitionRefusal> {
    let binding = placement.pod.is_some() || placement.node.honor;
    match allocate_binding(placement, count, shared, occupancy) {
        Ok(minors) => Ok(minors),
        Err(rejection) if binding => Err(rejection),
        Err(_) => Ok(None),
    }
}

fn allocate_binding(
    placement: Placement<'_>,
    count: i64,
    shared: bool,
    occupancy: Occupancy,
) -> Result<Option<Vec<i32>>, PartitionRefusal> {
    if shared {
        // Upstream leaves shared GPUs to the topology placement.
        return Ok(None);
    }
    let Some(index) = placement.node.index.as_deref() else {
        return Err(PartitionRefusal::unresolvable(
            ERR_NODE_MISSING_GPU_PARTITION_TABLE,
        ));
    };
    let Some(tiers) = index.tiers(count) else {
        return Err(PartitionRefusal::unresolvable(ERR_UNSUPPORTED_GPU_REQUESTS));
    };
    let restricted = placement.pod.is_some_and(|pod| pod.restricted);
    let wanted_bandwidth = placement.pod.and_then(|pod| pod.ring_bus_bandwidth);
    let mut feasible: Vec<&Partition> = Vec::new();
    for tier in tiers {
        feasible.extend(tier.partitions.iter().filter(|partition| {
            !partition.set.overlaps(occupancy.used)
                && occupancy.total.contains_all(partition.set)
                && wanted_bandwidth.is_none_or(|wanted| {
                    partition
                        .ring_bus_bandwidth
                        .is_some_and(|offered| offered >= wanted)
                })
        }));
        if !feasible.is_empty() || restricted {
            break;
        }
    }
    if feasible.is_empty() {
        return Err(PartitionRefusal::unschedulable(
            ERR_INSUFFICIENT_PARTITIONED_DEVICE,
        ));
    }
    let chosen = select_by_bin_pack(index, &feasible, occupancy.used, count);
    Ok(Some(chosen.minors.clone()))
}

/// The feasible partition leaving the most (and largest) partitions whole;
/// the first listed among equals.
fn select_by_bin_pack<'a>(
    index: &PartitionIndex,
    feasible: &[&'a Partition],
    used: MinorSet,
    count: i64,
) -> &'a Partition {
    const WEIGHTS: [(i64, i64); 3] = [(8, 10_000), (4, 100), (2, 1)];
    let mut best: Option<(&Partition, i64)> = None;
    for candidate in feasible {
        let allocated = used.union(candidate.set);
        let mut score = 0i64;
        for (size, weight) in WEIGHTS {
            if size < count {
                continue;
            }
            let Some(first_tier) = index.tiers(size).and_then(|tiers| tiers.first()) else {
                continue;
            };
            for partition in &first_tier.partitions {
                if !partition.set.overlaps(allocated) {
                    score = score.saturating_add(weight.saturating_mul(partition.allocation_score));
                }
            }
        }
        if best.is_none_or(|(_, best_score)| score > best_score) {
            best = Some((candidate, score));
        }
    }
    // `feasible` is never empty here.
    best.map_or(feasible[0], |(partition, _)| partition)
}
