//! Upstream-compatibility of admission on the local cluster:
//!
//! - deprecated batch resource names: upstream rewrites no pod (no webhook does), and its
//!   scheduler reads `koordinator.sh/batch-cpu` as `kubernetes.io/batch-cpu`. A pod asking for
//!   the old names keeps them, fits a node by its batch allocatable, and one asking for more
//!   than any node has stays pending for `kubernetes.io/batch-cpu` (chart defaults);
//! - pod binding admission (koord-manager gate `BindingAdmissionWebhook=true`, with
//!   `manager.bindingAdmission.userName=koord-scheduler` and
//!   `manager.bindingAdmission.namespaces=koord-e2e-binding`): a binding by another user in that
//!   namespace is refused with upstream's message; the bypass label, the koord-scheduler service
//!   account and another namespace are allowed;
//! - Reservation mutation (gate `ReservationMutatingWebhook=true`): a matching
//!   ClusterColocationProfile shapes a new Reservation's labels and template.
//!
//! Every object made here is deleted afterwards, also on failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use anyhow::{Context, ensure};
use e2e::cluster::{
    KOORD_NAMESPACE, TestNamespace, delete_from_drop, eventually, pod, resource,
    unschedulable_message, worker_nodes,
};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// The namespace the binding test's chart settings put in scope.
const BINDING_NAMESPACE: &str = "koord-e2e-binding";
/// Upstream's refusal.
const DENIED: &str = "binding denied: username is not in the allowed list";
const BYPASS_LABEL: &str = "koordinator.sh/binding-admission-bypass";
/// A scheduler nobody runs: the test binds its pods itself.
const NOBODY: &str = "koord-e2e-nobody";

fn batch_pod(namespace: &str, name: &str, cpu: &str, memory: &str) -> anyhow::Result<Pod> {
    pod(
        namespace,
        name,
        json!({
            "metadata": {"labels": {"koordinator.sh/qosClass": "BE"}},
            "spec": {
                "schedulerName": "koord-scheduler",
                "priorityClassName": "koord-batch",
                "containers": [{
                    "name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {
                        "requests": {"koordinator.sh/batch-cpu": cpu, "koordinator.sh/batch-memory": memory},
                        "limits": {"koordinator.sh/batch-cpu": cpu, "koordinator.sh/batch-memory": memory}
                    }
                }]
            }
        }),
    )
}

#[tokio::test]
async fn deprecated_batch_names_are_scheduled_as_the_current_ones() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("deprecated_batch_names_are_scheduled_as_the_current_ones").await
    else {
        return Ok(());
    };
    let namespace = TestNamespace::create(&client, "koord-e2e-deprecated").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace.name);

    // One milli-core and one MiB of batch fit any node that publishes batch resources.
    let small = pods
        .create(
            &PostParams::default(),
            &batch_pod(&namespace.name, "old-names-fit", "1", "1Mi")?,
        )
        .await?;
    // As upstream, admission leaves the old names in the pod.
    let requests = small.spec.as_ref().unwrap().containers[0]
        .resources
        .clone()
        .unwrap_or_default()
        .requests
        .unwrap_or_default();
    ensure!(
        requests.contains_key("koordinator.sh/batch-cpu")
            && !requests.contains_key("kubernetes.io/batch-cpu"),
        "the pod's requests were rewritten at admission: {requests:?}"
    );
    let node = eventually("the small old-name pod scheduled", || async {
        let pod = pods.get("old-names-fit").await?;
        Ok(pod.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()))
    })
    .await?;
    ensure!(
        worker_nodes(&client)
            .await?
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node.as_str())),
        "scheduled on {node}, which is not a worker"
    );

    // A billion cores of batch fit nowhere: the extender refuses it for kubernetes.io/batch-cpu.
    pods.create(
        &PostParams::default(),
        &batch_pod(&namespace.name, "old-names-too-big", "1000000000000", "1Mi")?,
    )
    .await?;
    let message = unschedulable_message(&pods, "old-names-too-big", e2e::cluster::WAIT).await?;
    ensure!(
        message.contains("kubernetes.io/batch-cpu"),
        "unschedulable for another reason: {message}"
    );
    Ok(())
}

