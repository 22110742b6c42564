//! NodeSLO: the per-node QoS policy that koord-manager renders from the
//! `slo-controller-config` ConfigMap and koordlet enforces (upstream
//! `nodeslo_types.go`).
//!
//! Every field is optional on the wire, as upstream's Go pointers and
//! `omitempty` tags make it; `None` means "not set here", which matters when
//! strategies are merged (see `crate::configuration::merge`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};

use super::host_application::HostApplicationSpec;
use super::resources::quantity_schema;
use super::slo_extension::ExtensionsMap;
use crate::wire_enum::wire_enum;

// ---------------------------------------------------------------------------
// CPU QoS
// ---------------------------------------------------------------------------

/// CPU QoS knobs for one QoS class (upstream `CPUQOS`).
#[allow(clippy::upper_case_acronyms)]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CPUQOS {
    /// Group identity (bvt) value, -1..=2; used with the `groupIdentity` policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_identity: Option<i64>,
    /// `cpu.idle` value, 0 or 1 (1 = SCHED_IDLE); used with the `coreSched` policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched_idle: Option<i64>,
    /// Whether this class gets its own core-sched group to expel idle pods
    /// from sibling hyper-threads; used with the `coreSched` policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_expeller: Option<bool>,
}

wire_enum! {
    /// Mechanism that enforces CPU QoS.
    pub enum CPUQOSPolicy open {
        /// Alibaba Cloud Linux group identity.
        GroupIdentity = "groupIdentity",
        /// Linux core scheduling plus cgroup idle.
        CoreSched = "coreSched",
    }
}

wire_enum! {
    /// Mechanism that enforces network QoS.
    pub enum NETQOSPolicy open {
        /// Linux traffic control.
        Tc = "tc",
        /// The terway-qos agent.
        TerwayQos = "terway-qos",
    }
}

/// Node-level CPU QoS configuration of a class (upstream `CPUQOSCfg`); also the
/// shape of the pod annotation `koordinator.sh/cpuQOS`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CPUQOSCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    #[serde(flatten)]
    pub cpu_qos: CPUQOS,
}

// ---------------------------------------------------------------------------
// Memory QoS
// ---------------------------------------------------------------------------

/// Memory cgroup QoS knobs for one QoS class (upstream `MemoryQOS`).
///
/// Percentages are of the pod's memory request or limit; several knobs need
/// Alibaba Cloud Linux / Anolis kernel interfaces.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryQOS {
    /// `memory.min` as a percentage of the memory request; 0 disables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_limit_percent: Option<i64>,
    /// `memory.low` as a percentage of the memory request; 0 disables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub low_limit_percent: Option<i64>,
    /// Where `memory.high` sits between request and limit, in percent; 0 disables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub throttling_percent: Option<i64>,
    /// `memory.wmark_ratio`: async reclaim starts above this share of the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub wmark_ratio: Option<i64>,
    /// `memory.wmark_scale_factor` in permill: where async reclaim stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub wmark_scale_permill: Option<i64>,
    /// `memory.wmark_min_adj`, -25..=50: shifts the global min watermark for this memcg.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -25, max = 50))]
    pub wmark_min_adj: Option<i64>,
    /// `memory.use_priority_oom`, 0 or 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_enable: Option<i64>,
    /// `memory.priority`, 0..=12.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// `memory.oom.group`, 0 or 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kill_group: Option<i64>,
    /// Per-memcg page cache limit switch (`memory.pagecache_limit.enable`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache_enable: Option<bool>,
    /// Page cache limit as a percentage of the memory limit; 0 disables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub page_cache_limit_percent: Option<i64>,
    /// Page cache limit in bytes; wins over the percentage when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache_limit_size: Option<i64>,
    /// Reclaim page cache synchronously (`memory.pagecache_limit.sync`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache_reclaim_sync: Option<bool>,
}

