//! QoS strategy `cpuevict`: upstream's CPU eviction plugin with its three
//! features, each behind its own koordlet feature gate (all off by default,
//! as upstream) and run in upstream's order within one round:
//!
//! 1. `BECPUEvict` — when the BE tier is busy (usage ≥
//!    `cpuEvictBEUsageThresholdPercent` of its limit, default 90 %) yet its
//!    CPU satisfaction — limit ÷ Σ BE batch-cpu requests — stays at or below
//!    `cpuEvictBESatisfactionLowerPercent` over `cpuEvictTimeWindowSeconds`,
//!    evict BE pods until the requests that remain are satisfied to
//!    `cpuEvictBESatisfactionUpperPercent`. The limit is the BE tier's real
//!    limit (`cpuEvictPolicy: evictByRealLimit`, default: CPUs of its cpuset
//!    capped by its CFS quota, read each round) or the node's batch-cpu
//!    allocatable (`evictByAllocatable`). The release is
//!    `request × (upper − satisfaction)` from the window average, capped by
//!    the latest sample's. Victims: BE pods by priority, then usage ÷
//!    request; each releases its batch-cpu request.
//! 2. `CPUAllocatableEvict` — when the CPU requested by pods with priority ≤
//!    `allocatableEvictPriorityThreshold` (batch pods' `batch-cpu`, mid
//!    pods' `mid-cpu`) exceeds `cpuAllocatableEvictThresholdPercent` of the
//!    node's allocatable of it, evict such pods (largest request first) down
//!    to `cpuAllocatableEvictLowerPercent`.
//! 3. `CPUEvict` — when node CPU usage averaged over the window reaches
//!    `cpuEvictThresholdPercent`, evict pods with priority ≤
//!    `evictEnabledPriorityThreshold` labelled `eviction-enabled` (by
//!    eviction-priority, priority, sub-priority, then usage) down to
//!    `cpuEvictLowerPercent` (default threshold − 2).
//!
//! `--cpu-evict-cool-time-seconds` separates two evictions and also runs
//! from start-up, as upstream. The strategy keeps its windows of samples.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime};

use apis::extension::BATCH_CPU;
use apis::slo::v1alpha1::{CPUEvictPolicy, ResourceThresholdStrategy};

use super::evictreport::{ReleaseTarget, ResourceList};
use super::evicttask::{
    self, EvictTask, PodRelease, RequestKind, be_candidates, be_cpu_order, cpu_request_desc,
    cpu_used_desc, priority_candidates,
};
use super::framework::{Decision, FeatureGate, QosSnapshot, Strategy};
use super::memoryevict::{allocatable_thresholds, disabled_by_node_slo, effective_thresholds};
use crate::evictor::bookkeeping::EvictionMemory;
use crate::system::cgroup::{CgroupResource, CgroupValue, QosTier};
use koord_common::units::MilliCpu;

pub const NAME: &str = "cpuevict";
/// Upstream feature names: the eviction triggers and the eviction-policy keys.
pub const FEATURE: &str = "BECPUEvict";
pub const FEATURE_CPU_EVICT: &str = "CPUEvict";
pub const FEATURE_ALLOCATABLE: &str = "CPUAllocatableEvict";
/// The features in the order upstream runs them.
pub const FEATURES: [&str; 3] = [FEATURE, FEATURE_ALLOCATABLE, FEATURE_CPU_EVICT];
/// `CPUEvict`'s lower bound = threshold − this when `cpuEvictLowerPercent` is unset.
pub const RELEASE_BUFFER_PERCENT: i64 = 2;
/// BE "limit" under `evictByAllocatable` when the node's batch-cpu
/// allocatable is 0 (upstream `defaultMinAllocatableBatchMilliCPU`).
pub const MIN_ALLOCATABLE_BATCH_MILLI_CPU: f64 = 1.0;
/// `cpuEvictBESatisfactionLowerPercent` must be in (0, 60].
pub const SATISFACTION_LOWER_MAX: i64 = 60;
/// `cpuEvictBESatisfactionUpperPercent` must be in (0, 100).
pub const SATISFACTION_UPPER_MAX: i64 = 100;
/// Default `cpuEvictBEUsageThresholdPercent`.
pub const DEFAULT_BE_USAGE_THRESHOLD_PERCENT: i64 = 90;

/// Validated satisfaction settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SatisfactionConfig {
    pub lower_percent: i64,
    pub upper_percent: i64,
    pub usage_threshold_percent: i64,
    /// `cpuEvictTimeWindowSeconds`, at least one round.
    pub window: Duration,
}

/// Upstream's validation of the satisfaction settings.
pub fn satisfaction_config(
    config: &ResourceThresholdStrategy,
    round: Duration,
) -> Result<SatisfactionConfig, String> {
    let (Some(lower), Some(upper)) = (
        config.cpu_evict_be_satisfaction_lower_percent,
        config.cpu_evict_be_satisfaction_upper_percent,
    ) else {
        return Err(
            "CPUEvictBESatisfactionLowerPercent or CPUEvictBESatisfactionUpperPercent not config"
                .to_string(),
        );
    };
    if lower <= 0 || lower > SATISFACTION_LOWER_MAX {
        return Err(format!(
            "CPUEvictBESatisfactionLowerPercent({lower}) is not valid! must (0,{SATISFACTION_LOWER_MAX}]"
        ));
    }
    if upper <= 0 || upper >= SATISFACTION_UPPER_MAX {
        return Err(format!(
            "CPUEvictBESatisfactionUpperPercent({upper}) is not valid,must (0,{SATISFACTION_UPPER_MAX})"
        ));
    }
    if upper < lower {
        return Err(format!(
            "CPUEvictBESatisfactionUpperPercent({upper}) < CPUEvictBESatisfactionLowerPercent({lower})"
        ));
    }
    let window_seconds = config.cpu_evict_time_window_seconds.unwrap_or(0).max(0) as u64;
    Ok(SatisfactionConfig {
        lower_percent: lower,
        upper_percent: upper,
        usage_threshold_percent: config
            .cpu_evict_be_usage_threshold_percent
            .unwrap_or(DEFAULT_BE_USAGE_THRESHOLD_PERCENT),
        window: Duration::from_secs(window_seconds).max(round),
    })
}

