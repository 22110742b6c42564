//! The QoS manager's I/O shell: builds [`QosSnapshot`]s from the states
//! informer and the metric cache, runs the [`QosRunner`] on a dedicated
//! thread, and serves `GET /qos/explain`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apis::extension::{
    BATCH_CPU, BATCH_MEMORY, QuantityValue, get_node_reservation, get_resource_status,
    get_system_qos_resource, pod_priority_value_with_default, qos_class_from_labels,
};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use koord_common::Shutdown;
use koord_common::sync::MutexExt;

use super::framework::{
    CgroupReader, LayoutReader, ManagedFile, ManagedFiles, MetricSample, NodeInfo, NodeUsage,
    QosContainer, QosManagerConfig, QosPod, QosRunner, QosSnapshot, read_actual,
};
use super::reaction::{ReactionLink, Wakeup};
use crate::capabilities::NodeCapabilities;
use crate::metriccache::{BeLabel, MetricCache, MetricKind, SeriesKey, SeriesLabel};
use crate::statesinformer::StatesInformer;
use crate::statesinformer::cpumanager::read_kubelet_cpu_manager_view;
use crate::statesinformer::podmeta::pod_meta_of;
use crate::system::cgroup::CgroupLayout;
use koord_common::units::CpuTopology;
use koord_common::units::{Bytes, CpuSet, MilliCpu};

/// The explain endpoint's path.
pub const EXPLAIN_PATH: &str = "/qos/explain";

/// Where snapshots come from.
#[derive(Clone)]
pub struct SnapshotSource {
    pub states: StatesInformer,
    pub cache: Arc<MetricCache>,
    pub capabilities: Arc<NodeCapabilities>,
    pub layout: CgroupLayout,
    pub collect_interval: Duration,
    pub config: QosManagerConfig,
    /// `<proc-root>/meminfo` supplies the memory capacity without a Node object.
    pub proc_root: PathBuf,
    /// The kubelet's root directory (`--var-lib-kubelet-dir`), whose
    /// `cpu_manager_state` names its CPU manager policy and pinned CPUs;
    /// `None`: not looked at.
    pub kubelet_root: Option<PathBuf>,
}

impl SnapshotSource {
    /// The node, pods, metrics and topology as of `now`.
    pub fn snapshot(&self, now: SystemTime) -> QosSnapshot {
        let topology = self.cache.cpu_topology();
        let node = self.states.node();
        let mem_total = read_mem_total(&self.proc_root);
        let pods_snapshot = self.states.pods();
        let kube_pods: Arc<Vec<Pod>> = Arc::new(
            pods_snapshot
                .as_ref()
                .map(|s| s.pods.clone())
                .unwrap_or_default(),
        );
        let pods = qos_pods(&kube_pods, &self.layout, &self.cache);
        let mut node_info = node_info(
            node.as_deref(),
            topology.as_deref(),
            self.capabilities.cpus,
            mem_total,
        );
        // Read every round: the kubelet rewrites the file whenever it pins
        // or releases CPUs, and it is small and bounded.
        node_info.kubelet_cpu_manager = read_kubelet_cpu_manager_view(
            self.kubelet_root.as_deref(),
            &node_info.annotations,
            &kube_pods,
        );
        let (node_slo, node_slo_rule) = match self.states.node_slo_observed() {
            Some((slo, rule)) => (Some(Arc::new(slo.spec.clone())), Some(rule)),
            None => (None, None),
        };
        QosSnapshot {
            now,
            node_slo,
            node_slo_rule,
            node: node_info,
            node_usage: node_usage(&self.cache),
            pods,
            kube_pods,
            topology,
            capabilities: self.capabilities.clone(),
            layout: self.layout.clone(),
            collect_interval: self.collect_interval,
            metric_cache: Some(self.cache.clone()),
            reader: Arc::new(LayoutReader(self.layout.clone())) as Arc<dyn CgroupReader>,
            config: self.config.clone(),
            eviction_refused: Default::default(),
            eviction_pending_window: crate::evictor::request::EVICTED_MEMORY,
            ls_floor: None,
            ls_sched: None,
            volumes: self.states.volume_lookup(),
            kubelet_root: self
                .kubelet_root
                .clone()
                .unwrap_or_else(|| PathBuf::from(super::framework::DEFAULT_KUBELET_ROOT)),
        }
    }
}

