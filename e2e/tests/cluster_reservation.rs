//! Reservations on the local cluster, through the chart's koord-scheduler (the extender and its
//! reservation controller) and the real kube-scheduler:
//! 1. the built-in default quota carries upstream's wire form: upstream's koord-scheduler creates
//!    `koordinator-default-quota` with max and shared weight of MaxInt64/5 cores (beyond 64 bits
//!    of milli-cores), and a cluster moving from upstream keeps that object. Pods and
//!    Reservations of namespaces without a quota are charged to it.
//! 2. two KWOK nodes, A with 8 cpus and B with 16 (so kube-scheduler's own scores prefer B); a
//!    Reservation of 2 cpus, pinned to A by its template's node selector, is placed there and
//!    turns Available.
//! 3. a pod that is not an owner and asks for 7 cpus on A stays Pending: A has 8 cpus, of which
//!    the Reservation holds 2 for its owners.
//! 4. once it is gone, an owner pod that both nodes would take lands on A, in the Reservation
//!    (`scheduling.koordinator.sh/reservation-allocated` names it), and the Reservation, allocated
//!    once, ends Succeeded with the pod as its owner.
//! 5. pre-allocation: a running pod takes 4 of A's 6 free cpus; a Reservation of 4 cpus
//!    (`preAllocation`, Restricted, allocate-many, owners by label, pinned to A) cannot fit in the
//!    2 left, yet is placed on A in that pod's place: the pod gets `reservation-allocated` naming
//!    it and becomes its current owner.
//! 6. once that pod is gone, the Reservation still holds its 4 cpus: a 4-cpu pod that is not an
//!    owner stays Pending on A.
//! 7. Cluster-mode pre-allocation of several pods: B runs two pods labelled
//!    `pod.koordinator.sh/is-pre-allocatable=true` (6 cpus each, owned by nobody) and a 3-cpu pod
//!    that is not, leaving 1 cpu free; a 12-cpu, 2Gi Reservation (`preAllocationPolicy` Cluster with
//!    `enableMultiple`, pinned to B) is placed in both labelled pods' places, and both get
//!    `reservation-allocated` naming it. When the chart leaves
//!    `scheduler.plugins.reservation.preAllocation.enableClusterMode` off (its default; CI turns
//!    it on), the Reservation must instead stay unplaced with upstream's refusal text.
//!
//! Needs `KOORD_E2E_LOCAL_CLUSTER` (the local cluster's script, for `kwok up` and `kwok node`)
//! and the chart's default Reservation plugin. The nodes (with their NodeMetrics and pods), the
//! Reservation and the namespace are deleted afterwards, also when the test fails; the default
//! quota object stays (the quota webhook refuses to delete a built-in quota, as upstream's).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use anyhow::{Context, ensure};
use apis::extension::reservation::ANNOTATION_RESERVATION_ALLOCATED;
use apis::scheduling::v1alpha1::Reservation;
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use e2e::cluster::{
    KOORD_NAMESPACE, TestNamespace, delete_from_drop, eventually_within, pod, reservation_allocated,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use koord_scheduler::plugins::reservation::pre_allocation::REASON_CLUSTER_MODE_DISABLED;

const NODE_A: &str = "koord-e2e-resv-a";
const NODE_B: &str = "koord-e2e-resv-b";
/// The taint of KWOK's simulated nodes (hack/local-cluster/lib.sh).
const FAKE_TAINT: &str = "kwok.x-k8s.io/node";
/// The label both test nodes carry, so the test's pods go to no other node.
const NODE_LABEL: &str = "koord-e2e-reservation";
const OWNER_LABEL: &str = "koord-e2e-reservation-owner";
/// MaxInt64/5: upstream's max (in cores and bytes) of its built-in quotas.
const UPSTREAM_BUILTIN_MAX: &str = "1844674407370955161";

/// Deletes the nodes and the Reservations when the test ends, also when it fails.
struct Cleanup {
    reservations: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let nodes = delete_from_drop(|client| async move {
            for node in [NODE_A, NODE_B] {
                e2e::cluster::delete_simulated_node(&client, node).await?;
            }
            Ok::<(), kube::Error>(())
        });
        let names = self.reservations.clone();
        let reservation = delete_from_drop(move |client| async move {
            for name in names {
                e2e::cluster::delete_reservation(&client, &name).await?;
            }
            Ok::<(), kube::Error>(())
        });
        if !(nodes && reservation) {
            eprintln!(
                "cleanup incomplete (nodes {nodes}, reservations {reservation}): delete nodes \
                 {NODE_A}, {NODE_B} and Reservations {:?} by hand",
                self.reservations
            );
        }
    }
}

