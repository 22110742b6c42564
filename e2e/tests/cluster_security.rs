//! Cluster end-to-end checks of least privilege (issue 16) on a real API server and kubelet:
//! koordlet's writes are held to its own node by the chart's ValidatingAdmissionPolicy, and its
//! evictions by koord-manager's eviction webhook, both keyed on the node claim of its pod-bound
//! token; it reads the kubelet's `/pods` with `nodes/pods`, without
//! `nodes/proxy`. Without a cluster each test prints a SKIP line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;

use anyhow::{Context, bail, ensure};
use e2e::cluster::{
    KOORD_NAMESPACE, TestNamespace, component_pods, container_log, delete_from_drop, eventually,
    pod,
};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// A Node object without a kubelet, tainted so that nothing (the suite's node pickers included)
/// schedules to it; deleted on drop.
struct ForeignNode {
    name: String,
}

impl ForeignNode {
    async fn create(client: &Client) -> anyhow::Result<Self> {
        let name = format!("koord-e2e-foreign-{}", std::process::id());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"koord-e2e": "true"}},
            "spec": {
                "unschedulable": true,
                "taints": [{"key": "koord-e2e/foreign", "effect": "NoSchedule"}]
            }
        }))?;
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await?;
        Ok(Self { name })
    }
}

impl Drop for ForeignNode {
    fn drop(&mut self) {
        let name = self.name.clone();
        let deleted = delete_from_drop(move |client| async move {
            Api::<Node>::all(client)
                .delete(&name, &DeleteParams::background())
                .await
        });
        if !deleted {
            eprintln!("could not delete test node {}", self.name);
        }
    }
}

/// The koordlet pod (the local cluster has one node) and its node.
async fn koordlet_pod(admin: &Client) -> anyhow::Result<(Pod, String)> {
    let koordlet = component_pods(admin, "koordlet")
        .await?
        .into_iter()
        .next()
        .context("no koordlet pod")?;
    let node = e2e::cluster::node_of(&koordlet)?;
    Ok((koordlet, node))
}

/// A token for koordlet's service account, bound to `pod` when given (as the kubelet mounts it),
/// else bound to nothing.
async fn koordlet_token(client: &Client, pod: Option<&Pod>) -> anyhow::Result<String> {
    let bound = pod.map(|pod| {
        json!({
            "kind": "Pod",
            "apiVersion": "v1",
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
        })
    });
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {"audiences": [], "expirationSeconds": 600, "boundObjectRef": bound}
    }))?;
    let response = Api::<ServiceAccount>::namespaced(client.clone(), KOORD_NAMESPACE)
        .create_token_request("koordlet", &PostParams::default(), &request)
        .await?;
    response
        .status
        .map(|status| status.token)
        .context("TokenRequest returned no token")
}

/// A client for the same API server that authenticates with `token` only.
async fn client_with_token(token: &str, dir: &std::path::Path) -> anyhow::Result<Client> {
    let token_file = dir.join(format!("token-{}", token.len()));
    std::fs::File::create(&token_file)?.write_all(token.as_bytes())?;
    let mut config = kube::Config::infer().await?;
    config.auth_info = Default::default();
    config.auth_info.token_file = Some(token_file.display().to_string());
    Ok(Client::try_from(config)?)
}

/// The API server's answer to a write: `Ok` or the refusal's message.
fn refusal<T>(result: Result<T, kube::Error>) -> anyhow::Result<Option<String>> {
    match result {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(Some(status.message)),
        Err(other) => Err(other.into()),
    }
}

