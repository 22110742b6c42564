#![allow(clippy::unwrap_used)]
//! The webhook shell as the process runs it: `webhook::start` against a fake
//! API server fills its caches by list/watch, creates the certificate Secret,
//! injects the CA bundle, turns ready, and mutates a pod over HTTPS with a
//! profile it learned from the API server.

mod webhook_support;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use clap::Parser;
use koord_common::testing::parse_response;
use koord_common::{ComponentContext, Probe, ShutdownReason};
use koord_manager::webhook::configmap::SloConfigRef;
use koord_manager::webhook::{self, WebhookArgs};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use webhook_support::*;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    webhook: WebhookArgs,
}

fn cluster_objects() -> Vec<(&'static str, Value)> {
    let mut objects = configurations();
    objects.push((
        "/apis/config.koordinator.sh/v1alpha1/clustercolocationprofiles/colocation",
        json!({
            "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": {"name": "colocation", "resourceVersion": "3"},
            "spec": {"selector": {"matchLabels": {"app": "spark"}}, "qosClass": "BE", "priorityClassName": "koord-batch"}
        }),
    ));
    objects.push((
        "/apis/config.koordinator.sh/v1alpha1/clustercolocationprofiles/fresh-namespaces",
        json!({
            "apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": {"name": "fresh-namespaces", "resourceVersion": "6"},
            "spec": {"namespaceSelector": {"matchLabels": {"colocation": "true"}},
                     "labels": {"from-namespace-profile": "yes"},
                     "priorityClassName": "koord-late"}
        }),
    ));
    objects.push((
        "/api/v1/namespaces/spark",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "spark", "resourceVersion": "4"}}),
    ));
    objects.push((
        "/apis/scheduling.k8s.io/v1/priorityclasses/koord-batch",
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": "koord-batch", "resourceVersion": "5"}, "value": 5500}),
    ));
    objects
}

/// Sends a pod CREATE for `namespace` over HTTPS (trusting `ca_pem`) and
/// returns the pod with the answered patch applied.
async fn mutate(addr: std::net::SocketAddr, ca_pem: &str, namespace: &str) -> Value {
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("koordinator-webhook-service.koordinator-system.svc").unwrap();
    let mut tls = TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await
        .unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "driver", "namespace": namespace, "labels": {"app": "spark"}},
                     "spec": {"containers": [{"name": "c", "image": "spark",
                                              "resources": {"requests": {"cpu": "250m"}}}]}});
    let review = json!({
        "kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "b6f6c1c8-1f3a-4b53-9c3e-5f0f1d1e2a3b",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": pod.clone(),
            "oldObject": null, "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    })
    .to_string();
    let request = format!(
        "POST /mutate-pod?timeout=10s HTTP/1.1\r\nHost: koordinator-webhook-service.koordinator-system.svc:443\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{review}",
        review.len()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut raw))
        .await
        .unwrap();
    let response = parse_response(&raw).unwrap();
    assert_eq!(response.status, 200, "{}", response.body);
    let body: Value = serde_json::from_str(&response.body).unwrap();
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(body["response"]["patch"].as_str().unwrap())
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&patch).unwrap();
    let mut patched = pod;
    json_patch::patch(&mut patched, &patch).unwrap();
    patched
}

async fn ready(context: &ComponentContext, check: &str) -> bool {
    context
        .health
        .evaluate_one(Probe::Readiness, check)
        .await
        .is_some_and(|report| report.is_healthy())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_serves_mutations_with_a_managed_certificate() {
    let api = FakeApi::start(cluster_objects()).await;
    let dir = temp_dir("shell");
    let flags = Flags::try_parse_from([
        "koord-manager".to_owned(),
        "--webhook-port=0".to_owned(),
        "--webhook-bind-address=127.0.0.1".to_owned(),
        format!("--webhook-cert-dir={}", dir.display()),
        "--webhook-namespace=koordinator-system".to_owned(),
        "--webhook-cert-writer=secret".to_owned(),
    ])
    .unwrap();
    let context = ComponentContext::new(koord_manager::COMPONENT);
    let webhooks = webhook::start(
        &context,
        &flags.webhook,
        api.client(),
        SloConfigRef::default(),
    )
    .await
    .unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !(ready(&context, "webhook-cert").await
        && ready(&context, webhook::WEBHOOK_READY_CHECK).await)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the webhooks never became ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The CA kube-apiserver would trust is the one written into the configuration.
    let mutating = api.object(MUTATING_PATH);
    let ca_pem = decode(&mutating["webhooks"][0]["clientConfig"]["caBundle"]);
    assert_eq!(
        ca_pem,
        decode(&api.object(SECRET_PATH)["data"]["ca-cert.pem"])
    );

    let spark = mutate(webhooks.server.addr, &ca_pem, "spark").await;
    assert_eq!(spark["metadata"]["labels"]["koordinator.sh/qosClass"], "BE");
    assert_eq!(spark["spec"]["priority"], 5500);
    assert_eq!(
        spark["spec"]["containers"][0]["resources"]["requests"],
        json!({"kubernetes.io/batch-cpu": "250"})
    );
    assert!(
        spark["metadata"]["labels"]
            .get("from-namespace-profile")
            .is_none()
    );

    // A namespace and a PriorityClass created after the caches synced (the
    // watch has not delivered them) are read from the API server.
    api.insert(
        "/api/v1/namespaces/fresh",
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "fresh", "resourceVersion": "9", "labels": {"colocation": "true"}}}),
    );
    api.insert(
        "/apis/scheduling.k8s.io/v1/priorityclasses/koord-late",
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
               "metadata": {"name": "koord-late", "resourceVersion": "10"}, "value": 7100}),
    );
    let fresh = mutate(webhooks.server.addr, &ca_pem, "fresh").await;
    assert_eq!(fresh["metadata"]["labels"]["from-namespace-profile"], "yes");
    assert_eq!(fresh["spec"]["priorityClassName"], "koord-late");
    assert_eq!(fresh["spec"]["priority"], 7100);

    let metrics = context.metrics.encode().unwrap();
    assert!(
        metrics.contains("koord_manager_webhook_webhook_duration_milliseconds_count{webhook_type=\"mutate\",object_type=\"pod\",operation=\"CREATE\",plugin_name=\"ClusterColocationProfile\",status=\"allowed\"} 2"),
        "{metrics}"
    );

    context
        .shutdown
        .trigger(ShutdownReason::Requested("test done".into()));
    webhooks.server.wait(Duration::from_secs(10)).await;
    let _ = std::fs::remove_dir_all(&dir);
}