fn read_mem_total(proc_root: &Path) -> Option<Bytes> {
    let text = std::fs::read_to_string(proc_root.join("meminfo")).ok()?;
    let info = crate::metricsadvisor::parse::parse_meminfo(&text).ok()?;
    // Beyond i64 is no memory size; treated as unknown, like a Node's
    // quantity that does not fit.
    i64::try_from(info.total).ok().map(|_| Bytes(info.total))
}

fn latest(cache: &MetricCache, key: &SeriesKey) -> Option<MetricSample> {
    cache
        .latest(key)
        .map(|(time, value)| MetricSample::new(value, time))
}

/// Latest node-level samples.
pub fn node_usage(cache: &MetricCache) -> NodeUsage {
    let node = |kind| latest(cache, &SeriesKey::node(kind));
    let be = |label| {
        latest(
            cache,
            &SeriesKey::node(MetricKind::NodeBe).with_label(SeriesLabel::Be(label)),
        )
    };
    NodeUsage {
        cpu: node(MetricKind::NodeCpuUsage),
        memory: node(MetricKind::NodeMemoryUsage),
        memory_with_page_cache: node(MetricKind::NodeMemoryUsageWithPageCache),
        system_cpu: node(MetricKind::SysCpuUsage),
        system_memory: node(MetricKind::SysMemoryUsage),
        be_cpu: be(BeLabel::CpuUsage),
        be_memory: be(BeLabel::MemoryUsage),
    }
}

fn quantity_of(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    name: &str,
) -> Option<QuantityValue> {
    list?.get(name).and_then(|q| QuantityValue::of(q).ok())
}

/// CPU (milli) and memory (bytes) of a container's requests or limits;
/// batch resources count when the native ones are absent (BE pods).
fn container_amounts(container: &Container, limits: bool) -> (Option<i64>, Option<i64>) {
    let resources = container.resources.as_ref();
    let list = if limits {
        resources.and_then(|r| r.limits.as_ref())
    } else {
        resources.and_then(|r| r.requests.as_ref())
    };
    let cpu = quantity_of(list, "cpu")
        .map(QuantityValue::milli_value)
        // batch-cpu is counted in milli-CPU units already.
        .or_else(|| quantity_of(list, BATCH_CPU).map(QuantityValue::value));
    let memory = quantity_of(list, "memory")
        .or_else(|| quantity_of(list, BATCH_MEMORY))
        .map(QuantityValue::value);
    (cpu, memory)
}

/// The strategies' view of `pods` (pods without a UID or QoS class are left out).
pub fn qos_pods(pods: &[Pod], layout: &CgroupLayout, cache: &MetricCache) -> Vec<QosPod> {
    let mut out = Vec::with_capacity(pods.len());
    for (index, pod) in pods.iter().enumerate() {
        let Ok(meta) = pod_meta_of(pod) else {
            continue;
        };
        let Ok(cgroup_dir) = layout.pod_dir(meta.kube_qos, &meta.uid) else {
            continue;
        };
        let spec_containers = pod
            .spec
            .as_ref()
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let containers = meta
            .containers
            .iter()
            .map(|c| {
                let spec = spec_containers.iter().find(|s| s.name == c.name);
                let (cpu_request, memory_request) =
                    spec.map_or((None, None), |s| container_amounts(s, false));
                let (cpu_limit, memory_limit) =
                    spec.map_or((None, None), |s| container_amounts(s, true));
                let id = c.id.as_deref();
                QosContainer {
                    name: c.name.clone(),
                    id: id.map(str::to_string),
                    cgroup_dir: id
                        .and_then(|id| layout.container_dir(meta.kube_qos, &meta.uid, id).ok()),
                    cpu_request: cpu_request.map(MilliCpu),
                    cpu_limit: cpu_limit.map(MilliCpu),
                    memory_request: memory_request.map(Bytes::from_i64_or_zero),
                    memory_limit: memory_limit.map(Bytes::from_i64_or_zero),
                    cpu_usage: id.and_then(|id| {
                        latest(
                            cache,
                            &SeriesKey::container(MetricKind::ContainerCpuUsage, id),
                        )
                    }),
                    memory_usage: id.and_then(|id| {
                        latest(
                            cache,
                            &SeriesKey::container(MetricKind::ContainerMemoryUsage, id),
                        )
                    }),
                }
            })
            .collect();
        let empty = BTreeMap::new();
        let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let allocated_cpus = get_resource_status(annotations)
            .ok()
            .flatten()
            .filter(|status| !status.cpuset.is_empty())
            .and_then(|status| status.cpuset.parse::<CpuSet>().ok());
        out.push(QosPod {
            uid: meta.uid.to_string(),
            namespace: meta.namespace,
            name: meta.name,
            qos: meta.qos,
            qos_label: qos_class_from_labels(labels),
            kube_qos: meta.kube_qos,
            priority: meta.priority,
            priority_value: pod_priority_value_with_default(pod),
            phase: pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
            cgroup_dir,
            containers,
            allocated_cpus,
            cpu_usage: latest(cache, &SeriesKey::pod(MetricKind::PodCpuUsage, &*meta.uid)),
            memory_usage: latest(
                cache,
                &SeriesKey::pod(MetricKind::PodMemoryUsage, &*meta.uid),
            ),
            kube_index: Some(index),
        });
    }
    out
}

