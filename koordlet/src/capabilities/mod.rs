//! Node capability detection: what this kernel can actually enforce.
//!
//! [`detect`] probes the configured roots (`/proc`, `/sys`, `/sys/fs/cgroup`,
//! `/sys/fs/resctrl`) and returns a [`NodeCapabilities`] matrix. Every
//! capability that is absent or could not be determined is `false` (or
//! `unknown`/`null`) and carries a sentence in [`NodeCapabilities::reasons`].
//! The matrix is printed by `koordlet capabilities` (with the NRI socket
//! probe beside it, [`CapabilitiesReport`]), published on the Node
//! ([`node_labels_and_annotations`], [`node_patch`]) and exported as the
//! `koordlet_node_capability` gauge ([`CapabilityMetrics`]).
//! Keys and their meaning are documented in `koordlet/docs/capabilities.md`.
//!
//! Detection does blocking file I/O and one syscall: call it from a blocking
//! thread, not from the async reactor.

mod nri;
mod output;
pub mod parse;
mod probe;
mod publish;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use nri::{
    CapabilitiesReport, DAEMON_QUERY_TIMEOUT, DaemonNriStatus, NRI_CONNECTED_METRIC, NRI_KEY,
    NriCapability, daemon_dial_addr, detect_report, parse_connected_metric, query_daemon_nri,
};
pub use output::{render, render_json, render_report, render_table};
pub use probe::{
    CGROUP_RESOURCE_CONTROLLERS, DetectOptions, core_sched_from_prctl, decide_cgroup_version,
    detect, detect_with,
};
pub use publish::{
    ANNOTATION_CAPABILITIES, CAPABILITY_LABEL_PREFIX, CAPABILITY_METRIC, CapabilityMetrics,
    capability_flags, label_value, node_labels_and_annotations, node_patch,
};

/// The capability matrix of one node. Serialised as the JSON object printed by
/// `koordlet capabilities --output json` and stored in the
/// `node.koordinator.sh/capabilities` annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCapabilities {
    pub cgroup: CgroupCapabilities,
    /// CFS burst: `cpu.cfs_burst_us` (v1) or `cpu.max.burst` (v2).
    pub cpu_burst: bool,
    /// SCHED_IDLE cgroups: `cpu.idle`.
    pub cpu_idle: bool,
    /// Node-level PSI: `<proc>/pressure/{cpu,memory,io}` readable and well formed.
    pub psi: bool,
    /// Per-cgroup PSI: `{cpu,memory,io}.pressure` in a cgroup directory.
    pub psi_cgroup: bool,
    /// The cgroup directory where per-cgroup PSI files were found.
    pub psi_cgroup_source: Option<String>,
    /// Core scheduling usable (Anolis `sched_core` sysctl or `prctl(PR_SCHED_CORE)`).
    pub core_sched: bool,
    /// Anolis group identity: `cpu.bvt_warp_ns`.
    pub group_identity: bool,
    pub resctrl: ResctrlCapabilities,
    /// Some online CPU has more than one hardware thread sibling.
    pub smt: bool,
    /// NUMA nodes under `<sys>/devices/system/node`; 0 when unknown.
    pub numa_nodes: u32,
    /// Online CPUs; 0 when unknown.
    pub cpus: u32,
    /// Kernel release (`<proc>/sys/kernel/osrelease`), `unknown` when unreadable.
    pub kernel: String,
    pub memory_qos: MemoryQosCapabilities,
    /// One entry per online CPU.
    pub cpu_topology: Vec<CpuTopology>,
    /// Why a capability is false, unknown or partial, keyed by its JSON path
    /// (`cpuBurst`, `resctrl.cat`, `cgroup.driver`, …).
    pub reasons: BTreeMap<String, String>,
}

/// Cgroup layout and driver.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CgroupCapabilities {
    pub version: CgroupVersion,
    /// One sentence saying which hierarchy carries which resource controllers.
    pub version_reason: String,
    pub driver: CgroupDriver,
    /// Where the driver was learnt from (kubelet config, kubepods directory).
    pub driver_source: Option<String>,
    /// Enabled controllers mounted on any hierarchy, sorted.
    pub controllers: Vec<String>,
    /// Controllers on v1 hierarchies.
    pub v1_controllers: Vec<String>,
    /// Controllers available on the cgroup2 hierarchy.
    pub v2_controllers: Vec<String>,
    /// A cgroup2 filesystem is mounted (at the root or beside v1 hierarchies).
    pub unified_mount: bool,
    /// Where the cgroup2 filesystem is mounted, as the kernel reports it.
    pub unified_mount_path: Option<String>,
}

/// Which cgroup interface the resource controllers use.
///
/// `v1`: every resource controller (cpu, cpuacct, cpuset, memory, blkio/io,
/// pids) is on a v1 hierarchy; a cgroup2 mount beside them without resource
/// controllers (systemd's "hybrid" layout, `/sys/fs/cgroup/unified`) does not
/// change that, and is reported in `unifiedMount`. `v2`: the resource
/// controllers are on the cgroup2 hierarchy. `hybrid`: some resource
/// controllers are on v1 and others on v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    V1,
    V2,
    Hybrid,
    Unknown,
}

