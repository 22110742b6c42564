//! How much of the prod pods' requests is reclaimable, and their predicted
//! peak, from the peak models (upstream's `ProdReclaimablePredictor`).
//!
//! Two estimates are combined, the smaller reclaimable and the larger peak
//! winning:
//! - per pod: for each prod (or unclassed) pod past its cold start,
//!   `request − peak`, where the peak is p95 CPU / p98 memory of its model
//!   plus the safety margin; pods in cold start or without a model count
//!   their whole request as peak;
//! - per priority: `Σ prod requests − (system + prod + none priority peaks
//!   plus margin)`.
//!
//! Both are capped by `allocatable − peak`. Everything is pure: predictions,
//! pods, the node's allocatable and the time come in as values.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::extension::{
    KNOWN_PRIORITY_CLASSES, PriorityClass, QuantityValue, get_node_raw_allocatable,
    priority_class_of_pod,
};
use k8s_openapi::api::core::v1::{Node, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::model::{Prediction, SYSTEM_ITEM, node_item_id};
use super::{CpuMemory, PredictionConfig};
use koord_common::units::{Bytes, MilliCpu};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PredictError {
    #[error("no node allocatable to reclaim from")]
    NoNodeAllocatable,
    #[error("no prediction for {0} yet")]
    NoPrediction(String),
    #[error("pod {0} was added twice")]
    DuplicatePod(String),
}

/// What the estimate needs to know about a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodForPrediction {
    pub uid: Arc<str>,
    pub priority: PriorityClass,
    /// Effective requests (Kubernetes' rule: max of Σ containers and each
    /// init container, plus overhead).
    pub requests: CpuMemory,
    pub created: Option<SystemTime>,
    /// Being deleted, or in phase Succeeded/Failed.
    pub finishing: bool,
}

impl PodForPrediction {
    /// `None` for a pod without a UID.
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let uid: Arc<str> = pod.metadata.uid.as_deref()?.into();
        let phase = pod
            .status
            .as_ref()
            .and_then(|status| status.phase.as_deref());
        Some(Self {
            uid,
            priority: priority_class_of_pod(pod),
            requests: pod_requests(pod),
            created: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|time| SystemTime::from(time.0)),
            finishing: pod.metadata.deletion_timestamp.is_some()
                || matches!(phase, Some("Succeeded") | Some("Failed")),
        })
    }
}

fn quantity_pair(list: Option<&std::collections::BTreeMap<String, Quantity>>) -> CpuMemory {
    let value = |name: &str| {
        list.and_then(|list| list.get(name))
            .and_then(|quantity| QuantityValue::of(quantity).ok())
    };
    CpuMemory {
        cpu: MilliCpu(value("cpu").map_or(0, QuantityValue::milli_value)),
        // A negative memory quantity (which the API server refuses) counts as 0.
        memory: Bytes::from_i64_or_zero(value("memory").map_or(0, QuantityValue::value)),
    }
}

fn requests_of(resources: Option<&ResourceRequirements>) -> CpuMemory {
    quantity_pair(resources.and_then(|resources| resources.requests.as_ref()))
}

/// The pod's effective CPU and memory requests; unparsable quantities count as 0.
pub fn pod_requests(pod: &Pod) -> CpuMemory {
    let Some(spec) = pod.spec.as_ref() else {
        return CpuMemory::default();
    };
    let mut total = spec
        .containers
        .iter()
        .fold(CpuMemory::default(), |sum, container| {
            sum.saturating_add(requests_of(container.resources.as_ref()))
        });
    for init in spec.init_containers.iter().flatten() {
        total = total.max(requests_of(init.resources.as_ref()));
    }
    total.saturating_add(quantity_pair(spec.overhead.as_ref()))
}

/// The node's allocatable for reclaim: the raw-allocatable annotation when
/// it parses, else `status.allocatable`.
pub fn node_allocatable(node: &Node) -> Option<CpuMemory> {
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    if let Ok(Some(raw)) = get_node_raw_allocatable(&annotations) {
        return Some(quantity_pair(Some(&raw)));
    }
    let allocatable = node.status.as_ref()?.allocatable.as_ref()?;
    Some(quantity_pair(Some(allocatable)))
}

/// Prod and unclassed pods are the ones whose unused request is reclaimed.
pub fn reclaimable_for_prod(priority: PriorityClass) -> bool {
    matches!(priority, PriorityClass::Prod | PriorityClass::None)
}

