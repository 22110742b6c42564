//! The prediction checkpoint: the peak models and a compact summary of the
//! usage history, saved so that a restarted koordlet reports the same
//! `prodReclaimable` and aggregated usage it reported before, instead of
//! starting from minutes of data.
//!
//! Upstream saves each model in its own JSON file under
//! `--prediction-checkpoint-filepath` (each at most every
//! `--prediction-model-checkpoint-interval`, 10 minutes, and at most
//! `--prediction-model-checkpoint-max-per-step` files a minute) and reloads
//! them at start. Here one file, [`CHECKPOINT_FILE_NAME`] in that
//! directory, holds everything, and is replaced atomically (a temporary
//! sibling, fsync, rename) at most once per interval and at shutdown. Files
//! of other names in the directory (upstream's per-model files) are left
//! alone.
//!
//! What is saved:
//! - every model's histograms (non-empty buckets only) and last update;
//! - for the node, system and pod CPU/memory usage series of the metric
//!   cache: the mean of each [`SUMMARY_STEP`] over the cache's retention
//!   (at most [`MAX_POINTS_PER_SERIES`] points), so NodeMetric's usage
//!   windows and the next training have history right after a restart.
//!   Percentiles over restored history are percentiles of those means.
//!
//! Nothing in the file is trusted: a file larger than
//! [`MAX_CHECKPOINT_BYTES`], one that does not parse, one of another format,
//! version or node, or one over the count bounds is reported and ignored as
//! a whole; a model or series with a bad value is reported and skipped.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::model::{MAX_MODEL_ID_BYTES, ModelSnapshot};
use crate::metriccache::{Entity, MetricCache, MetricKind, Sample, SeriesKey, SeriesLabel};

/// Identifies our checkpoint among other JSON files.
pub const CHECKPOINT_FORMAT: &str = "koordlet.koordinator.sh/prediction-checkpoint";
/// Bumped whenever the layout changes; another version is ignored.
pub const CHECKPOINT_VERSION: u32 = 1;
/// The file in the checkpoint directory.
pub const CHECKPOINT_FILE_NAME: &str = "koordlet-prediction-checkpoint.json";
/// Largest checkpoint read or written.
pub const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;
/// Most models in one checkpoint.
pub const MAX_MODELS: usize = 20_000;
/// Most usage series in one checkpoint.
pub const MAX_SUMMARY_SERIES: usize = 20_000;
/// Most points per usage series.
pub const MAX_POINTS_PER_SERIES: usize = 120;
/// Width of one summary point.
pub const SUMMARY_STEP: Duration = Duration::from_secs(30);

/// The usage series the summary keeps (upstream's metric kind names on the
/// wire).
pub const SUMMARY_KINDS: [MetricKind; 8] = [
    MetricKind::NodeCpuUsage,
    MetricKind::NodeMemoryUsage,
    MetricKind::NodeMemoryUsageWithPageCache,
    MetricKind::NodeMemoryTotal,
    MetricKind::SysCpuUsage,
    MetricKind::SysMemoryUsage,
    MetricKind::PodCpuUsage,
    MetricKind::PodMemoryUsage,
];

/// The file's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    pub format: String,
    pub version: u32,
    /// The node it was saved on.
    pub node: String,
    /// Seconds since the Unix epoch.
    pub saved_at: f64,
    /// Half-lives the models were trained with: models trained with other
    /// ones are not restored (their weights would mean something else).
    pub cpu_half_life_seconds: f64,
    pub memory_half_life_seconds: f64,
    pub models: Vec<ModelSnapshot>,
    pub usage: Vec<UsageSeries>,
}

