#![allow(clippy::unwrap_used)]
//! cpusuppress under the kubelet's `static` CPU manager policy, on real
//! cgroup v1 hierarchies.
//!
//! A kubelet-style BE tree (`kubepods/besteffort/podbe/c-be`) is built in a
//! throwaway cgroup of the cpu, cpuacct and cpuset hierarchies behind a
//! symlinked cgroup root (the host's own `kubepods` is never touched), and
//! the kubelet root (`--var-lib-kubelet-dir`) is a temporary directory
//! whose `cpu_manager_state` the test writes. A busy process runs in the BE
//! container so the kernel's own view of where it may run
//! (`Cpus_allowed_list`) is checked, not only the files. Needs root and at
//! least 2 CPUs (prints `SKIP:` otherwise); the cases use CPUs 0 and 1 only.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::{CPUSuppressPolicy, NodeSLO, NodeSLOSpec, ResourceThresholdStrategy};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};
use koord_common::testing::TempDir;
use koordlet::metriccache::{MetricCache, MetricCacheConfig, MetricKind, Sample, SeriesKey};
use koordlet::metricsadvisor::read_cpu_topology;
use koordlet::qosmanager::cpusuppress::CpuSuppress;
use koordlet::qosmanager::service::{ExplainFilter, explain};
use koordlet::qosmanager::{QosManagerConfig, QosRunner, SnapshotSource, test_capabilities};
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs, StatesInformer};
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller};
use support::cgroup::{BusyProcess, ThrowawayCgroup, real_v1_layout_or_skip};

const CONTROLLERS: [Controller; 3] = [Controller::Cpu, Controller::Cpuacct, Controller::Cpuset];
const BE_TIER: &str = "kubepods/besteffort";
const BE_POD: &str = "kubepods/besteffort/podbe";
const BE_CONTAINER: &str = "kubepods/besteffort/podbe/c-be";

struct Tree {
    cgroup: ThrowawayCgroup,
    _root: TempDir,
    layout: CgroupLayout,
}

impl Tree {
    fn new(label: &str) -> Option<Self> {
        let host = real_v1_layout_or_skip(&CONTROLLERS)?;
        let mut cgroup = ThrowawayCgroup::new(&host, label, &CONTROLLERS).unwrap();
        cgroup.create_child(BE_CONTAINER).unwrap();
        let root = TempDir::new("qos-static-root").unwrap();
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

    fn cpuset(&self, dir: &str) -> String {
        let path = self
            .cgroup
            .path(&self.cgroup.dir().join(dir), Controller::Cpuset)
            .join("cpuset.cpus");
        std::fs::read_to_string(path).unwrap().trim().to_string()
    }
}

fn pod(uid: &str, qos_label: Option<&str>, kube_qos: &str, container: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(format!("pod-{uid}"));
    pod.metadata.namespace = Some("default".into());
    pod.metadata.uid = Some(uid.into());
    pod.metadata.labels =
        qos_label.map(|qos| [("koordinator.sh/qosClass".to_string(), qos.to_string())].into());
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

/// Suppression on with the cpuset policy; a 100% threshold on an idle node
/// asks for every CPU, so only exclusions shrink the BE cpuset.
fn node_slo() -> NodeSLO {
    NodeSLO::new(
        "qos-real-static",
        NodeSLOSpec {
            resource_used_threshold_with_be: Some(ResourceThresholdStrategy {
                enable: Some(true),
                cpu_suppress_threshold_percent: Some(100),
                cpu_suppress_policy: Some(CPUSuppressPolicy::CPUSet),
                ..Default::default()
            }),
            ..Default::default()
        },
    )
}

struct Harness {
    states: StatesInformer,
    cache: Arc<MetricCache>,
    source: SnapshotSource,
    runner: QosRunner,
    kubelet_root: TempDir,
}

impl Harness {
    fn new(tree: &Tree) -> Self {
        let states = StatesInformer::new("qos-real-static", RequiredSyncs::PODS_ONLY);
        states.set_node_slo(Some(node_slo()));
        let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
        cache.set_cpu_topology(Arc::new(read_cpu_topology(Path::new("/sys")).unwrap()));
        let kubelet_root = TempDir::new("qos-static-kubelet").unwrap();
        let source = SnapshotSource {
            states: states.clone(),
            cache: cache.clone(),
            capabilities: Arc::new(test_capabilities()),
            layout: tree.layout.clone(),
            collect_interval: Duration::from_secs(1),
            config: QosManagerConfig::default(),
            proc_root: "/proc".into(),
            kubelet_root: Some(kubelet_root.path().to_path_buf()),
        };
        let executor = ResourceExecutor::new(tree.layout.clone(), ExecutorConfig::default());
        let runner = QosRunner::new(vec![Box::new(CpuSuppress)], executor);
        Self {
            states,
            cache,
            source,
            runner,
            kubelet_root,
        }
    }

    fn set_pods(&self, pods: Vec<Pod>) {
        self.states.set_pods(PodsSnapshot {
            pods,
            origin: PodsOrigin::File,
            synced_at: SystemTime::now(),
        });
    }

    fn write_checkpoint(&self, text: &str) {
        std::fs::write(self.kubelet_root.path().join("cpu_manager_state"), text).unwrap();
    }

    /// One round on an idle node (fresh zero usage samples).
    fn round(&mut self) {
        let now = SystemTime::now();
        self.cache.append(&[
            Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), now, 0.0),
            Sample::new(SeriesKey::pod(MetricKind::PodCpuUsage, "be"), now, 0.0),
        ]);
        let snapshot = self.source.snapshot(now);
        let outcome = self.runner.run_one(0, &snapshot);
        assert_eq!(outcome.errors, 0, "{:?}", outcome.notes);
    }
}

