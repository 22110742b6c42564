//! GPU usage, as upstream's GPU collector (`metricsadvisor/devices/gpu`)
//! measures it: NVML lists each GPU's compute processes with their memory
//! and SM utilisation; a GPU's node usage is the sum over its processes, a
//! pod's or container's usage the sum over the processes in its cgroup
//! (`cgroup.procs`). Stored per GPU (minor and UUID) under upstream's kinds
//! `node_gpu_core_usage`, `node_gpu_memory_usage`, `node_gpu_memory_total`,
//! `pod_gpu_*` and `container_gpu_*`; the GPUs themselves go into the cache
//! for the NodeMetric reporter.
//!
//! The core is [`gpu_usage_samples`] (no I/O); [`GpuCollector`] asks the
//! source and reads the cgroups.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use super::{Collector, PodsSnapshot};
use crate::metriccache::{
    Entity, GpuDevice, MetricCache, MetricKind, Sample, SeriesKey, SeriesLabel,
};
use crate::statesinformer::device::{DeviceSource, GpuProcessUsage, GpuUsageSnapshot};
use crate::system::cgroup::{CgroupLayout, CgroupResource};

/// `cgroup.procs` larger than this is not read (about 140,000 PIDs).
const MAX_PROCS_BYTES: u64 = 1 << 20;
/// PIDs considered per container.
const MAX_PIDS_PER_CONTAINER: usize = 65_536;

/// The processes of one container, by container ID (from the pod status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPids {
    pub id: Arc<str>,
    pub pids: BTreeSet<u32>,
}

/// The processes of one pod's containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPids {
    pub uid: Arc<str>,
    pub containers: Vec<ContainerPids>,
}

/// Sums of processes on one GPU.
#[derive(Debug, Default, Clone, Copy)]
struct Sum {
    sm_util: u64,
    memory_bytes: u64,
}

impl Sum {
    fn add(&mut self, usage: &GpuProcessUsage) {
        self.sm_util = self.sm_util.saturating_add(u64::from(usage.sm_util));
        self.memory_bytes = self.memory_bytes.saturating_add(usage.memory_used.0);
    }
}

/// The GPUs of a snapshot as the cache keeps them.
pub fn gpu_devices_of(snapshot: &GpuUsageSnapshot) -> Vec<GpuDevice> {
    snapshot
        .gpus
        .iter()
        .map(|gpu| GpuDevice {
            minor: gpu.minor,
            uuid: Arc::from(gpu.uuid.as_str()),
            memory_total: gpu.memory_total,
        })
        .collect()
}

/// The samples of one round (pure). A GPU whose processes are unknown this
/// round gets only its total memory; a pod or container gets a GPU's
/// samples only when one of its processes uses that GPU (as upstream).
pub fn gpu_usage_samples(
    snapshot: &GpuUsageSnapshot,
    pods: &[PodPids],
    now: SystemTime,
) -> Vec<Sample> {
    let devices = gpu_devices_of(snapshot);
    let mut out = Vec::new();
    // pid → (GPU index, usage), to find a cgroup's processes quickly.
    let mut by_pid: HashMap<u32, Vec<(usize, GpuProcessUsage)>> = HashMap::new();
    for (index, (gpu, device)) in snapshot.gpus.iter().zip(&devices).enumerate() {
        let label = SeriesLabel::Gpu(device.label());
        let node = |kind| SeriesKey::node(kind).with_label(label.clone());
        out.push(Sample::new(
            node(MetricKind::NodeGpuMemoryTotal),
            now,
            gpu.memory_total.0 as f64,
        ));
        let Some(processes) = &gpu.processes else {
            continue;
        };
        let mut sum = Sum::default();
        for process in processes {
            sum.add(process);
            by_pid
                .entry(process.pid)
                .or_default()
                .push((index, *process));
        }
        out.push(Sample::new(
            node(MetricKind::NodeGpuCoreUsage),
            now,
            sum.sm_util as f64,
        ));
        out.push(Sample::new(
            node(MetricKind::NodeGpuMemoryUsage),
            now,
            sum.memory_bytes as f64,
        ));
    }
    if by_pid.is_empty() {
        return out;
    }
    let sums_of = |pids: &mut dyn Iterator<Item = &u32>| {
        let mut sums: std::collections::BTreeMap<usize, Sum> = Default::default();
        for pid in pids {
            for (index, usage) in by_pid.get(pid).into_iter().flatten() {
                sums.entry(*index).or_default().add(usage);
            }
        }
        sums
    };
    let mut push = |entity: &Entity, sums: std::collections::BTreeMap<usize, Sum>, core, memory| {
        for (index, sum) in sums {
            let label = SeriesLabel::Gpu(devices[index].label());
            let key = |kind| SeriesKey::new(kind, entity.clone()).with_label(label.clone());
            out.push(Sample::new(key(core), now, sum.sm_util as f64));
            out.push(Sample::new(key(memory), now, sum.memory_bytes as f64));
        }
    };
    for pod in pods {
        let pod_pids: BTreeSet<u32> = pod
            .containers
            .iter()
            .flat_map(|container| container.pids.iter().copied())
            .collect();
        push(
            &Entity::Pod(pod.uid.clone()),
            sums_of(&mut pod_pids.iter()),
            MetricKind::PodGpuCoreUsage,
            MetricKind::PodGpuMemoryUsage,
        );
        for container in &pod.containers {
            push(
                &Entity::Container(container.id.clone()),
                sums_of(&mut container.pids.iter()),
                MetricKind::ContainerGpuCoreUsage,
                MetricKind::ContainerGpuMemoryUsage,
            );
        }
    }
    out
}

