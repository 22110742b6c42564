//! QoS strategy `cgreconcile`: the memory QoS of resource-qos-config
//! (`resourceQOSStrategy.<class>.memoryQOS`) on QoS-tier, pod and container
//! cgroups, rewritten whenever it drifts (upstream `plugins/cgreconcile`).
//!
//! - Pod and container: `memory.min` / `memory.low` = request ×
//!   `minLimitPercent` / `lowLimitPercent` (low raised to min), container
//!   `memory.high` = request + (limit − request) × `throttlingPercent`
//!   (node allocatable when unlimited, page aligned, `max` for 0), and the
//!   Anolis knobs (`memory.wmark_*`, `memory.priority`,
//!   `memory.use_priority_oom`) plus `memory.oom.group` as configured.
//! - Tiers (Guaranteed → LSR config, Burstable → LS, BestEffort → BE): the
//!   priority knobs of the tier's class; min/low sum over the pods of every
//!   tier onto the kubepods root, as upstream does.
//! - The class comes from the pod's Koordinator QoS (LSE uses LSR's config);
//!   the `koordinator.sh/memoryQOS` annotation can switch it off (`none`),
//!   pick the recommended values (`auto`) or override single knobs.
//! - A class with `enable: false` gets the "none" values (everything off).
//!
//! Files this kernel lacks are left out and named in a note; when none is
//! supported the round is skipped as unsupported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use apis::configuration::defaults::{default_memory_qos, none_memory_qos};
use apis::configuration::merge::merged;
use apis::extension::{QoSClass, get_pod_memory_qos_config};
use apis::slo::v1alpha1::{MemoryQOS, PodMemoryQOSPolicy, ResourceQOS, ResourceQOSStrategy};

use super::framework::{Decision, QosPod, QosSnapshot, Strategy};
use crate::capabilities::NodeCapabilities;
use crate::system::cgroup::{CgroupResource, CgroupValue, QosTier};

pub const NAME: &str = "cgreconcile";

const PAGE_SIZE: i64 = 4096;
const REASON: &str = "cgroup reconcile";

#[derive(Debug, Default, Clone)]
pub struct CgroupReconcile;

/// The resource QoS of a Koordinator class (LSE shares LSR's).
pub fn class_config(strategy: &ResourceQOSStrategy, qos: QoSClass) -> Option<&ResourceQOS> {
    match qos {
        QoSClass::LSE | QoSClass::LSR => strategy.lsr_class.as_ref(),
        QoSClass::LS => strategy.ls_class.as_ref(),
        QoSClass::BE => strategy.be_class.as_ref(),
        QoSClass::System => strategy.system_class.as_ref(),
        _ => None,
    }
}

/// The resource QoS of a Kubernetes tier.
pub fn tier_config(strategy: &ResourceQOSStrategy, tier: QosTier) -> Option<&ResourceQOS> {
    match tier {
        QosTier::Guaranteed => strategy.lsr_class.as_ref(),
        QosTier::Burstable => strategy.ls_class.as_ref(),
        QosTier::BestEffort => strategy.be_class.as_ref(),
    }
}

/// The memory QoS in force for a class config: `None` without memoryQOS;
/// the "none" values when disabled.
fn effective_memory_qos(config: Option<&ResourceQOS>) -> Option<MemoryQOS> {
    let cfg = config?.memory_qos.as_ref()?;
    if cfg.enable == Some(false) {
        return Some(none_memory_qos());
    }
    Some(cfg.memory_qos.clone())
}

/// The pod's memory QoS after its `koordinator.sh/memoryQOS` annotation.
fn pod_memory_qos(
    snapshot: &QosSnapshot,
    pod: &QosPod,
    strategy: &ResourceQOSStrategy,
    notes: &mut Vec<String>,
) -> Option<MemoryQOS> {
    let node_level = effective_memory_qos(class_config(strategy, pod.qos));
    let annotation = snapshot
        .kube_pod(pod)
        .and_then(|p| p.metadata.annotations.as_ref())
        .map(get_pod_memory_qos_config);
    let pod_cfg = match annotation {
        Some(Ok(cfg)) => cfg,
        Some(Err(err)) => {
            notes.push(format!(
                "pod {}: ignoring malformed memoryQOS annotation: {err}",
                pod.key()
            ));
            None
        }
        None => None,
    };
    let Some(pod_cfg) = pod_cfg else {
        return node_level;
    };
    let base = match pod_cfg.policy {
        Some(PodMemoryQOSPolicy::None) => return Some(none_memory_qos()),
        Some(PodMemoryQOSPolicy::Auto) => default_memory_qos(pod.qos).unwrap_or_default(),
        _ => node_level.unwrap_or_default(),
    };
    Some(merged(&base, &pod_cfg.memory_qos))
}

