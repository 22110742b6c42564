//! CPU topology snapshot from `<sys-root>/devices/system/cpu`: for every
//! online CPU its core, socket and NUMA node (upstream's `node_cpu_info`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{CollectError, Collector, PodsSnapshot, read_text};
use crate::metriccache::{MetricCache, Sample};
use crate::system::units::CpuSet;

/// One logical CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct CpuInfo {
    pub cpu: u32,
    /// `topology/core_id`; unique only within a socket.
    pub core: u32,
    /// `topology/physical_package_id`.
    pub socket: u32,
    /// NUMA node (0 on kernels without NUMA).
    pub node: u32,
}

/// The online CPUs, ordered by id.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpuTopology {
    pub cpus: Vec<CpuInfo>,
}

impl CpuTopology {
    pub fn num_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Physical cores: distinct (socket, core) pairs.
    pub fn num_cores(&self) -> usize {
        self.cpus
            .iter()
            .map(|c| (c.socket, c.core))
            .collect::<BTreeSet<_>>()
            .len()
    }

    pub fn num_sockets(&self) -> usize {
        self.cpus
            .iter()
            .map(|c| c.socket)
            .collect::<BTreeSet<_>>()
            .len()
    }

    pub fn num_nodes(&self) -> usize {
        self.cpus
            .iter()
            .map(|c| c.node)
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// Whether some core runs more than one hardware thread.
    pub fn smt(&self) -> bool {
        self.num_cores() < self.num_cpus()
    }

    /// The CPUs of one NUMA node.
    pub fn cpus_of_node(&self, node: u32) -> CpuSet {
        let mut set = CpuSet::new();
        for cpu in self.cpus.iter().filter(|c| c.node == node) {
            // Ids came from a parsed CpuSet, so they are within its range.
            let _ = set.insert(cpu.cpu);
        }
        set
    }
}

fn parse_id(path: &Path, content: &str) -> Result<u32, CollectError> {
    let text = content.trim();
    // Some platforms report -1 for an unknown package or core; treat as 0.
    if text == "-1" {
        return Ok(0);
    }
    text.parse().map_err(|_| CollectError::Invalid {
        path: path.to_path_buf(),
        reason: format!("expected a CPU topology id, got {text:?}"),
    })
}

/// Reads the topology below `<sys_root>/devices/system/cpu`.
pub fn read_cpu_topology(sys_root: &Path) -> Result<CpuTopology, CollectError> {
    let cpu_root = sys_root.join("devices/system/cpu");
    let online_path = cpu_root.join("online");
    let online_text = read_text(&online_path)?;
    let online: CpuSet = online_text
        .trim()
        .parse()
        .map_err(|err| CollectError::Invalid {
            path: online_path.clone(),
            reason: format!("{err}"),
        })?;
    let mut cpus = Vec::with_capacity(online.len());
    for cpu in online.iter() {
        let dir = cpu_root.join(format!("cpu{cpu}"));
        let core_path = dir.join("topology/core_id");
        let socket_path = dir.join("topology/physical_package_id");
        let core = parse_id(&core_path, &read_text(&core_path)?)?;
        let socket = parse_id(&socket_path, &read_text(&socket_path)?)?;
        cpus.push(CpuInfo {
            cpu,
            core,
            socket,
            node: node_of_cpu(&dir)?,
        });
    }
    Ok(CpuTopology { cpus })
}

/// The `nodeN` entry in a CPU's directory; 0 when there is none.
fn node_of_cpu(cpu_dir: &Path) -> Result<u32, CollectError> {
    let entries = std::fs::read_dir(cpu_dir).map_err(|source| CollectError::Read {
        path: cpu_dir.to_path_buf(),
        source,
    })?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(|n| n.strip_prefix("node")) else {
            continue;
        };
        if let Ok(node) = id.parse() {
            return Ok(node);
        }
    }
    Ok(0)
}

/// Refreshes the topology in the metric cache at its own interval
/// (upstream's `-collect-node-cpu-info-interval`).
pub struct CpuTopologyCollector {
    sys_root: PathBuf,
    cache: Arc<MetricCache>,
    interval: Duration,
    next_due: Option<SystemTime>,
}

impl CpuTopologyCollector {
    pub fn new(sys_root: impl Into<PathBuf>, cache: Arc<MetricCache>, interval: Duration) -> Self {
        Self {
            sys_root: sys_root.into(),
            cache,
            interval,
            next_due: None,
        }
    }
}

