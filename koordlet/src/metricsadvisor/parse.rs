//! Pure parsers for the kernel files the collectors read. Malformed content is
//! a [`ParseError`] naming the file kind, the field and the offending text.

use std::num::ParseIntError;

use crate::metriccache::PsiResource;

/// Why the content of a kernel file could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("{file}: missing {field}")]
    MissingField {
        file: &'static str,
        field: &'static str,
    },
    #[error("{file}: {field} has invalid value {value:?}")]
    InvalidValue {
        file: &'static str,
        field: String,
        value: String,
    },
    #[error("{file}: malformed line {line:?}")]
    MalformedLine { file: &'static str, line: String },
}

fn invalid(file: &'static str, field: &str, value: &str) -> ParseError {
    ParseError::InvalidValue {
        file,
        field: field.to_string(),
        value: value.to_string(),
    }
}

/// An unsigned decimal exactly as the kernel prints it: ASCII digits only
/// (no sign), within u64; anything else is refused, never clamped.
fn parse_u64(file: &'static str, field: &str, value: &str) -> Result<u64, ParseError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(file, field, value));
    }
    value
        .parse()
        .map_err(|_: ParseIntError| invalid(file, field, value))
}

/// Microseconds as nanoseconds; a value that does not fit is refused.
fn usec_to_ns(file: &'static str, field: &str, usec: u64) -> Result<u64, ParseError> {
    usec.checked_mul(1000).ok_or_else(|| {
        invalid(
            file,
            field,
            &format!("{usec} (overflows u64 as nanoseconds)"),
        )
    })
}

/// A file holding one unsigned integer (`cpuacct.usage`, `memory.usage_in_bytes`).
pub fn parse_single_u64(file: &'static str, content: &str) -> Result<u64, ParseError> {
    let text = content.trim();
    if text.is_empty() {
        return Err(ParseError::MissingField {
            file,
            field: "value",
        });
    }
    parse_u64(file, "value", text)
}

/// Cumulative CPU time of one `cpu` line of `/proc/stat`, in jiffies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTimes {
    /// Busy time as upstream counts it: user + nice + system + irq + softirq
    /// (guest time is already inside user and nice).
    pub fn busy(&self) -> u64 {
        self.user
            .saturating_add(self.nice)
            .saturating_add(self.system)
            .saturating_add(self.irq)
            .saturating_add(self.softirq)
    }

    /// All elapsed CPU time: busy + idle + iowait + steal.
    pub fn total(&self) -> u64 {
        self.busy()
            .saturating_add(self.idle)
            .saturating_add(self.iowait)
            .saturating_add(self.steal)
    }
}

/// The parts of `/proc/stat` the node collector needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The aggregate `cpu` line.
    pub all: CpuTimes,
    /// Number of `cpuN` lines, i.e. online CPUs.
    pub online_cpus: usize,
}

const PROC_STAT: &str = "/proc/stat";

fn parse_cpu_times(line: &str) -> Result<CpuTimes, ParseError> {
    let mut fields = line.split_ascii_whitespace();
    let name = fields.next().unwrap_or("cpu");
    let mut values = [0u64; 8];
    let mut count = 0;
    for (slot, text) in values.iter_mut().zip(fields) {
        *slot = parse_u64(PROC_STAT, name, text)?;
        count += 1;
    }
    // user..softirq are mandatory (kernels since 2.6 print them); steal may be absent.
    if count < 7 {
        return Err(ParseError::MalformedLine {
            file: PROC_STAT,
            line: line.to_string(),
        });
    }
    let [user, nice, system, idle, iowait, irq, softirq, steal] = values;
    Ok(CpuTimes {
        user,
        nice,
        system,
        idle,
        iowait,
        irq,
        softirq,
        steal,
    })
}

pub fn parse_proc_stat(content: &str) -> Result<ProcStat, ParseError> {
    let mut all = None;
    let mut online_cpus = 0;
    for line in content.lines() {
        let Some(name) = line.split_ascii_whitespace().next() else {
            continue;
        };
        if name == "cpu" {
            all = Some(parse_cpu_times(line)?);
        } else if let Some(id) = name.strip_prefix("cpu")
            && !id.is_empty()
            && id.bytes().all(|b| b.is_ascii_digit())
        {
            online_cpus += 1;
        }
    }
    let all = all.ok_or(ParseError::MissingField {
        file: PROC_STAT,
        field: "cpu line",
    })?;
    if online_cpus == 0 {
        return Err(ParseError::MissingField {
            file: PROC_STAT,
            field: "cpuN lines",
        });
    }
    Ok(ProcStat { all, online_cpus })
}

