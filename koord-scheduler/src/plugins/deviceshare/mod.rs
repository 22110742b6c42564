//! DeviceShare: GPUs from the node's Device CR, allocated per device.
//! Requests are normalized to per-GPU core / memory percentages, in the
//! combinations upstream accepts (`nvidia.com/gpu`, `amd.com/gpu`,
//! `dcu.com/gpu` count whole GPUs, `koordinator.sh/gpu` is a percentage,
//! `gpu-memory` / `gpu-memory-ratio` with or without `gpu-core` describe a
//! share, `gpu.shared` spreads a share over several GPUs; see
//! [`gpu_request`]). Memory in bytes becomes a ratio of the chosen GPU.
//! Whole-GPU requests take untouched GPUs; shares go to the fullest GPU they
//! fit on, leaving whole GPUs free (least fragmentation). Whole-GPU requests
//! on a node with a GPU partition table (NVLink/HCCS groups) take a free
//! partition first ([`partition`]). RDMA and FPGA devices are in
//! [`common`]. The result is the device-allocated annotation.
//!
//! A node DeviceShare knows nothing about (no Device CR, and no bound pod
//! holding devices there) passes and gets no device-allocated annotation, as
//! upstream: kube-scheduler's resource fit and the node's device plugin
//! decide. A deleted Device CR leaves its node known with every device
//! unhealthy until the CR returns (upstream's guard against handing the same
//! GPU out twice meanwhile).
//!
//! A placed Reservation keeps its reserve pod's device-allocated annotation
//! and holds those devices: other pods see them as used; its owners (as the
//! Reservation plugin's pre-filter found them) allocate from them first,
//! and a Restricted reservation's owners only from them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use apis::extension::device_share::DeviceTopologyScope;
use apis::extension::device_share::{
    ANNOTATION_DEVICE_ALLOCATED, DeviceAllocation, DeviceAllocationExtension, GPUPartitionPolicy,
    RESOURCE_AMD_GPU, RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO, RESOURCE_GPU_SHARED, RESOURCE_HUAWEI_NPU_CORE,
    RESOURCE_HUAWEI_NPU_CPU, RESOURCE_HUAWEI_NPU_DVPP, RESOURCE_HYGON_DCU, RESOURCE_NVIDIA_GPU,
    VirtualFunction, get_device_allocate_hints, get_device_allocations, get_device_joint_allocate,
    get_gpu_partition_table, gpu_partition_policy,
};
use apis::scheduling::v1alpha1::{Device, DeviceType};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;

use crate::cache::{ClusterCache, ClusterEvent, NodeInfo, ObjectKind, PodInfo};
use crate::config::{ConfigError, parse_args};
use crate::cow::CowMap;
use crate::framework::{CycleState, Plugin, Reason, Rejection};
use crate::plugins::reservation::pre_allocation::{self, HandOver};
use crate::plugins::reservation::{Holder, PlacedByNode, allocated_from, owned_reservations};
use crate::resources::{InvalidAmount, exact_amount, exact_resources, shown};

pub mod common;
pub mod joint;
pub mod partition;
pub mod scoring;

use common::{CommonDevice, CommonDevices, CommonKind, CommonPick, CommonRequest, common_requests};
use joint::{JointRule, JointType};
use partition::{
    MinorSet, NodePartitions, Occupancy, PartitionIndex, PartitionRefusal, PodPartitionSpec,
};
use scoring::{ScoringStrategy, ScoringStrategyArgs};

pub const NAME: &str = "DeviceShare";

pub const ERR_INSUFFICIENT_GPU_DEVICES: &str = "Insufficient GPU Devices";
/// A pre-allocating reservation's devices cannot include those of the pods
/// it would take in.
pub const ERR_DEVICES_NOT_TAKEN_OVER: &str =
    "node(s) cannot take over the devices of the pods the reservation pre-allocates";
pub const ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES: &str =
    "Insufficient Topology Scoped GPU Devices";
pub const ERR_NODE_MISSING_GPU_DEVICE_TOPOLOGY_TREE: &str =
    "node(s) missing GPU Device Topology Tree";
pub const ERR_UNSUPPORTED_MULTI_SHARED_GPU: &str = "node(s) Unsupported Multi-Shared GPU";
/// Upstream's reason when a known node lists no GPU at all (unresolvable).
pub const ERR_NO_GPU_DEVICES: &str = "Insufficient gpu devices";
const STATE_KEY: &str = "DeviceShare/request";
const GPU_KEY: &str = "gpu";

/// `DeviceShareArgs` (the fields this extender reads; upstream's others,
/// such as GPU shared resource templates, are accepted and ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceShareArgs {
    /// Deprecated upstream too; accepted and ignored.
    #[serde(default)]
    pub allocator: Option<String>,
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategyArgs>,
}

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let raw: DeviceShareArgs = parse_args(NAME, args)?;
    let strategy =
        ScoringStrategy::from_args(raw.scoring_strategy.as_ref()).map_err(|message| {
            ConfigError::InvalidArgs {
                plugin: NAME.to_string(),
                message,
            }
        })?;
    Ok(Box::new(DeviceShare {
        strategy,
        ..Default::default()
    }))
}

/// A pod's GPU request, per GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRequest {
    /// How many GPUs.
    pub count: i64,
    /// Percent of each GPU's compute (100 = whole); `None` when the pod
    /// asks for memory only.
    pub core: Option<i64>,
    /// Percent of each GPU's memory; `None` when given in bytes.
    pub memory_ratio: Option<i64>,
    pub memory_bytes: Option<i64>,
    /// The GPU hint's `requiredTopologyScope`: every GPU within one PCIe
    /// switch / NUMA node / device.
    pub scope: Option<DeviceTopologyScope>,
    /// Minors taken before any other (a pre-allocating reservation takes
    /// over the GPUs of the pods it takes in).
    pub preferred: BTreeSet<i32>,
}

impl GpuRequest {
    /// Less than a whole GPU each (upstream's shared GPU request).
    pub fn is_shared(&self) -> bool {
        self.core.unwrap_or(0) < 100 || self.memory_ratio.is_none_or(|r| r < 100)
    }
}

/// The pod resources upstream counts as GPU requests.
const GPU_RESOURCES: [&str; 11] = [
    RESOURCE_NVIDIA_GPU,
    RESOURCE_AMD_GPU,
    RESOURCE_HYGON_DCU,
    RESOURCE_GPU,
    RESOURCE_GPU_SHARED,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_HUAWEI_NPU_CORE,
    RESOURCE_HUAWEI_NPU_CPU,
    RESOURCE_HUAWEI_NPU_DVPP,
];

/// Resources that count whole GPUs (1 = 100 % core and memory).
const WHOLE_GPU_RESOURCES: [&str; 3] = [RESOURCE_NVIDIA_GPU, RESOURCE_AMD_GPU, RESOURCE_HYGON_DCU];

/// Validates and normalizes the GPU resources of a pod; `Ok(None)` without any.
pub fn gpu_request(pod: &PodInfo) -> Result<Option<GpuRequest>, String> {
    let requested: Vec<(&str, i64)> = GPU_RESOURCES
        .iter()
        .map(|name| (*name, pod.requests.get(name)))
        .filter(|(_, amount)| *amount != 0)
        .collect();
    gpu_request_of(&requested)
}

/// Percentages above 100 must be whole GPUs.
fn is_percentage(value: i64) -> bool {
    value <= 100 || value % 100 == 0
}

/// [`gpu_request`] over the pod's non-zero GPU resources. Accepts the
/// combinations upstream does (`ValidDeviceResourceCombinations`) and
/// converts them its way: the GPU count is `gpu.shared`, else
/// `gpu-memory-ratio / 100` when that is a multiple of 100 above 100, else
/// one; every other amount is divided by the count.
fn gpu_request_of(requested: &[(&str, i64)]) -> Result<Option<GpuRequest>, String> {
    if requested.is_empty() {
        return Ok(None);
    }
    for (name, value) in requested {
        if *value < 0 || (*name == RESOURCE_GPU && !is_percentage(*value)) {
            return Err(format!("invalid resource unit {name}: {value}"));
        }
    }
    let get = |name: &str| {
        requested
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| *value)
    };
    // Exactly these resources, no others.
    let only =
        |names: &[&str]| requested.len() == names.len() && names.iter().all(|n| get(n).is_some());
    let percentage = |name: &str| get(name).is_none_or(is_percentage);
    let listed = || {
        let mut names: Vec<&str> = requested.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        format!("[{}]", names.join(" "))
    };
    let (core, ratio, memory) = (
        get(RESOURCE_GPU_CORE),
        get(RESOURCE_GPU_MEMORY_RATIO),
        get(RESOURCE_GPU_MEMORY),
    );
    // The pod's totals: (shared GPUs, core %, memory %, memory bytes).
    let (shared, core, ratio, memory) = if let [(name, count)] = requested
        && WHOLE_GPU_RESOURCES.contains(name)
    {
        let percent = count
            .checked_mul(100)
            .ok_or_else(|| format!("invalid resource unit {name}: {count} GPUs is too many"))?;
        (None, Some(percent), Some(percent), None)
    } else if only(&[RESOURCE_GPU]) {
        let percent = get(RESOURCE_GPU);
        (None, percent, percent, None)
    } else if (only(&[RESOURCE_GPU_MEMORY])
        || only(&[RESOURCE_GPU_MEMORY_RATIO])
        || only(&[RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY])
        || only(&[RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY_RATIO]))
        && percentage(RESOURCE_GPU_CORE)
        && percentage(RESOURCE_GPU_MEMORY_RATIO)
    {
        (None, core, ratio, memory)
    } else if let Some(gpus) = get(RESOURCE_GPU_SHARED)
        && (only(&[RESOURCE_GPU_SHARED, RESOURCE_GPU_MEMORY])
            || only(&[RESOURCE_GPU_SHARED, RESOURCE_GPU_MEMORY_RATIO])
            || only(&[RESOURCE_GPU_SHARED, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY])
            || only(&[
                RESOURCE_GPU_SHARED,
                RESOURCE_GPU_CORE,
                RESOURCE_GPU_MEMORY_RATIO,
            ]))
    {
        // Each GPU gets an equal share of at most one whole GPU.
        let splits = |total: Option<i64>| total.is_none_or(|t| t % gpus == 0 && t / gpus <= 100);
        if !splits(core) || !splits(ratio) {
            return Err(format!("invalid resource device requests: {}", listed()));
        }
        (Some(gpus), core, ratio, memory)
    } else if huawei_npu_accepted_upstream(&get, &only) {
        return Err(format!(
            "Huawei NPU device requests are not supported: {}",
            listed()
        ));
    } else {
        return Err(format!("invalid resource device requests: {}", listed()));
    };
    let count = match (shared, ratio) {
        (Some(gpus), _) => gpus,
        (None, Some(r)) if r > 100 && r % 100 == 0 => r / 100,
        _ => 1,
    };
    Ok(Some(GpuRequest {
        count,
        core: core.map(|c| c / count),
        memory_ratio: ratio.map(|r| r / count),
        // A ratio wins over bytes, as upstream (no accepted set has both).
        memory_bytes: memory.filter(|_| ratio.is_none()).map(|m| m / count),
        scope: None,
        preferred: BTreeSet::new(),
    }))
}

/// Whether upstream would accept these Huawei NPU requests (it allocates
/// them through GPU shared resource templates, which this scheduler lacks).
fn huawei_npu_accepted_upstream(
    get: &dyn Fn(&str) -> Option<i64>,
    only: &dyn Fn(&[&str]) -> bool,
) -> bool {
    let shared_npu = only(&[
        RESOURCE_GPU_SHARED,
        RESOURCE_HUAWEI_NPU_CORE,
        RESOURCE_HUAWEI_NPU_CPU,
        RESOURCE_GPU_MEMORY,
    ]) || only(&[
        RESOURCE_GPU_SHARED,
        RESOURCE_HUAWEI_NPU_CORE,
        RESOURCE_HUAWEI_NPU_CPU,
        RESOURCE_HUAWEI_NPU_DVPP,
        RESOURCE_GPU_MEMORY,
    ]);
    let npu_ratio = only(&[RESOURCE_HUAWEI_NPU_CORE, RESOURCE_GPU_MEMORY_RATIO]);
    (npu_ratio && get(RESOURCE_GPU_MEMORY_RATIO).is_some_and(is_percentage))
        || (shared_npu
            && get(RESOURCE_GPU_SHARED).is_some_and(|s| s <= 1)
            && get(RESOURCE_HUAWEI_NPU_DVPP).is_none_or(|d| d <= 100))
}