async fn annotate_node(client: &Client, node: &str) -> Result<Node, kube::Error> {
    let patch = json!({"metadata": {"annotations": {"koord-e2e/touched": "true"}}});
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

async fn annotate_pod(client: &Client, namespace: &str, name: &str) -> Result<Pod, kube::Error> {
    let patch = json!({"metadata": {"annotations": {"koord-e2e/touched": "true"}}});
    Api::<Pod>::namespaced(client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

async fn evict(client: &Client, namespace: &str, name: &str) -> Result<(), kube::Error> {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .evict(name, &EvictParams::default())
        .await
        .map(drop)
}

#[tokio::test]
async fn koordlet_writes_only_objects_of_its_own_node() -> anyhow::Result<()> {
    let Some(admin) = e2e::cluster_or_skip("koordlet_writes_only_objects_of_its_own_node").await
    else {
        return Ok(());
    };
    let (koordlet, own_node) = koordlet_pod(&admin).await?;
    let foreign = ForeignNode::create(&admin).await?;
    let namespace = TestNamespace::create(&admin, "koord-e2e-security").await?;
    let scratch = koord_common::testing::TempDir::new("cluster-security")?;

    // Pods on either node; the foreign one is bound directly and never runs.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &namespace.name);
    for (name, node) in [
        ("on-own-node", &own_node),
        ("on-foreign-node", &foreign.name),
    ] {
        let body = json!({"spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"]}]
        }});
        pods.create(&PostParams::default(), &pod(&namespace.name, name, body)?)
            .await?;
    }

    // The token the kubelet mounts into koordlet's pod carries the pod's node.
    let bound = client_with_token(
        &koordlet_token(&admin, Some(&koordlet)).await?,
        scratch.path(),
    )
    .await?;
    ensure!(
        refusal(annotate_node(&bound, &own_node).await)?.is_none(),
        "koordlet could not patch its own node"
    );
    ensure!(
        refusal(annotate_pod(&bound, &namespace.name, "on-own-node").await)?.is_none(),
        "koordlet could not patch a pod of its own node"
    );
    let denied = refusal(annotate_node(&bound, &foreign.name).await)?
        .context("koordlet patched another node")?;
    ensure!(
        denied.contains("may only write objects of its own node"),
        "unexpected refusal for the foreign node: {denied}"
    );
    let denied = refusal(annotate_pod(&bound, &namespace.name, "on-foreign-node").await)?
        .context("koordlet patched a pod of another node")?;
    ensure!(
        denied.contains(&foreign.name),
        "the refusal does not name the pod's node: {denied}"
    );

    // Evictions: RBAC allows them for every pod; the manager's eviction webhook holds them to
    // the token's node.
    let denied = refusal(evict(&bound, &namespace.name, "on-foreign-node").await)?
        .context("koordlet evicted a pod of another node")?;
    ensure!(
        denied.contains("may only evict pods of its own node") && denied.contains(&foreign.name),
        "unexpected refusal of the foreign eviction: {denied}"
    );

    // A token of the same account without a pod (so without a node claim) writes nothing.
    let unbound = client_with_token(&koordlet_token(&admin, None).await?, scratch.path()).await?;
    let denied = refusal(annotate_node(&unbound, &own_node).await)?
        .context("a koordlet token without a node claim patched a node")?;
    ensure!(
        denied.contains("no node claim"),
        "unexpected refusal without a node claim: {denied}"
    );
    let denied = refusal(evict(&unbound, &namespace.name, "on-own-node").await)?
        .context("a koordlet token without a node claim evicted a pod")?;
    ensure!(
        denied.contains("no single node claim"),
        "unexpected eviction refusal without a node claim: {denied}"
    );

    // Last, as it removes the pod: koordlet evicts a pod of its own node.
    ensure!(
        refusal(evict(&bound, &namespace.name, "on-own-node").await)?.is_none(),
        "koordlet could not evict a pod of its own node"
    );
    let evicted = pods.get_opt("on-own-node").await?;
    ensure!(
        evicted.is_none_or(|pod| pod.metadata.deletion_timestamp.is_some()),
        "the evicted pod is not being deleted"
    );
    Ok(())
}

/// Whether the API server's authorizer lets koordlet `get` the node subresource `subresource`.
async fn koordlet_may_get_node(
    admin: &Client,
    node: &str,
    subresource: &str,
) -> anyhow::Result<bool> {
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{KOORD_NAMESPACE}:koordlet"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{KOORD_NAMESPACE}"), "system:authenticated"],
            "resourceAttributes": {"verb": "get", "resource": "nodes", "subresource": subresource, "name": node}
        }
    }))?;
    let answer = Api::<SubjectAccessReview>::all(admin.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|status| status.allowed))
}

#[tokio::test]
async fn koordlet_reads_the_kubelet_without_nodes_proxy() -> anyhow::Result<()> {
    let Some(admin) = e2e::cluster_or_skip("koordlet_reads_the_kubelet_without_nodes_proxy").await
    else {
        return Ok(());
    };
    let (koordlet, node) = koordlet_pod(&admin).await?;
    ensure!(
        !koordlet_may_get_node(&admin, &node, "proxy").await?,
        "koordlet still holds nodes/proxy (every kubelet API, exec included)"
    );
    ensure!(
        koordlet_may_get_node(&admin, &node, "pods").await?,
        "koordlet lacks nodes/pods"
    );
    // With only nodes/pods the kubelet (fine-grained authorization, 1.33+) still serves /pods:
    // koordlet syncs from it and never falls back to the API server.
    let name = koordlet
        .metadata
        .name
        .clone()
        .context("koordlet pod without a name")?;
    let log = eventually("koordlet's pods source in its log", || async {
        let log = container_log(&admin, &name, "koordlet").await?;
        Ok(log.contains("syncing pods source=").then_some(log))
    })
    .await?;
    if log.contains("from the API server only") || !log.contains("syncing pods source=kubelet") {
        bail!(
            "koordlet does not read the kubelet's /pods:\n{}",
            log.lines()
                .filter(|line| line.contains("pods"))
                .take(10)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let forbidden: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("pods sync failed") && line.contains("403"))
        .take(5)
        .collect();
    ensure!(
        forbidden.is_empty(),
        "the kubelet refused koordlet's /pods:\n{}",
        forbidden.join("\n")
    );
    Ok(())
}
