//! Aggregations over the samples of one window.
//!
//! Percentiles use upstream's definition (`metriccache/util.go`): sort the
//! values ascending and take the one at zero-based index `floor(n * p) - 1`,
//! clamped to 0. This is a "lower nearest rank": with 10 samples p50 is the
//! 5th smallest and p90 the 9th; with 3 samples p50 is the smallest. We
//! compute `floor(n * p)` in integers (p in permille) so no float rounding
//! can move the index.

use std::time::{Duration, SystemTime};

/// The aggregations upstream's queries offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Aggregation {
    Avg,
    P50,
    P90,
    P95,
    P99,
    /// The value with the newest timestamp (upstream's `last`).
    Latest,
    Count,
}

impl Aggregation {
    pub const ALL: [Aggregation; 7] = [
        Aggregation::Avg,
        Aggregation::P50,
        Aggregation::P90,
        Aggregation::P95,
        Aggregation::P99,
        Aggregation::Latest,
        Aggregation::Count,
    ];

    /// The quantile in permille for the percentile aggregations.
    pub fn permille(self) -> Option<u32> {
        match self {
            Aggregation::P50 => Some(500),
            Aggregation::P90 => Some(900),
            Aggregation::P95 => Some(950),
            Aggregation::P99 => Some(990),
            _ => None,
        }
    }

    /// Upstream's `AggregationType` string (note its mixed case for P90/P95).
    pub fn upstream_name(self) -> &'static str {
        match self {
            Aggregation::Avg => "avg",
            Aggregation::P50 => "p50",
            Aggregation::P90 => "P90",
            Aggregation::P95 => "P95",
            Aggregation::P99 => "p99",
            Aggregation::Latest => "last",
            Aggregation::Count => "count",
        }
    }
}

/// The value at quantile `permille` (1..=1000) of ascending `sorted` values,
/// by upstream's definition; `None` when empty or `permille` is out of range.
pub fn percentile_of_sorted(sorted: &[f64], permille: u32) -> Option<f64> {
    if sorted.is_empty() || permille == 0 || permille > 1000 {
        return None;
    }
    let rank = sorted.len() * permille as usize / 1000;
    sorted.get(rank.saturating_sub(1)).copied()
}

/// The samples of one series inside a query window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowValues {
    /// Values sorted ascending.
    sorted: Vec<f64>,
    sum: f64,
    latest: Option<f64>,
    first_time: Option<SystemTime>,
    last_time: Option<SystemTime>,
}

impl WindowValues {
    /// Builds from `(time, value)` pairs in time order.
    pub fn from_time_ordered(samples: impl IntoIterator<Item = (SystemTime, f64)>) -> Self {
        let mut values = Self::default();
        for (time, value) in samples {
            if values.first_time.is_none() {
                values.first_time = Some(time);
            }
            values.last_time = Some(time);
            values.latest = Some(value);
            values.sum += value;
            values.sorted.push(value);
        }
        values.sorted.sort_unstable_by(f64::total_cmp);
        values
    }

