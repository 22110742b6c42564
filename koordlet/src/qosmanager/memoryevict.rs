//! QoS strategy `memoryevict` (upstream feature `BEMemoryEvict`): when node
//! memory usage reaches `memoryEvictThresholdPercent`, evict BE pods — lowest
//! `spec.priority` first, then the largest memory user — until the projected
//! usage is under `memoryEvictLowerPercent` (default: threshold − 2).
//!
//! Only pods labelled `koordinator.sh/qosClass: BE` are candidates, as
//! upstream (`GetPodQoSClassRaw`); pods whose `koordinator.sh/eviction-policy`
//! annotation excludes `BEMemoryEvict` are skipped.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::time::Duration;

use apis::configuration::defaults::default_resource_threshold_strategy;
use apis::configuration::merge::merged;
use apis::extension::QoSClass;
use apis::slo::v1alpha1::ResourceThresholdStrategy;

use super::framework::FeatureGate;
use super::framework::{Decision, EvictionRequest, QosPod, QosSnapshot, Strategy};
use crate::evictor::bookkeeping::EvictionMemory;

pub const NAME: &str = "memoryevict";
/// Upstream's feature name; the eviction reason and the eviction-policy key.
pub const FEATURE: &str = "BEMemoryEvict";
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

/// Upper and lower memory percentages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryThresholds {
    pub threshold_percent: i64,
    pub lower_percent: i64,
}

/// Upstream's validation: threshold ≥ 0, lower < threshold.
pub fn memory_thresholds(config: &ResourceThresholdStrategy) -> Result<MemoryThresholds, String> {
    let threshold_percent = config
        .memory_evict_threshold_percent
        .ok_or("memoryEvictThresholdPercent is not set")?;
    if threshold_percent < 0 {
        return Err(format!(
            "memoryEvictThresholdPercent {threshold_percent} must be >= 0"
        ));
    }
    let lower_percent = config
        .memory_evict_lower_percent
        .unwrap_or(threshold_percent - RELEASE_BUFFER_PERCENT);
    if lower_percent >= threshold_percent {
        return Err(format!(
            "memoryEvictLowerPercent {lower_percent} must be below memoryEvictThresholdPercent {threshold_percent}"
        ));
    }
    Ok(MemoryThresholds {
        threshold_percent,
        lower_percent,
    })
}

/// One BE pod that may be evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub uid: String,
    pub name: String,
    pub priority: i32,
    /// Bytes; 0 when the pod has no memory sample.
    pub memory_used: i64,
}

/// Upstream's order: priority ascending; then pods with a usage sample
/// before those without, larger usage first; then name descending.
pub fn eviction_order(a: &Candidate, b: &Candidate) -> Ordering {
    a.priority
        .cmp(&b.priority)
        .then_with(|| (a.memory_used == 0).cmp(&(b.memory_used == 0)))
        .then_with(|| b.memory_used.cmp(&a.memory_used))
        .then_with(|| b.name.cmp(&a.name))
}

/// The result of [`plan_release`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReleasePlan {
    /// Node usage in whole percent (upstream's integer arithmetic).
    pub usage_percent: i64,
    /// Bytes to release; 0 below the threshold.
    pub to_release: i64,
    /// New victims, in eviction order.
    pub victims: Vec<String>,
    /// Bytes the victims and the pending evictions release.
    pub released: i64,
}

/// Picks victims until `to_release` is covered. Pods in `pending` (already
/// asked to go) count as released without a new request.
pub fn plan_release(
    capacity: i64,
    used: i64,
    thresholds: MemoryThresholds,
    candidates: &[Candidate],
    pending: &HashSet<String>,
) -> ReleasePlan {
    let mut plan = ReleasePlan::default();
    if capacity <= 0 {
        return plan;
    }
    plan.usage_percent = used.saturating_mul(100) / capacity;
    if plan.usage_percent < thresholds.threshold_percent {
        return plan;
    }
    plan.to_release = capacity.saturating_mul(plan.usage_percent - thresholds.lower_percent) / 100;
    let mut ordered: Vec<&Candidate> = candidates.iter().collect();
    ordered.sort_by(|a, b| eviction_order(a, b));
    for candidate in ordered {
        if plan.released >= plan.to_release {
            break;
        }
        plan.released = plan.released.saturating_add(candidate.memory_used);
        if !pending.contains(&candidate.uid) {
            plan.victims.push(candidate.uid.clone());
        }
    }
    plan
}

