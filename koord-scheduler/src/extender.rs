//! The scheduler-extender HTTP shell: kube-scheduler's `ExtenderArgs`,
//! `ExtenderFilterResult`, `HostPriorityList` and `ExtenderBindingArgs` /
//! `ExtenderBindingResult` JSON (Go field names, no JSON tags upstream) on
//! `/filter`, `/prioritize` and `/bind`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use k8s_openapi::api::core::v1::{Node, Pod};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use serde::{Deserialize, Serialize};

use koord_common::sync::MutexExt;

use crate::admission;
use crate::cache::{ClusterCache, NameHasher, NodeInfo, Object, PodInfo, object_key};
use crate::framework::{
    Binder, FilterOutcome, Nomination, PermitStep, Reason, Reserved, Scheduler, SharedScheduler,
    log_released,
};
use crate::permit::HoldOutcome;
use crate::placement;

/// `v1.NodeList` as sent when `nodeCacheCapable` is false.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeList {
    #[serde(
        rename = "apiVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Value>,
    #[serde(default)]
    pub items: Vec<Node>,
}

/// Request body of `/filter` and `/prioritize`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderArgs {
    #[serde(rename = "Pod", alias = "pod", default)]
    pub pod: Option<Pod>,
    #[serde(rename = "Nodes", alias = "nodes", default)]
    pub nodes: Option<NodeList>,
    #[serde(
        rename = "NodeNames",
        alias = "nodenames",
        alias = "nodeNames",
        default
    )]
    pub node_names: Option<Vec<String>>,
}

/// Response of `/filter`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeList>,
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
    /// Reasons encode as their text; one reason is shared by the nodes
    /// refused for it.
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: BTreeMap<String, Reason>,
    #[serde(rename = "FailedAndUnresolvableNodes", default)]
    pub failed_and_unresolvable_nodes: BTreeMap<String, Reason>,
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// One entry of the `/prioritize` response (`HostPriorityList`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    #[serde(rename = "Host")]
    pub host: String,
    #[serde(rename = "Score")]
    pub score: i64,
}

/// Request body of `/bind`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ExtenderBindingArgs {
    #[serde(rename = "PodName", alias = "podName", default)]
    pub pod_name: String,
    #[serde(rename = "PodNamespace", alias = "podNamespace", default)]
    pub pod_namespace: String,
    #[serde(rename = "PodUID", alias = "podUID", default)]
    pub pod_uid: String,
    #[serde(rename = "Node", alias = "node", default)]
    pub node: String,
}

/// Response of `/bind`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtenderBindingResult {
    #[serde(rename = "Error", default)]
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExtensionPointLabels {
    extension_point: String,
    status: String,
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    result: String,
    profile: String,
}

/// kube-scheduler metric names, so its dashboards read the extender too.
#[derive(Clone)]
pub struct ExtenderMetrics {
    extension_point_duration: Family<ExtensionPointLabels, Histogram>,
    schedule_attempts: Family<AttemptLabels, Counter>,
    nominations: Family<AttemptLabels, Counter>,
    profile: String,
}

impl ExtenderMetrics {
    pub fn new(profile: &str) -> Self {
        Self {
            extension_point_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0001, 2.0, 12))
            }),
            schedule_attempts: Family::default(),
            nominations: Family::default(),
            profile: profile.to_string(),
        }
    }

    /// Registers `scheduler_framework_extension_point_duration_seconds` and
    /// `scheduler_schedule_attempts_total` (the registry adds the prefix).
    pub fn register(&self, registry: &koord_common::metrics::MetricsRegistry) {
        registry.register_component(|r| {
            r.register(
                "framework_extension_point_duration_seconds",
                "Latency of running an extension point",
                self.extension_point_duration.clone(),
            );
            r.register(
                "schedule_attempts",
                "Number of attempts to schedule pods, by result",
                self.schedule_attempts.clone(),
            );
            r.register(
                "extender_nominations",
                "(ours) Pods nominated to a node outside kube-scheduler's candidates, by result",
                self.nominations.clone(),
            );
        });
    }

    fn observe(&self, point: &str, status: &str, started: Instant) {
        self.extension_point_duration
            .get_or_create(&ExtensionPointLabels {
                extension_point: point.to_string(),
                status: status.to_string(),
                profile: self.profile.clone(),
            })
            .observe(started.elapsed().as_secs_f64());
    }

    fn nomination(&self, result: &str) {
        self.nominations
            .get_or_create(&AttemptLabels {
                result: result.to_string(),
                profile: self.profile.clone(),
            })
            .inc();
    }

    fn attempt(&self, result: &str) {
        self.schedule_attempts
            .get_or_create(&AttemptLabels {
                result: result.to_string(),
                profile: self.profile.clone(),
            })
            .inc();
    }
}

