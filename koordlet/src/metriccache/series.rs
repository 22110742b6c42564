//! One time series: samples packed into small compressed blocks, dropping
//! samples older than the retention.
//!
//! Encoding (per block of up to [`BLOCK_SAMPLES`] samples): the first value as
//! raw `f32` bits; then per sample one varint tag holding the time step's
//! change from the previous step (delta of delta, zig-zag, in ms) and a
//! "value changed" bit, followed by the new `f32` bits only when the value
//! changed. A collector's regular steps make the tag one byte, so a value
//! that stays the same (an idle container's CPU, a zero throttle ratio, a
//! steady memory figure) costs 1 byte a sample and one that changes every
//! sample about 5-6 bytes.
//!
//! Memory shape: the open block appends into a buffer the series keeps for
//! its life (no regrowth once it fits a block); a full block is copied once
//! into an exact-size allocation and the oldest blocks are freed whole as
//! they expire. No buffer doubles, so the heap is not left with the freed
//! halves of grown buffers.
//!
//! Values are `f32` (about 7 significant digits: a 64 GiB memory reading is
//! exact to 8 KiB, a CPU reading to 1e-7 cores).

use std::collections::VecDeque;

/// Why one sample was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error(
        "sample at {sample_ms} ms is older than the newest sample of its series at {newest_ms} ms"
    )]
    OutOfOrder { newest_ms: i64, sample_ms: i64 },
    #[error("sample value is not a finite number")]
    NotFinite,
}

/// Samples per block: large enough that the block header (~60 bytes with
/// the allocation) is under half a byte a sample, small enough that expiry
/// holds at most one partly expired block.
pub const BLOCK_SAMPLES: u32 = 128;

/// About the bytes a sample takes when its value changes every sample (tag
/// plus `f32` bits, with the block overhead); an unchanged value takes 1.5.
pub const BYTES_PER_SAMPLE: usize = 6;

#[derive(Debug, Clone, Default)]
struct Block {
    first_ms: i64,
    last_ms: i64,
    count: u32,
    /// The step before the newest sample, for the next delta of delta.
    last_step: i64,
    last_bits: u32,
    bytes: Vec<u8>,
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

fn write_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return Some(value);
        }
    }
    None
}

fn read_bits(bytes: &[u8], pos: &mut usize) -> Option<u32> {
    let raw: [u8; 4] = bytes.get(*pos..*pos + 4)?.try_into().ok()?;
    *pos += 4;
    Some(u32::from_le_bytes(raw))
}

impl Block {
    fn push(&mut self, time_ms: i64, bits: u32) {
        if self.count == 0 {
            self.first_ms = time_ms;
            self.last_step = 0;
            self.bytes.extend_from_slice(&bits.to_le_bytes());
        } else {
            let step = time_ms.wrapping_sub(self.last_ms);
            let changed = bits != self.last_bits;
            let tag = (zigzag(step.wrapping_sub(self.last_step)) << 1) | u64::from(changed);
            write_varint(&mut self.bytes, tag);
            if changed {
                self.bytes.extend_from_slice(&bits.to_le_bytes());
            }
            self.last_step = step;
        }
        self.last_ms = time_ms;
        self.last_bits = bits;
        self.count += 1;
    }

    /// A copy in an exact-size allocation.
    fn sealed_copy(&self) -> Block {
        Block {
            bytes: self.bytes.as_slice().to_vec(),
            ..*self
        }
    }

    fn clear(&mut self) {
        self.count = 0;
        self.bytes.clear();
    }

    fn samples(&self) -> BlockSamples<'_> {
        BlockSamples {
            block: self,
            pos: 0,
            index: 0,
            time: self.first_ms,
            step: 0,
            bits: 0,
        }
    }
}

/// Decodes a block's `(time_ms, f32 bits)` in order.
struct BlockSamples<'a> {
    block: &'a Block,
    pos: usize,
    index: u32,
    time: i64,
    step: i64,
    bits: u32,
}

