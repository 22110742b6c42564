//! Device reporter: koordlet publishes the node's GPUs and RDMA NICs as the
//! `Device` object named after the node (scheduling.koordinator.sh/v1alpha1),
//! the way upstream's states informer does, for koord-scheduler's DeviceShare
//! plugin and koord-manager's device resource calculators.
//!
//! - Discovery: every source implements [`DeviceSource`] and returns a
//!   [`DeviceSnapshot`]. [`nvml::NvmlGpuSource`] asks NVML (loaded at run
//!   time; a node without the driver just has no GPU source) and
//!   [`sysfs::RdmaSysfsSource`] reads `/sys/class/infiniband` and the PCI
//!   devices. [`xpu::XpuDeviceInfoSource`] reads the device-info files a
//!   vendor's daemon writes (GPUs/NPUs with peer links). [`discover_all`]
//!   merges the sources and resolves each NVML GPU's and NIC's PCI topology
//!   (NUMA node, PCIe root) from sysfs.
//! - Pure core: [`spec::build_desired_device`] turns a snapshot into the
//!   Device's devices, labels and GPU partition table (from the XPU peer
//!   links); [`spec::DesiredDevice`] compares itself
//!   with the stored object and merges into it.
//! - I/O shell: [`reporter::DeviceReporter`] re-discovers every
//!   `--node-topology-sync-interval` and creates or replaces the object.
//!
//! See `koordlet/docs/devices.md`.

pub mod capability;
pub mod health;
pub mod nvml;
pub mod reporter;
pub mod spec;
pub mod sysfs;
#[cfg(test)]
mod tests;
pub mod uverbs;
pub mod xpu;
pub mod xpuinfo;

use std::path::PathBuf;
use std::sync::Arc;

use koord_common::units::Bytes;

pub use reporter::{DeviceReporter, SyncOutcome};
pub use spec::{DesiredDevice, build_desired_device};
pub use sysfs::{PciSysfs, RdmaSysfsSource};

/// Flags of the Device report (upstream's names and defaults).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DeviceArgs {
    /// The directory of XPU device-info files (JSON lists of GPUs/NPUs and their peer links)
    /// a vendor's device daemon writes; read when the feature gate Accelerators is on.
    #[arg(
        long = "xpu-device-infos-dir",
        default_value = xpuinfo::DEFAULT_XPU_DEVICE_INFOS_DIR,
        value_name = "DIR"
    )]
    pub xpu_device_infos_dir: PathBuf,

    /// Report GPUs only from the XPU device-info files, never from NVML.
    #[arg(long = "xpu-enforce-collect-from-device-infos", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub xpu_enforce_collect_from_device_infos: bool,
}

impl Default for DeviceArgs {
    fn default() -> Self {
        Self {
            xpu_device_infos_dir: PathBuf::from(xpuinfo::DEFAULT_XPU_DEVICE_INFOS_DIR),
            xpu_enforce_collect_from_device_infos: false,
        }
    }
}

/// The feature gate (upstream's, default off) that turns the Device report on.
pub const ACCELERATORS_GATE: &str = "Accelerators";
/// The feature gate (upstream's, default off) that adds RDMA NICs to it.
pub const RDMA_DEVICES_GATE: &str = "RDMADevices";

/// Errors of device discovery. Paths and values are cut for logs.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is larger than {limit} bytes; refusing to read it")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("{path} has more than {limit} entries; refusing to list it")]
    TooManyEntries { path: PathBuf, limit: usize },
    #[error("{path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error("NVML: {0}")]
    Nvml(String),
}

/// Whether a device works, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum DeviceHealth {
    #[default]
    Healthy,
    /// `code` becomes the `Healthy=False` condition's reason.
    Unhealthy { code: String, message: String },
}

impl DeviceHealth {
    pub fn is_healthy(&self) -> bool {
        matches!(self, Self::Healthy)
    }
}

/// Where a PCI device sits: the NUMA node from its `numa_node` (upstream
/// reads -1, "no affinity", as node 0) and its PCIe root complex
/// (`pci0000:3a`) from the device's sysfs path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciTopology {
    pub node_id: i32,
    pub pcie_id: String,
}

/// One GPU as NVML describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    pub uuid: String,
    pub minor: i32,
    pub memory_total: Bytes,
    /// PCI address in sysfs form (`0000:3b:00.0`).
    pub bus_id: String,
    /// Product name as NVML prints it (`NVIDIA A100-SXM4-80GB`).
    pub model: String,
    pub health: DeviceHealth,
    /// Filled by [`discover_all`] from sysfs.
    pub topology: Option<PciTopology>,
}

/// One RDMA-capable NIC (a physical function) and its virtual functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaNic {
    /// PCI address of the physical function; also the device's id.
    pub bus_id: String,
    /// The RDMA devices on it (`mlx5_0`), sorted; the first gives the minor.
    pub ib_devices: Vec<String>,
    pub minor: i32,
    /// Every port of the first RDMA device is `ACTIVE`.
    pub healthy: bool,
    /// `Some` when SR-IOV is configured (`sriov_numvfs` > 0): the VFs' PCI
    /// addresses in `virtfn<N>` order.
    pub vfs: Option<Vec<String>>,
    /// Filled by [`discover_all`] from sysfs.
    pub topology: Option<PciTopology>,
}