wire_enum! {
    /// Memory QoS plan a pod asks for in its `koordinator.sh/memoryQOS` annotation.
    pub enum PodMemoryQOSPolicy open {
        /// Inherit the node-level configuration (also what an empty value means).
        Default = "default",
        /// Disable memory QoS for the pod.
        None = "none",
        /// Use the recommended configuration.
        Auto = "auto",
    }
}

/// Pod-level memory QoS override (upstream `PodMemoryQOSConfig`), read from the
/// `koordinator.sh/memoryQOS` pod annotation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodMemoryQOSConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<PodMemoryQOSPolicy>,
    #[serde(flatten)]
    pub memory_qos: MemoryQOS,
}

/// Node-level memory QoS configuration of a class (upstream `MemoryQOSCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryQOSCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    #[serde(flatten)]
    pub memory_qos: MemoryQOS,
}

// ---------------------------------------------------------------------------
// Block IO QoS
// ---------------------------------------------------------------------------

wire_enum! {
    /// What a [`BlockCfg`] names.
    pub enum BlockType open {
        /// A block device such as `/dev/sdb` (root class blk-iocost only).
        Device = "device",
        /// An LVM volume group.
        VolumeGroup = "volumegroup",
        /// A pod volume.
        PodVolume = "podvolume",
    }
}

/// Throttling and blk-iocost settings of one block device (upstream `IOCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IOCfg {
    /// Read IOPS limit; 0 disables.
    #[serde(rename = "readIOPS", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub read_iops: Option<i64>,
    /// Write IOPS limit; 0 disables.
    #[serde(rename = "writeIOPS", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub write_iops: Option<i64>,
    /// Read bytes/s limit; 0 disables.
    #[serde(rename = "readBPS", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub read_bps: Option<i64>,
    /// Write bytes/s limit; 0 disables.
    #[serde(rename = "writeBPS", default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub write_bps: Option<i64>,
    /// Relative IO weight of the group, 1..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub io_weight_percent: Option<i64>,
    /// blk-iocost read latency target in microseconds (root class only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_latency: Option<i64>,
    /// blk-iocost write latency target in microseconds (root class only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_latency: Option<i64>,
    /// Percentile the read latency target applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub read_latency_percent: Option<i64>,
    /// Percentile the write latency target applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub write_latency_percent: Option<i64>,
    /// Use the model below instead of the kernel's blk-iocost cost model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_user_model: Option<bool>,
    #[serde(
        rename = "modelReadBPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub model_read_bps: Option<i64>,
    #[serde(
        rename = "modelWriteBPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub model_write_bps: Option<i64>,
    #[serde(
        rename = "modelReadSeqIOPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub model_read_seq_iops: Option<i64>,
    #[serde(
        rename = "modelWriteSeqIOPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub model_write_seq_iops: Option<i64>,
    #[serde(
        rename = "modelReadRandIOPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub model_read_rand_iops: Option<i64>,
    #[serde(
        rename = "modelWriteRandIOPS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub model_write_rand_iops: Option<i64>,
}

impl IOCfg {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// One block device, volume group or pod volume and its IO settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockCfg {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub block_type: Option<BlockType>,
    // Go decodes JSON keys case-insensitively; upstream's own pod
    // annotations spell this key `iocfg`. (A plain comment: a doc comment
    // would become the CRD field's description.)
    #[serde(default, alias = "iocfg", skip_serializing_if = "IOCfg::is_empty")]
    pub io_cfg: IOCfg,
}

/// Block IO QoS of a class (upstream `BlkIOQOS`); also the shape of the pod
/// annotation `koordinator.sh/blkioQOS`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlkIOQOS {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<BlockCfg>,
}

/// Node-level block IO QoS configuration of a class (upstream `BlkIOQOSCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlkIOQOSCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    #[serde(flatten)]
    pub blkio_qos: BlkIOQOS,
}

// ---------------------------------------------------------------------------
// Resctrl and network QoS
// ---------------------------------------------------------------------------

