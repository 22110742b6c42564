//! NodeMetric reporting: node, system, NUMA, host-application and per-pod
//! usage aggregated over the collect policy's windows, and the prod
//! reclaimable and peak estimate, as upstream's NodeMetric informer reports
//! them.
//!
//! [`build_node_metric_status`] is the pure core: collect policy, metric
//! queries ([`UsageQuery`]), pods and the current time in; the status out.
//! [`NodeMetricReporter`] is the shell that runs it at the report interval
//! and writes the result to the API server (status subresource) or a file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::extension::{
    AggregationType, GoDuration, QuantityValue, priority_class_of_pod, qos_class_of_pod,
};
use apis::extension::{RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO};
use apis::scheduling::v1alpha1::{DeviceInfo, DeviceType};
use apis::slo::v1alpha1::{
    AggregatePolicy, AggregatedUsage, HostApplicationMetricInfo, HostApplicationSpec, NUMAUsage,
    NodeMemoryCollectPolicy, NodeMetric, NodeMetricCollectPolicy, NodeMetricInfo, NodeMetricSpec,
    NodeMetricStatus, PeakMetric, PodMetricInfo, ReclaimableMetric, ResourceList, ResourceMap,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_common::Shutdown;
use koord_common::units::{Bytes, MilliCpu};
use kube::api::{Api, Patch, PatchParams};

use super::StatesInformer;
use super::metrics::StatesMetrics;
use crate::metriccache::{
    Aggregation, Entity, GpuDevice, MetricCache, MetricKind, SeriesKey, SeriesLabel,
};
use crate::prediction::checkpoint::Checkpointer;
use crate::prediction::{
    CpuMemory, PeakPredictor, PodForPrediction, PodTrainingSample, Prediction, PredictionConfig,
    ProdReclaimEstimator,
};

/// Upstream's default and smallest aggregation window of `nodeUsage`.
pub const DEFAULT_AGGREGATE_DURATION: Duration = Duration::from_secs(300);
pub const MIN_AGGREGATE_DURATION: Duration = Duration::from_secs(60);
/// Upstream's default and smallest report interval.
pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(60);
pub const MIN_REPORT_INTERVAL: Duration = Duration::from_secs(30);
/// How soon a training round skipped for unsynced pods is tried again.
const TRAINING_RETRY: Duration = Duration::from_secs(1);
/// Upstream's default windows of the aggregated usages.
pub const DEFAULT_AGGREGATE_WINDOWS: [Duration; 3] = [
    Duration::from_secs(5 * 60),
    Duration::from_secs(10 * 60),
    Duration::from_secs(30 * 60),
];
/// A window's aggregates are reported only once samples cover at least this
/// share of it, so a fresh koordlet does not publish a p99 of ten samples as
/// a 30-minute figure.
pub const COLD_START_COVERAGE: f64 = 0.5;

/// The collect policy with upstream's defaults and floors applied.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectPolicy {
    pub aggregate_duration: Duration,
    pub report_interval: Duration,
    pub aggregate_windows: Vec<Duration>,
    pub memory_policy: NodeMemoryCollectPolicy,
}

impl Default for CollectPolicy {
    fn default() -> Self {
        Self {
            aggregate_duration: DEFAULT_AGGREGATE_DURATION,
            report_interval: DEFAULT_REPORT_INTERVAL,
            aggregate_windows: DEFAULT_AGGREGATE_WINDOWS.to_vec(),
            memory_policy: NodeMemoryCollectPolicy::UsageWithoutPageCache,
        }
    }
}

fn seconds_at_least(value: Option<i64>, default: Duration, floor: Duration) -> Duration {
    match value {
        None => default,
        Some(seconds) => Duration::from_secs(u64::try_from(seconds).unwrap_or(0)).max(floor),
    }
}

impl CollectPolicy {
    /// Resolves the spec's policy over the defaults. Window durations that do
    /// not parse (or are not positive) are dropped; their texts are returned
    /// so the caller can log them.
    pub fn from_spec(spec: Option<&NodeMetricSpec>) -> (Self, Vec<String>) {
        let defaults = Self::default();
        let Some(policy) = spec.and_then(|spec| spec.collect_policy.as_ref()) else {
            return (defaults, Vec::new());
        };
        let mut rejected = Vec::new();
        let aggregate_windows = match &policy.node_aggregate_policy {
            Some(aggregate) if !aggregate.durations.is_empty() => aggregate
                .durations
                .iter()
                .filter_map(|text| {
                    let window = GoDuration::parse(text)
                        .ok()
                        .and_then(GoDuration::to_std)
                        .filter(|window| !window.is_zero());
                    if window.is_none() {
                        rejected.push(text.clone());
                    }
                    window
                })
                .collect(),
            _ => defaults.aggregate_windows.clone(),
        };
        let resolved = Self {
            aggregate_duration: seconds_at_least(
                policy.aggregate_duration_seconds,
                DEFAULT_AGGREGATE_DURATION,
                MIN_AGGREGATE_DURATION,
            ),
            report_interval: seconds_at_least(
                policy.report_interval_seconds,
                DEFAULT_REPORT_INTERVAL,
                MIN_REPORT_INTERVAL,
            ),
            aggregate_windows,
            memory_policy: policy
                .node_memory_collect_policy
                .clone()
                .unwrap_or(NodeMemoryCollectPolicy::UsageWithoutPageCache),
        };
        (resolved, rejected)
    }

    /// Upstream's default spec, written with the status in standalone mode.
    pub fn default_spec() -> NodeMetricSpec {
        NodeMetricSpec {
            collect_policy: Some(NodeMetricCollectPolicy {
                aggregate_duration_seconds: Some(DEFAULT_AGGREGATE_DURATION.as_secs() as i64),
                report_interval_seconds: Some(DEFAULT_REPORT_INTERVAL.as_secs() as i64),
                node_aggregate_policy: Some(AggregatePolicy {
                    durations: DEFAULT_AGGREGATE_WINDOWS
                        .iter()
                        .map(|window| GoDuration::from_std(*window).to_string())
                        .collect(),
                }),
                node_memory_collect_policy: Some(NodeMemoryCollectPolicy::UsageWithoutPageCache),
            }),
        }
    }
}

/// A series the reporter reads from the metric cache. CPU is in cores,
/// memory in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageSeries<'a> {
    NodeCpu,
    NodeMemory(&'a NodeMemoryCollectPolicy),
    /// Node usage outside pods and host applications (kernel, daemons).
    SystemCpu,
    SystemMemory,
    PodCpu {
        uid: &'a str,
    },
    PodMemory {
        uid: &'a str,
        policy: &'a NodeMemoryCollectPolicy,
    },
    HostAppCpu {
        name: &'a str,
    },
    HostAppMemory {
        name: &'a str,
        policy: &'a NodeMemoryCollectPolicy,
    },
    /// CPU in use on one NUMA node.
    NumaCpu {
        node: u32,
    },
    /// Memory in use on one NUMA node.
    NumaMemory {
        node: u32,
    },
    /// Σ SM utilisation on one GPU, percent; `pod` narrows it to one pod.
    GpuCore {
        pod: Option<&'a str>,
        gpu: &'a GpuDevice,
    },
    /// Σ GPU memory on one GPU, bytes; `pod` narrows it to one pod.
    GpuMemory {
        pod: Option<&'a str>,
        gpu: &'a GpuDevice,
    },
}

/// The statistic computed over a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UsageStatistic {
    Avg,
    P50,
    P90,
    P95,
    P99,
}

impl UsageStatistic {
    /// The order upstream fills the aggregated usage map in.
    pub const AGGREGATED: [UsageStatistic; 5] = [
        UsageStatistic::Avg,
        UsageStatistic::P50,
        UsageStatistic::P90,
        UsageStatistic::P95,
        UsageStatistic::P99,
    ];

    /// The key in `AggregatedUsage.usage`.
    pub fn aggregation_type(self) -> AggregationType {
        match self {
            UsageStatistic::Avg => AggregationType::Avg,
            UsageStatistic::P50 => AggregationType::P50,
            UsageStatistic::P90 => AggregationType::P90,
            UsageStatistic::P95 => AggregationType::P95,
            UsageStatistic::P99 => AggregationType::P99,
        }
    }
}

/// One aggregate over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowValue {
    pub value: f64,
    /// Time between the first and last sample used.
    pub sample_span: Duration,
}

/// Aggregated reads of the metric cache; `None` when the series has no
/// sample in `[start, end]` (or the cache does not keep that series).
pub trait UsageQuery {
    fn query(
        &self,
        series: UsageSeries<'_>,
        start: SystemTime,
        end: SystemTime,
        statistic: UsageStatistic,
    ) -> Option<WindowValue>;

    /// NUMA nodes with usage series, ascending.
    fn numa_nodes(&self) -> Vec<u32> {
        Vec::new()
    }

    /// The machine's CPUs and memory, standing in for the Node's
    /// allocatable where there is no Node object (standalone mode).
    fn machine_capacity(&self) -> Option<CpuMemory> {
        None
    }

    /// The GPUs the usage collector last saw (none without NVML).
    fn gpu_devices(&self) -> Vec<GpuDevice> {
        Vec::new()
    }
}