/// What the handlers share.
#[derive(Clone)]
pub struct ExtenderState {
    pub scheduler: SharedScheduler,
    pub binder: Arc<dyn Binder>,
    pub metrics: ExtenderMetrics,
}

fn bad_request(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

fn json_response<T: Serialize>(value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(err) => (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response(),
    }
}

fn internal_error(message: &str) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, message.to_string()).into_response()
}

/// serde would accept a JSON array for a struct; kube-scheduler always sends an object.
fn require_object(body: &[u8], what: &str) -> Result<(), String> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err(format!("malformed {what}: expected a JSON object")),
    }
}

/// The largest request body accepted (HTTP 413 beyond). kube-scheduler
/// sends node names only with `nodeCacheCapable: true` (the chart's
/// setting): 5,000 names and a pod of etcd's 1.5 MiB limit fit easily.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// The most candidate nodes one request may name.
pub use crate::admission::MAX_CANDIDATE_NODES;

/// Each candidate named, within the name and count limits. That no name
/// repeats is checked where the names are looked up
/// ([`resolve_candidates`]), so each is hashed once per request.
fn check_node_names(names: &[String], field: &str) -> Result<(), String> {
    if names.len() > MAX_CANDIDATE_NODES {
        return Err(format!(
            "ExtenderArgs.{field} lists {} nodes, more than the {MAX_CANDIDATE_NODES} allowed",
            names.len()
        ));
    }
    for (index, name) in names.iter().enumerate() {
        if name.is_empty() {
            return Err(format!("ExtenderArgs.{field}[{index}] has no name"));
        }
        if name.len() > admission::MAX_NAME_BYTES {
            return Err(format!(
                "ExtenderArgs.{field}[{index}] is a name of {} bytes, longer than the {} allowed",
                name.len(),
                admission::MAX_NAME_BYTES
            ));
        }
    }
    Ok(())
}

/// The cache's node for each candidate (`None` where it has none), looked
/// up once; `Err` is the 400 message when a name repeats. Distinct names
/// have distinct node indexes, so known names are checked by index and
/// only unknown ones by name.
pub fn resolve_candidates<'a>(
    cache: &'a ClusterCache,
    names: &[String],
    field: &str,
) -> Result<Vec<Option<&'a NodeInfo>>, String> {
    let mut seen = vec![false; cache.node_index_bound()];
    // Keyed as the cache's name maps: user-chosen names.
    let mut unknown: HashSet<&str, NameHasher> = HashSet::with_hasher(NameHasher::new());
    let mut nodes = Vec::with_capacity(names.len());
    for name in names {
        let node = cache.node(name);
        let repeated = match node.and_then(|n| seen.get_mut(n.index)) {
            Some(seen) => std::mem::replace(seen, true),
            None => !unknown.insert(name.as_str()),
        };
        if repeated {
            return Err(format!("ExtenderArgs.{field} lists node {name} twice"));
        }
        nodes.push(node);
    }
    Ok(nodes)
}

/// The field [`parse_extender_args`] took the names from.
fn names_field(by_name: bool) -> &'static str {
    if by_name { "NodeNames" } else { "Nodes.items" }
}

