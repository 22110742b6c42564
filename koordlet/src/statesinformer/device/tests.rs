#![allow(clippy::unwrap_used)]
//! Device discovery over generated sysfs trees and a fake NVML source, and
//! the Device spec built from it, checked field by field against upstream's
//! shape.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use apis::scheduling::v1alpha1::{Device, DeviceType};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_common::testing::TempDir;
use serde_json::{Value, json};

use super::capability::DevicesCapability;
use super::nvml::normalize_bus_id;
use super::spec::{gpu_model_label, is_label_value};
use super::sysfs::{MAX_ATTR_BYTES, MAX_IB_DEVICES, is_pci_address, pcie_root_of, rdma_minor};
use super::*;

const GIB: u64 = 1 << 30;

/// A sysfs tree in a temporary directory: PCI functions under
/// `devices/<root complex>/<bridges...>/<bdf>`, linked from
/// `bus/pci/devices/<bdf>`, and RDMA devices under `class/infiniband`.
struct SysTree {
    dir: TempDir,
}

impl SysTree {
    fn new() -> Self {
        Self {
            dir: TempDir::new("devices-sys").unwrap(),
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn write(path: &Path, content: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// Adds the PCI function at the end of `chain` (root complex first,
    /// e.g. `["pci0000:3a", "0000:3a:00.0", "0000:3b:00.0"]`).
    fn add_pci(&self, chain: &[&str], numa_node: &str, class: &str) -> PathBuf {
        let mut dir = self.root().join("devices");
        for part in chain {
            dir.push(part);
        }
        std::fs::create_dir_all(&dir).unwrap();
        Self::write(&dir.join("numa_node"), format!("{numa_node}\n").as_bytes());
        Self::write(&dir.join("class"), format!("{class}\n").as_bytes());
        let links = self.root().join("bus/pci/devices");
        std::fs::create_dir_all(&links).unwrap();
        let bdf = chain.last().unwrap();
        std::os::unix::fs::symlink(&dir, links.join(bdf)).unwrap();
        dir
    }

    /// Adds VFs beside the PF at `pf_dir`, `virtfn<N>` → VF and `physfn` back.
    fn add_vfs(&self, pf_dir: &Path, vfs: &[&str]) -> Vec<PathBuf> {
        Self::write(
            &pf_dir.join("sriov_numvfs"),
            format!("{}\n", vfs.len()).as_bytes(),
        );
        let parent = pf_dir.parent().unwrap();
        let links = self.root().join("bus/pci/devices");
        vfs.iter()
            .enumerate()
            .map(|(index, vf)| {
                let vf_dir = parent.join(vf);
                std::fs::create_dir_all(&vf_dir).unwrap();
                Self::write(&vf_dir.join("numa_node"), b"1\n");
                Self::write(&vf_dir.join("class"), b"0x020000\n");
                std::os::unix::fs::symlink(pf_dir, vf_dir.join("physfn")).unwrap();
                std::os::unix::fs::symlink(&vf_dir, pf_dir.join(format!("virtfn{index}"))).unwrap();
                std::os::unix::fs::symlink(&vf_dir, links.join(vf)).unwrap();
                vf_dir
            })
            .collect()
    }

    /// Adds RDMA device `name` on the function at `pci_dir` with one port
    /// per state.
    fn add_ib(&self, name: &str, pci_dir: &Path, port_states: &[&str]) {
        let dir = self.root().join("class/infiniband").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(pci_dir, dir.join("device")).unwrap();
        for (index, state) in port_states.iter().enumerate() {
            Self::write(
                &dir.join(format!("ports/{}/state", index + 1)),
                state.as_bytes(),
            );
        }
    }
}

/// The fake NVML: a [`DeviceSource`] whose GPUs a test changes at will.
struct FakeNvml {
    gpus: Mutex<Vec<GpuInfo>>,
    driver: Option<String>,
}

impl FakeNvml {
    fn new(gpus: Vec<GpuInfo>) -> Arc<Self> {
        Arc::new(Self {
            gpus: Mutex::new(gpus),
            driver: Some("535.104.05".to_string()),
        })
    }

    fn set(&self, gpus: Vec<GpuInfo>) {
        *self.gpus.lock().unwrap() = gpus;
    }
}

impl DeviceSource for FakeNvml {
    fn name(&self) -> &'static str {
        "fake-nvml"
    }

    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
        Ok(DeviceSnapshot {
            gpus: self.gpus.lock().unwrap().clone(),
            gpu_driver_version: self.driver.clone(),
            ..DeviceSnapshot::default()
        })
    }
}

/// A source that always fails.
struct BrokenSource;

impl DeviceSource for BrokenSource {
    fn name(&self) -> &'static str {
        "broken"
    }

    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
        Err(DiscoveryError::Nvml("device count: Unknown".to_string()))
    }
}

fn gpu(minor: i32, bus_id: &str, memory: u64) -> GpuInfo {
    GpuInfo {
        uuid: format!("GPU-{minor:08}-aaaa-bbbb-cccc-000000000000"),
        minor,
        memory_total: Bytes(memory),
        bus_id: bus_id.to_string(),
        model: "NVIDIA A100-SXM4-80GB".to_string(),
        health: DeviceHealth::Healthy,
        topology: None,
    }
}

fn now() -> Time {
    Time("2026-01-02T03:04:05Z".parse().unwrap())
}

fn later() -> Time {
    Time("2026-01-02T04:00:00Z".parse().unwrap())
}

fn sources(list: Vec<Arc<dyn DeviceSource>>) -> Vec<Arc<dyn DeviceSource>> {
    list
}

fn as_json(desired: &DesiredDevice) -> Value {
    serde_json::to_value(&desired.devices).unwrap()
}

fn node() -> Node {
    serde_json::from_value(json!({"metadata": {"name": "node-a", "uid": "node-uid-1"}})).unwrap()
}