/// Parses `cgroup.procs` (one PID a line), at most `limit` PIDs.
pub fn parse_pids(content: &str, limit: usize) -> Result<BTreeSet<u32>, String> {
    let mut pids = BTreeSet::new();
    for word in content.split_whitespace() {
        if pids.len() >= limit {
            return Err(format!("more than {limit} processes"));
        }
        let pid = word
            .parse::<u32>()
            .map_err(|_| format!("{word:.32} is not a PID"))?;
        pids.insert(pid);
    }
    Ok(pids)
}

fn read_pids(path: &Path) -> Result<BTreeSet<u32>, String> {
    let file = std::fs::File::open(path).map_err(|err| format!("{}: {err}", path.display()))?;
    let mut content = String::new();
    file.take(MAX_PROCS_BYTES + 1)
        .read_to_string(&mut content)
        .map_err(|err| format!("{}: {err}", path.display()))?;
    if content.len() as u64 > MAX_PROCS_BYTES {
        return Err(format!(
            "{} is larger than {MAX_PROCS_BYTES} bytes",
            path.display()
        ));
    }
    parse_pids(&content, MAX_PIDS_PER_CONTAINER).map_err(|err| format!("{}: {err}", path.display()))
}

/// Collects GPU usage each round from a [`DeviceSource`] (NVML).
pub struct GpuCollector {
    source: Arc<dyn DeviceSource>,
    cache: Arc<MetricCache>,
    layout: CgroupLayout,
    last_problems: Vec<String>,
}

impl GpuCollector {
    pub fn new(
        source: Arc<dyn DeviceSource>,
        cache: Arc<MetricCache>,
        layout: CgroupLayout,
    ) -> Self {
        Self {
            source,
            cache,
            layout,
            last_problems: Vec::new(),
        }
    }

    /// Logs the round's problems when they differ from the last round's.
    fn report(&mut self, problems: Vec<String>) {
        if problems != self.last_problems {
            for problem in &problems {
                tracing::warn!(problem = %problem, "GPU usage: {problem}");
            }
            self.last_problems = problems;
        }
    }

    /// The processes of every running container. A container without a
    /// cgroup (not started, gone) has none.
    fn pod_pids(&self, pods: &PodsSnapshot, problems: &mut Vec<String>) -> Vec<PodPids> {
        pods.pods
            .iter()
            .map(|pod| PodPids {
                uid: pod.uid.clone(),
                containers: pod
                    .containers
                    .iter()
                    .filter_map(|container| {
                        let id = container.id.clone()?;
                        let path = self
                            .layout
                            .container_dir(pod.kube_qos, &pod.uid, &id)
                            .and_then(|dir| self.layout.file_path(dir, CgroupResource::CgroupProcs))
                            .ok()?;
                        match read_pids(&path) {
                            Ok(pids) => Some(ContainerPids { id, pids }),
                            Err(err) => {
                                if path.exists() {
                                    problems.push(err);
                                }
                                None
                            }
                        }
                    })
                    .collect(),
            })
            .collect()
    }
}