/// Parses `/filter`/`/prioritize` bodies; `Err` is the 400 message. The pod
/// goes through [`admission::admit`]: refused annotations are taken off it.
pub fn parse_extender_args(body: &[u8]) -> Result<(Pod, Vec<String>, bool), String> {
    require_object(body, "ExtenderArgs")?;
    let args: ExtenderArgs =
        serde_json::from_slice(body).map_err(|e| format!("malformed ExtenderArgs: {e}"))?;
    let pod = args
        .pod
        .ok_or_else(|| "ExtenderArgs.Pod is missing".to_string())?;
    let admitted =
        admission::admit(Object::Pod(pod)).map_err(|e| format!("ExtenderArgs.Pod: {e}"))?;
    // kube-scheduler asks again and again about a pending pod, and the
    // watch has already warned about the same annotation.
    for refusal in &admitted.refused {
        tracing::debug!(object = %refusal.key, annotation = refusal.annotation, reason = %refusal.reason, "{refusal}");
    }
    if let Some(refused) = &admitted.invalid_amount {
        tracing::debug!(object = %refused.key, field = %refused.amount.field, "{refused}");
    }
    let Object::Pod(pod) = admitted.object else {
        return Err("ExtenderArgs.Pod is not a pod".into());
    };
    if let Some(names) = args.node_names {
        check_node_names(&names, "NodeNames")?;
        return Ok((pod, names, true));
    }
    if let Some(nodes) = args.nodes {
        let mut names = Vec::with_capacity(nodes.items.len());
        for (index, node) in nodes.items.iter().enumerate() {
            match node.metadata.name.as_deref() {
                Some(name) if !name.is_empty() => names.push(name.to_string()),
                _ => {
                    return Err(format!(
                        "ExtenderArgs.Nodes.items[{index}] has no metadata.name"
                    ));
                }
            }
        }
        check_node_names(&names, "Nodes.items")?;
        return Ok((pod, names, false));
    }
    Err("ExtenderArgs has neither NodeNames nor Nodes".into())
}

/// The core of `/filter`, outside HTTP (also used by the benchmark).
pub fn run_filter(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: &[String],
    now: SystemTime,
) -> FilterOutcome {
    placement::filter_candidates(scheduler, pod, candidates, now)
}

/// `/filter` itself: [`run_filter`] over names taken by value, remembering
/// the feasible nodes as the only ones `/bind` may bind the pod to (see
/// [`crate::filtered`]).
pub fn filter_and_record(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: Vec<String>,
    now: SystemTime,
) -> FilterOutcome {
    let nodes: Vec<Option<&NodeInfo>> =
        candidates.iter().map(|n| scheduler.cache.node(n)).collect();
    filter_and_record_resolved(scheduler, pod, candidates, &nodes, now)
}

/// [`filter_and_record`] over candidates already looked up
/// ([`resolve_candidates`]).
pub fn filter_and_record_resolved(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: Vec<String>,
    nodes: &[Option<&NodeInfo>],
    now: SystemTime,
) -> FilterOutcome {
    if let Some((outcome, feasible)) = filter_held(scheduler, pod, &candidates) {
        scheduler
            .filtered
            .lock_or_recover()
            .record(&pod.key, &pod.uid, feasible, now);
        return outcome;
    }
    let (outcome, feasible) =
        placement::filter_resolved_indexed(scheduler, pod, candidates, nodes, now);
    scheduler
        .filtered
        .lock_or_recover()
        .record(&pod.key, &pod.uid, feasible, now);
    outcome
}

/// A pod held at Permit (kube-scheduler retrying it after a "still
/// waiting" bind answer) fits only the node it is held on.
fn filter_held(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: &[String],
) -> Option<(FilterOutcome, Vec<usize>)> {
    if scheduler.permits.is_empty() {
        return None;
    }
    let held = scheduler
        .permits
        .get(&pod.key)
        .filter(|h| pod.uid.is_empty() || h.reserved.uid == pod.uid)?;
    let mut outcome = FilterOutcome::default();
    let mut feasible = Vec::new();
    let reason = Reason::from(format!(
        "pod is held on node {} for its gang group [{}]",
        held.reserved.node, held.group
    ));
    for name in candidates {
        match scheduler.cache.node(name) {
            Some(node) if *name == held.reserved.node => {
                outcome.feasible.push(name.clone());
                feasible.push(node.index);
            }
            _ => {
                outcome.failed.insert(name.clone(), reason.clone());
            }
        }
    }
    Some((outcome, feasible))
}

/// The core of `/prioritize`: scores in 0..=10.
pub fn run_prioritize(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: &[String],
    now: SystemTime,
) -> Vec<HostPriority> {
    let nodes: Vec<Option<&NodeInfo>> =
        candidates.iter().map(|n| scheduler.cache.node(n)).collect();
    prioritize_resolved(scheduler, pod, candidates.to_vec(), &nodes, now)
}

