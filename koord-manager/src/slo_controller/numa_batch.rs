//! NUMA-level batch resources (upstream `noderesource/plugins/batchresource`,
//! its NodeResourceTopology part): besides the node's `kubernetes.io/batch-cpu`
//! and `batch-memory`, the BatchResource plugin writes the same two resources
//! into every zone of the node's NodeResourceTopology (the `topology.node.k8s.io`
//! object koordlet reports, one zone per NUMA node).
//!
//! Pure. [`calculate_zones`] divides the node's inputs among the zones and runs
//! the node's batch formula per zone; [`zone_update`] decides whether the
//! object's zones need a write and returns them.
//!
//! Upstream's rules, per zone (NUMA-level metrics are not reported, so the
//! node's are divided):
//! - capacity: the zone's own `cpu` / `memory` allocatable; the safety margin
//!   and the `batch*ThresholdPercent` caps apply to it;
//! - the node's reservation, its system usage (with host applications ranked
//!   above batch) and the usage of pods the NodeMetric reports but the pod
//!   list lacks are divided evenly among the zones (rounded up);
//! - a high-priority pod bound to NUMA nodes (the `numaNodeResources` of its
//!   `scheduling.koordinator.sh/resource-status`) counts evenly on those
//!   zones only; any other pod evenly on every zone;
//! - the batch CPU written is scaled by the CPU normalization ratio the
//!   CPUNormalization plugin computed in the same pass, when above 1;
//! - capacity, allocatable and available of each zone resource all carry
//!   the value.
//!
//! The zones are left as they are when the node has no NodeResourceTopology,
//! when none of its zones has `cpu` or `memory`, and when the node's batch
//! resources are withdrawn (colocation off, degraded NodeMetric).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, SystemTime};

use apis::configuration::ColocationStrategy;
use apis::extension::{BATCH_CPU, BATCH_MEMORY, QoSClass, RESOURCE_CPU, RESOURCE_MEMORY};
use apis::topology::v1alpha1::{ResourceInfo, Zone};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::batch_formula::{
    BatchTerms, MetricView, batch_by_policy, complete, is_low_priority, safety_margin,
};
use super::node_meta::NodeMetaPlan;
use super::resources::{
    CpuMem, InputError, PodSummary, bytes_quantity, is_resource_diff, units_decimal_quantity,
};

/// The zone resources written, in the order upstream sorts them.
pub const ZONE_BATCH_RESOURCES: [&str; 2] = [BATCH_CPU, BATCH_MEMORY];

/// The most zones a NodeResourceTopology may have for the calculation: the
/// Linux kernel's largest NUMA node count (`NODES_SHIFT` 10). Every pod is
/// divided among the zones, so more would only cost time.
pub const MAX_ZONES: usize = 1024;

/// Why the zones are untouched: the node has no NodeResourceTopology.
pub const ZONES_UNTOUCHED_NO_TOPOLOGY: &str = "no NodeResourceTopology";
/// Why the zones are untouched: no zone has `cpu` or `memory`.
pub const ZONES_UNTOUCHED_NO_RESOURCES: &str =
    "no zone of the NodeResourceTopology has cpu or memory";
/// Why the zones are untouched: the node's batch resources are withdrawn.
pub const ZONES_UNTOUCHED_WITHDRAWN: &str =
    "batch resources withdrawn: the zones are left as they are";
/// Why the zones are untouched: `--noderesource-plugins` leaves BatchResource out.
pub const ZONES_UNTOUCHED_PLUGIN_OFF: &str = "BatchResource plugin not enabled";

/// The batch amounts of one zone.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneAmount {
    /// The zone's name, e.g. `node-0`.
    pub zone: String,
    /// Batch CPU in milli-cores (before CPU normalization) and batch memory.
    pub batch: CpuMem,
    /// The formula that produced it.
    pub reason: String,
}

/// The NUMA-level batch resources of a node, or why there are none.
#[derive(Clone, Debug, PartialEq)]
pub enum ZoneBatch {
    /// The zones are left as they are, for this reason.
    Untouched(String),
    /// One amount per zone, in the object's zone order.
    Zones(Vec<ZoneAmount>),
    /// An amount of the NodeResourceTopology cannot be read exactly (or a
    /// zone name repeats): the zones are left as they are.
    Refused(InputError),
}

/// Upstream `isNRTResourcesCreated`: some zone has a `cpu` or `memory` resource.
pub fn has_cpu_or_memory(zones: &[Zone]) -> bool {
    zones.iter().any(|zone| {
        zone.resources
            .iter()
            .flatten()
            .any(|info| info.name == RESOURCE_CPU || info.name == RESOURCE_MEMORY)
    })
}

/// `amount / parts` per resource, rounded up (upstream `DivideResourceList`).
fn spread(amount: CpuMem, parts: usize) -> CpuMem {
    let parts = i64::try_from(parts.max(1)).unwrap_or(i64::MAX);
    let divide = |value: i64| {
        let quotient = value / parts;
        if value % parts > 0 {
            quotient + 1
        } else {
            quotient
        }
    };
    CpuMem::new(divide(amount.milli_cpu), divide(amount.memory_bytes))
}

