#![allow(clippy::unwrap_used)]
//! Admission webhook benchmark (`cargo bench -p koord-manager --bench webhook`).
//!
//! Reviews are built as kube-apiserver sends them (defaulted objects with
//! managedFields, userInfo, options) for the pod mix of
//! `e2e/src/bin/koord-scale-bench.rs`: batch BE pods, LSR pods, shared-GPU
//! pods and prod pods, each labelled with one of ten ElasticQuotas, all
//! CREATE. The validating pod review carries the object with the mutating
//! webhook's patch applied, as kube-apiserver orders them. Also an
//! ElasticQuota CREATE (mutating and validating) and a Node status UPDATE
//! (NodeMutatingWebhook, off in the chart by default).
//!
//! Every review goes through `webhook::server::admit`, the function the
//! HTTPS server calls with the path and the body after TLS, and its answer
//! is read to bytes. Handlers are configured from the chart's default
//! feature gates (`featureGates: ""`); a second configuration turns on
//! `EnableQuotaAdmission` with an in-memory quota store standing in for the
//! API server (so it measures our evaluation, not the status write's round
//! trip).
//!
//! Per path: per-review p50/p99/max and reviews/s, single-threaded (one
//! review at a time on a current-thread runtime) and with BENCH_INFLIGHT (32)
//! tasks on a BENCH_THREADS (2) worker runtime, as kube-apiserver keeps 32
//! pod creations in flight. BENCH_REVIEWS (10,000) reviews per measurement;
//! BENCH_ONLY=substring limits the paths.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use koord_common::testing::{Lcg, env_usize};
use koord_manager::webhook::cache::WebhookCaches;
use koord_manager::webhook::configmap::SloConfigRef;
use koord_manager::webhook::features::FeatureGates;
use koord_manager::webhook::handlers::{
    Handlers, PATH_MUTATE_ELASTIC_QUOTA, PATH_MUTATE_NODE_STATUS, PATH_MUTATE_POD,
    PATH_VALIDATE_ELASTIC_QUOTA, PATH_VALIDATE_POD,
};
use koord_manager::webhook::quota_evaluate::UpdateSettings;
use koord_manager::webhook::quota_evaluator::{QuotaAccess, QuotaEvaluator, UpdateError};
use koord_manager::webhook::server::admit;
use serde_json::{Value, json};

/// The error `QuotaAccess::get` answers with (before the review types moved
/// to kube's it was a `String`: the only line the old code needs changed).
use koord_manager::webhook::quota_evaluator::ReadError;

fn read_error(message: String) -> ReadError {
    ReadError(message)
}

const NAMESPACE: &str = "scale-bench";
const QUOTAS: usize = 10;

