//! The admission handlers: decode the review, call the decision cores with
//! cache snapshots, record metrics.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use apis::config::v1alpha1::ClusterColocationProfile;
use apis::extension::LABEL_QUOTA_NAME;
use apis::scheduling::v1alpha1::Reservation;
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use k8s_openapi::api::core::v1::{Binding, ConfigMap, Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use koord_common::sync::MutexExt;
use kube::core::{DynamicObject, Resource};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::binding_admission::{BindingAdmission, DENIED_MESSAGE, Outcome, Screen};
use super::cache::WebhookCaches;
use super::configmap::{SloConfigRef, validate_configmap};
use super::device_resource::{mutate_device_resources, validate_device_resources};
use super::elasticquota::{
    QuotaOptions, fill_quota_defaults, validate_pod_quota, validate_quota_with,
};
use super::eviction::{PodPlacement, Requester, ScopedUsers};
use super::multi_quota_tree::add_node_affinity_for_multi_quota_tree;
use super::pod_mutating::{
    PriorityClassInfo, ProfileContext, apply_colocation_profiles, apply_extended_resource_spec,
};
use super::pod_validating::{PodValidationOptions, validate_pod};
use super::quota_evaluate::{BatchContext, EvaluationError, EvaluationGates, prepare_evaluation};
use super::quota_evaluator::QuotaEvaluator;
use super::reservation_mutating::apply_colocation_profiles_to_reservation;
use super::review::{Decision, Operation, OperationName, Refusal, TypedRequest, aggregate};

/// Served paths, as upstream registers them.
pub const PATH_MUTATE_POD: &str = "/mutate-pod";
pub const PATH_VALIDATE_POD: &str = "/validate-pod";
pub const PATH_MUTATE_ELASTIC_QUOTA: &str = "/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota";
pub const PATH_VALIDATE_ELASTIC_QUOTA: &str =
    "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota";
pub const PATH_VALIDATE_CONFIGMAP: &str = "/validate-configmap";
/// Ours: evictions by node-bound requesters (koordlet) held to their node.
pub const PATH_VALIDATE_POD_EVICTION: &str = "/validate-pod-eviction";
/// Node status mutation (resource amplification); gate `NodeMutatingWebhook`.
pub const PATH_MUTATE_NODE_STATUS: &str = "/mutate-node-status";
/// Node validation (node strategy conflicts); gate `NodeValidatingWebhook`.
pub const PATH_VALIDATE_NODE: &str = "/validate-node";

/// Pod binding admission (allowed binders); gate `BindingAdmissionWebhook`.
pub const PATH_VALIDATE_POD_BINDING: &str = "/validate-pod-binding";
/// Reservation mutation by ClusterColocationProfiles; gate `ReservationMutatingWebhook`.
pub const PATH_MUTATE_RESERVATION: &str = "/mutate-reservation";

/// Every admission path this server answers.
pub const ADMISSION_PATHS: [&str; 10] = [
    PATH_MUTATE_POD,
    PATH_VALIDATE_POD,
    PATH_MUTATE_ELASTIC_QUOTA,
    PATH_VALIDATE_ELASTIC_QUOTA,
    PATH_VALIDATE_CONFIGMAP,
    PATH_VALIDATE_POD_EVICTION,
    PATH_MUTATE_NODE_STATUS,
    PATH_VALIDATE_NODE,
    PATH_VALIDATE_POD_BINDING,
    PATH_MUTATE_RESERVATION,
];

/// Upstream's webhook histogram (`koord_manager_webhook_webhook_duration_milliseconds`)
/// plus a counter of bodies that were not an AdmissionReview.
#[derive(Clone)]
pub struct WebhookMetrics {
    pub duration_milliseconds: Family<Vec<(String, String)>, Histogram>,
    pub malformed_requests: Family<Vec<(String, String)>, Counter>,
    /// Refused admissions by plugin and `reason` (the error's metric label,
    /// else the kind of refusal the response code says).
    pub rejections: Family<Vec<(String, String)>, Counter>,
    /// Upstream's `koord_manager_webhook_binding_admission_decisions_total{decision}`.
    pub binding_admission_decisions: Family<Vec<(String, String)>, Counter>,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        WebhookMetrics {
            duration_milliseconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 20))
            }),
            malformed_requests: Family::default(),
            rejections: Family::default(),
            binding_admission_decisions: Family::default(),
        }
    }
}

impl WebhookMetrics {
    /// Registers under upstream's names (no component prefix: upstream's
    /// subsystem `koord_manager_webhook` already carries it).
    pub fn register(&self, registry: &koord_common::MetricsRegistry) {
        registry.register_root(|root| {
            root.register(
                "koord_manager_webhook_webhook_duration_milliseconds",
                "Time the admission webhooks took per plugin, in milliseconds",
                self.duration_milliseconds.clone(),
            );
            root.register(
                "koord_manager_webhook_malformed_requests",
                "Admission requests whose body was not a decodable AdmissionReview, by reason",
                self.malformed_requests.clone(),
            );
            root.register(
                "koord_manager_webhook_rejections",
                "Admission requests refused, by plugin and reason",
                self.rejections.clone(),
            );
            root.register(
                "koord_manager_webhook_binding_admission_decisions",
                "Total number of binding admission decisions.",
                self.binding_admission_decisions.clone(),
            );
        });
    }

    fn observe(
        &self,
        path: &str,
        operation: Operation,
        plugin: &str,
        decision: &Decision,
        started: Instant,
    ) {
        let (webhook_type, object_type) = describe_path(path);
        let labels = vec![
            ("webhook_type".to_owned(), webhook_type.to_owned()),
            ("object_type".to_owned(), object_type.to_owned()),
            ("operation".to_owned(), operation.as_str().to_owned()),
            ("plugin_name".to_owned(), plugin.to_owned()),
            (
                "status".to_owned(),
                if decision.allowed {
                    "allowed"
                } else {
                    "rejected"
                }
                .to_owned(),
            ),
        ];
        self.duration_milliseconds
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64() * 1000.0);
        if !decision.allowed {
            self.rejections
                .get_or_create(&vec![
                    ("webhook_type".to_owned(), webhook_type.to_owned()),
                    ("object_type".to_owned(), object_type.to_owned()),
                    ("plugin_name".to_owned(), plugin.to_owned()),
                    ("reason".to_owned(), decision.metric_label().to_owned()),
                ])
                .inc();
        }
    }

    /// Counts a request answered without a review, by `reason` (a
    /// `BodyRefused` label).
    pub fn count_malformed(&self, path: &str, reason: &str) {
        self.malformed_requests
            .get_or_create(&vec![
                ("path".to_owned(), path.to_owned()),
                ("reason".to_owned(), reason.to_owned()),
            ])
            .inc();
    }
}

/// `(webhook_type, object_type)` label values of a path, as upstream names them.
fn describe_path(path: &str) -> (&'static str, &'static str) {
    match path {
        PATH_MUTATE_POD => ("mutate", "pod"),
        PATH_VALIDATE_POD => ("validate", "pod"),
        PATH_MUTATE_ELASTIC_QUOTA => ("mutate", "elasticquota"),
        PATH_VALIDATE_ELASTIC_QUOTA => ("validate", "elasticquota"),
        PATH_VALIDATE_CONFIGMAP => ("validate", "configmap"),
        PATH_VALIDATE_POD_EVICTION => ("validate", "eviction"),
        PATH_MUTATE_NODE_STATUS => ("mutate", "node"),
        PATH_VALIDATE_NODE => ("validate", "node"),
        PATH_VALIDATE_POD_BINDING => ("validate", "binding"),
        PATH_MUTATE_RESERVATION => ("mutate", "reservation"),
        _ => ("unknown", "unknown"),
    }
}

/// Switches mirroring upstream feature gates that change admission.
#[derive(Clone, Copy, Debug, Default)]
pub struct AdmissionGates {
    pub colocation_profile_skip_mutating_resources: bool,
    pub colocation_profile_skip_validating_priority: bool,
    /// Upstream feature gate `DisableExtendedResourceSpec`.
    pub disable_extended_resource_spec: bool,
    /// Upstream feature gate `ElasticQuotaEnableUpdateResourceKey`.
    pub elastic_quota_enable_update_resource_key: bool,
    /// Upstream gates of quota evaluation at pod admission (`EnableQuotaAdmission` …).
    pub quota_evaluation: EvaluationGates,
    /// Upstream feature gate `MultiQuotaTree`: pods get their quota tree's node affinity.
    pub multi_quota_tree: bool,
    /// Upstream feature gate `DisableDeviceResourceSpec` (GPU requests are
    /// completed at create unless it is on).
    pub disable_device_resource_spec: bool,
    /// Upstream feature gate `ValidatePodDeviceResource` (GPU requests are
    /// checked at create and update when it is on).
    pub validate_pod_device_resource: bool,
}

