//! The I/O shell: discovers the devices every interval (upstream's
//! `--node-topology-sync-interval`, 3 s), and creates the Device named after
//! the node when it is missing or replaces it when its content changed. A
//! node without devices gets no Device; one that loses its last device gets
//! its Device emptied.

use std::sync::Arc;
use std::time::Duration;

use apis::scheduling::v1alpha1::Device;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_common::Shutdown;

use std::sync::atomic::AtomicBool;

use super::health::{GpuHealthBook, HealthTrackedSource};
use super::spec::{DesiredDevice, build_desired_device};
use super::{DeviceSnapshot, DeviceSource, PciSysfs, discover_all};
use crate::statesinformer::StatesInformer;

/// Errors of one report round.
#[derive(Debug, thiserror::Error)]
pub enum DeviceReportError {
    #[error("Device {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("device discovery did not finish: {0}")]
    Discovery(String),
}

/// Result of one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncOutcome {
    Created,
    Updated(String),
    Unchanged,
    /// No devices and no Device: nothing to do.
    NoDevices,
}

/// Discovers devices and reports them (see the module doc).
pub struct DeviceReporter {
    states: StatesInformer,
    sources: Vec<Arc<dyn DeviceSource>>,
    pci: PciSysfs,
    client: kube::Client,
    interval: Duration,
    resync: Duration,
    last_reported: Option<DesiredDevice>,
    last_checked: Option<tokio::time::Instant>,
    last_problems: Vec<String>,
}

impl DeviceReporter {
    pub fn new(
        states: StatesInformer,
        sources: Vec<Arc<dyn DeviceSource>>,
        pci: PciSysfs,
        client: kube::Client,
    ) -> Self {
        Self {
            states,
            sources,
            pci,
            client,
            interval: crate::statesinformer::nodetopo::reporter::DEFAULT_SYNC_INTERVAL,
            resync: Duration::from_secs(60),
            last_reported: None,
            last_checked: None,
            last_problems: Vec::new(),
        }
    }

    /// How often devices are re-discovered.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// How long an unchanged content goes without re-reading the object
    /// (repairs edits and deletions by others).
    pub fn with_resync(mut self, resync: Duration) -> Self {
        self.resync = resync;
        self
    }

    /// Runs the sources off the async reactor.
    pub async fn discover(&self) -> Result<DeviceSnapshot, DeviceReportError> {
        let sources = self.sources.clone();
        let pci = self.pci.clone();
        tokio::task::spawn_blocking(move || discover_all(&sources, &pci))
            .await
            .map_err(|err| DeviceReportError::Discovery(err.to_string()))
    }

    fn log_problems(&mut self, problems: Vec<String>) {
        if problems != self.last_problems {
            for problem in &problems {
                tracing::warn!(problem = %problem, "device discovery: {problem}");
            }
            self.last_problems = problems;
        }
    }

    /// One round; `None` while the Node is not known yet (its UID goes into
    /// the owner reference).
    pub async fn report_once(&mut self) -> Result<Option<SyncOutcome>, DeviceReportError> {
        let Some(node) = self.states.node() else {
            return Ok(None);
        };
        let snapshot = self.discover().await?;
        if !snapshot.report_blocking_failures.is_empty() {
            // Keep the Device as last reported (see DeviceSource::failure_keeps_report).
            return Err(DeviceReportError::Discovery(format!(
                "{}; the Device is left as last reported",
                snapshot.report_blocking_failures.join("; ")
            )));
        }
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        let desired = build_desired_device(&snapshot, &now);
        let mut problems = snapshot.problems;
        problems.extend(desired.problems.iter().cloned());
        self.log_problems(problems);

        let fresh = self
            .last_checked
            .is_some_and(|checked| checked.elapsed() < self.resync);
        if fresh
            && self
                .last_reported
                .as_ref()
                .is_some_and(|last| last.same_content(&desired))
        {
            return Ok(Some(SyncOutcome::Unchanged));
        }
        let name = self.states.node_name().to_string();
        let api = kube::Api::<Device>::all(self.client.clone());
        let api_error = |source| DeviceReportError::Api {
            name: name.clone(),
            source,
        };
        let params = kube::api::PostParams::default();
        let outcome = match api.get_opt(&name).await.map_err(api_error)? {
            None if desired.is_empty() => SyncOutcome::NoDevices,
            None => {
                api.create(&params, &desired.new_object(&node))
                    .await
                    .map_err(api_error)?;
                SyncOutcome::Created
            }
            Some(existing) => match desired.change_reason(&existing) {
                None => SyncOutcome::Unchanged,
                Some(reason) => {
                    let mut updated = existing;
                    desired.apply_to(&mut updated);
                    // The resourceVersion read above guards against lost
                    // updates; after a conflict the next round reads again.
                    api.replace(&name, &params, &updated)
                        .await
                        .map_err(api_error)?;
                    SyncOutcome::Updated(reason)
                }
            },
        };
        match &outcome {
            SyncOutcome::Created => tracing::info!(
                name = %name,
                devices = desired.devices.len(),
                "Device created with {} devices",
                desired.devices.len()
            ),
            SyncOutcome::Updated(reason) => {
                tracing::info!(name = %name, reason = %reason, "Device updated: {reason}")
            }
            SyncOutcome::Unchanged => tracing::debug!(name = %name, "Device up to date"),
            SyncOutcome::NoDevices => {
                tracing::debug!(name = %name, "no GPU or RDMA device on this node; no Device")
            }
        }
        self.last_reported = Some(desired);
        self.last_checked = Some(tokio::time::Instant::now());
        Ok(Some(outcome))
    }