/// [`run_prioritize`] over names taken by value (no copies) and already
/// looked up ([`resolve_candidates`]).
fn prioritize_resolved(
    scheduler: &Scheduler,
    pod: &PodInfo,
    candidates: Vec<String>,
    nodes: &[Option<&NodeInfo>],
    now: SystemTime,
) -> Vec<HostPriority> {
    placement::extender_scores(scheduler, pod, candidates, nodes, now)
        .into_iter()
        .map(|(host, score)| HostPriority { host, score })
        .collect()
}

async fn filter(State(state): State<ExtenderState>, body: Bytes) -> Response {
    let started = Instant::now();
    let (pod, candidates, by_name) = match parse_extender_args(&body) {
        Ok(parsed) => parsed,
        Err(message) => return bad_request(message),
    };
    let nodes_in = if by_name {
        None
    } else {
        serde_json::from_slice::<ExtenderArgs>(&body)
            .ok()
            .and_then(|a| a.nodes)
    };
    let pod = PodInfo::new(Arc::new(pod));
    let outcome = {
        let Ok(scheduler) = state.scheduler.read() else {
            return internal_error("scheduler state lock poisoned");
        };
        let nodes = match resolve_candidates(&scheduler.cache, &candidates, names_field(by_name)) {
            Ok(nodes) => nodes,
            Err(message) => return bad_request(message),
        };
        filter_and_record_resolved(&scheduler, &pod, candidates, &nodes, SystemTime::now())
    };
    let status = if outcome.feasible.is_empty() {
        state.metrics.attempt("unschedulable");
        "Unschedulable"
    } else {
        "Success"
    };
    tracing::debug!(pod = %pod.key, feasible = outcome.feasible.len(), failed = outcome.failed.len() + outcome.failed_unresolvable.len(), "filter");
    if let Some(node) = outcome.nominated.clone() {
        nominate(&state, &pod, node);
    }
    let nodes = nodes_in.map(|mut list| {
        list.items.retain(|n| {
            n.metadata
                .name
                .as_ref()
                .is_some_and(|name| outcome.feasible.contains(name))
        });
        list
    });
    let result = ExtenderFilterResult {
        nodes,
        node_names: by_name.then_some(outcome.feasible),
        failed_nodes: outcome.failed,
        failed_and_unresolvable_nodes: outcome.failed_unresolvable,
        error: String::new(),
    };
    state.metrics.observe("Filter", status, started);
    json_response(&result)
}

/// Writes the pod's nominated node in the background: `/filter` answers
/// at once (every candidate refused), and kube-scheduler tries that node
/// first once the write reaches it.
fn nominate(state: &ExtenderState, pod: &PodInfo, node: String) {
    let nomination = Nomination {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        node,
    };
    let binder = Arc::clone(&state.binder);
    let metrics = state.metrics.clone();
    tokio::spawn(async move {
        match binder.nominate(&nomination).await {
            Ok(()) => {
                metrics.nomination("written");
                tracing::info!(pod = %format!("{}/{}", nomination.namespace, nomination.name), node = %nomination.node, "pod nominated to a node outside kube-scheduler's candidates, where its reservation fits");
            }
            Err(error) => {
                metrics.nomination(error.metric_label());
                tracing::warn!(pod = %format!("{}/{}", nomination.namespace, nomination.name), node = %nomination.node, %error, "nominating the pod failed");
            }
        }
    });
}

async fn prioritize(State(state): State<ExtenderState>, body: Bytes) -> Response {
    let started = Instant::now();
    let (pod, candidates, by_name) = match parse_extender_args(&body) {
        Ok(parsed) => parsed,
        Err(message) => return bad_request(message),
    };
    let pod = PodInfo::new(Arc::new(pod));
    let list = {
        let Ok(scheduler) = state.scheduler.read() else {
            return internal_error("scheduler state lock poisoned");
        };
        let nodes = match resolve_candidates(&scheduler.cache, &candidates, names_field(by_name)) {
            Ok(nodes) => nodes,
            Err(message) => return bad_request(message),
        };
        prioritize_resolved(&scheduler, &pod, candidates, &nodes, SystemTime::now())
    };
    state.metrics.observe("Score", "Success", started);
    json_response(&list)
}