/// Values for one cgroup, in upstream's write order.
#[derive(Debug, Default, Clone, PartialEq)]
struct Knobs {
    min: Option<i64>,
    low: Option<i64>,
    high: Option<CgroupValue>,
    wmark_ratio: Option<i64>,
    wmark_scale_factor: Option<i64>,
    wmark_min_adj: Option<i64>,
    priority: Option<i64>,
    use_priority_oom: Option<i64>,
    oom_group: Option<i64>,
}

impl Knobs {
    fn entries(&self) -> Vec<(CgroupResource, CgroupValue)> {
        let int = |v: Option<i64>| v.map(CgroupValue::Int);
        [
            (CgroupResource::MemoryMin, int(self.min)),
            (CgroupResource::MemoryLow, int(self.low)),
            (CgroupResource::MemoryHigh, self.high.clone()),
            (CgroupResource::MemoryWmarkRatio, int(self.wmark_ratio)),
            (
                CgroupResource::MemoryWmarkScaleFactor,
                int(self.wmark_scale_factor),
            ),
            (CgroupResource::MemoryWmarkMinAdj, int(self.wmark_min_adj)),
            (CgroupResource::MemoryPriority, int(self.priority)),
            (
                CgroupResource::MemoryUsePriorityOom,
                int(self.use_priority_oom),
            ),
            (CgroupResource::MemoryOomGroup, int(self.oom_group)),
        ]
        .into_iter()
        .filter_map(|(resource, value)| value.map(|v| (resource, v)))
        .collect()
    }

    fn common(qos: &MemoryQOS) -> Self {
        Self {
            wmark_ratio: qos.wmark_ratio,
            wmark_scale_factor: qos.wmark_scale_permill,
            wmark_min_adj: qos.wmark_min_adj,
            priority: qos.priority,
            use_priority_oom: qos.priority_enable,
            oom_group: qos.oom_kill_group,
            ..Self::default()
        }
    }

    fn protect(&mut self, qos: &MemoryQOS, request: i64) {
        self.min = qos.min_limit_percent.map(|p| request * p / 100);
        self.low = qos.low_limit_percent.map(|p| request * p / 100);
        if let (Some(min), Some(low)) = (self.min, self.low)
            && low > 0
            && low < min
        {
            self.low = Some(min);
        }
    }
}

/// Whether this node has the file.
pub fn resource_supported(caps: &NodeCapabilities, resource: CgroupResource) -> bool {
    let memory = &caps.memory_qos;
    match resource {
        CgroupResource::MemoryMin => memory.min,
        CgroupResource::MemoryLow => memory.low,
        CgroupResource::MemoryHigh => memory.high,
        CgroupResource::MemoryWmarkRatio => memory.wmark_ratio,
        CgroupResource::MemoryWmarkScaleFactor => memory.wmark_scale_factor,
        CgroupResource::MemoryWmarkMinAdj => memory.wmark_min_adj,
        CgroupResource::MemoryPriority => memory.priority,
        CgroupResource::MemoryUsePriorityOom => memory.use_priority_oom,
        CgroupResource::MemoryOomGroup => memory.oom_group,
        _ => true,
    }
}

fn container_high(
    qos: &MemoryQOS,
    request: i64,
    limit: Option<i64>,
    node_allocatable: i64,
) -> Option<CgroupValue> {
    let percent = qos.throttling_percent?;
    if percent == 0 {
        return Some(CgroupValue::Unlimited);
    }
    let ceiling = limit.filter(|l| *l > 0).unwrap_or(node_allocatable);
    let high = request + (ceiling - request) * percent / 100;
    Some(CgroupValue::Int(high / PAGE_SIZE * PAGE_SIZE))
}

