//! The QoS manager's plugin framework: strategies decide, the runner acts.
//!
//! # Adding a strategy
//!
//! 1. Implement [`Strategy`] in `qosmanager/<name>.rs`:
//!    - [`Strategy::name`]: the upstream plugin's short name (`cpusuppress`,
//!      `memoryevict`, ...); it labels metrics, notes and explain entries.
//!    - [`Strategy::interval`]: how often to run, from the [`QosSnapshot`]'s
//!      NodeSLO or [`QosManagerConfig`] (upstream's `*-interval-seconds`).
//!    - [`Strategy::required_capabilities`]: what the kernel must offer; when
//!      one is missing the runner does not call `decide` and records
//!      "skipped: unsupported ..." instead.
//!    - [`Strategy::State`]: what the strategy remembers between rounds
//!      (`()` when nothing; e.g. cpuevict's sample windows and cool time).
//!      A plain value, never a `Mutex` or atomic inside the strategy.
//!    - [`Strategy::decide`]: PURE. Read only the snapshot (NodeSLO, metrics
//!      with sample times, pods and their cgroup dirs, topology, capabilities,
//!      current file values through [`QosSnapshot::current`]) and the previous
//!      state, and return the next state and a
//!      [`Decision`]: directories to create ([`EnsureDir`], e.g. a resctrl
//!      group), cgroup writes ([`ResourceUpdate`]), plain file writes
//!      ([`FileWrite`], for /proc/sys or resctrl), evictions
//!      ([`EvictionRequest`]) and notes ([`Note`], e.g. "skipped: node CPU
//!      usage sample is 40s old"). Never write, create, sleep or read the
//!      clock: the time is `snapshot.now`. Kernel files outside the cgroup
//!      tree are read through a [`HostFiles`](super::hostfiles::HostFiles)
//!      the strategy is built with.
//!    - optionally [`Strategy::gauges`] to export extra gauges (upstream names
//!      such as `be_suppress_cpu_cores`) filled from [`Decision::gauges`].
//! 2. Add it to [`standard_strategies`] (in `qosmanager/mod.rs`).
//! 3. Unit-test `decide` on hand-built snapshots: [`QosSnapshot::for_test`]
//!    and [`MapReader`] give a snapshot without any I/O; the test helpers in
//!    `framework::testing` decide once (`DecideFresh`), thread the state over
//!    several rounds (`Rounds`) and check that two calls on the same inputs
//!    agree (`assert_deterministic`, one test per strategy).
//!
//! The runner first creates the requested directories (a write under one it
//! could not create is not attempted), then applies writes through the
//! shared [`ResourceExecutor`] (so hierarchical cpuset/quota ordering and
//! the audit trail come for free), reads every managed file back first to
//! count drift repaired, hands evictions to the configured [`Evictor`],
//! records expected values for `GET /qos/explain`, and exports per-strategy
//! metrics. It keeps each strategy's state (type-erased, see
//! [`AnyStrategy`]) and commits the next state only after a round without
//! errors: a failed write leaves the old state, so the next round decides
//! (and writes) again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use apis::extension::{PriorityClass, QoSClass};
use apis::slo::v1alpha1::NodeSLOSpec;
use k8s_openapi::api::core::v1::Pod;
use koord_common::MetricsRegistry;
use koord_common::metrics::FloatGauge;
use koord_common::sync::MutexExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::distribution::{DistributionMetrics, RuleDistribution};
use crate::capabilities::NodeCapabilities;
use crate::metriccache::MetricCache;
use crate::resourceexecutor::{ResourceExecutor, ResourceUpdate, WriteStatus};
use crate::statesinformer::ObservedRule;
use crate::system::cgroup::{CgroupLayout, CgroupResource, CgroupValue, QosTier};
use koord_common::units::CpuTopology;
use koord_common::units::{Bytes, CpuSet, MilliCpu};

// ---------------------------------------------------------------------------
// Snapshot
// ---------------------------------------------------------------------------

/// One metric value and when it was sampled (so strategies can judge staleness).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricSample {
    pub value: f64,
    pub time: SystemTime,
}

impl MetricSample {
    pub fn new(value: f64, time: SystemTime) -> Self {
        Self { value, time }
    }

    /// The sample's age at `now` (zero for samples from the future).
    pub fn age(&self, now: SystemTime) -> Duration {
        now.duration_since(self.time).unwrap_or_default()
    }

    /// Whether the sample is no older than `max_age` at `now`.
    pub fn is_fresh(&self, now: SystemTime, max_age: Duration) -> bool {
        self.age(now) <= max_age
    }
}

/// Latest node-level samples from the metric cache. `None`: never collected
/// (or expired). CPU in cores, memory in bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeUsage {
    pub cpu: Option<MetricSample>,
    /// `MemTotal - MemAvailable`.
    pub memory: Option<MetricSample>,
    /// `MemTotal - MemFree`.
    pub memory_with_page_cache: Option<MetricSample>,
    /// Node CPU not accounted to any pod.
    pub system_cpu: Option<MetricSample>,
    pub system_memory: Option<MetricSample>,
    /// Σ CPU of BE pods.
    pub be_cpu: Option<MetricSample>,
    /// Σ memory of BE pods.
    pub be_memory: Option<MetricSample>,
}

/// The node's size and what is held back from pods.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeInfo {
    /// `status.capacity.cpu` (standalone: online CPUs × 1000m).
    pub cpu_capacity: MilliCpu,
    /// `status.capacity.memory` (standalone: MemTotal); 0 when unknown.
    pub memory_capacity: Bytes,
    /// CPU reserved for the system: the larger of kubelet's (capacity -
    /// allocatable) and the `node.koordinator.sh/reservation` amount.
    pub cpu_reserved: MilliCpu,
    /// Memory reserved likewise.
    pub memory_reserved: Bytes,
    /// CPUs named in `node.koordinator.sh/reservation` (`reservedCPUs`).
    pub reserved_cpus: CpuSet,
    /// Exclusive SYSTEM-QoS CPUs (`node.koordinator.sh/system-qos-resource`).
    pub system_qos_exclusive_cpus: CpuSet,
    /// The kubelet's CPU manager policy and the CPUs its static policy
    /// pinned to pods koordinator does not manage (`cpu_manager_state`).
    pub kubelet_cpu_manager: crate::statesinformer::cpumanager::KubeletCpuManagerView,
    /// Node annotations (for strategies reading other node-level keys).
    pub annotations: BTreeMap<String, String>,
    /// `status.allocatable` by resource name: `cpu` in milli-CPU, everything
    /// else (memory, batch-cpu, batch-memory, ...) as its plain value;
    /// empty without a Node object.
    pub allocatable: BTreeMap<String, i64>,
}

/// One container of a [`QosPod`].
#[derive(Debug, Clone, PartialEq)]
pub struct QosContainer {
    pub name: String,
    /// Runtime ID with prefix (`containerd://...`); `None` until started.
    pub id: Option<String>,
    /// Cgroup dir relative to the hierarchy root; `None` until started.
    pub cgroup_dir: Option<PathBuf>,
    /// `resources.requests.cpu` (or `kubernetes.io/batch-cpu`).
    pub cpu_request: Option<MilliCpu>,
    /// `resources.limits.cpu` (or `kubernetes.io/batch-cpu`).
    pub cpu_limit: Option<MilliCpu>,
    /// `resources.requests.memory` (or `kubernetes.io/batch-memory`).
    pub memory_request: Option<Bytes>,
    /// `resources.limits.memory` (or `kubernetes.io/batch-memory`).
    pub memory_limit: Option<Bytes>,
    pub cpu_usage: Option<MetricSample>,
    pub memory_usage: Option<MetricSample>,
}

/// One pod as the QoS strategies see it.
#[derive(Debug, Clone, PartialEq)]
pub struct QosPod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// Koordinator QoS class (label, else derived from the Kubernetes class).
    pub qos: QoSClass,
    /// The raw `koordinator.sh/qosClass` label value (upstream's
    /// `GetPodQoSClassRaw`), `None` when absent.
    pub qos_label: QoSClass,
    pub kube_qos: QosTier,
    pub priority: PriorityClass,
    /// `spec.priority` (defaults by priority class when absent).
    pub priority_value: i32,
    /// `status.phase`.
    pub phase: String,
    /// Pod cgroup dir relative to the hierarchy root.
    pub cgroup_dir: PathBuf,
    pub containers: Vec<QosContainer>,
    /// CPUs from `scheduling.koordinator.sh/resource-status` (LSR/LSE pods).
    pub allocated_cpus: Option<CpuSet>,
    pub cpu_usage: Option<MetricSample>,
    pub memory_usage: Option<MetricSample>,
    /// Index into [`QosSnapshot::kube_pods`] for strategies needing the full object.
    pub kube_index: Option<usize>,
}

