//! Peak prediction and the prod reclaimable estimate reported in NodeMetric
//! (`prodReclaimableMetric`, `prodPeakMetric`), as upstream's
//! `pkg/koordlet/prediction` computes them.
//!
//! - [`histogram`]: exponential-bucket histograms with decaying weights.
//! - [`model`]: per pod / node / node-item peak models and their training.
//! - [`reclaim`]: the reclaimable and peak estimate from the models.
//! - [`checkpoint`]: the models and a usage summary saved to disk and read
//!   back at start, so a restart keeps the history.
//!
//! The first three are pure; the NodeMetric reporter trains the models from
//! the metric cache, runs the estimate at each report and saves the
//! checkpoint.

pub mod checkpoint;
pub mod histogram;
pub mod model;
pub mod reclaim;

use std::path::{Path, PathBuf};
use std::time::Duration;

use koord_common::units::{Bytes, MilliCpu};

pub use histogram::{DecayingHistogram, ExponentialBuckets, HistogramError};
pub use model::{
    ModelSnapshot, NODE_MODEL_ID, PeakPredictor, PodTrainingSample, Prediction, RestoreReport,
    SYSTEM_ITEM, node_item_id,
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

/// Upstream's `-prediction-*` flags (`-prediction-model-checkpoint-max-per-step`
/// is inert here: the checkpoint is one file written whole; see `crate::cli`).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct PredictionArgs {
    /// Pods younger than this reclaim nothing: their request counts as peak.
    #[arg(long = "prediction-cold-start-duration", default_value = "24h", value_parser = crate::statesinformer::parse_positive_duration, value_name = "DURATION")]
    pub cold_start_duration: Duration,
    /// Headroom added above the predicted peak, in percent.
    #[arg(
        long = "prediction-safety-margin-percent",
        default_value_t = 10,
        value_name = "PERCENT"
    )]
    pub safety_margin_percent: u32,
    /// Half-life of the memory histograms' sample weights.
    #[arg(long = "prediction-memory-histogram-decay-halflife", default_value = "24h", value_parser = crate::statesinformer::parse_positive_duration, value_name = "DURATION")]
    pub memory_histogram_decay_halflife: Duration,
    /// Half-life of the CPU histograms' sample weights.
    #[arg(long = "prediction-cpu-histogram-decay-halflife", default_value = "12h", value_parser = crate::statesinformer::parse_positive_duration, value_name = "DURATION")]
    pub cpu_histogram_decay_halflife: Duration,
    /// How often the models take a sample (at most the NodeMetric report interval).
    #[arg(long = "prediction-training-interval", default_value = "1m", value_parser = crate::statesinformer::parse_positive_duration, value_name = "DURATION")]
    pub training_interval: Duration,
    /// Models without a sample for this long are dropped.
    #[arg(long = "prediction-model-expiration-duration", default_value = "30m", value_parser = crate::statesinformer::parse_positive_duration, value_name = "DURATION")]
    pub model_expiration_duration: Duration,
    /// Directory of the prediction checkpoint; a relative path is below
    /// --var-run-root-dir; empty: no checkpoint.
    #[arg(
        long = "prediction-checkpoint-filepath",
        default_value = DEFAULT_CHECKPOINT_DIR,
        value_parser = parse_checkpoint_dir,
        value_name = "DIR"
    )]
    pub checkpoint_filepath: PathBuf,
    /// How often the checkpoint is rewritten (also once at shutdown).
    #[arg(long = "prediction-model-checkpoint-interval", default_value = "10m", value_parser = crate::statesinformer::parse_positive_duration, value_name = "DURATION")]
    pub model_checkpoint_interval: Duration,
}

/// Any path, and the empty one (checkpoints off), which clap's path parser
/// refuses.
fn parse_checkpoint_dir(text: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(text))
}

/// Upstream's default `--prediction-checkpoint-filepath` (its DaemonSet
/// mounts the host's `/var/run/koordlet/prediction-checkpoints` there).
pub const DEFAULT_CHECKPOINT_DIR: &str = "/prediction-checkpoints";
/// Upstream's default `--prediction-model-checkpoint-interval`.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(600);

impl Default for PredictionArgs {
    fn default() -> Self {
        PredictionConfig::default().into()
    }
}

impl From<PredictionConfig> for PredictionArgs {
    fn from(config: PredictionConfig) -> Self {
        Self {
            cold_start_duration: config.cold_start,
            safety_margin_percent: config.safety_margin_percent,
            memory_histogram_decay_halflife: config.memory_half_life,
            cpu_histogram_decay_halflife: config.cpu_half_life,
            training_interval: config.training_interval,
            model_expiration_duration: config.model_expiration,
            checkpoint_filepath: PathBuf::from(DEFAULT_CHECKPOINT_DIR),
            model_checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
        }
    }
}