/// What the sources found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceSnapshot {
    pub gpus: Vec<GpuInfo>,
    /// Devices from the XPU device-info files; when there are any, they
    /// are the node's GPUs and NVML's are not reported (upstream's rule).
    pub xpus: Vec<xpuinfo::XpuDeviceInfo>,
    /// The NVIDIA driver version (`535.104.05`) when NVML gave it.
    pub gpu_driver_version: Option<String>,
    pub rdma: Vec<RdmaNic>,
    /// Devices or attributes skipped, one sentence each.
    pub problems: Vec<String>,
    /// Failures of sources whose failure must not change the report (see
    /// [`DeviceSource::failure_keeps_report`]): while any is here the
    /// reporter keeps the Device as it is.
    pub report_blocking_failures: Vec<String>,
}

impl DeviceSnapshot {
    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty() && self.xpus.is_empty() && self.rdma.is_empty()
    }

    /// Adds `other`'s devices and problems.
    pub fn merge(&mut self, other: DeviceSnapshot) {
        self.gpus.extend(other.gpus);
        self.xpus.extend(other.xpus);
        self.rdma.extend(other.rdma);
        self.problems.extend(other.problems);
        self.report_blocking_failures
            .extend(other.report_blocking_failures);
        if self.gpu_driver_version.is_none() {
            self.gpu_driver_version = other.gpu_driver_version;
        }
    }
}

/// One process's use of one GPU: NVML's running compute process (its
/// memory) joined with its latest per-process utilisation sample, as
/// upstream's GPU collector joins them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuProcessUsage {
    /// Host PID (koordlet runs in the host PID namespace).
    pub pid: u32,
    /// SM utilisation, percent of this GPU.
    pub sm_util: u32,
    pub memory_used: Bytes,
}

/// The usage of one GPU, process by process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuUsage {
    pub minor: i32,
    pub uuid: String,
    pub memory_total: Bytes,
    /// `None` when NVML could not list the processes or their utilisation
    /// this round (the reason is in the snapshot's problems): the GPU's
    /// usage is unknown, not zero.
    pub processes: Option<Vec<GpuProcessUsage>>,
}

/// What a usage query found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuUsageSnapshot {
    pub gpus: Vec<GpuUsage>,
    /// GPUs or queries skipped, one sentence each.
    pub problems: Vec<String>,
}

/// The most processes considered per GPU.
pub const MAX_PROCESSES_PER_GPU: usize = 1024;

/// A way to find devices. `discover` and `gpu_usage` do blocking I/O: call
/// them from a blocking thread.
pub trait DeviceSource: Send + Sync {
    /// Short name for logs and `koordlet capabilities` (`nvml`, `rdma-sysfs`).
    fn name(&self) -> &'static str;
    /// The devices present now.
    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError>;
    /// The GPUs' usage now, per process. Sources without GPUs have none.
    fn gpu_usage(&self) -> Result<GpuUsageSnapshot, DiscoveryError> {
        Ok(GpuUsageSnapshot::default())
    }
    /// Whether a failed discovery must leave the Device as last reported
    /// (true for files another process writes, where a failure says
    /// nothing about the devices) rather than report the others without
    /// this source's devices.
    fn failure_keeps_report(&self) -> bool {
        false
    }
}

/// Runs every source, merges what they found and resolves the PCI topology
/// of each device from `pci`. A failing source is recorded as a problem and
/// the others still count (upstream reports the GPUs when RDMA fails and the
/// other way round). Blocking.
pub fn discover_all(sources: &[Arc<dyn DeviceSource>], pci: &PciSysfs) -> DeviceSnapshot {
    let mut snapshot = DeviceSnapshot::default();
    for source in sources {
        match source.discover() {
            Ok(found) => snapshot.merge(found),
            Err(err) if source.failure_keeps_report() => snapshot
                .report_blocking_failures
                .push(format!("{} discovery failed: {err}", source.name())),
            Err(err) => snapshot
                .problems
                .push(format!("{} discovery failed: {err}", source.name())),
        }
    }
    let mut problems = Vec::new();
    for gpu in &mut snapshot.gpus {
        match pci.topology(&gpu.bus_id) {
            Ok(topology) => gpu.topology = Some(topology),
            Err(err) => problems.push(format!("GPU {} has no topology: {err}", gpu.uuid)),
        }
    }
    for nic in &mut snapshot.rdma {
        match pci.topology(&nic.bus_id) {
            Ok(topology) => nic.topology = Some(topology),
            Err(err) => problems.push(format!("RDMA NIC {} has no topology: {err}", nic.bus_id)),
        }
    }
    snapshot.problems.extend(problems);
    snapshot
}
