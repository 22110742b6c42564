//! A histogram with exponentially growing buckets whose sample weights decay
//! with age, the model upstream's peak predictor keeps per pod and per node
//! item (the Vertical Pod Autoscaler's decaying histogram, in semantics).
//!
//! Weights are stored relative to a reference time: a sample at `t` weighs
//! `w · 2^((t - reference) / half_life)`, so newer samples count more
//! without touching the stored buckets. When that exponent would grow past
//! [`MAX_DECAY_EXPONENT`], the reference moves forward and the stored
//! weights are scaled down to match.

use std::time::{Duration, SystemTime};

/// Upstream's limit on `(t - reference) / half_life` before re-basing.
pub const MAX_DECAY_EXPONENT: u32 = 100;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HistogramError {
    #[error(
        "invalid histogram buckets: max value {max_value}, first bucket {first_bucket_size} and epsilon {epsilon} must be > 0 and ratio {ratio} > 1"
    )]
    InvalidBuckets {
        max_value: f64,
        first_bucket_size: f64,
        ratio: f64,
        epsilon: f64,
    },
    #[error("the decay half-life must be positive")]
    ZeroHalfLife,
}

/// Bucket `i > 0` starts at `first · (ratio^i − 1) / (ratio − 1)`; bucket 0
/// starts at 0. The last bucket also takes every value above the maximum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExponentialBuckets {
    count: usize,
    first_bucket_size: f64,
    ratio: f64,
    /// Buckets lighter than this count as empty at the range ends.
    epsilon: f64,
}

impl ExponentialBuckets {
    pub fn new(
        max_value: f64,
        first_bucket_size: f64,
        ratio: f64,
        epsilon: f64,
    ) -> Result<Self, HistogramError> {
        let valid = max_value > 0.0 && first_bucket_size > 0.0 && ratio > 1.0 && epsilon > 0.0;
        if !valid || !max_value.is_finite() || !ratio.is_finite() {
            return Err(HistogramError::InvalidBuckets {
                max_value,
                first_bucket_size,
                ratio,
                epsilon,
            });
        }
        let last = (max_value * (ratio - 1.0) / first_bucket_size + 1.0).log(ratio);
        Ok(Self {
            count: last.ceil() as usize + 1,
            first_bucket_size,
            ratio,
            epsilon,
        })
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn epsilon(&self) -> f64 {
        self.epsilon
    }

    /// The bucket `value` falls in (negative and NaN values go to bucket 0).
    pub fn bucket_of(&self, value: f64) -> usize {
        if value.is_nan() || value < self.first_bucket_size {
            return 0;
        }
        let index = (value * (self.ratio - 1.0) / self.first_bucket_size + 1.0).log(self.ratio);
        (index as usize).min(self.count - 1)
    }

    /// The lower bound of `bucket` (clamped to the last bucket).
    pub fn bucket_start(&self, bucket: usize) -> f64 {
        let bucket = bucket.min(self.count - 1);
        if bucket == 0 {
            return 0.0;
        }
        self.first_bucket_size * (self.ratio.powi(bucket as i32) - 1.0) / (self.ratio - 1.0)
    }
}

/// A histogram of weighted samples with time-decayed weights.
#[derive(Debug, Clone, PartialEq)]
pub struct DecayingHistogram {
    buckets: ExponentialBuckets,
    weights: Vec<f64>,
    total_weight: f64,
    /// First and last bucket holding at least epsilon (min > max when empty).
    min_bucket: usize,
    max_bucket: usize,
    half_life: Duration,
    /// Seconds since the Unix epoch; `None` until the first sample.
    reference: Option<f64>,
}

impl DecayingHistogram {
    pub fn new(buckets: ExponentialBuckets, half_life: Duration) -> Result<Self, HistogramError> {
        if half_life.is_zero() {
            return Err(HistogramError::ZeroHalfLife);
        }
        Ok(Self {
            weights: vec![0.0; buckets.count()],
            total_weight: 0.0,
            min_bucket: buckets.count() - 1,
            max_bucket: 0,
            buckets,
            half_life,
            reference: None,
        })
    }

    pub fn buckets(&self) -> &ExponentialBuckets {
        &self.buckets
    }

    pub fn is_empty(&self) -> bool {
        self.weights[self.min_bucket] < self.buckets.epsilon()
    }

