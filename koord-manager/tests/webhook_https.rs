#![allow(clippy::unwrap_used)]
//! The admission webhooks over real HTTPS: AdmissionReview bodies shaped
//! like kube-apiserver's, JSON patches applied back onto the raw object,
//! denials with their messages, malformed bodies, certificate rotation.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine;
use koord_common::Shutdown;
use koord_common::testing::{HttpResponse, parse_response};
use koord_manager::cert::{self, ReloadableCert};
use koord_manager::webhook::cache::WebhookCaches;
use koord_manager::webhook::configmap::SloConfigRef;
use koord_manager::webhook::handlers::Handlers;
use koord_manager::webhook::server::{WebhookServer, serve};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Length of a raw response with a Content-Length body (head included);
/// `usize::MAX` while the head is incomplete.
fn response_length(raw: &[u8]) -> usize {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return usize::MAX;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    end + 4 + length
}

struct Harness {
    server: Option<WebhookServer>,
    shutdown: Shutdown,
    addr: SocketAddr,
    ca_pem: String,
    cert: ReloadableCert,
    metrics: koord_common::MetricsRegistry,
}

impl Harness {
    async fn start(caches: WebhookCaches) -> Self {
        let artifacts = cert::generate("localhost", None, SystemTime::now()).unwrap();
        let cert = ReloadableCert::default();
        cert.set_pem(&artifacts.cert, &artifacts.key).unwrap();
        let handlers = Handlers::new(caches, SloConfigRef::default());
        let metrics = koord_common::MetricsRegistry::new("koord_manager");
        handlers.metrics.register(&metrics);
        let shutdown = Shutdown::new();
        let server = serve(
            "127.0.0.1:0".parse().unwrap(),
            &cert,
            Arc::new(handlers),
            &shutdown,
        )
        .await
        .unwrap();
        Harness {
            addr: server.addr,
            server: Some(server),
            shutdown,
            ca_pem: artifacts.ca_cert,
            cert,
            metrics,
        }
    }

    fn connector(ca_pem: &str) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(ca.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }

    /// POSTs `body` to `path` over TLS trusting `ca_pem`; returns the response and the server's certificate.
    async fn post_with(
        &self,
        ca_pem: &str,
        path: &str,
        body: &[u8],
    ) -> std::io::Result<(HttpResponse, Vec<u8>)> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await?;
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls =
            tokio::time::timeout(TIMEOUT, Self::connector(ca_pem).connect(name, tcp)).await??;
        let presented = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        let head = format!(
            "POST {path}?timeout=10s HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, */*\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        tls.write_all(head.as_bytes()).await?;
        tls.write_all(body).await?;
        tls.flush().await?;
        let mut raw = Vec::new();
        // A close_notify-less end is fine for these tests.
        let _ = tokio::time::timeout(TIMEOUT, tls.read_to_end(&mut raw)).await?;
        Ok((parse_response(&raw)?, presented))
    }

    /// Sends only the head of a POST announcing `length` body bytes.
    async fn post_head(&self, path: &str, length: usize) -> HttpResponse {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut tls =
            tokio::time::timeout(TIMEOUT, Self::connector(&self.ca_pem).connect(name, tcp))
                .await
                .unwrap()
                .unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        tls.flush().await.unwrap();
        // Read until the response is complete (the server need not wait
        // for a body it refused).
        let mut raw = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Ok(response) = parse_response(&raw)
                && raw.len() >= response_length(&raw)
            {
                return response;
            }
            let read = tokio::time::timeout(TIMEOUT, tls.read(&mut chunk))
                .await
                .unwrap()
                .unwrap_or(0);
            assert!(
                read > 0,
                "connection closed before a full response: {raw:?}"
            );
            raw.extend_from_slice(&chunk[..read]);
        }
    }

    async fn post(&self, path: &str, body: &[u8]) -> HttpResponse {
        self.post_with(&self.ca_pem, path, body).await.unwrap().0
    }

    /// Sends a review and returns its `response` object.
    async fn review(&self, path: &str, review: &Value) -> Value {
        let response = self.post(path, review.to_string().as_bytes()).await;
        assert_eq!(response.status, 200, "{}", response.body);
        let body: Value = serde_json::from_str(&response.body).unwrap();
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(body["kind"], "AdmissionReview");
        assert_eq!(body["response"]["uid"], review["request"]["uid"]);
        body["response"].clone()
    }

    async fn stop(mut self) {
        self.shutdown
            .trigger(koord_common::ShutdownReason::Requested("test done".into()));
        if let Some(server) = self.server.take() {
            server.wait(Duration::from_secs(10)).await;
        }
    }
}