/// One observation of the BE tier, milli-CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BeCpuSample {
    pub time: SystemTime,
    pub usage: f64,
    pub request: f64,
    pub limit: f64,
}

/// Whether BE uses enough of its limit for starvation to matter; a limit
/// under one core always counts (upstream).
pub fn usage_high_enough(usage: f64, limit: f64, threshold_percent: i64) -> bool {
    if limit <= 0.0 {
        return false;
    }
    if limit < 1000.0 {
        return true;
    }
    usage / limit >= threshold_percent as f64 / 100.0
}

/// Milli-CPU of BE requests to release so the rest is satisfied to the
/// upper percentage; 0 while satisfaction is above the lower one.
pub fn release_by_satisfaction(request: f64, limit: f64, config: &SatisfactionConfig) -> i64 {
    if request <= 0.0 {
        return 0;
    }
    let satisfaction = limit / request;
    if satisfaction > config.lower_percent as f64 / 100.0 {
        return 0;
    }
    let gap = config.upper_percent as f64 / 100.0 - satisfaction;
    if gap <= 0.0 {
        return 0;
    }
    (request * gap) as i64
}

fn average(samples: &[BeCpuSample]) -> Option<BeCpuSample> {
    let last = samples.last()?;
    let count = samples.len() as f64;
    let sum = |f: fn(&BeCpuSample) -> f64| samples.iter().map(f).sum::<f64>() / count;
    Some(BeCpuSample {
        time: last.time,
        usage: sum(|s| s.usage),
        request: sum(|s| s.request),
        limit: sum(|s| s.limit),
    })
}

/// Upstream's two-step release: from the window average, then capped by
/// the latest sample. `Err` says why nothing is released.
pub fn plan_release(
    window: &[BeCpuSample],
    round: Duration,
    config: &SatisfactionConfig,
    allocatable_limit: Option<f64>,
) -> Result<i64, String> {
    let round_seconds = round.as_secs().max(1);
    if (window.len() as u64) * round_seconds < config.window.as_secs() / 3 {
        return Err(format!(
            "only {} BE CPU samples in the {}s window (need a third of it)",
            window.len(),
            config.window.as_secs()
        ));
    }
    let (Some(mut avg), Some(mut current)) = (average(window), window.last().copied()) else {
        return Err("no BE CPU samples yet".to_string());
    };
    // evictByAllocatable: satisfaction against the node's batch-cpu allocatable.
    if let Some(limit) = allocatable_limit {
        avg.limit = limit;
        current.limit = limit;
    }
    if !usage_high_enough(avg.usage, avg.limit, config.usage_threshold_percent) {
        return Err(format!(
            "BE average usage {:.0}m is under {}% of its real limit {:.0}m",
            avg.usage, config.usage_threshold_percent, avg.limit
        ));
    }
    let by_average = release_by_satisfaction(avg.request, avg.limit, config);
    if by_average <= 0 {
        return Err(format!(
            "BE satisfaction {:.2} (limit {:.0}m / request {:.0}m) is above the lower bound {}%",
            if avg.request > 0.0 {
                avg.limit / avg.request
            } else {
                0.0
            },
            avg.limit,
            avg.request,
            config.lower_percent
        ));
    }
    if !usage_high_enough(current.usage, current.limit, config.usage_threshold_percent) {
        return Err(format!(
            "BE current usage {:.0}m is under {}% of its real limit {:.0}m",
            current.usage, config.usage_threshold_percent, current.limit
        ));
    }
    if current.request == avg.request && current.limit == avg.limit {
        return Ok(by_average);
    }
    let by_current = release_by_satisfaction(current.request, current.limit, config);
    if by_current <= 0 {
        return Err("the latest BE satisfaction no longer calls for eviction".to_string());
    }
    Ok(by_average.min(by_current))
}

/// The BE tier's real CPU limit in milli-CPU: CPUs in its cpuset, capped by
/// its CFS quota.
pub fn be_real_limit(snapshot: &QosSnapshot) -> Result<f64, String> {
    let dir = snapshot.layout.qos_dir(QosTier::BestEffort);
    let cpus = match snapshot.current(&dir, CgroupResource::CpusetCpus) {
        Some(CgroupValue::CpuSet(set)) => set.len() as f64,
        _ => {
            return Err(format!(
                "cannot read cpuset.cpus of the BE cgroup {}",
                dir.display()
            ));
        }
    };
    let by_cpuset = cpus * 1000.0;
    let quota = match snapshot.current(&dir, CgroupResource::CpuCfsQuota) {
        Some(CgroupValue::Int(quota)) if quota > 0 => quota,
        Some(CgroupValue::Unlimited) | Some(CgroupValue::Int(_)) | None => return Ok(by_cpuset),
        Some(other) => return Err(format!("unexpected BE cpu.cfs_quota_us {other}")),
    };
    let period = match snapshot.current(&dir, CgroupResource::CpuCfsPeriod) {
        Some(CgroupValue::Int(period)) if period > 0 => period,
        _ => return Err("cannot read cpu.cfs_period_us of the BE cgroup".to_string()),
    };
    Ok(by_cpuset.min(quota as f64 * 1000.0 / period as f64))
}

/// The BE "limit" under `evictByAllocatable`: the node's batch-cpu
/// allocatable; 1 when it is 0 (BE still runs); `None` when the node has
/// none (upstream's −1, which makes BE usage never "high enough").
pub fn be_allocatable_limit(snapshot: &QosSnapshot) -> Option<f64> {
    match snapshot.node.allocatable.get(BATCH_CPU).copied() {
        Some(0) => Some(MIN_ALLOCATABLE_BATCH_MILLI_CPU),
        Some(value) if value > 0 => Some(value as f64),
        _ => None,
    }
}

/// Settings of `CPUEvict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageThresholds {
    pub threshold_percent: i64,
    pub lower_percent: i64,
    pub priority_threshold: i32,
}

