//! QoS strategy `memoryevict`: upstream's memory eviction plugin with its
//! three features, each behind its own koordlet feature gate (all off by
//! default, as upstream) and run in upstream's order within one round:
//!
//! 1. `BEMemoryEvict` — when node memory usage reaches
//!    `memoryEvictThresholdPercent` (default 70), evict pods labelled
//!    `koordinator.sh/qosClass: BE`, lowest priority first, then the largest
//!    memory user, until usage is projected under `memoryEvictLowerPercent`
//!    (default threshold − 2).
//! 2. `MemoryAllocatableEvict` — when the memory requested by pods with
//!    priority ≤ `allocatableEvictPriorityThreshold` (per class: batch pods'
//!    `batch-memory`, mid pods' `mid-memory`) exceeds
//!    `memoryAllocatableEvictThresholdPercent` of the node's allocatable of
//!    that resource, evict such pods (largest request first) down to
//!    `memoryAllocatableEvictLowerPercent`.
//! 3. `MemoryEvict` — the node usage rule of 1, for any pod with priority ≤
//!    `evictEnabledPriorityThreshold` labelled
//!    `koordinator.sh/eviction-enabled: "true"`, ordered by the
//!    `koordinator.sh/eviction-priority` annotation, priority, the
//!    `koordinator.sh/priority` label, then usage.
//!
//! A victim counts for every feature's target (see [`super::evicttask`]);
//! the pod's `koordinator.sh/eviction-policy` annotation can exclude
//! features. `--memory-evict-cool-time-seconds` separates two evictions.

use std::collections::BTreeMap;
use std::time::Duration;

use apis::configuration::defaults::default_resource_threshold_strategy;
use apis::configuration::merge::merged;
use apis::extension::PRIORITY_MID_VALUE_MAX;
use apis::slo::v1alpha1::ResourceThresholdStrategy;
use koord_common::units::Bytes;

use super::evictreport::{ReleaseTarget, ResourceList};
use super::evicttask::{
    self, EvictTask, PodRelease, RequestKind, be_candidates, be_memory_order, memory_request_desc,
    memory_used_desc, priority_candidates,
};
use super::framework::{Decision, FeatureGate, QosSnapshot, Strategy};
use crate::evictor::bookkeeping::EvictionMemory;

pub const NAME: &str = "memoryevict";
/// Upstream feature names: the eviction triggers and the eviction-policy keys.
pub const FEATURE: &str = "BEMemoryEvict";
pub const FEATURE_MEMORY_EVICT: &str = "MemoryEvict";
pub const FEATURE_ALLOCATABLE: &str = "MemoryAllocatableEvict";
/// The features in the order upstream runs them.
pub const FEATURES: [&str; 3] = [FEATURE, FEATURE_ALLOCATABLE, FEATURE_MEMORY_EVICT];
/// Lower bound = threshold − this when `memoryEvictLowerPercent` is unset.
pub const RELEASE_BUFFER_PERCENT: i64 = 2;

/// The effective threshold strategy: upstream defaults under the NodeSLO's.
pub fn effective_thresholds(snapshot: &QosSnapshot) -> ResourceThresholdStrategy {
    let configured = snapshot
        .node_slo
        .as_ref()
        .and_then(|spec| spec.resource_used_threshold_with_be.clone());
    merged(&Some(default_resource_threshold_strategy()), &configured).unwrap_or_default()
}

/// Upstream `IsFeatureDisabled` for the eviction features: `Err` without a
/// NodeSLO or without `resourceUsedThresholdWithBE.enable`.
pub fn disabled_by_node_slo(snapshot: &QosSnapshot) -> Result<bool, String> {
    if snapshot.node_slo.is_none() {
        return Err("no NodeSLO yet".to_string());
    }
    // Upstream's informer merges the defaults (enable: false) into the
    // NodeSLO, so an unset `enable` means off.
    Ok(effective_thresholds(snapshot).enable != Some(true))
}

/// Upper and lower memory percentages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryThresholds {
    pub threshold_percent: i64,
    pub lower_percent: i64,
}

/// Upstream's validation of the usage thresholds: threshold ≥ 0, lower
/// (default threshold − 2) < threshold.
pub fn memory_thresholds(config: &ResourceThresholdStrategy) -> Result<MemoryThresholds, String> {
    let threshold_percent = config
        .memory_evict_threshold_percent
        .ok_or("threshold percent is nil")?;
    if threshold_percent < 0 {
        return Err(format!(
            "threshold percent({threshold_percent}) should equal or greater than 0"
        ));
    }
    let lower_percent = config
        .memory_evict_lower_percent
        .unwrap_or(threshold_percent - RELEASE_BUFFER_PERCENT);
    if lower_percent >= threshold_percent {
        return Err(format!(
            "lower percent({lower_percent}) should less than threshold percent({threshold_percent})"
        ));
    }
    Ok(MemoryThresholds {
        threshold_percent,
        lower_percent,
    })
}

/// Settings of `MemoryAllocatableEvict` / `CPUAllocatableEvict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocatableThresholds {
    pub threshold_percent: i64,
    pub lower_percent: i64,
    pub priority_threshold: i32,
}

