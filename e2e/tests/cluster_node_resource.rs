//! Cluster end-to-end checks of koord-manager's CPUNormalization and
//! ResourceAmplification node resource plugins and of the node-status
//! mutating webhook (upstream `mnode-status.koordinator.sh`).
//!
//! Needs the chart installed with `featureGates=NodeMutatingWebhook=true`
//! (off by default, as upstream). The test changes the
//! `cpu-normalization-config` and `resource-amplification-config` keys of
//! `slo-controller-config` and restores them (and the node) afterwards,
//! whether it passed or not. Without a cluster it prints one SKIP line and
//! passes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use apis::extension::{
    ANNOTATION_CPU_BASIC_INFO, ANNOTATION_CPU_NORMALIZATION_RATIO, ANNOTATION_NODE_RAW_ALLOCATABLE,
    ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, CPUBasicInfo, LABEL_CPU_NORMALIZATION_ENABLED,
    QuantityValue,
};
use e2e::cluster::{KOORD_NAMESPACE, eventually, eventually_within, resource, worker_nodes};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

const NORMALIZATION_KEY: &str = "cpu-normalization-config";
const AMPLIFICATION_KEY: &str = "resource-amplification-config";
const CONFIG_MAP: &str = "slo-controller-config";
const MUTATING_CONFIGURATION: &str = "koordinator-mutating-webhook-configuration";
/// The configured amplification ratios (cpu is then multiplied by the
/// normalization ratio).
const CPU_RATIO: f64 = 1.5;
const MEMORY_RATIO: f64 = 1.25;

fn annotation(node: &Node, key: &str) -> Option<String> {
    node.metadata.annotations.as_ref()?.get(key).cloned()
}

fn allocatable_milli(node: &Node, resource: &str) -> anyhow::Result<i64> {
    let quantity = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .and_then(|a| a.get(resource))
        .with_context(|| format!("node has no allocatable {resource}"))?;
    Ok(QuantityValue::of(quantity)?.milli_value())
}

/// The raw-allocatable annotation's CPU and memory, in milli-units.
fn raw_annotation_milli(node: &Node) -> anyhow::Result<Option<(i64, i64)>> {
    let Some(text) = annotation(node, ANNOTATION_NODE_RAW_ALLOCATABLE) else {
        return Ok(None);
    };
    let raw: BTreeMap<String, String> =
        serde_json::from_str(&text).with_context(|| format!("raw allocatable {text:?}"))?;
    let read = |name: &str| -> anyhow::Result<i64> {
        let text = raw
            .get(name)
            .with_context(|| format!("no {name} in {raw:?}"))?;
        Ok(QuantityValue::parse(text)?.milli_value())
    };
    Ok(Some((read("cpu")?, read("memory")?)))
}

/// Sets (`Some`) or removes (`None`) one key of `slo-controller-config`.
async fn set_key(configs: &Api<ConfigMap>, key: &str, value: Option<&str>) -> anyhow::Result<()> {
    let patch = json!({"data": {key: value}});
    configs
        .patch(CONFIG_MAP, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("setting {key} of {CONFIG_MAP}"))?;
    Ok(())
}

/// A `nodes/status` write that changes nothing by itself, as the kubelet's
/// next report would: the node-status webhook sees it like any other.
async fn touch_status(nodes: &Api<Node>, name: &str) -> anyhow::Result<()> {
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {}})),
        )
        .await
        .with_context(|| format!("status write of node {name}"))?;
    Ok(())
}

/// The ratio upstream's model gives for this CPU state, from the four
/// ratios configured below.
fn expected_normalization(info: &CPUBasicInfo) -> f64 {
    match (info.hyper_thread_enabled, info.turbo_enabled) {
        (false, false) => 1.1,
        (true, false) => 1.2,
        (false, true) => 1.3,
        (true, true) => 1.4,
    }
}