/// Gives `koordinator-default-quota` upstream's form, creating it if no upstream scheduler has.
async fn default_quota_in_upstream_form(client: &kube::Client) -> anyhow::Result<()> {
    let quotas = Api::<ElasticQuota>::namespaced(client.clone(), KOORD_NAMESPACE);
    let max = json!({"cpu": UPSTREAM_BUILTIN_MAX, "memory": UPSTREAM_BUILTIN_MAX});
    let weight = max.to_string();
    let form = json!({
        "metadata": {
            "name": "koordinator-default-quota", "namespace": KOORD_NAMESPACE,
            "annotations": {"quota.scheduling.koordinator.sh/shared-weight": weight}
        },
        "spec": {"max": max}
    });
    if quotas.get_opt("koordinator-default-quota").await?.is_some() {
        quotas
            .patch(
                "koordinator-default-quota",
                &PatchParams::default(),
                &Patch::Merge(&form),
            )
            .await
            .context("patching koordinator-default-quota into upstream's form")?;
    } else {
        quotas
            .create(&PostParams::default(), &serde_json::from_value(form)?)
            .await
            .context("creating koordinator-default-quota in upstream's form")?;
    }
    Ok(())
}

/// A pod spec for the test nodes: their taint tolerated, only nodes labelled `NODE_LABEL`, plus
/// `node_selector`.
fn on_test_nodes(cpu: &str, node_selector: Value) -> Value {
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
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}
        }]
    })
}

/// Waits for `name`'s Unschedulable condition, then checks it is still unbound a while
/// later (kube-scheduler retries it); `what` says why it should not fit.
async fn stays_pending(pods: &Api<Pod>, name: &str, what: &str) -> anyhow::Result<()> {
    let message = e2e::cluster::unschedulable_message(pods, name, Duration::from_secs(60))
        .await
        .with_context(|| what.to_string())?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = pods.get(name).await?;
    ensure!(
        later
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_none(),
        "{name} was bound after all (first refusal: {message})"
    );
    Ok(())
}