fn user_info() -> Value {
    json!({
        "username": "system:serviceaccount:kube-system:replicaset-controller",
        "uid": "3c0a8a4e-1d5f-4c0e-9d0e-111111111111",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
    })
}

/// A pod the way kube-apiserver forwards it on CREATE (defaults applied, no uid yet).
fn spark_pod() -> Value {
    json!({
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "spark-executor-",
            "namespace": "spark",
            "creationTimestamp": null,
            "labels": {"app": "spark", "pod-template-hash": "5d8f7"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "spark-executor-5d8f7",
                                 "uid": "9f8e7d6c-0000-4000-8000-000000000001", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-11-29T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]
        },
        "spec": {
            "volumes": [{"name": "kube-api-access-abcde", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}], "defaultMode": 420}}],
            "containers": [{
                "name": "executor",
                "image": "apache/spark:3.5.0",
                "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1500m", "memory": "2Gi"}},
                "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {}
    })
}

fn review(
    uid: &str,
    kind: (&str, &str, &str),
    resource: &str,
    operation: &str,
    (namespace, name): (&str, &str),
    object: Value,
    old_object: Value,
) -> Value {
    let (group, version, kind) = kind;
    let options_kind = match operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": name,
            "namespace": namespace,
            "operation": operation,
            "userInfo": user_info(),
            "object": object,
            "oldObject": old_object,
            "dryRun": false,
            "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1", "fieldManager": "kubectl-client-side-apply"}
        }
    })
}

fn pod_review(uid: &str, operation: &str, object: Value, old_object: Value) -> Value {
    review(
        uid,
        ("", "v1", "Pod"),
        "pods",
        operation,
        ("spark", ""),
        object,
        old_object,
    )
}

fn caches_with_batch_profile() -> WebhookCaches {
    let caches = WebhookCaches::synced_empty();
    caches.profiles.insert(
        serde_json::from_value(json!({
            "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": {"name": "colocation-profile-example"},
            "spec": {
                "namespaceSelector": {"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
                "selector": {"matchLabels": {"app": "spark"}},
                "qosClass": "BE",
                "priorityClassName": "koord-batch",
                "koordinatorPriority": 1000,
                "schedulerName": "koord-scheduler",
                "labels": {"koordinator.sh/mutated": "true"},
                "annotations": {"koordinator.sh/intercepted": "true"}
            }
        }))
        .unwrap(),
    );
    caches.namespaces.insert(
        serde_json::from_value(json!({"metadata": {"name": "spark", "labels": {"koordinator.sh/enable-colocation": "true"}}})).unwrap(),
    );
    caches.priority_classes.insert(
        serde_json::from_value(json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "koord-batch"}, "value": 5000, "preemptionPolicy": "PreemptLowerPriority"}))
        .unwrap(),
    );
    caches
}

fn decode_patch(response: &Value) -> json_patch::Patch {
    assert_eq!(response["patchType"], "JSONPatch", "{response}");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    serde_json::from_slice(&raw).unwrap()
}