/// The scale bench's pod (`bench_pod`) as kube-apiserver hands it to the
/// webhooks: defaulted, with the service-account volume, the default
/// tolerations, the priority resolved and the client's managedFields.
fn pod(index: usize, rng: &mut Lcg) -> Value {
    let mut labels = json!({"quota.scheduling.koordinator.sh/name": format!("team-{}", index % QUOTAS),
                            "app": "scale-bench"});
    let mut limits = json!({});
    let (requests, priority_class, priority) = match index % 100 {
        20 | 70 => {
            labels["koordinator.sh/qosClass"] = json!("LSR");
            limits = json!({"cpu": "4", "memory": "8Gi"});
            (json!({"cpu": "4", "memory": "8Gi"}), "koord-prod", 9000)
        }
        30 | 80 => {
            let shared =
                json!({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"});
            limits = shared.clone();
            let mut requests = shared;
            requests["cpu"] = json!("1");
            (requests, "koord-prod", 9000)
        }
        _ if index.is_multiple_of(3) => {
            labels["koordinator.sh/qosClass"] = json!("BE");
            (
                json!({"kubernetes.io/batch-cpu": format!("{}", 500 + rng.below(1500)),
                       "kubernetes.io/batch-memory": "1Gi"}),
                "koord-batch",
                5000,
            )
        }
        _ => (
            json!({"cpu": format!("{}m", 250 + rng.below(1750)),
                   "memory": format!("{}Mi", 256 + rng.below(3840))}),
            "koord-prod",
            9000,
        ),
    };
    if let Some(batch) = requests.get("kubernetes.io/batch-cpu") {
        limits = json!({"kubernetes.io/batch-cpu": batch, "kubernetes.io/batch-memory": "1Gi"});
    }
    let name = format!("p-{index:06}");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": NAMESPACE, "uid": format!("6f1c2d3e-0000-4000-8000-{index:012}"),
            "creationTimestamp": "2026-12-04T12:00:00Z", "labels": labels,
            "managedFields": [{
                "manager": "koord-scale-bench", "operation": "Update", "apiVersion": "v1",
                "time": "2026-12-04T12:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:quota.scheduling.koordinator.sh/name": {}}},
                             "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                                        "f:resources": {".": {}, "f:limits": {}, "f:requests": {}},
                                        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                                        "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:nodeSelector": {}, "f:priorityClassName": {},
                                        "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                                        "f:terminationGracePeriodSeconds": {}, "f:tolerations": {}}}
            }]
        },
        "spec": {
            "volumes": [{"name": format!("kube-api-access-{:05x}", index % 0xfffff), "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ],
                "defaultMode": 420}}],
            "containers": [{
                "name": "main", "image": "scale-bench/none",
                "resources": {"requests": requests, "limits": limits},
                "volumeMounts": [{"name": format!("kube-api-access-{:05x}", index % 0xfffff), "readOnly": true,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            }],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"type": "kwok"}, "serviceAccountName": "default", "serviceAccount": "default",
            "securityContext": {}, "schedulerName": "koord-scheduler",
            "tolerations": [
                {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priorityClassName": priority_class, "priority": priority, "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"}
    })
}

/// What a review is about.
struct Subject<'a> {
    /// Group, version, kind.
    kind: (&'a str, &'a str, &'a str),
    resource: &'a str,
    sub_resource: Option<&'a str>,
    namespace: Option<&'a str>,
    name: &'a str,
}

fn review(
    uid: &str,
    subject: Subject<'_>,
    operation: &str,
    object: Value,
    old_object: Value,
) -> Vec<u8> {
    let Subject {
        kind: (group, version, kind),
        resource,
        sub_resource,
        namespace,
        name,
    } = subject;
    let gvk = json!({"group": group, "version": version, "kind": kind});
    let gvr = json!({"group": group, "version": version, "resource": resource});
    let options = if operation == "CREATE" {
        json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": "koord-scale-bench"})
    } else {
        json!({"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"})
    };
    let mut request = json!({
        "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": name, "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]},
        "object": object, "oldObject": old_object, "dryRun": false, "options": options
    });
    if let Some(namespace) = namespace {
        request["namespace"] = json!(namespace);
    }
    if let Some(sub_resource) = sub_resource {
        request["subResource"] = json!(sub_resource);
        request["requestSubResource"] = json!(sub_resource);
    }
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request
    }))
    .unwrap()
}

fn pod_review(index: usize, object: Value) -> Vec<u8> {
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    review(
        &format!("a0b1c2d3-0000-4000-8000-{index:012}"),
        Subject {
            kind: ("", "v1", "Pod"),
            resource: "pods",
            sub_resource: None,
            namespace: Some(NAMESPACE),
            name: &name,
        },
        "CREATE",
        object,
        Value::Null,
    )
}

fn quota_object(name: &str, rv: &str) -> Value {
    json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": NAMESPACE, "resourceVersion": rv,
                     "uid": format!("e0000000-0000-4000-8000-{:0>12}", name.len()),
                     "creationTimestamp": "2026-12-04T12:00:00Z"},
        "spec": {"min": {"cpu": "20000", "memory": "80000Gi"},
                 "max": {"cpu": "200000", "memory": "800000Gi",
                         "kubernetes.io/batch-cpu": "100000000",
                         "kubernetes.io/batch-memory": "800000Gi"}}
    })
}

