//! Upstream's batch formula (`CalculateBatchResourceByPolicy`), shared by
//! the whole node ([`super::noderesource`]) and each of its NUMA zones
//! ([`super::numa_batch`]): the node's completed strategy, the NodeMetric
//! amounts the formula reads, its terms and the policy that combines them.
//!
//! Pure, like its callers.

use std::collections::HashMap;

use apis::configuration::{CalculatePolicy, ColocationStrategy};
use apis::configuration::{default_colocation_strategy, merged};
use apis::extension::PriorityClass;
use apis::slo::v1alpha1::NodeMetric;

use super::resources::{CpuMem, InputError, scale};

/// The node's strategy with every field upstream dereferences filled from the
/// defaults.
pub(crate) fn complete(strategy: &ColocationStrategy) -> ColocationStrategy {
    merged(&default_colocation_strategy(), strategy)
}

/// The parts of a NodeMetric the formulas read, every amount read exactly.
pub(crate) struct MetricView {
    pub(crate) object: String,
    pub(crate) pods: HashMap<String, (CpuMem, PriorityClass)>,
    system_usage: CpuMem,
    pub(crate) node_usage: Option<CpuMem>,
    pub(crate) prod_reclaimable: Option<CpuMem>,
    /// Host applications: default priority value and usage.
    host_apps: Vec<(i32, CpuMem)>,
}

impl MetricView {
    pub(crate) fn new(metric: &NodeMetric) -> Result<Self, InputError> {
        let object = format!(
            "NodeMetric {}",
            metric.metadata.name.as_deref().unwrap_or_default()
        );
        let status = metric.status.as_ref();
        let info = status.and_then(|s| s.node_metric.as_ref());
        let mut pods = HashMap::new();
        for pod in status.map(|s| s.pods_metric.as_slice()).unwrap_or_default() {
            let key = format!("{}/{}", pod.namespace, pod.name);
            let usage = CpuMem::read(&pod.pod_usage.resources, || {
                (
                    object.clone(),
                    format!("status.podsMetric[{key}].podUsage.resources"),
                )
            })?;
            // Two entries for one pod: which usage is true cannot be known.
            if pods
                .insert(key.clone(), (usage, pod.priority_class()))
                .is_some()
            {
                return Err(InputError::new(
                    &object,
                    "status.podsMetric",
                    format!("pod {key} is reported more than once"),
                ));
            }
        }
        let node_usage = match info {
            Some(info)
                if info.node_usage.resources.contains_key("cpu")
                    && info.node_usage.resources.contains_key("memory") =>
            {
                Some(CpuMem::read(&info.node_usage.resources, || {
                    (
                        object.clone(),
                        "status.nodeMetric.nodeUsage.resources".to_owned(),
                    )
                })?)
            }
            _ => None,
        };
        let system_usage = match info {
            Some(info) => CpuMem::read(&info.system_usage.resources, || {
                (
                    object.clone(),
                    "status.nodeMetric.systemUsage.resources".to_owned(),
                )
            })?,
            None => CpuMem::ZERO,
        };
        let prod_reclaimable = match status
            .and_then(|s| s.prod_reclaimable_metric.as_ref())
            .filter(|m| !m.resource.resources.is_empty())
        {
            Some(reclaimable) => Some(CpuMem::read(&reclaimable.resource.resources, || {
                (
                    object.clone(),
                    "status.prodReclaimableMetric.resource.resources".to_owned(),
                )
            })?),
            None => None,
        };
        let mut host_apps = Vec::new();
        for app in status
            .map(|s| s.host_application_metric.as_slice())
            .unwrap_or_default()
        {
            let usage = CpuMem::read(&app.usage.resources, || {
                (
                    object.clone(),
                    format!("status.hostApplicationMetric[{}].usage.resources", app.name),
                )
            })?;
            host_apps.push((
                PriorityClass::from_name(&app.priority).default_value(),
                usage,
            ));
        }
        Ok(MetricView {
            object,
            pods,
            system_usage,
            node_usage,
            prod_reclaimable,
            host_apps,
        })
    }

    /// Usage of host applications ranked above `band` (by default priority value).
    fn host_apps_above(&self, band: PriorityClass) -> Result<CpuMem, InputError> {
        let floor = band.default_value();
        let mut total = CpuMem::ZERO;
        for (_, usage) in self.host_apps.iter().filter(|(value, _)| *value > floor) {
            total = total.try_plus(*usage, || {
                (
                    self.object.clone(),
                    "status.hostApplicationMetric".to_owned(),
                )
            })?;
        }
        Ok(total)
    }