/// One summarized usage series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageSeries {
    /// Metric kind name (`node_cpu_usage`, `pod_memory_usage`, …).
    pub kind: String,
    /// The pod UID for pod series; absent for node series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// (milliseconds since the Unix epoch, mean value), oldest first.
    pub points: Vec<(i64, f64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read the prediction checkpoint {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the prediction checkpoint {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the prediction checkpoint is {size} bytes, more than the {max} allowed")]
    TooLarge { size: u64, max: u64 },
    #[error("the prediction checkpoint does not parse: {0}")]
    Corrupt(String),
    #[error("the file is not a prediction checkpoint of this koordlet (format {0:?})")]
    Foreign(String),
    #[error("the prediction checkpoint has version {found}, this koordlet reads {expected}")]
    Version { found: u32, expected: u32 },
    #[error("the prediction checkpoint was saved on node {found:?}, this is {expected:?}")]
    OtherNode { found: String, expected: String },
    #[error("the prediction checkpoint holds {count} {what}, more than the {max} allowed")]
    TooMany {
        what: &'static str,
        count: usize,
        max: usize,
    },
    #[error("the prediction checkpoint's save time {0} is not a finite number")]
    SavedAt(f64),
}

/// The checkpoint file in `dir`.
pub fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join(CHECKPOINT_FILE_NAME)
}

fn epoch_seconds(at: SystemTime) -> f64 {
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => after.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

impl Checkpoint {
    pub fn new(
        node: &str,
        saved_at: SystemTime,
        half_lives: (Duration, Duration),
        models: Vec<ModelSnapshot>,
        usage: Vec<UsageSeries>,
    ) -> Self {
        Self {
            format: CHECKPOINT_FORMAT.to_string(),
            version: CHECKPOINT_VERSION,
            node: node.to_string(),
            saved_at: epoch_seconds(saved_at),
            cpu_half_life_seconds: half_lives.0.as_secs_f64(),
            memory_half_life_seconds: half_lives.1.as_secs_f64(),
            models,
            usage,
        }
    }

    /// Whether the models were trained with these (cpu, memory) half-lives.
    pub fn same_half_lives(&self, half_lives: (Duration, Duration)) -> bool {
        let close = |saved: f64, now: Duration| (saved - now.as_secs_f64()).abs() < 1e-3;
        close(self.cpu_half_life_seconds, half_lives.0)
            && close(self.memory_half_life_seconds, half_lives.1)
    }
}

/// The JSON bytes of `checkpoint`; refused when larger than a reader
/// would accept.
pub fn encode(checkpoint: &Checkpoint) -> Result<Vec<u8>, CheckpointError> {
    let bytes = serde_json::to_vec(checkpoint)
        .map_err(|error| CheckpointError::Corrupt(error.to_string()))?;
    let size = bytes.len() as u64;
    if size > MAX_CHECKPOINT_BYTES {
        return Err(CheckpointError::TooLarge {
            size,
            max: MAX_CHECKPOINT_BYTES,
        });
    }
    Ok(bytes)
}

/// Parses and checks a checkpoint saved on `node`.
pub fn decode(bytes: &[u8], node: &str) -> Result<Checkpoint, CheckpointError> {
    let size = bytes.len() as u64;
    if size > MAX_CHECKPOINT_BYTES {
        return Err(CheckpointError::TooLarge {
            size,
            max: MAX_CHECKPOINT_BYTES,
        });
    }
    // The header first, so a foreign or newer file is named as such rather
    // than as a parse error of fields it does not have.
    #[derive(Deserialize)]
    struct Header {
        #[serde(default)]
        format: String,
        #[serde(default)]
        version: u32,
        #[serde(default)]
        node: String,
    }
    let header: Header = serde_json::from_slice(bytes)
        .map_err(|error| CheckpointError::Corrupt(error.to_string()))?;
    if header.format != CHECKPOINT_FORMAT {
        return Err(CheckpointError::Foreign(
            crate::bounds::for_log(&header.format).into_owned(),
        ));
    }
    if header.version != CHECKPOINT_VERSION {
        return Err(CheckpointError::Version {
            found: header.version,
            expected: CHECKPOINT_VERSION,
        });
    }
    if header.node != node {
        return Err(CheckpointError::OtherNode {
            found: crate::bounds::for_log(&header.node).into_owned(),
            expected: node.to_string(),
        });
    }
    let checkpoint: Checkpoint = serde_json::from_slice(bytes)
        .map_err(|error| CheckpointError::Corrupt(error.to_string()))?;
    if !checkpoint.saved_at.is_finite() {
        return Err(CheckpointError::SavedAt(checkpoint.saved_at));
    }
    let bound = |what, count, max| {
        if count > max {
            Err(CheckpointError::TooMany { what, count, max })
        } else {
            Ok(())
        }
    };
    bound("models", checkpoint.models.len(), MAX_MODELS)?;
    bound("usage series", checkpoint.usage.len(), MAX_SUMMARY_SERIES)?;
    let points = checkpoint
        .usage
        .iter()
        .map(|series| series.points.len())
        .max()
        .unwrap_or(0);
    bound("points in one usage series", points, MAX_POINTS_PER_SERIES)?;
    Ok(checkpoint)
}

/// Reads the checkpoint in `dir` saved on `node`; `Ok(None)` when there is
/// none. Reads at most [`MAX_CHECKPOINT_BYTES`] (blocking).
pub fn read(dir: &Path, node: &str) -> Result<Option<Checkpoint>, CheckpointError> {
    let path = checkpoint_path(dir);
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(CheckpointError::Read { path, source }),
    };
    let mut bytes = Vec::new();
    file.take(MAX_CHECKPOINT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| CheckpointError::Read {
            path: path.clone(),
            source,
        })?;
    decode(&bytes, node).map(Some)
}

/// Replaces the checkpoint in `dir` with `bytes` atomically: a temporary
/// sibling is written and synced, then renamed over the file (blocking).
pub fn write(dir: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let path = checkpoint_path(dir);
    let failed = |source| CheckpointError::Write {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let temporary = dir.join(format!(
        ".{CHECKPOINT_FILE_NAME}.tmp-{}",
        std::process::id()
    ));
    let written = (|| {
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)
    })();
    if let Err(source) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(failed(source));
    }
    // The rename itself survives a crash once the directory is synced.
    if let Ok(directory) = std::fs::File::open(dir) {
        let _ = directory.sync_all();
    }
    Ok(())
}

