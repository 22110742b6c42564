//! The metric cache: an embedded in-memory store of time series, replacing
//! upstream's Prometheus TSDB (`pkg/koordlet/metriccache`).
//!
//! A series is identified by a [`SeriesKey`] (kind, entity, optional label)
//! and holds a ring buffer of samples (see `series.rs`):
//!
//! - Samples are packed in compressed blocks of 128 (see `series.rs`): about
//!   1.5 bytes for a sample whose value did not change, up to 6 bytes when
//!   it changes every sample, plus about 150 bytes per series (map entry,
//!   key, the entity id string, the open block's buffer).
//! - At most `ceil(retention / sample interval) + 1` samples per series
//!   ([`MetricCacheConfig::max_samples_per_series`]); samples older than the
//!   retention are dropped on append and by [`MetricCache::gc`], whole
//!   blocks freed at a time. No buffer grows by doubling, whose freed halves
//!   fragmented the heap.
//! - Worked example: 200 containers with CPU and memory series at 1 s over
//!   30 min is 400 series × 1801 samples: at most ≈ 4.1 MiB when every value
//!   changes every second, ≈ 1.1 MiB when they stay the same.
//!
//! Values are stored as `f32` while the API speaks `f64`: the relative error
//! is below 6e-8, which keeps a 150-container node inside the koordlet's
//! 32 MiB budget where `f64` samples would not.
//!
//! No clock is read here: sample times and the GC time are arguments. Writers
//! take the lock once per batch; queries copy the window out under a read
//! lock and aggregate after releasing it.

mod aggregate;
mod key;
mod series;

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use aggregate::{Aggregation, WindowValues, percentile_of_sorted};
pub use key::{
    BeLabel, Entity, GpuLabel, MetricKind, PsiDegree, PsiLabel, PsiResource, PsiWindow, SeriesKey,
    SeriesLabel,
};
use koord_common::sync::RwLockExt;
pub use series::{AppendError, BYTES_PER_SAMPLE};

use koord_common::units::{Bytes, CpuTopology};
use series::Series;

/// Default retention of samples (upstream keeps 12 h on disk; 30 min covers
/// the NodeMetric aggregation windows of 5, 10 and 30 minutes).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 60);
/// Default age after which a series that stopped receiving samples is removed
/// (upstream's `-metric-expire-seconds`).
pub const DEFAULT_EXPIRE: Duration = Duration::from_secs(1800);
/// Longest accepted retention; bounds buffer sizes and gap entries.
pub const MAX_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Rough bookkeeping cost of one series besides its samples, for estimates.
pub const APPROX_BYTES_PER_SERIES: usize = 150;

/// One measurement to store.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub key: SeriesKey,
    pub time: SystemTime,
    pub value: f64,
}

impl Sample {
    pub fn new(key: SeriesKey, time: SystemTime, value: f64) -> Self {
        Self { key, time, value }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricCacheConfig {
    /// How long samples are kept.
    pub retention: Duration,
    /// The shortest collection interval; sizes the ring buffers.
    pub sample_interval: Duration,
    /// Series not updated for this long are removed by [`MetricCache::gc`].
    pub expire: Duration,
}

impl Default for MetricCacheConfig {
    fn default() -> Self {
        Self {
            retention: DEFAULT_RETENTION,
            sample_interval: Duration::from_secs(1),
            expire: DEFAULT_EXPIRE,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("metric cache sample interval must be at least 1ms, got {0:?}")]
    IntervalTooShort(Duration),
    #[error(
        "metric cache retention {retention:?} must be at least the sample interval {interval:?}"
    )]
    RetentionShorterThanInterval {
        retention: Duration,
        interval: Duration,
    },
    #[error("metric cache retention {0:?} exceeds the maximum of {MAX_RETENTION:?}")]
    RetentionTooLong(Duration),
    #[error("metric expiry must be positive, got {0:?}")]
    ExpireZero(Duration),
}

impl MetricCacheConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.sample_interval < Duration::from_millis(1) {
            return Err(ConfigError::IntervalTooShort(self.sample_interval));
        }
        if self.retention < self.sample_interval {
            return Err(ConfigError::RetentionShorterThanInterval {
                retention: self.retention,
                interval: self.sample_interval,
            });
        }
        if self.retention > MAX_RETENTION {
            return Err(ConfigError::RetentionTooLong(self.retention));
        }
        if self.expire.is_zero() {
            return Err(ConfigError::ExpireZero(self.expire));
        }
        Ok(())
    }

    /// Ring capacity: one sample per interval over the retention, plus one so
    /// a sample exactly `retention` old is still there.
    pub fn max_samples_per_series(&self) -> usize {
        let interval = self.sample_interval.as_millis().max(1);
        let slots = self.retention.as_millis().div_ceil(interval) + 1;
        usize::try_from(slots).unwrap_or(usize::MAX)
    }

    /// Upper bound of the sample memory for `series` full series.
    pub fn max_bytes_for(&self, series: usize) -> usize {
        series * (self.max_samples_per_series() * BYTES_PER_SAMPLE + APPROX_BYTES_PER_SERIES)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct RejectedSample {
    pub key: SeriesKey,
    pub error: AppendError,
}

/// What a batch append did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppendSummary {
    pub appended: usize,
    pub rejected: Vec<RejectedSample>,
}

