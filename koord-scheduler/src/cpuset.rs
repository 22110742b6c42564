//! CPU sets and the Linux cpu-list text they come in (`0-3,8`).
//!
//! The lists come from annotations that anyone allowed to create a pod (or
//! a Reservation, or to label a node) can write, so the parser is linear in
//! its input and bounded in its output:
//!
//! - at most [`MAX_CPU_LIST_BYTES`] of text;
//! - CPU ids from 0 to [`MAX_CPU_ID`], so a set never holds more than 65,536
//!   ids and never takes more than 8 KiB (a bit set);
//! - every CPU listed once: an entry that repeats or overlaps an earlier one
//!   (`0-7,0-7`, `0-5,2-7`, `1,1`) is refused, and found with one look at
//!   the bits its range covers, so the work is bounded by the text length
//!   plus the 1,024 words of the largest set, whatever the text repeats.
//!
//! Koordinator and the kernel print each CPU once, in ascending order;
//! entries in any order are accepted, as upstream's parser does.

use std::collections::BTreeSet;
use std::fmt;

/// The highest CPU id a cpu list may name (far above Linux's NR_CPUS).
pub const MAX_CPU_ID: i32 = 65_535;

/// The longest cpu list accepted, in bytes. Listing every other CPU of a
/// 8,192-CPU machine takes about 20 KiB.
pub const MAX_CPU_LIST_BYTES: usize = 64 * 1024;

const WORD_BITS: usize = 64;
/// Words of the largest set (ids 0..=MAX_CPU_ID).
const MAX_WORDS: usize = (MAX_CPU_ID as usize + 1) / WORD_BITS;

/// Why a cpu list was refused; the message names the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("cpu list of {len} bytes is longer than the {max} bytes allowed")]
    TooLong { len: usize, max: usize },
    #[error("cpu list entry {position} {entry:?} is not a CPU id or an id range such as 0-3")]
    Malformed { position: usize, entry: String },
    #[error("cpu list entry {position} {entry:?} is a range whose start is after its end")]
    Reversed { position: usize, entry: String },
    #[error("cpu list entry {position} {entry:?} names a CPU above {max}")]
    OutOfRange {
        position: usize,
        entry: String,
        max: i32,
    },
    #[error(
        "cpu list entry {position} {entry:?} repeats CPUs listed before it (each CPU may appear once)"
    )]
    Repeated { position: usize, entry: String },
}

/// A set of CPU ids in 0..=[`MAX_CPU_ID`], as a bit set.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// No trailing zero words, so equal sets compare equal.
    words: Vec<u64>,
    len: usize,
}

fn index(cpu: i32) -> Option<(usize, u64)> {
    let cpu = usize::try_from(cpu)
        .ok()
        .filter(|c| *c <= MAX_CPU_ID as usize)?;
    Some((cpu / WORD_BITS, 1u64 << (cpu % WORD_BITS)))
}

/// The bits of word `word` that fall in `first..=last`.
fn range_mask(word: usize, first: usize, last: usize) -> u64 {
    let low = word * WORD_BITS;
    let from = first.max(low) - low;
    let to = last.min(low + WORD_BITS - 1) - low;
    let upper = if to == WORD_BITS - 1 {
        u64::MAX
    } else {
        (1u64 << (to + 1)) - 1
    };
    upper & !((1u64 << from) - 1)
}