impl QosPod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// BE by Koordinator class, or BestEffort by Kubernetes class (upstream's
    /// rule for "not a BE pod" is: neither).
    pub fn is_be(&self) -> bool {
        self.qos_label == QoSClass::BE || self.kube_qos == QosTier::BestEffort
    }

    /// Σ container CPU limits; `None` when any container is unlimited.
    pub fn cpu_limit(&self) -> Option<MilliCpu> {
        self.containers
            .iter()
            .map(|c| c.cpu_limit)
            .try_fold(0i64, |sum, limit| limit.map(|l| sum.saturating_add(l.0)))
            .filter(|_| !self.containers.is_empty())
            .map(MilliCpu)
    }

    /// Σ container CPU requests.
    pub fn cpu_request(&self) -> MilliCpu {
        MilliCpu(
            self.containers
                .iter()
                .filter_map(|c| c.cpu_request)
                .map(|m| m.0)
                .sum(),
        )
    }
}

/// Current value of a cgroup file, read on demand. The runner passes a
/// reader over the real hierarchy; tests use [`MapReader`].
pub trait CgroupReader: Send + Sync {
    /// The value of `resource` for the cgroup at `dir` (relative); `None`
    /// when the file is missing or unreadable.
    fn read(&self, dir: &Path, resource: CgroupResource) -> Option<CgroupValue>;

    /// Child cgroup directory names of `dir` (in the resource's hierarchy).
    fn children(&self, dir: &Path, resource: CgroupResource) -> Vec<String>;
}

/// Reads through a [`CgroupLayout`].
pub struct LayoutReader(pub CgroupLayout);

impl CgroupReader for LayoutReader {
    fn read(&self, dir: &Path, resource: CgroupResource) -> Option<CgroupValue> {
        self.0.read_value(dir, resource).ok()
    }

    fn children(&self, dir: &Path, resource: CgroupResource) -> Vec<String> {
        let Ok(path) = self.0.controller_path(dir, resource.v1_controller()) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(path) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }
}

/// An in-memory [`CgroupReader`] for tests.
#[derive(Debug, Clone, Default)]
pub struct MapReader {
    pub values: HashMap<(PathBuf, CgroupResource), CgroupValue>,
}

impl MapReader {
    pub fn with(
        mut self,
        dir: impl Into<PathBuf>,
        resource: CgroupResource,
        value: CgroupValue,
    ) -> Self {
        self.values.insert((dir.into(), resource), value);
        self
    }
}

impl CgroupReader for MapReader {
    fn read(&self, dir: &Path, resource: CgroupResource) -> Option<CgroupValue> {
        self.values.get(&(dir.to_path_buf(), resource)).cloned()
    }

    fn children(&self, dir: &Path, resource: CgroupResource) -> Vec<String> {
        let mut names: Vec<String> = self
            .values
            .keys()
            .filter(|(path, res)| *res == resource && path.parent() == Some(dir))
            .filter_map(|(path, _)| path.file_name()?.to_str().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Upstream's default `--var-lib-kubelet-dir`.
pub const DEFAULT_KUBELET_ROOT: &str = "/var/lib/kubelet";

/// Everything a strategy may look at, gathered once per round.
#[derive(Clone)]
pub struct QosSnapshot {
    /// The time of this round; use it instead of a clock.
    pub now: SystemTime,
    /// The node's NodeSLO spec; `None` before one was received. Strategies
    /// merge upstream defaults (`apis::configuration::defaults`) themselves.
    pub node_slo: Option<Arc<NodeSLOSpec>>,
    /// The version of `node_slo` and when koordlet received it (rule
    /// distribution metrics); `None` with no NodeSLO.
    pub node_slo_rule: Option<ObservedRule>,
    pub node: NodeInfo,
    pub node_usage: NodeUsage,
    pub pods: Vec<QosPod>,
    /// The full pod objects, indexed by [`QosPod::kube_index`].
    pub kube_pods: Arc<Vec<Pod>>,
    /// Online CPUs with core/socket/NUMA ids; `None` before the first read.
    pub topology: Option<Arc<CpuTopology>>,
    pub capabilities: Arc<NodeCapabilities>,
    pub layout: CgroupLayout,
    /// How often node/pod metrics are collected; a sample older than
    /// [`QosSnapshot::max_metric_age`] is stale.
    pub collect_interval: Duration,
    /// For window queries (averages over a time window).
    pub metric_cache: Option<Arc<MetricCache>>,
    pub reader: Arc<dyn CgroupReader>,
    pub config: QosManagerConfig,
    /// UIDs of pods whose latest eviction was refused (a PodDisruptionBudget's
    /// 429, an API error): their resources are not on their way out, so the
    /// eviction strategies may ask again. Filled from the [`Evictor`].
    pub eviction_refused: std::collections::HashSet<String>,
    /// How long a pod asked to go, and still present, counts as releasing
    /// its resources: two minutes for evictions; zero when the evictor
    /// stops containers, which the kubelet restarts. From the [`Evictor`].
    pub eviction_pending_window: Duration,
    /// The LS usage the reaction path has seen recently (see
    /// [`super::reaction`]); `cpusuppress` counts LS as using at least this.
    /// `None` without the reaction path.
    pub ls_floor: Option<super::reaction::LsFloor>,
    /// The LS threads' cumulative scheduling counters, read by the shell
    /// while the latency-protection loop is on (see [`super::latencyguard`]);
    /// `None` otherwise or when they could not be read.
    pub ls_sched: Option<super::latencyguard::LsSchedCounters>,
    /// PVC → PV lookups (blkio `podvolume` blocks).
    pub volumes: Arc<dyn crate::statesinformer::volumes::VolumeLookup>,
    /// The kubelet's root directory (`--var-lib-kubelet-dir`), under which
    /// pod volumes are mounted.
    pub kubelet_root: PathBuf,
}

impl std::fmt::Debug for QosSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QosSnapshot")
            .field("now", &self.now)
            .field("node", &self.node)
            .field("node_usage", &self.node_usage)
            .field("pods", &self.pods.len())
            .finish_non_exhaustive()
    }
}

impl QosSnapshot {
    /// A snapshot with no NodeSLO, no pods, no metrics, every capability of a
    /// cgroup v1 node with CPU burst, and an empty [`MapReader`].
    pub fn for_test(now: SystemTime) -> Self {
        Self {
            now,
            node_slo: None,
            node_slo_rule: None,
            node: NodeInfo::default(),
            node_usage: NodeUsage::default(),
            pods: Vec::new(),
            kube_pods: Arc::new(Vec::new()),
            topology: None,
            capabilities: Arc::new(test_capabilities()),
            layout: CgroupLayout::new(
                crate::system::cgroup::CgroupVersion::V1,
                crate::system::cgroup::CgroupDriver::Cgroupfs,
                "/sys/fs/cgroup",
            ),
            collect_interval: Duration::from_secs(1),
            metric_cache: None,
            reader: Arc::new(MapReader::default()),
            config: QosManagerConfig::default(),
            eviction_refused: Default::default(),
            eviction_pending_window: crate::evictor::request::EVICTED_MEMORY,
            ls_floor: None,
            ls_sched: None,
            volumes: Arc::new(crate::statesinformer::volumes::MapVolumeLookup::default()),
            kubelet_root: PathBuf::from(DEFAULT_KUBELET_ROOT),
        }
    }

    /// The current value of a file (see [`CgroupReader::read`]).
    pub fn current(&self, dir: &Path, resource: CgroupResource) -> Option<CgroupValue> {
        self.reader.read(dir, resource)
    }

    /// Samples older than this are stale: three collection intervals, at least 10 s.
    pub fn max_metric_age(&self) -> Duration {
        (self.collect_interval * 3).max(Duration::from_secs(10))
    }

    /// The sample if it exists and is fresh, else a note saying why not.
    pub fn fresh(&self, what: &str, sample: Option<MetricSample>) -> Result<MetricSample, String> {
        match sample {
            None => Err(format!("no {what} sample yet")),
            Some(sample) if !sample.is_fresh(self.now, self.max_metric_age()) => Err(format!(
                "{what} sample is stale ({}s old, limit {}s)",
                sample.age(self.now).as_secs(),
                self.max_metric_age().as_secs()
            )),
            Some(sample) => Ok(sample),
        }
    }

    pub fn kube_pod(&self, pod: &QosPod) -> Option<&Pod> {
        self.kube_pods.get(pod.kube_index?)
    }

    pub fn be_pods(&self) -> impl Iterator<Item = &QosPod> {
        self.pods.iter().filter(|pod| pod.is_be())
    }
}

// ---------------------------------------------------------------------------
// Decision
// ---------------------------------------------------------------------------

/// A pod to evict and why; the [`Evictor`] executes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionRequest {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// Upstream's reason string (e.g. `evictPodByNodeMemoryUsage`).
    pub reason: String,
    /// Human-readable detail for the event and log.
    pub message: String,
    /// The deciding strategy (filled in by the runner).
    pub strategy: &'static str,
    /// Runtime IDs (`containerd://<id>`) of the pod's started containers,
    /// for the evictor that stops containers through the runtime.
    pub container_ids: Vec<String>,
}

