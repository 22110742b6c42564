//! Cluster eviction: the `policy/v1` Eviction subresource, an Event and the
//! reason annotations.

use std::collections::BTreeMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    DeleteOptions, ObjectMeta, Preconditions, Time,
};
use kube::api::{Patch, PatchParams, PostParams};

use super::request::{EVICTED_REASON, EvictionOutcome, EvictionRequest, PodRef};

/// Event reasons upstream's koordlet records.
pub const EVENT_REASON_EVICT_SUCCESS: &str = "evictPodSuccess";
pub const EVENT_REASON_EVICT_FAIL: &str = "evictPodFail";

/// Where the reason is left on the pod (upstream's descheduler keys).
pub const ANNOTATION_EVICT_REASON: &str = "koordinator.sh/evict-reason";
pub const ANNOTATION_EVICT_TRIGGER: &str = "koordinator.sh/evict-trigger";

/// `/api/v1/namespaces/<ns>/pods/<name>/eviction`.
pub fn eviction_path(pod: &PodRef) -> String {
    format!(
        "/api/v1/namespaces/{}/pods/{}/eviction",
        pod.namespace, pod.name
    )
}

/// The Eviction object: bound to the pod's UID so a re-created pod with the
/// same name is never evicted by mistake; default grace period.
pub fn eviction_body(pod: &PodRef) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        }),
    }
}

pub(super) async fn evict_through_api(
    client: &kube::Client,
    node_name: &str,
    request: &EvictionRequest,
) -> EvictionOutcome {
    let pod = &request.pod;
    let message = request.upstream_message();
    let event_message = format!(
        "evict Pod:{}/{}, reason: {EVICTED_REASON}, message: {message}",
        pod.namespace, pod.name
    );
    let outcome = match post_eviction(client, pod).await {
        Ok(()) => EvictionOutcome::Evicted,
        Err(kube::Error::Api(status)) if status.code == 429 => EvictionOutcome::Blocked {
            message: status.message.clone(),
        },
        Err(err) => EvictionOutcome::Failed {
            error: err.to_string(),
        },
    };
    match &outcome {
        EvictionOutcome::Evicted => {
            tracing::warn!(pod = %pod, trigger = %request.trigger, message = %request.message,
                "evicted pod {pod} through the Eviction API");
            record_event(
                client,
                node_name,
                pod,
                EVENT_REASON_EVICT_SUCCESS,
                &event_message,
            )
            .await;
            annotate(client, pod, request).await;
        }
        EvictionOutcome::Blocked { message } | EvictionOutcome::Failed { error: message } => {
            let text = format!("{event_message}, error {message}");
            record_event(client, node_name, pod, EVENT_REASON_EVICT_FAIL, &text).await;
        }
        _ => {}
    }
    outcome
}

async fn post_eviction(client: &kube::Client, pod: &PodRef) -> Result<(), kube::Error> {
    let body = serde_json::to_vec(&eviction_body(pod)).map_err(kube::Error::SerdeError)?;
    let url = format!("/api/v1/namespaces/{}/pods", pod.namespace);
    let http_request = kube::core::Request::new(url)
        .create_subresource("eviction", &pod.name, &PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    client
        .request::<serde_json::Value>(http_request)
        .await
        .map(|_| ())
}

/// The Event of a runtime stop (ours: upstream's kill path records none,
/// which leaves no trace of the eviction in the cluster), worded as the
/// API path's.
pub(super) async fn record_stop_event(
    client: &kube::Client,
    node_name: &str,
    request: &EvictionRequest,
    outcome: &EvictionOutcome,
) {
    let pod = &request.pod;
    let event_message = format!(
        "evict Pod:{}/{}, reason: {EVICTED_REASON}, message: {}",
        pod.namespace,
        pod.name,
        request.upstream_message()
    );
    match outcome {
        EvictionOutcome::Stopped { .. } => {
            record_event(
                client,
                node_name,
                pod,
                EVENT_REASON_EVICT_SUCCESS,
                &event_message,
            )
            .await
        }
        EvictionOutcome::Failed { error } => {
            let text = format!("{event_message}, error {error}");
            record_event(client, node_name, pod, EVENT_REASON_EVICT_FAIL, &text).await
        }
        _ => {}
    }
}

/// A Warning Event on the pod; a failure to record it is only logged.
async fn record_event(
    client: &kube::Client,
    node_name: &str,
    pod: &PodRef,
    reason: &str,
    message: &str,
) {
    let now = SystemTime::now();
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    let time = k8s_openapi::jiff::Timestamp::try_from(now).ok().map(Time);
    let event = Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{nanos:x}", pod.name)),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".to_string()),
            kind: Some("Pod".to_string()),
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            uid: Some(pod.uid.clone()),
            ..ObjectReference::default()
        },
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        type_: Some("Warning".to_string()),
        source: Some(EventSource {
            component: Some(crate::identity::COMPONENT.name.to_string()),
            host: Some(node_name.to_string()),
        }),
        reporting_component: Some(crate::identity::COMPONENT.name.to_string()),
        reporting_instance: Some(node_name.to_string()),
        first_timestamp: time.clone(),
        last_timestamp: time,
        count: Some(1),
        ..Event::default()
    };
    let events = kube::Api::<Event>::namespaced(client.clone(), &pod.namespace);
    if let Err(err) = events.create(&PostParams::default(), &event).await {
        tracing::warn!(pod = %pod, reason, error = %err, "cannot record the eviction event");
    }
}

/// Leaves the reason on the (terminating) pod; only logged when it fails.
async fn annotate(client: &kube::Client, pod: &PodRef, request: &EvictionRequest) {
    let annotations: BTreeMap<&str, &str> = BTreeMap::from([
        (ANNOTATION_EVICT_REASON, request.message.as_str()),
        (ANNOTATION_EVICT_TRIGGER, request.trigger.as_str()),
    ]);
    let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
    let pods = kube::Api::<Pod>::namespaced(client.clone(), &pod.namespace);
    if let Err(err) = pods
        .patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(pod = %pod, error = %err, "cannot annotate the evicted pod with its reason");
    }
}

/// Loads the cluster configuration again (same sources, same order as the
/// connection) and builds a client that leaves retries to the strategies.
pub(super) async fn non_retrying_client(
    options: &koord_common::ClusterOptions,
) -> Result<kube::Client, String> {
    use koord_common::cluster::{ConfigOrigin, resolve_origin};
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let origin = resolve_origin(
        options.kubeconfig.as_deref(),
        |name| std::env::var_os(name),
        std::env::home_dir(),
    )
    .map_err(|err| err.to_string())?;
    let kubeconfig = match &origin {
        ConfigOrigin::InCluster { .. } => {
            let config = kube::Config::incluster().map_err(|err| err.to_string())?;
            return client_without_retries(config);
        }
        ConfigOrigin::KubeconfigFlag(path) | ConfigOrigin::DefaultKubeconfig(path) => {
            Kubeconfig::read_from(path).map_err(|err| err.to_string())?
        }
        ConfigOrigin::KubeconfigEnv(_) => Kubeconfig::from_env()
            .map_err(|err| err.to_string())?
            .ok_or("KUBECONFIG names no file")?,
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|err| err.to_string())?;
    client_without_retries(config)
}

fn client_without_retries(mut config: kube::Config) -> Result<kube::Client, String> {
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|err| err.to_string())
}
