//! QoS strategy `cpuburst` (upstream `plugins/cpuburst`), for LS pods and
//! pods without a Koordinator class (never LSR, LSE or BE):
//!
//! - CPU burst (policy `cpuBurstOnly` or `auto`): `cpu.cfs_burst_us` of each
//!   container = limit × `cpuBurstPercent`% × period, the pod gets the sum;
//!   other policies write 0. Only on kernels with CPU burst.
//! - CFS quota burst (policy `cfsQuotaBurstOnly` or `auto`): a throttled
//!   container's quota grows ×1.2 per round up to limit ×
//!   `cfsQuotaBurstPercent`%, shrinks ×0.8 when the share pool (CPUs not
//!   held by LSR/LSE pods) is above `sharePoolThresholdPercent`, holds
//!   between 90% of that and the threshold or when node usage is unknown,
//!   and returns to the limit when the policy is off. With
//!   `cfsQuotaBurstPeriodSeconds` ≥ 0 a per-container token bucket limits how
//!   long a container may stay above its limit. The pod quota moves by the
//!   same delta.
//!
//! The pod's `koordinator.sh/cpuBurst` annotation overrides the node config.
//! Token buckets are the strategy's only state; they start a quarter full
//! (upstream starts them at a random 0–50%).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use apis::configuration::defaults::default_cpu_burst_strategy;
use apis::configuration::merge::merged;
use apis::extension::{QoSClass, get_pod_cpu_burst_config};
use apis::slo::v1alpha1::{CPUBurstConfig, CPUBurstPolicy};

use super::framework::{Decision, QosContainer, QosPod, QosSnapshot, Strategy};
use crate::metriccache::{MetricKind, SeriesKey};
use crate::system::cgroup::{CgroupResource, CgroupValue};
use koord_common::units::{DEFAULT_CFS_PERIOD_US, MilliCpu};

pub const NAME: &str = "cpuburst";

const INCREASE_STEP: f64 = 1.2;
const DECREASE_STEP: f64 = 0.8;
const COOLING_RATIO: f64 = 0.9;
const LIMITER_CONSUME_PERCENT: i64 = 100;
const LIMITER_SAVE_PERCENT: i64 = 60;

/// How busy the share pool is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeBurstState {
    Overload,
    Cooling,
    Idle,
    Unknown,
}

/// What to do with a container's CFS quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CfsOperation {
    ScaleUp,
    ScaleDown,
    Remain,
    Reset,
}

/// Upstream's adjustment of a container's wish by the node state.
pub fn operation_for_node(state: NodeBurstState, wanted: CfsOperation) -> CfsOperation {
    match (state, wanted) {
        (NodeBurstState::Overload, CfsOperation::ScaleUp | CfsOperation::Remain) => {
            CfsOperation::ScaleDown
        }
        (NodeBurstState::Cooling | NodeBurstState::Unknown, CfsOperation::ScaleUp) => {
            CfsOperation::Remain
        }
        (_, op) => op,
    }
}

/// The share pool's state from its usage ratio and the threshold percent.
pub fn node_state(usage_ratio: f64, threshold_percent: i64) -> NodeBurstState {
    let threshold = threshold_percent as f64 / 100.0;
    if usage_ratio >= threshold {
        NodeBurstState::Overload
    } else if usage_ratio >= threshold * COOLING_RATIO {
        NodeBurstState::Cooling
    } else {
        NodeBurstState::Idle
    }
}

/// The next container quota: `current` moved by `op`, kept within
/// [base, base × cfsQuotaBurstPercent%].
pub fn next_quota(op: CfsOperation, current: i64, base: i64, burst_percent: Option<i64>) -> i64 {
    let ceiling = match burst_percent {
        Some(p) if p > 100 => (base as f64 * p as f64 / 100.0) as i64,
        _ => base,
    };
    let target = match op {
        CfsOperation::ScaleUp => (current as f64 * INCREASE_STEP) as i64,
        CfsOperation::ScaleDown => (current as f64 * DECREASE_STEP) as i64,
        CfsOperation::Remain => current,
        CfsOperation::Reset => base,
    };
    target.min(ceiling).max(base)
}