/// How long the pod webhook waits for a namespace or PriorityClass missing from the cache.
const NAMESPACE_LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long the quota webhook waits for the pod count.
const POD_COUNT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long the eviction webhook waits for the pod lookup.
const POD_LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads a pod's metadata for the binding webhook's bypass keys (the API
/// shell reads the pod). `Ok(None)`: no such pod.
pub trait PodMetadataLookup: Send + Sync {
    fn metadata<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<ObjectMeta>, LookupError>>;
}

/// Reads the pod's metadata from the API server. Only bindings by users
/// outside the allowlist, in namespaces in scope, get here, so the manager
/// keeps no pod cache for it.
pub struct ApiPodMetadata(pub kube::Client);

impl PodMetadataLookup for ApiPodMetadata {
    fn metadata<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<ObjectMeta>, LookupError>> {
        Box::pin(async move {
            let pods: kube::Api<Pod> = kube::Api::namespaced(self.0.clone(), namespace);
            pods.get_metadata_opt(name)
                .await
                .map(|found| found.map(|partial| partial.metadata))
                .map_err(|err| LookupError::ReadPod {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    message: err.to_string(),
                })
        })
    }
}

/// Finds the node a pod is bound to (the API shell reads the pod).
pub trait PodPlacementLookup: Send + Sync {
    fn placement<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<PodPlacement, LookupError>>;
}

/// Why the API shell could not answer a lookup (the API client's error).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("cannot read pod {namespace}/{name}: {message}")]
    ReadPod {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("pod {namespace}/{name} not found")]
    PodNotFound { namespace: String, name: String },
    #[error("failed list pods for quota: {0}")]
    ListQuotaPods(String),
    #[error("reading pod {namespace}/{name} took longer than {timeout:?}")]
    ReadPodTimedOut {
        namespace: String,
        name: String,
        timeout: std::time::Duration,
    },
    #[error("listing the pods of quota {quota} took longer than {timeout:?}")]
    ListQuotaPodsTimedOut {
        quota: String,
        timeout: std::time::Duration,
    },
}

impl Refusal for LookupError {
    fn metric_label(&self) -> &'static str {
        match self {
            LookupError::ReadPod { .. } => "pod_read_failed",
            LookupError::PodNotFound { .. } => "pod_not_found",
            LookupError::ListQuotaPods(_) => "pod_list_failed",
            LookupError::ReadPodTimedOut { .. } | LookupError::ListQuotaPodsTimedOut { .. } => {
                "lookup_timeout"
            }
        }
    }
}

/// A webhook that cannot decide yet.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("the ElasticQuota and ElasticQuotaProfile caches are not synced yet")]
    QuotaTreeCaches,
}

impl Refusal for NotReady {
    fn metric_label(&self) -> &'static str {
        "not_synced"
    }
}

/// Reads the pod from the API server: an eviction must be judged on where the pod is now, and
/// evictions are rare enough that the manager keeps no pod cache for them.
pub struct ApiPodPlacement(pub kube::Client);

impl PodPlacementLookup for ApiPodPlacement {
    fn placement<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<PodPlacement, LookupError>> {
        Box::pin(async move {
            let pods: kube::Api<Pod> = kube::Api::namespaced(self.0.clone(), namespace);
            match pods.get_opt(name).await {
                Ok(None) => Ok(PodPlacement::Missing),
                Ok(Some(pod)) => Ok(pod
                    .spec
                    .and_then(|spec| spec.node_name)
                    .filter(|node| !node.is_empty())
                    .map_or(PodPlacement::Unbound, PodPlacement::Bound)),
                Err(err) => Err(LookupError::ReadPod {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    message: err.to_string(),
                }),
            }
        })
    }
}

/// Counts pods charged to an ElasticQuota (the API shell lists them).
pub trait QuotaPodCounter: Send + Sync {
    fn count(&self, quota: &str) -> futures::future::BoxFuture<'_, Result<usize, LookupError>>;
}

/// Lists pods labelled with the quota name through the API server.
pub struct ApiQuotaPodCounter(pub kube::Client);

impl QuotaPodCounter for ApiQuotaPodCounter {
    fn count(&self, quota: &str) -> futures::future::BoxFuture<'_, Result<usize, LookupError>> {
        let selector = format!("{LABEL_QUOTA_NAME}={quota}");
        Box::pin(async move {
            let pods: kube::Api<Pod> = kube::Api::all(self.0.clone());
            let params = kube::api::ListParams::default().labels(&selector).limit(3);
            pods.list_metadata(&params)
                .await
                .map(|list| list.items.len())
                .map_err(|err| LookupError::ListQuotaPods(err.to_string()))
        })
    }
}

/// The handlers with their inputs.
pub struct Handlers {
    pub caches: WebhookCaches,
    pub slo_config: SloConfigRef,
    pub gates: AdmissionGates,
    pub metrics: WebhookMetrics,
    pub quota_pods: Option<Box<dyn QuotaPodCounter>>,
    /// Evaluates pods against their quota (with `EnableQuotaAdmission`); without
    /// it such pods are refused.
    pub quota_evaluator: Option<QuotaEvaluator>,
    /// Users whose evictions are held to the node of their token.
    pub eviction_scope: ScopedUsers,
    /// Where the pod of an eviction is; without it such evictions are refused.
    pub pod_placement: Option<Box<dyn PodPlacementLookup>>,
    /// Reads namespaces and PriorityClasses the cache does not have yet.
    pub namespace_api: Option<kube::Client>,
    /// The `--binding-admission-*` flags (gate `BindingAdmissionWebhook`).
    pub binding_admission: BindingAdmission,
    /// Reads the pod of a binding for the bypass keys; without it they are not consulted.
    pub binding_pods: Option<Box<dyn PodMetadataLookup>>,
    /// The paths served (all by default; feature gates turn some off).
    pub paths: Vec<&'static str>,
    random_state: Mutex<u64>,
    sequence: AtomicU64,
}