/// LLC (CAT) and memory bandwidth (MBA) shares of a class (upstream `ResctrlQOS`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResctrlQOS {
    /// Start of the LLC ways range, in percent of the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cat_range_start_percent: Option<i64>,
    /// End of the LLC ways range, in percent of the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cat_range_end_percent: Option<i64>,
    /// Memory bandwidth share, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub mba_percent: Option<i64>,
}

/// Node-level resctrl QoS configuration of a class (upstream `ResctrlQOSCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResctrlQOSCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    #[serde(flatten)]
    pub resctrl_qos: ResctrlQOS,
}

/// Schema of a network QoS bound: int-or-string with upstream's default value.
fn int_or_string_default_0(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "default": 0,
        "x-kubernetes-int-or-string": true,
    })
}

/// Schema of a network QoS bound: int-or-string with upstream's default value.
fn int_or_string_default_100(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "default": 100,
        "x-kubernetes-int-or-string": true,
    })
}

/// Network bandwidth bounds of a class (upstream `NetworkQOS`). An integer is a
/// percentage (0..=100) of the node's total bandwidth, a string a quantity in
/// bytes per second such as `"50M"`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkQOS {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string_default_0")]
    pub ingress_request: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string_default_100")]
    pub ingress_limit: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string_default_0")]
    pub egress_request: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string_default_100")]
    pub egress_limit: Option<IntOrString>,
}

/// Node-level network QoS configuration of a class (upstream `NetworkQOSCfg`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkQOSCfg {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    #[serde(flatten)]
    pub network_qos: NetworkQOS,
}

// ---------------------------------------------------------------------------
// Per-class resource QoS
// ---------------------------------------------------------------------------

/// All QoS settings of one QoS class (upstream `ResourceQOS`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQOS {
    #[serde(rename = "cpuQOS", default, skip_serializing_if = "Option::is_none")]
    pub cpu_qos: Option<CPUQOSCfg>,
    #[serde(rename = "memoryQOS", default, skip_serializing_if = "Option::is_none")]
    pub memory_qos: Option<MemoryQOSCfg>,
    #[serde(rename = "blkioQOS", default, skip_serializing_if = "Option::is_none")]
    pub blkio_qos: Option<BlkIOQOSCfg>,
    #[serde(
        rename = "resctrlQOS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub resctrl_qos: Option<ResctrlQOSCfg>,
    #[serde(
        rename = "networkQOS",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub network_qos: Option<NetworkQOSCfg>,
}

/// Which mechanisms enforce CPU and network QoS (upstream `ResourceQOSPolicies`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQOSPolicies {
    /// Defaults to `groupIdentity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_policy: Option<CPUQOSPolicy>,
    /// Defaults to `tc`.
    #[serde(
        rename = "netQOSPolicy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub net_qos_policy: Option<NETQOSPolicy>,
}

/// QoS settings for every QoS class plus the root cgroup (upstream
/// `ResourceQOSStrategy`). There is no LSE class.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQOSStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policies: Option<ResourceQOSPolicies>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lsr_class: Option<ResourceQOS>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ls_class: Option<ResourceQOS>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub be_class: Option<ResourceQOS>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_class: Option<ResourceQOS>,
    /// Settings of the root cgroup (only block IO is used there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_root: Option<ResourceQOS>,
}

// ---------------------------------------------------------------------------
// Resource thresholds (suppress and evict)
// ---------------------------------------------------------------------------

wire_enum! {
    /// How BE pods are held back when the node is busy.
    pub enum CPUSuppressPolicy open {
        /// Shrink the BE cpuset.
        CPUSet = "cpuset",
        /// Lower the BE CFS quota.
        CfsQuota = "cfsQuota",
    }
}

wire_enum! {
    /// What the BE CPU satisfaction used by CPU eviction is measured against.
    pub enum CPUEvictPolicy open {
        /// The CPU BE pods can really use.
        EvictByRealLimit = "evictByRealLimit",
        /// The BE allocatable CPU.
        EvictByAllocatable = "evictByAllocatable",
    }
}

