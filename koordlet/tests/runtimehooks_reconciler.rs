//! The hook reconciler on real cgroup v1 hierarchies: a BE batch pod and an
//! LSR pod with a resource-status cpuset live in a throwaway cgroup tree
//! shaped like the kubelet's; the first round applies the hook decisions, a
//! drift written by hand is repaired (and counted) by the next round, and a
//! round without drift changes nothing.
//!
//! The layout's root is a temp directory whose `cpu`, `cpuset` and `memory`
//! entries are symlinks to the throwaway cgroups, so the kubelet-relative
//! paths (`kubepods/besteffort/pod<uid>/<id>`) resolve into real cgroups.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::runtimehooks::apply::SideEffectApplier;
use koordlet::runtimehooks::dispatcher::HookDispatcher;
use koordlet::runtimehooks::hooks::{HookOptions, all_hooks};
use koordlet::runtimehooks::metrics::HookMetrics;
use koordlet::runtimehooks::protocol::FailurePolicyConfig;
use koordlet::runtimehooks::reconciler::Reconciler;
use koordlet::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs, StatesInformer};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller};
use koordlet::system::units::CpuSet;
use support::cgroup::{ThrowawayCgroup, real_v1_layout_or_skip};

const BE_UID: &str = "0c1d2e3f-be00-4000-8000-000000000001";
const LSR_UID: &str = "0c1d2e3f-15a0-4000-8000-000000000002";
const BE_CID: &str = "be0000000000000000000000000000000000000000000000000000000000abcd";
const LSR_CID: &str = "15a000000000000000000000000000000000000000000000000000000000abcd";
const MI: i64 = 1024 * 1024;

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