    /// Adds `value` observed at `at` with `weight` (negative weights count as 0).
    pub fn add_sample(&mut self, value: f64, weight: f64, at: SystemTime) {
        let weight = weight.max(0.0) * self.decay_factor(seconds_since_epoch(at));
        let bucket = self.buckets.bucket_of(value);
        self.weights[bucket] += weight;
        self.total_weight += weight;
        let heavy = self.weights[bucket] >= self.buckets.epsilon();
        if heavy && bucket < self.min_bucket {
            self.min_bucket = bucket;
        }
        if heavy && bucket > self.max_bucket {
            self.max_bucket = bucket;
        }
    }

    /// The upper bound of the bucket holding the `fraction` (0..=1) quantile
    /// of the weight; 0 when empty. The top bucket reports its lower bound.
    pub fn percentile(&self, fraction: f64) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        let threshold = fraction * self.total_weight;
        let mut cumulative = 0.0;
        let mut bucket = self.min_bucket;
        while bucket < self.max_bucket {
            cumulative += self.weights[bucket];
            if cumulative >= threshold {
                break;
            }
            bucket += 1;
        }
        if bucket < self.buckets.count() - 1 {
            self.buckets.bucket_start(bucket + 1)
        } else {
            self.buckets.bucket_start(bucket)
        }
    }

    fn half_life_seconds(&self) -> f64 {
        self.half_life.as_secs_f64()
    }

    /// `2^((t − reference) / half_life)`, re-basing first when `t` is more
    /// than [`MAX_DECAY_EXPONENT`] half-lives past the reference.
    fn decay_factor(&mut self, at: f64) -> f64 {
        let half_life = self.half_life_seconds();
        let limit = f64::from(MAX_DECAY_EXPONENT) * half_life;
        let reference = match self.reference {
            Some(reference) if at <= reference + limit => reference,
            _ => self.shift_reference(at),
        };
        ((at - reference) / half_life).exp2()
    }

    /// Moves the reference to `at` rounded to a whole half-life and scales
    /// stored weights by the whole number of half-lives moved.
    fn shift_reference(&mut self, at: f64) -> f64 {
        let half_life = self.half_life_seconds();
        let new_reference = (at / half_life).round() * half_life;
        let factor = match self.reference {
            Some(old) => ((old - new_reference) / half_life).round().exp2(),
            None => 0.0,
        };
        self.scale(factor);
        self.reference = Some(new_reference);
        new_reference
    }

    fn scale(&mut self, factor: f64) {
        if self.min_bucket <= self.max_bucket {
            for weight in &mut self.weights[self.min_bucket..=self.max_bucket] {
                *weight *= factor;
            }
        }
        self.total_weight *= factor;
        let epsilon = self.buckets.epsilon();
        let last = self.buckets.count() - 1;
        while self.weights[self.min_bucket] < epsilon && self.min_bucket < last {
            self.min_bucket += 1;
        }
        while self.weights[self.max_bucket] < epsilon && self.max_bucket > 0 {
            self.max_bucket -= 1;
        }
    }
}

/// A histogram's state for a checkpoint: the non-empty buckets' weights,
/// relative to `reference` (seconds since the Unix epoch).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HistogramSnapshot {
    /// Bucket count of the histogram that was saved; a different count
    /// means different buckets and the snapshot does not apply.
    pub buckets: usize,
    pub reference: Option<f64>,
    /// (bucket index, weight) of every bucket with a positive weight.
    pub weights: Vec<(usize, f64)>,
}

/// Why a snapshot was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SnapshotError {
    #[error("the snapshot has {saved} buckets, this histogram {current}")]
    BucketCount { saved: usize, current: usize },
    #[error("bucket {index} is outside the {count} buckets")]
    BucketIndex { index: usize, count: usize },
    #[error("bucket {index} has weight {weight}, not a finite non-negative number")]
    Weight { index: usize, weight: f64 },
    #[error("reference time {0} is not a finite number")]
    Reference(f64),
    #[error("weights without a reference time")]
    NoReference,
    #[error(transparent)]
    Histogram(HistogramError),
}

