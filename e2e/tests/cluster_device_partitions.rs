//! GPU partitions from the node to the scheduler on the local cluster:
//! 1. koordlet's XPU device-info reader and its pure core build the Device of a KWOK-simulated
//!    node from a device-info file describing 8 NVLink GPUs (pairs, quads and the whole board
//!    linked, `mustHonorPartition`), as the reporter would on such a node: the Device carries the
//!    `gpu-partitions` table and the `gpu-partition-policy: Honor` label. The test creates it.
//! 2. koord-manager turns it into GPU resources on the node.
//! 3. Pods asking for whole GPUs (`koordinator.sh/gpu: 200`, `400`, `300`) go through
//!    kube-scheduler and our extender: two GPUs get the pair 0-1, four then get the quad 4-7,
//!    three stay Pending with upstream's `node(s) Unsupported number of GPU requests`.
//!
//! Needs `KOORD_E2E_LOCAL_CLUSTER` (for `kwok up` and `kwok node`) and the chart's defaults
//! (DeviceShare on, the manager's GPUDeviceResource plugin and colocation on, the pod webhook).
//! Everything the test creates (namespace, node, NodeMetric, Device) is deleted afterwards,
//! also when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use anyhow::{Context, ensure};
use apis::extension::{DEVICE_TYPE_GPU, RESOURCE_GPU_CORE, get_device_allocations};
use apis::scheduling::v1alpha1::Device;
use e2e::cluster::{
    EXTENDER_RETRY, TestNamespace, delete_from_drop, eventually, eventually_within, pod,
    require_gpu_device_resource, simulated_node_with_heartbeat, unschedulable_message,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_common::testing::TempDir;
use koord_manager::slo_controller::node_meta::NodeResourcePlugins;
use koordlet::statesinformer::device::xpu::XpuDeviceInfoSource;
use koordlet::statesinformer::device::{
    DeviceSource, PciSysfs, build_desired_device, discover_all,
};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const NODE: &str = "koord-e2e-nvlink";
/// The taint of KWOK's simulated nodes (hack/local-cluster/lib.sh).
const FAKE_TAINT: &str = "kwok.x-k8s.io/node";
const PARTITIONS: &str = "scheduling.koordinator.sh/gpu-partitions";

/// Deletes the Device and the simulated node when the test ends, also when it fails.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let device = delete_from_drop(|client| async move {
            match Api::<Device>::all(client)
                .delete(NODE, &DeleteParams::background())
                .await
            {
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                other => other.map(|_| ()),
            }
        });
        let node = delete_from_drop(|client| async move {
            e2e::cluster::delete_simulated_node(&client, NODE).await
        });
        if !(device && node) {
            eprintln!("cleanup incomplete: delete the Device, node and NodeMetric {NODE} by hand");
        }
    }
}

