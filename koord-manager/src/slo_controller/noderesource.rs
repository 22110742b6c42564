//! Node resource decisions (upstream `slo-controller/noderesource` with the
//! `BatchResource` and `MidResource` plugins): how much batch and mid CPU and
//! memory a node can lend, and whether the node status needs rewriting.
//!
//! Pure: the node, its NodeMetric, the pods bound to it, the node's effective
//! colocation strategy and the current time come in; values, a reason and a
//! status patch go out — or, when an amount the formulas need cannot be
//! read exactly (it does not parse, is negative, does not fit in 64 bits, or
//! the same pod is reported twice), an [`InputError`] saying which: the
//! node's status is then left as it is, never computed from a zero or a
//! clamped value.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use apis::configuration::{ColocationStrategy, MidReclaimMode};
use apis::extension::{
    BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY, PriorityClass, QoSClass,
    get_cpu_normalization_ratio,
};
use apis::slo::v1alpha1::{
    NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY, NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY,
    NodeMetric, ThirdPartyAllocations, set_origin_extended_allocatable,
};
use apis::topology::v1alpha1::Zone;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::batch_formula::{
    BatchTerms, MetricView, batch_by_policy, complete, is_low_priority, safety_margin,
};
use super::numa_batch::{self, ZONES_UNTOUCHED_WITHDRAWN, ZoneBatch};
use super::resources::{
    CpuMem, InputError, PodSummary, bytes_quantity, node_capacity, node_reserved, scale,
    units_decimal_quantity,
};

pub use super::resources::is_resource_diff;

/// The extended resources this controller owns, in output order.
pub const MANAGED_RESOURCES: [&str; 4] = [BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY];

/// Reason when colocation is switched off for the node (upstream wording).
pub const REASON_DISABLED: &str = "node colocation is disabled in Config";
/// Reason when the NodeMetric does not exist.
pub const REASON_NODE_METRIC_MISSING: &str = "degraded: NodeMetric not found";
/// Reason when the NodeMetric never reported.
pub const REASON_NODE_METRIC_NO_UPDATE: &str = "degraded: NodeMetric has no updateTime";

/// Everything the calculation reads about one node.
#[derive(Clone, Copy)]
pub struct NodeInputs<'a> {
    pub node: &'a Node,
    /// The NodeMetric named after the node, if any.
    pub node_metric: Option<&'a NodeMetric>,
    /// Pods whose `spec.nodeName` is this node, in any phase.
    pub pods: &'a [PodSummary],
    /// The zones of the node's NodeResourceTopology; `None` without one
    /// (the NUMA-level batch resources are then not calculated).
    pub topology_zones: Option<&'a [Zone]>,
}

/// Batch and mid amounts for one node and why they are what they are.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtendedResources {
    pub batch: CpuMem,
    pub mid: CpuMem,
    /// True when the resources are withdrawn from the node (colocation off
    /// or a degraded NodeMetric): upstream removes them from the status.
    pub reset: bool,
    /// True when withdrawn because the NodeMetric is missing or stale.
    pub degraded: bool,
    /// Why the values are reset or zero; the formulas otherwise.
    pub reason: String,
    /// Other schedulers' batch allocations on the node
    /// (`thirdPartyAllocations`), taken out of the status values.
    pub third_party_batch: CpuMem,
    /// The batch amounts of each NUMA zone of the node's
    /// NodeResourceTopology, or why its zones are left as they are.
    pub zones: ZoneBatch,
}

impl ExtendedResources {
    fn withdrawn(degraded: bool, reason: String) -> Self {
        ExtendedResources {
            batch: CpuMem::ZERO,
            mid: CpuMem::ZERO,
            reset: true,
            degraded,
            reason,
            third_party_batch: CpuMem::ZERO,
            zones: ZoneBatch::Untouched(ZONES_UNTOUCHED_WITHDRAWN.to_owned()),
        }
    }

