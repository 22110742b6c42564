//! Peak prediction and the prod reclaimable estimate reported in NodeMetric
//! (`prodReclaimableMetric`, `prodPeakMetric`), as upstream's
//! `pkg/koordlet/prediction` computes them.
//!
//! - [`histogram`]: exponential-bucket histograms with decaying weights.
//! - [`model`]: per pod / node / node-item peak models and their training.
//! - [`reclaim`]: the reclaimable and peak estimate from the models.
//!
//! All three are pure; the NodeMetric reporter trains the models from the
//! metric cache and runs the estimate at each report. Upstream also
//! checkpoints the models to disk so a restart keeps them; this build keeps
//! them in memory only.

pub mod histogram;
pub mod model;
pub mod reclaim;

use std::time::Duration;

pub use histogram::{DecayingHistogram, ExponentialBuckets, HistogramError};
pub use model::{
    NODE_MODEL_ID, PeakPredictor, PodTrainingSample, Prediction, SYSTEM_ITEM, node_item_id,
};
pub use reclaim::{
    PodForPrediction, PredictError, ProdReclaim, ProdReclaimEstimator, node_allocatable,
    pod_requests, reclaimable_for_prod,
};

/// Tuning of the predictor; defaults are upstream's (`prediction.NewDefaultConfig`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PredictionConfig {
    /// Pods younger than this reclaim nothing: their request counts as peak.
    pub cold_start: Duration,
    /// Headroom added above the predicted peak, in percent.
    pub safety_margin_percent: u32,
    pub memory_half_life: Duration,
    pub cpu_half_life: Duration,
    /// How often the models take a sample.
    pub training_interval: Duration,
    /// Models without a sample for this long are dropped.
    pub model_expiration: Duration,
}

impl Default for PredictionConfig {
    fn default() -> Self {
        Self {
            cold_start: Duration::from_secs(24 * 3600),
            safety_margin_percent: 10,
            memory_half_life: Duration::from_secs(24 * 3600),
            cpu_half_life: Duration::from_secs(12 * 3600),
            training_interval: Duration::from_secs(60),
            model_expiration: Duration::from_secs(30 * 60),
        }
    }
}

/// CPU in milli-cores and memory in bytes: the two resources the predictor
/// deals in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CpuMemory {
    pub milli_cpu: i64,
    pub memory_bytes: i64,
}

impl CpuMemory {
    pub fn saturating_add(self, other: Self) -> Self {
        Self {
            milli_cpu: self.milli_cpu.saturating_add(other.milli_cpu),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    pub fn saturating_sub(self, other: Self) -> Self {
        Self {
            milli_cpu: self.milli_cpu.saturating_sub(other.milli_cpu),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
        }
    }

    /// Per-resource maximum.
    pub fn max(self, other: Self) -> Self {
        Self {
            milli_cpu: self.milli_cpu.max(other.milli_cpu),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }

    /// Per-resource minimum.
    pub fn min(self, other: Self) -> Self {
        Self {
            milli_cpu: self.milli_cpu.min(other.milli_cpu),
            memory_bytes: self.memory_bytes.min(other.memory_bytes),
        }
    }
}