/// A CPU id of up to five digits (no sign, no spaces inside).
fn parse_id(text: &str) -> Option<usize> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a cpu list under the bounds in the module docs.
    pub fn parse(text: &str) -> Result<Self, CpuListError> {
        if text.len() > MAX_CPU_LIST_BYTES {
            return Err(CpuListError::TooLong {
                len: text.len(),
                max: MAX_CPU_LIST_BYTES,
            });
        }
        let mut set = CpuSet::new();
        let entries = text.split(',').map(str::trim).filter(|e| !e.is_empty());
        for (position, entry) in entries.enumerate().map(|(i, e)| (i + 1, e)) {
            let owned = || entry.to_string();
            let malformed = || CpuListError::Malformed {
                position,
                entry: owned(),
            };
            let (first, last) = match entry.split_once('-') {
                Some((a, b)) => (
                    parse_id(a.trim()).ok_or_else(malformed)?,
                    parse_id(b.trim()).ok_or_else(malformed)?,
                ),
                None => {
                    let id = parse_id(entry).ok_or_else(malformed)?;
                    (id, id)
                }
            };
            if first > last {
                return Err(CpuListError::Reversed {
                    position,
                    entry: owned(),
                });
            }
            if last > MAX_CPU_ID as usize {
                return Err(CpuListError::OutOfRange {
                    position,
                    entry: owned(),
                    max: MAX_CPU_ID,
                });
            }
            if !set.insert_new_range(first, last) {
                return Err(CpuListError::Repeated {
                    position,
                    entry: owned(),
                });
            }
        }
        Ok(set)
    }

    /// Adds `first..=last` (within bounds) unless any of it is already in
    /// the set; returns whether it was added. Touches only the range's words.
    fn insert_new_range(&mut self, first: usize, last: usize) -> bool {
        let (from, to) = (first / WORD_BITS, last / WORD_BITS);
        if from < self.words.len() {
            let end = to.min(self.words.len() - 1);
            if (from..=end).any(|w| self.words[w] & range_mask(w, first, last) != 0) {
                return false;
            }
        }
        if self.words.len() <= to {
            self.words.resize(to + 1, 0);
        }
        for w in from..=to {
            self.words[w] |= range_mask(w, first, last);
        }
        self.len += last - first + 1;
        true
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, cpu: i32) -> bool {
        index(cpu).is_some_and(|(w, bit)| self.words.get(w).is_some_and(|word| word & bit != 0))
    }

    /// Adds `cpu`; ids outside 0..=[`MAX_CPU_ID`] are not held (returns false).
    pub fn insert(&mut self, cpu: i32) -> bool {
        let Some((w, bit)) = index(cpu) else {
            return false;
        };
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let added = self.words[w] & bit == 0;
        self.words[w] |= bit;
        self.len += usize::from(added);
        added
    }

    pub fn remove(&mut self, cpu: i32) -> bool {
        let Some((w, bit)) = index(cpu) else {
            return false;
        };
        let Some(word) = self.words.get_mut(w) else {
            return false;
        };
        let removed = *word & bit != 0;
        *word &= !bit;
        self.len -= usize::from(removed);
        self.trim();
        removed
    }

    /// Adds every CPU of `other` (word by word).
    pub fn union_with(&mut self, other: &CpuSet) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (mine, theirs) in self.words.iter_mut().zip(&other.words) {
            *mine |= theirs;
        }
        self.recount();
    }

    /// Drops every CPU of `other` (word by word).
    pub fn difference_with(&mut self, other: &CpuSet) {
        for (mine, theirs) in self.words.iter_mut().zip(&other.words) {
            *mine &= !theirs;
        }
        self.recount();
        self.trim();
    }

    fn recount(&mut self) {
        self.len = self.words.iter().map(|w| w.count_ones() as usize).sum();
    }

    /// The ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = i32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = *word;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // At most MAX_CPU_ID, so it fits.
                i32::try_from(w * WORD_BITS + bit).ok()
            })
        })
    }

    /// The ids as an ordered set (for the allocation algorithms).
    pub fn to_btree(&self) -> BTreeSet<i32> {
        self.iter().collect()
    }

    /// Words allocated: never more than 1,024.
    pub fn words(&self) -> usize {
        self.words.len()
    }
}

impl FromIterator<i32> for CpuSet {
    fn from_iter<T: IntoIterator<Item = i32>>(iter: T) -> Self {
        let mut set = CpuSet::new();
        set.extend(iter);
        set
    }
}

impl Extend<i32> for CpuSet {
    fn extend<T: IntoIterator<Item = i32>>(&mut self, iter: T) {
        for cpu in iter {
            self.insert(cpu);
        }
    }
}