/// Capacity and reservations from the Node; without one (standalone),
/// the online CPUs and MemTotal.
pub fn node_info(
    node: Option<&Node>,
    topology: Option<&CpuTopology>,
    detected_cpus: u32,
    mem_total: Option<Bytes>,
) -> NodeInfo {
    let status = node.and_then(|n| n.status.as_ref());
    let amount = |list: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                  name: &str,
                  milli: bool| {
        quantity_of(list, name).map(|q| if milli { q.milli_value() } else { q.value() })
    };
    let capacity = status.and_then(|s| s.capacity.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref());
    let cpus = topology.map_or(detected_cpus as usize, CpuTopology::num_cpus) as i64;
    let cpu_capacity = amount(capacity, "cpu", true).unwrap_or(cpus * 1000);
    let memory_capacity = amount(capacity, "memory", false)
        .map(Bytes::from_i64_or_zero)
        .or(mem_total)
        .unwrap_or_default();
    let kubelet_cpu_reserved = match (
        amount(capacity, "cpu", true),
        amount(allocatable, "cpu", true),
    ) {
        (Some(c), Some(a)) => (c - a).max(0),
        _ => 0,
    };
    let kubelet_memory_reserved = match (
        amount(capacity, "memory", false),
        amount(allocatable, "memory", false),
    ) {
        (Some(c), Some(a)) => (c - a).max(0),
        _ => 0,
    };
    let annotations: BTreeMap<String, String> = node
        .and_then(|n| n.metadata.annotations.clone())
        .unwrap_or_default();
    let reservation = get_node_reservation(&annotations).ok().flatten();
    let annotated_cpu = reservation
        .as_ref()
        .and_then(|r| amount(Some(&r.resources), "cpu", true))
        .unwrap_or(0);
    let annotated_memory = reservation
        .as_ref()
        .and_then(|r| amount(Some(&r.resources), "memory", false))
        .unwrap_or(0);
    let reserved_cpus = reservation
        .as_ref()
        .map(|r| r.reserved_cpus.as_str())
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse::<CpuSet>().ok())
        .unwrap_or_default();
    let system_qos_exclusive_cpus = get_system_qos_resource(&annotations)
        .ok()
        .flatten()
        .filter(|r| !r.cpuset.is_empty() && r.is_cpuset_exclusive())
        .and_then(|r| r.cpuset.parse::<CpuSet>().ok())
        .unwrap_or_default();
    let allocatable_values: BTreeMap<String, i64> = allocatable
        .map(|list| {
            list.keys()
                // cpu in milli-CPU; every other resource (batch-cpu is already milli) as its value.
                .filter_map(|name| {
                    amount(Some(list), name, name == "cpu").map(|v| (name.clone(), v))
                })
                .collect()
        })
        .unwrap_or_default();
    NodeInfo {
        allocatable: allocatable_values,
        cpu_capacity: MilliCpu(cpu_capacity),
        memory_capacity,
        cpu_reserved: MilliCpu(kubelet_cpu_reserved.max(annotated_cpu)),
        memory_reserved: Bytes::from_i64_or_zero(kubelet_memory_reserved.max(annotated_memory)),
        reserved_cpus,
        system_qos_exclusive_cpus,
        annotations,
        kubelet_cpu_manager: Default::default(),
    }
}

/// Runs `runner` on a dedicated thread until `shutdown`, waking at least
/// every `tick` to see which strategies are due.
pub fn spawn_runner(
    runner: QosRunner,
    source: SnapshotSource,
    shutdown: Shutdown,
    tick: Duration,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    spawn_runner_with_reaction(runner, source, shutdown, tick, None)
}

