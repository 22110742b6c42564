//! GPU sharing from the node up on the local cluster, with a fake device tree in place of real
//! GPUs:
//! 1. koordlet's device discovery (`discover_all` over a fake NVML source and a generated PCI
//!    sysfs tree) and its pure core (`build_desired_device`) build the real node's Device, as the
//!    reporter would on a GPU node; the test creates it.
//! 2. koord-manager turns it into GPU resources on the Node.
//! 3. A pod asking for `koordinator.sh/gpu-memory-ratio: 50` is placed by kube-scheduler with
//!    our extender; DeviceShare writes the allocation annotation at bind.
//! 4. koordlet's GPUEnvInject hook (through NRI) gives the container `NVIDIA_VISIBLE_DEVICES`
//!    of the allocated GPU, which the container prints.
//!
//! A second pod asking for a whole GPU (`koordinator.sh/gpu: 100`) gets the other GPU.
//!
//! Needs: koordlet's gate `GPUEnvInject=true` (chart value `koordlet.runtimeHooks.gpuEnvInject`)
//! with NRI hooks on (the chart's default), the manager's GPUDeviceResource plugin and colocation
//! on (chart defaults). For its duration the test gives the real node LoadAware thresholds
//! without CPU (the machine's own load is not what is tested). Everything the test creates is
//! deleted afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail, ensure};
use apis::extension::{
    DEVICE_TYPE_GPU, DeviceAllocation, RESOURCE_GPU_MEMORY_RATIO, get_device_allocations,
};
use apis::scheduling::v1alpha1::Device;
use e2e::cluster::{
    DeviceCleanup, EXTENDER_RETRY, KOORD_NAMESPACE, TestNamespace, eventually,
    require_gpu_device_resource, running_pod_within, worker_nodes,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use koord_common::testing::TempDir;
use koord_manager::slo_controller::node_meta::NodeResourcePlugins;
use koordlet::statesinformer::device::{
    DeviceHealth, DeviceSnapshot, DeviceSource, DiscoveryError, GpuInfo, PciSysfs,
    build_desired_device, discover_all,
};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const GIB: u64 = 1 << 30;
const MODEL: &str = "NVIDIA koord-e2e";
/// The GPUs' PCI addresses, behind one root complex on NUMA node 0.
const GPU_BUS_IDS: [&str; 2] = ["0000:3b:00.0", "0000:3c:00.0"];
const ENV: &str = "NVIDIA_VISIBLE_DEVICES";

/// NVML as a GPU node's driver would answer: two 16 GiB GPUs, minors 0 and 1.
struct FakeNvml;

impl DeviceSource for FakeNvml {
    fn name(&self) -> &'static str {
        "fake-nvml"
    }

    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
        let gpus = GPU_BUS_IDS
            .iter()
            .enumerate()
            .map(|(minor, bus_id)| GpuInfo {
                uuid: format!("GPU-koord-e2e-{minor}"),
                minor: minor as i32,
                memory_total: koord_common::units::Bytes(16 * GIB),
                bus_id: bus_id.to_string(),
                model: MODEL.to_string(),
                health: DeviceHealth::Healthy,
                topology: None,
            })
            .collect();
        Ok(DeviceSnapshot {
            gpus,
            gpu_driver_version: Some("535.104.05".to_string()),
            ..DeviceSnapshot::default()
        })
    }
}

/// A sysfs tree with the GPUs' PCI functions: `devices/pci0000:3a/0000:3a:00.0/<bdf>` with
/// `numa_node` 0, linked from `bus/pci/devices/<bdf>`.
fn fake_sysfs(root: &Path) -> anyhow::Result<()> {
    let links = root.join("bus/pci/devices");
    std::fs::create_dir_all(&links)?;
    for bdf in GPU_BUS_IDS {
        let dir: PathBuf = root.join("devices/pci0000:3a/0000:3a:00.0").join(bdf);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("numa_node"), "0\n")?;
        std::fs::write(dir.join("class"), "0x030200\n")?;
        std::os::unix::fs::symlink(&dir, links.join(bdf))?;
    }
    Ok(())
}

