#![allow(clippy::unwrap_used)]
//! sysreconcile through the QoS runner on a generated procfs tree: knobs
//! written where the files exist, a drift repaired and counted.

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::{NodeSLOSpec, SystemStrategy};
use koord_common::testing::TempDir;
use koord_common::units::Bytes;
use koordlet::qosmanager::framework::{QosRunner, QosSnapshot};
use koordlet::qosmanager::sysreconcile::SysReconcile;
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

const GIB: i64 = 1 << 30;

fn write(path: &Path, content: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap().trim().to_string()
}

#[test]
fn knobs_are_written_where_present_and_drift_is_repaired() {
    let dir = TempDir::new("sysreconcile-tree").unwrap();
    let roots = SystemArgs::under(dir.path());
    let min_free = roots.proc_root_dir.join("sys/vm/min_free_kbytes");
    let watermark = roots.proc_root_dir.join("sys/vm/watermark_scale_factor");
    write(&min_free, "67584\n");
    write(&watermark, "10\n");
    let layout = CgroupLayout::new(
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        &roots.cgroup_root_dir,
    );
    let mut runner = QosRunner::new(
        vec![Box::new(SysReconcile::on_host(roots.clone()))],
        ResourceExecutor::new(layout.clone(), ExecutorConfig::default()),
    );
    let snapshot = |seconds: u64| {
        let mut snapshot =
            QosSnapshot::for_test(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds));
        snapshot.layout = layout.clone();
        snapshot.node.memory_capacity = Bytes(16 * GIB as u64);
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            system_strategy: Some(SystemStrategy {
                min_free_kbytes_factor: Some(100),
                watermark_scale_factor: Some(150),
                memcg_reap_back_ground: Some(1),
                ..SystemStrategy::default()
            }),
            ..NodeSLOSpec::default()
        }));
        snapshot
    };

    let first = runner.run_one(0, &snapshot(1));
    // 16 GiB = 16777216 KiB × 100 / 10000.
    assert_eq!(read(&min_free), "167772");
    assert_eq!(read(&watermark), "150");
    assert_eq!((first.actions, first.errors), (2, 0), "{first:?}");
    assert!(
        first
            .notes
            .iter()
            .any(|n| n.text.contains("memcgReapBackGround: unsupported")),
        "{first:?}"
    );
    // The reaper file was not created.
    assert!(
        !roots
            .sys_root_dir
            .join("kernel/mm/memcg_reaper/reap_background")
            .exists()
    );

    let second = runner.run_one(0, &snapshot(2));
    assert_eq!(
        (second.actions, second.drifts_repaired),
        (0, 0),
        "{second:?}"
    );

    fs::write(&watermark, "10\n").unwrap();
    let third = runner.run_one(0, &snapshot(3));
    assert_eq!((third.actions, third.drifts_repaired), (1, 1), "{third:?}");
    assert_eq!(read(&watermark), "150");
}