/// What a GC pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcSummary {
    pub removed_series: usize,
    pub dropped_samples: usize,
}

/// Size of the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub series: usize,
    pub samples: usize,
    /// Bytes reserved by sample buffers.
    pub sample_bytes: usize,
    /// `sample_bytes` plus the approximate per-series bookkeeping.
    pub estimated_bytes: usize,
}

/// Milliseconds since the Unix epoch (negative before it).
pub fn unix_millis(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

fn from_unix_millis(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms.unsigned_abs())
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The store; share it as `Arc<MetricCache>`.
#[derive(Debug)]
pub struct MetricCache {
    config: MetricCacheConfig,
    max_len: usize,
    retention_ms: i64,
    series: RwLock<HashMap<SeriesKey, Series>>,
    cpu_topology: RwLock<Option<Arc<CpuTopology>>>,
    gpu_devices: RwLock<Option<Arc<[GpuDevice]>>>,
}

/// A GPU the usage collector last saw (upstream's `GPUDeviceType` KV entry):
/// the NodeMetric reporter asks for the usage of exactly these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDevice {
    pub minor: i32,
    pub uuid: Arc<str>,
    pub memory_total: Bytes,
}

impl GpuDevice {
    pub fn label(&self) -> GpuLabel {
        GpuLabel::new(self.minor, self.uuid.clone())
    }
}

