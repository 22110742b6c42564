//! GPUs through NVML, loaded at run time: `nvml-wrapper` opens
//! `libnvidia-ml.so.1` with dlopen, so koordlet starts (and simply has no
//! GPU source) on a node without the NVIDIA driver.
//!
//! Health: a GPU whose identity (UUID, minor) NVML gives but whose memory or
//! PCI queries fail (`GPU is lost`, say) is reported unhealthy with the
//! NVML error as the reason. Upstream additionally listens for critical Xid
//! events; that listener is not built here (see `koordlet/docs/devices.md`).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use koord_common::units::Bytes;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::event::EventSet;

use super::health::{GpuEvent, GpuEventSource, GpuHealthBook, watch_health};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;

use super::sysfs::is_pci_address;
use super::{
    DeviceHealth, DeviceSnapshot, DeviceSource, DiscoveryError, GpuInfo, GpuProcessUsage, GpuUsage,
    GpuUsageSnapshot, MAX_PROCESSES_PER_GPU,
};

/// The most GPUs considered (NVML's own limit is far below).
pub const MAX_GPUS: u32 = 64;

/// NVML, loaded. Shared with the health watcher's thread.
pub struct NvmlGpuSource {
    nvml: Arc<Nvml>,
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
        Nvml::init()
            .map(|nvml| Self {
                nvml: Arc::new(nvml),
            }).map_err(|err| match err {
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

    /// The GPU at `index` with its UUID and minor number, which every
    /// question about it starts from.
    fn identify(&self, index: u32) -> Result<(nvml_wrapper::Device<'_>, String, i32), String> {
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
        Ok((device, uuid, minor))
    }

    fn gpu(&self, index: u32) -> Result<GpuInfo, String> {
        let (device, uuid, minor) = self.identify(index)?;
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
            memory_total: Bytes(memory_total_bytes),
            bus_id,
            model,
            health,
            topology: None,
        })
    }
}

impl NvmlGpuSource {
    fn usage_of(&self, index: u32) -> Result<GpuUsage, String> {
        let (device, uuid, minor) = self.identify(index)?;
        let memory_total_bytes = device
            .memory_info()
            .map_err(|err| format!("GPU {uuid}: no memory size: {err}"))?
            .total;
        let mut usage = GpuUsage {
            minor,
            uuid,
            memory_total: Bytes(memory_total_bytes),
            processes: None,
        };
        let processes = device
            .running_compute_processes()
            .map_err(|err| format!("GPU {}: cannot list its processes: {err}", usage.uuid));
        // NVML answers NotFound when no process left a utilisation sample.
        // Upstream passes 1024 µs as the last-seen time: every sample NVML
        // still buffers.
        let samples = match device.process_utilization_stats(1024u64) {
            Ok(samples) => Ok(samples),
            Err(NvmlError::NotFound) => Ok(Vec::new()),
            Err(err) => Err(format!(
                "GPU {}: no per-process utilisation: {err}",
                usage.uuid
            )),
        };
        let (processes, samples) = match (processes, samples) {
            (Ok(processes), Ok(samples)) => (processes, samples),
            (Err(problem), _) | (_, Err(problem)) => return Err(problem),
        };
        let listed: Vec<(u32, Option<u64>)> = processes
            .iter()
            .map(|process| {
                let memory = match process.used_gpu_memory {
                    UsedGpuMemory::Used(bytes) => Some(bytes),
                    UsedGpuMemory::Unavailable => None,
                };
                (process.pid, memory)
            })
            .collect();
        let sampled: Vec<(u32, u64, u32)> = samples
            .iter()
            .map(|sample| (sample.pid, sample.timestamp, sample.sm_util))
            .collect();
        usage.processes = Some(join_process_usage(&listed, &sampled));
        Ok(usage)
    }
}

/// Joins NVML's process list (pid, memory used when known) with its
/// utilisation samples (pid, timestamp µs, SM %): a process without a
/// sample is left out, as upstream does; of several samples the latest
/// counts. Sorted by pid, at most [`MAX_PROCESSES_PER_GPU`], SM utilisation
/// capped at 100.
pub fn join_process_usage(
    processes: &[(u32, Option<u64>)],
    samples: &[(u32, u64, u32)],
) -> Vec<GpuProcessUsage> {
    let mut latest: std::collections::BTreeMap<u32, (u64, u32)> = Default::default();
    for &(pid, timestamp, sm_util) in samples {
        let entry = latest.entry(pid).or_insert((timestamp, sm_util));
        if timestamp >= entry.0 {
            *entry = (timestamp, sm_util);
        }
    }
    let mut joined: Vec<GpuProcessUsage> = processes
        .iter()
        .filter_map(|&(pid, memory)| {
            let &(_, sm_util) = latest.get(&pid)?;
            Some(GpuProcessUsage {
                pid,
                sm_util: sm_util.min(100),
                memory_used: Bytes(memory.unwrap_or(0)),
            })
        })
        .collect();
    joined.sort_by_key(|usage| usage.pid);
    joined.dedup_by_key(|usage| usage.pid);
    joined.truncate(MAX_PROCESSES_PER_GPU);
    joined
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

    fn gpu_usage(&self) -> Result<GpuUsageSnapshot, DiscoveryError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|err| DiscoveryError::Nvml(format!("device count: {err}")))?;
        let mut snapshot = GpuUsageSnapshot::default();
        for index in 0..count.min(MAX_GPUS) {
            match self.usage_of(index) {
                Ok(usage) => snapshot.gpus.push(usage),
                Err(problem) => snapshot.problems.push(problem),
            }
        }
        Ok(snapshot)
    }
}

