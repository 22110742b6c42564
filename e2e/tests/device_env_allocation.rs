#![allow(clippy::unwrap_used)]
//! The GPU environment koordlet injects, checked against the allocation the
//! scheduler really writes (no cluster): koord-scheduler's DeviceShare (the
//! default profile, through the simulator) places GPU pods on a node whose
//! Device lists four GPUs, and the `scheduling.koordinator.sh/device-allocated`
//! annotation it writes goes, as the runtime proxy would pass it, into
//! koordlet's GPUEnvInject hook. `NVIDIA_VISIBLE_DEVICES` must name exactly
//! the allocated minors, in every container.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use apis::runtime::v1alpha1 as wire;
use koord_scheduler::config::SchedulerConfiguration;
use koord_scheduler::simulator::{Placement, Snapshot, simulate};
use koordlet::runtimehooks::hooks::gpu::{GPU_ALLOC_ENV, GpuEnvInject};
use koordlet::runtimehooks::protocol::{
    Adjustment, ContainerContext, Hook, HookEnv, HookStage, NodeFeatures,
};
use koordlet::runtimehooks::rules::NodeRules;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};
use serde_json::Value;

const ALLOCATED: &str = "scheduling.koordinator.sh/device-allocated";

/// A node with four 16 GiB GPUs whose minors are not 0..4 (they follow the
/// `/dev/nvidia<minor>` nodes, not NVML's index), as koordlet reports them,
/// and the node resources the manager derives from it.
const NODE: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: gpu-node
status:
  allocatable:
    cpu: "32"
    memory: 64Gi
    pods: "110"
    nvidia.com/gpu: "4"
    koordinator.sh/gpu: "400"
    koordinator.sh/gpu-core: "400"
    koordinator.sh/gpu-memory: 64Gi
    koordinator.sh/gpu-memory-ratio: "400"
---
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Device
metadata:
  name: gpu-node
spec:
  devices:
  - type: gpu
    id: GPU-aaaaaaaa-0000-0000-0000-000000000001
    minor: 1
    health: true
    resources: {koordinator.sh/gpu-core: "100", koordinator.sh/gpu-memory: 16Gi, koordinator.sh/gpu-memory-ratio: "100"}
    topology: {socketID: -1, nodeID: 0, pcieID: pci0000:3a, busID: "0000:3b:00.0"}
  - type: gpu
    id: GPU-aaaaaaaa-0000-0000-0000-000000000003
    minor: 3
    health: true
    resources: {koordinator.sh/gpu-core: "100", koordinator.sh/gpu-memory: 16Gi, koordinator.sh/gpu-memory-ratio: "100"}
    topology: {socketID: -1, nodeID: 0, pcieID: pci0000:3a, busID: "0000:3c:00.0"}
  - type: gpu
    id: GPU-aaaaaaaa-0000-0000-0000-000000000004
    minor: 4
    health: true
    resources: {koordinator.sh/gpu-core: "100", koordinator.sh/gpu-memory: 16Gi, koordinator.sh/gpu-memory-ratio: "100"}
    topology: {socketID: -1, nodeID: 1, pcieID: pci0000:86, busID: "0000:87:00.0"}
  - type: gpu
    id: GPU-aaaaaaaa-0000-0000-0000-000000000006
    minor: 6
    health: true
    resources: {koordinator.sh/gpu-core: "100", koordinator.sh/gpu-memory: 16Gi, koordinator.sh/gpu-memory-ratio: "100"}
    topology: {socketID: -1, nodeID: 1, pcieID: pci0000:86, busID: "0000:88:00.0"}
"#;

const DEVICE_MINORS: [i64; 4] = [1, 3, 4, 6];

/// A pending pod with two containers; `requests` go on the first.
fn pod(name: &str, requests: &str) -> String {
    format!(
        r#"---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  uid: uid-{name}
spec:
  schedulerName: koord-scheduler
  containers:
  - name: main
    resources:
      requests: {{cpu: "1", {requests}}}
      limits: {{cpu: "1", {requests}}}
  - name: sidecar
    resources:
      requests: {{cpu: "100m"}}
"#
    )
}

fn schedule(pods: &[(&str, &str)]) -> BTreeMap<String, Placement> {
    let mut yaml = NODE.to_string();
    for (name, requests) in pods {
        yaml.push_str(&pod(name, requests));
    }
    let snapshot = Snapshot::from_yaml(&yaml).unwrap();
    assert!(snapshot.refused.is_empty(), "{:?}", snapshot.refused);
    let mut scheduler = koord_scheduler::build_scheduler(
        &SchedulerConfiguration::default(),
        Duration::from_secs(60),
    )
    .unwrap();
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let report = simulate(&mut scheduler, snapshot, Snapshot::default(), now);
    report
        .placements
        .into_iter()
        .map(|placement| (placement.pod.clone(), placement))
        .collect()
}

