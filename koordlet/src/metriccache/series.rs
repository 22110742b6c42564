//! One time series: a ring buffer of compact samples that grows on demand up
//! to a fixed capacity and drops samples older than the retention.
//!
//! A sample costs 8 bytes: the time as a `u32` millisecond offset from a
//! per-series base plus the value as `f32` (about 7 significant digits: a
//! 64 GiB memory reading is exact to 8 KiB, a CPU reading to 1e-7 cores).

use super::AppendError;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Slot {
    offset_ms: u32,
    value: f32,
}

/// Bytes one stored sample occupies.
pub const BYTES_PER_SAMPLE: usize = std::mem::size_of::<Slot>();

/// Smallest allocation a new series makes.
const INITIAL_SLOTS: usize = 4;

#[derive(Debug, Clone)]
pub(crate) struct Series {
    base_ms: i64,
    slots: Vec<Slot>,
    /// Physical index of the oldest sample.
    head: usize,
    len: usize,
    /// Time of the newest sample ever appended, kept after trimming so that
    /// ordering and expiry still work on an emptied series.
    newest_ms: i64,
}

impl Series {
    pub(crate) fn new(first_ms: i64) -> Self {
        Self {
            base_ms: first_ms,
            slots: Vec::new(),
            head: 0,
            len: 0,
            newest_ms: first_ms,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn newest_ms(&self) -> i64 {
        self.newest_ms
    }

    pub(crate) fn reserved_bytes(&self) -> usize {
        self.slots.capacity() * BYTES_PER_SAMPLE
    }

    fn physical(&self, logical: usize) -> usize {
        let index = self.head + logical;
        if index >= self.slots.len() {
            index - self.slots.len()
        } else {
            index
        }
    }

    /// Logical index 0 is the oldest retained sample.
    pub(crate) fn get(&self, logical: usize) -> (i64, f64) {
        let slot = self.slots[self.physical(logical)];
        (
            self.base_ms + i64::from(slot.offset_ms),
            f64::from(slot.value),
        )
    }

    fn time_at(&self, logical: usize) -> i64 {
        self.base_ms + i64::from(self.slots[self.physical(logical)].offset_ms)
    }

    /// Logical indices `[lo, hi)` of the samples with `start_ms <= t <= end_ms`.
    pub(crate) fn index_range(&self, start_ms: i64, end_ms: i64) -> (usize, usize) {
        let lo = self.partition_point(|t| t < start_ms);
        let hi = self.partition_point(|t| t <= end_ms);
        (lo, hi.max(lo))
    }

    fn partition_point(&self, before: impl Fn(i64) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if before(self.time_at(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Drops samples older than `cutoff_ms`; returns how many.
    pub(crate) fn trim_before(&mut self, cutoff_ms: i64) -> usize {
        let mut dropped = 0;
        while self.len > 0 && self.time_at(0) < cutoff_ms {
            self.head = self.physical(1);
            self.len -= 1;
            dropped += 1;
        }
        if self.len == 0 {
            self.head = 0;
        }
        dropped
    }

    /// Releases memory when at most a quarter of the slots are in use, as
    /// after a pod's sampling interval grew or most of its history expired.
    pub(crate) fn shrink_if_sparse(&mut self) {
        if self.slots.len() > INITIAL_SLOTS && self.len * 4 <= self.slots.len() {
            let mut compact = Vec::with_capacity(self.len.max(INITIAL_SLOTS));
            compact.extend((0..self.len).map(|i| self.slots[self.physical(i)]));
            self.slots = compact;
            self.head = 0;
        }
    }

    /// Appends a sample no older than the newest one, first dropping samples
    /// older than `time_ms - retention_ms`; a full buffer overwrites its oldest sample.
    pub(crate) fn push(
        &mut self,
        time_ms: i64,
        value: f32,
        retention_ms: i64,
        max_len: usize,
    ) -> Result<(), AppendError> {
        if time_ms < self.newest_ms {
            return Err(AppendError::OutOfOrder {
                newest_ms: self.newest_ms,
                sample_ms: time_ms,
            });
        }
        self.trim_before(time_ms.saturating_sub(retention_ms));
        if self.len == 0 {
            self.base_ms = time_ms;
        }
        let offset_ms = self.offset_of(time_ms)?;
        let slot = Slot { offset_ms, value };
        let max_len = max_len.max(1);

        if self.len < self.slots.len() {
            let index = self.physical(self.len);
            self.slots[index] = slot;
            self.len += 1;
        } else if self.slots.len() < max_len {
            // Growing needs the ring unrotated so the new slot lands after the newest.
            self.slots.rotate_left(self.head);
            self.head = 0;
            if self.slots.len() == self.slots.capacity() {
                let target = (self.slots.len() * 2).clamp(INITIAL_SLOTS, max_len);
                self.slots.reserve_exact(target - self.slots.len());
            }
            self.slots.push(slot);
            self.len += 1;
        } else {
            let index = self.head;
            self.slots[index] = slot;
            self.head = self.physical(1);
        }
        self.newest_ms = time_ms;
        Ok(())
    }

    /// The offset of `time_ms` from the base, moving the base forward to the
    /// oldest retained sample when the offset no longer fits in 32 bits.
    fn offset_of(&mut self, time_ms: i64) -> Result<u32, AppendError> {
        if let Ok(offset) = u32::try_from(time_ms - self.base_ms) {
            return Ok(offset);
        }
        let oldest_ms = self.time_at(0);
        let shift = oldest_ms - self.base_ms;
        let shift = u32::try_from(shift).map_err(|_| AppendError::SpanTooLong)?;
        for i in 0..self.len {
            let index = self.physical(i);
            self.slots[index].offset_ms -= shift;
        }
        self.base_ms = oldest_ms;
        u32::try_from(time_ms - self.base_ms).map_err(|_| AppendError::SpanTooLong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(series: &Series) -> Vec<i64> {
        (0..series.len()).map(|i| series.get(i).0).collect()
    }

    #[test]
    fn grows_up_to_capacity_then_overwrites_oldest() {
        let mut series = Series::new(0);
        for t in 0..10 {
            series.push(t * 1000, t as f32, 1_000_000, 6).unwrap();
        }
        assert_eq!(series.len(), 6);
        assert_eq!(times(&series), vec![4000, 5000, 6000, 7000, 8000, 9000]);
        assert_eq!(series.get(0).1, 4.0);
        assert_eq!(series.reserved_bytes(), 6 * BYTES_PER_SAMPLE);
    }

    #[test]
    fn retention_drops_old_samples_and_keeps_order_through_wrap() {
        let mut series = Series::new(0);
        // Capacity 5, retention 3 s: the ring wraps several times.
        for t in 0..23 {
            series.push(t * 1000, t as f32, 3000, 5).unwrap();
        }
        assert_eq!(times(&series), vec![19000, 20000, 21000, 22000]);
        // A gap longer than the retention empties the buffer before the new sample.
        series.push(60_000, 1.0, 3000, 5).unwrap();
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
        assert_eq!(series.len(), 2);
    }

    #[test]
    fn index_range_is_inclusive_on_both_ends() {
        let mut series = Series::new(0);
        for t in 0..8 {
            series.push(t * 10, 0.0, 1000, 5).unwrap();
        }
        // Retained: 30 40 50 60 70 (wrapped).
        assert_eq!(series.index_range(40, 60), (1, 4));
        assert_eq!(series.index_range(0, 29), (0, 0));
        assert_eq!(series.index_range(71, 100), (5, 5));
        assert_eq!(series.index_range(60, 40), (3, 3));
        assert_eq!(series.index_range(i64::MIN, i64::MAX), (0, 5));
    }

    #[test]
    fn base_moves_when_offsets_outgrow_32_bits() {
        let retention = 1000 * 3600; // one hour
        let mut series = Series::new(0);
        series.push(0, 1.0, retention, 10).unwrap();
        let late = i64::from(u32::MAX) + 5000;
        series.push(late - 1000, 2.0, retention, 10).unwrap();
        series.push(late, 3.0, retention, 10).unwrap();
        assert_eq!(times(&series), vec![late - 1000, late]);
        assert_eq!(series.get(1).1, 3.0);
    }

    #[test]
    fn trim_and_shrink_release_memory() {
        let mut series = Series::new(0);
        for t in 0..64 {
            series.push(t, 0.0, 1000, 64).unwrap();
        }
        assert_eq!(series.reserved_bytes(), 64 * BYTES_PER_SAMPLE);
        assert_eq!(series.trim_before(60), 60);
        series.shrink_if_sparse();
        assert_eq!(times(&series), vec![60, 61, 62, 63]);
        assert!(series.reserved_bytes() <= 4 * BYTES_PER_SAMPLE);
        // Still ordered after the shrink, and appends continue.
        series.push(64, 0.0, 1000, 64).unwrap();
        assert_eq!(times(&series), vec![60, 61, 62, 63, 64]);
        assert_eq!(series.newest_ms(), 64);
    }

    #[test]
    fn growth_never_reserves_beyond_capacity() {
        let mut series = Series::new(0);
        for t in 0..1801 {
            series.push(t * 1000, 0.0, 1801 * 1000, 1801).unwrap();
        }
        assert_eq!(series.len(), 1801);
        assert_eq!(series.reserved_bytes(), 1801 * BYTES_PER_SAMPLE);
    }
}
