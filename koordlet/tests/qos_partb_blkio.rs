#![allow(clippy::unwrap_used)]
//! blkio through the QoS runner on a real throwaway blkio cgroup: a real
//! disk's throttle lands in the BE tier's file, converges, is repaired
//! after a change behind koordlet's back and is removed when disabled.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::{
    BlkIOQOS, BlkIOQOSCfg, BlockCfg, BlockType, IOCfg, NodeSLOSpec, ResourceQOS,
    ResourceQOSStrategy,
};
use koord_common::testing::TempDir;
use koordlet::qosmanager::FsHostFiles;
use koordlet::qosmanager::blkio::{BlkioReconcile, DeviceResolver};
use koordlet::qosmanager::framework::{LayoutReader, QosRunner, QosSnapshot};
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller};
use support::cgroup::{ThrowawayCgroup, real_v1_layout_or_skip};

/// A whole disk backed by hardware (`/sys/block/<name>/device` exists).
fn real_disk() -> Option<String> {
    let mut names: Vec<String> = fs::read_dir("/sys/block")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| Path::new("/sys/block").join(name).join("device").exists())
        .collect();
    names.sort();
    names.into_iter().next()
}

fn snapshot(layout: &CgroupLayout, enable: bool, disk: &str, seconds: u64) -> QosSnapshot {
    let mut snapshot = QosSnapshot::for_test(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds));
    snapshot.layout = layout.clone();
    snapshot.reader = Arc::new(LayoutReader(layout.clone()));
    let block = BlockCfg {
        name: format!("/dev/{disk}"),
        block_type: Some(BlockType::Device),
        io_cfg: IOCfg {
            read_bps: Some(1_048_576),
            write_iops: Some(500),
            io_weight_percent: Some(50),
            ..IOCfg::default()
        },
    };
    snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
        resource_qos_strategy: Some(ResourceQOSStrategy {
            be_class: Some(ResourceQOS {
                blkio_qos: Some(BlkIOQOSCfg {
                    enable: Some(enable),
                    blkio_qos: BlkIOQOS {
                        blocks: vec![block],
                    },
                }),
                ..ResourceQOS::default()
            }),
            ..ResourceQOSStrategy::default()
        }),
        ..NodeSLOSpec::default()
    }));
    snapshot
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap().trim().to_string()
}

#[test]
fn be_throttles_on_a_real_disk_converge_repair_and_clear() {
    let Some(host) = real_v1_layout_or_skip(&[Controller::Blkio]) else {
        return;
    };
    let Some(disk) = real_disk() else {
        println!("SKIP: no hardware-backed block device under /sys/block");
        return;
    };
    let roots = SystemArgs::default();
    let device = DeviceResolver {
        files: &FsHostFiles,
        roots: &roots,
    }
    .resolve(&format!("/dev/{disk}"))
    .unwrap();
    let mut cgroup = ThrowawayCgroup::new(&host, "blkio", &[Controller::Blkio]).unwrap();
    let be = cgroup.create_child("kubepods/besteffort").unwrap();
    // A cgroup root whose blkio hierarchy is the throwaway tree.
    let root = TempDir::new("blkio-root").unwrap();
    std::os::unix::fs::symlink(
        host.root.join("blkio").join(cgroup.dir()),
        root.path().join("blkio"),
    )
    .unwrap();
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root.path());
    let be_dir: PathBuf = cgroup.path(&be, Controller::Blkio);
    let read_bps = be_dir.join("blkio.throttle.read_bps_device");
    let write_iops = be_dir.join("blkio.throttle.write_iops_device");

    let mut runner = QosRunner::new(
        vec![Box::new(BlkioReconcile::on_host(roots.clone()))],
        ResourceExecutor::new(layout.clone(), ExecutorConfig::default()),
    );
    let first = runner.run_one(0, &snapshot(&layout, true, &disk, 1));
    assert_eq!(first.errors, 0, "{first:?}");
    assert_eq!(read(&read_bps), format!("{device} 1048576"));
    assert_eq!(read(&write_iops), format!("{device} 500"));
    // This kernel has no blk-iocost: the weight is reported, not written.
    assert!(
        first
            .notes
            .iter()
            .any(|n| n.text.contains("ioWeightPercent: unsupported")),
        "{first:?}"
    );

    let second = runner.run_one(0, &snapshot(&layout, true, &disk, 2));
    assert_eq!(second.actions, 0, "{second:?}");

    // Someone lifts the limit behind koordlet's back.
    fs::write(&read_bps, format!("{device} 0")).unwrap();
    assert_eq!(read(&read_bps), "");
    let third = runner.run_one(0, &snapshot(&layout, true, &disk, 3));
    assert_eq!(third.actions, 1, "{third:?}");
    assert_eq!(read(&read_bps), format!("{device} 1048576"));

    // Disabled: every limit is removed.
    let off = runner.run_one(0, &snapshot(&layout, false, &disk, 4));
    assert_eq!(off.errors, 0, "{off:?}");
    assert_eq!(read(&read_bps), "");
    assert_eq!(read(&write_iops), "");
}
