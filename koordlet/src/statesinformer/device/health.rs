//! GPU health from NVML's critical Xid events, as upstream's koordlet
//! watches them: a GPU that reports a critical Xid error (other than the
//! application errors 13, 31, 43, 45, 68 and 109) turns unhealthy with
//! reason `Xid<N>`, and a GPU that cannot deliver Xid events turns unhealthy
//! with reason `DeviceHealthCheckNotSupported`. As upstream, nothing
//! recovers a GPU from this state but a koordlet restart (the driver
//! usually needs a GPU reset anyway).
//!
//! - [`GpuEventSource`]: where events come from (NVML's event set in
//!   production, a fake in tests).
//! - [`GpuHealthBook`]: the unhealthy GPUs by PCI address, shared between
//!   the watcher thread and discovery.
//! - [`HealthTrackedSource`]: a [`DeviceSource`] wrapper that applies the
//!   book to what the wrapped source discovers.
//! - [`watch_health`]: the loop that feeds the book.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use koord_common::sync::MutexExt;

use super::{DeviceHealth, DeviceSnapshot, DeviceSource, DiscoveryError, GpuUsageSnapshot};

/// Xid codes NVIDIA documents as application errors: the GPU stays usable.
pub const APPLICATION_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];

/// The reason code of a GPU that cannot report Xid events (upstream's).
pub const HEALTH_CHECK_NOT_SUPPORTED: &str = "DeviceHealthCheckNotSupported";

/// At most this many GPUs are kept in the book (NVML's own limit is far below).
const MAX_TRACKED_GPUS: usize = 256;

/// Something the event source saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuEvent {
    /// A critical Xid error. `bus_id` (sysfs form, `0000:3b:00.0`) is `None`
    /// when NVML could not say which GPU: then every GPU is affected, as
    /// upstream treats an event without a device UUID.
    CriticalXid { bus_id: Option<String>, xid: u64 },
    /// The GPU at `bus_id` does not support Xid events.
    HealthCheckNotSupported { bus_id: String },
}

/// Where GPU events come from. `wait` blocks at most `timeout`; `Ok(None)`
/// means none arrived.
pub trait GpuEventSource {
    fn wait(&mut self, timeout: Duration) -> Result<Option<GpuEvent>, String>;
}

/// The health an event gives, `None` for an event that leaves the GPU
/// healthy (an application Xid).
pub fn health_of_event(event: &GpuEvent) -> Option<DeviceHealth> {
    match event {
        GpuEvent::CriticalXid { xid, .. } if APPLICATION_XIDS.contains(xid) => None,
        GpuEvent::CriticalXid { xid, .. } => Some(DeviceHealth::Unhealthy {
            code: format!("Xid{xid}"),
            message: format!("Xid error detected on device, error code: {xid}"),
        }),
        GpuEvent::HealthCheckNotSupported { .. } => Some(DeviceHealth::Unhealthy {
            code: HEALTH_CHECK_NOT_SUPPORTED.to_string(),
            message: "device does not support health checking".to_string(),
        }),
    }
}

/// GPUs made unhealthy by events, by PCI address. Cloning shares the book.
#[derive(Debug, Clone, Default)]
pub struct GpuHealthBook {
    unhealthy: Arc<Mutex<BTreeMap<String, DeviceHealth>>>,
}

impl GpuHealthBook {
    pub fn new() -> Self {
        Self::default()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, DeviceHealth>> {
        // Entries are whole values: a poisoned lock still holds a valid map.
        self.unhealthy.lock_or_recover()
    }

    /// Records `event`; `gpus` are the PCI addresses of the watched GPUs
    /// (an event without a GPU hits them all; an event for another address
    /// is ignored). Returns the addresses that turned unhealthy now.
    pub fn record(&self, event: &GpuEvent, gpus: &[String]) -> Vec<String> {
        let Some(health) = health_of_event(event) else {
            return Vec::new();
        };
        let targets: Vec<&String> = match event {
            GpuEvent::CriticalXid { bus_id: None, .. } => gpus.iter().collect(),
            GpuEvent::CriticalXid {
                bus_id: Some(bus_id),
                ..
            }
            | GpuEvent::HealthCheckNotSupported { bus_id } => {
                gpus.iter().filter(|gpu| *gpu == bus_id).collect()
            }
        };
        let mut entries = self.entries();
        let mut changed = Vec::new();
        for bus_id in targets {
            if entries.len() >= MAX_TRACKED_GPUS && !entries.contains_key(bus_id) {
                break;
            }
            // The first error stays the reason, as upstream keeps one per GPU
            // but overwrites; keeping the first explains the failure best.
            if !entries.contains_key(bus_id) {
                entries.insert(bus_id.clone(), health.clone());
                changed.push(bus_id.clone());
            }
        }
        changed
    }

    /// The health events gave the GPU at `bus_id`, if any.
    pub fn health_of(&self, bus_id: &str) -> Option<DeviceHealth> {
        self.entries().get(bus_id).cloned()
    }

    /// Marks the GPUs of `snapshot` that the book knows as unhealthy. A GPU
    /// already unhealthy from discovery keeps discovery's reason.
    pub fn apply(&self, snapshot: &mut DeviceSnapshot) {
        let entries = self.entries();
        for gpu in &mut snapshot.gpus {
            if gpu.health.is_healthy()
                && let Some(health) = entries.get(&gpu.bus_id)
            {
                gpu.health = health.clone();
            }
        }
    }
}

/// A source whose GPUs get the health the book records.
pub struct HealthTrackedSource {
    inner: Arc<dyn DeviceSource>,
    book: GpuHealthBook,
}

impl HealthTrackedSource {
    pub fn new(inner: Arc<dyn DeviceSource>, book: GpuHealthBook) -> Self {
        Self { inner, book }
    }
}

impl DeviceSource for HealthTrackedSource {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
        let mut snapshot = self.inner.discover()?;
        self.book.apply(&mut snapshot);
        Ok(snapshot)
    }

    fn gpu_usage(&self) -> Result<GpuUsageSnapshot, DiscoveryError> {
        self.inner.gpu_usage()
    }
}

/// Feeds `book` from `source` until `stop` is set, checking it at least
/// every `poll`. A failing wait is logged once per distinct error and
/// retried after `poll`; it never ends the watch. Blocking: run it on its
/// own thread.
pub fn watch_health(
    source: &mut dyn GpuEventSource,
    book: &GpuHealthBook,
    gpus: &[String],
    stop: &AtomicBool,
    poll: Duration,
) {
    let mut last_error: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        match source.wait(poll) {
            Ok(None) => {}
            Ok(Some(event)) => {
                last_error = None;
                for bus_id in book.record(&event, gpus) {
                    let health = book.health_of(&bus_id);
                    tracing::warn!(gpu = %bus_id, health = ?health, "GPU {bus_id} is unhealthy: {health:?}");
                }
            }
            Err(err) => {
                if last_error.as_deref() != Some(err.as_str()) {
                    tracing::warn!(error = %err, "waiting for GPU events failed: {err}");
                    last_error = Some(err);
                }
                std::thread::sleep(poll);
            }
        }
    }
}
