//! The peak models: one CPU and one memory [`DecayingHistogram`] per pod,
//! for the node, and for each node item (priority classes and the system
//! share), trained from usage samples at each training interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use apis::extension::{KNOWN_PRIORITY_CLASSES, PriorityClass};

use super::histogram::{DecayingHistogram, ExponentialBuckets, HistogramError, HistogramSnapshot};
use super::{CpuMemory, PredictionConfig};
use koord_common::units::{Bytes, MilliCpu};

/// Upstream's model id of the node.
pub const NODE_MODEL_ID: &str = "__node__";
/// Node item of the usage outside pods (node − Σ pods, floored at 0).
pub const SYSTEM_ITEM: &str = "sys";

/// The model id of a node item (`__node-<item>__`, upstream's format).
pub fn node_item_id(item: &str) -> String {
    format!("__node-{item}__")
}

/// Smallest sample weight upstream's histograms distinguish; buckets below
/// a thousandth of it count as empty.
const MIN_SAMPLE_WEIGHT: f64 = 0.1;
const EPSILON: f64 = 0.001 * MIN_SAMPLE_WEIGHT;
const BUCKET_GROWTH: f64 = 0.05;

/// CPU: up to 1024 cores, first bucket 25 milli-cores.
fn cpu_buckets() -> Result<ExponentialBuckets, HistogramError> {
    ExponentialBuckets::new(1024.0, 0.025, 1.0 + BUCKET_GROWTH, EPSILON)
}

/// Memory: up to 2 TiB, first bucket 5 MiB.
fn memory_buckets() -> Result<ExponentialBuckets, HistogramError> {
    ExponentialBuckets::new(
        (1u64 << 41) as f64,
        (5u64 << 20) as f64,
        1.0 + BUCKET_GROWTH,
        EPSILON,
    )
}

/// Percentiles of one model: CPU in milli-cores, memory in bytes (truncated
/// as upstream converts them to quantities).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    pub p60: CpuMemory,
    pub p90: CpuMemory,
    pub p95: CpuMemory,
    pub p98: CpuMemory,
    pub max: CpuMemory,
}

#[derive(Debug, Clone)]
struct PeakModel {
    cpu: DecayingHistogram,
    memory: DecayingHistogram,
    last_updated: SystemTime,
}

impl PeakModel {
    fn percentile(&self, fraction: f64) -> CpuMemory {
        CpuMemory {
            cpu: MilliCpu((self.cpu.percentile(fraction) * 1000.0) as i64),
            // Bucket bounds: never negative.
            memory: Bytes(self.memory.percentile(fraction) as u64),
        }
    }
}

/// One pod's usage over the last training interval (p90 of its samples,
/// as upstream trains); `None` when the cache has no sample.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTrainingSample {
    pub uid: Arc<str>,
    pub priority: PriorityClass,
    /// Cores.
    pub cpu: Option<f64>,
    /// Bytes.
    pub memory: Option<f64>,
}

/// The models and their training (pure: time and samples are passed in).
#[derive(Debug, Clone)]
pub struct PeakPredictor {
    config: PredictionConfig,
    cpu_buckets: ExponentialBuckets,
    memory_buckets: ExponentialBuckets,
    models: HashMap<String, PeakModel>,
    synced: bool,
}

impl PeakPredictor {
    pub fn new(config: PredictionConfig) -> Result<Self, HistogramError> {
        if config.cpu_half_life.is_zero() || config.memory_half_life.is_zero() {
            return Err(HistogramError::ZeroHalfLife);
        }
        Ok(Self {
            config,
            cpu_buckets: cpu_buckets()?,
            memory_buckets: memory_buckets()?,
            models: HashMap::new(),
            synced: false,
        })
    }

    pub fn config(&self) -> &PredictionConfig {
        &self.config
    }

    /// Whether at least one training round ran.
    pub fn has_synced(&self) -> bool {
        self.synced
    }

    pub fn model_count(&self) -> usize {
        self.models.len()
    }

    /// Adds one (cpu cores, memory bytes) observation to the model `id`.
    pub fn update(&mut self, id: &str, cpu: f64, memory: f64, now: SystemTime) {
        if !self.models.contains_key(id) {
            // Half-lives were checked in `new`, so the histograms build.
            let (Ok(cpu_histogram), Ok(memory_histogram)) = (
                DecayingHistogram::new(self.cpu_buckets, self.config.cpu_half_life),
                DecayingHistogram::new(self.memory_buckets, self.config.memory_half_life),
            ) else {
                return;
            };
            self.models.insert(
                id.to_string(),
                PeakModel {
                    cpu: cpu_histogram,
                    memory: memory_histogram,
                    last_updated: now,
                },
            );
        }
        if let Some(model) = self.models.get_mut(id) {
            model.last_updated = now;
            model.cpu.add_sample(cpu, 1.0, now);
            model.memory.add_sample(memory, 1.0, now);
        }
    }