/// `cpu.cfs_burst_us` for a container limit: zero without a limit; `None`
/// when a negative `burst_percent` would make it negative (no valid burst).
pub fn static_burst(limit: MilliCpu, burst_percent: i64) -> Option<Duration> {
    if limit.0 <= 0 {
        return Some(Duration::ZERO);
    }
    let cores = limit.as_cores() * burst_percent as f64 / 100.0;
    let micros = (cores * DEFAULT_CFS_PERIOD_US as f64) as i64;
    u64::try_from(micros).ok().map(Duration::from_micros)
}

/// A burst as the v1 file value (microseconds).
fn burst_us(burst: Duration) -> i64 {
    i64::try_from(burst.as_micros()).unwrap_or(i64::MAX)
}

/// A token bucket: running above the limit spends tokens, running below
/// 60% saves them; burst is allowed while tokens remain.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstLimiter {
    capacity: i64,
    tokens: i64,
    last_update: SystemTime,
    expire: Duration,
}

impl BurstLimiter {
    pub fn new(period_seconds: i64, max_percent: i64, now: SystemTime) -> Self {
        let capacity = period_seconds * (max_percent - 100);
        Self {
            capacity,
            tokens: capacity / 4,
            last_update: now,
            expire: Duration::from_secs((2 * period_seconds).max(0) as u64),
        }
    }

    /// Accounts the time since the last call at `usage_percent` of the limit.
    pub fn allow(&mut self, now: SystemTime, usage_percent: i64) -> bool {
        let elapsed = now
            .duration_since(self.last_update)
            .unwrap_or_default()
            .as_secs() as i64;
        if usage_percent >= LIMITER_CONSUME_PERCENT {
            self.tokens -= (usage_percent - 100) * elapsed;
        } else if usage_percent < LIMITER_SAVE_PERCENT {
            self.tokens += (100 - usage_percent) * elapsed;
        }
        self.tokens = self.tokens.clamp(-self.capacity, self.capacity);
        self.last_update = now;
        self.tokens > 0
    }

    fn expired(&self, now: SystemTime) -> bool {
        now.duration_since(self.last_update).unwrap_or_default() > self.expire
    }
}

/// The strategy (its configuration is in the NodeSLO and pod annotations).
#[derive(Debug, Default)]
pub struct CpuBurst;

/// What cpuburst carries between rounds: the CFS quota burst token bucket
/// of each running container, by container ID.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CpuBurstState {
    pub limiters: HashMap<String, BurstLimiter>,
}

fn burst_enabled(policy: &Option<CPUBurstPolicy>) -> bool {
    matches!(
        policy,
        Some(CPUBurstPolicy::Auto | CPUBurstPolicy::CPUBurstOnly)
    )
}

fn quota_burst_enabled(policy: &Option<CPUBurstPolicy>) -> bool {
    matches!(
        policy,
        Some(CPUBurstPolicy::Auto | CPUBurstPolicy::CFSQuotaBurstOnly)
    )
}

/// Pods cpuburst manages: not LSR, LSE or BE (by label), not finished.
fn burstable(pod: &QosPod) -> bool {
    !matches!(pod.qos_label, QoSClass::LSR | QoSClass::LSE | QoSClass::BE)
        && pod.phase != "Succeeded"
        && pod.phase != "Failed"
}

impl CpuBurst {
    fn pod_config(
        snapshot: &QosSnapshot,
        pod: &QosPod,
        node: &CPUBurstConfig,
        decision: &mut Decision,
    ) -> CPUBurstConfig {
        let annotation = snapshot
            .kube_pod(pod)
            .and_then(|p| p.metadata.annotations.as_ref())
            .map(get_pod_cpu_burst_config);
        match annotation {
            Some(Ok(Some(pod_cfg))) => merged(node, &pod_cfg),
            Some(Err(err)) => {
                decision.info(format!(
                    "pod {}: ignoring malformed cpuBurst annotation: {err}",
                    pod.key()
                ));
                node.clone()
            }
            _ => node.clone(),
        }
    }

