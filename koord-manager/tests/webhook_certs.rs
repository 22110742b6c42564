#![allow(clippy::unwrap_used)]
//! Self-managed certificates against a fake API server: the Secret is
//! created in upstream's layout, the CA bundle lands in both webhook
//! configurations, a second round changes nothing, and a round near expiry
//! rotates the Secret and the bundle.

mod webhook_support;

use std::time::{Duration, SystemTime};

use koord_manager::cert::configuration::{ConfigurationNames, Target};
use koord_manager::cert::controller::SelfManaged;
use koord_manager::cert::writer::CertStore;
use koord_manager::cert::{self, ReloadableCert};
use koord_manager::webhook::handlers::{ADMISSION_PATHS, PATH_MUTATE_RESERVATION};
use webhook_support::*;

#[tokio::test]
async fn self_managed_rounds_create_inject_keep_and_rotate() {
    let api = FakeApi::start(configurations()).await;
    let dns_name = cert::service_dns_name(NAMESPACE, "koordinator-webhook-service");
    let cert_dir = temp_dir("rounds");
    let rounds = SelfManaged {
        store: CertStore::Secret {
            client: api.client(),
            namespace: NAMESPACE.into(),
            name: "koordinator-webhook-certs".into(),
        },
        dns_name: dns_name.clone(),
        cert_dir: Some(cert_dir.clone()),
        configurations: Some((
            api.client(),
            ConfigurationNames::default(),
            Target {
                namespace: NAMESPACE.into(),
                service: "koordinator-webhook-service".into(),
                host: None,
            },
        )),
        // Every path but the Reservation webhook's, as with its gate
        // (ReservationMutatingWebhook) off, the default.
        served_paths: ADMISSION_PATHS
            .iter()
            .copied()
            .filter(|path| *path != PATH_MUTATE_RESERVATION)
            .collect(),
        resync: Duration::from_secs(60),
    };
    let serving = ReloadableCert::default();
    let now = SystemTime::now();

    // First round: Secret created, bundle injected into both configurations.
    assert!(rounds.round(&serving, now).await.unwrap());
    assert!(serving.is_loaded());
    let writes: Vec<(String, String)> = api
        .writes()
        .iter()
        .map(|s| (s.method.clone(), s.path.clone()))
        .collect();
    assert_eq!(
        writes,
        [
            (
                "POST".to_owned(),
                "/api/v1/namespaces/koordinator-system/secrets".to_owned()
            ),
            ("PUT".to_owned(), MUTATING_PATH.to_owned()),
            ("PUT".to_owned(), VALIDATING_PATH.to_owned()),
        ]
    );
    let secret = api.object(SECRET_PATH);
    let data = secret["data"].as_object().unwrap();
    let keys: Vec<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "ca-cert.pem",
            "ca-key.pem",
            "cert.pem",
            "key.pem",
            "tls.crt",
            "tls.key"
        ]
    );
    let ca_pem = decode(&data["ca-cert.pem"]);
    assert_eq!(decode(&data["tls.crt"]), decode(&data["cert.pem"]));
    let stored = cert::Artifacts {
        ca_key: decode(&data["ca-key.pem"]),
        ca_cert: ca_pem.clone(),
        cert: decode(&data["cert.pem"]),
        key: decode(&data["key.pem"]),
    };
    assert!(cert::is_valid_for(&stored, &dns_name, now));
    assert_eq!(
        std::fs::read_to_string(cert_dir.join("tls.crt")).unwrap(),
        stored.cert
    );

    let mutating = api.object(MUTATING_PATH);
    let webhooks = mutating["webhooks"].as_array().unwrap();
    assert_eq!(
        webhooks.len(),
        1,
        "the reservation webhook is not served here: {mutating}"
    );
    assert_eq!(decode(&webhooks[0]["clientConfig"]["caBundle"]), ca_pem);
    assert_eq!(
        webhooks[0]["clientConfig"]["service"]["namespace"],
        NAMESPACE
    );
    assert!(
        mutating["metadata"]["annotations"]["template"]
            .as_str()
            .unwrap()
            .contains("/mutate-reservation")
    );
    let validating = api.object(VALIDATING_PATH);
    for webhook in validating["webhooks"].as_array().unwrap() {
        assert_eq!(decode(&webhook["clientConfig"]["caBundle"]), ca_pem);
    }

    // Second round: nothing to do.
    let before = api.writes().len();
    assert!(!rounds.round(&serving, now).await.unwrap());
    assert_eq!(api.writes().len(), before, "{:?}", &api.writes()[before..]);

    // Near the end of the CA's life: Secret updated in place, new bundle everywhere.
    let later = now + cert::CERT_LIFETIME - Duration::from_secs(30 * 86_400);
    assert!(rounds.round(&serving, later).await.unwrap());
    let new_writes: Vec<Seen> = api.writes()[before..].to_vec();
    assert_eq!(new_writes[0].method, "PUT");
    assert_eq!(new_writes[0].path, SECRET_PATH);
    assert!(
        new_writes[0].body["metadata"]["resourceVersion"].is_string(),
        "the update carries the read version"
    );
    let rotated_ca = decode(&api.object(SECRET_PATH)["data"]["ca-cert.pem"]);
    assert_ne!(rotated_ca, ca_pem);
    let mutating = api.object(MUTATING_PATH);
    assert_eq!(
        decode(&mutating["webhooks"][0]["clientConfig"]["caBundle"]),
        rotated_ca
    );
    let _ = std::fs::remove_dir_all(&cert_dir);
}