/// [`spawn_runner`], also woken by the CPU reaction path: a wakeup runs
/// `cpusuppress` at once through the same [`QosRunner::run_one`] path as a
/// tick (expected values, explain, metrics), and every round's snapshot
/// carries the reaction's LS floor.
pub fn spawn_runner_with_reaction(
    runner: QosRunner,
    source: SnapshotSource,
    shutdown: Shutdown,
    tick: Duration,
    reaction: Option<ReactionLink>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let runner = Arc::new(Mutex::new(runner));
    std::thread::Builder::new()
        .name("qos-manager".to_string())
        .spawn(move || {
            let mut woken: Option<Wakeup> = None;
            let mut latency =
                super::lsschedstat::LatencyShell::new(&source.proc_root, source.layout.clone());
            loop {
                if shutdown.is_triggered() {
                    return;
                }
                let now = SystemTime::now();
                let mut snapshot = source.snapshot(now);
                latency.update(&mut snapshot);
                let mut runner = runner.lock_or_recover();
                snapshot.eviction_refused = runner.refused_evictions();
                snapshot.eviction_pending_window = runner.eviction_pending_window();
                if let Some(link) = &reaction {
                    snapshot.ls_floor = link.floor.get();
                    // Sample fast only while there is BE to suppress.
                    let suppressing = super::cpusuppress::threshold_strategy(&snapshot).enable
                        == Some(true)
                        && snapshot.be_pods().next().is_some();
                    link.floor.set_armed(suppressing);
                }
                match (woken.take(), &reaction) {
                    (Some(wake), Some(link)) => {
                        if let Some(index) = runner.index_of(super::cpusuppress::NAME) {
                            let outcome = runner.run_one(index, &snapshot);
                            let latency = wake.detected_at.elapsed();
                            link.metrics.record_wakeup(wake.source, latency);
                            tracing::debug!(
                                source = wake.source.as_str(),
                                floor_milli = wake.floor.0,
                                latency_ms = latency.as_secs_f64() * 1000.0,
                                actions = outcome.actions,
                                "cpusuppress woken by an LS CPU step"
                            );
                        }
                    }
                    _ => {
                        runner.run_due(&snapshot);
                    }
                }
                let wait = runner
                    .next_due()
                    .and_then(|due| due.duration_since(SystemTime::now()).ok())
                    .unwrap_or(tick)
                    .min(tick)
                    .max(Duration::from_millis(50));
                drop(runner);
                woken = match &reaction {
                    Some(link) => wait_for_wakeup(&link.wakeups, wait),
                    None => {
                        std::thread::sleep(wait);
                        None
                    }
                };
            }
        })
}

/// Waits up to `wait` for a wakeup; several queued ones count as one, the
/// earliest (its detection time is what the latency is measured from).
fn wait_for_wakeup(wakeups: &Receiver<Wakeup>, wait: Duration) -> Option<Wakeup> {
    let first = match wakeups.recv_timeout(wait) {
        Ok(wake) => wake,
        Err(RecvTimeoutError::Timeout) => return None,
        // The sampler is gone: keep ticking.
        Err(RecvTimeoutError::Disconnected) => {
            std::thread::sleep(wait);
            return None;
        }
    };
    let mut earliest = first;
    while let Ok(next) = wakeups.try_recv() {
        if next.detected_at < earliest.detected_at {
            earliest = next;
        }
    }
    Some(earliest)
}

/// One row of the explain output.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExplainEntry {
    #[serde(flatten)]
    pub file: ManagedFile,
    /// The value read back now; `None` when unreadable (see `error`).
    pub actual: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether `actual` equals `expected`.
    pub converged: bool,
}

/// Which files to explain.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ExplainFilter {
    #[default]
    All,
    /// Files under one pod's cgroup (`namespace/name`).
    Pod(String),
    /// Files of a QoS tier: `be` (besteffort), `burstable`, `guaranteed`/`kubepods`.
    Tier(String),
    /// The eviction strategies' latest reports (`?evictions`), or one
    /// strategy's (`?evictions=memoryevict`).
    Evictions(Option<String>),
    /// The settings strategies did not write because this kernel lacks
    /// their files (`?unsupported`).
    Unsupported,
}

/// Errors of the explain query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    #[error("pod {0} is not known to koordlet")]
    UnknownPod(String),
    #[error("unknown tier {0:?} (use be, burstable or guaranteed)")]
    UnknownTier(String),
    #[error(
        "query must be ?pod=<namespace>/<name>, ?tier=<be|burstable|guaranteed>, ?evictions[=<strategy>] or ?unsupported: {0}"
    )]
    BadQuery(String),
}