#[test]
fn one_gpu_becomes_upstreams_device_entry_field_by_field() {
    let sys = SysTree::new();
    sys.add_pci(
        &["pci0000:3a", "0000:3a:00.0", "0000:3b:00.0"],
        "0",
        "0x030200",
    );
    let nvml = FakeNvml::new(vec![gpu(0, "0000:3b:00.0", 80 * GIB)]);
    let snapshot = discover_all(&sources(vec![nvml]), &PciSysfs::new(sys.root()));
    assert!(snapshot.problems.is_empty(), "{:?}", snapshot.problems);
    let desired = build_desired_device(&snapshot, &now());
    assert!(desired.problems.is_empty(), "{:?}", desired.problems);
    assert_eq!(
        as_json(&desired),
        json!([{
            "type": "gpu",
            "id": "GPU-00000000-aaaa-bbbb-cccc-000000000000",
            "minor": 0,
            "health": true,
            "resources": {
                "koordinator.sh/gpu-core": "100",
                "koordinator.sh/gpu-memory": "80Gi",
                "koordinator.sh/gpu-memory-ratio": "100"
            },
            "topology": {"socketID": -1, "nodeID": 0, "pcieID": "pci0000:3a", "busID": "0000:3b:00.0"}
        }])
    );
    assert_eq!(
        desired.labels,
        BTreeMap::from([
            (
                "node.koordinator.sh/gpu-driver-version".to_string(),
                "535.104.05".to_string()
            ),
            (
                "node.koordinator.sh/gpu-model".to_string(),
                "A100-SXM4-80GB".to_string()
            ),
            (
                "node.koordinator.sh/gpu-vendor".to_string(),
                "nvidia".to_string()
            ),
        ])
    );

    // The new object: named after the node, owned by it as upstream sets it.
    let object = serde_json::to_value(desired.new_object(&node())).unwrap();
    assert_eq!(object["apiVersion"], "scheduling.koordinator.sh/v1alpha1");
    assert_eq!(object["kind"], "Device");
    assert_eq!(object["metadata"]["name"], "node-a");
    assert_eq!(
        object["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "node-uid-1",
                "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(object["spec"]["devices"], as_json(&desired));
}

#[test]
fn gpu_memory_that_is_not_a_whole_binary_unit_stays_in_bytes() {
    let mut odd = gpu(0, "0000:3b:00.0", 15_843_721_216 + 512);
    odd.topology = None;
    let info = spec::gpu_device_info(&odd, &now()).unwrap();
    let resources = info.resources.unwrap();
    assert_eq!(resources["koordinator.sh/gpu-memory"].0, "15843721728");
    // Upstream leaves the topology out when it is not known.
    assert!(info.topology.is_none());
    let huge = gpu(0, "0000:3b:00.0", u64::MAX);
    assert!(
        spec::gpu_device_info(&huge, &now())
            .unwrap_err()
            .contains("out of range")
    );
}

/// 8 GPUs, 4 per NUMA node, each pair behind one PCIe switch, two root
/// complexes per NUMA node.
#[test]
fn eight_gpus_on_two_numa_nodes_get_their_node_and_root_complex() {
    let sys = SysTree::new();
    let roots = ["pci0000:17", "pci0000:3a", "pci0000:5d", "pci0000:85"];
    let mut gpus = Vec::new();
    for (index, root) in roots.iter().enumerate() {
        let bus = &root[7..];
        let root_port = format!("0000:{bus}:00.0");
        let switch_up = format!("0000:{:02x}:00.0", 0x20 * index + 0x10);
        for slot in 0..2 {
            let switch_down = format!("0000:{:02x}:{slot:02x}.0", 0x20 * index + 0x11);
            let bdf = format!("0000:{:02x}:00.0", 0x20 * index + 0x12 + slot);
            let numa = if index < 2 { "0" } else { "1" };
            sys.add_pci(
                &[root, &root_port, &switch_up, &switch_down, &bdf],
                numa,
                "0x030200",
            );
            let minor = i32::try_from(index * 2 + slot).unwrap();
            gpus.push(gpu(minor, &bdf, 80 * GIB));
        }
    }
    // NVML lists them in its own order; the Device sorts by minor.
    gpus.reverse();
    let nvml = FakeNvml::new(gpus);
    let snapshot = discover_all(&sources(vec![nvml]), &PciSysfs::new(sys.root()));
    assert!(snapshot.problems.is_empty(), "{:?}", snapshot.problems);
    let desired = build_desired_device(&snapshot, &now());
    let placed: Vec<(i32, i32, String)> = desired
        .devices
        .iter()
        .map(|info| {
            let topology = info.topology.as_ref().unwrap();
            (
                info.minor.unwrap(),
                topology.node_id,
                topology.pcie_id.clone(),
            )
        })
        .collect();
    assert_eq!(
        placed,
        vec![
            (0, 0, "pci0000:17".to_string()),
            (1, 0, "pci0000:17".to_string()),
            (2, 0, "pci0000:3a".to_string()),
            (3, 0, "pci0000:3a".to_string()),
            (4, 1, "pci0000:5d".to_string()),
            (5, 1, "pci0000:5d".to_string()),
            (6, 1, "pci0000:85".to_string()),
            (7, 1, "pci0000:85".to_string()),
        ]
    );
    assert!(
        desired
            .devices
            .iter()
            .all(|d| d.topology.as_ref().unwrap().socket_id == -1)
    );
    assert_eq!(
        desired.devices[7]
            .topology
            .as_ref()
            .unwrap()
            .bus_id
            .as_deref(),
        Some("0000:73:00.0")
    );
}

#[test]
fn numa_node_minus_one_counts_as_node_zero() {
    let sys = SysTree::new();
    sys.add_pci(&["pci0000:00", "0000:00:02.0"], "-1", "0x030000");
    let topology = PciSysfs::new(sys.root()).topology("0000:00:02.0").unwrap();
    assert_eq!(
        topology,
        PciTopology {
            node_id: 0,
            pcie_id: "pci0000:00".to_string()
        }
    );
}

/// Two mlx5 PFs: one with 12 VFs (listed by `virtfn<N>` number, reported by
/// bus id) whose ports are up, one without SR-IOV and a port down; VF RDMA
/// devices and a non-network function are left out.
fn rdma_tree() -> SysTree {
    let sys = SysTree::new();
    let pf0 = sys.add_pci(
        &["pci0000:5d", "0000:5d:00.0", "0000:5e:00.0"],
        "1",
        "0x020000",
    );
    let vf_names: Vec<String> = (0..12)
        .map(|index| format!("0000:5e:{:02x}.{}", index / 8 + 1, index % 8))
        .collect();
    let vf_refs: Vec<&str> = vf_names.iter().map(String::as_str).collect();
    let vf_dirs = sys.add_vfs(&pf0, &vf_refs);
    sys.add_ib("mlx5_0", &pf0, &["4: ACTIVE", "4: ACTIVE"]);
    // A VF's own RDMA device.
    sys.add_ib("mlx5_2", &vf_dirs[0], &["4: ACTIVE"]);
    let pf1 = sys.add_pci(
        &["pci0000:85", "0000:85:00.0", "0000:86:00.0"],
        "1",
        "0x020700",
    );
    sys.add_ib("mlx5_1", &pf1, &["1: DOWN"]);
    // An RDMA device on a function that is not a network controller.
    let other = sys.add_pci(&["pci0000:00", "0000:00:1f.0"], "0", "0x060100");
    sys.add_ib("mlx5_9", &other, &["4: ACTIVE"]);
    sys
}

#[test]
fn rdma_nics_and_their_vfs_come_from_sysfs_in_upstreams_shape() {
    let sys = rdma_tree();
    let source = RdmaSysfsSource::new(sys.root());
    let found = source.discover().unwrap();
    assert_eq!(found.rdma.len(), 2, "{found:?}");
    assert_eq!(found.rdma[0].ib_devices, ["mlx5_0"]);
    // virtfn order: virtfn10 after virtfn9.
    let vfs = found.rdma[0].vfs.as_ref().unwrap();
    assert_eq!(vfs.len(), 12);
    assert_eq!(vfs[9], "0000:5e:02.1");
    assert_eq!(vfs[10], "0000:5e:02.2");
    assert!(found.rdma[1].vfs.is_none());
    assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
    assert!(found.problems[0].contains("mlx5_9"), "{:?}", found.problems);

    let snapshot = discover_all(&sources(vec![Arc::new(source)]), &PciSysfs::new(sys.root()));
    let desired = build_desired_device(&snapshot, &now());
    // No GPU: no GPU labels.
    assert!(desired.labels.is_empty());
    let devices = as_json(&desired);
    let vf_json: Vec<Value> = {
        let mut sorted = vfs.clone();
        sorted.sort();
        sorted
            .iter()
            .map(|bus| json!({"minor": -1, "busID": bus}))
            .collect()
    };
    assert_eq!(
        devices,
        json!([
            {
                "type": "rdma",
                "id": "0000:5e:00.0",
                "minor": 0,
                "health": true,
                "resources": {"koordinator.sh/rdma": "100"},
                "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:5d", "busID": "0000:5e:00.0"},
                "vfGroups": [{"vfs": vf_json}]
            },
            {
                "type": "rdma",
                "id": "0000:86:00.0",
                "minor": 1,
                "health": false,
                "resources": {"koordinator.sh/rdma": "100"},
                "topology": {"socketID": -1, "nodeID": 1, "pcieID": "pci0000:85", "busID": "0000:86:00.0"}
            }
        ])
    );
}

#[test]
fn gpus_sort_before_rdma_and_a_failing_source_leaves_the_others() {
    let sys = rdma_tree();
    sys.add_pci(
        &["pci0000:17", "0000:17:00.0", "0000:18:00.0"],
        "0",
        "0x030200",
    );
    let nvml = FakeNvml::new(vec![gpu(3, "0000:18:00.0", 16 * GIB)]);
    let all = sources(vec![
        Arc::new(RdmaSysfsSource::new(sys.root())),
        Arc::new(BrokenSource),
        nvml,
    ]);
    let snapshot = discover_all(&all, &PciSysfs::new(sys.root()));
    assert!(
        snapshot
            .problems
            .iter()
            .any(|p| p.starts_with("broken discovery failed: NVML")),
        "{:?}",
        snapshot.problems
    );
    let desired = build_desired_device(&snapshot, &now());
    let order: Vec<(String, i32)> = desired
        .devices
        .iter()
        .map(|d| {
            (
                d.type_.as_ref().unwrap().as_str().to_string(),
                d.minor.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            ("gpu".to_string(), 3),
            ("rdma".to_string(), 0),
            ("rdma".to_string(), 1)
        ]
    );
    assert_eq!(
        desired.devices[0].resources.as_ref().unwrap()["koordinator.sh/gpu-memory"].0,
        "16Gi"
    );
}

#[test]
fn a_health_change_updates_the_device_and_keeps_the_transition_time_while_unchanged() {
    let sys = SysTree::new();
    sys.add_pci(
        &["pci0000:3a", "0000:3a:00.0", "0000:3b:00.0"],
        "0",
        "0x030200",
    );
    let pci = PciSysfs::new(sys.root());
    let nvml = FakeNvml::new(vec![gpu(0, "0000:3b:00.0", 80 * GIB)]);
    let all = sources(vec![nvml.clone()]);
    let healthy = build_desired_device(&discover_all(&all, &pci), &now());
    let mut stored = healthy.new_object(&node());
    assert_eq!(healthy.change_reason(&stored), None);

    let mut lost = gpu(0, "0000:3b:00.0", 80 * GIB);
    lost.health = DeviceHealth::Unhealthy {
        code: "GpuLost".to_string(),
        message: "NVML cannot read the memory size: the GPU has fallen off the bus".to_string(),
    };
    nvml.set(vec![lost.clone()]);
    let unhealthy = build_desired_device(&discover_all(&all, &pci), &now());
    assert_eq!(
        unhealthy.change_reason(&stored).as_deref(),
        Some("device health, resources or topology changed")
    );
    unhealthy.apply_to(&mut stored);
    let info = &stored.spec.devices.as_ref().unwrap()[0];
    assert!(!info.health);
    let condition = &info.conditions.as_ref().unwrap()[0];
    assert_eq!(condition.type_, "Healthy");
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason, "GpuLost");
    assert!(condition.message.contains("fallen off the bus"));
    assert_eq!(condition.last_transition_time, now());

    // Still unhealthy an hour later: no change, and the time stays.
    let again = build_desired_device(&discover_all(&all, &pci), &later());
    assert_eq!(again.change_reason(&stored), None);
    assert!(again.same_content(&unhealthy));
    assert_eq!(
        again.devices_after(Some(&stored))[0]
            .conditions
            .as_ref()
            .unwrap()[0]
            .last_transition_time,
        now()
    );

    // Healthy again: the condition goes, as upstream reports none then.
    nvml.set(vec![gpu(0, "0000:3b:00.0", 80 * GIB)]);
    let recovered = build_desired_device(&discover_all(&all, &pci), &later());
    assert!(recovered.change_reason(&stored).is_some());
    recovered.apply_to(&mut stored);
    let info = &stored.spec.devices.as_ref().unwrap()[0];
    assert!(info.health && info.conditions.is_none());
}

#[test]
fn hot_plug_adds_and_removes_devices_and_keeps_foreign_labels() {
    let sys = SysTree::new();
    sys.add_pci(
        &["pci0000:3a", "0000:3a:00.0", "0000:3b:00.0"],
        "0",
        "0x030200",
    );
    sys.add_pci(
        &["pci0000:3a", "0000:3a:01.0", "0000:3c:00.0"],
        "0",
        "0x030200",
    );
    let pci = PciSysfs::new(sys.root());
    let nvml = FakeNvml::new(vec![gpu(0, "0000:3b:00.0", 80 * GIB)]);
    let all = sources(vec![nvml.clone()]);
    let one = build_desired_device(&discover_all(&all, &pci), &now());
    let mut stored: Device = one.new_object(&node());
    stored
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("team".to_string(), "ml".to_string());
    assert_eq!(
        one.change_reason(&stored),
        None,
        "a foreign label is no change"
    );

    nvml.set(vec![
        gpu(0, "0000:3b:00.0", 80 * GIB),
        gpu(1, "0000:3c:00.0", 80 * GIB),
    ]);
    let two = build_desired_device(&discover_all(&all, &pci), &now());
    let reason = two.change_reason(&stored).unwrap();
    assert!(
        reason.starts_with("devices changed from [gpu/GPU-00000000"),
        "{reason}"
    );
    two.apply_to(&mut stored);
    assert_eq!(stored.spec.devices.as_ref().unwrap().len(), 2);

    // Every GPU unplugged: the devices empty and the GPU labels go, the
    // foreign label stays.
    nvml.set(vec![]);
    let none = build_desired_device(&discover_all(&all, &pci), &now());
    assert!(none.is_empty());
    assert!(none.change_reason(&stored).is_some());
    none.apply_to(&mut stored);
    assert_eq!(stored.spec.devices, Some(vec![]));
    assert_eq!(
        stored.metadata.labels,
        Some(BTreeMap::from([("team".to_string(), "ml".to_string())]))
    );
}

#[test]
fn a_model_label_change_alone_is_a_change() {
    let snapshot = DeviceSnapshot {
        gpus: vec![gpu(0, "0000:3b:00.0", GIB)],
        gpu_driver_version: Some("535.104.05".to_string()),
        ..DeviceSnapshot::default()
    };
    let desired = build_desired_device(&snapshot, &now());
    let mut stored = desired.new_object(&node());
    stored.metadata.labels.as_mut().unwrap().insert(
        "node.koordinator.sh/gpu-driver-version".to_string(),
        "470.1".to_string(),
    );
    assert_eq!(
        desired.change_reason(&stored).as_deref(),
        Some("label node.koordinator.sh/gpu-driver-version changed")
    );
}

#[test]
fn gpu_model_labels_follow_upstreams_rewrites() {
    assert_eq!(
        gpu_model_label(&["NVIDIA A100 SXM4 80GB"]).unwrap(),
        "A100-SXM4-80GB"
    );
    assert_eq!(
        gpu_model_label(&["Tesla P100-PCIE-16GB"]).unwrap(),
        "Tesla-P100-PCIE-16GB"
    );
    assert_eq!(
        gpu_model_label(&["Tesla T4", "Tesla T4"]).unwrap(),
        "Tesla-T4"
    );
    assert_eq!(
        gpu_model_label(&["GeForce RTX 2080 Ti"]).unwrap(),
        "GeForce-RTX-2080-Ti"
    );
    assert_eq!(gpu_model_label(&["Tesla T4", "Tesla P40"]), None);
    assert_eq!(gpu_model_label(&[""]), None);
    assert_eq!(gpu_model_label(&[]), None);
    assert!(is_label_value("A100-SXM4-80GB"));
    assert!(!is_label_value("A100 (PCIe)"));
    assert!(!is_label_value(&"x".repeat(64)));

    // Mixed models: the label is left out and said so, vendor and driver stay.
    let mut other = gpu(1, "0000:3c:00.0", GIB);
    other.model = "Tesla T4".to_string();
    let snapshot = DeviceSnapshot {
        gpus: vec![gpu(0, "0000:3b:00.0", GIB), other],
        gpu_driver_version: Some("535 beta (custom)".to_string()),
        ..DeviceSnapshot::default()
    };
    let desired = build_desired_device(&snapshot, &now());
    assert_eq!(
        desired.labels.keys().collect::<Vec<_>>(),
        ["node.koordinator.sh/gpu-vendor"]
    );
    assert_eq!(desired.problems.len(), 2, "{:?}", desired.problems);
}

#[test]
fn unhealthy_reasons_are_made_valid_condition_reasons() {
    let mut odd = gpu(0, "0000:3b:00.0", GIB);
    odd.health = DeviceHealth::Unhealthy {
        code: "42 bad-code!".to_string(),
        message: "m".repeat(5000),
    };
    let info = spec::gpu_device_info(&odd, &now()).unwrap();
    let condition = &info.conditions.unwrap()[0];
    assert_eq!(condition.reason, "Unknown");
    assert!(condition.message.len() < 1100);
}

#[test]
fn oversized_and_garbage_sysfs_files_are_clear_errors() {
    let sys = SysTree::new();
    let big = sys.add_pci(
        &["pci0000:3a", "0000:3a:00.0", "0000:3b:00.0"],
        "0",
        "0x030200",
    );
    std::fs::write(
        big.join("numa_node"),
        vec![b'1'; MAX_ATTR_BYTES as usize + 1],
    )
    .unwrap();
    let garbage = sys.add_pci(
        &["pci0000:3a", "0000:3a:01.0", "0000:3c:00.0"],
        "zero",
        "0x030200",
    );
    let binary = sys.add_pci(
        &["pci0000:3a", "0000:3a:02.0", "0000:3d:00.0"],
        "0",
        "0x030200",
    );
    std::fs::write(binary.join("numa_node"), [0xff, 0xfe, 0x00]).unwrap();
    let far = sys.add_pci(
        &["pci0000:3a", "0000:3a:03.0", "0000:3e:00.0"],
        "99999",
        "0x030200",
    );
    let _ = (garbage, far);
    let pci = PciSysfs::new(sys.root());
    let err = pci.topology("0000:3b:00.0").unwrap_err();
    assert!(
        matches!(err, DiscoveryError::TooLarge { limit: 4096, .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("numa_node is larger than 4096 bytes"),
        "{err}"
    );
    let err = pci.topology("0000:3c:00.0").unwrap_err();
    assert!(
        err.to_string()
            .contains("\"zero\" is not a NUMA node number"),
        "{err}"
    );
    let err = pci.topology("0000:3d:00.0").unwrap_err();
    assert!(err.to_string().contains("not UTF-8"), "{err}");
    let err = pci.topology("0000:3e:00.0").unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    // A name from outside never reaches a path unchecked.
    let err = pci.topology("../../etc").unwrap_err();
    assert!(err.to_string().contains("is not a PCI address"), "{err}");

    // Discovery keeps the GPUs, without topology, and says why.
    let nvml = FakeNvml::new(vec![
        gpu(0, "0000:3b:00.0", GIB),
        gpu(1, "0000:3c:00.0", GIB),
    ]);
    let snapshot = discover_all(&sources(vec![nvml]), &pci);
    assert_eq!(snapshot.gpus.len(), 2);
    assert!(snapshot.gpus.iter().all(|gpu| gpu.topology.is_none()));
    assert_eq!(snapshot.problems.len(), 2, "{:?}", snapshot.problems);
    let desired = build_desired_device(&snapshot, &now());
    assert!(desired.devices.iter().all(|d| d.topology.is_none()));
}

#[test]
fn garbage_rdma_attributes_skip_the_nic_and_too_many_devices_fail_the_source() {
    let sys = SysTree::new();
    let pf = sys.add_pci(
        &["pci0000:5d", "0000:5d:00.0", "0000:5e:00.0"],
        "1",
        "0x020000",
    );
    std::fs::write(pf.join("sriov_numvfs"), "lots\n").unwrap();
    sys.add_ib("mlx5_0", &pf, &["4: ACTIVE"]);
    let unnamed = sys.add_pci(
        &["pci0000:85", "0000:85:00.0", "0000:86:00.0"],
        "1",
        "0x020000",
    );
    sys.add_ib("irdma0", &unnamed, &["4: ACTIVE"]);
    let bad_class = sys.add_pci(
        &["pci0000:85", "0000:85:01.0", "0000:87:00.0"],
        "1",
        "banana",
    );
    sys.add_ib("mlx5_3", &bad_class, &["4: ACTIVE"]);
    let source = RdmaSysfsSource::new(sys.root());
    let found = source.discover().unwrap();
    assert!(found.rdma.is_empty(), "{:?}", found.rdma);
    let problems = found.problems.join("\n");
    assert!(
        problems.contains("\"lots\" is not a VF count"),
        "{problems}"
    );
    assert!(
        problems.contains("irdma0 on 0000:86:00.0 has no minor"),
        "{problems}"
    );
    assert!(
        problems.contains("\"banana\" is not a PCI class code"),
        "{problems}"
    );

    // A port state file too large: unhealthy, not an error.
    let sys = SysTree::new();
    let pf = sys.add_pci(
        &["pci0000:5d", "0000:5d:00.0", "0000:5e:00.0"],
        "1",
        "0x020000",
    );
    sys.add_ib("mlx5_0", &pf, &["4: ACTIVE"]);
    std::fs::write(
        sys.root().join("class/infiniband/mlx5_0/ports/1/state"),
        "ACTIVE ".repeat(1000),
    )
    .unwrap();
    let found = RdmaSysfsSource::new(sys.root()).discover().unwrap();
    assert!(!found.rdma[0].healthy);

    // More RDMA devices than the bound.
    let sys = SysTree::new();
    let dir = sys.root().join("class/infiniband");
    for index in 0..=MAX_IB_DEVICES {
        std::fs::create_dir_all(dir.join(format!("mlx5_{index}"))).unwrap();
    }
    let err = RdmaSysfsSource::new(sys.root()).discover().unwrap_err();
    assert!(
        matches!(
            err,
            DiscoveryError::TooManyEntries {
                limit: MAX_IB_DEVICES,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_node_without_devices_has_an_empty_snapshot() {
    let sys = SysTree::new();
    let snapshot = discover_all(
        &sources(vec![Arc::new(RdmaSysfsSource::new(sys.root()))]),
        &PciSysfs::new(sys.root()),
    );
    assert!(snapshot.is_empty() && snapshot.problems.is_empty());
    let desired = build_desired_device(&snapshot, &now());
    assert!(desired.is_empty() && desired.labels.is_empty());
}

#[test]
fn addresses_roots_and_minors_parse_strictly() {
    assert!(is_pci_address("0000:3b:00.0"));
    assert!(!is_pci_address("0000:3B:00.0"));
    assert!(!is_pci_address("0000:3b:00.8"));
    assert!(!is_pci_address("3b:00.0"));
    assert_eq!(
        normalize_bus_id("00000000:3B:00.0").as_deref(),
        Some("0000:3b:00.0")
    );
    assert_eq!(
        normalize_bus_id("0000:3b:00.0").as_deref(),
        Some("0000:3b:00.0")
    );
    assert_eq!(normalize_bus_id("00010000:3B:00.0"), None);
    assert_eq!(normalize_bus_id("garbage"), None);
    assert_eq!(
        pcie_root_of(Path::new("devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0")),
        "pci0000:3a"
    );
    assert_eq!(pcie_root_of(Path::new("devices/platform/foo")), "");
    assert_eq!(rdma_minor("mlx5_3"), Some(3));
    assert_eq!(rdma_minor("mlx4_10"), Some(10));
    assert_eq!(rdma_minor("mlx5_"), None);
    assert_eq!(rdma_minor("irdma0"), None);
    assert_eq!(rdma_minor("mlx_1"), None);
}

#[test]
fn the_capability_rows_say_what_was_found_and_whether_it_is_reported() {
    let sys = rdma_tree();
    let snapshot = discover_all(
        &sources(vec![Arc::new(RdmaSysfsSource::new(sys.root()))]),
        &PciSysfs::new(sys.root()),
    );
    let off =
        DevicesCapability::from_discovery(Some("no library".to_string()), &snapshot, false, false);
    assert!(!off.nvml);
    assert_eq!(off.nvml_detail, "no NVML: no library");
    assert_eq!((off.gpus, off.rdma_nics, off.rdma_vfs), (0, 2, 12));
    let rows = off.rows();
    assert_eq!(rows[0].0, "devices.nvml");
    assert_eq!(rows[3], (
        "devices.report",
        "false".to_string(),
        "not reported: feature gate Accelerators is off (upstream's default); RDMA also needs RDMADevices".to_string()
    ));
    assert_eq!(rows[4].0, "devices.rdmaInject");
    assert_eq!(rows[5].0, "devices.problems");
    let on = DevicesCapability::from_discovery(None, &snapshot, true, true);
    assert_eq!(on.rows()[3].1, "true");
    let empty = DevicesCapability::from_discovery(None, &DeviceSnapshot::default(), true, true);
    assert_eq!(empty.rows()[3].1, "false");
    assert!(empty.report.contains("no GPU or RDMA device"));
    assert_eq!(DeviceType::Rdma.as_str(), "rdma");
}

#[test]
fn the_rdma_inject_row_checks_rdma_cm_and_a_uverbs_device_per_function() {
    use super::capability::rdma_inject_check;
    let sys = rdma_tree();
    let snapshot = discover_all(
        &sources(vec![Arc::new(RdmaSysfsSource::new(sys.root()))]),
        &PciSysfs::new(sys.root()),
    );
    let (ok, detail) = rdma_inject_check(sys.root(), &snapshot);
    assert!(!ok);
    assert!(detail.starts_with("no rdma_cm"), "{detail}");
    let write = |path: std::path::PathBuf, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(sys.root().join("class/misc/rdma_cm/dev"), "10:58\n");
    // The PF with VFs is exposed through its VFs, the other through itself.
    let mut functions: Vec<String> = snapshot.rdma[0].vfs.clone().unwrap();
    functions.push(snapshot.rdma[1].bus_id.clone());
    assert_eq!(functions.len(), 13);
    let (ok, detail) = rdma_inject_check(sys.root(), &snapshot);
    assert!(!ok);
    assert!(detail.contains("uverbs for 0/13"), "{detail}");
    for (index, bdf) in functions.iter().enumerate() {
        write(
            sys.root()
                .join("bus/pci/devices")
                .join(bdf)
                .join(format!("infiniband_verbs/uverbs{index}/dev")),
            &format!("231:{}\n", 192 + index),
        );
    }
    let (ok, detail) = rdma_inject_check(sys.root(), &snapshot);
    assert!(ok, "{detail}");
    assert_eq!(detail, "rdma_cm 10:58; uverbs for 13/13 PCI functions");
    assert!(!rdma_inject_check(sys.root(), &DeviceSnapshot::default()).0);
}

#[test]
fn the_report_follows_upstreams_gates() {
    use super::reporter::report_gates;
    assert_eq!(report_gates(""), (false, false));
    assert_eq!(report_gates("RDMADevices=true"), (false, false));
    assert_eq!(report_gates("Accelerators=true"), (true, false));
    assert_eq!(
        report_gates("BECPUEvict=true,Accelerators=true,RDMADevices=true"),
        (true, true)
    );
    assert_eq!(
        report_gates("Accelerators=false,RDMADevices=true"),
        (false, false)
    );
}

/// Fake NVML events: a queue a test fills; an empty queue times out.
struct FakeEvents {
    queue: std::collections::VecDeque<Result<Option<health::GpuEvent>, String>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl health::GpuEventSource for FakeEvents {
    fn wait(&mut self, _timeout: std::time::Duration) -> Result<Option<health::GpuEvent>, String> {
        match self.queue.pop_front() {
            Some(next) => next,
            None => {
                // Everything delivered: end the watch.
                self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(None)
            }
        }
    }
}

fn two_gpu_tree() -> (SysTree, Vec<GpuInfo>) {
    let sys = SysTree::new();
    for bus in ["0000:3b:00.0", "0000:86:00.0"] {
        sys.add_pci(&["pci0000:3a", "0000:3a:00.0", bus], "0", "0x030200");
    }
    let gpus = vec![
        gpu(0, "0000:3b:00.0", 80 * GIB),
        gpu(1, "0000:86:00.0", 80 * GIB),
    ];
    (sys, gpus)
}

fn watch(events: Vec<Result<Option<health::GpuEvent>, String>>, book: &health::GpuHealthBook) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut source = FakeEvents {
        queue: events.into(),
        stop: stop.clone(),
    };
    let gpus = vec!["0000:3b:00.0".to_string(), "0000:86:00.0".to_string()];
    health::watch_health(
        &mut source,
        book,
        &gpus,
        &stop,
        std::time::Duration::from_millis(1),
    );
}

fn health_of(desired: &DesiredDevice) -> Vec<(bool, Option<String>)> {
    desired
        .devices
        .iter()
        .map(|info| {
            (
                info.health,
                info.conditions
                    .as_ref()
                    .map(|conditions| conditions[0].reason.clone()),
            )
        })
        .collect()
}

#[test]
fn a_critical_xid_event_turns_that_gpu_unhealthy_in_the_device() {
    let (sys, gpus) = two_gpu_tree();
    let book = health::GpuHealthBook::new();
    let tracked: Arc<dyn DeviceSource> = Arc::new(health::HealthTrackedSource::new(
        FakeNvml::new(gpus),
        book.clone(),
    ));
    let pci = PciSysfs::new(sys.root());
    let before = build_desired_device(&discover_all(std::slice::from_ref(&tracked), &pci), &now());
    assert_eq!(health_of(&before), vec![(true, None), (true, None)]);

    watch(
        vec![
            // Application errors leave the GPU healthy (upstream's list).
            Ok(Some(health::GpuEvent::CriticalXid {
                bus_id: Some("0000:3b:00.0".to_string()),
                xid: 13,
            })),
            // A failing wait is logged and retried, not fatal.
            Err("Unknown Error".to_string()),
            Ok(None),
            Ok(Some(health::GpuEvent::CriticalXid {
                bus_id: Some("0000:86:00.0".to_string()),
                xid: 79,
            })),
            // An event for a GPU not watched is ignored.
            Ok(Some(health::GpuEvent::CriticalXid {
                bus_id: Some("0000:99:00.0".to_string()),
                xid: 48,
            })),
        ],
        &book,
    );
    let after = build_desired_device(&discover_all(&[tracked], &pci), &later());
    assert_eq!(
        health_of(&after),
        vec![(true, None), (false, Some("Xid79".to_string()))]
    );
    assert_eq!(
        after.devices[1].conditions.as_ref().unwrap()[0].message,
        "Xid error detected on device, error code: 79"
    );
    let mut stored = before.new_object(&node());
    assert_eq!(
        after.change_reason(&stored).as_deref(),
        Some("device health, resources or topology changed")
    );
    after.apply_to(&mut stored);
    assert!(!stored.spec.devices.as_ref().unwrap()[1].health);
}

#[test]
fn an_xid_without_a_gpu_hits_all_and_unsupported_gpus_are_unhealthy() {
    let (sys, gpus) = two_gpu_tree();
    let pci = PciSysfs::new(sys.root());

    let book = health::GpuHealthBook::new();
    watch(
        vec![Ok(Some(health::GpuEvent::CriticalXid {
            bus_id: None,
            xid: 62,
        }))],
        &book,
    );
    let tracked: Arc<dyn DeviceSource> = Arc::new(health::HealthTrackedSource::new(
        FakeNvml::new(gpus.clone()),
        book,
    ));
    let desired = build_desired_device(&discover_all(&[tracked], &pci), &now());
    let xid62 = Some("Xid62".to_string());
    assert_eq!(
        health_of(&desired),
        vec![(false, xid62.clone()), (false, xid62)]
    );

    let book = health::GpuHealthBook::new();
    watch(
        vec![Ok(Some(health::GpuEvent::HealthCheckNotSupported {
            bus_id: "0000:3b:00.0".to_string(),
        }))],
        &book,
    );
    let tracked: Arc<dyn DeviceSource> =
        Arc::new(health::HealthTrackedSource::new(FakeNvml::new(gpus), book));
    let desired = build_desired_device(&discover_all(&[tracked], &pci), &now());
    assert_eq!(
        health_of(&desired),
        vec![
            (false, Some(health::HEALTH_CHECK_NOT_SUPPORTED.to_string())),
            (true, None)
        ]
    );
}

#[test]
fn discovery_failures_keep_their_reason_over_a_later_xid() {
    let (sys, mut gpus) = two_gpu_tree();
    gpus[0].health = DeviceHealth::Unhealthy {
        code: "GpuLost".to_string(),
        message: "NVML cannot read the PCI address: GPU is lost".to_string(),
    };
    let book = health::GpuHealthBook::new();
    watch(
        vec![Ok(Some(health::GpuEvent::CriticalXid {
            bus_id: Some("0000:3b:00.0".to_string()),
            xid: 79,
        }))],
        &book,
    );
    let tracked: Arc<dyn DeviceSource> =
        Arc::new(health::HealthTrackedSource::new(FakeNvml::new(gpus), book));
    let desired = build_desired_device(
        &discover_all(&[tracked], &PciSysfs::new(sys.root())),
        &now(),
    );
    assert_eq!(
        health_of(&desired),
        vec![(false, Some("GpuLost".to_string())), (true, None)]
    );
}

#[test]
fn nvml_processes_join_their_latest_utilisation_sample_bounded() {
    use super::nvml::join_process_usage;
    let joined = join_process_usage(
        // pid 30 has no sample: left out, as upstream.
        &[
            (20, Some(GIB)),
            (10, None),
            (30, Some(GIB)),
            (20, Some(GIB)),
        ],
        &[
            (10, 5, 40),
            (20, 1, 10),
            (20, 9, 35),
            (20, 3, 99),
            (10, 7, 250),
        ],
    );
    assert_eq!(
        joined,
        vec![
            GpuProcessUsage {
                pid: 10,
                sm_util: 100,
                memory_used: Bytes(0)
            },
            GpuProcessUsage {
                pid: 20,
                sm_util: 35,
                memory_used: Bytes(GIB)
            },
        ]
    );
    let many: Vec<(u32, Option<u64>)> = (0..5000).map(|pid| (pid, Some(1))).collect();
    let samples: Vec<(u32, u64, u32)> = (0..5000).map(|pid| (pid, 1, 1)).collect();
    assert_eq!(
        join_process_usage(&many, &samples).len(),
        MAX_PROCESSES_PER_GPU
    );
}

// ---- XPU device-info files: GPUs with peer links and partitions ----

use super::xpu::{
    MAX_DEVICES, MAX_FILE_BYTES, MAX_LINKS_PER_DEVICE, XpuDeviceInfoSource, read_device_infos_dir,
};

/// A device-info directory with the given files.
fn device_infos_dir(files: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new("xpu-device-infos").unwrap();
    for (name, content) in files {
        std::fs::write(dir.path().join(name), content).unwrap();
    }
    dir
}

/// Upstream's `Test_reportXPUDevice` devices (Huawei Ascend-910B, HCCS
/// links, one peer list with garbage, one device unhealthy), as the file a
/// device daemon writes.
fn upstream_ascend_file() -> String {
    let resources = json!({
        "huawei.com/npu-core": "32",
        "huawei.com/npu-cpu": "14",
        "koordinator.sh/gpu-memory": "32Gi",
        "huawei.com/npu-dvpp": "100"
    });
    let device =
        |uuid: &str, minor: &str, links: Option<Value>, node: &str, bus: &str, status: Value| {
            let mut topology =
                json!({"socketID": "0", "nodeID": node, "pcieID": "0000:00:08.0", "busID": bus});
            if let Some(links) = links {
                topology["p2pLinks"] = links;
                topology["mustHonorPartition"] = json!(true);
            }
            let mut device = json!({"vendor": "huawei", "model": "Ascend-910B", "uuid": uuid,
            "minor": minor, "resources": resources, "topology": topology});
            if !status.is_null() {
                device["status"] = status;
            }
            device
        };
    json!([
        device(
            "185011D4-21104518-A0C4ED94-14CC040A-56102003",
            "0",
            Some(json!([{"peerMinor": "1,2,3,g", "type": "HCCS"}])),
            "0",
            "0000:00:08.0",
            json!({"healthy": true})
        ),
        device(
            "185011D4-21104518-A0C4ED94-14CC040A-56102001",
            "1",
            Some(json!([{"peerMinor": "0,1,2,3", "type": "HCCS"}])),
            "1",
            "0000:00:08.1",
            json!({"healthy": true})
        ),
        device(
            "185011D4-21104518-A0C4ED94-14CC040A-56102002",
            "2",
            None,
            "2",
            "0000:00:08.2",
            Value::Null
        ),
        device(
            "185011D4-21104518-A0C4ED94-14CC040A-56102004",
            "4",
            Some(json!([{"peerMinor": "5,6,7,7,g", "type": "HCCS"}])),
            "4",
            "0000:00:08.4",
            json!({"healthy": false, "errCode": "-8001"})
        ),
    ])
    .to_string()
}

#[test]
fn upstreams_ascend_devices_become_its_device_field_by_field_and_replace_nvml() {
    let dir = device_infos_dir(&[("huawei-Ascend-910B.json", &upstream_ascend_file())]);
    let sys = SysTree::new();
    // NVML also sees GPUs: with device-info files present they are not reported.
    let nvml = FakeNvml::new(vec![gpu(1, "0000:3b:00.0", 8 * GIB)]);
    let all = sources(vec![Arc::new(XpuDeviceInfoSource::new(dir.path())), nvml]);
    let snapshot = discover_all(&all, &PciSysfs::new(sys.root()));
    assert!(snapshot.report_blocking_failures.is_empty());
    assert_eq!(snapshot.xpus.len(), 4);
    let desired = build_desired_device(&snapshot, &now());

    let resources = json!({
        "huawei.com/npu-core": "32",
        "huawei.com/npu-cpu": "14",
        "huawei.com/npu-dvpp": "100",
        "koordinator.sh/gpu-memory": "32Gi",
        "koordinator.sh/gpu-memory-ratio": "100"
    });
    let healthy = json!([{"type": "Healthy", "status": "True", "reason": "DeviceHealthy",
        "message": "device is healthy", "lastTransitionTime": "2026-01-02T03:04:05Z"}]);
    let topology = |node: i32, bus: &str| json!({"socketID": -1, "nodeID": node, "pcieID": "0000:00:08.0", "busID": bus});
    assert_eq!(
        as_json(&desired),
        json!([
            {"type": "gpu", "id": "185011D4-21104518-A0C4ED94-14CC040A-56102003", "minor": 0,
             "health": true, "resources": resources, "topology": topology(0, "0000:00:08.0"),
             "conditions": healthy},
            {"type": "gpu", "id": "185011D4-21104518-A0C4ED94-14CC040A-56102001", "minor": 1,
             "health": true, "resources": resources, "topology": topology(1, "0000:00:08.1"),
             "conditions": healthy},
            {"type": "gpu", "id": "185011D4-21104518-A0C4ED94-14CC040A-56102002", "minor": 2,
             "health": true, "resources": resources, "topology": topology(2, "0000:00:08.2")},
            // Upstream writes the code `-8001` as the reason, which the API
            // server refuses for a condition; it goes into the message here.
            {"type": "gpu", "id": "185011D4-21104518-A0C4ED94-14CC040A-56102004", "minor": 4,
             "health": false, "resources": resources, "topology": topology(4, "0000:00:08.4"),
             "conditions": [{"type": "Healthy", "status": "False", "reason": "Unknown",
                "message": "device is unhealthy (error code -8001)",
                "lastTransitionTime": "2026-01-02T03:04:05Z"}]},
        ])
    );
    assert_eq!(
        desired.labels,
        BTreeMap::from([
            (
                "node.koordinator.sh/gpu-model".to_string(),
                "Ascend-910B".to_string()
            ),
            (
                "node.koordinator.sh/gpu-partition-policy".to_string(),
                "Honor".to_string()
            ),
            (
                "node.koordinator.sh/gpu-vendor".to_string(),
                "huawei".to_string()
            ),
        ])
    );
    // Upstream's expected annotation, byte for byte.
    assert_eq!(
        desired.annotations["scheduling.koordinator.sh/gpu-partitions"],
        r#"{"4":[{"minors":[0,1,2,3],"gpuLinkType":"HCCS","allocationScore":1},{"minors":[4,5,6,7],"gpuLinkType":"HCCS","allocationScore":1}]}"#
    );
    // The garbage peer minors and the NVML GPUs are reported as problems.
    assert!(
        desired.problems.iter().any(|p| p.contains("\"g\"")),
        "{:?}",
        desired.problems
    );
    assert!(
        desired
            .problems
            .iter()
            .any(|p| p.contains("NVML GPUs not reported")),
        "{:?}",
        desired.problems
    );
    let object = serde_json::to_value(desired.new_object(&node())).unwrap();
    assert_eq!(
        object["metadata"]["annotations"]["scheduling.koordinator.sh/gpu-partitions"],
        desired.annotations["scheduling.koordinator.sh/gpu-partitions"]
    );
}

/// Eight NVIDIA GPUs as an NVLink (Hopper-style) board reports them: pairs,
/// quads and the whole board linked, two NUMA nodes, one PCIe root per pair.
fn eight_nvlink_gpus_file(must_honor: bool) -> String {
    let devices: Vec<Value> = (0..8)
        .map(|minor: i32| {
            let peers = |group: i32| -> String {
                let first = minor / group * group;
                (first..first + group)
                    .filter(|m| *m != minor)
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            json!({
                "vendor": "nvidia",
                "model": "H800",
                "uuid": format!("GPU-{minor:08}-0000-0000-0000-000000000000"),
                "minor": minor.to_string(),
                "resources": {"gpu-core": "100", "gpu-memory": "80Gi"},
                "topology": {
                    "p2pLinks": [
                        {"peerMinor": peers(2), "type": "NVLink"},
                        {"peerMinor": peers(4), "type": "NVLink"},
                        {"peerMinor": peers(8), "type": "NVLink"}
                    ],
                    "mustHonorPartition": must_honor,
                    "nodeID": (minor / 4).to_string(),
                    "pcieID": format!("pci0000:{:02x}", 0x10 * (minor / 2)),
                    "busID": format!("0000:{:02x}:00.0", 0x10 * (minor / 2) + 1 + minor % 2)
                },
                "status": {"healthy": true}
            })
        })
        .collect();
    Value::Array(devices).to_string()
}

#[test]
fn eight_nvlink_gpus_give_upstreams_partition_table_and_pcie_topology() {
    let dir = device_infos_dir(&[("nvidia-H800.json", &eight_nvlink_gpus_file(true))]);
    let snapshot = discover_all(
        &sources(vec![Arc::new(XpuDeviceInfoSource::new(dir.path()))]),
        &PciSysfs::new(dir.path()),
    );
    let desired = build_desired_device(&snapshot, &now());
    assert!(desired.problems.is_empty(), "{:?}", desired.problems);
    assert_eq!(desired.devices.len(), 8);
    let topologies: Vec<(i32, i32, String, String)> = desired
        .devices
        .iter()
        .map(|d| {
            let t = d.topology.as_ref().unwrap();
            (
                d.minor.unwrap(),
                t.node_id,
                t.pcie_id.clone(),
                t.bus_id.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        topologies[..3],
        [
            (0, 0, "pci0000:00".to_string(), "0000:01:00.0".to_string()),
            (1, 0, "pci0000:00".to_string(), "0000:02:00.0".to_string()),
            (2, 0, "pci0000:10".to_string(), "0000:11:00.0".to_string()),
        ]
    );
    assert_eq!(
        topologies[7],
        (7, 1, "pci0000:30".to_string(), "0000:32:00.0".to_string())
    );
    // The bare gpu-core / gpu-memory names get koordinator's domain.
    assert_eq!(
        serde_json::to_value(desired.devices[5].resources.as_ref().unwrap()).unwrap(),
        json!({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
               "koordinator.sh/gpu-memory-ratio": "100"})
    );
    // The table is the one upstream's scheduler builds in for Hopper boards.
    let table: Value =
        serde_json::from_str(&desired.annotations["scheduling.koordinator.sh/gpu-partitions"])
            .unwrap();
    let partition =
        |minors: &[i32]| json!({"minors": minors, "gpuLinkType": "NVLink", "allocationScore": 1});
    assert_eq!(
        table,
        json!({
            "2": [partition(&[0, 1]), partition(&[2, 3]), partition(&[4, 5]), partition(&[6, 7])],
            "4": [partition(&[0, 1, 2, 3]), partition(&[4, 5, 6, 7])],
            "8": [partition(&[0, 1, 2, 3, 4, 5, 6, 7])]
        })
    );
    assert_eq!(
        desired.labels["node.koordinator.sh/gpu-partition-policy"],
        "Honor"
    );
    assert_eq!(desired.labels["node.koordinator.sh/gpu-model"], "H800");
    assert_eq!(desired.labels["node.koordinator.sh/gpu-vendor"], "nvidia");
    // The scheduler reads it back with the API crate.
    let mut stored = desired.new_object(&node());
    let parsed =
        apis::extension::get_gpu_partition_table(stored.metadata.annotations.as_ref().unwrap())
            .unwrap()
            .unwrap();
    assert_eq!(parsed[&4][1].minors, vec![4, 5, 6, 7]);

    // Without mustHonorPartition the policy is Prefer; a change of the
    // label alone is a change.
    let dir = device_infos_dir(&[("nvidia-H800.json", &eight_nvlink_gpus_file(false))]);
    let prefer = build_desired_device(
        &discover_all(
            &sources(vec![Arc::new(XpuDeviceInfoSource::new(dir.path()))]),
            &PciSysfs::new(dir.path()),
        ),
        &now(),
    );
    assert_eq!(
        prefer.labels["node.koordinator.sh/gpu-partition-policy"],
        "Prefer"
    );
    assert_eq!(
        prefer.change_reason(&stored).as_deref(),
        Some("label node.koordinator.sh/gpu-partition-policy changed")
    );
    prefer.apply_to(&mut stored);
    assert_eq!(prefer.change_reason(&stored), None);
}

#[test]
fn losing_the_peer_links_removes_the_table_and_policy_and_keeps_foreign_annotations() {
    let dir = device_infos_dir(&[("nvidia-H800.json", &eight_nvlink_gpus_file(true))]);
    let source: Vec<Arc<dyn DeviceSource>> = vec![Arc::new(XpuDeviceInfoSource::new(dir.path()))];
    let pci = PciSysfs::new(dir.path());
    let linked = build_desired_device(&discover_all(&source, &pci), &now());
    let mut stored = linked.new_object(&node());
    stored
        .metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert("team".to_string(), "ml".to_string());
    assert_eq!(linked.change_reason(&stored), None);

    let unlinked: Vec<Value> = serde_json::from_str::<Vec<Value>>(&eight_nvlink_gpus_file(true))
        .unwrap()
        .into_iter()
        .map(|mut device| {
            device["topology"]
                .as_object_mut()
                .unwrap()
                .remove("p2pLinks");
            device
        })
        .collect();
    std::fs::write(
        dir.path().join("nvidia-H800.json"),
        Value::Array(unlinked).to_string(),
    )
    .unwrap();
    let plain = build_desired_device(&discover_all(&source, &pci), &now());
    assert!(plain.annotations.is_empty());
    assert!(
        !plain
            .labels
            .contains_key("node.koordinator.sh/gpu-partition-policy")
    );
    assert_eq!(
        plain.change_reason(&stored).as_deref(),
        Some("label node.koordinator.sh/gpu-partition-policy changed")
    );
    plain.apply_to(&mut stored);
    assert_eq!(
        stored.metadata.annotations,
        Some(BTreeMap::from([("team".to_string(), "ml".to_string())]))
    );
    assert_eq!(plain.change_reason(&stored), None);
}

#[test]
fn garbage_oversized_and_unbounded_device_info_files_keep_the_last_report() {
    // No directory: no daemon, no devices, nothing blocks the report.
    let missing = TempDir::new("xpu-missing").unwrap();
    assert_eq!(
        read_device_infos_dir(&missing.path().join("absent")).unwrap(),
        vec![]
    );
    // A subdirectory is skipped, `null` and `[]` are no devices.
    let dir = device_infos_dir(&[("a.json", "null"), ("b.json", "[]")]);
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    assert_eq!(read_device_infos_dir(dir.path()).unwrap(), vec![]);

    let check = |files: &[(&str, &str)], expected: &str| {
        let dir = device_infos_dir(files);
        let err = read_device_infos_dir(dir.path()).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
        // Through discovery, the failure blocks the report instead of
        // dropping the devices; the other sources still ran.
        let nvml = FakeNvml::new(vec![gpu(0, "0000:3b:00.0", GIB)]);
        let snapshot = discover_all(
            &sources(vec![Arc::new(XpuDeviceInfoSource::new(dir.path())), nvml]),
            &PciSysfs::new(dir.path()),
        );
        assert_eq!(snapshot.report_blocking_failures.len(), 1);
        assert!(
            snapshot.report_blocking_failures[0].starts_with("xpu-device-infos discovery failed"),
            "{:?}",
            snapshot.report_blocking_failures
        );
        assert!(snapshot.xpus.is_empty());
        assert_eq!(snapshot.gpus.len(), 1);
    };
    check(
        &[("bad.json", "{not json")],
        "bad.json: not a JSON list of device infos",
    );
    check(
        &[("object.json", r#"{"vendor": "nvidia"}"#)],
        "not a JSON list of device infos",
    );
    // A minor must be a string, as in upstream's Go type.
    check(
        &[("number.json", r#"[{"vendor": "nvidia", "minor": 0}]"#)],
        "not a JSON list of device infos",
    );
    let oversized = " ".repeat(MAX_FILE_BYTES as usize + 1);
    check(
        &[("big.json", &oversized)],
        &format!("is larger than {MAX_FILE_BYTES} bytes"),
    );
    let many: Vec<Value> = (0..=MAX_DEVICES)
        .map(|m| json!({"minor": (m % 100).to_string()}))
        .collect();
    check(
        &[("many.json", &Value::Array(many).to_string())],
        &format!("has more than {MAX_DEVICES} entries"),
    );
    let links: Vec<Value> = (0..=MAX_LINKS_PER_DEVICE)
        .map(|_| json!({"peerMinor": "1", "type": "NVLink"}))
        .collect();
    check(
        &[(
            "links.json",
            &json!([{"uuid": "u", "minor": "0", "topology": {"p2pLinks": links}}]).to_string(),
        )],
        &format!("more than {MAX_LINKS_PER_DEVICE}"),
    );
}

#[test]
fn unusable_device_info_fields_are_left_out_each_with_a_problem() {
    let file = json!([
        {"vendor": "acme", "model": "X 1", "uuid": "a", "minor": "x"},
        {"vendor": "acme", "model": "X 1", "uuid": "b", "minor": "1",
         "resources": {"gpu-core": "lots", "bad name!": "1", "acme.com/cores": "-2", "acme.com/mem": "16Gi"},
         "topology": {"nodeID": "zero", "pcieID": "p", "busID": ""}},
        {"vendor": "acme", "model": "X 1", "uuid": "c", "minor": "1"},
        {"vendor": "acme", "model": "X 1", "uuid": "d", "minor": "200"}
    ])
    .to_string();
    let dir = device_infos_dir(&[("acme.json", &file)]);
    let snapshot = discover_all(
        &sources(vec![Arc::new(XpuDeviceInfoSource::new(dir.path()))]),
        &PciSysfs::new(dir.path()),
    );
    let desired = build_desired_device(&snapshot, &now());
    assert_eq!(
        as_json(&desired),
        json!([{"type": "gpu", "id": "b", "minor": 1, "health": true,
            "resources": {"acme.com/mem": "16Gi", "koordinator.sh/gpu-memory-ratio": "100"},
            "topology": {"socketID": -1, "nodeID": -1, "pcieID": "p"}}])
    );
    // The model has a space: no model label; the vendor is fine.
    assert_eq!(
        desired.labels,
        BTreeMap::from([(
            "node.koordinator.sh/gpu-vendor".to_string(),
            "acme".to_string()
        )])
    );
    let expect = [
        "minor \"x\" is not a number",
        "resource koordinator.sh/gpu-core",
        "resource name \"bad name!\"",
        "resource acme.com/cores",
        "nodeID \"zero\"",
        "minor 1 is already taken",
        "minor \"200\" is not a number from 0 to 127",
        "gpu-model left out",
    ];
    for expected in expect {
        assert!(
            desired.problems.iter().any(|p| p.contains(expected)),
            "{expected}: {:?}",
            desired.problems
        );
    }
}
