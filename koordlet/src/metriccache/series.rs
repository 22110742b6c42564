//! One time series: a ring buffer of compact samples, sized once from the
//! series' own sampling rate, that drops samples older than the retention.
//!
//! An entry costs 6 bytes: the time as a `u16` millisecond step from the
//! previous entry plus the value as `f32` (about 7 significant digits: a
//! 64 GiB memory reading is exact to 8 KiB, a CPU reading to 1e-7 cores).
//! Times are rebuilt by walking the steps from the newest sample backwards,
//! which is where queries look. A step longer than 65.535 s is bridged by
//! gap entries (value NaN, which the cache never stores as a sample).
//!
//! Sizing: a new series gets two slots; its first positive time step sets
//! the buffer to hold the retention at that rate plus 10% for jitter, capped
//! at the cache's maximum, in one allocation. It is only reallocated again
//! if samples later come faster than that (grows by a quarter) or, at GC,
//! much slower (shrinks to the observed rate).

use super::AppendError;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Slot {
    step_ms: u16,
    value: [u8; 4],
}

impl Slot {
    fn sample(step_ms: u16, value: f32) -> Self {
        Self {
            step_ms,
            value: value.to_ne_bytes(),
        }
    }

    fn gap() -> Self {
        Self::sample(u16::MAX, f32::NAN)
    }

    fn value(self) -> f32 {
        f32::from_ne_bytes(self.value)
    }

    fn is_gap(self) -> bool {
        self.value().is_nan()
    }
}

/// Bytes one stored sample occupies.
pub const BYTES_PER_SAMPLE: usize = std::mem::size_of::<Slot>();

/// Slots of a series whose sampling rate is not known yet.
const INITIAL_SLOTS: usize = 2;
/// Longest step one entry can hold.
const MAX_STEP_MS: i64 = u16::MAX as i64;

/// Slots that hold `retention_ms` of samples `interval_ms` apart, with 10%
/// head-room for collection jitter, plus one for a sample exactly
/// `retention_ms` old; at most `max_len`.
pub(crate) fn slots_for(retention_ms: i64, interval_ms: i64, max_len: usize) -> usize {
    let retention = u64::try_from(retention_ms).unwrap_or(0);
    let interval = u64::try_from(interval_ms).unwrap_or(1).max(1);
    let slots = (retention.saturating_mul(10)).div_ceil(interval.saturating_mul(9)) + 1;
    usize::try_from(slots)
        .unwrap_or(usize::MAX)
        .min(max_len)
        .max(1)
}

#[derive(Debug, Clone)]
pub(crate) struct Series {
    slots: Vec<Slot>,
    /// Physical index of the oldest entry.
    head: usize,
    /// Entries in use, gap entries included.
    len: usize,
    gaps: usize,
    /// Time of the oldest entry, which is always a sample.
    oldest_ms: i64,
    /// Time of the newest sample ever appended, kept after trimming so that
    /// ordering and expiry still work on an emptied series.
    newest_ms: i64,
    /// Whether the buffer was sized from an observed time step.
    sized: bool,
}

impl Series {
    pub(crate) fn new(first_ms: i64) -> Self {
        Self {
            slots: Vec::new(),
            head: 0,
            len: 0,
            gaps: 0,
            oldest_ms: first_ms,
            newest_ms: first_ms,
            sized: false,
        }
    }

    /// Retained samples (gap entries not counted).
    pub(crate) fn len(&self) -> usize {
        self.len - self.gaps
    }