/// The `cpuN` lines of `/proc/stat`: CPU id and its cumulative times.
pub fn parse_per_cpu_times(content: &str) -> Result<Vec<(u32, CpuTimes)>, ParseError> {
    let mut cpus = Vec::new();
    for line in content.lines() {
        let Some(name) = line.split_ascii_whitespace().next() else {
            continue;
        };
        let Some(id) = name.strip_prefix("cpu").filter(|id| !id.is_empty()) else {
            continue;
        };
        if !id.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let id = id.parse().map_err(|_| invalid(PROC_STAT, name, id))?;
        cpus.push((id, parse_cpu_times(line)?));
    }
    if cpus.is_empty() {
        return Err(ParseError::MissingField {
            file: PROC_STAT,
            field: "cpuN lines",
        });
    }
    Ok(cpus)
}

/// CPU in use, in cores, of a set of CPUs between two readings: busy
/// jiffies over the set's elapsed jiffies per CPU. `None` when no time
/// elapsed or a counter went backwards.
pub fn cpus_busy_cores(previous: &[CpuTimes], current: &[CpuTimes]) -> Option<f64> {
    if previous.len() != current.len() || current.is_empty() {
        return None;
    }
    let (mut busy, mut total) = (0u64, 0u64);
    for (before, now) in previous.iter().zip(current) {
        busy = busy.checked_add(now.busy().checked_sub(before.busy())?)?;
        total = total.checked_add(now.total().checked_sub(before.total())?)?;
    }
    if total == 0 {
        return None;
    }
    let per_cpu_elapsed = total as f64 / current.len() as f64;
    Some(busy as f64 / per_cpu_elapsed)
}

/// Node CPU usage in cores between two `/proc/stat` readings: busy jiffies
/// over elapsed jiffies per CPU. Using the kernel's own elapsed time keeps
/// the result within `[0, online CPUs]` whatever the wall clock does.
/// `None` when no time elapsed or a counter went backwards.
pub fn node_cpu_cores(previous: &ProcStat, current: &ProcStat) -> Option<f64> {
    let busy = current.all.busy().checked_sub(previous.all.busy())?;
    let total = current.all.total().checked_sub(previous.all.total())?;
    if total == 0 {
        return None;
    }
    Some(busy as f64 / total as f64 * current.online_cpus as f64)
}

/// The `/proc/meminfo` fields koordlet uses, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub free: u64,
    pub available: u64,
}

impl MemInfo {
    /// Upstream's node memory usage: `MemTotal - MemAvailable`.
    pub fn usage(&self) -> u64 {
        self.total.saturating_sub(self.available)
    }

    /// Usage including page cache: `MemTotal - MemFree`.
    pub fn usage_with_page_cache(&self) -> u64 {
        self.total.saturating_sub(self.free)
    }
}

const PROC_MEMINFO: &str = "/proc/meminfo";

/// Parses `Key:   value kB` lines; lines of other keys are not inspected.
pub fn parse_meminfo(content: &str) -> Result<MemInfo, ParseError> {
    let (mut total, mut free, mut available) = (None, None, None);
    for line in content.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let slot = match key.trim() {
            "MemTotal" => &mut total,
            "MemFree" => &mut free,
            "MemAvailable" => &mut available,
            _ => continue,
        };
        let mut parts = rest.split_ascii_whitespace();
        let number = parts.next().unwrap_or("");
        let multiplier = match parts.next() {
            Some("kB") => 1024,
            None => 1,
            Some(_) => return Err(invalid(PROC_MEMINFO, key.trim(), rest.trim())),
        };
        let value = parse_u64(PROC_MEMINFO, key.trim(), number)?;
        *slot = Some(
            value
                .checked_mul(multiplier)
                .ok_or_else(|| invalid(PROC_MEMINFO, key.trim(), rest.trim()))?,
        );
    }
    let require = |value: Option<u64>, field| {
        value.ok_or(ParseError::MissingField {
            file: PROC_MEMINFO,
            field,
        })
    };
    Ok(MemInfo {
        total: require(total, "MemTotal")?,
        free: require(free, "MemFree")?,
        available: require(available, "MemAvailable")?,
    })
}