/// Creates `name` (unscheduled) in `namespace`, optionally with the bypass label.
async fn unbound_pod(
    pods: &Api<Pod>,
    namespace: &str,
    name: &str,
    bypass: bool,
) -> anyhow::Result<()> {
    let labels = if bypass {
        json!({BYPASS_LABEL: ""})
    } else {
        json!({})
    };
    let body = pod(
        namespace,
        name,
        json!({
            "metadata": {"labels": labels},
            "spec": {
                "schedulerName": NOBODY,
                "containers": [{"name": "main", "image": e2e::busybox_image(), "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]
            }
        }),
    )?;
    pods.create(&PostParams::default(), &body).await?;
    Ok(())
}

/// Posts a Binding of `name` to `node`; `Err(message)` when the API refuses it.
async fn bind(pods: &Api<Pod>, name: &str, node: &str) -> anyhow::Result<Result<(), String>> {
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}
    });
    match pods
        .create_subresource::<_, Value>("binding", name, &PostParams::default(), &binding)
        .await
    {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(status)) => Ok(Err(status.message)),
        Err(other) => Err(other.into()),
    }
}

/// The fixed-name namespace in the binding scope, deleted when the guard drops.
struct ScopedNamespace;

impl Drop for ScopedNamespace {
    fn drop(&mut self) {
        let deleted = delete_from_drop(|client| async move {
            Api::<Namespace>::all(client)
                .delete(BINDING_NAMESPACE, &DeleteParams::background())
                .await
        });
        if !deleted {
            eprintln!("could not delete namespace {BINDING_NAMESPACE}");
        }
    }
}

#[tokio::test]
async fn bindings_by_users_outside_the_allowlist_are_refused_in_scope() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("bindings_by_users_outside_the_allowlist_are_refused_in_scope").await
    else {
        return Ok(());
    };
    let registered = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get("koordinator-validating-webhook-configuration")
        .await?
        .webhooks
        .unwrap_or_default()
        .iter()
        .any(|w| w.name == "vpodbinding.koordinator.sh");
    ensure!(
        registered,
        "vpodbinding.koordinator.sh is not registered: install the chart with \
         featureGates=BindingAdmissionWebhook=true, manager.bindingAdmission.userName=koord-scheduler \
         and manager.bindingAdmission.namespaces={BINDING_NAMESPACE}"
    );
    let node = worker_nodes(&client)
        .await?
        .into_iter()
        .find_map(|n| n.metadata.name)
        .context("the cluster has no schedulable node")?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // A namespace left by an interrupted run is still terminating: wait it out.
    eventually("the binding namespace created", || async {
        let namespace: Namespace = serde_json::from_value(json!({
            "metadata": {"name": BINDING_NAMESPACE, "labels": {"koord-e2e": "true"}}
        }))?;
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
            Err(other) => Err(other.into()),
        }
    })
    .await?;
    let _scoped = ScopedNamespace;
    let pods: Api<Pod> = Api::namespaced(client.clone(), BINDING_NAMESPACE);

    // The test's own user (the cluster admin) is not koord-scheduler. The webhook is
    // registered at install; retry with a fresh pod until its refusal shows.
    let mut attempt = 0;
    let message = eventually("a binding by the admin refused", || {
        attempt += 1;
        let name = format!("plain-{attempt}");
        let pods = pods.clone();
        let node = node.clone();
        async move {
            unbound_pod(&pods, BINDING_NAMESPACE, &name, false).await?;
            match bind(&pods, &name, &node).await? {
                Ok(()) => Ok(None),
                Err(message) => Ok(Some(message)),
            }
        }
    })
    .await?;
    ensure!(
        message.contains("vpodbinding.koordinator.sh") && message.contains(DENIED),
        "unexpected refusal: {message}"
    );

    // The bypass label lets anyone bind the pod.
    unbound_pod(&pods, BINDING_NAMESPACE, "bypass", true).await?;
    if let Err(message) = bind(&pods, "bypass", &node).await? {
        anyhow::bail!("a pod with {BYPASS_LABEL} was refused: {message}");
    }

    // koord-scheduler's service account is on the allowlist (its name contains it).
    let mut config = kube::Config::infer().await?;
    config.auth_info.impersonate = Some(format!(
        "system:serviceaccount:{KOORD_NAMESPACE}:koord-scheduler"
    ));
    let as_scheduler: Api<Pod> = Api::namespaced(Client::try_from(config)?, BINDING_NAMESPACE);
    unbound_pod(&pods, BINDING_NAMESPACE, "by-scheduler", false).await?;
    if let Err(message) = bind(&as_scheduler, "by-scheduler", &node).await? {
        anyhow::bail!("a binding by koord-scheduler's service account was refused: {message}");
    }

    // Outside the configured namespaces nothing is checked.
    let other = TestNamespace::create(&client, "koord-e2e-unscoped").await?;
    let other_pods: Api<Pod> = Api::namespaced(client.clone(), &other.name);
    unbound_pod(&other_pods, &other.name, "plain", false).await?;
    if let Err(message) = bind(&other_pods, "plain", &node).await? {
        anyhow::bail!("a binding outside the scope was refused: {message}");
    }
    Ok(())
}