/// Binds only what `/filter` allowed (see [`crate::filtered`]): the pod's
/// last `/filter` found the node feasible, for the same pod UID, recently.
/// Then reserves (re-checking fit against the cache as it is now), runs
/// Permit, persists through the binder, and rolls back on failure. A pod
/// held at Permit (a gang member waiting for its group, see
/// [`crate::permit`]) stays assumed; its call waits up to
/// [`Scheduler::permit_bind_wait`] for the group and then answers "still
/// waiting" while the hold goes on; a retried call rejoins the hold.
pub async fn bind_pod(state: &ExtenderState, args: &ExtenderBindingArgs) -> Result<(), String> {
    let key = object_key(Some(&args.pod_namespace), &args.pod_name);
    wait_for_watched_pod(state, &key).await;
    let now = SystemTime::now();
    let (step, uid, waiting) = {
        let mut scheduler = state
            .scheduler
            .write()
            .map_err(|_| "scheduler state lock poisoned".to_string())?;
        log_released(&scheduler.expire_permits(now));
        if let Some(held) = scheduler.permits.get(&key) {
            if held.reserved.node != args.node
                || (!args.pod_uid.is_empty() && held.reserved.uid != args.pod_uid)
            {
                return Err(format!(
                    "pod {key} is held on node {} for its gang group [{}]: bind to node {} refused",
                    held.reserved.node, held.group, args.node
                ));
            }
            let uid = held.reserved.uid.clone();
            let waiting = scheduler.permits.subscribe();
            let step = scheduler
                .recheck_held(&key, now)
                .ok_or_else(|| format!("pod {key} is no longer held"))?;
            (step, uid, Some(waiting))
        } else {
            if let Some(HoldOutcome::Bound { node }) =
                scheduler.permits.outcome(&key, &args.pod_uid)
                && *node == args.node
            {
                // Bound with its gang group after an earlier call answered
                // "still waiting".
                return Ok(());
            }
            let reserved = reserve_for_bind(&mut scheduler, &key, args, now)?;
            let uid = reserved.uid.clone();
            let step = scheduler.permit(reserved, now)?;
            let waiting =
                matches!(step, PermitStep::Held { .. }).then(|| scheduler.permits.subscribe());
            (step, uid, waiting)
        }
    };
    match (step, waiting) {
        (
            PermitStep::Bind {
                pods,
                through_permit,
            },
            _,
        ) => bind_reserved(state, &key, pods, through_permit).await,
        (PermitStep::Held { group, deadline }, Some(waiting)) => {
            wait_for_group(state, &key, &uid, &args.node, &group, deadline, waiting).await
        }
        (PermitStep::Held { .. }, None) => Err(format!("pod {key} is held without a waiter")),
    }
}

