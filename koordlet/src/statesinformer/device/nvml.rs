//! GPUs through NVML, loaded at run time: `nvml-wrapper` opens
//! `libnvidia-ml.so.1` with dlopen, so koordlet starts (and simply has no
//! GPU source) on a node without the NVIDIA driver.
//!
//! Health: a GPU whose identity (UUID, minor) NVML gives but whose memory or
//! PCI queries fail (`GPU is lost`, say) is reported unhealthy with the
//! NVML error as the reason. Upstream additionally listens for critical Xid
//! events; that listener is not built here (see `koordlet/docs/devices.md`).

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use super::sysfs::is_pci_address;
use super::{DeviceHealth, DeviceSnapshot, DeviceSource, DiscoveryError, GpuInfo};

/// The most GPUs considered (NVML's own limit is far below).
pub const MAX_GPUS: u32 = 64;

/// NVML, loaded.
pub struct NvmlGpuSource {
    nvml: Nvml,
}

impl std::fmt::Debug for NvmlGpuSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvmlGpuSource")
    }
}

impl NvmlGpuSource {
    /// Loads `libnvidia-ml.so.1` and initialises NVML; the error says why
    /// there is no NVML (library missing, driver not loaded, ...).
    pub fn load() -> Result<Self, String> {
        Nvml::init().map(|nvml| Self { nvml }).map_err(|err| match err {
            NvmlError::LibloadingError(inner) => {
                format!("libnvidia-ml.so.1 cannot be loaded ({inner}); no NVIDIA driver on this node?")
            }
            other => format!("NVML initialisation failed: {other}"),
        })
    }

    /// The NVML library's idea of the driver version.
    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    fn gpu(&self, index: u32) -> Result<GpuInfo, String> {
        let device = self
            .nvml
            .device_by_index(index)
            .map_err(|err| format!("GPU index {index}: {err}"))?;
        let uuid = device
            .uuid()
            .map_err(|err| format!("GPU index {index}: no UUID: {err}"))?;
        let minor = device
            .minor_number()
            .map_err(|err| format!("GPU {uuid}: no minor number: {err}"))?;
        let minor =
            i32::try_from(minor).map_err(|_| format!("GPU {uuid}: minor {minor} out of range"))?;
        let mut health = DeviceHealth::Healthy;
        let mut fail = |what: &str, err: NvmlError| {
            if health.is_healthy() {
                health = DeviceHealth::Unhealthy {
                    code: nvml_error_code(&err),
                    message: format!("NVML cannot read the {what}: {err}"),
                };
            }
        };
        let memory_total_bytes = match device.memory_info() {
            Ok(memory) => memory.total,
            Err(err) => {
                fail("memory size", err);
                0
            }
        };
        let bus_id = match device.pci_info() {
            Ok(pci) => normalize_bus_id(&pci.bus_id).unwrap_or_default(),
            Err(err) => {
                fail("PCI address", err);
                String::new()
            }
        };
        let model = device.name().unwrap_or_default();
        Ok(GpuInfo {
            uuid,
            minor,
            memory_total_bytes,
            bus_id,
            model,
            health,
            topology: None,
        })
    }
}

impl DeviceSource for NvmlGpuSource {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|err| DiscoveryError::Nvml(format!("device count: {err}")))?;
        let mut snapshot = DeviceSnapshot {
            gpu_driver_version: self.driver_version(),
            ..DeviceSnapshot::default()
        };
        if count > MAX_GPUS {
            snapshot.problems.push(format!(
                "NVML reports {count} GPUs; only the first {MAX_GPUS} are considered"
            ));
        }
        for index in 0..count.min(MAX_GPUS) {
            match self.gpu(index) {
                Ok(gpu) => snapshot.gpus.push(gpu),
                Err(problem) => snapshot.problems.push(problem),
            }
        }
        Ok(snapshot)
    }
}

/// A short reason code for an NVML error (`GpuLost`).
fn nvml_error_code(err: &NvmlError) -> String {
    let text = format!("{err:?}");
    let code: String = text
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    if code.is_empty() {
        "NVMLError".to_string()
    } else {
        code
    }
}

/// NVML's PCI address (`00000000:3B:00.0`) in sysfs form (`0000:3b:00.0`).
pub fn normalize_bus_id(nvml_bus_id: &str) -> Option<String> {
    let lower = nvml_bus_id.trim().to_ascii_lowercase();
    let (domain, rest) = lower.split_once(':')?;
    let domain = if domain.len() > 4 {
        let (high, low) = domain.split_at(domain.len() - 4);
        if !high.bytes().all(|b| b == b'0') {
            return None;
        }
        low
    } else {
        domain
    };
    let address = format!("{domain:0>4}:{rest}");
    is_pci_address(&address).then_some(address)
}