    pub(crate) fn newest_ms(&self) -> i64 {
        self.newest_ms
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    pub(crate) fn reserved_bytes(&self) -> usize {
        self.capacity() * BYTES_PER_SAMPLE
    }

    fn physical(&self, logical: usize) -> usize {
        let index = self.head + logical;
        if index >= self.slots.len() {
            index - self.slots.len()
        } else {
            index
        }
    }

    fn entry(&self, logical: usize) -> Slot {
        self.slots[self.physical(logical)]
    }

    /// The newest retained sample.
    pub(crate) fn latest(&self) -> Option<(i64, f64)> {
        let last = self.len.checked_sub(1)?;
        Some((self.newest_ms, f64::from(self.entry(last).value())))
    }

    /// The samples with `start_ms <= t <= end_ms`, oldest first.
    pub(crate) fn window(&self, start_ms: i64, end_ms: i64) -> Vec<(i64, f64)> {
        let mut found = Vec::new();
        if start_ms > end_ms {
            return found;
        }
        let mut time = self.newest_ms;
        for logical in (0..self.len).rev() {
            if time < start_ms {
                break;
            }
            let slot = self.entry(logical);
            if time <= end_ms && !slot.is_gap() {
                found.push((time, f64::from(slot.value())));
            }
            time -= i64::from(slot.step_ms);
        }
        found.reverse();
        found
    }

    /// Removes the entry at the head.
    fn remove_head(&mut self) {
        self.head = self.physical(1);
        self.len -= 1;
        if self.len == 0 {
            self.head = 0;
        } else {
            self.oldest_ms += i64::from(self.slots[self.head].step_ms);
        }
    }

    /// Removes the oldest sample and the gap entries after it.
    fn pop_oldest(&mut self) {
        self.remove_head();
        while self.len > 0 && self.entry(0).is_gap() {
            self.gaps -= 1;
            self.remove_head();
        }
    }

    /// Drops samples older than `cutoff_ms`; returns how many.
    pub(crate) fn trim_before(&mut self, cutoff_ms: i64) -> usize {
        let mut dropped = 0;
        while self.len > 0 && self.oldest_ms < cutoff_ms {
            self.pop_oldest();
            dropped += 1;
        }
        dropped
    }

    /// Moves the entries into one allocation of exactly `capacity` slots,
    /// dropping the oldest samples if they do not fit.
    fn reallocate(&mut self, capacity: usize) {
        let capacity = capacity.max(1);
        while self.len > capacity {
            self.pop_oldest();
        }
        let mut slots = Vec::with_capacity(capacity);
        slots.extend((0..self.len).map(|i| self.entry(i)));
        self.slots = slots;
        self.head = 0;
    }

    /// Appends after the newest entry; the caller made room.
    fn push_entry(&mut self, slot: Slot) {
        debug_assert!(self.len < self.slots.capacity());
        if self.len < self.slots.len() {
            let index = self.physical(self.len);
            self.slots[index] = slot;
        } else {
            // The in-use part fills the vector: unrotate it so the new entry
            // lands after the newest (never reallocates: len < capacity).
            self.slots.rotate_left(self.head);
            self.head = 0;
            self.slots.push(slot);
        }
        self.len += 1;
    }

    /// Hands back memory when the series samples much less often than its
    /// buffer was sized for (e.g. its first two samples came close together).
    /// Judged only once the series spans half the retention.
    pub(crate) fn shrink_if_sparse(&mut self, retention_ms: i64, max_len: usize) {
        let samples = self.len();
        let span = self.newest_ms - self.oldest_ms;
        if samples < 2 || self.len * 4 > self.capacity() || span < retention_ms / 2 {
            return;
        }
        let interval = span / i64::try_from(samples - 1).unwrap_or(i64::MAX);
        let target = slots_for(retention_ms, interval, max_len).max(self.len + 1);
        if target < self.capacity() {
            self.reallocate(target);
        }
    }

    /// Appends a sample no older than the newest one, first dropping samples
    /// older than `time_ms - retention_ms`; a full buffer at `max_len` drops
    /// its oldest sample.
    pub(crate) fn push(
        &mut self,
        time_ms: i64,
        value: f32,
        retention_ms: i64,
        max_len: usize,
    ) -> Result<(), AppendError> {
        // NaN marks gap entries, so only finite values are samples.
        if !value.is_finite() {
            return Err(AppendError::NotFinite);
        }
        if time_ms < self.newest_ms {
            return Err(AppendError::OutOfOrder {
                newest_ms: self.newest_ms,
                sample_ms: time_ms,
            });
        }
        self.trim_before(time_ms.saturating_sub(retention_ms));
        let max_len = max_len.max(1);
        let step = if self.len == 0 {
            0
        } else {
            time_ms - self.newest_ms
        };
        if self.slots.capacity() == 0 {
            self.reallocate(INITIAL_SLOTS.min(max_len));
        }
        if !self.sized && step > 0 {
            self.sized = true;
            let target = slots_for(retention_ms, step, max_len);
            if target != self.capacity() {
                self.reallocate(target);
            }
        }

        let mut gaps = gaps_for(step);
        if self.capacity() - self.len < gaps + 1 {
            // Everything left is inside the retention: grow while allowed,
            // then drop the oldest.
            if self.capacity() < max_len {
                let grown = self.capacity() + self.capacity() / 4 + 2;
                self.reallocate(grown.max(self.len + gaps + 1).min(max_len));
            }
            while self.len > 0 && self.capacity() - self.len < gaps + 1 {
                self.pop_oldest();
            }
        }
        let mut step = step;
        if self.len == 0 {
            // Nothing before it: no step to bridge.
            gaps = 0;
            step = 0;
            self.oldest_ms = time_ms;
        }
        for _ in 0..gaps {
            self.push_entry(Slot::gap());
            self.gaps += 1;
            step -= MAX_STEP_MS;
        }
        self.push_entry(Slot::sample(u16::try_from(step).unwrap_or(u16::MAX), value));
        self.newest_ms = time_ms;
        Ok(())
    }
}

/// Gap entries needed before a sample `step_ms` after the previous entry.
fn gaps_for(step_ms: i64) -> usize {
    usize::try_from((step_ms - 1).max(0) / MAX_STEP_MS).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(series: &Series) -> Vec<i64> {
        series
            .window(i64::MIN, i64::MAX)
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    }

    /// Pushes and checks the buffer never holds more entries than it reserved.
    fn push(series: &mut Series, t: i64, v: f32, retention: i64, max_len: usize) {
        series.push(t, v, retention, max_len).unwrap();
        assert!(series.len <= series.capacity());
        assert!(series.capacity() <= max_len.max(INITIAL_SLOTS));
    }

    #[test]
    fn slots_cover_the_retention_with_head_room() {
        // 30 min at 10 s: 181 needed, 201 with 10% head-room.
        assert_eq!(slots_for(1_800_000, 10_000, 1801), 201);
        // At 1 s the cap applies.
        assert_eq!(slots_for(1_800_000, 1000, 1801), 1801);
        assert_eq!(slots_for(1_800_000, 0, 1801), 1801);
        assert_eq!(slots_for(0, 1000, 1801), 1);
    }

    #[test]
    fn sized_once_at_full_capacity_then_overwrites_oldest() {
        let mut series = Series::new(0);
        let mut capacities = Vec::new();
        for t in 0..4000 {
            push(&mut series, t * 1000, t as f32, 1_800_000, 1801);
            if capacities.last() != Some(&series.capacity()) {
                capacities.push(series.capacity());
            }
        }
        // Two slots for the first sample, then one allocation for good.
        assert_eq!(capacities, vec![2, 1801]);
        assert_eq!(series.len(), 1801);
        assert_eq!(series.reserved_bytes(), 1801 * BYTES_PER_SAMPLE);
        let kept = times(&series);
        assert_eq!(kept.first(), Some(&(2199 * 1000)));
        assert_eq!(kept.last(), Some(&(3999 * 1000)));
        assert_eq!(series.latest(), Some((3_999_000, 3999.0)));
    }

    #[test]
    fn slower_series_get_smaller_buffers() {
        let mut series = Series::new(0);
        for t in 0..500 {
            push(&mut series, t * 10_000, 0.0, 1_800_000, 1801);
        }
        assert_eq!(series.capacity(), 201);
        assert_eq!(series.len(), 181);
    }

    #[test]
    fn full_buffer_overwrites_oldest_at_max_len() {
        let mut series = Series::new(0);
        for t in 0..10 {
            push(&mut series, t * 1000, t as f32, 1_000_000, 6);
        }
        assert_eq!(series.len(), 6);
        assert_eq!(times(&series), vec![4000, 5000, 6000, 7000, 8000, 9000]);
        assert_eq!(series.window(4000, 4000), vec![(4000, 4.0)]);
        assert_eq!(series.reserved_bytes(), 6 * BYTES_PER_SAMPLE);
    }

    #[test]
    fn retention_drops_old_samples_and_keeps_order_through_wrap() {
        let mut series = Series::new(0);
        // Capacity 5, retention 3 s: the ring wraps several times.
        for t in 0..23 {
            push(&mut series, t * 1000, t as f32, 3000, 5);
        }
        assert_eq!(times(&series), vec![19000, 20000, 21000, 22000]);
        // A gap longer than the retention empties the buffer before the new sample.
        push(&mut series, 60_000, 1.0, 3000, 5);
        assert_eq!(times(&series), vec![60000]);
    }

    #[test]
    fn out_of_order_is_rejected_equal_time_is_kept() {
        let mut series = Series::new(5000);
        series.push(5000, 1.0, 10_000, 4).unwrap();
        series.push(5000, 2.0, 10_000, 4).unwrap();
        assert_eq!(
            series.push(4999, 3.0, 10_000, 4),
            Err(AppendError::OutOfOrder {
                newest_ms: 5000,
                sample_ms: 4999
            })
        );
        assert_eq!(
            series.push(6000, f32::NAN, 10_000, 4),
            Err(AppendError::NotFinite)
        );
        assert_eq!(series.len(), 2);
        assert_eq!(series.window(0, 10_000), vec![(5000, 1.0), (5000, 2.0)]);
    }

    #[test]
    fn window_is_inclusive_on_both_ends() {
        let mut series = Series::new(0);
        for t in 0..8 {
            push(&mut series, t * 10, t as f32, 1000, 5);
        }
        // Retained: 30 40 50 60 70 (wrapped).
        assert_eq!(series.window(40, 60), vec![(40, 4.0), (50, 5.0), (60, 6.0)]);
        assert!(series.window(0, 29).is_empty());
        assert!(series.window(71, 100).is_empty());
        assert!(series.window(60, 40).is_empty());
        assert_eq!(times(&series), vec![30, 40, 50, 60, 70]);
    }

    #[test]
    fn long_steps_are_bridged_by_gap_entries() {
        let retention = 3_600_000; // one hour
        let mut series = Series::new(0);
        push(&mut series, 0, 1.0, retention, 100);
        push(&mut series, 1000, 2.0, retention, 100);
        // 65.535 s fits one step; one more millisecond needs a gap entry.
        push(&mut series, 1000 + 65_535, 3.0, retention, 100);
        push(&mut series, 1000 + 2 * 65_535 + 1, 4.0, retention, 100);
        // 20 minutes: 18 gap entries.
        let late = 1000 + 2 * 65_535 + 1 + 1_200_000;
        push(&mut series, late, 5.0, retention, 100);
        assert_eq!(series.len(), 5);
        assert_eq!(series.gaps, 1 + 18);
        assert_eq!(
            series.window(i64::MIN, i64::MAX),
            vec![
                (0, 1.0),
                (1000, 2.0),
                (66_535, 3.0),
                (132_071, 4.0),
                (late, 5.0)
            ]
        );
        assert_eq!(series.latest(), Some((late, 5.0)));
        // Trimming past the first samples leaves no gap entry at the front.
        assert_eq!(series.trim_before(100_000), 3);
        assert_eq!(times(&series), vec![132_071, late]);
        assert_eq!(series.gaps, 18);
    }

    #[test]
    fn gap_entries_never_outgrow_a_small_buffer() {
        let mut series = Series::new(0);
        for t in 0..5 {
            push(&mut series, t * 100_000, t as f32, 1_000_000, 4);
        }
        // Each step needs a gap entry, so the 4 slots hold two samples.
        assert_eq!(times(&series), vec![300_000, 400_000]);
        assert_eq!(series.capacity(), 4);
    }

    #[test]
    fn faster_samples_grow_the_buffer_up_to_max_len() {
        let mut series = Series::new(0);
        // Sized for 10 s steps: 201 slots for 30 min.
        push(&mut series, 0, 0.0, 1_800_000, 1801);
        push(&mut series, 10_000, 0.0, 1_800_000, 1801);
        assert_eq!(series.capacity(), 201);
        for t in 11..3000 {
            push(&mut series, t * 1000, 0.0, 1_800_000, 1801);
        }
        // Every retained sample kept: 30 min at 1 s.
        assert_eq!(series.len(), 1801);
        assert_eq!(series.capacity(), 1801);
    }

    #[test]
    fn trim_and_shrink_release_memory() {
        let retention = 1_800_000;
        let mut series = Series::new(0);
        // Two close samples size the buffer for 1 s steps...
        push(&mut series, 0, 0.0, retention, 1801);
        push(&mut series, 1000, 0.0, retention, 1801);
        assert_eq!(series.capacity(), 1801);
        // ...but the series really samples every 30 s.
        for t in 1..=40 {
            push(&mut series, 1000 + t * 30_000, 0.0, retention, 1801);
        }
        // Spans 20 min > half the retention, 42 of 1801 slots used.
        series.shrink_if_sparse(retention, 1801);
        // 1201 s over 41 steps is 29.3 s: ceil(1800 / 29.3 / 0.9) + 1 slots.
        assert_eq!(series.capacity(), 70);
        assert_eq!(series.len(), 42);
        assert_eq!(times(&series)[..3], [0, 1000, 31_000]);
        // A young sparse series is left alone.
        let mut young = Series::new(0);
        push(&mut young, 0, 0.0, retention, 1801);
        push(&mut young, 1000, 0.0, retention, 1801);
        young.shrink_if_sparse(retention, 1801);
        assert_eq!(young.capacity(), 1801);
        // Appends continue after a trim to empty.
        assert_eq!(series.trim_before(i64::MAX), 42);
        assert_eq!(series.len(), 0);
        push(&mut series, 2_000_000, 7.0, retention, 1801);
        assert_eq!(times(&series), vec![2_000_000]);
        assert_eq!(series.newest_ms(), 2_000_000);
    }
}