/// Upstream `isUsedThresholdConfigValid`.
pub fn usage_thresholds(config: &ResourceThresholdStrategy) -> Result<UsageThresholds, String> {
    let threshold_percent = config
        .cpu_evict_threshold_percent
        .ok_or("CPUEvictThresholdPercent not config")?;
    if threshold_percent < 0 {
        return Err(format!(
            "threshold percent({threshold_percent}) should greater than 0"
        ));
    }
    let lower_percent = config
        .cpu_evict_lower_percent
        .unwrap_or(threshold_percent - RELEASE_BUFFER_PERCENT);
    if lower_percent >= threshold_percent {
        return Err(format!(
            "lower percent({lower_percent}) should less than threshold percent({threshold_percent})"
        ));
    }
    let priority_threshold = config
        .evict_enabled_priority_threshold
        .ok_or("EvictEnabledPriorityThreshold not config")?;
    Ok(UsageThresholds {
        threshold_percent,
        lower_percent,
        priority_threshold,
    })
}

/// Upstream `isAllocatableThresholdConfigValid` (CPU).
pub fn cpu_allocatable_thresholds(
    config: &ResourceThresholdStrategy,
) -> Result<super::memoryevict::AllocatableThresholds, String> {
    allocatable_thresholds(
        config.cpu_allocatable_evict_threshold_percent,
        config.cpu_allocatable_evict_lower_percent,
        config.allocatable_evict_priority_threshold,
        "CPUAllocatableEvictThresholdPercent",
        "CPUAllocatableEvictLowerPercent",
    )
}

/// `CPUEvict`'s release: CPU to shed when the average node usage (cores)
/// reaches the threshold (whole percent of `capacity`, integer arithmetic
/// as upstream); `Err` says why nothing.
pub fn release_by_node_usage(
    capacity: MilliCpu,
    average_cores: f64,
    thresholds: &UsageThresholds,
) -> Result<MilliCpu, String> {
    let capacity_milli = capacity.0;
    if capacity_milli <= 0 {
        return Err(format!("node CPU capacity {capacity} is not valid"));
    }
    let usage_percent = ((average_cores * 1000.0) as i64).saturating_mul(100) / capacity_milli;
    if usage_percent < thresholds.threshold_percent {
        return Err(format!(
            "node CPU usage {usage_percent}% is below the threshold {}%",
            thresholds.threshold_percent
        ));
    }
    Ok(MilliCpu(
        capacity_milli.saturating_mul(usage_percent - thresholds.lower_percent) / 100,
    ))
}

/// The `cpuevict` strategy.
#[derive(Debug)]
pub struct CpuEvict {
    gates: [FeatureGate; 3],
    dry_run: Vec<&'static str>,
}

/// What cpuevict carries between rounds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuEvictState {
    /// Cool time and pending victims; `None` before the first round
    /// (upstream cools down from start-up, so the first round starts it).
    pub memory: Option<EvictionMemory>,
    /// BE samples for `BECPUEvict`'s window.
    pub be_history: VecDeque<BeCpuSample>,
    /// Node CPU usage samples (time, cores) for `CPUEvict`'s window.
    pub node_history: VecDeque<(SystemTime, f64)>,
}

impl Default for CpuEvict {
    fn default() -> Self {
        Self::new()
    }
}

fn trim<T>(
    history: &mut VecDeque<T>,
    time: impl Fn(&T) -> SystemTime,
    now: SystemTime,
    window: Duration,
) {
    while history
        .front()
        .is_some_and(|oldest| now.duration_since(time(oldest)).unwrap_or_default() >= window)
    {
        history.pop_front();
    }
}

impl CpuEvict {
    /// `BECPUEvict` on, the others off; see [`CpuEvict::with_feature_gates`].
    pub fn new() -> Self {
        Self::with_features(&[FEATURE])
    }

    /// Exactly the named features on.
    pub fn with_features(on: &[&str]) -> Self {
        Self {
            gates: FEATURES.map(|name| FeatureGate {
                name,
                default: false,
                enabled: on.contains(&name),
            }),
            dry_run: Vec::new(),
        }
    }

    /// Applies parsed `--feature-gates` (upstream default: every feature off).
    pub fn with_feature_gates(mut self, gates: &BTreeMap<String, bool>) -> Self {
        self.gates = self.gates.map(|gate| gate.from_gates(gates));
        self
    }

    /// Features that only report whom they would evict.
    pub fn with_dry_run(mut self, features: &[&'static str]) -> Self {
        self.dry_run = features
            .iter()
            .copied()
            .filter(|f| FEATURES.contains(f))
            .collect();
        self
    }

    pub fn enabled_features(&self) -> Vec<&'static str> {
        self.gates
            .iter()
            .filter(|g| g.enabled)
            .map(|g| g.name)
            .collect()
    }

    fn window_seconds(snapshot: &QosSnapshot, config: &ResourceThresholdStrategy) -> Duration {
        let collect = snapshot.collect_interval.max(Duration::from_secs(1));
        let configured =
            Duration::from_secs(config.cpu_evict_time_window_seconds.unwrap_or(0).max(0) as u64);
        configured.max(collect)
    }

    /// Adds this round's BE sample (if any) and returns the window.
    fn be_window(
        history: &mut VecDeque<BeCpuSample>,
        sample: Option<BeCpuSample>,
        now: SystemTime,
        window: Duration,
    ) -> Vec<BeCpuSample> {
        if let Some(sample) = sample {
            history.push_back(sample);
        }
        trim(history, |s| s.time, now, window);
        history.iter().copied().collect()
    }

    /// Adds this round's node CPU sample (if fresh) and returns the window average.
    fn node_average(
        history: &mut VecDeque<(SystemTime, f64)>,
        snapshot: &QosSnapshot,
        window: Duration,
    ) -> Result<f64, String> {
        let sample = snapshot.fresh("node CPU usage", snapshot.node_usage.cpu);
        if let Ok(sample) = sample
            && history.back().is_none_or(|(time, _)| *time < sample.time)
        {
            history.push_back((sample.time, sample.value));
        }
        trim(history, |s| s.0, snapshot.now, window);
        sample?;
        if history.is_empty() {
            return Err("no node CPU usage sample in the window".to_string());
        }
        Ok(history.iter().map(|(_, v)| v).sum::<f64>() / history.len() as f64)
    }

