#![allow(clippy::unwrap_used)]
//! blkio by volume on real devices: a loop device throttled for the BE tier
//! by name, and a pod's CSI volume (a second loop device with ext4, mounted
//! at the kubelet's volume path) throttled at the pod's cgroup once it
//! appears. Real blkio cgroup v1 files are read back. Device-mapper is not
//! in this kernel, so volume groups are tested on a generated sysfs tree
//! (unit tests in `qosmanager::blkvolume`).

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::extension::{PriorityClass, QoSClass};
use apis::slo::v1alpha1::{
    ANNOTATION_POD_BLKIO_QOS, BlkIOQOS, BlkIOQOSCfg, BlockCfg, BlockType, IOCfg, NodeSLOSpec,
    ResourceQOS, ResourceQOSStrategy,
};
use k8s_openapi::api::core::v1::{CSIVolumeSource, Pod, PodSpec, Volume};
use koord_common::testing::TempDir;
use koordlet::qosmanager::blkio::BlkioReconcile;
use koordlet::qosmanager::framework::{LayoutReader, QosPod, QosRunner, QosSnapshot};
use koordlet::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use koordlet::system::SystemArgs;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion, Controller, QosTier};
use kube::api::ObjectMeta;
use support::cgroup::{ThrowawayCgroup, real_v1_layout_or_skip};

/// A loop device over a sparse file, detached on drop.
struct LoopDevice {
    path: String,
    number: String,
}

impl LoopDevice {
    fn new(backing: &Path) -> Result<Self, String> {
        let file = fs::File::create(backing).map_err(|e| e.to_string())?;
        file.set_len(64 << 20).map_err(|e| e.to_string())?;
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(backing)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let name = path.trim_start_matches("/dev/");
        let number = fs::read_to_string(format!("/sys/class/block/{name}/dev"))
            .map_err(|e| e.to_string())?
            .trim()
            .to_string();
        Ok(Self { path, number })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.path]).status();
    }
}

/// A mount, unmounted on drop.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap().trim().to_string()
}