impl Handlers {
    pub fn new(caches: WebhookCaches, slo_config: SloConfigRef) -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0x9E37_79B9_7F4A_7C15, |d| d.as_nanos() as u64)
            | 1;
        Handlers {
            caches,
            slo_config,
            gates: AdmissionGates::default(),
            metrics: WebhookMetrics::default(),
            quota_pods: None,
            quota_evaluator: None,
            eviction_scope: ScopedUsers::default(),
            pod_placement: None,
            namespace_api: None,
            binding_admission: BindingAdmission::from_flags(&Default::default()),
            binding_pods: None,
            paths: ADMISSION_PATHS.to_vec(),
            random_state: Mutex::new(seed),
            sequence: AtomicU64::new(0),
        }
    }

    /// A number in `0..100` for profile probabilities (xorshift; fairness is all that matters).
    fn roll(&self) -> i64 {
        let mut state = self.random_state.lock_or_recover();
        let mut x = *state
            ^ self
                .sequence
                .fetch_add(1, Ordering::Relaxed)
                .wrapping_mul(0x2545_F491_4F6C_DD1D);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        (x % 100) as i64
    }

    /// Decides one request for `path`, whose objects were read as `T`.
    pub async fn handle<T: Admitted>(&self, path: &str, request: &TypedRequest<T>) -> Decision {
        let started = Instant::now();
        let (plugin, decision) = T::decide(self, path, request).await;
        self.metrics
            .observe(path, request.operation.clone(), plugin, &decision, started);
        if decision.allowed {
            tracing::debug!(path, uid = %request.uid, name = %request.name, namespace = request.namespace(), operation = request.operation.as_str(), %decision, "admission decided");
        } else {
            tracing::info!(path, uid = %request.uid, name = %request.name, namespace = request.namespace(), operation = request.operation.as_str(), %decision, "admission denied");
        }
        decision
    }

    /// The namespace's labels from the cache, else (a namespace created a
    /// moment ago that the watch has not delivered yet) from the API server.
    async fn namespace_labels(&self, name: &str) -> Option<BTreeMap<String, String>> {
        if let Some(namespace) = self.caches.namespaces.get(name) {
            return Some(namespace.metadata.labels.clone().unwrap_or_default());
        }
        let client = self.namespace_api.as_ref()?;
        let api: kube::Api<Namespace> = kube::Api::all(client.clone());
        match tokio::time::timeout(NAMESPACE_LOOKUP_TIMEOUT, api.get_opt(name)).await {
            Ok(Ok(Some(namespace))) => Some(namespace.metadata.labels.unwrap_or_default()),
            Ok(Ok(None)) => None,
            Ok(Err(err)) => {
                tracing::warn!(namespace = name, error = %err, "namespace lookup failed");
                None
            }
            Err(_) => {
                tracing::warn!(namespace = name, "namespace lookup timed out");
                None
            }
        }
    }

    async fn priority_class_from_api(&self, name: &str) -> Option<PriorityClass> {
        let client = self.namespace_api.as_ref()?;
        let api: kube::Api<PriorityClass> = kube::Api::all(client.clone());
        match tokio::time::timeout(NAMESPACE_LOOKUP_TIMEOUT, api.get_opt(name)).await {
            Ok(Ok(found)) => found,
            Ok(Err(err)) => {
                tracing::warn!(priority_class = name, error = %err, "PriorityClass lookup failed");
                None
            }
            Err(_) => {
                tracing::warn!(priority_class = name, "PriorityClass lookup timed out");
                None
            }
        }
    }

    /// The PriorityClasses the profiles may name: the cache, plus classes
    /// created a moment ago that have not reached it yet (from the API server).
    async fn profile_priority_classes(
        &self,
        profiles: &[&ClusterColocationProfile],
    ) -> BTreeMap<String, PriorityClassInfo> {
        let info = |class: &PriorityClass| {
            Some((
                class.metadata.name.clone()?,
                PriorityClassInfo {
                    value: class.value,
                    preemption_policy: class.preemption_policy.clone(),
                },
            ))
        };
        let mut priority_classes: BTreeMap<String, PriorityClassInfo> = self
            .caches
            .priority_classes
            .all()
            .iter()
            .filter_map(|class| info(class))
            .collect();
        let missing: BTreeSet<&str> = profiles
            .iter()
            .filter_map(|p| p.spec.priority_class_name.as_deref())
            .filter(|name| !name.is_empty() && !priority_classes.contains_key(*name))
            .collect();
        for name in missing {
            if let Some(class) = self.priority_class_from_api(name).await {
                priority_classes.extend(info(&class));
            }
        }
        priority_classes
    }

    /// Upstream's binding admission handler (see [`super::binding_admission`]):
    /// pods/binding creates only; the pod is read only when its labels or
    /// annotations decide, and a pod that cannot be read is allowed.
    async fn validate_binding(&self, request: &TypedRequest<Binding>) -> Decision {
        let is_binding = request.resource.resource == "pods"
            && request.sub_resource.as_deref() == Some("binding")
            && request.operation == Operation::Create;
        if !is_binding || !self.binding_admission.is_active() {
            return Decision::allow();
        }
        let username = super::eviction::Requester::from_user(&request.user_info).username;
        let (namespace, name) = (request.namespace(), request.name.as_str());
        let outcome = match self.binding_admission.screen(&username, namespace) {
            Screen::Decided(outcome) => outcome,
            Screen::NeedsPod => match &self.binding_pods {
                None => self.binding_admission.judge(None),
                Some(lookup) => {
                    let found = match tokio::time::timeout(
                        POD_LOOKUP_TIMEOUT,
                        lookup.metadata(namespace, name),
                    )
                    .await
                    {
                        Ok(Ok(Some(meta))) => Ok(meta),
                        Ok(Ok(None)) => Err(LookupError::PodNotFound {
                            namespace: namespace.to_owned(),
                            name: name.to_owned(),
                        }),
                        Ok(Err(reason)) => Err(reason),
                        Err(_) => Err(LookupError::ReadPodTimedOut {
                            namespace: namespace.to_owned(),
                            name: name.to_owned(),
                            timeout: POD_LOOKUP_TIMEOUT,
                        }),
                    };
                    if let Err(reason) = &found {
                        tracing::info!(namespace, pod = name, %reason, "binding admission: pod unreadable, allowing (fail-open)");
                    }
                    let found = found.as_ref().map_err(ToString::to_string);
                    self.binding_admission
                        .judge(Some(found.as_ref().copied().map_err(String::as_str)))
                }
            },
        };
        if let Some(label) = outcome.metric_label() {
            self.metrics
                .binding_admission_decisions
                .get_or_create(&vec![("decision".to_owned(), label.to_owned())])
                .inc();
        }
        match outcome {
            Outcome::Denied => {
                tracing::info!(namespace, pod = name, %username, allowed = ?self.binding_admission.allowed_user_names(), "binding admission denied: user not in the allowlist");
                Decision::deny(DENIED_MESSAGE)
            }
            Outcome::DryRun => {
                tracing::info!(namespace, pod = name, %username, allowed = ?self.binding_admission.allowed_user_names(), "binding admission [dry run]: would deny");
                Decision::allow()
            }
            other => {
                tracing::debug!(namespace, pod = name, %username, outcome = ?other, "binding admission allowed");
                Decision::allow()
            }
        }
    }

    /// Upstream's Reservation mutating handler: CREATE of the resource
    /// itself; the matching ClusterColocationProfiles are applied (see
    /// [`super::reservation_mutating`]); a failure answers 500.
    async fn mutate_reservation(&self, request: &TypedRequest<Reservation>) -> Decision {
        if !request.is_for("reservations") || request.operation != Operation::Create {
            return Decision::allow();
        }
        let reservation = match request.object() {
            Ok(Some(reservation)) => reservation,
            Ok(None) => return Decision::bad_request("the request has no object"),
            Err(denied) => return denied,
        };
        if !self.caches.profiles.is_synced() || !self.caches.priority_classes.is_synced() {
            return Decision::internal(
                "webhook caches not synced yet: clustercolocationprofiles, priorityclasses",
            );
        }
        let profiles_owned = self.caches.profiles.all();
        let profiles: Vec<&ClusterColocationProfile> =
            profiles_owned.iter().map(|p| p.as_ref()).collect();
        if profiles.is_empty() {
            return Decision::allow();
        }
        let priority_classes = self.profile_priority_classes(&profiles).await;
        let mut mutated = reservation.clone();
        match apply_colocation_profiles_to_reservation(
            &mut mutated,
            &profiles,
            &priority_classes,
            &mut || self.roll(),
        ) {
            Ok(false) => Decision::allow(),
            Ok(true) => Decision::patch_from(reservation, &mutated),
            Err(err) => Decision::internal(err.to_string()),
        }
    }

    async fn mutate_pod(&self, request: &TypedRequest<Pod>) -> Decision {
        if !request.is_for("pods") || request.operation != Operation::Create {
            return Decision::allow();
        }
        let pod = match request.object() {
            Ok(Some(pod)) => pod,
            Ok(None) => return Decision::bad_request("the request has no object"),
            Err(denied) => return denied,
        };
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| request.namespace().to_owned());
        let waiting: Vec<_> = self
            .caches
            .unsynced()
            .into_iter()
            .filter(|name| *name != "elasticquotas")
            .collect();
        if !waiting.is_empty() {
            return Decision::internal(format!(
                "webhook caches not synced yet: {}",
                waiting.join(", ")
            ));
        }
        let profiles_owned = self.caches.profiles.all();
        let profiles: Vec<&ClusterColocationProfile> =
            profiles_owned.iter().map(|p| p.as_ref()).collect();
        let selects_namespaces = profiles.iter().any(|p| {
            p.spec
                .namespace_selector
                .as_ref()
                .is_some_and(|selector| !apis::configuration::is_empty_selector(selector))
        });
        let namespace_labels = if selects_namespaces {
            self.namespace_labels(&namespace).await
        } else {
            None
        };
        let priority_classes = self.profile_priority_classes(&profiles).await;
        let context = ProfileContext {
            profiles: &profiles,
            namespace_labels: namespace_labels.as_ref(),
            priority_classes: &priority_classes,
            skip_mutating_resources: self.gates.colocation_profile_skip_mutating_resources,
        };
        // The request keeps the original: it is written as JSON only when
        // something changed (most pods are not).
        let mut mutated = pod.clone();
        let outcome = apply_colocation_profiles(&mut mutated, &context, &mut || self.roll())
            .and_then(|by_profiles| {
                if self.gates.disable_extended_resource_spec {
                    return Ok(by_profiles);
                }
                Ok(apply_extended_resource_spec(&mut mutated)? || by_profiles)
            });
        let outcome = match outcome {
            Ok(changed) if self.gates.multi_quota_tree => {
                match self.multi_quota_tree_affinity(&mut mutated, &namespace) {
                    Ok(by_tree) => Ok(by_tree || changed),
                    Err(reason) => return Decision::internal_for(&reason),
                }
            }
            other => other,
        };
        // Last, as upstream: after profiles, extended resources and quota trees.
        let outcome = outcome.map(|changed| {
            let by_devices =
                !self.gates.disable_device_resource_spec && mutate_device_resources(&mut mutated);
            changed || by_devices
        });
        match outcome {
            Ok(false) => Decision::allow(),
            Ok(true) => Decision::patch_from(pod, &mutated),
            Err(err) => Decision::internal(err.to_string()),
        }
    }

    /// Upstream `addNodeAffinityForMultiQuotaTree` with the caches' quotas and profiles.
    fn multi_quota_tree_affinity(&self, pod: &mut Pod, namespace: &str) -> Result<bool, NotReady> {
        if !self.caches.quotas.is_synced() || !self.caches.quota_profiles.is_synced() {
            return Err(NotReady::QuotaTreeCaches);
        }
        let quotas_owned = self.caches.quotas.all();
        let quotas: Vec<&ElasticQuota> = quotas_owned.iter().map(|q| q.as_ref()).collect();
        let profiles_owned = self.caches.quota_profiles.all();
        let profiles: Vec<_> = profiles_owned.iter().map(|p| p.as_ref()).collect();
        // The pod is judged in its namespace even when the object leaves it out.
        let unnamespaced = pod.metadata.namespace.as_deref().is_none_or(str::is_empty);
        if unnamespaced {
            pod.metadata.namespace = Some(namespace.to_owned());
        }
        let mutated = add_node_affinity_for_multi_quota_tree(pod, &quotas, &profiles);
        if unnamespaced {
            pod.metadata.namespace = None;
        }
        Ok(mutated)
    }

    /// Upstream `evaluateQuota` (gate `EnableQuotaAdmission`): the pod must
    /// fit in its quota's admission limit; its requests are then recorded on
    /// the quota. A dry run is checked against the recorded use and writes
    /// nothing.
    async fn evaluate_quota(
        &self,
        request: &TypedRequest<Pod>,
        new_pod: &Pod,
        old_pod: Option<&Pod>,
    ) -> Result<(), EvaluationError> {
        let gates = self.gates.quota_evaluation;
        if !gates.enabled {
            return Ok(());
        }
        if !self.caches.quotas.is_synced() {
            return Err(EvaluationError::CacheNotSynced);
        }
        let in_namespace = |pod: &Pod| {
            let mut pod = pod.clone();
            if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
                pod.metadata.namespace = Some(request.namespace().to_owned());
            }
            pod
        };
        let (new_pod, old_pod) = (in_namespace(new_pod), old_pod.map(in_namespace));
        let attributes = {
            let quotas_owned = self.caches.quotas.all();
            let quotas: Vec<&ElasticQuota> = quotas_owned.iter().map(|q| q.as_ref()).collect();
            match prepare_evaluation(
                request.operation.clone(),
                &new_pod,
                old_pod.as_ref(),
                &quotas,
                gates,
            )? {
                Some(attributes) => attributes,
                None => return Ok(()),
            }
        };
        if request.dry_run {
            let key = attributes.key();
            let Some(quota) = self.caches.quotas.get(&key) else {
                return Err(EvaluationError::QuotaNotFound(attributes.quota_name));
            };
            let mut context = BatchContext::default();
            context.load(&quota);
            return context
                .check_request(&attributes, SystemTime::now())
                .map(|_| ());
        }
        match &self.quota_evaluator {
            Some(evaluator) => evaluator.evaluate(attributes).await,
            None => Err(EvaluationError::NoEvaluator),
        }
    }

    async fn validate_pod(&self, request: &TypedRequest<Pod>) -> Decision {
        if !request.is_for("pods")
            || !matches!(request.operation, Operation::Create | Operation::Update)
        {
            return Decision::allow();
        }
        let (new_pod, old_pod) = match request.object_with_old() {
            Ok(decoded) => decoded,
            Err(denied) => return denied,
        };
        let options = PodValidationOptions {
            skip_validating_priority: self.gates.colocation_profile_skip_validating_priority,
        };
        let mut errors = validate_pod(request.operation.clone(), new_pod, old_pod, options);
        // Without the ElasticQuota cache (e.g. no CRD) the quota check is skipped, not failed.
        if errors.is_empty() && self.caches.quotas.is_synced() {
            let quotas_owned = self.caches.quotas.all();
            let quotas: Vec<&ElasticQuota> = quotas_owned.iter().map(|q| q.as_ref()).collect();
            if let Err(reason) =
                validate_pod_quota(request.operation.clone(), new_pod, old_pod, &quotas)
            {
                errors.push(reason.to_string());
            }
        }
        if !errors.is_empty() {
            return Decision::bad_request(aggregate(&errors));
        }
        if self.gates.quota_evaluation.enabled {
            let started = Instant::now();
            let evaluated = self.evaluate_quota(request, new_pod, old_pod).await;
            // Upstream answers every failure of this check with 400 and the message.
            let decision = match evaluated {
                Ok(()) => Decision::allow(),
                Err(reason) => Decision::bad_request_for(&reason),
            };
            self.metrics.observe(
                PATH_VALIDATE_POD,
                request.operation.clone(),
                "EvaluateQuota",
                &decision,
                started,
            );
            if !decision.allowed {
                return decision;
            }
        }
        // After the quota checks, as upstream orders them; 400 like the rest.
        if self.gates.validate_pod_device_resource {
            let device_errors = validate_device_resources(new_pod);
            if !device_errors.is_empty() {
                return Decision::bad_request(aggregate(&device_errors));
            }
        }
        Decision::allow()
    }

    fn mutate_quota(&self, request: &TypedRequest<ElasticQuota>) -> Decision {
        if !request.is_for("elasticquotas") || request.operation != Operation::Create {
            return Decision::allow();
        }
        let quota = match request.object() {
            Ok(Some(quota)) => quota,
            Ok(None) => return Decision::bad_request("the request has no object"),
            Err(denied) => return denied,
        };
        if !self.caches.quotas.is_synced() {
            return Decision::internal("the ElasticQuota cache is not synced yet");
        }
        let existing_owned = self.caches.quotas.all();
        let existing: Vec<&ElasticQuota> = existing_owned.iter().map(|q| q.as_ref()).collect();
        let mut filled = quota.clone();
        if let Err(reason) = fill_quota_defaults(&mut filled, &existing) {
            return Decision::bad_request_for(&reason);
        }
        Decision::patch_from(quota, &filled)
    }

    async fn validate_quota(&self, request: &TypedRequest<ElasticQuota>) -> Decision {
        if !request.is_for("elasticquotas") {
            return Decision::allow();
        }
        let new = match request.operation {
            Operation::Delete => None,
            _ => match request.object() {
                Ok(quota) => quota,
                Err(denied) => return denied,
            },
        };
        let old = match request.old_object() {
            Ok(quota) => quota,
            Err(denied) => return denied,
        };
        let name = new
            .or(old)
            .and_then(|q| q.metadata.name.clone())
            .unwrap_or_else(|| request.name.clone());
        let needs_pods = match request.operation {
            Operation::Delete => true,
            Operation::Update => {
                let is_parent = |q: Option<&ElasticQuota>| {
                    q.and_then(|q| q.metadata.labels.as_ref())
                        .is_some_and(apis::extension::is_parent_quota)
                };
                is_parent(new) && !is_parent(old)
            }
            _ => false,
        };
        let bound_pods = match (&self.quota_pods, needs_pods) {
            // kube-apiserver gives a webhook 10 s by default; answer well before.
            (Some(counter), true) => {
                match tokio::time::timeout(POD_COUNT_TIMEOUT, counter.count(&name)).await {
                    Ok(Ok(count)) => Some(count),
                    Ok(Err(reason)) => return Decision::internal_for(&reason),
                    Err(_) => {
                        return Decision::internal_for(&LookupError::ListQuotaPodsTimedOut {
                            quota: name,
                            timeout: POD_COUNT_TIMEOUT,
                        });
                    }
                }
            }
            _ => None,
        };
        if !self.caches.quotas.is_synced() {
            return Decision::internal("the ElasticQuota cache is not synced yet");
        }
        let existing_owned = self.caches.quotas.all();
        let existing: Vec<&ElasticQuota> = existing_owned.iter().map(|q| q.as_ref()).collect();
        let options = QuotaOptions {
            enable_update_resource_key: self.gates.elastic_quota_enable_update_resource_key,
        };
        match validate_quota_with(
            request.operation.clone(),
            new,
            old,
            &existing,
            bound_pods,
            options,
        ) {
            Ok(()) => Decision::allow(),
            Err(reason) => Decision::bad_request_for(&reason),
        }
    }

    async fn validate_eviction(&self, request: &TypedRequest<Eviction>) -> Decision {
        let is_eviction = request.resource.resource == "pods"
            && request.sub_resource.as_deref() == Some("eviction")
            && request.operation == Operation::Create;
        let requester = Requester::from_user(&request.user_info);
        if !is_eviction || !self.eviction_scope.contains(&requester.username) {
            return Decision::allow();
        }
        let (namespace, name) = (request.namespace(), request.name.as_str());
        let Some(lookup) = &self.pod_placement else {
            return Decision::internal("the eviction webhook has no way to read pods");
        };
        let placement =
            match tokio::time::timeout(POD_LOOKUP_TIMEOUT, lookup.placement(namespace, name)).await
            {
                Ok(Ok(placement)) => placement,
                Ok(Err(reason)) => return Decision::internal_for(&reason),
                Err(_) => {
                    return Decision::internal_for(&LookupError::ReadPodTimedOut {
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                        timeout: POD_LOOKUP_TIMEOUT,
                    });
                }
            };
        super::eviction::decide(
            &requester,
            &self.eviction_scope,
            namespace,
            name,
            &placement,
        )
    }

    /// Upstream's node status mutating handler: only `nodes/status`
    /// creates and updates; a node that carries neither the amplification
    /// ratio nor the raw-allocatable annotation is allowed unchanged
    /// without being compared or copied.
    fn mutate_node_status(&self, request: &TypedRequest<Node>) -> Decision {
        if request.resource.resource != "nodes"
            || request.sub_resource.as_deref() != Some("status")
            || !matches!(request.operation, Operation::Create | Operation::Update)
        {
            return Decision::allow();
        }
        let annotations = request
            .object_meta()
            .and_then(|metadata| metadata.annotations.as_ref());
        let carries = |key: &str| annotations.is_some_and(|a| a.contains_key(key));
        if !carries(apis::extension::ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO)
            && !carries(apis::extension::ANNOTATION_NODE_RAW_ALLOCATABLE)
        {
            return Decision::allow();
        }
        let (node, old) = match request.object_with_old() {
            Ok(decoded) => decoded,
            Err(denied) => return denied,
        };
        let mut mutated = node.clone();
        if let Err(reason) = super::node_status::admit(request.operation.clone(), &mut mutated, old)
        {
            return Decision::internal_for(&reason);
        }
        Decision::patch_from(node, &mutated)
    }

    /// The slo-controller-config's data, read from the API server (only
    /// node label changes need it); `None` when it cannot be read.
    async fn slo_config_data(&self) -> Option<BTreeMap<String, String>> {
        let client = self.namespace_api.as_ref()?;
        let api: kube::Api<ConfigMap> =
            kube::Api::namespaced(client.clone(), &self.slo_config.namespace);
        match tokio::time::timeout(NAMESPACE_LOOKUP_TIMEOUT, api.get_opt(&self.slo_config.name))
            .await
        {
            Ok(Ok(found)) => found.map(|cm| cm.data.unwrap_or_default()),
            Ok(Err(err)) => {
                tracing::warn!(configmap = %self.slo_config.name, error = %err, "slo-controller-config lookup failed");
                None
            }
            Err(_) => {
                tracing::warn!(configmap = %self.slo_config.name, "slo-controller-config lookup timed out");
                None
            }
        }
    }

    /// Upstream's node validating handler: node creates and updates (no
    /// subresource) whose labels make the node match several node
    /// strategies of one key are refused; a conflicting create is logged.
    async fn validate_node(&self, request: &TypedRequest<Node>) -> Decision {
        if !request.is_for("nodes")
            || !matches!(request.operation, Operation::Create | Operation::Update)
        {
            return Decision::allow();
        }
        let (node, old) = match request.object_with_old() {
            Ok(decoded) => decoded,
            Err(denied) => return denied,
        };
        if !super::node_validating::need_check(node, old) {
            return Decision::allow();
        }
        let data = self.slo_config_data().await;
        match super::node_validating::validate(request.operation.clone(), node, old, data.as_ref())
        {
            Ok(None) => Decision::allow(),
            Ok(Some(conflict)) => {
                tracing::warn!(node = %request.name, %conflict, "new node matches several node strategies");
                Decision::allow()
            }
            Err(reason) => Decision::bad_request_for(&reason),
        }
    }

    fn validate_configmap(&self, request: &TypedRequest<ConfigMap>) -> Decision {
        if !request.is_for("configmaps") {
            return Decision::allow();
        }
        let decoded = if request.operation == Operation::Delete {
            request.old_object()
        } else {
            request.object()
        };
        let config_map = match decoded {
            Ok(Some(config_map)) => config_map,
            Ok(None) => return Decision::allow(),
            Err(denied) => return denied,
        };
        match validate_configmap(
            request.operation.clone(),
            config_map,
            request.namespace(),
            &self.slo_config,
        ) {
            Ok(()) => Decision::allow(),
            Err(reason) => Decision::bad_request_for(&reason),
        }
    }
}