    /// The batch amounts before other schedulers' allocations are taken out:
    /// batch CPU scaled by the node's CPU normalization ratio (when above 1);
    /// zero when withdrawn. Upstream records them in the
    /// `originExtendedAllocatable` node annotation.
    pub fn origin_batch(&self, node: &Node) -> CpuMem {
        if self.reset {
            return CpuMem::ZERO;
        }
        let mut batch = self.batch;
        let annotations = node.metadata.annotations.as_ref();
        if let Some(annotations) = annotations
            && let Ok(Some(ratio)) = get_cpu_normalization_ratio(annotations)
            && ratio > 1.0
        {
            batch.milli_cpu = scale(batch.milli_cpu, ratio);
        }
        batch.clamp_non_negative()
    }

    /// What the node status should carry for each managed resource; `None`
    /// removes it. Batch is [`Self::origin_batch`] reduced by other
    /// schedulers' batch allocations.
    pub fn desired_status(&self, node: &Node) -> BTreeMap<&'static str, Option<Quantity>> {
        if self.reset {
            return MANAGED_RESOURCES.iter().map(|name| (*name, None)).collect();
        }
        let batch = self
            .origin_batch(node)
            .minus(self.third_party_batch)
            .clamp_non_negative();
        BTreeMap::from([
            (BATCH_CPU, Some(units_decimal_quantity(batch.milli_cpu))),
            (BATCH_MEMORY, Some(bytes_quantity(batch.memory_bytes))),
            (MID_CPU, Some(units_decimal_quantity(self.mid.milli_cpu))),
            (MID_MEMORY, Some(bytes_quantity(self.mid.memory_bytes))),
        ])
    }

    /// The new value of the node's `originExtendedAllocatable` annotation,
    /// written with every status write as upstream's BatchResource plugin
    /// does: batch-cpu and batch-memory of [`Self::origin_batch`], other
    /// resources already recorded kept (a malformed value is replaced).
    /// `None` when the annotation already says exactly that.
    pub fn origin_annotation(&self, node: &Node) -> Option<String> {
        let origin = self.origin_batch(node);
        let mut annotations = node.metadata.annotations.clone().unwrap_or_default();
        let before = annotations
            .get(NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY)
            .cloned();
        let extended = BTreeMap::from([
            (
                BATCH_CPU.to_owned(),
                units_decimal_quantity(origin.milli_cpu),
            ),
            (BATCH_MEMORY.to_owned(), bytes_quantity(origin.memory_bytes)),
        ]);
        set_origin_extended_allocatable(&mut annotations, &extended).ok()?;
        let after = annotations.remove(NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY)?;
        (before.as_deref() != Some(after.as_str())).then_some(after)
    }
}

/// Other schedulers' batch allocations from the node's annotation; one that
/// does not parse is an error (ignoring it would lend what they hold).
fn third_party_batch(node: &Node) -> Result<CpuMem, InputError> {
    let Some(raw) = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY))
    else {
        return Ok(CpuMem::ZERO);
    };
    let object = format!("Node {}", node.metadata.name.as_deref().unwrap_or_default());
    let field = format!("metadata.annotations[{NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY}]");
    if raw.len() > apis::extension::MAX_ANNOTATION_VALUE_BYTES {
        return Err(InputError::new(
            object,
            field,
            format!(
                "value of {} bytes is larger than {} bytes",
                raw.len(),
                apis::extension::MAX_ANNOTATION_VALUE_BYTES
            ),
        ));
    }
    let allocations = serde_json::from_str::<ThirdPartyAllocations>(raw)
        .map_err(|error| InputError::new(&object, &field, error.to_string()))?;
    let mut total = CpuMem::ZERO;
    for allocation in allocations.by_priority(PriorityClass::Batch.as_str()) {
        // Amounts are keyed by the batch resource names; batch-cpu counts
        // milli-cores as whole units.
        let value = |name: &str| -> Result<i64, InputError> {
            let Some(quantity) = allocation.resources.get(name) else {
                return Ok(0);
            };
            match apis::extension::value_of(quantity) {
                Ok(value) if value >= 0 => Ok(value),
                Ok(_) => Err(InputError::new(
                    &object,
                    format!("{field}.{name}"),
                    format!("negative amount {:?}", quantity.0),
                )),
                Err(error) => Err(InputError::new(
                    &object,
                    format!("{field}.{name}"),
                    error.to_string(),
                )),
            }
        };
        let amount = CpuMem::new(value(BATCH_CPU)?, value(BATCH_MEMORY)?);
        total = total.try_plus(amount, || (object.clone(), field.clone()))?;
    }
    Ok(total)
}