/// Node usage thresholds that trigger BE suppression and eviction (upstream
/// `ResourceThresholdStrategy`, the NodeSLO field `resourceUsedThresholdWithBE`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceThresholdStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Node CPU usage (percent) above which BE CPU is suppressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_suppress_threshold_percent: Option<i64>,
    /// Floor of the BE CPU left after suppression, in percent of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_suppress_min_percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_suppress_policy: Option<CPUSuppressPolicy>,
    /// Node memory usage (percent) above which BE pods are evicted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub memory_evict_threshold_percent: Option<i64>,
    /// Memory eviction stops below this usage (defaults to threshold - 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub memory_evict_lower_percent: Option<i64>,
    /// Memory request share of allocatable (percent) above which eviction starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub memory_allocatable_evict_threshold_percent: Option<i64>,
    /// Allocatable-based memory eviction stops at or below this share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub memory_allocatable_evict_lower_percent: Option<i64>,
    /// CPU eviction stops once BE satisfaction (real limit / request) exceeds this.
    #[serde(
        rename = "cpuEvictBESatisfactionUpperPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_evict_be_satisfaction_upper_percent: Option<i64>,
    /// CPU eviction starts when BE satisfaction falls below this.
    #[serde(
        rename = "cpuEvictBESatisfactionLowerPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_evict_be_satisfaction_lower_percent: Option<i64>,
    /// ...and BE CPU usage of its real limit is at least this.
    #[serde(
        rename = "cpuEvictBEUsageThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_evict_be_usage_threshold_percent: Option<i64>,
    /// Window of CPU usage samples averaged for CPU eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_evict_time_window_seconds: Option<i64>,
    /// Node CPU usage (percent) above which pods are evicted (CPUEvict).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_evict_threshold_percent: Option<i64>,
    /// CPU eviction stops below this usage (defaults to threshold - 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub cpu_evict_lower_percent: Option<i64>,
    /// CPU request share of allocatable (percent) above which eviction starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cpu_allocatable_evict_threshold_percent: Option<i64>,
    /// Allocatable-based CPU eviction stops at or below this share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub cpu_allocatable_evict_lower_percent: Option<i64>,
    /// Defaults to `evictByRealLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_evict_policy: Option<CPUEvictPolicy>,
    /// Highest pod priority the usage-based evictions may evict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evict_enabled_priority_threshold: Option<i32>,
    /// Highest pod priority the allocatable-based evictions may evict (below koord-prod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable_evict_priority_threshold: Option<i32>,
}

// ---------------------------------------------------------------------------
// CPU burst
// ---------------------------------------------------------------------------

wire_enum! {
    /// Which CPU burst mechanisms are used.
    pub enum CPUBurstPolicy open {
        /// No burst.
        None = "none",
        /// Kernel CPU burst (`cpu.cfs_burst_us` / `cpu.max.burst`) only.
        CPUBurstOnly = "cpuBurstOnly",
        /// Raise the CFS quota of throttled pods only.
        CFSQuotaBurstOnly = "cfsQuotaBurstOnly",
        /// Both.
        Auto = "auto",
    }
}

/// CPU burst settings (upstream `CPUBurstConfig`); also the shape of the pod
/// annotation `koordinator.sh/cpuBurst`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CPUBurstConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<CPUBurstPolicy>,
    /// Burst allowance in percent of the CPU limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub cpu_burst_percent: Option<i64>,
    /// Ceiling of the raised CFS quota, in percent of the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfs_quota_burst_percent: Option<i64>,
    /// How long a pod may stay burst; -1 means without limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cfs_quota_burst_period_seconds: Option<i64>,
}

/// Node-level CPU burst strategy (upstream `CPUBurstStrategy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CPUBurstStrategy {
    #[serde(flatten)]
    pub cpu_burst_config: CPUBurstConfig,
    /// Node CPU usage (percent) of the share pool above which raised quotas are scaled down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_pool_threshold_percent: Option<i64>,
}