/// Whether `pod`'s eviction-policy annotation lets `feature` evict it.
pub(crate) fn eviction_allowed(snapshot: &QosSnapshot, pod: &QosPod, feature: &str) -> bool {
    let Some(annotations) = snapshot
        .kube_pod(pod)
        .and_then(|kube| kube.metadata.annotations.as_ref())
    else {
        return true;
    };
    apis::extension::is_eviction_policy_allowed(feature, annotations)
}

/// Pods that have finished hold no memory worth evicting for.
pub(crate) fn is_terminated(pod: &QosPod) -> bool {
    matches!(pod.phase.as_str(), "Succeeded" | "Failed")
}

/// The `memoryevict` strategy.
#[derive(Debug)]
pub struct MemoryEvict {
    gate: FeatureGate,
    memory: EvictionMemory,
}

impl Default for MemoryEvict {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryEvict {
    /// On; see [`MemoryEvict::with_feature_gates`].
    pub fn new() -> Self {
        Self {
            gate: FeatureGate::on(FEATURE, false),
            memory: EvictionMemory::default(),
        }
    }

    /// Applies parsed `--feature-gates` (upstream default: off).
    pub fn with_feature_gates(mut self, gates: &std::collections::BTreeMap<String, bool>) -> Self {
        self.gate = self.gate.from_gates(gates);
        self
    }
}

impl Strategy for MemoryEvict {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.memory_evict_interval
    }

    fn decide(&self, snapshot: &QosSnapshot) -> Decision {
        if let Err(off) = self.gate.check() {
            return Decision::skipped(off);
        }
        let Some(_) = snapshot.node_slo.as_ref() else {
            return Decision::skipped("no NodeSLO yet");
        };
        let config = effective_thresholds(snapshot);
        if config.enable != Some(true) {
            return Decision::skipped("resourceUsedThresholdWithBE.enable is not true");
        }
        if let Some(left) = self
            .memory
            .cooling(snapshot.now, snapshot.config.memory_evict_cool_time)
        {
            return Decision::skipped(format!(
                "cooling down after the last eviction ({}s left)",
                left.as_secs()
            ));
        }
        let thresholds = match memory_thresholds(&config) {
            Ok(thresholds) => thresholds,
            Err(err) => return Decision::skipped(format!("invalid config: {err}")),
        };
        let capacity = snapshot.node.memory_capacity_bytes;
        if capacity <= 0 {
            return Decision::skipped(format!("node memory capacity {capacity} is not valid"));
        }
        let used = match snapshot.fresh("node memory usage", snapshot.node_usage.memory) {
            Ok(sample) => sample.value as i64,
            Err(reason) => return Decision::skipped(reason),
        };
        let candidates: Vec<Candidate> = snapshot
            .pods
            .iter()
            .filter(|pod| pod.qos_label == QoSClass::BE && !is_terminated(pod))
            .filter(|pod| eviction_allowed(snapshot, pod, FEATURE))
            .map(|pod| Candidate {
                uid: pod.uid.clone(),
                name: pod.name.clone(),
                priority: pod.priority_value,
                memory_used: pod.memory_usage.map_or(0, |s| s.value.max(0.0) as i64),
            })
            .collect();
        // A pod whose eviction was refused keeps its memory: not pending.
        let present: HashSet<&str> = snapshot
            .pods
            .iter()
            .map(|p| p.uid.as_str())
            .filter(|uid| !snapshot.eviction_refused.contains(*uid))
            .collect();
        let pending = self.memory.pending(snapshot.now, &present);
        let plan = plan_release(capacity, used, thresholds, &candidates, &pending);
        if plan.to_release == 0 {
            return Decision::skipped(format!(
                "node memory usage {}% is below the threshold {}%",
                plan.usage_percent, thresholds.threshold_percent
            ));
        }
        let mut decision = Decision::default();
        decision.info(format!(
            "node memory usage {}% >= {}%: release {} bytes to get under {}% ({} BE candidates, {} evictions pending)",
            plan.usage_percent,
            thresholds.threshold_percent,
            plan.to_release,
            thresholds.lower_percent,
            candidates.len(),
            pending.len()
        ));
        if candidates.is_empty() {
            decision.skip("memory is over the threshold but there is no BE pod to evict");
            return decision;
        }
        if plan.released < plan.to_release {
            decision.info(format!(
                "evicting every BE candidate releases only {} of {} bytes",
                plan.released, plan.to_release
            ));
        }
        for uid in &plan.victims {
            let Some(pod) = snapshot.pods.iter().find(|pod| &pod.uid == uid) else {
                continue;
            };
            let used = pod.memory_usage.map_or(0.0, |s| s.value);
            decision.evictions.push(EvictionRequest::for_pod(
                pod,
                FEATURE,
                format!(
                    "trigger by koordlet feature {FEATURE}, kill pod: {}; node memory usage {}% >= threshold {}%, pod uses {} bytes",
                    pod.name, plan.usage_percent, thresholds.threshold_percent, used as i64
                ),
            ));
        }
        self.memory.record(snapshot.now, plan.victims);
        decision
    }
}