/// The node's `resourceDiffThreshold` (upstream's default 0.1 when unset).
pub fn resource_diff_threshold(strategy: Option<&ColocationStrategy>) -> f64 {
    complete(strategy.unwrap_or(&ColocationStrategy::default()))
        .resource_diff_threshold
        .unwrap_or(0.1)
}

/// Whether colocation is on for this node. `strategy` is the node's merged
/// strategy, `None` when the cluster config is invalid.
pub fn colocation_enabled(cluster_enabled: bool, strategy: Option<&ColocationStrategy>) -> bool {
    cluster_enabled && strategy.is_some_and(|s| s.enable == Some(true))
}

/// Why the NodeMetric cannot be trusted at `now`, if it cannot.
pub fn degrade_reason(
    strategy: &ColocationStrategy,
    node_metric: Option<&NodeMetric>,
    now: SystemTime,
) -> Option<String> {
    let Some(metric) = node_metric else {
        return Some(REASON_NODE_METRIC_MISSING.to_owned());
    };
    let Some(update_time) = metric.status.as_ref().and_then(|s| s.update_time.as_ref()) else {
        return Some(REASON_NODE_METRIC_NO_UPDATE.to_owned());
    };
    let minutes = strategy.degrade_time_minutes.unwrap_or(15).max(0);
    let updated = SystemTime::from(update_time.0);
    let limit = Duration::from_secs(u64::try_from(minutes).unwrap_or(0).saturating_mul(60));
    let age = now.duration_since(updated).unwrap_or(Duration::ZERO);
    (age > limit).then(|| {
        format!(
            "degraded: NodeMetric last updated {}s ago, beyond degradeTimeMinutes={minutes}",
            age.as_secs()
        )
    })
}

/// Computes the node's batch and mid resources. `strategy` is the node's
/// effective colocation strategy (`None`: the config is unusable) and
/// `cluster_enabled` the cluster-level `enable`.
///
/// Withdrawing (colocation off, NodeMetric missing or stale) reads no
/// amounts. Otherwise an amount that cannot be read exactly is an error:
/// the caller leaves the node's status as it is.
pub fn calculate(
    cluster_enabled: bool,
    strategy: Option<&ColocationStrategy>,
    inputs: NodeInputs<'_>,
    now: SystemTime,
) -> Result<ExtendedResources, InputError> {
    if !colocation_enabled(cluster_enabled, strategy) {
        return Ok(ExtendedResources::withdrawn(
            false,
            REASON_DISABLED.to_owned(),
        ));
    }
    let strategy = complete(strategy.unwrap_or(&ColocationStrategy::default()));
    if let Some(reason) = degrade_reason(&strategy, inputs.node_metric, now) {
        return Ok(ExtendedResources::withdrawn(true, reason));
    }
    // degrade_reason returned None, so the metric exists.
    let Some(metric) = inputs.node_metric else {
        return Ok(ExtendedResources::withdrawn(
            true,
            REASON_NODE_METRIC_MISSING.to_owned(),
        ));
    };
    let usage = MetricView::new(metric)?;
    let node = NodeAmounts {
        capacity: node_capacity(inputs.node)?,
        reserved: node_reserved(inputs.node)?,
    };
    let third_party_batch = third_party_batch(inputs.node)?;
    let (batch, batch_reason) = batch_allocatable(&strategy, inputs, &node, &usage)?;
    let (mid, mid_reason) = mid_allocatable(&strategy, inputs, &node, &usage)?;
    let zones = numa_batch::calculate_zones(
        &strategy,
        inputs.pods,
        inputs.topology_zones,
        node.reserved,
        &usage,
    );
    Ok(ExtendedResources {
        batch,
        mid,
        reset: false,
        degraded: false,
        reason: format!("{batch_reason}; {mid_reason}"),
        third_party_batch,
        zones,
    })
}