#[tokio::test]
async fn node_ratios_and_the_amplified_allocatable_follow_the_config() -> anyhow::Result<()> {
    let test = "node_ratios_and_the_amplified_allocatable_follow_the_config";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    let webhooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let registered = webhooks
        .get(MUTATING_CONFIGURATION)
        .await?
        .webhooks
        .unwrap_or_default()
        .iter()
        .any(|w| w.name == "mnode-status.koordinator.sh");
    ensure!(
        registered,
        "mnode-status.koordinator.sh is not registered: install the chart with \
         featureGates=NodeMutatingWebhook=true"
    );
    let node_name = worker_nodes(&client)
        .await?
        .into_iter()
        .find_map(|node| node.metadata.name)
        .context("the cluster has no schedulable node")?;
    let nodes: Api<Node> = Api::all(client.clone());
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let data = configs.get(CONFIG_MAP).await?.data.unwrap_or_default();
    let original_normalization = data.get(NORMALIZATION_KEY).cloned();
    let original_amplification = data.get(AMPLIFICATION_KEY).cloned();

    let result = check(&client, &nodes, &configs, &node_name).await;

    // Restore: the config keys, the node label, then the node's status
    // (amplification off: the raw annotation goes, the raw values return).
    let restored = async {
        set_key(
            &configs,
            NORMALIZATION_KEY,
            original_normalization.as_deref(),
        )
        .await?;
        set_key(
            &configs,
            AMPLIFICATION_KEY,
            original_amplification.as_deref(),
        )
        .await?;
        let unlabel = json!({"metadata": {"labels": {LABEL_CPU_NORMALIZATION_ENABLED: null}}});
        nodes
            .patch(&node_name, &PatchParams::default(), &Patch::Merge(&unlabel))
            .await?;
        if original_amplification.is_none() {
            eventually(&format!("node {node_name} unamplified"), || async {
                touch_status(&nodes, &node_name).await?;
                let node = nodes.get(&node_name).await?;
                let clean = annotation(&node, ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO)
                    .is_none()
                    && annotation(&node, ANNOTATION_NODE_RAW_ALLOCATABLE).is_none();
                Ok(clean.then_some(()))
            })
            .await?;
        }
        anyhow::Ok(())
    }
    .await;
    result.and(restored)
}