impl EvictionRequest {
    pub fn for_pod(pod: &QosPod, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            uid: pod.uid.clone(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            reason: reason.into(),
            message: message.into(),
            strategy: "",
            container_ids: pod.containers.iter().filter_map(|c| c.id.clone()).collect(),
        }
    }
}

/// How the runner checks a [`FileWrite`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadBack {
    /// The trimmed file content must equal the written value.
    #[default]
    Exact,
    /// The file does not read back what was written (e.g. resctrl `tasks`,
    /// which appends): write every time, count no drift.
    None,
}

/// A write to a non-cgroup kernel file (`/proc/sys/vm/...`, resctrl).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileWrite {
    /// Absolute path (built from the configured roots).
    pub path: PathBuf,
    pub value: String,
    pub reason: String,
    pub read_back: ReadBack,
}

/// A directory the runner creates, if missing, before any write of the
/// round (the writes may target files inside it). Only the last component is
/// created: a missing parent means the host is not what the strategy read,
/// and is reported as an error rather than papered over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsureDir {
    /// Absolute path (built from the configured roots).
    pub path: PathBuf,
    pub reason: String,
}

/// One gauge value a strategy reports; `name` must be one its
/// [`Strategy::gauges`] declared. The runner adds the `node` label.
#[derive(Debug, Clone, PartialEq)]
pub struct GaugeValue {
    pub name: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub value: f64,
}

/// A counter increment a strategy reports; `name` must be one its
/// [`Strategy::counters`] declared. The runner adds the `node` label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterIncrement {
    pub name: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub by: u64,
}

/// What a note says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// The strategy did nothing (disabled, metrics missing, ...).
    Skipped,
    /// Context for the actions taken.
    Info,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub kind: NoteKind,
    pub text: String,
}

/// A strategy's output for one round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// Created before `writes` and `file_writes`.
    pub dirs: Vec<EnsureDir>,
    pub writes: Vec<ResourceUpdate>,
    pub file_writes: Vec<FileWrite>,
    pub evictions: Vec<EvictionRequest>,
    pub notes: Vec<Note>,
    pub gauges: Vec<GaugeValue>,
    /// Counter increments, added when the decision is carried out.
    pub counters: Vec<CounterIncrement>,
    /// An eviction strategy's account of the round (tasks, victims, dry
    /// runs), served by `GET /qos/explain?evictions`.
    pub eviction_report: Option<super::evictreport::EvictionReport>,
    /// Settings the strategy wanted but this kernel cannot take, served by
    /// `GET /qos/explain?unsupported`; replaced every round.
    pub unsupported: Vec<UnsupportedSetting>,
}

/// A setting a strategy did not write because the kernel lacks its file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnsupportedSetting {
    /// Set by the runner.
    pub strategy: &'static str,
    /// The NodeSLO setting(s), e.g. `minLimitPercent`.
    pub setting: String,
    /// The kernel file it would have been written to, e.g. `memory.min`.
    pub file: String,
    /// How many cgroups would have received it this round.
    pub cgroups: usize,
}

impl Decision {
    /// A decision that does nothing, saying why.
    pub fn skipped(reason: impl Into<String>) -> Self {
        let mut decision = Self::default();
        decision.skip(reason);
        decision
    }

    pub fn skip(&mut self, reason: impl Into<String>) {
        self.notes.push(Note {
            kind: NoteKind::Skipped,
            text: reason.into(),
        });
    }

    pub fn info(&mut self, text: impl Into<String>) {
        self.notes.push(Note {
            kind: NoteKind::Info,
            text: text.into(),
        });
    }

    /// Adds a cgroup write; an invalid value becomes a skip note instead.
    pub fn write(
        &mut self,
        dir: impl Into<PathBuf>,
        resource: CgroupResource,
        value: CgroupValue,
        reason: impl Into<String>,
    ) {
        let dir = dir.into();
        let shown = value.to_string();
        match ResourceUpdate::new(dir.clone(), resource, value, reason) {
            Ok(update) => self.writes.push(update),
            Err(err) => self.skip(format!(
                "invalid value {shown} for {} of {}: {err}",
                resource.name(),
                dir.display()
            )),
        }
    }

    /// Asks the runner to create directory `path` if it does not exist.
    pub fn ensure_dir(&mut self, path: impl Into<PathBuf>, reason: impl Into<String>) {
        self.dirs.push(EnsureDir {
            path: path.into(),
            reason: reason.into(),
        });
    }

    pub fn gauge(&mut self, name: &'static str, labels: Vec<(&'static str, String)>, value: f64) {
        self.gauges.push(GaugeValue {
            name,
            labels,
            value,
        });
    }

    pub fn count(&mut self, name: &'static str, labels: Vec<(&'static str, String)>, by: u64) {
        self.counters.push(CounterIncrement { name, labels, by });
    }

    /// Whether the decision says it did nothing.
    pub fn is_skipped(&self) -> bool {
        self.dirs.is_empty()
            && self.writes.is_empty()
            && self.file_writes.is_empty()
            && self.evictions.is_empty()
            && self.notes.iter().any(|n| n.kind == NoteKind::Skipped)
    }

    /// The first skip note, if any.
    pub fn skip_reason(&self) -> Option<&str> {
        self.notes
            .iter()
            .find(|n| n.kind == NoteKind::Skipped)
            .map(|n| n.text.as_str())
    }

    /// The write planned for `resource` of `dir`, if any.
    pub fn write_for(&self, dir: &Path, resource: CgroupResource) -> Option<&CgroupValue> {
        self.writes
            .iter()
            .rev()
            .find(|w| w.resource == resource && w.dir == dir)
            .map(|w| &w.value)
    }
}

// ---------------------------------------------------------------------------
// Strategy
// ---------------------------------------------------------------------------

/// A kernel feature a strategy needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    /// `cpu.cfs_burst_us` / `cpu.max.burst`.
    CpuBurst,
    CpuIdle,
    /// resctrl with L3 CAT or MBA.
    Resctrl,
    /// Node-level PSI.
    Psi,
    /// The cpuset controller is present.
    Cpuset,
    /// The blkio (v1) / io (v2) controller is present.
    Blkio,
}

impl Capability {
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::CpuBurst => "cpuBurst",
            Capability::CpuIdle => "cpuIdle",
            Capability::Resctrl => "resctrl",
            Capability::Psi => "psi",
            Capability::Cpuset => "cpuset",
            Capability::Blkio => "blkio",
        }
    }

    /// `Ok` when present; else why not.
    pub fn check(self, caps: &NodeCapabilities) -> Result<(), String> {
        let present = match self {
            Capability::CpuBurst => caps.cpu_burst,
            Capability::CpuIdle => caps.cpu_idle,
            Capability::Resctrl => caps.resctrl.supported,
            Capability::Psi => caps.psi,
            Capability::Cpuset => has_controller(caps, "cpuset"),
            Capability::Blkio => has_controller(caps, "blkio") || has_controller(caps, "io"),
        };
        if present {
            return Ok(());
        }
        let reason = caps
            .reasons
            .get(self.as_str())
            .cloned()
            .unwrap_or_else(|| "not detected on this node".to_string());
        Err(format!("unsupported: {} ({reason})", self.as_str()))
    }
}

fn has_controller(caps: &NodeCapabilities, name: &str) -> bool {
    caps.cgroup.controllers.iter().any(|c| c == name)
}

/// Capabilities of a cgroup v1 node with every controller, CPU burst,
/// cpu.idle and PSI, but no resctrl or core scheduling (this CI machine).
pub fn test_capabilities() -> NodeCapabilities {
    use crate::capabilities::{
        CgroupCapabilities, CgroupDriver, CgroupVersion, MemoryQosCapabilities, ResctrlCapabilities,
    };
    let controllers: Vec<String> = ["blkio", "cpu", "cpuacct", "cpuset", "memory", "pids"]
        .map(String::from)
        .to_vec();
    NodeCapabilities {
        cgroup: CgroupCapabilities {
            version: CgroupVersion::V1,
            version_reason: String::new(),
            driver: CgroupDriver::Cgroupfs,
            driver_source: None,
            controllers: controllers.clone(),
            v1_controllers: controllers,
            v2_controllers: Vec::new(),
            unified_mount: false,
            unified_mount_path: None,
        },
        cpu_burst: true,
        cpu_idle: true,
        psi: true,
        psi_cgroup: false,
        psi_cgroup_source: None,
        core_sched: false,
        group_identity: false,
        resctrl: ResctrlCapabilities {
            supported: false,
            cat: false,
            mba: false,
            closids: None,
            cbm_mask: None,
        },
        smt: false,
        numa_nodes: 1,
        cpus: 2,
        kernel: "test".to_string(),
        memory_qos: MemoryQosCapabilities::default(),
        cpu_topology: Vec::new(),
        reasons: BTreeMap::new(),
    }
}

/// An upstream koordlet feature gate (`--feature-gates=Name=true`) guarding
/// a strategy. Strategies built with `new` are on; the daemon applies the
/// gates with `with_feature_gates`, where upstream's default decides when
/// the flag does not name the feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGate {
    pub name: &'static str,
    pub default: bool,
    pub enabled: bool,
}