fn pod(
    uid: &str,
    qos_label: &str,
    kube_qos: &str,
    container_id: &str,
    annotations: BTreeMap<String, String>,
    resources: ResourceRequirements,
) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{qos_label}")),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            labels: Some(BTreeMap::from([(
                "koordinator.sh/qosClass".to_string(),
                qos_label.to_string(),
            )])),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "main".into(),
                resources: Some(resources),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            qos_class: Some(kube_qos.into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "main".into(),
                container_id: Some(format!("containerd://{container_id}")),
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

fn read(root: &Path, controller: &str, dir: &str, file: &str) -> String {
    std::fs::read_to_string(root.join(controller).join(dir).join(file))
        .unwrap()
        .trim()
        .to_string()
}

fn write(root: &Path, controller: &str, dir: &str, file: &str, value: &str) {
    std::fs::write(root.join(controller).join(dir).join(file), value).unwrap();
}

/// Removes the symlink root on drop (the cgroups have their own guard).
struct LinkRoot(PathBuf);

impl Drop for LinkRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn reconciler_applies_decisions_and_repairs_hand_written_drift() {
    let controllers = [Controller::Cpu, Controller::Cpuset, Controller::Memory];
    let Some(host) = real_v1_layout_or_skip(&controllers) else {
        return;
    };
    let mut cgroups = ThrowawayCgroup::new(&host, "runtimehooks", &controllers).unwrap();
    let be_pod_dir = format!("kubepods/besteffort/pod{BE_UID}");
    let be_dir = format!("{be_pod_dir}/{BE_CID}");
    let lsr_pod_dir = format!("kubepods/pod{LSR_UID}");
    let lsr_dir = format!("{lsr_pod_dir}/{LSR_CID}");
    cgroups.create_child(&be_dir).unwrap();
    cgroups.create_child(&lsr_dir).unwrap();

    let link_root = LinkRoot(
        std::env::temp_dir().join(format!("koordlet-rh-reconcile-{}", std::process::id())),
    );
    let _ = std::fs::remove_dir_all(&link_root.0);
    std::fs::create_dir_all(&link_root.0).unwrap();
    for controller in controllers {
        std::os::unix::fs::symlink(
            cgroups.path(cgroups.dir(), controller),
            link_root.0.join(controller.as_str()),
        )
        .unwrap();
    }
    let root = link_root.0.clone();
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, &root);

    let be = pod(
        BE_UID,
        "BE",
        "BestEffort",
        BE_CID,
        BTreeMap::new(),
        ResourceRequirements {
            requests: Some(quantities(&[
                ("kubernetes.io/batch-cpu", "500"),
                ("kubernetes.io/batch-memory", "256Mi"),
            ])),
            limits: Some(quantities(&[
                ("kubernetes.io/batch-cpu", "1000"),
                ("kubernetes.io/batch-memory", "512Mi"),
            ])),
            ..ResourceRequirements::default()
        },
    );
    let lsr = pod(
        LSR_UID,
        "LSR",
        "Guaranteed",
        LSR_CID,
        BTreeMap::from([(
            "scheduling.koordinator.sh/resource-status".to_string(),
            r#"{"cpuset":"0"}"#.to_string(),
        )]),
        ResourceRequirements {
            requests: Some(quantities(&[("cpu", "1"), ("memory", "64Mi")])),
            limits: Some(quantities(&[("cpu", "1"), ("memory", "64Mi")])),
            ..ResourceRequirements::default()
        },
    );
    // What the kubelet would have set for the LSR container.
    write(&root, "cpu", &lsr_pod_dir, "cpu.cfs_quota_us", "100000");
    write(&root, "cpu", &lsr_dir, "cpu.cfs_quota_us", "100000");

    let mut caps = koordlet::capabilities::detect(&SystemArgs::default());
    // Whatever this kernel is, the test is about cpu, cpuset and memory.
    for controller in ["cpu", "cpuset", "memory"] {
        if !caps.cgroup.controllers.iter().any(|c| c == controller) {
            caps.cgroup.controllers.push(controller.to_string());
        }
    }
    let metrics = HookMetrics::new("test-node");
    let dispatcher = HookDispatcher::new(
        all_hooks(&HookOptions::default()),
        &caps,
        layout.clone(),
        FailurePolicyConfig::default(),
    )
    .with_metrics(metrics.clone());
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let states = StatesInformer::new("test-node", RequiredSyncs::PODS_ONLY);
    states.set_pods(PodsSnapshot {
        pods: vec![be, lsr],
        origin: PodsOrigin::File,
        synced_at: SystemTime::now(),
    });
    let reconciler = Reconciler {
        dispatcher: Arc::new(dispatcher),
        applier: SideEffectApplier::new(executor, "/proc", root.join("no-resctrl")),
        states,
        interval: std::time::Duration::from_secs(10),
        online_cpus: Some(CpuSet::from_range(0, 0).unwrap()),
        kubelet_root: None,
        reported_denials: Default::default(),
        reported_host_app_refusals: Default::default(),
    };

    // Round 1 applies the decisions.
    let first = reconciler.round_blocking();
    assert_eq!(first.failed, 0, "{first:?}");
    assert!(first.repaired >= 7, "{first:?}");
    assert_eq!(read(&root, "cpu", &be_pod_dir, "cpu.shares"), "512");
    assert_eq!(
        read(&root, "cpu", &be_pod_dir, "cpu.cfs_quota_us"),
        "100000"
    );
    assert_eq!(
        read(&root, "memory", &be_pod_dir, "memory.limit_in_bytes"),
        (512 * MI).to_string()
    );
    assert_eq!(read(&root, "cpu", &be_dir, "cpu.shares"), "512");
    assert_eq!(read(&root, "cpu", &be_dir, "cpu.cfs_quota_us"), "100000");
    assert_eq!(
        read(&root, "memory", &be_dir, "memory.limit_in_bytes"),
        (512 * MI).to_string()
    );
    assert_eq!(read(&root, "cpuset", &lsr_dir, "cpuset.cpus"), "0");
    assert_eq!(read(&root, "cpu", &lsr_dir, "cpu.cfs_quota_us"), "-1");
    assert_eq!(read(&root, "cpu", &lsr_pod_dir, "cpu.cfs_quota_us"), "-1");

    // Round 2 without drift writes nothing.
    let steady = reconciler.round_blocking();
    assert_eq!(steady.repaired, 0, "{steady:?}");
    assert!(steady.checked >= first.repaired, "{steady:?}");

    // Drift written by hand.
    let shares_before = metrics.drift_repaired("container", "cpu.shares");
    let cpuset_before = metrics.drift_repaired("container", "cpuset.cpus");
    write(&root, "cpu", &be_dir, "cpu.shares", "1024");
    let all_cpus = read(&root, "cpuset", &lsr_pod_dir, "cpuset.cpus");
    write(&root, "cpuset", &lsr_dir, "cpuset.cpus", &all_cpus);
    let drifted_cpuset = read(&root, "cpuset", &lsr_dir, "cpuset.cpus");

    let repair = reconciler.round_blocking();
    assert_eq!(repair.failed, 0, "{repair:?}");
    assert_eq!(read(&root, "cpu", &be_dir, "cpu.shares"), "512");
    assert_eq!(read(&root, "cpuset", &lsr_dir, "cpuset.cpus"), "0");
    assert_eq!(
        metrics.drift_repaired("container", "cpu.shares"),
        shares_before + 1
    );
    if drifted_cpuset != "0" {
        // On a multi-CPU node the hand-written cpuset really differed.
        assert_eq!(repair.repaired, 2, "{repair:?}");
        assert_eq!(
            metrics.drift_repaired("container", "cpuset.cpus"),
            cpuset_before + 1
        );
    } else {
        assert_eq!(repair.repaired, 1, "{repair:?}");
    }
    let after = reconciler.round_blocking();
    assert_eq!(after.repaired, 0, "{after:?}");
}
