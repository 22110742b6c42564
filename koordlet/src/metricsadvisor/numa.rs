//! CPU and memory in use per NUMA node: per-CPU `/proc/stat` times grouped
//! by the CPU topology, and each node's
//! `<sys-root>/devices/system/node/node<N>/meminfo`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::parse::{CpuTimes, cpus_busy_cores, parse_numa_meminfo, parse_per_cpu_times};
use super::{Collector, PodsSnapshot, read_parsed};
use crate::metriccache::{MetricCache, MetricKind, Sample, SeriesKey, SeriesLabel};

fn numa_key(kind: MetricKind, node: u32) -> SeriesKey {
    SeriesKey::node(kind).with_label(SeriesLabel::Numa(node))
}

/// Needs the CPU topology in the cache (the topology collector puts it
/// there); without it nothing is reported. CPU usage needs two rounds.
pub struct NumaResourceCollector {
    proc_root: PathBuf,
    sys_root: PathBuf,
    cache: Arc<MetricCache>,
    previous: Option<BTreeMap<u32, CpuTimes>>,
    warned: bool,
}

impl NumaResourceCollector {
    pub fn new(
        proc_root: impl Into<PathBuf>,
        sys_root: impl Into<PathBuf>,
        cache: Arc<MetricCache>,
    ) -> Self {
        Self {
            proc_root: proc_root.into(),
            sys_root: sys_root.into(),
            cache,
            previous: None,
            warned: false,
        }
    }

    fn warn_once(&mut self, what: &str, err: &dyn std::fmt::Display) {
        if !self.warned {
            self.warned = true;
            tracing::warn!(error = %err, "cannot collect NUMA {what} usage: {err}");
        } else {
            tracing::debug!(error = %err, "cannot collect NUMA {what} usage: {err}");
        }
    }
}

/// Cores in use per node between two per-CPU readings; CPUs missing from
/// either reading or from the mapping are left out.
pub fn numa_cpu_usage(
    cpu_to_node: &BTreeMap<u32, u32>,
    previous: &BTreeMap<u32, CpuTimes>,
    current: &BTreeMap<u32, CpuTimes>,
) -> BTreeMap<u32, f64> {
    let mut per_node: BTreeMap<u32, (Vec<CpuTimes>, Vec<CpuTimes>)> = BTreeMap::new();
    for (cpu, now) in current {
        let (Some(node), Some(before)) = (cpu_to_node.get(cpu), previous.get(cpu)) else {
            continue;
        };
        let entry = per_node.entry(*node).or_default();
        entry.0.push(*before);
        entry.1.push(*now);
    }
    per_node
        .into_iter()
        .filter_map(|(node, (before, now))| Some((node, cpus_busy_cores(&before, &now)?)))
        .collect()
}