/// Reads the metric cache the metrics advisor fills. Memory with the hot
/// page cache is not collected, so that policy reads the default series (as
/// upstream does when cold-page collection is off); pods have no page-cache
/// series, so they always report upstream's default pod memory.
impl UsageQuery for MetricCache {
    fn query(
        &self,
        series: UsageSeries<'_>,
        start: SystemTime,
        end: SystemTime,
        statistic: UsageStatistic,
    ) -> Option<WindowValue> {
        let key = match series {
            UsageSeries::NodeCpu => SeriesKey::node(MetricKind::NodeCpuUsage),
            UsageSeries::NodeMemory(NodeMemoryCollectPolicy::UsageWithPageCache) => {
                SeriesKey::node(MetricKind::NodeMemoryUsageWithPageCache)
            }
            UsageSeries::NodeMemory(_) => SeriesKey::node(MetricKind::NodeMemoryUsage),
            UsageSeries::SystemCpu => SeriesKey::node(MetricKind::SysCpuUsage),
            UsageSeries::SystemMemory => SeriesKey::node(MetricKind::SysMemoryUsage),
            UsageSeries::PodCpu { uid } => SeriesKey::pod(MetricKind::PodCpuUsage, uid),
            UsageSeries::PodMemory { uid, .. } => SeriesKey::pod(MetricKind::PodMemoryUsage, uid),
            UsageSeries::HostAppCpu { name } => {
                SeriesKey::new(MetricKind::HostAppCpuUsage, Entity::host_app(name))
            }
            UsageSeries::HostAppMemory {
                name,
                policy: NodeMemoryCollectPolicy::UsageWithPageCache,
            } => SeriesKey::new(
                MetricKind::HostAppMemoryUsageWithPageCache,
                Entity::host_app(name),
            ),
            UsageSeries::HostAppMemory { name, .. } => {
                SeriesKey::new(MetricKind::HostAppMemoryUsage, Entity::host_app(name))
            }
            UsageSeries::NumaCpu { node } => {
                SeriesKey::node(MetricKind::NodeNumaCpuUsage).with_label(SeriesLabel::Numa(node))
            }
            UsageSeries::NumaMemory { node } => {
                SeriesKey::node(MetricKind::NodeNumaMemoryUsage).with_label(SeriesLabel::Numa(node))
            }
            UsageSeries::GpuCore { pod: None, gpu } => {
                SeriesKey::node(MetricKind::NodeGpuCoreUsage)
                    .with_label(SeriesLabel::Gpu(gpu.label()))
            }
            UsageSeries::GpuMemory { pod: None, gpu } => {
                SeriesKey::node(MetricKind::NodeGpuMemoryUsage)
                    .with_label(SeriesLabel::Gpu(gpu.label()))
            }
            UsageSeries::GpuCore {
                pod: Some(uid),
                gpu,
            } => SeriesKey::pod(MetricKind::PodGpuCoreUsage, uid)
                .with_label(SeriesLabel::Gpu(gpu.label())),
            UsageSeries::GpuMemory {
                pod: Some(uid),
                gpu,
            } => SeriesKey::pod(MetricKind::PodGpuMemoryUsage, uid)
                .with_label(SeriesLabel::Gpu(gpu.label())),
        };
        let aggregation = match statistic {
            UsageStatistic::Avg => Aggregation::Avg,
            UsageStatistic::P50 => Aggregation::P50,
            UsageStatistic::P90 => Aggregation::P90,
            UsageStatistic::P95 => Aggregation::P95,
            UsageStatistic::P99 => Aggregation::P99,
        };
        let window = MetricCache::query(self, &key, start, end);
        Some(WindowValue {
            value: window.value(aggregation)?,
            sample_span: window.duration(),
        })
    }

    fn numa_nodes(&self) -> Vec<u32> {
        let mut nodes: Vec<u32> = self
            .keys_of_kind(MetricKind::NodeNumaCpuUsage)
            .into_iter()
            .filter_map(|key| match key.label {
                SeriesLabel::Numa(node) => Some(node),
                _ => None,
            })
            .collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
    }

    fn gpu_devices(&self) -> Vec<GpuDevice> {
        MetricCache::gpu_devices(self)
            .map(|devices| devices.to_vec())
            .unwrap_or_default()
    }

    fn machine_capacity(&self) -> Option<CpuMemory> {
        let cpus = self.cpu_topology()?.num_cpus();
        let (_, memory) = self.latest(&SeriesKey::node(MetricKind::NodeMemoryTotal))?;
        Some(CpuMemory {
            cpu: MilliCpu(i64::try_from(cpus).ok()?.saturating_mul(1000)),
            // MemTotal, a u64 byte count.
            memory: Bytes(memory as u64),
        })
    }
}

/// What the prod reclaimable estimate needs beside the pods.
pub struct PredictionInputs<'a> {
    pub config: &'a PredictionConfig,
    /// The peak models' percentiles by model id.
    pub predictions: &'a dyn Fn(&str) -> Option<Prediction>,
    /// The Node's allocatable (raw-allocatable annotation first); `None`
    /// makes the reclaimable part of the estimate fail, as upstream.
    pub allocatable: Option<CpuMemory>,
}

/// Everything the status is computed from.
pub struct ReportInputs<'a> {
    pub policy: &'a CollectPolicy,
    pub usage: &'a dyn UsageQuery,
    pub pods: &'a [Pod],
    /// From the NodeSLO; their usage is reported when the cache has it.
    pub host_applications: &'a [HostApplicationSpec],
    /// `None` leaves `prodReclaimableMetric` and `prodPeakMetric` out.
    pub prediction: Option<PredictionInputs<'a>>,
    pub now: SystemTime,
}

/// CPU in cores and memory in bytes, as Kubernetes quantities (upstream
/// truncates to whole milli-cores and bytes).
pub fn cpu_memory_resources(cpu_cores: f64, memory_bytes: f64) -> ResourceList {
    let milli_cores = (cpu_cores * 1000.0) as i64;
    let bytes = memory_bytes as i64;
    BTreeMap::from([
        (
            "cpu".to_string(),
            Quantity(QuantityValue::from_milli(milli_cores).to_decimal_si()),
        ),
        (
            "memory".to_string(),
            Quantity(QuantityValue::from_units(bytes).to_binary_si()),
        ),
    ])
}

fn is_cold(start: SystemTime, end: SystemTime, span: Duration) -> bool {
    let target = end.duration_since(start).unwrap_or_default();
    span.as_secs_f64() < target.as_secs_f64() * COLD_START_COVERAGE
}

/// CPU and memory of one subject over a window; empty when either is
/// missing, or (with `cold_start_filter`) when the samples cover too little
/// of the window.
#[allow(clippy::too_many_arguments)]
fn pair(
    usage: &dyn UsageQuery,
    cpu: UsageSeries<'_>,
    memory: UsageSeries<'_>,
    start: SystemTime,
    end: SystemTime,
    statistic: UsageStatistic,
    cold_start_filter: bool,
    gpus: Option<GpuSubject<'_>>,
) -> ResourceMap {
    let (Some(cpu), Some(memory)) = (
        usage.query(cpu, start, end, statistic),
        usage.query(memory, start, end, statistic),
    ) else {
        return ResourceMap::default();
    };
    if cold_start_filter && is_cold(start, end, cpu.sample_span) {
        return ResourceMap::default();
    }
    ResourceMap {
        resources: cpu_memory_resources(cpu.value, memory.value),
        devices: gpus
            .map(|subject| gpu_usages(usage, subject, start, end, statistic))
            .unwrap_or_default(),
    }
}

/// Whose GPU usage goes with a CPU and memory pair: the node's (`pod`
/// `None`) or one pod's, over `gpus`.
#[derive(Debug, Clone, Copy)]
struct GpuSubject<'a> {
    pod: Option<&'a str>,
    gpus: &'a [GpuDevice],
}

/// Upstream's per-GPU usage entries: `gpu-core` (Σ SM %), `gpu-memory`
/// (bytes) and `gpu-memory-ratio` (percent of the GPU's memory), each
/// truncated to an integer; a GPU missing either series is left out. The
/// ratio is 0 for a GPU whose total memory is unknown.
fn gpu_usages(
    usage: &dyn UsageQuery,
    subject: GpuSubject<'_>,
    start: SystemTime,
    end: SystemTime,
    statistic: UsageStatistic,
) -> Vec<DeviceInfo> {
    subject
        .gpus
        .iter()
        .filter_map(|gpu| {
            let pod = subject.pod;
            let core = usage.query(UsageSeries::GpuCore { pod, gpu }, start, end, statistic)?;
            let memory = usage.query(UsageSeries::GpuMemory { pod, gpu }, start, end, statistic)?;
            let ratio = if gpu.memory_total.0 > 0 {
                (100.0 * memory.value / gpu.memory_total.0 as f64) as i64
            } else {
                0
            };
            let decimal = |value: i64| Quantity(QuantityValue::from_units(value).to_decimal_si());
            Some(DeviceInfo {
                type_: Some(DeviceType::Gpu),
                uuid: Some(gpu.uuid.to_string()),
                minor: Some(gpu.minor),
                resources: Some(BTreeMap::from([
                    (RESOURCE_GPU_CORE.to_string(), decimal(core.value as i64)),
                    (
                        RESOURCE_GPU_MEMORY.to_string(),
                        Quantity(QuantityValue::from_units(memory.value as i64).to_binary_si()),
                    ),
                    (RESOURCE_GPU_MEMORY_RATIO.to_string(), decimal(ratio)),
                ])),
                ..DeviceInfo::default()
            })
        })
        .collect()
}

fn aggregated(
    inputs: &ReportInputs<'_>,
    cpu: UsageSeries<'_>,
    memory: UsageSeries<'_>,
    gpus: Option<GpuSubject<'_>>,
) -> Vec<AggregatedUsage> {
    let end = inputs.now;
    inputs
        .policy
        .aggregate_windows
        .iter()
        .map(|window| {
            let start = end.checked_sub(*window).unwrap_or(SystemTime::UNIX_EPOCH);
            let usage = UsageStatistic::AGGREGATED
                .iter()
                .map(|statistic| {
                    (
                        statistic.aggregation_type().as_str().to_string(),
                        pair(
                            inputs.usage,
                            cpu,
                            memory,
                            start,
                            end,
                            *statistic,
                            true,
                            gpus,
                        ),
                    )
                })
                .collect();
            AggregatedUsage {
                usage,
                duration: Some(GoDuration::from_std(*window).to_string()),
            }
        })
        .collect()
}

