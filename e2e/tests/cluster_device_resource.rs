//! GPU requests at pod admission on the local cluster, as upstream's pod webhooks treat them:
//! a `koordinator.sh/gpu` request is completed into `gpu-core`, `gpu-memory-ratio` and a
//! `gpu.shared` count (on by default), and with koord-manager's gate
//! `ValidatePodDeviceResource=true` (CI's chart upgrade sets it) a shared-GPU pod asking for no
//! GPU memory is refused with upstream's message. No node needs a GPU: the pods are
//! only created, for a scheduler nobody runs. Everything is deleted afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use anyhow::{Context, ensure};
use e2e::cluster::{KOORD_NAMESPACE, TestNamespace, pod};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

fn gpu_pod(namespace: &str, name: &str, resources: Value) -> anyhow::Result<Pod> {
    pod(
        namespace,
        name,
        json!({
            "spec": {
                "schedulerName": "koord-e2e-nobody",
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {"requests": resources.clone(), "limits": resources}
                }]
            }
        }),
    )
}

#[tokio::test]
async fn gpu_requests_are_completed_and_checked_at_admission() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("gpu_requests_are_completed_and_checked_at_admission").await
    else {
        return Ok(());
    };
    let manager = Api::<Deployment>::namespaced(client.clone(), KOORD_NAMESPACE)
        .get("koord-manager")
        .await?;
    let args = serde_json::to_string(&manager.spec.and_then(|s| s.template.spec))?;
    ensure!(
        args.contains("ValidatePodDeviceResource=true"),
        "koord-manager runs without ValidatePodDeviceResource=true: install the chart with it"
    );
    let namespace = TestNamespace::create(&client, "koord-e2e-gpu").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);

    let whole = json!({"koordinator.sh/gpu": "200"});
    let created = pods
        .create(
            &PostParams::default(),
            &gpu_pod(&namespace.name, "two-gpus", whole)?,
        )
        .await
        .context("creating a pod asking for koordinator.sh/gpu")?;
    let resources = serde_json::to_value(
        created.spec.as_ref().unwrap().containers[0]
            .resources
            .clone()
            .unwrap_or_default(),
    )?;
    let want = json!({
        "koordinator.sh/gpu-core": "200",
        "koordinator.sh/gpu-memory-ratio": "200",
        "koordinator.sh/gpu.shared": "2"
    });
    ensure!(
        resources["requests"] == want && resources["limits"] == want,
        "the GPU request was not completed as upstream does: {resources}"
    );

    // (A pod asking for gpu and gpu.shared together never reaches the check: the mutation has
    // turned its gpu into gpu-core and gpu-memory-ratio by then, as upstream's does.)
    let conflicting = json!({"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu.shared": "2"});
    let refused = pods
        .create(
            &PostParams::default(),
            &gpu_pod(&namespace.name, "share-without-memory", conflicting)?,
        )
        .await;
    let message = match refused {
        Ok(_) => anyhow::bail!("a shared-GPU pod asking for no GPU memory was admitted"),
        Err(error) => error.to_string(),
    };
    ensure!(
        message.contains("GPU memory and GPU memory ratio all is zero"),
        "refused, but not with upstream's reason: {message}"
    );
    Ok(())
}