fn quota_review(index: usize) -> Vec<u8> {
    let name = format!("bench-quota-{index}");
    let mut object = quota_object(&name, "");
    object["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    // Small enough that any number of them fit under the cluster's resources.
    object["spec"] =
        json!({"min": {"cpu": "1", "memory": "1Gi"}, "max": {"cpu": "2", "memory": "2Gi"}});
    review(
        &format!("b0b1c2d3-0000-4000-8000-{index:012}"),
        Subject {
            kind: ("scheduling.sigs.k8s.io", "v1alpha1", "ElasticQuota"),
            resource: "elasticquotas",
            sub_resource: None,
            namespace: Some(NAMESPACE),
            name: &name,
        },
        "CREATE",
        object,
        Value::Null,
    )
}

/// A kwok node's status update (its heartbeat-driven condition refresh).
fn node_review(index: usize) -> Vec<u8> {
    let name = format!("kwok-node-{}", index % 1000);
    let conditions = |heartbeat: &str| {
        ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
            .iter()
            .map(|kind| {
                let status = if *kind == "Ready" { "True" } else { "False" };
                json!({"type": kind, "status": status, "lastHeartbeatTime": heartbeat,
                       "lastTransitionTime": "2026-12-04T11:00:00Z", "reason": "KubeletReady", "message": "kwok"})
            })
            .collect::<Vec<_>>()
    };
    let node = |heartbeat: &str, rv: usize| {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": rv.to_string(),
                         "uid": format!("c0000000-0000-4000-8000-{index:012}"),
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "node-role.kubernetes.io/agent": ""},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"}},
            "spec": {"taints": [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "kubernetes.io/batch-cpu": "12000", "kubernetes.io/batch-memory": "64Gi"},
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "kubernetes.io/batch-cpu": "12000", "kubernetes.io/batch-memory": "64Gi"},
                "conditions": conditions(heartbeat),
                "addresses": [{"type": "InternalIP", "address": format!("10.1.{}.{}", index / 250 % 250, index % 250)}],
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake",
                             "kubeProxyVersion": "fake", "machineID": "", "systemUUID": "", "bootID": "",
                             "kernelVersion": "", "osImage": "", "containerRuntimeVersion": ""},
                "phase": "Running"
            }
        })
    };
    review(
        &format!("d0b1c2d3-0000-4000-8000-{index:012}"),
        Subject {
            kind: ("", "v1", "Node"),
            resource: "nodes",
            sub_resource: Some("status"),
            namespace: None,
            name: &name,
        },
        "UPDATE",
        node("2026-12-04T12:00:30Z", 2 * index + 2),
        node("2026-12-04T12:00:00Z", 2 * index + 1),
    )
}

/// The quota reads and status writes of quota evaluation, in memory.
struct MemoryQuotas {
    quotas: Mutex<HashMap<String, ElasticQuota>>,
}

impl QuotaAccess for MemoryQuotas {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<ElasticQuota, ReadError>> {
        let found = self.quotas.lock().unwrap().get(name).cloned();
        Box::pin(async move {
            found.ok_or_else(|| read_error(format!("quota {namespace}/{name} not found")))
        })
    }

    fn update_child_request<'a>(
        &'a self,
        quota: &'a ElasticQuota,
        child_request: &'a str,
        _jitter: Duration,
    ) -> BoxFuture<'a, Result<(), UpdateError>> {
        let mut quotas = self.quotas.lock().unwrap();
        let name = quota.metadata.name.clone().unwrap_or_default();
        let answer = match quotas.get_mut(&name) {
            None => Err(UpdateError::Other(format!("quota {name} not found"))),
            Some(stored) if stored.metadata.resource_version != quota.metadata.resource_version => {
                Err(UpdateError::Conflict(format!("quota {name} changed")))
            }
            Some(stored) => {
                let version: u64 = stored
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                stored.metadata.resource_version = Some((version + 1).to_string());
                stored.metadata.annotations.get_or_insert_default().insert(
                    apis::extension::ANNOTATION_CHILD_REQUEST.to_owned(),
                    child_request.to_owned(),
                );
                Ok(())
            }
        };
        Box::pin(async move { answer })
    }
}

