//! The `devices.*` rows of `koordlet capabilities`: whether NVML loads,
//! which GPUs and RDMA NICs discovery finds, and whether this koordlet's
//! feature gates report them as the node's Device.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::nvml::NvmlGpuSource;
use super::uverbs;
use super::{
    ACCELERATORS_GATE, DeviceSnapshot, DeviceSource, PciSysfs, RDMA_DEVICES_GATE, RdmaSysfsSource,
    discover_all,
};

/// What device discovery finds on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DevicesCapability {
    /// `libnvidia-ml.so.1` loaded and NVML initialised.
    pub nvml: bool,
    /// The driver version, or why there is no NVML.
    pub nvml_detail: String,
    /// GPUs NVML lists.
    pub gpus: usize,
    /// Their models, as NVML names them, without repeats.
    pub gpu_models: Vec<String>,
    /// RDMA NICs (physical functions) under `/sys/class/infiniband`.
    pub rdma_nics: usize,
    /// Their SR-IOV virtual functions.
    pub rdma_vfs: usize,
    /// Whether the Device is reported, and why (not).
    pub report: String,
    /// Devices or attributes discovery skipped.
    pub problems: Vec<String>,
    /// RDMADeviceInject could add the nodes of every RDMA function found
    /// (`rdma_cm` and a uverbs device for each PF, or each VF when SR-IOV is
    /// configured); false when there is none or one is missing.
    #[serde(default)]
    pub rdma_inject: bool,
    /// What was found, or what is missing.
    #[serde(default)]
    pub rdma_inject_detail: String,
}

impl DevicesCapability {
    /// The summary of a discovery run; `no_nvml` is why NVML is missing.
    pub fn from_discovery(
        no_nvml: Option<String>,
        snapshot: &DeviceSnapshot,
        accelerators: bool,
        rdma_gate: bool,
    ) -> Self {
        let mut gpu_models: Vec<String> = Vec::new();
        for gpu in &snapshot.gpus {
            if !gpu_models.contains(&gpu.model) {
                gpu_models.push(gpu.model.clone());
            }
        }
        let nvml_detail = match (&no_nvml, &snapshot.gpu_driver_version) {
            (Some(reason), _) => format!("no NVML: {reason}"),
            (None, Some(version)) => format!("driver {version}"),
            (None, None) => "driver version unknown".to_string(),
        };
        let report = if !accelerators {
            format!(
                "not reported: feature gate {ACCELERATORS_GATE} is off (upstream's default); RDMA also needs {RDMA_DEVICES_GATE}"
            )
        } else if snapshot.is_empty() {
            "nothing to report: the node has no GPU or RDMA device".to_string()
        } else if !rdma_gate && !snapshot.rdma.is_empty() {
            format!(
                "reported as the Device named after the node (GPUs only: {RDMA_DEVICES_GATE} is off)"
            )
        } else {
            "reported as the Device named after the node".to_string()
        };
        Self {
            nvml: no_nvml.is_none(),
            nvml_detail,
            gpus: snapshot.gpus.len(),
            gpu_models,
            rdma_nics: snapshot.rdma.len(),
            rdma_vfs: snapshot
                .rdma
                .iter()
                .map(|nic| nic.vfs.as_ref().map_or(0, Vec::len))
                .sum(),
            report,
            problems: snapshot.problems.clone(),
            rdma_inject: false,
            rdma_inject_detail: "not checked".to_string(),
        }
    }

    /// `(row, value, reason)` for the table.
    pub fn rows(&self) -> Vec<(&'static str, String, String)> {
        let mut rows = vec![
            (
                "devices.nvml",
                self.nvml.to_string(),
                self.nvml_detail.clone(),
            ),
            (
                "devices.gpus",
                self.gpus.to_string(),
                self.gpu_models.join(", "),
            ),
            (
                "devices.rdma",
                self.rdma_nics.to_string(),
                format!("{} VFs", self.rdma_vfs),
            ),
            (
                "devices.report",
                (!self.report.starts_with("not") && !self.report.starts_with("nothing"))
                    .to_string(),
                self.report.clone(),
            ),
            (
                "devices.rdmaInject",
                self.rdma_inject.to_string(),
                self.rdma_inject_detail.clone(),
            ),
        ];
        if !self.problems.is_empty() {
            rows.push((
                "devices.problems",
                self.problems.len().to_string(),
                crate::bounds::truncate(&self.problems.join("; "), 1024).into_owned(),
            ));
        }
        rows
    }
}

/// Loads NVML and reads sysfs below `sys_root` (blocking); the gates come
/// from `--feature-gates`.
pub fn detect(sys_root: &Path, feature_gates: &str) -> DevicesCapability {
    let (accelerators, rdma_gate) = super::reporter::report_gates(feature_gates);
    let mut sources: Vec<Arc<dyn DeviceSource>> = vec![Arc::new(RdmaSysfsSource::new(sys_root))];
    let no_nvml = match NvmlGpuSource::load() {
        Ok(nvml) => {
            sources.push(Arc::new(nvml));
            None
        }
        Err(reason) => Some(reason),
    };
    let snapshot = discover_all(&sources, &PciSysfs::new(sys_root));
    let (rdma_inject, rdma_inject_detail) = rdma_inject_check(sys_root, &snapshot);
    DevicesCapability {
        rdma_inject,
        rdma_inject_detail,
        ..DevicesCapability::from_discovery(no_nvml, &snapshot, accelerators, rdma_gate)
    }
}

/// Whether the device nodes RDMADeviceInject would add exist for every
/// RDMA function discovery found (reads sysfs below `sys_root`).
pub fn rdma_inject_check(sys_root: &Path, snapshot: &DeviceSnapshot) -> (bool, String) {
    let functions: Vec<&str> = snapshot
        .rdma
        .iter()
        .flat_map(|nic| match nic.vfs.as_deref() {
            Some(vfs) if !vfs.is_empty() => vfs.iter().map(String::as_str).collect(),
            _ => vec![nic.bus_id.as_str()],
        })
        .collect();
    if functions.is_empty() {
        return (false, "no RDMA function to inject".to_string());
    }
    let cm = match uverbs::rdma_cm(sys_root) {
        Ok(cm) => format!("rdma_cm {}:{}", cm.major, cm.minor),
        Err(error) => return (false, format!("no rdma_cm (is rdma_ucm loaded?): {error}")),
    };
    let missing: Vec<String> = functions
        .iter()
        .filter_map(|bdf| uverbs::uverbs_of(sys_root, bdf).err())
        .map(|error| error.to_string())
        .collect();
    let found = functions.len() - missing.len();
    let mut detail = format!("{cm}; uverbs for {found}/{} PCI functions", functions.len());
    if let Some(first) = missing.first() {
        detail.push_str(&format!("; {first}"));
    }
    (missing.is_empty(), crate::bounds::cut(detail))
}