/// The Device koordlet would report for `node` on a node with the fake devices.
fn device_for(node: &Node) -> anyhow::Result<Device> {
    let sys = TempDir::new("e2e-gpu-sys")?;
    fake_sysfs(sys.path())?;
    let sources: Vec<Arc<dyn DeviceSource>> = vec![Arc::new(FakeNvml)];
    let snapshot = discover_all(&sources, &PciSysfs::new(sys.path()));
    ensure!(
        snapshot.problems.is_empty(),
        "discovery over the fake tree had problems: {:?}",
        snapshot.problems
    );
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let desired = build_desired_device(&snapshot, &now);
    ensure!(
        desired.problems.is_empty() && desired.devices.len() == 2,
        "the fake tree did not give two GPUs: {:?} {:?}",
        desired.devices,
        desired.problems
    );
    Ok(desired.new_object(node))
}

/// Fails unless koordlet runs with `GPUEnvInject=true`, naming the chart value that sets it.
async fn require_gpu_env_inject(client: &Client) -> anyhow::Result<()> {
    let koordlet = Api::<DaemonSet>::namespaced(client.clone(), KOORD_NAMESPACE)
        .get("koordlet")
        .await
        .context("the koordlet DaemonSet")?;
    let args: Vec<String> = koordlet
        .spec
        .and_then(|spec| spec.template.spec)
        .map(|spec| spec.containers)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|container| container.args.unwrap_or_default())
        .collect();
    let on = e2e::cluster::gates_set_true(&args).contains(&"GPUEnvInject");
    ensure!(
        on,
        "koordlet runs without GPUEnvInject=true (args {args:?}); install the chart with \
         --set koordlet.runtimeHooks.gpuEnvInject=true"
    );
    Ok(())
}

fn gpu_pod(namespace: &str, name: &str, gpu_request: serde_json::Value) -> anyhow::Result<Pod> {
    let mut requests = json!({"cpu": "10m", "memory": "16Mi"});
    e2e::cluster::merge(&mut requests, gpu_request);
    e2e::cluster::pod(
        namespace,
        name,
        json!({
            "spec": {
                "schedulerName": "koord-scheduler",
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(),
                    "command": ["sh", "-c",
                        format!("echo {ENV}=${{{ENV}:-unset}}; exec sleep 3600")],
                    "resources": {"requests": requests.clone(), "limits": requests}
                }]
            }
        }),
    )
}

/// The real node's own LoadAware thresholds, leaving CPU out while the test runs: the test is
/// about devices, and on this two-CPU machine the node's CPU usage (builds, other suites) can
/// stay above the default threshold for minutes. Removed again when the guard drops.
struct NoCpuThreshold {
    node: String,
}

const USAGE_THRESHOLDS: &str = "scheduling.koordinator.sh/usage-thresholds";

impl NoCpuThreshold {
    async fn set(client: &Client, node: &str) -> anyhow::Result<Self> {
        let patch = json!({"metadata": {"annotations": {
            USAGE_THRESHOLDS: r#"{"usageThresholds":{"memory":100}}"#
        }}});
        Api::<Node>::all(client.clone())
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("the usage thresholds of node {node}"))?;
        Ok(Self {
            node: node.to_string(),
        })
    }
}

impl Drop for NoCpuThreshold {
    fn drop(&mut self) {
        let name = self.node.clone();
        let removed = e2e::cluster::delete_from_drop(move |client| async move {
            let patch = json!({"metadata": {"annotations": {USAGE_THRESHOLDS: null}}});
            Api::<Node>::all(client)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        });
        if !removed {
            eprintln!(
                "could not remove {USAGE_THRESHOLDS} from node {}",
                self.node
            );
        }
    }
}

/// The pod's one GPU allocation from DeviceShare's annotation.
fn gpu_allocation(pod: &Pod) -> anyhow::Result<DeviceAllocation> {
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let all = get_device_allocations(&annotations)
        .context("the device-allocated annotation")?
        .with_context(|| format!("no device allocation on the pod: {annotations:?}"))?;
    let gpus = all.get(DEVICE_TYPE_GPU).cloned().unwrap_or_default();
    match gpus.as_slice() {
        [one] => Ok(one.clone()),
        other => bail!("expected one GPU allocated, got {other:?}"),
    }
}

/// The `NVIDIA_VISIBLE_DEVICES` value the container printed.
async fn printed_env(pods: &Api<Pod>, name: &str) -> anyhow::Result<String> {
    eventually(&format!("{ENV} printed by pod {name}"), || async {
        let log = pods.logs(name, &Default::default()).await?;
        Ok(log
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{ENV}=")))
            .map(str::to_owned))
    })
    .await
}