    /// Share pool usage over a short window: (node usage − LSR/LSE/BE usage)
    /// / (CPUs − LSR/LSE requests).
    fn share_pool_state(snapshot: &QosSnapshot, threshold_percent: i64) -> NodeBurstState {
        let window = (snapshot.config.cpu_burst_interval * 5).min(Duration::from_secs(10));
        let start = snapshot.now.checked_sub(window).unwrap_or(snapshot.now);
        let Some(cache) = snapshot.metric_cache.as_deref() else {
            return NodeBurstState::Unknown;
        };
        let Some(node_used) = cache
            .query(
                &SeriesKey::node(MetricKind::NodeCpuUsage),
                start,
                snapshot.now,
            )
            .avg()
        else {
            return NodeBurstState::Unknown;
        };
        let Some(topology) = snapshot.topology.as_deref() else {
            return NodeBurstState::Unknown;
        };
        let mut total = topology.num_cpus() as f64;
        let mut used = node_used;
        for pod in &snapshot.pods {
            let exclusive = matches!(pod.qos_label, QoSClass::LSR | QoSClass::LSE);
            if exclusive {
                total -= pod.cpu_request().as_cores();
            }
            if exclusive || pod.qos_label == QoSClass::BE {
                let key = SeriesKey::pod(MetricKind::PodCpuUsage, pod.uid.as_str());
                if let Some(pod_used) = cache.query(&key, start, snapshot.now).avg() {
                    used -= pod_used;
                }
            }
        }
        let ratio = if total > 0.0 { used / total } else { 1.0 };
        node_state(ratio, threshold_percent)
    }

    fn wanted_operation(
        limiters: &mut HashMap<String, BurstLimiter>,
        snapshot: &QosSnapshot,
        config: &CPUBurstConfig,
        container: &QosContainer,
        id: &str,
        limit_milli: i64,
    ) -> CfsOperation {
        let allowed =
            Self::allowed_by_limiter(limiters, snapshot, config, container, id, limit_milli);
        if !quota_burst_enabled(&config.policy) {
            return CfsOperation::Reset;
        }
        if !allowed {
            return CfsOperation::ScaleDown;
        }
        let throttled = snapshot.metric_cache.as_deref().and_then(|cache| {
            cache.latest(&SeriesKey::container(MetricKind::ContainerCpuThrottled, id))
        });
        match throttled {
            Some((time, ratio))
                if ratio > 0.0
                    && snapshot.now.duration_since(time).unwrap_or_default()
                        <= snapshot.max_metric_age() =>
            {
                CfsOperation::ScaleUp
            }
            _ => CfsOperation::Remain,
        }
    }

    fn allowed_by_limiter(
        limiters: &mut HashMap<String, BurstLimiter>,
        snapshot: &QosSnapshot,
        config: &CPUBurstConfig,
        container: &QosContainer,
        id: &str,
        limit_milli: i64,
    ) -> bool {
        let Some(period) = config.cfs_quota_burst_period_seconds.filter(|p| *p >= 0) else {
            return true;
        };
        let Some(percent) = config.cfs_quota_burst_percent.filter(|p| *p >= 100) else {
            return false;
        };
        let limit = limit_milli as f64 / 1000.0;
        let usage = container
            .cpu_usage
            .filter(|s| s.is_fresh(snapshot.now, snapshot.max_metric_age()))
            .map_or(limit, |s| s.value);
        let limiter = limiters
            .entry(id.to_string())
            .or_insert_with(|| BurstLimiter::new(period, percent, snapshot.now));
        if limiter.capacity != period * (percent - 100) {
            *limiter = BurstLimiter::new(period, percent, snapshot.now);
        }
        limiter.allow(snapshot.now, (usage / limit * 100.0) as i64)
    }

    fn running(snapshot: &QosSnapshot, pod: &QosPod, container: &QosContainer) -> bool {
        let Some(kube_pod) = snapshot.kube_pod(pod) else {
            return container.id.is_some();
        };
        kube_pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|statuses| statuses.iter().find(|s| s.name == container.name))
            .and_then(|s| s.state.as_ref())
            .is_some_and(|state| state.running.is_some())
    }
}

