//! Node CPU and memory usage from `/proc/stat` and `/proc/meminfo`.

use std::path::PathBuf;
use std::time::SystemTime;

use super::parse::{ProcStat, node_cpu_cores, parse_meminfo, parse_proc_stat};
use super::{CollectError, Collector, PodsSnapshot, read_parsed};
use crate::metriccache::{MetricKind, Sample, SeriesKey};

/// Reads `<proc-root>/stat` and `<proc-root>/meminfo`. CPU usage needs two
/// rounds; memory is reported from the first.
pub struct NodeResourceCollector {
    proc_root: PathBuf,
    previous_stat: Option<ProcStat>,
}

impl NodeResourceCollector {
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self {
            proc_root: proc_root.into(),
            previous_stat: None,
        }
    }

    fn cpu_sample(&mut self, now: SystemTime) -> Result<Option<Sample>, CollectError> {
        let current = read_parsed(&self.proc_root.join("stat"), parse_proc_stat)?;
        let previous = self.previous_stat.replace(current);
        Ok(previous
            .and_then(|previous| node_cpu_cores(&previous, &current))
            .map(|cores| Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), now, cores)))
    }

    fn memory_samples(&self, now: SystemTime) -> Result<[Sample; 3], CollectError> {
        let info = read_parsed(&self.proc_root.join("meminfo"), parse_meminfo)?;
        Ok([
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                now,
                info.usage() as f64,
            ),
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsageWithPageCache),
                now,
                info.usage_with_page_cache() as f64,
            ),
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryTotal),
                now,
                info.total as f64,
            ),
        ])
    }
}

impl Collector for NodeResourceCollector {
    fn name(&self) -> &'static str {
        "node-resource"
    }

    fn collect(&mut self, now: SystemTime, _pods: &PodsSnapshot) -> Vec<Sample> {
        let mut samples = Vec::with_capacity(4);
        match self.cpu_sample(now) {
            Ok(sample) => samples.extend(sample),
            Err(err) => tracing::warn!(error = %err, "cannot collect node CPU usage: {err}"),
        }
        match self.memory_samples(now) {
            Ok(memory) => samples.extend(memory),
            Err(err) => tracing::warn!(error = %err, "cannot collect node memory usage: {err}"),
        }
        samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_common::testing::TempDir;
    use std::fs;
    use std::time::{Duration, UNIX_EPOCH};

    fn write_proc(dir: &std::path::Path, busy: u64, idle: u64) {
        fs::write(
            dir.join("stat"),
            format!("cpu {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0\ncpu2 0 0 0 0 0 0 0\ncpu3 0 0 0 0 0 0 0\n"),
        )
        .unwrap();
        fs::write(
            dir.join("meminfo"),
            "MemTotal: 1000 kB\nMemFree: 100 kB\nMemAvailable: 400 kB\n",
        )
        .unwrap();
    }

    fn value(samples: &[Sample], kind: MetricKind) -> Option<f64> {
        samples.iter().find(|s| s.key.kind == kind).map(|s| s.value)
    }

    #[test]
    fn cpu_needs_two_rounds_memory_one() {
        let tmp = TempDir::new("node-collector").unwrap();
        write_proc(tmp.path(), 1000, 1000);
        let mut collector = NodeResourceCollector::new(tmp.path());
        let t0 = UNIX_EPOCH + Duration::from_secs(10);
        let first = collector.collect(t0, &PodsSnapshot::default());
        assert_eq!(value(&first, MetricKind::NodeCpuUsage), None);
        assert_eq!(
            value(&first, MetricKind::NodeMemoryUsage),
            Some(600.0 * 1024.0)
        );
        assert_eq!(
            value(&first, MetricKind::NodeMemoryUsageWithPageCache),
            Some(900.0 * 1024.0)
        );

        // 4 CPUs for 100 jiffies each = 400 elapsed; 300 busy -> 3 cores.
        write_proc(tmp.path(), 1300, 1100);
        let second = collector.collect(t0 + Duration::from_secs(1), &PodsSnapshot::default());
        let cores = value(&second, MetricKind::NodeCpuUsage).unwrap();
        assert!((cores - 3.0).abs() < 1e-9, "{cores}");
    }

    #[test]
    fn unreadable_files_leave_samples_out() {
        let tmp = TempDir::new("node-collector-missing").unwrap();
        let mut collector = NodeResourceCollector::new(tmp.path().join("nope"));
        assert!(
            collector
                .collect(UNIX_EPOCH, &PodsSnapshot::default())
                .is_empty()
        );
        // Malformed meminfo: CPU still collected.
        write_proc(tmp.path(), 1, 1);
        fs::write(tmp.path().join("meminfo"), "garbage\n").unwrap();
        let mut collector = NodeResourceCollector::new(tmp.path());
        collector.collect(UNIX_EPOCH, &PodsSnapshot::default());
        write_proc(tmp.path(), 2, 2);
        fs::write(tmp.path().join("meminfo"), "garbage\n").unwrap();
        let samples = collector.collect(
            UNIX_EPOCH + Duration::from_secs(1),
            &PodsSnapshot::default(),
        );
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].key.kind, MetricKind::NodeCpuUsage);
    }
}