fn summary_kind(name: &str) -> Option<MetricKind> {
    SUMMARY_KINDS.into_iter().find(|kind| kind.as_str() == name)
}

fn is_pod_kind(kind: MetricKind) -> bool {
    matches!(kind, MetricKind::PodCpuUsage | MetricKind::PodMemoryUsage)
}

/// The summary of the cache's usage series up to `now`: the mean of each
/// [`SUMMARY_STEP`] over the cache's retention, newest points kept.
pub fn summarize(cache: &MetricCache, now: SystemTime) -> Vec<UsageSeries> {
    let step_ms = SUMMARY_STEP.as_millis() as i64;
    let span = cache
        .config()
        .retention
        .min(SUMMARY_STEP * MAX_POINTS_PER_SERIES as u32);
    let start = now.checked_sub(span).unwrap_or(SystemTime::UNIX_EPOCH);
    let mut out = Vec::new();
    for kind in SUMMARY_KINDS {
        for key in cache.keys_of_kind(kind) {
            if key.label != SeriesLabel::None {
                continue;
            }
            let pod = match (&key.entity, is_pod_kind(kind)) {
                (Entity::Node, false) => None,
                (Entity::Pod(uid), true) => Some(uid.to_string()),
                _ => continue,
            };
            // Each point: the mean of one step, stamped with the step's
            // last sample time (so restored points stay inside the window
            // the samples were in).
            let mut points: Vec<(i64, f64)> = Vec::new();
            let mut bucket: Option<(i64, i64, f64, u32)> = None;
            for (time, value) in cache.samples(&key, start, now) {
                let ms = crate::metriccache::unix_millis(time);
                let slot = ms.div_euclid(step_ms);
                match &mut bucket {
                    Some((current, last, sum, count)) if *current == slot => {
                        *last = ms;
                        *sum += value;
                        *count += 1;
                    }
                    _ => {
                        if let Some((_, last, sum, count)) = bucket.take() {
                            points.push((last, sum / f64::from(count)));
                        }
                        bucket = Some((slot, ms, value, 1));
                    }
                }
            }
            if let Some((_, last, sum, count)) = bucket {
                points.push((last, sum / f64::from(count)));
            }
            if points.len() > MAX_POINTS_PER_SERIES {
                points.drain(..points.len() - MAX_POINTS_PER_SERIES);
            }
            if !points.is_empty() && out.len() < MAX_SUMMARY_SERIES {
                out.push(UsageSeries {
                    kind: kind.as_str().to_string(),
                    pod,
                    points,
                });
            }
        }
    }
    out
}

/// What [`restore_usage`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageRestore {
    pub series: usize,
    pub samples: usize,
    /// Series refused, with the reason.
    pub invalid: Vec<String>,
}