impl DecayingHistogram {
    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: self.buckets.count(),
            reference: self.reference,
            weights: self
                .weights
                .iter()
                .enumerate()
                .filter(|(_, weight)| **weight > 0.0)
                .map(|(index, weight)| (index, *weight))
                .collect(),
        }
    }

    /// A histogram with these buckets and half-life, filled from
    /// `snapshot`. Every value is checked; the total and the range are
    /// recomputed rather than trusted.
    pub fn from_snapshot(
        buckets: ExponentialBuckets,
        half_life: Duration,
        snapshot: &HistogramSnapshot,
    ) -> Result<Self, SnapshotError> {
        let mut histogram = Self::new(buckets, half_life).map_err(SnapshotError::Histogram)?;
        histogram.restore(snapshot)?;
        Ok(histogram)
    }

    /// Replaces the weights with `snapshot`'s; on error nothing changes.
    pub fn restore(&mut self, snapshot: &HistogramSnapshot) -> Result<(), SnapshotError> {
        let count = self.buckets.count();
        if snapshot.buckets != count {
            return Err(SnapshotError::BucketCount {
                saved: snapshot.buckets,
                current: count,
            });
        }
        match snapshot.reference {
            Some(reference) if !reference.is_finite() => {
                return Err(SnapshotError::Reference(reference));
            }
            None if !snapshot.weights.is_empty() => return Err(SnapshotError::NoReference),
            _ => {}
        }
        let mut weights = vec![0.0; count];
        for &(index, weight) in &snapshot.weights {
            if index >= count {
                return Err(SnapshotError::BucketIndex { index, count });
            }
            if !weight.is_finite() || weight < 0.0 {
                return Err(SnapshotError::Weight { index, weight });
            }
            weights[index] += weight;
        }
        let epsilon = self.buckets.epsilon();
        self.total_weight = weights.iter().sum();
        self.min_bucket = weights
            .iter()
            .position(|w| *w >= epsilon)
            .unwrap_or(count - 1);
        self.max_bucket = weights.iter().rposition(|w| *w >= epsilon).unwrap_or(0);
        self.weights = weights;
        self.reference = snapshot.reference;
        Ok(())
    }
}