#[tokio::test]
async fn an_owner_pod_lands_in_its_reservation_which_others_cannot_take() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("an_owner_pod_lands_in_its_reservation_which_others_cannot_take")
            .await
    else {
        return Ok(());
    };
    let reservations = Api::<Reservation>::all(client.clone());
    let name = format!("koord-e2e-resv-{}", std::process::id());
    let pre_allocating = format!("koord-e2e-resv-pa-{}", std::process::id());
    let cluster_mode = format!("koord-e2e-resv-cm-{}", std::process::id());
    let _cleanup = Cleanup {
        reservations: vec![name.clone(), pre_allocating.clone(), cluster_mode.clone()],
    };
    default_quota_in_upstream_form(&client).await?;
    let labels = json!({"labels": { NODE_LABEL: "true" }});
    let beating_a =
        e2e::cluster::simulated_node_with_heartbeat(&client, NODE_A, "8", "32Gi", labels.clone())
            .await?;
    let beating_b =
        e2e::cluster::simulated_node_with_heartbeat(&client, NODE_B, "16", "64Gi", labels).await?;

    // 2. The Reservation, pinned to A.
    let owner_value = name.clone();
    let reservation: Reservation = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": on_test_nodes("2", json!({"kubernetes.io/hostname": NODE_A}))},
            "owners": [{"labelSelector": {"matchLabels": { OWNER_LABEL: owner_value }}}],
            "ttl": "10m"
        }
    }))?;
    reservations
        .create(&PostParams::default(), &reservation)
        .await
        .context("creating the Reservation")?;
    let placed = eventually_within(
        "the Reservation Available on A",
        Duration::from_secs(90),
        || async {
            let current = reservations.get(&name).await?;
            let status = current.status.clone().unwrap_or_default();
            let phase = serde_json::to_value(&status.phase)?;
            Ok((phase == json!("Available")).then_some(status))
        },
    )
    .await
    .with_context(|| format!("Reservation {name} was not placed"))?;
    ensure!(
        placed.node_name.as_deref() == Some(NODE_A),
        "the Reservation went to {:?}, not {NODE_A}",
        placed.node_name
    );

    let namespace = TestNamespace::create(&client, "koord-e2e-resv").await?;
    let ns = namespace.name.as_str();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);

    // 3. A pod that is not an owner cannot take the reserved cpus.
    pods.create(
        &PostParams::default(),
        &pod(
            ns,
            "intruder",
            json!({"spec": on_test_nodes("7", json!({"kubernetes.io/hostname": NODE_A}))}),
        )?,
    )
    .await?;
    stays_pending(
        &pods,
        "intruder",
        &format!("the intruder on {NODE_A}, where the Reservation holds 2 of 8 cpus"),
    )
    .await?;
    pods.delete("intruder", &DeleteParams::default()).await?;
    eventually_within("the intruder gone", Duration::from_secs(60), || async {
        Ok(pods.get_opt("intruder").await?.is_none().then_some(()))
    })
    .await?;

    // 4. The owner lands on A, in the Reservation.
    let owner_labels = json!({ OWNER_LABEL: name });
    pods.create(
        &PostParams::default(),
        &pod(
            ns,
            "owner",
            json!({"metadata": {"labels": owner_labels}, "spec": on_test_nodes("2", json!({}))}),
        )?,
    )
    .await?;
    let owner = eventually_within("the owner bound", Duration::from_secs(60), || async {
        let current = pods.get("owner").await?;
        Ok(current
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .map(|node| (node, current)))
    })
    .await?;
    ensure!(
        owner.0 == NODE_A,
        "the owner went to {}, not to {NODE_A} where its Reservation is",
        owner.0
    );
    let allocated = reservation_allocated(&owner.1);
    ensure!(
        allocated.contains(&name),
        "the owner's {ANNOTATION_RESERVATION_ALLOCATED} is {allocated:?}, not naming {name}"
    );
    eventually_within(
        "the Reservation Succeeded with the owner",
        Duration::from_secs(60),
        || async {
            let status = reservations.get(&name).await?.status.unwrap_or_default();
            let phase = serde_json::to_value(&status.phase)?;
            let owned = status
                .current_owners
                .unwrap_or_default()
                .iter()
                .any(|o| o.name.as_deref() == Some("owner"));
            Ok((phase == json!("Succeeded") && owned).then_some(()))
        },
    )
    .await?;

    // 5. Pre-allocation: a running owner-to-be on A, then a Reservation that fits only in its place.
    let runner_labels = json!({ OWNER_LABEL: pre_allocating });
    let on_a = json!({"kubernetes.io/hostname": NODE_A});
    pods.create(
        &PostParams::default(),
        &pod(
            ns,
            "runner",
            json!({"metadata": {"labels": runner_labels}, "spec": on_test_nodes("4", on_a.clone())}),
        )?,
    )
    .await?;
    eventually_within("the runner bound to A", Duration::from_secs(60), || async {
        let current = pods.get("runner").await?;
        Ok(current
            .spec
            .and_then(|s| s.node_name)
            .filter(|n| n == NODE_A)
            .map(|_| ()))
    })
    .await?;
    let reservation: Reservation = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": pre_allocating},
        "spec": {
            "template": {"spec": on_test_nodes("4", on_a.clone())},
            "owners": [{"labelSelector": {"matchLabels": { OWNER_LABEL: pre_allocating }}}],
            "preAllocation": true,
            "allocatePolicy": "Restricted",
            "allocateOnce": false,
            "ttl": "10m"
        }
    }))?;
    reservations
        .create(&PostParams::default(), &reservation)
        .await
        .context("creating the pre-allocating Reservation")?;
    let placed = eventually_within(
        "the pre-allocating Reservation Available with the runner as its owner",
        Duration::from_secs(90),
        || async {
            let status = reservations
                .get(&pre_allocating)
                .await?
                .status
                .unwrap_or_default();
            let phase = serde_json::to_value(&status.phase)?;
            let owned = status
                .current_owners
                .as_ref()
                .is_some_and(|owners| owners.iter().any(|o| o.name.as_deref() == Some("runner")));
            Ok((phase == json!("Available") && owned).then_some(status))
        },
    )
    .await
    .with_context(|| format!("Reservation {pre_allocating} did not pre-allocate the runner"))?;
    ensure!(
        placed.node_name.as_deref() == Some(NODE_A),
        "the pre-allocating Reservation went to {:?}, not {NODE_A}",
        placed.node_name
    );
    let runner = pods.get("runner").await?;
    let allocated = reservation_allocated(&runner);
    ensure!(
        allocated.contains(&pre_allocating),
        "the runner's {ANNOTATION_RESERVATION_ALLOCATED} is {allocated:?}, not naming {pre_allocating}"
    );

    // 6. The runner goes; its Reservation keeps the 4 cpus from a pod that is not an owner.
    pods.delete("runner", &DeleteParams::default()).await?;
    eventually_within("the runner gone", Duration::from_secs(60), || async {
        Ok(pods.get_opt("runner").await?.is_none().then_some(()))
    })
    .await?;
    pods.create(
        &PostParams::default(),
        &pod(
            ns,
            "late-intruder",
            json!({"spec": on_test_nodes("4", on_a)}),
        )?,
    )
    .await?;
    stays_pending(
        &pods,
        "late-intruder",
        &format!(
            "a 4-cpu pod on {NODE_A}, where {pre_allocating} still holds 4 of the 6 free cpus"
        ),
    )
    .await?;
    pods.delete("late-intruder", &DeleteParams::default())
        .await?;

    // 7. Cluster mode, several pods: two labelled spares on B make room for 12 cpus together.
    let on_b = json!({"kubernetes.io/hostname": NODE_B});
    for (spare, priority) in [("spare-high", "10"), ("spare-low", "1")] {
        let metadata = json!({
            "labels": {"pod.koordinator.sh/is-pre-allocatable": "true"},
            "annotations": {"pod.koordinator.sh/pre-allocatable-priority": priority}
        });
        pods.create(
            &PostParams::default(),
            &pod(
                ns,
                spare,
                json!({"metadata": metadata, "spec": on_test_nodes("6", on_b.clone())}),
            )?,
        )
        .await?;
    }
    pods.create(
        &PostParams::default(),
        &pod(
            ns,
            "filler",
            json!({"spec": on_test_nodes("3", on_b.clone())}),
        )?,
    )
    .await?;
    for bound in ["spare-high", "spare-low", "filler"] {
        eventually_within(
            &format!("{bound} bound to B"),
            Duration::from_secs(60),
            || async {
                let current = pods.get(bound).await?;
                Ok(current
                    .spec
                    .and_then(|s| s.node_name)
                    .filter(|n| n == NODE_B)
                    .map(|_| ()))
            },
        )
        .await?;
    }
    // Restricted: the two spares' memory (1Gi each) must fit in it too.
    let mut template = on_test_nodes("12", on_b);
    template["containers"][0]["resources"]["requests"]["memory"] = json!("2Gi");
    let reservation: Reservation = serde_json::from_value(json!({
        "apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
        "metadata": {"name": cluster_mode},
        "spec": {
            "template": {"spec": template},
            "owners": [{"labelSelector": {"matchLabels": { OWNER_LABEL: cluster_mode }}}],
            "preAllocation": true,
            "preAllocationPolicy": {"mode": "Cluster", "enableMultiple": true},
            "allocatePolicy": "Restricted",
            "allocateOnce": false,
            "ttl": "10m"
        }
    }))?;
    reservations
        .create(&PostParams::default(), &reservation)
        .await
        .context("creating the Cluster-mode Reservation")?;
    if cluster_mode_enabled(&client).await? {
        let placed = eventually_within(
            "the Cluster-mode Reservation Available on B",
            Duration::from_secs(90),
            || async {
                let status = reservations
                    .get(&cluster_mode)
                    .await?
                    .status
                    .unwrap_or_default();
                let phase = serde_json::to_value(&status.phase)?;
                Ok((phase == json!("Available")).then_some(status))
            },
        )
        .await
        .with_context(|| format!("Reservation {cluster_mode} was not placed"))?;
        ensure!(
            placed.node_name.as_deref() == Some(NODE_B),
            "the Cluster-mode Reservation went to {:?}, not {NODE_B}",
            placed.node_name
        );
        for (spare, wanted) in [("spare-high", true), ("spare-low", true), ("filler", false)] {
            let allocated = reservation_allocated(&pods.get(spare).await?);
            ensure!(
                allocated.contains(&cluster_mode) == wanted,
                "{spare}'s {ANNOTATION_RESERVATION_ALLOCATED} is {allocated:?} (should it name \
                 {cluster_mode}: {wanted})"
            );
        }
    } else {
        eventually_within(
            "the Cluster-mode Reservation refused while the chart leaves Cluster mode off",
            Duration::from_secs(90),
            || async {
                let status = reservations
                    .get(&cluster_mode)
                    .await?
                    .status
                    .unwrap_or_default();
                let refused = status.conditions.unwrap_or_default().iter().any(|c| {
                    c.message
                        .as_deref()
                        .is_some_and(|m| m.contains(REASON_CLUSTER_MODE_DISABLED))
                });
                Ok(refused.then_some(()))
            },
        )
        .await?;
    }
    beating_a.abort();
    beating_b.abort();
    Ok(())
}

/// Whether the installed chart's koord-scheduler enables Cluster-mode pre-allocation.
async fn cluster_mode_enabled(client: &kube::Client) -> anyhow::Result<bool> {
    let scheduler = e2e::cluster::installed_scheduler(client).await?;
    Ok(scheduler.pre_allocation.cluster_mode)
}