    /// Records this round's samples for every enabled feature's window, so
    /// a window is full when its feature first needs it.
    fn observe(
        history: &mut VecDeque<BeCpuSample>,
        snapshot: &QosSnapshot,
        config: &ResourceThresholdStrategy,
    ) -> Result<Vec<BeCpuSample>, String> {
        let window = Self::window_seconds(snapshot, config);
        let be_pods: Vec<_> = snapshot
            .pods
            .iter()
            .filter(|pod| pod.qos_label == apis::extension::QoSClass::BE)
            .filter(|pod| !matches!(pod.phase.as_str(), "Succeeded" | "Failed"))
            .collect();
        let sample = snapshot
            .fresh("BE CPU usage", snapshot.node_usage.be_cpu)
            .and_then(|usage| {
                Ok(BeCpuSample {
                    time: snapshot.now,
                    usage: usage.value * 1000.0,
                    request: be_pods
                        .iter()
                        .map(|pod| {
                            evicttask::evict_info(snapshot, pod, RequestKind::Cpu)
                                .batch_milli_cpu_request as f64
                        })
                        .sum(),
                    limit: be_real_limit(snapshot)?,
                })
            });
        let (sample, error) = match sample {
            Ok(sample) => (Some(sample), None),
            Err(err) => (None, Some(err)),
        };
        let history = Self::be_window(history, sample, snapshot.now, window);
        match error {
            Some(err) => Err(err),
            None => Ok(history),
        }
    }

    fn build_task(
        &self,
        feature: &'static str,
        snapshot: &QosSnapshot,
        config: &ResourceThresholdStrategy,
        be_window: &Result<Vec<BeCpuSample>, String>,
        node_average: &Result<f64, String>,
    ) -> Result<EvictTask, String> {
        let round = snapshot
            .config
            .cpu_evict_interval
            .max(Duration::from_secs(1));
        match feature {
            FEATURE => {
                let mut settings = satisfaction_config(config, round)
                    .map_err(|err| format!("invalid config: {err}"))?;
                settings.window = settings.window.max(Self::window_seconds(snapshot, config));
                let window = be_window.clone()?;
                let limit = match config.cpu_evict_policy {
                    Some(CPUEvictPolicy::EvictByAllocatable) => Some(
                        be_allocatable_limit(snapshot)
                            .ok_or("evictByAllocatable: the node has no kubernetes.io/batch-cpu allocatable")?,
                    ),
                    _ => None,
                };
                let release = plan_release(&window, round, &settings, limit)?;
                Ok(EvictTask {
                    feature,
                    target: ReleaseTarget::PodResourceRequest,
                    to_release: ResourceList::from([(BATCH_CPU.to_string(), release)]),
                    candidates: be_candidates(snapshot, feature, RequestKind::Cpu, be_cpu_order),
                    release: PodRelease::BatchCpuRequest,
                })
            }
            FEATURE_CPU_EVICT => {
                let thresholds =
                    usage_thresholds(config).map_err(|err| format!("invalid config: {err}"))?;
                let average = node_average.clone()?;
                let release =
                    release_by_node_usage(snapshot.node.cpu_capacity, average, &thresholds)?.0;
                Ok(EvictTask {
                    feature,
                    target: ReleaseTarget::PodUsed,
                    to_release: ResourceList::from([("cpu".to_string(), release)]),
                    candidates: priority_candidates(
                        snapshot,
                        feature,
                        thresholds.priority_threshold,
                        RequestKind::Cpu,
                        cpu_used_desc,
                    ),
                    release: PodRelease::CpuUsed,
                })
            }
            FEATURE_ALLOCATABLE => {
                let settings = cpu_allocatable_thresholds(config)
                    .map_err(|err| format!("invalid config: {err}"))?;
                let (release, classes) = evicttask::allocatable_release(
                    snapshot,
                    RequestKind::Cpu,
                    settings.priority_threshold,
                    settings.threshold_percent,
                    settings.lower_percent,
                );
                if release.is_empty() {
                    return Err(format!(
                        "CPU requested by pods with priority <= {} is within {}% of allocatable",
                        settings.priority_threshold, settings.threshold_percent
                    ));
                }
                Ok(EvictTask {
                    feature,
                    target: ReleaseTarget::PodResourceRequest,
                    to_release: release,
                    candidates: priority_candidates(
                        snapshot,
                        feature,
                        settings.priority_threshold,
                        RequestKind::Cpu,
                        cpu_request_desc,
                    ),
                    release: PodRelease::CpuRequestOf(classes),
                })
            }
            other => Err(format!("unknown feature {other}")),
        }
    }
}

impl Strategy for CpuEvict {
    type State = CpuEvictState;

    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.cpu_evict_interval
    }

    fn decide(&self, snapshot: &QosSnapshot, state: &CpuEvictState) -> (Decision, CpuEvictState) {
        let mut next = state.clone();
        let decision = self.evict(snapshot, &mut next);
        (decision, next)
    }
}