/// Parses `pod=ns/name` or `tier=be` (or nothing).
pub fn parse_explain_query(query: Option<&str>) -> Result<ExplainFilter, ExplainError> {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(ExplainFilter::All);
    };
    if query == "evictions" {
        return Ok(ExplainFilter::Evictions(None));
    }
    if query == "unsupported" {
        return Ok(ExplainFilter::Unsupported);
    }
    let (key, value) = query
        .split_once('=')
        .ok_or_else(|| ExplainError::BadQuery(query.to_string()))?;
    let value = value.replace("%2F", "/").replace("%2f", "/");
    match key {
        "pod" if value.contains('/') => Ok(ExplainFilter::Pod(value)),
        "tier" => Ok(ExplainFilter::Tier(value.to_ascii_lowercase())),
        "evictions" => Ok(ExplainFilter::Evictions(
            Some(value.to_ascii_lowercase()).filter(|v| !matches!(v.as_str(), "" | "all" | "true")),
        )),
        _ => Err(ExplainError::BadQuery(query.to_string())),
    }
}

/// The managed files matching `filter`, with their actual values.
pub fn explain(
    managed: &ManagedFiles,
    layout: &CgroupLayout,
    filter: &ExplainFilter,
    pods: &[Pod],
) -> Result<Vec<ExplainEntry>, ExplainError> {
    use crate::system::cgroup::QosTier;
    let prefix: Option<PathBuf> = match filter {
        ExplainFilter::All => None,
        ExplainFilter::Pod(key) => {
            let pod = pods
                .iter()
                .find(|p| {
                    format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or_default(),
                        p.metadata.name.as_deref().unwrap_or_default()
                    ) == *key
                })
                .ok_or_else(|| ExplainError::UnknownPod(key.clone()))?;
            let meta = pod_meta_of(pod).map_err(|_| ExplainError::UnknownPod(key.clone()))?;
            Some(
                layout
                    .pod_dir(meta.kube_qos, &meta.uid)
                    .map_err(|_| ExplainError::UnknownPod(key.clone()))?,
            )
        }
        ExplainFilter::Evictions(_) | ExplainFilter::Unsupported => return Ok(Vec::new()),
        ExplainFilter::Tier(tier) => Some(match tier.as_str() {
            "be" | "besteffort" => layout.qos_dir(QosTier::BestEffort),
            "burstable" | "ls" => layout.qos_dir(QosTier::Burstable),
            "guaranteed" | "kubepods" => layout.qos_dir(QosTier::Guaranteed),
            other => return Err(ExplainError::UnknownTier(other.to_string())),
        }),
    };
    let mut entries = Vec::new();
    for file in managed.all() {
        if let Some(prefix) = &prefix {
            if file.dir.is_empty() || !Path::new(&file.dir).starts_with(prefix) {
                continue;
            }
            // The guaranteed tier is the kubepods root: leave the other tiers out.
            if matches!(filter, ExplainFilter::Tier(t) if t == "guaranteed" || t == "kubepods") {
                let under_other = [QosTier::Burstable, QosTier::BestEffort]
                    .iter()
                    .any(|t| Path::new(&file.dir).starts_with(layout.qos_dir(*t)));
                if under_other {
                    continue;
                }
            }
        }
        let (actual, error) = match read_actual(layout, &file) {
            Ok(value) => (Some(value), None),
            Err(err) => (None, Some(err)),
        };
        let converged = actual.as_deref() == Some(file.expected.as_str());
        entries.push(ExplainEntry {
            file,
            actual,
            error,
            converged,
        });
    }
    Ok(entries)
}

