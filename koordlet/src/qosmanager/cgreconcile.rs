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
//! - Pod only: the Alibaba Cloud Linux page cache limit
//!   (`memory.pagecache_limit.{enable,size,sync}`): `pageCacheLimitSize`
//!   capped at the pod's memory limit, else `pageCacheLimitPercent` of that
//!   limit; a size of 0 switches the limit off; `pageCacheEnable` overrides
//!   the switch; reclaim is asynchronous unless `pageCacheReclaimSync`.
//! - Tiers (Guaranteed → LSR config, Burstable → LS, BestEffort → BE): the
//!   priority knobs of the tier's class; min/low of the burstable and
//!   besteffort tiers sum over their own pods, the kubepods root (the
//!   Guaranteed tier, parent of the others) over all pods, as upstream does.
//! - The class comes from the pod's Koordinator QoS (LSE uses LSR's config);
//!   the `koordinator.sh/memoryQOS` annotation can switch it off (`none`),
//!   pick the recommended values (`auto`) or override single knobs.
//! - A class with `enable: false` gets the "none" values (everything off).
//!
//! Files this kernel lacks are left out and named, with the NodeSLO settings
//! they carry, in a note and in `GET /qos/explain?unsupported`; when none is
//! supported the round is skipped as unsupported.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use apis::configuration::defaults::{default_memory_qos, none_memory_qos};
use apis::configuration::merge::merged;
use apis::extension::{QoSClass, get_pod_memory_qos_config};
use apis::slo::v1alpha1::{MemoryQOS, PodMemoryQOSPolicy, ResourceQOS, ResourceQOSStrategy};

use super::framework::{Decision, QosPod, QosSnapshot, Strategy, UnsupportedSetting};
use crate::capabilities::{NodeCapabilities, memory_qos_setting};
use crate::system::cgroup::{CgroupResource, CgroupValue, QosTier};
use koord_common::units::Bytes;

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
    pagecache_enable: Option<i64>,
    pagecache_size: Option<i64>,
    pagecache_sync: Option<i64>,
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
            (
                CgroupResource::MemoryPagecacheLimitEnable,
                int(self.pagecache_enable),
            ),
            (
                CgroupResource::MemoryPagecacheLimitSize,
                int(self.pagecache_size),
            ),
            (
                CgroupResource::MemoryPagecacheLimitSync,
                int(self.pagecache_sync),
            ),
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

    /// The pod's page cache limit; `limit` is the pod's memory limit
    /// (`None`: unlimited).
    fn page_cache(&mut self, qos: &MemoryQOS, limit: Option<i64>) {
        let limit = limit.filter(|l| *l > 0);
        let size = match (
            qos.page_cache_limit_size,
            qos.page_cache_limit_percent,
            limit,
        ) {
            // The kernel takes sizes within [0, memory limit].
            (Some(size), _, Some(limit)) => Some(size.clamp(0, limit)),
            (Some(size), _, None) => Some(size.max(0)),
            (None, Some(percent), Some(limit)) => Some(limit * percent / 100),
            _ => None,
        };
        match size {
            Some(size) if size > 0 => {
                self.pagecache_size = Some(size);
                self.pagecache_enable = Some(1);
                self.pagecache_sync = Some(i64::from(qos.page_cache_reclaim_sync == Some(true)));
            }
            Some(_) => {
                self.pagecache_size = Some(0);
                self.pagecache_enable = Some(0);
            }
            None => {}
        }
        if let Some(enable) = qos.page_cache_enable {
            self.pagecache_enable = Some(i64::from(enable));
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
        CgroupResource::MemoryPagecacheLimitEnable => memory.pagecache_limit_enable,
        CgroupResource::MemoryPagecacheLimitSize => memory.pagecache_limit_size,
        CgroupResource::MemoryPagecacheLimitSync => memory.pagecache_limit_sync,
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
    type State = ();

    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.reconcile_interval
    }

    fn decide(&self, snapshot: &QosSnapshot, _: &()) -> (Decision, ()) {
        (self.reconcile(snapshot), ())
    }
}