impl FeatureGate {
    /// On, whatever upstream's default.
    pub const fn on(name: &'static str, default: bool) -> Self {
        Self {
            name,
            default,
            enabled: true,
        }
    }

    /// The gate as `gates` (parsed `--feature-gates`) set it.
    pub fn from_gates(self, gates: &BTreeMap<String, bool>) -> Self {
        Self {
            enabled: gates.get(self.name).copied().unwrap_or(self.default),
            ..self
        }
    }

    /// `Err` (the skip note) when off.
    pub fn check(&self) -> Result<(), String> {
        if self.enabled {
            return Ok(());
        }
        Err(format!(
            "feature gate {} is off (enable it with --feature-gates={}=true)",
            self.name, self.name
        ))
    }
}

/// A QoS strategy. See the module documentation for how to add one.
pub trait Strategy: Send + Sync + 'static {
    /// What the strategy carries from one round to the next (`()` when
    /// nothing). The runner keeps it and hands it back to the next `decide`;
    /// it commits a new state only when every write of the decision that
    /// produced it succeeded, so a failed round is decided again from the
    /// same state.
    type State: Clone + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static;

    /// Short upstream plugin name, e.g. `cpusuppress`.
    fn name(&self) -> &'static str;

    /// Time between two rounds (NodeSLO or [`QosManagerConfig`]).
    fn interval(&self, snapshot: &QosSnapshot) -> Duration;

    /// Kernel features without which `decide` is not called.
    fn required_capabilities(&self) -> &'static [Capability] {
        &[]
    }

    /// Extra gauges `(name without the koordlet_ prefix, help)` this
    /// strategy reports through [`Decision::gauges`].
    fn gauges(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// Extra counters `(name without the koordlet_ prefix and the _total
    /// suffix, help)` this strategy reports through [`Decision::counters`].
    fn counters(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The pure decision for one round: the actions, and the state to keep
    /// if they are carried out. Same snapshot and state, same result.
    fn decide(&self, snapshot: &QosSnapshot, state: &Self::State) -> (Decision, Self::State);
}

/// A strategy's state between rounds, as the runner holds it (the
/// strategies' state types differ).
pub struct StrategyState(Box<dyn std::any::Any + Send + Sync>);

impl std::fmt::Debug for StrategyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StrategyState(..)")
    }
}

impl StrategyState {
    /// The state as `T`, `None` when it holds another type.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

/// The form of a [`Strategy`] the runner keeps in a list: the state is
/// type-erased. Implemented for every [`Strategy`]; do not implement it
/// directly.
pub trait AnyStrategy: Send + Sync {
    fn name(&self) -> &'static str;
    fn interval(&self, snapshot: &QosSnapshot) -> Duration;
    fn required_capabilities(&self) -> &'static [Capability];
    fn gauges(&self) -> &'static [(&'static str, &'static str)];
    fn counters(&self) -> &'static [(&'static str, &'static str)];
    /// The state before the first round.
    fn initial_state(&self) -> StrategyState;
    /// [`Strategy::decide`] on an erased state.
    fn decide_erased(
        &self,
        snapshot: &QosSnapshot,
        state: &StrategyState,
    ) -> (Decision, StrategyState);
}

impl<S: Strategy> AnyStrategy for S {
    fn name(&self) -> &'static str {
        Strategy::name(self)
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        Strategy::interval(self, snapshot)
    }

    fn required_capabilities(&self) -> &'static [Capability] {
        Strategy::required_capabilities(self)
    }

    fn gauges(&self) -> &'static [(&'static str, &'static str)] {
        Strategy::gauges(self)
    }

    fn counters(&self) -> &'static [(&'static str, &'static str)] {
        Strategy::counters(self)
    }

    fn initial_state(&self) -> StrategyState {
        StrategyState(Box::new(S::State::default()))
    }

    fn decide_erased(
        &self,
        snapshot: &QosSnapshot,
        state: &StrategyState,
    ) -> (Decision, StrategyState) {
        // The runner only hands back states this strategy produced; a
        // foreign one (a programming error) starts over from the default.
        let default_state;
        let previous = match state.get::<S::State>() {
            Some(state) => state,
            None => {
                tracing::error!(
                    strategy = Strategy::name(self),
                    "state of another type; starting from the default"
                );
                default_state = S::State::default();
                &default_state
            }
        };
        let (decision, next) = Strategy::decide(self, snapshot, previous);
        (decision, StrategyState(Box::new(next)))
    }
}

/// Test helpers for calling strategies outside the runner.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Decision, QosSnapshot, Strategy};

    /// One decision from the initial state, the next state dropped (for
    /// strategies or cases where the state does not matter).
    pub(crate) trait DecideFresh: Strategy {
        fn decide_fresh(&self, snapshot: &QosSnapshot) -> Decision {
            self.decide(snapshot, &Self::State::default()).0
        }
    }

    impl<S: Strategy> DecideFresh for S {}

    /// Decides twice on the same snapshot and state, asserts both results
    /// are equal and returns them: the purity check every strategy runs.
    pub(crate) fn assert_deterministic<S: Strategy>(
        strategy: &S,
        snapshot: &QosSnapshot,
        state: &S::State,
    ) -> (Decision, S::State) {
        let first = strategy.decide(snapshot, state);
        let second = strategy.decide(snapshot, state);
        assert_eq!(first.0, second.0, "{}: decisions differ", strategy.name());
        assert_eq!(first.1, second.1, "{}: next states differ", strategy.name());
        first
    }

    /// A strategy with its state, committed after every round as if every
    /// write succeeded: successive rounds without a runner.
    pub(crate) struct Rounds<S: Strategy> {
        pub strategy: S,
        pub state: S::State,
    }

    impl<S: Strategy> Rounds<S> {
        pub(crate) fn new(strategy: S) -> Self {
            Self {
                strategy,
                state: S::State::default(),
            }
        }

        /// One round; its state is committed.
        pub(crate) fn decide(&mut self, snapshot: &QosSnapshot) -> Decision {
            let (decision, next) = self.strategy.decide(snapshot, &self.state);
            self.state = next;
            decision
        }
    }
}

/// Executes evictions. Part of the runner's output; the real implementation
/// (Eviction API, standalone kill) lives in `crate::evictor`.
pub trait Evictor: Send + Sync {
    /// Called from the runner's blocking thread; must not block long
    /// (hand off to an async task or queue).
    fn evict(&self, request: EvictionRequest);

    /// UIDs of pods whose latest eviction was refused recently.
    fn recently_refused(&self) -> std::collections::HashSet<String> {
        Default::default()
    }

    /// How long a pod asked to go still counts as releasing its resources
    /// (see [`QosSnapshot::eviction_pending_window`]).
    fn pending_window(&self) -> Duration {
        crate::evictor::request::EVICTED_MEMORY
    }
}

/// Logs evictions instead of executing them; used when no evictor is configured.
#[derive(Debug, Default, Clone)]
pub struct LoggingEvictor;

impl Evictor for LoggingEvictor {
    fn evict(&self, request: EvictionRequest) {
        tracing::warn!(
            pod = %format!("{}/{}", request.namespace, request.name),
            uid = %request.uid,
            reason = %request.reason,
            strategy = request.strategy,
            "eviction requested but no evictor is configured: {}",
            request.message
        );
    }
}

/// Intervals and switches of the QoS manager (upstream `qosmanager/framework.Config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosManagerConfig {
    /// `-reconcile-interval-seconds` (cgreconcile, blkio, resctrl, sysreconcile).
    pub reconcile_interval: Duration,
    /// `-cpu-suppress-interval-seconds`.
    pub cpu_suppress_interval: Duration,
    /// `-cpu-evict-interval-seconds`.
    pub cpu_evict_interval: Duration,
    /// `-memory-evict-interval-seconds`.
    pub memory_evict_interval: Duration,
    /// `-memory-evict-cool-time-seconds`.
    pub memory_evict_cool_time: Duration,
    /// `-cpu-evict-cool-time-seconds`.
    pub cpu_evict_cool_time: Duration,
    /// cpuburst runs at this period (upstream: the collector interval).
    pub cpu_burst_interval: Duration,
    /// `--evict-dry-run-features`: eviction features that only report.
    pub evict_dry_run_features: Vec<&'static str>,
}