/// Puts the summarized usage back into `cache` (before collection starts,
/// so the restored points are older than every new sample). Points the
/// cache's retention already dropped are ignored by the cache.
pub fn restore_usage(cache: &MetricCache, usage: &[UsageSeries]) -> UsageRestore {
    let mut report = UsageRestore::default();
    let mut seen = BTreeSet::new();
    for series in usage {
        let kind_name = crate::bounds::for_log(&series.kind).into_owned();
        let Some(kind) = summary_kind(&series.kind) else {
            report
                .invalid
                .push(format!("unknown series kind {kind_name:?}"));
            continue;
        };
        let key = match (&series.pod, is_pod_kind(kind)) {
            (None, false) => SeriesKey::node(kind),
            (Some(uid), true) if !uid.is_empty() && uid.len() <= MAX_MODEL_ID_BYTES => {
                SeriesKey::pod(kind, uid.as_str())
            }
            _ => {
                report.invalid.push(format!(
                    "series {kind_name}: missing, misplaced or overlong pod UID"
                ));
                continue;
            }
        };
        if !seen.insert(key.clone()) {
            report.invalid.push(format!("series {key} appears twice"));
            continue;
        }
        let ordered = series.points.windows(2).all(|pair| pair[0].0 < pair[1].0);
        let finite = series
            .points
            .iter()
            .all(|(_, value)| value.is_finite() && *value >= 0.0);
        if !ordered || !finite {
            report.invalid.push(format!(
                "series {key}: points out of order or not finite non-negative numbers"
            ));
            continue;
        }
        let samples: Vec<Sample> = series
            .points
            .iter()
            .filter_map(|&(ms, value)| {
                let time = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).ok()?);
                Some(Sample::new(key.clone(), time, value))
            })
            .collect();
        let appended = cache.append(&samples).appended;
        if appended > 0 {
            report.series += 1;
            report.samples += appended;
        }
    }
    report
}

/// Saves and loads the checkpoint of one node (the shell around the
/// functions above).
#[derive(Clone)]
pub struct Checkpointer {
    dir: PathBuf,
    node: String,
    interval: Duration,
    cache: std::sync::Arc<MetricCache>,
}

impl Checkpointer {
    pub fn new(
        dir: PathBuf,
        node: &str,
        interval: Duration,
        cache: std::sync::Arc<MetricCache>,
    ) -> Self {
        Self {
            dir,
            node: node.to_string(),
            interval,
            cache,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Time between two saves.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Reads the checkpoint at start, puts its usage summary into the
    /// cache and returns the models saved with `half_lives` (cpu, memory).
    /// Every problem is logged and leaves the start as without a
    /// checkpoint (blocking).
    pub fn load_blocking(&self, half_lives: (Duration, Duration)) -> Vec<ModelSnapshot> {
        let path = checkpoint_path(&self.dir);
        let checkpoint = match read(&self.dir, &self.node) {
            Ok(Some(checkpoint)) => checkpoint,
            Ok(None) => {
                tracing::info!(path = %path.display(), "no prediction checkpoint; the peak models start empty");
                return Vec::new();
            }
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "prediction checkpoint ignored; the peak models start empty");
                return Vec::new();
            }
        };
        let usage = restore_usage(&self.cache, &checkpoint.usage);
        for problem in &usage.invalid {
            tracing::warn!(path = %path.display(), %problem, "usage series of the prediction checkpoint skipped");
        }
        let saved_at =
            SystemTime::UNIX_EPOCH + Duration::from_secs_f64(checkpoint.saved_at.max(0.0));
        tracing::info!(path = %path.display(), ?saved_at, series = usage.series, samples = usage.samples, models = checkpoint.models.len(), "prediction checkpoint read");
        if !checkpoint.same_half_lives(half_lives) {
            tracing::warn!(
                path = %path.display(),
                saved_cpu_half_life_seconds = checkpoint.cpu_half_life_seconds,
                saved_memory_half_life_seconds = checkpoint.memory_half_life_seconds,
                "the checkpoint's peak models were trained with other histogram half-lives; they are not restored"
            );
            return Vec::new();
        }
        checkpoint.models
    }

    /// The checkpoint of `predictor` and the cache at `now`.
    pub fn build(&self, predictor: &super::PeakPredictor, now: SystemTime) -> Checkpoint {
        let config = predictor.config();
        Checkpoint::new(
            &self.node,
            now,
            (config.cpu_half_life, config.memory_half_life),
            predictor.snapshot_models(),
            summarize(&self.cache, now),
        )
    }

    /// Encodes and writes `checkpoint`; returns the bytes written (blocking).
    pub fn save_blocking(&self, checkpoint: &Checkpoint) -> Result<usize, CheckpointError> {
        let bytes = encode(checkpoint)?;
        write(&self.dir, &bytes)?;
        Ok(bytes.len())
    }
}

#[cfg(test)]
mod tests;