#[tokio::test]
async fn pod_create_gets_a_patch_that_applies_to_the_raw_object() {
    let harness = Harness::start(caches_with_batch_profile()).await;
    let request = pod_review(
        "705ab4f5-6393-11e8-b7cc-42010a800002",
        "CREATE",
        spark_pod(),
        Value::Null,
    );
    let response = harness.review("/mutate-pod", &request).await;
    assert_eq!(response["allowed"], true, "{response}");
    let patch = decode_patch(&response);

    // kube-apiserver applies the patch to the object it sent.
    let mut pod = spark_pod();
    json_patch::patch(&mut pod, &patch).unwrap();
    let labels = &pod["metadata"]["labels"];
    assert_eq!(labels["koordinator.sh/qosClass"], "BE");
    assert_eq!(labels["koordinator.sh/priority"], "1000");
    assert_eq!(labels["koordinator.sh/mutated"], "true");
    assert_eq!(labels["app"], "spark");
    assert_eq!(
        pod["metadata"]["annotations"]["koordinator.sh/intercepted"],
        "true"
    );
    assert_eq!(pod["spec"]["schedulerName"], "koord-scheduler");
    assert_eq!(pod["spec"]["priorityClassName"], "koord-batch");
    assert_eq!(pod["spec"]["priority"], 5000);
    let resources = &pod["spec"]["containers"][0]["resources"];
    assert_eq!(
        resources,
        &json!({
            "requests": {"kubernetes.io/batch-cpu": "1500", "kubernetes.io/batch-memory": "2Gi"},
            "limits": {"kubernetes.io/batch-cpu": "2000", "kubernetes.io/batch-memory": "4Gi"}
        })
    );
    let recorded = pod["metadata"]["annotations"]["node.koordinator.sh/extended-resource-spec"]
        .as_str()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(recorded).unwrap(),
        json!({"containers": {"executor": resources.clone()}}),
        "koordlet reads the batch resources from this annotation"
    );
    // Nothing else moved: the rest of the object is as sent.
    let mut expected_rest = spark_pod();
    let mut actual_rest = pod.clone();
    for value in [&mut expected_rest, &mut actual_rest] {
        value["metadata"].as_object_mut().unwrap().remove("labels");
        value["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        for key in [
            "schedulerName",
            "priorityClassName",
            "priority",
            "containers",
        ] {
            value["spec"].as_object_mut().unwrap().remove(key);
        }
    }
    assert_eq!(actual_rest, expected_rest);

    // A pod the profile does not select passes unpatched.
    let mut other = spark_pod();
    other["metadata"]["labels"]["app"] = json!("web");
    let response = harness
        .review(
            "/mutate-pod",
            &pod_review("u-2", "CREATE", other, Value::Null),
        )
        .await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
    harness.stop().await;
}

#[tokio::test]
async fn pod_validation_denies_forbidden_combinations_with_a_message() {
    let harness = Harness::start(WebhookCaches::synced_empty()).await;
    let mut pod = spark_pod();
    pod["metadata"]["labels"]["koordinator.sh/qosClass"] = json!("BE");
    pod["spec"]["priority"] = json!(9500);
    let response = harness
        .review(
            "/validate-pod",
            &pod_review("u-be-prod", "CREATE", pod, Value::Null),
        )
        .await;
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 400);
    assert_eq!(
        response["status"]["message"],
        "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination"
    );

    let mut batch_on_ls = spark_pod();
    batch_on_ls["metadata"]["labels"]["koordinator.sh/qosClass"] = json!("LS");
    batch_on_ls["spec"]["containers"][0]["resources"] =
        json!({"requests": {"kubernetes.io/batch-cpu": "1000"}});
    let response = harness
        .review(
            "/validate-pod",
            &pod_review("u-batch", "CREATE", batch_on_ls, Value::Null),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("must specify koordinator QoS BE"),
        "{response}"
    );

    let mut old = spark_pod();
    old["metadata"]["name"] = json!("spark-executor-x");
    old["metadata"]["labels"]["koordinator.sh/qosClass"] = json!("LS");
    let mut new = old.clone();
    new["metadata"]["labels"]["koordinator.sh/qosClass"] = json!("BE");
    new["spec"]["priority"] = json!(5500);
    let response = harness
        .review(
            "/validate-pod",
            &pod_review("u-update", "UPDATE", new, old.clone()),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable"),
        "{response}"
    );

    let response = harness
        .review(
            "/validate-pod",
            &pod_review("u-ok", "UPDATE", old.clone(), old),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["status"]["code"], 200);
    harness.stop().await;
}

fn quota(name: &str, parent: Option<&str>, is_parent: bool, min: Value, max: Value) -> Value {
    let mut labels = json!({});
    if let Some(parent) = parent {
        labels["quota.scheduling.koordinator.sh/parent"] = json!(parent);
    }
    if is_parent {
        labels["quota.scheduling.koordinator.sh/is-parent"] = json!("true");
    }
    json!({
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1", "kind": "ElasticQuota",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels, "creationTimestamp": null},
        "spec": {"min": min, "max": max}
    })
}

fn quota_review(uid: &str, operation: &str, object: Value, old: Value) -> Value {
    let name = object["metadata"]["name"]
        .as_str()
        .or(old["metadata"]["name"].as_str())
        .unwrap_or("")
        .to_owned();
    review(
        uid,
        ("scheduling.sigs.k8s.io", "v1alpha1", "ElasticQuota"),
        "elasticquotas",
        operation,
        ("team-a", &name),
        object,
        old,
    )
}