impl Default for QosManagerConfig {
    fn default() -> Self {
        Self {
            reconcile_interval: Duration::from_secs(1),
            cpu_suppress_interval: Duration::from_secs(1),
            cpu_evict_interval: Duration::from_secs(1),
            memory_evict_interval: Duration::from_secs(1),
            memory_evict_cool_time: Duration::from_secs(4),
            cpu_evict_cool_time: Duration::from_secs(20),
            cpu_burst_interval: Duration::from_secs(1),
            evict_dry_run_features: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// Explain registry
// ---------------------------------------------------------------------------

/// What koordlet wants in one file, and who wants it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedFile {
    /// Absolute path.
    pub path: String,
    /// Cgroup dir relative to the hierarchy root (empty for plain files).
    pub dir: String,
    /// Cgroup file name or plain file path.
    pub resource: String,
    pub expected: String,
    pub strategy: &'static str,
    pub reason: String,
    /// RFC 3339 time of the round that last asked for this value.
    pub decided_at: String,
}

/// Expected values by absolute path, shared between the runner and the
/// explain endpoint.
#[derive(Clone, Default)]
pub struct ManagedFiles {
    inner: Arc<Mutex<BTreeMap<String, ManagedFile>>>,
    /// The latest eviction report of each eviction strategy.
    eviction_reports: Arc<Mutex<BTreeMap<&'static str, super::evictreport::EvictionReport>>>,
    /// Each strategy's settings this kernel cannot take, from its latest round.
    unsupported: Arc<Mutex<BTreeMap<&'static str, Vec<UnsupportedSetting>>>>,
}

impl ManagedFiles {
    /// The latest report of every eviction strategy, by strategy name.
    pub fn eviction_reports(&self) -> Vec<super::evictreport::EvictionReport> {
        self.eviction_reports
            .lock_or_recover()
            .values()
            .cloned()
            .collect()
    }

    fn set_eviction_report(
        &self,
        strategy: &'static str,
        report: super::evictreport::EvictionReport,
    ) {
        self.eviction_reports
            .lock_or_recover()
            .insert(strategy, report);
    }

    /// Every strategy's unsupported settings from its latest round.
    pub fn unsupported(&self) -> Vec<UnsupportedSetting> {
        self.unsupported
            .lock_or_recover()
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    fn set_unsupported(&self, strategy: &'static str, settings: Vec<UnsupportedSetting>) {
        let mut map = self.unsupported.lock_or_recover();
        if settings.is_empty() {
            map.remove(strategy);
        } else {
            map.insert(strategy, settings);
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, ManagedFile>> {
        self.inner.lock_or_recover()
    }

    pub fn get(&self, path: &str) -> Option<ManagedFile> {
        self.lock().get(path).cloned()
    }

    pub fn all(&self) -> Vec<ManagedFile> {
        self.lock().values().cloned().collect()
    }

    fn insert(&self, file: ManagedFile) {
        self.lock().insert(file.path.clone(), file);
    }

    /// Drops entries of a strategy whose cgroup no longer exists.
    fn prune_missing(&self) {
        self.lock().retain(|path, _| Path::new(path).exists());
    }
}

// ---------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------

type StrategyLabels = Vec<(&'static str, &'static str)>;
type GaugeLabels = Vec<(String, String)>;

/// Per-strategy metrics: `koordlet_qos_strategy_runs_total`,
/// `..._actions_total`, `..._errors_total`, `..._skips_total`,
/// `..._drifts_repaired_total` and `koordlet_qos_strategy_last_duration_seconds`,
/// all labelled `{strategy}`; plus the strategies' own gauges.
#[derive(Clone, Default)]
pub struct QosMetrics {
    runs: Family<StrategyLabels, Counter>,
    actions: Family<StrategyLabels, Counter>,
    errors: Family<StrategyLabels, Counter>,
    skips: Family<StrategyLabels, Counter>,
    drifts: Family<StrategyLabels, Counter>,
    last_duration: Family<StrategyLabels, FloatGauge>,
    gauges: BTreeMap<&'static str, Family<GaugeLabels, FloatGauge>>,
    counters: BTreeMap<&'static str, Family<GaugeLabels, Counter>>,
    node: String,
}

impl QosMetrics {
    /// Registers the families (and each strategy's gauges) on `registry`.
    pub fn register(
        registry: &MetricsRegistry,
        node: &str,
        strategies: &[Box<dyn AnyStrategy>],
    ) -> Self {
        let mut metrics = Self {
            node: node.to_string(),
            ..Self::default()
        };
        for strategy in strategies {
            for (name, _) in strategy.gauges() {
                metrics.gauges.entry(name).or_default();
            }
            for (name, _) in strategy.counters() {
                metrics.counters.entry(name).or_default();
            }
            let labels = vec![("strategy", strategy.name())];
            for family in [
                &metrics.runs,
                &metrics.actions,
                &metrics.errors,
                &metrics.skips,
                &metrics.drifts,
            ] {
                family.get_or_create(&labels).inc_by(0);
            }
        }
        let help: BTreeMap<&'static str, &'static str> = strategies
            .iter()
            .flat_map(|s| s.gauges().iter().chain(s.counters()).copied())
            .collect();
        registry.register_component(|registry| {
            registry.register(
                "qos_strategy_runs",
                "QoS strategy rounds run",
                metrics.runs.clone(),
            );
            registry.register(
                "qos_strategy_actions",
                "cgroup/file writes performed and evictions requested by a QoS strategy",
                metrics.actions.clone(),
            );
            registry.register(
                "qos_strategy_errors",
                "failed directory creations and writes of a QoS strategy",
                metrics.errors.clone(),
            );
            registry.register(
                "qos_strategy_skips",
                "QoS strategy rounds that did nothing (disabled, unsupported, metrics missing or stale)",
                metrics.skips.clone(),
            );
            registry.register(
                "qos_strategy_drifts_repaired",
                "managed files found different from the expected value and rewritten",
                metrics.drifts.clone(),
            );
            registry.register(
                "qos_strategy_last_duration_seconds",
                "duration of the last round of a QoS strategy (decide and apply)",
                metrics.last_duration.clone(),
            );
            for (name, family) in &metrics.gauges {
                let text = help.get(name).copied().unwrap_or("QoS strategy gauge");
                registry.register(*name, text, family.clone());
            }
            for (name, family) in &metrics.counters {
                let text = help.get(name).copied().unwrap_or("QoS strategy counter");
                registry.register(*name, text, family.clone());
            }
        });
        metrics
    }

    fn labels(strategy: &'static str) -> StrategyLabels {
        vec![("strategy", strategy)]
    }

    fn record(&self, strategy: &'static str, outcome: &RoundOutcome) {
        let labels = Self::labels(strategy);
        self.runs.get_or_create(&labels).inc();
        self.actions
            .get_or_create(&labels)
            .inc_by(outcome.actions as u64);
        self.errors
            .get_or_create(&labels)
            .inc_by(outcome.errors as u64);
        self.drifts
            .get_or_create(&labels)
            .inc_by(outcome.drifts_repaired as u64);
        if outcome.skipped {
            self.skips.get_or_create(&labels).inc();
        }
        self.last_duration
            .get_or_create(&labels)
            .set(outcome.duration.as_secs_f64());
    }

    fn set_gauges(&self, gauges: &[GaugeValue]) {
        for gauge in gauges {
            let Some(family) = self.gauges.get(gauge.name) else {
                continue;
            };
            let mut labels = vec![("node".to_string(), self.node.clone())];
            labels.extend(gauge.labels.iter().map(|(k, v)| (k.to_string(), v.clone())));
            family.get_or_create(&labels).set(gauge.value);
        }
    }

    fn add_counters(&self, counters: &[CounterIncrement]) {
        for counter in counters {
            let Some(family) = self.counters.get(counter.name) else {
                continue;
            };
            let mut labels = vec![("node".to_string(), self.node.clone())];
            labels.extend(
                counter
                    .labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone())),
            );
            family.get_or_create(&labels).inc_by(counter.by);
        }
    }

    /// Counter values for tests: (runs, actions, errors, drifts repaired).
    pub fn counts(&self, strategy: &'static str) -> (u64, u64, u64, u64) {
        let labels = Self::labels(strategy);
        (
            self.runs.get_or_create(&labels).get(),
            self.actions.get_or_create(&labels).get(),
            self.errors.get_or_create(&labels).get(),
            self.drifts.get_or_create(&labels).get(),
        )
    }
}

// ---------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------

/// What one round of one strategy did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoundOutcome {
    /// Files written plus evictions requested.
    pub actions: usize,
    /// Failed directory creations and writes.
    pub errors: usize,
    /// Directories created. Not counted as actions: they only prepare the
    /// writes, which are.
    pub dirs_created: usize,
    pub drifts_repaired: usize,
    pub skipped: bool,
    pub duration: Duration,
    pub notes: Vec<Note>,
}

/// Runs strategies against snapshots and applies their decisions.
pub struct QosRunner {
    strategies: Vec<Box<dyn AnyStrategy>>,
    /// Each strategy's committed state, by index.
    states: Vec<StrategyState>,
    executor: ResourceExecutor,
    evictor: Arc<dyn Evictor>,
    managed: ManagedFiles,
    metrics: Option<QosMetrics>,
    /// Which NodeSLO version each strategy applied (see [`super::distribution`]).
    distribution: RuleDistribution,
    distribution_metrics: Option<DistributionMetrics>,
    /// Last expected value we successfully wrote, per absolute path: a later
    /// read-back that differs is drift.
    applied: HashMap<PathBuf, String>,
    next_due: Vec<Option<SystemTime>>,
    last_prune: Option<SystemTime>,
}

impl QosRunner {
    pub fn new(strategies: Vec<Box<dyn AnyStrategy>>, executor: ResourceExecutor) -> Self {
        let count = strategies.len();
        let distribution = RuleDistribution::new(strategies.iter().map(|s| s.name()));
        let states = strategies.iter().map(|s| s.initial_state()).collect();
        Self {
            distribution,
            states,
            distribution_metrics: None,
            strategies,
            executor,
            evictor: Arc::new(LoggingEvictor),
            managed: ManagedFiles::default(),
            metrics: None,
            applied: HashMap::new(),
            next_due: vec![None; count],
            last_prune: None,
        }
    }

    pub fn with_evictor(mut self, evictor: Arc<dyn Evictor>) -> Self {
        self.evictor = evictor;
        self
    }

    /// Shares an existing expected-value registry (e.g. one the explain
    /// endpoint was given before the runner existed).
    pub fn with_managed_files(mut self, managed: ManagedFiles) -> Self {
        self.managed = managed;
        self
    }

    pub fn with_metrics(mut self, metrics: QosMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Reports rule distribution (NodeSLO versions applied, latency).
    pub fn with_distribution_metrics(mut self, metrics: DistributionMetrics) -> Self {
        self.distribution_metrics = Some(metrics);
        self
    }

    /// The NodeSLO version `strategy` last applied without errors.
    pub fn applied_rule(&self, strategy: &str) -> Option<&crate::statesinformer::RuleVersion> {
        self.distribution.applied(strategy)
    }

    pub fn strategies(&self) -> &[Box<dyn AnyStrategy>] {
        &self.strategies
    }

    /// The index of the strategy called `name`, for [`QosRunner::run_one`].
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.strategies.iter().position(|s| s.name() == name)
    }

    /// Pods whose latest eviction was refused (see [`QosSnapshot::eviction_refused`]).
    pub fn refused_evictions(&self) -> std::collections::HashSet<String> {
        self.evictor.recently_refused()
    }

    /// See [`QosSnapshot::eviction_pending_window`].
    pub fn eviction_pending_window(&self) -> Duration {
        self.evictor.pending_window()
    }

    /// The expected-value registry (for the explain endpoint).
    pub fn managed_files(&self) -> ManagedFiles {
        self.managed.clone()
    }

    /// Runs every strategy that is due at `snapshot.now`; returns the
    /// outcomes by strategy name. Blocking: call from a blocking thread.
    pub fn run_due(&mut self, snapshot: &QosSnapshot) -> Vec<(&'static str, RoundOutcome)> {
        let mut outcomes = Vec::new();
        for index in 0..self.strategies.len() {
            let due = self.next_due[index].is_none_or(|due| snapshot.now >= due);
            if !due {
                continue;
            }
            let interval = self.strategies[index].interval(snapshot);
            self.next_due[index] = Some(snapshot.now + interval);
            let name = self.strategies[index].name();
            let outcome = self.run_one(index, snapshot);
            outcomes.push((name, outcome));
        }
        if self
            .last_prune
            .is_none_or(|last| snapshot.now >= last + Duration::from_secs(60))
        {
            self.last_prune = Some(snapshot.now);
            self.managed.prune_missing();
            self.applied.retain(|path, _| path.exists());
        }
        outcomes
    }

    /// The committed state of strategy `index` as `T`; `None` when there is
    /// no such strategy or its state is of another type.
    pub fn committed_state<T: 'static>(&self, index: usize) -> Option<&T> {
        self.states.get(index)?.get()
    }

    /// The earliest time a strategy is due (`None`: run now).
    pub fn next_due(&self) -> Option<SystemTime> {
        self.next_due.iter().copied().min().flatten()
    }

    /// Runs strategy `index` now, regardless of its schedule.
    pub fn run_one(&mut self, index: usize, snapshot: &QosSnapshot) -> RoundOutcome {
        let started = Instant::now();
        let name = self.strategies[index].name();
        let (decision, next_state) = self.decide(index, snapshot);
        let mut outcome = self.apply(name, decision, snapshot);
        outcome.duration = started.elapsed();
        self.commit_state(index, next_state, &outcome);
        self.report_round(name, &outcome, snapshot);
        outcome
    }

    /// Step 1: the strategy's decision from its committed state, or a skip
    /// (and no next state) when the node lacks a capability it needs.
    fn decide(&self, index: usize, snapshot: &QosSnapshot) -> (Decision, Option<StrategyState>) {
        let strategy = &self.strategies[index];
        let unsupported: Vec<String> = strategy
            .required_capabilities()
            .iter()
            .filter_map(|cap| cap.check(&snapshot.capabilities).err())
            .collect();
        if !unsupported.is_empty() {
            return (Decision::skipped(unsupported.join("; ")), None);
        }
        let (decision, next) = strategy.decide_erased(snapshot, &self.states[index]);
        (decision, Some(next))
    }

    /// Step 3: the next state becomes the strategy's state only when the
    /// round had no error; otherwise the next round decides again from the
    /// old one (and so retries what failed, e.g. cpusuppress's quota restore).
    fn commit_state(&mut self, index: usize, next: Option<StrategyState>, outcome: &RoundOutcome) {
        let Some(next) = next else { return };
        if outcome.errors == 0 {
            self.states[index] = next;
        } else {
            tracing::debug!(
                strategy = self.strategies[index].name(),
                errors = outcome.errors,
                "state not committed: the round had errors"
            );
        }
    }

    /// Step 4: logs the notes, records metrics and rule distribution.
    fn report_round(&mut self, name: &'static str, outcome: &RoundOutcome, snapshot: &QosSnapshot) {
        for note in &outcome.notes {
            match note.kind {
                NoteKind::Skipped => tracing::debug!(strategy = name, "skipped: {}", note.text),
                NoteKind::Info => tracing::debug!(strategy = name, "{}", note.text),
            }
        }
        if let Some(metrics) = &self.metrics {
            metrics.record(name, outcome);
        }
        let report = self.distribution.round_finished(
            name,
            snapshot.node_slo_rule.as_ref(),
            outcome.errors == 0,
            snapshot.now + outcome.duration,
        );
        if let Some(metrics) = &self.distribution_metrics {
            metrics.record(name, &report);
        }
    }

    /// Step 2: carries out a decision: reports first, then directories,
    /// cgroup writes, plain file writes and evictions, in that order.
    fn apply(
        &mut self,
        name: &'static str,
        decision: Decision,
        snapshot: &QosSnapshot,
    ) -> RoundOutcome {
        let skipped = decision.is_skipped();
        let Decision {
            dirs,
            writes,
            file_writes,
            evictions,
            notes,
            gauges,
            counters,
            eviction_report,
            unsupported,
        } = decision;
        let mut outcome = RoundOutcome {
            skipped,
            notes,
            ..RoundOutcome::default()
        };
        self.publish_reports(name, &gauges, &counters, eviction_report, unsupported);
        let decided_at = crate::resourceexecutor::audit::rfc3339_utc(snapshot.now);
        let missing_dirs = self.create_dirs(name, dirs, &mut outcome);
        let blocked = Blocked {
            strategy: name,
            missing_dirs: &missing_dirs,
        };
        self.apply_cgroup_writes(
            name,
            writes,
            &blocked,
            &decided_at,
            snapshot.now,
            &mut outcome,
        );
        self.apply_file_writes(name, file_writes, &blocked, &decided_at, &mut outcome);
        self.hand_over_evictions(name, evictions, &mut outcome);
        outcome
    }

    /// Gauges, the eviction report and the unsupported settings of the round.
    fn publish_reports(
        &self,
        name: &'static str,
        gauges: &[GaugeValue],
        counters: &[CounterIncrement],
        eviction_report: Option<super::evictreport::EvictionReport>,
        unsupported: Vec<UnsupportedSetting>,
    ) {
        if let Some(metrics) = &self.metrics {
            metrics.set_gauges(gauges);
            metrics.add_counters(counters);
        }
        if let Some(report) = eviction_report {
            self.managed.set_eviction_report(name, report);
        }
        let unsupported = unsupported
            .into_iter()
            .map(|setting| UnsupportedSetting {
                strategy: name,
                ..setting
            })
            .collect();
        self.managed.set_unsupported(name, unsupported);
    }

    /// Creates the requested directories (before any write: the writes may
    /// target files inside them); returns those that could not be created.
    fn create_dirs(
        &self,
        name: &'static str,
        dirs: Vec<EnsureDir>,
        outcome: &mut RoundOutcome,
    ) -> Vec<PathBuf> {
        let mut missing_dirs = Vec::new();
        for dir in dirs {
            match create_dir_if_missing(&dir.path) {
                Ok(true) => {
                    outcome.dirs_created += 1;
                    tracing::info!(
                        strategy = name,
                        dir = %dir.path.display(),
                        reason = %dir.reason,
                        "directory created"
                    );
                }
                Ok(false) => {}
                Err(err) => {
                    outcome.errors += 1;
                    tracing::warn!(
                        strategy = name,
                        dir = %dir.path.display(),
                        "cannot create directory: {err}"
                    );
                    missing_dirs.push(dir.path);
                }
            }
        }
        missing_dirs
    }

    /// Cgroup writes: each is registered as expected, read back first
    /// (equal: nothing to do; different from a value we wrote before:
    /// drift, bypassing the executor's cache), then the rest go through the
    /// executor together.
    fn apply_cgroup_writes(
        &mut self,
        name: &'static str,
        writes: Vec<ResourceUpdate>,
        blocked: &Blocked<'_>,
        decided_at: &str,
        now: SystemTime,
        outcome: &mut RoundOutcome,
    ) {
        let layout = self.executor.layout().clone();
        let mut to_apply = Vec::new();
        let mut drifted = Vec::new();
        for update in crate::resourceexecutor::merge_updates(writes) {
            let Ok(path) = layout.file_path(&update.dir, update.resource) else {
                outcome.errors += 1;
                continue;
            };
            if blocked.contains(&path) {
                continue;
            }
            let expected = update.value.to_string();
            self.managed.insert(ManagedFile {
                path: path.display().to_string(),
                dir: update.dir.display().to_string(),
                resource: update.resource.name().to_string(),
                expected: expected.clone(),
                strategy: name,
                reason: update.reason.clone(),
                decided_at: decided_at.to_string(),
            });
            let actual = layout.read_value(&update.dir, update.resource).ok();
            if actual.as_ref() == Some(&update.value) {
                self.applied.insert(path, expected);
                continue;
            }
            if self.applied.get(&path) == Some(&expected) {
                drifted.push(path.clone());
                self.executor.forget(&update.dir);
                tracing::info!(
                    strategy = name,
                    path = %path.display(),
                    expected = %expected,
                    actual = %actual.map(|v| v.to_string()).unwrap_or_else(|| "?".into()),
                    "drift detected; repairing"
                );
            }
            to_apply.push((path, update));
        }
        if to_apply.is_empty() {
            return;
        }
        let paths: Vec<(PathBuf, String)> = to_apply
            .iter()
            .map(|(path, update)| (path.clone(), update.value.to_string()))
            .collect();
        let report = self
            .executor
            .apply_blocking(to_apply.into_iter().map(|(_, u)| u), now);
        for write in &report.writes {
            match &write.status {
                WriteStatus::Written if write.step != crate::resourceexecutor::StepKind::Loosen => {
                    outcome.actions += 1
                }
                WriteStatus::Failed { error, .. } => {
                    outcome.errors += 1;
                    tracing::warn!(strategy = name, "cgroup write failed: {error}");
                }
                _ => {}
            }
        }
        for (path, expected) in paths {
            let failed = report.writes.iter().any(|w| {
                matches!(w.status, WriteStatus::Failed { .. })
                    && layout.file_path(&w.dir, w.resource).ok().as_ref() == Some(&path)
            });
            if failed {
                self.applied.remove(&path);
            } else {
                if drifted.contains(&path) {
                    outcome.drifts_repaired += 1;
                }
                self.applied.insert(path, expected);
            }
        }
    }

    /// Plain file writes (/proc/sys, resctrl), each read back first as its
    /// [`ReadBack`] says.
    fn apply_file_writes(
        &mut self,
        name: &'static str,
        file_writes: Vec<FileWrite>,
        blocked: &Blocked<'_>,
        decided_at: &str,
        outcome: &mut RoundOutcome,
    ) {
        for write in file_writes {
            if blocked.contains(&write.path) {
                continue;
            }
            self.managed.insert(ManagedFile {
                path: write.path.display().to_string(),
                dir: String::new(),
                resource: write.path.display().to_string(),
                expected: write.value.clone(),
                strategy: name,
                reason: write.reason.clone(),
                decided_at: decided_at.to_string(),
            });
            let actual = std::fs::read_to_string(&write.path)
                .ok()
                .map(|s| s.trim().to_string());
            if write.read_back == ReadBack::Exact && actual.as_deref() == Some(write.value.trim()) {
                self.applied.insert(write.path.clone(), write.value.clone());
                continue;
            }
            let drift = write.read_back == ReadBack::Exact
                && self.applied.get(&write.path) == Some(&write.value);
            match std::fs::write(&write.path, write.value.as_bytes()) {
                Ok(()) => {
                    outcome.actions += 1;
                    if drift {
                        outcome.drifts_repaired += 1;
                    }
                    tracing::info!(
                        strategy = name,
                        path = %write.path.display(),
                        value = %write.value,
                        reason = %write.reason,
                        "file written"
                    );
                    self.applied.insert(write.path, write.value);
                }
                Err(err) => {
                    outcome.errors += 1;
                    tracing::warn!(
                        strategy = name,
                        path = %write.path.display(),
                        value = %write.value,
                        "cannot write file: {err}"
                    );
                }
            }
        }
    }

    /// Hands the evictions to the evictor (which queues them).
    fn hand_over_evictions(
        &self,
        name: &'static str,
        evictions: Vec<EvictionRequest>,
        outcome: &mut RoundOutcome,
    ) {
        for mut eviction in evictions {
            eviction.strategy = name;
            outcome.actions += 1;
            self.evictor.evict(eviction);
        }
    }
}

/// The directories of a round that could not be created: a write under one
/// would only fail again, and its error is already counted once.
struct Blocked<'a> {
    strategy: &'static str,
    missing_dirs: &'a [PathBuf],
}