/// An object type webhook paths are served for: which handler decides a
/// request of that type for a path, and under which plugin name.
pub trait Admitted: Resource + serde::de::DeserializeOwned + Send + Sync {
    fn decide(
        handlers: &Handlers,
        path: &str,
        request: &TypedRequest<Self>,
    ) -> impl Future<Output = (&'static str, Decision)> + Send;
}

/// A path no webhook of this object type serves.
fn no_webhook(path: &str) -> (&'static str, Decision) {
    ("", Decision::bad_request(format!("no webhook at {path}")))
}

impl Admitted for Pod {
    async fn decide(
        handlers: &Handlers,
        path: &str,
        request: &TypedRequest<Self>,
    ) -> (&'static str, Decision) {
        match path {
            PATH_MUTATE_POD => (
                "ClusterColocationProfile",
                handlers.mutate_pod(request).await,
            ),
            PATH_VALIDATE_POD => (
                "ClusterColocationProfile",
                handlers.validate_pod(request).await,
            ),
            other => no_webhook(other),
        }
    }
}

impl Admitted for ElasticQuota {
    async fn decide(
        handlers: &Handlers,
        path: &str,
        request: &TypedRequest<Self>,
    ) -> (&'static str, Decision) {
        match path {
            PATH_MUTATE_ELASTIC_QUOTA => ("QuotaMetaChecker", handlers.mutate_quota(request)),
            PATH_VALIDATE_ELASTIC_QUOTA => {
                ("QuotaMetaChecker", handlers.validate_quota(request).await)
            }
            other => no_webhook(other),
        }
    }
}

impl Admitted for ConfigMap {
    async fn decide(
        handlers: &Handlers,
        path: &str,
        request: &TypedRequest<Self>,
    ) -> (&'static str, Decision) {
        match path {
            PATH_VALIDATE_CONFIGMAP => ("SLOConfig", handlers.validate_configmap(request)),
            other => no_webhook(other),
        }
    }
}

impl Admitted for Eviction {
    async fn decide(
        handlers: &Handlers,
        path: &str,
        request: &TypedRequest<Self>,
    ) -> (&'static str, Decision) {
        match path {
            PATH_VALIDATE_POD_EVICTION => (
                "NodeScopedEviction",
                handlers.validate_eviction(request).await,
            ),
            other => no_webhook(other),
        }
    }
}

impl Admitted for Node {
    async fn decide(
        handlers: &Handlers,
        path: &str,
        request: &TypedRequest<Self>,
    ) -> (&'static str, Decision) {
        match path {
            PATH_MUTATE_NODE_STATUS => (
                super::node_status::PLUGIN_NAME,
                handlers.mutate_node_status(request),
            ),
            PATH_VALIDATE_NODE => (
                super::node_validating::PLUGIN_NAME,
                handlers.validate_node(request).await,
            ),
            other => no_webhook(other),
        }
    }
}

impl Admitted for Binding {
    async fn decide(
        handlers: &Handlers,
        path: &str,
        request: &TypedRequest<Self>,
    ) -> (&'static str, Decision) {
        match path {
            PATH_VALIDATE_POD_BINDING => {
                ("BindingAdmission", handlers.validate_binding(request).await)
            }
            other => no_webhook(other),
        }
    }
}

impl Admitted for Reservation {
    async fn decide(
        handlers: &Handlers,
        path: &str,
        request: &TypedRequest<Self>,
    ) -> (&'static str, Decision) {
        match path {
            PATH_MUTATE_RESERVATION => (
                "ClusterColocationProfile",
                handlers.mutate_reservation(request).await,
            ),
            other => no_webhook(other),
        }
    }
}

/// A review for a path that serves no object type: read, and refused.
impl Admitted for DynamicObject {
    async fn decide(
        _handlers: &Handlers,
        path: &str,
        _request: &TypedRequest<Self>,
    ) -> (&'static str, Decision) {
        no_webhook(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request as the server reads it: `request` in a review body.
    fn typed<T: Admitted>(request: serde_json::Value) -> TypedRequest<T> {
        let body = serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request
        }))
        .unwrap();
        crate::webhook::review::read_review(&body).unwrap()
    }