impl CgroupReconcile {
    /// The round's cgroup writes (the strategy keeps no state between rounds).
    fn reconcile(&self, snapshot: &QosSnapshot) -> Decision {
        let Some(strategy) = snapshot
            .node_slo
            .as_deref()
            .and_then(|spec| spec.resource_qos_strategy.as_ref())
        else {
            return Decision::skipped("no resourceQOSStrategy in the NodeSLO");
        };
        let mut notes = Vec::new();
        let mut planned: Vec<(PathBuf, Knobs)> = Vec::new();
        // Protection summed per tier; the kubepods root gets every tier's.
        let mut tier_min: HashMap<QosTier, i64> = HashMap::new();
        let mut tier_low: HashMap<QosTier, i64> = HashMap::new();
        let node_allocatable = snapshot
            .node
            .allocatable
            .get("memory")
            .copied()
            .unwrap_or_else(|| {
                let node = &snapshot.node;
                node.memory_capacity
                    .saturating_sub(node.memory_reserved)
                    .as_i64()
            })
            .max(0);

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
                .filter_map(|c| c.memory_request)
                .map(Bytes::as_i64)
                .sum();
            // The pod limit sums the containers that have one; none: unlimited.
            let limits: Vec<i64> = pod
                .containers
                .iter()
                .filter_map(|c| c.memory_limit)
                .map(Bytes::as_i64)
                .filter(|l| *l > 0)
                .collect();
            let pod_limit = (!limits.is_empty()).then(|| limits.iter().sum());
            if let Some(p) = qos.min_limit_percent {
                *tier_min.entry(pod.kube_qos).or_default() += pod_request * p / 100;
            }
            if let Some(p) = qos.low_limit_percent {
                *tier_low.entry(pod.kube_qos).or_default() += pod_request * p / 100;
            }
            let mut pod_knobs = Knobs::common(&qos);
            pod_knobs.protect(&qos, pod_request);
            pod_knobs.page_cache(&qos, pod_limit);
            planned.push((pod.cgroup_dir.clone(), pod_knobs));
            for container in &pod.containers {
                let Some(dir) = &container.cgroup_dir else {
                    continue;
                };
                let request = container.memory_request.map_or(0, Bytes::as_i64);
                let mut knobs = Knobs::common(&qos);
                knobs.protect(&qos, request);
                knobs.high = container_high(
                    &qos,
                    request,
                    container.memory_limit.map(Bytes::as_i64),
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
            // Upstream leaves a tier alone when its class has no config.
            let Some(config) = tier_config(strategy, tier) else {
                continue;
            };
            let qos = effective_memory_qos(Some(config)).unwrap_or_default();
            let mut knobs = Knobs {
                priority: qos.priority,
                use_priority_oom: qos.priority_enable,
                oom_group: qos.oom_kill_group,
                ..Knobs::default()
            };
            let sum = |sums: &HashMap<QosTier, i64>| match tier {
                QosTier::Guaranteed if !sums.is_empty() => Some(sums.values().sum()),
                _ => sums.get(&tier).copied(),
            };
            knobs.min = sum(&tier_min);
            knobs.low = sum(&tier_low);
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
            let names: Vec<String> = unsupported
                .keys()
                .map(|file| format!("{} ({file})", memory_qos_setting(file)))
                .collect();
            decision.unsupported = unsupported
                .iter()
                .map(|(file, cgroups)| UnsupportedSetting {
                    strategy: NAME,
                    setting: memory_qos_setting(file).to_string(),
                    file: file.to_string(),
                    cgroups: *cgroups,
                })
                .collect();
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
    use crate::qosmanager::framework::testing::{DecideFresh, assert_deterministic};
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
                cpu_request: None,
                cpu_limit: None,
                memory_request: Some(Bytes::from_i64_or_zero(request)),
                memory_limit: limit.map(Bytes::from_i64_or_zero),
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
        snapshot.node.memory_capacity = Bytes(16 * GIB as u64);
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
        // Decided twice on the same inputs: the same writes (the strategy is pure).
        let decision = assert_deterministic(&CgroupReconcile, &snapshot, &()).0;
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
    fn unlimited_container_high_uses_capacity_minus_reserved_and_never_below_zero() {
        let mut snapshot = snapshot(true);
        snapshot.pods = vec![pod("ls", QoSClass::LS, QosTier::Burstable, GIB, None)];
        let container = PathBuf::from("kubepods/burstable/poduid-ls/c1");
        let high = |snapshot: &QosSnapshot| {
            CgroupReconcile
                .decide_fresh(snapshot)
                .write_for(&container, CgroupResource::MemoryHigh)
                .cloned()
        };
        // No allocatable in the Node: capacity 16 GiB - reserved 4 GiB.
        snapshot.node.memory_reserved = Bytes(4 * GIB as u64);
        let ceiling = 12 * GIB;
        assert_eq!(
            high(&snapshot),
            Some(CgroupValue::Int(
                (GIB + (ceiling - GIB) * 80 / 100) / PAGE_SIZE * PAGE_SIZE
            ))
        );
        // Reserved above capacity: the ceiling is 0 (never negative), so high
        // is 1 GiB - 80% of it, then raised to memory.min (1 GiB).
        snapshot.node.memory_reserved = Bytes(32 * GIB as u64);
        assert_eq!(high(&snapshot), Some(CgroupValue::Int(GIB)));
    }

    #[test]
    fn unsupported_files_are_skipped_and_named() {
        // The test capabilities have no memory QoS files (like this CI kernel).
        let decision = CgroupReconcile.decide_fresh(&snapshot(false));
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
        let decision = CgroupReconcile.decide_fresh(&snapshot);
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
        let decision = CgroupReconcile.decide_fresh(&snapshot);
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
        let decision = CgroupReconcile.decide_fresh(&snapshot);
        assert!(decision.is_skipped());
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("resourceQOSStrategy")
        );
    }

    /// Upstream's page cache limit table (pod with 1 GiB request and limit):
    /// (case, memoryQOS, enable, size, sync).
    #[test]
    fn page_cache_limit_follows_upstream_table() {
        const MIB: i64 = 1 << 20;
        type Case = (
            &'static str,
            MemoryQOS,
            Option<i64>,
            Option<i64>,
            Option<i64>,
        );
        let cases: Vec<Case> = vec![
            (
                "size only",
                MemoryQOS {
                    page_cache_limit_size: Some(512 * MIB),
                    ..Default::default()
                },
                Some(1),
                Some(512 * MIB),
                Some(0),
            ),
            (
                "size capped by memory limit",
                MemoryQOS {
                    page_cache_limit_size: Some(2 * GIB),
                    ..Default::default()
                },
                Some(1),
                Some(GIB),
                Some(0),
            ),
            (
                "size zero resets",
                MemoryQOS {
                    page_cache_limit_size: Some(0),
                    ..Default::default()
                },
                Some(0),
                Some(0),
                None,
            ),
            ("unset does nothing", MemoryQOS::default(), None, None, None),
            (
                "explicit enable overrides implicit enable, keeps size",
                MemoryQOS {
                    page_cache_limit_size: Some(512 * MIB),
                    page_cache_enable: Some(false),
                    ..Default::default()
                },
                Some(0),
                Some(512 * MIB),
                Some(0),
            ),
            (
                "explicit enable alone toggles switch",
                MemoryQOS {
                    page_cache_enable: Some(true),
                    ..Default::default()
                },
                Some(1),
                None,
                None,
            ),
            (
                "sync reclaim mode",
                MemoryQOS {
                    page_cache_limit_size: Some(512 * MIB),
                    page_cache_reclaim_sync: Some(true),
                    ..Default::default()
                },
                Some(1),
                Some(512 * MIB),
                Some(1),
            ),
            (
                "legacy percent field",
                MemoryQOS {
                    page_cache_limit_percent: Some(50),
                    ..Default::default()
                },
                Some(1),
                Some(GIB / 2),
                Some(0),
            ),
            (
                "size takes precedence over percent",
                MemoryQOS {
                    page_cache_limit_percent: Some(50),
                    page_cache_limit_size: Some(256 * MIB),
                    ..Default::default()
                },
                Some(1),
                Some(256 * MIB),
                Some(0),
            ),
        ];
        for (name, qos, enable, size, sync) in cases {
            let mut knobs = Knobs::default();
            knobs.page_cache(&qos, Some(GIB));
            assert_eq!(
                (
                    knobs.pagecache_enable,
                    knobs.pagecache_size,
                    knobs.pagecache_sync
                ),
                (enable, size, sync),
                "{name}"
            );
        }
        // Percent of an unlimited pod: nothing; a size stays as given.
        let mut knobs = Knobs::default();
        knobs.page_cache(
            &MemoryQOS {
                page_cache_limit_percent: Some(50),
                ..Default::default()
            },
            None,
        );
        assert_eq!(knobs, Knobs::default());
        knobs.page_cache(
            &MemoryQOS {
                page_cache_limit_size: Some(3 * GIB),
                ..Default::default()
            },
            None,
        );
        assert_eq!(knobs.pagecache_size, Some(3 * GIB));
    }

    #[test]
    fn page_cache_limit_is_written_on_the_pod_only() {
        let mut snapshot = snapshot(true);
        let mut caps = (*snapshot.capabilities).clone();
        caps.memory_qos.pagecache_limit_enable = true;
        caps.memory_qos.pagecache_limit_size = true;
        caps.memory_qos.pagecache_limit_sync = true;
        snapshot.capabilities = Arc::new(caps);
        let mut spec = (*snapshot.node_slo.clone().unwrap()).clone();
        let ls = spec
            .resource_qos_strategy
            .as_mut()
            .unwrap()
            .ls_class
            .as_mut()
            .unwrap()
            .memory_qos
            .as_mut()
            .unwrap();
        ls.memory_qos.page_cache_limit_percent = Some(25);
        snapshot.node_slo = Some(Arc::new(spec));
        let decision = CgroupReconcile.decide_fresh(&snapshot);
        let pod_dir = PathBuf::from("kubepods/burstable/poduid-ls");
        // 25 % of the 2 GiB limit.
        assert_eq!(
            decision.write_for(&pod_dir, CgroupResource::MemoryPagecacheLimitSize),
            Some(&CgroupValue::Int(GIB / 2))
        );
        assert_eq!(
            decision.write_for(&pod_dir, CgroupResource::MemoryPagecacheLimitEnable),
            Some(&CgroupValue::Int(1))
        );
        assert_eq!(
            decision.write_for(
                &pod_dir.join("c1"),
                CgroupResource::MemoryPagecacheLimitSize
            ),
            None
        );
    }

    #[test]
    fn tiers_sum_their_own_pods_and_the_root_sums_all() {
        let mut snapshot = snapshot(true);
        let mut spec = (*snapshot.node_slo.clone().unwrap()).clone();
        let be = spec
            .resource_qos_strategy
            .as_mut()
            .unwrap()
            .be_class
            .as_mut()
            .unwrap()
            .memory_qos
            .as_mut()
            .unwrap();
        be.memory_qos.min_limit_percent = Some(50);
        be.memory_qos.low_limit_percent = Some(0);
        snapshot.node_slo = Some(Arc::new(spec));
        snapshot.pods[1] = pod("be", QoSClass::BE, QosTier::BestEffort, GIB, None);
        let decision = CgroupReconcile.decide_fresh(&snapshot);
        let get = |dir: &str, r| decision.write_for(Path::new(dir), r).cloned();
        // LS: 100 % of 1 GiB; BE: 50 % of 1 GiB.
        assert_eq!(
            get("kubepods/burstable", CgroupResource::MemoryMin),
            Some(CgroupValue::Int(GIB))
        );
        assert_eq!(
            get("kubepods/besteffort", CgroupResource::MemoryMin),
            Some(CgroupValue::Int(GIB / 2))
        );
        assert_eq!(
            get("kubepods", CgroupResource::MemoryMin),
            Some(CgroupValue::Int(GIB + GIB / 2))
        );
        // low: LS 50 %, BE 0 %.
        assert_eq!(
            get("kubepods/besteffort", CgroupResource::MemoryLow),
            Some(CgroupValue::Int(0))
        );
        assert_eq!(
            get("kubepods", CgroupResource::MemoryLow),
            Some(CgroupValue::Int(GIB / 2))
        );
    }

    #[test]
    fn container_high_is_raised_to_min_and_uses_node_allocatable() {
        let mut snapshot = snapshot(true);
        // 5000 bytes page-aligned down is 4096 < min (100 % = 5000).
        snapshot.pods = vec![pod(
            "ls",
            QoSClass::LS,
            QosTier::Burstable,
            5000,
            Some(5000),
        )];
        let decision = CgroupReconcile.decide_fresh(&snapshot);
        let container = PathBuf::from("kubepods/burstable/poduid-ls/c1");
        assert_eq!(
            decision.write_for(&container, CgroupResource::MemoryHigh),
            Some(&CgroupValue::Int(5000))
        );
        // Unlimited: measured against the Node's allocatable memory when known.
        snapshot.pods = vec![pod("ls", QoSClass::LS, QosTier::Burstable, GIB, None)];
        snapshot.node.allocatable.insert("memory".into(), 8 * GIB);
        let decision = CgroupReconcile.decide_fresh(&snapshot);
        let high = (GIB + 7 * GIB * 80 / 100) / PAGE_SIZE * PAGE_SIZE;
        assert_eq!(
            decision.write_for(&container, CgroupResource::MemoryHigh),
            Some(&CgroupValue::Int(high))
        );
    }

    #[test]
    fn unsupported_settings_are_listed_by_name_with_their_files() {
        let mut snapshot = snapshot(true);
        let mut caps = (*snapshot.capabilities).clone();
        caps.memory_qos.high = false;
        snapshot.capabilities = Arc::new(caps);
        let decision = CgroupReconcile.decide_fresh(&snapshot);
        assert!(
            !decision.writes.is_empty(),
            "the supported files are still written"
        );
        let high = decision
            .unsupported
            .iter()
            .find(|u| u.file == "memory.high")
            .unwrap();
        assert_eq!(high.setting, "throttlingPercent");
        assert_eq!(high.cgroups, 1, "one LS container");
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("throttlingPercent (memory.high)")),
            "{:?}",
            decision.notes
        );
        assert!(
            decision
                .writes
                .iter()
                .all(|w| w.resource != CgroupResource::MemoryHigh)
        );
    }
}