const NODE_MEMINFO: &str = "/sys/devices/system/node/nodeN/meminfo";

/// The fields of a NUMA node's meminfo that its usage is estimated from, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NumaMemInfo {
    pub total: u64,
    pub free: u64,
    pub active_file: u64,
    pub inactive_file: u64,
    pub slab_reclaimable: u64,
}

impl NumaMemInfo {
    /// The node's meminfo has no MemAvailable: as upstream, treat free,
    /// file pages and reclaimable slab as available.
    pub fn usage(&self) -> u64 {
        let available = self
            .free
            .saturating_add(self.active_file)
            .saturating_add(self.inactive_file)
            .saturating_add(self.slab_reclaimable);
        self.total.saturating_sub(available)
    }
}

/// Parses `Node <n> Key:   value kB` lines. MemTotal and MemFree are
/// required; the page-cache and slab fields default to 0.
pub fn parse_numa_meminfo(content: &str) -> Result<NumaMemInfo, ParseError> {
    let mut info = NumaMemInfo::default();
    let (mut has_total, mut has_free) = (false, false);
    for line in content.lines() {
        let Some((head, rest)) = line.split_once(':') else {
            continue;
        };
        let key = head.split_ascii_whitespace().last().unwrap_or("");
        let slot = match key {
            "MemTotal" => {
                has_total = true;
                &mut info.total
            }
            "MemFree" => {
                has_free = true;
                &mut info.free
            }
            "Active(file)" => &mut info.active_file,
            "Inactive(file)" => &mut info.inactive_file,
            "SReclaimable" => &mut info.slab_reclaimable,
            _ => continue,
        };
        let mut parts = rest.split_ascii_whitespace();
        let number = parts.next().unwrap_or("");
        let multiplier = match parts.next() {
            Some("kB") => 1024,
            None => 1,
            Some(_) => return Err(invalid(NODE_MEMINFO, key, rest.trim())),
        };
        *slot = parse_u64(NODE_MEMINFO, key, number)?
            .checked_mul(multiplier)
            .ok_or_else(|| invalid(NODE_MEMINFO, key, rest.trim()))?;
    }
    if !has_total {
        return Err(ParseError::MissingField {
            file: NODE_MEMINFO,
            field: "MemTotal",
        });
    }
    if !has_free {
        return Err(ParseError::MissingField {
            file: NODE_MEMINFO,
            field: "MemFree",
        });
    }
    Ok(info)
}

