//! CPU topology from `<sys-root>/devices/system/{cpu,node}`: for every
//! online CPU its core, socket, SMT siblings and NUMA node (upstream's
//! `node_cpu_info`). [`survey_cpu_topology`] is the one reader; the
//! capability probe reads it leniently, the metric cache strictly.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::parse::ParseError;
use super::{CollectError, Collector, PodsSnapshot, read_parsed, read_text};
use crate::metriccache::{MetricCache, Sample};
use koord_common::units::CpuSet;
use koord_common::units::{CpuInfo, CpuTopology};

/// Parses a topology id file (`core_id`, `physical_package_id`): `None` for
/// the negative ids (-1) some platforms report when they do not know.
pub fn parse_topology_id(content: &str) -> Result<Option<u32>, ParseError> {
    let text = content.trim();
    if let Some(magnitude) = text.strip_prefix('-')
        && !magnitude.is_empty()
        && magnitude.bytes().all(|b| b.is_ascii_digit())
    {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|_| ParseError::InvalidValue {
            file: "cpu topology id",
            field: "id".to_string(),
            value: text.to_string(),
        })
}

fn read_cpu_list(path: &Path) -> Result<CpuSet, CollectError> {
    let text = read_text(path)?;
    text.trim().parse().map_err(|err| CollectError::Invalid {
        path: path.to_path_buf(),
        reason: format!("{err}"),
    })
}

/// What sysfs says about one online CPU; each file is read on its own so
/// callers decide how strict to be.
#[derive(Debug)]
pub struct CpuFacts {
    pub cpu: u32,
    /// `topology/core_id`; `Ok(None)` when the kernel does not know.
    pub core: Result<Option<u32>, CollectError>,
    /// `topology/physical_package_id`; `Ok(None)` when the kernel does not know.
    pub socket: Result<Option<u32>, CollectError>,
    /// Hardware threads of the CPU's core (`topology/thread_siblings_list`).
    pub thread_siblings: Result<usize, CollectError>,
    /// NUMA node: from `node/node<N>/cpulist`, else the CPU's `node<N>` link.
    pub node: Option<u32>,
}

/// One pass over `<sys-root>/devices/system/{cpu,node}`: the reader behind
/// both the capability matrix (lenient: problems become reasons) and the
/// metric cache's topology (strict: [`read_cpu_topology`]).
#[derive(Debug)]
pub struct TopologySurvey {
    /// `cpu/online`, with its path in errors.
    pub online: Result<CpuSet, CollectError>,
    pub online_path: PathBuf,
    /// The online CPUs, ascending (empty when `online` failed).
    pub cpus: Vec<CpuFacts>,
    /// Number of `node<N>` directories; an error when `node/` is unreadable
    /// (kernels without NUMA support have none).
    pub numa_nodes: Result<usize, CollectError>,
    pub node_root: PathBuf,
    /// `node<N>/cpulist` files that could not be read.
    pub node_problems: Vec<CollectError>,
}

