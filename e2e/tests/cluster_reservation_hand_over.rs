//! Reservation pre-allocation handing a running pod's cpuset over, on the local cluster, through
//! kube-scheduler, our extender's NodeNUMAResource plugin and its reservation controller.
//!
//! A KWOK-simulated node of 4 CPUs on two NUMA nodes (CPUs 0–1 and 2–3, described by the
//! NodeResourceTopology the test writes as koordlet would). Then:
//! 1. an LSR pod `early` takes one NUMA node's CPUs, and the LSR pod `web-1` (an owner of the
//!    Reservation to come) the other's; `early` goes, and a 2-CPU pod without a cpuset fills the
//!    node by amount.
//! 2. a 2-CPU LSR Reservation (`preAllocation`, Restricted, allocate-many, owners by label, pinned
//!    to the node) is placed in `web-1`'s place: `web-1` gets `reservation-allocated` naming it and
//!    becomes its current owner, and the Reservation's `resource-status` holds exactly `web-1`'s
//!    CPUs. Without the hand-over it would get the CPUs `early` left, which come first.
//!
//! Needs `KOORD_E2E_LOCAL_CLUSTER` (for `kwok up` and `kwok node`) and the chart's defaults
//! (NodeNUMAResource and Reservation on). Everything the test creates (namespace, node,
//! NodeMetric, NRT, Reservation) is deleted afterwards, also when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::{Context, ensure};
use apis::extension::{LABEL_POD_QOS, ResourceStatus, get_resource_status};
use apis::scheduling::v1alpha1::Reservation;
use apis::topology::v1alpha1::NodeResourceTopology;
use e2e::cluster::{
    EXTENDER_RETRY, TestNamespace, delete_from_drop, eventually_within, pod, reservation_allocated,
    simulated_node_with_heartbeat, two_numa_node_topology,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const NODE: &str = "koord-e2e-hand-over";
const RESERVATION: &str = "koord-e2e-hand-over";
/// The taint of KWOK's simulated nodes (hack/local-cluster/lib.sh).
const FAKE_TAINT: &str = "kwok.x-k8s.io/node";
const OWNER_LABEL: &str = "koord-e2e-hand-over-owner";

/// Deletes the node, its NodeMetric and NRT, and the Reservation when the test ends, also when
/// it fails.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let node = delete_from_drop(|client| async move {
            e2e::cluster::delete_simulated_node(&client, NODE).await
        });
        let nrt = delete_from_drop(|client| async move {
            e2e::cluster::delete_node_resource_topology(&client, NODE).await
        });
        let reservation = delete_from_drop(|client| async move {
            e2e::cluster::delete_reservation(&client, RESERVATION).await
        });
        if !(node && nrt && reservation) {
            eprintln!(
                "cleanup incomplete: delete node, NodeMetric and NRT {NODE} and Reservation \
                 {RESERVATION} by hand"
            );
        }
    }
}

/// A pod spec of `cpu` whole CPUs (requests = limits) on the test's node.
fn on_the_node(cpu: &str) -> Value {
    let resources = json!({"cpu": cpu, "memory": "64Mi"});
    json!({
        "schedulerName": "koord-scheduler",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "tolerations": [{"key": FAKE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
            "resources": {"requests": resources.clone(), "limits": resources}
        }]
    })
}

/// An LSR pod (a cpuset) of `cpu` CPUs with `labels` besides its QoS class.
fn lsr_pod(namespace: &str, name: &str, cpu: &str, labels: Value) -> anyhow::Result<Pod> {
    let mut all = json!({ LABEL_POD_QOS: "LSR" });
    if let (Some(into), Some(from)) = (all.as_object_mut(), labels.as_object()) {
        into.extend(from.clone());
    }
    let mut spec = on_the_node(cpu);
    // The pod webhook refuses LSR without the koord-prod priority class.
    spec["priorityClassName"] = json!("koord-prod");
    pod(
        namespace,
        name,
        json!({"metadata": {"labels": all}, "spec": spec}),
    )
}

