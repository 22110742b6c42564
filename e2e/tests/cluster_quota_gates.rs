//! Cluster end-to-end checks of the quota webhook's optional upstream gates (issue 20):
//! - `EnableQuotaAdmissionOnUpdate`: an update that moves a pod into a quota it does not fit is
//!   refused; an update that keeps the pod's quota is not evaluated.
//! - `ElasticQuotaEvaluationTransformPod` with `ReplaceResourcesTransformer`: a pod is evaluated
//!   with its `pod.koordinator.sh/replace-resources` annotation applied, so cpu renamed to a
//!   resource the quota does not limit passes where the same pod without it is refused.
//! - `MultiQuotaTree`: a pod charged to a quota of a tree (the root quota the ElasticQuotaProfile
//!   controller makes from a profile) gets the profile's node selector as required node affinity.
//!
//! Needs koord-manager with `--feature-gates=EnableQuotaAdmission=true,
//! EnableQuotaAdmissionOnUpdate=true,ElasticQuotaEvaluationTransformPod=true,
//! ReplaceResourcesTransformer=true,MultiQuotaTree=true` (CI's chart upgrade sets them). Without a
//! cluster the tests print a SKIP line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use apis::extension::{ANNOTATION_POD_REPLACE_RESOURCES, LABEL_QUOTA_NAME, LABEL_QUOTA_TREE_ID};
use apis::quota::v1alpha1::ElasticQuotaProfile;
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use e2e::cluster::{TestNamespace, eventually_within, pod, require_manager_gates, worker_nodes};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

fn quota_pod(
    namespace: &str,
    name: &str,
    quota: &str,
    cpu: &str,
    annotations: Value,
) -> anyhow::Result<Pod> {
    pod(
        namespace,
        name,
        json!({
            "metadata": {"labels": {LABEL_QUOTA_NAME: quota}, "annotations": annotations},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}
                }]
            }
        }),
    )
}

async fn create_quota(
    quotas: &Api<ElasticQuota>,
    namespace: &str,
    name: &str,
    max_cpu: &str,
) -> anyhow::Result<()> {
    let quota: ElasticQuota = serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"max": {"cpu": max_cpu, "memory": "1Gi"}}
    }))?;
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .with_context(|| format!("creating quota {name}"))?;
    Ok(())
}

/// Waits until the webhook's quota cache holds `quota`: a dry run of a pod too big for it is
/// refused as over quota.
async fn wait_until_webhook_knows(
    pods: &Api<Pod>,
    namespace: &str,
    quota: &str,
    too_big_cpu: &str,
) -> anyhow::Result<()> {
    eventually_within(
        &format!("the webhook knows quota {quota}"),
        Duration::from_secs(60),
        || async {
            let probe = quota_pod(namespace, "probe", quota, too_big_cpu, json!({}))?;
            match pods.create(&dry_run(), &probe).await {
                Err(kube::Error::Api(status)) if status.message.contains("exceeded quota") => {
                    Ok(Some(()))
                }
                _ => Ok(None),
            }
        },
    )
    .await
}

fn refusal(result: Result<Pod, kube::Error>, what: &str) -> anyhow::Result<kube::core::Status> {
    match result {
        Ok(_) => bail!("{what} was admitted"),
        Err(kube::Error::Api(status)) => Ok(*status),
        Err(other) => Err(other.into()),
    }
}

#[tokio::test]
async fn moving_a_pod_into_a_quota_it_does_not_fit_is_refused_on_update() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("moving_a_pod_into_a_quota_it_does_not_fit_is_refused_on_update")
            .await
    else {
        return Ok(());
    };
    require_manager_gates(
        &client,
        &["EnableQuotaAdmission", "EnableQuotaAdmissionOnUpdate"],
    )
    .await?;
    let namespace = TestNamespace::create(&client, "koord-e2e-quota-update").await?;
    let ns = namespace.name.as_str();
    let roomy = format!("e2e-roomy-{}", std::process::id());
    let tiny = format!("e2e-tiny-{}", std::process::id());
    let quotas: Api<ElasticQuota> = Api::namespaced(client.clone(), ns);
    create_quota(&quotas, ns, &roomy, "1").await?;
    create_quota(&quotas, ns, &tiny, "50m").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_until_webhook_knows(&pods, ns, &roomy, "2").await?;
    wait_until_webhook_knows(&pods, ns, &tiny, "100m").await?;

    pods.create(
        &PostParams::default(),
        &quota_pod(ns, "mover", &roomy, "100m", json!({}))?,
    )
    .await
    .context("a pod within its quota was refused")?;

    // An update that keeps the quota is not evaluated, even though the quota is now too small
    // for the pod were it new.
    pods.patch(
        "mover",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"e2e-touched": "yes"}}})),
    )
    .await
    .context("an update that keeps the pod's quota was refused")?;

    // Moving it into the tiny quota is evaluated against that quota and refused.
    let moved = pods
        .patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {LABEL_QUOTA_NAME: tiny}}})),
        )
        .await;
    let status = refusal(moved, "moving a 100m pod into a 50m quota")?;
    ensure!(
        status
            .message
            .contains(&format!("exceeded quota: {ns}/{tiny}"))
            && status.message.contains("requested: cpu=100m")
            && status.message.contains("limited: cpu=50m"),
        "refusal message {:?}",
        status.message
    );
    ensure!(status.code == 400, "refusal code {}", status.code);
    let still = pods.get("mover").await?;
    ensure!(
        still
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_QUOTA_NAME))
            == Some(&roomy),
        "the refused update changed the pod's quota label: {:?}",
        still.metadata.labels
    );
    Ok(())
}

