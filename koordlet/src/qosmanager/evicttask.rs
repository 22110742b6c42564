//! The eviction core shared by `memoryevict` and `cpuevict` (upstream
//! `qosmanager/plugins/util/evict.go`): a strategy turns each enabled
//! feature into an [`EvictTask`] — how much to release, of what, and the
//! candidates in eviction order — and [`plan_evictions`] walks the tasks in
//! order, picking victims until every task's target is covered.
//!
//! Accounting follows upstream: a victim releases, for every task's target
//! at once, the largest amount any task attributes to it (a pod's memory
//! counted by two tasks is counted once); a pod already asked to go and
//! still present counts as released without a new request; a later task
//! starts from what earlier tasks released.
//!
//! Amounts are integers: `cpu` in milli-CPU, `kubernetes.io/batch-cpu` and
//! `kubernetes.io/mid-cpu` in their own (milli-CPU) units, memory in bytes.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashSet};

use apis::extension::{
    BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY, PriorityClass, QuantityValue,
    get_pod_eviction_priority, is_eviction_policy_allowed, pod_evict_enabled,
    priority_class_of_extended_resource, priority_class_of_pod,
};
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::evictreport::{
    EvictionReport, ReleaseList, ReleaseTarget, ResourceList, TaskReport, VictimReport,
};
use super::framework::{QosPod, QosSnapshot};

/// Upstream's prefix of every eviction reason (`EvictReasonPrefix`).
pub const EVICT_REASON_PREFIX: &str = "trigger by koordlet feature ";

/// One request of a pod: the resource name its priority class uses and the amount.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassRequest {
    pub resource: String,
    pub amount: i64,
}

/// Everything the sorts and the accounting need about one pod (upstream
/// `PodEvictInfo`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodEvictInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `GetPodPriorityClassWithDefault`.
    pub priority_class: PriorityClass,
    /// `GetPodPriorityValueWithDefault`.
    pub priority: i32,
    /// `koordinator.sh/priority` label, else `priority` (upstream `GetPodPriorityLabel`).
    pub label_priority: i64,
    /// `koordinator.sh/eviction-priority` annotation, 0 when absent or invalid.
    pub eviction_priority: i32,
    /// Whether a fresh usage sample exists for the resource the task looks at.
    pub has_usage: bool,
    pub milli_cpu_used: i64,
    pub memory_used: i64,
    /// CPU request by class: `cpu` (milli), `batch-cpu` or `mid-cpu`.
    pub cpu_request: ClassRequest,
    /// Memory request by class: `memory`, `batch-memory` or `mid-memory`.
    pub memory_request: ClassRequest,
    /// Σ `batch-cpu` requests of the containers (BE CPU satisfaction).
    pub batch_milli_cpu_request: i64,
}

impl PodEvictInfo {
    /// `milli_cpu_used / batch_milli_cpu_request`, 0 without a request.
    pub fn batch_cpu_usage_ratio(&self) -> f64 {
        if self.batch_milli_cpu_request > 0 {
            self.milli_cpu_used as f64 / self.batch_milli_cpu_request as f64
        } else {
            0.0
        }
    }
}

/// What one victim releases for a task (upstream `GetPodResourceFunc`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodRelease {
    /// Its memory usage.
    MemoryUsed,
    /// Its CPU usage.
    CpuUsed,
    /// Its Σ batch-cpu requests.
    BatchCpuRequest,
    /// Its CPU request by class, for pods of these classes only.
    CpuRequestOf(Vec<PriorityClass>),
    /// Its memory request by class, for pods of these classes only.
    MemoryRequestOf(Vec<PriorityClass>),
}

impl PodRelease {
    pub fn of(&self, pod: &PodEvictInfo) -> ResourceList {
        let single = |name: &str, amount: i64| ResourceList::from([(name.to_string(), amount)]);
        match self {
            Self::MemoryUsed => single("memory", pod.memory_used),
            Self::CpuUsed => single("cpu", pod.milli_cpu_used),
            Self::BatchCpuRequest => single(BATCH_CPU, pod.batch_milli_cpu_request),
            Self::CpuRequestOf(classes) | Self::MemoryRequestOf(classes) => {
                if !classes.contains(&pod.priority_class) {
                    return ResourceList::new();
                }
                let request = match self {
                    Self::CpuRequestOf(_) => &pod.cpu_request,
                    _ => &pod.memory_request,
                };
                single(&request.resource, request.amount)
            }
        }
    }
}

/// One feature's eviction work (upstream `EvictTaskInfo`).
#[derive(Debug, Clone, PartialEq)]
pub struct EvictTask {
    /// Upstream feature name (`BEMemoryEvict`, `CPUAllocatableEvict`, ...).
    pub feature: &'static str,
    pub target: ReleaseTarget,
    pub to_release: ResourceList,
    /// Candidates, in eviction order.
    pub candidates: Vec<PodEvictInfo>,
    pub release: PodRelease,
}