/// The pod once bound to the test's node, with its `resource-status` (None without one).
async fn bound(pods: &Api<Pod>, name: &str) -> anyhow::Result<(Pod, Option<ResourceStatus>)> {
    let pod = eventually_within(&format!("{name} bound"), EXTENDER_RETRY, || async {
        let pod = pods.get(name).await?;
        Ok(pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some()
            .then_some(pod))
    })
    .await?;
    let bound_to = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    ensure!(
        bound_to.as_deref() == Some(NODE),
        "{name} bound to {bound_to:?}"
    );
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let status = get_resource_status(&annotations).context("the resource-status annotation")?;
    Ok((pod, status))
}

async fn cpuset_of(pods: &Api<Pod>, name: &str) -> anyhow::Result<String> {
    let (_, status) = bound(pods, name).await?;
    let status = status.with_context(|| format!("{name} has no resource-status"))?;
    Ok(status.cpuset)
}

#[tokio::test]
async fn a_pre_allocating_reservation_takes_over_the_running_pods_cpuset() -> anyhow::Result<()> {
    let test = "a_pre_allocating_reservation_takes_over_the_running_pods_cpuset";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    let _cleanup = Cleanup;
    let beating = simulated_node_with_heartbeat(&client, NODE, "4", "8Gi", json!({})).await?;
    Api::<NodeResourceTopology>::all(client.clone())
        .create(&PostParams::default(), &two_numa_node_topology(NODE)?)
        .await
        .context("the KWOK node's NodeResourceTopology")?;
    let result = run(&client).await;
    beating.abort();
    result
}

async fn run(client: &kube::Client) -> anyhow::Result<()> {
    let namespace = TestNamespace::create(client, "koord-e2e-hand-over").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let create = PostParams::default();

    // 1. `early` takes the CPUs that come first, `web-1` the others; `early` goes and a pod
    //    without a cpuset fills the node by amount.
    pods.create(&create, &lsr_pod(ns, "early", "2", json!({}))?)
        .await?;
    let early = cpuset_of(&pods, "early").await?;
    let owner = json!({ OWNER_LABEL: "true" });
    pods.create(&create, &lsr_pod(ns, "web-1", "2", owner.clone())?)
        .await?;
    let web = cpuset_of(&pods, "web-1").await?;
    ensure!(early != web, "early and web-1 were both given cpuset {web}");
    pods.delete("early", &DeleteParams::default()).await?;
    eventually_within("early gone", Duration::from_secs(60), || async {
        Ok(pods.get_opt("early").await?.is_none().then_some(()))
    })
    .await?;
    pods.create(
        &create,
        &pod(ns, "filler", json!({"spec": on_the_node("2")}))?,
    )
    .await?;
    bound(&pods, "filler").await?;

    // 2. The Reservation takes web-1's place, and its CPUs.
    let reservations: Api<Reservation> = Api::all(client.clone());
    let reservation: Reservation = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": RESERVATION},
        "spec": {
            "template": {
                "metadata": {"labels": { LABEL_POD_QOS: "LSR" }},
                "spec": on_the_node("2")
            },
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
    let placed = eventually_within(
        "the Reservation Available with web-1 as its owner",
        Duration::from_secs(90),
        || async {
            let current = reservations.get(RESERVATION).await?;
            let status = current.status.clone().unwrap_or_default();
            let phase = serde_json::to_value(&status.phase)?;
            let owned = status
                .current_owners
                .as_ref()
                .is_some_and(|owners| owners.iter().any(|o| o.name.as_deref() == Some("web-1")));
            Ok((phase == json!("Available") && owned).then_some(current))
        },
    )
    .await
    .context("the Reservation did not pre-allocate web-1")?;
    let status = placed.status.clone().unwrap_or_default();
    ensure!(
        status.node_name.as_deref() == Some(NODE),
        "the Reservation went to {:?}, not {NODE}",
        status.node_name
    );
    let (web_pod, _) = bound(&pods, "web-1").await?;
    let allocated = reservation_allocated(&web_pod);
    ensure!(
        allocated.contains(RESERVATION),
        "web-1's reservation-allocated is {allocated:?}, not naming {RESERVATION}"
    );
    let kept = get_resource_status(&placed.metadata.annotations.clone().unwrap_or_default())
        .context("the Reservation's resource-status")?
        .context("the Reservation kept no resource-status")?;
    ensure!(
        kept.cpuset == web,
        "the Reservation holds cpuset {:?}, not web-1's {web:?} (the CPUs early left are {early:?})",
        kept.cpuset
    );
    Ok(())
}