/// `GET /qos/explain[?pod=<ns>/<name>|?tier=be]`: JSON array of
/// [`ExplainEntry`]; 400 for a bad query, 404 for an unknown pod.
/// `GET /qos/explain?evictions[=<strategy>]`: JSON array of the eviction
/// strategies' latest [`EvictionReport`](super::evictreport::EvictionReport)s
/// (tasks, victims, dry-run victims, why features did nothing); 404 for a
/// strategy that has not reported.
/// `GET /qos/explain?unsupported`: JSON array of
/// [`UnsupportedSetting`](super::framework::UnsupportedSetting)s, the
/// settings strategies left unwritten because this kernel lacks their files.
pub fn explain_router(
    managed: ManagedFiles,
    layout: CgroupLayout,
    states: Option<StatesInformer>,
) -> axum::Router {
    use axum::extract::RawQuery;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    axum::Router::new().route(
        EXPLAIN_PATH,
        axum::routing::get(move |RawQuery(query): RawQuery| {
            let managed = managed.clone();
            let layout = layout.clone();
            let states = states.clone();
            async move {
                let filter = match parse_explain_query(query.as_deref()) {
                    Ok(filter) => filter,
                    Err(err) => return (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
                };
                if let ExplainFilter::Evictions(strategy) = &filter {
                    let reports: Vec<_> = managed
                        .eviction_reports()
                        .into_iter()
                        .filter(|r| strategy.as_deref().is_none_or(|s| s == r.strategy))
                        .collect();
                    if let Some(strategy) = strategy.as_ref().filter(|_| reports.is_empty()) {
                        return (
                            StatusCode::NOT_FOUND,
                            format!("no eviction report from strategy {strategy:?} yet"),
                        )
                            .into_response();
                    }
                    return axum::Json(reports).into_response();
                }
                if filter == ExplainFilter::Unsupported {
                    return axum::Json(managed.unsupported()).into_response();
                }
                let pods = states
                    .and_then(|s| s.pods())
                    .map(|s| s.pods.clone())
                    .unwrap_or_default();
                let result =
                    tokio::task::spawn_blocking(move || explain(&managed, &layout, &filter, &pods))
                        .await;
                match result {
                    Ok(Ok(entries)) => axum::Json(entries).into_response(),
                    Ok(Err(err @ ExplainError::UnknownPod(_))) => {
                        (StatusCode::NOT_FOUND, err.to_string()).into_response()
                    }
                    Ok(Err(err)) => (StatusCode::BAD_REQUEST, err.to_string()).into_response(),
                    Err(err) => {
                        (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response()
                    }
                }
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        ContainerStatus, NodeStatus, PodSpec, PodStatus, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use koord_common::testing::TempDir;

    use super::*;
    use crate::metriccache::{MetricCacheConfig, Sample};
    use crate::resourceexecutor::{ExecutorConfig, ResourceExecutor};
    use crate::system::cgroup::{CgroupDriver, CgroupResource, CgroupValue, CgroupVersion};

    fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    }

    fn be_pod() -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some("batch".into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("u-1".into());
        pod.metadata.labels = Some(BTreeMap::from([(
            "koordinator.sh/qosClass".into(),
            "BE".into(),
        )]));
        pod.spec = Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(&[(BATCH_CPU, "1k"), (BATCH_MEMORY, "1Gi")])),
                    limits: Some(quantities(&[(BATCH_CPU, "2k")])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        pod.status = Some(PodStatus {
            qos_class: Some("BestEffort".into()),
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".into(),
                container_id: Some("containerd://abc".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        pod
    }

    #[test]
    fn pods_carry_class_dirs_amounts_and_samples() {
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
        let cache = MetricCache::new(MetricCacheConfig::default()).unwrap();
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        cache.append(&[
            Sample::new(SeriesKey::pod(MetricKind::PodCpuUsage, "u-1"), t, 0.75),
            Sample::new(
                SeriesKey::container(MetricKind::ContainerCpuUsage, "containerd://abc"),
                t,
                0.7,
            ),
        ]);
        let pods = qos_pods(&[be_pod()], &layout, &cache);
        assert_eq!(pods.len(), 1);
        let pod = &pods[0];
        assert!(pod.is_be());
        assert_eq!(pod.cgroup_dir, PathBuf::from("kubepods/besteffort/podu-1"));
        assert_eq!(pod.cpu_usage, Some(MetricSample::new(0.75, t)));
        let container = &pod.containers[0];
        assert_eq!(
            container.cgroup_dir,
            Some(PathBuf::from("kubepods/besteffort/podu-1/abc"))
        );
        assert_eq!(container.cpu_request, Some(MilliCpu(1000)));
        assert_eq!(container.cpu_limit, Some(MilliCpu(2000)));
        assert_eq!(container.memory_request, Some(Bytes(1 << 30)));
        assert!((container.cpu_usage.unwrap().value - 0.7).abs() < 1e-6);
    }

    #[test]
    fn node_info_from_node_or_topology() {
        let standalone = node_info(None, None, 4, Some(Bytes(8 << 30)));
        assert_eq!(
            (standalone.cpu_capacity, standalone.memory_capacity),
            (MilliCpu(4000), Bytes(8 << 30))
        );
        let mut node = Node::default();
        node.metadata.annotations = Some(BTreeMap::from([(
            "node.koordinator.sh/reservation".into(),
            r#"{"resources":{"cpu":"2"},"reservedCPUs":"0-1"}"#.into(),
        )]));
        node.status = Some(NodeStatus {
            capacity: Some(quantities(&[("cpu", "8"), ("memory", "16Gi")])),
            allocatable: Some(quantities(&[("cpu", "7500m"), ("memory", "15Gi")])),
            ..Default::default()
        });
        let info = node_info(Some(&node), None, 4, None);
        assert_eq!(info.cpu_capacity, MilliCpu(8000));
        assert_eq!(
            info.cpu_reserved,
            MilliCpu(2000),
            "annotation beats kubelet's 500m"
        );
        assert_eq!(info.memory_reserved, Bytes(1 << 30));
        assert_eq!(info.reserved_cpus.to_string(), "0-1");
    }

    #[test]
    fn explain_query_parsing() {
        assert_eq!(parse_explain_query(None), Ok(ExplainFilter::All));
        assert_eq!(
            parse_explain_query(Some("tier=BE")),
            Ok(ExplainFilter::Tier("be".into()))
        );
        assert_eq!(
            parse_explain_query(Some("pod=ns%2Fbatch")),
            Ok(ExplainFilter::Pod("ns/batch".into()))
        );
        assert!(parse_explain_query(Some("pod=batch")).is_err());
        assert_eq!(
            parse_explain_query(Some("evictions")),
            Ok(ExplainFilter::Evictions(None))
        );
        assert_eq!(
            parse_explain_query(Some("evictions=MemoryEvict")),
            Ok(ExplainFilter::Evictions(Some("memoryevict".into())))
        );
        assert!(parse_explain_query(Some("nonsense")).is_err());
    }

    #[tokio::test]
    async fn explain_endpoint_shows_expected_actual_and_owner() {
        let dir = TempDir::new("qos-explain").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, dir.path());
        let be = dir.path().join("cpu/kubepods/besteffort");
        std::fs::create_dir_all(be.join("podu-1")).unwrap();
        std::fs::write(be.join("cpu.cfs_quota_us"), "-1").unwrap();
        std::fs::write(be.join("podu-1/cpu.cfs_quota_us"), "-1").unwrap();
        std::fs::create_dir_all(dir.path().join("cpu/kubepods/burstable")).unwrap();
        std::fs::write(
            dir.path().join("cpu/kubepods/burstable/cpu.cfs_quota_us"),
            "-1",
        )
        .unwrap();

        struct Writes;
        impl crate::qosmanager::Strategy for Writes {
            type State = ();
            fn name(&self) -> &'static str {
                "writes"
            }
            fn interval(&self, _: &QosSnapshot) -> Duration {
                Duration::from_secs(1)
            }
            fn decide(&self, _: &QosSnapshot, _: &()) -> (crate::qosmanager::Decision, ()) {
                let mut decision = crate::qosmanager::Decision::default();
                for (dir, value) in [
                    ("kubepods/besteffort", 200_000),
                    ("kubepods/besteffort/podu-1", 100_000),
                    ("kubepods/burstable", 300_000),
                ] {
                    decision.write(
                        dir,
                        CgroupResource::CpuCfsQuota,
                        CgroupValue::Int(value),
                        "test",
                    );
                }
                (decision, ())
            }
        }
        let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
        let mut runner = QosRunner::new(vec![Box::new(Writes)], executor);
        let mut snapshot = QosSnapshot::for_test(SystemTime::now());
        snapshot.layout = layout.clone();
        let runner_managed = runner.managed_files();
        tokio::task::spawn_blocking(move || runner.run_due(&snapshot))
            .await
            .unwrap();
        // Drift behind koordlet's back shows as not converged.
        std::fs::write(be.join("podu-1/cpu.cfs_quota_us"), "-1").unwrap();

        let states = StatesInformer::new("node-a", crate::statesinformer::RequiredSyncs::PODS_ONLY);
        states.set_pods(crate::statesinformer::PodsSnapshot {
            pods: vec![be_pod()],
            origin: crate::statesinformer::PodsOrigin::File,
            synced_at: SystemTime::now(),
        });
        let router = explain_router(runner_managed, layout, Some(states));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });

        let get = |query: &'static str| async move {
            let response = tokio::task::spawn_blocking(move || {
                koord_common::testing::http_get_blocking(
                    addr,
                    &format!("{EXPLAIN_PATH}{query}"),
                    Duration::from_secs(30),
                )
            })
            .await
            .unwrap()
            .unwrap();
            (response.status, response.body)
        };
        let (status, body) = get("?tier=be").await;
        assert_eq!(status, 200, "{body}");
        let entries: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(entries.len(), 2, "{body}");
        let tier = entries
            .iter()
            .find(|e| e["dir"] == "kubepods/besteffort")
            .unwrap();
        assert_eq!(tier["expected"], "200000");
        assert_eq!(tier["actual"], "200000");
        assert_eq!(tier["strategy"], "writes");
        assert_eq!(tier["converged"], true);
        let pod = entries
            .iter()
            .find(|e| e["dir"] == "kubepods/besteffort/podu-1")
            .unwrap();
        assert_eq!(
            (pod["expected"].as_str(), pod["actual"].as_str()),
            (Some("100000"), Some("-1"))
        );
        assert_eq!(pod["converged"], false);

        let (status, body) = get("?pod=ns/batch").await;
        assert_eq!(status, 200);
        assert_eq!(
            serde_json::from_str::<Vec<serde_json::Value>>(&body)
                .unwrap()
                .len(),
            1
        );
        let (status, body) = get("").await;
        assert_eq!(
            (
                status,
                serde_json::from_str::<Vec<serde_json::Value>>(&body)
                    .unwrap()
                    .len()
            ),
            (200, 3)
        );
        assert_eq!(get("?pod=ns/nothere").await.0, 404);
        assert_eq!(get("?tier=gold").await.0, 400);
    }

    /// `?evictions`: the dry-run victims of memoryevict, as JSON.
    #[tokio::test]
    async fn explain_endpoint_reports_dry_run_evictions() {
        use crate::qosmanager::memoryevict::{FEATURE, MemoryEvict, test_pods::*};
        use apis::extension::QoSClass;
        use apis::slo::v1alpha1::ResourceThresholdStrategy;
        let dir = TempDir::new("qos-explain-evictions").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, dir.path());
        let mut snapshot = snapshot_with(
            ResourceThresholdStrategy {
                enable: Some(true),
                memory_evict_threshold_percent: Some(70),
                ..ResourceThresholdStrategy::default()
            },
            SystemTime::now(),
        );
        snapshot.layout = layout.clone();
        snapshot.node.memory_capacity = Bytes(100 << 30);
        snapshot.node_usage.memory = Some(MetricSample::new((90u64 << 30) as f64, snapshot.now));
        with_kube_pods(
            &mut snapshot,
            vec![
                kube_pod("hog", QoSClass::BE, 5000),
                kube_pod("small", QoSClass::BE, 5000),
            ],
            &[("hog", 30 << 30), ("small", 1 << 30)],
            &[],
        );
        let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
        let mut runner = QosRunner::new(
            vec![Box::new(MemoryEvict::new().with_dry_run(&[FEATURE]))],
            executor,
        );
        let managed = runner.managed_files();
        let outcomes = tokio::task::spawn_blocking(move || runner.run_due(&snapshot))
            .await
            .unwrap();
        assert_eq!(outcomes[0].1.actions, 0, "a dry run evicts nobody");

        let router = explain_router(managed, layout, None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        let get = |query: &'static str| async move {
            let response = tokio::task::spawn_blocking(move || {
                koord_common::testing::http_get_blocking(
                    addr,
                    &format!("{EXPLAIN_PATH}{query}"),
                    Duration::from_secs(30),
                )
            })
            .await
            .unwrap()
            .unwrap();
            (response.status, response.body)
        };
        let (status, body) = get("?evictions").await;
        assert_eq!(status, 200, "{body}");
        let reports: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(reports.len(), 1, "{body}");
        let task = &reports[0]["tasks"][0];
        assert_eq!(reports[0]["strategy"], "memoryevict");
        assert_eq!(task["feature"], "BEMemoryEvict");
        assert_eq!(task["dryRun"], true);
        assert_eq!(task["target"], "podUsed");
        // 90 % of 100 Gi, lower 68 %: 22 Gi to release; the 30 Gi hog covers it.
        assert_eq!(task["toRelease"]["memory"], 22i64 << 30);
        assert_eq!(task["victims"][0]["pod"], "default/hog");
        assert_eq!(task["victims"].as_array().unwrap().len(), 1);
        assert_eq!(
            task["victims"][0]["releases"]["podUsed"]["memory"],
            30i64 << 30
        );
        assert_eq!(get("?evictions=memoryevict").await.0, 200);
        assert_eq!(get("?evictions=cpuevict").await.0, 404);
    }
}