/// Handlers as the manager builds them for `feature_gates`, with the caches
/// a cluster set up by the chart and the scale bench holds.
fn handlers(feature_gates: &str) -> Handlers {
    let gates: FeatureGates = feature_gates.parse().unwrap();
    let caches = WebhookCaches::default();
    caches.profiles.mark_synced();
    caches.quota_profiles.mark_synced();
    for (name, value) in [
        ("koord-prod", 9000),
        ("koord-mid", 7000),
        ("koord-batch", 5000),
        ("koord-free", 3000),
    ] {
        caches.priority_classes.insert(
            serde_json::from_value::<PriorityClass>(
                json!({"metadata": {"name": name}, "value": value}),
            )
            .unwrap(),
        );
    }
    for name in ["default", "kube-system", "koordinator-system", NAMESPACE] {
        caches.namespaces.insert(
            serde_json::from_value::<Namespace>(json!({"metadata": {"name": name,
                "labels": {"kubernetes.io/metadata.name": name}}}))
            .unwrap(),
        );
    }
    let mut stored = HashMap::new();
    for team in 0..QUOTAS {
        let quota: ElasticQuota =
            serde_json::from_value(quota_object(&format!("team-{team}"), "1")).unwrap();
        caches.quotas.insert(quota.clone());
        stored.insert(format!("team-{team}"), quota);
    }
    let mut handlers = Handlers::new(caches, SloConfigRef::default());
    handlers.gates = gates.admission_gates();
    handlers.paths = gates.enabled_paths();
    if handlers.gates.quota_evaluation.enabled {
        let access = MemoryQuotas {
            quotas: Mutex::new(stored),
        };
        handlers.quota_evaluator = Some(QuotaEvaluator::new(
            Arc::new(access),
            UpdateSettings::default(),
        ));
    }
    handlers
}

/// One review through the server's path; the answer must allow it.
async fn answer(handlers: &Handlers, path: &str, body: &[u8]) -> Vec<u8> {
    let response = admit(handlers, path, body).await;
    assert_eq!(response.status(), 200, "{path}");
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    bytes.to_vec()
}

fn check_allowed(path: &str, answer: &[u8]) -> Value {
    let answer: Value = serde_json::from_slice(answer).unwrap();
    assert_eq!(
        answer["response"]["allowed"],
        json!(true),
        "{path} refused: {answer}"
    );
    answer
}

/// The object kube-apiserver sends the validating webhooks: the mutating
/// answer's patch applied.
fn patched(object: &Value, answer: &Value) -> Value {
    use base64::Engine;
    let mut object = object.clone();
    if let Some(patch) = answer["response"]["patch"].as_str() {
        let patch = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
    }
    object
}

struct Case {
    path: &'static str,
    what: &'static str,
    bodies: Vec<Vec<u8>>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn report(label: &str, mut latencies: Vec<Duration>, wall: Duration) {
    latencies.sort();
    println!(
        "  {label:<14} p50 {:>9.1?}  p99 {:>9.1?}  max {:>9.1?}  {:>8.0} reviews/s",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1],
        latencies.len() as f64 / wall.as_secs_f64()
    );
}

fn single(handlers: &Handlers, case: &Case, reviews: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut latencies = Vec::with_capacity(reviews);
        let started = Instant::now();
        for index in 0..reviews {
            let body = &case.bodies[index % case.bodies.len()];
            let begun = Instant::now();
            std::hint::black_box(answer(handlers, case.path, body).await);
            latencies.push(begun.elapsed());
        }
        report("1 at a time", latencies, started.elapsed());
    });
}

fn concurrent(
    handlers: &Arc<Handlers>,
    case: &Arc<Case>,
    reviews: usize,
    inflight: usize,
    threads: usize,
) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let tasks: Vec<_> = (0..inflight)
            .map(|_| {
                let (handlers, case, next) = (handlers.clone(), case.clone(), next.clone());
                tokio::spawn(async move {
                    let mut latencies = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= reviews {
                            return latencies;
                        }
                        let body = &case.bodies[index % case.bodies.len()];
                        let begun = Instant::now();
                        std::hint::black_box(answer(&handlers, case.path, body).await);
                        latencies.push(begun.elapsed());
                    }
                })
            })
            .collect();
        let mut latencies = Vec::with_capacity(reviews);
        for task in tasks {
            latencies.extend(task.await.unwrap());
        }
        report(
            &format!("{inflight} in flight"),
            latencies,
            started.elapsed(),
        );
    });
}