/// The zone a NUMA node id belongs to. When every zone is named `node-<id>`
/// (koordlet's names) the name decides; otherwise the id is the zone's
/// position, as upstream reads it. The two agree for up to ten NUMA nodes;
/// beyond, koordlet's name order (`node-10` before `node-2`) would put
/// positions and ids apart.
struct ZoneIndex {
    by_id: HashMap<i32, usize>,
    count: usize,
}

impl ZoneIndex {
    fn new(zones: &[Zone]) -> Self {
        let by_name: Option<HashMap<i32, usize>> = zones
            .iter()
            .enumerate()
            .map(|(index, zone)| {
                let id = zone.name.strip_prefix("node-")?.parse::<i32>().ok()?;
                (id >= 0).then_some((id, index))
            })
            .collect();
        let by_id = match by_name {
            Some(map) if map.len() == zones.len() => map,
            _ => (0..zones.len())
                .filter_map(|index| Some((i32::try_from(index).ok()?, index)))
                .collect(),
        };
        ZoneIndex {
            by_id,
            count: zones.len(),
        }
    }

    /// The zones a pod bound to `numa_nodes` counts on (every zone when it
    /// names none that exists, as upstream ignores invalid ids).
    fn zones_of(&self, numa_nodes: &[i32]) -> Vec<usize> {
        let mut zones: Vec<usize> = numa_nodes
            .iter()
            .filter_map(|id| self.by_id.get(id).copied())
            .collect();
        zones.sort_unstable();
        zones.dedup();
        if zones.is_empty() {
            zones.extend(0..self.count);
        }
        zones
    }
}

/// The `cpu` and `memory` allocatable of a zone (absent: 0).
fn zone_allocatable(zone: &Zone, object: &str, index: usize) -> Result<CpuMem, InputError> {
    let mut list = BTreeMap::new();
    for info in zone.resources.iter().flatten() {
        if (info.name == RESOURCE_CPU || info.name == RESOURCE_MEMORY)
            && !list.contains_key(&info.name)
        {
            list.insert(info.name.clone(), info.allocatable.clone());
        }
    }
    CpuMem::read(&list, || {
        (
            object.to_owned(),
            format!("zones[{index}]({}).resources.allocatable", zone.name),
        )
    })
}

/// Per-zone sums of the high-priority pods.
#[derive(Clone, Copy, Default)]
struct ZoneSums {
    request: CpuMem,
    used: CpuMem,
    max_used_request: CpuMem,
}

/// The NUMA-level batch amounts of a node (see the module docs). `strategy`
/// is the node's complete strategy, `node_reserved` the node's reservation,
/// `usage` its NodeMetric as the node-level formula read it.
pub(crate) fn calculate_zones(
    strategy: &ColocationStrategy,
    pods: &[PodSummary],
    zones: Option<&[Zone]>,
    node_reserved: CpuMem,
    usage: &MetricView,
) -> ZoneBatch {
    let Some(zones) = zones else {
        return ZoneBatch::Untouched(ZONES_UNTOUCHED_NO_TOPOLOGY.to_owned());
    };
    if !has_cpu_or_memory(zones) {
        return ZoneBatch::Untouched(ZONES_UNTOUCHED_NO_RESOURCES.to_owned());
    }
    match split(strategy, pods, zones, node_reserved, usage) {
        Ok(amounts) => ZoneBatch::Zones(amounts),
        Err(error) => ZoneBatch::Refused(error),
    }
}

fn split(
    strategy: &ColocationStrategy,
    pods: &[PodSummary],
    zones: &[Zone],
    node_reserved: CpuMem,
    usage: &MetricView,
) -> Result<Vec<ZoneAmount>, InputError> {
    let object = format!(
        "NodeResourceTopology {}",
        usage
            .object
            .strip_prefix("NodeMetric ")
            .unwrap_or(&usage.object)
    );
    if zones.len() > MAX_ZONES {
        return Err(InputError::new(
            &object,
            "zones",
            format!("{} zones, more than {MAX_ZONES}", zones.len()),
        ));
    }
    let mut names = HashSet::new();
    for zone in zones {
        if !names.insert(zone.name.as_str()) {
            return Err(InputError::new(
                &object,
                "zones",
                format!("zone {:?} appears more than once", zone.name),
            ));
        }
    }
    let count = zones.len();
    let index = ZoneIndex::new(zones);
    let mut sums = vec![ZoneSums::default(); count];
    let add = |total: CpuMem, amount: CpuMem| {
        total.try_plus(amount, || {
            (
                usage.object.clone(),
                "high-priority pod amounts of a NUMA zone".to_owned(),
            )
        })
    };

    let mut matched = HashSet::new();
    for pod in pods.iter().filter(|pod| pod.active) {
        let metric = usage.pods.get(pod.key.as_str());
        if metric.is_some() {
            matched.insert(pod.key.as_str());
        }
        if is_low_priority(pod.priority) {
            continue;
        }
        let request = pod.request.clone()?;
        let targets = index.zones_of(&pod.numa_nodes);
        let zone_request = spread(request, targets.len());
        let zone_used = metric.map(|(used, _)| spread(*used, targets.len()));
        for &zone in &targets {
            let sum = &mut sums[zone];
            sum.request = add(sum.request, zone_request)?;
            match zone_used {
                // Without a metric the request stands for the usage.
                None => {
                    sum.used = add(sum.used, zone_request)?;
                    sum.max_used_request = add(sum.max_used_request, zone_request)?;
                }
                Some(used) => {
                    // LSE pods own their cores: their CPU request counts.
                    let counted = if pod.qos == QoSClass::LSE {
                        CpuMem::new(zone_request.milli_cpu, used.memory_bytes)
                    } else {
                        used
                    };
                    sum.used = add(sum.used, counted)?;
                    sum.max_used_request = add(sum.max_used_request, used.max(zone_request))?;
                }
            }
        }
    }
    // Pods the NodeMetric reports but the pod list lacks: on every zone.
    let mut unknown = CpuMem::ZERO;
    for (_, (used, _)) in usage.pods.iter().filter(|(key, (_, priority))| {
        !matched.contains(key.as_str()) && !is_low_priority(*priority)
    }) {
        unknown = add(unknown, *used)?;
    }
    let unknown = spread(unknown, count);
    let reserved = spread(node_reserved, count);
    let system_used = spread(
        usage.system_used(apis::extension::PriorityClass::Batch)?,
        count,
    );

    let mut amounts = Vec::with_capacity(count);
    for (position, (zone, sum)) in zones.iter().zip(&sums).enumerate() {
        let capacity = zone_allocatable(zone, &object, position)?;
        let terms = BatchTerms {
            capacity,
            margin: safety_margin(strategy, capacity),
            reserved,
            system_used,
            hp_request: sum.request,
            hp_used: add(sum.used, unknown)?,
            hp_max_used_request: add(sum.max_used_request, unknown)?,
        };
        let (batch, reason) = batch_by_policy(strategy, &terms);
        amounts.push(ZoneAmount {
            zone: zone.name.clone(),
            batch,
            reason,
        });
    }
    Ok(amounts)
}