    pub fn count(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    pub fn avg(&self) -> Option<f64> {
        (!self.is_empty()).then(|| self.sum / self.sorted.len() as f64)
    }

    pub fn latest(&self) -> Option<f64> {
        self.latest
    }

    /// See the module documentation for the definition.
    pub fn percentile(&self, permille: u32) -> Option<f64> {
        percentile_of_sorted(&self.sorted, permille)
    }

    /// `None` for an empty window, except `Count` which is then 0.
    pub fn value(&self, aggregation: Aggregation) -> Option<f64> {
        match aggregation {
            Aggregation::Avg => self.avg(),
            Aggregation::Latest => self.latest(),
            Aggregation::Count => Some(self.count() as f64),
            percentile => percentile.permille().and_then(|p| self.percentile(p)),
        }
    }

    /// Times of the oldest and newest sample in the window.
    pub fn time_range(&self) -> Option<(SystemTime, SystemTime)> {
        self.first_time.zip(self.last_time)
    }

    /// Span between the oldest and newest sample (zero when fewer than two),
    /// as upstream's `TimeRangeDuration`.
    pub fn duration(&self) -> Duration {
        self.time_range()
            .and_then(|(first, last)| last.duration_since(first).ok())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn window(values: &[f64]) -> WindowValues {
        WindowValues::from_time_ordered(
            values
                .iter()
                .enumerate()
                .map(|(i, v)| (at(1000 + i as u64), *v)),
        )
    }

    #[test]
    fn percentiles_of_one_to_ten_match_hand_computed_ranks() {
        // Shuffled 1..=10; sorted index floor(10p)-1.
        let w = window(&[7.0, 3.0, 10.0, 1.0, 5.0, 9.0, 2.0, 8.0, 4.0, 6.0]);
        assert_eq!(w.value(Aggregation::P50), Some(5.0)); // idx 4
        assert_eq!(w.value(Aggregation::P90), Some(9.0)); // idx 8
        assert_eq!(w.value(Aggregation::P95), Some(9.0)); // floor(9.5)=9 -> idx 8
        assert_eq!(w.value(Aggregation::P99), Some(9.0)); // floor(9.9)=9 -> idx 8
        assert_eq!(w.value(Aggregation::Avg), Some(5.5));
        assert_eq!(w.value(Aggregation::Latest), Some(6.0));
        assert_eq!(w.value(Aggregation::Count), Some(10.0));
    }

    #[test]
    fn percentiles_of_one_to_hundred() {
        let values: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let w = window(&values);
        assert_eq!(w.value(Aggregation::P50), Some(50.0));
        assert_eq!(w.value(Aggregation::P90), Some(90.0));
        assert_eq!(w.value(Aggregation::P95), Some(95.0));
        assert_eq!(w.value(Aggregation::P99), Some(99.0));
        assert_eq!(w.value(Aggregation::Latest), Some(1.0));
        assert_eq!(w.percentile(1000), Some(100.0));
        assert_eq!(w.percentile(1), Some(1.0)); // floor(0.1) = 0 -> clamped
    }

    #[test]
    fn three_samples_take_the_lower_rank() {
        let w = window(&[30.0, 10.0, 20.0]);
        assert_eq!(w.value(Aggregation::P50), Some(10.0)); // floor(1.5)=1 -> idx 0
        assert_eq!(w.value(Aggregation::P90), Some(20.0)); // floor(2.7)=2 -> idx 1
        assert_eq!(w.value(Aggregation::P99), Some(20.0));
        assert_eq!(w.value(Aggregation::Avg), Some(20.0));
    }

    #[test]
    fn single_sample_is_every_aggregate() {
        let w = window(&[4.25]);
        for aggregation in Aggregation::ALL {
            let expected = if aggregation == Aggregation::Count {
                1.0
            } else {
                4.25
            };
            assert_eq!(w.value(aggregation), Some(expected), "{aggregation:?}");
        }
        assert_eq!(w.duration(), Duration::ZERO);
    }

    #[test]
    fn empty_window_has_only_a_zero_count() {
        let w = WindowValues::default();
        for aggregation in Aggregation::ALL {
            let expected = (aggregation == Aggregation::Count).then_some(0.0);
            assert_eq!(w.value(aggregation), expected, "{aggregation:?}");
        }
        assert_eq!(w.time_range(), None);
        assert_eq!(w.duration(), Duration::ZERO);
    }

    #[test]
    fn duration_spans_first_to_last_sample() {
        let w = window(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(w.duration(), Duration::from_secs(3));
        assert_eq!(w.time_range(), Some((at(1000), at(1003))));
    }

    #[test]
    fn out_of_range_permille_is_none() {
        assert_eq!(percentile_of_sorted(&[1.0], 0), None);
        assert_eq!(percentile_of_sorted(&[1.0], 1001), None);
        assert_eq!(percentile_of_sorted(&[], 500), None);
    }
}