impl Collector for CpuTopologyCollector {
    fn name(&self) -> &'static str {
        "cpu-topology"
    }

    fn collect(&mut self, now: SystemTime, _pods: &PodsSnapshot) -> Vec<Sample> {
        if self.next_due.is_some_and(|due| now < due) {
            return Vec::new();
        }
        self.next_due = Some(now + self.interval);
        match read_cpu_topology(&self.sys_root) {
            Ok(topology) => self.cache.set_cpu_topology(Arc::new(topology)),
            Err(err) => tracing::warn!(error = %err, "cannot read the CPU topology: {err}"),
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use koord_common::testing::TempDir;
    use std::fs;

    fn write(path: &Path, content: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    /// 2 sockets × 2 cores × 2 threads; sockets are NUMA nodes 0 and 1.
    fn fake_sys(root: &Path) {
        let cpu_root = root.join("devices/system/cpu");
        write(&cpu_root.join("online"), "0-7\n");
        for cpu in 0..8u32 {
            let dir = cpu_root.join(format!("cpu{cpu}"));
            let socket = cpu / 4;
            let core = (cpu % 4) / 2;
            write(&dir.join("topology/core_id"), &format!("{core}\n"));
            write(
                &dir.join("topology/physical_package_id"),
                &format!("{socket}\n"),
            );
            fs::create_dir_all(dir.join(format!("node{socket}"))).unwrap();
        }
    }

    #[test]
    fn reads_sockets_cores_threads_and_nodes() {
        let tmp = TempDir::new("topology").unwrap();
        fake_sys(tmp.path());
        let topology = read_cpu_topology(tmp.path()).unwrap();
        assert_eq!(topology.num_cpus(), 8);
        assert_eq!(topology.num_cores(), 4);
        assert_eq!(topology.num_sockets(), 2);
        assert_eq!(topology.num_nodes(), 2);
        assert!(topology.smt());
        assert_eq!(topology.cpus_of_node(1).to_string(), "4-7");
        assert_eq!(
            topology.cpus[5],
            CpuInfo {
                cpu: 5,
                core: 0,
                socket: 1,
                node: 1
            }
        );
    }

    #[test]
    fn malformed_ids_are_errors_naming_the_file() {
        let tmp = TempDir::new("topology-bad").unwrap();
        fake_sys(tmp.path());
        write(
            &tmp.path().join("devices/system/cpu/cpu3/topology/core_id"),
            "three\n",
        );
        let err = read_cpu_topology(tmp.path()).unwrap_err();
        assert!(err.to_string().contains("cpu3/topology/core_id"), "{err}");
        write(&tmp.path().join("devices/system/cpu/online"), "0-x\n");
        assert!(matches!(
            read_cpu_topology(tmp.path()),
            Err(CollectError::Invalid { .. })
        ));
    }

    #[test]
    fn collector_refreshes_at_its_interval() {
        let tmp = TempDir::new("topology-collector").unwrap();
        fake_sys(tmp.path());
        let cache = Arc::new(MetricCache::new(Default::default()).unwrap());
        let mut collector =
            CpuTopologyCollector::new(tmp.path(), cache.clone(), Duration::from_secs(60));
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        collector.collect(t0, &PodsSnapshot::default());
        assert_eq!(cache.cpu_topology().map(|t| t.num_cpus()), Some(8));
        // Shrink the machine; the next refresh only happens after 60 s.
        write(&tmp.path().join("devices/system/cpu/online"), "0-3\n");
        collector.collect(t0 + Duration::from_secs(30), &PodsSnapshot::default());
        assert_eq!(cache.cpu_topology().map(|t| t.num_cpus()), Some(8));
        collector.collect(t0 + Duration::from_secs(60), &PodsSnapshot::default());
        assert_eq!(cache.cpu_topology().map(|t| t.num_cpus()), Some(4));
    }

    #[test]
    fn this_machine_has_a_topology() {
        // Light sanity check against the real /sys when present.
        if !Path::new("/sys/devices/system/cpu/online").exists() {
            println!("SKIP: no /sys/devices/system/cpu/online");
            return;
        }
        let topology = read_cpu_topology(Path::new("/sys")).unwrap();
        assert!(topology.num_cpus() >= 1);
        assert!(topology.num_cores() <= topology.num_cpus());
    }
}
