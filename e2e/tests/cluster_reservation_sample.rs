//! Owner pods land in their Reservations even when kube-scheduler's node sample leaves the
//! reservations' nodes out, on the local cluster through the chart's koord-scheduler and the real
//! kube-scheduler:
//! 1. 140 KWOK nodes (4 cpus each, labelled for this test) are added: kube-scheduler stops
//!    filtering once it has found 100 feasible nodes (its minimum; the chart leaves
//!    `percentageOfNodesToScore` at kube-scheduler's adaptive default), so each cycle hands the
//!    extender about 100 of the 140.
//! 2. 12 Reservations of 1 cpu, each pinned to its own node (every 11th), are placed and turn
//!    Available.
//! 3. 12 owner pods, one per Reservation, that every test node would take, are created at once.
//!    Each must be bound to its Reservation's node with `reservation-allocated` naming it. Without
//!    the extender's nomination (`status.nominatedNodeName`, see koord-scheduler/docs/extender.md,
//!    "Owners outside kube-scheduler's sample") an owner whose node is outside the ~100 sampled
//!    lands elsewhere: all 12 would be sampled in about 2 runs of 100.
//!
//! Needs `KOORD_E2E_LOCAL_CLUSTER` (the local cluster's script, for `kwok up`). The nodes (with
//! the pods kwok runs there), the Reservations and the namespace are deleted afterwards, also
//! when the test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use apis::extension::reservation::ANNOTATION_RESERVATION_ALLOCATED;
use apis::scheduling::v1alpha1::Reservation;
use e2e::cluster::{
    TestNamespace, delete_from_drop, eventually_within, pod, reservation_allocated,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

const NODES: usize = 140;
const OWNERS: usize = 12;
/// The taint (and kwok's selection annotation) of simulated nodes (hack/local-cluster/lib.sh).
const FAKE_TAINT: &str = "kwok.x-k8s.io/node";
/// The label of this test's nodes: its pods go to no other node.
const NODE_LABEL: &str = "koord-e2e-sample";
const OWNER_LABEL: &str = "koord-e2e-sample-owner";

/// Deletes the nodes and the Reservations when the test ends, also when it fails.
struct Cleanup {
    nodes: Vec<String>,
    reservations: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let names = self.reservations.clone();
        let reservations = delete_from_drop(move |client| async move {
            for name in names {
                e2e::cluster::delete_reservation(&client, &name).await?;
            }
            Ok::<(), kube::Error>(())
        });
        let names = self.nodes.clone();
        let nodes = delete_from_drop(move |client| async move {
            for node in names {
                e2e::cluster::delete_simulated_node(&client, &node).await?;
            }
            Ok::<(), kube::Error>(())
        });
        if !(nodes && reservations) {
            eprintln!(
                "cleanup incomplete (nodes {nodes}, reservations {reservations}): delete the nodes \
                 labelled {NODE_LABEL} and the Reservations {:?} by hand",
                self.reservations
            );
        }
    }
}

/// A node kwok simulates (as `local-cluster.sh kwok node` makes them), created through the API:
/// 140 script runs would take minutes.
fn simulated_node(name: &str) -> anyhow::Result<Node> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": { FAKE_TAINT: "fake" },
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "type": "kwok", NODE_LABEL: "true"
            }
        },
        "spec": {"taints": [{"key": FAKE_TAINT, "value": "fake", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}
        }
    }))?)
}

/// A pod spec for this test's nodes (their taint tolerated), plus `node_selector`.
fn on_sample_nodes(node_selector: Value) -> Value {
    let mut selector = json!({ NODE_LABEL: "true" });
    if let (Some(into), Some(from)) = (selector.as_object_mut(), node_selector.as_object()) {
        into.extend(from.clone());
    }
    json!({
        "schedulerName": "koord-scheduler",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": selector,
        "tolerations": [{"key": FAKE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}
        }]
    })
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