#[tokio::test]
async fn a_missing_configuration_is_a_reported_error_not_a_panic() {
    let api = FakeApi::start(vec![]).await;
    let rounds = SelfManaged {
        store: CertStore::Secret {
            client: api.client(),
            namespace: NAMESPACE.into(),
            name: "koordinator-webhook-certs".into(),
        },
        dns_name: "svc.ns.svc".into(),
        cert_dir: None,
        configurations: Some((
            api.client(),
            ConfigurationNames::default(),
            Target {
                namespace: NAMESPACE.into(),
                service: "svc".into(),
                host: None,
            },
        )),
        served_paths: ADMISSION_PATHS.to_vec(),
        resync: Duration::from_secs(60),
    };
    let serving = ReloadableCert::default();
    let err = rounds.round(&serving, SystemTime::now()).await.unwrap_err();
    assert!(
        err.contains("koordinator-mutating-webhook-configuration"),
        "{err}"
    );
    assert!(
        serving.is_loaded(),
        "the certificate is served even when the bundle cannot be written"
    );
}

#[tokio::test]
async fn provided_certificates_are_loaded_and_reloaded_when_the_files_change() {
    use koord_manager::cert::controller::run_provided;

    let dir = temp_dir("provided");
    std::fs::create_dir_all(&dir).unwrap();
    let serving = ReloadableCert::default();
    let status = koord_common::StatusCheck::failing("not loaded");
    let shutdown = koord_common::Shutdown::new();
    let task = tokio::spawn(run_provided(
        dir.clone(),
        serving.clone(),
        status.clone(),
        shutdown.clone(),
        Duration::from_millis(50),
    ));

    async fn until(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !condition() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // Nothing mounted yet: not ready, nothing served.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!serving.is_loaded());
    assert!(status.current().is_err());

    // cert-manager's layout: tls.crt / tls.key.
    let first = cert::generate("localhost", None, SystemTime::now()).unwrap();
    std::fs::write(dir.join("tls.key"), &first.key).unwrap();
    std::fs::write(dir.join("tls.crt"), &first.cert).unwrap();
    until("the first pair", || serving.is_loaded()).await;
    assert!(status.current().is_ok());
    let loaded = serving.current_der().unwrap();

    // A renewed pair replaces it; a broken write keeps the last good one.
    let second = cert::generate("localhost", None, SystemTime::now()).unwrap();
    std::fs::write(dir.join("tls.key"), &second.key).unwrap();
    std::fs::write(dir.join("tls.crt"), &second.cert).unwrap();
    until("the renewed pair", || {
        serving.current_der().is_some_and(|der| der != loaded)
    })
    .await;
    let renewed = serving.current_der().unwrap();
    std::fs::write(dir.join("tls.crt"), "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(serving.current_der().unwrap(), renewed);
    assert!(status.current().is_ok());

    shutdown.trigger(koord_common::ShutdownReason::Requested("test done".into()));
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