impl Strategy for CpuBurst {
    type State = CpuBurstState;

    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.cpu_burst_interval
    }

    fn decide(&self, snapshot: &QosSnapshot, state: &CpuBurstState) -> (Decision, CpuBurstState) {
        let mut next = state.clone();
        let decision = Self::burst(snapshot, &mut next);
        (decision, next)
    }
}

impl CpuBurst {
    /// The round's burst and quota writes; `next` is this round's state.
    fn burst(snapshot: &QosSnapshot, next: &mut CpuBurstState) -> Decision {
        let Some(node_strategy) = snapshot
            .node_slo
            .as_deref()
            .and_then(|spec| spec.cpu_burst_strategy.as_ref())
        else {
            return Decision::skipped("no cpuBurstStrategy in the NodeSLO");
        };
        let strategy = merged(&default_cpu_burst_strategy(), node_strategy);
        let threshold = strategy.share_pool_threshold_percent.unwrap_or(50);
        let node_state = Self::share_pool_state(snapshot, threshold);
        let kernel_burst = snapshot.capabilities.cpu_burst;
        let mut decision = Decision::default();
        if !kernel_burst {
            decision
                .info("unsupported: cpuBurst (no cpu.cfs_burst_us); only CFS quota burst applies");
        }
        decision.info(format!("share pool state {node_state:?}"));
        let mut live_ids = Vec::new();
        for pod in snapshot.pods.iter().filter(|p| burstable(p)) {
            let config = Self::pod_config(snapshot, pod, &strategy.cpu_burst_config, &mut decision);
            let burst_percent = config.cpu_burst_percent.unwrap_or(1000);
            let mut pod_burst = 0;
            let mut pod_quota_delta = 0;
            for container in &pod.containers {
                let (Some(id), Some(dir)) = (&container.id, &container.cgroup_dir) else {
                    continue;
                };
                live_ids.push(id.clone());
                let limit = container.cpu_limit.unwrap_or_default().0;
                if kernel_burst {
                    let burst = if burst_enabled(&config.policy) {
                        static_burst(MilliCpu(limit), burst_percent)
                    } else {
                        Some(Duration::ZERO)
                    };
                    match burst.map(burst_us) {
                        Some(burst) => {
                            pod_burst += burst;
                            decision.write(
                                dir,
                                CgroupResource::CpuBurst,
                                CgroupValue::Int(burst),
                                "CPUBurst",
                            );
                        }
                        None => decision.info(format!(
                            "{}/{}: cpuBurstPercent {burst_percent} is negative; cpu.cfs_burst_us not written",
                            pod.key(),
                            container.name
                        )),
                    }
                }
                if limit <= 0 || !Self::running(snapshot, pod, container) {
                    continue;
                }
                let base = limit * DEFAULT_CFS_PERIOD_US as i64 / 1000;
                let Some(CgroupValue::Int(current)) =
                    snapshot.current(dir, CgroupResource::CpuCfsQuota)
                else {
                    decision.info(format!(
                        "{}/{}: cannot read cpu.cfs_quota_us",
                        pod.key(),
                        container.name
                    ));
                    continue;
                };
                let wanted = Self::wanted_operation(
                    &mut next.limiters,
                    snapshot,
                    &config,
                    container,
                    id,
                    limit,
                );
                let op = operation_for_node(node_state, wanted);
                let target = next_quota(op, current, base, config.cfs_quota_burst_percent);
                if target != current {
                    decision.write(
                        dir,
                        CgroupResource::CpuCfsQuota,
                        CgroupValue::Int(target),
                        format!("CFSQuotaBurst {op:?}"),
                    );
                    pod_quota_delta += target - current;
                }
            }
            if kernel_burst {
                decision.write(
                    &pod.cgroup_dir,
                    CgroupResource::CpuBurst,
                    CgroupValue::Int(pod_burst),
                    "CPUBurst",
                );
            }
            if pod_quota_delta != 0
                && let Some(CgroupValue::Int(pod_quota)) =
                    snapshot.current(&pod.cgroup_dir, CgroupResource::CpuCfsQuota)
                && pod_quota > 0
            {
                decision.write(
                    &pod.cgroup_dir,
                    CgroupResource::CpuCfsQuota,
                    CgroupValue::Int(pod_quota + pod_quota_delta),
                    "CFSQuotaBurst",
                );
            }
        }
        next.limiters
            .retain(|id, limiter| live_ids.contains(id) && !limiter.expired(snapshot.now));
        decision
    }
}