impl PredictionArgs {
    /// The checkpoint directory (`None`: checkpoints off); a relative path
    /// is resolved below `var_run_root`.
    pub fn checkpoint_dir(&self, var_run_root: &Path) -> Option<PathBuf> {
        if self.checkpoint_filepath.as_os_str().is_empty() {
            return None;
        }
        Some(var_run_root.join(&self.checkpoint_filepath))
    }

    /// The predictor's configuration from these flags.
    pub fn config(&self) -> PredictionConfig {
        PredictionConfig {
            cold_start: self.cold_start_duration,
            safety_margin_percent: self.safety_margin_percent,
            memory_half_life: self.memory_histogram_decay_halflife,
            cpu_half_life: self.cpu_histogram_decay_halflife,
            training_interval: self.training_interval,
            model_expiration: self.model_expiration_duration,
        }
    }
}

/// CPU and memory: the two resources the predictor deals in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CpuMemory {
    pub cpu: MilliCpu,
    pub memory: Bytes,
}

impl CpuMemory {
    pub fn saturating_add(self, other: Self) -> Self {
        Self {
            cpu: MilliCpu(self.cpu.0.saturating_add(other.cpu.0)),
            memory: Bytes(self.memory.0.saturating_add(other.memory.0)),
        }
    }

    /// Per-resource difference. Memory stops at zero; CPU may go below it.
    /// The estimate clamps every difference at zero right after taking it,
    /// so the two agree there.
    pub fn saturating_sub(self, other: Self) -> Self {
        Self {
            cpu: MilliCpu(self.cpu.0.saturating_sub(other.cpu.0)),
            memory: self.memory.saturating_sub(other.memory),
        }
    }

    /// Per-resource maximum.
    pub fn max(self, other: Self) -> Self {
        Self {
            cpu: self.cpu.max(other.cpu),
            memory: self.memory.max(other.memory),
        }
    }

    /// Per-resource minimum.
    pub fn min(self, other: Self) -> Self {
        Self {
            cpu: self.cpu.min(other.cpu),
            memory: self.memory.min(other.memory),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        prediction: PredictionArgs,
    }

    fn parse(args: &[&str]) -> Result<PredictionArgs, clap::Error> {
        Flags::try_parse_from(std::iter::once("koordlet").chain(args.iter().copied()))
            .map(|flags| flags.prediction)
    }

    #[test]
    fn flag_defaults_are_upstreams_and_values_reach_the_config() {
        let defaults = parse(&[]).unwrap();
        assert_eq!(defaults, PredictionArgs::default());
        assert_eq!(defaults.config(), PredictionConfig::default());

        assert_eq!(
            defaults.checkpoint_dir(Path::new("/var/run")),
            Some(PathBuf::from("/prediction-checkpoints"))
        );
        assert_eq!(defaults.model_checkpoint_interval, Duration::from_secs(600));
        let relative = parse(&["--prediction-checkpoint-filepath=koordlet/models"]).unwrap();
        assert_eq!(
            relative.checkpoint_dir(Path::new("/host-var-run")),
            Some(PathBuf::from("/host-var-run/koordlet/models"))
        );
        let off = parse(&["--prediction-checkpoint-filepath="]).unwrap();
        assert_eq!(off.checkpoint_dir(Path::new("/var/run")), None);
        assert!(parse(&["--prediction-model-checkpoint-interval=0"]).is_err());

        let config = parse(&[
            "--prediction-cold-start-duration=1h",
            "--prediction-safety-margin-percent=25",
            "--prediction-memory-histogram-decay-halflife=2h",
            "--prediction-cpu-histogram-decay-halflife=30m",
            "--prediction-training-interval=30s",
            "--prediction-model-expiration-duration=45m",
        ])
        .unwrap()
        .config();
        assert_eq!(
            config,
            PredictionConfig {
                cold_start: Duration::from_secs(3600),
                safety_margin_percent: 25,
                memory_half_life: Duration::from_secs(7200),
                cpu_half_life: Duration::from_secs(1800),
                training_interval: Duration::from_secs(30),
                model_expiration: Duration::from_secs(2700),
            }
        );
    }

    #[test]
    fn zero_or_negative_values_are_refused_at_parsing() {
        // A zero half-life would leave the predictor unusable and a zero
        // training interval would train in a busy loop.
        for bad in [
            "--prediction-cpu-histogram-decay-halflife=0",
            "--prediction-memory-histogram-decay-halflife=0s",
            "--prediction-training-interval=0",
            "--prediction-safety-margin-percent=-1",
        ] {
            assert!(parse(&[bad]).is_err(), "{bad} must be refused");
        }
    }
}