/// Reads the CPU and NUMA topology below `sys_root` (see [`TopologySurvey`]).
pub fn survey_cpu_topology(sys_root: &Path) -> TopologySurvey {
    let cpu_root = sys_root.join("devices/system/cpu");
    let node_root = sys_root.join("devices/system/node");
    let mut node_of_cpu = std::collections::BTreeMap::new();
    let mut node_problems = Vec::new();
    let numa_nodes = match std::fs::read_dir(&node_root) {
        Err(source) => Err(CollectError::Read {
            path: node_root.clone(),
            source,
        }),
        Ok(entries) => {
            let mut count = 0;
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(node) = name
                    .to_str()
                    .and_then(|name| name.strip_prefix("node"))
                    .and_then(|id| id.parse::<u32>().ok())
                else {
                    continue;
                };
                count += 1;
                match read_cpu_list(&entry.path().join("cpulist")) {
                    Ok(cpus) => {
                        for cpu in cpus.iter() {
                            node_of_cpu.insert(cpu, node);
                        }
                    }
                    Err(err) => node_problems.push(err),
                }
            }
            Ok(count)
        }
    };
    let online_path = cpu_root.join("online");
    let online = read_cpu_list(&online_path);
    let cpus = online
        .as_ref()
        .map(|online| {
            online
                .iter()
                .map(|cpu| {
                    let dir = cpu_root.join(format!("cpu{cpu}"));
                    let topology = dir.join("topology");
                    let id = |file: &str| read_parsed(&topology.join(file), parse_topology_id);
                    CpuFacts {
                        cpu,
                        core: id("core_id"),
                        socket: id("physical_package_id"),
                        thread_siblings: read_cpu_list(&topology.join("thread_siblings_list"))
                            .map(|siblings| siblings.len()),
                        node: node_of_cpu.get(&cpu).copied().or_else(|| node_link(&dir)),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    TopologySurvey {
        online,
        online_path,
        cpus,
        numa_nodes,
        node_root,
        node_problems,
    }
}

/// The `node<N>` entry in a CPU's directory, if any.
fn node_link(cpu_dir: &Path) -> Option<u32> {
    std::fs::read_dir(cpu_dir)
        .ok()?
        .flatten()
        .find_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_prefix("node")?
                .parse()
                .ok()
        })
}

/// The topology below `<sys_root>/devices/system/cpu`; any unreadable id is
/// an error. Unknown ids and CPUs without a NUMA node count as 0.
pub fn read_cpu_topology(sys_root: &Path) -> Result<CpuTopology, CollectError> {
    let survey = survey_cpu_topology(sys_root);
    survey.online?;
    let mut cpus = Vec::with_capacity(survey.cpus.len());
    for facts in survey.cpus {
        cpus.push(CpuInfo {
            cpu: facts.cpu,
            core: facts.core?.unwrap_or(0),
            socket: facts.socket?.unwrap_or(0),
            node: facts.node.unwrap_or(0),
        });
    }
    Ok(CpuTopology { cpus })
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

    #[test]
    fn topology_ids_parse_with_unknown_as_none() {
        assert_eq!(parse_topology_id("7\n"), Ok(Some(7)));
        assert_eq!(parse_topology_id("-1\n"), Ok(None));
        assert!(parse_topology_id("-").is_err());
        assert!(parse_topology_id("seven").is_err());
        assert!(parse_topology_id("").is_err());
    }

    #[test]
    fn the_survey_keeps_each_problem_apart() {
        let tmp = TempDir::new("topology-survey").unwrap();
        fake_sys(tmp.path());
        let cpu_root = tmp.path().join("devices/system/cpu");
        write(
            &cpu_root.join("cpu0/topology/thread_siblings_list"),
            "0-1\n",
        );
        write(&cpu_root.join("cpu2/topology/physical_package_id"), "-1\n");
        write(&cpu_root.join("cpu3/topology/core_id"), "x\n");
        // A node directory names CPUs 4-7 node 3, overriding the CPU links.
        write(
            &tmp.path().join("devices/system/node/node3/cpulist"),
            "4-7\n",
        );
        write(
            &tmp.path().join("devices/system/node/node9/cpulist"),
            "bad\n",
        );
        let survey = survey_cpu_topology(tmp.path());
        assert_eq!(survey.online.as_ref().unwrap().len(), 8);
        assert_eq!(survey.cpus[0].thread_siblings.as_ref().unwrap(), &2);
        assert!(survey.cpus[1].thread_siblings.is_err());
        assert_eq!(survey.cpus[2].socket.as_ref().unwrap(), &None);
        assert!(survey.cpus[3].core.is_err());
        assert_eq!(survey.cpus[5].node, Some(3));
        assert_eq!(survey.cpus[1].node, Some(0), "from the CPU's node link");
        assert_eq!(*survey.numa_nodes.as_ref().unwrap(), 2);
        assert_eq!(survey.node_problems.len(), 1);
        assert!(survey.node_problems[0].to_string().contains("node9"));
        // The strict reader fails on the bad core id.
        assert!(read_cpu_topology(tmp.path()).is_err());
    }
}