impl EvictTask {
    /// `trigger by koordlet feature <feature>`.
    pub fn reason(&self) -> String {
        format!("{EVICT_REASON_PREFIX}{}", self.feature)
    }

    fn wants_release(&self) -> bool {
        self.to_release.values().any(|amount| *amount > 0)
    }
}

/// `a − b` per resource of `a`, keeping only what stays positive
/// (upstream `subReleaseListNoNegative`).
pub fn sub_no_negative(a: &ResourceList, b: Option<&ResourceList>) -> ResourceList {
    a.iter()
        .filter_map(|(name, amount)| {
            let rest = amount.saturating_sub(b.and_then(|b| b.get(name)).copied().unwrap_or(0));
            (rest > 0).then(|| (name.clone(), rest))
        })
        .collect()
}

/// The larger amount per resource of `a` and `b` (upstream `mergeResourceListByMax`).
pub fn merge_by_max(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut merged = a.clone();
    for (name, amount) in b {
        let entry = merged.entry(name.clone()).or_insert(*amount);
        if *entry < *amount {
            *entry = *amount;
        }
    }
    merged
}

fn add_into(total: &mut ReleaseList, released: &ReleaseList) {
    for (target, list) in released {
        let sum = total.entry(*target).or_default();
        for (name, amount) in list {
            let entry = sum.entry(name.clone()).or_insert(0);
            *entry = entry.saturating_add(*amount);
        }
    }
}

/// A pod the plan evicts.
#[derive(Debug, Clone, PartialEq)]
pub struct Victim {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// The feature of the task that picked it.
    pub feature: &'static str,
    /// What it releases, per target.
    pub releases: ReleaseList,
}

/// The outcome of [`plan_evictions`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EvictionPlan {
    /// New victims, in eviction order.
    pub victims: Vec<Victim>,
    /// UIDs of pods asked to go earlier, still present, counted as released.
    pub pending: Vec<String>,
    /// Released amounts of victims and pending pods together.
    pub released: ReleaseList,
}

impl EvictionPlan {
    /// What `task` still misses after this plan; empty when covered
    /// (upstream `EvictTaskCheck`).
    pub fn shortfall(&self, task: &EvictTask) -> ResourceList {
        sub_no_negative(&task.to_release, self.released.get(&task.target))
    }
}

/// Walks `tasks` in order and picks victims (upstream `KillAndEvictPods`,
/// with every eviction assumed accepted: refusals come back through
/// `already_evicted` no longer naming the pod).
pub fn plan_evictions(tasks: &[EvictTask], already_evicted: &HashSet<String>) -> EvictionPlan {
    // Which targets are in play: a task releasing nothing positive adds no
    // accounting for its target unless another task of that target does.
    let mut active_targets: Vec<ReleaseTarget> = Vec::new();
    let mut accounting: Vec<(ReleaseTarget, &PodRelease)> = Vec::new();
    for task in tasks {
        if task.to_release.is_empty() {
            continue;
        }
        if task.wants_release() && !active_targets.contains(&task.target) {
            active_targets.push(task.target);
        }
        if active_targets.contains(&task.target) {
            accounting.push((task.target, &task.release));
        }
    }
    let releases_of = |pod: &PodEvictInfo| -> ReleaseList {
        let mut sum = ReleaseList::new();
        for (target, release) in &accounting {
            let entry = sum.entry(*target).or_default();
            *entry = merge_by_max(entry, &release.of(pod));
        }
        sum
    };

    let mut plan = EvictionPlan::default();
    let mut handled: HashSet<&str> = HashSet::new();
    for task in tasks {
        if sub_no_negative(&task.to_release, plan.released.get(&task.target)).is_empty() {
            continue;
        }
        for pod in &task.candidates {
            if handled.contains(pod.uid.as_str()) {
                continue;
            }
            handled.insert(pod.uid.as_str());
            let releases = releases_of(pod);
            add_into(&mut plan.released, &releases);
            if already_evicted.contains(&pod.uid) {
                plan.pending.push(pod.uid.clone());
            } else {
                plan.victims.push(Victim {
                    uid: pod.uid.clone(),
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    feature: task.feature,
                    releases,
                });
            }
            if sub_no_negative(&task.to_release, plan.released.get(&task.target)).is_empty() {
                break;
            }
        }
    }
    plan
}

// ---------------------------------------------------------------------------
// Candidates
// ---------------------------------------------------------------------------

/// Which request of a pod to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    Cpu,
    Memory,
}

fn quantity(list: Option<&BTreeMap<String, Quantity>>, name: &str, milli: bool) -> i64 {
    list.and_then(|list| list.get(name))
        .and_then(|q| QuantityValue::of(q).ok())
        .and_then(|q| {
            if milli {
                q.checked_milli_value()
            } else {
                q.checked_value()
            }
        })
        .unwrap_or(0)
}