/// The CPU normalization ratio the zones' batch CPU is scaled by: the one
/// the CPUNormalization plugin computed in this pass (upstream reads it from
/// the pass's results, not from the node), `None` when it did not run or
/// failed.
pub fn normalization_ratio(meta: &NodeMetaPlan) -> Option<f64> {
    let outcome = &meta.cpu_normalization;
    if !outcome.ran || outcome.error.is_some() {
        return None;
    }
    outcome.after.as_deref()?.trim().parse::<f64>().ok()
}

/// The quantities written into one zone.
pub type ZoneQuantities = BTreeMap<&'static str, Quantity>;

/// Each zone's `batch-cpu` (milli-cores counted as whole units, scaled by
/// `ratio` when above 1) and `batch-memory` (bytes), by zone name.
pub fn zone_quantities(
    amounts: &[ZoneAmount],
    ratio: Option<f64>,
) -> Vec<(String, ZoneQuantities)> {
    amounts
        .iter()
        .map(|amount| {
            let mut milli_cpu = amount.batch.milli_cpu;
            if let Some(ratio) = ratio.filter(|ratio| *ratio > 1.0) {
                milli_cpu = super::resources::scale(milli_cpu, ratio);
            }
            (
                amount.zone.clone(),
                BTreeMap::from([
                    (BATCH_CPU, units_decimal_quantity(milli_cpu.max(0))),
                    (
                        BATCH_MEMORY,
                        bytes_quantity(amount.batch.memory_bytes.max(0)),
                    ),
                ]),
            )
        })
        .collect()
}

/// A write of the NodeResourceTopology's zones.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneWrite {
    /// The whole zone list to write (other resources and zones as they are).
    pub zones: Vec<Zone>,
    /// Why, for the log.
    pub reason: String,
}

fn zero() -> Quantity {
    Quantity("0".to_owned())
}