/// Everything a pod asks of devices (what pre-filter stores).
#[derive(Debug, Clone, Default)]
struct PodDeviceRequest {
    gpu: Option<GpuRequest>,
    /// The pod's `gpu-partition-spec`, when it asks for GPUs and has one.
    partition: Option<PodPartitionSpec>,
    common: Vec<CommonRequest>,
    /// The device-joint-allocate annotation, when it joins two or more
    /// requested types.
    joint: Option<JointRule>,
    /// The pod's raw device resources (name, amount), for nodes DeviceShare
    /// has no Device CR of.
    raw: Vec<(&'static str, i64)>,
    /// The refusal of a node short of every raw resource (the usual one: a
    /// node without such devices), built once per pod instead of per node.
    short_of_all: Option<Reason>,
    /// A pre-allocating reserve pod's: node → the devices of the running
    /// pods it takes in there, which it must take over (empty otherwise).
    taking_over: BTreeMap<String, TakenDevices>,
}

/// The device minors pods hold on one node, by type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct TakenDevices {
    gpus: BTreeSet<i32>,
    common: BTreeMap<CommonKind, BTreeSet<i32>>,
}

impl TakenDevices {
    /// Node → what the pods a pre-allocating reservation takes in hold
    /// there (nodes where they hold no devices left out).
    fn handed_over(hand_over: &HandOver) -> BTreeMap<String, TakenDevices> {
        let mut taken = BTreeMap::new();
        for (node, pods) in &hand_over.pods {
            let mut devices = TakenDevices::default();
            for (gpu, common) in pods.iter().filter_map(|pod| shares_of(pod.annotations())) {
                devices.gpus.extend(gpu.keys());
                for (kind, per_minor) in common {
                    devices
                        .common
                        .entry(kind)
                        .or_default()
                        .extend(per_minor.keys());
                }
            }
            devices.common.retain(|_, minors| !minors.is_empty());
            if !devices.gpus.is_empty() || !devices.common.is_empty() {
                taken.insert(node.clone(), devices);
            }
        }
        taken
    }

    /// Whether `picks` include every one of these minors (upstream checks
    /// the minors only, not the amounts).
    fn covered_by(&self, (gpus, common): &Picks) -> bool {
        self.gpus.iter().all(|minor| gpus.contains_key(minor))
            && self.common.iter().all(|(kind, minors)| {
                let picked = common.get(kind).map_or(&[][..], Vec::as_slice);
                minors.iter().all(|m| picked.iter().any(|p| p.minor == *m))
            })
    }
}

/// The share of one GPU picked for a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GpuPick {
    /// `None` when the pod asked for no compute (written without gpu-core).
    core: Option<i64>,
    ratio: i64,
    memory_bytes: i64,
}

/// What reserve picked for a pod, kept for pre-bind.
#[derive(Debug, Clone, Default)]
struct PendingAllocation {
    /// GPU minor → share.
    gpu: BTreeMap<i32, GpuPick>,
    common: BTreeMap<CommonKind, Vec<CommonPick>>,
}

/// Kind → minor → (units, VF bus IDs) a pod holds.
type CommonShares = BTreeMap<CommonKind, BTreeMap<i32, (i64, Vec<String>)>>;

/// One GPU's capacity and what is used of it.
#[derive(Debug, Clone, Default)]
struct Gpu {
    minor: i32,
    healthy: bool,
    /// `topology.pcieID` of the Device CR, if any.
    pcie: Option<String>,
    /// `topology.nodeID` (the NUMA node), if any and not negative.
    numa: Option<i32>,
    memory_total: i64,
    core_used: i64,
    ratio_used: i64,
}

impl Gpu {
    fn core_free(&self) -> i64 {
        100 - self.core_used
    }
    fn ratio_free(&self) -> i64 {
        100 - self.ratio_used
    }
}

/// GPU minor → (core %, memory %) a pod holds.
type GpuShares = BTreeMap<i32, (i64, i64)>;

/// The shares in a device-allocated annotation (None without one).
fn shares_of(annotations: &BTreeMap<String, String>) -> Option<(GpuShares, CommonShares)> {
    let allocations = get_device_allocations(annotations).ok().flatten()?;
    let gpu: GpuShares = allocations
        .get(GPU_KEY)
        .into_iter()
        .flatten()
        .map(|a| {
            (
                a.minor,
                // Annotations are outside input: no share is below none or
                // above a whole GPU, so sums cannot overflow.
                (
                    share(&a.resources, RESOURCE_GPU_CORE, 100).min(100),
                    share(&a.resources, RESOURCE_GPU_MEMORY_RATIO, 100).min(100),
                ),
            )
        })
        .collect();
    let mut common = CommonShares::new();
    for kind in CommonKind::ALL {
        for a in allocations.get(kind.key()).into_iter().flatten() {
            let held = common.entry(kind).or_default().entry(a.minor).or_default();
            held.0 = held
                .0
                .saturating_add(share(&a.resources, kind.resource(), i64::MAX));
            held.1.extend(
                a.extension
                    .iter()
                    .flat_map(|e| &e.virtual_functions)
                    .map(|vf| vf.bus_id.clone()),
            );
        }
    }
    Some((gpu, common))
}

/// A placed reservation's devices.
#[derive(Debug, Clone)]
struct ReservedDevices {
    holder: Holder,
    gpu: GpuShares,
    common: CommonShares,
}

/// A node's devices as one pod sees them.
#[derive(Debug, Clone, Default)]
struct DeviceView {
    gpus: BTreeMap<i32, Gpu>,
    common: BTreeMap<CommonKind, CommonDevices>,
}

impl DeviceView {
    /// Only the devices a reservation still holds (kinds it holds none of
    /// stay whole), each capped at what it holds.
    fn within(&self, gpu_left: &GpuShares, common_left: &CommonShares) -> DeviceView {
        let gpus = if gpu_left.is_empty() {
            self.gpus.clone()
        } else {
            self.gpus
                .iter()
                .filter_map(|(minor, gpu)| {
                    let (core, ratio) = gpu_left.get(minor)?;
                    let mut gpu = gpu.clone();
                    gpu.core_used = gpu.core_used.max(100 - core);
                    gpu.ratio_used = gpu.ratio_used.max(100 - ratio);
                    Some((*minor, gpu))
                })
                .collect()
        };
        let mut common = self.common.clone();
        for (kind, left) in common_left {
            let Some(devices) = common.get_mut(kind) else {
                continue;
            };
            devices.retain(|minor, _| left.contains_key(minor));
            for (minor, device) in devices.iter_mut() {
                let Some((units, vfs)) = left.get(minor) else {
                    continue;
                };
                device.used = device.used.max(device.total - units);
                if !vfs.is_empty() {
                    // Only the VFs the reservation holds are the owner's.
                    let others: Vec<String> = device
                        .vfs
                        .iter()
                        .map(|(_, vf)| vf.bus_id.clone())
                        .filter(|id| !vfs.contains(id))
                        .collect();
                    device.used_vfs.extend(others);
                }
            }
        }
        DeviceView { gpus, common }
    }
}

/// GPU and RDMA / FPGA picks for one pod.
type Picks = (
    BTreeMap<i32, GpuPick>,
    BTreeMap<CommonKind, Vec<CommonPick>>,
);

/// See the module docs.
#[derive(Default, Clone)]
pub struct DeviceShare {
    /// node → GPU minor → capacity. A node is known to DeviceShare exactly
    /// when it has an entry here (and then one in `common` too). Node-keyed
    /// maps hash with aHash (as [`FastMap`](crate::cache::FastMap) does): a
    /// device pod's filter asks this one on every node, and SipHash was a
    /// quarter of that filter. Every map of pods, nodes or reservations is
    /// a [`CowMap`], so a clone of the plugin (the published state) costs
    /// reference counts, and a write after it copies one shard.
    gpus: CowMap<String, BTreeMap<i32, Gpu>>,
    /// pod key → (node, shares).
    usage: CowMap<String, (String, GpuShares)>,
    /// node → kind → RDMA / FPGA devices.
    common: CowMap<String, BTreeMap<CommonKind, CommonDevices>>,
    /// pod key → (node, RDMA / FPGA shares).
    common_usage: CowMap<String, (String, CommonShares)>,
    pending: CowMap<String, PendingAllocation>,
    /// Reservation name → the devices it holds (looked up by name only).
    reserved: CowMap<String, ReservedDevices>,
    /// node → the names in `reserved` placed on it, in name order: filter
    /// and score look only at a node's own reservations instead of scanning
    /// all of them for every node.
    reserved_on: PlacedByNode,
    /// Pod key → the reservation it was allocated from.
    owners: CowMap<String, String>,
    /// node → the partition table and policy of its Device.
    partitions: CowMap<String, NodePartitions>,
    strategy: ScoringStrategy,
}

