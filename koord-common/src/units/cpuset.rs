//! CPU id sets and the Linux cpu-list text they come in (`0-3,8`): the value
//! of `cpuset.cpus` / `cpuset.mems`, of `/sys/devices/system/cpu/online`,
//! and of the Koordinator annotations that carry cpusets.
//!
//! A [`CpuSet`] is a bit set of ids 0..=[`MAX_CPU_ID`], so it never holds
//! more than 65,536 ids nor takes more than 8 KiB, whatever text it came
//! from. Ids are `u32`; the Koordinator APIs' `int32` CPU ids (the
//! scheduler's) go in and out through [`CpuId`].
//!
//! # Three readings of a cpu list
//!
//! Every list is read under the same bounds: at most a fixed number of
//! bytes, ids of one to five ASCII digits up to [`MAX_CPU_ID`] (no signs),
//! ranges `N-M` ascending, and work linear in the text plus the 1,024 words
//! of the largest set, whatever the text repeats. Where the text comes from
//! decides the rest:
//!
//! | reader | for | spaces | empty entries | repeats | bytes |
//! |---|---|---|---|---|---|
//! | [`str::parse`] (`FromStr`) | kernel files, kubelet's state, JSON | around entries and ids | refused (the empty text is the empty set) | accepted | [`MAX_CPU_LIST_BYTES`] |
//! | [`CpuSet::parse_each_cpu_once`] | scheduler annotations (resource-status, reservations, node reservation, kubelet policy) | around entries and ids | skipped | refused | [`MAX_CPU_LIST_BYTES`] |
//! | [`CpuSet::parse_exact`] | koordlet's pod cpuset annotation | refused | refused, as is the empty text | accepted | [`MAX_EXACT_CPU_LIST_BYTES`] |
//!
//! Repeated and overlapping entries (`0-3,2-5`, `1,1`): the kernel and
//! upstream Koordinator accept them (a set is built), so the kernel-file and
//! the exact readings do too, merging them in constant work per entry. The
//! scheduler's annotations refuse them, naming the first entry that repeats
//! a CPU: each CPU is listed once there, as Koordinator writes them.
//! Entries may come in any order in every reading, as upstream's parser
//! takes them; lists print ascending with ranges (`0-3,8,10-11`).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// The highest CPU (or memory node) id a set holds, far above Linux's
/// `NR_CPUS`; it bounds what a malformed list can make us allocate.
pub const MAX_CPU_ID: u32 = 65_535;

/// The longest cpu list read from the kernel or a scheduler annotation, in
/// bytes. Listing every other CPU of an 8,192-CPU machine takes about 20 KiB.
pub const MAX_CPU_LIST_BYTES: usize = 64 * 1024;

/// The longest cpu list [`CpuSet::parse_exact`] takes: a pod annotation
/// names a handful of ranges.
pub const MAX_EXACT_CPU_LIST_BYTES: usize = 4096;

/// At most this much of a refused entry is quoted in an error.
const MAX_QUOTED_ENTRY_BYTES: usize = 64;

const WORD_BITS: u32 = u64::BITS;
/// Words of the largest set (ids 0..=MAX_CPU_ID).
const MAX_WORDS: usize = (MAX_CPU_ID as usize + 1) / WORD_BITS as usize;
const _: () = assert!(MAX_WORDS == 1024);

/// Why a cpu list (or an id given to a constructor) was refused; the
/// message names the entry and the limit. Entries are counted from 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    #[error("cpu list of {len} bytes is longer than the {max} bytes allowed")]
    TooLong { len: usize, max: usize },
    #[error("cpu list is empty")]
    Empty,
    #[error("cpu list entry {position} {entry:?} is not a CPU id or an id range such as 0-3")]
    Malformed { position: usize, entry: String },
    #[error("cpu list entry {position} {entry:?} is a range whose start is after its end")]
    Reversed { position: usize, entry: String },
    #[error("cpu list entry {position} {entry:?} names a CPU above {max}")]
    OutOfRange {
        position: usize,
        entry: String,
        max: u32,
    },
    #[error(
        "cpu list entry {position} {entry:?} repeats CPUs listed before it (each CPU may appear once)"
    )]
    Repeated { position: usize, entry: String },
}