fn requests(container: &Container) -> Option<&BTreeMap<String, Quantity>> {
    container.resources.as_ref()?.requests.as_ref()
}

/// An init container with `restartPolicy: Always` runs alongside the others.
fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The pod's request of `kind` in the resource its class uses (upstream
/// `GetRequestTypeAndValueFromPod`): batch and mid pods sum their
/// containers' (and sidecars') batch/mid requests, negatives as 0; other
/// pods use the Kubernetes pod request (regular containers plus sidecars,
/// or the largest other init container if bigger, plus overhead).
pub fn class_request(pod: &Pod, kind: RequestKind) -> ClassRequest {
    let Some(spec) = pod.spec.as_ref() else {
        return ClassRequest::default();
    };
    let class = priority_class_of_pod(pod);
    let extended = match (class, kind) {
        (PriorityClass::Batch, RequestKind::Cpu) => Some(BATCH_CPU),
        (PriorityClass::Batch, RequestKind::Memory) => Some(BATCH_MEMORY),
        (PriorityClass::Mid, RequestKind::Cpu) => Some(MID_CPU),
        (PriorityClass::Mid, RequestKind::Memory) => Some(MID_MEMORY),
        _ => None,
    };
    let running = spec.containers.iter().chain(
        spec.init_containers
            .iter()
            .flatten()
            .filter(|c| is_sidecar(c)),
    );
    if let Some(resource) = extended {
        let amount = running
            .map(|c| quantity(requests(c), resource, false).max(0))
            .fold(0i64, i64::saturating_add);
        return ClassRequest {
            resource: resource.to_string(),
            amount,
        };
    }
    let (resource, milli) = match kind {
        RequestKind::Cpu => ("cpu", true),
        RequestKind::Memory => ("memory", false),
    };
    let regular = running
        .map(|c| quantity(requests(c), resource, milli))
        .fold(0i64, i64::saturating_add);
    let largest_init = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| !is_sidecar(c))
        .map(|c| quantity(requests(c), resource, milli))
        .max()
        .unwrap_or(0);
    let overhead = quantity(spec.overhead.as_ref(), resource, milli);
    ClassRequest {
        resource: resource.to_string(),
        amount: regular.max(largest_init).saturating_add(overhead),
    }
}

fn batch_cpu_request(pod: &Pod) -> i64 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    spec.containers
        .iter()
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .filter(|c| is_sidecar(c)),
        )
        .map(|c| quantity(requests(c), BATCH_CPU, false).max(0))
        .fold(0, i64::saturating_add)
}

/// Builds the [`PodEvictInfo`] of `pod`. Usage comes from the pod's samples
/// when fresh (`has_usage` says whether the one for `usage_of` was).
pub fn evict_info(snapshot: &QosSnapshot, pod: &QosPod, usage_of: RequestKind) -> PodEvictInfo {
    let fresh = |sample: Option<super::framework::MetricSample>| {
        sample.filter(|s| s.is_fresh(snapshot.now, snapshot.max_metric_age()))
    };
    let cpu = fresh(pod.cpu_usage);
    let memory = fresh(pod.memory_usage);
    let kube = snapshot.kube_pod(pod);
    let empty = BTreeMap::new();
    let labels = kube
        .and_then(|p| p.metadata.labels.as_ref())
        .unwrap_or(&empty);
    let annotations = kube
        .and_then(|p| p.metadata.annotations.as_ref())
        .unwrap_or(&empty);
    let priority = pod.priority_value;
    PodEvictInfo {
        uid: pod.uid.clone(),
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        priority_class: kube.map_or(pod.priority, priority_class_of_pod),
        priority,
        label_priority: labels
            .get(apis::extension::LABEL_POD_PRIORITY)
            .and_then(|text| text.parse::<i64>().ok())
            .unwrap_or(i64::from(priority)),
        eviction_priority: get_pod_eviction_priority(annotations)
            .ok()
            .flatten()
            .unwrap_or(0),
        has_usage: match usage_of {
            RequestKind::Cpu => cpu.is_some(),
            RequestKind::Memory => memory.is_some(),
        },
        milli_cpu_used: cpu.map_or(0, |s| (s.value * 1000.0) as i64),
        memory_used: memory.map_or(0, |s| s.value.max(0.0) as i64),
        cpu_request: kube.map_or_else(
            || ClassRequest {
                resource: "cpu".to_string(),
                amount: pod.cpu_request().0,
            },
            |p| class_request(p, RequestKind::Cpu),
        ),
        memory_request: kube.map_or_else(ClassRequest::default, |p| {
            class_request(p, RequestKind::Memory)
        }),
        batch_milli_cpu_request: kube.map_or_else(|| pod.cpu_request().0, batch_cpu_request),
    }
}