#[tokio::test]
async fn elastic_quota_webhooks_fill_defaults_and_keep_the_tree_sound() {
    let caches = WebhookCaches::synced_empty();
    caches.quotas.insert(
        serde_json::from_value(quota(
            "parent",
            None,
            true,
            json!({"cpu": "10"}),
            json!({"cpu": "40"}),
        ))
        .unwrap(),
    );
    caches.quotas.insert(
        serde_json::from_value(quota(
            "child-1",
            Some("parent"),
            false,
            json!({"cpu": "8"}),
            json!({"cpu": "40"}),
        ))
        .unwrap(),
    );
    let harness = Harness::start(caches).await;

    let created = quota(
        "child-2",
        Some("parent"),
        false,
        json!({"cpu": "2"}),
        json!({"cpu": "40"}),
    );
    let response = harness
        .review(
            "/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
            &quota_review("q-1", "CREATE", created.clone(), Value::Null),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");
    let mut filled = created.clone();
    json_patch::patch(&mut filled, &decode_patch(&response)).unwrap();
    assert_eq!(
        filled["metadata"]["annotations"]["quota.scheduling.koordinator.sh/shared-weight"],
        r#"{"cpu":"40"}"#
    );

    let response = harness
        .review(
            "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
            &quota_review("q-2", "CREATE", filled, Value::Null),
        )
        .await;
    assert_eq!(response["allowed"], true, "{response}");

    let greedy = quota(
        "child-3",
        Some("parent"),
        false,
        json!({"cpu": "3"}),
        json!({"cpu": "40"}),
    );
    let response = harness
        .review(
            "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
            &quota_review("q-3", "CREATE", greedy, Value::Null),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"]["message"],
        "checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: parent"
    );

    let inverted = quota(
        "solo",
        None,
        false,
        json!({"cpu": "5"}),
        json!({"cpu": "1"}),
    );
    let response = harness
        .review(
            "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
            &quota_review("q-4", "CREATE", inverted, Value::Null),
        )
        .await;
    assert_eq!(
        response["status"]["message"],
        "resourceKey cpu of quota solo min 5 > max 1"
    );

    let response = harness
        .review(
            "/validate-scheduling-sigs-k8s-io-v1alpha1-elasticquota",
            &quota_review(
                "q-5",
                "DELETE",
                Value::Null,
                quota(
                    "parent",
                    None,
                    true,
                    json!({"cpu": "10"}),
                    json!({"cpu": "40"}),
                ),
            ),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("has 1 child quotas"),
        "{response}"
    );

    let mut pod = spark_pod();
    pod["metadata"]["name"] = json!("job-1");
    pod["metadata"]["labels"]["quota.scheduling.koordinator.sh/name"] = json!("parent");
    let response = harness
        .review(
            "/validate-pod",
            &pod_review("q-6", "CREATE", pod, Value::Null),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(
        response["status"]["message"],
        "pod can not be linked to a parentQuotaGroup,quota:parent, pod:job-1"
    );
    harness.stop().await;
}

fn configmap_review(uid: &str, data: Value) -> Value {
    let object = json!({
        "kind": "ConfigMap", "apiVersion": "v1",
        "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system", "creationTimestamp": null},
        "data": data
    });
    review(
        uid,
        ("", "v1", "ConfigMap"),
        "configmaps",
        "UPDATE",
        ("koordinator-system", "slo-controller-config"),
        object.clone(),
        object,
    )
}

#[tokio::test]
async fn slo_controller_config_denial_names_the_bad_field() {
    let harness = Harness::start(WebhookCaches::synced_empty()).await;
    let bad = configmap_review(
        "cm-1",
        json!({
            "colocation-config": "{\"enable\":true,\"cpuReclaimThresholdPercent\":60}",
            "resource-threshold-config": "{\"clusterStrategy\":{\"enable\":true,\"cpuSuppressThresholdPercent\":170}}"
        }),
    );
    let response = harness.review("/validate-configmap", &bad).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent"),
        "{message}"
    );

    // Upstream registers this webhook with admissionReviewVersions={v1beta1}:
    // the reply must carry the version it was asked in.
    let mut beta = bad.clone();
    beta["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let response = harness
        .post("/validate-configmap", beta.to_string().as_bytes())
        .await;
    let body: Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(body["response"]["allowed"], false);
    assert_eq!(body["response"]["uid"], "cm-1");

    let good = configmap_review(
        "cm-2",
        json!({"colocation-config": "{\"enable\":true,\"cpuReclaimThresholdPercent\":60}"}),
    );
    let response = harness.review("/validate-configmap", &good).await;
    assert_eq!(response["allowed"], true, "{response}");
    harness.stop().await;
}

#[tokio::test]
async fn malformed_bodies_get_400_and_the_server_keeps_serving() {
    let harness = Harness::start(WebhookCaches::synced_empty()).await;
    for body in [
        &b"{not json"[..],
        b"",
        b"[1,2]",
        br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}"#,
    ] {
        let response = harness.post("/validate-pod", body).await;
        assert_eq!(response.status, 400, "{body:?} -> {}", response.body);
        assert!(!response.body.is_empty());
    }
    // A review whose object is not a pod at all is a denial, not a crash.
    let response = harness
        .review(
            "/validate-pod",
            &pod_review(
                "u-junk",
                "CREATE",
                json!({"spec": {"containers": "nope"}}),
                Value::Null,
            ),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot decode object"),
        "{response}"
    );

    let request = pod_review("u-after", "CREATE", spark_pod(), Value::Null);
    assert_eq!(
        harness.review("/validate-pod", &request).await["allowed"],
        true
    );

    let metrics = harness.metrics.encode().unwrap();
    // Three bodies that are not a review, one review without a request.
    for series in [
        "koord_manager_webhook_malformed_requests_total{path=\"/validate-pod\",reason=\"malformed\"} 3",
        "koord_manager_webhook_malformed_requests_total{path=\"/validate-pod\",reason=\"no_request\"} 1",
        "koord_manager_webhook_rejections_total{webhook_type=\"validate\",object_type=\"pod\",",
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }
    assert!(metrics.contains("reason=\"bad_request\"} 1"), "{metrics}");
    assert!(
        metrics.contains("koord_manager_webhook_webhook_duration_milliseconds_count{"),
        "{metrics}"
    );
    assert!(metrics.contains("status=\"rejected\""), "{metrics}");
    harness.stop().await;
}