/// An integer type CPU ids are held in outside the set: `u32` (kernel
/// files, koordlet) or `i32` (the `int32` ids of the Koordinator APIs).
pub trait CpuId: Copy + 'static {
    /// The id as a bit index, or None when it is outside 0..=[`MAX_CPU_ID`].
    fn to_index(self) -> Option<u32>;
    /// The id of a bit index (at most [`MAX_CPU_ID`], so it always fits).
    fn from_index(index: u32) -> Self;
}

impl CpuId for u32 {
    fn to_index(self) -> Option<u32> {
        (self <= MAX_CPU_ID).then_some(self)
    }

    fn from_index(index: u32) -> Self {
        index
    }
}

impl CpuId for i32 {
    fn to_index(self) -> Option<u32> {
        u32::try_from(self).ok().and_then(CpuId::to_index)
    }

    fn from_index(index: u32) -> Self {
        // Indexes never exceed MAX_CPU_ID, which fits.
        i32::try_from(index).unwrap_or(i32::MAX)
    }
}

/// A set of CPU ids in 0..=[`MAX_CPU_ID`], as a bit set.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Bit `i % 64` of word `i / 64` is CPU `i`. No trailing zero words, so
    /// equal sets have equal representations.
    words: Vec<u64>,
    /// Ids held, kept so `len` is constant time.
    len: usize,
}

/// The bits of word `word` that fall in `first..=last`.
fn range_mask(word: usize, first: u32, last: u32) -> u64 {
    let low = word as u64 * u64::from(WORD_BITS);
    let from = u64::from(first).max(low) - low;
    let to = u64::from(last).min(low + u64::from(WORD_BITS) - 1) - low;
    let upper = if to == u64::from(WORD_BITS) - 1 {
        u64::MAX
    } else {
        (1u64 << (to + 1)) - 1
    };
    upper & !((1u64 << from) - 1)
}

