#![allow(clippy::unwrap_used)]
//! cpusuppress on real cgroup v1 hierarchies.
//!
//! Each test builds a kubelet-style tree (`kubepods/burstable/podls/c-ls`,
//! `kubepods/besteffort/podbe/c-be`) inside a throwaway cgroup of the cpu,
//! cpuacct and cpuset hierarchies, and points a cgroup root made of symlinks
//! at it, so nothing touches the host's own `kubepods`. A busy process in the
//! LS container loads the node; usage is measured from the kernel's
//! `cpuacct.usage` (the tree's kubepods stands for the node), stored in a
//! metric cache, and the QoS
//! runner applies cpusuppress's decision to the real files. The expected
//! values are computed here from the same measurements with upstream's
//! formula. Needs root (prints `SKIP:` otherwise).

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::{CPUSuppressPolicy, NodeSLO, NodeSLOSpec, ResourceThresholdStrategy};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use koord_common::testing::TempDir;
use koordlet::metriccache::{MetricCache, MetricCacheConfig, MetricKind, Sample, SeriesKey};
use koordlet::metricsadvisor::read_cpu_topology;
use koordlet::qosmanager::cpusuppress::CpuSuppress;
use koordlet::qosmanager::{QosManagerConfig, QosRunner, SnapshotSource, test_capabilities};
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs, StatesInformer};
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller};
use support::cgroup::{BusyProcess, ThrowawayCgroup, real_v1_layout_or_skip};

const CONTROLLERS: [Controller; 3] = [Controller::Cpu, Controller::Cpuacct, Controller::Cpuset];
const THRESHOLD: i64 = 65;
const BE_TIER: &str = "kubepods/besteffort";
const LS_POD: &str = "kubepods/burstable/podls";
const BE_POD: &str = "kubepods/besteffort/podbe";

/// The throwaway tree, a symlinked root over it, and the layout that uses it.
struct Tree {
    cgroup: ThrowawayCgroup,
    _root: TempDir,
    layout: CgroupLayout,
}

impl Tree {
    fn new(label: &str) -> Option<Self> {
        let host = real_v1_layout_or_skip(&CONTROLLERS)?;
        let mut cgroup = ThrowawayCgroup::new(&host, label, &CONTROLLERS).unwrap();
        for dir in [
            "kubepods/burstable/podls/c-ls",
            "kubepods/besteffort/podbe/c-be",
        ] {
            cgroup.create_child(dir).unwrap();
        }
        let root = TempDir::new("qos-real-root").unwrap();
        for controller in CONTROLLERS {
            std::os::unix::fs::symlink(
                cgroup.path(cgroup.dir(), controller),
                root.path().join(controller.as_str()),
            )
            .unwrap();
        }
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root.path());
        Some(Self {
            cgroup,
            _root: root,
            layout,
        })
    }

    fn file(&self, dir: &str, controller: Controller, name: &str) -> PathBuf {
        self.cgroup
            .path(&self.cgroup.dir().join(dir), controller)
            .join(name)
    }

    fn read(&self, dir: &str, controller: Controller, name: &str) -> String {
        std::fs::read_to_string(self.file(dir, controller, name))
            .unwrap()
            .trim()
            .to_string()
    }

    fn write(&self, dir: &str, controller: Controller, name: &str, value: &str) {
        std::fs::write(self.file(dir, controller, name), value).unwrap();
    }

    fn attach(&self, dir: &str, pid: u32) {
        self.cgroup
            .attach(&self.cgroup.dir().join(dir), pid)
            .unwrap();
    }

    fn cpuacct_ns(&self, dir: &str) -> u64 {
        self.read(dir, Controller::Cpuacct, "cpuacct.usage")
            .parse()
            .unwrap()
    }
}

fn pod(name: &str, uid: &str, qos_label: &str, kube_qos: &str, container: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some(uid.into());
    pod.metadata.labels =
        Some([("koordinator.sh/qosClass".to_string(), qos_label.to_string())].into());
    pod.status = Some(PodStatus {
        qos_class: Some(kube_qos.into()),
        phase: Some("Running".into()),
        container_statuses: Some(vec![ContainerStatus {
            name: "main".into(),
            container_id: Some(format!("containerd://{container}")),
            ..Default::default()
        }]),
        ..Default::default()
    });
    pod
}

