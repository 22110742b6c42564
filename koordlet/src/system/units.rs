//! Domain newtypes for the quantities koordlet moves between modules: CPU id
//! sets, milli-CPU, bytes and CFS quotas. Parsing follows the kernel's and
//! Kubernetes' spellings; malformed input is a typed error.

use std::fmt;
use std::str::FromStr;

/// Largest CPU (or NUMA node) id a [`CpuSet`] accepts. Far above any real
/// kernel's `NR_CPUS`; it bounds the memory a malformed list can make us use.
pub const MAX_CPU_ID: u32 = 65_535;

/// Why a cpuset list could not be parsed or built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cpuset list {input:?}: {reason}")]
pub struct CpuSetParseError {
    pub input: String,
    pub reason: String,
}

/// A set of CPU ids (or memory node ids), the value of `cpuset.cpus` /
/// `cpuset.mems`. Stored as a bit set; parses and prints the kernel's list
/// format (`0-3,8,10-11`, the empty string for the empty set).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet {
    /// Bit `i % 64` of word `i / 64` is CPU `i`. No trailing zero words, so
    /// equal sets have equal representations.
    words: Vec<u64>,
}

impl CpuSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// The set `{first, ..., last}`.
    pub fn from_range(first: u32, last: u32) -> Result<Self, CpuSetParseError> {
        let mut set = Self::new();
        set.insert_range(first, last)
            .map_err(|reason| CpuSetParseError {
                input: format!("{first}-{last}"),
                reason,
            })?;
        Ok(set)
    }

    /// Builds a set from ids; fails on an id above [`MAX_CPU_ID`].
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Result<Self, CpuSetParseError> {
        let mut set = Self::new();
        for id in ids {
            set.insert(id)?;
        }
        Ok(set)
    }

    pub fn insert(&mut self, id: u32) -> Result<(), CpuSetParseError> {
        self.insert_range(id, id)
            .map_err(|reason| CpuSetParseError {
                input: id.to_string(),
                reason,
            })
    }

    fn insert_range(&mut self, first: u32, last: u32) -> Result<(), String> {
        if first > last {
            return Err(format!("range {first}-{last} is reversed"));
        }
        if last > MAX_CPU_ID {
            return Err(format!(
                "id {last} is above the supported maximum {MAX_CPU_ID}"
            ));
        }
        let needed_words = last as usize / 64 + 1;
        if self.words.len() < needed_words {
            self.words.resize(needed_words, 0);
        }
        for id in first..=last {
            self.words[id as usize / 64] |= 1u64 << (id % 64);
        }
        Ok(())
    }

    pub fn remove(&mut self, id: u32) {
        if let Some(word) = self.words.get_mut(id as usize / 64) {
            *word &= !(1u64 << (id % 64));
        }
        self.trim();
    }

    pub fn contains(&self, id: u32) -> bool {
        self.words
            .get(id as usize / 64)
            .is_some_and(|word| word & (1u64 << (id % 64)) != 0)
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Ids in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(index, &word)| {
            (0..64u32)
                .filter(move |bit| word & (1u64 << bit) != 0)
                .map(move |bit| index as u32 * 64 + bit)
        })
    }

    pub fn union(&self, other: &Self) -> Self {
        let len = self.words.len().max(other.words.len());
        let words = (0..len)
            .map(|i| self.word(i) | other.word(i))
            .collect::<Vec<_>>();
        Self::trimmed(words)
    }

    pub fn intersection(&self, other: &Self) -> Self {
        let len = self.words.len().min(other.words.len());
        let words = (0..len)
            .map(|i| self.word(i) & other.word(i))
            .collect::<Vec<_>>();
        Self::trimmed(words)
    }

    pub fn difference(&self, other: &Self) -> Self {
        let words = (0..self.words.len())
            .map(|i| self.word(i) & !other.word(i))
            .collect::<Vec<_>>();
        Self::trimmed(words)
    }

    /// Every id of `self` is in `other`.
    pub fn is_subset(&self, other: &Self) -> bool {
        (0..self.words.len()).all(|i| self.word(i) & !other.word(i) == 0)
    }

    pub fn is_superset(&self, other: &Self) -> bool {
        other.is_subset(self)
    }

    fn word(&self, index: usize) -> u64 {
        self.words.get(index).copied().unwrap_or(0)
    }

    fn trimmed(words: Vec<u64>) -> Self {
        let mut set = Self { words };
        set.trim();
        set
    }

    fn trim(&mut self) {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
    }
}

/// Longest cpu list [`CpuSet::parse_exact`] takes (every id of a
/// [`MAX_CPU_ID`] node fits in far less as ranges).
pub const MAX_CPU_LIST_BYTES: usize = 4096;