impl Iterator for BlockSamples<'_> {
    type Item = (i64, u32);

    fn next(&mut self) -> Option<(i64, u32)> {
        if self.index >= self.block.count {
            return None;
        }
        let bytes = &self.block.bytes;
        if self.index == 0 {
            self.bits = read_bits(bytes, &mut self.pos)?;
        } else {
            let tag = read_varint(bytes, &mut self.pos)?;
            self.step = self.step.wrapping_add(unzigzag(tag >> 1));
            self.time = self.time.wrapping_add(self.step);
            if tag & 1 == 1 {
                self.bits = read_bits(bytes, &mut self.pos)?;
            }
        }
        self.index += 1;
        Some((self.time, self.bits))
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Series {
    /// Full blocks, oldest first.
    sealed: VecDeque<Block>,
    /// The block being appended to (after every sealed one).
    open: Block,
    /// Samples at the front of the oldest block that were dropped already.
    skip: u32,
    /// Retained samples.
    len: usize,
    /// Time of the oldest retained sample.
    oldest_ms: i64,
    /// Time of the newest sample ever appended, kept after trimming so that
    /// ordering and expiry still work on an emptied series.
    newest_ms: i64,
}

impl Series {
    pub(crate) fn new(first_ms: i64) -> Self {
        Self {
            sealed: VecDeque::new(),
            open: Block::default(),
            skip: 0,
            len: 0,
            oldest_ms: first_ms,
            newest_ms: first_ms,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn newest_ms(&self) -> i64 {
        self.newest_ms
    }

    /// Heap bytes held: block headers, sealed blocks, the open buffer.
    pub(crate) fn reserved_bytes(&self) -> usize {
        self.sealed.capacity() * std::mem::size_of::<Block>()
            + self
                .sealed
                .iter()
                .map(|b| b.bytes.capacity())
                .sum::<usize>()
            + self.open.bytes.capacity()
    }

    fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.sealed
            .iter()
            .chain(std::iter::once(&self.open))
            .filter(|block| block.count > 0)
    }

    fn front(&self) -> Option<&Block> {
        self.blocks().next()
    }

    /// The newest retained sample.
    pub(crate) fn latest(&self) -> Option<(i64, f64)> {
        if self.len == 0 {
            return None;
        }
        let newest = self.blocks().last()?;
        Some((self.newest_ms, f64::from(f32::from_bits(newest.last_bits))))
    }

    /// The samples with `start_ms <= t <= end_ms`, oldest first.
    pub(crate) fn window(&self, start_ms: i64, end_ms: i64) -> Vec<(i64, f64)> {
        let mut found = Vec::new();
        if start_ms > end_ms || self.len == 0 {
            return found;
        }
        for (index, block) in self.blocks().enumerate() {
            if block.last_ms < start_ms {
                continue;
            }
            if block.first_ms > end_ms {
                break;
            }
            let skip = if index == 0 { self.skip } else { 0 };
            for (time, bits) in block.samples().skip(skip as usize) {
                if time > end_ms {
                    break;
                }
                if time >= start_ms {
                    found.push((time, f64::from(f32::from_bits(bits))));
                }
            }
        }
        found
    }

    /// Forgets every sample, keeping the open buffer for reuse.
    fn reset(&mut self) {
        self.sealed.clear();
        self.open.clear();
        self.skip = 0;
        self.len = 0;
    }

    fn drop_front_block(&mut self) {
        if self.sealed.pop_front().is_none() {
            self.open.clear();
        }
        self.skip = 0;
    }

    /// Re-reads the oldest retained sample's time after the front moved.
    fn refresh_oldest(&mut self) {
        let oldest = self
            .front()
            .and_then(|block| block.samples().nth(self.skip as usize));
        match oldest {
            Some((time, _)) => self.oldest_ms = time,
            None => self.reset(),
        }
    }

    fn pop_oldest(&mut self) {
        let Some(front_count) = self.front().map(|block| block.count) else {
            self.reset();
            return;
        };
        self.len = self.len.saturating_sub(1);
        self.skip += 1;
        if self.skip >= front_count {
            self.drop_front_block();
        }
        if self.len == 0 {
            self.reset();
        } else {
            self.refresh_oldest();
        }
    }

    /// Drops samples older than `cutoff_ms`; returns how many.
    pub(crate) fn trim_before(&mut self, cutoff_ms: i64) -> usize {
        let mut dropped = 0;
        while self.len > 0 && self.oldest_ms < cutoff_ms {
            let Some(front) = self.front() else {
                self.reset();
                break;
            };
            let remaining = (front.count - self.skip) as usize;
            if front.last_ms < cutoff_ms {
                dropped += remaining;
                self.len = self.len.saturating_sub(remaining);
                self.drop_front_block();
                if self.len == 0 {
                    self.reset();
                } else {
                    self.refresh_oldest();
                }
                continue;
            }
            // The cutoff falls inside the front block.
            let first_kept = front
                .samples()
                .enumerate()
                .skip(self.skip as usize)
                .find(|(_, (time, _))| *time >= cutoff_ms);
            let Some((index, (time, _))) = first_kept else {
                self.reset();
                break;
            };
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            let removed = (index - self.skip) as usize;
            dropped += removed;
            self.len = self.len.saturating_sub(removed);
            self.skip = index;
            self.oldest_ms = time;
        }
        dropped
    }

    /// Returns memory of an emptied series and of the block list after
    /// many blocks expired.
    pub(crate) fn release_unused(&mut self) {
        if self.len == 0 {
            self.sealed = VecDeque::new();
            self.open.bytes = Vec::new();
        } else if self.sealed.capacity() > 2 * self.sealed.len() + 2 {
            self.sealed.shrink_to_fit();
        }
    }

    /// Appends a sample no older than the newest one, first dropping samples
    /// older than `time_ms - retention_ms`; at `max_len` samples the oldest
    /// is dropped.
    pub(crate) fn push(
        &mut self,
        time_ms: i64,
        value: f32,
        retention_ms: i64,
        max_len: usize,
    ) -> Result<(), AppendError> {
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
        while self.len > 0 && self.len >= max_len.max(1) {
            self.pop_oldest();
        }
        if self.len == 0 {
            // Start a fresh block so no step spans the emptied time.
            self.reset();
            self.oldest_ms = time_ms;
        }
        if self.open.count >= BLOCK_SAMPLES {
            self.sealed.push_back(self.open.sealed_copy());
            self.open.clear();
        }
        self.open.push(time_ms, value.to_bits());
        self.len += 1;
        self.newest_ms = time_ms;
        Ok(())
    }
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

    fn push(series: &mut Series, t: i64, v: f32, retention: i64, max_len: usize) {
        series.push(t, v, retention, max_len).unwrap();
        assert!(series.len() <= max_len);
        assert_eq!(series.window(i64::MIN, i64::MAX).len(), series.len());
    }

    #[test]
    fn varints_and_zigzag_round_trip() {
        for value in [0i64, 1, -1, 63, -64, 64, 1000, -1000, i64::MAX, i64::MIN] {
            let mut bytes = Vec::new();
            write_varint(&mut bytes, zigzag(value));
            let mut pos = 0;
            assert_eq!(read_varint(&bytes, &mut pos).map(unzigzag), Some(value));
            assert_eq!(pos, bytes.len());
        }
        // A small change of step fits one byte with the value bit.
        let mut bytes = Vec::new();
        write_varint(&mut bytes, zigzag(-20) << 1 | 1);
        assert_eq!(bytes.len(), 1);
    }

    #[test]
    fn irregular_times_and_values_decode_exactly() {
        let mut series = Series::new(0);
        let mut expected = Vec::new();
        let mut time = 1_700_000_000_000i64;
        let steps = [0, 1, 999, 1003, 10_000, 0, 3_600_000, 7, 65_536, 1000];
        for i in 0..1000usize {
            time += steps[i % steps.len()];
            let value = if i % 3 == 0 { 42.5 } else { i as f32 * 0.37 };
            push(&mut series, time, value, i64::MAX / 4, 10_000);
            expected.push((time, f64::from(value)));
        }
        assert_eq!(series.window(i64::MIN, i64::MAX), expected);
        assert_eq!(series.latest(), expected.last().copied());
        assert_eq!(series.sealed.len(), 1000 / BLOCK_SAMPLES as usize);
    }

    #[test]
    fn steady_series_cost_about_a_byte_a_sample_changing_ones_at_most_six() {
        let (retention, max_len) = (1_800_000, 1801);
        let mut steady = Series::new(0);
        let mut changing = Series::new(0);
        for s in 0..4000i64 {
            // Collection jitter of a few milliseconds.
            let t = s * 1000 + (s * 7919) % 23;
            push(&mut steady, t, 0.0, retention, max_len);
            push(&mut changing, t, (s as f32).sin() * 3.0, retention, max_len);
        }
        assert_eq!(steady.len(), 1801);
        assert_eq!(changing.len(), 1801);
        let steady_per_sample = steady.reserved_bytes() as f64 / 1801.0;
        let changing_per_sample = changing.reserved_bytes() as f64 / 1801.0;
        assert!(steady_per_sample < 2.0, "{steady_per_sample}");
        // 5 bytes of tag and value plus block headers and the open buffer.
        assert!(
            changing_per_sample < BYTES_PER_SAMPLE as f64 + 0.5,
            "{changing_per_sample}"
        );
        // Sealed blocks are exact-size copies: nothing reserved beyond use.
        assert!(
            steady
                .sealed
                .iter()
                .all(|b| b.bytes.capacity() == b.bytes.len())
        );
    }

    #[test]
    fn full_series_drops_oldest_at_max_len() {
        let mut series = Series::new(0);
        for t in 0..10 {
            push(&mut series, t * 1000, t as f32, 1_000_000, 6);
        }
        assert_eq!(series.len(), 6);
        assert_eq!(times(&series), vec![4000, 5000, 6000, 7000, 8000, 9000]);
        assert_eq!(series.window(4000, 4000), vec![(4000, 4.0)]);
        // Across block boundaries too.
        let mut long = Series::new(0);
        for t in 0..1000 {
            push(&mut long, t, t as f32, 1_000_000, 300);
        }
        assert_eq!(times(&long), (700..1000).collect::<Vec<i64>>());
        assert_eq!(long.oldest_ms, 700);
    }

    #[test]
    fn retention_drops_old_samples_and_keeps_order() {
        let mut series = Series::new(0);
        for t in 0..23 {
            push(&mut series, t * 1000, t as f32, 3000, 5);
        }
        assert_eq!(times(&series), vec![19000, 20000, 21000, 22000]);
        // A gap longer than the retention empties the series before the new sample.
        push(&mut series, 60_000, 1.0, 3000, 5);
        assert_eq!(times(&series), vec![60000]);
        assert_eq!(series.sealed.len(), 0);
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
        assert_eq!(times(&series), vec![30, 40, 50, 60, 70]);
        assert_eq!(series.window(40, 60), vec![(40, 4.0), (50, 5.0), (60, 6.0)]);
        assert!(series.window(0, 29).is_empty());
        assert!(series.window(71, 100).is_empty());
        assert!(series.window(60, 40).is_empty());
    }

    #[test]
    fn trim_inside_and_across_blocks() {
        let mut series = Series::new(0);
        for t in 0..1000 {
            push(&mut series, t * 10, 1.0, i64::MAX / 4, 100_000);
        }
        // Inside the first block.
        assert_eq!(series.trim_before(50), 5);
        assert_eq!(series.oldest_ms, 50);
        // Across several whole blocks into the middle of one.
        assert_eq!(series.trim_before(5005), 496);
        assert_eq!(series.len(), 499);
        assert_eq!(times(&series).first(), Some(&5010));
        assert_eq!(series.sealed.len(), 7 - 3);
        assert_eq!(series.window(9980, 20_000), vec![(9980, 1.0), (9990, 1.0)]);
        // Everything.
        assert_eq!(series.trim_before(i64::MAX), 499);
        assert_eq!(series.latest(), None);
        series.release_unused();
        assert_eq!(series.reserved_bytes(), 0);
        // Appends continue after an emptied series.
        push(&mut series, 20_000, 7.0, 1000, 10);
        assert_eq!(series.latest(), Some((20_000, 7.0)));
        assert_eq!(series.newest_ms(), 20_000);
    }
}