fn node_slo(enable: bool, policy: CPUSuppressPolicy) -> NodeSLO {
    NodeSLO::new(
        "qos-real",
        NodeSLOSpec {
            resource_used_threshold_with_be: Some(ResourceThresholdStrategy {
                enable: Some(enable),
                cpu_suppress_threshold_percent: Some(THRESHOLD),
                cpu_suppress_policy: Some(policy),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
}

/// Node, LS and BE usage in cores over ~1 s, from the kernel's cpuacct.
/// The "node" is the test's own kubepods tree: the machine may be busy with
/// other work, which would otherwise count as system usage and push the BE
/// budget to its floor whatever the LS pod does.
#[derive(Debug, Clone, Copy)]
struct Usage {
    node: f64,
    ls: f64,
    be: f64,
}

fn measure(tree: &Tree) -> Usage {
    let sample = || {
        (
            tree.cpuacct_ns("kubepods"),
            tree.cpuacct_ns(LS_POD),
            tree.cpuacct_ns(BE_POD),
        )
    };
    let (node0, ls0, be0) = sample();
    let started = std::time::Instant::now();
    std::thread::sleep(Duration::from_millis(1000));
    let elapsed = started.elapsed().as_nanos() as f64;
    let (node1, ls1, be1) = sample();
    Usage {
        node: (node1 - node0) as f64 / elapsed,
        ls: (ls1 - ls0) as f64 / elapsed,
        be: (be1 - be0) as f64 / elapsed,
    }
}

/// Everything a round needs: states, metric cache, runner.
struct Harness {
    states: StatesInformer,
    cache: Arc<MetricCache>,
    source: SnapshotSource,
    runner: QosRunner,
}

impl Harness {
    fn new(tree: &Tree) -> Self {
        let states = StatesInformer::new("qos-real", RequiredSyncs::PODS_ONLY);
        states.set_pods(PodsSnapshot {
            pods: vec![
                pod("ls", "ls", "LS", "Burstable", "c-ls"),
                pod("be", "be", "BE", "BestEffort", "c-be"),
            ],
            origin: PodsOrigin::File,
            synced_at: SystemTime::now(),
        });
        let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
        cache.set_cpu_topology(Arc::new(read_cpu_topology(Path::new("/sys")).unwrap()));
        let source = SnapshotSource {
            states: states.clone(),
            cache: cache.clone(),
            capabilities: Arc::new(test_capabilities()),
            layout: tree.layout.clone(),
            collect_interval: Duration::from_secs(1),
            config: QosManagerConfig::default(),
            proc_root: "/proc".into(),
            kubelet_root: None,
        };
        let executor = ResourceExecutor::new(tree.layout.clone(), ExecutorConfig::default());
        let runner = QosRunner::new(vec![Box::new(CpuSuppress)], executor);
        Self {
            states,
            cache,
            source,
            runner,
        }
    }

    fn record(&self, usage: Usage) {
        let now = SystemTime::now();
        self.cache.append(&[
            Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), now, usage.node),
            Sample::new(SeriesKey::pod(MetricKind::PodCpuUsage, "ls"), now, usage.ls),
            Sample::new(SeriesKey::pod(MetricKind::PodCpuUsage, "be"), now, usage.be),
        ]);
    }

    /// One cpusuppress round now; returns (actions, drifts repaired).
    fn round(&mut self) -> (usize, usize) {
        let snapshot = self.source.snapshot(SystemTime::now());
        let outcome = self.runner.run_one(0, &snapshot);
        assert_eq!(outcome.errors, 0, "{:?}", outcome.notes);
        (outcome.actions, outcome.drifts_repaired)
    }
}

fn capacity_milli() -> i64 {
    read_cpu_topology(Path::new("/sys")).unwrap().num_cpus() as i64 * 1000
}

/// Upstream's BE budget in milli-CPU for these measurements (metric cache
/// values are f32, so the same rounding is applied here).
fn expected_budget(usage: Usage) -> i64 {
    let f32ed = |v: f64| v as f32 as f64;
    let (node, ls, be) = (f32ed(usage.node), f32ed(usage.ls), f32ed(usage.be));
    let system = (node - ls - be).max(0.0);
    capacity_milli() * THRESHOLD / 100 - (ls * 1000.0) as i64 - (system * 1000.0) as i64
}

#[test]
fn cfs_quota_policy_follows_ls_load_and_restores() {
    let Some(tree) = Tree::new("suppress-quota") else {
        return;
    };
    let mut harness = Harness::new(&tree);
    harness
        .states
        .set_node_slo(Some(node_slo(true, CPUSuppressPolicy::CfsQuota)));
    let ls = BusyProcess::spawn().unwrap();
    tree.attach("kubepods/burstable/podls/c-ls", ls.pid());
    let be = BusyProcess::spawn().unwrap();
    tree.attach("kubepods/besteffort/podbe/c-be", be.pid());
    assert_eq!(
        tree.read(BE_TIER, Controller::Cpu, "cpu.cfs_quota_us"),
        "-1"
    );

    // Loaded: the BE tier gets budget x period, floored at 2000 µs.
    let loaded = measure(&tree);
    assert!(loaded.ls > 0.05, "the LS burner should run: {loaded:?}");
    harness.record(loaded);
    harness.round();
    let expected = (expected_budget(loaded) * 100).max(2000);
    let quota: i64 = tree
        .read(BE_TIER, Controller::Cpu, "cpu.cfs_quota_us")
        .parse()
        .unwrap();
    println!("loaded {loaded:?}: BE quota {quota} (expected {expected})");
    assert_eq!(quota, expected, "usage {loaded:?}");
    assert!(
        quota < capacity_milli() * 100,
        "BE is capped below the node: {quota}"
    );

    // Drift written behind koordlet's back is repaired in the next round.
    tree.write(BE_TIER, Controller::Cpu, "cpu.cfs_quota_us", "-1");
    let (_, drifts) = harness.round();
    assert_eq!(drifts, 1);
    assert_eq!(
        tree.read(BE_TIER, Controller::Cpu, "cpu.cfs_quota_us"),
        expected.to_string()
    );

    // Load gone: the quota grows back, by at most 10% of the node per round,
    // until it reaches the new budget.
    drop(ls);
    let idle = measure(&tree);
    harness.record(idle);
    let target = (expected_budget(idle) * 100).max(2000);
    let step = capacity_milli() / 1000 * 100_000 / 10;
    let mut previous = quota;
    for _ in 0..60 {
        harness.round();
        let now: i64 = tree
            .read(BE_TIER, Controller::Cpu, "cpu.cfs_quota_us")
            .parse()
            .unwrap();
        if target > quota {
            assert!(
                now >= previous && now - previous <= step,
                "{previous} -> {now}"
            );
        }
        previous = now;
        // A change below 1% of the node is not written.
        if (target - now).abs() < capacity_milli() {
            break;
        }
        harness.record(idle);
    }
    println!("idle {idle:?}: BE quota {previous} (target {target})");
    assert!(
        (target - previous).abs() < capacity_milli(),
        "quota {previous} should settle at {target} (idle {idle:?})"
    );

    // Disabled: unlimited again.
    harness
        .states
        .set_node_slo(Some(node_slo(false, CPUSuppressPolicy::CfsQuota)));
    harness.round();
    assert_eq!(
        tree.read(BE_TIER, Controller::Cpu, "cpu.cfs_quota_us"),
        "-1"
    );
}

#[test]
fn cpuset_policy_writes_the_be_hierarchy_and_restores_away_from_lse() {
    let Some(tree) = Tree::new("suppress-cpuset") else {
        return;
    };
    let cpus = read_cpu_topology(Path::new("/sys")).unwrap().num_cpus();
    if cpus < 2 {
        println!("SKIP: needs at least 2 CPUs");
        return;
    }
    let all = format!("0-{}", cpus - 1);
    let mut harness = Harness::new(&tree);
    harness
        .states
        .set_node_slo(Some(node_slo(true, CPUSuppressPolicy::CPUSet)));
    let ls = BusyProcess::spawn().unwrap();
    tree.attach("kubepods/burstable/podls/c-ls", ls.pid());
    // Start from a BE cpuset shrunk to CPU 0 (container first, then upwards).
    for dir in ["kubepods/besteffort/podbe/c-be", BE_POD, BE_TIER] {
        tree.write(dir, Controller::Cpuset, "cpuset.cpus", "0");
    }

    let loaded = measure(&tree);
    harness.record(loaded);
    harness.round();
    // ⌈budget⌉ CPUs, at least 2, growing by at most ⌈10% of the CPUs⌉ per round.
    let wanted = ((expected_budget(loaded).max(0) + 999) / 1000).max(2) as usize;
    let growth = (cpus as f64 * 0.1).ceil() as usize;
    let expected_len = wanted.min(1 + growth).min(cpus);
    for dir in [BE_TIER, BE_POD, "kubepods/besteffort/podbe/c-be"] {
        let set: koordlet::system::units::CpuSet = tree
            .read(dir, Controller::Cpuset, "cpuset.cpus")
            .parse()
            .unwrap();
        assert_eq!(set.len(), expected_len, "{dir}: {set} (usage {loaded:?})");
    }

    // Disabled, with an LSE pod owning the last CPU: BE gets every other CPU.
    let mut lse = pod("lse", "lse", "LSE", "Guaranteed", "c-lse");
    let last = cpus - 1;
    lse.metadata.annotations = Some(
        [(
            "scheduling.koordinator.sh/resource-status".to_string(),
            format!(r#"{{"cpuset":"{last}"}}"#),
        )]
        .into(),
    );
    harness.states.set_pods(PodsSnapshot {
        pods: vec![
            pod("ls", "ls", "LS", "Burstable", "c-ls"),
            pod("be", "be", "BE", "BestEffort", "c-be"),
            lse,
        ],
        origin: PodsOrigin::File,
        synced_at: SystemTime::now(),
    });
    harness
        .states
        .set_node_slo(Some(node_slo(false, CPUSuppressPolicy::CPUSet)));
    harness.round();
    let restored = if last == 1 {
        "0".to_string()
    } else {
        format!("0-{}", last - 1)
    };
    for dir in [BE_TIER, BE_POD, "kubepods/besteffort/podbe/c-be"] {
        assert_eq!(
            tree.read(dir, Controller::Cpuset, "cpuset.cpus"),
            restored,
            "{dir}"
        );
    }
    // Without the LSE pod: the whole machine again.
    harness.states.set_pods(PodsSnapshot {
        pods: vec![pod("be", "be", "BE", "BestEffort", "c-be")],
        origin: PodsOrigin::File,
        synced_at: SystemTime::now(),
    });
    harness.round();
    assert_eq!(tree.read(BE_TIER, Controller::Cpuset, "cpuset.cpus"), all);
}
