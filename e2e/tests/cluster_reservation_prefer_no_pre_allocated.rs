//! The Reservation plugin's `preAllocationConfig.preferNoPreAllocatedPods` on the local cluster,
//! through the chart's koord-scheduler (the extender's reservation controller).
//!
//! A KWOK node of 8 CPUs runs `web-1` (2 CPUs, an owner of the Reservation to come). A
//! pre-allocating 2-CPU Reservation (Restricted, allocate-many, owners by label, pinned to the
//! node) fits on the node as it is. With `scheduler.plugins.reservation.preAllocation.
//! preferNoPreAllocatedPods` on (CI turns it on), it is placed there and takes no pod in: `web-1`
//! keeps no `reservation-allocated` and the Reservation lists no current owner. With it off (the
//! chart's default, as upstream's), `web-1` is pre-allocated to it all the same.
//!
//! Needs `KOORD_E2E_LOCAL_CLUSTER` (for `kwok up` and `kwok node`) and the chart's default
//! Reservation plugin. The node (with its NodeMetric and pods), the Reservation and the namespace
//! are deleted afterwards, also when the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::{Context, ensure};
use apis::scheduling::v1alpha1::Reservation;
use e2e::cluster::{
    EXTENDER_RETRY, TestNamespace, delete_from_drop, eventually_within, pod, reservation_allocated,
    simulated_node_with_heartbeat,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

const NODE: &str = "koord-e2e-prefer-free";
const RESERVATION: &str = "koord-e2e-prefer-free";
/// The taint of KWOK's simulated nodes (hack/local-cluster/lib.sh).
const FAKE_TAINT: &str = "kwok.x-k8s.io/node";
const OWNER_LABEL: &str = "koord-e2e-prefer-free-owner";

/// Deletes the node and the Reservation when the test ends, also when it fails.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let node = delete_from_drop(|client| async move {
            e2e::cluster::delete_simulated_node(&client, NODE).await
        });
        let reservation = delete_from_drop(|client| async move {
            e2e::cluster::delete_reservation(&client, RESERVATION).await
        });
        if !(node && reservation) {
            eprintln!(
                "cleanup incomplete: delete node {NODE} and Reservation {RESERVATION} by hand"
            );
        }
    }
}

/// A pod spec of `cpu` CPUs on the test's node.
fn on_the_node(cpu: &str) -> Value {
    json!({
        "schedulerName": "koord-scheduler",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "tolerations": [{"key": FAKE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
            "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}
        }]
    })
}

/// Whether the installed chart's koord-scheduler prefers placing reservations without
/// pre-allocated pods.
async fn prefers_no_pre_allocated_pods(client: &kube::Client) -> anyhow::Result<bool> {
    let scheduler = e2e::cluster::installed_scheduler(client).await?;
    Ok(scheduler.pre_allocation.prefer_no_pre_allocated_pods)
}

#[tokio::test]
async fn a_reservation_that_fits_takes_no_pod_in_when_the_chart_prefers_none() -> anyhow::Result<()>
{
    let test = "a_reservation_that_fits_takes_no_pod_in_when_the_chart_prefers_none";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    let _cleanup = Cleanup;
    let beating = simulated_node_with_heartbeat(&client, NODE, "8", "16Gi", json!({})).await?;
    let result = run(&client).await;
    beating.abort();
    result
}

async fn run(client: &kube::Client) -> anyhow::Result<()> {
    let prefer_none = prefers_no_pre_allocated_pods(client).await?;
    let namespace = TestNamespace::create(client, "koord-e2e-prefer-free").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let create = PostParams::default();
    let owner = json!({ OWNER_LABEL: "true" });
    pods.create(
        &create,
        &pod(
            ns,
            "web-1",
            json!({"metadata": {"labels": owner.clone()}, "spec": on_the_node("2")}),
        )?,
    )
    .await?;
    eventually_within("web-1 bound", EXTENDER_RETRY, || async {
        let current = pods.get("web-1").await?;
        Ok(current
            .spec
            .and_then(|s| s.node_name)
            .filter(|n| n == NODE)
            .map(|_| ()))
    })
    .await?;

    let reservations: Api<Reservation> = Api::all(client.clone());
    let reservation: Reservation = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": RESERVATION},
        "spec": {
            "template": {"spec": on_the_node("2")},
            "owners": [{"labelSelector": {"matchLabels": owner}}],
            "preAllocation": true,
            "allocatePolicy": "Restricted",
            "allocateOnce": false,
            "ttl": "10m"
        }
    }))?;
    reservations
        .create(&create, &reservation)
        .await
        .context("creating the pre-allocating Reservation")?;
    let status = eventually_within(
        "the Reservation Available",
        Duration::from_secs(90),
        || async {
            let status = reservations
                .get(RESERVATION)
                .await?
                .status
                .unwrap_or_default();
            let phase = serde_json::to_value(&status.phase)?;
            // Pre-allocating, it is Available with web-1 as its owner in one status write.
            let settled = prefer_none || status.current_owners.is_some();
            Ok((phase == json!("Available") && settled).then_some(status))
        },
    )
    .await
    .with_context(|| {
        format!("Reservation {RESERVATION} was not placed (prefer none: {prefer_none})")
    })?;
    ensure!(
        status.node_name.as_deref() == Some(NODE),
        "the Reservation went to {:?}, not {NODE}",
        status.node_name
    );
    let owners: Vec<String> = status
        .current_owners
        .unwrap_or_default()
        .iter()
        .filter_map(|o| o.name.clone())
        .collect();
    let allocated = reservation_allocated(&pods.get("web-1").await?);
    if prefer_none {
        ensure!(
            owners.is_empty() && allocated.is_empty(),
            "preferring no pre-allocated pods, the Reservation still took web-1 in (owners \
             {owners:?}, web-1's reservation-allocated {allocated:?})"
        );
    } else {
        ensure!(
            owners == ["web-1"] && allocated.contains(RESERVATION),
            "with the chart's default, the Reservation should pre-allocate web-1 (owners \
             {owners:?}, web-1's reservation-allocated {allocated:?})"
        );
    }
    Ok(())
}