/// Whether to write the zones, and what. `current` is the object's zone
/// list, `desired` the quantities of [`zone_quantities`], `last_synced` when
/// this process last wrote the zones.
///
/// As upstream: a write is due when a batch resource is missing from a zone,
/// when capacity, allocatable or available moves by more than
/// `resourceDiffThreshold` of its current value, and when a zone the
/// calculation did not cover still carries non-zero batch resources (they
/// are set to 0). Beyond upstream, whose time-based update sends the
/// object back unchanged, values that differ only within the threshold are
/// written once the last write is older than `updateTimeThresholdSeconds`
/// (or this process has not written them yet). Every write carries the
/// exact values in all three fields.
pub fn zone_update(
    strategy: Option<&ColocationStrategy>,
    current: &[Zone],
    desired: &[(String, ZoneQuantities)],
    last_synced: Option<SystemTime>,
    now: SystemTime,
) -> Option<ZoneWrite> {
    let strategy = complete(strategy.unwrap_or(&ColocationStrategy::default()));
    let threshold = strategy.resource_diff_threshold.unwrap_or(0.1);
    let period = Duration::from_secs(
        u64::try_from(strategy.update_time_threshold_seconds.unwrap_or(300)).unwrap_or(0),
    );
    let expired =
        last_synced.is_none_or(|last| now.duration_since(last).unwrap_or_default() > period);
    let desired: HashMap<&str, &ZoneQuantities> = desired
        .iter()
        .map(|(zone, quantities)| (zone.as_str(), quantities))
        .collect();

    let mut due: Option<String> = None;
    let mut differs = false;
    let mut zones = current.to_vec();
    for zone in &mut zones {
        match desired.get(zone.name.as_str()) {
            None => {
                for info in zone
                    .resources
                    .iter_mut()
                    .flatten()
                    .filter(|info| ZONE_BATCH_RESOURCES.contains(&info.name.as_str()))
                {
                    let is_zero = |q: &Quantity| !is_resource_diff(Some(q), Some(&zero()), 0.0);
                    if is_zero(&info.capacity)
                        && is_zero(&info.allocatable)
                        && is_zero(&info.available)
                    {
                        continue;
                    }
                    due.get_or_insert_with(|| {
                        format!(
                            "zone {}: {} reset (zone not calculated)",
                            zone.name, info.name
                        )
                    });
                    info.capacity = zero();
                    info.allocatable = zero();
                    info.available = zero();
                }
            }
            Some(quantities) => {
                let resources = zone.resources.get_or_insert_with(Vec::new);
                for (name, quantity) in quantities.iter() {
                    match resources.iter_mut().find(|info| info.name == *name) {
                        Some(info) => {
                            for field in [
                                &mut info.capacity,
                                &mut info.allocatable,
                                &mut info.available,
                            ] {
                                if is_resource_diff(Some(field), Some(quantity), threshold) {
                                    due.get_or_insert_with(|| {
                                        format!(
                                            "zone {}: {name} changed beyond resourceDiffThreshold={threshold}",
                                            zone.name
                                        )
                                    });
                                }
                                differs |= is_resource_diff(Some(field), Some(quantity), 0.0);
                                *field = quantity.clone();
                            }
                        }
                        None => {
                            due.get_or_insert_with(|| format!("zone {}: {name} added", zone.name));
                            resources.push(ResourceInfo {
                                name: (*name).to_owned(),
                                capacity: quantity.clone(),
                                allocatable: quantity.clone(),
                                available: quantity.clone(),
                            });
                            // Upstream keeps a zone's resources sorted by name.
                            resources.sort_by(|a, b| a.name.cmp(&b.name));
                        }
                    }
                }
            }
        }
    }
    let reason = match due {
        Some(reason) => reason,
        None if differs && expired => format!(
            "values within resourceDiffThreshold, last write older than updateTimeThresholdSeconds={}",
            period.as_secs()
        ),
        None => return None,
    };
    Some(ZoneWrite { zones, reason })
}