impl CgroupVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
            Self::Hybrid => "hybrid",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the kubelet names pod cgroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// `kubepods/burstable/pod<uid>/<container>`.
    Cgroupfs,
    /// `kubepods.slice/kubepods-burstable.slice/...`.
    Systemd,
    Unknown,
}

impl CgroupDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cgroupfs => "cgroupfs",
            Self::Systemd => "systemd",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Intel RDT / AMD PQoS through the resctrl filesystem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResctrlCapabilities {
    /// resctrl is mounted and offers CAT or MBA.
    pub supported: bool,
    /// L3 cache allocation (`info/L3`).
    pub cat: bool,
    /// Memory bandwidth allocation (`info/MB`).
    pub mba: bool,
    /// Usable classes of service: the smallest `num_closids` of L3 and MB.
    pub closids: Option<u32>,
    /// `info/L3/cbm_mask`, hexadecimal as the kernel prints it.
    pub cbm_mask: Option<String>,
}

/// Memory QoS interface files found in the memory hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryQosCapabilities {
    /// `memory.min` (v2, or Anolis v1).
    pub min: bool,
    /// `memory.low` (v2, or Anolis v1).
    pub low: bool,
    /// `memory.high` (v2, or Anolis v1).
    pub high: bool,
    /// Anolis `memory.wmark_ratio`.
    pub wmark_ratio: bool,
    /// Anolis `memory.wmark_scale_factor`.
    pub wmark_scale_factor: bool,
    /// Anolis `memory.wmark_min_adj`.
    pub wmark_min_adj: bool,
    /// Anolis `memory.priority`.
    pub priority: bool,
    /// Anolis `memory.use_priority_oom`.
    pub use_priority_oom: bool,
    /// `memory.oom.group`.
    pub oom_group: bool,
    /// Alibaba Cloud Linux `memory.pagecache_limit.enable`.
    #[serde(default)]
    pub pagecache_limit_enable: bool,
    /// Alibaba Cloud Linux `memory.pagecache_limit.size`.
    #[serde(default)]
    pub pagecache_limit_size: bool,
    /// Alibaba Cloud Linux `memory.pagecache_limit.sync`.
    #[serde(default)]
    pub pagecache_limit_sync: bool,
}

/// Each memory QoS file and the NodeSLO `memoryQOS` settings written to
/// it, as the capability reasons and the QoS manager name them.
pub const MEMORY_QOS_FILES: [(&str, &str); 12] = [
    ("memory.min", "minLimitPercent"),
    ("memory.low", "lowLimitPercent"),
    ("memory.high", "throttlingPercent"),
    ("memory.wmark_ratio", "wmarkRatio"),
    ("memory.wmark_scale_factor", "wmarkScalePermill"),
    ("memory.wmark_min_adj", "wmarkMinAdj"),
    ("memory.priority", "priority"),
    ("memory.use_priority_oom", "priorityEnable"),
    ("memory.oom.group", "oomKillGroup"),
    (
        "memory.pagecache_limit.enable",
        "pageCacheEnable/pageCacheLimitSize/pageCacheLimitPercent",
    ),
    (
        "memory.pagecache_limit.size",
        "pageCacheLimitSize/pageCacheLimitPercent",
    ),
    ("memory.pagecache_limit.sync", "pageCacheReclaimSync"),
];

/// The `memoryQOS` settings a memory QoS file carries (the file name itself
/// for a file that is not one of them).
pub fn memory_qos_setting(file: &str) -> &str {
    MEMORY_QOS_FILES
        .iter()
        .find(|(name, _)| *name == file)
        .map_or(file, |(_, setting)| setting)
}

/// Where one online CPU sits. `null` fields could not be read (or the kernel
/// reports -1, as some virtual machines do for the package id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuTopology {
    pub cpu: u32,
    pub core: Option<u32>,
    pub socket: Option<u32>,
    pub node: Option<u32>,
}

/// Output format of `koordlet capabilities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned, human-readable rows.
    #[default]
    Table,
    /// The documented JSON object.
    Json,
}

/// Flags of `koordlet capabilities`. The host roots come from the top-level
/// flags: `koordlet --proc-root-dir=/host/proc capabilities --output json`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CapabilitiesArgs {
    /// Output format.
    #[arg(long = "output", short = 'o', value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// Kubelet configuration file (KubeletConfiguration) to read `cgroupDriver` from;
    /// without it the driver is inferred from the kubepods cgroup name.
    #[arg(long = "kubelet-config", value_name = "FILE")]
    pub kubelet_config: Option<PathBuf>,
}

impl CapabilitiesArgs {
    pub fn detect_options(&self) -> DetectOptions {
        DetectOptions {
            kubelet_config: self.kubelet_config.clone(),
            ..DetectOptions::default()
        }
    }
}