fn saturate(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

/// One amount of a device allocation a pod or reservation holds: absent
/// is none; one that is not an exact count (unparseable, negative, beyond
/// 64 bits) counts as `whole`, the whole device, so a share that cannot be
/// read never makes a device look free.
fn share(resources: &BTreeMap<String, Quantity>, name: &str, whole: i64) -> i64 {
    resources
        .get(name)
        .map_or(0, |q| exact_amount(name, q).unwrap_or(whole))
}

/// Where a pod's or reservation's device shares are read from.
const DEVICE_ALLOCATED: &str = "metadata.annotations[scheduling.koordinator.sh/device-allocated]";

/// Every amount of a device-allocated annotation, each exact; or the first
/// that is not (which [`shares_of`] counts as the whole device). An
/// annotation that is not a device allocation is not an amount (it is
/// ignored, as upstream).
pub fn allocation_amounts(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<(), InvalidAmount> {
    let Some(allocations) = annotations.and_then(|a| get_device_allocations(a).ok().flatten())
    else {
        return Ok(());
    };
    for (kind, list) in &allocations {
        for allocation in list {
            exact_resources(&allocation.resources, DEVICE_ALLOCATED).map_err(|mut invalid| {
                invalid.field = format!(
                    "{} of {} minor {}",
                    invalid.field,
                    shown(kind),
                    allocation.minor
                );
                invalid
            })?;
        }
    }
    Ok(())
}

/// Where a device's resources are read from.
const DEVICE_RESOURCES: &str = "spec.devices[].resources";

/// The resources of every device a Device CR lists, each exact (not
/// negative, not beyond 64 bits), by position; or the first that is not.
/// A Device that fails here offers nothing on its node.
pub fn device_amounts(device: &Device) -> Result<Vec<crate::resources::Resources>, InvalidAmount> {
    let empty = BTreeMap::new();
    device
        .spec
        .devices
        .iter()
        .flatten()
        .map(|info| {
            exact_resources(info.resources.as_ref().unwrap_or(&empty), DEVICE_RESOURCES).map_err(
                |mut invalid| {
                    let kind = info
                        .type_
                        .as_ref()
                        .map_or_else(String::new, |t| format!("{t:?} "));
                    invalid.field = format!(
                        "{} of {kind}device minor {} ({})",
                        invalid.field,
                        info.minor
                            .map_or_else(|| "none".to_string(), |m| m.to_string()),
                        shown(info.uuid.as_deref().unwrap_or(""))
                    );
                    invalid
                },
            )
        })
        .collect()
}

/// A node DeviceShare has no Device CR of: the pod's device resources
/// against the node's allocatable, as kube-scheduler's NodeResourcesFit
/// (which turns such nodes away upstream; the extender and `simulate` do
/// it here so a device pod never lands where no device is advertised).
fn fits_node_allocatable(request: &PodDeviceRequest, node: &NodeInfo) -> Result<(), Rejection> {
    let short = |(name, amount): &&(&str, i64)| {
        *amount
            > node
                .allocatable
                .get(name)
                .saturating_sub(node.requested.get(name))
    };
    // Most nodes fit or lack every resource; the message is built only for
    // a node short of some but not all.
    let short_count = request.raw.iter().filter(short).count();
    if short_count == 0 {
        return Ok(());
    }
    if short_count == request.raw.len()
        && let Some(reason) = &request.short_of_all
    {
        return Err(Rejection::unschedulable(reason.clone()));
    }
    Err(Rejection::unschedulable(insufficient_text(
        request.raw.iter().filter(short),
    )))
}

/// "Insufficient a, Insufficient b" for the raw resources a node is short of.
fn insufficient_text<'a>(short: impl Iterator<Item = &'a (&'static str, i64)>) -> String {
    short
        .map(|(name, _)| format!("Insufficient {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Upstream's node score: per device type the pod asks for, the strategy
/// over the type's healthy devices' totals and what is free of them.
/// Reads the devices in place (score clones nothing on a node without
/// reservations).
fn score_devices(
    strategy: &ScoringStrategy,
    gpus: &BTreeMap<i32, Gpu>,
    common: &BTreeMap<CommonKind, CommonDevices>,
    request: &PodDeviceRequest,
) -> i64 {
    let mut score = 0i64;
    if let Some(wanted) = &request.gpu {
        let healthy = || gpus.values().filter(|g| g.healthy);
        if let Some(first) = healthy().next() {
            let count = healthy().count() as i64;
            let memory_total: i64 = healthy()
                .map(|g| g.memory_total)
                .fold(0, i64::saturating_add);
            let memory_used: i64 = healthy()
                .map(|g| {
                    saturate(
                        i128::from(g.memory_total) * i128::from(g.ratio_used.clamp(0, 100)) / 100,
                    )
                })
                .fold(0, i64::saturating_add);
            let core_free: i64 = healthy().map(|g| g.core_free().max(0)).sum();
            let ratio_free: i64 = healthy().map(|g| g.ratio_free().max(0)).sum();
            // Per-GPU request; a ratio and bytes convert through the first
            // healthy GPU's memory (upstream's fillGPUTotalMem).
            let ratio = DeviceShare::ratio_of(first, wanted);
            let bytes = wanted.memory_bytes.unwrap_or_else(|| {
                saturate(i128::from(first.memory_total) * i128::from(ratio) / 100)
            });
            let amounts = |name: &str| match name {
                RESOURCE_GPU_CORE => Some((count * 100, core_free, wanted.core.unwrap_or(0))),
                RESOURCE_GPU_MEMORY_RATIO => Some((count * 100, ratio_free, ratio)),
                RESOURCE_GPU_MEMORY => Some((
                    memory_total,
                    memory_total.saturating_sub(memory_used),
                    bytes,
                )),
                _ => None,
            };
            score = score.saturating_add(strategy.score_type(amounts));
        }
    }
    for wanted in &request.common {
        let devices = common.get(&wanted.kind).into_iter().flatten();
        let (total, free) = devices.fold((0i64, 0i64), |(total, free), (_, d)| {
            (
                total.saturating_add(d.total),
                free.saturating_add(d.free().max(0)),
            )
        });
        let amounts = |name: &str| {
            (name == wanted.kind.resource()).then_some((total, free, wanted.per_device))
        };
        score = score.saturating_add(strategy.score_type(amounts));
    }
    score
}

impl DeviceShare {
    fn load_device(&mut self, node: &str, device: &Device) {
        let mut gpus = BTreeMap::new();
        let mut common: BTreeMap<CommonKind, CommonDevices> = BTreeMap::new();
        // A Device whose amounts cannot be read offers nothing: the node is
        // known to have no devices (as with an empty Device).
        let offers = device_amounts(device).unwrap_or_default();
        for (info, resources) in device.spec.devices.iter().flatten().zip(&offers) {
            let Some(minor) = info.minor else { continue };
            if let Some(kind) = info.type_.as_ref().and_then(CommonKind::of) {
                // Unhealthy devices offer nothing (upstream zeroes them).
                let total = if info.health {
                    resources.get(kind.resource())
                } else {
                    0
                };
                let vfs = info
                    .vf_groups
                    .iter()
                    .flatten()
                    .flat_map(|group| {
                        let labels = group.labels.clone().unwrap_or_default();
                        group.vfs.iter().flatten().map(move |vf| {
                            (
                                labels.clone(),
                                VirtualFunction {
                                    minor: vf.minor,
                                    bus_id: vf.bus_id.clone().unwrap_or_default(),
                                },
                            )
                        })
                    })
                    .collect();
                common.entry(kind).or_default().insert(
                    minor,
                    CommonDevice {
                        total,
                        labels: info.labels.clone().unwrap_or_default(),
                        vfs,
                        pcie: info.topology.as_ref().map(|t| t.pcie_id.clone()),
                        ..Default::default()
                    },
                );
                continue;
            }
            if info.type_ != Some(DeviceType::Gpu) {
                continue;
            }
            gpus.insert(
                minor,
                Gpu {
                    minor,
                    healthy: info.health,
                    pcie: info.topology.as_ref().map(|t| t.pcie_id.clone()),
                    numa: info
                        .topology
                        .as_ref()
                        .map(|t| t.node_id)
                        .filter(|id| *id >= 0),
                    memory_total: resources.get(RESOURCE_GPU_MEMORY),
                    ..Default::default()
                },
            );
        }
        self.gpus.insert(node.to_string(), gpus);
        self.common.insert(node.to_string(), common);
        self.partitions
            .insert(node.to_string(), Self::device_partitions(node, device));
        self.recount(node);
        self.recount_common(node);
    }

    /// The partition table and policy of a Device. A table that cannot be
    /// read is no table (upstream logs it the same way); partitions it
    /// cannot use are left out.
    fn device_partitions(node: &str, device: &Device) -> NodePartitions {
        let annotations = device.metadata.annotations.clone().unwrap_or_default();
        let labels = device.metadata.labels.clone().unwrap_or_default();
        let index = match get_gpu_partition_table(&annotations) {
            Ok(Some(table)) => {
                let (index, problems) = PartitionIndex::from_table(&table);
                for problem in problems {
                    tracing::warn!(node, problem = %problem, "GPU partition table: {problem}");
                }
                Some(std::sync::Arc::new(index))
            }
            Ok(None) => None,
            Err(err) => {
                tracing::warn!(node, error = %err, "invalid GPU partition table on the Device: {err}");
                None
            }
        };
        NodePartitions {
            index,
            honor: gpu_partition_policy(&labels) == GPUPartitionPolicy::Honor,
        }
    }

    /// The partitions that apply on `node`: its Device's table, else the
    /// built-in one its labels designate.
    fn node_partitions(
        &self,
        node: &str,
        node_labels: Option<&BTreeMap<String, String>>,
    ) -> NodePartitions {
        match self.partitions.get(node) {
            Some(partitions) if partitions.index.is_some() => partitions.clone(),
            _ => NodePartitions::designated(node_labels.unwrap_or(&BTreeMap::new())),
        }
    }

    /// A deleted Device CR: its devices stay known but offer nothing.
    fn invalidate_devices(&mut self, node: &str) {
        for gpu in self
            .gpus
            .get_mut(node)
            .into_iter()
            .flat_map(|g| g.values_mut())
        {
            gpu.healthy = false;
        }
        let common = self.common.get_mut(node).into_iter().flatten();
        for device in common.flat_map(|(_, d)| d.values_mut()) {
            device.total = 0;
        }
    }

    /// A node becomes known without a Device CR when a pod holding devices
    /// is bound there (upstream creates its node entry the same way).
    fn know(&mut self, node: &str) {
        // Only an unknown node is written: a write copies a shard a clone
        // shares.
        if !self.gpus.contains_key(node) {
            self.gpus.insert(node.to_string(), BTreeMap::new());
        }
        if !self.common.contains_key(node) {
            self.common.insert(node.to_string(), BTreeMap::new());
        }
    }

    /// Re-applies every pod's RDMA / FPGA usage on the node.
    fn recount_common(&mut self, node: &str) {
        let Some(kinds) = self.common.get_mut(node) else {
            return;
        };
        for device in kinds.values_mut().flat_map(|d| d.values_mut()) {
            device.used = 0;
            device.used_vfs.clear();
        }
        for (on, shares) in self.common_usage.values() {
            if on != node {
                continue;
            }
            for (kind, per_minor) in shares {
                for (minor, (units, vfs)) in per_minor {
                    if let Some(device) = kinds.get_mut(kind).and_then(|d| d.get_mut(minor)) {
                        device.used = device.used.saturating_add(*units);
                        device.used_vfs.extend(vfs.iter().cloned());
                    }
                }
            }
        }
    }

    /// Picks devices of every requested kind not already in `chosen`.
    fn choose_common(
        kinds: Option<&BTreeMap<CommonKind, CommonDevices>>,
        requests: &[CommonRequest],
        pack: bool,
        chosen: &mut BTreeMap<CommonKind, Vec<CommonPick>>,
    ) -> Result<(), Rejection> {
        for request in requests {
            if chosen.contains_key(&request.kind) {
                continue;
            }
            let devices = kinds.and_then(|k| k.get(&request.kind));
            let picks = common::choose(devices, request, &common::Placement::plain(pack))?;
            chosen.insert(request.kind, picks);
        }
        Ok(())
    }

    /// Re-applies every pod's usage on the node to its GPUs.
    fn recount(&mut self, node: &str) {
        let Some(gpus) = self.gpus.get_mut(node) else {
            return;
        };
        for gpu in gpus.values_mut() {
            gpu.core_used = 0;
            gpu.ratio_used = 0;
        }
        for (on, per_minor) in self.usage.values() {
            if on != node {
                continue;
            }
            for (minor, (core, ratio)) in per_minor {
                if let Some(gpu) = gpus.get_mut(minor) {
                    gpu.core_used = gpu.core_used.saturating_add(*core);
                    gpu.ratio_used = gpu.ratio_used.saturating_add(*ratio);
                }
            }
        }
    }

    fn ratio_of(gpu: &Gpu, request: &GpuRequest) -> i64 {
        match (request.memory_ratio, request.memory_bytes) {
            (Some(ratio), _) => ratio,
            (None, Some(bytes)) if gpu.memory_total > 0 => {
                // Round up so a share never gets less memory than asked; in
                // i128 as bytes × 100 overflows i64 for huge requests (which
                // then exceed 100 % and fit no GPU).
                let total = i128::from(gpu.memory_total);
                saturate((i128::from(bytes) * 100 + total - 1) / total)
            }
            _ => 100,
        }
    }

    /// The share of `gpu` a request takes.
    fn pick_of(gpu: &Gpu, request: &GpuRequest) -> GpuPick {
        let ratio = Self::ratio_of(gpu, request);
        let memory_bytes = request
            .memory_bytes
            .unwrap_or_else(|| saturate(i128::from(gpu.memory_total) * i128::from(ratio) / 100));
        GpuPick {
            core: request.core,
            ratio,
            memory_bytes,
        }
    }

    /// Picks GPUs: minor → share. A whole-GPU request (100 % core and
    /// memory) only fits untouched GPUs; it takes a partition of the node's
    /// table first (see [`partition`]).
    fn choose(
        gpus: Option<&BTreeMap<i32, Gpu>>,
        request: &GpuRequest,
        placement: partition::Placement<'_>,
    ) -> Result<BTreeMap<i32, GpuPick>, Rejection> {
        let Some(gpus) = gpus.filter(|g| !g.is_empty()) else {
            return Err(Rejection::unresolvable(ERR_NO_GPU_DEVICES));
        };
        let occupancy = Occupancy {
            used: MinorSet::of(
                gpus.values()
                    .filter(|g| g.core_used > 0 || g.ratio_used > 0)
                    .map(|g| g.minor),
            ),
            total: MinorSet::of(gpus.values().filter(|g| g.healthy).map(|g| g.minor)),
        };
        if let Some(minors) =
            partition::allocate(placement, request.count, request.is_shared(), occupancy)?
        {
            return Ok(minors
                .into_iter()
                .filter_map(|minor| gpus.get(&minor))
                .map(|g| (g.minor, Self::pick_of(g, request)))
                .collect());
        }
        let core = request.core.unwrap_or(0);
        let mut candidates: Vec<&Gpu> = gpus
            .values()
            .filter(|g| g.healthy)
            .filter(|g| g.core_free() >= core && g.ratio_free() >= Self::ratio_of(g, request))
            .collect();
        // Fullest first: shares fill used GPUs before breaking whole ones;
        // preferred minors (a reservation taking them over) before all.
        candidates.sort_by_key(|g| {
            (
                !request.preferred.contains(&g.minor),
                g.core_free() + g.ratio_free(),
                g.minor,
            )
        });
        if let Some(scope) = request.scope.filter(|s| *s != DeviceTopologyScope::Node) {
            candidates = Self::within_scope(gpus, candidates, request, scope)?;
        } else if request.count > 1 {
            // Not required but still preferred, as upstream's tree walk does
            // without a required scope: several GPUs under one PCIe switch,
            // else on one NUMA node, else wherever they are free.
            for preferred in [DeviceTopologyScope::PCIe, DeviceTopologyScope::NUMANode] {
                if let Ok(scoped) = Self::within_scope(gpus, candidates.clone(), request, preferred)
                {
                    candidates = scoped;
                    break;
                }
            }
        }
        if (candidates.len() as i64) < request.count {
            return Err(Rejection::unschedulable(ERR_INSUFFICIENT_GPU_DEVICES));
        }
        Ok(candidates
            .into_iter()
            .take(usize::try_from(request.count).unwrap_or(0))
            .map(|g| (g.minor, Self::pick_of(g, request)))
            .collect())
    }

    /// A required topology scope (upstream's GPU topology tree, flattened
    /// to the one level asked): the candidates of the one switch / NUMA
    /// node / device that holds all the GPUs asked, preferring the group
    /// under the most scopes with a GPU in use (packing, as upstream's tree
    /// walk), then the one whose best candidate comes first. A shared GPU
    /// request spread over several GPUs cannot be scoped (upstream's rule).
    fn within_scope<'a>(
        gpus: &BTreeMap<i32, Gpu>,
        candidates: Vec<&'a Gpu>,
        request: &GpuRequest,
        scope: DeviceTopologyScope,
    ) -> Result<Vec<&'a Gpu>, Rejection> {
        if request.is_shared() && request.count > 1 {
            return Err(Rejection::unresolvable(ERR_UNSUPPORTED_MULTI_SHARED_GPU));
        }
        let key_at = |g: &Gpu, level: DeviceTopologyScope| -> Option<String> {
            match level {
                DeviceTopologyScope::PCIe => g.pcie.clone(),
                DeviceTopologyScope::NUMANode => g.numa.map(|n| n.to_string()),
                _ => Some(g.minor.to_string()),
            }
        };
        if gpus
            .values()
            .filter(|g| g.healthy)
            .any(|g| key_at(g, scope).is_none())
        {
            return Err(Rejection::unresolvable(
                ERR_NODE_MISSING_GPU_DEVICE_TOPOLOGY_TREE,
            ));
        }
        let mut groups: BTreeMap<String, Vec<&Gpu>> = BTreeMap::new();
        for gpu in &candidates {
            if let Some(k) = key_at(gpu, scope) {
                groups.entry(k).or_default().push(gpu);
            }
        }
        // How many scopes from the NUMA node down to the group's own hold a
        // GPU in use (upstream's cumulative non-empty scopes).
        let used: Vec<&Gpu> = gpus
            .values()
            .filter(|g| g.core_used > 0 || g.ratio_used > 0)
            .collect();
        let levels = [
            DeviceTopologyScope::NUMANode,
            DeviceTopologyScope::PCIe,
            DeviceTopologyScope::Device,
        ];
        let non_empty_scopes = |first: &Gpu| {
            levels
                .iter()
                .filter(|level| level.level() <= scope.level())
                .filter(|level| {
                    let own = key_at(first, **level);
                    own.is_some() && used.iter().any(|u| key_at(u, **level) == own)
                })
                .count()
        };
        let rank_of = |first: &Gpu| candidates.iter().position(|c| c.minor == first.minor);
        groups
            .into_values()
            .filter(|group| group.len() as i64 >= request.count)
            .max_by(|a, b| {
                non_empty_scopes(a[0])
                    .cmp(&non_empty_scopes(b[0]))
                    .then_with(|| rank_of(b[0]).cmp(&rank_of(a[0])))
            })
            .ok_or_else(|| Rejection::unschedulable(ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES))
    }

    /// Everything the pod asks for, from one view: the joint allocation
    /// first when the pod has one, then every other type alone.
    fn pick(
        gpus: Option<&BTreeMap<i32, Gpu>>,
        common: Option<&BTreeMap<CommonKind, CommonDevices>>,
        request: &PodDeviceRequest,
        pack: bool,
        partitions: &NodePartitions,
    ) -> Result<Picks, Rejection> {
        let placement = partition::Placement {
            node: partitions,
            pod: request.partition.as_ref(),
        };
        let (mut gpu, mut chosen) = match &request.joint {
            Some(rule) => Self::pick_joint(gpus, common, request, rule, pack, placement)?,
            None => Picks::default(),
        };
        if let Some(wanted) = &request.gpu
            && gpu.is_empty()
        {
            gpu = Self::choose(gpus, wanted, placement)?;
        }
        Self::choose_common(common, &request.common, pack, &mut chosen)?;
        Ok((gpu, chosen))
    }

    /// The joint allocation: the primary type, then the others near it.
    fn pick_joint(
        gpus: Option<&BTreeMap<i32, Gpu>>,
        common: Option<&BTreeMap<CommonKind, CommonDevices>>,
        request: &PodDeviceRequest,
        rule: &JointRule,
        pack: bool,
        placement: partition::Placement<'_>,
    ) -> Result<Picks, Rejection> {
        let gpu_pcies = |picks: &BTreeMap<i32, GpuPick>| -> BTreeSet<String> {
            let all = gpus.into_iter().flatten();
            all.filter(|(minor, _)| picks.contains_key(minor))
                .filter_map(|(_, g)| g.pcie.clone())
                .collect()
        };
        let common_pcies = |kind: CommonKind, picks: &[CommonPick]| -> BTreeSet<String> {
            let devices = common.and_then(|c| c.get(&kind)).into_iter().flatten();
            devices
                .filter(|(minor, _)| picks.iter().any(|p| p.minor == **minor))
                .filter_map(|(_, d)| d.pcie.clone())
                .collect()
        };
        let common_request = |kind: CommonKind| request.common.iter().find(|r| r.kind == kind);
        let mut picks = Picks::default();
        let primary_pcies = match rule.primary {
            JointType::Gpu => {
                let wanted = request.gpu.as_ref().ok_or_else(|| {
                    Rejection::unschedulable(joint::ERR_INSUFFICIENT_PRIMARY_DEVICE)
                })?;
                picks.0 = Self::choose(gpus, wanted, placement)?;
                gpu_pcies(&picks.0)
            }
            JointType::Common(kind) => {
                let wanted = common_request(kind).ok_or_else(|| {
                    Rejection::unschedulable(joint::ERR_INSUFFICIENT_PRIMARY_DEVICE)
                })?;
                let devices = common.and_then(|c| c.get(&kind));
                let chosen = common::choose(devices, wanted, &common::Placement::plain(pack))?;
                let pcies = common_pcies(kind, &chosen);
                picks.1.insert(kind, chosen);
                pcies
            }
        };
        for secondary in &rule.secondaries {
            let secondary_pcies = match *secondary {
                // Upstream's GPU allocator takes no PCIe preference either;
                // a required scope is still checked below.
                JointType::Gpu => match &request.gpu {
                    Some(wanted) => {
                        picks.0 = Self::choose(gpus, wanted, placement)?;
                        gpu_pcies(&picks.0)
                    }
                    None => continue,
                },
                JointType::Common(kind) => {
                    let Some(wanted) = common_request(kind) else {
                        continue;
                    };
                    let placement = common::Placement {
                        pack,
                        preferred_pcies: Some(&primary_pcies),
                        one_per_pcie: rule.same_pcie,
                    };
                    let devices = common.and_then(|c| c.get(&kind));
                    let chosen = common::choose(devices, wanted, &placement)?;
                    let pcies = common_pcies(kind, &chosen);
                    picks.1.insert(kind, chosen);
                    pcies
                }
            };
            if rule.same_pcie && secondary_pcies != primary_pcies {
                return Err(Rejection::unschedulable(joint::ERR_JOINT_RULES_VIOLATION));
            }
        }
        Ok(picks)
    }

    /// What a reservation still holds at `now`: its devices minus what its
    /// owner pods use of them; None once it holds nothing.
    fn still_held(
        &self,
        name: &str,
        reserved: &ReservedDevices,
        now: SystemTime,
    ) -> Option<(GpuShares, CommonShares)> {
        let owner_pods: Vec<&String> = self
            .owners
            .iter()
            .filter(|(_, r)| *r == name)
            .map(|(pod, _)| pod)
            .collect();
        if !reserved.holder.holds(now, !owner_pods.is_empty()) {
            return None;
        }
        let mut gpu = reserved.gpu.clone();
        let mut common = reserved.common.clone();
        for pod in owner_pods {
            for (minor, (core, ratio)) in self.usage.get(pod).map(|u| &u.1).into_iter().flatten() {
                if let Some(held) = gpu.get_mut(minor) {
                    held.0 = (held.0 - core).max(0);
                    held.1 = (held.1 - ratio).max(0);
                }
            }
            let used = self.common_usage.get(pod).map(|u| &u.1);
            for (kind, per_minor) in used.into_iter().flatten() {
                for (minor, (units, vfs)) in per_minor {
                    if let Some(held) = common.get_mut(kind).and_then(|m| m.get_mut(minor)) {
                        held.0 = (held.0 - units).max(0);
                        held.1.retain(|vf| !vfs.contains(vf));
                    }
                }
            }
        }
        Some((gpu, common))
    }

    /// Reservations placed on `node`, in name order.
    fn reserved_on<'a>(
        &'a self,
        node: &str,
    ) -> impl Iterator<Item = (&'a String, &'a ReservedDevices)> + 'a {
        let names = self.reserved_on.on(node);
        names.filter_map(|name| self.reserved.get_key_value(name))
    }

    /// The node's devices with what every reservation on it still holds
    /// counted as used, except `freed`'s.
    fn view(&self, node: &str, now: SystemTime, freed: Option<&str>) -> DeviceView {
        let mut view = DeviceView {
            gpus: self.gpus.get(node).cloned().unwrap_or_default(),
            common: self.common.get(node).cloned().unwrap_or_default(),
        };
        for (name, reserved) in self.reserved_on(node) {
            if Some(name.as_str()) == freed {
                continue;
            }
            let Some((gpu, common)) = self.still_held(name, reserved, now) else {
                continue;
            };
            for (minor, (core, ratio)) in gpu {
                if let Some(g) = view.gpus.get_mut(&minor) {
                    g.core_used = g.core_used.saturating_add(core);
                    g.ratio_used = g.ratio_used.saturating_add(ratio);
                }
            }
            for (kind, per_minor) in common {
                for (minor, (units, vfs)) in per_minor {
                    if let Some(d) = view.common.get_mut(&kind).and_then(|m| m.get_mut(&minor)) {
                        d.used = d.used.saturating_add(units);
                        d.used_vfs.extend(vfs);
                    }
                }
            }
        }
        view
    }

    /// Picks the pod's devices on the node; nothing on a node DeviceShare
    /// does not know. Owners try their reservations there in order: within
    /// the reservation's devices first, then (not Restricted) with its hold
    /// freed; failing those (and not `required` to use one), like any other
    /// pod.
    fn allocate(
        &self,
        node: &str,
        node_labels: Option<&BTreeMap<String, String>>,
        request: &PodDeviceRequest,
        (owned, required): (&[String], bool),
        now: SystemTime,
    ) -> Result<Picks, Rejection> {
        let Some(gpus) = self.gpus.get(node) else {
            return Ok(Picks::default());
        };
        self.allocate_known(node, gpus, node_labels, request, (owned, required), now)
    }

    /// [`Self::allocate`] on a node DeviceShare knows, with its GPUs
    /// (looked up once by the caller).
    fn allocate_known(
        &self,
        node: &str,
        gpus: &BTreeMap<i32, Gpu>,
        node_labels: Option<&BTreeMap<String, String>>,
        request: &PodDeviceRequest,
        (owned, required): (&[String], bool),
        now: SystemTime,
    ) -> Result<Picks, Rejection> {
        let pack = self.strategy.packs();
        let partitions = &self.node_partitions(node, node_labels);
        if !self.reserved_on.any_on(node) {
            return Self::pick(Some(gpus), self.common.get(node), request, pack, partitions);
        }
        for name in owned {
            let Some(reserved) = self.reserved.get(name).filter(|r| r.holder.node == node) else {
                continue;
            };
            let Some((gpu_left, common_left)) = self.still_held(name, reserved, now) else {
                continue;
            };
            let view = self.view(node, now, Some(name));
            let within = view.within(&gpu_left, &common_left);
            if let Ok(picks) = Self::pick(
                Some(&within.gpus),
                Some(&within.common),
                request,
                pack,
                partitions,
            ) {
                return Ok(picks);
            }
            if !reserved.holder.restricted
                && let Ok(picks) = Self::pick(
                    Some(&view.gpus),
                    Some(&view.common),
                    request,
                    pack,
                    partitions,
                )
            {
                return Ok(picks);
            }
        }
        if required && !owned.is_empty() {
            return Err(Rejection::unschedulable(ERR_INSUFFICIENT_GPU_DEVICES));
        }
        let view = self.view(node, now, None);
        Self::pick(
            Some(&view.gpus),
            Some(&view.common),
            request,
            pack,
            partitions,
        )
    }

    /// A pre-allocating reserve pod's devices where the pods it takes in
    /// hold `taken`: those minors first, refused unless it gets all of them
    /// (as upstream). Once pre-allocated the pods count inside the
    /// reservation, so a device of theirs left outside it would be counted
    /// twice. Every reservation on the node keeps what it holds. (The node
    /// is known: a pod bound with devices makes DeviceShare know its node.)
    fn allocate_taking_over(
        &self,
        node: &str,
        node_labels: Option<&BTreeMap<String, String>>,
        request: &PodDeviceRequest,
        taken: &TakenDevices,
        now: SystemTime,
    ) -> Result<Picks, Rejection> {
        let mut preferring = request.clone();
        if let Some(gpu) = &mut preferring.gpu {
            gpu.preferred = taken.gpus.clone();
        }
        for common in &mut preferring.common {
            common.preferred = taken.common.get(&common.kind).cloned().unwrap_or_default();
        }
        let view = self.view(node, now, None);
        let partitions = &self.node_partitions(node, node_labels);
        let picks = Self::pick(
            Some(&view.gpus),
            Some(&view.common),
            &preferring,
            self.strategy.packs(),
            partitions,
        )?;
        if !taken.covered_by(&picks) {
            return Err(Rejection::unschedulable(ERR_DEVICES_NOT_TAKEN_OVER));
        }
        Ok(picks)
    }

    fn forget(&mut self, key: &str) {
        if let Some((node, _)) = self.usage.remove(key) {
            self.recount(&node);
        }
        if let Some((node, _)) = self.common_usage.remove(key) {
            self.recount_common(&node);
        }
    }
}

impl PodDeviceRequest {
    /// The devices the reserve pod must take over on the node, if any.
    fn taking_over_on(&self, node: &str) -> Option<&TakenDevices> {
        if self.taking_over.is_empty() {
            return None;
        }
        self.taking_over.get(node)
    }
}

impl Plugin for DeviceShare {
    fn name(&self) -> &'static str {
        NAME
    }

    fn on_event(&mut self, event: &ClusterEvent, cache: &ClusterCache) {
        match event {
            ClusterEvent::Object {
                kind: ObjectKind::Device,
                key,
            } => match cache.devices.get(key) {
                Some(device) => self.load_device(key, &device.clone()),
                None => self.invalidate_devices(key),
            },
            // Forget a deleted node's devices (upstream's node GC), unless
            // its Device CR is still there for a node that comes back.
            ClusterEvent::Object {
                kind: ObjectKind::Node,
                key,
            } if cache.node(key).is_none() && !cache.devices.contains_key(key) => {
                self.gpus.remove(key);
                self.common.remove(key);
                self.partitions.remove(key);
            }
            ClusterEvent::Object {
                kind: ObjectKind::Reservation,
                key,
            } => {
                let placed = cache.reservations.get(key).and_then(|r| {
                    let holder = Holder::of(r)?;
                    let annotations = r.metadata.annotations.as_ref()?;
                    let (gpu, common) = shares_of(annotations)?;
                    Some(ReservedDevices {
                        holder,
                        gpu,
                        common,
                    })
                });
                let node = placed.as_ref().map(|r| r.holder.node.clone());
                let previous = match placed {
                    Some(reserved) => self.reserved.insert(key.clone(), reserved),
                    None => self.reserved.remove(key),
                };
                let from = previous.as_ref().map(|r| r.holder.node.as_str());
                self.reserved_on.moved(key, from, node.as_deref());
            }
            ClusterEvent::Pod { old, new, .. } => {
                if let Some(old) = old {
                    self.forget(&old.key);
                    self.owners.remove(&old.key);
                }
                if let Some(new) = new
                    && let Some(node) = &new.node
                {
                    self.pending.remove(&new.key);
                    if let Some(reservation) = allocated_from(new) {
                        self.owners.insert(new.key.clone(), reservation);
                    }
                    if let Some((per_minor, shares)) = shares_of(new.annotations()) {
                        if !per_minor.is_empty() || !shares.is_empty() {
                            self.know(node);
                        }
                        if !per_minor.is_empty() {
                            self.usage
                                .insert(new.key.clone(), (node.clone(), per_minor));
                            self.recount(node);
                        }
                        if !shares.is_empty() {
                            self.common_usage
                                .insert(new.key.clone(), (node.clone(), shares));
                            self.recount_common(node);
                        }
                    }
                }
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
        let gpu = gpu_request(pod).map_err(Rejection::unresolvable)?;
        let hints = get_device_allocate_hints(pod.annotations()).map_err(|e| {
            Rejection::unresolvable(format!("invalid DeviceAllocateHint annotation, err: {e}"))
        })?;
        let common = common_requests(pod, hints.as_ref()).map_err(Rejection::unresolvable)?;
        let gpu = gpu.map(|mut wanted| {
            wanted.scope = hints
                .as_ref()
                .and_then(|h| h.get(GPU_KEY))
                .and_then(|h| h.required_topology_scope);
            wanted
        });
        if gpu.is_none() && common.is_empty() {
            return Ok(());
        }
        // Read only for GPU requests, as upstream.
        let partition = match &gpu {
            Some(_) => partition::pod_partition_spec(pod.annotations()).map_err(|e| {
                Rejection::unresolvable(format!("invalid GPUPartitionSpec annotation, err: {e}"))
            })?,
            None => None,
        };
        let invalid_joint = |e: String| {
            Rejection::unresolvable(format!("invalid DeviceJointAllocate annotation, err: {e}"))
        };
        let joint_annotation = get_device_joint_allocate(pod.annotations())
            .map_err(|e| invalid_joint(e.to_string()))?;
        let requested: Vec<JointType> = gpu
            .iter()
            .map(|_| JointType::Gpu)
            .chain(common.iter().map(|r| JointType::Common(r.kind)))
            .collect();
        let joint =
            joint::joint_rule(joint_annotation.as_ref(), &requested).map_err(invalid_joint)?;
        let raw = GPU_RESOURCES
            .iter()
            .copied()
            .chain(CommonKind::ALL.iter().map(|k| k.resource()))
            .map(|name| (name, pod.requests.get(name)))
            .filter(|(_, amount)| *amount > 0)
            .collect::<Vec<_>>();
        let short_of_all = (!raw.is_empty()).then(|| Reason::from(insufficient_text(raw.iter())));
        // Only a reserve pod asking for devices takes pods' devices over
        // (upstream skips the others, which take the pods in as they are).
        let taking_over =
            pre_allocation::hand_over(state).map_or_else(BTreeMap::new, TakenDevices::handed_over);
        state.write(
            STATE_KEY,
            PodDeviceRequest {
                gpu,
                partition,
                common,
                joint,
                raw,
                short_of_all,
                taking_over,
            },
        );
        Ok(())
    }

    fn filter(
        &self,
        _pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        let Some(request) = state.read::<PodDeviceRequest>(STATE_KEY) else {
            return Ok(());
        };
        let Some(gpus) = self.gpus.get(&*node.name) else {
            return fits_node_allocatable(request, node);
        };
        let labels = node.node.as_ref().and_then(|n| n.metadata.labels.as_ref());
        if let Some(taken) = request.taking_over_on(&node.name) {
            return self
                .allocate_taking_over(&node.name, labels, request, taken, state.now)
                .map(|_| ());
        }
        self.allocate_known(
            &node.name,
            gpus,
            labels,
            request,
            owned_reservations(state),
            state.now,
        )
        .map(|_| ())
    }

    fn scores(&self) -> bool {
        true
    }

    fn skips_scoring(&self, state: &CycleState) -> bool {
        state.read::<PodDeviceRequest>(STATE_KEY).is_none()
    }

    fn score(
        &self,
        _pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> i64 {
        let Some(request) = state.read::<PodDeviceRequest>(STATE_KEY) else {
            return 0;
        };
        let Some(gpus) = self.gpus.get(&*node.name) else {
            return 0;
        };
        if !self.reserved_on.any_on(&node.name) {
            // Nothing to count as held: the view would be a copy of these.
            let no_common = BTreeMap::new();
            let common = self.common.get(&*node.name).unwrap_or(&no_common);
            return score_devices(&self.strategy, gpus, common, request);
        }
        let view = self.view(&node.name, state.now, None);
        score_devices(&self.strategy, &view.gpus, &view.common, request)
    }

    fn normalize_scores(&self, scores: &mut [i64]) {
        scoring::normalize(scores);
    }

    fn reserve(
        &mut self,
        pod: &PodInfo,
        node: &str,
        cache: &ClusterCache,
        state: &CycleState,
    ) -> Result<(), Rejection> {
        let Some(request) = state.read::<PodDeviceRequest>(STATE_KEY) else {
            return Ok(());
        };
        let labels = cache
            .node(node)
            .and_then(|n| n.node.as_ref())
            .and_then(|n| n.metadata.labels.as_ref());
        let (gpu, common) = match request.taking_over_on(node) {
            Some(taken) => self.allocate_taking_over(node, labels, request, taken, state.now)?,
            None => self.allocate(node, labels, request, owned_reservations(state), state.now)?,
        };
        if gpu.is_empty() && common.is_empty() {
            tracing::debug!(pod = %pod.key, node, "no device information for the node; devices left to kube-scheduler and the device plugin");
            return Ok(());
        }
        if !gpu.is_empty() {
            let per_minor = gpu
                .iter()
                .map(|(minor, pick)| (*minor, (pick.core.unwrap_or(0), pick.ratio)))
                .collect();
            self.usage
                .insert(pod.key.clone(), (node.to_string(), per_minor));
            self.recount(node);
        }
        if !common.is_empty() {
            let shares = common
                .iter()
                .map(|(kind, picks)| {
                    let per_minor = picks
                        .iter()
                        .map(|p| {
                            let vfs = p.vf.iter().map(|vf| vf.bus_id.clone()).collect();
                            (p.minor, (p.units, vfs))
                        })
                        .collect();
                    (*kind, per_minor)
                })
                .collect();
            self.common_usage
                .insert(pod.key.clone(), (node.to_string(), shares));
            self.recount_common(node);
        }
        self.pending
            .insert(pod.key.clone(), PendingAllocation { gpu, common });
        Ok(())
    }

    fn unreserve(&mut self, pod: &PodInfo, _node: &str, _cache: &ClusterCache) {
        self.pending.remove(&pod.key);
        self.forget(&pod.key);
    }

    fn pre_bind(
        &self,
        pod: &PodInfo,
        node: &str,
        cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<BTreeMap<String, String>, Rejection> {
        let Some(chosen) = self.pending.get(&pod.key) else {
            return Ok(BTreeMap::new());
        };
        // Upstream's fillID: each allocation names its device's `id` (the
        // Device CR's UUID), when the CR lists one for that type and minor.
        let device_id = |device_type: &DeviceType, minor: i32| -> String {
            cache
                .devices
                .get(node)
                .and_then(|d| d.spec.devices.as_ref())
                .into_iter()
                .flatten()
                .find(|info| info.minor == Some(minor) && info.type_.as_ref() == Some(device_type))
                .and_then(|info| info.uuid.clone())
                .unwrap_or_default()
        };
        let gpu: Vec<DeviceAllocation> = chosen
            .gpu
            .iter()
            .map(|(minor, pick)| {
                let mut resources = BTreeMap::from([
                    (
                        RESOURCE_GPU_MEMORY.to_string(),
                        Quantity(pick.memory_bytes.to_string()),
                    ),
                    (
                        RESOURCE_GPU_MEMORY_RATIO.to_string(),
                        Quantity(pick.ratio.to_string()),
                    ),
                ]);
                if let Some(core) = pick.core {
                    resources.insert(RESOURCE_GPU_CORE.to_string(), Quantity(core.to_string()));
                }
                DeviceAllocation {
                    minor: *minor,
                    resources,
                    id: device_id(&DeviceType::Gpu, *minor),
                    ..Default::default()
                }
            })
            .collect();
        let mut allocations: BTreeMap<&str, Vec<DeviceAllocation>> = BTreeMap::new();
        if !gpu.is_empty() {
            allocations.insert(GPU_KEY, gpu);
        }
        for (kind, picked) in &chosen.common {
            let entries = picked
                .iter()
                .map(|pick| DeviceAllocation {
                    minor: pick.minor,
                    id: device_id(&kind.device_type(), pick.minor),
                    resources: BTreeMap::from([(
                        kind.resource().to_string(),
                        Quantity(pick.units.to_string()),
                    )]),
                    extension: pick.vf.as_ref().map(|vf| DeviceAllocationExtension {
                        virtual_functions: vec![vf.clone()],
                        ..Default::default()
                    }),
                })
                .collect();
            allocations.insert(kind.key(), entries);
        }
        if allocations.is_empty() {
            return Ok(BTreeMap::new());
        }
        let value = serde_json::to_string(&allocations)
            .map_err(|e| Rejection::unresolvable(e.to_string()))?;
        Ok(BTreeMap::from([(
            ANNOTATION_DEVICE_ALLOCATED.to_string(),
            value,
        )]))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::*;
    use crate::cache::Object;
    use crate::framework::Scheduler;
    use crate::testutil::{self, PodSpec, t0};

    /// A healthy Device on `node` with `gpus` whole GPUs (also used by
    /// the reservation tests).
    pub(super) fn device(node: &str, gpus: i32) -> Object {
        let devices: Vec<Value> = (0..gpus)
            .map(|minor| {
                json!({"type": "gpu", "id": format!("GPU-{minor}"), "minor": minor, "health": true,
                       "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi", "koordinator.sh/gpu-memory-ratio": "100"}})
            })
            .collect();
        Object::Device(
            serde_json::from_value(json!({
                "apiVersion": "scheduling.koordinator.sh/v1alpha1",
                "kind": "Device",
                "metadata": {"name": node},
                "spec": {"devices": devices}
            }))
            .unwrap(),
        )
    }

    /// A Device CR that lists no devices: the node is known to have none.
    fn empty_device(node: &str) -> Object {
        Object::Device(
            serde_json::from_value(json!({"metadata": {"name": node}, "spec": {"devices": []}}))
                .unwrap(),
        )
    }

    fn gpu_pod(name: &str, requests: &[(&str, &str)]) -> Object {
        testutil::pod(PodSpec {
            name,
            requests,
            limits: requests,
            ..Default::default()
        })
    }

    fn cluster(objects: Vec<Object>) -> Scheduler {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![testutil::node("n1", &[("cpu", "8")]), device("n1", 2)],
        );
        testutil::load(&mut s, objects);
        s
    }

    /// GPU minor, core and memory the pod gets on n1 (also used by the
    /// reservation tests).
    pub(super) fn minors(
        s: &mut Scheduler,
        pod: &str,
    ) -> Result<Vec<(i32, String, String)>, String> {
        let reserved = s
            .reserve(&format!("default/{pod}"), "n1", t0())
            .map_err(|e| e.to_string())?;
        let allocations: BTreeMap<String, Vec<DeviceAllocation>> =
            serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap();
        Ok(allocations["gpu"]
            .iter()
            .map(|a| {
                (
                    a.minor,
                    a.resources[RESOURCE_GPU_CORE].0.clone(),
                    a.resources[RESOURCE_GPU_MEMORY].0.clone(),
                )
            })
            .collect())
    }

    /// A node with 2 GPUs (from [`device`]), 2 RDMA NICs and 2 FPGAs, the
    /// second FPGA unhealthy.
    fn mixed_device(node: &str) -> Object {
        let Object::Device(mut device) = device(node, 2) else {
            unreachable!()
        };
        let extra: Vec<apis::scheduling::v1alpha1::DeviceInfo> = serde_json::from_value(json!([
            {"type": "rdma", "id": "0000:1f:00.0", "minor": 0, "health": true, "resources": {"koordinator.sh/rdma": "100"}},
            {"type": "rdma", "id": "0000:90:00.0", "minor": 1, "health": true, "resources": {"koordinator.sh/rdma": "100"}},
            {"type": "fpga", "minor": 0, "health": true, "resources": {"koordinator.sh/fpga": "100"}},
            {"type": "fpga", "minor": 1, "health": false, "resources": {"koordinator.sh/fpga": "100"}},
        ]))
        .unwrap();
        device
            .spec
            .devices
            .get_or_insert_with(Vec::new)
            .extend(extra);
        Object::Device(device)
    }

    fn allocated(s: &mut Scheduler, pod: &str) -> Value {
        let reserved = s.reserve(&format!("default/{pod}"), "n1", t0()).unwrap();
        serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap()
    }

    #[test]
    fn rdma_and_fpga_are_allocated_per_device_beside_gpus() {
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "8")]),
                mixed_device("n1"),
                testutil::node("plain", &[("cpu", "8")]),
                empty_device("plain"),
                gpu_pod(
                    "trainer",
                    &[("nvidia.com/gpu", "1"), ("koordinator.sh/rdma", "200")],
                ),
                gpu_pod("fpga-a", &[("koordinator.sh/fpga", "60")]),
                gpu_pod("fpga-b", &[("koordinator.sh/fpga", "50")]),
                gpu_pod("nic", &[("koordinator.sh/rdma", "1")]),
                gpu_pod("odd", &[("koordinator.sh/rdma", "150")]),
            ],
        );
        let outcome = testutil::filter(&s, "default/trainer", t0());
        assert_eq!(outcome.feasible, vec!["n1".to_string()]);
        assert_eq!(outcome.failed_unresolvable["plain"], ERR_NO_GPU_DEVICES);
        let trainer = allocated(&mut s, "trainer");
        assert_eq!(
            trainer["rdma"],
            json!([
                {"minor": 0, "id": "0000:1f:00.0", "resources": {"koordinator.sh/rdma": "100"}},
                {"minor": 1, "id": "0000:90:00.0", "resources": {"koordinator.sh/rdma": "100"}},
            ])
        );
        assert_eq!(trainer["gpu"][0]["minor"], 0);
        // Both NICs are taken whole: even one unit is gone.
        let outcome = testutil::filter(&s, "default/nic", t0());
        assert_eq!(outcome.failed["n1"], "Insufficient rdma devices");
        assert_eq!(
            outcome.failed_unresolvable["plain"],
            "Insufficient rdma devices"
        );

        // Only FPGA 0 is healthy: 60 + 50 do not both fit on it.
        assert_eq!(
            allocated(&mut s, "fpga-a")["fpga"],
            json!([{"minor": 0, "resources": {"koordinator.sh/fpga": "60"}}])
        );
        assert_eq!(
            testutil::filter(&s, "default/fpga-b", t0()).failed["n1"],
            "Insufficient fpga devices"
        );

        let outcome = testutil::filter(&s, "default/odd", t0());
        assert_eq!(
            outcome.failed_unresolvable["n1"],
            "invalid resource unit koordinator.sh/rdma: 150"
        );
    }

    #[test]
    fn allocate_hints_hand_out_virtual_functions_and_count_devices() {
        let device: Device = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"devices": [
                {"type": "rdma", "minor": 0, "health": true, "resources": {"koordinator.sh/rdma": "100"},
                 "vfGroups": [{"labels": {"type": "general"}, "vfs": [{"minor": 0, "busID": "0000:1f:00.2"}, {"minor": 1, "busID": "0000:1f:00.3"}]}]},
                {"type": "rdma", "minor": 1, "health": true, "resources": {"koordinator.sh/rdma": "100"},
                 "vfGroups": [{"labels": {"type": "general"}, "vfs": [{"minor": 0, "busID": "0000:90:00.2"}]}]}
            ]}
        }))
        .unwrap();
        let hint =
            |value: &'static str| [("scheduling.koordinator.sh/device-allocate-hint", value)];
        let vf_hint = hint(r#"{"rdma":{"vfSelector":{"matchLabels":{"type":"general"}}}}"#);
        let count_hint = hint(r#"{"rdma":{"allocateStrategy":"RequestsAsCount"}}"#);
        let pod = |name, annotations| {
            testutil::pod(PodSpec {
                name,
                requests: &[("koordinator.sh/rdma", "1")],
                annotations,
                ..Default::default()
            })
        };
        let bound = testutil::pod(PodSpec {
            name: "bound",
            node: Some("n1"),
            requests: &[("koordinator.sh/rdma", "1")],
            annotations: &[(
                ANNOTATION_DEVICE_ALLOCATED,
                r#"{"rdma":[{"minor":1,"resources":{"koordinator.sh/rdma":"1"},"extension":{"vfs":[{"busID":"0000:90:00.2"}]}}]}"#,
            )],
            ..Default::default()
        });
        let mut s = testutil::scheduler("");
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "8")]),
                Object::Device(device),
                bound,
                pod("vf-a", &vf_hint),
                pod("vf-b", &vf_hint),
                pod("vf-c", &vf_hint),
                pod("bad-hint", &hint("{not json")),
            ],
        );
        // NIC 1 is the least allocated, but its only VF is the bound pod's.
        assert_eq!(
            allocated(&mut s, "vf-a")["rdma"],
            json!([{"minor": 0, "resources": {"koordinator.sh/rdma": "1"},
                    "extension": {"vfs": [{"busID": "0000:1f:00.2"}]}}])
        );
        assert_eq!(
            allocated(&mut s, "vf-b")["rdma"][0]["extension"]["vfs"][0]["busID"],
            "0000:1f:00.3"
        );
        assert_eq!(
            testutil::filter(&s, "default/vf-c", t0()).failed["n1"],
            "Insufficient rdma devices"
        );
        let bad = testutil::filter(&s, "default/bad-hint", t0());
        assert!(
            bad.failed_unresolvable["n1"].starts_with("invalid DeviceAllocateHint annotation"),
            "{bad:?}"
        );
        // RequestsAsCount: "1" is one device, "2" two, a unit from each.
        testutil::load(
            &mut s,
            vec![testutil::pod(PodSpec {
                name: "counted",
                requests: &[("koordinator.sh/rdma", "2")],
                annotations: &count_hint,
                ..Default::default()
            })],
        );
        let counted = allocated(&mut s, "counted");
        assert_eq!(
            counted["rdma"],
            json!([{"minor": 1, "resources": {"koordinator.sh/rdma": "1"}},
                   {"minor": 0, "resources": {"koordinator.sh/rdma": "1"}}])
        );
    }

    #[test]
    fn bound_pods_hold_their_rdma_and_rollback_frees_it() {
        let mut s = testutil::scheduler("");
        let bound = testutil::pod(PodSpec {
            name: "bound",
            node: Some("n1"),
            requests: &[("koordinator.sh/rdma", "100")],
            annotations: &[(
                ANNOTATION_DEVICE_ALLOCATED,
                r#"{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"100"}}]}"#,
            )],
            ..Default::default()
        });
        testutil::load(
            &mut s,
            vec![
                testutil::node("n1", &[("cpu", "8")]),
                mixed_device("n1"),
                bound,
                gpu_pod("whole", &[("koordinator.sh/rdma", "100")]),
                gpu_pod("another", &[("koordinator.sh/rdma", "100")]),
            ],
        );
        let reserved = s.reserve("default/whole", "n1", t0()).unwrap();
        let value: Value =
            serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap();
        assert_eq!(value["rdma"][0]["minor"], 1);
        assert!(value.get("gpu").is_none(), "{value}");
        assert_eq!(
            testutil::filter(&s, "default/another", t0()).failed["n1"],
            "Insufficient rdma devices"
        );
        s.rollback(&reserved);
        assert_eq!(allocated(&mut s, "another")["rdma"][0]["minor"], 1);
    }

    const HALF: &[(&str, &str)] = &[
        ("koordinator.sh/gpu-core", "50"),
        ("koordinator.sh/gpu-memory-ratio", "50"),
    ];

    #[test]
    fn shares_fill_a_used_gpu_before_breaking_a_whole_one() {
        let mut s = cluster(vec![
            gpu_pod("a", HALF),
            gpu_pod("b", HALF),
            gpu_pod("whole", &[("nvidia.com/gpu", "1")]),
            gpu_pod("another", &[("nvidia.com/gpu", "1")]),
        ]);
        let eight_gi = (8i64 << 30).to_string();
        assert_eq!(
            minors(&mut s, "a").unwrap(),
            vec![(0, "50".into(), eight_gi.clone())]
        );
        // Least fragmentation: b shares GPU 0, keeping GPU 1 whole.
        assert_eq!(
            minors(&mut s, "b").unwrap(),
            vec![(0, "50".into(), eight_gi)]
        );
        assert_eq!(minors(&mut s, "whole").unwrap()[0].0, 1);
        let outcome = testutil::filter(&s, "default/another", t0());
        assert_eq!(outcome.failed["n1"], ERR_INSUFFICIENT_GPU_DEVICES);
    }

    #[test]
    fn memory_in_bytes_becomes_a_ratio_and_rollback_frees_it() {
        let mut s = cluster(vec![
            gpu_pod(
                "bytes",
                &[
                    ("koordinator.sh/gpu-core", "25"),
                    ("koordinator.sh/gpu-memory", "4Gi"),
                ],
            ),
            gpu_pod("two", &[("koordinator.sh/gpu", "200")]),
        ]);
        let reserved = s.reserve("default/bytes", "n1", t0()).unwrap();
        let allocations: BTreeMap<String, Vec<DeviceAllocation>> =
            serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap();
        assert_eq!(
            allocations["gpu"][0].resources[RESOURCE_GPU_MEMORY_RATIO].0,
            "25"
        );
        // Two whole GPUs are not free while the share sits on one.
        assert!(
            testutil::filter(&s, "default/two", t0())
                .failed
                .contains_key("n1")
        );
        s.rollback(&reserved);
        let two = minors(&mut s, "two").unwrap();
        assert_eq!(two.iter().map(|m| m.0).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn invalid_combinations_are_unresolvable_and_nodes_without_devices_fail() {
        let mut s = cluster(vec![
            gpu_pod("core-only", &[("koordinator.sh/gpu-core", "50")]),
            gpu_pod("odd", &[("koordinator.sh/gpu", "150")]),
            gpu_pod("fine", HALF),
        ]);
        testutil::load(
            &mut s,
            vec![
                testutil::node("cpu-only", &[("cpu", "8")]),
                empty_device("cpu-only"),
            ],
        );
        for (pod, reason) in [
            (
                "default/core-only",
                "invalid resource device requests: [koordinator.sh/gpu-core]",
            ),
            (
                "default/odd",
                "invalid resource unit koordinator.sh/gpu: 150",
            ),
        ] {
            let outcome = testutil::filter(&s, pod, t0());
            assert_eq!(outcome.failed_unresolvable["n1"], reason, "{outcome:?}");
        }
        let outcome = testutil::filter(&s, "default/fine", t0());
        assert_eq!(outcome.failed_unresolvable["cpu-only"], ERR_NO_GPU_DEVICES);
        assert_eq!(outcome.feasible, vec!["n1".to_string()]);
    }

    /// Every combination upstream's `ValidDeviceResourceCombinations` lists
    /// (and some it does not), with upstream's conversion to per-GPU shares.
    #[test]
    fn request_combinations_follow_upstream() {
        const GI: i64 = 1 << 30;
        let (nvidia, amd, dcu, gpu) = (
            RESOURCE_NVIDIA_GPU,
            RESOURCE_AMD_GPU,
            RESOURCE_HYGON_DCU,
            RESOURCE_GPU,
        );
        let (shared, core, memory, ratio) = (
            RESOURCE_GPU_SHARED,
            RESOURCE_GPU_CORE,
            RESOURCE_GPU_MEMORY,
            RESOURCE_GPU_MEMORY_RATIO,
        );
        let (npu_core, npu_cpu, npu_dvpp) = (
            RESOURCE_HUAWEI_NPU_CORE,
            RESOURCE_HUAWEI_NPU_CPU,
            RESOURCE_HUAWEI_NPU_DVPP,
        );
        let accepted = |count, core, memory_ratio, memory_bytes| {
            Ok(Some(GpuRequest {
                count,
                core,
                memory_ratio,
                memory_bytes,
                scope: None,
                preferred: BTreeSet::new(),
            }))
        };
        let invalid = |names: &str| Err(format!("invalid resource device requests: [{names}]"));
        type Case<'a> = (Vec<(&'a str, i64)>, Result<Option<GpuRequest>, String>);
        let cases: Vec<Case<'_>> = vec![
            (vec![], Ok(None)),
            // Whole devices.
            (vec![(nvidia, 2)], accepted(2, Some(100), Some(100), None)),
            (vec![(amd, 1)], accepted(1, Some(100), Some(100), None)),
            (vec![(dcu, 3)], accepted(3, Some(100), Some(100), None)),
            (vec![(gpu, 50)], accepted(1, Some(50), Some(50), None)),
            (vec![(gpu, 200)], accepted(2, Some(100), Some(100), None)),
            (
                vec![(gpu, 150)],
                Err("invalid resource unit koordinator.sh/gpu: 150".into()),
            ),
            // Percentages, memory alone.
            (vec![(memory, 4 * GI)], accepted(1, None, None, Some(4 * GI))),
            (vec![(ratio, 50)], accepted(1, None, Some(50), None)),
            (vec![(ratio, 200)], accepted(2, None, Some(100), None)),
            (
                vec![(ratio, 150)],
                invalid("koordinator.sh/gpu-memory-ratio"),
            ),
            (
                vec![(core, 50), (memory, 8 * GI)],
                accepted(1, Some(50), None, Some(8 * GI)),
            ),
            // gpu-memory never sets the count: 200 % compute on one GPU.
            (
                vec![(core, 200), (memory, 8 * GI)],
                accepted(1, Some(200), None, Some(8 * GI)),
            ),
            (
                vec![(core, 50), (ratio, 50)],
                accepted(1, Some(50), Some(50), None),
            ),
            (
                vec![(core, 200), (ratio, 200)],
                accepted(2, Some(100), Some(100), None),
            ),
            // The ratio sets the count, the compute is divided by it.
            (
                vec![(core, 50), (ratio, 200)],
                accepted(2, Some(25), Some(100), None),
            ),
            (
                vec![(core, 150), (ratio, 100)],
                invalid("koordinator.sh/gpu-core koordinator.sh/gpu-memory-ratio"),
            ),
            // Shared.
            (
                vec![(shared, 2), (memory, 8 * GI)],
                accepted(2, None, None, Some(4 * GI)),
            ),
            (
                vec![(shared, 2), (ratio, 100)],
                accepted(2, None, Some(50), None),
            ),
            (
                vec![(shared, 2), (core, 60), (memory, 8 * GI)],
                accepted(2, Some(30), None, Some(4 * GI)),
            ),
            (
                vec![(shared, 2), (core, 100), (ratio, 100)],
                accepted(2, Some(50), Some(50), None),
            ),
            (
                vec![(shared, 3), (ratio, 100)],
                invalid("koordinator.sh/gpu-memory-ratio koordinator.sh/gpu.shared"),
            ),
            (
                vec![(shared, 2), (ratio, 300)],
                invalid("koordinator.sh/gpu-memory-ratio koordinator.sh/gpu.shared"),
            ),
            (
                vec![(shared, 1), (core, 200), (memory, GI)],
                invalid(
                    "koordinator.sh/gpu-core koordinator.sh/gpu-memory koordinator.sh/gpu.shared",
                ),
            ),
            (vec![(shared, 2)], invalid("koordinator.sh/gpu.shared")),
            (
                vec![(shared, 2), (memory, GI), (ratio, 10)],
                invalid(
                    "koordinator.sh/gpu-memory koordinator.sh/gpu-memory-ratio koordinator.sh/gpu.shared",
                ),
            ),
            // Not in upstream's list.
            (vec![(core, 50)], invalid("koordinator.sh/gpu-core")),
            (
                vec![(nvidia, 1), (core, 50)],
                invalid("koordinator.sh/gpu-core nvidia.com/gpu"),
            ),
            (
                vec![(memory, GI), (ratio, 10)],
                invalid("koordinator.sh/gpu-memory koordinator.sh/gpu-memory-ratio"),
            ),
            (
                vec![(nvidia, 1), (amd, 1)],
                invalid("amd.com/gpu nvidia.com/gpu"),
            ),
            (vec![(npu_core, 50)], invalid("huawei.com/npu-core")),
            (
                vec![(nvidia, -1)],
                Err("invalid resource unit nvidia.com/gpu: -1".into()),
            ),
            // Huawei NPUs: upstream accepts these; this scheduler cannot allocate them.
            (
                vec![(npu_core, 50), (ratio, 50)],
                Err("Huawei NPU device requests are not supported: [huawei.com/npu-core koordinator.sh/gpu-memory-ratio]".into()),
            ),
            (
                vec![(shared, 1), (npu_core, 50), (npu_cpu, 2), (npu_dvpp, 100), (memory, GI)],
                Err("Huawei NPU device requests are not supported: [huawei.com/npu-core huawei.com/npu-cpu huawei.com/npu-dvpp koordinator.sh/gpu-memory koordinator.sh/gpu.shared]".into()),
            ),
            (
                vec![(shared, 2), (npu_core, 50), (npu_cpu, 2), (memory, GI)],
                invalid("huawei.com/npu-core huawei.com/npu-cpu koordinator.sh/gpu-memory koordinator.sh/gpu.shared"),
            ),
        ];
        for (requested, expected) in cases {
            assert_eq!(gpu_request_of(&requested), expected, "{requested:?}");
        }
    }

    #[test]
    fn memory_alone_is_a_ratio_of_the_chosen_gpu_and_takes_no_compute() {
        let mut s = cluster(vec![
            gpu_pod("bytes", &[("koordinator.sh/gpu-memory", "4Gi")]),
            gpu_pod("ratio", &[("koordinator.sh/gpu-memory-ratio", "25")]),
            gpu_pod(
                "compute",
                &[
                    ("koordinator.sh/gpu-core", "100"),
                    ("koordinator.sh/gpu-memory-ratio", "50"),
                ],
            ),
        ]);
        let four_gi = (4i64 << 30).to_string();
        assert_eq!(
            allocated(&mut s, "bytes")["gpu"],
            json!([{"minor": 0, "id": "GPU-0", "resources": {"koordinator.sh/gpu-memory": four_gi, "koordinator.sh/gpu-memory-ratio": "25"}}])
        );
        assert_eq!(
            allocated(&mut s, "ratio")["gpu"],
            json!([{"minor": 0, "id": "GPU-0", "resources": {"koordinator.sh/gpu-memory": four_gi, "koordinator.sh/gpu-memory-ratio": "25"}}])
        );
        // GPU 0 has half its memory and all its compute left: it is the fuller one.
        assert_eq!(minors(&mut s, "compute").unwrap()[0].0, 0);
    }

    #[test]
    fn huge_quantities_are_refused_or_fit_nothing_without_overflow() {
        // A count whose percentage overflows i64 is refused up front.
        let reason = gpu_request_of(&[(RESOURCE_NVIDIA_GPU, i64::MAX)]).unwrap_err();
        assert_eq!(
            reason,
            format!(
                "invalid resource unit nvidia.com/gpu: {} GPUs is too many",
                i64::MAX
            )
        );
        let huge_gpu = |node: &str| {
            Object::Device(
                serde_json::from_value(json!({"metadata": {"name": node}, "spec": {"devices": [
                    {"type": "gpu", "minor": 0, "health": true,
                     "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "9223372036854775807"}}]}}))
                .unwrap(),
            )
        };
        let mut s = cluster(vec![
            gpu_pod("many", &[("nvidia.com/gpu", "100E")]),
            gpu_pod(
                "huge-memory",
                &[
                    ("koordinator.sh/gpu-core", "50"),
                    // Just below i64::MAX bytes: counted exactly.
                    ("koordinator.sh/gpu-memory", "8E"),
                ],
            ),
            gpu_pod("half", &[("koordinator.sh/gpu-memory-ratio", "50")]),
            testutil::node("big", &[("cpu", "8")]),
            huge_gpu("big"),
        ]);
        // Beyond i64 units: the pod's request is refused before any plugin.
        let many = testutil::filter(&s, "default/many", t0());
        assert!(
            many.failed_unresolvable["n1"]
                .ends_with("quantity \"100E\" is larger than the scheduler can count (9223372036854775807 units)"),
            "{many:?}"
        );
        // More memory than a 16Gi GPU has: no GPU of n1 fits; the huge GPU does.
        let outcome = testutil::filter(&s, "default/huge-memory", t0());
        assert_eq!(outcome.failed["n1"], ERR_INSUFFICIENT_GPU_DEVICES);
        assert_eq!(outcome.feasible, vec!["big".to_string()]);
        // Half of a huge GPU's memory, computed without overflow.
        let reserved = s.reserve("default/half", "big", t0()).unwrap();
        let value: Value =
            serde_json::from_str(&reserved.annotations[ANNOTATION_DEVICE_ALLOCATED]).unwrap();
        // (A Device offering more than i64 bytes is refused: see amount_tests.)
        let total = i64::MAX;
        assert_eq!(
            value["gpu"][0]["resources"]["koordinator.sh/gpu-memory"],
            (i128::from(total) * 50 / 100).to_string()
        );
    }

    /// A node short of every raw resource gets the refusal built once per
    /// pod; one short of some gets only those named, in the request's order.
    #[test]
    fn a_node_short_of_some_raw_resources_names_only_those() {
        let s = cluster(vec![
            testutil::node("none", &[("cpu", "8")]),
            testutil::node(
                "core-only",
                &[("cpu", "8"), ("koordinator.sh/gpu-core", "100")],
            ),
            testutil::node(
                "ratio-only",
                &[("cpu", "8"), ("koordinator.sh/gpu-memory-ratio", "100")],
            ),
            gpu_pod("share", HALF),
        ]);
        let outcome = testutil::filter(&s, "default/share", t0());
        assert_eq!(
            outcome.failed["none"],
            "Insufficient koordinator.sh/gpu-core, Insufficient koordinator.sh/gpu-memory-ratio"
        );
        assert_eq!(
            outcome.failed["core-only"],
            "Insufficient koordinator.sh/gpu-memory-ratio"
        );
        assert_eq!(
            outcome.failed["ratio-only"],
            "Insufficient koordinator.sh/gpu-core"
        );
    }

    #[test]
    fn nodes_without_a_device_cr_fit_by_allocatable_and_get_no_annotation() {
        let mut s = cluster(vec![
            testutil::node("plain", &[("cpu", "8"), ("nvidia.com/gpu", "4")]),
            testutil::node("cpu-only", &[("cpu", "8")]),
            gpu_pod("on-plain", &[("nvidia.com/gpu", "1")]),
            gpu_pod("too-many", &[("nvidia.com/gpu", "5")]),
            gpu_pod("share", HALF),
            gpu_pod("nic", &[("koordinator.sh/rdma", "100")]),
            gpu_pod("on-n1", &[("nvidia.com/gpu", "1")]),
        ]);
        // No Device CR on "plain": its advertised nvidia.com/gpu (a device
        // plugin's) decides, as kube-scheduler's fit does upstream.
        let outcome = testutil::filter(&s, "default/on-plain", t0());
        assert!(
            outcome.feasible.contains(&"plain".to_string()),
            "{outcome:?}"
        );
        assert_eq!(outcome.failed["cpu-only"], "Insufficient nvidia.com/gpu");
        assert_eq!(
            testutil::filter(&s, "default/too-many", t0()).failed["plain"],
            "Insufficient nvidia.com/gpu"
        );
        // Koordinator's GPU shares and RDMA are advertised by no one there.
        let outcome = testutil::filter(&s, "default/share", t0());
        assert_eq!(
            outcome.failed["plain"],
            "Insufficient koordinator.sh/gpu-core, Insufficient koordinator.sh/gpu-memory-ratio"
        );
        assert!(outcome.feasible.contains(&"n1".to_string()), "{outcome:?}");
        assert_eq!(
            testutil::filter(&s, "default/nic", t0()).failed["cpu-only"],
            "Insufficient koordinator.sh/rdma"
        );
        let bound = s.reserve("default/on-plain", "plain", t0()).unwrap();
        assert!(
            !bound.annotations.contains_key(ANNOTATION_DEVICE_ALLOCATED),
            "{bound:?}"
        );
        // n1 has its Device CR and still allocates.
        assert_eq!(minors(&mut s, "on-n1").unwrap()[0].0, 0);
        s.rollback(&bound);

        // A bound pod holding devices makes "plain" known, without devices.
        let holder = testutil::pod(PodSpec {
            name: "holder",
            node: Some("plain"),
            requests: &[("nvidia.com/gpu", "1")],
            annotations: &[(
                ANNOTATION_DEVICE_ALLOCATED,
                r#"{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100","koordinator.sh/gpu-memory-ratio":"100"}}]}"#,
            )],
            ..Default::default()
        });
        testutil::load(&mut s, vec![holder]);
        assert_eq!(
            testutil::filter(&s, "default/on-plain", t0()).failed_unresolvable["plain"],
            ERR_NO_GPU_DEVICES
        );
    }

    #[test]
    fn a_deleted_device_cr_leaves_its_gpus_unusable_until_it_or_the_node_returns() {
        use crate::cache::Change;
        let mut s = cluster(vec![gpu_pod("whole", &[("nvidia.com/gpu", "1")])]);
        s.apply(Change::Delete(device("n1", 2)));
        assert_eq!(
            testutil::filter(&s, "default/whole", t0()).failed["n1"],
            ERR_INSUFFICIENT_GPU_DEVICES
        );
        // The CR comes back: its GPUs are usable again.
        testutil::load(&mut s, vec![device("n1", 2)]);
        let reserved = s.reserve("default/whole", "n1", t0()).unwrap();
        assert!(
            reserved
                .annotations
                .contains_key(ANNOTATION_DEVICE_ALLOCATED)
        );
        s.rollback(&reserved);

        // Device CR and Node gone, the node re-registers without a CR but
        // with a device plugin's GPU: unknown to DeviceShare, fits by
        // allocatable, no annotation.
        s.apply(Change::Delete(device("n1", 2)));
        s.apply(Change::Delete(testutil::node("n1", &[("cpu", "8")])));
        testutil::load(
            &mut s,
            vec![testutil::node(
                "n1",
                &[("cpu", "8"), ("nvidia.com/gpu", "1")],
            )],
        );
        let reserved = s.reserve("default/whole", "n1", t0()).unwrap();
        assert!(
            !reserved
                .annotations
                .contains_key(ANNOTATION_DEVICE_ALLOCATED),
            "{reserved:?}"
        );
    }

    /// Each probe pod's filter and score on every node.
    fn answers(
        plugin: &DeviceShare,
        cache: &crate::cache::ClusterCache,
        pods: &[&str],
    ) -> Vec<(String, String, Result<(), Rejection>, i64)> {
        let mut out = Vec::new();
        for key in pods {
            let pod = cache.pod(key).unwrap();
            let mut state = CycleState::new(t0());
            plugin.pre_filter(pod, cache, &mut state).unwrap();
            for node in cache.nodes_sorted() {
                let filtered = plugin.filter(pod, node, cache, &state);
                let score = plugin.score(pod, node, cache, &state);
                out.push((key.to_string(), node.name.to_string(), filtered, score));
            }
        }
        out
    }

    /// A clone of the plugin (the published state) keeps answering as it
    /// did when the original changes after it: a GPU and a NIC freed on one
    /// node, a GPU taken and the Device deleted on another; the original
    /// shows them.
    #[test]
    fn a_clone_answers_as_before_after_the_original_changes() {
        use crate::cache::{Change, ClusterCache};
        let nic = r#"{"rdma":[{"minor":0,"resources":{"koordinator.sh/rdma":"100"}}]}"#;
        let nic_holder = testutil::pod(PodSpec {
            name: "nic-holder",
            node: Some("n1"),
            requests: &[("cpu", "1")],
            annotations: &[(ANNOTATION_DEVICE_ALLOCATED, nic)],
            ..Default::default()
        });
        let mut cache = ClusterCache::new();
        let mut plugin = DeviceShare::default();
        let apply = |plugin: &mut DeviceShare, cache: &mut ClusterCache, change| {
            let event = cache.apply(change);
            plugin.on_event(&event, cache);
        };
        for object in [
            testutil::node("n1", &[("cpu", "8")]),
            mixed_device("n1"),
            testutil::node("n2", &[("cpu", "8")]),
            mixed_device("n2"),
            testutil::whole_gpu_holder("holder", "n1", &[0]),
            nic_holder.clone(),
            gpu_pod("two-gpus", &[("nvidia.com/gpu", "2")]),
            gpu_pod("two-nics", &[("koordinator.sh/rdma", "200")]),
            gpu_pod(
                "half",
                &[
                    ("koordinator.sh/gpu-core", "50"),
                    ("koordinator.sh/gpu-memory-ratio", "50"),
                ],
            ),
        ] {
            apply(&mut plugin, &mut cache, Change::Upsert(object));
        }
        let probes = ["default/two-gpus", "default/two-nics", "default/half"];
        let fits = |answers: &[(String, String, Result<(), Rejection>, i64)], pod: &str, node| {
            answers
                .iter()
                .find(|(p, n, _, _)| p == pod && n == node)
                .unwrap()
                .2
                .is_ok()
        };
        let before = answers(&plugin, &cache, &probes);
        assert!(!fits(&before, "default/two-gpus", "n1"));
        assert!(fits(&before, "default/two-gpus", "n2"));
        assert!(!fits(&before, "default/two-nics", "n1"));
        assert!(fits(&before, "default/two-nics", "n2"));

        let snapshot = plugin.clone();
        let snapshot_cache = cache.clone();
        apply(
            &mut plugin,
            &mut cache,
            Change::Delete(testutil::whole_gpu_holder("holder", "n1", &[0])),
        );
        apply(&mut plugin, &mut cache, Change::Delete(nic_holder));
        apply(
            &mut plugin,
            &mut cache,
            Change::Upsert(testutil::whole_gpu_holder("late", "n2", &[1])),
        );
        apply(&mut plugin, &mut cache, Change::Delete(mixed_device("n2")));

        assert_eq!(answers(&snapshot, &snapshot_cache, &probes), before);
        assert!(snapshot.usage.get("default/holder").is_some());
        assert!(snapshot.common_usage.get("default/nic-holder").is_some());
        assert!(snapshot.usage.get("default/late").is_none());
        let n2 = snapshot.gpus.get("n2").unwrap();
        assert!(n2.values().all(|gpu| gpu.healthy && gpu.core_used == 0));
        assert_eq!(snapshot.gpus.get("n1").unwrap()[&0].core_used, 100);

        let after = answers(&plugin, &cache, &probes);
        assert!(fits(&after, "default/two-gpus", "n1"));
        assert!(!fits(&after, "default/two-gpus", "n2"));
        assert!(fits(&after, "default/two-nics", "n1"));
        assert!(!fits(&after, "default/two-nics", "n2"));
        assert!(!fits(&after, "default/half", "n2"));
        assert!(plugin.usage.get("default/holder").is_none());
        assert!(plugin.common_usage.get("default/nic-holder").is_none());
        assert_eq!(plugin.gpus.get("n2").unwrap()[&1].core_used, 100);
        assert!(
            plugin
                .gpus
                .get("n2")
                .unwrap()
                .values()
                .all(|gpu| !gpu.healthy)
        );
        assert_eq!(plugin.gpus.get("n1").unwrap()[&0].core_used, 0);
    }
}

#[cfg(test)]
mod reservation_tests;

#[cfg(test)]
mod joint_scoring_tests;

impl From<PartitionRefusal> for Rejection {
    fn from(refusal: PartitionRefusal) -> Self {
        Self {
            reason: refusal.reason.into(),
            unresolvable: refusal.unresolvable,
        }
    }
}

#[cfg(test)]
mod partition_tests;