    /// Reports until shutdown, at start and every interval.
    pub async fn run(mut self, shutdown: Shutdown) {
        let names: Vec<&str> = self.sources.iter().map(|source| source.name()).collect();
        tracing::info!(interval = ?self.interval, sources = ?names, "reporting the node's devices");
        let mut last_error: Option<String> = None;
        loop {
            match self.report_once().await {
                Ok(_) => {
                    if last_error.take().is_some() {
                        tracing::info!("Device report recovered");
                    }
                }
                Err(err) => {
                    let text = err.to_string();
                    if last_error.as_deref() == Some(text.as_str()) {
                        tracing::debug!(error = %text, "Device report still failing");
                    } else {
                        tracing::warn!(error = %text, "Device report failed: {text}");
                        last_error = Some(text);
                    }
                }
            }
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }
}

/// The node's GPU source, loaded once for the Device report and the GPU
/// usage collector: NVML when `Accelerators` is on and the library loads,
/// with the Xid health watcher started and its book applied to discovery.
pub struct GpuSources {
    /// For the Device report (health from discovery and from Xid events).
    pub report: Arc<dyn DeviceSource>,
    /// For the usage collector.
    pub usage: Arc<dyn DeviceSource>,
}

/// Loads NVML and starts the Xid watcher when `Accelerators` is on; `None`
/// (with the reason logged) otherwise. Blocking.
pub fn load_gpu_sources(feature_gates: &str, stop: Arc<AtomicBool>) -> Option<GpuSources> {
    let (accelerators, _) = report_gates(feature_gates);
    if !accelerators {
        return None;
    }
    let nvml = match super::nvml::NvmlGpuSource::load() {
        Ok(nvml) => Arc::new(nvml),
        Err(reason) => {
            tracing::info!(reason = %reason, "no NVML: GPUs are not reported or measured");
            return None;
        }
    };
    let book = GpuHealthBook::new();
    match nvml.spawn_health_watch(book.clone(), stop) {
        Ok(gpus) => tracing::info!(gpus = ?gpus, "watching GPUs for critical Xid errors"),
        Err(err) => tracing::warn!(error = %err, "GPU Xid errors are not watched: {err}"),
    }
    let usage: Arc<dyn DeviceSource> = nvml;
    Some(GpuSources {
        report: Arc::new(HealthTrackedSource::new(usage.clone(), book)),
        usage,
    })
}

/// `(Accelerators, RDMADevices)` from `--feature-gates`; both default off,
/// as upstream, and RDMA counts only with Accelerators (upstream reports
/// devices under Accelerators and collects RDMA NICs under RDMADevices).
pub fn report_gates(feature_gates: &str) -> (bool, bool) {
    let gates = crate::runtimehooks::hooks::parse_feature_gates(feature_gates).unwrap_or_default();
    let enabled = |gate: &str| gates.get(gate).copied().unwrap_or(false);
    let accelerators = enabled(super::ACCELERATORS_GATE);
    (
        accelerators,
        accelerators && enabled(super::RDMA_DEVICES_GATE),
    )
}

/// Starts the reporter in cluster mode when `Accelerators` is on (upstream's
/// gate, default off), with the XPU device-info files, the GPU source
/// [`load_gpu_sources`] gave (unless `--xpu-enforce-collect-from-device-infos`)
/// and the RDMA sysfs reader when `RDMADevices` is on too.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    feature_gates: &str,
    sys_root: std::path::PathBuf,
    device_args: &super::DeviceArgs,
    gpu: Option<Arc<dyn DeviceSource>>,
    states: &StatesInformer,
    client: Option<kube::Client>,
    interval: Duration,
    shutdown: Shutdown,
) {
    let (accelerators, rdma) = report_gates(feature_gates);
    if !accelerators {
        tracing::info!(
            "devices are not reported (feature gate Accelerators is off, as by default)"
        );
        return;
    }
    let Some(client) = client else {
        tracing::info!("devices are not reported (no API server)");
        return;
    };
    let mut sources: Vec<Arc<dyn DeviceSource>> = vec![Arc::new(
        super::xpu::XpuDeviceInfoSource::new(&device_args.xpu_device_infos_dir),
    )];
    if device_args.xpu_enforce_collect_from_device_infos {
        tracing::info!(
            "GPUs are reported from the XPU device-info files only (--xpu-enforce-collect-from-device-infos)"
        );
    } else {
        sources.extend(gpu);
    }
    if rdma {
        sources.push(Arc::new(super::RdmaSysfsSource::new(&sys_root)));
    } else {
        tracing::info!("RDMA NICs are not reported (feature gate RDMADevices is off)");
    }
    let reporter = DeviceReporter::new(states.clone(), sources, PciSysfs::new(sys_root), client)
        .with_interval(interval);
    tokio::spawn(reporter.run(shutdown));
}