/// `value × (100 + margin)%`, truncated as upstream does.
fn with_margin(value: CpuMemory, margin_percent: u32) -> CpuMemory {
    let ratio = f64::from(100 + margin_percent) / 100.0;
    CpuMemory {
        cpu: MilliCpu((value.cpu.0 as f64 * ratio) as i64),
        memory: Bytes((value.memory.0 as f64 * ratio) as u64),
    }
}

/// p95 CPU and p98 memory: the peak upstream reserves for.
fn peak_of(prediction: &Prediction) -> CpuMemory {
    CpuMemory {
        cpu: prediction.p95.cpu,
        memory: prediction.p98.memory,
    }
}

/// The outcome of one estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProdReclaim {
    pub reclaimable: Result<CpuMemory, PredictError>,
    pub peak: Result<CpuMemory, PredictError>,
}

/// Accumulates pods, then yields reclaimable and peak.
pub struct ProdReclaimEstimator<'a> {
    predictions: &'a dyn Fn(&str) -> Option<Prediction>,
    allocatable: Option<CpuMemory>,
    cold_start: Duration,
    margin_percent: u32,
    now: SystemTime,
    seen: HashSet<Arc<str>>,
    // Per-pod estimate.
    pod_reclaimable: CpuMemory,
    pod_peak: CpuMemory,
    unpredicted: CpuMemory,
    // Per-priority estimate.
    prod_requests: CpuMemory,
}

impl<'a> ProdReclaimEstimator<'a> {
    pub fn new(
        config: &PredictionConfig,
        predictions: &'a dyn Fn(&str) -> Option<Prediction>,
        allocatable: Option<CpuMemory>,
        now: SystemTime,
    ) -> Self {
        Self {
            predictions,
            allocatable,
            cold_start: config.cold_start,
            margin_percent: config.safety_margin_percent,
            now,
            seen: HashSet::new(),
            pod_reclaimable: CpuMemory::default(),
            pod_peak: CpuMemory::default(),
            unpredicted: CpuMemory::default(),
            prod_requests: CpuMemory::default(),
        }
    }

    /// Adds a pod. An error from the per-pod estimate (duplicate, no model)
    /// keeps the pod out of the per-priority estimate too, as upstream's
    /// combined predictor stops at the first failing predictor.
    pub fn add_pod(&mut self, pod: &PodForPrediction) -> Result<(), PredictError> {
        self.add_to_pod_estimate(pod)?;
        if reclaimable_for_prod(pod.priority) && !pod.finishing {
            self.prod_requests = self.prod_requests.saturating_add(pod.requests);
        }
        Ok(())
    }

    fn add_to_pod_estimate(&mut self, pod: &PodForPrediction) -> Result<(), PredictError> {
        if !reclaimable_for_prod(pod.priority) {
            return Ok(());
        }
        if !self.seen.insert(pod.uid.clone()) {
            return Err(PredictError::DuplicatePod(pod.uid.to_string()));
        }
        // A missing creation time counts as just created.
        let age = pod.created.map_or(Duration::ZERO, |created| {
            self.now.duration_since(created).unwrap_or_default()
        });
        if age <= self.cold_start {
            self.unpredicted = self.unpredicted.saturating_add(pod.requests);
            return Ok(());
        }
        if pod.finishing {
            return Ok(());
        }
        let Some(prediction) = (self.predictions)(&pod.uid) else {
            self.unpredicted = self.unpredicted.saturating_add(pod.requests);
            return Err(PredictError::NoPrediction(format!("pod {}", pod.uid)));
        };
        let peak = with_margin(peak_of(&prediction), self.margin_percent);
        self.pod_peak = self.pod_peak.saturating_add(peak);
        let spare = pod.requests.saturating_sub(peak);
        self.pod_reclaimable = self
            .pod_reclaimable
            .saturating_add(spare.max(CpuMemory::default()));
        Ok(())
    }

    /// system + prod + none priority peaks, plus the margin.
    fn priority_peak(&self) -> Result<CpuMemory, PredictError> {
        let lookup = |item: &str| {
            let id = node_item_id(item);
            (self.predictions)(&id)
                .map(|prediction| peak_of(&prediction))
                .ok_or(PredictError::NoPrediction(id))
        };
        let mut peak = lookup(SYSTEM_ITEM)?;
        for class in KNOWN_PRIORITY_CLASSES {
            if reclaimable_for_prod(*class) {
                peak = peak.saturating_add(lookup(class.as_str())?);
            }
        }
        Ok(with_margin(peak, self.margin_percent))
    }

