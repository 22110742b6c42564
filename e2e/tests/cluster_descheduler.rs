//! koord-descheduler on the local cluster: the chart's Deployment becomes Ready, one replica holds
//! the `koord-descheduler` Lease, LowNodeLoad turns a hot node's pod into a PodMigrationJob, and
//! the MigrationController carries it out through a Reservation on the cold node while the
//! workload never drops below its PodDisruptionBudget.
//!
//! What one real node allows: upstream's descheduler refuses to run a round with fewer than two
//! ready nodes, and LowNodeLoad moves pods only from a hot node to a cold one. So the test
//! 1. checks that with the real node alone no job is made for its pods over three rounds;
//! 2. adds a cold node: a KWOK-simulated node (`local-cluster.sh kwok node`, tainted so that
//!    nothing else lands on it; the test pods tolerate the taint), kept Ready by kwok, with a
//!    NodeMetric the test keeps fresh at zero usage (no koordlet runs there);
//! 3. with thresholds so low that the real node is hot (any resource above 2 %) and the empty one
//!    cold (below 1 %), waits for a PodMigrationJob for one of its pods, with upstream's mode,
//!    trigger and reason annotations. LowNodeLoad's nodeFit only moves a pod whose usage the hot
//!    node's NodeMetric reports, so the job follows koordlet's next report that includes the
//!    test pods (within its report interval, inside the wait);
//! 4. waits for the job to succeed: a Reservation is placed on the cold node, the victim is
//!    evicted (the PodDisruptionBudget, minAvailable 2 of 3, allows one), its replacement lands in
//!    the Reservation and runs there (kwok); all along at least two replicas stay Ready.
//!
//! Needs `KOORD_E2E_LOCAL_CLUSTER` (the local cluster's script, for `kwok up` and `kwok node`).
//!
//! It needs the chart installed with (helm flags):
//!   --set descheduler.lowNodeLoad.enabled=true
//!   --set descheduler.deschedulingInterval=5s
//!   --set-json 'descheduler.lowNodeLoad.lowThresholds={"cpu":1,"memory":1}'
//!   --set-json 'descheduler.lowNodeLoad.highThresholds={"cpu":2,"memory":2}'
//!   --set-json 'descheduler.lowNodeLoad.anomalyCondition={"consecutiveAbnormalities":1}'
//!   --set-json 'descheduler.lowNodeLoad.evictableNamespaces={"include":["koord-e2e-descheduler"]}'
//! The namespace list keeps every other suite's pods out of LowNodeLoad's reach. Everything the
//! test creates (namespace, cold node, its NodeMetric, the jobs for its pods) is deleted
//! afterwards, also when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use apis::scheduling::v1alpha1::PodMigrationJob;
use apis::slo::v1alpha1::NodeMetric;
use e2e::cluster::{KOORD_NAMESPACE, component_pods, delete_from_drop, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// The namespace the test's chart settings make evictable.
const NAMESPACE: &str = "koord-e2e-descheduler";
const COLD_NODE: &str = "koord-e2e-descheduler-cold";
/// The taint of KWOK's simulated nodes (hack/local-cluster/lib.sh).
const FAKE_TAINT: &str = "kwok.x-k8s.io/node";
const WORKLOAD: &str = "hot-pods";
const FLAGS: &str = "--set descheduler.lowNodeLoad.enabled=true --set descheduler.deschedulingInterval=5s \
    --set-json 'descheduler.lowNodeLoad.lowThresholds={\"cpu\":1,\"memory\":1}' \
    --set-json 'descheduler.lowNodeLoad.highThresholds={\"cpu\":2,\"memory\":2}' \
    --set-json 'descheduler.lowNodeLoad.anomalyCondition={\"consecutiveAbnormalities\":1}' \
    --set-json 'descheduler.lowNodeLoad.evictableNamespaces={\"include\":[\"koord-e2e-descheduler\"]}'";

/// Deletes what the test made, in an order that stops further work first.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let jobs = delete_from_drop(|client| async move {
            let api: Api<PodMigrationJob> = Api::all(client);
            for job in api.list(&ListParams::default()).await?.items {
                if job.spec.pod_ref.namespace.as_deref() == Some(NAMESPACE)
                    && let Some(name) = job.metadata.name.as_deref()
                {
                    api.delete(name, &DeleteParams::background()).await?;
                }
            }
            Ok::<_, kube::Error>(())
        });
        let pdb = delete_from_drop(|client| async move {
            Api::<PodDisruptionBudget>::namespaced(client, NAMESPACE)
                .delete(WORKLOAD, &DeleteParams::background())
                .await
                .map(|_| ())
                .or_else(ignore_not_found)
        });
        let node = delete_from_drop(|client| async move {
            e2e::cluster::delete_simulated_node(&client, COLD_NODE).await
        });
        let namespace = delete_from_drop(|client| async move {
            Api::<Namespace>::all(client)
                .delete(NAMESPACE, &DeleteParams::background())
                .await
                .map(|_| ())
                .or_else(ignore_not_found)
        });
        if !(jobs && pdb && node && namespace) {
            eprintln!(
                "cleanup incomplete (jobs {jobs}, node {node}, namespace {namespace}): delete \
                 namespace {NAMESPACE}, node and NodeMetric {COLD_NODE} and their jobs by hand"
            );
        }
    }
}