impl MetricCache {
    pub fn new(config: MetricCacheConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            max_len: config.max_samples_per_series(),
            retention_ms: duration_millis(config.retention),
            config,
            series: RwLock::new(HashMap::new()),
            cpu_topology: RwLock::new(None),
            gpu_devices: RwLock::new(None),
        })
    }

    pub fn config(&self) -> &MetricCacheConfig {
        &self.config
    }

    // A panic while holding the lock cannot leave a series half-written in a
    // way later readers would misread, so a poisoned lock is still usable.
    fn read(&self) -> RwLockReadGuard<'_, HashMap<SeriesKey, Series>> {
        self.series.read_or_recover()
    }

    fn write(&self) -> RwLockWriteGuard<'_, HashMap<SeriesKey, Series>> {
        self.series.write_or_recover()
    }

    /// Stores a batch under one lock. Samples of one series must come in time
    /// order; older ones and non-finite values are rejected and reported.
    pub fn append(&self, samples: &[Sample]) -> AppendSummary {
        let mut summary = AppendSummary::default();
        let mut store = self.write();
        for sample in samples {
            match self.append_locked(&mut store, sample) {
                Ok(()) => summary.appended += 1,
                Err(error) => summary.rejected.push(RejectedSample {
                    key: sample.key.clone(),
                    error,
                }),
            }
        }
        summary
    }

    pub fn append_one(&self, sample: &Sample) -> Result<(), AppendError> {
        let mut store = self.write();
        self.append_locked(&mut store, sample)
    }

    fn append_locked(
        &self,
        store: &mut HashMap<SeriesKey, Series>,
        sample: &Sample,
    ) -> Result<(), AppendError> {
        if !sample.value.is_finite() {
            return Err(AppendError::NotFinite);
        }
        let time_ms = unix_millis(sample.time);
        // Values beyond f32's range are stored as the largest finite f32.
        let value = (sample.value as f32).clamp(f32::MIN, f32::MAX);
        match store.get_mut(&sample.key) {
            Some(series) => series.push(time_ms, value, self.retention_ms, self.max_len),
            None => {
                let mut series = Series::new(time_ms);
                series.push(time_ms, value, self.retention_ms, self.max_len)?;
                store.insert(sample.key.clone(), series);
                Ok(())
            }
        }
    }

    /// The samples of `key` with `start <= time <= end`; empty for an unknown
    /// series or a window with `start > end`.
    pub fn query(&self, key: &SeriesKey, start: SystemTime, end: SystemTime) -> WindowValues {
        let (start_ms, end_ms) = (unix_millis(start), unix_millis(end));
        let copied: Vec<(i64, f64)> = self
            .read()
            .get(key)
            .map(|series| series.window(start_ms, end_ms))
            .unwrap_or_default();
        WindowValues::from_time_ordered(
            copied
                .into_iter()
                .map(|(ms, value)| (from_unix_millis(ms), value)),
        )
    }

    /// The samples of `key` with `start <= time <= end`, oldest first.
    pub fn samples(
        &self,
        key: &SeriesKey,
        start: SystemTime,
        end: SystemTime,
    ) -> Vec<(SystemTime, f64)> {
        let (start_ms, end_ms) = (unix_millis(start), unix_millis(end));
        let copied: Vec<(i64, f64)> = self
            .read()
            .get(key)
            .map(|series| series.window(start_ms, end_ms))
            .unwrap_or_default();
        copied
            .into_iter()
            .map(|(ms, value)| (from_unix_millis(ms), value))
            .collect()
    }

    /// One aggregate over `[start, end]`; `None` when the window is empty
    /// (except `Count`, which is then 0).
    pub fn aggregate(
        &self,
        key: &SeriesKey,
        start: SystemTime,
        end: SystemTime,
        aggregation: Aggregation,
    ) -> Option<f64> {
        self.query(key, start, end).value(aggregation)
    }

    /// The newest retained sample of `key`.
    pub fn latest(&self, key: &SeriesKey) -> Option<(SystemTime, f64)> {
        let (ms, value) = self.read().get(key)?.latest()?;
        Some((from_unix_millis(ms), value))
    }

    pub fn contains(&self, key: &SeriesKey) -> bool {
        self.read().contains_key(key)
    }

    /// Keys of every series of `kind`, sorted.
    pub fn keys_of_kind(&self, kind: MetricKind) -> Vec<SeriesKey> {
        let mut keys: Vec<SeriesKey> = self
            .read()
            .keys()
            .filter(|key| key.kind == kind)
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// Removes series whose newest sample is older than `now - expire`, drops
    /// samples older than `now - retention` and returns unused buffer memory.
    pub fn gc(&self, now: SystemTime) -> GcSummary {
        let now_ms = unix_millis(now);
        let expire_before = now_ms.saturating_sub(duration_millis(self.config.expire));
        let retain_after = now_ms.saturating_sub(self.retention_ms);
        let mut summary = GcSummary::default();
        let mut store = self.write();
        store.retain(|_, series| {
            if series.newest_ms() < expire_before {
                summary.removed_series += 1;
                summary.dropped_samples += series.len();
                return false;
            }
            summary.dropped_samples += series.trim_before(retain_after);
            series.release_unused();
            true
        });
        summary
    }

    pub fn stats(&self) -> CacheStats {
        let store = self.read();
        let mut stats = CacheStats {
            series: store.len(),
            ..CacheStats::default()
        };
        for series in store.values() {
            stats.samples += series.len();
            stats.sample_bytes += series.reserved_bytes();
        }
        stats.estimated_bytes = stats.sample_bytes + stats.series * APPROX_BYTES_PER_SERIES;
        stats
    }

    /// Stores the latest CPU topology snapshot (upstream's `node_cpu_info` KV entry).
    pub fn set_cpu_topology(&self, topology: Arc<CpuTopology>) {
        *self.cpu_topology.write_or_recover() = Some(topology);
    }

    pub fn cpu_topology(&self) -> Option<Arc<CpuTopology>> {
        self.cpu_topology.read_or_recover().clone()
    }

    /// Stores the GPUs the usage collector found; `None` when the node has
    /// none (or NVML stopped answering), so nothing GPU is reported.
    pub fn set_gpu_devices(&self, devices: Option<Arc<[GpuDevice]>>) {
        *self.gpu_devices.write_or_recover() = devices;
    }

    pub fn gpu_devices(&self) -> Option<Arc<[GpuDevice]>> {
        self.gpu_devices.read_or_recover().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    fn cache(retention_s: u64, interval_s: u64, expire_s: u64) -> MetricCache {
        MetricCache::new(MetricCacheConfig {
            retention: Duration::from_secs(retention_s),
            sample_interval: Duration::from_secs(interval_s),
            expire: Duration::from_secs(expire_s),
        })
        .unwrap()
    }

    fn cpu(uid: &str) -> SeriesKey {
        SeriesKey::pod(MetricKind::PodCpuUsage, uid)
    }

    #[test]
    fn capacity_follows_retention_over_interval() {
        let config = MetricCacheConfig::default();
        assert_eq!(config.max_samples_per_series(), 1801);
        let config = MetricCacheConfig {
            retention: Duration::from_secs(10),
            sample_interval: Duration::from_secs(3),
            ..config
        };
        assert_eq!(config.max_samples_per_series(), 5); // ceil(10/3) + 1
    }

    #[test]
    fn invalid_configs_are_typed_errors() {
        let base = MetricCacheConfig::default();
        let too_short = MetricCacheConfig {
            sample_interval: Duration::ZERO,
            ..base
        };
        assert_eq!(
            MetricCache::new(too_short).unwrap_err(),
            ConfigError::IntervalTooShort(Duration::ZERO)
        );
        let inverted = MetricCacheConfig {
            retention: Duration::from_millis(500),
            ..base
        };
        assert!(matches!(
            MetricCache::new(inverted).unwrap_err(),
            ConfigError::RetentionShorterThanInterval { .. }
        ));
        let too_long = MetricCacheConfig {
            retention: MAX_RETENTION + Duration::from_secs(1),
            ..base
        };
        assert!(matches!(
            MetricCache::new(too_long).unwrap_err(),
            ConfigError::RetentionTooLong(_)
        ));
        let no_expiry = MetricCacheConfig {
            expire: Duration::ZERO,
            ..base
        };
        assert!(MetricCache::new(no_expiry).is_err());
    }

    #[test]
    fn windowed_queries_see_only_their_window() {
        let cache = cache(600, 1, 1800);
        let key = cpu("a");
        let samples: Vec<Sample> = (0..300)
            .map(|s| Sample::new(key.clone(), at(s), s as f64))
            .collect();
        assert_eq!(cache.append(&samples).appended, 300);

        // Last minute: values 240..=299 (61 samples with both ends inclusive).
        let minute = cache.query(&key, at(239), at(299));
        assert_eq!(minute.count(), 61);
        assert_eq!(minute.value(Aggregation::Latest), Some(299.0));
        assert_eq!(minute.value(Aggregation::Avg), Some(269.0));
        // floor(61 * 0.5) = 30 -> idx 29 -> 239 + 29
        assert_eq!(minute.value(Aggregation::P50), Some(268.0));
        assert_eq!(minute.duration(), Duration::from_secs(60));

        assert!(cache.query(&key, at(400), at(500)).is_empty());
        assert!(cache.query(&key, at(200), at(100)).is_empty());
        assert!(cache.query(&cpu("unknown"), at(0), at(300)).is_empty());
        assert_eq!(
            cache.aggregate(&key, at(400), at(500), Aggregation::Count),
            Some(0.0)
        );
        assert_eq!(cache.latest(&key), Some((at(299), 299.0)));
    }

    #[test]
    fn wrap_around_keeps_the_newest_retention() {
        // Capacity ceil(60/1)+1 = 61; write 200 s of samples.
        let cache = cache(60, 1, 1800);
        let key = cpu("wrap");
        for s in 0..200 {
            cache
                .append_one(&Sample::new(key.clone(), at(s), s as f64))
                .unwrap();
        }
        let all = cache.query(&key, at(0), at(1000));
        assert_eq!(all.count(), 61);
        assert_eq!(all.time_range(), Some((at(139), at(199))));
        assert_eq!(all.value(Aggregation::Avg), Some(169.0));
        assert_eq!(all.value(Aggregation::P99), Some(198.0)); // floor(60.39)=60 -> idx 59
        let stats = cache.stats();
        assert_eq!(stats.samples, 61);
        assert!(stats.sample_bytes > 0);
    }

    #[test]
    fn memory_follows_samples_not_capacity() {
        // 30 min retention, 1 s collection; an idle container's series (same
        // value every second) and a 10 s PSI series of changing values.
        let cache = cache(1800, 1, 3600);
        let idle = cpu("idle");
        let psi = SeriesKey::pod(MetricKind::PodPsi, "psi");
        for s in 0..2500 {
            let mut batch = vec![Sample::new(idle.clone(), at(s), 0.0)];
            if s % 10 == 0 {
                batch.push(Sample::new(psi.clone(), at(s), s as f64 / 10.0));
            }
            cache.append(&batch);
        }
        let stats = cache.stats();
        assert_eq!(stats.samples, 1801 + 181);
        // Mostly unchanged values: under half of what fixed 6-byte slots take.
        assert!(
            stats.sample_bytes < (1801 + 181) * BYTES_PER_SAMPLE / 2,
            "{stats:?}"
        );
        assert_eq!(cache.query(&idle, at(0), at(3000)).count(), 1801);
        assert_eq!(cache.latest(&psi), Some((at(2490), 249.0)));
    }

    #[test]
    fn bad_samples_are_reported_not_stored() {
        let cache = cache(600, 1, 1800);
        let key = cpu("x");
        let summary = cache.append(&[
            Sample::new(key.clone(), at(10), 1.0),
            Sample::new(key.clone(), at(5), 2.0),
            Sample::new(key.clone(), at(11), f64::NAN),
            Sample::new(key.clone(), at(12), f64::INFINITY),
            Sample::new(key.clone(), at(13), 3.0),
        ]);
        assert_eq!(summary.appended, 2);
        let errors: Vec<AppendError> = summary.rejected.iter().map(|r| r.error).collect();
        assert!(matches!(errors[0], AppendError::OutOfOrder { .. }));
        assert_eq!(
            errors[1..],
            [AppendError::NotFinite, AppendError::NotFinite]
        );
        assert_eq!(cache.query(&key, at(0), at(100)).count(), 2);
    }

    #[test]
    fn gc_removes_expired_series_and_trims_old_samples() {
        let cache = cache(60, 1, 120);
        let stale = cpu("stale");
        let live = cpu("live");
        for s in 0..100 {
            cache.append(&[Sample::new(live.clone(), at(s), 1.0)]);
        }
        cache.append(&[Sample::new(stale.clone(), at(10), 1.0)]);
        // At t=140: the stale series was last written 130 s ago (> 120 s expiry).
        let summary = cache.gc(at(140));
        assert_eq!(summary.removed_series, 1);
        // live keeps samples newer than 140 - 60 = 80: 80..=99.
        assert_eq!(summary.dropped_samples, 1 + 41);
        assert!(!cache.contains(&stale));
        assert_eq!(cache.query(&live, at(0), at(200)).count(), 20);
        assert_eq!(cache.keys_of_kind(MetricKind::PodCpuUsage), vec![live]);
    }

    #[test]
    fn keys_are_per_kind_entity_and_label() {
        let cache = cache(600, 1, 1800);
        let some = SeriesKey::node(MetricKind::NodePsi).with_label(SeriesLabel::Psi(PsiLabel {
            resource: PsiResource::Cpu,
            degree: PsiDegree::Some,
            window: PsiWindow::Avg10,
        }));
        let full = SeriesKey::node(MetricKind::NodePsi).with_label(SeriesLabel::Psi(PsiLabel {
            resource: PsiResource::Cpu,
            degree: PsiDegree::Full,
            window: PsiWindow::Avg10,
        }));
        cache.append(&[
            Sample::new(some.clone(), at(1), 1.0),
            Sample::new(full.clone(), at(1), 2.0),
            Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), at(1), 3.0),
        ]);
        assert_eq!(cache.latest(&some).map(|s| s.1), Some(1.0));
        assert_eq!(cache.latest(&full).map(|s| s.1), Some(2.0));
        assert_eq!(cache.keys_of_kind(MetricKind::NodePsi).len(), 2);
        assert_eq!(cache.stats().series, 3);
    }

    #[test]
    fn stored_values_keep_f32_precision() {
        let cache = cache(600, 1, 1800);
        let key = SeriesKey::node(MetricKind::NodeMemoryUsage);
        let bytes = 64.0 * 1024.0 * 1024.0 * 1024.0 + 12345.0;
        cache.append(&[Sample::new(key.clone(), at(1), bytes)]);
        let (_, stored) = cache.latest(&key).unwrap();
        assert!((stored - bytes).abs() / bytes < 1e-7, "{stored} vs {bytes}");
    }

    #[test]
    fn concurrent_writers_and_readers() {
        let cache = Arc::new(cache(600, 1, 1800));
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    let key = cpu(&format!("pod-{w}"));
                    for s in 0..500 {
                        cache.append(&[Sample::new(key.clone(), at(s), 1.0)]);
                    }
                })
            })
            .collect();
        let reader = {
            let cache = cache.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let _ = cache.query(&cpu("pod-0"), at(0), at(600));
                }
            })
        };
        for writer in writers {
            writer.join().unwrap();
        }
        reader.join().unwrap();
        for w in 0..4 {
            assert_eq!(
                cache
                    .query(&cpu(&format!("pod-{w}")), at(0), at(600))
                    .count(),
                500
            );
        }
    }

    #[test]
    fn millis_round_trip_around_the_epoch() {
        assert_eq!(unix_millis(UNIX_EPOCH + Duration::from_millis(1500)), 1500);
        assert_eq!(unix_millis(UNIX_EPOCH - Duration::from_millis(20)), -20);
        assert_eq!(
            from_unix_millis(-20),
            UNIX_EPOCH - Duration::from_millis(20)
        );
    }
}
