//! Cluster end-to-end check of koord-manager's GPUDeviceResource plugin: a
//! Device CR for a node becomes GPU resources on that Node (upstream's
//! `koordinator.sh/gpu-core`, `gpu-memory-ratio`, `gpu-memory` and
//! `koordinator.sh/gpu`, healthy GPUs only, in capacity and allocatable)
//! and the Device's `gpu-model` label is copied onto the Node; deleting the
//! Device removes the resources again (the label stays, as upstream leaves
//! it). kube-scheduler's resource fit then keeps GPU pods off nodes without
//! GPUs. No real GPU is needed: the Device is written by the test.
//!
//! Needs the chart's defaults: colocation on in `slo-controller-config`
//! (upstream's plugins do not run for a node with colocation off), the
//! manager's `GPUDeviceResource` plugin (on unless `--noderesource-plugins`
//! leaves it out) and its `get/list/watch` on devices. Everything the test
//! creates is deleted afterwards, and the label it caused is removed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use apis::extension::{
    LABEL_GPU_MODEL, QuantityValue, RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
};
use apis::scheduling::v1alpha1::Device;
use e2e::cluster::{
    DeviceCleanup, carries_gpu_resources, eventually, eventually_within,
    require_gpu_device_resource, worker_nodes,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use koord_manager::slo_controller::node_meta::NodeResourcePlugins;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

/// The GPU model label value the test's Device carries.
const MODEL: &str = "koord-e2e-model";

/// One GPU's memory.
const GPU_MEMORY: &str = "16Gi";

/// The GPU resources the plugin writes, as whole units, once all are on
/// the node's allocatable and capacity alike; `None` until then.
fn gpu_resources(node: &Node) -> anyhow::Result<Option<BTreeMap<&'static str, i64>>> {
    let status = node.status.as_ref().context("node without status")?;
    let empty = BTreeMap::new();
    let allocatable = status.allocatable.as_ref().unwrap_or(&empty);
    let capacity = status.capacity.as_ref().unwrap_or(&empty);
    let value = |quantity: &Quantity| -> anyhow::Result<i64> {
        QuantityValue::of(quantity)
            .with_context(|| format!("quantity {:?}", quantity.0))?
            .checked_value()
            .context("beyond 64 bits")
    };
    let mut found = BTreeMap::new();
    for name in [
        RESOURCE_GPU,
        RESOURCE_GPU_CORE,
        RESOURCE_GPU_MEMORY,
        RESOURCE_GPU_MEMORY_RATIO,
    ] {
        let (Some(in_allocatable), Some(in_capacity)) = (allocatable.get(name), capacity.get(name))
        else {
            return Ok(None);
        };
        let amount = value(in_allocatable)?;
        ensure!(
            amount == value(in_capacity)?,
            "{name}: allocatable {in_allocatable:?} differs from capacity {in_capacity:?}"
        );
        found.insert(name, amount);
    }
    Ok(Some(found))
}

fn gpu(minor: i32, health: bool) -> serde_json::Value {
    json!({
        "type": "gpu", "id": format!("GPU-koord-e2e-{minor}"), "minor": minor, "health": health,
        "resources": {
            RESOURCE_GPU_CORE: "100",
            RESOURCE_GPU_MEMORY: GPU_MEMORY,
            RESOURCE_GPU_MEMORY_RATIO: "100"
        }
    })
}

#[tokio::test]
async fn a_device_becomes_gpu_resources_on_its_node_and_leaves_with_it() -> anyhow::Result<()> {
    let test = "a_device_becomes_gpu_resources_on_its_node_and_leaves_with_it";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    require_gpu_device_resource(&client, |selected| {
        NodeResourcePlugins::from_flag(selected).gpu_device_resource
    })
    .await?;
    let mut workers = worker_nodes(&client).await?;
    workers.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let node = workers
        .first()
        .and_then(|node| node.metadata.name.clone())
        .context("no schedulable node")?;
    let nodes: Api<Node> = Api::all(client.clone());
    let devices: Api<Device> = Api::all(client.clone());
    if devices.get_opt(&node).await?.is_some() {
        bail!("node {node} already has a Device; the test does not touch it");
    }
    // A Device an earlier suite deleted may still be leaving (the manager removes its resources
    // a moment later).
    eventually_within(
        &format!("node {node} without GPU resources"),
        Duration::from_secs(120),
        || async { Ok((!carries_gpu_resources(&nodes.get(&node).await?)).then_some(())) },
    )
    .await
    .context("the test needs a node without GPUs")?;

    let device: Device = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
        "metadata": {"name": node, "labels": {LABEL_GPU_MODEL: MODEL}},
        "spec": {"devices": [gpu(0, true), gpu(1, true), gpu(2, false)]}
    }))?;
    let _cleanup = DeviceCleanup { node: node.clone() };
    devices
        .create(&PostParams::default(), &device)
        .await
        .context("creating the Device")?;

    // Two healthy GPUs of three.
    let two_gpus_memory = 2 * QuantityValue::parse(GPU_MEMORY)?.value();
    let want = BTreeMap::from([
        (RESOURCE_GPU, 200),
        (RESOURCE_GPU_CORE, 200),
        (RESOURCE_GPU_MEMORY, two_gpus_memory),
        (RESOURCE_GPU_MEMORY_RATIO, 200),
    ]);
    // The manager writes the resources (node status) and the model label (node metadata) in two
    // writes, so both are awaited.
    let has_model = |node: &Node| {
        node.metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_GPU_MODEL))
            .is_some_and(|model| model == MODEL)
    };
    let found = eventually(
        &format!("GPU resources and model label on node {node}"),
        || async {
            let current = nodes.get(&node).await?;
            match gpu_resources(&current)? {
                Some(found) if found == want && has_model(&current) => Ok(Some(current)),
                Some(other) if other[RESOURCE_GPU_CORE] > 200 => {
                    bail!("more than the healthy GPUs counted: {other:?}")
                }
                _ => Ok(None),
            }
        },
    )
    .await?;
    let labels = found.metadata.labels.unwrap_or_default();
    ensure!(
        labels.get(LABEL_GPU_MODEL).map(String::as_str) == Some(MODEL),
        "the Device's gpu-model label did not reach the node: {labels:?}"
    );
    // The kubelet's status updates keep the manager's resources.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let again = gpu_resources(&nodes.get(&node).await?)?;
    ensure!(
        again.as_ref() == Some(&want),
        "GPU resources changed on node {node}: {again:?}"
    );

    // The Device goes: so do the resources (upstream removes them); the
    // label stays, as upstream never removes it.
    devices
        .delete(&node, &DeleteParams::default())
        .await
        .context("deleting the Device")?;
    let gone = eventually(
        &format!("GPU resources removed from node {node}"),
        || async {
            let current = nodes.get(&node).await?;
            Ok((!carries_gpu_resources(&current)).then_some(current))
        },
    )
    .await?;
    let labels = gone.metadata.labels.unwrap_or_default();
    ensure!(
        labels.get(LABEL_GPU_MODEL).map(String::as_str) == Some(MODEL),
        "the gpu-model label was removed with the Device (upstream keeps it): {labels:?}"
    );
    Ok(())
}