/// Builds the NodeMetric status (pure).
pub fn build_node_metric_status(inputs: &ReportInputs<'_>) -> NodeMetricStatus {
    let end = inputs.now;
    let start = end
        .checked_sub(inputs.policy.aggregate_duration)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let memory_policy = &inputs.policy.memory_policy;
    let avg = UsageStatistic::Avg;
    let node_cpu = UsageSeries::NodeCpu;
    let node_memory = UsageSeries::NodeMemory(memory_policy);
    let system_cpu = UsageSeries::SystemCpu;
    let system_memory = UsageSeries::SystemMemory;

    // As upstream: GPU usage goes with the node usage (average and
    // aggregated) and each pod's usage, not with the system usage.
    let gpus = inputs.usage.gpu_devices();
    let node_gpus = (!gpus.is_empty()).then_some(GpuSubject {
        pod: None,
        gpus: &gpus,
    });
    let node_metric = NodeMetricInfo {
        node_usage: pair(
            inputs.usage,
            node_cpu,
            node_memory,
            start,
            end,
            avg,
            false,
            node_gpus,
        ),
        aggregated_node_usages: aggregated(inputs, node_cpu, node_memory, node_gpus),
        system_usage: pair(
            inputs.usage,
            system_cpu,
            system_memory,
            start,
            end,
            avg,
            false,
            None,
        ),
        aggregated_system_usages: aggregated(inputs, system_cpu, system_memory, None),
        numa_usages: numa_usages(inputs.usage, start, end),
    };
    let mut estimator = inputs.prediction.as_ref().map(|prediction| {
        ProdReclaimEstimator::new(
            prediction.config,
            prediction.predictions,
            prediction.allocatable,
            inputs.now,
        )
    });

    let mut pods_metric: Vec<PodMetricInfo> = inputs
        .pods
        .iter()
        .filter_map(|pod| {
            let uid = pod.metadata.uid.as_deref()?;
            let pod_usage = pair(
                inputs.usage,
                UsageSeries::PodCpu { uid },
                UsageSeries::PodMemory {
                    uid,
                    policy: memory_policy,
                },
                start,
                end,
                avg,
                false,
                (!gpus.is_empty()).then_some(GpuSubject {
                    pod: Some(uid),
                    gpus: &gpus,
                }),
            );
            // Upstream leaves out pods the cache has no samples of, from
            // the estimate too.
            if pod_usage.is_empty() {
                return None;
            }
            if let (Some(estimator), Some(meta)) =
                (estimator.as_mut(), PodForPrediction::from_pod(pod))
                && let Err(err) = estimator.add_pod(&meta)
            {
                tracing::debug!(pod = %uid, error = %err, "pod left out of the prod reclaimable estimate");
            }
            Some(PodMetricInfo {
                name: pod.metadata.name.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                pod_usage,
                priority: priority_class_of_pod(pod).as_str().to_string(),
                qos: qos_class_of_pod(pod).as_str().to_string(),
                extensions: None,
            })
        })
        .collect();
    pods_metric.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));

    let mut host_application_metric: Vec<HostApplicationMetricInfo> = inputs
        .host_applications
        .iter()
        .filter_map(|app| {
            let name = app.name.as_str();
            let usage = pair(
                inputs.usage,
                UsageSeries::HostAppCpu { name },
                UsageSeries::HostAppMemory {
                    name,
                    policy: memory_policy,
                },
                start,
                end,
                avg,
                false,
                None,
            );
            (!usage.is_empty()).then(|| HostApplicationMetricInfo {
                name: app.name.clone(),
                usage,
                priority: app.priority.clone(),
                qos: app.qos.clone(),
            })
        })
        .collect();
    host_application_metric.sort_by(|a, b| a.name.cmp(&b.name));

    // As upstream: the reclaimable metric is always present once estimated
    // (empty when the estimate fails), the peak only when it succeeds.
    let (prod_reclaimable_metric, prod_peak_metric) = match estimator {
        None => (None, None),
        Some(estimator) => {
            let result = estimator.finish();
            let reclaimable = match result.reclaimable {
                Ok(value) => cpu_memory_map(value),
                Err(err) => {
                    tracing::debug!(error = %err, "no prod reclaimable estimate this round");
                    ResourceMap::default()
                }
            };
            let peak = result.peak.ok().map(|value| PeakMetric {
                resource: cpu_memory_map(value),
            });
            (
                Some(ReclaimableMetric {
                    resource: reclaimable,
                }),
                peak,
            )
        }
    };

    NodeMetricStatus {
        update_time: k8s_openapi::jiff::Timestamp::try_from(inputs.now)
            .ok()
            .map(Time),
        node_metric: Some(node_metric),
        pods_metric,
        host_application_metric,
        prod_reclaimable_metric,
        prod_peak_metric,
    }
}

fn cpu_memory_map(value: CpuMemory) -> ResourceMap {
    ResourceMap {
        resources: BTreeMap::from([
            (
                "cpu".to_string(),
                Quantity(QuantityValue::from_milli(value.cpu.0).to_decimal_si()),
            ),
            (
                "memory".to_string(),
                Quantity(QuantityValue::from_units(value.memory.as_i64()).to_binary_si()),
            ),
        ]),
        devices: Vec::new(),
    }
}

/// Average usage per NUMA node over `[start, end]`; nodes missing either
/// series are left out (upstream also reports a per-NUMA system usage,
/// which needs per-NUMA pod accounting this build does not collect).
fn numa_usages(usage: &dyn UsageQuery, start: SystemTime, end: SystemTime) -> Vec<NUMAUsage> {
    usage
        .numa_nodes()
        .into_iter()
        .filter_map(|node| {
            let node_usage = pair(
                usage,
                UsageSeries::NumaCpu { node },
                UsageSeries::NumaMemory { node },
                start,
                end,
                UsageStatistic::Avg,
                false,
                None,
            );
            if node_usage.is_empty() {
                return None;
            }
            Some(NUMAUsage {
                numa_node_id: i32::try_from(node).ok()?,
                node_usage,
                system_usage: ResourceMap::default(),
            })
        })
        .collect()
}

/// A JSON merge patch that replaces the whole status: fields the new status
/// leaves out are sent as `null` so stale values do not survive the merge.
pub fn status_merge_patch(
    status: &NodeMetricStatus,
) -> Result<serde_json::Value, serde_json::Error> {
    const STATUS_KEYS: [&str; 6] = [
        "updateTime",
        "nodeMetric",
        "podsMetric",
        "hostApplicationMetric",
        "prodReclaimableMetric",
        "prodPeakMetric",
    ];
    const NODE_METRIC_KEYS: [&str; 5] = [
        "nodeUsage",
        "aggregatedNodeUsages",
        "systemUsage",
        "aggregatedSystemUsages",
        "numaUsages",
    ];
    let mut value = serde_json::to_value(status)?;
    if let Some(object) = value.as_object_mut() {
        for key in STATUS_KEYS {
            object.entry(key).or_insert(serde_json::Value::Null);
        }
        if let Some(node_metric) = object.get_mut("nodeMetric").and_then(|v| v.as_object_mut()) {
            for key in NODE_METRIC_KEYS {
                node_metric.entry(key).or_insert(serde_json::Value::Null);
            }
        }
    }
    Ok(serde_json::json!({ "status": value }))
}

/// Where reports go.
#[derive(Clone)]
pub enum ReportSink {
    /// The NodeMetric's status subresource (cluster mode).
    ApiServer(kube::Client),
    /// A file holding the whole NodeMetric (standalone mode).
    File(PathBuf),
}

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("NodeMetric {0} does not exist yet (koord-manager creates it); skipping this report")]
    NoNodeMetric(String),
    #[error("cannot encode NodeMetric {name}: {reason}")]
    Encode { name: String, reason: String },
    #[error("cannot update the status of NodeMetric {name}: {source}")]
    Patch {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot write the NodeMetric to {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the NodeMetric writer stopped unexpectedly: {0}")]
    WriteTask(String),
}

/// The NodeMetric object written in standalone mode.
pub fn standalone_node_metric(
    node_name: &str,
    spec: NodeMetricSpec,
    status: NodeMetricStatus,
) -> NodeMetric {
    let mut object = NodeMetric::new(node_name, spec);
    object.status = Some(status);
    object
}

/// Serialises as YAML for `.yaml`/`.yml` paths, JSON otherwise.
pub fn encode_for_path(path: &Path, object: &NodeMetric) -> Result<String, String> {
    let yaml = path
        .extension()
        .and_then(|ext| ext.to_str())
        .is_some_and(|ext| ext.eq_ignore_ascii_case("yaml") || ext.eq_ignore_ascii_case("yml"));
    if yaml {
        apis::yaml::to_string(object).map_err(|err| err.to_string())
    } else {
        serde_json::to_string_pretty(object)
            .map(|text| text + "\n")
            .map_err(|err| err.to_string())
    }
}

/// Replaces `path` atomically (write a sibling, then rename) so readers
/// never see half a file.
pub fn write_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| "node-metric".to_string());
    let temporary = path.with_file_name(format!(".{file_name}.tmp-{}", std::process::id()));
    std::fs::write(&temporary, contents)?;
    std::fs::rename(&temporary, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temporary);
    })
}

/// Runs the report loop, and trains the peak models the prod reclaimable
/// estimate uses.
pub struct NodeMetricReporter {
    states: StatesInformer,
    usage: Arc<dyn UsageQuery + Send + Sync>,
    sink: ReportSink,
    interval_override: Option<Duration>,
    metrics: Option<StatesMetrics>,
    predictor: Option<Arc<std::sync::Mutex<PeakPredictor>>>,
    checkpointer: Option<Checkpointer>,
}

