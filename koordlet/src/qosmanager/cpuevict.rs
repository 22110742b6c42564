//! QoS strategy `cpuevict` (upstream feature `BECPUEvict`): when the BE
//! tier is busy (usage ≥ `cpuEvictBEUsageThresholdPercent` of its real
//! limit, default 90 %) yet its CPU satisfaction — real limit ÷ Σ BE
//! requests — stays at or below `cpuEvictBESatisfactionLowerPercent` over
//! `cpuEvictTimeWindowSeconds`, evict BE pods until the requests that remain
//! are satisfied to `cpuEvictBESatisfactionUpperPercent`.
//!
//! The release is `request × (upper − satisfaction)`, computed from the
//! window average and from the latest sample; the smaller one counts.
//! Victims: BE pods by `spec.priority` ascending, then by CPU usage ÷
//! request descending; each releases its batch CPU request.
//!
//! The BE real limit is read from the besteffort tier cgroup each round
//! (CPUs in its cpuset, capped by its CFS quota), as upstream's BE
//! collector does; the strategy keeps the window of samples itself.

use std::cmp::Ordering;
use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use apis::extension::QoSClass;
use apis::slo::v1alpha1::{CPUEvictPolicy, ResourceThresholdStrategy};

use super::framework::FeatureGate;
use super::framework::{Decision, EvictionRequest, QosSnapshot, Strategy};
use super::memoryevict::{effective_thresholds, eviction_allowed, is_terminated};
use crate::evictor::bookkeeping::EvictionMemory;
use crate::system::cgroup::{CgroupResource, CgroupValue, QosTier};