    struct FixedCount(usize);

    impl QuotaPodCounter for FixedCount {
        fn count(
            &self,
            _quota: &str,
        ) -> futures::future::BoxFuture<'_, Result<usize, LookupError>> {
            Box::pin(std::future::ready(Ok(self.0)))
        }
    }

    #[tokio::test]
    async fn quota_delete_counts_bound_pods() {
        let leaf: ElasticQuota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "leaf", "namespace": "team"},
            "spec": {"max": {"cpu": "4"}}
        }))
        .unwrap();
        let caches = WebhookCaches::synced_empty();
        caches.quotas.insert(leaf.clone());
        let request: TypedRequest<ElasticQuota> = typed(serde_json::json!({
            "uid": "d", "operation": "DELETE", "name": "leaf", "namespace": "team",
            "kind": {"group": "scheduling.sigs.k8s.io", "version": "v1alpha1", "kind": "ElasticQuota"},
            "resource": {"group": "scheduling.sigs.k8s.io", "version": "v1alpha1", "resource": "elasticquotas"},
            "userInfo": {},
            "oldObject": serde_json::to_value(&leaf).unwrap()
        }));
        let mut handlers = Handlers::new(caches, SloConfigRef::default());
        handlers.quota_pods = Some(Box::new(FixedCount(2)));
        let decision = handlers.handle(PATH_VALIDATE_ELASTIC_QUOTA, &request).await;
        assert_eq!(
            decision.message,
            "delete quota failed, quota leaf has 2 child pods"
        );
        handlers.quota_pods = Some(Box::new(FixedCount(0)));
        assert!(
            handlers
                .handle(PATH_VALIDATE_ELASTIC_QUOTA, &request)
                .await
                .allowed
        );
    }

    /// Pods of a fixed placement; counts lookups.
    struct FixedPlacement(Result<PodPlacement, LookupError>, std::sync::Arc<AtomicU64>);

    impl PodPlacementLookup for FixedPlacement {
        fn placement<'a>(
            &'a self,
            _namespace: &'a str,
            _name: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<PodPlacement, LookupError>> {
            self.1.fetch_add(1, Ordering::Relaxed);
            Box::pin(std::future::ready(self.0.clone()))
        }
    }

    fn eviction_request(username: &str, node_claim: &str) -> TypedRequest<Eviction> {
        typed(serde_json::json!({
            "uid": "e", "operation": "CREATE", "name": "victim", "namespace": "team",
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "userInfo": {"username": username, "extra": {crate::webhook::eviction::NODE_NAME_CLAIM: [node_claim]}},
            "object": {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "victim", "namespace": "team"}}
        }))
    }

    #[tokio::test]
    async fn evictions_by_koordlet_are_judged_on_the_pods_current_node() {
        let koordlet = "system:serviceaccount:koordinator-system:koordlet";
        let lookups = std::sync::Arc::new(AtomicU64::new(0));
        let handlers = |placement: Result<PodPlacement, LookupError>| {
            let mut handlers =
                Handlers::new(WebhookCaches::synced_empty(), SloConfigRef::default());
            handlers.eviction_scope =
                ScopedUsers::service_account("koordinator-system", "koordlet");
            handlers.pod_placement = Some(Box::new(FixedPlacement(placement, lookups.clone())));
            handlers
        };
        let own = handlers(Ok(PodPlacement::Bound("node-a".into())));
        let request = eviction_request(koordlet, "node-a");
        assert!(
            own.handle(PATH_VALIDATE_POD_EVICTION, &request)
                .await
                .allowed
        );

        let foreign = handlers(Ok(PodPlacement::Bound("node-b".into())));
        let denied = foreign.handle(PATH_VALIDATE_POD_EVICTION, &request).await;
        assert_eq!(denied.code, 403, "{denied}");
        assert!(denied.message.contains("team/victim"), "{denied}");

        // A lookup that fails refuses the eviction (the webhook fails closed, as its policy).
        let broken = handlers(Err(LookupError::ReadPod {
            namespace: "team".into(),
            name: "victim".into(),
            message: "apiserver said no".into(),
        }));
        let refused = broken.handle(PATH_VALIDATE_POD_EVICTION, &request).await;
        assert_eq!(refused.code, 500, "{refused}");
        assert!(refused.message.contains("apiserver said no"), "{refused}");
        assert_eq!(lookups.load(Ordering::Relaxed), 3);

        // Other users' evictions are left to RBAC, without a lookup.
        let other = handlers(Ok(PodPlacement::Bound("node-b".into())));
        let request = eviction_request(
            "system:serviceaccount:kube-system:disruption-controller",
            "",
        );
        assert!(
            other
                .handle(PATH_VALIDATE_POD_EVICTION, &request)
                .await
                .allowed
        );
        assert_eq!(lookups.load(Ordering::Relaxed), 3);
    }

    fn node_status_request(
        operation: &str,
        object: Value,
        old: Option<Value>,
    ) -> TypedRequest<Node> {
        typed(serde_json::json!({
            "uid": "n", "operation": operation, "name": "n1",
            "kind": {"group": "", "version": "v1", "kind": "Node"},
            "resource": {"group": "", "version": "v1", "resource": "nodes"},
            "userInfo": {},
            "subResource": "status",
            "object": object,
            "oldObject": old,
        }))
    }

    use serde_json::Value;

    #[tokio::test]
    async fn node_status_updates_are_amplified_through_the_handler() {
        let handlers = Handlers::new(WebhookCaches::synced_empty(), SloConfigRef::default());
        let node = |annotations: Value, cpu: &str| {
            serde_json::json!({
                "metadata": {"name": "n1", "annotations": annotations},
                "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}}
            })
        };
        let ratio = serde_json::json!({
            apis::extension::ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: r#"{"cpu":2.00}"#
        });
        let request =
            node_status_request("UPDATE", node(ratio.clone(), "4"), Some(node(ratio, "4")));
        let decision = handlers.handle(PATH_MUTATE_NODE_STATUS, &request).await;
        assert!(decision.allowed, "{decision}");
        let mut patched = serde_json::to_value(request.object.clone().unwrap()).unwrap();
        json_patch::patch(&mut patched, &decision.patch.unwrap()).unwrap();
        assert_eq!(patched["status"]["allocatable"]["cpu"], "8");
        assert_eq!(patched["status"]["allocatable"]["memory"], "8Gi");
        assert_eq!(
            patched["metadata"]["annotations"][apis::extension::ANNOTATION_NODE_RAW_ALLOCATABLE],
            r#"{"cpu":"4","memory":"8Gi"}"#
        );
        // Without either annotation: allowed as it is.
        let plain = node_status_request(
            "UPDATE",
            node(serde_json::json!({}), "4"),
            Some(node(serde_json::json!({}), "4")),
        );
        let decision = handlers.handle(PATH_MUTATE_NODE_STATUS, &plain).await;
        assert!(decision.allowed && decision.patch.is_none(), "{decision}");
        // A malformed ratio is refused with 500, as upstream.
        let bad = serde_json::json!({apis::extension::ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: "[}"});
        let request = node_status_request("UPDATE", node(bad.clone(), "4"), Some(node(bad, "4")));
        let decision = handlers.handle(PATH_MUTATE_NODE_STATUS, &request).await;
        assert_eq!(decision.code, 500, "{decision}");
        // Not the status subresource: allowed untouched.
        let mut main = node_status_request("UPDATE", node(serde_json::json!({}), "4"), None);
        main.sub_resource = None;
        assert!(
            handlers
                .handle(PATH_MUTATE_NODE_STATUS, &main)
                .await
                .allowed
        );
    }

    #[tokio::test]
    async fn objects_that_are_not_the_paths_type_get_the_answers_they_always_got() {
        let handlers = Handlers::new(WebhookCaches::synced_empty(), SloConfigRef::default());
        // Not a Node (status is a string): read only when it carries an amplification key.
        let not_a_node = |annotations: Value| serde_json::json!({"metadata": {"name": "n1", "annotations": annotations}, "status": "broken"});
        let plain = node_status_request(
            "UPDATE",
            not_a_node(serde_json::json!({})),
            Some(not_a_node(serde_json::json!({}))),
        );
        let decision = handlers.handle(PATH_MUTATE_NODE_STATUS, &plain).await;
        assert!(decision.allowed && decision.patch.is_none(), "{decision}");
        let ratio = serde_json::json!({
            apis::extension::ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: r#"{"cpu":2.00}"#
        });
        let carried =
            node_status_request("UPDATE", not_a_node(ratio.clone()), Some(not_a_node(ratio)));
        let denied = handlers.handle(PATH_MUTATE_NODE_STATUS, &carried).await;
        assert_eq!(denied.code, 400, "{denied}");
        assert!(
            denied.message.starts_with("cannot decode object: "),
            "{denied}"
        );

        // Not a Pod: /mutate-pod reads creates only.
        let not_a_pod = |operation: &str| -> TypedRequest<Pod> {
            typed(serde_json::json!({
                "uid": "x", "operation": operation, "name": "x", "namespace": "team",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "userInfo": {},
                "object": {"metadata": {"name": "x"}, "spec": {"containers": 5}},
                "oldObject": {"metadata": {"name": "x"}, "spec": {"containers": []}}
            }))
        };
        let update = handlers.handle(PATH_MUTATE_POD, &not_a_pod("UPDATE")).await;
        assert!(update.allowed && update.patch.is_none(), "{update}");
        let create = handlers.handle(PATH_MUTATE_POD, &not_a_pod("CREATE")).await;
        assert_eq!(create.code, 400, "{create}");
        assert_eq!(
            create.message,
            "cannot decode object: invalid type: integer `5`, expected a sequence"
        );

        // A path that serves another type.
        let elsewhere = handlers
            .handle(PATH_VALIDATE_CONFIGMAP, &pod_create("a", "1", false))
            .await;
        assert_eq!(elsewhere.code, 400, "{elsewhere}");
        assert_eq!(elsewhere.message, "no webhook at /validate-configmap");
    }

    #[tokio::test]
    async fn a_path_no_webhook_serves_still_answers_the_review() {
        let handlers = Handlers::new(WebhookCaches::synced_empty(), SloConfigRef::default());
        let body = serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "z", "operation": "CREATE",
                "kind": {"group": "", "version": "v1", "kind": "Secret"},
                "resource": {"group": "", "version": "v1", "resource": "secrets"},
                "userInfo": {}, "object": {"metadata": {"name": "s"}}}
        }))
        .unwrap();
        let response = crate::webhook::server::admit(&handlers, "/nowhere", &body).await;
        assert_eq!(response.status(), 200);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["uid"], "z");
        assert_eq!(answer["response"]["status"]["code"], 400);
        assert_eq!(
            answer["response"]["status"]["message"],
            "no webhook at /nowhere"
        );
    }

    /// Pod metadata by name; counts lookups.
    struct FixedPods(BTreeMap<String, ObjectMeta>, std::sync::Arc<AtomicU64>);

    impl PodMetadataLookup for FixedPods {
        fn metadata<'a>(
            &'a self,
            _namespace: &'a str,
            name: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<Option<ObjectMeta>, LookupError>> {
            self.1.fetch_add(1, Ordering::Relaxed);
            Box::pin(std::future::ready(Ok(self.0.get(name).cloned())))
        }
    }

    fn binding_request(username: &str, namespace: &str, pod: &str) -> TypedRequest<Binding> {
        typed(serde_json::json!({
            "uid": "b", "operation": "CREATE", "name": pod, "namespace": namespace,
            "kind": {"group": "", "version": "v1", "kind": "Binding"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "binding",
            "userInfo": {"username": username},
            "object": {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
        }))
    }

    #[tokio::test]
    async fn bindings_outside_the_allowlist_are_refused_in_scope() {
        use crate::webhook::binding_admission::{BindingAdmission, BindingAdmissionFlags};
        let lookups = std::sync::Arc::new(AtomicU64::new(0));
        let mut handlers = Handlers::new(WebhookCaches::synced_empty(), SloConfigRef::default());
        let bypassing = ObjectMeta {
            labels: Some(
                [(
                    "koordinator.sh/binding-admission-bypass".to_owned(),
                    "any".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        };
        handlers.binding_pods = Some(Box::new(FixedPods(
            [
                ("plain".to_owned(), ObjectMeta::default()),
                ("bypass".to_owned(), bypassing),
            ]
            .into(),
            lookups.clone(),
        )));
        let kube_scheduler = "system:kube-scheduler";
        // Upstream's defaults: no allowlist, nothing is checked.
        let request = binding_request(kube_scheduler, "team", "plain");
        assert!(
            handlers
                .handle(PATH_VALIDATE_POD_BINDING, &request)
                .await
                .allowed
        );

        let flags = BindingAdmissionFlags {
            user_name: "koord-scheduler".into(),
            namespaces: "team".into(),
            exclude_namespaces: "kube-system".into(),
            bypass_labels: "koordinator.sh/binding-admission-bypass".into(),
            ..Default::default()
        };
        handlers.binding_admission = BindingAdmission::from_flags(&flags);
        let denied = handlers.handle(PATH_VALIDATE_POD_BINDING, &request).await;
        assert!(!denied.allowed);
        assert_eq!(denied.code, 403, "{denied}");
        assert_eq!(
            denied.message,
            "binding denied: username is not in the allowed list"
        );
        let bypass = binding_request(kube_scheduler, "team", "bypass");
        assert!(
            handlers
                .handle(PATH_VALIDATE_POD_BINDING, &bypass)
                .await
                .allowed
        );
        // A pod the lookup does not find is allowed (fail-open, as upstream).
        let missing = binding_request(kube_scheduler, "team", "gone");
        assert!(
            handlers
                .handle(PATH_VALIDATE_POD_BINDING, &missing)
                .await
                .allowed
        );
        assert_eq!(lookups.load(Ordering::Relaxed), 3);

        // Allowed user, other namespace, excluded namespace: decided without a lookup.
        let koord = "system:serviceaccount:koordinator-system:koord-scheduler";
        for request in [
            binding_request(koord, "team", "plain"),
            binding_request(kube_scheduler, "elsewhere", "plain"),
            binding_request(kube_scheduler, "kube-system", "plain"),
        ] {
            assert!(
                handlers
                    .handle(PATH_VALIDATE_POD_BINDING, &request)
                    .await
                    .allowed
            );
        }
        assert_eq!(lookups.load(Ordering::Relaxed), 3);
        // Not a binding (a plain pod create sent to this path): allowed untouched.
        let mut not_binding = binding_request(kube_scheduler, "team", "plain");
        not_binding.sub_resource = None;
        assert!(
            handlers
                .handle(PATH_VALIDATE_POD_BINDING, &not_binding)
                .await
                .allowed
        );

        // Upstream's counter and decision values.
        let count = |decision: &str| {
            handlers
                .metrics
                .binding_admission_decisions
                .get_or_create(&vec![("decision".to_owned(), decision.to_owned())])
                .get()
        };
        assert_eq!(count("denied"), 1);
        assert_eq!(count("bypass_label"), 1);
        assert_eq!(count("allowed_username"), 1);
        assert_eq!(count("out_of_scope"), 1);
        assert_eq!(count("excluded_ns"), 1);
    }

    fn reservation_create(labels: Value) -> TypedRequest<Reservation> {
        typed(serde_json::json!({
            "uid": "r", "operation": "CREATE", "name": "r1",
            "kind": {"group": "scheduling.koordinator.sh", "version": "v1alpha1", "kind": "Reservation"},
            "resource": {"group": "scheduling.koordinator.sh", "version": "v1alpha1", "resource": "reservations"},
            "userInfo": {},
            "object": {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Reservation",
                "metadata": {"name": "r1", "labels": labels},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "pause"}]}},
                         "owners": [{"object": {"name": "p"}}]}}
        }))
    }

    #[tokio::test]
    async fn reservations_get_their_colocation_profiles() {
        let caches = WebhookCaches::synced_empty();
        caches.profiles.insert(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
                "metadata": {"name": "batch"},
                "spec": {"selector": {"matchLabels": {"app": "spark"}},
                         "qosClass": "BE", "priorityClassName": "koord-batch",
                         "schedulerName": "koord-scheduler"}
            }))
            .unwrap(),
        );
        let handlers = Handlers::new(caches.clone(), SloConfigRef::default());
        let request = reservation_create(serde_json::json!({"app": "spark"}));
        // The PriorityClass is not known (no cache entry, no API): 500, as upstream.
        let failed = handlers.handle(PATH_MUTATE_RESERVATION, &request).await;
        assert_eq!(failed.code, 500, "{failed}");
        assert!(failed.message.contains("koord-batch"), "{failed}");

        caches.priority_classes.insert(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "koord-batch"}, "value": 5000
            }))
            .unwrap(),
        );
        let decision = handlers.handle(PATH_MUTATE_RESERVATION, &request).await;
        assert!(decision.allowed, "{decision}");
        let mut patched = serde_json::to_value(request.object.clone().unwrap()).unwrap();
        json_patch::patch(&mut patched, &decision.patch.unwrap()).unwrap();
        assert_eq!(
            patched["metadata"]["labels"]["koordinator.sh/qosClass"],
            "BE"
        );
        assert_eq!(patched["metadata"]["labels"]["app"], "spark");
        let template = &patched["spec"]["template"]["spec"];
        assert_eq!(template["schedulerName"], "koord-scheduler");
        assert_eq!(template["priorityClassName"], "koord-batch");
        assert_eq!(template["priority"], 5000);
        assert_eq!(template["containers"][0]["name"], "c");

        // Not matching, or not a create: allowed without a patch.
        let other = reservation_create(serde_json::json!({"app": "web"}));
        let decision = handlers.handle(PATH_MUTATE_RESERVATION, &other).await;
        assert!(decision.allowed && decision.patch.is_none(), "{decision}");
        let mut update = reservation_create(serde_json::json!({"app": "spark"}));
        update.operation = Operation::Update;
        let decision = handlers.handle(PATH_MUTATE_RESERVATION, &update).await;
        assert!(decision.allowed && decision.patch.is_none(), "{decision}");
    }

    #[test]
    fn rolls_stay_in_range_and_vary() {
        let handlers = Handlers::new(WebhookCaches::synced_empty(), SloConfigRef::default());
        let rolls: Vec<i64> = (0..200).map(|_| handlers.roll()).collect();
        assert!(rolls.iter().all(|r| (0..100).contains(r)));
        let distinct: std::collections::BTreeSet<_> = rolls.iter().collect();
        assert!(distinct.len() > 20, "{distinct:?}");
    }

    /// Holds one quota the way the API server would for the evaluator.
    struct OneQuota(Mutex<ElasticQuota>, AtomicU64);

    impl crate::webhook::quota_evaluator::QuotaAccess for OneQuota {
        fn get<'a>(
            &'a self,
            _namespace: &'a str,
            _name: &'a str,
        ) -> futures::future::BoxFuture<
            'a,
            Result<ElasticQuota, crate::webhook::quota_evaluator::ReadError>,
        > {
            let quota = self.0.lock().unwrap().clone();
            Box::pin(std::future::ready(Ok(quota)))
        }

        fn update_child_request<'a>(
            &'a self,
            _quota: &'a ElasticQuota,
            child_request: &'a str,
            _jitter: std::time::Duration,
        ) -> futures::future::BoxFuture<'a, Result<(), crate::webhook::quota_evaluator::UpdateError>>
        {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0
                .lock()
                .unwrap()
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(
                    apis::extension::ANNOTATION_CHILD_REQUEST.to_owned(),
                    child_request.to_owned(),
                );
            Box::pin(std::future::ready(Ok(())))
        }
    }

    fn pod_create(name: &str, cpu: &str, dry_run: bool) -> TypedRequest<Pod> {
        typed(serde_json::json!({
            "uid": name, "operation": "CREATE", "name": name, "namespace": "team",
            "dryRun": dry_run,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "userInfo": {},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "team", "labels": {LABEL_QUOTA_NAME: "small"}},
                "spec": {"containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": {"cpu": cpu}}}]}}
        }))
    }

    #[tokio::test]
    async fn pods_over_their_quota_are_refused_at_create_and_admitted_ones_are_recorded() {
        let small: ElasticQuota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "small", "namespace": "team", "resourceVersion": "5"},
            "spec": {"max": {"cpu": "1"}}
        }))
        .unwrap();
        let caches = WebhookCaches::synced_empty();
        caches.quotas.insert(small.clone());
        let access = std::sync::Arc::new(OneQuota(Mutex::new(small), AtomicU64::new(0)));
        let mut handlers = Handlers::new(caches, SloConfigRef::default());
        // Off by default, as upstream: nothing is evaluated.
        assert!(
            handlers
                .handle(PATH_VALIDATE_POD, &pod_create("big", "2", false))
                .await
                .allowed
        );
        assert_eq!(access.1.load(Ordering::Relaxed), 0);

        handlers.gates.quota_evaluation.enabled = true;
        handlers.quota_evaluator = Some(QuotaEvaluator::new(
            access.clone(),
            crate::webhook::quota_evaluate::UpdateSettings::default(),
        ));
        let fits = handlers
            .handle(PATH_VALIDATE_POD, &pod_create("a", "600m", false))
            .await;
        assert!(fits.allowed, "{fits}");
        let recorded = |access: &OneQuota| {
            access
                .0
                .lock()
                .unwrap()
                .metadata
                .annotations
                .as_ref()
                .unwrap()[apis::extension::ANNOTATION_CHILD_REQUEST]
                .clone()
        };
        assert_eq!(recorded(&access), r#"{"cpu":"600m"}"#);
        let over = handlers
            .handle(PATH_VALIDATE_POD, &pod_create("b", "500m", false))
            .await;
        assert!(!over.allowed);
        assert_eq!(over.code, 400);
        assert_eq!(
            over.message,
            "exceeded quota: team/small, requested: cpu=500m, used: cpu=600m, limited: cpu=1"
        );
        assert_eq!(access.1.load(Ordering::Relaxed), 1);
        // The typed error's label reaches the rejections counter.
        assert_eq!(over.metric_label(), "exceeded");
        let rejected = |plugin: &str, reason: &str| {
            handlers
                .metrics
                .rejections
                .get_or_create(&vec![
                    ("webhook_type".to_owned(), "validate".to_owned()),
                    ("object_type".to_owned(), "pod".to_owned()),
                    ("plugin_name".to_owned(), plugin.to_owned()),
                    ("reason".to_owned(), reason.to_owned()),
                ])
                .get()
        };
        assert_eq!(rejected("EvaluateQuota", "exceeded"), 1);
        assert_eq!(rejected("ClusterColocationProfile", "exceeded"), 1);

        // A dry run is judged on what the cache shows and writes nothing.
        let dry = handlers
            .handle(PATH_VALIDATE_POD, &pod_create("c", "2", true))
            .await;
        assert_eq!(
            dry.message,
            "exceeded quota: team/small, requested: cpu=2, used: , limited: cpu=1"
        );
        assert!(
            handlers
                .handle(PATH_VALIDATE_POD, &pod_create("d", "100m", true))
                .await
                .allowed
        );
        assert_eq!(access.1.load(Ordering::Relaxed), 1);

        // Without an evaluator the gate refuses rather than admits unchecked.
        handlers.quota_evaluator = None;
        let refused = handlers
            .handle(PATH_VALIDATE_POD, &pod_create("e", "100m", false))
            .await;
        assert!(!refused.allowed, "{refused}");
        assert_eq!(
            refused.message,
            "quota evaluation is on but the webhook has no evaluator"
        );
        assert_eq!(refused.metric_label(), "no_evaluator");
    }

    #[tokio::test]
    async fn multi_quota_tree_pods_get_their_trees_nodes() {
        let caches = WebhookCaches::synced_empty();
        caches.quotas.insert(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "small", "namespace": "team",
                    "labels": {"quota.scheduling.koordinator.sh/tree-id": "t1"}},
                "spec": {"max": {"cpu": "1"}}
            }))
            .unwrap(),
        );
        caches.quota_profiles.insert(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "team",
                    "labels": {"quota.scheduling.koordinator.sh/tree-id": "t1"}},
                "spec": {"quotaName": "root", "nodeSelector": {"matchLabels": {"pool": "a"}}}
            }))
            .unwrap(),
        );
        let mut handlers = Handlers::new(caches, SloConfigRef::default());
        let request = pod_create("a", "100m", false);
        assert!(
            handlers
                .handle(PATH_MUTATE_POD, &request)
                .await
                .patch
                .is_none()
        );
        handlers.gates.multi_quota_tree = true;
        let decision = handlers.handle(PATH_MUTATE_POD, &request).await;
        let patch = serde_json::to_value(decision.patch.unwrap()).unwrap();
        assert_eq!(patch[0]["path"], "/spec/affinity");
        assert_eq!(
            patch[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                [0]["matchExpressions"][0],
            serde_json::json!({"key": "pool", "operator": "In", "values": ["a"]})
        );
    }

    fn gpu_pod_create(requests: serde_json::Value) -> TypedRequest<Pod> {
        typed(serde_json::json!({
            "uid": "g", "operation": "CREATE", "name": "g", "namespace": "team",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "userInfo": {},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "g", "namespace": "team"},
                "spec": {"containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": requests.clone(), "limits": requests}}]}}
        }))
    }

    #[tokio::test]
    async fn gpu_pods_are_completed_at_create_and_checked_behind_the_gate() {
        let mut handlers = Handlers::new(WebhookCaches::synced_empty(), SloConfigRef::default());
        let whole = gpu_pod_create(serde_json::json!({"koordinator.sh/gpu": "200"}));
        let decision = handlers.handle(PATH_MUTATE_POD, &whole).await;
        let patch = serde_json::to_value(decision.patch.unwrap()).unwrap();
        let text = patch.to_string();
        // (JSON pointers write '/' as "~1".)
        for expected in [
            "requests/koordinator.sh~1gpu-core\",\"value\":\"200",
            "requests/koordinator.sh~1gpu-memory-ratio\",\"value\":\"200",
            "requests/koordinator.sh~1gpu.shared\",\"value\":\"2",
        ] {
            assert!(text.contains(expected), "{expected} missing from {text}");
        }
        handlers.gates.disable_device_resource_spec = true;
        assert!(
            handlers
                .handle(PATH_MUTATE_POD, &whole)
                .await
                .patch
                .is_none()
        );

        let both = gpu_pod_create(
            serde_json::json!({"koordinator.sh/gpu": "100", "koordinator.sh/gpu.shared": "1"}),
        );
        // Off by default, as upstream.
        assert!(handlers.handle(PATH_VALIDATE_POD, &both).await.allowed);
        handlers.gates.validate_pod_device_resource = true;
        let refused = handlers.handle(PATH_VALIDATE_POD, &both).await;
        assert!(!refused.allowed);
        assert_eq!(refused.code, 400);
        assert!(
            refused
                .message
                .contains("Forbidden declare GPU and GPU share at same time"),
            "{}",
            refused.message
        );
    }
}