impl Collector for NumaResourceCollector {
    fn name(&self) -> &'static str {
        "numa-resource"
    }

    fn collect(&mut self, now: SystemTime, _pods: &PodsSnapshot) -> Vec<Sample> {
        let Some(topology) = self.cache.cpu_topology() else {
            return Vec::new();
        };
        let cpu_to_node: BTreeMap<u32, u32> = topology
            .cpus
            .iter()
            .map(|cpu| (cpu.cpu, cpu.node))
            .collect();
        let mut nodes: Vec<u32> = cpu_to_node.values().copied().collect();
        nodes.sort_unstable();
        nodes.dedup();
        let mut samples = Vec::with_capacity(nodes.len() * 2);

        match read_parsed(&self.proc_root.join("stat"), parse_per_cpu_times) {
            Ok(cpus) => {
                let current: BTreeMap<u32, CpuTimes> = cpus.into_iter().collect();
                if let Some(previous) = self.previous.replace(current.clone()) {
                    for (node, cores) in numa_cpu_usage(&cpu_to_node, &previous, &current) {
                        samples.push(Sample::new(
                            numa_key(MetricKind::NodeNumaCpuUsage, node),
                            now,
                            cores,
                        ));
                    }
                }
            }
            Err(err) => self.warn_once("CPU", &err),
        }
        for node in nodes {
            let path = self
                .sys_root
                .join(format!("devices/system/node/node{node}/meminfo"));
            match read_parsed(&path, parse_numa_meminfo) {
                Ok(info) => samples.push(Sample::new(
                    numa_key(MetricKind::NodeNumaMemoryUsage, node),
                    now,
                    info.usage() as f64,
                )),
                // Kernels without NUMA support have no node directories.
                Err(err) if err.is_not_found() => {}
                Err(err) => self.warn_once("memory", &err),
            }
        }
        samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metriccache::MetricCacheConfig;
    use koord_common::testing::TempDir;
    use koord_common::units::{CpuInfo, CpuTopology};
    use std::fs;
    use std::time::{Duration, UNIX_EPOCH};

    /// One `cpuN` line per entry: (busy user jiffies, idle jiffies).
    fn write_stat(proc: &std::path::Path, cpus: [(u64, u64); 4]) {
        let mut text = String::from("cpu 0 0 0 0 0 0 0 0\n");
        for (cpu, (busy, idle)) in cpus.iter().enumerate() {
            text.push_str(&format!("cpu{cpu} {busy} 0 0 {idle} 0 0 0 0\n"));
        }
        fs::write(proc.join("stat"), text).unwrap();
    }

    #[test]
    fn usage_is_grouped_by_the_topology_nodes() {
        let tmp = TempDir::new("numa-collector").unwrap();
        let proc = tmp.path().join("proc");
        let sys = tmp.path().join("sys");
        fs::create_dir_all(&proc).unwrap();
        for (node, free) in [(0, 600), (1, 900)] {
            let dir = sys.join(format!("devices/system/node/node{node}"));
            fs::create_dir_all(&dir).unwrap();
            fs::write(
                dir.join("meminfo"),
                format!("Node {node} MemTotal: 1000 kB\nNode {node} MemFree: {free} kB\n"),
            )
            .unwrap();
        }
        let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
        let mut collector = NumaResourceCollector::new(&proc, &sys, cache.clone());
        write_stat(&proc, [(0, 0); 4]);
        let t0 = UNIX_EPOCH + Duration::from_secs(100);
        // No topology yet: nothing.
        assert!(collector.collect(t0, &PodsSnapshot::default()).is_empty());

        let cpu = |cpu, node| CpuInfo {
            cpu,
            core: cpu,
            socket: node,
            node,
        };
        cache.set_cpu_topology(Arc::new(CpuTopology {
            cpus: vec![cpu(0, 0), cpu(1, 0), cpu(2, 1), cpu(3, 1)],
        }));
        let first = collector.collect(t0, &PodsSnapshot::default());
        assert_eq!(first.len(), 2, "memory only on the first round: {first:?}");
        // Each CPU's clock advances 1000 jiffies; node 0's CPUs are busy 500
        // and 300 of them, node 1's 1000 and 0.
        write_stat(&proc, [(500, 500), (300, 700), (1000, 0), (0, 1000)]);
        let second = collector.collect(t0 + Duration::from_secs(10), &PodsSnapshot::default());
        let value = |kind, node| {
            second
                .iter()
                .find(|s| s.key == numa_key(kind, node))
                .map(|s| s.value)
        };
        let node0 = value(MetricKind::NodeNumaCpuUsage, 0).unwrap();
        let node1 = value(MetricKind::NodeNumaCpuUsage, 1).unwrap();
        assert!((node0 - 0.8).abs() < 1e-9, "{node0}");
        assert!((node1 - 1.0).abs() < 1e-9, "{node1}");
        assert_eq!(
            value(MetricKind::NodeNumaMemoryUsage, 0),
            Some(400.0 * 1024.0)
        );
        assert_eq!(
            value(MetricKind::NodeNumaMemoryUsage, 1),
            Some(100.0 * 1024.0)
        );
    }
}