impl NodeMetricReporter {
    pub fn new(
        states: StatesInformer,
        usage: Arc<dyn UsageQuery + Send + Sync>,
        sink: ReportSink,
    ) -> Self {
        Self {
            states,
            usage,
            sink,
            interval_override: None,
            metrics: None,
            predictor: None,
            checkpointer: None,
        }
        .with_prediction(Some(PredictionConfig::default()))
    }

    /// Replaces the predictor's configuration (upstream's defaults unless
    /// set); `None` stops training and leaves the prod metrics out.
    pub fn with_prediction(mut self, config: Option<PredictionConfig>) -> Self {
        self.predictor = config.and_then(|config| match PeakPredictor::new(config) {
            Ok(predictor) => Some(Arc::new(std::sync::Mutex::new(predictor))),
            Err(err) => {
                tracing::warn!(error = %err, "invalid prediction configuration; prod reclaimable is not reported");
                None
            }
        });
        self
    }

    /// Loads `restored` models (read from the checkpoint at start) into the
    /// predictor and saves the checkpoint with `checkpointer` from now on.
    /// `now` decides which restored models already expired.
    pub fn with_checkpointer(
        mut self,
        checkpointer: Checkpointer,
        restored: &[crate::prediction::ModelSnapshot],
        now: SystemTime,
    ) -> Self {
        if let Some(predictor) = &self.predictor
            && let Ok(mut predictor) = predictor.lock()
            && !restored.is_empty()
        {
            let report = predictor.restore_models(restored, now);
            for problem in &report.invalid {
                tracing::warn!(%problem, "peak model of the checkpoint skipped");
            }
            tracing::info!(
                restored = report.restored,
                expired = report.expired,
                skipped = report.invalid.len(),
                "peak models restored from the checkpoint"
            );
        }
        self.checkpointer = Some(checkpointer);
        self
    }

    /// Saves the checkpoint (off the reactor); false when there is nothing
    /// to save or the save failed (logged).
    pub async fn save_checkpoint(&self, now: SystemTime) -> bool {
        let Some(checkpointer) = self.checkpointer.clone() else {
            return false;
        };
        let checkpoint = {
            let Some(predictor) = self.predictor.as_ref() else {
                return false;
            };
            let Ok(predictor) = predictor.lock() else {
                return false;
            };
            if !predictor.has_synced() && predictor.model_count() == 0 {
                return false;
            }
            checkpointer.build(&predictor, now)
        };
        let dir = checkpointer.dir().display().to_string();
        match tokio::task::spawn_blocking(move || checkpointer.save_blocking(&checkpoint)).await {
            Ok(Ok(bytes)) => {
                tracing::debug!(%dir, bytes, "prediction checkpoint saved");
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(%dir, %error, "prediction checkpoint not saved");
                false
            }
            Err(error) => {
                tracing::warn!(%dir, %error, "prediction checkpoint task failed");
                false
            }
        }
    }

    /// One training round of the peak models from the last training
    /// interval's samples (p90 of each series, as upstream), then model GC.
    /// Returns false, training nothing, until the pods have synced: without
    /// them the whole node's usage would be trained as the system's share,
    /// one sample that can lift the system peak by every pod's usage (as
    /// upstream, which waits for its informer before the first round).
    pub fn train_once(&self, now: SystemTime) -> bool {
        let Some(predictor) = &self.predictor else {
            return false;
        };
        let Some(pods) = self.states.pods() else {
            tracing::debug!("pods not synced yet; peak models not trained");
            return false;
        };
        let Ok(mut predictor) = predictor.lock() else {
            return false;
        };
        let start = now
            .checked_sub(predictor.config().training_interval)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let query = |series| {
            self.usage
                .query(series, start, now, UsageStatistic::P90)
                .map(|window| window.value)
        };
        let default_policy = NodeMemoryCollectPolicy::UsageWithoutPageCache;
        let samples: Vec<PodTrainingSample> = pods
            .pods
            .iter()
            .filter_map(|pod| {
                let uid = pod.metadata.uid.as_deref()?;
                Some(PodTrainingSample {
                    uid: uid.into(),
                    priority: priority_class_of_pod(pod),
                    cpu: query(UsageSeries::PodCpu { uid }),
                    memory: query(UsageSeries::PodMemory {
                        uid,
                        policy: &default_policy,
                    }),
                })
            })
            .collect();
        let node = query(UsageSeries::NodeCpu).zip(query(UsageSeries::NodeMemory(&default_policy)));
        predictor.train(now, &samples, node);
        let removed = predictor.gc(now);
        if removed > 0 {
            tracing::debug!(removed, "expired peak models dropped");
        }
        true
    }

    /// How often [`NodeMetricReporter::run`] trains: the configured
    /// interval, or the report interval when that is shorter, so that short
    /// report intervals (tests, demos) have trained models to report from.
    pub fn training_interval(&self, report_interval: Duration) -> Option<Duration> {
        let predictor = self.predictor.as_ref()?.lock().ok()?;
        Some(predictor.config().training_interval.min(report_interval))
    }

    /// Reports at this interval regardless of the collect policy.
    pub fn with_interval_override(mut self, interval: Option<Duration>) -> Self {
        self.interval_override = interval;
        self
    }

    pub fn with_metrics(mut self, metrics: StatesMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The NodeMetric spec in force: the watched object's, else the default.
    fn spec(&self) -> Option<NodeMetricSpec> {
        self.states.node_metric().map(|object| object.spec.clone())
    }

    /// The policy in force and the report interval it implies.
    pub fn policy(&self) -> CollectPolicy {
        let (mut policy, rejected) = CollectPolicy::from_spec(self.spec().as_ref());
        if !rejected.is_empty() {
            tracing::warn!(
                ?rejected,
                "ignoring NodeMetric aggregate durations that do not parse"
            );
        }
        if let Some(interval) = self.interval_override {
            policy.report_interval = interval;
        }
        policy
    }

    /// The status for `now` from the current states and metric cache.
    pub fn build_status(&self, policy: &CollectPolicy, now: SystemTime) -> NodeMetricStatus {
        let pods = self.states.pods();
        let node_slo = self.states.node_slo();
        let host_applications = node_slo
            .as_ref()
            .map(|slo| slo.spec.host_applications.as_slice())
            .unwrap_or_default();
        let predictor = self
            .predictor
            .as_ref()
            .and_then(|predictor| predictor.lock().ok());
        let lookup = |id: &str| predictor.as_ref().and_then(|p| p.prediction(id));
        // Without a Node object (standalone) the machine's size stands in.
        let allocatable = match self.states.node() {
            Some(node) => crate::prediction::node_allocatable(&node),
            None => self.usage.machine_capacity(),
        };
        let prediction = predictor.as_ref().map(|predictor| PredictionInputs {
            config: predictor.config(),
            predictions: &lookup,
            allocatable,
        });
        build_node_metric_status(&ReportInputs {
            policy,
            usage: self.usage.as_ref(),
            pods: pods.as_ref().map(|s| s.pods.as_slice()).unwrap_or_default(),
            host_applications,
            prediction,
            now,
        })
    }

    /// Builds and writes one report.
    pub async fn report_once(&self) -> Result<NodeMetricStatus, ReportError> {
        let policy = self.policy();
        let status = self.build_status(&policy, SystemTime::now());
        if let Some(metrics) = &self.metrics {
            metrics.set_reported_usage(
                usage_of(status.node_metric.as_ref().map(|m| &m.node_usage)),
                usage_of(status.node_metric.as_ref().map(|m| &m.system_usage)),
            );
            if let Some(reclaimable) = &status.prod_reclaimable_metric {
                metrics.set_prod_reclaimable(usage_of(Some(&reclaimable.resource)));
            }
        }
        let name = self.states.node_name().to_string();
        let result = match &self.sink {
            ReportSink::ApiServer(client) => {
                if self.states.node_metric().is_none() {
                    Err(ReportError::NoNodeMetric(name))
                } else {
                    self.patch_status(client, &name, &status).await
                }
            }
            ReportSink::File(path) => {
                let spec = self.spec().unwrap_or_else(CollectPolicy::default_spec);
                let object = standalone_node_metric(&name, spec, status.clone());
                let contents = encode_for_path(path, &object)
                    .map_err(|reason| ReportError::Encode { name, reason })?;
                let path = path.clone();
                tokio::task::spawn_blocking(move || {
                    write_atomically(&path, &contents)
                        .map_err(|source| ReportError::Write { path, source })
                })
                .await
                .map_err(|err| ReportError::WriteTask(err.to_string()))?
            }
        };
        if let Some(metrics) = &self.metrics {
            metrics.count_node_metric_report(if result.is_ok() {
                "succeeded"
            } else {
                "failed"
            });
        }
        result.map(|()| status)
    }

    async fn patch_status(
        &self,
        client: &kube::Client,
        name: &str,
        status: &NodeMetricStatus,
    ) -> Result<(), ReportError> {
        let patch = status_merge_patch(status).map_err(|err| ReportError::Encode {
            name: name.to_string(),
            reason: err.to_string(),
        })?;
        Api::<NodeMetric>::all(client.clone())
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|source| ReportError::Patch {
                name: name.to_string(),
                source,
            })
    }