pub const NAME: &str = "cpuevict";
/// Upstream's feature name; the eviction reason and the eviction-policy key.
pub const FEATURE: &str = "BECPUEvict";
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
            "cpuEvictBESatisfactionLowerPercent or cpuEvictBESatisfactionUpperPercent is not set"
                .to_string(),
        );
    };
    if lower <= 0 || lower > SATISFACTION_LOWER_MAX {
        return Err(format!(
            "cpuEvictBESatisfactionLowerPercent {lower} must be in (0, {SATISFACTION_LOWER_MAX}]"
        ));
    }
    if upper <= 0 || upper >= SATISFACTION_UPPER_MAX {
        return Err(format!(
            "cpuEvictBESatisfactionUpperPercent {upper} must be in (0, {SATISFACTION_UPPER_MAX})"
        ));
    }
    if upper < lower {
        return Err(format!(
            "cpuEvictBESatisfactionUpperPercent {upper} is below cpuEvictBESatisfactionLowerPercent {lower}"
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
) -> Result<i64, String> {
    let round_seconds = round.as_secs().max(1);
    if (window.len() as u64) * round_seconds < config.window.as_secs() / 3 {
        return Err(format!(
            "only {} BE CPU samples in the {}s window (need a third of it)",
            window.len(),
            config.window.as_secs()
        ));
    }
    let (Some(avg), Some(current)) = (average(window), window.last().copied()) else {
        return Err("no BE CPU samples yet".to_string());
    };
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

/// One BE pod that may be evicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub uid: String,
    pub priority: i32,
    /// Σ batch CPU requests, milli-CPU.
    pub request_milli: i64,
    /// Usage ÷ request (0 without a request).
    pub usage_ratio: f64,
}

/// Upstream's order: priority ascending, then usage ratio descending.
pub fn eviction_order(a: &Candidate, b: &Candidate) -> Ordering {
    a.priority.cmp(&b.priority).then_with(|| {
        b.usage_ratio
            .partial_cmp(&a.usage_ratio)
            .unwrap_or(Ordering::Equal)
    })
}

/// Victims (new ones, in order) and the milli-CPU of requests released.
pub fn pick_victims(
    to_release: i64,
    candidates: &[Candidate],
    pending: &HashSet<String>,
) -> (Vec<String>, i64) {
    let mut ordered: Vec<&Candidate> = candidates.iter().collect();
    ordered.sort_by(|a, b| eviction_order(a, b));
    let mut released = 0i64;
    let mut victims = Vec::new();
    for candidate in ordered {
        if released >= to_release {
            break;
        }
        released = released.saturating_add(candidate.request_milli);
        if !pending.contains(&candidate.uid) {
            victims.push(candidate.uid.clone());
        }
    }
    (victims, released)
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

/// The `cpuevict` strategy.
#[derive(Debug)]
pub struct CpuEvict {
    gate: FeatureGate,
    memory: Mutex<Option<EvictionMemory>>,
    history: Mutex<VecDeque<BeCpuSample>>,
}

impl Default for CpuEvict {
    fn default() -> Self {
        Self::new()
    }
}

impl CpuEvict {
    /// On; see [`CpuEvict::with_feature_gates`].
    pub fn new() -> Self {
        Self {
            gate: FeatureGate::on(FEATURE, false),
            memory: Mutex::new(None),
            history: Mutex::new(VecDeque::new()),
        }
    }

    /// Applies parsed `--feature-gates` (upstream default: off).
    pub fn with_feature_gates(mut self, gates: &std::collections::BTreeMap<String, bool>) -> Self {
        self.gate = self.gate.from_gates(gates);
        self
    }

    /// Adds this round's sample and returns the samples within `window`.
    fn window(
        &self,
        sample: Option<BeCpuSample>,
        now: SystemTime,
        window: Duration,
    ) -> Vec<BeCpuSample> {
        let mut history = self
            .history
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(sample) = sample {
            history.push_back(sample);
        }
        while history
            .front()
            .is_some_and(|oldest| now.duration_since(oldest.time).unwrap_or_default() >= window)
        {
            history.pop_front();
        }
        history.iter().copied().collect()
    }

    fn with_memory<T>(&self, now: SystemTime, f: impl FnOnce(&EvictionMemory) -> T) -> T {
        let mut memory = self
            .memory
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Upstream cools down from start-up too.
        f(memory.get_or_insert_with(|| EvictionMemory::cooling_from(now)))
    }
}

impl Strategy for CpuEvict {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.cpu_evict_interval
    }

    fn decide(&self, snapshot: &QosSnapshot) -> Decision {
        let now = snapshot.now;
        let round = snapshot
            .config
            .cpu_evict_interval
            .max(Duration::from_secs(1));
        if let Err(off) = self.gate.check() {
            return Decision::skipped(off);
        }
        if snapshot.node_slo.is_none() {
            return Decision::skipped("no NodeSLO yet");
        }
        let config = effective_thresholds(snapshot);
        if config.enable != Some(true) {
            return Decision::skipped("resourceUsedThresholdWithBE.enable is not true");
        }
        if config.cpu_evict_policy == Some(CPUEvictPolicy::EvictByAllocatable) {
            return Decision::skipped(
                "cpuEvictPolicy evictByAllocatable is not supported (needs the node's batch-cpu allocatable); use evictByRealLimit",
            );
        }
        let settings = match satisfaction_config(&config, round) {
            Ok(settings) => settings,
            Err(err) => return Decision::skipped(format!("invalid config: {err}")),
        };
        if snapshot.node.cpu_capacity_milli <= 0 {
            return Decision::skipped("node CPU capacity is not known");
        }
        let be_pods: Vec<_> = snapshot
            .pods
            .iter()
            .filter(|pod| pod.qos_label == QoSClass::BE && !is_terminated(pod))
            .collect();
        // This round's sample; a missing input still trims the window.
        let sample = snapshot
            .fresh("BE CPU usage", snapshot.node_usage.be_cpu)
            .and_then(|usage| {
                Ok(BeCpuSample {
                    time: now,
                    usage: usage.value * 1000.0,
                    request: be_pods.iter().map(|p| p.cpu_request_milli() as f64).sum(),
                    limit: be_real_limit(snapshot)?,
                })
            });
        let (sample, sample_error) = match sample {
            Ok(sample) => (Some(sample), None),
            Err(err) => (None, Some(err)),
        };
        let window = self.window(sample, now, settings.window);
        if let Some(err) = sample_error {
            return Decision::skipped(err);
        }
        if let Some(left) = self.with_memory(now, |memory| {
            memory.cooling(now, snapshot.config.cpu_evict_cool_time)
        }) {
            return Decision::skipped(format!(
                "cooling down after the last eviction ({}s left)",
                left.as_secs()
            ));
        }
        let to_release = match plan_release(&window, round, &settings) {
            Ok(release) => release,
            Err(reason) => return Decision::skipped(reason),
        };
        let candidates: Vec<Candidate> = be_pods
            .iter()
            .filter(|pod| eviction_allowed(snapshot, pod, FEATURE))
            .map(|pod| {
                let request = pod.cpu_request_milli();
                let used = pod.cpu_usage.map_or(0.0, |s| s.value * 1000.0);
                Candidate {
                    uid: pod.uid.clone(),
                    priority: pod.priority_value,
                    request_milli: request,
                    usage_ratio: if request > 0 {
                        used / request as f64
                    } else {
                        0.0
                    },
                }
            })
            .collect();
        // A pod whose eviction was refused keeps its CPU: not pending.
        let present: HashSet<&str> = snapshot
            .pods
            .iter()
            .map(|p| p.uid.as_str())
            .filter(|uid| !snapshot.eviction_refused.contains(*uid))
            .collect();
        let pending = self.with_memory(now, |memory| memory.pending(now, &present));
        let (victims, released) = pick_victims(to_release, &candidates, &pending);
        let mut decision = Decision::default();
        decision.info(format!(
            "BE CPU satisfaction is low: release {to_release}m of BE requests ({released}m by {} new and {} pending evictions)",
            victims.len(),
            pending.len()
        ));
        if candidates.is_empty() {
            decision.skip("BE CPU satisfaction is low but there is no BE pod to evict");
            return decision;
        }
        for uid in &victims {
            let Some(pod) = be_pods.iter().find(|pod| &pod.uid == uid) else {
                continue;
            };
            decision.evictions.push(EvictionRequest::for_pod(
                pod,
                FEATURE,
                format!(
                    "trigger by koordlet feature {FEATURE}, kill pod: {}; BE CPU satisfaction below {}%, release {to_release}m",
                    pod.name, settings.lower_percent
                ),
            ));
        }
        self.with_memory(now, |memory| memory.record(now, victims));
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qosmanager::framework::{MapReader, MetricSample};
    use crate::qosmanager::memoryevict::test_pods::*;
    use crate::system::units::CpuSet;
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
        snapshot.node.cpu_capacity_milli = 8000;
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
            with_cpu(pod("a", QoSClass::BE, 5500), 2000, 0.5, now),
            with_cpu(pod("b", QoSClass::BE, 5500), 2000, 1.0, now),
            with_cpu(pod("c", QoSClass::BE, 5100), 2000, 0.2, now),
            with_cpu(pod("ls", QoSClass::LS, 9500), 4000, 3.0, now),
        ]
    }

    #[test]
    fn satisfaction_formula_matches_upstream() {
        // limit 2000m for 6000m requested: satisfaction 0.33 <= 0.4 →
        // release 6000 × (0.8 − 0.333) = 2800m.
        assert_eq!(release_by_satisfaction(6000.0, 2000.0, &settings()), 2800);
        // Satisfaction 0.5 > lower 0.4: nothing.
        assert_eq!(release_by_satisfaction(4000.0, 2000.0, &settings()), 0);
        assert_eq!(release_by_satisfaction(0.0, 2000.0, &settings()), 0);
        assert!(usage_high_enough(1900.0, 2000.0, 90));
        assert!(!usage_high_enough(1700.0, 2000.0, 90));
        assert!(
            usage_high_enough(10.0, 500.0, 90),
            "a limit under one core always counts"
        );
        assert!(!usage_high_enough(10.0, 0.0, 90));
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
        let strategy = CpuEvict::new();
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
        let idle = CpuEvict::new();
        let _ = idle.decide(&snapshot(t0(), 2, None, 0.5, be_pods(start)));
        let decision = idle.decide(&snapshot(start, 2, None, 0.5, be_pods(start)));
        assert!(decision.evictions.is_empty());
        assert!(
            decision.skip_reason().unwrap().contains("under 90%"),
            "{decision:?}"
        );
        // Satisfied BE: 6 CPUs for 6 cores requested.
        let satisfied = CpuEvict::new();
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
        let decision = CpuEvict::new().decide(&missing);
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("no BE CPU usage sample")
        );
        // Stale sample.
        let mut stale = snapshot(start, 2, None, 1.95, be_pods(start));
        stale.node_usage.be_cpu = Some(MetricSample::new(1.95, start - Duration::from_secs(300)));
        let decision = CpuEvict::new().decide(&stale);
        assert!(decision.skip_reason().unwrap().contains("stale"));
    }

    #[test]
    fn no_be_pods_and_disabled_config_say_so() {
        let strategy = CpuEvict::new();
        let _ = strategy.decide(&snapshot(t0(), 2, None, 1.95, vec![]));
        let later = t0() + Duration::from_secs(30);
        let decision = strategy.decide(&snapshot(later, 2, None, 1.95, vec![]));
        // No BE pods: no requests, satisfaction cannot be low.
        assert!(decision.evictions.is_empty());
        assert!(decision.skip_reason().is_some());

        let mut off = snapshot(later, 2, None, 1.95, be_pods(later));
        let mut config = threshold();
        config.enable = Some(false);
        off.node_slo = snapshot_with(config, later).node_slo;
        assert!(
            CpuEvict::new()
                .decide(&off)
                .skip_reason()
                .unwrap()
                .contains("enable")
        );

        let mut allocatable = snapshot(later, 2, None, 1.95, be_pods(later));
        let mut config = threshold();
        config.cpu_evict_policy = Some(CPUEvictPolicy::EvictByAllocatable);
        allocatable.node_slo = snapshot_with(config, later).node_slo;
        assert!(
            CpuEvict::new()
                .decide(&allocatable)
                .skip_reason()
                .unwrap()
                .contains("evictByAllocatable")
        );
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
            plan_release(&few, Duration::from_secs(1), &config)
                .unwrap_err()
                .contains("only 9")
        );
        let enough = vec![sample; 10];
        assert_eq!(
            plan_release(&enough, Duration::from_secs(1), &config),
            Ok(2800)
        );
        // The latest sample caps the release.
        let mut capped = enough.clone();
        capped.push(BeCpuSample {
            limit: 2200.0,
            usage: 2150.0,
            ..sample
        });
        let release = plan_release(&capped, Duration::from_secs(1), &config).unwrap();
        assert!(release < 2800 && release > 2000, "{release}");
    }
}