#[tokio::test]
async fn owners_land_in_reservations_outside_kube_schedulers_sample() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("owners_land_in_reservations_outside_kube_schedulers_sample").await
    else {
        return Ok(());
    };
    e2e::cluster::local_cluster(&["kwok", "up"])?;
    let pid = std::process::id();
    let node_names: Vec<String> = (0..NODES)
        .map(|i| format!("koord-e2e-sample-{pid}-{i:03}"))
        .collect();
    // Every 11th node holds one: spread over the whole list.
    let reserved: BTreeMap<String, String> = (0..OWNERS)
        .map(|i| {
            (
                format!("koord-e2e-sample-{pid}-r{i:02}"),
                node_names[i * 11].clone(),
            )
        })
        .collect();
    let _cleanup = Cleanup {
        nodes: node_names.clone(),
        reservations: reserved.keys().cloned().collect(),
    };

    // 1. The nodes.
    let nodes: Api<Node> = Api::all(client.clone());
    for name in &node_names {
        nodes
            .create(&PostParams::default(), &simulated_node(name)?)
            .await
            .with_context(|| format!("creating simulated node {name}"))?;
    }
    let selector = ListParams::default().labels(&format!("{NODE_LABEL}=true"));
    eventually_within(
        "the test's nodes Ready",
        Duration::from_secs(180),
        || async {
            let ready = nodes
                .list(&selector)
                .await?
                .items
                .iter()
                .filter(|n| is_ready(n))
                .count();
            Ok((ready == NODES).then_some(()))
        },
    )
    .await?;

    // 2. The Reservations, one per chosen node.
    let reservations = Api::<Reservation>::all(client.clone());
    for (name, node) in &reserved {
        let reservation: Reservation = serde_json::from_value(json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
            "metadata": {"name": name},
            "spec": {
                "template": {"spec": on_sample_nodes(json!({"kubernetes.io/hostname": node}))},
                "owners": [{"labelSelector": {"matchLabels": { OWNER_LABEL: name }}}],
                "ttl": "10m"
            }
        }))?;
        reservations
            .create(&PostParams::default(), &reservation)
            .await
            .with_context(|| format!("creating Reservation {name}"))?;
    }
    eventually_within(
        "every Reservation Available on its node",
        Duration::from_secs(120),
        || async {
            for (name, node) in &reserved {
                let status = reservations.get(name).await?.status.unwrap_or_default();
                let phase = serde_json::to_value(&status.phase)?;
                if phase != json!("Available") {
                    return Ok(None);
                }
                ensure!(
                    status.node_name.as_deref() == Some(node.as_str()),
                    "Reservation {name} went to {:?}, not {node}",
                    status.node_name
                );
            }
            Ok(Some(()))
        },
    )
    .await?;

    // 3. The owners, all at once: any test node would take each.
    let namespace = TestNamespace::create(&client, "koord-e2e-sample").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for (i, name) in reserved.keys().enumerate() {
        let labels = json!({ OWNER_LABEL: name });
        pods.create(
            &PostParams::default(),
            &pod(
                ns,
                &format!("owner-{i:02}"),
                json!({"metadata": {"labels": labels}, "spec": on_sample_nodes(json!({}))}),
            )?,
        )
        .await?;
    }
    let bound = eventually_within("every owner bound", Duration::from_secs(180), || async {
        let mut bound = BTreeMap::new();
        for i in 0..OWNERS {
            let current = pods.get(&format!("owner-{i:02}")).await?;
            let Some(node) = current.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                return Ok(None);
            };
            bound.insert(i, (node, current));
        }
        Ok(Some(bound))
    })
    .await?;
    let mut misplaced = Vec::new();
    for ((name, node), (i, (bound_to, owner))) in reserved.iter().zip(&bound) {
        let allocated = reservation_allocated(owner);
        if bound_to != node || !allocated.contains(name.as_str()) {
            misplaced.push(format!(
                "owner-{i:02} on {bound_to} (its Reservation {name} is on {node}), \
                 {ANNOTATION_RESERVATION_ALLOCATED} {allocated:?}"
            ));
        }
    }
    let nominated = bound
        .values()
        .filter(|(_, owner)| {
            owner
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_ref())
                .is_some()
        })
        .count();
    eprintln!("{nominated} of {OWNERS} owners still show a nominated node");
    ensure!(
        misplaced.is_empty(),
        "{} of {OWNERS} owners missed their Reservations: {misplaced:#?}",
        misplaced.len()
    );
    Ok(())
}