impl fmt::Display for CpuSet {
    /// The Linux cpu list with ranges (`0-2,5,7-8`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut iter = self.iter().peekable();
        let mut first = true;
        while let Some(start) = iter.next() {
            let mut end = start;
            while iter.peek() == Some(&(end + 1)) {
                end += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

const _: () = assert!(MAX_WORDS == 1024);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn lists_parse_and_format_back() {
        let set = CpuSet::parse("0-2, 5,7-8").unwrap();
        assert_eq!(set.to_string(), "0-2,5,7-8");
        assert_eq!(set.len(), 6);
        assert!(set.contains(7) && !set.contains(6) && !set.contains(-1));
        assert_eq!(CpuSet::parse("").unwrap(), CpuSet::new());
        assert_eq!(CpuSet::parse(" , ").unwrap().to_string(), "");
        // Any order, as upstream.
        assert_eq!(CpuSet::parse("8,0-3").unwrap().to_string(), "0-3,8");
        assert_eq!(CpuSet::parse("65535").unwrap().to_string(), "65535");
        assert_eq!(CpuSet::parse("62-66,127-129").unwrap().len(), 8);
        let all = CpuSet::parse("0-65535").unwrap();
        assert_eq!((all.len(), all.words()), (65_536, 1024));
    }

    #[test]
    fn malformed_reversed_and_out_of_range_entries_are_refused_by_position() {
        let err = |text: &str| CpuSet::parse(text).unwrap_err();
        assert!(matches!(
            err("x"),
            CpuListError::Malformed { position: 1, .. }
        ));
        assert!(matches!(
            err("1,+2"),
            CpuListError::Malformed { position: 2, .. }
        ));
        assert!(matches!(err("1--2"), CpuListError::Malformed { .. }));
        assert!(matches!(err("-1"), CpuListError::Malformed { .. }));
        assert!(matches!(err("3-1"), CpuListError::Reversed { .. }));
        let message = err("0-2147483647").to_string();
        assert!(message.contains("not a CPU id"), "{message}");
        let message = err("1,65536").to_string();
        assert!(message.contains("above 65535"), "{message}");
        assert!(message.contains("entry 2"), "{message}");
    }

    #[test]
    fn repeated_and_overlapping_entries_are_refused_where_they_start() {
        for (text, position) in [
            ("0-7,0-7", 2),
            ("1,1", 2),
            ("0-5,2-7", 2),
            ("4-7,0-4", 2),
            ("0,2,4,1-2", 4),
            ("60-70,65", 2),
        ] {
            match CpuSet::parse(text) {
                Err(CpuListError::Repeated { position: at, .. }) => {
                    assert_eq!(at, position, "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // Adjacent is not overlapping.
        assert_eq!(CpuSet::parse("0-3,4-7").unwrap().to_string(), "0-7");
    }

    #[test]
    fn the_work_is_bounded_by_the_text_not_by_what_it_repeats() {
        // The hostile annotation of issue 16: 240,000 bytes, 2 billion ids
        // if every repetition were expanded.
        let hostile = vec!["0-65535"; 30_000].join(",");
        assert_eq!(
            CpuSet::parse(&hostile).unwrap_err(),
            CpuListError::TooLong {
                len: hostile.len(),
                max: MAX_CPU_LIST_BYTES
            }
        );
        // Within the length limit the second entry is refused: the parser
        // stops after expanding one range (1,024 words) and looking at the
        // next one's words once.
        let short = vec!["0-65535"; 8_000].join(",");
        assert!(short.len() <= MAX_CPU_LIST_BYTES);
        let message = CpuSet::parse(&short).unwrap_err().to_string();
        assert!(message.contains("entry 2 \"0-65535\" repeats"), "{message}");
    }

    #[test]
    fn set_operations_work_word_by_word() {
        let mut a = CpuSet::parse("0-9,100").unwrap();
        let b = CpuSet::parse("5-200").unwrap();
        a.difference_with(&b);
        assert_eq!(a.to_string(), "0-4");
        assert_eq!(a.words(), 1);
        a.union_with(&CpuSet::parse("64").unwrap());
        assert_eq!((a.to_string(), a.len()), ("0-4,64".to_string(), 6));
        assert!(a.remove(64) && !a.remove(64));
        assert_eq!(a.words(), 1);
        assert!(!a.insert(70_000) && !a.insert(-3));
        let collected: CpuSet = [3, 1, 2].into_iter().collect();
        assert_eq!(collected.to_btree(), BTreeSet::from([1, 2, 3]));
        assert_eq!(format!("{collected:?}"), "CpuSet(1-3)");
    }
}