#[tokio::test]
async fn bodies_beyond_the_size_limit_are_refused_by_name() {
    let harness = Harness::start(WebhookCaches::synced_empty()).await;
    // Refused from the announced length, before any of the body is read.
    let response = harness.post_head("/validate-pod", (8 << 20) + 1).await;
    assert_eq!(response.status, 413, "{}", response.body);
    assert!(
        response.body.contains("AdmissionReview body") && response.body.contains("8388608 bytes"),
        "{}",
        response.body
    );
    // The server keeps serving.
    let request = pod_review("u-after", "CREATE", spark_pod(), Value::Null);
    assert_eq!(
        harness.review("/validate-pod", &request).await["allowed"],
        true
    );
    let metrics = harness.metrics.encode().unwrap();
    assert!(
        metrics.contains(
            "koord_manager_webhook_malformed_requests_total{path=\"/validate-pod\",reason=\"too_large\"} 1"
        ),
        "{metrics}"
    );
    harness.stop().await;
}

#[tokio::test]
async fn a_rotated_certificate_is_presented_to_new_connections() {
    let harness = Harness::start(WebhookCaches::synced_empty()).await;
    let body = pod_review("u-r", "CREATE", spark_pod(), Value::Null).to_string();
    let (_, before) = harness
        .post_with(&harness.ca_pem, "/validate-pod", body.as_bytes())
        .await
        .unwrap();

    let other_ca = cert::generate("localhost", None, SystemTime::now()).unwrap();
    assert!(
        harness
            .post_with(&other_ca.ca_cert, "/validate-pod", body.as_bytes())
            .await
            .is_err(),
        "a client trusting another CA must fail the handshake"
    );
    harness.cert.set_pem(&other_ca.cert, &other_ca.key).unwrap();
    let (response, after) = harness
        .post_with(&other_ca.ca_cert, "/validate-pod", body.as_bytes())
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_ne!(before, after);
    harness.stop().await;
}

#[tokio::test]
async fn an_update_review_of_two_large_objects_is_accepted() {
    let harness = Harness::start(WebhookCaches::synced_empty()).await;
    let mut pod = spark_pod();
    pod["metadata"]["name"] = json!("big");
    pod["metadata"]["annotations"] = json!({"example.com/blob": "x".repeat(1_400_000)});
    let request = pod_review("u-big", "UPDATE", pod.clone(), pod);
    assert!(request.to_string().len() > 2_800_000);
    let response = harness.review("/validate-pod", &request).await;
    assert_eq!(response["allowed"], true, "{response}");
    harness.stop().await;
}