fn snapshot(
    layout: &CgroupLayout,
    kubelet_root: &Path,
    be_device: &str,
    pod_dir: &Path,
    seconds: u64,
) -> QosSnapshot {
    let mut snap = QosSnapshot::for_test(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds));
    snap.layout = layout.clone();
    snap.reader = Arc::new(LayoutReader(layout.clone()));
    snap.kubelet_root = kubelet_root.to_path_buf();
    let be_block = BlockCfg {
        name: be_device.to_string(),
        block_type: Some(BlockType::Device),
        io_cfg: IOCfg {
            read_bps: Some(1_048_576),
            write_iops: Some(500),
            ..IOCfg::default()
        },
    };
    snap.node_slo = Some(Arc::new(NodeSLOSpec {
        resource_qos_strategy: Some(ResourceQOSStrategy {
            be_class: Some(ResourceQOS {
                blkio_qos: Some(BlkIOQOSCfg {
                    enable: Some(true),
                    blkio_qos: BlkIOQOS {
                        blocks: vec![be_block],
                    },
                }),
                ..ResourceQOS::default()
            }),
            ..ResourceQOSStrategy::default()
        }),
        ..NodeSLOSpec::default()
    }));
    let annotation = r#"{"blocks":[{"name":"html","type":"podvolume","ioCfg":{"readBPS":2097152,"writeBPS":4194304}}]}"#;
    snap.kube_pods = Arc::new(vec![Pod {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("web".into()),
            uid: Some("uid-web".into()),
            annotations: Some(
                [(ANNOTATION_POD_BLKIO_QOS.to_string(), annotation.to_string())].into(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            volumes: Some(vec![Volume {
                name: "html".into(),
                csi: Some(CSIVolumeSource {
                    driver: "test.csi.koordinator.sh".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }]);
    snap.pods = vec![QosPod {
        uid: "uid-web".into(),
        namespace: "default".into(),
        name: "web".into(),
        qos: QoSClass::BE,
        qos_label: QoSClass::BE,
        kube_qos: QosTier::BestEffort,
        priority: PriorityClass::None,
        priority_value: 0,
        phase: "Running".into(),
        cgroup_dir: pod_dir.to_path_buf(),
        containers: Vec::new(),
        allocated_cpus: None,
        cpu_usage: None,
        memory_usage: None,
        kube_index: Some(0),
    }];
    snap
}

#[test]
fn loop_devices_and_a_pod_volume_appearing_later_are_throttled() {
    let Some(host) = real_v1_layout_or_skip(&[Controller::Blkio]) else {
        return;
    };
    if !Path::new("/dev/loop-control").exists() || !have("losetup") {
        println!("SKIP: no loop device support (/dev/loop-control or losetup missing)");
        return;
    }
    if !have("mkfs.ext4") {
        println!("SKIP: mkfs.ext4 is missing (the pod volume needs a filesystem)");
        return;
    }
    let scratch = TempDir::new("blkio-volumes").unwrap();
    let be_loop = match LoopDevice::new(&scratch.path().join("be.img")) {
        Ok(device) => device,
        Err(err) => {
            println!("SKIP: cannot set up a loop device: {err}");
            return;
        }
    };
    let volume_loop = LoopDevice::new(&scratch.path().join("volume.img")).unwrap();
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F", &volume_loop.path])
        .status()
        .unwrap();
    assert!(mkfs.success());

    let mut cgroup = ThrowawayCgroup::new(&host, "blkio-volumes", &[Controller::Blkio]).unwrap();
    let be = cgroup.create_child("kubepods/besteffort").unwrap();
    let pod = cgroup
        .create_child("kubepods/besteffort/poduid-web")
        .unwrap();
    let root = TempDir::new("blkio-volumes-root").unwrap();
    std::os::unix::fs::symlink(
        host.root.join("blkio").join(cgroup.dir()),
        root.path().join("blkio"),
    )
    .unwrap();
    let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, root.path());
    let be_dir = cgroup.path(&be, Controller::Blkio);
    let pod_dir = cgroup.path(&pod, Controller::Blkio);
    let pod_relative = Path::new("kubepods/besteffort/poduid-web");
    let kubelet_root = scratch.path().join("kubelet");
    let volume_path = kubelet_root.join("pods/uid-web/volumes/kubernetes.io~csi/html/mount");
    fs::create_dir_all(&volume_path).unwrap();

    let mut runner = QosRunner::new(
        vec![Box::new(BlkioReconcile::on_host(SystemArgs::default()))],
        ResourceExecutor::new(layout.clone(), ExecutorConfig::default()),
    );
    // Round 1: the BE device is throttled; the pod's volume is not mounted
    // yet, so its block is dropped with the reason and nothing is written.
    let first = runner.run_one(
        0,
        &snapshot(&layout, &kubelet_root, &be_loop.path, pod_relative, 1),
    );
    assert_eq!(first.errors, 0, "{first:?}");
    println!(
        "BE {}: read_bps_device = {:?}, write_iops_device = {:?}",
        be_loop.path,
        read(&be_dir.join("blkio.throttle.read_bps_device")),
        read(&be_dir.join("blkio.throttle.write_iops_device"))
    );
    assert_eq!(
        read(&be_dir.join("blkio.throttle.read_bps_device")),
        format!("{} 1048576", be_loop.number)
    );
    assert_eq!(
        read(&be_dir.join("blkio.throttle.write_iops_device")),
        format!("{} 500", be_loop.number)
    );
    assert_eq!(read(&pod_dir.join("blkio.throttle.read_bps_device")), "");
    assert!(
        first
            .notes
            .iter()
            .any(|n| n.text.contains("not mounted yet")),
        "{first:?}"
    );

    // The volume appears: the kubelet (here: the test) mounts it.
    let mount = Command::new("mount")
        .arg(&volume_loop.path)
        .arg(&volume_path)
        .status()
        .unwrap();
    assert!(mount.success());
    let _mounted = Mounted(volume_path.clone());

    // Round 2 picks it up from mountinfo.
    let second = runner.run_one(
        0,
        &snapshot(&layout, &kubelet_root, &be_loop.path, pod_relative, 2),
    );
    assert_eq!(second.errors, 0, "{second:?}");
    println!(
        "pod volume {} at {}: read_bps_device = {:?}, write_bps_device = {:?}",
        volume_loop.path,
        volume_path.display(),
        read(&pod_dir.join("blkio.throttle.read_bps_device")),
        read(&pod_dir.join("blkio.throttle.write_bps_device"))
    );
    assert_eq!(
        read(&pod_dir.join("blkio.throttle.read_bps_device")),
        format!("{} 2097152", volume_loop.number)
    );
    assert_eq!(
        read(&pod_dir.join("blkio.throttle.write_bps_device")),
        format!("{} 4194304", volume_loop.number)
    );
    // The BE tier is untouched by the pod's block.
    assert_eq!(
        read(&be_dir.join("blkio.throttle.read_bps_device")),
        format!("{} 1048576", be_loop.number)
    );
}