#[cfg(test)]
mod tests {
    use koord_common::units::MilliCpu;
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    use apis::slo::v1alpha1::{CPUBurstStrategy, NodeSLOSpec};

    use super::*;
    use crate::metriccache::{MetricCache, MetricCacheConfig, Sample};
    use crate::qosmanager::framework::MapReader;
    use crate::qosmanager::framework::testing::{DecideFresh, assert_deterministic};
    use crate::system::cgroup::QosTier;
    use koord_common::units::{CpuInfo, CpuTopology};

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    const ID: &str = "containerd://c1";

    fn pod(qos: QoSClass) -> QosPod {
        let dir = std::path::PathBuf::from("kubepods/burstable/podp1");
        QosPod {
            uid: "p1".into(),
            namespace: "default".into(),
            name: "web".into(),
            qos,
            qos_label: qos,
            kube_qos: QosTier::Burstable,
            priority: apis::extension::PriorityClass::None,
            priority_value: 0,
            phase: "Running".into(),
            cgroup_dir: dir.clone(),
            containers: vec![QosContainer {
                name: "main".into(),
                id: Some(ID.into()),
                cgroup_dir: Some(dir.join("c1")),
                cpu_request: Some(MilliCpu(1000)),
                cpu_limit: Some(MilliCpu(2000)),
                memory_request: None,
                memory_limit: None,
                cpu_usage: None,
                memory_usage: None,
            }],
            allocated_cpus: None,
            cpu_usage: None,
            memory_usage: None,
            kube_index: None,
        }
    }