/// Calls `visit(key, value)` for each `key value` line of a flat-keyed file
/// (`cpu.stat`, `memory.stat`); a line without a value is malformed.
fn for_each_flat_key<'a>(
    file: &'static str,
    content: &'a str,
    mut visit: impl FnMut(&'a str, &'a str) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    for line in content.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut parts = line.split_ascii_whitespace();
        match (parts.next(), parts.next(), parts.next()) {
            (Some(key), Some(value), None) => visit(key, value)?,
            _ => {
                return Err(ParseError::MalformedLine {
                    file,
                    line: line.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// CFS throttling counters; times in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Throttling {
    pub nr_periods: u64,
    pub nr_throttled: u64,
    pub throttled_ns: u64,
}

/// Fraction of the elapsed CFS periods in which the cgroup was throttled,
/// as upstream: `Δnr_throttled / Δnr_periods`, 0 when no period elapsed.
/// `None` when a counter went backwards (the cgroup was recreated).
pub fn throttled_ratio(previous: &Throttling, current: &Throttling) -> Option<f64> {
    let periods = current.nr_periods.checked_sub(previous.nr_periods)?;
    let throttled = current.nr_throttled.checked_sub(previous.nr_throttled)?;
    if periods == 0 {
        return Some(0.0);
    }
    Some((throttled as f64 / periods as f64).min(1.0))
}

/// What a `cpu.stat` file holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// Cumulative CPU time in nanoseconds (v2 `usage_usec`; v1 has none here).
    pub usage_ns: Option<u64>,
    /// Absent on v2 when the cpu controller is not enabled for the cgroup.
    pub throttling: Option<Throttling>,
}

const CPU_STAT: &str = "cpu.stat";

/// Parses v1 (`throttled_time` ns) or v2 (`usage_usec`, `throttled_usec`) `cpu.stat`.
pub fn parse_cpu_stat(content: &str) -> Result<CpuStat, ParseError> {
    let mut usage_usec = None;
    let (mut periods, mut throttled, mut throttled_ns) = (None, None, None);
    for_each_flat_key(CPU_STAT, content, |key, value| {
        match key {
            "usage_usec" => {
                let usec = parse_u64(CPU_STAT, key, value)?;
                usage_usec = Some(usec_to_ns(CPU_STAT, key, usec)?);
            }
            "nr_periods" => periods = Some(parse_u64(CPU_STAT, key, value)?),
            "nr_throttled" => throttled = Some(parse_u64(CPU_STAT, key, value)?),
            "throttled_time" => throttled_ns = Some(parse_u64(CPU_STAT, key, value)?),
            "throttled_usec" => {
                let usec = parse_u64(CPU_STAT, key, value)?;
                throttled_ns = Some(usec_to_ns(CPU_STAT, key, usec)?);
            }
            _ => {}
        }
        Ok(())
    })?;
    let throttling = match (periods, throttled) {
        (Some(nr_periods), Some(nr_throttled)) => Some(Throttling {
            nr_periods,
            nr_throttled,
            throttled_ns: throttled_ns.unwrap_or(0),
        }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(ParseError::MissingField {
                file: CPU_STAT,
                field: "nr_throttled",
            });
        }
        (None, Some(_)) => {
            return Err(ParseError::MissingField {
                file: CPU_STAT,
                field: "nr_periods",
            });
        }
    };
    Ok(CpuStat {
        usage_ns: usage_usec,
        throttling,
    })
}

/// CPU cores used between two cumulative readings `elapsed_ns` apart;
/// `None` on a counter reset or when no time elapsed.
pub fn cpu_cores_between(previous_ns: u64, current_ns: u64, elapsed_ns: u128) -> Option<f64> {
    let used = current_ns.checked_sub(previous_ns)?;
    if elapsed_ns == 0 {
        return None;
    }
    Some(used as f64 / elapsed_ns as f64)
}

/// The `memory.stat` counters koordlet uses, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStat {
    pub inactive_anon: u64,
    pub active_anon: u64,
    pub unevictable: u64,
    pub inactive_file: u64,
    pub active_file: u64,
}

impl MemoryStat {
    /// Upstream's memory usage: anon (active + inactive) + unevictable.
    pub fn usage(&self) -> u64 {
        self.inactive_anon
            .saturating_add(self.active_anon)
            .saturating_add(self.unevictable)
    }

    /// Upstream's usage with page cache: `usage()` + file pages.
    pub fn usage_with_page_cache(&self) -> u64 {
        self.usage()
            .saturating_add(self.active_file)
            .saturating_add(self.inactive_file)
    }

    /// cadvisor's working set: charged memory minus inactive file pages, floored at 0.
    pub fn working_set(&self, charged_bytes: u64) -> u64 {
        charged_bytes.saturating_sub(self.inactive_file)
    }
}

const MEMORY_STAT: &str = "memory.stat";

/// Parses `memory.stat`: the hierarchical `total_*` counters in v1, the
/// plain names in v2 (they are hierarchical there). Which is used follows
/// from the content: v1 files always carry `total_inactive_anon`.
pub fn parse_memory_stat(content: &str) -> Result<MemoryStat, ParseError> {
    const FIELDS: [&str; 5] = [
        "inactive_anon",
        "active_anon",
        "unevictable",
        "inactive_file",
        "active_file",
    ];
    let mut v1 = [None; 5];
    let mut v2 = [None; 5];
    for_each_flat_key(MEMORY_STAT, content, |key, value| {
        let (slots, name) = match key.strip_prefix("total_") {
            Some(name) => (&mut v1, name),
            None => (&mut v2, key),
        };
        if let Some(index) = FIELDS.iter().position(|field| *field == name) {
            slots[index] = Some(parse_u64(MEMORY_STAT, key, value)?);
        }
        Ok(())
    })?;
    let chosen = if v1.iter().any(Option::is_some) {
        (
            v1,
            [
                "total_inactive_anon",
                "total_active_anon",
                "total_unevictable",
                "total_inactive_file",
                "total_active_file",
            ],
        )
    } else {
        (v2, FIELDS)
    };
    let (values, names) = chosen;
    let mut out = [0u64; 5];
    for ((slot, value), name) in out.iter_mut().zip(values).zip(names) {
        *slot = value.ok_or(ParseError::MissingField {
            file: MEMORY_STAT,
            field: name,
        })?;
    }
    let [
        inactive_anon,
        active_anon,
        unevictable,
        inactive_file,
        active_file,
    ] = out;
    Ok(MemoryStat {
        inactive_anon,
        active_anon,
        unevictable,
        inactive_file,
        active_file,
    })
}

/// One `some` or `full` line of a PSI file: stall percentages over the
/// last 10/60/300 s and the total stall time in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

/// A PSI file. `full` is absent for CPU on kernels before 5.13.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiStats {
    pub some: PsiLine,
    pub full: Option<PsiLine>,
}