impl CpuEvict {
    /// The round's evictions; `next` is this round's state.
    fn evict(&self, snapshot: &QosSnapshot, next: &mut CpuEvictState) -> Decision {
        let now = snapshot.now;
        let features = self.enabled_features();
        if features.is_empty() {
            return Decision::skipped(format!(
                "feature gates {} are off (enable one with --feature-gates=<name>=true)",
                FEATURES.join(", ")
            ));
        }
        let config = effective_thresholds(snapshot);
        // Samples are kept whatever else happens, so the windows fill up
        // during the cool time as upstream's metric cache does.
        let be_window = if features.contains(&FEATURE) {
            Self::observe(&mut next.be_history, snapshot, &config)
        } else {
            Err("BECPUEvict is off".to_string())
        };
        let node_average = if features.contains(&FEATURE_CPU_EVICT) {
            Self::node_average(
                &mut next.node_history,
                snapshot,
                Self::window_seconds(snapshot, &config),
            )
        } else {
            Err("CPUEvict is off".to_string())
        };
        // Upstream cools down from start-up too.
        let memory = next
            .memory
            .get_or_insert_with(|| EvictionMemory::cooling_from(now));
        if let Some(left) = memory.cooling(now, snapshot.config.cpu_evict_cool_time) {
            return Decision::skipped(format!(
                "cooling down after the last eviction ({}s left)",
                left.as_secs()
            ));
        }
        match disabled_by_node_slo(snapshot) {
            Err(reason) => return Decision::skipped(reason),
            Ok(true) => return Decision::skipped("resourceUsedThresholdWithBE.enable is not true"),
            Ok(false) => {}
        }
        if snapshot.node.cpu_capacity.0 <= 0 {
            return Decision::skipped("node CPU capacity is not known");
        }
        let mut tasks = Vec::new();
        let mut notes = Vec::new();
        for feature in features {
            match self.build_task(feature, snapshot, &config, &be_window, &node_average) {
                Ok(task) => tasks.push(task),
                Err(reason) => notes.push(format!("{feature}: {reason}")),
            }
        }
        let detail =
            |task: &EvictTask| format!("release {:?} ({})", task.to_release, task.target.as_str());
        let mut dry_run = self.dry_run.clone();
        dry_run.extend(snapshot.config.evict_dry_run_features.iter().copied());
        evicttask::decide_round(snapshot, NAME, tasks, &dry_run, memory, notes, &detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qosmanager::framework::testing::{Rounds, assert_deterministic};
    use crate::qosmanager::framework::{MapReader, MetricSample};
    use crate::qosmanager::memoryevict::test_pods::*;
    use apis::extension::{MID_CPU, QoSClass};
    use koord_common::units::MilliCpu;

    /// (node allocatable, pods, (threshold %, lower %, priority threshold), release).
    type AllocatableCase = (
        Vec<(&'static str, i64)>,
        Vec<k8s_openapi::api::core::v1::Pod>,
        (i64, i64, i32),
        Vec<(&'static str, i64)>,
    );

    fn threshold_config() -> ResourceThresholdStrategy {
        ResourceThresholdStrategy::default()
    }
    use koord_common::units::CpuSet;
    use std::sync::Arc;

    fn settings() -> SatisfactionConfig {
        SatisfactionConfig {
            lower_percent: 40,
            upper_percent: 80,
            usage_threshold_percent: 90,
            window: Duration::from_secs(1),
        }
    }

    fn threshold() -> ResourceThresholdStrategy {
        ResourceThresholdStrategy {
            enable: Some(true),
            cpu_evict_be_satisfaction_lower_percent: Some(40),
            cpu_evict_be_satisfaction_upper_percent: Some(80),
            cpu_evict_time_window_seconds: Some(3),
            ..ResourceThresholdStrategy::default()
        }
    }

    /// A node with 8 CPUs, BE cpuset of `be_cpus` CPUs and the given quota.
    fn snapshot(
        now: SystemTime,
        be_cpus: u32,
        quota: Option<i64>,
        be_usage_cores: f64,
        pods: Vec<crate::qosmanager::framework::QosPod>,
    ) -> QosSnapshot {
        let mut snapshot = snapshot_with(threshold(), now);
        snapshot.node.cpu_capacity = MilliCpu(8000);
        let dir = snapshot.layout.qos_dir(QosTier::BestEffort);
        let mut reader = MapReader::default().with(
            dir.clone(),
            CgroupResource::CpusetCpus,
            CgroupValue::CpuSet(CpuSet::from_range(0, be_cpus - 1).unwrap()),
        );
        if let Some(quota) = quota {
            reader = reader
                .with(
                    dir.clone(),
                    CgroupResource::CpuCfsQuota,
                    CgroupValue::Int(quota),
                )
                .with(dir, CgroupResource::CpuCfsPeriod, CgroupValue::Int(100_000));
        }
        snapshot.reader = Arc::new(reader);
        snapshot.node_usage.be_cpu = Some(MetricSample::new(be_usage_cores, now));
        snapshot.pods = pods;
        snapshot
    }

    /// Three BE pods requesting 2 cores each: 6 cores requested.
    fn be_pods(now: SystemTime) -> Vec<crate::qosmanager::framework::QosPod> {
        vec![
            with_cpu(pod("a", QoSClass::BE, 5500), MilliCpu(2000), 0.5, now),
            with_cpu(pod("b", QoSClass::BE, 5500), MilliCpu(2000), 1.0, now),
            with_cpu(pod("c", QoSClass::BE, 5100), MilliCpu(2000), 0.2, now),
            with_cpu(pod("ls", QoSClass::LS, 9500), MilliCpu(4000), 3.0, now),
        ]
    }

    #[test]
    fn satisfaction_formula_matches_upstream() {
        // (BE request m, BE limit m) -> release m; lower 40%, upper 80%.
        let releases = [
            // Satisfaction 0.33 <= 0.4: release 6000 × (0.8 − 0.333) = 2800m.
            ((6000.0, 2000.0), 2800),
            // Satisfaction 0.5 > lower 0.4: nothing.
            ((4000.0, 2000.0), 0),
            // Nothing requested: nothing.
            ((0.0, 2000.0), 0),
        ];
        for ((request, limit), release) in releases {
            assert_eq!(
                release_by_satisfaction(request, limit, &settings()),
                release,
                "request {request}m, limit {limit}m"
            );
        }
        // (BE usage m, BE limit m) -> usage over 90% of the limit; a limit
        // under one core always counts, no limit never does.
        let usages = [
            ((1900.0, 2000.0), true),
            ((1700.0, 2000.0), false),
            ((10.0, 500.0), true),
            ((10.0, 0.0), false),
        ];
        for ((usage, limit), high) in usages {
            assert_eq!(
                usage_high_enough(usage, limit, 90),
                high,
                "usage {usage}m, limit {limit}m"
            );
        }
    }

    #[test]
    fn config_validation_follows_upstream_ranges() {
        let round = Duration::from_secs(1);
        assert!(satisfaction_config(&threshold(), round).is_ok());
        for (lower, upper) in [(0, 80), (61, 80), (40, 100), (40, 0), (50, 40)] {
            let mut config = threshold();
            config.cpu_evict_be_satisfaction_lower_percent = Some(lower);
            config.cpu_evict_be_satisfaction_upper_percent = Some(upper);
            assert!(
                satisfaction_config(&config, round).is_err(),
                "{lower}/{upper}"
            );
        }
        assert!(satisfaction_config(&ResourceThresholdStrategy::default(), round).is_err());
        let defaults = satisfaction_config(&threshold(), round).unwrap();
        assert_eq!(defaults.usage_threshold_percent, 90);
        assert_eq!(defaults.window, Duration::from_secs(3));
    }

    #[test]
    fn starving_be_evicts_lowest_priority_then_busiest_after_window_and_cool_time() {
        let mut strategy = Rounds::new(CpuEvict::new());
        let start = t0();
        // BE squeezed to 2 CPUs, using 1.95 of them, 6 cores requested.
        let first = strategy.decide(&snapshot(start, 2, None, 1.95, be_pods(start)));
        assert!(first.evictions.is_empty());
        assert!(
            first.skip_reason().unwrap().contains("cooling"),
            "{first:?}"
        );
        // After the 20 s start-up cool time the 3 s window is full.
        let mut decisions = Vec::new();
        for second in 17..=21 {
            let now = start + Duration::from_secs(second);
            decisions.push(strategy.decide(&snapshot(now, 2, None, 1.95, be_pods(now))));
        }
        // Seconds 17-19 still cool; 20 evicts; 21 cools again after that eviction.
        assert!(decisions[..3].iter().all(|d| d.evictions.is_empty()));
        assert!(decisions[4].skip_reason().unwrap().contains("cooling"));
        let decision = &decisions[3];
        // Release 2800m: c (priority 5100) first, then b (ratio 0.5 > a's 0.25).
        let uids: Vec<&str> = decision.evictions.iter().map(|e| e.uid.as_str()).collect();
        assert_eq!(uids, ["c", "b"], "{decision:?}");
        assert!(decision.evictions.iter().all(|e| e.reason == FEATURE));
    }

    #[test]
    fn decide_is_deterministic_and_state_carries_windows_and_cool_time() {
        let start = t0();
        let mut rounds = Rounds::new(CpuEvict::new());
        for second in [0, 17, 18, 19] {
            let now = start + Duration::from_secs(second);
            rounds.decide(&snapshot(now, 2, None, 1.95, be_pods(now)));
        }
        let now = start + Duration::from_secs(20);
        let round = snapshot(now, 2, None, 1.95, be_pods(now));
        let (decision, next) = assert_deterministic(&rounds.strategy, &round, &rounds.state);
        let uids: Vec<&str> = decision.evictions.iter().map(|e| e.uid.as_str()).collect();
        assert_eq!(uids, ["c", "b"], "{decision:?}");
        // The window holds the samples of the last 3 s; the eviction starts a cool time.
        let times: Vec<SystemTime> = next.be_history.iter().map(|s| s.time).collect();
        assert_eq!(times.first(), Some(&(start + Duration::from_secs(18))));
        assert_eq!(times.last(), Some(&now));
        let cool = round.config.cpu_evict_cool_time;
        assert!(next.memory.as_ref().unwrap().cooling(now, cool).is_some());
        // The input state was not touched: from it the same round evicts again.
        assert_eq!(rounds.decide(&round), decision);
    }

    #[test]
    fn quota_caps_the_real_limit() {
        let now = t0();
        let snap = snapshot(now, 4, Some(150_000), 1.0, vec![]);
        assert_eq!(be_real_limit(&snap).unwrap(), 1500.0);
        let unlimited = snapshot(now, 4, None, 1.0, vec![]);
        assert_eq!(be_real_limit(&unlimited).unwrap(), 4000.0);
        let mut missing = unlimited.clone();
        missing.reader = Arc::new(MapReader::default());
        assert!(be_real_limit(&missing).unwrap_err().contains("cpuset.cpus"));
    }

    #[test]
    fn idle_or_satisfied_be_and_missing_metrics_do_nothing() {
        let start = t0() + Duration::from_secs(100);
        // Idle BE: usage 0.5 of 2 cores.
        let mut idle = Rounds::new(CpuEvict::new());
        let _ = idle.decide(&snapshot(t0(), 2, None, 0.5, be_pods(start)));
        let decision = idle.decide(&snapshot(start, 2, None, 0.5, be_pods(start)));
        assert!(decision.evictions.is_empty());
        assert!(
            decision.skip_reason().unwrap().contains("under 90%"),
            "{decision:?}"
        );
        // Satisfied BE: 6 CPUs for 6 cores requested.
        let mut satisfied = Rounds::new(CpuEvict::new());
        let _ = satisfied.decide(&snapshot(t0(), 6, None, 5.9, be_pods(start)));
        let decision = satisfied.decide(&snapshot(start, 6, None, 5.9, be_pods(start)));
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("above the lower bound"),
            "{decision:?}"
        );
        // No BE usage sample.
        let mut missing = snapshot(start, 2, None, 1.95, be_pods(start));
        missing.node_usage.be_cpu = None;
        let decision = warmed(CpuEvict::new()).decide(&missing);
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("no BE CPU usage sample")
        );
        // Stale sample.
        let mut stale = snapshot(start, 2, None, 1.95, be_pods(start));
        stale.node_usage.be_cpu = Some(MetricSample::new(1.95, start - Duration::from_secs(300)));
        let decision = warmed(CpuEvict::new()).decide(&stale);
        assert!(decision.skip_reason().unwrap().contains("stale"));
    }

    /// A strategy whose start-up cool time ended (first round at t0).
    fn warmed(strategy: CpuEvict) -> Rounds<CpuEvict> {
        let mut rounds = Rounds::new(strategy);
        let _ = rounds.decide(&snapshot(t0(), 2, None, 1.95, vec![]));
        rounds
    }

    #[test]
    fn no_be_pods_and_disabled_config_say_so() {
        let later = t0() + Duration::from_secs(30);
        let decision = warmed(CpuEvict::new()).decide(&snapshot(later, 2, None, 1.95, vec![]));
        // No BE pods: no requests, satisfaction cannot be low.
        assert!(decision.evictions.is_empty());
        assert!(decision.skip_reason().is_some());

        let mut off = snapshot(later, 2, None, 1.95, be_pods(later));
        let mut config = threshold();
        config.enable = Some(false);
        off.node_slo = snapshot_with(config, later).node_slo;
        let decision = warmed(CpuEvict::new()).decide(&off);
        assert!(
            decision.skip_reason().unwrap().contains("enable"),
            "{decision:?}"
        );

        // evictByAllocatable without batch-cpu on the node: said so.
        let mut allocatable = snapshot(later, 2, None, 1.95, be_pods(later));
        let mut config = threshold();
        config.cpu_evict_policy = Some(CPUEvictPolicy::EvictByAllocatable);
        allocatable.node_slo = snapshot_with(config, later).node_slo;
        let decision = warmed(CpuEvict::new()).decide(&allocatable);
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("evictByAllocatable"),
            "{decision:?}"
        );
    }

    /// `evictByAllocatable`: satisfaction = batch-cpu allocatable ÷ requests.
    #[test]
    fn evict_by_allocatable_uses_the_node_batch_allocatable() {
        let mut config = threshold();
        config.cpu_evict_policy = Some(CPUEvictPolicy::EvictByAllocatable);
        let mut strategy = warmed(CpuEvict::new());
        let mut decisions = Vec::new();
        for second in 18..=21 {
            let now = t0() + Duration::from_secs(second);
            // The real limit is the whole 8-CPU node: by real limit nothing is starved.
            let mut snap = snapshot(now, 8, None, 1.95, be_pods(now));
            snap.node_slo = snapshot_with(config.clone(), now).node_slo;
            // Allocatable 2000m for 6000m requested: satisfaction 0.33; BE uses 1.95 of 2 cores.
            snap.node.allocatable.insert(BATCH_CPU.to_string(), 2000);
            decisions.push(strategy.decide(&snap));
        }
        let evicted: Vec<&str> = decisions
            .iter()
            .flat_map(|d| d.evictions.iter().map(|e| e.uid.as_str()))
            .collect();
        assert_eq!(evicted, ["c", "b"], "{decisions:?}");
        assert_eq!(be_allocatable_limit(&QosSnapshot::for_test(t0())), None);
        let mut zero = QosSnapshot::for_test(t0());
        zero.node.allocatable.insert(BATCH_CPU.to_string(), 0);
        assert_eq!(
            be_allocatable_limit(&zero),
            Some(MIN_ALLOCATABLE_BATCH_MILLI_CPU)
        );
    }

    /// Upstream `Test_isUsedThresholdConfigValid`.
    #[test]
    fn usage_config_table() {
        let base = ResourceThresholdStrategy::default;
        let with = |threshold: Option<i64>, lower: Option<i64>, priority: Option<i32>| {
            ResourceThresholdStrategy {
                cpu_evict_threshold_percent: threshold,
                cpu_evict_lower_percent: lower,
                evict_enabled_priority_threshold: priority,
                ..base()
            }
        };
        let cases = [
            (
                with(None, None, None),
                Err("CPUEvictThresholdPercent not config"),
            ),
            (
                with(Some(-1), None, None),
                Err("threshold percent(-1) should greater than 0"),
            ),
            (with(Some(80), None, Some(5999)), Ok((80, 78, 5999))),
            (
                with(Some(80), Some(90), Some(5999)),
                Err("lower percent(90) should less than threshold percent(80)"),
            ),
            (
                with(Some(80), Some(70), None),
                Err("EvictEnabledPriorityThreshold not config"),
            ),
            (with(Some(80), Some(70), Some(5999)), Ok((80, 70, 5999))),
        ];
        for (config, want) in cases {
            let got = usage_thresholds(&config)
                .map(|t| (t.threshold_percent, t.lower_percent, t.priority_threshold));
            assert_eq!(
                got.as_ref().map_err(String::as_str),
                want.as_ref().map_err(|e| *e)
            );
        }
    }

    /// Upstream `Test_isAllocatableThresholdConfigValid`.
    #[test]
    fn allocatable_config_table() {
        let with = |threshold: Option<i64>, lower: Option<i64>, priority: Option<i32>| {
            ResourceThresholdStrategy {
                cpu_allocatable_evict_threshold_percent: threshold,
                cpu_allocatable_evict_lower_percent: lower,
                allocatable_evict_priority_threshold: priority,
                ..ResourceThresholdStrategy::default()
            }
        };
        let cases = [
            (
                with(None, None, None),
                Some("CPUAllocatableEvictThresholdPercent not config"),
            ),
            (
                with(Some(-1), None, None),
                Some("threshold percent(-1) should greater than 0"),
            ),
            (
                with(Some(80), None, None),
                Some("CPUAllocatableEvictLowerPercent not config"),
            ),
            (
                with(Some(80), Some(90), None),
                Some("lower percent(90) should less than threshold percent(80)"),
            ),
            (
                with(Some(80), Some(80), None),
                Some("lower percent(80) should less than threshold percent(80)"),
            ),
            (
                with(Some(80), Some(70), None),
                Some("AllocatableEvictPriorityThreshold not config"),
            ),
            (
                with(Some(80), Some(70), Some(8000)),
                Some(
                    "priorityThresholdPercent(8000) should less than 7999, koor-prod pods should not be killed",
                ),
            ),
            (with(Some(80), Some(70), Some(7000)), None),
            (with(Some(80), Some(70), Some(5999)), None),
        ];
        for (config, want) in cases {
            assert_eq!(
                cpu_allocatable_thresholds(&config).err().as_deref(),
                want,
                "{config:?}"
            );
        }
    }

    /// Upstream `Test_calculateReleaseByUsedThresholdPercent` (100-core node).
    #[test]
    fn node_usage_release_table() {
        let thresholds = |threshold, lower| UsageThresholds {
            threshold_percent: threshold,
            lower_percent: lower,
            priority_threshold: 3000,
        };
        let release = |capacity, average, thresholds| {
            release_by_node_usage(MilliCpu(capacity), average, &thresholds).map(|m| m.0)
        };
        assert_eq!(release(100_000, 81.0, thresholds(80, 78)), Ok(3000));
        assert_eq!(release(100_000, 81.0, thresholds(80, 80)), Ok(1000));
        assert!(release(100_000, 11.0, thresholds(80, 78)).is_err());
        assert!(release(0, 11.0, thresholds(80, 78)).is_err());
    }

    fn opted(
        name: &str,
        priority: i32,
        requests: &[(&str, &str)],
    ) -> k8s_openapi::api::core::v1::Pod {
        labelled(
            requesting(kube_pod(name, QoSClass::BE, priority), requests),
            "koordinator.sh/eviction-enabled",
            "true",
        )
    }

    /// `CPUEvict`: node usage over the window above the threshold evicts
    /// opted-in pods under the priority threshold, busiest first.
    #[test]
    fn cpu_evict_by_node_usage_takes_opted_in_pods_busiest_first() {
        let mut config = threshold();
        config.cpu_evict_threshold_percent = Some(80);
        config.cpu_evict_lower_percent = Some(70);
        config.evict_enabled_priority_threshold = Some(5999);
        let mut strategy = warmed(CpuEvict::with_features(&[FEATURE_CPU_EVICT]));
        let now = t0() + Duration::from_secs(25);
        let mut snap = snapshot(now, 8, None, 0.0, vec![]);
        snap.node_slo = snapshot_with(config, now).node_slo;
        // 8 cores, 7.2 used (90 %): release 8000 × (90 − 70) / 100 = 1600m.
        snap.node_usage.cpu = Some(MetricSample::new(7.2, now));
        with_kube_pods(
            &mut snap,
            vec![
                opted("quiet", 5500, &[]),
                opted("busy", 5500, &[]),
                opted("busier", 5500, &[]),
                labelled(
                    kube_pod("prod", QoSClass::LS, 9500),
                    "koordinator.sh/eviction-enabled",
                    "true",
                ),
                kube_pod("not-opted", QoSClass::BE, 5000),
            ],
            &[],
            &[
                ("quiet", 0.1),
                ("busy", 1.0),
                ("busier", 1.2),
                ("prod", 4.0),
                ("not-opted", 5.0),
            ],
        );
        let decision = strategy.decide(&snap);
        let uids: Vec<&str> = decision.evictions.iter().map(|e| e.uid.as_str()).collect();
        assert_eq!(uids, ["busier", "busy"], "{decision:?}");
        assert!(
            decision
                .evictions
                .iter()
                .all(|e| e.reason == FEATURE_CPU_EVICT)
        );
    }

    /// Upstream `Test_calculateMilliReleaseByAllocatableThresholdPercent`,
    /// then the whole `CPUAllocatableEvict` round.
    #[test]
    fn cpu_allocatable_release_table_and_round() {
        let mid = |name: &str, cpu: &str| {
            labelled(
                requesting(kube_pod(name, QoSClass::LS, 7000), &[(MID_CPU, cpu)]),
                "koordinator.sh/eviction-enabled",
                "true",
            )
        };
        let cases: Vec<AllocatableCase> = vec![
            (vec![(BATCH_CPU, 100)], vec![], (80, 70, 5999), vec![]),
            (
                vec![(BATCH_CPU, 100_000)],
                vec![
                    opted("b1", 5000, &[(BATCH_CPU, "45000")]),
                    opted("b2", 5000, &[(BATCH_CPU, "40000")]),
                ],
                (80, 70, 5999),
                vec![(BATCH_CPU, 15_000)],
            ),
            (
                vec![(BATCH_CPU, 100_000), (MID_CPU, 100_000)],
                vec![
                    opted("b1", 5000, &[(BATCH_CPU, "85000")]),
                    mid("m1", "85000"),
                ],
                (80, 70, 7999),
                vec![(BATCH_CPU, 15_000), (MID_CPU, 15_000)],
            ),
            (
                vec![(BATCH_CPU, 100_000), (MID_CPU, 100_000)],
                vec![
                    opted("b1", 5000, &[(BATCH_CPU, "85000")]),
                    mid("m1", "85000"),
                ],
                (80, 70, 5999),
                vec![(BATCH_CPU, 15_000)],
            ),
            (
                vec![(BATCH_CPU, 100_000)],
                vec![opted("b1", 5000, &[(BATCH_CPU, "85000")])],
                (0, 0, 5999),
                vec![(BATCH_CPU, 85_000)],
            ),
            (
                vec![],
                vec![opted("b1", 5000, &[(BATCH_CPU, "85000")])],
                (80, 70, 5999),
                vec![(BATCH_CPU, 85_000)],
            ),
        ];
        for (allocatable, pods, (threshold, lower, priority), want) in cases {
            let mut snap = snapshot_with(threshold_config(), t0());
            snap.node.allocatable = allocatable
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect();
            with_kube_pods(&mut snap, pods, &[], &[]);
            let (release, _) =
                evicttask::allocatable_release(&snap, RequestKind::Cpu, priority, threshold, lower);
            let want: ResourceList = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            assert_eq!(release, want, "{allocatable:?}");
        }

        // The round: 15000m of batch-cpu to release, largest request first.
        let mut config = threshold();
        config.cpu_allocatable_evict_threshold_percent = Some(80);
        config.cpu_allocatable_evict_lower_percent = Some(70);
        config.allocatable_evict_priority_threshold = Some(5999);
        let mut strategy = warmed(CpuEvict::with_features(&[FEATURE_ALLOCATABLE]));
        let now = t0() + Duration::from_secs(25);
        let mut snap = snapshot(now, 8, None, 0.0, vec![]);
        snap.node_slo = snapshot_with(config, now).node_slo;
        snap.node.allocatable.insert(BATCH_CPU.to_string(), 100_000);
        with_kube_pods(
            &mut snap,
            vec![
                opted("small", 5000, &[(BATCH_CPU, "10000")]),
                opted("large", 5000, &[(BATCH_CPU, "45000")]),
                opted("medium", 5000, &[(BATCH_CPU, "30000")]),
            ],
            &[],
            &[("small", 1.0), ("large", 1.0), ("medium", 1.0)],
        );
        let decision = strategy.decide(&snap);
        let uids: Vec<&str> = decision.evictions.iter().map(|e| e.uid.as_str()).collect();
        assert_eq!(uids, ["large"], "{decision:?}");
        let report = decision.eviction_report.unwrap();
        assert_eq!(report.tasks[0].to_release[BATCH_CPU], 15_000);
        assert_eq!(report.tasks[0].released[BATCH_CPU], 45_000);
    }

    #[test]
    fn window_needs_a_third_of_its_samples() {
        let config = SatisfactionConfig {
            window: Duration::from_secs(30),
            ..settings()
        };
        let sample = BeCpuSample {
            time: t0(),
            usage: 1950.0,
            request: 6000.0,
            limit: 2000.0,
        };
        let few = vec![sample; 9];
        assert!(
            plan_release(&few, Duration::from_secs(1), &config, None)
                .unwrap_err()
                .contains("only 9")
        );
        let enough = vec![sample; 10];
        assert_eq!(
            plan_release(&enough, Duration::from_secs(1), &config, None),
            Ok(2800)
        );
        // The latest sample caps the release.
        let mut capped = enough.clone();
        capped.push(BeCpuSample {
            limit: 2200.0,
            usage: 2150.0,
            ..sample
        });
        let release = plan_release(&capped, Duration::from_secs(1), &config, None).unwrap();
        assert!(release < 2800 && release > 2000, "{release}");
    }
}