fn word_of(index: u32) -> (usize, u64) {
    ((index / WORD_BITS) as usize, 1u64 << (index % WORD_BITS))
}

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// The set `{first, ..., last}`.
    pub fn from_range(first: u32, last: u32) -> Result<Self, CpuListError> {
        let entry = || format!("{first}-{last}");
        if first > last {
            return Err(CpuListError::Reversed {
                position: 1,
                entry: entry(),
            });
        }
        if last > MAX_CPU_ID {
            return Err(CpuListError::OutOfRange {
                position: 1,
                entry: entry(),
                max: MAX_CPU_ID,
            });
        }
        let mut set = Self::new();
        set.insert_new_range(first, last);
        Ok(set)
    }

    /// Builds a set from ids; an id outside 0..=[`MAX_CPU_ID`] is refused
    /// (its position counts from 1). Repeated ids are fine.
    pub fn from_ids<I: CpuId + fmt::Display>(
        ids: impl IntoIterator<Item = I>,
    ) -> Result<Self, CpuListError> {
        let mut set = Self::new();
        for (position, id) in ids.into_iter().enumerate() {
            if id.to_index().is_none() {
                return Err(CpuListError::OutOfRange {
                    position: position + 1,
                    entry: id.to_string(),
                    max: MAX_CPU_ID,
                });
            }
            set.insert(id);
        }
        Ok(set)
    }

    /// Parses a scheduler annotation's cpu list: spaces around entries and
    /// ids and empty entries are allowed, but each CPU may be listed once
    /// (see the module docs).
    pub fn parse_each_cpu_once(text: &str) -> Result<Self, CpuListError> {
        parse_with(text, Grammar::EACH_CPU_ONCE)
    }

    /// Parses a cpu list that comes from a pod annotation: exactly the
    /// kernel's list format — entries `N` or `N-M` of ASCII digits separated
    /// by single commas, no whitespace, signs or empty entries, not empty,
    /// at most [`MAX_EXACT_CPU_LIST_BYTES`] long (see the module docs).
    pub fn parse_exact(text: &str) -> Result<Self, CpuListError> {
        parse_with(text, Grammar::EXACT)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Words allocated: never more than 1,024.
    pub fn allocated_words(&self) -> usize {
        self.words.len()
    }

    pub fn contains(&self, cpu: impl CpuId) -> bool {
        cpu.to_index().is_some_and(|index| {
            let (w, bit) = word_of(index);
            self.words.get(w).is_some_and(|word| word & bit != 0)
        })
    }

    /// Adds `cpu`; returns whether the set changed. Ids outside
    /// 0..=[`MAX_CPU_ID`] are not held (false); [`CpuSet::from_ids`]
    /// reports them instead.
    pub fn insert(&mut self, cpu: impl CpuId) -> bool {
        let Some(index) = cpu.to_index() else {
            return false;
        };
        let (w, bit) = word_of(index);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let added = self.words[w] & bit == 0;
        self.words[w] |= bit;
        self.len += usize::from(added);
        added
    }

    /// Drops `cpu`; returns whether it was held.
    pub fn remove(&mut self, cpu: impl CpuId) -> bool {
        let Some(index) = cpu.to_index() else {
            return false;
        };
        let (w, bit) = word_of(index);
        let Some(word) = self.words.get_mut(w) else {
            return false;
        };
        let removed = *word & bit != 0;
        *word &= !bit;
        self.len -= usize::from(removed);
        self.trim();
        removed
    }

    /// The ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, word)| {
            let mut bits = *word;
            let base = w as u32 * WORD_BITS;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let bit = bits.trailing_zeros();
                bits &= bits - 1;
                Some(base + bit)
            })
        })
    }

    /// The ids in ascending order as another id type (the APIs' `i32`).
    pub fn iter_as<I: CpuId>(&self) -> impl Iterator<Item = I> + '_ {
        self.iter().map(I::from_index)
    }

    /// The ids as an ordered set (for the scheduler's allocation order).
    pub fn to_btree<I: CpuId + Ord>(&self) -> BTreeSet<I> {
        self.iter_as().collect()
    }

    /// Adds every CPU of `other` (word by word).
    pub fn union_with(&mut self, other: &Self) {
        if self.words.len() < other.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (mine, theirs) in self.words.iter_mut().zip(&other.words) {
            *mine |= theirs;
        }
        self.recount();
    }

    /// Drops every CPU of `other` (word by word).
    pub fn difference_with(&mut self, other: &Self) {
        for (mine, theirs) in self.words.iter_mut().zip(&other.words) {
            *mine &= !theirs;
        }
        self.recount();
        self.trim();
    }

    pub fn union(&self, other: &Self) -> Self {
        let mut set = self.clone();
        set.union_with(other);
        set
    }

    pub fn intersection(&self, other: &Self) -> Self {
        let words = self
            .words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| a & b)
            .collect();
        Self::from_words(words)
    }

    pub fn difference(&self, other: &Self) -> Self {
        let mut set = self.clone();
        set.difference_with(other);
        set
    }

    /// Every id of `self` is in `other`.
    pub fn is_subset(&self, other: &Self) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, word)| word & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    pub fn is_superset(&self, other: &Self) -> bool {
        other.is_subset(self)
    }

    fn from_words(words: Vec<u64>) -> Self {
        let mut set = Self { words, len: 0 };
        set.recount();
        set.trim();
        set
    }

    /// Adds `first..=last` (within bounds) unless any of it is already in
    /// the set; returns whether it was added. Touches only the range's
    /// words, and stops at the first word that overlaps.
    fn insert_new_range(&mut self, first: u32, last: u32) -> bool {
        let (from, to) = (word_of(first).0, word_of(last).0);
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
        self.len += (last - first) as usize + 1;
        true
    }

    fn recount(&mut self) {
        self.len = self.words.iter().map(|w| w.count_ones() as usize).sum();
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

/// Ranges merged into a set in constant work each, however much they
/// overlap: the words wholly inside a range are marked in a 1,024-bit
/// summary instead of being written one by one, and filled once at the end.
struct RangeUnion {
    words: Vec<u64>,
    /// Bit `w` set: word `w` is all ones.
    full_words: [u64; MAX_WORDS / WORD_BITS as usize],
}

impl RangeUnion {
    fn new() -> Self {
        Self {
            words: Vec::new(),
            full_words: [0; MAX_WORDS / WORD_BITS as usize],
        }
    }

    /// Adds `first..=last` (ascending, within bounds).
    fn add(&mut self, first: u32, last: u32) {
        let (from, to) = (word_of(first).0, word_of(last).0);
        if self.words.len() <= to {
            self.words.resize(to + 1, 0);
        }
        self.words[from] |= range_mask(from, first, last);
        self.words[to] |= range_mask(to, first, last);
        if to > from + 1 {
            // Words from+1..=to-1, as bits of the summary (at most 16 words).
            let (inner_first, inner_last) = (from as u32 + 1, to as u32 - 1);
            let (summary_from, summary_to) = (word_of(inner_first).0, word_of(inner_last).0);
            for s in summary_from..=summary_to {
                self.full_words[s] |= range_mask(s, inner_first, inner_last);
            }
        }
    }

    fn finish(mut self) -> CpuSet {
        for (s, summary) in self.full_words.iter().enumerate() {
            let mut bits = *summary;
            while bits != 0 {
                let w = s * WORD_BITS as usize + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                // A marked word lies inside a range, so it was allocated.
                if let Some(word) = self.words.get_mut(w) {
                    *word = u64::MAX;
                }
            }
        }
        CpuSet::from_words(self.words)
    }
}

/// What one reading of a cpu list allows (see the module docs).
#[derive(Debug, Clone, Copy)]
struct Grammar {
    max_bytes: usize,
    /// Whitespace around the list, its entries and the ids of a range.
    spaces: bool,
    /// Empty entries (`1,,2`) are skipped rather than refused.
    skip_empty_entries: bool,
    /// The empty (or all-space) text is the empty set rather than an error.
    empty_text_is_empty_set: bool,
    /// Entries may repeat or overlap earlier ones.
    repeats: bool,
}

impl Grammar {
    const KERNEL: Self = Self {
        max_bytes: MAX_CPU_LIST_BYTES,
        spaces: true,
        skip_empty_entries: false,
        empty_text_is_empty_set: true,
        repeats: true,
    };
    const EACH_CPU_ONCE: Self = Self {
        max_bytes: MAX_CPU_LIST_BYTES,
        spaces: true,
        skip_empty_entries: true,
        empty_text_is_empty_set: true,
        repeats: false,
    };
    const EXACT: Self = Self {
        max_bytes: MAX_EXACT_CPU_LIST_BYTES,
        spaces: false,
        skip_empty_entries: false,
        empty_text_is_empty_set: false,
        repeats: true,
    };
}

/// A CPU id of one to five ASCII digits (no sign, no spaces inside).
fn parse_id(text: &str) -> Option<u32> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// At most [`MAX_QUOTED_ENTRY_BYTES`] of an entry, cut on a char boundary.
fn quoted(entry: &str) -> String {
    if entry.len() <= MAX_QUOTED_ENTRY_BYTES {
        return entry.to_string();
    }
    let mut end = MAX_QUOTED_ENTRY_BYTES;
    while !entry.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &entry[..end])
}