impl CpuSet {
    /// Parses a cpu list that comes from outside the node (a pod
    /// annotation): exactly the kernel's list format — items `N` or `N-M`
    /// of ASCII digits separated by single commas, no whitespace, signs or
    /// empty items, ranges ascending, ids up to [`MAX_CPU_ID`], at most
    /// [`MAX_CPU_LIST_BYTES`] long. Anything else is refused (issue 16).
    pub fn parse_exact(input: &str) -> Result<Self, CpuSetParseError> {
        let shown = crate::bounds::for_log(input).into_owned();
        let error = |reason: String| CpuSetParseError {
            input: shown.clone(),
            reason,
        };
        if input.len() > MAX_CPU_LIST_BYTES {
            return Err(error(format!("longer than {MAX_CPU_LIST_BYTES} bytes")));
        }
        if input.is_empty() {
            return Err(error("empty".to_string()));
        }
        let mut set = Self::new();
        for item in input.split(',') {
            let id = |text: &str| -> Result<u32, CpuSetParseError> {
                if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(error(format!("{text:?} is not a CPU id")));
                }
                text.parse::<u32>()
                    .map_err(|_| error(format!("{text} is not a CPU id")))
            };
            let (first, last) = match item.split_once('-') {
                Some((first, last)) => (id(first)?, id(last)?),
                None => {
                    let single = id(item)?;
                    (single, single)
                }
            };
            set.insert_range(first, last).map_err(&error)?;
        }
        Ok(set)
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetParseError;

    /// Parses the kernel list format. Surrounding whitespace (the trailing
    /// newline of a cgroup file) is ignored; the empty string is the empty set.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |reason: String| CpuSetParseError {
            input: input.to_string(),
            reason,
        };
        let trimmed = input.trim();
        let mut set = Self::new();
        if trimmed.is_empty() {
            return Ok(set);
        }
        for item in trimmed.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(error("empty item".to_string()));
            }
            let parse_id = |text: &str| {
                text.trim()
                    .parse::<u32>()
                    .map_err(|_| error(format!("{text:?} is not a CPU id")))
            };
            let (first, last) = match item.split_once('-') {
                Some((first, last)) => (parse_id(first)?, parse_id(last)?),
                None => {
                    let id = parse_id(item)?;
                    (id, id)
                }
            };
            set.insert_range(first, last).map_err(error)?;
        }
        Ok(set)
    }
}

impl fmt::Display for CpuSet {
    /// Prints ranges the way the kernel does: `0-3,8,10-11`.
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

/// Thousandths of a CPU core (Kubernetes' `m` unit: `500m` is half a core).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MilliCpu(pub i64);

impl MilliCpu {
    pub fn from_cores(cores: f64) -> Self {
        Self((cores * 1000.0).round() as i64)
    }

    pub fn as_cores(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

impl fmt::Display for MilliCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}m", self.0)
    }
}

/// A byte count (memory limits, usage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The CFS period the kubelet and upstream koordlet use, in microseconds.
pub const DEFAULT_CFS_PERIOD_US: u64 = 100_000;

/// Smallest quota the kernel accepts, in microseconds (except "unlimited").
pub const MIN_CFS_QUOTA_US: u64 = 1_000;

/// A CFS bandwidth quota per period: unlimited (`-1` in v1, `max` in v2) or a
/// number of microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CfsQuota {
    Unlimited,
    Micros(u64),
}

/// A quota value outside what the kernel accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CFS quota {0}: expected -1 (unlimited) or a non-negative number of microseconds")]
pub struct CfsQuotaError(pub i64);

impl CfsQuota {
    /// The quota giving `milli` CPUs per `period_us`, as the kubelet computes
    /// it (`milli * period / 1000`); zero or negative means unlimited.
    pub fn from_milli_cpu(milli: MilliCpu, period_us: u64) -> Self {
        if milli.0 <= 0 {
            return Self::Unlimited;
        }
        let quota = (milli.0 as u128 * period_us as u128 / 1000).min(u64::MAX as u128) as u64;
        Self::Micros(quota)
    }

    /// From the v1 file value: `-1` is unlimited.
    pub fn from_v1(value: i64) -> Result<Self, CfsQuotaError> {
        match value {
            -1 => Ok(Self::Unlimited),
            v if v >= 0 => Ok(Self::Micros(v as u64)),
            v => Err(CfsQuotaError(v)),
        }
    }

    /// The v1 file value: `-1` for unlimited.
    pub fn as_v1(self) -> i64 {
        match self {
            Self::Unlimited => -1,
            Self::Micros(v) => v.min(i64::MAX as u64) as i64,
        }
    }

    /// CPUs this quota allows per `period_us` (`None` when unlimited).
    pub fn as_milli_cpu(self, period_us: u64) -> Option<MilliCpu> {
        match self {
            Self::Unlimited => None,
            Self::Micros(_) if period_us == 0 => None,
            Self::Micros(v) => Some(MilliCpu(
                (v as u128 * 1000 / period_us as u128).min(i64::MAX as u128) as i64,
            )),
        }
    }
}