/// The minors of the `gpu` entries of the annotation, in its order.
fn allocated_minors(placement: &Placement) -> Vec<i64> {
    let text = placement
        .annotations
        .get(ALLOCATED)
        .unwrap_or_else(|| panic!("{} has no {ALLOCATED}: {placement:?}", placement.pod));
    let value: Value = serde_json::from_str(text).unwrap();
    value["gpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["minor"].as_i64().unwrap())
        .collect()
}

/// What GPUEnvInject adds at PreCreateContainer for `container`, given the
/// pod's annotations as the runtime proxy forwards them.
fn injected(placement: &Placement, container: &str) -> Adjustment {
    let (namespace, name) = placement.pod.split_once('/').unwrap();
    let request = wire::ContainerResourceHookRequest {
        pod_meta: Some(wire::PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: namespace.to_string(),
            attempt: 0,
        }),
        container_meta: Some(wire::ContainerMetadata {
            name: container.to_string(),
            attempt: 0,
            id: String::new(),
        }),
        pod_annotations: placement.annotations.clone().into_iter().collect(),
        pod_cgroup_parent: format!("/kubepods/burstable/poduid-{name}"),
        ..Default::default()
    };
    let context = ContainerContext::from(&request);
    let env = HookEnv {
        layout: CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
        rules: Arc::new(NodeRules::default()),
        features: NodeFeatures::default(),
    };
    let mut out = Adjustment::default();
    GpuEnvInject
        .container(HookStage::PreCreateContainer, &context, &env, &mut out)
        .unwrap();
    out
}

fn visible_devices(placement: &Placement, container: &str) -> Option<String> {
    injected(placement, container)
        .env
        .get(GPU_ALLOC_ENV)
        .cloned()
}

fn joined(minors: &[i64]) -> String {
    minors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn whole_gpus_are_the_visible_devices_in_every_container() {
    for requests in [r#"nvidia.com/gpu: "2""#, r#"koordinator.sh/gpu: "200""#] {
        let placements = schedule(&[("whole", requests)]);
        let placement = &placements["default/whole"];
        assert_eq!(placement.node.as_deref(), Some("gpu-node"), "{placement:?}");
        let minors = allocated_minors(placement);
        assert_eq!(minors.len(), 2, "{requests}: {placement:?}");
        assert!(
            minors.iter().all(|m| DEVICE_MINORS.contains(m)),
            "{minors:?}"
        );
        let expected = joined(&minors);
        assert_eq!(
            visible_devices(placement, "main"),
            Some(expected.clone()),
            "{requests}"
        );
        // The annotation is the pod's: the sidecar sees the same GPUs, as upstream.
        assert_eq!(visible_devices(placement, "sidecar"), Some(expected));
    }
}

#[test]
fn a_shared_gpu_is_the_one_allocated_minor() {
    let placements = schedule(&[
        ("share-a", r#"koordinator.sh/gpu-memory-ratio: "50""#),
        ("share-b", r#"koordinator.sh/gpu-memory-ratio: "50""#),
        ("whole", r#"nvidia.com/gpu: "2""#),
    ]);
    let a = &placements["default/share-a"];
    let b = &placements["default/share-b"];
    let whole = &placements["default/whole"];
    for placement in [a, b, whole] {
        assert_eq!(placement.node.as_deref(), Some("gpu-node"), "{placement:?}");
    }
    let minors_a = allocated_minors(a);
    let minors_b = allocated_minors(b);
    assert_eq!(minors_a.len(), 1, "{a:?}");
    // Shares pack (upstream's default): both halves on the same GPU.
    assert_eq!(minors_a, minors_b);
    assert_eq!(visible_devices(a, "main"), Some(joined(&minors_a)));
    assert_eq!(visible_devices(b, "main"), Some(joined(&minors_b)));
    // The whole GPUs avoid the shared one.
    let minors_whole = allocated_minors(whole);
    assert!(
        !minors_whole.contains(&minors_a[0]),
        "{minors_whole:?} vs {minors_a:?}"
    );
    assert_eq!(visible_devices(whole, "main"), Some(joined(&minors_whole)));
}

#[test]
fn a_pod_without_gpus_gets_no_visible_devices() {
    let placements = schedule(&[("plain", r#"memory: 1Gi"#)]);
    let placement = &placements["default/plain"];
    assert_eq!(placement.node.as_deref(), Some("gpu-node"));
    assert!(!placement.annotations.contains_key(ALLOCATED));
    assert_eq!(visible_devices(placement, "main"), None);
}