/// How long `/bind` waits for this process's watch to deliver a pod that
/// `/filter` saw: kube-scheduler's informer is another watch and can run
/// ahead, so a pod created and placed within milliseconds may reach `/bind`
/// before the cache holds it (4 of 100 paced pods at 50 nodes, 60 of 300
/// at 5,000 nodes with the API server saturated). Without the wait the bind
/// fails and kube-scheduler retries after its backoff. Well inside the
/// chart's 5 s `httpTimeout`, which also covers the binding's API calls.
pub const WATCH_LAG_ALLOWANCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Returns once the cache holds `key`, or the pod was never filtered (a
/// bind that [`reserve_for_bind`] refuses at once), or
/// [`WATCH_LAG_ALLOWANCE`] has passed. Reads take the shared lock briefly;
/// nothing is held while waiting.
async fn wait_for_watched_pod(state: &ExtenderState, key: &str) {
    // Tokio's clock, so a runtime with paused time (the fuzz target) skips the wait.
    let deadline = tokio::time::Instant::now() + WATCH_LAG_ALLOWANCE;
    loop {
        let waiting = match state.scheduler.read() {
            Ok(scheduler) => {
                scheduler.cache.pod(key).is_none()
                    && scheduler
                        .filtered
                        .lock_or_recover()
                        .filtered_uid(key)
                        .is_some()
            }
            Err(_) => false,
        };
        if !waiting || tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// The checks of [`bind_pod`] and the reservation, under the write lock.
fn reserve_for_bind(
    scheduler: &mut Scheduler,
    key: &str,
    args: &ExtenderBindingArgs,
    now: SystemTime,
) -> Result<Reserved, String> {
    let node_index = scheduler.cache.node(&args.node).map(|n| n.index);
    let cached_uid = scheduler.cache.pod(key).map(|p| p.uid.clone());
    let filtered_uid = {
        let filtered = scheduler.filtered.lock_or_recover();
        filtered
            .check(key, &args.pod_uid, &args.node, node_index, now)
            .map_err(|e| e.to_string())?;
        filtered.filtered_uid(key).unwrap_or_default().to_string()
    };
    if let Some(uid) = cached_uid.filter(|uid| !uid.is_empty()) {
        if !args.pod_uid.is_empty() && uid != args.pod_uid {
            return Err(format!(
                "pod {key} has UID {uid} in the scheduler cache, not {}",
                args.pod_uid
            ));
        }
        if uid != filtered_uid {
            return Err(format!(
                "pod {key} has UID {uid} in the scheduler cache, but /filter saw UID {filtered_uid:?}: bind refused"
            ));
        }
    }
    scheduler
        .reserve(key, &args.node, now)
        .map_err(|e| e.to_string())
}

/// Binds `pods` through the binder, concurrently; returns the result for
/// `key`. A pod bound alone touches the lock again only if its binding
/// failed (the path of every pod that is not held at Permit).
async fn bind_reserved(
    state: &ExtenderState,
    key: &str,
    pods: Vec<Reserved>,
    through_permit: bool,
) -> Result<(), String> {
    let results =
        futures::future::join_all(pods.iter().map(|reserved| state.binder.bind(reserved))).await;
    if !through_permit && results.iter().all(Result::is_ok) {
        return Ok(());
    }
    let mut own = Ok(());
    let now = SystemTime::now();
    let Ok(mut scheduler) = state.scheduler.write() else {
        return Err("scheduler state lock poisoned".into());
    };
    for (reserved, result) in pods.iter().zip(results) {
        let outcome = match result {
            Ok(()) => {
                scheduler.bound_after_permit(reserved, now);
                if reserved.pod_key != key {
                    tracing::info!(pod = %reserved.pod_key, node = %reserved.node, "bound with its gang group");
                }
                Ok(())
            }
            Err(err) => {
                let message = format!(
                    "binding pod {} to node {} failed: {err}",
                    reserved.pod_key, reserved.node
                );
                if through_permit {
                    scheduler.binding_failed_after_permit(reserved, message.clone(), now);
                } else {
                    scheduler.rollback(reserved);
                }
                Err(message)
            }
        };
        if reserved.pod_key == key {
            own = outcome;
        }
    }
    own
}

/// Waits for a held pod's group, at most [`Scheduler::permit_bind_wait`]
/// and not past the hold's deadline; answers with the hold's outcome, or
/// "still waiting" (the hold goes on).
async fn wait_for_group(
    state: &ExtenderState,
    key: &str,
    uid: &str,
    node: &str,
    group: &str,
    deadline: SystemTime,
    mut waiting: tokio::sync::watch::Receiver<u64>,
) -> Result<(), String> {
    let answered = |scheduler: &Scheduler| -> Option<Result<(), String>> {
        match scheduler.permits.outcome(key, uid) {
            Some(HoldOutcome::Bound { .. }) => Some(Ok(())),
            Some(HoldOutcome::Released(reason)) => Some(Err(reason.clone())),
            None if scheduler.permits.get(key).is_none() => {
                Some(Err(format!("pod {key} is no longer held")))
            }
            None => None,
        }
    };
    let bind_wait = state
        .scheduler
        .read()
        .map(|s| s.permit_bind_wait)
        .unwrap_or_default();
    let left = deadline
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    let until = tokio::time::Instant::now() + bind_wait.min(left);
    loop {
        // The outcome is signalled while its writer still holds the state,
        // before it is published: read the working state.
        match state.scheduler.read_latest(answered) {
            Ok(Some(result)) => return result,
            Ok(None) => {}
            Err(_) => return Err("scheduler state lock poisoned".into()),
        }
        match tokio::time::timeout_at(until, waiting.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err("the scheduler is shutting down".into()),
            Err(_) => break,
        }
    }
    // The hold may have run out while waiting: release it now rather than
    // at the next housekeeping tick.
    let Ok(mut scheduler) = state.scheduler.write() else {
        return Err("scheduler state lock poisoned".into());
    };
    log_released(&scheduler.expire_permits(SystemTime::now()));
    if let Some(result) = answered(&scheduler) {
        return result;
    }
    let until = k8s_openapi::jiff::Timestamp::try_from(deadline)
        .map(|t| t.to_string())
        .unwrap_or_default();
    Err(format!(
        "pod {key} is assumed on node {node} and held until {until} for its gang group [{group}], \
         which does not have min-member members assumed yet; its resources stay reserved and a \
         retried bind rejoins the wait"
    ))
}

async fn bind(State(state): State<ExtenderState>, body: Bytes) -> Response {
    let started = Instant::now();
    if let Err(message) = require_object(&body, "ExtenderBindingArgs") {
        return bad_request(message);
    }
    let args: ExtenderBindingArgs = match serde_json::from_slice(&body) {
        Ok(args) => args,
        Err(err) => return bad_request(format!("malformed ExtenderBindingArgs: {err}")),
    };
    if args.pod_name.is_empty() || args.node.is_empty() {
        return bad_request("ExtenderBindingArgs needs PodName and Node".into());
    }
    let result = match bind_pod(&state, &args).await {
        Ok(()) => {
            // Members bound with their group count here once each, when
            // their own call answers (or not, if it had answered "still
            // waiting" before).
            state.metrics.attempt("scheduled");
            state.metrics.observe("Bind", "Success", started);
            tracing::info!(pod = %args.pod_name, namespace = %args.pod_namespace, node = %args.node, "bound");
            ExtenderBindingResult::default()
        }
        Err(error) => {
            let key = object_key(Some(&args.pod_namespace), &args.pod_name);
            let held = state
                .scheduler
                .read()
                .is_ok_and(|s| s.permits.get(&key).is_some());
            if held {
                // Not a failure: the pod keeps its place (Permit's Wait).
                state.metrics.observe("Bind", "Wait", started);
                tracing::info!(pod = %args.pod_name, namespace = %args.pod_namespace, node = %args.node, "held at permit for its gang group; answered still waiting");
            } else {
                state.metrics.attempt("error");
                state.metrics.observe("Bind", "Error", started);
                tracing::warn!(pod = %args.pod_name, namespace = %args.pod_namespace, node = %args.node, %error, "bind failed, rolled back");
            }
            ExtenderBindingResult { error }
        }
    };
    json_response(&result)
}

/// `/preempt` (kube-scheduler's `preemptVerb`): see [`crate::preempt`].
async fn preempt(State(state): State<ExtenderState>, body: Bytes) -> Response {
    let started = Instant::now();
    let (pod, proposals) = match crate::preempt::parse_preemption_args(&body) {
        Ok(parsed) => parsed,
        Err(message) => return bad_request(message),
    };
    let pod = PodInfo::new(Arc::new(pod));
    let (result, reports) = {
        let Ok(mut scheduler) = state.scheduler.write() else {
            return internal_error("scheduler state lock poisoned");
        };
        crate::preempt::run_preemption(&mut scheduler, &pod, proposals, SystemTime::now())
    };
    for report in &reports {
        match &report.decision {
            crate::preempt::NodeDecision::Preempt {
                victims,
                added,
                added_pdb_violations,
                dropped,
            } => {
                for (uid, reason) in dropped {
                    tracing::info!(pod = %pod.key, node = %report.node, victim = %uid, %reason, "preemption victim kept");
                }
                if !added.is_empty() {
                    tracing::info!(pod = %pod.key, node = %report.node, added = ?added, pdb_violations = added_pdb_violations, "preemption victims added for resources kube-scheduler does not see");
                }
                tracing::debug!(pod = %pod.key, node = %report.node, victims = victims.len(), "preemption allowed");
            }
            crate::preempt::NodeDecision::Drop { reason } => {
                tracing::info!(pod = %pod.key, node = %report.node, %reason, "preemption node dropped");
            }
        }
    }
    state.metrics.observe("PostFilter", "Success", started);
    json_response(&result)
}

/// The `/filter`, `/prioritize`, `/bind` and `/preempt` routes; bodies up
/// to [`MAX_BODY_BYTES`].
pub fn router(state: ExtenderState) -> Router {
    Router::new()
        .route("/filter", post(filter))
        .route("/prioritize", post(prioritize))
        .route("/bind", post(bind))
        .route("/preempt", post(preempt))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}