impl NvmlGpuSource {
    /// Starts the Xid watcher on its own thread: the GPUs present now are
    /// registered for critical Xid events, those that cannot deliver them
    /// are recorded as such. Returns the watched PCI addresses.
    pub fn spawn_health_watch(
        &self,
        book: GpuHealthBook,
        stop: Arc<AtomicBool>,
    ) -> Result<Vec<String>, String> {
        let nvml = self.nvml.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("koordlet-gpu-xid".to_string())
            .spawn(move || {
                let mut events = match NvmlEvents::register(&nvml) {
                    Ok(events) => events,
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return;
                    }
                };
                let gpus = events.gpus.clone();
                for bus_id in std::mem::take(&mut events.unsupported) {
                    book.record(&GpuEvent::HealthCheckNotSupported { bus_id }, &gpus);
                }
                let _ = ready_tx.send(Ok(gpus.clone()));
                watch_health(&mut events, &book, &gpus, &stop, Duration::from_secs(5));
            })
            .map_err(|err| format!("cannot start the GPU health thread: {err}"))?;
        ready_rx
            .recv()
            .map_err(|_| "the GPU health thread ended before registering".to_string())?
    }
}

/// NVML's event set with every GPU's critical Xid events registered.
struct NvmlEvents<'nvml> {
    set: EventSet<'nvml>,
    /// PCI addresses (sysfs form) of the GPUs registered or not supported.
    gpus: Vec<String>,
    unsupported: Vec<String>,
}

impl<'nvml> NvmlEvents<'nvml> {
    fn register(nvml: &'nvml Nvml) -> Result<Self, String> {
        let count = nvml
            .device_count()
            .map_err(|err| format!("device count: {err}"))?;
        let mut gpus = Vec::new();
        let mut unsupported = Vec::new();
        let mut set = nvml
            .create_event_set()
            .map_err(|err| format!("cannot create an NVML event set: {err}"))?;
        for index in 0..count.min(MAX_GPUS) {
            let Ok(device) = nvml.device_by_index(index) else {
                continue;
            };
            let Some(bus_id) = device
                .pci_info()
                .ok()
                .and_then(|pci| normalize_bus_id(&pci.bus_id))
            else {
                continue;
            };
            let supported = device
                .supported_event_types()
                .is_ok_and(|types| types.contains(EventTypes::CRITICAL_XID_ERROR));
            if !supported {
                unsupported.push(bus_id.clone());
                gpus.push(bus_id);
                continue;
            }
            match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
                Ok(registered) => {
                    set = registered;
                    gpus.push(bus_id);
                }
                Err(err) => {
                    // The failed call consumed the set: start a new one and
                    // register the GPUs already done again.
                    tracing::warn!(gpu = %bus_id, error = %err, "cannot watch GPU {bus_id} for Xid errors: {err}");
                    set = nvml
                        .create_event_set()
                        .map_err(|err| format!("cannot create an NVML event set: {err}"))?;
                    for done in gpus.iter().filter(|gpu| !unsupported.contains(gpu)) {
                        let device = nvml
                            .device_by_pci_bus_id(done.as_str())
                            .map_err(|err| format!("GPU {done}: {err}"))?;
                        set = device
                            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                            .map_err(|err| format!("GPU {done}: {err}"))?;
                    }
                }
            }
        }
        Ok(Self {
            set,
            gpus,
            unsupported,
        })
    }
}

impl GpuEventSource for NvmlEvents<'_> {
    fn wait(&mut self, timeout: Duration) -> Result<Option<GpuEvent>, String> {
        let timeout_ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX);
        let event = match self.set.wait(timeout_ms) {
            Ok(event) => event,
            Err(NvmlError::Timeout) => return Ok(None),
            Err(err) => return Err(err.to_string()),
        };
        if !event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
            return Ok(None);
        }
        let xid = match event.event_data {
            Some(XidError::Value(xid)) => xid,
            // An unknown Xid is still critical; 0 is no documented code.
            Some(XidError::Unknown) | None => 0,
        };
        // An empty UUID means NVML could not say which GPU: all are
        // affected. A GPU that cannot be identified is skipped (upstream).
        let bus_id = match event.device.uuid() {
            Ok(uuid) if uuid.is_empty() => None,
            Ok(_) => match event
                .device
                .pci_info()
                .ok()
                .and_then(|pci| normalize_bus_id(&pci.bus_id))
            {
                Some(bus_id) => Some(bus_id),
                None => return Ok(None),
            },
            Err(_) => return Ok(None),
        };
        Ok(Some(GpuEvent::CriticalXid { bus_id, xid }))
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
