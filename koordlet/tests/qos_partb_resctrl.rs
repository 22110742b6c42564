#![allow(clippy::unwrap_used)]
//! The resctrl strategy through the QoS runner on a generated
//! `/sys/fs/resctrl` tree (this kernel has none), and "unsupported" on the
//! real machine.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::{
    NodeSLOSpec, ResctrlQOS, ResctrlQOSCfg, ResourceQOS, ResourceQOSStrategy,
};
use koord_common::testing::TempDir;
use koordlet::qosmanager::framework::{QosContainer, QosPod, QosRunner, QosSnapshot};
use koordlet::qosmanager::resctrl::ResctrlReconcile;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, QosTier};

fn write(path: &Path, content: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

/// 11 L3 ways on two domains, MBA, Intel; one BE container with a thread.
fn generated_tree(base: &Path) -> (SystemArgs, CgroupLayout) {
    let roots = SystemArgs::under(base);
    let resctrl = roots.resctrl_root();
    write(&resctrl.join("info/L3/cbm_mask"), "7ff\n");
    write(&resctrl.join("info/L3/min_cbm_bits"), "2\n");
    write(&resctrl.join("info/MB/min_bandwidth"), "10\n");
    write(
        &resctrl.join("schemata"),
        "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n",
    );
    write(
        &roots.proc_root_dir.join("cpuinfo"),
        "vendor_id\t: GenuineIntel\n",
    );
    let layout = CgroupLayout::new(
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        &roots.cgroup_root_dir,
    );
    write(
        &roots
            .cgroup_root_dir
            .join("cpu/kubepods/besteffort/podbe/c1/tasks"),
        "4242\n4243\n",
    );
    (roots, layout)
}

fn be_pod() -> QosPod {
    QosPod {
        uid: "be".to_string(),
        namespace: "default".to_string(),
        name: "be".to_string(),
        qos: apis::extension::QoSClass::BE,
        qos_label: apis::extension::QoSClass::BE,
        kube_qos: QosTier::BestEffort,
        priority: apis::extension::PriorityClass::Batch,
        priority_value: 5500,
        phase: "Running".to_string(),
        cgroup_dir: PathBuf::from("kubepods/besteffort/podbe"),
        containers: vec![QosContainer {
            name: "c1".to_string(),
            id: Some("containerd://c1".to_string()),
            cgroup_dir: Some(PathBuf::from("kubepods/besteffort/podbe/c1")),
            cpu_request: None,
            cpu_limit: None,
            memory_request: None,
            memory_limit: None,
            cpu_usage: None,
            memory_usage: None,
        }],
        allocated_cpus: None,
        cpu_usage: None,
        memory_usage: None,
        kube_index: None,
    }
}

fn snapshot(layout: &CgroupLayout, now: SystemTime) -> QosSnapshot {
    let mut snapshot = QosSnapshot::for_test(now);
    snapshot.layout = layout.clone();
    let mut caps = koordlet::qosmanager::test_capabilities();
    caps.resctrl.supported = true;
    caps.resctrl.cat = true;
    caps.resctrl.mba = true;
    snapshot.capabilities = Arc::new(caps);
    snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
        resource_qos_strategy: Some(ResourceQOSStrategy {
            be_class: Some(ResourceQOS {
                resctrl_qos: Some(ResctrlQOSCfg {
                    enable: Some(true),
                    resctrl_qos: ResctrlQOS {
                        cat_range_start_percent: Some(0),
                        cat_range_end_percent: Some(30),
                        mba_percent: Some(50),
                    },
                }),
                ..ResourceQOS::default()
            }),
            ..ResourceQOSStrategy::default()
        }),
        ..NodeSLOSpec::default()
    }));
    snapshot.pods = vec![be_pod()];
    snapshot
}

#[test]
fn groups_masks_and_tasks_land_in_a_generated_resctrl_tree_and_drift_is_repaired() {
    let dir = TempDir::new("resctrl-tree").unwrap();
    let (roots, layout) = generated_tree(dir.path());
    let resctrl = roots.resctrl_root();
    let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
    let mut runner = QosRunner::new(
        vec![Box::new(ResctrlReconcile::on_host(roots.clone()))],
        executor,
    );
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);

    let first = runner.run_one(0, &snapshot(&layout, t0));
    assert_eq!(first.errors, 0, "{first:?}");
    for group in ["LSR", "LS", "BE"] {
        assert!(
            resctrl.join(group).is_dir(),
            "group {group} was not created"
        );
    }
    // LSR/LS: upstream defaults (whole cache, MBA 100); BE: ceil(11 × 30%) = 4
    // ways → mask f, MBA 50.
    assert_eq!(
        read(&resctrl.join("LSR/schemata")),
        "L3:0=7ff;1=7ff\nMB:0=100;1=100"
    );
    assert_eq!(
        read(&resctrl.join("BE/schemata")),
        "L3:0=f;1=f\nMB:0=50;1=50"
    );
    assert_eq!(read(&resctrl.join("BE/tasks")), "4242\n4243");
    assert_eq!(
        first.actions, 4,
        "three schemata and one tasks write: {first:?}"
    );

    // Converged: nothing to write.
    let second = runner.run_one(0, &snapshot(&layout, t0 + Duration::from_secs(1)));
    assert_eq!(second.actions, 0, "{second:?}");

    // A new thread and a schemata changed behind koordlet's back.
    write(
        &roots
            .cgroup_root_dir
            .join("cpu/kubepods/besteffort/podbe/c1/tasks"),
        "4242\n4243\n4250\n",
    );
    fs::write(
        resctrl.join("BE/schemata"),
        "L3:0=7ff;1=7ff\nMB:0=100;1=100\n",
    )
    .unwrap();
    let third = runner.run_one(0, &snapshot(&layout, t0 + Duration::from_secs(2)));
    assert_eq!(third.actions, 2, "{third:?}");
    assert_eq!(
        read(&resctrl.join("BE/schemata")),
        "L3:0=f;1=f\nMB:0=50;1=50"
    );
    // The generated tasks file is a plain file: the write holds the new thread only.
    assert_eq!(read(&resctrl.join("BE/tasks")), "4250");
}

#[test]
fn real_machine_without_resctrl_reports_unsupported() {
    let roots = SystemArgs::default();
    let caps = koordlet::capabilities::detect(&roots);
    if caps.resctrl.supported {
        println!("SKIP: this machine has resctrl; the unsupported path is not reachable");
        return;
    }
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
    let mut snap = snapshot(&layout, SystemTime::now());
    snap.capabilities = Arc::new(caps);
    snap.pods.clear();
    let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
    let mut runner = QosRunner::new(vec![Box::new(ResctrlReconcile::on_host(roots))], executor);
    let outcome = runner.run_one(0, &snap);
    assert!(outcome.skipped, "{outcome:?}");
    assert_eq!(outcome.actions, 0);
    assert!(
        outcome
            .notes
            .iter()
            .any(|note| note.text.contains("unsupported: resctrl")),
        "{outcome:?}"
    );
    // And without the capability check, the strategy itself says so too.
    let mut direct = snapshot(
        &CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
        SystemTime::now(),
    );
    direct.pods.clear();
    let (decision, ()) = koordlet::qosmanager::Strategy::decide(
        &ResctrlReconcile::on_host(SystemArgs::default()),
        &direct,
        &(),
    );
    assert!(
        decision
            .skip_reason()
            .is_some_and(|reason| reason.contains("unsupported: resctrl is not mounted")),
        "{decision:?}"
    );
}