/// Upstream `IsPodInactive`: only Pending and Running pods are active.
pub fn is_active(pod: &QosPod) -> bool {
    matches!(pod.phase.as_str(), "Pending" | "Running")
}

/// Whether `pod`'s `koordinator.sh/eviction-policy` lets `feature` evict it.
pub fn eviction_policy_allows(snapshot: &QosSnapshot, pod: &QosPod, feature: &str) -> bool {
    match snapshot
        .kube_pod(pod)
        .and_then(|kube| kube.metadata.annotations.as_ref())
    {
        Some(annotations) => is_eviction_policy_allowed(feature, annotations),
        None => true,
    }
}

/// Whether the pod opted in with `koordinator.sh/eviction-enabled: "true"`.
pub fn eviction_enabled(snapshot: &QosSnapshot, pod: &QosPod) -> bool {
    snapshot
        .kube_pod(pod)
        .and_then(|kube| kube.metadata.labels.as_ref())
        .is_some_and(pod_evict_enabled)
}

/// Candidates of the priority-threshold features (`MemoryEvict`, `CPUEvict`
/// and the allocatable ones): active pods the eviction policy allows, with
/// priority ≤ `priority_threshold`, labelled `eviction-enabled`, with a
/// fresh usage sample of `usage_of`; in eviction order (see [`by_priority`]).
pub fn priority_candidates(
    snapshot: &QosSnapshot,
    feature: &str,
    priority_threshold: i32,
    usage_of: RequestKind,
    then: fn(&PodEvictInfo, &PodEvictInfo) -> Ordering,
) -> Vec<PodEvictInfo> {
    let mut infos: Vec<PodEvictInfo> = snapshot
        .pods
        .iter()
        .filter(|pod| is_active(pod))
        .filter(|pod| eviction_policy_allows(snapshot, pod, feature))
        .filter(|pod| pod.priority_value <= priority_threshold)
        .filter(|pod| eviction_enabled(snapshot, pod))
        .map(|pod| evict_info(snapshot, pod, usage_of))
        .filter(|info| info.has_usage)
        .collect();
    infos.sort_by(|a, b| by_priority(a, b, then));
    infos
}

/// Upstream's order for the priority-threshold features: eviction-priority
/// annotation, then priority, then the `koordinator.sh/priority` label, all
/// ascending; then `then`; then name (for a stable report).
pub fn by_priority(
    a: &PodEvictInfo,
    b: &PodEvictInfo,
    then: fn(&PodEvictInfo, &PodEvictInfo) -> Ordering,
) -> Ordering {
    a.eviction_priority
        .cmp(&b.eviction_priority)
        .then(a.priority.cmp(&b.priority))
        .then(a.label_priority.cmp(&b.label_priority))
        .then_with(|| then(a, b))
        .then_with(|| a.name.cmp(&b.name))
}

/// Larger memory usage first.
pub fn memory_used_desc(a: &PodEvictInfo, b: &PodEvictInfo) -> Ordering {
    b.memory_used.cmp(&a.memory_used)
}

/// Larger CPU usage first.
pub fn cpu_used_desc(a: &PodEvictInfo, b: &PodEvictInfo) -> Ordering {
    b.milli_cpu_used.cmp(&a.milli_cpu_used)
}

/// Larger memory request first.
pub fn memory_request_desc(a: &PodEvictInfo, b: &PodEvictInfo) -> Ordering {
    b.memory_request.amount.cmp(&a.memory_request.amount)
}

/// Larger CPU request first.
pub fn cpu_request_desc(a: &PodEvictInfo, b: &PodEvictInfo) -> Ordering {
    b.cpu_request.amount.cmp(&a.cpu_request.amount)
}

/// Upstream's BE memory order: priority ascending; then pods with a usage
/// sample before those without, larger usage first; then name descending.
pub fn be_memory_order(a: &PodEvictInfo, b: &PodEvictInfo) -> Ordering {
    a.priority
        .cmp(&b.priority)
        .then_with(|| (a.memory_used == 0).cmp(&(b.memory_used == 0)))
        .then_with(|| b.memory_used.cmp(&a.memory_used))
        .then_with(|| b.name.cmp(&a.name))
}

/// Upstream's BE CPU order: priority ascending, then usage ÷ batch-cpu
/// request descending; then name (for a stable report).
pub fn be_cpu_order(a: &PodEvictInfo, b: &PodEvictInfo) -> Ordering {
    a.priority
        .cmp(&b.priority)
        .then_with(|| {
            b.batch_cpu_usage_ratio()
                .partial_cmp(&a.batch_cpu_usage_ratio())
                .unwrap_or(Ordering::Equal)
        })
        .then_with(|| a.name.cmp(&b.name))
}