fn ignore_not_found(err: kube::Error) -> Result<(), kube::Error> {
    match err {
        kube::Error::Api(status) if status.code == 404 => Ok(()),
        other => Err(other),
    }
}

/// The chart's DeschedulerConfiguration must carry the test's settings.
async fn check_chart_settings(client: &Client) -> anyhow::Result<()> {
    let config = Api::<ConfigMap>::namespaced(client.clone(), KOORD_NAMESPACE)
        .get("koord-descheduler-config")
        .await
        .context("the chart's koord-descheduler-config")?;
    let text = config
        .data
        .and_then(|data| data.get("koord-descheduler-config").cloned())
        .unwrap_or_default();
    let wanted = [
        "- name: LowNodeLoad\n",
        "deschedulingInterval: 5s",
        "dryRun: false",
        "- koord-e2e-descheduler",
        "consecutiveAbnormalities: 1",
    ];
    for needle in wanted {
        ensure!(
            text.contains(needle),
            "koord-descheduler-config lacks {needle:?}: install the chart with {FLAGS}"
        );
    }
    Ok(())
}

/// PodMigrationJobs for the test's pods.
async fn jobs_for_test_pods(client: &Client) -> anyhow::Result<Vec<PodMigrationJob>> {
    Ok(Api::<PodMigrationJob>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|job| job.spec.pod_ref.namespace.as_deref() == Some(NAMESPACE))
        .collect())
}

