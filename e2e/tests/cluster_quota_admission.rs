//! Cluster end-to-end check of ElasticQuota admission at pod create (issue 20; upstream
//! `evaluateQuota`, feature gate `EnableQuotaAdmission`): a pod that fits its quota is admitted
//! and its requests are recorded in the quota's child-request annotation; a pod that does not fit
//! is refused by the API server at create, with upstream's message; a dry run is judged the same
//! way and records nothing.
//!
//! Needs koord-manager running with `--feature-gates=...EnableQuotaAdmission=true...` (CI's chart
//! upgrade sets it). Without a cluster the test prints a SKIP line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use apis::extension::{ANNOTATION_CHILD_REQUEST, LABEL_QUOTA_NAME, QuantityValue};
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use e2e::cluster::{KOORD_NAMESPACE, TestNamespace, eventually_within, pod};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

const GATE: &str = "EnableQuotaAdmission";

/// Fails unless koord-manager runs with the gate on.
async fn require_quota_admission(client: &Client) -> anyhow::Result<()> {
    let deployment = Api::<Deployment>::namespaced(client.clone(), KOORD_NAMESPACE)
        .get("koord-manager")
        .await
        .context("the koord-manager Deployment")?;
    let args: Vec<String> = deployment
        .spec
        .and_then(|spec| spec.template.spec)
        .map(|spec| spec.containers)
        .unwrap_or_default()
        .into_iter()
        .flat_map(|container| container.args.unwrap_or_default())
        .collect();
    let on = args.iter().any(|arg| {
        arg.trim_start_matches('-')
            .strip_prefix("feature-gates=")
            .is_some_and(|gates| gates.split(',').any(|g| g.trim() == format!("{GATE}=true")))
    });
    ensure!(
        on,
        "koord-manager runs without {GATE}=true (args {args:?}); install the chart with \
         --set featureGates={GATE}=true"
    );
    Ok(())
}

/// The cpu the quota records as used (its child-request annotation), in milli-cores.
fn recorded_cpu(quota: &ElasticQuota) -> anyhow::Result<Option<i64>> {
    let Some(text) = quota
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_CHILD_REQUEST))
    else {
        return Ok(None);
    };
    let used: BTreeMap<String, Quantity> =
        serde_json::from_str(text).with_context(|| format!("child-request {text:?}"))?;
    match used.get("cpu") {
        Some(cpu) => Ok(Some(QuantityValue::of(cpu)?.milli_value())),
        None => Ok(Some(0)),
    }
}

async fn wait_for_recorded_cpu(
    quotas: &Api<ElasticQuota>,
    name: &str,
    milli: i64,
) -> anyhow::Result<()> {
    eventually_within(
        &format!("quota {name} records {milli}m cpu"),
        Duration::from_secs(60),
        || async {
            let quota = quotas.get(name).await?;
            Ok((recorded_cpu(&quota)? == Some(milli)).then_some(()))
        },
    )
    .await
}

fn quota_pod(namespace: &str, name: &str, quota: &str, cpu: &str) -> anyhow::Result<Pod> {
    pod(
        namespace,
        name,
        json!({
            "metadata": {"labels": {LABEL_QUOTA_NAME: quota}},
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

#[tokio::test]
async fn a_pod_over_its_elastic_quota_is_refused_at_create() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("a_pod_over_its_elastic_quota_is_refused_at_create").await
    else {
        return Ok(());
    };
    require_quota_admission(&client).await?;
    let namespace = TestNamespace::create(&client, "koord-e2e-quota").await?;
    let ns = namespace.name.as_str();
    let quota_name = format!("e2e-small-{}", std::process::id());

    let quotas: Api<ElasticQuota> = Api::namespaced(client.clone(), ns);
    let quota: ElasticQuota = serde_json::from_value(json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": {"name": quota_name, "namespace": ns},
        "spec": {"max": {"cpu": "1", "memory": "1Gi"}}
    }))?;
    quotas.create(&PostParams::default(), &quota).await?;
    // The webhook resolves quotas from its watch cache: wait until a pod charged to the new quota
    // is judged against it (a dry run of an over-sized pod is refused once the quota is seen).
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually_within(
        "the webhook knows the new quota",
        Duration::from_secs(60),
        || async {
            let probe = quota_pod(ns, "probe", &quota_name, "2")?;
            match pods.create(&dry_run, &probe).await {
                Err(kube::Error::Api(status)) if status.message.contains("exceeded quota") => {
                    Ok(Some(()))
                }
                _ => Ok(None),
            }
        },
    )
    .await?;

    // A pod that fits is admitted and recorded.
    pods.create(
        &PostParams::default(),
        &quota_pod(ns, "fits", &quota_name, "600m")?,
    )
    .await
    .context("a pod within the quota was refused")?;
    wait_for_recorded_cpu(&quotas, &quota_name, 600).await?;

    // One that does not fit is refused at create, with upstream's message.
    let over = pods
        .create(
            &PostParams::default(),
            &quota_pod(ns, "over", &quota_name, "500m")?,
        )
        .await;
    let status = match over {
        Ok(_) => bail!("a pod over its quota (600m used + 500m > 1 cpu) was admitted"),
        Err(kube::Error::Api(status)) => status,
        Err(other) => return Err(other.into()),
    };
    let expected = format!(
        "admission webhook \"vpod.koordinator.sh\" denied the request: exceeded quota: \
         {ns}/{quota_name}, requested: cpu=500m, used: cpu=600m, limited: cpu=1"
    );
    ensure!(
        status.message == expected,
        "refusal message {:?}, want {expected:?}",
        status.message
    );
    ensure!(status.code == 400, "refusal code {}", status.code);
    ensure!(
        pods.get_opt("over").await?.is_none(),
        "the refused pod exists"
    );

    // A dry run of a pod that would fit passes and records nothing.
    pods.create(&dry_run, &quota_pod(ns, "dry", &quota_name, "300m")?)
        .await
        .context("a dry run within the quota was refused")?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        recorded_cpu(&quotas.get(&quota_name).await?)? == Some(600),
        "a refused pod or a dry run changed the recorded use: {:?}",
        quotas.get(&quota_name).await?.metadata.annotations
    );

    // The rest of the quota is still there for a pod that fits.
    pods.create(
        &PostParams::default(),
        &quota_pod(ns, "fits-too", &quota_name, "300m")?,
    )
    .await
    .context("a pod within the rest of the quota was refused")?;
    wait_for_recorded_cpu(&quotas, &quota_name, 900).await?;
    Ok(())
}