/// Hand-built pods and snapshots for the eviction strategies' tests.
#[cfg(test)]
pub(crate) mod test_pods {
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

    pub fn with_memory(mut pod: QosPod, bytes: i64, at: SystemTime) -> QosPod {
        pod.memory_usage = Some(MetricSample::new(bytes as f64, at));
        pod
    }

    /// Adds a container requesting `milli` CPU (batch-cpu for BE pods).
    pub fn with_cpu(
        mut pod: QosPod,
        request_milli: i64,
        used_cores: f64,
        at: SystemTime,
    ) -> QosPod {
        pod.containers.push(QosContainer {
            name: "main".to_string(),
            id: None,
            cgroup_dir: None,
            cpu_request_milli: Some(request_milli),
            cpu_limit_milli: Some(request_milli),
            memory_request_bytes: None,
            memory_limit_bytes: None,
            cpu_usage: None,
            memory_usage: None,
        });
        pod.cpu_usage = Some(MetricSample::new(used_cores, at));
        pod
    }

    /// Attaches a Pod object carrying `annotations`.
    pub fn with_annotations(
        snapshot: &mut QosSnapshot,
        index: usize,
        annotations: &[(&str, &str)],
    ) {
        let mut kube: Vec<Pod> = snapshot.kube_pods.as_ref().clone();
        let mut object = Pod::default();
        object.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        kube.push(object);
        snapshot.pods[index].kube_index = Some(kube.len() - 1);
        snapshot.kube_pods = Arc::new(kube);
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
    use super::test_pods::*;
    use super::*;
    use crate::qosmanager::framework::MetricSample;

    const GIB: i64 = 1 << 30;

    fn enabled(threshold: i64, lower: Option<i64>) -> ResourceThresholdStrategy {
        ResourceThresholdStrategy {
            enable: Some(true),
            memory_evict_threshold_percent: Some(threshold),
            memory_evict_lower_percent: lower,
            ..ResourceThresholdStrategy::default()
        }
    }

    /// 100 GiB node using `used` GiB, with the given pods.
    fn snapshot(
        config: ResourceThresholdStrategy,
        used_gib: i64,
        pods: Vec<QosPod>,
    ) -> QosSnapshot {
        let mut snapshot = snapshot_with(config, t0());
        snapshot.node.memory_capacity_bytes = 100 * GIB;
        snapshot.node_usage.memory = Some(MetricSample::new((used_gib * GIB) as f64, t0()));
        snapshot.pods = pods;
        snapshot
    }

    fn evicted(decision: &Decision) -> Vec<&str> {
        decision.evictions.iter().map(|e| e.uid.as_str()).collect()
    }

    #[test]
    fn thresholds_follow_upstream_validation() {
        let ok = memory_thresholds(&enabled(70, None)).unwrap();
        assert_eq!((ok.threshold_percent, ok.lower_percent), (70, 68));
        assert!(memory_thresholds(&enabled(70, Some(70))).is_err());
        assert!(memory_thresholds(&enabled(-1, None)).is_err());
        assert!(memory_thresholds(&ResourceThresholdStrategy::default()).is_err());
        // Threshold 0 is valid: evict whenever any memory is used.
        let zero = memory_thresholds(&enabled(0, None)).unwrap();
        assert_eq!(zero.lower_percent, -2);
    }

    #[test]
    fn evicts_lowest_priority_then_largest_until_under_lower_threshold() {
        // 100 GiB, 80 % used, threshold 70, lower 60 → release 20 GiB.
        let pods = vec![
            with_memory(pod("ls", QoSClass::LS, 9500), 50 * GIB, t0()),
            with_memory(pod("be-high-prio", QoSClass::BE, 5900), 30 * GIB, t0()),
            with_memory(pod("be-small", QoSClass::BE, 5100), 5 * GIB, t0()),
            with_memory(pod("be-big", QoSClass::BE, 5100), 12 * GIB, t0()),
            with_memory(pod("be-other", QoSClass::BE, 5100), 4 * GIB, t0()),
        ];
        let strategy = MemoryEvict::new();
        let decision = strategy.decide(&snapshot(enabled(70, Some(60)), 80, pods));
        // 12 + 5 + 4 = 21 GiB >= 20 GiB; the priority-5900 pod survives, LS never goes.
        assert_eq!(evicted(&decision), ["be-big", "be-small", "be-other"]);
        assert!(decision.evictions.iter().all(|e| e.reason == FEATURE));
        assert!(
            decision.evictions[0]
                .message
                .contains("kill pod: pod-be-big")
        );
    }

    #[test]
    fn never_evicts_non_be_pods_even_when_short() {
        let pods = vec![
            with_memory(pod("ls", QoSClass::LS, 9500), 60 * GIB, t0()),
            with_memory(pod("lsr", QoSClass::LSR, 9500), 20 * GIB, t0()),
            with_memory(pod("be", QoSClass::BE, 5500), GIB, t0()),
        ];
        let decision = MemoryEvict::new().decide(&snapshot(enabled(70, None), 95, pods));
        assert_eq!(evicted(&decision), ["be"]);
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("releases only"))
        );
    }

    #[test]
    fn below_threshold_no_be_pods_and_disabled_do_nothing_and_say_why() {
        let pods = vec![with_memory(pod("be", QoSClass::BE, 5500), GIB, t0())];
        let below = MemoryEvict::new().decide(&snapshot(enabled(70, None), 69, pods.clone()));
        assert!(below.evictions.is_empty());
        assert!(below.skip_reason().unwrap().contains("below the threshold"));

        let no_be = vec![with_memory(pod("ls", QoSClass::LS, 9500), 90 * GIB, t0())];
        let none = MemoryEvict::new().decide(&snapshot(enabled(70, None), 90, no_be));
        assert!(none.evictions.is_empty());
        assert!(none.skip_reason().unwrap().contains("no BE pod"));

        let mut off = enabled(70, None);
        off.enable = Some(false);
        let disabled = MemoryEvict::new().decide(&snapshot(off, 99, pods.clone()));
        assert!(disabled.skip_reason().unwrap().contains("enable"));

        let no_slo = MemoryEvict::new().decide(&QosSnapshot::for_test(t0()));
        assert!(no_slo.skip_reason().unwrap().contains("NodeSLO"));
    }

    #[test]
    fn missing_or_stale_node_metric_skips() {
        let pods = vec![with_memory(pod("be", QoSClass::BE, 5500), GIB, t0())];
        let mut missing = snapshot(enabled(70, None), 90, pods.clone());
        missing.node_usage.memory = None;
        let decision = MemoryEvict::new().decide(&missing);
        assert!(decision.evictions.is_empty());
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("no node memory usage sample")
        );

        let mut stale = snapshot(enabled(70, None), 90, pods);
        stale.node_usage.memory = Some(MetricSample::new(
            (90 * GIB) as f64,
            t0() - Duration::from_secs(600),
        ));
        let decision = MemoryEvict::new().decide(&stale);
        assert!(decision.evictions.is_empty());
        assert!(decision.skip_reason().unwrap().contains("stale"));
    }

    #[test]
    fn threshold_100_only_at_full_memory_and_0_always() {
        let pods = vec![with_memory(pod("be", QoSClass::BE, 5500), GIB, t0())];
        let at_99 = MemoryEvict::new().decide(&snapshot(enabled(100, None), 99, pods.clone()));
        assert!(at_99.evictions.is_empty());
        let at_100 = MemoryEvict::new().decide(&snapshot(enabled(100, None), 100, pods.clone()));
        assert_eq!(evicted(&at_100), ["be"]);
        let zero = MemoryEvict::new().decide(&snapshot(enabled(0, None), 1, pods));
        assert_eq!(evicted(&zero), ["be"]);
    }

    #[test]
    fn cool_time_and_pending_evictions_prevent_extra_victims_but_refused_ones_do_not() {
        let pods = vec![
            with_memory(pod("a", QoSClass::BE, 5500), 30 * GIB, t0()),
            with_memory(pod("b", QoSClass::BE, 5500), 20 * GIB, t0()),
        ];
        let strategy = MemoryEvict::new();
        let first = strategy.decide(&snapshot(enabled(70, None), 80, pods.clone()));
        assert_eq!(evicted(&first), ["a"]);
        // Within the 4 s cool time: nothing.
        let mut soon = snapshot(enabled(70, None), 80, pods.clone());
        soon.now = t0() + Duration::from_secs(2);
        soon.node_usage.memory = Some(MetricSample::new((80 * GIB) as f64, soon.now));
        assert!(
            strategy
                .decide(&soon)
                .skip_reason()
                .unwrap()
                .contains("cooling")
        );
        // After it, "a" is still terminating: it counts as released, "b" is not needed.
        let mut later = soon.clone();
        later.now = t0() + Duration::from_secs(5);
        later.node_usage.memory = Some(MetricSample::new((80 * GIB) as f64, later.now));
        assert!(strategy.decide(&later).evictions.is_empty());
        // Unless its eviction was refused (a PodDisruptionBudget): then "a" keeps its memory
        // and is asked for again.
        later.eviction_refused.insert("a".to_string());
        assert_eq!(evicted(&strategy.decide(&later)), ["a"]);
    }

    #[test]
    fn eviction_policy_annotation_and_finished_pods_are_respected() {
        let pods = vec![
            with_memory(pod("opt-out", QoSClass::BE, 5000), 30 * GIB, t0()),
            with_memory(pod("done", QoSClass::BE, 5000), 30 * GIB, t0()),
            with_memory(pod("ok", QoSClass::BE, 5900), 30 * GIB, t0()),
        ];
        let mut snap = snapshot(enabled(70, None), 80, pods);
        with_annotations(
            &mut snap,
            0,
            &[("koordinator.sh/eviction-policy", r#"["BECPUEvict"]"#)],
        );
        snap.pods[1].phase = "Succeeded".to_string();
        assert_eq!(evicted(&MemoryEvict::new().decide(&snap)), ["ok"]);
    }

    #[test]
    fn feature_gate_follows_upstream_default_off() {
        use std::collections::BTreeMap;
        let pods = vec![with_memory(pod("be", QoSClass::BE, 5500), GIB, t0())];
        let snap = snapshot(enabled(70, None), 90, pods);
        let off = MemoryEvict::new().with_feature_gates(&BTreeMap::new());
        let decision = off.decide(&snap);
        assert!(decision.evictions.is_empty());
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("BEMemoryEvict=true")
        );
        let gates = BTreeMap::from([("BEMemoryEvict".to_string(), true)]);
        let on = MemoryEvict::new().with_feature_gates(&gates);
        assert_eq!(evicted(&on.decide(&snap)), ["be"]);
    }

    #[test]
    fn pods_without_samples_go_after_measured_ones() {
        let a = Candidate {
            uid: "a".into(),
            name: "a".into(),
            priority: 1,
            memory_used: 0,
        };
        let b = Candidate {
            uid: "b".into(),
            name: "b".into(),
            priority: 1,
            memory_used: 5,
        };
        let c = Candidate {
            uid: "c".into(),
            name: "c".into(),
            priority: 0,
            memory_used: 0,
        };
        let mut all = vec![a.clone(), b.clone(), c.clone()];
        all.sort_by(eviction_order);
        assert_eq!(all, vec![c, b, a]);
    }
}