/// `part` without surrounding whitespace when the grammar allows spaces.
fn trim_if(part: &str, spaces: bool) -> &str {
    if spaces { part.trim() } else { part }
}

fn parse_with(text: &str, grammar: Grammar) -> Result<CpuSet, CpuListError> {
    if text.len() > grammar.max_bytes {
        return Err(CpuListError::TooLong {
            len: text.len(),
            max: grammar.max_bytes,
        });
    }
    let body = if grammar.spaces { text.trim() } else { text };
    if body.is_empty() {
        return if grammar.empty_text_is_empty_set {
            Ok(CpuSet::new())
        } else {
            Err(CpuListError::Empty)
        };
    }
    let trim = |part| trim_if(part, grammar.spaces);
    let mut distinct = CpuSet::new();
    let mut merged = RangeUnion::new();
    let entries = body
        .split(',')
        .map(trim)
        .filter(|entry| !(grammar.skip_empty_entries && entry.is_empty()));
    for (position, entry) in entries.enumerate().map(|(i, e)| (i + 1, e)) {
        let malformed = || CpuListError::Malformed {
            position,
            entry: quoted(entry),
        };
        let (first, last) = match entry.split_once('-') {
            Some((a, b)) => (
                parse_id(trim(a)).ok_or_else(malformed)?,
                parse_id(trim(b)).ok_or_else(malformed)?,
            ),
            None => {
                let id = parse_id(entry).ok_or_else(malformed)?;
                (id, id)
            }
        };
        if first > last {
            return Err(CpuListError::Reversed {
                position,
                entry: quoted(entry),
            });
        }
        if last > MAX_CPU_ID {
            return Err(CpuListError::OutOfRange {
                position,
                entry: quoted(entry),
                max: MAX_CPU_ID,
            });
        }
        if grammar.repeats {
            merged.add(first, last);
        } else if !distinct.insert_new_range(first, last) {
            return Err(CpuListError::Repeated {
                position,
                entry: quoted(entry),
            });
        }
    }
    Ok(if grammar.repeats {
        merged.finish()
    } else {
        distinct
    })
}

