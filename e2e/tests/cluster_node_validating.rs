//! The node validating webhook on the local cluster (needs koord-manager's feature gate
//! `NodeValidatingWebhook=true`, which CI's chart upgrade sets): a label change that makes the
//! node match two node strategies of one `slo-controller-config` key is refused with upstream's
//! reason; one match is allowed. The config key and the node's labels are restored afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use anyhow::{Context, ensure};
use e2e::cluster::{KOORD_NAMESPACE, eventually, worker_nodes};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const CONFIG_MAP: &str = "slo-controller-config";
const KEY: &str = "resource-threshold-config";
const LABEL_A: &str = "koord-e2e/vnode-a";
const LABEL_B: &str = "koord-e2e/vnode-b";

async fn label(
    nodes: &Api<Node>,
    node: &str,
    key: &str,
    value: Option<&str>,
) -> kube::Result<Node> {
    let patch = json!({"metadata": {"labels": {key: value}}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

#[tokio::test]
async fn a_label_matching_two_node_strategies_is_refused() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("a_label_matching_two_node_strategies_is_refused").await
    else {
        return Ok(());
    };
    let registered = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get("koordinator-validating-webhook-configuration")
        .await?
        .webhooks
        .unwrap_or_default()
        .iter()
        .any(|w| w.name == "vnode.koordinator.sh");
    ensure!(
        registered,
        "vnode.koordinator.sh is not registered: install the chart with \
         featureGates=NodeValidatingWebhook=true"
    );
    let node = worker_nodes(&client)
        .await?
        .into_iter()
        .find_map(|n| n.metadata.name)
        .context("the cluster has no schedulable node")?;
    let nodes: Api<Node> = Api::all(client.clone());
    let configs: Api<ConfigMap> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let original = configs
        .get(CONFIG_MAP)
        .await?
        .data
        .unwrap_or_default()
        .get(KEY)
        .cloned();
    let strategies = json!({
        "clusterStrategy": {"enable": false},
        "nodeStrategies": [
            {"name": "e2e-a", "nodeSelector": {"matchLabels": {LABEL_A: "true"}}, "enable": false},
            {"name": "e2e-b", "nodeSelector": {"matchLabels": {LABEL_B: "true"}}, "enable": false}
        ]
    })
    .to_string();
    let set = |value: Option<String>| {
        let configs = configs.clone();
        async move {
            let patch = json!({"data": {KEY: value}});
            configs
                .patch(CONFIG_MAP, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        }
    };
    set(Some(strategies))
        .await
        .context("setting the node strategies")?;

    let result = async {
        label(&nodes, &node, LABEL_A, Some("true"))
            .await
            .context("one matching strategy must be allowed")?;
        // The webhook reads the ConfigMap from the API server on each request; retry until the
        // refusal shows (a write before the config is visible would be allowed, then undone).
        let message = eventually("a second matching label refused", || async {
            match label(&nodes, &node, LABEL_B, Some("true")).await {
                Ok(_) => {
                    label(&nodes, &node, LABEL_B, None).await?;
                    Ok(None)
                }
                Err(kube::Error::Api(status)) => Ok(Some(status.message)),
                Err(other) => Err(other.into()),
            }
        })
        .await?;
        ensure!(
            message.contains("vnode.koordinator.sh")
                && message.contains("ExistNodeConfict")
                && message.contains(KEY)
                && message.contains("e2e-a")
                && message.contains("e2e-b"),
            "unexpected refusal: {message}"
        );
        anyhow::Ok(())
    }
    .await;

    let restored = async {
        label(&nodes, &node, LABEL_A, None).await?;
        label(&nodes, &node, LABEL_B, None).await?;
        set(original).await?;
        anyhow::Ok(())
    }
    .await;
    result.and(restored)
}