    /// The percentiles of model `id`; `None` when it has no model.
    pub fn prediction(&self, id: &str) -> Option<Prediction> {
        let model = self.models.get(id)?;
        Some(Prediction {
            p60: model.percentile(0.6),
            p90: model.percentile(0.9),
            p95: model.percentile(0.95),
            p98: model.percentile(0.98),
            max: model.percentile(1.0),
        })
    }

    /// One training round: each pod with both samples updates its model
    /// and its priority class's sum; the node's usage updates the node
    /// model; every known priority class gets its sum (0 without pods); the
    /// system item gets node − Σ pods floored at 0 (0 without a node sample).
    pub fn train(&mut self, now: SystemTime, pods: &[PodTrainingSample], node: Option<(f64, f64)>) {
        let mut by_priority: HashMap<PriorityClass, (f64, f64)> = HashMap::new();
        let mut all_pods: Option<(f64, f64)> = None;
        for pod in pods {
            let (Some(cpu), Some(memory)) = (pod.cpu, pod.memory) else {
                continue;
            };
            self.update(&pod.uid, cpu, memory, now);
            let sum = by_priority.entry(pod.priority).or_default();
            sum.0 += cpu;
            sum.1 += memory;
            let all = all_pods.get_or_insert((0.0, 0.0));
            all.0 += cpu;
            all.1 += memory;
        }
        if let Some((cpu, memory)) = node {
            self.update(NODE_MODEL_ID, cpu, memory, now);
        }
        for class in KNOWN_PRIORITY_CLASSES {
            let (cpu, memory) = by_priority.get(class).copied().unwrap_or_default();
            self.update(&node_item_id(class.as_str()), cpu, memory, now);
        }
        let (node_cpu, node_memory) = node.unwrap_or_default();
        let (system_cpu, system_memory) = match all_pods {
            Some((cpu, memory)) => ((node_cpu - cpu).max(0.0), (node_memory - memory).max(0.0)),
            None => (node_cpu, node_memory),
        };
        self.update(&node_item_id(SYSTEM_ITEM), system_cpu, system_memory, now);
        self.synced = true;
    }

    /// Drops models not updated within the expiration; returns how many.
    pub fn gc(&mut self, now: SystemTime) -> usize {
        if !self.synced {
            return 0;
        }
        let expiration = self.config.model_expiration;
        let before = self.models.len();
        self.models.retain(|_, model| {
            now.duration_since(model.last_updated)
                .map_or(true, |age| age <= expiration)
        });
        before - self.models.len()
    }
}

/// One model's state for a checkpoint.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSnapshot {
    pub id: String,
    pub cpu: HistogramSnapshot,
    pub memory: HistogramSnapshot,
    /// Seconds since the Unix epoch of the model's last sample.
    pub last_updated: f64,
}

/// Longest model id accepted from a checkpoint (pod UIDs are 36 bytes).
pub const MAX_MODEL_ID_BYTES: usize = 256;

/// What [`PeakPredictor::restore_models`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub restored: usize,
    /// Models whose last sample is older than the model expiration.
    pub expired: usize,
    /// Models refused, with the reason.
    pub invalid: Vec<String>,
}