impl FromStr for CpuSet {
    type Err = CpuListError;

    /// Reads a kernel file's (or kubelet's, or upstream's) cpu list:
    /// surrounding whitespace (a cgroup file's trailing newline) is ignored,
    /// the empty text is the empty set, entries may repeat (module docs).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_with(text, Grammar::KERNEL)
    }
}

impl<I: CpuId> FromIterator<I> for CpuSet {
    /// Ids outside 0..=[`MAX_CPU_ID`] are left out, as [`CpuSet::insert`]
    /// does; [`CpuSet::from_ids`] reports them.
    fn from_iter<T: IntoIterator<Item = I>>(iter: T) -> Self {
        let mut set = Self::new();
        set.extend(iter);
        set
    }
}

impl<I: CpuId> Extend<I> for CpuSet {
    fn extend<T: IntoIterator<Item = I>>(&mut self, iter: T) {
        for cpu in iter {
            self.insert(cpu);
        }
    }
}

impl fmt::Display for CpuSet {
    /// Prints ranges the way the kernel does: `0-3,8,10-11` (the empty set
    /// is the empty text).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids = self.iter().peekable();
        let mut first_item = true;
        while let Some(start) = ids.next() {
            let mut end = start;
            while ids.peek() == Some(&(end + 1)) {
                end += 1;
                ids.next();
            }
            if !first_item {
                f.write_str(",")?;
            }
            first_item = false;
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
        write!(f, "CpuSet({:?})", self.to_string())
    }
}

impl serde::Serialize for CpuSet {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for CpuSet {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(text: &str) -> CpuSet {
        text.parse().unwrap()
    }

    // Kernel-file reading (koordlet's FromStr).

    #[test]
    fn kernel_lists_parse() {
        let cases: &[(&str, &[u32])] = &[
            ("", &[]),
            ("\n", &[]),
            ("0", &[0]),
            ("0-3", &[0, 1, 2, 3]),
            ("0-3,8,10-11\n", &[0, 1, 2, 3, 8, 10, 11]),
            (" 5 , 1-2 ", &[1, 2, 5]),
            ("3,3,2-3", &[2, 3]),
            ("63-65", &[63, 64, 65]),
            ("7-7", &[7]),
            ("0-5,2-7", &[0, 1, 2, 3, 4, 5, 6, 7]),
        ];
        for (input, ids) in cases {
            let parsed = set(input);
            assert_eq!(parsed.iter().collect::<Vec<_>>(), ids.to_vec(), "{input:?}");
            assert_eq!(parsed.len(), ids.len(), "{input:?}");
        }
    }

