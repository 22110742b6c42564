//! A stateful stand-in for kube-apiserver shared by the webhook tests:
//! objects by path (GET/POST/PUT with resourceVersions and conflicts),
//! lists of a collection, watches held open without events, every request
//! recorded.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Collections a GET without an object name lists.
const LISTABLE: [&str; 5] = [
    "clustercolocationprofiles",
    "namespaces",
    "priorityclasses",
    "elasticquotas",
    "pods",
];

pub const NAMESPACE: &str = "koordinator-system";
pub const SECRET_PATH: &str =
    "/api/v1/namespaces/koordinator-system/secrets/koordinator-webhook-certs";
pub const MUTATING_PATH: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/koordinator-mutating-webhook-configuration";
pub const VALIDATING_PATH: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/koordinator-validating-webhook-configuration";

#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub body: Value,
}

/// Objects by path, with a resourceVersion counter; every request recorded.
#[derive(Default)]
pub struct State {
    objects: BTreeMap<String, Value>,
    version: u64,
    seen: Vec<Seen>,
}

pub struct FakeApi {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

pub fn status(code: u16, reason: &str) -> Value {
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
    pub async fn start(initial: Vec<(&str, Value)>) -> Self {
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
                        if method == "GET" && target.contains("watch=true") {
                            // An open watch that never sends an event.
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                            let _ = stream.write_all(head.as_bytes()).await;
                            tokio::time::sleep(Duration::from_secs(600)).await;
                            return;
                        }
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

    /// Adds or replaces an object (watches see nothing of it).
    pub fn insert(&self, path: &str, object: Value) {
        self.state
            .lock()
            .unwrap()
            .objects
            .insert(path.to_owned(), object);
    }

    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    pub fn writes(&self) -> Vec<Seen> {
        self.state
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| s.method != "GET")
            .cloned()
            .collect()
    }

    pub fn object(&self, path: &str) -> Value {
        self.state
            .lock()
            .unwrap()
            .objects
            .get(path)
            .cloned()
            .unwrap()
    }
}

pub fn answer(state: &mut State, method: &str, path: &str, mut body: Value) -> (u16, Value) {
    let stamp = |state: &mut State, body: &mut Value| {
        state.version += 1;
        body["metadata"]["resourceVersion"] = json!(state.version.to_string());
    };
    match method {
        "GET" => match state.objects.get(path) {
            Some(object) => (200, object.clone()),
            None => match list(state, path) {
                Some(list) => (200, list),
                None => (404, status(404, "NotFound")),
            },
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

/// Objects of the collection at `path` across namespaces, e.g. `/api/v1/pods`
/// lists `/api/v1/namespaces/*/pods/*`.
fn list(state: &State, path: &str) -> Option<Value> {
    let (prefix, plural) = path.rsplit_once('/')?;
    if !LISTABLE.contains(&plural) {
        return None;
    }
    let items: Vec<Value> = state
        .objects
        .iter()
        .filter(|(key, _)| {
            let segments: Vec<&str> = key.rsplitn(3, '/').collect();
            key.starts_with(&format!("{prefix}/")) && segments.len() == 3 && segments[1] == plural
        })
        .map(|(_, object)| object.clone())
        .collect();
    Some(
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": state.version.to_string()}, "items": items}),
    )
}

pub fn webhook(name: &str, path: &str) -> Value {
    json!({
        "name": name,
        "admissionReviewVersions": ["v1", "v1beta1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "clientConfig": {"service": {"name": "koordinator-webhook-service", "namespace": "default", "path": path}},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]
    })
}

pub fn configurations() -> Vec<(&'static str, Value)> {
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

pub fn decode(value: &Value) -> String {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(value.as_str().unwrap())
        .unwrap();
    String::from_utf8(bytes).unwrap()
}

/// A fresh directory for one test.
pub fn temp_dir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "koord-manager-webhook-{label}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