#[tokio::test]
async fn descheduler_leads_and_migrates_a_pod_off_the_hot_node() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("descheduler_leads_and_migrates_a_pod_off_the_hot_node").await
    else {
        return Ok(());
    };
    check_chart_settings(&client).await?;

    // Ready, and one replica leads.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    eventually("koord-descheduler Ready", || async {
        let deployment = deployments.get("koord-descheduler").await?;
        let wanted = deployment
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(1);
        let ready = deployment
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        Ok((wanted > 0 && ready == wanted).then_some(()))
    })
    .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), KOORD_NAMESPACE);
    let holder = eventually(
        "the koord-descheduler Lease held by a running replica",
        || async {
            let pods: Vec<String> = component_pods(&client, "koord-descheduler")
                .await?
                .into_iter()
                .filter_map(|pod| pod.metadata.name)
                .collect();
            let Some(spec) = leases
                .get_opt("koord-descheduler")
                .await?
                .and_then(|l| l.spec)
            else {
                return Ok(None);
            };
            let holder = spec.holder_identity.unwrap_or_default();
            let renewed_recently = spec.renew_time.is_some_and(|time| {
                Timestamp::now().duration_since(time.0)
                    < k8s_openapi::jiff::SignedDuration::from_secs(30)
            });
            Ok((renewed_recently
                && pods
                    .iter()
                    .any(|pod| holder.starts_with(&format!("{pod}_"))))
            .then_some(holder))
        },
    )
    .await?;
    eprintln!("koord-descheduler leader: {holder}");

    let _cleanup = Cleanup;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // A namespace left by an interrupted run may still be terminating: wait it out.
    eventually("the test namespace created", || async {
        let namespace: Namespace = serde_json::from_value(
            json!({"metadata": {"name": NAMESPACE, "labels": {"koord-e2e": "true"}}}),
        )?;
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(err) => Err(err.into()),
        }
    })
    .await?;

    // Three replicas: the MigrationController leaves alone a workload whose every replica its
    // limits would take (one replica, or as many as maxMigratingPerWorkload).
    let workload: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": WORKLOAD, "namespace": NAMESPACE},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": WORKLOAD}},
            "template": {
                "metadata": {"labels": {"app": WORKLOAD}},
                "spec": {
                    // ReservationFirst migrates only pods of a scheduler that reserves.
                    "schedulerName": "koord-scheduler",
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": [{"key": FAKE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}
                    }]
                }
            }
        }
    }))?;
    Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &workload)
        .await
        .context("the test workload")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let names: Vec<String> = eventually("three running test pods", || async {
        let running: Vec<String> = pods
            .list(&ListParams::default().labels(&format!("app={WORKLOAD}")))
            .await?
            .items
            .into_iter()
            .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|pod| pod.metadata.name)
            .collect();
        Ok((running.len() == 3).then_some(running))
    })
    .await?;

    // The real node alone: rounds are refused, whatever its load.
    tokio::time::sleep(Duration::from_secs(16)).await;
    let early = jobs_for_test_pods(&client).await?;
    ensure!(
        early.is_empty(),
        "with one ready node the descheduler made jobs: {:?}",
        early
            .iter()
            .map(|j| &j.spec.pod_ref.name)
            .collect::<Vec<_>>()
    );

    // The workload may lose one replica at a time.
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": WORKLOAD, "namespace": NAMESPACE},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": WORKLOAD}}}
    }))?;
    Api::<PodDisruptionBudget>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &pdb)
        .await
        .context("the PodDisruptionBudget")?;

    // A cold node joins: simulated by kwok.
    e2e::cluster::local_cluster(&["kwok", "up"])?;
    e2e::cluster::local_cluster(&["kwok", "node", COLD_NODE, "32", "64Gi"])?;
    let metric: NodeMetric = serde_json::from_value(json!({
        "apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeMetric",
        "metadata": {"name": COLD_NODE}, "spec": {}
    }))?;
    // koord-manager may have made it already.
    match Api::<NodeMetric>::all(client.clone())
        .create(&PostParams::default(), &metric)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => return Err(err).context("the cold node's NodeMetric"),
    }
    e2e::cluster::zero_usage_heartbeat(&client, COLD_NODE).await?;
    let beating = tokio::spawn({
        let client = client.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                if let Err(err) = e2e::cluster::zero_usage_heartbeat(&client, COLD_NODE).await {
                    eprintln!("heartbeat: {err:#}");
                }
            }
        }
    });

    // From now on, the fewest Ready replicas seen.
    let fewest_ready = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let watching = tokio::spawn({
        let pods = pods.clone();
        let fewest_ready = std::sync::Arc::clone(&fewest_ready);
        async move {
            loop {
                if let Ok(list) = pods
                    .list(&ListParams::default().labels(&format!("app={WORKLOAD}")))
                    .await
                {
                    let ready = list.items.iter().filter(|pod| pod_ready(pod)).count();
                    fewest_ready.fetch_min(ready, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    });

    let found = eventually("a PodMigrationJob for a test pod", || async {
        Ok(jobs_for_test_pods(&client).await?.into_iter().next())
    })
    .await;
    let job = match found {
        Ok(job) => job,
        Err(err) => {
            beating.abort();
            watching.abort();
            return Err(err);
        }
    };
    let pod = job.spec.pod_ref.name.clone().unwrap_or_default();
    ensure!(
        names.contains(&pod),
        "the job names pod {pod}, not one of {names:?}"
    );
    let mode = serde_json::to_value(&job.spec.mode)?;
    ensure!(mode == json!("ReservationFirst"), "job mode {mode}");
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    let annotation = |key: &str| annotations.get(key).cloned().unwrap_or_default();
    ensure!(
        annotation("koordinator.sh/evict-trigger") == "LowNodeLoad",
        "evict-trigger {:?}",
        annotation("koordinator.sh/evict-trigger")
    );
    let reason = annotation("koordinator.sh/evict-reason");
    if !reason.starts_with("node is overutilized") {
        bail!("evict-reason {reason:?}");
    }
    ensure!(
        job.spec.pod_ref.uid.is_some(),
        "the job's podRef has no uid: {}",
        serde_json::to_string(&job.spec.pod_ref).unwrap_or_default()
    );
    let job_name = job.metadata.name.clone().unwrap_or_default();
    eprintln!("PodMigrationJob {job_name} for {pod}: {reason}");

    // The MigrationController carries it out through a Reservation on the cold node.
    let jobs: Api<PodMigrationJob> = Api::all(client.clone());
    let finished = eventually("the PodMigrationJob finished", || async {
        let current = jobs.get(&job_name).await?;
        let phase = current
            .status
            .as_ref()
            .and_then(|s| s.phase.as_ref())
            .map(|p| serde_json::to_value(p).unwrap_or_default());
        Ok(match phase {
            Some(phase)
                if phase == json!("Succeeded")
                    || phase == json!("Failed")
                    || phase == json!("Aborted") =>
            {
                Some(current)
            }
            _ => None,
        })
    })
    .await;
    beating.abort();
    watching.abort();
    let finished = finished?;
    let status = finished.status.clone().unwrap_or_default();
    ensure!(
        serde_json::to_value(&status.phase)? == json!("Succeeded"),
        "the job ended {:?}: {:?} {:?}",
        status.phase,
        status.reason,
        status.message
    );
    let reservation = finished
        .spec
        .reservation_options
        .as_ref()
        .and_then(|o| o.reservation_ref.as_ref())
        .and_then(|r| r.name.clone());
    ensure!(
        reservation.is_some(),
        "the job succeeded without a Reservation: {}",
        serde_json::to_string(&finished.spec).unwrap_or_default()
    );
    ensure!(
        pods.get_opt(&pod)
            .await?
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()),
        "the victim {pod} is still there"
    );
    let on_cold: Vec<String> = pods
        .list(&ListParams::default().labels(&format!("app={WORKLOAD}")))
        .await?
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(COLD_NODE))
        .filter(pod_ready)
        .filter_map(|p| p.metadata.name)
        .collect();
    ensure!(
        !on_cold.is_empty(),
        "no Ready replica on the cold node {COLD_NODE} after the job succeeded"
    );
    let fewest = fewest_ready.load(std::sync::atomic::Ordering::Relaxed);
    ensure!(
        fewest >= 2,
        "the workload dropped to {fewest} Ready replicas (its PodDisruptionBudget wants 2)"
    );
    eprintln!(
        "migrated {pod} through Reservation {} to {on_cold:?}; fewest Ready replicas {fewest}",
        reservation.unwrap_or_default()
    );
    Ok(())
}

fn pod_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