    /// 4-CPU node at `node_used` cores, the container throttled or not.
    fn snapshot(policy: CPUBurstPolicy, node_used: f64, throttled: f64) -> QosSnapshot {
        let mut snapshot = QosSnapshot::for_test(now());
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            cpu_burst_strategy: Some(CPUBurstStrategy {
                cpu_burst_config: CPUBurstConfig {
                    policy: Some(policy),
                    ..Default::default()
                },
                share_pool_threshold_percent: Some(50),
            }),
            ..Default::default()
        }));
        snapshot.topology = Some(Arc::new(CpuTopology {
            cpus: (0..4)
                .map(|cpu| CpuInfo {
                    cpu,
                    core: cpu,
                    socket: 0,
                    node: 0,
                })
                .collect(),
        }));
        let cache = MetricCache::new(MetricCacheConfig::default()).unwrap();
        cache.append(&[
            Sample::new(
                SeriesKey::node(MetricKind::NodeCpuUsage),
                now() - Duration::from_secs(1),
                node_used,
            ),
            Sample::new(
                SeriesKey::container(MetricKind::ContainerCpuThrottled, ID),
                now(),
                throttled,
            ),
        ]);
        snapshot.metric_cache = Some(Arc::new(cache));
        snapshot.pods = vec![pod(QoSClass::LS)];
        snapshot.reader = Arc::new(
            MapReader::default()
                .with(
                    "kubepods/burstable/podp1/c1",
                    CgroupResource::CpuCfsQuota,
                    CgroupValue::Int(200_000),
                )
                .with(
                    "kubepods/burstable/podp1",
                    CgroupResource::CpuCfsQuota,
                    CgroupValue::Int(200_000),
                ),
        );
        snapshot
    }

    fn c1() -> std::path::PathBuf {
        "kubepods/burstable/podp1/c1".into()
    }

    #[test]
    fn cpu_burst_is_limit_times_percent() {
        let decision = CpuBurst.decide_fresh(&snapshot(CPUBurstPolicy::CPUBurstOnly, 0.5, 0.0));
        // 2 cores x 1000% x 100000 µs.
        assert_eq!(
            decision.write_for(&c1(), CgroupResource::CpuBurst),
            Some(&CgroupValue::Int(2_000_000))
        );
        assert_eq!(
            decision.write_for(
                std::path::Path::new("kubepods/burstable/podp1"),
                CgroupResource::CpuBurst
            ),
            Some(&CgroupValue::Int(2_000_000))
        );
        // cfsQuota burst is off: the quota stays at its base.
        assert_eq!(decision.write_for(&c1(), CgroupResource::CpuCfsQuota), None);
    }

    #[test]
    fn no_kernel_burst_means_no_burst_file() {
        let mut snapshot = snapshot(CPUBurstPolicy::Auto, 0.5, 0.5);
        let mut caps = (*snapshot.capabilities).clone();
        caps.cpu_burst = false;
        snapshot.capabilities = Arc::new(caps);
        let decision = CpuBurst.decide_fresh(&snapshot);
        assert!(
            decision
                .writes
                .iter()
                .all(|w| w.resource != CgroupResource::CpuBurst)
        );
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("unsupported: cpuBurst"))
        );
        // The quota burst still works: idle node, throttled container -> x1.2.
        assert_eq!(
            decision.write_for(&c1(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Int(240_000))
        );
    }

    #[test]
    fn quota_scales_with_share_pool_state() {
        // Idle (0.5/4 = 12.5% < 45%): throttled container scales up, pod follows.
        let decision =
            CpuBurst.decide_fresh(&snapshot(CPUBurstPolicy::CFSQuotaBurstOnly, 0.5, 0.3));
        assert_eq!(
            decision.write_for(&c1(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Int(240_000))
        );
        assert_eq!(
            decision.write_for(
                std::path::Path::new("kubepods/burstable/podp1"),
                CgroupResource::CpuCfsQuota
            ),
            Some(&CgroupValue::Int(240_000))
        );
        // Cooling (1.9/4 = 47.5%): hold.
        let decision =
            CpuBurst.decide_fresh(&snapshot(CPUBurstPolicy::CFSQuotaBurstOnly, 1.9, 0.3));
        assert_eq!(decision.write_for(&c1(), CgroupResource::CpuCfsQuota), None);
        // Overload (3/4 = 75%) with a raised quota: scale down, never below base.
        let mut overloaded = snapshot(CPUBurstPolicy::CFSQuotaBurstOnly, 3.0, 0.3);
        overloaded.reader = Arc::new(
            MapReader::default()
                .with(c1(), CgroupResource::CpuCfsQuota, CgroupValue::Int(400_000))
                .with(
                    "kubepods/burstable/podp1",
                    CgroupResource::CpuCfsQuota,
                    CgroupValue::Int(400_000),
                ),
        );
        let decision = CpuBurst.decide_fresh(&overloaded);
        assert_eq!(
            decision.write_for(&c1(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Int(320_000))
        );
        // Policy off: reset to base.
        let mut off = overloaded.clone();
        off.node_slo = snapshot(CPUBurstPolicy::None, 0.5, 0.0).node_slo;
        let decision = CpuBurst.decide_fresh(&off);
        assert_eq!(
            decision.write_for(&c1(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Int(200_000))
        );
    }

    #[test]
    fn decide_is_deterministic_and_state_keeps_limiters_of_live_containers() {
        let mut round = snapshot(CPUBurstPolicy::CFSQuotaBurstOnly, 0.5, 0.3);
        // A burst period makes the token bucket count (upstream's default -1
        // does not limit, and keeps no limiter).
        let mut spec = round.node_slo.as_deref().unwrap().clone();
        let config = &mut spec.cpu_burst_strategy.as_mut().unwrap().cpu_burst_config;
        config.cfs_quota_burst_period_seconds = Some(60);
        config.cfs_quota_burst_percent = Some(300);
        round.node_slo = Some(Arc::new(spec));

        let (decision, state) = assert_deterministic(&CpuBurst, &round, &CpuBurstState::default());
        assert_eq!(
            decision.write_for(&c1(), CgroupResource::CpuCfsQuota),
            Some(&CgroupValue::Int(240_000))
        );
        assert!(state.limiters.contains_key(ID), "{state:?}");
        // From a state with a limiter, later: deterministic too.
        round.now += Duration::from_secs(5);
        let (_, next) = assert_deterministic(&CpuBurst, &round, &state);
        assert!(next.limiters.contains_key(ID), "{next:?}");
        // The container is gone: so is its limiter.
        round.pods.clear();
        let (_, after) = assert_deterministic(&CpuBurst, &round, &next);
        assert!(after.limiters.is_empty(), "{after:?}");
    }

    #[test]
    fn unknown_node_state_never_scales_up() {
        let mut snapshot = snapshot(CPUBurstPolicy::Auto, 0.5, 0.3);
        snapshot.metric_cache = None;
        let decision = CpuBurst.decide_fresh(&snapshot);
        assert_eq!(decision.write_for(&c1(), CgroupResource::CpuCfsQuota), None);
    }

    #[test]
    fn lsr_and_be_pods_are_left_alone_and_missing_strategy_skips() {
        let mut snapshot = snapshot(CPUBurstPolicy::Auto, 0.5, 0.3);
        snapshot.pods = vec![pod(QoSClass::LSR), pod(QoSClass::BE)];
        assert!(CpuBurst.decide_fresh(&snapshot).writes.is_empty());
        snapshot.node_slo = None;
        assert!(CpuBurst.decide_fresh(&snapshot).is_skipped());
    }

    #[test]
    fn static_burst_table() {
        // (container limit m, cpuBurstPercent) -> cpu.cfs_burst_us
        let cases = [
            ((2000, 1000), 2_000_000),
            ((500, 100), 50_000),
            ((1500, 150), 225_000),
            // No limit: no burst.
            ((0, 1000), 0),
            ((-5, 1000), 0),
        ];
        for ((limit, percent), burst) in cases {
            assert_eq!(
                static_burst(MilliCpu(limit), percent).map(burst_us),
                Some(burst),
                "limit {limit}m at {percent}%"
            );
        }
        // A negative percent has no valid burst (the kernel refuses one).
        assert_eq!(static_burst(MilliCpu(1000), -10), None);
        assert_eq!(static_burst(MilliCpu(0), -10), Some(Duration::ZERO));
    }

    #[test]
    fn quota_steps_stay_between_base_and_ceiling() {
        use CfsOperation::{Remain, Reset, ScaleDown, ScaleUp};
        // (operation, current, cfsQuotaBurstPercent) -> next quota; base 200000.
        let cases = [
            ((ScaleUp, 200_000, Some(300)), 240_000),
            // Capped at base x 300%.
            ((ScaleUp, 550_000, Some(300)), 600_000),
            // No burst percent (or <= 100%): the ceiling is the base.
            ((ScaleUp, 200_000, None), 200_000),
            ((ScaleUp, 200_000, Some(100)), 200_000),
            ((ScaleDown, 400_000, Some(300)), 320_000),
            // Never below the base.
            ((ScaleDown, 210_000, Some(300)), 200_000),
            ((Remain, 250_000, Some(300)), 250_000),
            ((Reset, 400_000, Some(300)), 200_000),
        ];
        for ((op, current, percent), expected) in cases {
            assert_eq!(
                next_quota(op, current, 200_000, percent),
                expected,
                "{op:?} from {current} at {percent:?}"
            );
        }
    }

    #[test]
    fn limiter_spends_above_the_limit_and_saves_when_idle() {
        // 10 s period at 300%: capacity 2000 tokens, starts with 500.
        let mut limiter = BurstLimiter::new(10, 300, now());
        // 3 s at 300% usage costs 600 tokens: over.
        assert!(!limiter.allow(now() + Duration::from_secs(3), 300));
        // 10 s idle (0%) saves 1000.
        assert!(limiter.allow(now() + Duration::from_secs(13), 0));
    }
}
