//! A stateful stand-in for kube-apiserver shared by the webhook tests:
//! objects by path (GET/POST/PUT with resourceVersions and conflicts),
//! lists of a collection, watches held open without events, every request
//! recorded — the shared `FakeApiServer` answering from an object store.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine;
use koord_common::testing::FakeApiServer;
use serde_json::{Value, json};

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

/// Objects by path, with a resourceVersion counter.
#[derive(Default)]
pub struct State {
    objects: BTreeMap<String, Value>,
    version: u64,
}

pub struct FakeApi {
    server: FakeApiServer,
    state: Arc<Mutex<State>>,
}

pub fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": reason, "code": code})
}

/// A request body as JSON; `null` when empty or not JSON.
fn json_body(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or(Value::Null)
}

impl FakeApi {
    pub async fn start(initial: Vec<(&str, Value)>) -> Self {
        let server = FakeApiServer::start().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        {
            let mut state = state.lock().unwrap();
            for (path, object) in initial {
                state.objects.insert(path.to_owned(), object);
            }
        }
        server.hold_watches_open();
        server.respond_with({
            let state = Arc::clone(&state);
            move |request| {
                let mut state = state.lock().unwrap();
                let body = json_body(&request.body);
                let (code, reply) = answer(&mut state, &request.method, request.path(), body);
                Some((code, reply.to_string()))
            }
        });
        FakeApi { server, state }
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
        let config = kube::Config::new(self.server.url().parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    pub fn writes(&self) -> Vec<Seen> {
        self.server
            .recorded()
            .into_iter()
            .filter(|request| request.method != "GET")
            .map(|request| Seen {
                path: request.path().to_owned(),
                body: json_body(&request.body),
                method: request.method,
            })
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

fn answer(state: &mut State, method: &str, path: &str, mut body: Value) -> (u16, Value) {
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