/// Upstream's validation of the allocatable settings (both resources share it).
pub fn allocatable_thresholds(
    threshold: Option<i64>,
    lower: Option<i64>,
    priority: Option<i32>,
    threshold_name: &str,
    lower_name: &str,
) -> Result<AllocatableThresholds, String> {
    let threshold_percent = threshold.ok_or_else(|| format!("{threshold_name} not config"))?;
    if threshold_percent < 0 {
        return Err(format!(
            "threshold percent({threshold_percent}) should greater than 0"
        ));
    }
    let lower_percent = lower.ok_or_else(|| format!("{lower_name} not config"))?;
    if lower_percent >= threshold_percent {
        return Err(format!(
            "lower percent({lower_percent}) should less than threshold percent({threshold_percent})"
        ));
    }
    let priority_threshold = priority.ok_or("AllocatableEvictPriorityThreshold not config")?;
    if priority_threshold > PRIORITY_MID_VALUE_MAX {
        return Err(format!(
            "priorityThresholdPercent({priority_threshold}) should less than {PRIORITY_MID_VALUE_MAX}, koor-prod pods should not be killed"
        ));
    }
    Ok(AllocatableThresholds {
        threshold_percent,
        lower_percent,
        priority_threshold,
    })
}

/// Upstream `generateConfigCheck`: the settings `feature` needs.
pub fn check_config(feature: &str, config: &ResourceThresholdStrategy) -> Result<(), String> {
    match feature {
        FEATURE => memory_thresholds(config).map(|_| ()),
        FEATURE_MEMORY_EVICT => {
            memory_thresholds(config)?;
            config
                .evict_enabled_priority_threshold
                .map(|_| ())
                .ok_or_else(|| "EvictEnabledPriorityThreshold not config".to_string())
        }
        FEATURE_ALLOCATABLE => allocatable_thresholds(
            config.memory_allocatable_evict_threshold_percent,
            config.memory_allocatable_evict_lower_percent,
            config.allocatable_evict_priority_threshold,
            "MemoryAllocatableEvictThresholdPercent",
            "MemoryAllocatableEvictLowerPercent",
        )
        .map(|_| ()),
        other => Err(format!("unknown feature: {other}")),
    }
}

/// The node usage rule: bytes to release when usage (whole percent of
/// `capacity`, integer arithmetic as upstream) reaches the threshold;
/// `Err` says why nothing is released.
pub fn release_by_usage(
    capacity: Bytes,
    used: Bytes,
    thresholds: MemoryThresholds,
) -> Result<Bytes, String> {
    // Signed as upstream's int64 arithmetic (and its saturation) is.
    let (capacity, used) = (capacity.as_i64(), used.as_i64());
    if capacity <= 0 {
        return Err(format!("node memory capacity {capacity} is not valid"));
    }
    let usage_percent = used.saturating_mul(100) / capacity;
    if usage_percent < thresholds.threshold_percent {
        return Err(format!(
            "node memory usage {usage_percent}% is below the threshold {}%",
            thresholds.threshold_percent
        ));
    }
    // usage ≥ threshold > lower, so the amount is positive.
    Ok(Bytes::from_i64_or_zero(
        capacity.saturating_mul(usage_percent - thresholds.lower_percent) / 100,
    ))
}

/// The `memoryevict` strategy.
#[derive(Debug)]
pub struct MemoryEvict {
    gates: [FeatureGate; 3],
    dry_run: Vec<&'static str>,
}

impl Default for MemoryEvict {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryEvict {
    /// `BEMemoryEvict` on, the others off; see [`MemoryEvict::with_feature_gates`].
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

    /// The enabled features, in upstream's order.
    pub fn enabled_features(&self) -> Vec<&'static str> {
        self.gates
            .iter()
            .filter(|g| g.enabled)
            .map(|g| g.name)
            .collect()
    }

    fn build_task(
        &self,
        feature: &'static str,
        snapshot: &QosSnapshot,
        config: &ResourceThresholdStrategy,
    ) -> Result<EvictTask, String> {
        check_config(feature, config).map_err(|err| format!("invalid config: {err}"))?;
        match feature {
            FEATURE | FEATURE_MEMORY_EVICT => {
                let thresholds = memory_thresholds(config)?;
                // The collector's usage is a u64 byte count (MemTotal -
                // MemAvailable, saturating), never negative.
                let used = Bytes(
                    snapshot
                        .fresh("node memory usage", snapshot.node_usage.memory)?
                        .value as u64,
                );
                let release =
                    release_by_usage(snapshot.node.memory_capacity, used, thresholds)?.as_i64();
                let candidates = if feature == FEATURE {
                    be_candidates(snapshot, feature, RequestKind::Memory, be_memory_order)
                } else {
                    priority_candidates(
                        snapshot,
                        feature,
                        config.evict_enabled_priority_threshold.unwrap_or(i32::MIN),
                        RequestKind::Memory,
                        memory_used_desc,
                    )
                };
                Ok(EvictTask {
                    feature,
                    target: ReleaseTarget::PodUsed,
                    to_release: ResourceList::from([("memory".to_string(), release)]),
                    candidates,
                    release: PodRelease::MemoryUsed,
                })
            }
            FEATURE_ALLOCATABLE => {
                let settings = allocatable_thresholds(
                    config.memory_allocatable_evict_threshold_percent,
                    config.memory_allocatable_evict_lower_percent,
                    config.allocatable_evict_priority_threshold,
                    "MemoryAllocatableEvictThresholdPercent",
                    "MemoryAllocatableEvictLowerPercent",
                )?;
                let (release, classes) = evicttask::allocatable_release(
                    snapshot,
                    RequestKind::Memory,
                    settings.priority_threshold,
                    settings.threshold_percent,
                    settings.lower_percent,
                );
                if release.is_empty() {
                    return Err(format!(
                        "memory requested by pods with priority <= {} is within {}% of allocatable",
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
                        RequestKind::Memory,
                        memory_request_desc,
                    ),
                    release: PodRelease::MemoryRequestOf(classes),
                })
            }
            other => Err(format!("unknown feature: {other}")),
        }
    }
}