/// The device-info file of 8 NVLink GPUs: each lists its pair, its quad and the whole board
/// as peers; GPUs 0-3 on NUMA node 0, 4-7 on node 1.
fn nvlink_board_file() -> String {
    let devices: Vec<Value> = (0..8)
        .map(|minor: i32| {
            let peers = |group: i32| {
                let first = minor / group * group;
                (first..first + group)
                    .filter(|m| *m != minor)
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            json!({
                "vendor": "nvidia", "model": "koord-e2e-nvlink",
                "uuid": format!("GPU-koord-e2e-nvlink-{minor}"), "minor": minor.to_string(),
                "resources": {"gpu-core": "100", "gpu-memory": "80Gi"},
                "topology": {
                    "p2pLinks": [
                        {"peerMinor": peers(2), "type": "NVLink"},
                        {"peerMinor": peers(4), "type": "NVLink"},
                        {"peerMinor": peers(8), "type": "NVLink"}
                    ],
                    "mustHonorPartition": true,
                    "nodeID": (minor / 4).to_string(),
                    "pcieID": format!("pci0000:{:02x}", 0x10 * (minor / 2)),
                    "busID": format!("0000:{:02x}:00.0", 0x10 * (minor / 2) + 1)
                },
                "status": {"healthy": true}
            })
        })
        .collect();
    Value::Array(devices).to_string()
}

/// The Device koordlet would report for `node` from the device-info file.
fn device_for(node: &Node) -> anyhow::Result<Device> {
    let infos = TempDir::new("e2e-xpu-device-infos")?;
    std::fs::write(infos.path().join("nvidia.json"), nvlink_board_file())?;
    let sources: Vec<Arc<dyn DeviceSource>> =
        vec![Arc::new(XpuDeviceInfoSource::new(infos.path()))];
    let snapshot = discover_all(&sources, &PciSysfs::new(infos.path()));
    ensure!(
        snapshot.problems.is_empty() && snapshot.report_blocking_failures.is_empty(),
        "reading the device-info file: {:?} {:?}",
        snapshot.problems,
        snapshot.report_blocking_failures
    );
    let desired = build_desired_device(&snapshot, &Time(k8s_openapi::jiff::Timestamp::now()));
    ensure!(
        desired.problems.is_empty() && desired.devices.len() == 8,
        "the device-info file did not give eight GPUs: {:?}",
        desired.problems
    );
    ensure!(
        desired.annotations.contains_key(PARTITIONS),
        "no partition table: {:?}",
        desired.annotations
    );
    Ok(desired.new_object(node))
}

/// A koord-scheduler pod on the test's node asking for `gpus` whole GPUs (`koordinator.sh/gpu`
/// in percent; the pod webhook turns it into gpu-core and gpu-memory-ratio).
fn gpu_pod(namespace: &str, name: &str, gpus: u32) -> anyhow::Result<Pod> {
    let resources = json!({"cpu": "10m", "memory": "16Mi",
                           "koordinator.sh/gpu": (gpus * 100).to_string()});
    pod(
        namespace,
        name,
        json!({
            "spec": {
                "schedulerName": "koord-scheduler",
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "tolerations": [{"key": FAKE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {"requests": resources.clone(), "limits": resources}
                }]
            }
        }),
    )
}

/// The GPU minors DeviceShare allocated to the pod once it is bound to the test's node.
async fn bound_minors(pods: &Api<Pod>, name: &str) -> anyhow::Result<Vec<i32>> {
    let pod = eventually_within(&format!("{name} bound"), EXTENDER_RETRY, || async {
        let pod = pods.get(name).await?;
        Ok(pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
            .then_some(pod))
    })
    .await?;
    let bound_to = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    ensure!(
        bound_to.as_deref() == Some(NODE),
        "{name} bound to {bound_to:?}"
    );
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let allocations = get_device_allocations(&annotations)
        .context("the device-allocated annotation")?
        .with_context(|| format!("{name} has no device allocation: {annotations:?}"))?;
    let mut minors: Vec<i32> = allocations
        .get(DEVICE_TYPE_GPU)
        .into_iter()
        .flatten()
        .map(|a| a.minor)
        .collect();
    minors.sort_unstable();
    Ok(minors)
}

#[tokio::test]
async fn nvlink_partitions_from_device_infos_place_whole_gpu_pods_by_partition()
-> anyhow::Result<()> {
    let test = "nvlink_partitions_from_device_infos_place_whole_gpu_pods_by_partition";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    require_gpu_device_resource(&client, |selected| {
        NodeResourcePlugins::from_flag(selected).gpu_device_resource
    })
    .await?;
    let _cleanup = Cleanup;
    let beating = simulated_node_with_heartbeat(&client, NODE, "16", "32Gi", json!({})).await?;
    let result = run(&client).await;
    beating.abort();
    result
}

async fn run(client: &kube::Client) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(NODE).await.context("the simulated node")?;
    Api::<Device>::all(client.clone())
        .create(&PostParams::default(), &device_for(&node)?)
        .await
        .context("creating the Device")?;
    eventually(
        &format!("{RESOURCE_GPU_CORE} 800 on node {NODE}"),
        || async {
            let current = nodes.get(NODE).await?;
            Ok(current
                .status
                .and_then(|s| s.allocatable)
                .and_then(|list| list.get(RESOURCE_GPU_CORE).cloned())
                .filter(|quantity| quantity.0 == "800")
                .map(|_| ()))
        },
    )
    .await?;

    let namespace = TestNamespace::create(client, "koord-e2e-nvlink").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let create = PostParams::default();

    // Two GPUs: the first free pair.
    pods.create(&create, &gpu_pod(ns, "pair", 2)?).await?;
    let pair = bound_minors(&pods, "pair").await?;
    ensure!(pair == [0, 1], "two GPUs got {pair:?}, not the pair 0-1");

    // Four GPUs: the quad 0-3 is broken by the pair, so 4-7.
    pods.create(&create, &gpu_pod(ns, "quad", 4)?).await?;
    let quad = bound_minors(&pods, "quad").await?;
    ensure!(
        quad == [4, 5, 6, 7],
        "four GPUs got {quad:?}, not the quad 4-7"
    );

    // Three GPUs: the honoured table has no partition of three.
    pods.create(&create, &gpu_pod(ns, "three", 3)?).await?;
    let reason = unschedulable_message(&pods, "three", EXTENDER_RETRY).await?;
    ensure!(
        reason.contains("node(s) Unsupported number of GPU requests"),
        "the 3-GPU pod's reason does not name the partition table: {reason}"
    );
    Ok(())
}