fn epoch_seconds(at: SystemTime) -> f64 {
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => after.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

impl PeakPredictor {
    /// Every model's state, sorted by id.
    pub fn snapshot_models(&self) -> Vec<ModelSnapshot> {
        let mut models: Vec<ModelSnapshot> = self
            .models
            .iter()
            .map(|(id, model)| ModelSnapshot {
                id: id.clone(),
                cpu: model.cpu.snapshot(),
                memory: model.memory.snapshot(),
                last_updated: epoch_seconds(model.last_updated),
            })
            .collect();
        models.sort_by(|a, b| a.id.cmp(&b.id));
        models
    }

    /// Loads models from a checkpoint: each is checked on its own (a bad
    /// one is reported and skipped), and models without a sample within
    /// the model expiration before `now` are dropped as GC would.
    pub fn restore_models(&mut self, models: &[ModelSnapshot], now: SystemTime) -> RestoreReport {
        let mut report = RestoreReport::default();
        let now_seconds = epoch_seconds(now);
        let expiration = self.config.model_expiration.as_secs_f64();
        for snapshot in models {
            let id = crate::bounds::for_log(&snapshot.id).into_owned();
            if snapshot.id.is_empty() || snapshot.id.len() > MAX_MODEL_ID_BYTES {
                report
                    .invalid
                    .push(format!("model id {id:?}: empty or too long"));
                continue;
            }
            let updated = snapshot.last_updated;
            if !updated.is_finite() || updated > now_seconds + 60.0 {
                report.invalid.push(format!(
                    "model {id}: last update {updated} is not a past time"
                ));
                continue;
            }
            if now_seconds - updated > expiration {
                report.expired += 1;
                continue;
            }
            let cpu = DecayingHistogram::from_snapshot(
                self.cpu_buckets,
                self.config.cpu_half_life,
                &snapshot.cpu,
            );
            let memory = DecayingHistogram::from_snapshot(
                self.memory_buckets,
                self.config.memory_half_life,
                &snapshot.memory,
            );
            match (cpu, memory) {
                (Ok(cpu), Ok(memory)) => {
                    let last_updated = SystemTime::UNIX_EPOCH
                        + std::time::Duration::from_secs_f64(updated.max(0.0));
                    self.models.insert(
                        snapshot.id.clone(),
                        PeakModel {
                            cpu,
                            memory,
                            last_updated,
                        },
                    );
                    report.restored += 1;
                }
                (Err(error), _) => report.invalid.push(format!("model {id} cpu: {error}")),
                (_, Err(error)) => report.invalid.push(format!("model {id} memory: {error}")),
            }
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
    }

    fn sample(uid: &str, priority: PriorityClass, cpu: f64, memory: f64) -> PodTrainingSample {
        PodTrainingSample {
            uid: uid.into(),
            priority,
            cpu: Some(cpu),
            memory: Some(memory),
        }
    }

    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    /// Upper bound of bucket 0: what a model of zeros predicts.
    const FIRST_BUCKET: CpuMemory = CpuMemory {
        cpu: MilliCpu(25),
        memory: Bytes(5 << 20),
    };

    #[test]
    fn training_fills_pod_node_priority_and_system_models() {
        let mut predictor = PeakPredictor::new(PredictionConfig::default()).unwrap();
        assert!(!predictor.has_synced());
        let pods = [
            sample("a", PriorityClass::Prod, 1.0, GIB),
            sample("b", PriorityClass::Prod, 0.5, GIB),
            sample("c", PriorityClass::Batch, 2.0, 2.0 * GIB),
            PodTrainingSample {
                uid: "no-memory".into(),
                priority: PriorityClass::Prod,
                cpu: Some(8.0),
                memory: None,
            },
        ];
        predictor.train(at(0), &pods, Some((4.0, 6.0 * GIB)));
        assert!(predictor.has_synced());
        // 3 pods + node + 5 priority classes + system.
        assert_eq!(
            predictor.model_count(),
            3 + 1 + KNOWN_PRIORITY_CLASSES.len() + 1
        );
        assert!(predictor.prediction("no-memory").is_none());

        // Bucket upper bounds lie above the value by up to ~8% at half a
        // core (the first-bucket offset widens small buckets).
        let within = |value: i64, expected: f64| {
            let value = value as f64;
            value >= expected && value <= expected * 1.1
        };
        let prod = predictor.prediction(&node_item_id("koord-prod")).unwrap();
        assert!(within(prod.p95.cpu.0, 1500.0), "{prod:?}");
        assert!(within(prod.p98.memory.as_i64(), 2.0 * GIB), "{prod:?}");
        // A class without pods is trained with zeros; percentiles report
        // bucket upper bounds, so zero reads as the first bucket (25 m, 5 MiB),
        // as upstream's histograms do.
        let mid = predictor.prediction(&node_item_id("koord-mid")).unwrap();
        assert_eq!(mid.p95, FIRST_BUCKET);
        // System: 4 - 3.5 cores, 6 - 4 GiB.
        let system = predictor.prediction(&node_item_id(SYSTEM_ITEM)).unwrap();
        assert!(within(system.p95.cpu.0, 500.0), "{system:?}");
        assert!(within(system.p98.memory.as_i64(), 2.0 * GIB), "{system:?}");
        let node = predictor.prediction(NODE_MODEL_ID).unwrap();
        assert!(within(node.max.cpu.0, 4000.0), "{node:?}");
    }

    #[test]
    fn system_share_is_floored_and_missing_node_counts_as_zero() {
        let mut predictor = PeakPredictor::new(PredictionConfig::default()).unwrap();
        predictor.train(
            at(0),
            &[sample("a", PriorityClass::Prod, 3.0, GIB)],
            Some((2.0, GIB / 2.0)),
        );
        let system = predictor.prediction(&node_item_id(SYSTEM_ITEM)).unwrap();
        assert_eq!(system.max, FIRST_BUCKET);

        let mut predictor = PeakPredictor::new(PredictionConfig::default()).unwrap();
        predictor.train(at(0), &[sample("a", PriorityClass::Prod, 3.0, GIB)], None);
        assert!(predictor.prediction(NODE_MODEL_ID).is_none());
        let system = predictor.prediction(&node_item_id(SYSTEM_ITEM)).unwrap();
        assert_eq!(system.max, FIRST_BUCKET);
    }

    #[test]
    fn p95_follows_the_peak_of_a_varying_pod() {
        let mut predictor = PeakPredictor::new(PredictionConfig::default()).unwrap();
        // 100 training rounds one minute apart: 1 core mostly, 3 cores in 10 of them.
        for round in 0..100u64 {
            let cpu = if round % 10 == 0 { 3.0 } else { 1.0 };
            predictor.train(
                at(round * 60),
                &[sample("a", PriorityClass::Prod, cpu, GIB)],
                None,
            );
        }
        let prediction = predictor.prediction("a").unwrap();
        assert!(
            prediction.p60.cpu.0 >= 1000 && prediction.p60.cpu.0 <= 1060,
            "{prediction:?}"
        );
        assert!(
            prediction.p95.cpu.0 >= 3000 && prediction.p95.cpu.0 <= 3180,
            "{prediction:?}"
        );
    }

    #[test]
    fn models_expire_after_the_expiration_without_updates() {
        let config = PredictionConfig::default();
        let expiration = config.model_expiration;
        let mut predictor = PeakPredictor::new(config).unwrap();
        assert_eq!(predictor.gc(at(0)), 0);
        predictor.train(
            at(0),
            &[sample("gone", PriorityClass::Prod, 1.0, GIB)],
            Some((1.0, GIB)),
        );
        let later = at(0) + expiration + Duration::from_secs(1);
        predictor.train(later, &[], Some((1.0, GIB)));
        assert_eq!(predictor.gc(later), 1);
        assert!(predictor.prediction("gone").is_none());
        assert!(predictor.prediction(NODE_MODEL_ID).is_some());
    }

    #[test]
    fn restored_models_predict_as_before_and_bad_or_stale_ones_are_skipped() {
        let mut predictor = PeakPredictor::new(PredictionConfig::default()).unwrap();
        for round in 0..30u64 {
            let cpu = 1.0 + (round % 5) as f64 * 0.3;
            predictor.train(
                at(round * 60),
                &[sample("a", PriorityClass::Prod, cpu, GIB)],
                Some((cpu + 0.5, 2.0 * GIB)),
            );
        }
        let now = at(30 * 60);
        let mut snapshots = predictor.snapshot_models();
        let mut restored = PeakPredictor::new(PredictionConfig::default()).unwrap();
        let report = restored.restore_models(&snapshots, now);
        assert_eq!(report.restored, predictor.model_count());
        assert!(report.invalid.is_empty(), "{report:?}");
        for id in ["a", NODE_MODEL_ID, &node_item_id("koord-prod")] {
            assert_eq!(restored.prediction(id), predictor.prediction(id), "{id}");
        }

        let mut bad = snapshots[0].clone();
        bad.id = "x".repeat(MAX_MODEL_ID_BYTES + 1);
        let mut future = snapshots[0].clone();
        future.id = "future".into();
        future.last_updated = epoch_seconds(now) + 3600.0;
        let mut broken = snapshots[0].clone();
        broken.id = "broken".into();
        broken.memory.buckets = 3;
        snapshots.extend([bad, future, broken]);
        let mut fresh = PeakPredictor::new(PredictionConfig::default()).unwrap();
        let report = fresh.restore_models(&snapshots, now);
        assert_eq!(report.invalid.len(), 3, "{report:?}");
        assert!(fresh.prediction("broken").is_none());

        // An hour later every model is past the 30 minute expiration.
        let mut late = PeakPredictor::new(PredictionConfig::default()).unwrap();
        let report = late.restore_models(
            &predictor.snapshot_models(),
            now + Duration::from_secs(3600),
        );
        assert_eq!(report.restored, 0);
        assert_eq!(report.expired, predictor.model_count());
    }
}