#[tokio::test]
async fn a_pod_is_evaluated_with_its_replace_resources_annotation() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("a_pod_is_evaluated_with_its_replace_resources_annotation").await
    else {
        return Ok(());
    };
    require_manager_gates(
        &client,
        &[
            "EnableQuotaAdmission",
            "ElasticQuotaEvaluationTransformPod",
            "ReplaceResourcesTransformer",
        ],
    )
    .await?;
    let namespace = TestNamespace::create(&client, "koord-e2e-quota-transform").await?;
    let ns = namespace.name.as_str();
    let quota = format!("e2e-cpu-{}", std::process::id());
    let quotas: Api<ElasticQuota> = Api::namespaced(client.clone(), ns);
    create_quota(&quotas, ns, &quota, "1").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_until_webhook_knows(&pods, ns, &quota, "2").await?;

    // 2 cpus do not fit a 1-cpu quota …
    let plain = pods
        .create(&dry_run(), &quota_pod(ns, "plain", &quota, "2", json!({}))?)
        .await;
    let status = refusal(plain, "a 2-cpu pod in a 1-cpu quota")?;
    ensure!(
        status.message.contains("exceeded quota"),
        "refusal message {:?}",
        status.message
    );
    // … but renamed to batch-cpu, which the quota does not limit, they are not charged to it.
    let renamed = quota_pod(
        ns,
        "renamed",
        &quota,
        "2",
        json!({ANNOTATION_POD_REPLACE_RESOURCES: "cpu:koordinator.sh/batch-cpu"}),
    )?;
    let admitted = pods
        .create(&dry_run(), &renamed)
        .await
        .context("a pod whose cpu the annotation renames was refused")?;
    // The evaluation copy is transformed, never the pod that is stored.
    let requests = admitted
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .context("admitted pod has no requests")?;
    ensure!(
        requests.get("cpu").map(|q| q.0.as_str()) == Some("2"),
        "the admitted pod's requests were rewritten: {requests:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_pod_in_a_quota_tree_gets_the_trees_nodes_as_affinity() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("a_pod_in_a_quota_tree_gets_the_trees_nodes_as_affinity").await
    else {
        return Ok(());
    };
    require_manager_gates(&client, &["MultiQuotaTree"]).await?;
    let node = worker_nodes(&client)
        .await?
        .into_iter()
        .next()
        .and_then(|n| n.metadata.name)
        .context("no schedulable node")?;
    let namespace = TestNamespace::create(&client, "koord-e2e-quota-tree").await?;
    let ns = namespace.name.as_str();
    let quota = format!("e2e-tree-{}", std::process::id());

    // The profile controller makes the tree's root quota from the profile.
    let profiles: Api<ElasticQuotaProfile> = Api::namespaced(client.clone(), ns);
    let profile: ElasticQuotaProfile = serde_json::from_value(json!({
        "apiVersion": "quota.koordinator.sh/v1alpha1", "kind": "ElasticQuotaProfile",
        "metadata": {"name": "e2e-profile", "namespace": ns},
        "spec": {
            "quotaName": quota,
            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}}
        }
    }))?;
    profiles.create(&PostParams::default(), &profile).await?;
    let quotas: Api<ElasticQuota> = Api::namespaced(client.clone(), ns);
    let tree_id = eventually_within(
        &format!("the profile controller creates quota {quota} with a tree id"),
        Duration::from_secs(90),
        || async {
            let Some(made) = quotas.get_opt(&quota).await? else {
                return Ok(None);
            };
            Ok(made
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_QUOTA_TREE_ID))
                .filter(|id| !id.is_empty())
                .cloned())
        },
    )
    .await?;

    // The profile is labelled with the same tree id: the webhook finds a tree's nodes by it (this
    // needs the manager's RBAC to patch profiles).
    eventually_within(
        &format!("profile e2e-profile is labelled with tree id {tree_id}"),
        Duration::from_secs(60),
        || async {
            let current = profiles.get("e2e-profile").await?;
            Ok((current
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_QUOTA_TREE_ID))
                == Some(&tree_id))
            .then_some(()))
        },
    )
    .await?;

    // The webhook's caches (quotas, profiles) catch up: the dry-run answer carries the affinity.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mutated = eventually_within(
        "the pod gets the tree's node affinity",
        Duration::from_secs(60),
        || async {
            let candidate = quota_pod(ns, "treed", &quota, "100m", json!({}))?;
            let created = pods.create(&dry_run(), &candidate).await?;
            let has_affinity = created
                .spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| {
                    n.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .is_some();
            Ok(has_affinity.then_some(created))
        },
    )
    .await?;
    let terms = mutated
        .spec
        .and_then(|s| s.affinity)
        .and_then(|a| a.node_affinity)
        .and_then(|n| n.required_during_scheduling_ignored_during_execution)
        .map(|r| r.node_selector_terms)
        .unwrap_or_default();
    ensure!(
        terms.len() == 1,
        "tree {tree_id}: want one node selector term, got {terms:?}"
    );
    let requirements = terms[0].match_expressions.clone().unwrap_or_default();
    ensure!(
        requirements
            .iter()
            .any(|r| r.key == "kubernetes.io/hostname"
                && r.operator == "In"
                && r.values.as_deref() == Some(std::slice::from_ref(&node))),
        "tree {tree_id}: the term does not select node {node}: {requirements:?}"
    );

    // A pod outside any tree is left alone.
    let plain: Api<Pod> = Api::namespaced(client.clone(), ns);
    let untouched = plain
        .create(
            &dry_run(),
            &pod(
                ns,
                "untreed",
                json!({"spec": {"containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "1"]
                }]}}),
            )?,
        )
        .await?;
    ensure!(
        untouched
            .spec
            .and_then(|s| s.affinity)
            .and_then(|a| a.node_affinity)
            .is_none(),
        "a pod outside every quota tree got node affinity"
    );
    Ok(())
}