/// The node's own amounts the formulas read.
struct NodeAmounts {
    capacity: CpuMem,
    /// The larger of kubelet's and the reservation annotation's.
    reserved: CpuMem,
}

/// Upstream's batch formula: capacity − safety margin − system (or reserved)
/// − high-priority pods, by the configured policy per resource, optionally
/// capped at a share of capacity.
fn batch_allocatable(
    strategy: &ColocationStrategy,
    inputs: NodeInputs<'_>,
    node: &NodeAmounts,
    usage: &MetricView,
) -> Result<(CpuMem, String), InputError> {
    let sum = |total: CpuMem, amount: CpuMem, what: &str| {
        total.try_plus(amount, || (usage.object.clone(), what.to_owned()))
    };
    let mut hp_request = CpuMem::ZERO;
    let mut hp_used = CpuMem::ZERO;
    let mut hp_max_used_request = CpuMem::ZERO;
    let mut matched = std::collections::HashSet::new();
    for pod in inputs.pods.iter().filter(|pod| pod.active) {
        let metric = usage.pods.get(pod.key.as_str());
        if metric.is_some() {
            matched.insert(pod.key.as_str());
        }
        if is_low_priority(pod.priority) {
            continue;
        }
        let request = pod.request.clone()?;
        hp_request = sum(hp_request, request, "high-priority pod requests")?;
        match metric {
            None => hp_used = sum(hp_used, request, "high-priority pod usage")?,
            Some((used, _)) => {
                // LSE pods own their cores: count the CPU request, not the usage.
                let counted = if pod.qos == QoSClass::LSE {
                    CpuMem::new(request.milli_cpu, used.memory_bytes)
                } else {
                    *used
                };
                hp_used = sum(hp_used, counted, "high-priority pod usage")?;
                hp_max_used_request = sum(
                    hp_max_used_request,
                    request.max(*used),
                    "high-priority pod usage",
                )?;
            }
        }
    }
    // Metrics of pods the pod list does not know ("dangling") still use the node.
    let mut dangling = CpuMem::ZERO;
    for (_, (used, _)) in usage.pods.iter().filter(|(key, (_, priority))| {
        !matched.contains(key.as_str()) && !is_low_priority(*priority)
    }) {
        dangling = sum(dangling, *used, "status.podsMetric")?;
    }
    hp_used = sum(hp_used, dangling, "high-priority pod usage")?;
    hp_max_used_request = sum(hp_max_used_request, dangling, "high-priority pod usage")?;

    let terms = BatchTerms {
        capacity: node.capacity,
        margin: safety_margin(strategy, node.capacity),
        reserved: node.reserved,
        system_used: usage.system_used(PriorityClass::Batch)?,
        hp_request,
        hp_used,
        hp_max_used_request,
    };
    Ok(batch_by_policy(strategy, &terms))
}

fn percent(value: Option<i64>) -> f64 {
    value.unwrap_or(0) as f64 / 100.0
}