/// The JSON merge patch of the NodeResourceTopology for a [`ZoneWrite`]:
/// the whole zone list (a merge patch replaces lists), guarded by the
/// object's `resourceVersion` so a concurrent koordlet update makes it fail
/// with a conflict instead of being overwritten.
pub fn zones_patch(write: &ZoneWrite, resource_version: Option<&str>) -> serde_json::Value {
    let mut patch = serde_json::json!({ "zones": write.zones });
    if let Some(version) = resource_version {
        patch["metadata"] = serde_json::json!({ "resourceVersion": version });
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slo_controller::noderesource::{self, NodeInputs};
    use apis::slo::v1alpha1::NodeMetric;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::{Value, json};

    const NOW: &str = "2024-05-01T10:00:00Z";

    fn now() -> SystemTime {
        SystemTime::from(NOW.parse::<k8s_openapi::jiff::Timestamp>().unwrap())
    }

    /// A zone as koordlet reports it, with optional batch resources.
    fn zone(name: &str, resources: &[(&str, &str)]) -> Zone {
        Zone {
            name: name.to_owned(),
            type_: "Node".to_owned(),
            resources: Some(
                resources
                    .iter()
                    .map(|(resource, amount)| ResourceInfo {
                        name: (*resource).to_owned(),
                        capacity: Quantity((*amount).to_owned()),
                        allocatable: Quantity((*amount).to_owned()),
                        available: Quantity((*amount).to_owned()),
                    })
                    .collect(),
            ),
            ..Zone::default()
        }
    }

    fn node(cpu: &str, memory: &str) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "test-node1"},
            "status": {
                "capacity": {"cpu": cpu, "memory": memory},
                "allocatable": {"cpu": cpu, "memory": memory},
            }
        }))
        .unwrap()
    }

    /// A pod of upstream's tables: `qos` label, priority value, NUMA
    /// binding, phase and one container per `(cpu, memory)` request.
    fn pod(
        name: &str,
        qos: Option<&str>,
        priority: Option<i32>,
        numa: Option<&str>,
        phase: &str,
        containers: &[(&str, &str)],
    ) -> Pod {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "test", "labels": {}, "annotations": {}},
            "spec": {"nodeName": "test-node1", "containers": containers.iter().map(|(cpu, memory)| json!({
                "name": "c",
                "resources": {"requests": {"cpu": cpu, "memory": memory},
                              "limits": {"cpu": cpu, "memory": memory}},
            })).collect::<Vec<Value>>()},
            "status": {"phase": phase},
        });
        if let Some(qos) = qos {
            value["metadata"]["labels"]["koordinator.sh/qosClass"] = json!(qos);
        }
        if let Some(priority) = priority {
            value["spec"]["priority"] = json!(priority);
        }
        if let Some(numa) = numa {
            value["metadata"]["annotations"]["scheduling.koordinator.sh/resource-status"] =
                json!(numa);
        }
        serde_json::from_value(value).unwrap()
    }

    fn metric(pods: &[(&str, &str, &str, Option<&str>)]) -> NodeMetric {
        let pods: Vec<Value> = pods
            .iter()
            .map(|(name, cpu, memory, priority)| {
                let mut entry = json!({"namespace": "test", "name": name,
                    "podUsage": {"resources": {"cpu": cpu, "memory": memory}}});
                if let Some(priority) = priority {
                    entry["priority"] = json!(priority);
                }
                entry
            })
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
            "metadata": {"name": "test-node1"},
            "spec": {},
            "status": {
                "updateTime": NOW,
                "nodeMetric": {
                    "nodeUsage": {"resources": {"cpu": "50", "memory": "55G"}},
                    "systemUsage": {"resources": {"cpu": "7", "memory": "12G"}},
                },
                "podsMetric": pods,
            }
        }))
        .unwrap()
    }

    const NUMA0: &str = r#"{"numaNodeResources": [{"node": 0}]}"#;
    const LSE_NUMA0: &str = r#"{"cpuset": "2-5,10-13", "numaNodeResources": [{"node": 0}]}"#;
    const PROD_MAX: i32 = 9999;
    const MID_MIN: i32 = 7000;

    /// Upstream's pod list: an LS prod pod (optionally an LSE one bound to
    /// NUMA 0), a prod pod without QoS label, a BE pod, a mid pod with two
    /// containers (pending) and a succeeded prod pod.
    fn pods(first: Pod) -> Vec<Pod> {
        vec![
            first,
            pod(
                "podProd1",
                None,
                Some(PROD_MAX),
                None,
                "Running",
                &[("10", "10G")],
            ),
            pod(
                "podBatch",
                Some("BE"),
                None,
                None,
                "Running",
                &[("10", "10G")],
            ),
            pod(
                "podMid",
                Some("BE"),
                Some(MID_MIN),
                None,
                "Pending",
                &[("10", "20G"), ("10", "20G")],
            ),
            pod("podProd2", None, None, None, "Succeeded", &[("10", "10G")]),
        ]
    }

    fn strategy(memory_by_request: bool) -> ColocationStrategy {
        let mut text = json!({
            "enable": true,
            "cpuReclaimThresholdPercent": 65,
            "memoryReclaimThresholdPercent": 65,
            "degradeTimeMinutes": 15,
            "updateTimeThresholdSeconds": 300,
            "resourceDiffThreshold": 0.1,
        });
        if memory_by_request {
            text["memoryCalculatePolicy"] = json!("request");
        }
        serde_json::from_value(text).unwrap()
    }

    fn two_zones() -> Vec<Zone> {
        vec![
            zone("node-0", &[("cpu", "50"), ("memory", "62G")]),
            zone("node-1", &[("cpu", "50"), ("memory", "58G")]),
        ]
    }

    /// Runs the node resource calculation with the topology and returns the
    /// zone amounts as (zone, milli-cpu, memory bytes).
    fn zone_amounts(
        strategy: &ColocationStrategy,
        pods: &[Pod],
        metric: &NodeMetric,
        zones: Option<&[Zone]>,
    ) -> (CpuMem, ZoneBatch) {
        let summaries: Vec<PodSummary> = pods.iter().map(PodSummary::of).collect();
        let node = node("100", "120G");
        let resources = noderesource::calculate(
            true,
            Some(strategy),
            NodeInputs {
                node: &node,
                node_metric: Some(metric),
                pods: &summaries,
                topology_zones: zones,
            },
            now(),
        )
        .unwrap();
        (resources.batch, resources.zones)
    }

    fn amounts(batch: &ZoneBatch) -> Vec<(&str, i64, i64)> {
        match batch {
            ZoneBatch::Zones(zones) => zones
                .iter()
                .map(|z| (z.zone.as_str(), z.batch.milli_cpu, z.batch.memory_bytes))
                .collect(),
            other => panic!("no zones: {other:?}"),
        }
    }

    const G: i64 = 1_000_000_000;
    const M: i64 = 1_000_000;

    /// Upstream's `TestPluginCalculate` NUMA cases: node-level and per-zone
    /// amounts for the same pods and metrics.
    #[test]
    fn upstream_numa_level_calculate_cases() {
        let ls_numa0 = pod(
            "podProd",
            Some("LS"),
            None,
            Some(NUMA0),
            "Running",
            &[("10", "10G")],
        );
        let ls = pod(
            "podProd",
            Some("LS"),
            None,
            None,
            "Running",
            &[("10", "10G")],
        );
        let lse_numa0 = pod(
            "podProdLSE",
            Some("LSE"),
            None,
            Some(LSE_NUMA0),
            "Running",
            &[("10", "10G")],
        );
        let usage_metric = |first: &str| {
            metric(&[
                (first, "5", "5G", None),
                ("podProd1", "6", "6G", None),
                ("podBatch", "10", "10G", None),
                ("podMid", "22", "22G", None),
            ])
        };
        // The LSE pod has no metric; podProd2 (succeeded, not counted as a
        // listed pod) and podProd3 are only in the NodeMetric.
        let dangling_metric = |extra: bool| {
            let mut entries = vec![
                ("podProd1", "6", "6G", Some("koord-prod")),
                ("podProd2", "2", "4G", Some("koord-prod")),
                ("podBatch", "10", "10G", Some("koord-batch")),
                ("podMid", "22", "22G", Some("koord-mid")),
            ];
            if extra {
                entries.push(("podProd3", "4", "8G", Some("koord-prod")));
                entries.push(("podBatch2", "8", "8G", Some("koord-batch")));
            }
            metric(&entries)
        };
        let one_zone = [zone("node-0", &[("cpu", "100"), ("memory", "120G")])];
        let two = two_zones();
        type Case<'a> = (
            &'a str,
            ColocationStrategy,
            Vec<Pod>,
            NodeMetric,
            &'a [Zone],
            CpuMem,
            Vec<(&'a str, i64, i64)>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "one NUMA zone: the node's amounts",
                strategy(false),
                pods(ls.clone()),
                usage_metric("podProd"),
                &one_zone,
                CpuMem::new(25_000, 33 * G),
                vec![("node-0", 25_000, 33 * G)],
            ),
            (
                // node-0: 50 - 17.5 - 3.5 - (3 + 11 + 5); node-1: 50 - 17.5 - 3.5 - 14
                "two NUMA zones, a prod pod bound to node-0",
                strategy(false),
                pods(ls_numa0),
                usage_metric("podProd"),
                &two,
                CpuMem::new(25_000, 33 * G),
                vec![
                    ("node-0", 10_000, 15_300 * M),
                    ("node-1", 15_000, 17_700 * M),
                ],
            ),
            (
                // An LSE pod counts its CPU request (10) on node-0; memory by
                // request: 62 - 21.7 - (25 + 10), 58 - 20.3 - 25.
                "memory by request, an LSE pod bound to node-0",
                strategy(true),
                pods(lse_numa0.clone()),
                usage_metric("podProdLSE"),
                &two,
                CpuMem::new(20_000, 18 * G),
                vec![("node-0", 5_000, 5_300 * M), ("node-1", 15_000, 12_700 * M)],
            ),
            (
                // node-0: 50 - 17.5 - 3.5 - (14 + 10 + 1); node-1: ... - (14 + 1)
                "an LSE pod without metric and a pod only in the NodeMetric",
                strategy(true),
                pods(lse_numa0.clone()),
                dangling_metric(false),
                &two,
                CpuMem::new(18_000, 18 * G),
                vec![("node-0", 4_000, 5_300 * M), ("node-1", 14_000, 12_700 * M)],
            ),
            (
                // Two more metric-only pods: the prod one (4) counts 2 per zone.
                "more pods only in the NodeMetric",
                strategy(true),
                pods(lse_numa0),
                dangling_metric(true),
                &two,
                CpuMem::new(14_000, 18 * G),
                vec![("node-0", 2_000, 5_300 * M), ("node-1", 12_000, 12_700 * M)],
            ),
        ];
        for (name, strategy, pods, metric, zones, node_want, zones_want) in cases {
            let (node_got, zones_got) = zone_amounts(&strategy, &pods, &metric, Some(zones));
            assert_eq!(node_got, node_want, "{name}: node level");
            assert_eq!(amounts(&zones_got), zones_want, "{name}: zones");
        }
    }

    #[test]
    fn zones_are_left_alone_without_a_topology_or_cpu_and_memory() {
        let pods = pods(pod(
            "podProd",
            Some("LS"),
            None,
            None,
            "Running",
            &[("1", "1G")],
        ));
        let metric = metric(&[]);
        let (_, batch) = zone_amounts(&strategy(false), &pods, &metric, None);
        assert_eq!(
            batch,
            ZoneBatch::Untouched(ZONES_UNTOUCHED_NO_TOPOLOGY.to_owned())
        );
        let bare = [
            zone("node-0", &[("hugepages-2Mi", "0")]),
            zone("node-1", &[]),
        ];
        let (_, batch) = zone_amounts(&strategy(false), &pods, &metric, Some(&bare));
        assert_eq!(
            batch,
            ZoneBatch::Untouched(ZONES_UNTOUCHED_NO_RESOURCES.to_owned())
        );
        // Withdrawn (colocation off): the zones are not computed.
        let summaries: Vec<PodSummary> = pods.iter().map(PodSummary::of).collect();
        let node = node("100", "120G");
        let zones = two_zones();
        let withdrawn = noderesource::calculate(
            false,
            Some(&strategy(false)),
            NodeInputs {
                node: &node,
                node_metric: Some(&metric),
                pods: &summaries,
                topology_zones: Some(&zones),
            },
            now(),
        )
        .unwrap();
        assert!(matches!(withdrawn.zones, ZoneBatch::Untouched(_)));
    }

    #[test]
    fn a_zone_amount_that_cannot_be_read_refuses_the_zones_only() {
        let pods = pods(pod(
            "podProd",
            Some("LS"),
            None,
            None,
            "Running",
            &[("1", "1G")],
        ));
        let metric = metric(&[]);
        for (zones, problem) in [
            (
                vec![zone("node-0", &[("cpu", "50"), ("memory", "-1G")])],
                "negative amount",
            ),
            (
                vec![zone("node-0", &[("cpu", "fifty")])],
                "invalid quantity",
            ),
            (
                vec![
                    zone("node-0", &[("cpu", "1")]),
                    zone("node-0", &[("cpu", "1")]),
                ],
                "appears more than once",
            ),
        ] {
            let (node_level, batch) = zone_amounts(&strategy(false), &pods, &metric, Some(&zones));
            assert!(node_level.milli_cpu > 0, "the node level is still computed");
            match batch {
                ZoneBatch::Refused(error) => {
                    assert_eq!(error.object, "NodeResourceTopology test-node1");
                    assert!(error.problem.contains(problem), "{error}");
                }
                other => panic!("{problem}: {other:?}"),
            }
        }
        let many: Vec<Zone> = (0..=MAX_ZONES)
            .map(|i| zone(&format!("node-{i}"), &[("cpu", "1")]))
            .collect();
        let (_, batch) = zone_amounts(&strategy(false), &pods, &metric, Some(&many));
        assert!(matches!(batch, ZoneBatch::Refused(e) if e.problem.contains("more than 1024")));
    }

    #[test]
    fn numa_ids_map_to_zone_names_and_otherwise_to_positions() {
        // Koordlet orders zones by name: node-10 comes before node-2.
        let names: Vec<Zone> = ["node-0", "node-1", "node-10", "node-11", "node-2"]
            .iter()
            .map(|name| zone(name, &[]))
            .collect();
        let index = ZoneIndex::new(&names);
        assert_eq!(index.zones_of(&[2]), [4]);
        assert_eq!(index.zones_of(&[10, 0]), [0, 2]);
        // Unknown or negative ids count as no binding: every zone.
        assert_eq!(index.zones_of(&[7, -1]), [0, 1, 2, 3, 4]);
        assert_eq!(index.zones_of(&[]), [0, 1, 2, 3, 4]);
        // Other names: upstream's positions.
        let other = [zone("socket-a", &[]), zone("socket-b", &[])];
        let index = ZoneIndex::new(&other);
        assert_eq!(index.zones_of(&[1]), [1]);
        assert_eq!(index.zones_of(&[2]), [0, 1]);
    }

    #[test]
    fn spreading_rounds_up_as_upstream_divides() {
        assert_eq!(
            spread(CpuMem::new(7000, 12 * G), 2),
            CpuMem::new(3500, 6 * G)
        );
        assert_eq!(spread(CpuMem::new(1000, 10), 3), CpuMem::new(334, 4));
        assert_eq!(spread(CpuMem::new(0, 0), 4), CpuMem::ZERO);
    }

    fn quantities(zones: &[(&str, &str, &str)]) -> Vec<(String, ZoneQuantities)> {
        zones
            .iter()
            .map(|(zone, cpu, memory)| {
                (
                    (*zone).to_owned(),
                    BTreeMap::from([
                        (BATCH_CPU, Quantity((*cpu).to_owned())),
                        (BATCH_MEMORY, Quantity((*memory).to_owned())),
                    ]),
                )
            })
            .collect()
    }

    fn batch_of(zones: &[Zone], zone: &str, resource: &str) -> Option<[String; 3]> {
        let zone = zones.iter().find(|z| z.name == zone)?;
        let info = zone
            .resources
            .as_ref()?
            .iter()
            .find(|i| i.name == resource)?;
        Some([
            info.capacity.0.clone(),
            info.allocatable.0.clone(),
            info.available.0.clone(),
        ])
    }

    /// Upstream's `TestPreUpdate` NRT cases, and when nothing is written.
    #[test]
    fn zone_update_decisions() {
        let threshold_strategy: ColocationStrategy =
            serde_json::from_value(json!({"resourceDiffThreshold": 0.1})).unwrap();
        let bare = vec![
            zone("node-0", &[("cpu", "50"), ("memory", "200Gi")]),
            zone("node-1", &[("cpu", "50"), ("memory", "180Gi")]),
        ];
        let written = vec![
            zone(
                "node-0",
                &[
                    ("cpu", "50"),
                    (BATCH_CPU, "25000"),
                    (BATCH_MEMORY, "62G"),
                    ("memory", "200Gi"),
                ],
            ),
            zone(
                "node-1",
                &[
                    ("cpu", "50"),
                    (BATCH_CPU, "25000"),
                    (BATCH_MEMORY, "58G"),
                    ("memory", "180Gi"),
                ],
            ),
        ];
        let t0 = now();
        let recently = Some(t0 - Duration::from_secs(60));
        let long_ago = Some(t0 - Duration::from_secs(301));

        // Added: every zone gets both resources, sorted by name among the others.
        let add = zone_update(
            Some(&threshold_strategy),
            &bare,
            &quantities(&[("node-0", "25000", "62G"), ("node-1", "25000", "58G")]),
            recently,
            t0,
        )
        .expect("a missing resource is written");
        assert!(add.reason.contains("added"), "{}", add.reason);
        let names: Vec<&str> = add.zones[0]
            .resources
            .as_ref()
            .unwrap()
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        assert_eq!(names, ["cpu", BATCH_CPU, BATCH_MEMORY, "memory"]);
        assert_eq!(add.zones, written);

        // Changed beyond the threshold: all three fields carry the new value.
        let update = zone_update(
            Some(&threshold_strategy),
            &written,
            &quantities(&[("node-0", "15000", "30G"), ("node-1", "10000", "20G")]),
            recently,
            t0,
        )
        .expect("a change beyond the threshold is written");
        assert_eq!(
            batch_of(&update.zones, "node-0", BATCH_CPU).unwrap(),
            ["15000", "15000", "15000"]
        );
        assert_eq!(
            batch_of(&update.zones, "node-1", BATCH_MEMORY).unwrap(),
            ["20G", "20G", "20G"]
        );
        assert_eq!(
            batch_of(&update.zones, "node-1", "memory").unwrap(),
            ["180Gi", "180Gi", "180Gi"],
            "other resources stay"
        );

        // Unchanged (same values, other spelling): nothing, even when old.
        let same = quantities(&[("node-0", "25k", "62G"), ("node-1", "25000", "58000M")]);
        for last in [recently, long_ago, None] {
            assert_eq!(
                zone_update(Some(&threshold_strategy), &written, &same, last, t0),
                None
            );
        }

        // Within the threshold (25000 -> 27000 is 8%): nothing while the last
        // write is recent; written once it is older than the period or
        // this process has not written yet.
        let near = quantities(&[("node-0", "27000", "62G"), ("node-1", "25000", "58G")]);
        assert_eq!(
            zone_update(Some(&threshold_strategy), &written, &near, recently, t0),
            None
        );
        for last in [long_ago, None] {
            let refresh = zone_update(Some(&threshold_strategy), &written, &near, last, t0)
                .expect("a stale small difference is refreshed");
            assert!(refresh.reason.contains("updateTimeThresholdSeconds=300"));
            assert_eq!(
                batch_of(&refresh.zones, "node-0", BATCH_CPU).unwrap(),
                ["27000", "27000", "27000"]
            );
        }
        // Just beyond: 25000 -> 27600 (10.4%).
        let beyond = quantities(&[("node-0", "27600", "62G"), ("node-1", "25000", "58G")]);
        assert!(zone_update(Some(&threshold_strategy), &written, &beyond, recently, t0).is_some());

        // A zone the calculation did not cover is reset to 0, once.
        let partial = quantities(&[("node-0", "25000", "62G")]);
        let reset = zone_update(Some(&threshold_strategy), &written, &partial, recently, t0)
            .expect("stale zone reset");
        assert_eq!(
            batch_of(&reset.zones, "node-1", BATCH_CPU).unwrap(),
            ["0", "0", "0"]
        );
        assert_eq!(
            zone_update(
                Some(&threshold_strategy),
                &reset.zones,
                &partial,
                recently,
                t0
            ),
            None
        );
        // A zone without resources at all is left without them.
        let mut no_resources = written.clone();
        no_resources.push(Zone {
            name: "socket-0".into(),
            type_: "Socket".into(),
            ..Zone::default()
        });
        let same_exact = quantities(&[("node-0", "25000", "62G"), ("node-1", "25000", "58G")]);
        assert_eq!(
            zone_update(
                Some(&threshold_strategy),
                &no_resources,
                &same_exact,
                None,
                t0
            ),
            None
        );
        // A value that cannot be read is replaced.
        let mut broken = written.clone();
        broken[0].resources.as_mut().unwrap()[1].available = Quantity("lots".into());
        let repaired = zone_update(
            Some(&threshold_strategy),
            &broken,
            &same_exact,
            recently,
            t0,
        )
        .expect("an unreadable value is rewritten");
        assert_eq!(repaired.zones, written);
    }

    #[test]
    fn batch_cpu_is_scaled_by_the_pass_normalization_ratio() {
        let amounts = [
            ZoneAmount {
                zone: "node-0".into(),
                batch: CpuMem::new(15_000, 30 * G),
                reason: String::new(),
            },
            ZoneAmount {
                zone: "node-1".into(),
                batch: CpuMem::new(10_000, 20 * G),
                reason: String::new(),
            },
        ];
        let scaled = zone_quantities(&amounts, Some(1.2));
        assert_eq!(scaled[0].1[BATCH_CPU].0, "18k");
        assert_eq!(scaled[1].1[BATCH_CPU].0, "12k");
        assert_eq!(scaled[1].1[BATCH_MEMORY].0, "19531250Ki");
        // A ratio of 1 or below, or none, leaves it.
        for ratio in [Some(1.0), Some(0.8), None] {
            assert_eq!(zone_quantities(&amounts, ratio)[0].1[BATCH_CPU].0, "15k");
        }
        // The ratio comes from this pass's CPUNormalization outcome only.
        let mut meta = NodeMetaPlan::default();
        meta.cpu_normalization.after = Some("1.20".into());
        assert_eq!(normalization_ratio(&meta), None, "the plugin did not run");
        meta.cpu_normalization.ran = true;
        assert_eq!(normalization_ratio(&meta), Some(1.2));
        meta.cpu_normalization.error = Some("NodeResourceTopology missing".into());
        assert_eq!(
            normalization_ratio(&meta),
            None,
            "failed: the old annotation is not used"
        );
    }

    #[test]
    fn the_patch_carries_the_zones_and_the_resource_version() {
        let write = ZoneWrite {
            zones: vec![zone("node-0", &[(BATCH_CPU, "1k")])],
            reason: String::new(),
        };
        let patch = zones_patch(&write, Some("42"));
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["zones"][0]["name"], "node-0");
        assert_eq!(patch["zones"][0]["type"], "Node");
        assert_eq!(patch["zones"][0]["resources"][0]["allocatable"], "1k");
        assert!(zones_patch(&write, None).get("metadata").is_none());
    }
}