/// PSI of the three resources of one cgroup or the node.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PsiByResource {
    pub cpu: PsiStats,
    pub memory: PsiStats,
    pub io: PsiStats,
}

impl PsiByResource {
    pub fn get(&self, resource: PsiResource) -> &PsiStats {
        match resource {
            PsiResource::Cpu => &self.cpu,
            PsiResource::Memory => &self.memory,
            PsiResource::Io => &self.io,
        }
    }
}

const PSI: &str = "pressure";

fn parse_psi_line(line: &str) -> Result<PsiLine, ParseError> {
    let malformed = || ParseError::MalformedLine {
        file: PSI,
        line: line.to_string(),
    };
    let mut parsed = PsiLine::default();
    let (mut seen_avg10, mut seen_avg60, mut seen_avg300, mut seen_total) =
        (false, false, false, false);
    for field in line.split_ascii_whitespace().skip(1) {
        let (key, value) = field.split_once('=').ok_or_else(malformed)?;
        let ratio = || -> Result<f64, ParseError> {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| invalid(PSI, key, value))
        };
        match key {
            "avg10" => (parsed.avg10, seen_avg10) = (ratio()?, true),
            "avg60" => (parsed.avg60, seen_avg60) = (ratio()?, true),
            "avg300" => (parsed.avg300, seen_avg300) = (ratio()?, true),
            "total" => (parsed.total_us, seen_total) = (parse_u64(PSI, key, value)?, true),
            _ => return Err(malformed()),
        }
    }
    if seen_avg10 && seen_avg60 && seen_avg300 && seen_total {
        Ok(parsed)
    } else {
        Err(malformed())
    }
}