/// The reviews of every measured path, each checked to be allowed.
fn cases(handlers: &Handlers, distinct: usize) -> Vec<Case> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rng = Lcg(42);
    let mut mutate = Vec::new();
    let mut validate = Vec::new();
    let mut pod_bytes = 0;
    for index in 0..distinct {
        let object = pod(index, &mut rng);
        let body = pod_review(index, object.clone());
        let mutated = runtime.block_on(answer(handlers, PATH_MUTATE_POD, &body));
        let mutated = patched(&object, &check_allowed(PATH_MUTATE_POD, &mutated));
        pod_bytes += body.len();
        mutate.push(body);
        validate.push(pod_review(index, mutated));
    }
    let quotas: Vec<_> = (0..distinct).map(quota_review).collect();
    let quotas_validated: Vec<_> = quotas
        .iter()
        .map(|body| {
            let object: Value =
                serde_json::from_slice::<Value>(body).unwrap()["request"]["object"].clone();
            let answer = runtime.block_on(answer(handlers, PATH_MUTATE_ELASTIC_QUOTA, body));
            let filled = patched(&object, &check_allowed(PATH_MUTATE_ELASTIC_QUOTA, &answer));
            let index = quotas.iter().position(|b| b == body).unwrap();
            let mut review: Value = serde_json::from_slice(body).unwrap();
            review["request"]["object"] = filled;
            review["request"]["uid"] = json!(format!("v-{index}"));
            serde_json::to_vec(&review).unwrap()
        })
        .collect();
    let nodes: Vec<_> = (0..distinct).map(node_review).collect();
    println!(
        "reviews: {distinct} distinct per path; pod CREATE review {} bytes on average",
        pod_bytes / distinct.max(1)
    );
    let cases = vec![
        Case {
            path: PATH_MUTATE_POD,
            what: "pod CREATE",
            bodies: mutate,
        },
        Case {
            path: PATH_VALIDATE_POD,
            what: "pod CREATE (mutated)",
            bodies: validate,
        },
        Case {
            path: PATH_MUTATE_ELASTIC_QUOTA,
            what: "ElasticQuota CREATE",
            bodies: quotas,
        },
        Case {
            path: PATH_VALIDATE_ELASTIC_QUOTA,
            what: "ElasticQuota CREATE (defaulted)",
            bodies: quotas_validated,
        },
        Case {
            path: PATH_MUTATE_NODE_STATUS,
            what: "Node status UPDATE (gate off in the chart)",
            bodies: nodes,
        },
    ];
    for case in &cases {
        for body in case.bodies.iter().take(3) {
            check_allowed(
                case.path,
                &runtime.block_on(answer(handlers, case.path, body)),
            );
        }
    }
    cases
}

fn main() {
    let reviews = env_usize("BENCH_REVIEWS", 10_000).max(1);
    let distinct = env_usize("BENCH_DISTINCT", 1_000).max(1);
    let inflight = env_usize("BENCH_INFLIGHT", 32).max(1);
    let threads = env_usize("BENCH_THREADS", 2).max(1);
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    for (title, feature_gates, paths) in [
        (
            "chart defaults (featureGates \"\")",
            "",
            &[
                PATH_MUTATE_POD,
                PATH_VALIDATE_POD,
                PATH_MUTATE_ELASTIC_QUOTA,
                PATH_VALIDATE_ELASTIC_QUOTA,
                PATH_MUTATE_NODE_STATUS,
            ][..],
        ),
        (
            "quota evaluation on (EnableQuotaAdmission=true, quotas in memory)",
            "EnableQuotaAdmission=true",
            &[PATH_VALIDATE_POD][..],
        ),
    ] {
        let handlers = Arc::new(handlers(feature_gates));
        let cases = cases(&handlers, distinct);
        println!(
            "== {title}: {reviews} reviews per line, {threads} worker threads for the concurrent line"
        );
        for case in cases {
            if !paths.contains(&case.path) || !case.path.contains(only.as_str()) {
                continue;
            }
            println!("{} ({})", case.path, case.what);
            single(&handlers, &case, reviews);
            concurrent(&handlers, &Arc::new(case), reviews, inflight, threads);
        }
    }
}