impl PartialOrd for CfsQuota {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CfsQuota {
    /// Unlimited is larger than any finite quota.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Self::Unlimited, Self::Unlimited) => std::cmp::Ordering::Equal,
            (Self::Unlimited, Self::Micros(_)) => std::cmp::Ordering::Greater,
            (Self::Micros(_), Self::Unlimited) => std::cmp::Ordering::Less,
            (Self::Micros(a), Self::Micros(b)) => a.cmp(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_from_outside_parse_exactly() {
        let set = CpuSet::parse_exact("0-3,8,10-11").unwrap();
        assert_eq!(set.to_string(), "0-3,8,10-11");
        assert_eq!(CpuSet::parse_exact("3,1-2").unwrap().to_string(), "1-3");
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
        ] {
            assert!(CpuSet::parse_exact(bad).is_err(), "{bad:?} accepted");
        }
        let long = "1,".repeat(3000);
        let error = CpuSet::parse_exact(&long).unwrap_err();
        assert!(error.to_string().contains("longer than"), "{error}");
        assert!(error.to_string().len() < 400);
    }

    fn set(text: &str) -> CpuSet {
        text.parse().unwrap()
    }

    #[test]
    fn cpuset_parses_kernel_lists() {
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
        ];
        for (input, ids) in cases {
            let parsed = set(input);
            assert_eq!(parsed.iter().collect::<Vec<_>>(), ids.to_vec(), "{input:?}");
            assert_eq!(parsed.len(), ids.len(), "{input:?}");
        }
    }

    #[test]
    fn cpuset_formats_compressed_ranges() {
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
    fn cpuset_rejects_malformed_lists() {
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
            "65536",
            "0-70000",
            "-",
            "1,",
            "4294967296",
        ] {
            let error = input.parse::<CpuSet>().unwrap_err();
            assert_eq!(error.input, input);
            assert!(error.to_string().contains(&format!("{input:?}")), "{error}");
        }
    }

    #[test]
    fn cpuset_set_operations() {
        let a = set("0-3");
        let b = set("2-5");
        assert_eq!(a.union(&b), set("0-5"));
        assert_eq!(a.intersection(&b), set("2-3"));
        assert_eq!(a.difference(&b), set("0-1"));
        assert!(set("1-2").is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!(CpuSet::new().is_subset(&a));
        assert!(a.is_superset(&set("0,3")));
        // A set whose high words cancel out compares equal to the short one.
        assert_eq!(set("1,100").difference(&set("100")), set("1"));
        assert!(set("100").intersection(&set("1")).is_empty());
        let mut s = set("1,100");
        s.remove(100);
        assert_eq!(s, set("1"));
        assert!(s.contains(1) && !s.contains(100) && !s.contains(100_000));
        assert_eq!(
            CpuSet::from_range(2, 4).unwrap(),
            CpuSet::from_ids([2, 3, 4]).unwrap()
        );
        assert!(CpuSet::from_range(4, 2).is_err());
        assert!(CpuSet::from_ids([MAX_CPU_ID + 1]).is_err());
    }

    #[test]
    fn cpuset_serde_uses_list_format() {
        let json = serde_json::to_string(&set("0-2,7")).unwrap();
        assert_eq!(json, "\"0-2,7\"");
        let back: CpuSet = serde_json::from_str(&json).unwrap();
        assert_eq!(back, set("0-2,7"));
        assert!(serde_json::from_str::<CpuSet>("\"x\"").is_err());
    }

    #[test]
    fn cfs_quota_conversions() {
        assert_eq!(
            CfsQuota::from_milli_cpu(MilliCpu(200), DEFAULT_CFS_PERIOD_US),
            CfsQuota::Micros(20_000)
        );
        assert_eq!(
            CfsQuota::from_milli_cpu(MilliCpu(0), DEFAULT_CFS_PERIOD_US),
            CfsQuota::Unlimited
        );
        assert_eq!(CfsQuota::from_v1(-1), Ok(CfsQuota::Unlimited));
        assert_eq!(CfsQuota::from_v1(50_000), Ok(CfsQuota::Micros(50_000)));
        assert_eq!(CfsQuota::from_v1(-2), Err(CfsQuotaError(-2)));
        assert_eq!(CfsQuota::Unlimited.as_v1(), -1);
        assert_eq!(
            CfsQuota::Micros(150_000).as_milli_cpu(100_000),
            Some(MilliCpu(1500))
        );
        assert_eq!(CfsQuota::Unlimited.as_milli_cpu(100_000), None);
        assert!(CfsQuota::Unlimited > CfsQuota::Micros(u64::MAX));
        assert!(CfsQuota::Micros(1) < CfsQuota::Micros(2));
        assert_eq!(MilliCpu::from_cores(1.5), MilliCpu(1500));
        assert_eq!(MilliCpu(250).to_string(), "250m");
    }
}