/// The CPUs the kernel lets `pid` run on.
fn cpus_allowed(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn be_never_runs_on_cpus_the_static_policy_pinned() {
    let Some(tree) = Tree::new("suppress-static") else {
        return;
    };
    let cpus = read_cpu_topology(Path::new("/sys")).unwrap().num_cpus();
    if cpus < 2 {
        println!("SKIP: needs at least 2 CPUs");
        return;
    }
    let all = format!("0-{}", cpus - 1);
    let mut harness = Harness::new(&tree);
    let be = BusyProcess::spawn().unwrap();
    tree.cgroup
        .attach(&tree.cgroup.dir().join(BE_CONTAINER), be.pid())
        .unwrap();
    for dir in [BE_TIER, BE_POD, BE_CONTAINER] {
        assert_eq!(tree.cpuset(dir), all, "{dir} starts with every CPU");
    }

    // The kubelet (static) pinned CPU 1 to a Guaranteed pod koordinator
    // does not manage: BE leaves CPU 1 at every level.
    harness.set_pods(vec![
        pod("be", Some("BE"), "BestEffort", "c-be"),
        pod("g", None, "Guaranteed", "c-g"),
    ]);
    harness.write_checkpoint(
        r#"{"policyName":"static","defaultCpuSet":"0","entries":{"g":{"main":"1"}},"checksum":1}"#,
    );
    harness.round();
    let without_1 = if cpus == 2 {
        "0".to_string()
    } else {
        format!("0,2-{}", cpus - 1)
    };
    for dir in [BE_TIER, BE_POD, BE_CONTAINER] {
        assert_eq!(tree.cpuset(dir), without_1, "{dir}");
    }
    assert_eq!(cpus_allowed(be.pid()), without_1, "the BE process itself");
    // /qos/explain says which policy was seen and which CPUs were excluded.
    let pods = harness.states.pods().unwrap().pods.clone();
    let entries = explain(
        &harness.runner.managed_files(),
        &tree.layout,
        &ExplainFilter::Tier("be".into()),
        &pods,
    )
    .unwrap();
    let container = entries
        .iter()
        .find(|e| e.file.dir.ends_with("c-be") && e.file.resource == "cpuset.cpus")
        .unwrap_or_else(|| panic!("no BE container cpuset entry in {entries:?}"));
    assert!(container.converged, "{container:?}");
    assert!(
        container
            .file
            .reason
            .contains("kubelet CPU manager policy static from")
            && container
                .file
                .reason
                .contains("CPUs 1 pinned to Guaranteed pods (default/pod-g: 1)"),
        "{}",
        container.file.reason
    );

    // The same CPU pinned to a pod koordinator manages (labelled LS) is
    // koordinator's to share: BE may use it.
    harness.set_pods(vec![
        pod("be", Some("BE"), "BestEffort", "c-be"),
        pod("g", Some("LS"), "Guaranteed", "c-g"),
    ]);
    harness.round();
    assert_eq!(tree.cpuset(BE_CONTAINER), all);
    assert_eq!(cpus_allowed(be.pid()), all);

    // Back to a Guaranteed pod, but the kubelet now runs `none`: its
    // checkpoint pins nothing and BE keeps every CPU (behaviour unchanged).
    harness.set_pods(vec![
        pod("be", Some("BE"), "BestEffort", "c-be"),
        pod("g", None, "Guaranteed", "c-g"),
    ]);
    harness.write_checkpoint(r#"{"policyName":"none","defaultCpuSet":"","checksum":1}"#);
    harness.round();
    for dir in [BE_TIER, BE_POD, BE_CONTAINER] {
        assert_eq!(tree.cpuset(dir), all, "{dir}");
    }

    // A malformed checkpoint is left out (and said so); with no Node
    // annotation the policy is unknown, treated as none.
    harness.write_checkpoint(r#"{"policyName":"static","entries":{"g":"1"}}"#);
    harness.round();
    assert_eq!(tree.cpuset(BE_CONTAINER), all);
    let entries = explain(
        &harness.runner.managed_files(),
        &tree.layout,
        &ExplainFilter::Tier("be".into()),
        &pods,
    )
    .unwrap();
    let reason = &entries
        .iter()
        .find(|e| e.file.dir.ends_with("c-be") && e.file.resource == "cpuset.cpus")
        .unwrap()
        .file
        .reason;
    assert!(
        reason.contains("kubelet CPU manager policy unknown (treated as none)"),
        "{reason}"
    );
}