    pub fn finish(&self) -> ProdReclaim {
        let priority_peak = self.priority_peak();
        let pod_peak = self.pod_peak.saturating_add(self.unpredicted);
        let peak = priority_peak
            .clone()
            .map(|priority_peak| priority_peak.max(pod_peak));
        let reclaimable = self
            .allocatable
            .ok_or(PredictError::NoNodeAllocatable)
            .and_then(|allocatable| {
                let by_pods = allocatable
                    .saturating_sub(self.pod_peak)
                    .max(CpuMemory::default())
                    .min(self.pod_reclaimable);
                let priority_peak = priority_peak?;
                let by_priority = allocatable
                    .saturating_sub(priority_peak)
                    .max(CpuMemory::default())
                    .min(
                        self.prod_requests
                            .saturating_sub(priority_peak)
                            .max(CpuMemory::default()),
                    );
                Ok(by_pods.min(by_priority))
            });
        ProdReclaim { reclaimable, peak }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const GIB: i64 = 1 << 30;
    const DAY: Duration = Duration::from_secs(86_400);

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn cm(milli_cpu: i64, memory_bytes: i64) -> CpuMemory {
        CpuMemory {
            cpu: MilliCpu(milli_cpu),
            memory: Bytes::from_i64_or_zero(memory_bytes),
        }
    }

    /// A prediction whose p95 CPU and p98 memory are the given peak.
    fn peak(milli_cpu: i64, memory_bytes: i64) -> Prediction {
        let value = cm(milli_cpu, memory_bytes);
        Prediction {
            p60: cm(0, 0),
            p90: cm(0, 0),
            p95: cm(milli_cpu, 0),
            p98: cm(0, memory_bytes),
            max: value,
        }
    }

    fn pod(
        uid: &str,
        priority: PriorityClass,
        requests: CpuMemory,
        age: Duration,
    ) -> PodForPrediction {
        PodForPrediction {
            uid: uid.into(),
            priority,
            requests,
            created: Some(now() - age),
            finishing: false,
        }
    }

    fn node_items(system: Prediction, prod: Prediction) -> HashMap<String, Prediction> {
        let mut map = HashMap::new();
        map.insert(node_item_id(SYSTEM_ITEM), system);
        for class in KNOWN_PRIORITY_CLASSES {
            map.insert(node_item_id(class.as_str()), peak(0, 0));
        }
        map.insert(node_item_id("koord-prod"), prod);
        map
    }

    #[test]
    fn reclaimable_is_request_minus_margin_peak_capped_by_both_estimates() {
        // Two prod pods requesting 4 cores / 8 GiB each, peaking at 1 core / 2 GiB
        // and 2 cores / 3 GiB; a batch pod that must be ignored; system peak
        // 0.5 core / 1 GiB; prod priority peak 3 cores / 5 GiB.
        let mut predictions = node_items(peak(500, GIB), peak(3000, 5 * GIB));
        predictions.insert("a".into(), peak(1000, 2 * GIB));
        predictions.insert("b".into(), peak(2000, 3 * GIB));
        let lookup = |id: &str| predictions.get(id).copied();
        let config = PredictionConfig::default();
        let mut estimator =
            ProdReclaimEstimator::new(&config, &lookup, Some(cm(16_000, 64 * GIB)), now());
        estimator
            .add_pod(&pod("a", PriorityClass::Prod, cm(4000, 8 * GIB), 2 * DAY))
            .unwrap();
        estimator
            .add_pod(&pod("b", PriorityClass::None, cm(4000, 8 * GIB), 2 * DAY))
            .unwrap();
        estimator
            .add_pod(&pod("x", PriorityClass::Batch, cm(8000, 8 * GIB), 2 * DAY))
            .unwrap();
        let result = estimator.finish();

        // Per pod, margin 10%: a: 4000-1100=2900, b: 4000-2200=1800 → 4700 m;
        // memory 8-2.2=5.8 GiB, 8-3.3=4.7 GiB → 10.5 GiB.
        let gib = GIB as f64;
        let by_pods = cm(4700, (5.8 * gib) as i64 + (4.7 * gib) as i64);
        // Per priority: 8000 - 1.1 × 3500 = 4150 m; 16 GiB - 1.1 × 6 GiB.
        let priority_peak = cm(3850, (6.0 * gib * 1.1) as i64);
        let by_priority = cm(8000 - 3850, 16 * GIB - priority_peak.memory.as_i64());
        let expected = by_pods.min(by_priority);
        let reclaimable = result.reclaimable.unwrap();
        assert_eq!(reclaimable.cpu.0, 4150);
        assert!(
            (reclaimable.memory.as_i64() - expected.memory.as_i64()).abs() <= 2,
            "{reclaimable:?} vs {expected:?}"
        );
        // Peak: max(per pod 1100+2200 m / 2.2+3.3 GiB, priority 3850 m / 6.6 GiB).
        let peak = result.peak.unwrap();
        assert_eq!(peak.cpu.0, 3850);
        assert!((peak.memory.as_i64() - priority_peak.memory.as_i64()).abs() <= 2);
    }

    #[test]
    fn cold_start_pods_count_their_request_as_peak_and_reclaim_nothing() {
        let predictions = node_items(peak(0, 0), peak(0, 0));
        let lookup = |id: &str| predictions.get(id).copied();
        let config = PredictionConfig::default();
        let mut estimator =
            ProdReclaimEstimator::new(&config, &lookup, Some(cm(8000, 16 * GIB)), now());
        estimator
            .add_pod(&pod(
                "young",
                PriorityClass::Prod,
                cm(2000, 4 * GIB),
                Duration::from_secs(3600),
            ))
            .unwrap();
        let result = estimator.finish();
        assert_eq!(result.reclaimable.unwrap(), CpuMemory::default());
        assert_eq!(result.peak.unwrap(), cm(2000, 4 * GIB));
    }

    #[test]
    fn allocatable_caps_reclaim_and_missing_models_are_errors() {
        let mut predictions = node_items(peak(0, 0), peak(1000, GIB));
        predictions.insert("a".into(), peak(1000, GIB));
        let lookup = |id: &str| predictions.get(id).copied();
        let config = PredictionConfig::default();
        // Allocatable smaller than the requests: reclaim ≤ allocatable − peak.
        let mut estimator =
            ProdReclaimEstimator::new(&config, &lookup, Some(cm(2000, 2 * GIB)), now());
        estimator
            .add_pod(&pod(
                "a",
                PriorityClass::Prod,
                cm(10_000, 10 * GIB),
                2 * DAY,
            ))
            .unwrap();
        assert_eq!(
            estimator.add_pod(&pod("a", PriorityClass::Prod, cm(1, 1), 2 * DAY)),
            Err(PredictError::DuplicatePod("a".into()))
        );
        let missing =
            estimator.add_pod(&pod("unknown", PriorityClass::Prod, cm(500, GIB), 2 * DAY));
        assert!(matches!(missing, Err(PredictError::NoPrediction(_))));
        let result = estimator.finish();
        assert_eq!(result.reclaimable.as_ref().unwrap().cpu.0, 2000 - 1100);
        // The unpredicted pod's request joins the per-pod peak.
        assert_eq!(result.peak.unwrap().cpu.0, 1100 + 500);

        // No allocatable: reclaimable fails, peak still reported.
        let estimator = ProdReclaimEstimator::new(&config, &lookup, None, now());
        let result = estimator.finish();
        assert_eq!(result.reclaimable, Err(PredictError::NoNodeAllocatable));
        assert!(result.peak.is_ok());

        // No node item models (never trained): both fail.
        let empty = |_: &str| None;
        let estimator = ProdReclaimEstimator::new(&config, &empty, Some(cm(1, 1)), now());
        let result = estimator.finish();
        assert!(result.reclaimable.is_err() && result.peak.is_err());
    }

    #[test]
    fn finishing_pods_are_skipped() {
        let predictions = node_items(peak(0, 0), peak(0, 0));
        let lookup = |id: &str| predictions.get(id).copied();
        let config = PredictionConfig::default();
        let mut estimator =
            ProdReclaimEstimator::new(&config, &lookup, Some(cm(8000, 8 * GIB)), now());
        let mut done = pod("done", PriorityClass::Prod, cm(4000, 4 * GIB), 2 * DAY);
        done.finishing = true;
        estimator.add_pod(&done).unwrap();
        let result = estimator.finish();
        assert_eq!(result.reclaimable.unwrap(), CpuMemory::default());
        assert_eq!(result.peak.unwrap(), CpuMemory::default());
    }

    #[test]
    fn pod_requests_follow_the_kubernetes_rule() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "u", "name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}},
                    {"name": "c"}
                ],
                "initContainers": [
                    {"name": "i", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}
                ],
                "overhead": {"cpu": "100m", "memory": "10Mi"}
            },
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let meta = PodForPrediction::from_pod(&pod).unwrap();
        assert_eq!(meta.requests, cm(2100, (1536 + 10) << 20));
        // Burstable without a label: LS, hence prod.
        assert_eq!(meta.priority, PriorityClass::Prod);
        assert!(!meta.finishing);
        assert_eq!(
            meta.created,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_836_800))
        );
    }
}