/// Parses `/proc/pressure/<res>` or `<cgroup>/<res>.pressure`.
pub fn parse_psi(content: &str) -> Result<PsiStats, ParseError> {
    let (mut some, mut full) = (None, None);
    for line in content.lines() {
        let line = line.trim();
        match line.split_ascii_whitespace().next() {
            None => continue,
            Some("some") => some = Some(parse_psi_line(line)?),
            Some("full") => full = Some(parse_psi_line(line)?),
            Some(_) => {
                return Err(ParseError::MalformedLine {
                    file: PSI,
                    line: line.to_string(),
                });
            }
        }
    }
    Ok(PsiStats {
        some: some.ok_or(ParseError::MissingField {
            file: PSI,
            field: "some line",
        })?,
        full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  1000 50 300 8000 100 20 30 5 40 0\n\
cpu0 500 25 150 4000 50 10 15 2 20 0\n\
cpu1 500 25 150 4000 50 10 15 3 20 0\n\
intr 12345 0 0\n\
ctxt 987654\n\
btime 1700000000\n\
processes 4242\n\
procs_running 2\n";

    #[test]
    fn proc_stat_busy_total_and_cpu_count() {
        let stat = parse_proc_stat(STAT).unwrap();
        assert_eq!(stat.online_cpus, 2);
        assert_eq!(stat.all.busy(), 1000 + 50 + 300 + 20 + 30);
        assert_eq!(stat.all.total(), 1400 + 8000 + 100 + 5);
    }

    #[test]
    fn node_cpu_between_two_samples() {
        let before = parse_proc_stat(STAT).unwrap();
        let mut after = before;
        // 200 jiffies elapsed on each of 2 CPUs: 300 busy, 100 idle.
        after.all.user += 250;
        after.all.system += 50;
        after.all.idle += 100;
        let cores = node_cpu_cores(&before, &after).unwrap();
        assert!((cores - 1.5).abs() < 1e-9, "{cores}");
        assert_eq!(node_cpu_cores(&before, &before), None);
        // A counter going backwards (e.g. CPU hot-unplug accounting) is no rate.
        assert_eq!(node_cpu_cores(&after, &before), None);
    }

    #[test]
    fn proc_stat_without_steal_column_still_parses() {
        let old = "cpu 1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n";
        let stat = parse_proc_stat(old).unwrap();
        assert_eq!(stat.all.steal, 0);
        assert_eq!(stat.all.busy(), 1 + 2 + 3 + 6 + 7);
    }

    #[test]
    fn malformed_proc_stat_is_typed() {
        assert_eq!(
            parse_proc_stat("cpu 1 2 3\ncpu0 1 2 3 4 5 6 7\n"),
            Err(ParseError::MalformedLine {
                file: "/proc/stat",
                line: "cpu 1 2 3".into()
            })
        );
        assert_eq!(
            parse_proc_stat("cpu 1 2 x 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n"),
            Err(ParseError::InvalidValue {
                file: "/proc/stat",
                field: "cpu".into(),
                value: "x".into()
            })
        );
        assert!(matches!(
            parse_proc_stat("intr 1\n"),
            Err(ParseError::MissingField { .. })
        ));
        assert!(matches!(
            parse_proc_stat("cpu 1 2 3 4 5 6 7\n"),
            Err(ParseError::MissingField {
                field: "cpuN lines",
                ..
            })
        ));
        assert!(parse_proc_stat("").is_err());
    }

    const MEMINFO: &str = "MemTotal:       16303428 kB\n\
MemFree:         1207808 kB\n\
MemAvailable:   10586104 kB\n\
Buffers:          413132 kB\n\
Cached:          8735880 kB\n\
HugePages_Total:       0\n\
Hugepagesize:       2048 kB\n";

    #[test]
    fn meminfo_usage_as_upstream() {
        let info = parse_meminfo(MEMINFO).unwrap();
        assert_eq!(info.total, 16_303_428 * 1024);
        assert_eq!(info.usage(), (16_303_428 - 10_586_104) * 1024);
        assert_eq!(
            info.usage_with_page_cache(),
            (16_303_428 - 1_207_808) * 1024
        );
    }

    #[test]
    fn malformed_meminfo_is_typed() {
        assert_eq!(
            parse_meminfo("MemTotal: 10 kB\nMemFree: 5 kB\n"),
            Err(ParseError::MissingField {
                file: "/proc/meminfo",
                field: "MemAvailable"
            })
        );
        assert!(matches!(
            parse_meminfo("MemTotal: ten kB\nMemFree: 5 kB\nMemAvailable: 5 kB\n"),
            Err(ParseError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse_meminfo("MemTotal: 10 MB\nMemFree: 5 kB\nMemAvailable: 5 kB\n"),
            Err(ParseError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse_meminfo("MemTotal: 99999999999999999 kB\nMemFree: 5 kB\nMemAvailable: 5 kB\n"),
            Err(ParseError::InvalidValue { .. })
        ));
        // Available above total (a racy read) floors usage at 0 instead of wrapping.
        let info = parse_meminfo("MemTotal: 10 kB\nMemFree: 20 kB\nMemAvailable: 30 kB\n").unwrap();
        assert_eq!(info.usage(), 0);
        assert_eq!(info.usage_with_page_cache(), 0);
    }

    #[test]
    fn single_values() {
        assert_eq!(
            parse_single_u64("cpuacct.usage", "123456789\n"),
            Ok(123_456_789)
        );
        assert_eq!(
            parse_single_u64("cpuacct.usage", "\n"),
            Err(ParseError::MissingField {
                file: "cpuacct.usage",
                field: "value"
            })
        );
        assert!(matches!(
            parse_single_u64("cpuacct.usage", "-1"),
            Err(ParseError::InvalidValue { .. })
        ));
    }

    #[test]
    fn cpu_stat_v1_and_v2() {
        let v1 = parse_cpu_stat(
            "nr_periods 100\nnr_throttled 25\nthrottled_time 5000000\nnr_bursts 0\nburst_time 0\n",
        )
        .unwrap();
        assert_eq!(v1.usage_ns, None);
        assert_eq!(
            v1.throttling,
            Some(Throttling {
                nr_periods: 100,
                nr_throttled: 25,
                throttled_ns: 5_000_000
            })
        );
        let v2 = parse_cpu_stat(
            "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 10\nnr_throttled 1\nthrottled_usec 300\n",
        )
        .unwrap();
        assert_eq!(v2.usage_ns, Some(2_500_000_000));
        assert_eq!(v2.throttling.unwrap().throttled_ns, 300_000);
        // v2 without the cpu controller: usage only.
        let bare = parse_cpu_stat("usage_usec 7\nuser_usec 4\nsystem_usec 3\n").unwrap();
        assert_eq!(bare.usage_ns, Some(7000));
        assert_eq!(bare.throttling, None);
    }

    #[test]
    fn malformed_cpu_stat_is_typed() {
        assert!(matches!(
            parse_cpu_stat("nr_periods 1\n"),
            Err(ParseError::MissingField {
                field: "nr_throttled",
                ..
            })
        ));
        assert!(matches!(
            parse_cpu_stat("nr_periods x\nnr_throttled 1\n"),
            Err(ParseError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse_cpu_stat("nr_periods\n"),
            Err(ParseError::MalformedLine { .. })
        ));
    }

    /// Issue 16: kernel numbers are taken exactly; a counter whose unit
    /// conversion overflows, a sign or a value past u64 is refused with the
    /// field named, never clamped into a usage.
    #[test]
    fn overflowing_or_signed_counters_are_refused() {
        let overflowing = format!(
            "usage_usec {}\nnr_periods 0\nnr_throttled 0\n",
            u64::MAX / 10
        );
        let error = parse_cpu_stat(&overflowing).unwrap_err();
        assert!(error.to_string().contains("usage_usec"), "{error}");
        let throttled = format!(
            "nr_periods 1\nnr_throttled 1\nthrottled_usec {}\n",
            u64::MAX / 10
        );
        assert!(parse_cpu_stat(&throttled).is_err());
        for text in ["+5", "18446744073709551616", "-0", "0x10", "5 6"] {
            assert!(
                parse_single_u64("cpuacct.usage", text).is_err(),
                "{text:?} was taken"
            );
        }
        let meminfo = format!(
            "MemTotal: {} kB\nMemFree: 1 kB\nMemAvailable: 1 kB\n",
            u64::MAX / 2
        );
        assert!(parse_meminfo(&meminfo).is_err());
    }

    #[test]
    fn throttled_ratio_with_reset_and_idle_periods() {
        let a = Throttling {
            nr_periods: 100,
            nr_throttled: 10,
            throttled_ns: 0,
        };
        let b = Throttling {
            nr_periods: 150,
            nr_throttled: 20,
            throttled_ns: 0,
        };
        assert_eq!(throttled_ratio(&a, &b), Some(0.2));
        assert_eq!(throttled_ratio(&b, &b), Some(0.0));
        assert_eq!(throttled_ratio(&b, &a), None);
    }

    #[test]
    fn cpu_rate_handles_reset_and_zero_time() {
        assert_eq!(cpu_cores_between(1_000, 501_000, 1_000_000), Some(0.5));
        assert_eq!(cpu_cores_between(5_000, 1_000, 1_000_000), None);
        assert_eq!(cpu_cores_between(1_000, 2_000, 0), None);
    }

    const MEMORY_STAT_V1: &str = "cache 4096\nrss 8192\nrss_huge 0\n\
inactive_anon 1\nactive_anon 2\ninactive_file 3\nactive_file 4\nunevictable 5\n\
hierarchical_memory_limit 9223372036854771712\n\
total_cache 40960\ntotal_rss 81920\n\
total_inactive_anon 4096\ntotal_active_anon 81920\ntotal_inactive_file 12288\ntotal_active_file 28672\ntotal_unevictable 0\n";

    const MEMORY_STAT_V2: &str = "anon 86016\nfile 40960\nkernel_stack 16384\n\
inactive_anon 4096\nactive_anon 81920\ninactive_file 12288\nactive_file 28672\nunevictable 8192\n\
workingset_refault_anon 0\n";

    #[test]
    fn memory_stat_v1_uses_hierarchical_totals() {
        let stat = parse_memory_stat(MEMORY_STAT_V1).unwrap();
        assert_eq!(stat.usage(), 4096 + 81920);
        assert_eq!(stat.usage_with_page_cache(), 4096 + 81920 + 12288 + 28672);
        assert_eq!(stat.working_set(200_000), 200_000 - 12288);
        assert_eq!(stat.working_set(100), 0);
    }

    #[test]
    fn memory_stat_v2_plain_names() {
        let stat = parse_memory_stat(MEMORY_STAT_V2).unwrap();
        assert_eq!(stat.usage(), 4096 + 81920 + 8192);
        assert_eq!(stat.inactive_file, 12288);
    }

    #[test]
    fn malformed_memory_stat_is_typed() {
        assert_eq!(
            parse_memory_stat("total_inactive_anon 1\ntotal_active_anon 2\n"),
            Err(ParseError::MissingField {
                file: "memory.stat",
                field: "total_unevictable"
            })
        );
        assert!(matches!(
            parse_memory_stat("inactive_anon -4\n"),
            Err(ParseError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse_memory_stat("inactive_anon 4 extra\n"),
            Err(ParseError::MalformedLine { .. })
        ));
        assert!(matches!(
            parse_memory_stat(""),
            Err(ParseError::MissingField { .. })
        ));
    }

    #[test]
    fn psi_some_and_full() {
        let stats = parse_psi(
            "some avg10=1.50 avg60=0.75 avg300=0.10 total=123456\nfull avg10=0.50 avg60=0.25 avg300=0.00 total=6543\n",
        )
        .unwrap();
        assert_eq!(stats.some.avg10, 1.5);
        assert_eq!(stats.some.total_us, 123_456);
        assert_eq!(stats.full.map(|f| f.avg60), Some(0.25));
        let cpu_only_some = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert_eq!(cpu_only_some.full, None);
    }

    #[test]
    fn malformed_psi_is_typed() {
        assert!(matches!(
            parse_psi(""),
            Err(ParseError::MissingField { .. })
        ));
        assert!(matches!(
            parse_psi("some avg10=1 avg60=1 total=3\n"),
            Err(ParseError::MalformedLine { .. })
        ));
        assert!(matches!(
            parse_psi("some avg10=abc avg60=1 avg300=1 total=3\n"),
            Err(ParseError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse_psi("some avg10=NaN avg60=1 avg300=1 total=3\n"),
            Err(ParseError::InvalidValue { .. })
        ));
        assert!(matches!(
            parse_psi("partial avg10=1 avg60=1 avg300=1 total=3\n"),
            Err(ParseError::MalformedLine { .. })
        ));
        assert!(matches!(
            parse_psi("some avg10=1 avg60=1 avg300=1 total=3 bogus=1\n"),
            Err(ParseError::MalformedLine { .. })
        ));
    }

    #[test]
    fn per_cpu_lines_and_numa_busy_cores() {
        let stat = "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\ncpu1 5 0 5 40 0 0 0 0 0 0\nintr 1\n";
        let cpus = parse_per_cpu_times(stat).unwrap();
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[1].0, 1);
        assert_eq!(cpus[1].1.busy(), 10);
        assert!(parse_per_cpu_times("cpu 1 2 3 4 5 6 7\n").is_err());
        assert!(parse_per_cpu_times("cpu0 1 x 3 4 5 6 7\n").is_err());
        // cpu0 fully busy, cpu1 idle for 100 jiffies each: one core in use.
        let before = [cpus[0].1, cpus[1].1];
        let mut busy = cpus[0].1;
        busy.user += 100;
        let mut idle = cpus[1].1;
        idle.idle += 100;
        let cores = cpus_busy_cores(&before, &[busy, idle]).unwrap();
        assert!((cores - 1.0).abs() < 1e-9, "{cores}");
        assert_eq!(cpus_busy_cores(&before, &before), None);
        assert_eq!(cpus_busy_cores(&[busy, idle], &before), None);
    }

    #[test]
    fn numa_meminfo_usage_counts_page_cache_and_reclaimable_slab_as_available() {
        let content = "Node 0 MemTotal:       1000 kB\nNode 0 MemFree:         300 kB\nNode 0 Active(file):     100 kB\nNode 0 Inactive(file):   50 kB\nNode 0 SReclaimable:     50 kB\nNode 0 HugePages_Total:     0\n";
        let info = parse_numa_meminfo(content).unwrap();
        assert_eq!(info.total, 1000 * 1024);
        assert_eq!(info.usage(), 500 * 1024);
        assert!(matches!(
            parse_numa_meminfo("Node 0 MemFree: 1 kB\n"),
            Err(ParseError::MissingField {
                field: "MemTotal",
                ..
            })
        ));
        assert!(parse_numa_meminfo("Node 0 MemTotal: x kB\nNode 0 MemFree: 1 kB\n").is_err());
        let full = parse_numa_meminfo("Node 1 MemTotal: 10 kB\nNode 1 MemFree: 20 kB\n").unwrap();
        assert_eq!(full.usage(), 0);
    }
}