#[tokio::test]
async fn a_matching_colocation_profile_shapes_a_new_reservation() -> anyhow::Result<()> {
    let Some(client) =
        e2e::cluster_or_skip("a_matching_colocation_profile_shapes_a_new_reservation").await
    else {
        return Ok(());
    };
    let registered = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get("koordinator-mutating-webhook-configuration")
        .await?
        .webhooks
        .unwrap_or_default()
        .iter()
        .any(|w| w.name == "mreservation-create.koordinator.sh");
    ensure!(
        registered,
        "mreservation-create.koordinator.sh is not registered: install the chart with \
         featureGates=ReservationMutatingWebhook=true"
    );
    let run = std::process::id().to_string();
    let profiles: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "config.koordinator.sh",
            "v1alpha1",
            "ClusterColocationProfile",
            "clustercolocationprofiles",
        ),
    );
    let reservations: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            "scheduling.koordinator.sh",
            "v1alpha1",
            "Reservation",
            "reservations",
        ),
    );
    let profile_name = format!("koord-e2e-reservation-{run}");
    let reservation_name = format!("koord-e2e-reservation-{run}");
    let profile: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "config.koordinator.sh/v1alpha1",
        "kind": "ClusterColocationProfile",
        "metadata": {"name": profile_name},
        "spec": {
            // Only this run's reservation carries the label.
            "selector": {"matchLabels": {"koord-e2e/reservation-run": run}},
            "labels": {"koord-e2e/profiled": "true"},
            "qosClass": "BE",
            "koordinatorPriority": 1111,
            // A scheduler nobody runs, so the reservation stays pending.
            "schedulerName": "koord-e2e-profiled-scheduler"
        }
    }))?;
    profiles.create(&PostParams::default(), &profile).await?;

    let result = async {
        let reservation: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": reservation_name, "labels": {"koord-e2e/reservation-run": run}},
            "spec": {
                "template": {"spec": {
                    "schedulerName": NOBODY,
                    "containers": [{"name": "main", "image": e2e::busybox_image(),
                        "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]
                }},
                "owners": [{"labelSelector": {"matchLabels": {"koord-e2e/reservation-run": run}}}],
                "ttl": "10m"
            }
        }))?;
        // The webhook's profile cache follows a watch: recreate until the profile shows.
        let created = eventually("the profile applied to a new reservation", || async {
            let _ = reservations
                .delete(&reservation_name, &DeleteParams::default())
                .await;
            let created = match reservations
                .create(&PostParams::default(), &reservation)
                .await
            {
                Ok(created) => created,
                // The previous attempt is still being deleted.
                Err(kube::Error::Api(status)) if status.code == 409 => return Ok(None),
                Err(other) => return Err(other.into()),
            };
            let labels = created.metadata.labels.clone().unwrap_or_default();
            Ok(
                (labels.get("koord-e2e/profiled").map(String::as_str) == Some("true"))
                    .then_some(created),
            )
        })
        .await?;
        let labels = created.metadata.labels.clone().unwrap_or_default();
        ensure!(
            labels.get("koordinator.sh/qosClass").map(String::as_str) == Some("BE"),
            "labels {labels:?}"
        );
        ensure!(
            labels.get("koordinator.sh/priority").map(String::as_str) == Some("1111"),
            "labels {labels:?}"
        );
        let scheduler = &created.data["spec"]["template"]["spec"]["schedulerName"];
        ensure!(
            scheduler == "koord-e2e-profiled-scheduler",
            "template schedulerName {scheduler}"
        );
        anyhow::Ok(())
    }
    .await;

    let _ = reservations
        .delete(&reservation_name, &DeleteParams::default())
        .await;
    let _ = profiles
        .delete(&profile_name, &DeleteParams::default())
        .await;
    result
}