impl Collector for GpuCollector {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn collect(&mut self, now: SystemTime, pods: &PodsSnapshot) -> Vec<Sample> {
        let snapshot = match self.source.gpu_usage() {
            Ok(snapshot) => snapshot,
            Err(err) => {
                // The GPUs stay known: their older samples still count.
                self.report(vec![format!(
                    "{} usage query failed: {err}",
                    self.source.name()
                )]);
                return Vec::new();
            }
        };
        let mut problems = snapshot.problems.clone();
        let devices = gpu_devices_of(&snapshot);
        self.cache
            .set_gpu_devices((!devices.is_empty()).then(|| Arc::from(devices)));
        let busy = snapshot
            .gpus
            .iter()
            .any(|gpu| gpu.processes.as_ref().is_some_and(|p| !p.is_empty()));
        // Cgroups are read only when some GPU has processes.
        let pod_pids = if busy {
            self.pod_pids(pods, &mut problems)
        } else {
            Vec::new()
        };
        self.report(problems);
        gpu_usage_samples(&snapshot, &pod_pids, now)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::metriccache::MetricCacheConfig;
    use crate::metricsadvisor::{ContainerMeta, PodMeta};
    use crate::statesinformer::device::{DeviceSnapshot, DiscoveryError, GpuUsage};
    use crate::statesinformer::nodemetric::{
        CollectPolicy, ReportInputs, build_node_metric_status,
    };
    use crate::system::cgroup::{CgroupDriver, CgroupVersion, QosTier};
    use apis::extension::{PriorityClass, QoSClass};
    use k8s_openapi::api::core::v1::Pod;
    use koord_common::testing::TempDir;
    use koord_common::units::Bytes;
    use serde_json::{Value, json};
    use std::sync::Mutex;
    use std::time::Duration;

    const GIB: u64 = 1 << 30;
    const POD_A: &str = "0a1b2c3d-0000-4000-8000-00000000000a";
    const POD_B: &str = "0a1b2c3d-0000-4000-8000-00000000000b";
    const CONTAINER_A: &str = "containerd://aaaa";
    const CONTAINER_B: &str = "containerd://bbbb";

    /// The fake NVML: what `gpu_usage` answers, changed by the test.
    struct FakeNvml {
        answer: Mutex<Result<GpuUsageSnapshot, String>>,
    }

    impl FakeNvml {
        fn new(gpus: Vec<GpuUsage>) -> Arc<Self> {
            Arc::new(Self {
                answer: Mutex::new(Ok(GpuUsageSnapshot {
                    gpus,
                    problems: Vec::new(),
                })),
            })
        }

        fn set(&self, answer: Result<GpuUsageSnapshot, String>) {
            *self.answer.lock().unwrap() = answer;
        }
    }

    impl DeviceSource for FakeNvml {
        fn name(&self) -> &'static str {
            "fake-nvml"
        }

        fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
            Ok(DeviceSnapshot::default())
        }