    /// Reports every interval (re-read from the spec after each report, as
    /// upstream does) until shutdown.
    pub async fn run(self, shutdown: Shutdown) {
        use tokio::time::{Instant, sleep_until};
        let mut interval = self.policy().report_interval;
        tracing::info!(?interval, sink = self.sink_name(), "reporting NodeMetric");
        let started = Instant::now();
        let mut next_report = started + interval;
        // Upstream trains once at start, then every training interval.
        let mut next_training = self.training_interval(interval).map(|_| started);
        // The first checkpoint follows the first training round.
        let mut next_checkpoint = started;
        loop {
            let wake = next_training.map_or(next_report, |training| training.min(next_report));
            tokio::select! {
                _ = shutdown.wait() => {
                    self.save_checkpoint(SystemTime::now()).await;
                    return;
                }
                _ = sleep_until(wake) => {}
            }
            let now = Instant::now();
            if next_training.is_some_and(|training| now >= training) {
                let trained = self.train_once(SystemTime::now());
                next_training = if trained {
                    self.training_interval(interval).map(|every| now + every)
                } else {
                    // Pods not synced yet: try again soon rather than a
                    // whole training interval later.
                    Some(now + TRAINING_RETRY)
                };
                if trained
                    && let Some(checkpointer) = &self.checkpointer
                    && now >= next_checkpoint
                {
                    next_checkpoint = now + checkpointer.interval();
                    self.save_checkpoint(SystemTime::now()).await;
                }
            }
            if now < next_report {
                continue;
            }
            match self.report_once().await {
                Ok(status) => tracing::debug!(
                    pods = status.pods_metric.len(),
                    "NodeMetric status reported"
                ),
                Err(err @ ReportError::NoNodeMetric(_)) => tracing::warn!("{err}"),
                Err(err) => tracing::warn!(error = %err, "NodeMetric report failed"),
            }
            interval = self.policy().report_interval;
            next_report = Instant::now() + interval;
        }
    }

    fn sink_name(&self) -> String {
        match &self.sink {
            ReportSink::ApiServer(_) => "apiserver".to_string(),
            ReportSink::File(path) => path.display().to_string(),
        }
    }
}