#[tokio::test]
async fn a_shared_gpu_pod_gets_its_allocation_and_the_env_of_its_gpu() -> anyhow::Result<()> {
    let test = "a_shared_gpu_pod_gets_its_allocation_and_the_env_of_its_gpu";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    require_gpu_device_resource(&client, |selected| {
        NodeResourcePlugins::from_flag(selected).gpu_device_resource
    })
    .await?;
    require_gpu_env_inject(&client).await?;
    // The real node: KWOK's simulated nodes run no containers.
    let real = e2e::cluster::real_nodes(&client).await?;
    let node = worker_nodes(&client)
        .await?
        .into_iter()
        .find(|node| {
            node.metadata
                .name
                .as_ref()
                .is_some_and(|name| real.contains(name))
        })
        .context("no schedulable real node")?;
    let node_name = node.metadata.name.clone().unwrap();
    let devices: Api<Device> = Api::all(client.clone());
    if devices.get_opt(&node_name).await?.is_some() {
        bail!("node {node_name} already has a Device; the test does not touch it");
    }

    let had_thresholds = node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(USAGE_THRESHOLDS));
    ensure!(
        !had_thresholds,
        "node {node_name} has its own {USAGE_THRESHOLDS}; the test would overwrite it"
    );
    let _no_cpu_threshold = NoCpuThreshold::set(&client, &node_name).await?;

    let device = device_for(&node)?;
    let _device_cleanup = DeviceCleanup {
        node: node_name.clone(),
    };
    devices
        .create(&PostParams::default(), &device)
        .await
        .context("creating the Device")?;
    let nodes: Api<Node> = Api::all(client.clone());
    eventually(
        &format!("{RESOURCE_GPU_MEMORY_RATIO} 200 on node {node_name}"),
        || async {
            let current = nodes.get(&node_name).await?;
            let allocatable = current.status.and_then(|s| s.allocatable);
            Ok(allocatable
                .and_then(|list| list.get(RESOURCE_GPU_MEMORY_RATIO).cloned())
                .filter(|quantity| quantity.0 == "200")
                .map(|_| ()))
        },
    )
    .await?;

    let namespace = TestNamespace::create(&client, "koord-e2e-gpu-pod").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);
    pods.create(
        &PostParams::default(),
        &gpu_pod(
            &namespace.name,
            "half-gpu",
            json!({RESOURCE_GPU_MEMORY_RATIO: "50"}),
        )?,
    )
    .await
    .context("creating the shared-GPU pod")?;
    let shared = running_pod_within(&pods, "half-gpu", EXTENDER_RETRY).await?;
    ensure!(
        shared.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node_name.as_str()),
        "the shared-GPU pod was not placed on the node with the Device"
    );
    let allocation = gpu_allocation(&shared)?;
    let ratio = allocation.resources.get(RESOURCE_GPU_MEMORY_RATIO);
    ensure!(
        ratio.is_some_and(|quantity| quantity.0 == "50"),
        "the allocation does not carry half a GPU's memory ratio: {allocation:?}"
    );
    ensure!(
        (0..2).contains(&allocation.minor),
        "allocated a GPU the node does not have: {allocation:?}"
    );
    let env = printed_env(&pods, "half-gpu").await?;
    ensure!(
        env == allocation.minor.to_string(),
        "the container sees {ENV}={env}, but GPU {} was allocated",
        allocation.minor
    );

    // A whole GPU: the admission webhook turns koordinator.sh/gpu into gpu-core and
    // gpu-memory-ratio 100, which only the GPU nobody shares still has.
    pods.create(
        &PostParams::default(),
        &gpu_pod(
            &namespace.name,
            "whole-gpu",
            json!({"koordinator.sh/gpu": "100"}),
        )?,
    )
    .await
    .context("creating the whole-GPU pod")?;
    let whole = running_pod_within(&pods, "whole-gpu", EXTENDER_RETRY).await?;
    let whole_allocation = gpu_allocation(&whole)?;
    ensure!(
        whole_allocation.minor != allocation.minor && (0..2).contains(&whole_allocation.minor),
        "the whole GPU {whole_allocation:?} is not the GPU the shared pod left free"
    );
    let env = printed_env(&pods, "whole-gpu").await?;
    ensure!(
        env == whole_allocation.minor.to_string(),
        "the whole-GPU container sees {ENV}={env}, but GPU {} was allocated",
        whole_allocation.minor
    );
    Ok(())
}