impl Blocked<'_> {
    fn contains(&self, path: &Path) -> bool {
        let blocked = self.missing_dirs.iter().any(|dir| path.starts_with(dir));
        if blocked {
            tracing::debug!(
                strategy = self.strategy,
                path = %path.display(),
                "not written: its directory is missing"
            );
        }
        blocked
    }
}

/// Creates directory `path` (not its parents); `Ok(true)` when it was
/// created, `Ok(false)` when it already was a directory.
fn create_dir_if_missing(path: &Path) -> std::io::Result<bool> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(false),
        Err(err) => Err(err),
    }
}

/// Reads the current value of every managed file: (entry, actual or read error).
pub fn read_actual(layout: &CgroupLayout, file: &ManagedFile) -> Result<String, String> {
    if file.dir.is_empty() && file.resource == file.path {
        return std::fs::read_to_string(&file.path)
            .map(|s| s.trim().to_string())
            .map_err(|err| format!("cannot read {}: {err}", file.path));
    }
    let resource: CgroupResource = CgroupResource::ALL
        .iter()
        .copied()
        .find(|r| r.name() == file.resource)
        .ok_or_else(|| format!("unknown cgroup resource {}", file.resource))?;
    layout
        .read_value(&file.dir, resource)
        .map(|v| v.to_string())
        .map_err(|err| err.to_string())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex as StdMutex;
    use std::time::UNIX_EPOCH;

    use koord_common::testing::TempDir;

    use super::*;
    use crate::resourceexecutor::ExecutorConfig;
    use crate::system::cgroup::{CgroupDriver, CgroupVersion};

    /// Writes a fixed quota to the BE tier and asks for one eviction.
    struct FixedQuota {
        quota: i64,
        evict: bool,
        needs: &'static [Capability],
    }

    impl Strategy for FixedQuota {
        type State = ();
        fn name(&self) -> &'static str {
            "fixed"
        }
        fn interval(&self, _: &QosSnapshot) -> Duration {
            Duration::from_secs(5)
        }
        fn required_capabilities(&self) -> &'static [Capability] {
            self.needs
        }
        fn gauges(&self) -> &'static [(&'static str, &'static str)] {
            &[("test_gauge", "a test gauge")]
        }
        fn counters(&self) -> &'static [(&'static str, &'static str)] {
            &[("test_rounds", "a test counter")]
        }
        fn decide(&self, snapshot: &QosSnapshot, _: &()) -> (Decision, ()) {
            let mut decision = Decision::default();
            decision.write(
                snapshot.layout.qos_dir(QosTier::BestEffort),
                CgroupResource::CpuCfsQuota,
                CgroupValue::Int(self.quota),
                "test",
            );
            decision.gauge("test_gauge", vec![("type", "x".into())], 2.5);
            decision.count("test_rounds", vec![("direction", "up".into())], 2);
            if self.evict {
                decision.evictions.push(EvictionRequest {
                    uid: "u1".into(),
                    namespace: "ns".into(),
                    name: "be".into(),
                    reason: "testReason".into(),
                    message: "because".into(),
                    strategy: "",
                    container_ids: Vec::new(),
                });
            }
            (decision, ())
        }
    }

    #[derive(Default)]
    struct RecordingEvictor(StdMutex<Vec<EvictionRequest>>);

    impl Evictor for Arc<RecordingEvictor> {
        fn evict(&self, request: EvictionRequest) {
            self.0.lock().unwrap().push(request);
        }
    }

    fn tree() -> (TempDir, CgroupLayout, PathBuf) {
        let dir = TempDir::new("qos-framework").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, dir.path());
        let be = dir.path().join("cpu/kubepods/besteffort");
        std::fs::create_dir_all(&be).unwrap();
        let file = be.join("cpu.cfs_quota_us");
        std::fs::write(&file, "-1\n").unwrap();
        (dir, layout, file)
    }

    fn snapshot(layout: &CgroupLayout, secs: u64) -> QosSnapshot {
        let mut snapshot =
            QosSnapshot::for_test(UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs));
        snapshot.layout = layout.clone();
        snapshot.reader = Arc::new(LayoutReader(layout.clone()));
        snapshot
    }

    #[test]
    fn runner_writes_repairs_drift_and_hands_evictions_over() {
        let (_dir, layout, file) = tree();
        let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
        let registry = MetricsRegistry::new("koordlet");
        let strategies: Vec<Box<dyn AnyStrategy>> = vec![Box::new(FixedQuota {
            quota: 50_000,
            evict: true,
            needs: &[],
        })];
        let metrics = QosMetrics::register(&registry, "node-a", &strategies);
        let evictor = Arc::new(RecordingEvictor::default());
        let mut runner = QosRunner::new(strategies, executor)
            .with_evictor(Arc::new(evictor.clone()))
            .with_metrics(metrics.clone());

        let outcomes = runner.run_due(&snapshot(&layout, 0));
        assert_eq!(outcomes.len(), 1);
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), "50000");
        assert_eq!(outcomes[0].1.actions, 2, "one write, one eviction");
        assert_eq!(outcomes[0].1.drifts_repaired, 0);
        let evicted = evictor.0.lock().unwrap().clone();
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].strategy, "fixed");

        // Not due again before its interval.
        assert!(runner.run_due(&snapshot(&layout, 2)).is_empty());
        assert_eq!(
            runner.next_due(),
            Some(UNIX_EPOCH + Duration::from_secs(1_800_000_005))
        );

        // Someone changes the file; the next round repairs it even though the
        // executor's cache still holds the value.
        std::fs::write(&file, "-1").unwrap();
        let outcomes = runner.run_due(&snapshot(&layout, 5));
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), "50000");
        assert_eq!(outcomes[0].1.drifts_repaired, 1);
        // Unchanged file: no write, no drift.
        let outcomes = runner.run_due(&snapshot(&layout, 10));
        assert_eq!(
            (outcomes[0].1.drifts_repaired, outcomes[0].1.actions),
            (0, 1)
        );

        let (runs, actions, errors, drifts) = metrics.counts("fixed");
        // Actions: write + eviction, repair + eviction, eviction only.
        assert_eq!((runs, actions, errors, drifts), (3, 5, 0, 1));
        let body = registry.encode().unwrap();
        assert!(
            body.contains("koordlet_qos_strategy_drifts_repaired_total{strategy=\"fixed\"} 1"),
            "{body}"
        );
        assert!(
            body.contains("koordlet_test_gauge{node=\"node-a\",type=\"x\"} 2.5"),
            "{body}"
        );
        // Three rounds of two: strategy counters add up.
        assert!(
            body.contains("koordlet_test_rounds_total{node=\"node-a\",direction=\"up\"} 6"),
            "{body}"
        );

        // The explain registry knows the expected value and its owner.
        let managed = runner.managed_files().all();
        assert_eq!(managed.len(), 1);
        assert_eq!(managed[0].expected, "50000");
        assert_eq!(managed[0].strategy, "fixed");
        assert_eq!(read_actual(&layout, &managed[0]).unwrap(), "50000");
    }

    #[test]
    fn failed_writes_count_as_errors() {
        let (dir, layout, _file) = tree();
        std::fs::remove_dir_all(dir.path().join("cpu/kubepods/besteffort")).unwrap();
        let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
        let mut runner = QosRunner::new(
            vec![Box::new(FixedQuota {
                quota: 50_000,
                evict: false,
                needs: &[],
            })],
            executor,
        );
        let outcomes = runner.run_due(&snapshot(&layout, 0));
        assert_eq!((outcomes[0].1.errors, outcomes[0].1.actions), (1, 0));
    }

    /// Asks for a directory and writes one file inside it.
    struct GroupDir {
        dir: PathBuf,
    }

    impl Strategy for GroupDir {
        type State = ();
        fn name(&self) -> &'static str {
            "groupdir"
        }
        fn interval(&self, _: &QosSnapshot) -> Duration {
            Duration::from_secs(1)
        }
        fn decide(&self, _: &QosSnapshot, _: &()) -> (Decision, ()) {
            let mut decision = Decision::default();
            decision.ensure_dir(&self.dir, "test group");
            decision.file_writes.push(FileWrite {
                path: self.dir.join("schemata"),
                value: "L3:0=f".into(),
                reason: "test".into(),
                read_back: ReadBack::Exact,
            });
            (decision, ())
        }
    }

    fn group_dir_runner(
        layout: &CgroupLayout,
        dir: PathBuf,
        registry: &MetricsRegistry,
    ) -> (QosRunner, QosMetrics) {
        let strategies: Vec<Box<dyn AnyStrategy>> = vec![Box::new(GroupDir { dir })];
        let metrics = QosMetrics::register(registry, "node-a", &strategies);
        let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
        let runner = QosRunner::new(strategies, executor).with_metrics(metrics.clone());
        (runner, metrics)
    }

    #[test]
    fn runner_creates_requested_directory_before_writing_into_it() {
        let (dir, layout, _file) = tree();
        let group = dir.path().join("resctrl/BE");
        std::fs::create_dir(dir.path().join("resctrl")).unwrap();
        let registry = MetricsRegistry::new("koordlet");
        let (mut runner, metrics) = group_dir_runner(&layout, group.clone(), &registry);

        let first = runner.run_one(0, &snapshot(&layout, 0));
        assert!(group.is_dir(), "{first:?}");
        assert_eq!(
            std::fs::read_to_string(group.join("schemata")).unwrap(),
            "L3:0=f"
        );
        assert_eq!(
            (first.dirs_created, first.actions, first.errors),
            (1, 1, 0),
            "created, then the write inside it: {first:?}"
        );

        // Already there: nothing created, no error, the converged file untouched.
        let second = runner.run_one(0, &snapshot(&layout, 1));
        assert!(group.is_dir());
        assert_eq!(
            (second.dirs_created, second.actions, second.errors),
            (0, 0, 0),
            "{second:?}"
        );
        assert_eq!(metrics.counts("groupdir"), (2, 1, 0, 0));
    }

    #[test]
    fn directory_that_cannot_be_created_is_an_error_and_its_writes_are_not_attempted() {
        let (dir, layout, _file) = tree();
        // Parent missing: only the last component is created.
        let orphan = dir.path().join("no-such-root/BE");
        // Parent is a file: nothing can be created under it.
        let not_a_dir = dir.path().join("plain-file");
        std::fs::write(&not_a_dir, "").unwrap();
        // A file already occupying the path is not a directory either.
        let occupied = dir.path().join("occupied");
        std::fs::write(&occupied, "").unwrap();

        for group in [orphan, not_a_dir.join("BE"), occupied] {
            let registry = MetricsRegistry::new("koordlet");
            let (mut runner, metrics) = group_dir_runner(&layout, group.clone(), &registry);
            let outcome = runner.run_one(0, &snapshot(&layout, 0));
            assert_eq!(
                (outcome.dirs_created, outcome.actions, outcome.errors),
                (0, 0, 1),
                "{}: one error for the directory, none for the skipped write: {outcome:?}",
                group.display()
            );
            assert!(!group.is_dir(), "{}", group.display());
            assert!(!group.join("schemata").exists(), "{}", group.display());
            assert!(
                runner.managed_files().all().is_empty(),
                "a write not attempted has no expected value"
            );
            assert_eq!(metrics.counts("groupdir"), (1, 0, 1, 0));
        }
    }

    #[test]
    fn missing_capability_skips_decide() {
        let (_dir, layout, file) = tree();
        let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
        let mut runner = QosRunner::new(
            vec![Box::new(FixedQuota {
                quota: 50_000,
                evict: false,
                needs: &[Capability::Resctrl],
            })],
            executor,
        );
        let outcomes = runner.run_due(&snapshot(&layout, 0));
        assert!(outcomes[0].1.skipped);
        assert!(
            outcomes[0].1.notes[0]
                .text
                .starts_with("unsupported: resctrl"),
            "{:?}",
            outcomes[0].1.notes
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), "-1");
    }

    #[test]
    fn staleness_is_judged_against_the_collect_interval() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let snapshot = QosSnapshot::for_test(now);
        assert!(
            snapshot
                .fresh("x", None)
                .unwrap_err()
                .contains("no x sample")
        );
        let old = MetricSample::new(1.0, now - Duration::from_secs(11));
        assert!(
            snapshot
                .fresh("x", Some(old))
                .unwrap_err()
                .contains("stale")
        );
        let recent = MetricSample::new(1.0, now - Duration::from_secs(9));
        assert_eq!(snapshot.fresh("x", Some(recent)).unwrap().value, 1.0);
    }
}