/// (cores, bytes) of a reported resource map.
fn usage_of(map: Option<&ResourceMap>) -> Option<(f64, f64)> {
    let resources = &map?.resources;
    let cpu = QuantityValue::of(resources.get("cpu")?).ok()?;
    let memory = QuantityValue::of(resources.get("memory")?).ok()?;
    Some((cpu.milli_value() as f64 / 1000.0, memory.value() as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A fake cache holding raw samples per series; aggregates are computed
    /// here by hand-checked rules (mean; upstream's lower nearest rank).
    #[derive(Default)]
    struct Samples {
        series: HashMap<String, Vec<(SystemTime, f64)>>,
    }

    fn key(series: UsageSeries<'_>) -> String {
        match series {
            UsageSeries::NodeCpu => "node/cpu".into(),
            UsageSeries::NodeMemory(_) => "node/memory".into(),
            UsageSeries::SystemCpu => "system/cpu".into(),
            UsageSeries::SystemMemory => "system/memory".into(),
            UsageSeries::PodCpu { uid } => format!("pod/{uid}/cpu"),
            UsageSeries::PodMemory { uid, .. } => format!("pod/{uid}/memory"),
            UsageSeries::HostAppCpu { name } => format!("app/{name}/cpu"),
            UsageSeries::HostAppMemory { name, .. } => format!("app/{name}/memory"),
            UsageSeries::NumaCpu { node } => format!("numa/{node}/cpu"),
            UsageSeries::NumaMemory { node } => format!("numa/{node}/memory"),
            UsageSeries::GpuCore { pod, gpu } => {
                format!("gpu/{}/{}/core", pod.unwrap_or("node"), gpu.minor)
            }
            UsageSeries::GpuMemory { pod, gpu } => {
                format!("gpu/{}/{}/memory", pod.unwrap_or("node"), gpu.minor)
            }
        }
    }

    impl Samples {
        fn add(&mut self, series: &str, at: SystemTime, values: &[f64], step: Duration) {
            let samples = self.series.entry(series.to_string()).or_default();
            for (index, value) in values.iter().enumerate() {
                samples.push((at + step * index as u32, *value));
            }
        }
    }

    impl UsageQuery for Samples {
        fn query(
            &self,
            series: UsageSeries<'_>,
            start: SystemTime,
            end: SystemTime,
            statistic: UsageStatistic,
        ) -> Option<WindowValue> {
            let mut in_window: Vec<(SystemTime, f64)> = self
                .series
                .get(&key(series))?
                .iter()
                .copied()
                .filter(|(at, _)| *at >= start && *at <= end)
                .collect();
            if in_window.is_empty() {
                return None;
            }
            let first = in_window.first()?.0;
            let last = in_window.last()?.0;
            let mut values: Vec<f64> = in_window.drain(..).map(|(_, v)| v).collect();
            let value = match statistic {
                UsageStatistic::Avg => values.iter().sum::<f64>() / values.len() as f64,
                other => {
                    // Upstream's rule: index floor(n * p) - 1, at least 0.
                    values.sort_by(f64::total_cmp);
                    let permille = match other {
                        UsageStatistic::P50 => 500,
                        UsageStatistic::P90 => 900,
                        UsageStatistic::P95 => 950,
                        _ => 990,
                    };
                    let index = (values.len() * permille / 1000).saturating_sub(1);
                    values[index]
                }
            };
            Some(WindowValue {
                value,
                sample_span: last.duration_since(first).unwrap_or_default(),
            })
        }

        fn numa_nodes(&self) -> Vec<u32> {
            let mut nodes: Vec<u32> = self
                .series
                .keys()
                .filter_map(|key| {
                    key.strip_prefix("numa/")?
                        .strip_suffix("/cpu")?
                        .parse()
                        .ok()
                })
                .collect();
            nodes.sort_unstable();
            nodes
        }
    }

    fn pod(namespace: &str, name: &str, uid: &str, labels: &[(&str, &str)], kube_qos: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": namespace, "uid": uid,
                "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
            },
            "status": {"qosClass": kube_qos},
        }))
        .unwrap()
    }

    fn quantity(map: &ResourceMap, name: &str) -> String {
        map.resources
            .get(name)
            .map(|q| q.0.clone())
            .unwrap_or_default()
    }

    const T0: u64 = 1_700_000_000;
    const GI: f64 = 1024.0 * 1024.0 * 1024.0;

    #[test]
    fn collect_policy_defaults_and_floors_follow_upstream() {
        let (policy, rejected) = CollectPolicy::from_spec(None);
        assert_eq!(policy, CollectPolicy::default());
        assert!(rejected.is_empty());
        assert_eq!(policy.aggregate_duration, Duration::from_secs(300));
        assert_eq!(policy.report_interval, Duration::from_secs(60));
        assert_eq!(
            policy.aggregate_windows,
            [300, 600, 1800].map(Duration::from_secs)
        );

        let spec: NodeMetricSpec = serde_json::from_value(serde_json::json!({
            "metricCollectPolicy": {
                "aggregateDurationSeconds": 10,
                "reportIntervalSeconds": 5,
                "nodeAggregatePolicy": {"durations": ["1m", "bogus", "0s", "1h30m"]},
                "nodeMemoryCollectPolicy": "usageWithPageCache"
            }
        }))
        .unwrap();
        let (policy, rejected) = CollectPolicy::from_spec(Some(&spec));
        assert_eq!(
            policy.aggregate_duration,
            Duration::from_secs(60),
            "floor 60s"
        );
        assert_eq!(policy.report_interval, Duration::from_secs(30), "floor 30s");
        assert_eq!(
            policy.aggregate_windows,
            [60, 5400].map(Duration::from_secs)
        );
        assert_eq!(rejected, ["bogus", "0s"]);
        assert_eq!(
            policy.memory_policy,
            NodeMemoryCollectPolicy::UsageWithPageCache
        );

        let spec: NodeMetricSpec = serde_json::from_value(serde_json::json!({
            "metricCollectPolicy": {"aggregateDurationSeconds": 900}
        }))
        .unwrap();
        let (policy, _) = CollectPolicy::from_spec(Some(&spec));
        assert_eq!(policy.aggregate_duration, Duration::from_secs(900));
        assert_eq!(policy.report_interval, Duration::from_secs(60));
        assert_eq!(policy.aggregate_windows.len(), 3);

        let default_spec = serde_json::to_value(CollectPolicy::default_spec()).unwrap();
        assert_eq!(
            default_spec,
            serde_json::json!({"metricCollectPolicy": {
                "aggregateDurationSeconds": 300,
                "reportIntervalSeconds": 60,
                "nodeAggregatePolicy": {"durations": ["5m0s", "10m0s", "30m0s"]},
                "nodeMemoryCollectPolicy": "usageWithoutPageCache"
            }})
        );
    }

    #[test]
    fn quantities_are_truncated_like_upstream() {
        let cases: &[(f64, f64, &str, &str)] = &[
            (1.5, 1024.0, "1500m", "1Ki"),
            (2.0, 2.0 * GI, "2", "2Gi"),
            (0.0004, 1000.0, "0", "1k"),
            (0.2999, 1536.5, "299m", "1536"),
        ];
        for (cores, bytes, cpu, memory) in cases {
            let list = cpu_memory_resources(*cores, *bytes);
            assert_eq!(list["cpu"].0, *cpu, "{cores}");
            assert_eq!(list["memory"].0, *memory, "{bytes}");
        }
    }

    /// Node samples every 10 s for 10 minutes; two pods with 60 samples in
    /// the last 10 minutes; one pod without samples.
    #[test]
    fn status_has_averages_percentiles_windows_and_sorted_pods() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0);
        let step = Duration::from_secs(10);
        // Samples at now-595 s, now-585 s, …, now-5 s.
        let begin = now - Duration::from_secs(595);
        let mut samples = Samples::default();
        // Node CPU: 1..=60 cores across the last 10 minutes, memory constant 4 GiB.
        let cpu: Vec<f64> = (1..=60).map(f64::from).collect();
        samples.add("node/cpu", begin, &cpu, step);
        samples.add("node/memory", begin, &[4.0 * GI; 60], step);
        samples.add("system/cpu", begin, &[0.25; 60], step);
        samples.add("system/memory", begin, &[GI; 60], step);
        samples.add("pod/uid-b/cpu", begin, &[0.5; 60], step);
        samples.add(
            "pod/uid-b/memory",
            begin,
            &[512.0 * 1024.0 * 1024.0; 60],
            step,
        );
        samples.add("pod/uid-a/cpu", begin, &[1.0, 2.0].repeat(30), step);
        samples.add("pod/uid-a/memory", begin, &[GI; 60], step);

        let pods = vec![
            pod("prod", "web", "uid-b", &[], "Guaranteed"),
            pod(
                "batch",
                "job",
                "uid-a",
                &[
                    ("koordinator.sh/qosClass", "BE"),
                    ("koordinator.sh/priority-class", "koord-batch"),
                ],
                "BestEffort",
            ),
            pod("prod", "no-samples", "uid-c", &[], "Burstable"),
        ];
        let policy = CollectPolicy::default();
        let status = build_node_metric_status(&ReportInputs {
            policy: &policy,
            prediction: None,
            usage: &samples,
            pods: &pods,
            host_applications: &[],
            now,
        });

        assert_eq!(
            serde_json::to_value(&status.update_time).unwrap(),
            serde_json::json!("2023-11-14T22:13:20Z")
        );
        let node = status.node_metric.as_ref().unwrap();
        // nodeUsage averages the last 300 s: samples 31..=60 → mean 45.5 cores.
        assert_eq!(quantity(&node.node_usage, "cpu"), "45500m");
        assert_eq!(quantity(&node.node_usage, "memory"), "4Gi");
        assert_eq!(quantity(&node.system_usage, "cpu"), "250m");
        assert_eq!(quantity(&node.system_usage, "memory"), "1Gi");

        // Windows 5m and 10m have enough coverage; 30m does not (590 s of samples < 900 s).
        assert_eq!(node.aggregated_node_usages.len(), 3);
        let five = &node.aggregated_node_usages[0];
        assert_eq!(five.duration.as_deref(), Some("5m0s"));
        // 5m window [now-300, now]: samples 31..=60 → 30 values; index floor(30p)-1:
        // p50 → 14 → 45, p90 → 26 → 57, p95 → 27 → 58, p99 → 28 → 59.
        let cpu_of = |usage: &AggregatedUsage, key: &str| quantity(&usage.usage[key], "cpu");
        assert_eq!(cpu_of(five, "avg"), "45500m");
        assert_eq!(cpu_of(five, "p50"), "45");
        assert_eq!(cpu_of(five, "p90"), "57");
        assert_eq!(cpu_of(five, "p95"), "58");
        assert_eq!(cpu_of(five, "p99"), "59");
        let ten = &node.aggregated_node_usages[1];
        assert_eq!(ten.duration.as_deref(), Some("10m0s"));
        // All 60 samples: avg 30.5; p50 → index 29 → 30, p90 → 53 → 54, p95 → 56 → 57,
        // p99 → floor(59.4)-1 = 58 → 59.
        assert_eq!(cpu_of(ten, "avg"), "30500m");
        assert_eq!(cpu_of(ten, "p50"), "30");
        assert_eq!(cpu_of(ten, "p90"), "54");
        assert_eq!(cpu_of(ten, "p95"), "57");
        assert_eq!(cpu_of(ten, "p99"), "59");
        let thirty = &node.aggregated_node_usages[2];
        assert_eq!(thirty.duration.as_deref(), Some("30m0s"));
        assert_eq!(thirty.usage.len(), 5, "every key present, as upstream");
        assert!(
            thirty.usage.values().all(ResourceMap::is_empty),
            "cold start"
        );
        assert_eq!(
            quantity(&node.aggregated_system_usages[0].usage["p99"], "memory"),
            "1Gi"
        );

        // Pods sorted by namespace then name; the pod without samples is left out.
        let names: Vec<_> = status
            .pods_metric
            .iter()
            .map(|p| format!("{}/{}", p.namespace, p.name))
            .collect();
        assert_eq!(names, ["batch/job", "prod/web"]);
        let job = &status.pods_metric[0];
        assert_eq!(
            (job.qos.as_str(), job.priority.as_str()),
            ("BE", "koord-batch")
        );
        // Last 300 s of 1,2,1,2…: 15 ones and 15 twos → 1.5 cores.
        assert_eq!(quantity(&job.pod_usage, "cpu"), "1500m");
        assert_eq!(quantity(&job.pod_usage, "memory"), "1Gi");
        let web = &status.pods_metric[1];
        assert_eq!(
            (web.qos.as_str(), web.priority.as_str()),
            ("LSR", "koord-prod")
        );
        assert_eq!(quantity(&web.pod_usage, "cpu"), "500m");
        assert_eq!(quantity(&web.pod_usage, "memory"), "512Mi");
        assert!(status.host_application_metric.is_empty());
        assert_eq!(status.prod_reclaimable_metric, None);
    }

    #[test]
    fn empty_cache_yields_an_empty_but_valid_status() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0);
        let policy = CollectPolicy {
            aggregate_windows: vec![Duration::from_secs(60)],
            ..CollectPolicy::default()
        };
        let pods = vec![pod("a", "b", "u", &[], "Burstable")];
        let status = build_node_metric_status(&ReportInputs {
            policy: &policy,
            prediction: None,
            usage: &Samples::default(),
            pods: &pods,
            host_applications: &[],
            now,
        });
        let node = status.node_metric.unwrap();
        assert!(node.node_usage.is_empty() && node.system_usage.is_empty());
        assert_eq!(node.aggregated_node_usages.len(), 1);
        assert!(status.pods_metric.is_empty());
    }

    #[test]
    fn host_applications_are_reported_when_the_cache_has_them() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0);
        let mut samples = Samples::default();
        let begin = now - Duration::from_secs(100);
        samples.add("app/nginx/cpu", begin, &[0.1, 0.3], Duration::from_secs(50));
        samples.add(
            "app/nginx/memory",
            begin,
            &[1000.0, 3000.0],
            Duration::from_secs(50),
        );
        let apps = vec![
            HostApplicationSpec {
                name: "nginx".into(),
                priority: "koord-prod".into(),
                qos: "LS".into(),
                ..Default::default()
            },
            HostApplicationSpec {
                name: "unknown".into(),
                ..Default::default()
            },
        ];
        let status = build_node_metric_status(&ReportInputs {
            policy: &CollectPolicy::default(),
            prediction: None,
            usage: &samples,
            pods: &[],
            host_applications: &apps,
            now,
        });
        assert_eq!(status.host_application_metric.len(), 1);
        let app = &status.host_application_metric[0];
        assert_eq!(app.name, "nginx");
        assert_eq!(quantity(&app.usage, "cpu"), "200m");
        assert_eq!(quantity(&app.usage, "memory"), "2000");
        assert_eq!(
            (app.priority.as_str(), app.qos.as_str()),
            ("koord-prod", "LS")
        );
    }

    #[test]
    fn the_metric_cache_adapter_feeds_the_builder() {
        use crate::metriccache::{MetricCacheConfig, Sample};
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0);
        let cache = MetricCache::new(MetricCacheConfig::default()).unwrap();
        let mut samples = Vec::new();
        // 120 s of 1 s samples: node CPU alternating 3 and 5 cores, pod CPU 1.25 cores.
        for second in 0..120u32 {
            let at = now - Duration::from_secs(119) + Duration::from_secs(u64::from(second));
            let node_cpu = if second % 2 == 0 { 3.0 } else { 5.0 };
            samples.push(Sample::new(
                SeriesKey::node(MetricKind::NodeCpuUsage),
                at,
                node_cpu,
            ));
            samples.push(Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                at,
                8.0 * GI,
            ));
            samples.push(Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsageWithPageCache),
                at,
                10.0 * GI,
            ));
            samples.push(Sample::new(
                SeriesKey::node(MetricKind::SysCpuUsage),
                at,
                0.5,
            ));
            samples.push(Sample::new(
                SeriesKey::node(MetricKind::SysMemoryUsage),
                at,
                GI,
            ));
            samples.push(Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, "uid-a"),
                at,
                1.25,
            ));
            samples.push(Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-a"),
                at,
                256.0 * 1024.0 * 1024.0,
            ));
        }
        assert!(cache.append(&samples).rejected.is_empty());
        let pods = vec![pod("default", "a", "uid-a", &[], "Burstable")];
        let policy = CollectPolicy {
            aggregate_windows: vec![Duration::from_secs(60), Duration::from_secs(600)],
            ..CollectPolicy::default()
        };
        let status = build_node_metric_status(&ReportInputs {
            policy: &policy,
            prediction: None,
            usage: &cache,
            pods: &pods,
            host_applications: &[],
            now,
        });
        let node = status.node_metric.as_ref().unwrap();
        assert_eq!(quantity(&node.node_usage, "cpu"), "4");
        assert_eq!(quantity(&node.node_usage, "memory"), "8Gi");
        assert_eq!(quantity(&node.system_usage, "cpu"), "500m");
        assert_eq!(quantity(&node.system_usage, "memory"), "1Gi");
        let minute = &node.aggregated_node_usages[0];
        // 61 samples of 3,5,3,…,3 → p50 index 29 → 3 cores; p99 index 59 → 5 cores.
        assert_eq!(quantity(&minute.usage["p50"], "cpu"), "3");
        assert_eq!(quantity(&minute.usage["p99"], "cpu"), "5");
        assert!(
            node.aggregated_node_usages[1]
                .usage
                .values()
                .all(ResourceMap::is_empty),
            "119 s of samples is a cold 10-minute window"
        );
        assert_eq!(status.pods_metric.len(), 1);
        assert_eq!(quantity(&status.pods_metric[0].pod_usage, "cpu"), "1250m");
        assert_eq!(
            quantity(&status.pods_metric[0].pod_usage, "memory"),
            "256Mi"
        );

        let with_cache = CollectPolicy {
            memory_policy: NodeMemoryCollectPolicy::UsageWithPageCache,
            ..policy
        };
        let status = build_node_metric_status(&ReportInputs {
            policy: &with_cache,
            prediction: None,
            usage: &cache,
            pods: &[],
            host_applications: &[],
            now,
        });
        let node = status.node_metric.unwrap();
        assert_eq!(quantity(&node.node_usage, "memory"), "10Gi");
    }

    #[test]
    fn merge_patch_nulls_what_the_new_status_omits() {
        let status = NodeMetricStatus {
            node_metric: Some(NodeMetricInfo::default()),
            ..Default::default()
        };
        let patch = status_merge_patch(&status).unwrap();
        assert_eq!(
            patch,
            serde_json::json!({"status": {
                "updateTime": null,
                "nodeMetric": {
                    "nodeUsage": null, "aggregatedNodeUsages": null, "systemUsage": null,
                    "aggregatedSystemUsages": null, "numaUsages": null
                },
                "podsMetric": null,
                "hostApplicationMetric": null,
                "prodReclaimableMetric": null,
                "prodPeakMetric": null
            }})
        );
    }

    #[test]
    fn standalone_output_is_json_or_yaml_by_extension() {
        let status = NodeMetricStatus {
            pods_metric: vec![PodMetricInfo {
                name: "p".into(),
                namespace: "n".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let object = standalone_node_metric("node-a", CollectPolicy::default_spec(), status);
        let json = encode_for_path(Path::new("/x/nm.json"), &object).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["kind"], "NodeMetric");
        assert_eq!(parsed["apiVersion"], "slo.koordinator.sh/v1alpha1");
        assert_eq!(parsed["metadata"]["name"], "node-a");
        assert_eq!(parsed["status"]["podsMetric"][0]["name"], "p");
        let yaml = encode_for_path(Path::new("/x/nm.YML"), &object).unwrap();
        assert!(yaml.contains("kind: NodeMetric"), "{yaml}");
        let back: NodeMetric = apis::yaml::from_str(&yaml, &apis::yaml::Limits::CONFIG).unwrap();
        assert_eq!(back, object);
    }

    /// A Running Burstable pod created two days ago (past the cold start).
    fn requesting_pod(uid: &str, priority: &str, cpu: &str, memory: &str, now: SystemTime) -> Pod {
        let created =
            k8s_openapi::jiff::Timestamp::try_from(now - Duration::from_secs(2 * 86_400)).unwrap();
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": uid, "namespace": "default", "uid": uid,
                "creationTimestamp": created.to_string(),
                "labels": {"koordinator.sh/priority-class": priority},
            },
            "spec": {"containers": [{"name": "main", "resources": {
                "requests": {"cpu": cpu, "memory": memory},
                "limits": {"cpu": "8", "memory": "32Gi"},
            }}]},
            "status": {"qosClass": "Burstable", "phase": "Running"},
        }))
        .unwrap()
    }

    fn milli(map: &ResourceMap, name: &str) -> i64 {
        QuantityValue::of(&map.resources[name])
            .unwrap()
            .milli_value()
    }

    fn units(map: &ResourceMap, name: &str) -> i64 {
        QuantityValue::of(&map.resources[name]).unwrap().value()
    }

    #[test]
    fn numa_usages_and_the_prod_estimate_are_reported() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0);
        let start = now - Duration::from_secs(60);
        let step = Duration::from_secs(10);
        let mut samples = Samples::default();
        samples.add("numa/0/cpu", start, &[1.0, 3.0], step);
        samples.add("numa/0/memory", start, &[GI, GI], step);
        samples.add("numa/1/cpu", start, &[0.5], step);
        // NUMA 1 has no memory series: left out.
        for uid in ["uid-a", "uid-batch"] {
            samples.add(&format!("pod/{uid}/cpu"), start, &[0.4], step);
            samples.add(&format!("pod/{uid}/memory"), start, &[GI], step);
        }
        let pods = vec![
            requesting_pod("uid-a", "koord-prod", "2", "4Gi", now),
            requesting_pod("uid-batch", "koord-batch", "4", "8Gi", now),
            // No samples: not in podsMetric, nor in the estimate.
            requesting_pod("uid-silent", "koord-prod", "4", "8Gi", now),
        ];
        let mib = 1024 * 1024;
        let peak = |milli_cpu: i64, memory_bytes: i64| {
            let value = CpuMemory {
                cpu: MilliCpu(milli_cpu),
                memory: Bytes::from_i64_or_zero(memory_bytes),
            };
            Prediction {
                p60: value,
                p90: value,
                p95: value,
                p98: value,
                max: value,
            }
        };
        let mut models = HashMap::new();
        models.insert("uid-a".to_string(), peak(500, 1024 * mib));
        models.insert(crate::prediction::node_item_id("sys"), peak(100, 512 * mib));
        models.insert(
            crate::prediction::node_item_id("koord-prod"),
            peak(500, 1024 * mib),
        );
        models.insert(crate::prediction::node_item_id(""), peak(0, 0));
        let lookup = |id: &str| models.get(id).copied();
        let config = PredictionConfig::default();
        let policy = CollectPolicy::default();
        let status = build_node_metric_status(&ReportInputs {
            policy: &policy,
            usage: &samples,
            pods: &pods,
            host_applications: &[],
            prediction: Some(PredictionInputs {
                config: &config,
                predictions: &lookup,
                allocatable: Some(CpuMemory {
                    cpu: MilliCpu(4000),
                    memory: Bytes(16 * 1024 * mib as u64),
                }),
            }),
            now,
        });

        let numa = &status.node_metric.as_ref().unwrap().numa_usages;
        assert_eq!(numa.len(), 1);
        assert_eq!(numa[0].numa_node_id, 0);
        assert_eq!(quantity(&numa[0].node_usage, "cpu"), "2");
        assert_eq!(quantity(&numa[0].node_usage, "memory"), "1Gi");

        // Per pod: 2000 − 1.1 × 500 = 1450 m; 4 Gi − 1.1 Gi.
        // Per priority: 2000 − 1.1 × (100 + 500) = 1340 m; 4 Gi − 1.1 × 1.5 Gi.
        // The smaller wins for each resource.
        let reclaimable = &status.prod_reclaimable_metric.as_ref().unwrap().resource;
        assert_eq!(milli(reclaimable, "cpu"), 1340);
        let priority_peak_memory = (1536.0 * mib as f64 * 1.1) as i64;
        assert_eq!(
            units(reclaimable, "memory"),
            4096 * mib - priority_peak_memory
        );
        // Peak: the larger of per pod (550 m, 1.1 Gi) and per priority (660 m, 1.65 Gi).
        let peak = &status.prod_peak_metric.as_ref().unwrap().resource;
        assert_eq!(milli(peak, "cpu"), 660);
        assert_eq!(units(peak, "memory"), priority_peak_memory);

        // Without allocatable: an empty reclaimable metric, the peak still there.
        let status = build_node_metric_status(&ReportInputs {
            policy: &policy,
            usage: &samples,
            pods: &pods,
            host_applications: &[],
            prediction: Some(PredictionInputs {
                config: &config,
                predictions: &lookup,
                allocatable: None,
            }),
            now,
        });
        assert_eq!(
            status.prod_reclaimable_metric,
            Some(ReclaimableMetric::default())
        );
        assert!(status.prod_peak_metric.is_some());
    }

    #[test]
    fn the_reporter_trains_from_the_cache_and_falls_back_to_the_machine_size() {
        use crate::metriccache::{MetricCacheConfig, Sample};
        use koord_common::units::{CpuInfo, CpuTopology};
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0);
        let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
        let mut samples = Vec::new();
        for second in 0..60u64 {
            let at = now - Duration::from_secs(59 - second);
            let mut push = |key: SeriesKey, value: f64| samples.push(Sample::new(key, at, value));
            push(SeriesKey::node(MetricKind::NodeCpuUsage), 0.6);
            push(SeriesKey::node(MetricKind::NodeMemoryUsage), 1.5 * GI);
            push(SeriesKey::node(MetricKind::NodeMemoryTotal), 16.0 * GI);
            push(SeriesKey::pod(MetricKind::PodCpuUsage, "uid-a"), 0.5);
            push(SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-a"), GI);
            push(
                SeriesKey::new(MetricKind::HostAppCpuUsage, Entity::host_app("nginx")),
                0.25,
            );
            push(
                SeriesKey::new(MetricKind::HostAppMemoryUsage, Entity::host_app("nginx")),
                0.5 * GI,
            );
            push(
                SeriesKey::node(MetricKind::NodeNumaCpuUsage).with_label(SeriesLabel::Numa(0)),
                0.6,
            );
            push(
                SeriesKey::node(MetricKind::NodeNumaMemoryUsage).with_label(SeriesLabel::Numa(0)),
                1.5 * GI,
            );
        }
        assert!(cache.append(&samples).rejected.is_empty());
        let cpu = |cpu| CpuInfo {
            cpu,
            core: cpu,
            socket: 0,
            node: 0,
        };
        cache.set_cpu_topology(Arc::new(CpuTopology {
            cpus: (0..4).map(cpu).collect(),
        }));
        assert_eq!(
            cache.machine_capacity(),
            Some(CpuMemory {
                cpu: MilliCpu(4000),
                memory: Bytes(16 << 30)
            })
        );
        assert_eq!(cache.numa_nodes(), vec![0]);

        let states = StatesInformer::new("node-a", super::super::RequiredSyncs::PODS_ONLY);
        states.set_pods(super::super::PodsSnapshot {
            pods: vec![requesting_pod("uid-a", "koord-prod", "2", "4Gi", now)],
            origin: super::super::PodsOrigin::File,
            synced_at: now,
        });
        let reporter = NodeMetricReporter::new(
            states,
            cache,
            ReportSink::File(std::env::temp_dir().join("unused-node-metric.json")),
        );
        let policy = CollectPolicy::default();
        // Before training there are no models: no peak, empty reclaimable.
        let status = reporter.build_status(&policy, now);
        assert_eq!(
            status.prod_reclaimable_metric,
            Some(ReclaimableMetric::default())
        );
        assert_eq!(status.prod_peak_metric, None);
        assert_eq!(status.node_metric.as_ref().unwrap().numa_usages.len(), 1);

        reporter.train_once(now);
        let status = reporter.build_status(&policy, now);
        // System 0.1 core and 0.5 GiB, prod 0.5 core and 1 GiB, the empty
        // none class one first bucket (25 m, 5 MiB), 10% margin, histogram
        // buckets up to 5% above the value: reclaimable about 2 − 0.69 cores
        // and 4 − 1.66 GiB (the per-priority estimate).
        let reclaimable = &status.prod_reclaimable_metric.as_ref().unwrap().resource;
        let cpu = milli(reclaimable, "cpu");
        assert!((1230..=1320).contains(&cpu), "{cpu}");
        let memory = units(reclaimable, "memory") as f64 / GI;
        assert!((2.2..=2.36).contains(&memory), "{memory}");
        let peak = &status.prod_peak_metric.as_ref().unwrap().resource;
        assert!((680..=770).contains(&milli(peak, "cpu")), "{status:?}");

        let policy_apps = [HostApplicationSpec {
            name: "nginx".into(),
            qos: "LS".into(),
            priority: "koord-prod".into(),
            ..Default::default()
        }];
        let status = build_node_metric_status(&ReportInputs {
            policy: &policy,
            usage: reporter.usage.as_ref(),
            pods: &[],
            host_applications: &policy_apps,
            prediction: None,
            now,
        });
        let app = &status.host_application_metric[0];
        assert_eq!(quantity(&app.usage, "cpu"), "250m");
        assert_eq!(quantity(&app.usage, "memory"), "512Mi");
    }

    /// Before the pods sync, a round would train the whole node's usage as
    /// the system's share (the restart flake: one such sample after a restore
    /// lifted the system peak by the pod's 2 GiB); it trains nothing instead.
    #[test]
    fn no_training_round_runs_before_the_pods_have_synced() {
        use crate::metriccache::{MetricCacheConfig, Sample};
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(T0);
        let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
        let mut samples = Vec::new();
        for second in 0..60u64 {
            let at = now - Duration::from_secs(59 - second);
            samples.push(Sample::new(
                SeriesKey::node(MetricKind::NodeCpuUsage),
                at,
                0.6,
            ));
            samples.push(Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                at,
                3.0 * GI,
            ));
            samples.push(Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, "uid-a"),
                at,
                0.5,
            ));
            samples.push(Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-a"),
                at,
                2.0 * GI,
            ));
        }
        assert!(cache.append(&samples).rejected.is_empty());
        let states = StatesInformer::new("node-a", super::super::RequiredSyncs::PODS_ONLY);
        let reporter = NodeMetricReporter::new(
            states.clone(),
            cache,
            ReportSink::File(std::env::temp_dir().join("unused-node-metric.json")),
        );
        let system_peak = |reporter: &NodeMetricReporter| {
            let predictor = reporter.predictor.as_ref().unwrap().lock().unwrap();
            predictor
                .prediction(&crate::prediction::node_item_id(
                    crate::prediction::SYSTEM_ITEM,
                ))
                .map(|prediction| prediction.p98.memory.0)
        };

        assert!(!reporter.train_once(now), "trained before the pods synced");
        assert_eq!(system_peak(&reporter), None);

        states.set_pods(super::super::PodsSnapshot {
            pods: vec![requesting_pod("uid-a", "koord-prod", "2", "4Gi", now)],
            origin: super::super::PodsOrigin::File,
            synced_at: now,
        });
        assert!(reporter.train_once(now));
        // Node 3 GiB − the pod's 2 GiB: the system holds about 1 GiB, not 3.
        let peak = system_peak(&reporter).unwrap() as f64 / GI;
        assert!((0.9..1.2).contains(&peak), "system memory peak {peak} GiB");
    }

    /// The restart of the issue: ten minutes of history, a checkpoint, the
    /// process gone (nothing of it kept but the file), and the first report
    /// of the new one.
    #[tokio::test]
    async fn a_restarted_reporter_reports_the_same_prod_reclaimable_from_its_checkpoint() {
        use crate::metriccache::{MetricCacheConfig, Sample};
        use crate::prediction::checkpoint::Checkpointer;
        use koord_common::units::{CpuInfo, CpuTopology};
        let tmp = koord_common::testing::TempDir::new("node-metric-restart").unwrap();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(T0);
        let now = start + Duration::from_secs(600);
        let topology = Arc::new(CpuTopology {
            cpus: (0..8)
                .map(|cpu| CpuInfo {
                    cpu,
                    core: cpu,
                    socket: 0,
                    node: 0,
                })
                .collect(),
        });
        let new_cache = || {
            let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
            // The advisor sets the topology at start, before any checkpoint matters.
            cache.set_cpu_topology(Arc::clone(&topology));
            cache
        };
        let states = StatesInformer::new("node-a", super::super::RequiredSyncs::PODS_ONLY);
        states.set_pods(super::super::PodsSnapshot {
            pods: vec![
                requesting_pod("uid-a", "koord-prod", "3", "6Gi", now),
                requesting_pod("uid-b", "koord-prod", "2", "4Gi", now),
                requesting_pod("uid-c", "koord-batch", "1", "1Gi", now),
            ],
            origin: super::super::PodsOrigin::File,
            synced_at: now,
        });
        let sink = || ReportSink::File(tmp.path().join("node-metric.json"));
        let checkpointer = |cache: &Arc<MetricCache>| {
            Checkpointer::new(
                tmp.path().to_path_buf(),
                "node-a",
                Duration::from_secs(600),
                Arc::clone(cache),
            )
        };

        let cache = new_cache();
        let reporter = NodeMetricReporter::new(states.clone(), cache.clone(), sink())
            .with_checkpointer(checkpointer(&cache), &[], start);
        for second in 1..=600u64 {
            let at = start + Duration::from_secs(second);
            // A load that moves within each minute and between minutes.
            let wave = ((second % 60) as f64 / 60.0) * (1.0 + (second / 60 % 3) as f64 * 0.5);
            let mut samples = Vec::new();
            let mut push = |key: SeriesKey, value: f64| samples.push(Sample::new(key, at, value));
            push(SeriesKey::pod(MetricKind::PodCpuUsage, "uid-a"), 0.8 + wave);
            push(
                SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-a"),
                2.0 * GI + wave * GI,
            );
            push(SeriesKey::pod(MetricKind::PodCpuUsage, "uid-b"), 0.5);
            push(SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-b"), GI);
            push(SeriesKey::pod(MetricKind::PodCpuUsage, "uid-c"), 1.0);
            push(SeriesKey::pod(MetricKind::PodMemoryUsage, "uid-c"), GI);
            push(SeriesKey::node(MetricKind::NodeCpuUsage), 2.6 + wave);
            push(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                5.0 * GI + wave * GI,
            );
            push(SeriesKey::node(MetricKind::NodeMemoryTotal), 32.0 * GI);
            push(SeriesKey::node(MetricKind::SysCpuUsage), 0.3);
            push(SeriesKey::node(MetricKind::SysMemoryUsage), GI);
            assert!(cache.append(&samples).rejected.is_empty());
            if second % 60 == 0 {
                reporter.train_once(at);
            }
        }
        let policy = CollectPolicy::default();
        let before = reporter.build_status(&policy, now);
        assert!(reporter.save_checkpoint(now).await);
        drop(reporter);
        drop(cache);

        let cache = new_cache();
        let restarted_checkpointer = checkpointer(&cache);
        let models = restarted_checkpointer.load_blocking((
            Duration::from_secs(12 * 3600),
            Duration::from_secs(24 * 3600),
        ));
        assert!(!models.is_empty());
        let restarted = NodeMetricReporter::new(states.clone(), cache.clone(), sink())
            .with_checkpointer(restarted_checkpointer, &models, now);
        let after = restarted.build_status(&policy, now);

        let close = |what: &str, before: f64, after: f64| {
            assert!(before > 0.0, "{what}: nothing to compare ({before})");
            let drift = (after - before).abs() / before;
            assert!(
                drift <= 0.05,
                "{what}: {before} before, {after} after the restart"
            );
        };
        let resource = |status: &NodeMetricStatus| {
            status
                .prod_reclaimable_metric
                .as_ref()
                .unwrap()
                .resource
                .clone()
        };
        let (reclaim_before, reclaim_after) = (resource(&before), resource(&after));
        close(
            "reclaimable cpu",
            milli(&reclaim_before, "cpu") as f64,
            milli(&reclaim_after, "cpu") as f64,
        );
        close(
            "reclaimable memory",
            units(&reclaim_before, "memory") as f64,
            units(&reclaim_after, "memory") as f64,
        );
        let usage =
            |status: &NodeMetricStatus| status.node_metric.as_ref().unwrap().node_usage.clone();
        close(
            "node cpu usage",
            milli(&usage(&before), "cpu") as f64,
            milli(&usage(&after), "cpu") as f64,
        );

        // Without the checkpoint the first report has nothing to go on.
        let cold = NodeMetricReporter::new(states, new_cache(), sink()).build_status(&policy, now);
        assert_eq!(
            cold.prod_reclaimable_metric,
            Some(ReclaimableMetric::default())
        );
    }
}