/// Upstream's mid formula: a static share of capacity, or what prod pods are
/// predicted to leave unused plus a share of what they leave unallocated;
/// capped at a share of capacity.
fn mid_allocatable(
    strategy: &ColocationStrategy,
    inputs: NodeInputs<'_>,
    node: &NodeAmounts,
    usage: &MetricView,
) -> Result<(CpuMem, String), InputError> {
    let capacity = node.capacity;
    let cpu_cap = scale(
        capacity.milli_cpu,
        percent(strategy.mid_cpu_threshold_percent),
    );
    let memory_cap = scale(
        capacity.memory_bytes,
        percent(strategy.mid_memory_threshold_percent),
    );
    if strategy.mid_reclaim_mode == Some(MidReclaimMode::Static) {
        let cpu = scale(
            capacity.milli_cpu,
            percent(strategy.mid_static_cpu_reserved_percent),
        )
        .min(cpu_cap);
        let memory = scale(
            capacity.memory_bytes,
            percent(strategy.mid_static_memory_reserved_percent),
        )
        .min(memory_cap);
        return Ok((
            CpuMem::new(cpu, memory),
            format!("mid-cpu {cpu}m, mid-memory {memory} by static reservation"),
        ));
    }
    let reclaimable = usage.prod_reclaimable.unwrap_or(CpuMem::ZERO);
    let system_used = usage.system_used(PriorityClass::Mid)?;
    let reserved = node.reserved.max(system_used);
    let mut prod_requests = CpuMem::ZERO;
    for pod in inputs.pods.iter().filter(|pod| {
        !matches!(
            pod.priority,
            PriorityClass::Mid | PriorityClass::Batch | PriorityClass::Free
        ) && pod.active
    }) {
        prod_requests = prod_requests.try_plus(pod.request.clone()?, || {
            (usage.object.clone(), "prod pod requests".to_owned())
        })?;
    }
    let unallocated = capacity
        .minus(reserved)
        .minus(prod_requests)
        .clamp_non_negative();
    let unused = usage
        .node_usage
        .map_or(CpuMem::ZERO, |used| capacity.minus(used));
    let unallocated_ratio = percent(strategy.mid_unallocated_percent);
    let cpu = (reclaimable.milli_cpu.min(unused.milli_cpu).max(0))
        .saturating_add(scale(unallocated.milli_cpu, unallocated_ratio))
        .min(cpu_cap);
    let memory = (reclaimable.memory_bytes.min(unused.memory_bytes).max(0))
        .saturating_add(scale(unallocated.memory_bytes, unallocated_ratio))
        .min(memory_cap);
    let reason = format!(
        "mid-cpu {cpu}m = min(min(prodReclaimable {}m, unused {}m) + unallocated {}m x {unallocated_ratio}, cap {cpu_cap}m); mid-memory {memory}",
        reclaimable.milli_cpu, unused.milli_cpu, unallocated.milli_cpu,
    );
    Ok((CpuMem::new(cpu, memory), reason))
}

/// Why a node status write is (or is not) due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyncDecision {
    /// Nothing to write.
    Skip,
    /// Write, for this reason.
    Write(String),
}

/// Whether to write `desired` over the node's current allocatable, as
/// upstream decides: when a resource appears, vanishes or moves beyond
/// `resourceDiffThreshold`, or when this process has not written the node
/// status for `updateTimeThresholdSeconds` (or not at all yet), even if
/// nothing differs.
pub fn sync_decision(
    strategy: Option<&ColocationStrategy>,
    current_allocatable: &BTreeMap<String, Quantity>,
    desired: &BTreeMap<&'static str, Option<Quantity>>,
    last_synced: Option<SystemTime>,
    now: SystemTime,
) -> SyncDecision {
    let strategy = complete(strategy.unwrap_or(&ColocationStrategy::default()));
    let threshold = strategy.resource_diff_threshold.unwrap_or(0.1);
    for (name, new) in desired {
        let old = current_allocatable.get(*name);
        if is_resource_diff(old, new.as_ref(), threshold) {
            return SyncDecision::Write(format!(
                "{name} changed beyond resourceDiffThreshold={threshold}"
            ));
        }
    }
    let period = Duration::from_secs(
        u64::try_from(strategy.update_time_threshold_seconds.unwrap_or(300)).unwrap_or(0),
    );
    match last_synced {
        None => SyncDecision::Write("not written by this process yet".to_owned()),
        Some(last) if now.duration_since(last).unwrap_or_default() > period => {
            SyncDecision::Write(format!(
                "last write older than updateTimeThresholdSeconds={}",
                period.as_secs()
            ))
        }
        Some(_) => SyncDecision::Skip,
    }
}

/// The JSON merge patch for `nodes/<name>/status` that sets (or, for `None`,
/// removes) each resource in both capacity and allocatable.
pub fn status_patch(desired: &BTreeMap<&'static str, Option<Quantity>>) -> serde_json::Value {
    let entries: serde_json::Map<String, serde_json::Value> = desired
        .iter()
        .map(|(name, quantity)| {
            let value = quantity.as_ref().map_or(serde_json::Value::Null, |q| {
                serde_json::Value::String(q.0.clone())
            });
            ((*name).to_owned(), value)
        })
        .collect();
    serde_json::json!({
        "status": {
            "capacity": entries.clone(),
            "allocatable": entries,
        }
    })
}
