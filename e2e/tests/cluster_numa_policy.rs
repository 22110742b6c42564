//! NUMA topology policy on the local cluster, through kube-scheduler and our extender's
//! NodeNUMAResource plugin.
//!
//! A KWOK-simulated node of 4 CPUs on two NUMA nodes (2 CPUs and 4 GiB each, described by the
//! node's NodeResourceTopology the test writes as koordlet would) is labelled
//! `node.koordinator.sh/numa-topology-policy: SingleNUMANode`. Then:
//! 1. a 3-CPU pod fits the node's CPUs but no single NUMA node: it stays Pending and
//!    kube-scheduler's reason carries upstream's `Unaligned NUMA Hint` text;
//! 2. a 2-CPU pod is bound to one NUMA node, recorded in the `resource-status` annotation;
//! 3. a 2-CPU LSR pod (a cpuset) is bound to the other NUMA node and gets exactly its CPUs.
//!
//! Needs `KOORD_E2E_LOCAL_CLUSTER` (for `kwok up` and `kwok node`) and the chart's defaults
//! (NodeNUMAResource on). Everything the test creates (namespace, node, NodeMetric, NRT) is
//! deleted afterwards, also when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use anyhow::{Context, bail, ensure};
use apis::extension::{
    LABEL_NUMA_TOPOLOGY_POLICY, LABEL_POD_QOS, ResourceStatus, get_resource_status,
};
use apis::topology::v1alpha1::NodeResourceTopology;
use e2e::cluster::{
    EXTENDER_RETRY, TestNamespace, delete_from_drop, eventually_within, pod,
    simulated_node_with_heartbeat, two_numa_node_topology, unschedulable_message,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

const NODE: &str = "koord-e2e-numa";
/// The taint of KWOK's simulated nodes (hack/local-cluster/lib.sh).
const FAKE_TAINT: &str = "kwok.x-k8s.io/node";

/// Deletes the node, its NodeMetric and NRT when the test ends, also when it fails.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let node = delete_from_drop(|client| async move {
            e2e::cluster::delete_simulated_node(&client, NODE).await
        });
        let nrt = delete_from_drop(|client| async move {
            e2e::cluster::delete_node_resource_topology(&client, NODE).await
        });
        if !(node && nrt) {
            eprintln!("cleanup incomplete: delete node, NodeMetric and NRT {NODE} by hand");
        }
    }
}

/// A koord-scheduler pod of `cpu` whole CPUs on the test's node (requests = limits).
fn numa_pod(namespace: &str, name: &str, cpu: &str, lsr: bool) -> anyhow::Result<Pod> {
    // LSR goes with the koord-prod priority class (the pod webhook refuses it otherwise).
    let (labels, priority_class) = if lsr {
        (json!({LABEL_POD_QOS: "LSR"}), json!("koord-prod"))
    } else {
        (json!({}), Value::Null)
    };
    let resources = json!({"cpu": cpu, "memory": "64Mi"});
    pod(
        namespace,
        name,
        json!({
            "metadata": {"labels": labels},
            "spec": {
                "schedulerName": "koord-scheduler",
                "priorityClassName": priority_class,
                "terminationGracePeriodSeconds": 0,
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "tolerations": [{"key": FAKE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {"requests": resources.clone(), "limits": resources}
                }]
            }
        }),
    )
}

/// The pod's `resource-status` once it is bound to the test's node.
async fn bound_status(pods: &Api<Pod>, name: &str) -> anyhow::Result<ResourceStatus> {
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
    get_resource_status(&annotations)
        .context("the resource-status annotation")?
        .with_context(|| format!("{name} has no resource-status: {annotations:?}"))
}

/// The single NUMA node a status names.
fn single_numa_node(name: &str, status: &ResourceStatus) -> anyhow::Result<i32> {
    match status.numa_node_resources.as_slice() {
        [one] => Ok(one.node),
        other => bail!("{name} should sit on one NUMA node, its status names {other:?}"),
    }
}

#[tokio::test]
async fn single_numa_node_policy_refuses_wide_pods_and_places_the_rest_on_one_numa_node()
-> anyhow::Result<()> {
    let test = "single_numa_node_policy_refuses_wide_pods_and_places_the_rest_on_one_numa_node";
    let Some(client) = e2e::cluster_or_skip(test).await else {
        return Ok(());
    };
    let _cleanup = Cleanup;
    let beating = simulated_node_with_heartbeat(
        &client,
        NODE,
        "4",
        "8Gi",
        json!({"labels": {LABEL_NUMA_TOPOLOGY_POLICY: "SingleNUMANode"}}),
    )
    .await?;
    Api::<NodeResourceTopology>::all(client.clone())
        .create(&PostParams::default(), &two_numa_node_topology(NODE)?)
        .await
        .context("the KWOK node's NodeResourceTopology")?;
    let result = run(&client).await;
    beating.abort();
    result
}

async fn run(client: &kube::Client) -> anyhow::Result<()> {
    let namespace = TestNamespace::create(client, "koord-e2e-numa").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let create = PostParams::default();

    // 1. Three CPUs: the node has four, no NUMA node has more than two.
    pods.create(&create, &numa_pod(ns, "wide", "3", false)?)
        .await?;
    // kube-scheduler may first refuse it for a taint the node lifecycle controller puts on a new
    // node until it sees it Ready; lifting it is a node update, on which the pod is tried again.
    let last = std::sync::Mutex::new(String::new());
    let named = eventually_within(
        "the wide pod refused for NUMA alignment",
        EXTENDER_RETRY,
        || async {
            let reason = unschedulable_message(&pods, "wide", EXTENDER_RETRY).await?;
            let named = reason.contains("Unaligned NUMA Hint");
            *last.lock().unwrap() = reason;
            Ok(named.then_some(()))
        },
    )
    .await;
    named.with_context(|| {
        format!(
            "the wide pod's reason does not name the NUMA alignment: {}",
            last.lock().unwrap()
        )
    })?;
    pods.delete("wide", &DeleteParams::default()).await?;

    // 2. Two CPUs by amount: one NUMA node.
    pods.create(&create, &numa_pod(ns, "half", "2", false)?)
        .await?;
    let half = bound_status(&pods, "half").await?;
    let half_node = single_numa_node("half", &half)?;

    // 3. Two pinned CPUs: the other NUMA node, its two CPUs.
    pods.create(&create, &numa_pod(ns, "pinned", "2", true)?)
        .await?;
    let pinned = bound_status(&pods, "pinned").await?;
    let pinned_node = single_numa_node("pinned", &pinned)?;
    ensure!(
        pinned_node != half_node,
        "both pods were given NUMA node {half_node}, which has only 2 CPUs"
    );
    let want = if pinned_node == 0 { "0-1" } else { "2-3" };
    ensure!(
        pinned.cpuset == want,
        "the LSR pod on NUMA node {pinned_node} got cpuset {:?}",
        pinned.cpuset
    );
    Ok(())
}