impl Strategy for MemoryEvict {
    type State = EvictionMemory;

    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.memory_evict_interval
    }

    /// The state is the eviction memory: cool time and pending victims.
    fn decide(&self, snapshot: &QosSnapshot, state: &EvictionMemory) -> (Decision, EvictionMemory) {
        let mut next = state.clone();
        let decision = self.evict(snapshot, &mut next);
        (decision, next)
    }
}

impl MemoryEvict {
    /// The round's evictions; `memory` is this round's eviction memory.
    fn evict(&self, snapshot: &QosSnapshot, memory: &mut EvictionMemory) -> Decision {
        let features = self.enabled_features();
        if features.is_empty() {
            return Decision::skipped(format!(
                "feature gates {} are off (enable one with --feature-gates=<name>=true)",
                FEATURES.join(", ")
            ));
        }
        if let Some(left) = memory.cooling(snapshot.now, snapshot.config.memory_evict_cool_time) {
            return Decision::skipped(format!(
                "cooling down after the last eviction ({}s left)",
                left.as_secs()
            ));
        }
        match disabled_by_node_slo(snapshot) {
            Err(reason) => return Decision::skipped(reason),
            Ok(true) => {
                return Decision::skipped("resourceUsedThresholdWithBE.enable is not true");
            }
            Ok(false) => {}
        }
        let capacity = snapshot.node.memory_capacity.as_i64();
        if capacity <= 0 {
            return Decision::skipped(format!("node memory capacity {capacity} is not valid"));
        }
        let config = effective_thresholds(snapshot);
        let mut tasks = Vec::new();
        let mut notes = Vec::new();
        for feature in features {
            match self.build_task(feature, snapshot, &config) {
                Ok(task) => tasks.push(task),
                Err(reason) => notes.push(format!("{feature}: {reason}")),
            }
        }
        let used = snapshot.node_usage.memory.map_or(0, |s| s.value as i64);
        let detail = |task: &EvictTask| match task.target {
            ReleaseTarget::PodUsed => format!(
                "node memory usage {}% of {capacity} bytes, release {} bytes",
                used.saturating_mul(100) / capacity,
                task.to_release.get("memory").copied().unwrap_or(0)
            ),
            ReleaseTarget::PodResourceRequest => {
                format!("requests over allocatable, release {:?}", task.to_release)
            }
        };
        let mut dry_run = self.dry_run.clone();
        dry_run.extend(snapshot.config.evict_dry_run_features.iter().copied());
        evicttask::decide_round(snapshot, NAME, tasks, &dry_run, memory, notes, &detail)
    }
}

/// Hand-built pods and snapshots for the eviction strategies' tests.
#[cfg(test)]
pub(crate) mod test_pods {
    use koord_common::units::MilliCpu;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use apis::extension::{PriorityClass, QoSClass};
    use apis::slo::v1alpha1::{NodeSLOSpec, ResourceThresholdStrategy};
    use k8s_openapi::api::core::v1::Pod;

    use crate::qosmanager::framework::{MetricSample, QosContainer, QosPod, QosSnapshot};
    use crate::system::cgroup::QosTier;

    pub fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    /// A running pod; `qos_label` BE puts it in the besteffort tier.
    pub fn pod(uid: &str, qos_label: QoSClass, priority: i32) -> QosPod {
        let kube_qos = if qos_label == QoSClass::BE {
            QosTier::BestEffort
        } else {
            QosTier::Burstable
        };
        QosPod {
            uid: uid.to_string(),
            namespace: "default".to_string(),
            name: format!("pod-{uid}"),
            qos: qos_label,
            qos_label,
            kube_qos,
            priority: PriorityClass::from_priority_value(priority),
            priority_value: priority,
            phase: "Running".to_string(),
            cgroup_dir: PathBuf::from(format!("kubepods/besteffort/pod{uid}")),
            containers: Vec::new(),
            allocated_cpus: None,
            cpu_usage: None,
            memory_usage: None,
            kube_index: None,
        }
    }

    /// Adds a container requesting (and limited to) `request` CPU.
    pub fn with_cpu(mut pod: QosPod, request: MilliCpu, used_cores: f64, at: SystemTime) -> QosPod {
        pod.containers.push(QosContainer {
            name: "main".to_string(),
            id: None,
            cgroup_dir: None,
            cpu_request: Some(request),
            cpu_limit: Some(request),
            memory_request: None,
            memory_limit: None,
            cpu_usage: None,
            memory_usage: None,
        });
        pod.cpu_usage = Some(MetricSample::new(used_cores, at));
        pod
    }