fn seconds_since_epoch(at: SystemTime) -> f64 {
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => after.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    fn cpu_buckets() -> ExponentialBuckets {
        ExponentialBuckets::new(1024.0, 0.025, 1.05, 1e-4).unwrap()
    }

    #[test]
    fn bucket_bounds_grow_geometrically_and_cover_the_maximum() {
        let buckets = cpu_buckets();
        // ceil(log_1.05(1024 * 0.05 / 0.025 + 1)) + 1
        let expected = ((1024.0 * 0.05 / 0.025 + 1.0_f64).ln() / 1.05_f64.ln()).ceil() as usize + 1;
        assert_eq!(buckets.count(), expected);
        assert_eq!(buckets.bucket_start(0), 0.0);
        assert!((buckets.bucket_start(1) - 0.025).abs() < 1e-12);
        assert!((buckets.bucket_start(2) - 0.025 * 2.05).abs() < 1e-12);
        assert!(buckets.bucket_start(buckets.count() - 1) >= 1000.0);
        assert_eq!(buckets.bucket_of(0.0), 0);
        assert_eq!(buckets.bucket_of(-3.0), 0);
        assert_eq!(buckets.bucket_of(f64::NAN), 0);
        assert_eq!(buckets.bucket_of(0.03), 1);
        assert_eq!(buckets.bucket_of(1e9), buckets.count() - 1);
        for value in [0.1, 0.5, 1.0, 3.7, 64.0] {
            let bucket = buckets.bucket_of(value);
            assert!(buckets.bucket_start(bucket) <= value + 1e-9, "{value}");
            assert!(buckets.bucket_start(bucket + 1) > value, "{value}");
        }
        assert!(ExponentialBuckets::new(0.0, 1.0, 1.05, 1e-4).is_err());
        assert!(ExponentialBuckets::new(10.0, 1.0, 1.0, 1e-4).is_err());
        assert!(ExponentialBuckets::new(10.0, 1.0, 1.05, 0.0).is_err());
    }

    #[test]
    fn percentiles_report_the_upper_bound_of_the_bucket() {
        let buckets = cpu_buckets();
        let mut histogram = DecayingHistogram::new(buckets, Duration::from_secs(3600)).unwrap();
        assert!(histogram.is_empty());
        assert_eq!(histogram.percentile(0.95), 0.0);
        // 90 samples at 1 core, 10 at 4 cores, all at the same instant.
        for _ in 0..90 {
            histogram.add_sample(1.0, 1.0, at(0));
        }
        for _ in 0..10 {
            histogram.add_sample(4.0, 1.0, at(0));
        }
        let one = buckets.bucket_start(buckets.bucket_of(1.0) + 1);
        let four = buckets.bucket_start(buckets.bucket_of(4.0) + 1);
        assert_eq!(histogram.percentile(0.5), one);
        // (0.9 sits exactly on the boundary, where float sums decide.)
        assert_eq!(histogram.percentile(0.85), one);
        assert_eq!(histogram.percentile(0.95), four);
        assert_eq!(histogram.percentile(1.0), four);
        // Bucket bounds are within one growth step of the value.
        assert!(one > 1.0 && one < 1.0 * 1.06, "{one}");
        assert!(four > 4.0 && four < 4.0 * 1.06, "{four}");
    }

    #[test]
    fn newer_samples_outweigh_older_ones_by_the_half_life() {
        let half_life = Duration::from_secs(3600);
        let mut histogram = DecayingHistogram::new(cpu_buckets(), half_life).unwrap();
        // 3 old samples at 2 cores, then 1 sample at 0.5 cores two
        // half-lives later: it weighs 4, the old ones 3 together.
        for _ in 0..3 {
            histogram.add_sample(2.0, 1.0, at(0));
        }
        histogram.add_sample(0.5, 1.0, at(7200));
        let low = histogram.percentile(0.5);
        assert!(low > 0.5 && low < 0.55, "{low}");
        let high = histogram.percentile(0.6);
        assert!(high > 2.0 && high < 2.2, "{high}");
    }

    #[test]
    fn a_snapshot_restores_the_same_percentiles_and_bad_ones_are_refused() {
        let half_life = Duration::from_secs(3600);
        let mut histogram = DecayingHistogram::new(cpu_buckets(), half_life).unwrap();
        for (i, value) in [0.5, 1.0, 1.0, 2.0, 8.0].into_iter().enumerate() {
            histogram.add_sample(value, 1.0, at(i as u64 * 600));
        }
        let snapshot = histogram.snapshot();
        assert!(snapshot.weights.len() <= 4, "{snapshot:?}");
        let text = serde_json::to_string(&snapshot).unwrap();
        let decoded: HistogramSnapshot = serde_json::from_str(&text).unwrap();
        let restored =
            DecayingHistogram::from_snapshot(cpu_buckets(), half_life, &decoded).unwrap();
        for fraction in [0.0, 0.5, 0.9, 0.95, 1.0] {
            assert_eq!(
                restored.percentile(fraction),
                histogram.percentile(fraction)
            );
        }
        // New samples decay against the restored reference.
        let mut continued = restored.clone();
        let mut original = histogram.clone();
        continued.add_sample(3.0, 1.0, at(7200));
        original.add_sample(3.0, 1.0, at(7200));
        assert_eq!(continued.percentile(0.9), original.percentile(0.9));

        let mut target = DecayingHistogram::new(cpu_buckets(), half_life).unwrap();
        let bad = |edit: &dyn Fn(&mut HistogramSnapshot)| {
            let mut snapshot = snapshot.clone();
            edit(&mut snapshot);
            snapshot
        };
        for broken in [
            bad(&|s| s.buckets += 1),
            bad(&|s| s.weights.push((10_000, 1.0))),
            bad(&|s| s.weights.push((3, f64::NAN))),
            bad(&|s| s.weights.push((3, -1.0))),
            bad(&|s| s.reference = Some(f64::INFINITY)),
            bad(&|s| s.reference = None),
        ] {
            assert!(target.restore(&broken).is_err(), "{broken:?}");
            assert!(target.is_empty());
        }
    }

    #[test]
    fn rebasing_after_many_half_lives_keeps_the_relative_weights() {
        let half_life = Duration::from_secs(60);
        let mut histogram = DecayingHistogram::new(cpu_buckets(), half_life).unwrap();
        histogram.add_sample(2.0, 1.0, at(0));
        // 150 half-lives later: far past the re-basing limit; the old sample
        // now weighs 2^-150 relative to the new one and drops below epsilon.
        histogram.add_sample(8.0, 1.0, at(150 * 60));
        let low = histogram.percentile(0.0);
        assert!(low > 8.0, "{low}");
        assert!(histogram.total_weight.is_finite());
        // A sample just after re-basing still weighs about 1.
        histogram.add_sample(1.0, 1.0, at(150 * 60 + 1));
        let median = histogram.percentile(0.5);
        assert!(median > 1.0 && median < 1.1, "{median}");
    }
}