        fn gpu_usage(&self) -> Result<GpuUsageSnapshot, DiscoveryError> {
            self.answer
                .lock()
                .unwrap()
                .clone()
                .map_err(DiscoveryError::Nvml)
        }
    }

    fn uuid(minor: i32) -> String {
        format!("GPU-{minor:08}-aaaa-bbbb-cccc-000000000000")
    }

    fn process(pid: u32, sm_util: u32, memory_gib: u64) -> GpuProcessUsage {
        GpuProcessUsage {
            pid,
            sm_util,
            memory_used: Bytes(memory_gib * GIB),
        }
    }

    fn gpu(minor: i32, processes: Vec<GpuProcessUsage>) -> GpuUsage {
        GpuUsage {
            minor,
            uuid: uuid(minor),
            memory_total: Bytes(80 * GIB),
            processes: Some(processes),
        }
    }

    /// Two pods with one container each, their `cgroup.procs` on a v1 tree.
    struct Node {
        _tmp: TempDir,
        layout: CgroupLayout,
        pods: PodsSnapshot,
    }

    impl Node {
        fn new(pids_a: &str, pids_b: &str) -> Self {
            let tmp = TempDir::new("gpu-collector").unwrap();
            let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, tmp.path());
            let mut pods = Vec::new();
            for (uid, container, pids) in
                [(POD_A, CONTAINER_A, pids_a), (POD_B, CONTAINER_B, pids_b)]
            {
                let dir = layout
                    .container_dir(QosTier::Burstable, uid, container)
                    .unwrap();
                let path = layout.file_path(&dir, CgroupResource::CgroupProcs).unwrap();
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, pids).unwrap();
                pods.push(PodMeta {
                    uid: uid.into(),
                    namespace: "default".into(),
                    name: if uid == POD_A { "a".into() } else { "b".into() },
                    qos: QoSClass::LS,
                    kube_qos: QosTier::Burstable,
                    priority: PriorityClass::Prod,
                    containers: vec![ContainerMeta {
                        name: "main".into(),
                        id: Some(container.into()),
                    }],
                });
            }
            Self {
                _tmp: tmp,
                layout,
                pods: PodsSnapshot {
                    pods,
                    host_applications: Vec::new(),
                },
            }
        }
    }

    fn cache() -> Arc<MetricCache> {
        Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap())
    }

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn value(samples: &[Sample], kind: MetricKind, entity: &Entity, minor: i32) -> Option<f64> {
        samples
            .iter()
            .find(|sample| {
                sample.key.kind == kind
                    && &sample.key.entity == entity
                    && matches!(&sample.key.label, SeriesLabel::Gpu(gpu) if gpu.minor == minor)
            })
            .map(|sample| sample.value)
    }

    /// Node and pod CPU/memory, which the NodeMetric needs beside the GPUs.
    fn cpu_memory_samples(cache: &MetricCache, at: SystemTime) {
        let mut samples = vec![
            Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), at, 4.0),
            Sample::new(
                SeriesKey::node(MetricKind::NodeMemoryUsage),
                at,
                8.0 * GIB as f64,
            ),
            Sample::new(SeriesKey::node(MetricKind::SysCpuUsage), at, 0.5),
            Sample::new(SeriesKey::node(MetricKind::SysMemoryUsage), at, GIB as f64),
        ];
        for uid in [POD_A, POD_B] {
            samples.push(Sample::new(
                SeriesKey::pod(MetricKind::PodCpuUsage, uid),
                at,
                1.0,
            ));
            samples.push(Sample::new(
                SeriesKey::pod(MetricKind::PodMemoryUsage, uid),
                at,
                GIB as f64,
            ));
        }
        assert!(cache.append(&samples).rejected.is_empty());
    }

    /// Runs `rounds` collection rounds 1 s apart and returns the last one's samples.
    fn run(
        collector: &mut GpuCollector,
        node: &Node,
        cache: &MetricCache,
        rounds: u32,
    ) -> Vec<Sample> {
        let mut last = Vec::new();
        for round in 0..rounds {
            let at = t0() + Duration::from_secs(u64::from(round));
            cpu_memory_samples(cache, at);
            last = collector.collect(at, &node.pods);
            assert!(cache.append(&last).rejected.is_empty());
        }
        last
    }

    fn k8s_pods() -> Vec<Pod> {
        [("a", POD_A), ("b", POD_B)]
            .iter()
            .map(|(name, uid)| {
                serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": "default", "uid": uid},
                    "status": {"qosClass": "Burstable"},
                }))
                .unwrap()
            })
            .collect()
    }

    fn status_json(cache: &MetricCache, now: SystemTime) -> Value {
        let policy = CollectPolicy {
            aggregate_duration: Duration::from_secs(60),
            aggregate_windows: vec![Duration::from_secs(60)],
            ..CollectPolicy::default()
        };
        let pods = k8s_pods();
        let status = build_node_metric_status(&ReportInputs {
            policy: &policy,
            usage: cache,
            pods: &pods,
            host_applications: &[],
            prediction: None,
            now,
        });
        serde_json::to_value(&status).unwrap()
    }

    fn gpu_entry(minor: i32, core: &str, memory: &str, ratio: &str) -> Value {
        json!({
            "type": "gpu",
            "id": uuid(minor),
            "minor": minor,
            "health": false,
            "resources": {
                "koordinator.sh/gpu-core": core,
                "koordinator.sh/gpu-memory": memory,
                "koordinator.sh/gpu-memory-ratio": ratio,
            },
        })
    }

    fn pod_devices(status: &Value, name: &str) -> Value {
        status["podsMetric"]
            .as_array()
            .unwrap()
            .iter()
            .find(|pod| pod["name"] == name)
            .map(|pod| pod["podUsage"]["devices"].clone())
            .unwrap()
    }

    #[test]
    fn one_gpu_usage_goes_to_node_pod_and_container_and_into_the_node_metric() {
        // pid 100 belongs to pod a, pid 300 to no pod (a host process).
        let node = Node::new("100\n101\n", "200\n");
        let nvml = FakeNvml::new(vec![gpu(0, vec![process(100, 30, 2), process(300, 20, 1)])]);
        let cache = cache();
        let mut collector = GpuCollector::new(nvml, cache.clone(), node.layout.clone());
        let samples = run(&mut collector, &node, &cache, 60);

        let pod_a = Entity::pod(POD_A);
        let container_a = Entity::container(CONTAINER_A);
        assert_eq!(
            value(&samples, MetricKind::NodeGpuCoreUsage, &Entity::Node, 0),
            Some(50.0)
        );
        assert_eq!(
            value(&samples, MetricKind::NodeGpuMemoryUsage, &Entity::Node, 0),
            Some(3.0 * GIB as f64)
        );
        assert_eq!(
            value(&samples, MetricKind::NodeGpuMemoryTotal, &Entity::Node, 0),
            Some(80.0 * GIB as f64)
        );
        assert_eq!(
            value(&samples, MetricKind::PodGpuCoreUsage, &pod_a, 0),
            Some(30.0)
        );
        assert_eq!(
            value(&samples, MetricKind::PodGpuMemoryUsage, &pod_a, 0),
            Some(2.0 * GIB as f64)
        );
        assert_eq!(
            value(&samples, MetricKind::ContainerGpuCoreUsage, &container_a, 0),
            Some(30.0)
        );
        // Pod b has no process on the GPU: no GPU series at all (upstream).
        assert!(samples.iter().all(|s| s.key.entity != Entity::pod(POD_B)));
        assert_eq!(cache.gpu_devices().unwrap().len(), 1);

        let status = status_json(&cache, t0() + Duration::from_secs(59));
        assert_eq!(
            status["nodeMetric"]["nodeUsage"]["devices"],
            json!([gpu_entry(0, "50", "3Gi", "3")])
        );
        assert_eq!(
            status["nodeMetric"]["aggregatedNodeUsages"][0]["usage"]["avg"]["devices"],
            json!([gpu_entry(0, "50", "3Gi", "3")])
        );
        // The system usage carries no devices, as upstream.
        assert!(status["nodeMetric"]["systemUsage"].get("devices").is_none());
        assert_eq!(
            pod_devices(&status, "a"),
            json!([gpu_entry(0, "30", "2Gi", "2")])
        );
        assert_eq!(pod_devices(&status, "b"), Value::Null);
    }

    #[test]
    fn eight_gpus_are_reported_by_minor_and_a_pod_on_two_of_them_gets_both() {
        // Pod a's process 100 runs on GPUs 3 and 5; every GPU has a host process too.
        let node = Node::new("100\n", "");
        let gpus = (0..8)
            .map(|minor| {
                let mut processes = vec![process(1000 + minor as u32, 10 + minor as u32, 1)];
                if minor == 3 || minor == 5 {
                    processes.push(process(100, 40, 4));
                }
                gpu(minor, processes)
            })
            .collect();
        let cache = cache();
        let mut collector =
            GpuCollector::new(FakeNvml::new(gpus), cache.clone(), node.layout.clone());
        run(&mut collector, &node, &cache, 30);
        let status = status_json(&cache, t0() + Duration::from_secs(29));
        let devices = status["nodeMetric"]["nodeUsage"]["devices"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(devices.len(), 8);
        for (minor, device) in devices.iter().enumerate() {
            let (core, memory) = if minor == 3 || minor == 5 {
                (50 + minor, "5Gi")
            } else {
                (10 + minor, "1Gi")
            };
            let ratio = if memory == "5Gi" { "6" } else { "1" };
            assert_eq!(
                device,
                &gpu_entry(minor as i32, &core.to_string(), memory, ratio)
            );
        }
        assert_eq!(
            pod_devices(&status, "a"),
            json!([
                gpu_entry(3, "40", "4Gi", "5"),
                gpu_entry(5, "40", "4Gi", "5")
            ])
        );
    }

    #[test]
    fn a_gpu_that_disappears_is_no_longer_reported() {
        let node = Node::new("", "");
        let nvml = FakeNvml::new(vec![
            gpu(0, vec![process(7, 10, 1)]),
            gpu(1, vec![process(8, 20, 2)]),
        ]);
        let cache = cache();
        let mut collector = GpuCollector::new(nvml.clone(), cache.clone(), node.layout.clone());
        run(&mut collector, &node, &cache, 5);
        assert_eq!(cache.gpu_devices().unwrap().len(), 2);
        nvml.set(Ok(GpuUsageSnapshot {
            gpus: vec![gpu(1, vec![process(8, 20, 2)])],
            problems: Vec::new(),
        }));
        let samples = collector.collect(t0() + Duration::from_secs(5), &node.pods);
        assert!(
            samples
                .iter()
                .all(|s| !matches!(&s.key.label, SeriesLabel::Gpu(g) if g.minor == 0))
        );
        let devices = cache.gpu_devices().unwrap();
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].minor, 1);
        let status = status_json(&cache, t0() + Duration::from_secs(5));
        assert_eq!(
            status["nodeMetric"]["nodeUsage"]["devices"],
            json!([gpu_entry(1, "20", "2Gi", "2")])
        );
    }

    #[test]
    fn nvml_errors_are_reported_and_do_not_stop_the_other_gpus() {
        let node = Node::new("", "");
        let nvml = FakeNvml::new(vec![gpu(0, vec![process(7, 10, 1)])]);
        let cache = cache();
        let mut collector = GpuCollector::new(nvml.clone(), cache.clone(), node.layout.clone());
        run(&mut collector, &node, &cache, 3);

        // The whole query fails: no samples, no panic, the GPUs stay known.
        nvml.set(Err("device count: Unknown Error".to_string()));
        assert!(
            collector
                .collect(t0() + Duration::from_secs(3), &node.pods)
                .is_empty()
        );
        assert_eq!(collector.last_problems.len(), 1);
        assert!(
            collector.last_problems[0].contains("Unknown Error"),
            "{:?}",
            collector.last_problems
        );
        assert_eq!(cache.gpu_devices().unwrap().len(), 1);

        // One GPU's process query fails: its usage is unknown (no usage
        // sample, not a zero), the other GPU is still measured.
        let mut broken = gpu(1, Vec::new());
        broken.processes = None;
        nvml.set(Ok(GpuUsageSnapshot {
            gpus: vec![gpu(0, vec![process(7, 10, 1)]), broken],
            problems: vec!["GPU 1: cannot list its processes: GPU is lost".to_string()],
        }));
        let samples = collector.collect(t0() + Duration::from_secs(4), &node.pods);
        assert_eq!(
            value(&samples, MetricKind::NodeGpuCoreUsage, &Entity::Node, 0),
            Some(10.0)
        );
        assert_eq!(
            value(&samples, MetricKind::NodeGpuCoreUsage, &Entity::Node, 1),
            None
        );
        assert_eq!(
            value(&samples, MetricKind::NodeGpuMemoryTotal, &Entity::Node, 1),
            Some(80.0 * GIB as f64)
        );
        assert_eq!(
            collector.last_problems,
            vec!["GPU 1: cannot list its processes: GPU is lost".to_string()]
        );
    }

    #[test]
    fn no_gpu_means_no_sample_no_device_and_no_error() {
        let node = Node::new("1\n", "");
        let nvml = FakeNvml::new(Vec::new());
        let cache = cache();
        let mut collector = GpuCollector::new(nvml, cache.clone(), node.layout.clone());
        let samples = run(&mut collector, &node, &cache, 3);
        assert!(samples.is_empty());
        assert!(collector.last_problems.is_empty());
        assert!(cache.gpu_devices().is_none());
        let status = status_json(&cache, t0() + Duration::from_secs(2));
        assert!(status["nodeMetric"]["nodeUsage"].get("devices").is_none());
        assert!(status["nodeMetric"]["nodeUsage"].get("resources").is_some());
        assert_eq!(pod_devices(&status, "a"), Value::Null);
    }

    #[test]
    fn cgroup_procs_are_bounded_and_malformed_ones_reported() {
        assert_eq!(
            parse_pids("1\n2\n 3 \n", 10).unwrap(),
            BTreeSet::from([1, 2, 3])
        );
        assert!(
            parse_pids("1\n2\n3\n", 2)
                .unwrap_err()
                .contains("more than 2")
        );
        assert!(
            parse_pids("1\nabc\n", 10)
                .unwrap_err()
                .contains("not a PID")
        );

        // Pod a's cgroup.procs is garbage: reported, pod b still measured.
        let node = Node::new("12x\n", "200\n");
        let nvml = FakeNvml::new(vec![gpu(0, vec![process(200, 25, 1)])]);
        let cache = cache();
        let mut collector = GpuCollector::new(nvml, cache.clone(), node.layout.clone());
        let samples = collector.collect(t0(), &node.pods);
        assert_eq!(
            value(
                &samples,
                MetricKind::PodGpuCoreUsage,
                &Entity::pod(POD_B),
                0
            ),
            Some(25.0)
        );
        assert_eq!(collector.last_problems.len(), 1);
        assert!(
            collector.last_problems[0].contains("not a PID"),
            "{:?}",
            collector.last_problems
        );
    }
}
