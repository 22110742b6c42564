#![allow(clippy::unwrap_used)]
//! Self-managed certificates against a fake API server: the Secret is
//! created in upstream's layout, the CA bundle lands in both webhook
//! configurations, a second round changes nothing, and a round near expiry
//! rotates the Secret and the bundle.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine;
use koord_manager::cert::configuration::{ConfigurationNames, Target};
use koord_manager::cert::controller::SelfManaged;
use koord_manager::cert::writer::CertStore;
use koord_manager::cert::{self, ReloadableCert};
use koord_manager::webhook::handlers::ADMISSION_PATHS;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NAMESPACE: &str = "koordinator-system";
const SECRET_PATH: &str = "/api/v1/namespaces/koordinator-system/secrets/koordinator-webhook-certs";
const MUTATING_PATH: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/koordinator-mutating-webhook-configuration";
const VALIDATING_PATH: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/koordinator-validating-webhook-configuration";

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    body: Value,
}

/// Objects by path, with a resourceVersion counter; every request recorded.
#[derive(Default)]
struct State {
    objects: BTreeMap<String, Value>,
    version: u64,
    seen: Vec<Seen>,
}

struct FakeApi {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": reason, "code": code})
}

async fn read_request(stream: &mut TcpStream) -> Option<(String, String, Vec<u8>)> {
    let mut raw = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_string();
            let length: usize = head
                .lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, value)| value.trim().parse().ok())
                .unwrap_or(0);
            if raw.len() >= end + 4 + length {
                let mut words = head.split_whitespace();
                let method = words.next()?.to_owned();
                let target = words.next()?.to_owned();
                return Some((method, target, raw[end + 4..end + 4 + length].to_vec()));
            }
        }
        let n = stream.read(&mut buffer).await.ok()?;
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buffer[..n]);
    }
}

impl FakeApi {
    async fn start(initial: Vec<(&str, Value)>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        {
            let mut state = state.lock().unwrap();
            for (path, object) in initial {
                state.objects.insert(path.to_owned(), object);
            }
        }
        let shared = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    while let Some((method, target, body)) = read_request(&mut stream).await {
                        let path = target.split('?').next().unwrap_or("").to_owned();
                        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        let (code, reply) = {
                            let mut state = state.lock().unwrap();
                            state.seen.push(Seen {
                                method: method.clone(),
                                path: path.clone(),
                                body: body.clone(),
                            });
                            answer(&mut state, &method, &path, body)
                        };
                        let text = reply.to_string();
                        let response = format!(
                            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
                            text.len()
                        );
                        if stream.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        FakeApi { addr, state }
    }

    fn client(&self) -> kube::Client {
        let config = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    fn writes(&self) -> Vec<Seen> {
        self.state
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| s.method != "GET")
            .cloned()
            .collect()
    }

    fn object(&self, path: &str) -> Value {
        self.state
            .lock()
            .unwrap()
            .objects
            .get(path)
            .cloned()
            .unwrap()
    }
}

fn answer(state: &mut State, method: &str, path: &str, mut body: Value) -> (u16, Value) {
    let stamp = |state: &mut State, body: &mut Value| {
        state.version += 1;
        body["metadata"]["resourceVersion"] = json!(state.version.to_string());
    };
    match method {
        "GET" => match state.objects.get(path) {
            Some(object) => (200, object.clone()),
            None => (404, status(404, "NotFound")),
        },
        "POST" => {
            let name = body["metadata"]["name"].as_str().unwrap_or("").to_owned();
            let full = format!("{path}/{name}");
            if state.objects.contains_key(&full) {
                return (409, status(409, "AlreadyExists"));
            }
            stamp(state, &mut body);
            state.objects.insert(full, body.clone());
            (201, body)
        }
        "PUT" => {
            let Some(current) = state.objects.get(path) else {
                return (404, status(404, "NotFound"));
            };
            let sent = body["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_owned);
            let stored = current["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_owned);
            if sent.is_some() && sent != stored {
                return (409, status(409, "Conflict"));
            }
            stamp(state, &mut body);
            state.objects.insert(path.to_owned(), body.clone());
            (200, body)
        }
        _ => (405, status(405, "MethodNotAllowed")),
    }
}

fn webhook(name: &str, path: &str) -> Value {
    json!({
        "name": name,
        "admissionReviewVersions": ["v1", "v1beta1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "clientConfig": {"service": {"name": "koordinator-webhook-service", "namespace": "default", "path": path}},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    })
}

fn configurations() -> Vec<(&'static str, Value)> {
    vec![
        (
            MUTATING_PATH,
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "koordinator-mutating-webhook-configuration", "resourceVersion": "100"},
                "webhooks": [webhook("mpod-create.koordinator.sh", "/mutate-pod"),
                             webhook("mreservation-create.koordinator.sh", "/mutate-reservation")]
            }),
        ),
        (
            VALIDATING_PATH,
            json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "koordinator-validating-webhook-configuration", "resourceVersion": "101"},
                "webhooks": [webhook("vpod.koordinator.sh", "/validate-pod"),
                             webhook("vconfigmap.koordinator.sh", "/validate-configmap")]
            }),
        ),
    ]
}

fn decode(value: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.as_str().unwrap())
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "koord-manager-webhook-certs-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[tokio::test]
async fn self_managed_rounds_create_inject_keep_and_rotate() {
    let api = FakeApi::start(configurations()).await;
    let dns_name = cert::service_dns_name(NAMESPACE, "koordinator-webhook-service");
    let cert_dir = temp_dir();
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
        served_paths: ADMISSION_PATHS.to_vec(),
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
