//! The colocationprofile controller on the local cluster (needs koord-manager's feature gate
//! `ColocationProfileController=true`, which CI's chart upgrade sets): a profile created after a
//! pod reaches the pod while it waits unscheduled, when the profile is controller-managed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::ensure;
use e2e::cluster::{TestNamespace, eventually_within, pod, resource};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use serde_json::json;

#[tokio::test]
async fn controller_managed_profile_reaches_a_pending_pod() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("controller_managed_profile_reaches_a_pending_pod").await
    else {
        return Ok(());
    };
    let namespace = TestNamespace::create(&client, "koord-e2e-reprofile").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);
    // No node carries this label, so the pod stays Pending with no node.
    let waiting = pod(
        &namespace.name,
        "waiting",
        json!({
            "metadata": {"labels": {"koord-e2e/reprofile": "true", "koord-e2e/counter": "x"}},
            "spec": {
                "nodeSelector": {"koord-e2e/no-such-node": "true"},
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
                }]
            }
        }),
    )?;
    pods.create(&PostParams::default(), &waiting).await?;

    let profiles: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "config.koordinator.sh",
            "v1alpha1",
            "ClusterColocationProfile",
            "clustercolocationprofiles",
        ),
    );
    let managed_name = format!("koord-e2e-managed-{}", std::process::id());
    let unmanaged_name = format!("koord-e2e-unmanaged-{}", std::process::id());
    let profile = |name: &str, managed: bool, label: &str| -> anyhow::Result<DynamicObject> {
        let labels = if managed {
            json!({"config.koordinator.sh/controller-managed": "true"})
        } else {
            json!({})
        };
        Ok(serde_json::from_value(json!({
            "apiVersion": "config.koordinator.sh/v1alpha1",
            "kind": "ClusterColocationProfile",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace.name}},
                "selector": {"matchLabels": {"koord-e2e/reprofile": "true"}},
                "labels": {label: "yes"},
                "annotations": {"koord-e2e/applied-by": name},
                "labelSuffixes": {"koord-e2e/counter": "-seen"}
            }
        }))?)
    };
    profiles
        .create(
            &PostParams::default(),
            &profile(&unmanaged_name, false, "koord-e2e/unmanaged")?,
        )
        .await?;
    profiles
        .create(
            &PostParams::default(),
            &profile(&managed_name, true, "koord-e2e/managed")?,
        )
        .await?;

    let result = async {
        // A profile change triggers a pass within seconds; the periodic pass is every 30 s.
        let reprofiled = eventually_within(
            "the controller-managed profile applied to the pending pod (is koord-manager's \
             feature gate ColocationProfileController=true?)",
            Duration::from_secs(90),
            || async {
                let current = pods.get("waiting").await?;
                let labels = current.metadata.labels.clone().unwrap_or_default();
                Ok(
                    (labels.get("koord-e2e/managed").map(String::as_str) == Some("yes"))
                        .then_some(current),
                )
            },
        )
        .await?;
        let labels = reprofiled.metadata.labels.clone().unwrap_or_default();
        let annotations = reprofiled.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            annotations.get("koord-e2e/applied-by") == Some(&managed_name),
            "annotations {annotations:?}"
        );
        ensure!(
            labels.get("koord-e2e/counter").map(String::as_str) == Some("x-seen"),
            "label suffix not applied once: {labels:?}"
        );
        ensure!(
            !labels.contains_key("koord-e2e/unmanaged"),
            "a profile without controller-managed=true was applied: {labels:?}"
        );
        ensure!(
            reprofiled
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none(),
            "the pod was scheduled"
        );
        // The pair (profile version, pod) is remembered: later passes do not append the
        // suffix again.
        tokio::time::sleep(Duration::from_secs(35)).await;
        let later = pods.get("waiting").await?;
        let later_labels = later.metadata.labels.unwrap_or_default();
        ensure!(
            later_labels.get("koord-e2e/counter").map(String::as_str) == Some("x-seen"),
            "the profile was applied again in a later pass: {later_labels:?}"
        );
        Ok(())
    }
    .await;
    for name in [&managed_name, &unmanaged_name] {
        let _ = profiles.delete(name, &DeleteParams::default()).await;
    }
    result
}