// ---------------------------------------------------------------------------
// System (kernel-wide) settings
// ---------------------------------------------------------------------------

/// Node-wide kernel settings (upstream `SystemStrategy`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SystemStrategy {
    /// `vm.min_free_kbytes` = factor × total memory / 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_free_kbytes_factor: Option<i64>,
    /// `vm.watermark_scale_factor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark_scale_factor: Option<i64>,
    /// `/sys/kernel/mm/memcg_reaper/reap_background`, 0 or 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcg_reap_back_ground: Option<i64>,
    /// `/sys/kernel/sched_group_identity_enabled`, 0 or 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched_group_identity_enabled: Option<i64>,
    /// `kernel.sched_idle_saver_wmark`, in nanoseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched_idle_saver_wmark: Option<i64>,
    /// Entries of `/sys/kernel/sched_features` to switch on or off.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sched_features: BTreeMap<String, bool>,
    /// `/sys/kernel/mm/pagecache_limit/enabled`, 0 or 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_cache_limit_enabled: Option<i64>,
    /// Total NIC bandwidth of the node; koordlet reads the NIC speed when unset.
    /// Upstream's Go field is a plain Quantity, written as `"0"` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub total_network_bandwidth: Option<Quantity>,
}

// ---------------------------------------------------------------------------
// NodeSLO
// ---------------------------------------------------------------------------

/// Desired QoS policy of one node (upstream `NodeSLOSpec`). The NodeSLO is
/// named after its node.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
#[kube(
    group = "slo.koordinator.sh",
    version = "v1alpha1",
    kind = "NodeSLO",
    doc = "NodeSLO is the QoS policy koordlet enforces on one node; it is named after the node.",
    plural = "nodeslos",
    singular = "nodeslo",
    status = "NodeSLOStatus",
    derive = "PartialEq",
    derive = "Default"
)]
#[serde(rename_all = "camelCase")]
pub struct NodeSLOSpec {
    /// Suppress and evict BE pods when node usage is high.
    #[serde(
        rename = "resourceUsedThresholdWithBE",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_used_threshold_with_be: Option<ResourceThresholdStrategy>,
    /// QoS settings per QoS class.
    #[serde(
        rename = "resourceQOSStrategy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_qos_strategy: Option<ResourceQOSStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_burst_strategy: Option<CPUBurstStrategy>,
    /// Node-wide kernel settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_strategy: Option<SystemStrategy>,
    /// Third-party extensions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<ExtensionsMap>,
    /// QoS management of applications running outside Kubernetes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_applications: Vec<HostApplicationSpec>,
}

/// The wire fields of [`NodeSLOSpec`]; a separate type so that `spec: null`
/// (which Go reads as an empty spec) is accepted.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeSLOSpecFields {
    #[serde(rename = "resourceUsedThresholdWithBE", default)]
    resource_used_threshold_with_be: Option<ResourceThresholdStrategy>,
    #[serde(rename = "resourceQOSStrategy", default)]
    resource_qos_strategy: Option<ResourceQOSStrategy>,
    #[serde(default)]
    cpu_burst_strategy: Option<CPUBurstStrategy>,
    #[serde(default)]
    system_strategy: Option<SystemStrategy>,
    #[serde(default)]
    extensions: Option<ExtensionsMap>,
    #[serde(default)]
    host_applications: Option<Vec<HostApplicationSpec>>,
}

impl<'de> Deserialize<'de> for NodeSLOSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Some(fields) = Option::<NodeSLOSpecFields>::deserialize(deserializer)? else {
            return Ok(Self::default());
        };
        Ok(Self {
            resource_used_threshold_with_be: fields.resource_used_threshold_with_be,
            resource_qos_strategy: fields.resource_qos_strategy,
            cpu_burst_strategy: fields.cpu_burst_strategy,
            system_strategy: fields.system_strategy,
            extensions: fields.extensions,
            host_applications: fields.host_applications.unwrap_or_default(),
        })
    }
}

/// Observed state of a NodeSLO; upstream defines no fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeSLOStatus {}
