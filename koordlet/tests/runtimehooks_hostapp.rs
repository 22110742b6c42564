//! Host application QoS on real cgroup v1 hierarchies: a NodeSLO lists an
//! LS application (default path `host-latency-sensitive/<name>`), a BE
//! application with a cgroup path below the root, and hostile entries whose
//! paths escape with `..` or point at the hierarchy root. The reconciler
//! round writes the LS share pool into the LS application's
//! `cpuset.cpus` (read back from the kernel), leaves the BE application's
//! cpuset alone, repairs a hand-written drift, and writes nothing for the
//! hostile entries (their targets keep their values; the refused gauge says
//! how many).
//!
//! As in `runtimehooks_reconciler.rs`, the layout's root is a temp
//! directory whose `cpu` and `cpuset` entries are symlinks to a throwaway
//! cgroup (removed on drop), so nothing outside it is touched.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use apis::slo::v1alpha1::NodeSLO;
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
fn host_application_cpuset_is_enforced_and_hostile_paths_write_nothing() {
    let controllers = [Controller::Cpu, Controller::Cpuset];
    let Some(host) = real_v1_layout_or_skip(&controllers) else {
        return;
    };
    let mut cgroups = ThrowawayCgroup::new(&host, "hostapp", &controllers).unwrap();
    let ls_dir = "host-latency-sensitive/nginx";
    let be_dir = "apps/spark";
    let victim_dir = "victim";
    for child in [ls_dir, be_dir, victim_dir] {
        cgroups.create_child(child).unwrap();
    }
    let link_root =
        LinkRoot(std::env::temp_dir().join(format!("koordlet-rh-hostapp-{}", std::process::id())));
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

    // The CPUs the throwaway tree may use are the pool (no pods, no reservation).
    let all_cpus: CpuSet = read(&root, "cpuset", "", "cpuset.cpus").parse().unwrap();
    let first_cpu = all_cpus.iter().next().unwrap();
    let one_cpu = CpuSet::from_range(first_cpu, first_cpu).unwrap();
    // Start every application cgroup on one CPU, so the pool is a change
    // whenever the node has more than one.
    for dir in [ls_dir, be_dir, victim_dir] {
        write(&root, "cpuset", dir, "cpuset.cpus", &one_cpu.to_string());
    }

    let node_slo: NodeSLO = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "test-node"},
        "spec": {
            "hostApplications": [
                {"name": "nginx", "qos": "LS", "priority": "koord-prod"},
                {"name": "spark", "qos": "BE", "cgroupPath": {"base": "CgroupRoot", "parentDir": "apps", "relativePath": "spark"}},
                {"name": "escape", "qos": "LS", "cgroupPath": {"parentDir": "apps/..", "relativePath": victim_dir}},
                {"name": "deep-escape", "qos": "LS", "cgroupPath": {"parentDir": "../../../..", "relativePath": "sys/fs/cgroup/cpuset"}},
                {"name": "root", "qos": "LS", "cgroupPath": {"base": "CgroupRoot", "parentDir": "/"}},
                {"name": "../victim", "qos": "LS"}
            ]
        }
    }))
    .unwrap();

    let mut caps = koordlet::capabilities::detect(&SystemArgs::default());
    for controller in ["cpu", "cpuset"] {
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
    assert!(dispatcher.is_active("CPUSetAllocator"));
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let states = StatesInformer::new("test-node", RequiredSyncs::PODS_ONLY);
    states.set_pods(PodsSnapshot {
        pods: Vec::new(),
        origin: PodsOrigin::File,
        synced_at: SystemTime::now(),
    });
    states.set_node_slo(Some(node_slo));
    let reconciler = Reconciler {
        dispatcher: Arc::new(dispatcher),
        applier: SideEffectApplier::new(executor, "/proc", root.join("no-resctrl")),
        states,
        interval: std::time::Duration::from_secs(10),
        online_cpus: Some(all_cpus.clone()),
        kubelet_root: None,
        reported_denials: Default::default(),
        reported_host_app_refusals: Default::default(),
    };

    let first = reconciler.round_blocking();
    assert_eq!(first.failed, 0, "{first:?}");
    // Read back from the kernel: the LS application runs on the pool.
    assert_eq!(
        read(&root, "cpuset", ls_dir, "cpuset.cpus"),
        all_cpus.to_string()
    );
    // BE applications get no cpuset; the hostile entries wrote nothing.
    assert_eq!(
        read(&root, "cpuset", be_dir, "cpuset.cpus"),
        one_cpu.to_string()
    );
    assert_eq!(
        read(&root, "cpuset", victim_dir, "cpuset.cpus"),
        one_cpu.to_string()
    );
    assert_eq!(metrics.host_apps("enforced"), 2);
    assert_eq!(metrics.host_apps("refused"), 4);
    if all_cpus.len() > 1 {
        assert_eq!(first.repaired, 1, "{first:?}");
        assert_eq!(metrics.drift_repaired("hostapp", "cpuset.cpus"), 1);

        // A hand-written drift is repaired by the next round.
        write(&root, "cpuset", ls_dir, "cpuset.cpus", &one_cpu.to_string());
        let repair = reconciler.round_blocking();
        assert_eq!(repair.repaired, 1, "{repair:?}");
        assert_eq!(
            read(&root, "cpuset", ls_dir, "cpuset.cpus"),
            all_cpus.to_string()
        );
        assert_eq!(metrics.drift_repaired("hostapp", "cpuset.cpus"), 2);
    }

    // Without drift a round changes nothing.
    let steady = reconciler.round_blocking();
    assert_eq!(steady.repaired, 0, "{steady:?}");
    assert_eq!(steady.failed, 0, "{steady:?}");
    drop(link_root);
    drop(cgroups);
}