    #[test]
    fn kernel_lists_format_as_compressed_ranges() {
        let cases: &[(&[u32], &str)] = &[
            (&[], ""),
            (&[0], "0"),
            (&[0, 1], "0-1"),
            (&[0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
            (&[1, 3, 5], "1,3,5"),
            (&[62, 63, 64, 65, 200], "62-65,200"),
        ];
        for (ids, expected) in cases {
            let built = CpuSet::from_ids(ids.iter().copied()).unwrap();
            assert_eq!(built.to_string(), *expected);
            assert_eq!(set(expected), built, "round trip of {expected:?}");
        }
    }

    #[test]
    fn kernel_lists_refuse_malformed_text() {
        for input in [
            "a",
            "1,,2",
            ",",
            "1-",
            "-1",
            "3-1",
            "1-2-3",
            "0x1",
            "1 2",
            "+1",
            "65536",
            "0-70000",
            "-",
            "1,",
            "4294967296",
        ] {
            let error = input.parse::<CpuSet>().unwrap_err();
            let message = error.to_string();
            assert!(
                message.starts_with("cpu list entry"),
                "{input:?}: {message}"
            );
        }
        let long = "1,".repeat(MAX_CPU_LIST_BYTES);
        assert!(matches!(
            long.parse::<CpuSet>(),
            Err(CpuListError::TooLong { .. })
        ));
    }

    #[test]
    fn overlapping_kernel_ranges_merge_in_bounded_work() {
        // Every entry spans the whole id space; each costs a constant
        // amount of work, not 1,024 words.
        let repeated = vec!["0-65535"; 8_000].join(",");
        assert!(repeated.len() <= MAX_CPU_LIST_BYTES);
        let all = set(&repeated);
        assert_eq!((all.len(), all.allocated_words()), (65_536, 1024));
        assert_eq!(all.to_string(), "0-65535");
        // Inner words, boundary words and single ids combine correctly.
        let mixed = set("129-300,0,64-127,200-1000,1000,4095-4097,128");
        let expected = CpuSet::from_ids(
            [0].into_iter()
                .chain(64..=1000)
                .chain(4095..=4097)
                .collect::<Vec<u32>>(),
        )
        .unwrap();
        assert_eq!(mixed, expected);
        assert_eq!(mixed.len(), 1 + (1000 - 64 + 1) + 3);
    }

    // Pod annotations read by koordlet (parse_exact).

    #[test]
    fn exact_lists_parse_exactly() {
        let set = CpuSet::parse_exact("0-3,8,10-11").unwrap();
        assert_eq!(set.to_string(), "0-3,8,10-11");
        assert_eq!(CpuSet::parse_exact("3,1-2").unwrap().to_string(), "1-3");
        assert_eq!(CpuSet::parse_exact("1,1-2").unwrap().to_string(), "1-2");
        for bad in [
            "",
            " 1",
            "1 ",
            "+1",
            "1,,2",
            ",1",
            "1,",
            "3-2",
            "1-",
            "-1",
            "0x1",
            "1\n",
            "1;2",
            "65536",
            "0-65536",
            "4294967296",
            "1-2-3",
            "1- 2",
        ] {
            assert!(CpuSet::parse_exact(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(CpuSet::parse_exact(""), Err(CpuListError::Empty));
        let long = "1,".repeat(3000);
        let error = CpuSet::parse_exact(&long).unwrap_err();
        assert!(error.to_string().contains("longer than"), "{error}");
        assert!(error.to_string().len() < 400);
    }

    // Scheduler annotations (parse_each_cpu_once).

    #[test]
    fn scheduler_lists_parse_and_format_back() {
        let set = CpuSet::parse_each_cpu_once("0-2, 5,7-8").unwrap();
        assert_eq!(set.to_string(), "0-2,5,7-8");
        assert_eq!(set.len(), 6);
        assert!(set.contains(7) && !set.contains(6) && !set.contains(-1));
        assert_eq!(CpuSet::parse_each_cpu_once("").unwrap(), CpuSet::new());
        assert_eq!(CpuSet::parse_each_cpu_once(" , ").unwrap().to_string(), "");
        assert_eq!(
            CpuSet::parse_each_cpu_once("1,,2 - 3").unwrap().to_string(),
            "1-3"
        );
        // Any order, as upstream.
        assert_eq!(
            CpuSet::parse_each_cpu_once("8,0-3").unwrap().to_string(),
            "0-3,8"
        );
        assert_eq!(
            CpuSet::parse_each_cpu_once("65535").unwrap().to_string(),
            "65535"
        );
        assert_eq!(
            CpuSet::parse_each_cpu_once("62-66,127-129").unwrap().len(),
            8
        );
        let all = CpuSet::parse_each_cpu_once("0-65535").unwrap();
        assert_eq!((all.len(), all.allocated_words()), (65_536, 1024));
    }

    #[test]
    fn malformed_reversed_and_out_of_range_entries_are_refused_by_position() {
        let err = |text: &str| CpuSet::parse_each_cpu_once(text).unwrap_err();
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
        // A long bad entry is quoted in part.
        let message = err(&"7".repeat(10_000)).to_string();
        assert!(message.len() < 200, "{message}");
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
            match CpuSet::parse_each_cpu_once(text) {
                Err(CpuListError::Repeated { position: at, .. }) => {
                    assert_eq!(at, position, "{text}")
                }
                other => panic!("{text}: {other:?}"),
            }
        }
        // Adjacent is not overlapping.
        assert_eq!(
            CpuSet::parse_each_cpu_once("0-3,4-7").unwrap().to_string(),
            "0-7"
        );
    }

    #[test]
    fn the_work_is_bounded_by_the_text_not_by_what_it_repeats() {
        // The hostile annotation of issue 16: 240,000 bytes, 2 billion ids
        // if every repetition were expanded.
        let hostile = vec!["0-65535"; 30_000].join(",");
        assert_eq!(
            CpuSet::parse_each_cpu_once(&hostile).unwrap_err(),
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
        let message = CpuSet::parse_each_cpu_once(&short).unwrap_err().to_string();
        assert!(message.contains("entry 2 \"0-65535\" repeats"), "{message}");
    }

    // The set itself.

    #[test]
    fn set_operations_work_word_by_word() {
        let mut a = set("0-9,100");
        let b = set("5-200");
        a.difference_with(&b);
        assert_eq!(a.to_string(), "0-4");
        assert_eq!(a.allocated_words(), 1);
        a.union_with(&set("64"));
        assert_eq!((a.to_string(), a.len()), ("0-4,64".to_string(), 6));
        assert!(a.remove(64) && !a.remove(64));
        assert_eq!(a.allocated_words(), 1);
        assert!(!a.insert(70_000) && !a.insert(-3));
        assert!(a.insert(5u32) && !a.insert(5i32));
        let collected: CpuSet = [3, 1, 2].into_iter().collect();
        assert_eq!(collected.to_btree(), BTreeSet::from([1i32, 2, 3]));
        assert_eq!(collected.to_btree(), BTreeSet::from([1u32, 2, 3]));
        assert_eq!(collected.iter_as::<i32>().collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(format!("{collected:?}"), "CpuSet(\"1-3\")");
    }

    #[test]
    fn set_algebra() {
        let a = set("0-3");
        let b = set("2-5");
        assert_eq!(a.union(&b), set("0-5"));
        assert_eq!(a.intersection(&b), set("2-3"));
        assert_eq!(a.difference(&b), set("0-1"));
        assert_eq!(a.union(&b).len(), 6);
        assert_eq!(a.intersection(&b).len(), 2);
        assert!(set("1-2").is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(CpuSet::new().is_subset(&a));
        assert!(a.is_superset(&set("0,3")));
        // A set whose high words cancel out compares equal to the short one.
        assert_eq!(set("1,100").difference(&set("100")), set("1"));
        assert!(set("100").intersection(&set("1")).is_empty());
        assert_eq!(set("1,100").intersection(&set("1,100,200")), set("1,100"));
        let mut s = set("1,100");
        s.remove(100);
        assert_eq!(s, set("1"));
        assert!(s.contains(1) && !s.contains(100) && !s.contains(100_000));
        assert_eq!(
            CpuSet::from_range(2, 4).unwrap(),
            CpuSet::from_ids([2, 3, 4]).unwrap()
        );
        assert_eq!(CpuSet::from_range(60, 130).unwrap().len(), 71);
        assert!(matches!(
            CpuSet::from_range(4, 2),
            Err(CpuListError::Reversed { .. })
        ));
        assert!(matches!(
            CpuSet::from_ids([1, MAX_CPU_ID + 1]),
            Err(CpuListError::OutOfRange { position: 2, .. })
        ));
        assert!(CpuSet::from_ids([-1]).is_err());
    }

    #[test]
    fn serde_uses_the_list_format() {
        let json = serde_json::to_string(&set("0-2,7")).unwrap();
        assert_eq!(json, "\"0-2,7\"");
        let back: CpuSet = serde_json::from_str(&json).unwrap();
        assert_eq!(back, set("0-2,7"));
        assert!(serde_json::from_str::<CpuSet>("\"x\"").is_err());
    }
}