impl Strategy for CgroupReconcile {
    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.reconcile_interval
    }

    fn decide(&self, snapshot: &QosSnapshot) -> Decision {
        let Some(strategy) = snapshot
            .node_slo
            .as_deref()
            .and_then(|spec| spec.resource_qos_strategy.as_ref())
        else {
            return Decision::skipped("no resourceQOSStrategy in the NodeSLO");
        };
        let mut notes = Vec::new();
        let mut planned: Vec<(PathBuf, Knobs)> = Vec::new();
        // Upstream sums protection over every tier onto the kubepods root.
        let mut total_min: Option<i64> = None;
        let mut total_low: Option<i64> = None;
        let node_allocatable =
            (snapshot.node.memory_capacity_bytes - snapshot.node.memory_reserved_bytes).max(0);

        for pod in &snapshot.pods {
            if pod.phase == "Succeeded" || pod.phase == "Failed" {
                continue;
            }
            let Some(qos) = pod_memory_qos(snapshot, pod, strategy, &mut notes) else {
                continue;
            };
            let pod_request: i64 = pod
                .containers
                .iter()
                .filter_map(|c| c.memory_request_bytes)
                .sum();
            if let Some(p) = qos.min_limit_percent {
                *total_min.get_or_insert(0) += pod_request * p / 100;
            }
            if let Some(p) = qos.low_limit_percent {
                *total_low.get_or_insert(0) += pod_request * p / 100;
            }
            let mut pod_knobs = Knobs::common(&qos);
            pod_knobs.protect(&qos, pod_request);
            planned.push((pod.cgroup_dir.clone(), pod_knobs));
            for container in &pod.containers {
                let Some(dir) = &container.cgroup_dir else {
                    continue;
                };
                let request = container.memory_request_bytes.unwrap_or(0).max(0);
                let mut knobs = Knobs::common(&qos);
                knobs.protect(&qos, request);
                knobs.high = container_high(
                    &qos,
                    request,
                    container.memory_limit_bytes,
                    node_allocatable,
                );
                if let (Some(CgroupValue::Int(high)), Some(min)) = (&knobs.high, knobs.min)
                    && *high > 0
                    && *high < min
                {
                    knobs.high = Some(CgroupValue::Int(min));
                }
                planned.push((dir.clone(), knobs));
            }
        }

        // Tiers first so parents are written before children.
        let mut tiers = Vec::new();
        for tier in QosTier::ALL {
            let Some(qos) = effective_memory_qos(tier_config(strategy, tier)) else {
                continue;
            };
            let mut knobs = Knobs {
                priority: qos.priority,
                use_priority_oom: qos.priority_enable,
                oom_group: qos.oom_kill_group,
                ..Knobs::default()
            };
            if tier == QosTier::Guaranteed {
                knobs.min = total_min;
                knobs.low = total_low;
            }
            tiers.push((snapshot.layout.qos_dir(tier), knobs));
        }
        tiers.extend(planned);

        let mut decision = Decision::default();
        let mut unsupported: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut requested = 0;
        for (dir, knobs) in tiers {
            for (resource, value) in knobs.entries() {
                requested += 1;
                if !resource_supported(&snapshot.capabilities, resource) {
                    *unsupported.entry(resource.name()).or_default() += 1;
                    continue;
                }
                decision.write(Path::new(&dir), resource, value, REASON);
            }
        }
        for note in notes {
            decision.info(note);
        }
        if !unsupported.is_empty() {
            let names: Vec<&str> = unsupported.keys().copied().collect();
            let text = format!(
                "unsupported on this kernel, not written: {}",
                names.join(", ")
            );
            if decision.writes.is_empty() {
                decision.skip(text);
            } else {
                decision.info(text);
            }
        } else if requested == 0 {
            decision.skip("no memoryQOS configured for any class");
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use apis::slo::v1alpha1::{MemoryQOSCfg, NodeSLOSpec};
    use k8s_openapi::api::core::v1::Pod;

    use super::*;
    use crate::qosmanager::framework::{MetricSample, QosContainer};

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    const GIB: i64 = 1 << 30;

    fn pod(name: &str, qos: QoSClass, tier: QosTier, request: i64, limit: Option<i64>) -> QosPod {
        let uid = format!("uid-{name}");
        let layout = QosSnapshot::for_test(now()).layout;
        let dir = layout.pod_dir(tier, &uid).unwrap();
        QosPod {
            uid,
            namespace: "default".into(),
            name: name.into(),
            qos,
            qos_label: qos,
            kube_qos: tier,
            priority: apis::extension::PriorityClass::None,
            priority_value: 0,
            phase: "Running".into(),
            cgroup_dir: dir.clone(),
            containers: vec![QosContainer {
                name: "main".into(),
                id: Some("containerd://c1".into()),
                cgroup_dir: Some(dir.join("c1")),
                cpu_request_milli: None,
                cpu_limit_milli: None,
                memory_request_bytes: Some(request),
                memory_limit_bytes: limit,
                cpu_usage: None,
                memory_usage: Some(MetricSample::new(0.0, now())),
            }],
            allocated_cpus: None,
            cpu_usage: None,
            memory_usage: None,
            kube_index: None,
        }
    }

    fn memory_cfg(qos: MemoryQOS) -> Option<ResourceQOS> {
        Some(ResourceQOS {
            memory_qos: Some(MemoryQOSCfg {
                enable: Some(true),
                memory_qos: qos,
            }),
            ..Default::default()
        })
    }

    fn snapshot(all_supported: bool) -> QosSnapshot {
        let mut snapshot = QosSnapshot::for_test(now());
        let ls = MemoryQOS {
            min_limit_percent: Some(100),
            low_limit_percent: Some(50),
            throttling_percent: Some(80),
            priority: Some(12),
            priority_enable: Some(1),
            ..Default::default()
        };
        let be = MemoryQOS {
            priority: Some(0),
            priority_enable: Some(1),
            wmark_min_adj: Some(50),
            ..Default::default()
        };
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            resource_qos_strategy: Some(ResourceQOSStrategy {
                lsr_class: memory_cfg(MemoryQOS {
                    priority_enable: Some(1),
                    ..Default::default()
                }),
                ls_class: memory_cfg(ls),
                be_class: memory_cfg(be),
                ..Default::default()
            }),
            ..Default::default()
        }));
        snapshot.node.memory_capacity_bytes = 16 * GIB;
        snapshot.pods = vec![
            pod("ls", QoSClass::LS, QosTier::Burstable, GIB, Some(2 * GIB)),
            pod("be", QoSClass::BE, QosTier::BestEffort, 0, None),
        ];
        if all_supported {
            let mut caps = (*snapshot.capabilities).clone();
            let m = &mut caps.memory_qos;
            (
                m.min,
                m.low,
                m.high,
                m.priority,
                m.use_priority_oom,
                m.wmark_min_adj,
            ) = (true, true, true, true, true, true);
            snapshot.capabilities = Arc::new(caps);
        }
        snapshot
    }

    #[test]
    fn ls_pod_gets_protection_and_throttling() {
        let snapshot = snapshot(true);
        let decision = CgroupReconcile.decide(&snapshot);
        let ls_dir = PathBuf::from("kubepods/burstable/poduid-ls");
        let container = ls_dir.join("c1");
        let get = |dir: &Path, r| decision.write_for(dir, r).cloned();
        assert_eq!(
            get(&ls_dir, CgroupResource::MemoryMin),
            Some(CgroupValue::Int(GIB))
        );
        // low (50%) < min (100%) is raised to min.
        assert_eq!(
            get(&ls_dir, CgroupResource::MemoryLow),
            Some(CgroupValue::Int(GIB))
        );
        // high = 1 GiB + (2 GiB - 1 GiB) x 80%, page aligned.
        let high = (GIB + GIB * 80 / 100) / PAGE_SIZE * PAGE_SIZE;
        assert_eq!(
            get(&container, CgroupResource::MemoryHigh),
            Some(CgroupValue::Int(high))
        );
        assert_eq!(
            get(&ls_dir, CgroupResource::MemoryPriority),
            Some(CgroupValue::Int(12))
        );
        // BE pod: its class values; the BE tier: the class priority knobs.
        let be_dir = PathBuf::from("kubepods/besteffort/poduid-be");
        assert_eq!(
            get(&be_dir, CgroupResource::MemoryWmarkMinAdj),
            Some(CgroupValue::Int(50))
        );
        assert_eq!(
            get(
                Path::new("kubepods/besteffort"),
                CgroupResource::MemoryUsePriorityOom
            ),
            Some(CgroupValue::Int(1))
        );
        // The kubepods root sums min over all tiers.
        assert_eq!(
            get(Path::new("kubepods"), CgroupResource::MemoryMin),
            Some(CgroupValue::Int(GIB))
        );
        // Tier writes come before pod writes.
        let first_pod = decision
            .writes
            .iter()
            .position(|w| w.dir.starts_with(&ls_dir))
            .unwrap();
        let last_tier = decision
            .writes
            .iter()
            .rposition(|w| w.dir.components().count() <= 2)
            .unwrap();
        assert!(last_tier < first_pod);
    }

    #[test]
    fn unsupported_files_are_skipped_and_named() {
        // The test capabilities have no memory QoS files (like this CI kernel).
        let decision = CgroupReconcile.decide(&snapshot(false));
        assert!(decision.writes.is_empty());
        let reason = decision.skip_reason().unwrap();
        assert!(
            reason.contains("memory.min") && reason.contains("memory.high"),
            "{reason}"
        );
    }

    #[test]
    fn disabled_class_resets_to_none_values() {
        let mut snapshot = snapshot(true);
        let mut spec = (*snapshot.node_slo.clone().unwrap()).clone();
        let strategy = spec.resource_qos_strategy.as_mut().unwrap();
        strategy
            .ls_class
            .as_mut()
            .unwrap()
            .memory_qos
            .as_mut()
            .unwrap()
            .enable = Some(false);
        snapshot.node_slo = Some(Arc::new(spec));
        let decision = CgroupReconcile.decide(&snapshot);
        let container = PathBuf::from("kubepods/burstable/poduid-ls/c1");
        assert_eq!(
            decision.write_for(&container, CgroupResource::MemoryMin),
            Some(&CgroupValue::Int(0))
        );
        assert_eq!(
            decision.write_for(&container, CgroupResource::MemoryHigh),
            Some(&CgroupValue::Unlimited)
        );
    }

    #[test]
    fn pod_annotation_none_switches_off_and_overrides_merge() {
        let mut snapshot = snapshot(true);
        let mut none_pod = Pod::default();
        none_pod.metadata.annotations = Some(BTreeMap::from([(
            "koordinator.sh/memoryQOS".to_string(),
            r#"{"policy":"none"}"#.to_string(),
        )]));
        let mut override_pod = Pod::default();
        override_pod.metadata.annotations = Some(BTreeMap::from([(
            "koordinator.sh/memoryQOS".to_string(),
            r#"{"minLimitPercent":50}"#.to_string(),
        )]));
        snapshot.kube_pods = Arc::new(vec![none_pod, override_pod]);
        let mut second = pod("ls2", QoSClass::LS, QosTier::Burstable, GIB, None);
        second.kube_index = Some(1);
        snapshot.pods[0].kube_index = Some(0);
        snapshot.pods.push(second);
        let decision = CgroupReconcile.decide(&snapshot);
        let first = PathBuf::from("kubepods/burstable/poduid-ls");
        assert_eq!(
            decision.write_for(&first, CgroupResource::MemoryMin),
            Some(&CgroupValue::Int(0))
        );
        let second = PathBuf::from("kubepods/burstable/poduid-ls2");
        assert_eq!(
            decision.write_for(&second, CgroupResource::MemoryMin),
            Some(&CgroupValue::Int(GIB / 2))
        );
        // Unlimited container: high is measured against node allocatable (16 GiB).
        let high = (GIB + (16 * GIB - GIB) * 80 / 100) / PAGE_SIZE * PAGE_SIZE;
        assert_eq!(
            decision.write_for(&second.join("c1"), CgroupResource::MemoryHigh),
            Some(&CgroupValue::Int(high))
        );
    }

    #[test]
    fn without_resource_qos_strategy_nothing_happens() {
        let mut snapshot = snapshot(true);
        snapshot.node_slo = None;
        let decision = CgroupReconcile.decide(&snapshot);
        assert!(decision.is_skipped());
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("resourceQOSStrategy")
        );
    }
}