/// Pods labelled `koordinator.sh/qosClass: BE` that the eviction policy
/// lets `feature` evict, sorted by `order`. Finished pods hold nothing and
/// are left out (upstream keeps them, at the end of the order).
pub fn be_candidates(
    snapshot: &QosSnapshot,
    feature: &str,
    usage_of: RequestKind,
    order: fn(&PodEvictInfo, &PodEvictInfo) -> Ordering,
) -> Vec<PodEvictInfo> {
    let mut infos: Vec<PodEvictInfo> = snapshot
        .pods
        .iter()
        .filter(|pod| pod.qos_label == apis::extension::QoSClass::BE)
        .filter(|pod| !matches!(pod.phase.as_str(), "Succeeded" | "Failed"))
        .filter(|pod| eviction_policy_allows(snapshot, pod, feature))
        .map(|pod| evict_info(snapshot, pod, usage_of))
        .collect();
    infos.sort_by(order);
    infos
}

/// The allocatable rule (upstream `calculate*ReleaseByAllocatableThresholdPercent`):
/// Σ requests (by class) of pods with priority ≤ `priority_threshold`, per
/// resource, against the node's allocatable of that resource. A resource the
/// node does not offer (or offers 0 of) is released entirely; one requested
/// above `threshold_percent` is released down to `lower_percent`. Returns
/// the amounts and the priority classes (batch, mid) whose pods release.
pub fn allocatable_release(
    snapshot: &QosSnapshot,
    kind: RequestKind,
    priority_threshold: i32,
    threshold_percent: i64,
    lower_percent: i64,
) -> (ResourceList, Vec<PriorityClass>) {
    let mut requested = ResourceList::new();
    for pod in &snapshot.pods {
        if pod.priority_value > priority_threshold {
            continue;
        }
        let request = match snapshot.kube_pod(pod) {
            Some(kube) => class_request(kube, kind),
            None => continue,
        };
        if request.resource.is_empty() {
            continue;
        }
        let entry = requested.entry(request.resource).or_insert(0);
        *entry = entry.saturating_add(request.amount);
    }
    let mut release = ResourceList::new();
    for (resource, amount) in requested {
        let allocatable = snapshot
            .node
            .allocatable
            .get(&resource)
            .copied()
            .unwrap_or(0);
        if allocatable == 0 {
            release.insert(resource, amount);
            continue;
        }
        let ratio = amount as f64 / allocatable as f64;
        if ratio > threshold_percent as f64 / 100.0 {
            let lower = lower_percent as f64 / 100.0;
            // Upstream's two formulas, equal but for floating-point rounding.
            let excess = match kind {
                RequestKind::Memory => (ratio - lower) * allocatable as f64,
                RequestKind::Cpu => amount as f64 - lower * allocatable as f64,
            };
            release.insert(resource, excess as i64);
        }
    }
    let mut classes: Vec<PriorityClass> = release
        .keys()
        .filter_map(|name| priority_class_of_extended_resource(name))
        .collect();
    classes.sort();
    classes.dedup();
    (release, classes)
}

// ---------------------------------------------------------------------------
// One round: plan, requests, report
// ---------------------------------------------------------------------------

fn task_report(task: &EvictTask, plan: &EvictionPlan, dry_run: bool) -> TaskReport {
    TaskReport {
        feature: task.feature,
        reason: task.reason(),
        dry_run,
        target: task.target,
        to_release: task.to_release.clone(),
        released: plan.released.get(&task.target).cloned().unwrap_or_default(),
        shortfall: plan.shortfall(task),
        candidates: task.candidates.len(),
        victims: plan
            .victims
            .iter()
            .filter(|v| v.feature == task.feature)
            .map(|v| VictimReport {
                pod: format!("{}/{}", v.namespace, v.name),
                uid: v.uid.clone(),
                releases: v.releases.clone(),
            })
            .collect(),
        pending: plan
            .pending
            .iter()
            .filter(|uid| task.candidates.iter().any(|c| &c.uid == *uid))
            .cloned()
            .collect(),
    }
}