    /// System usage plus host applications above `band`.
    pub(crate) fn system_used(&self, band: PriorityClass) -> Result<CpuMem, InputError> {
        self.system_usage.try_plus(self.host_apps_above(band)?, || {
            (
                self.object.clone(),
                "status.nodeMetric.systemUsage + hostApplicationMetric".to_owned(),
            )
        })
    }
}

pub(crate) fn is_low_priority(priority: PriorityClass) -> bool {
    matches!(priority, PriorityClass::Batch | PriorityClass::Free)
}

/// What upstream's batch formula (`CalculateBatchResourceByPolicy`) reads,
/// for the whole node or for one NUMA zone.
pub(crate) struct BatchTerms {
    pub capacity: CpuMem,
    /// [`safety_margin`] of `capacity`.
    pub margin: CpuMem,
    /// The system reservation.
    pub reserved: CpuMem,
    /// System usage plus the host applications ranked above batch.
    pub system_used: CpuMem,
    /// Requests, usage and max(usage, request) of the high-priority pods.
    pub hp_request: CpuMem,
    pub hp_used: CpuMem,
    pub hp_max_used_request: CpuMem,
}

/// What the reclaim thresholds keep back of `capacity`:
/// `capacity × (100 − reclaimThresholdPercent)%` per resource.
pub(crate) fn safety_margin(strategy: &ColocationStrategy, capacity: CpuMem) -> CpuMem {
    CpuMem::new(
        scale(
            capacity.milli_cpu,
            reserve_ratio(strategy.cpu_reclaim_threshold_percent),
        ),
        scale(
            capacity.memory_bytes,
            reserve_ratio(strategy.memory_reclaim_threshold_percent),
        ),
    )
}

/// Upstream's batch formula: capacity − margin − max(system, reserved) −
/// high-priority pods, by the configured policy per resource (memory by
/// `request` uses the reservation and pod requests instead), optionally
/// capped at a share of capacity; never negative.
pub(crate) fn batch_by_policy(
    strategy: &ColocationStrategy,
    terms: &BatchTerms,
) -> (CpuMem, String) {
    let capacity = terms.capacity;
    let margin = terms.margin;
    let reserved = terms.reserved;
    let system_used = terms.system_used.max(reserved);
    let base = capacity.minus(margin);
    let by_usage = base
        .minus(system_used)
        .minus(terms.hp_used)
        .clamp_non_negative();
    let by_request = base
        .minus(reserved)
        .minus(terms.hp_request)
        .clamp_non_negative();
    let by_max = base
        .minus(system_used)
        .minus(terms.hp_max_used_request)
        .clamp_non_negative();

    let cpu_by_max = strategy.cpu_calculate_policy == Some(CalculatePolicy::MaxUsageRequest);
    let mut milli_cpu = if cpu_by_max {
        by_max.milli_cpu
    } else {
        by_usage.milli_cpu
    };
    if let Some(percent) = strategy.batch_cpu_threshold_percent {
        milli_cpu = milli_cpu.min(scale(capacity.milli_cpu, percent as f64 / 100.0));
    }
    let (mut memory, memory_policy) = match strategy.memory_calculate_policy {
        Some(CalculatePolicy::Request) => (by_request.memory_bytes, "request"),
        Some(CalculatePolicy::MaxUsageRequest) => (by_max.memory_bytes, "maxUsageRequest"),
        _ => (by_usage.memory_bytes, "usage"),
    };
    if let Some(percent) = strategy.batch_memory_threshold_percent {
        memory = memory.min(scale(capacity.memory_bytes, percent as f64 / 100.0));
    }
    let reason = format!(
        "batch-cpu {milli_cpu}m by {} = capacity {}m - margin {}m - system {}m - hp {}m; \
         batch-memory {memory} by {memory_policy}",
        if cpu_by_max {
            "maxUsageRequest"
        } else {
            "usage"
        },
        capacity.milli_cpu,
        margin.milli_cpu,
        system_used.milli_cpu,
        if cpu_by_max {
            terms.hp_max_used_request.milli_cpu
        } else {
            terms.hp_used.milli_cpu
        },
    );
    (CpuMem::new(milli_cpu, memory), reason)
}

fn reserve_ratio(reclaim_threshold_percent: Option<i64>) -> f64 {
    (100 - reclaim_threshold_percent.unwrap_or(100)) as f64 / 100.0
}