async fn check(
    client: &Client,
    nodes: &Api<Node>,
    configs: &Api<ConfigMap>,
    node_name: &str,
) -> anyhow::Result<()> {
    // The CPU basic info koordlet reports on the node's topology.
    let topologies: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "topology.node.k8s.io",
            "v1alpha1",
            "NodeResourceTopology",
            "noderesourcetopologies",
        ),
    );
    let info: CPUBasicInfo = eventually(
        &format!("cpu-basic-info on NodeResourceTopology {node_name}"),
        || async {
            let Some(topology) = topologies.get_opt(node_name).await? else {
                return Ok(None);
            };
            let Some(text) = topology
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_CPU_BASIC_INFO))
            else {
                return Ok(None);
            };
            Ok(Some(serde_json::from_str(text).with_context(|| {
                format!("{ANNOTATION_CPU_BASIC_INFO} {text:?}")
            })?))
        },
    )
    .await?;

    // CPUNormalization: the model's ratio for this CPU and its HT/turbo state
    // (defaultRatio when koordlet could not read a model name).
    let normalization = expected_normalization(&info);
    let normalization_config = if info.cpu_model.is_empty() {
        json!({"enable": true, "defaultRatio": normalization})
    } else {
        json!({"enable": true, "ratioModel": {info.cpu_model.clone(): {
            "baseRatio": 1.1,
            "hyperThreadEnabledRatio": 1.2,
            "turboEnabledRatio": 1.3,
            "hyperThreadTurboEnabledRatio": 1.4,
        }}})
    };
    set_key(
        configs,
        NORMALIZATION_KEY,
        Some(&normalization_config.to_string()),
    )
    .await?;
    let want = format!("{normalization:.2}");
    wait_for_annotation(
        nodes,
        node_name,
        ANNOTATION_CPU_NORMALIZATION_RATIO,
        Some(&want),
    )
    .await?;
    // The node label wins over the strategy.
    let label = |value: Option<&str>| json!({"metadata": {"labels": {LABEL_CPU_NORMALIZATION_ENABLED: value}}});
    nodes
        .patch(
            node_name,
            &PatchParams::default(),
            &Patch::Merge(&label(Some("false"))),
        )
        .await?;
    wait_for_annotation(
        nodes,
        node_name,
        ANNOTATION_CPU_NORMALIZATION_RATIO,
        Some("1.00"),
    )
    .await?;
    nodes
        .patch(
            node_name,
            &PatchParams::default(),
            &Patch::Merge(&label(None)),
        )
        .await?;
    wait_for_annotation(
        nodes,
        node_name,
        ANNOTATION_CPU_NORMALIZATION_RATIO,
        Some(&want),
    )
    .await?;

    // The kubelet's values before any amplification.
    let before = nodes.get(node_name).await?;
    let (raw_cpu, raw_memory) = match raw_annotation_milli(&before)? {
        Some(raw) => raw,
        None => (
            allocatable_milli(&before, "cpu")?,
            allocatable_milli(&before, "memory")?,
        ),
    };

    // ResourceAmplification: cpu = configured ratio × normalization ratio.
    let amplification_config = json!({"enable": true, "resourceAmplificationRatio": {
        "cpu": CPU_RATIO, "memory": MEMORY_RATIO,
    }});
    set_key(
        configs,
        AMPLIFICATION_KEY,
        Some(&amplification_config.to_string()),
    )
    .await?;
    let cpu_ratio = CPU_RATIO * normalization;
    let want_ratio = format!(r#"{{"cpu":{cpu_ratio:.2},"memory":{MEMORY_RATIO:.2}}}"#);
    wait_for_annotation(
        nodes,
        node_name,
        ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
        Some(&want_ratio),
    )
    .await?;
    // The ratio the webhook reads back is the two-decimal one.
    let cpu_ratio: f64 = format!("{cpu_ratio:.2}").parse()?;
    let want_cpu = (raw_cpu as f64 * cpu_ratio) as i64;
    let want_memory = (raw_memory as f64 * MEMORY_RATIO) as i64;

    // The next status write goes through the webhook: allocatable amplified,
    // the kubelet's values kept in the raw-allocatable annotation.
    let amplified = |node: &Node| -> anyhow::Result<bool> {
        Ok(allocatable_milli(node, "cpu")? == want_cpu
            && allocatable_milli(node, "memory")? == want_memory)
    };
    eventually(&format!("amplified allocatable on {node_name}"), || async {
        touch_status(nodes, node_name).await?;
        let node = nodes.get(node_name).await?;
        Ok(amplified(&node)?.then_some(node))
    })
    .await?;
    // The kubelet keeps reporting its raw values; each report is amplified
    // again, never twice, and the raw annotation keeps the kubelet's values.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let node = nodes.get(node_name).await?;
    ensure!(
        amplified(&node)?,
        "allocatable drifted after the kubelet's reports: cpu {}m (want {want_cpu}m), memory {}m (want {want_memory}m)",
        allocatable_milli(&node, "cpu")?,
        allocatable_milli(&node, "memory")?
    );
    match raw_annotation_milli(&node)? {
        Some((cpu, memory)) if cpu == raw_cpu && memory == raw_memory => {}
        other => bail!(
            "raw-allocatable annotation {other:?}, want the kubelet's cpu {raw_cpu}m memory {raw_memory}m"
        ),
    }

    // Amplification off again: the ratio is removed and the next status write
    // restores the kubelet's values and drops the raw annotation.
    set_key(configs, AMPLIFICATION_KEY, Some(r#"{"enable":false}"#)).await?;
    // The normalization ratio alone still amplifies cpu.
    let want_ratio = format!(r#"{{"cpu":{normalization:.2}}}"#);
    wait_for_annotation(
        nodes,
        node_name,
        ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
        Some(&want_ratio),
    )
    .await?;
    set_key(configs, NORMALIZATION_KEY, Some(r#"{"enable":false}"#)).await?;
    wait_for_annotation(
        nodes,
        node_name,
        ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
        None,
    )
    .await?;
    eventually_within(
        &format!("kubelet's allocatable back on {node_name}"),
        Duration::from_secs(120),
        || async {
            touch_status(nodes, node_name).await?;
            let node = nodes.get(node_name).await?;
            let back = allocatable_milli(&node, "cpu")? == raw_cpu
                && allocatable_milli(&node, "memory")? == raw_memory
                && annotation(&node, ANNOTATION_NODE_RAW_ALLOCATABLE).is_none();
            Ok(back.then_some(()))
        },
    )
    .await?;
    Ok(())
}

async fn wait_for_annotation(
    nodes: &Api<Node>,
    node_name: &str,
    key: &str,
    want: Option<&str>,
) -> anyhow::Result<()> {
    let waited = eventually(
        &format!("node {node_name} annotation {key} = {want:?}"),
        || async {
            let node = nodes.get(node_name).await?;
            Ok((annotation(&node, key).as_deref() == want).then_some(()))
        },
    )
    .await;
    if waited.is_err() {
        let node = nodes.get(node_name).await?;
        bail!(
            "node {node_name}: annotation {key} is {:?}, want {want:?}",
            annotation(&node, key)
        );
    }
    Ok(())
}