    /// A running pod object named and UID'd `name` in namespace `default`,
    /// with the `koordinator.sh/qosClass` label, `spec.priority` and one
    /// started container `main` (`containerd://<name>-main`).
    pub fn kube_pod(name: &str, qos: QoSClass, priority: i32) -> Pod {
        use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.to_string());
        pod.metadata.namespace = Some("default".to_string());
        pod.metadata.uid = Some(name.to_string());
        pod.metadata.labels = Some(
            [(
                "koordinator.sh/qosClass".to_string(),
                qos.as_str().to_string(),
            )]
            .into(),
        );
        pod.spec = Some(PodSpec {
            priority: Some(priority),
            containers: vec![Container {
                name: "main".to_string(),
                ..Container::default()
            }],
            ..PodSpec::default()
        });
        pod.status = Some(PodStatus {
            phase: Some("Running".to_string()),
            qos_class: Some(
                if qos == QoSClass::BE {
                    "BestEffort"
                } else {
                    "Burstable"
                }
                .to_string(),
            ),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".to_string(),
                container_id: Some(format!("containerd://{name}-main")),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        });
        pod
    }

    /// Sets the container's requests (`"kubernetes.io/batch-memory"`, `"20Gi"`).
    pub fn requesting(mut pod: Pod, requests: &[(&str, &str)]) -> Pod {
        use k8s_openapi::api::core::v1::ResourceRequirements;
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        if let Some(container) = pod.spec.as_mut().and_then(|s| s.containers.first_mut()) {
            container.resources = Some(ResourceRequirements {
                requests: Some(
                    requests
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..ResourceRequirements::default()
            });
        }
        pod
    }

    pub fn labelled(mut pod: Pod, key: &str, value: &str) -> Pod {
        pod.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value.to_string());
        pod
    }

    pub fn annotated(mut pod: Pod, key: &str, value: &str) -> Pod {
        pod.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value.to_string());
        pod
    }

    /// Puts `pods` into `snapshot` the way the service does (through
    /// `qos_pods` and a metric cache holding the given usage samples at
    /// `snapshot.now`: memory in bytes, CPU in cores).
    pub fn with_kube_pods(
        snapshot: &mut QosSnapshot,
        pods: Vec<Pod>,
        memory: &[(&str, i64)],
        cpu: &[(&str, f64)],
    ) {
        use crate::metriccache::{MetricCache, MetricCacheConfig, MetricKind, Sample, SeriesKey};
        let cache = MetricCache::new(MetricCacheConfig::default()).unwrap();
        let mut samples = Vec::new();
        for (uid, bytes) in memory {
            samples.push(Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, *uid),
                snapshot.now,
                *bytes as f64,
            ));
        }
        for (uid, cores) in cpu {
            samples.push(Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, *uid),
                snapshot.now,
                *cores,
            ));
        }
        cache.append(&samples);
        snapshot.pods = crate::qosmanager::service::qos_pods(&pods, &snapshot.layout, &cache);
        snapshot.kube_pods = Arc::new(pods);
    }

    pub fn snapshot_with(threshold: ResourceThresholdStrategy, now: SystemTime) -> QosSnapshot {
        let mut snapshot = QosSnapshot::for_test(now);
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            resource_used_threshold_with_be: Some(threshold),
            ..NodeSLOSpec::default()
        }));
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use koord_common::units::MilliCpu;
    use std::collections::BTreeMap;

    use apis::extension::{BATCH_MEMORY, MID_MEMORY, PriorityClass, QoSClass};

    use super::test_pods::*;
    use super::*;
    use crate::qosmanager::framework::MetricSample;
    use crate::qosmanager::framework::testing::{DecideFresh, Rounds, assert_deterministic};

    const GIB: i64 = 1 << 30;
    const G: i64 = 1_000_000_000;

    /// (node allocatable, pods, (threshold %, lower %, priority threshold),
    /// release, classes that release).
    type AllocatableCase = (
        Vec<(&'static str, i64)>,
        Vec<k8s_openapi::api::core::v1::Pod>,
        (i64, i64, i32),
        Vec<(&'static str, i64)>,
        Vec<PriorityClass>,
    );

    fn enabled(threshold: i64, lower: Option<i64>) -> ResourceThresholdStrategy {
        ResourceThresholdStrategy {
            enable: Some(true),
            memory_evict_threshold_percent: Some(threshold),
            memory_evict_lower_percent: lower,
            ..ResourceThresholdStrategy::default()
        }
    }

    fn evicted(decision: &Decision) -> Vec<&str> {
        decision.evictions.iter().map(|e| e.uid.as_str()).collect()
    }

    /// Upstream `Test_generateConfigCheck` (the nil-strategy rows do not
    /// apply: the defaults are always merged in).
    #[test]
    fn config_check_table() {
        let base = ResourceThresholdStrategy::default;
        let cases: Vec<(&str, ResourceThresholdStrategy, Result<(), &str>)> = vec![
            (FEATURE, base(), Err("threshold percent is nil")),
            (
                FEATURE,
                ResourceThresholdStrategy {
                    memory_evict_threshold_percent: Some(-1),
                    ..base()
                },
                Err("threshold percent(-1) should equal or greater than 0"),
            ),
            (FEATURE, enabled(80, None), Ok(())),
            (
                FEATURE,
                enabled(80, Some(90)),
                Err("lower percent(90) should less than threshold percent(80)"),
            ),
            (FEATURE, enabled(80, Some(70)), Ok(())),
            (
                FEATURE_MEMORY_EVICT,
                base(),
                Err("threshold percent is nil"),
            ),
            (
                FEATURE_MEMORY_EVICT,
                enabled(80, Some(70)),
                Err("EvictEnabledPriorityThreshold not config"),
            ),
            (
                FEATURE_MEMORY_EVICT,
                ResourceThresholdStrategy {
                    evict_enabled_priority_threshold: Some(5999),
                    ..enabled(80, Some(80))
                },
                Err("lower percent(80) should less than threshold percent(80)"),
            ),
            (
                FEATURE_MEMORY_EVICT,
                ResourceThresholdStrategy {
                    evict_enabled_priority_threshold: Some(5999),
                    ..enabled(85, Some(75))
                },
                Ok(()),
            ),
            (
                FEATURE_ALLOCATABLE,
                base(),
                Err("MemoryAllocatableEvictThresholdPercent not config"),
            ),
            (
                FEATURE_ALLOCATABLE,
                ResourceThresholdStrategy {
                    memory_allocatable_evict_threshold_percent: Some(-1),
                    ..base()
                },
                Err("threshold percent(-1) should greater than 0"),
            ),
            (
                FEATURE_ALLOCATABLE,
                ResourceThresholdStrategy {
                    memory_allocatable_evict_threshold_percent: Some(80),
                    memory_allocatable_evict_lower_percent: Some(70),
                    ..base()
                },
                Err("AllocatableEvictPriorityThreshold not config"),
            ),
            (
                FEATURE_ALLOCATABLE,
                ResourceThresholdStrategy {
                    memory_allocatable_evict_threshold_percent: Some(80),
                    memory_allocatable_evict_lower_percent: Some(70),
                    allocatable_evict_priority_threshold: Some(8000),
                    ..base()
                },
                Err(
                    "priorityThresholdPercent(8000) should less than 7999, koor-prod pods should not be killed",
                ),
            ),
            (
                FEATURE_ALLOCATABLE,
                ResourceThresholdStrategy {
                    memory_allocatable_evict_threshold_percent: Some(80),
                    memory_allocatable_evict_lower_percent: Some(70),
                    allocatable_evict_priority_threshold: Some(5999),
                    ..base()
                },
                Ok(()),
            ),
            ("Unknown", base(), Err("unknown feature: Unknown")),
        ];
        for (feature, config, want) in cases {
            let got = check_config(feature, &config);
            assert_eq!(
                got.as_ref().map_err(String::as_str),
                want.as_ref().map_err(|e| *e),
                "{feature} {config:?}"
            );
        }
    }

    /// Upstream `Test_calculateReleaseByUsedThresholdPercent` (120 G node, 115 G used).
    #[test]
    fn release_by_usage_table() {
        let release = |threshold, lower, used| {
            let thresholds = memory_thresholds(&enabled(threshold, lower)).unwrap();
            release_by_usage(Bytes(120 * G as u64), Bytes(used as u64), thresholds)
        };
        assert_eq!(release(80, None, 115 * G), Ok(Bytes(20_400_000_000)));
        assert_eq!(release(82, Some(80), 115 * G), Ok(Bytes(18_000_000_000)));
        assert!(release(82, Some(80), 80 * G).unwrap_err().contains("below"));
        assert!(
            release_by_usage(
                Bytes(0),
                Bytes(1),
                memory_thresholds(&enabled(80, None)).unwrap()
            )
            .is_err()
        );
    }

    /// Upstream `Test_memoryEvict`'s pods: LSR/LS/none and three BE pods
    /// (priorities 100, 100, 120) on a 120 G node using 115 G.
    fn upstream_node(config: ResourceThresholdStrategy) -> QosSnapshot {
        let mut snapshot = snapshot_with(config, t0());
        snapshot.node.memory_capacity = Bytes(120 * G as u64);
        snapshot.node.cpu_capacity = MilliCpu(80_000);
        snapshot.node_usage.memory = Some(MetricSample::new((115 * G) as f64, t0()));
        with_kube_pods(
            &mut snapshot,
            vec![
                kube_pod("test_lsr_pod", QoSClass::LSR, 1000),
                kube_pod("test_ls_pod", QoSClass::LS, 500),
                kube_pod("test_noqos_pod", QoSClass::None, 100),
                kube_pod("test_be_pod_priority100_1", QoSClass::BE, 100),
                kube_pod("test_be_pod_priority100_2", QoSClass::BE, 100),
                kube_pod("test_be_pod_priority120", QoSClass::BE, 120),
            ],
            &[
                ("test_lsr_pod", 40 * G),
                ("test_ls_pod", 30 * G),
                ("test_noqos_pod", 10 * G),
                ("test_be_pod_priority100_1", 5 * G),
                ("test_be_pod_priority100_2", 20 * G),
                ("test_be_pod_priority120", 10 * G),
            ],
            &[],
        );
        snapshot
    }

    #[test]
    fn upstream_be_memory_evict_table() {
        let cases: Vec<(i64, Option<i64>, i64, Vec<&str>)> = vec![
            // (threshold, lower, node used G, evicted)
            (80, None, 80, vec![]),
            (82, None, 115, vec!["test_be_pod_priority100_2"]),
            (
                80,
                None,
                115,
                vec!["test_be_pod_priority100_2", "test_be_pod_priority100_1"],
            ),
            (
                50,
                None,
                115,
                vec![
                    "test_be_pod_priority100_2",
                    "test_be_pod_priority100_1",
                    "test_be_pod_priority120",
                ],
            ),
            (82, Some(80), 115, vec!["test_be_pod_priority100_2"]),
            (
                82,
                Some(78),
                115,
                vec!["test_be_pod_priority100_2", "test_be_pod_priority100_1"],
            ),
            (
                82,
                Some(74),
                115,
                vec![
                    "test_be_pod_priority100_2",
                    "test_be_pod_priority100_1",
                    "test_be_pod_priority120",
                ],
            ),
        ];
        for (threshold, lower, used, want) in cases {
            let mut snapshot = upstream_node(enabled(threshold, lower));
            snapshot.node_usage.memory = Some(MetricSample::new((used * G) as f64, t0()));
            let decision = MemoryEvict::new().decide_fresh(&snapshot);
            assert_eq!(
                evicted(&decision),
                want,
                "{threshold}/{lower:?}/{used}: {decision:?}"
            );
            assert!(decision.evictions.iter().all(|e| e.reason == FEATURE));
        }
    }

    #[test]
    fn invalid_or_missing_config_and_inputs_skip_with_a_reason() {
        let decision = MemoryEvict::new().decide_fresh(&QosSnapshot::for_test(t0()));
        assert_eq!(decision.skip_reason(), Some("no NodeSLO yet"));
        let decision = MemoryEvict::new().decide_fresh(&upstream_node(enabled(-1, None)));
        assert!(decision.evictions.is_empty());
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("threshold percent(-1)"),
            "{decision:?}"
        );
        let mut off = enabled(80, None);
        off.enable = Some(false);
        let decision = MemoryEvict::new().decide_fresh(&upstream_node(off));
        assert!(decision.skip_reason().unwrap().contains("enable"));
        let mut no_metric = upstream_node(enabled(80, None));
        no_metric.node_usage.memory = None;
        let decision = MemoryEvict::new().decide_fresh(&no_metric);
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("no node memory usage sample")
        );
        let mut stale = upstream_node(enabled(80, None));
        stale.node_usage.memory = Some(MetricSample::new(
            (115 * G) as f64,
            t0() - Duration::from_secs(600),
        ));
        assert!(
            MemoryEvict::new()
                .decide_fresh(&stale)
                .skip_reason()
                .unwrap()
                .contains("stale")
        );
        let mut no_capacity = upstream_node(enabled(80, None));
        no_capacity.node.memory_capacity = Bytes(0);
        assert!(
            MemoryEvict::new()
                .decide_fresh(&no_capacity)
                .skip_reason()
                .unwrap()
                .contains("capacity")
        );
        let gates_off = MemoryEvict::new().with_feature_gates(&BTreeMap::new());
        assert!(
            gates_off
                .decide_fresh(&upstream_node(enabled(80, None)))
                .skip_reason()
                .unwrap()
                .contains("BEMemoryEvict")
        );
    }

    fn batch_pod(name: &str, memory: &str, evict_enabled: bool) -> k8s_openapi::api::core::v1::Pod {
        let pod = requesting(
            kube_pod(name, QoSClass::BE, 5000),
            &[("memory", memory), (BATCH_MEMORY, memory)],
        );
        if evict_enabled {
            labelled(pod, "koordinator.sh/eviction-enabled", "true")
        } else {
            pod
        }
    }

    /// Upstream "only feature MemoryAllocatableEvict": no batch-memory on the
    /// node, so all 50 Gi requested is to be released.
    #[test]
    fn allocatable_evict_without_batch_allocatable_evicts_every_opted_in_pod() {
        let config = ResourceThresholdStrategy {
            enable: Some(true),
            memory_allocatable_evict_threshold_percent: Some(80),
            memory_allocatable_evict_lower_percent: Some(70),
            allocatable_evict_priority_threshold: Some(5000),
            ..ResourceThresholdStrategy::default()
        };
        let mut snapshot = upstream_node(config);
        with_kube_pods(
            &mut snapshot,
            vec![
                batch_pod("batch-pod-1", "20Gi", true),
                batch_pod("batch-pod-2", "30Gi", true),
            ],
            &[("batch-pod-1", 10 * G), ("batch-pod-2", 20 * G)],
            &[],
        );
        let decision = MemoryEvict::with_features(&[FEATURE_ALLOCATABLE]).decide_fresh(&snapshot);
        assert_eq!(
            evicted(&decision),
            ["batch-pod-2", "batch-pod-1"],
            "{decision:?}"
        );
        assert!(
            decision
                .evictions
                .iter()
                .all(|e| e.reason == FEATURE_ALLOCATABLE)
        );
    }

    /// Upstream's last `Test_memoryEvict` row: all three features; BE
    /// eviction first, then MemoryAllocatableEvict needs 10 Gi of
    /// batch-memory more and takes the largest request; MemoryEvict finds
    /// nobody under its priority threshold 3000.
    #[test]
    fn three_features_run_in_upstream_order_without_duplicate_victims() {
        let config = ResourceThresholdStrategy {
            enable: Some(true),
            memory_evict_threshold_percent: Some(82),
            memory_evict_lower_percent: Some(74),
            evict_enabled_priority_threshold: Some(3000),
            memory_allocatable_evict_threshold_percent: Some(45),
            memory_allocatable_evict_lower_percent: Some(40),
            allocatable_evict_priority_threshold: Some(5000),
            ..ResourceThresholdStrategy::default()
        };
        let mut snapshot = upstream_node(config);
        snapshot
            .node
            .allocatable
            .insert(BATCH_MEMORY.to_string(), 100 * GIB);
        let mut pods = snapshot.kube_pods.as_ref().clone();
        pods.push(batch_pod("batch-pod-1", "20Gi", true));
        pods.push(batch_pod("batch-pod-2", "30Gi", true));
        with_kube_pods(
            &mut snapshot,
            pods,
            &[
                ("test_lsr_pod", 40 * G),
                ("test_ls_pod", 30 * G),
                ("test_noqos_pod", 10 * G),
                ("test_be_pod_priority100_1", 5 * G),
                ("test_be_pod_priority100_2", 20 * G),
                ("test_be_pod_priority120", 10 * G),
                ("batch-pod-1", 10 * G),
                ("batch-pod-2", 20 * G),
            ],
            &[],
        );
        let mut strategy = Rounds::new(MemoryEvict::with_features(&FEATURES));
        let decision = strategy.decide(&snapshot);
        assert_eq!(
            evicted(&decision),
            [
                "test_be_pod_priority100_2",
                "test_be_pod_priority100_1",
                "test_be_pod_priority120",
                "batch-pod-2"
            ],
            "{decision:?}"
        );
        let report = decision.eviction_report.as_ref().unwrap();
        let features: Vec<&str> = report.tasks.iter().map(|t| t.feature).collect();
        assert_eq!(
            features,
            [FEATURE, FEATURE_ALLOCATABLE, FEATURE_MEMORY_EVICT]
        );
        assert!(report.tasks[2].victims.is_empty() && report.tasks[2].candidates == 0);
        // (50/100 − 0.40) × 100 Gi in floating point, as upstream computes it.
        assert_eq!(report.tasks[1].to_release[BATCH_MEMORY], 10 * GIB - 1);
        assert!(
            report.tasks.iter().all(|t| t.shortfall.is_empty()),
            "{report:?}"
        );
        // The next round is within the cool time.
        assert!(
            strategy
                .decide(&snapshot)
                .skip_reason()
                .unwrap()
                .contains("cooling")
        );
    }

    /// Upstream `Test_calculateReleaseByAllocatableThresholdPercent`.
    #[test]
    fn allocatable_release_table() {
        let node = |allocatable: &Vec<(&str, i64)>| {
            let mut snapshot = snapshot_with(ResourceThresholdStrategy::default(), t0());
            snapshot.node.allocatable = allocatable
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect();
            snapshot
        };
        let mid_pod = |name: &str, memory: &str| {
            requesting(
                kube_pod(name, QoSClass::LS, 7000),
                &[("memory", memory), (MID_MEMORY, memory)],
            )
        };
        let cases: Vec<AllocatableCase> = vec![
            (
                vec![(BATCH_MEMORY, 100 * GIB)],
                vec![
                    batch_pod("b1", "20Gi", false),
                    batch_pod("b2", "30Gi", false),
                ],
                (80, 70, 5999),
                vec![],
                vec![],
            ),
            (
                vec![(BATCH_MEMORY, 100 * GIB)],
                vec![
                    batch_pod("b1", "45Gi", false),
                    batch_pod("b2", "40Gi", false),
                ],
                (80, 70, 5999),
                vec![(BATCH_MEMORY, 16_106_127_360)],
                vec![PriorityClass::Batch],
            ),
            (
                vec![(BATCH_MEMORY, 100 * GIB), (MID_MEMORY, 100 * GIB)],
                vec![batch_pod("b1", "85Gi", false), mid_pod("m1", "85Gi")],
                (80, 70, 7999),
                vec![(BATCH_MEMORY, 16_106_127_360), (MID_MEMORY, 16_106_127_360)],
                vec![PriorityClass::Mid, PriorityClass::Batch],
            ),
            (
                vec![(BATCH_MEMORY, 100 * GIB), (MID_MEMORY, 100 * GIB)],
                vec![batch_pod("b1", "85Gi", false), mid_pod("m1", "85Gi")],
                (80, 70, 5999),
                vec![(BATCH_MEMORY, 16_106_127_360)],
                vec![PriorityClass::Batch],
            ),
            (
                vec![(BATCH_MEMORY, 100 * GIB)],
                vec![batch_pod("b1", "50Gi", false)],
                (0, 0, 5999),
                vec![(BATCH_MEMORY, 50 * GIB)],
                vec![PriorityClass::Batch],
            ),
            (
                vec![],
                vec![batch_pod("b1", "50Gi", false)],
                (80, 70, 5999),
                vec![(BATCH_MEMORY, 50 * GIB)],
                vec![PriorityClass::Batch],
            ),
        ];
        for (allocatable, pods, (threshold, lower, priority), want, classes) in cases {
            let mut snapshot = node(&allocatable);
            with_kube_pods(&mut snapshot, pods, &[], &[]);
            let (release, got_classes) = evicttask::allocatable_release(
                &snapshot,
                RequestKind::Memory,
                priority,
                threshold,
                lower,
            );
            let want: ResourceList = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            let mut classes = classes;
            classes.sort();
            assert_eq!((release, got_classes), (want, classes), "{allocatable:?}");
        }
    }

    /// Upstream `Test_getPodEvictInfoAndSortByPriority`: only opted-in pods
    /// under the threshold, by eviction-priority annotation, then priority,
    /// then the sub-priority label, then usage.
    #[test]
    fn priority_candidates_filter_and_order() {
        let mut snapshot = upstream_node(enabled(80, None));
        let opted = |pod| labelled(pod, "koordinator.sh/eviction-enabled", "true");
        with_kube_pods(
            &mut snapshot,
            vec![
                opted(kube_pod("low-usage", QoSClass::BE, 5000)),
                opted(kube_pod("high-usage", QoSClass::BE, 5000)),
                opted(annotated(
                    kube_pod("evict-me-first", QoSClass::BE, 5900),
                    "koordinator.sh/eviction-priority",
                    "-1",
                )),
                opted(labelled(
                    kube_pod("sub-priority-high", QoSClass::BE, 5000),
                    "koordinator.sh/priority",
                    "9999",
                )),
                opted(kube_pod("too-important", QoSClass::LS, 9000)),
                kube_pod("not-opted-in", QoSClass::BE, 5000),
                opted(kube_pod("no-metric", QoSClass::BE, 5000)),
                opted(annotated(
                    kube_pod("policy-excludes", QoSClass::BE, 5000),
                    "koordinator.sh/eviction-policy",
                    r#"["CPUEvict"]"#,
                )),
            ],
            &[
                ("low-usage", GIB),
                ("high-usage", 2 * GIB),
                ("evict-me-first", GIB),
                ("sub-priority-high", 3 * GIB),
                ("too-important", GIB),
                ("not-opted-in", GIB),
                ("policy-excludes", GIB),
            ],
            &[],
        );
        let infos = priority_candidates(
            &snapshot,
            FEATURE_MEMORY_EVICT,
            5999,
            RequestKind::Memory,
            memory_used_desc,
        );
        let names: Vec<&str> = infos.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "evict-me-first",
                "high-usage",
                "low-usage",
                "sub-priority-high"
            ]
        );
    }

    #[test]
    fn dry_run_reports_victims_without_evicting_or_cooling() {
        let snapshot = upstream_node(enabled(80, None));
        let mut strategy = Rounds::new(MemoryEvict::new().with_dry_run(&[FEATURE]));
        for _ in 0..2 {
            let decision = strategy.decide(&snapshot);
            assert!(decision.evictions.is_empty(), "{decision:?}");
            let report = decision.eviction_report.unwrap();
            assert!(report.tasks[0].dry_run);
            let pods: Vec<&str> = report.tasks[0]
                .victims
                .iter()
                .map(|v| v.pod.as_str())
                .collect();
            assert_eq!(
                pods,
                [
                    "default/test_be_pod_priority100_2",
                    "default/test_be_pod_priority100_1"
                ]
            );
        }
    }

    #[test]
    fn decide_is_deterministic_and_state_remembers_victims() {
        let strategy = MemoryEvict::new();
        let first = upstream_node(enabled(82, Some(80)));
        let (decision, state) = assert_deterministic(&strategy, &first, &EvictionMemory::default());
        assert_eq!(evicted(&decision), ["test_be_pod_priority100_2"]);
        let cool = first.config.memory_evict_cool_time;
        assert!(state.cooling(first.now, cool).is_some(), "{state:?}");
        // From the remembered state after the cool time: deterministic, and
        // the victim counts as pending.
        let mut later = first.clone();
        later.now = first.now + cool + Duration::from_secs(1);
        let (decision, _) = assert_deterministic(&strategy, &later, &state);
        assert!(decision.evictions.is_empty(), "{decision:?}");
        assert_eq!(
            decision.eviction_report.unwrap().tasks[0].pending,
            ["test_be_pod_priority100_2"]
        );
    }

    #[test]
    fn pending_evictions_prevent_extra_victims_but_refused_ones_do_not() {
        let mut strategy = Rounds::new(MemoryEvict::new());
        let first = upstream_node(enabled(82, Some(80)));
        assert_eq!(
            evicted(&strategy.decide(&first)),
            ["test_be_pod_priority100_2"]
        );
        // After the 4 s cool time the pod is still terminating: it counts as released.
        let mut later = first.clone();
        later.now = t0() + Duration::from_secs(5);
        later.node_usage.memory = Some(MetricSample::new((115 * G) as f64, later.now));
        for pod in &mut later.pods {
            pod.memory_usage = pod
                .memory_usage
                .map(|s| MetricSample::new(s.value, later.now));
        }
        let decision = strategy.decide(&later);
        assert!(decision.evictions.is_empty(), "{decision:?}");
        assert_eq!(
            decision.eviction_report.unwrap().tasks[0].pending,
            ["test_be_pod_priority100_2"]
        );
        // Unless its eviction was refused (a PodDisruptionBudget): asked again.
        later
            .eviction_refused
            .insert("test_be_pod_priority100_2".to_string());
        assert_eq!(
            evicted(&strategy.decide(&later)),
            ["test_be_pod_priority100_2"]
        );
    }

    #[test]
    fn eviction_requests_carry_the_containers_and_upstream_message() {
        let decision = MemoryEvict::new().decide_fresh(&upstream_node(enabled(82, None)));
        let request = &decision.evictions[0];
        assert_eq!(
            request.container_ids,
            ["containerd://test_be_pod_priority100_2-main"]
        );
        assert!(
            request.message.starts_with(
                "trigger by koordlet feature BEMemoryEvict, kill pod: test_be_pod_priority100_2"
            ),
            "{}",
            request.message
        );
    }
}