fn show(list: &ResourceList) -> String {
    if list.is_empty() {
        return "nothing".to_string();
    }
    list.iter()
        .map(|(name, amount)| format!("{name}={amount}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Turns a strategy's tasks into its decision: the tasks not in `dry_run`
/// are planned together and their victims become eviction requests (and
/// are remembered in `memory`, which starts the cool time); each dry-run
/// task is planned afterwards on its own, with the real victims counted as
/// already going, and only reported. `notes` say why other features made
/// no task; `detail` adds a task's trigger to each victim's message.
pub fn decide_round(
    snapshot: &QosSnapshot,
    strategy: &'static str,
    tasks: Vec<EvictTask>,
    dry_run: &[&str],
    memory: &mut crate::evictor::bookkeeping::EvictionMemory,
    notes: Vec<String>,
    detail: &dyn Fn(&EvictTask) -> String,
) -> super::framework::Decision {
    use super::framework::{Decision, EvictionRequest};
    let mut decision = Decision::default();
    let mut report = EvictionReport {
        strategy,
        decided_at: crate::resourceexecutor::audit::rfc3339_utc(snapshot.now),
        tasks: Vec::new(),
        notes: notes.clone(),
    };
    if tasks.is_empty() {
        if notes.is_empty() {
            decision.skip("no eviction feature has anything to release");
        }
        for note in notes {
            decision.skip(note);
        }
        decision.eviction_report = Some(report);
        return decision;
    }
    for note in notes {
        decision.info(note);
    }
    // A pod whose eviction was refused keeps its resources: not pending.
    let present: HashSet<&str> = snapshot
        .pods
        .iter()
        .map(|p| p.uid.as_str())
        .filter(|uid| !snapshot.eviction_refused.contains(*uid))
        .collect();
    let pending = memory.pending(snapshot.now, &present, snapshot.eviction_pending_window);
    let (dry, real): (Vec<EvictTask>, Vec<EvictTask>) = tasks
        .into_iter()
        .partition(|task| dry_run.contains(&task.feature));
    let plan = plan_evictions(&real, &pending);
    for task in &real {
        let task_report = task_report(task, &plan, false);
        decision.info(format!(
            "{}: release {} ({}); {} new victims, {} pending; short of {}",
            task.feature,
            show(&task.to_release),
            task.target.as_str(),
            task_report.victims.len(),
            task_report.pending.len(),
            show(&task_report.shortfall)
        ));
        report.tasks.push(task_report);
    }
    let mut going = pending.clone();
    going.extend(plan.victims.iter().map(|v| v.uid.clone()));
    for task in &dry {
        let dry_plan = plan_evictions(std::slice::from_ref(task), &going);
        let task_report = task_report(task, &dry_plan, true);
        decision.info(format!(
            "{} (dry run): would release {} ({}) by evicting {:?}",
            task.feature,
            show(&task.to_release),
            task.target.as_str(),
            task_report
                .victims
                .iter()
                .map(|v| v.pod.as_str())
                .collect::<Vec<_>>()
        ));
        report.tasks.push(task_report);
    }
    for victim in &plan.victims {
        let Some(pod) = snapshot.pods.iter().find(|pod| pod.uid == victim.uid) else {
            continue;
        };
        let Some(task) = real.iter().find(|t| t.feature == victim.feature) else {
            continue;
        };
        decision.evictions.push(EvictionRequest::for_pod(
            pod,
            victim.feature,
            format!(
                "{}, kill pod: {}; {}",
                task.reason(),
                pod.name,
                detail(task)
            ),
        ));
    }
    let real_candidates = real.iter().map(|t| t.candidates.len()).sum::<usize>();
    if plan.victims.is_empty() && plan.pending.is_empty() && real_candidates == 0 && dry.is_empty()
    {
        decision.skip("resources are over a threshold but there is no candidate pod to evict");
    }
    memory.record(snapshot.now, plan.victims.iter().map(|v| v.uid.clone()));
    decision.eviction_report = Some(report);
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: i64 = 1 << 30;

    fn info(uid: &str) -> PodEvictInfo {
        PodEvictInfo {
            uid: format!("{uid}-uid"),
            namespace: "default".into(),
            name: uid.into(),
            ..PodEvictInfo::default()
        }
    }

    fn list(pairs: &[(&str, i64)]) -> ResourceList {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// Upstream `Test_KillAndEvictPods`: two tasks sharing victims; every
    /// victim releases for both targets.
    #[test]
    fn tasks_share_victims_and_accumulate_releases() {
        let batch =
            |uid: &str, cpu_req: i64, mem_req: i64, cpu_used: i64, mem_used: i64| PodEvictInfo {
                priority_class: PriorityClass::Batch,
                milli_cpu_used: cpu_used,
                memory_used: mem_used,
                cpu_request: ClassRequest {
                    resource: BATCH_CPU.into(),
                    amount: cpu_req,
                },
                memory_request: ClassRequest {
                    resource: BATCH_MEMORY.into(),
                    amount: mem_req,
                },
                ..info(uid)
            };
        let batch1 = batch("batch-pod-1", 1000, 2 * GIB, 800, 1536 << 20);
        let batch2 = batch("batch-pod-2", 500, GIB, 400, 768 << 20);
        let mid = PodEvictInfo {
            priority_class: PriorityClass::Mid,
            milli_cpu_used: 1800,
            memory_used: 3 * GIB,
            cpu_request: ClassRequest {
                resource: MID_CPU.into(),
                amount: 2000,
            },
            ..info("mid-pod-1")
        };
        let tasks = vec![
            EvictTask {
                feature: "evict-by-memory-usage",
                target: ReleaseTarget::PodUsed,
                to_release: list(&[("memory", 2 * GIB)]),
                candidates: vec![batch1.clone(), batch2.clone()],
                release: PodRelease::MemoryUsed,
            },
            EvictTask {
                feature: "evict-by-mid/batch-request cpu",
                target: ReleaseTarget::PodResourceRequest,
                to_release: list(&[(BATCH_CPU, 1200), (MID_CPU, 1500)]),
                candidates: vec![batch1, batch2, mid],
                release: PodRelease::CpuRequestOf(vec![PriorityClass::Mid, PriorityClass::Batch]),
            },
        ];
        let plan = plan_evictions(&tasks, &HashSet::new());
        let uids: Vec<&str> = plan.victims.iter().map(|v| v.uid.as_str()).collect();
        assert_eq!(
            uids,
            ["batch-pod-1-uid", "batch-pod-2-uid", "mid-pod-1-uid"]
        );
        assert_eq!(
            plan.released[&ReleaseTarget::PodUsed],
            list(&[("memory", (2304 << 20) + 3 * GIB)])
        );
        assert_eq!(
            plan.released[&ReleaseTarget::PodResourceRequest],
            list(&[(BATCH_CPU, 1500), (MID_CPU, 2000)])
        );
        assert!(tasks.iter().all(|t| plan.shortfall(t).is_empty()));
        assert_eq!(plan.victims[2].feature, "evict-by-mid/batch-request cpu");
    }

    fn memory_task(to_release: i64, pods: Vec<PodEvictInfo>) -> Vec<EvictTask> {
        vec![EvictTask {
            feature: "BEMemoryEvict",
            target: ReleaseTarget::PodUsed,
            to_release: list(&[("memory", to_release)]),
            candidates: pods,
            release: PodRelease::MemoryUsed,
        }]
    }

    /// Upstream `Test_KillAndEvictPods_PendingRelease`.
    #[test]
    fn pending_pods_count_as_released() {
        let marked = PodEvictInfo {
            memory_used: 2 * GIB,
            ..info("marked-pod")
        };
        let other = PodEvictInfo {
            memory_used: GIB,
            ..info("other-pod")
        };
        let evicted = HashSet::from(["marked-pod-uid".to_string()]);
        let plan = plan_evictions(&memory_task(2 * GIB, vec![marked, other]), &evicted);
        assert!(plan.victims.is_empty(), "{plan:?}");
        assert_eq!(plan.pending, ["marked-pod-uid"]);
        assert_eq!(plan.released[&ReleaseTarget::PodUsed]["memory"], 2 * GIB);

        let marked = PodEvictInfo {
            memory_used: GIB,
            ..info("marked-pod")
        };
        let other = PodEvictInfo {
            memory_used: 2 * GIB,
            ..info("other-pod")
        };
        let plan = plan_evictions(&memory_task(2 * GIB, vec![marked, other]), &evicted);
        let uids: Vec<&str> = plan.victims.iter().map(|v| v.uid.as_str()).collect();
        assert_eq!(uids, ["other-pod-uid"]);
        assert_eq!(plan.released[&ReleaseTarget::PodUsed]["memory"], 3 * GIB);
    }

    #[test]
    fn shortfall_reports_what_is_missing() {
        let task = &memory_task(
            4 * GIB,
            vec![PodEvictInfo {
                memory_used: GIB,
                ..info("a")
            }],
        )[0];
        let plan = plan_evictions(std::slice::from_ref(task), &HashSet::new());
        assert_eq!(plan.shortfall(task), list(&[("memory", 3 * GIB)]));
        // A task with nothing to release neither evicts nor falls short.
        let idle = &memory_task(0, vec![info("b")])[0];
        let plan = plan_evictions(std::slice::from_ref(idle), &HashSet::new());
        assert!(plan.victims.is_empty() && plan.shortfall(idle).is_empty());
    }

    /// Upstream `Test_SubReleaseListNoNegative`.
    #[test]
    fn sub_no_negative_table() {
        let cases: Vec<(ResourceList, Option<ResourceList>, ResourceList)> = vec![
            (
                ResourceList::new(),
                Some(list(&[("cpu", 1)])),
                ResourceList::new(),
            ),
            (list(&[("cpu", 1000)]), None, list(&[("cpu", 1000)])),
            (
                list(&[("cpu", 2000), ("memory", 2 * GIB)]),
                Some(list(&[("cpu", 1000), ("memory", GIB)])),
                list(&[("cpu", 1000), ("memory", GIB)]),
            ),
            (
                list(&[("cpu", 2000), ("memory", 2 * GIB)]),
                Some(list(&[("cpu", 1000)])),
                list(&[("cpu", 1000), ("memory", 2 * GIB)]),
            ),
            (
                list(&[("cpu", 1000), ("memory", 2 * GIB)]),
                Some(list(&[("cpu", 2000)])),
                list(&[("memory", 2 * GIB)]),
            ),
            (
                list(&[("cpu", 1000)]),
                Some(list(&[("cpu", 500), ("memory", GIB)])),
                list(&[("cpu", 500)]),
            ),
        ];
        for (a, b, want) in cases {
            assert_eq!(sub_no_negative(&a, b.as_ref()), want, "{a:?} - {b:?}");
        }
    }

    /// Upstream `Test_mergeResourceListByMax`.
    #[test]
    fn merge_by_max_table() {
        let cases = [
            (vec![], vec![("cpu", 1)], vec![("cpu", 1)]),
            (vec![("cpu", 1)], vec![], vec![("cpu", 1)]),
            (
                vec![("cpu", 2000), ("memory", 4 * GIB)],
                vec![("cpu", 1000), ("memory", 2 * GIB)],
                vec![("cpu", 2000), ("memory", 4 * GIB)],
            ),
            (
                vec![("cpu", 2000), ("memory", GIB)],
                vec![("cpu", 1000), ("memory", 2 * GIB)],
                vec![("cpu", 2000), ("memory", 2 * GIB)],
            ),
            (
                vec![("cpu", 1000)],
                vec![(BATCH_CPU, 500)],
                vec![("cpu", 1000), (BATCH_CPU, 500)],
            ),
            (vec![("cpu", 0)], vec![("cpu", 5)], vec![("cpu", 5)]),
            (vec![("cpu", -5)], vec![("cpu", 5)], vec![("cpu", 5)]),
        ];
        for (a, b, want) in cases {
            assert_eq!(merge_by_max(&list(&a), &list(&b)), list(&want));
        }
    }

    fn pod_with(
        class_label: Option<&str>,
        containers: Vec<Container>,
        init: Vec<Container>,
    ) -> Pod {
        let mut pod = Pod::default();
        if let Some(class) = class_label {
            pod.metadata.labels = Some(BTreeMap::from([(
                "koordinator.sh/priority-class".to_string(),
                class.to_string(),
            )]));
        }
        pod.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            ..Default::default()
        });
        pod
    }

    fn container(pairs: &[(&str, &str)], sidecar: bool) -> Container {
        Container {
            name: "c".into(),
            restart_policy: sidecar.then(|| "Always".to_string()),
            resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                requests: Some(
                    pairs
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Upstream `Test_GetRequestFromPod`.
    #[test]
    fn class_request_table() {
        let batch = pod_with(
            Some("koord-batch"),
            vec![
                container(&[(BATCH_CPU, "1000"), (BATCH_MEMORY, "2Gi")], false),
                container(&[(BATCH_CPU, "500")], false),
            ],
            vec![container(&[(BATCH_CPU, "-100")], true)],
        );
        assert_eq!(
            class_request(&batch, RequestKind::Cpu),
            ClassRequest {
                resource: BATCH_CPU.into(),
                amount: 1500
            }
        );
        assert_eq!(class_request(&batch, RequestKind::Memory).amount, 2 * GIB);
        let mid = pod_with(
            Some("koord-mid"),
            vec![container(&[(MID_CPU, "2000"), (MID_MEMORY, "4Gi")], false)],
            vec![],
        );
        assert_eq!(class_request(&mid, RequestKind::Cpu).resource, MID_CPU);
        assert_eq!(class_request(&mid, RequestKind::Memory).amount, 4 * GIB);
        let prod = pod_with(
            Some("koord-prod"),
            vec![container(&[("cpu", "1"), ("memory", "1Gi")], false)],
            vec![
                container(&[("cpu", "3")], false),
                container(&[("cpu", "500m")], true),
            ],
        );
        // max(1 + 0.5 sidecar, 3 init) = 3 cores.
        assert_eq!(
            class_request(&prod, RequestKind::Cpu),
            ClassRequest {
                resource: "cpu".into(),
                amount: 3000
            }
        );
        assert_eq!(class_request(&prod, RequestKind::Memory).amount, GIB);
        // No class label, no priority, no QoS: the default class (none) uses native names.
        let none = pod_with(None, vec![container(&[("cpu", "250m")], false)], vec![]);
        assert_eq!(class_request(&none, RequestKind::Cpu).resource, "cpu");
        assert_eq!(class_request(&none, RequestKind::Cpu).amount, 250);
    }

    #[test]
    fn priority_order_uses_annotation_priority_label_then_tiebreak() {
        let mut a = info("a");
        let mut b = info("b");
        a.eviction_priority = 1;
        b.priority = 9000;
        assert_eq!(by_priority(&a, &b, memory_used_desc), Ordering::Greater);
        a.eviction_priority = 0;
        assert_eq!(by_priority(&a, &b, memory_used_desc), Ordering::Less);
        b.priority = 0;
        a.label_priority = 5;
        assert_eq!(by_priority(&a, &b, memory_used_desc), Ordering::Greater);
        a.label_priority = 0;
        b.memory_used = 10;
        assert_eq!(by_priority(&a, &b, memory_used_desc), Ordering::Greater);
    }
}
