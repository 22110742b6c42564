//! The decision core of Docker mode: which Engine API calls are intercepted,
//! what pod and container a request is about (from the labels and names
//! dockershim and cri-dockerd give their containers), the hook request it
//! makes, and the request body after a hook's answer. No I/O here.

use std::collections::BTreeMap;

use apis::runtime::v1alpha1 as hook;
use serde_json::{Map, Value};

use crate::cri::v1 as cri;
use crate::merge::overlay_resources;

/// Largest create or update body the proxy reads (dockershim's and
/// cri-dockerd's bodies are a few KiB).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Longest container id or name taken from a path.
const MAX_ID_LEN: usize = 256;

/// Labels dockershim and cri-dockerd put on the containers they create.
pub const CONTAINER_TYPE_LABEL: &str = "io.kubernetes.docker.type";
pub const CONTAINER_TYPE_SANDBOX: &str = "podsandbox";
pub const CONTAINER_TYPE_CONTAINER: &str = "container";
pub const SANDBOX_ID_LABEL: &str = "io.kubernetes.sandbox.id";
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
/// Pod and container annotations are stored as labels with this prefix.
pub const ANNOTATION_LABEL_PREFIX: &str = "annotation.";
/// The runtime handler the hooks see for Docker pods (upstream's value).
pub const DOCKER_RUNTIME_HANDLER: &str = "docker";

/// An Engine API call, as far as the proxy cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST /[vX.Y/]containers/create`
    Create,
    /// `POST /[vX.Y/]containers/{id}/start`
    Start(String),
    /// `POST /[vX.Y/]containers/{id}/stop`
    Stop(String),
    /// `POST /[vX.Y/]containers/{id}/update`
    Update(String),
    /// `DELETE /[vX.Y/]containers/{id}`: no hook, but the store forgets the id.
    Remove(String),
    /// Everything else, forwarded unchanged (streams and upgrades included).
    PassThrough,
}

/// The path without its API version prefix (`/v1.41/containers/create` →
/// `/containers/create`).
pub fn strip_version(path: &str) -> &str {
    let Some(rest) = path.strip_prefix("/v") else {
        return path;
    };
    let Some((version, tail)) = rest.split_once('/') else {
        return path;
    };
    let valid = version.split_once('.').is_some_and(|(major, minor)| {
        !major.is_empty()
            && !minor.is_empty()
            && major.bytes().all(|b| b.is_ascii_digit())
            && minor.bytes().all(|b| b.is_ascii_digit())
    });
    if valid {
        &path[path.len() - tail.len() - 1..]
    } else {
        path
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Which call a request is.
pub fn route(method: &hyper::http::Method, path: &str) -> Route {
    let path = strip_version(path);
    let Some(rest) = path.strip_prefix("/containers/") else {
        return Route::PassThrough;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    match (method, parts.as_slice()) {
        (&hyper::http::Method::POST, ["create"]) => Route::Create,
        (&hyper::http::Method::POST, [id, action]) if valid_id(id) => match *action {
            "start" => Route::Start((*id).to_string()),
            "stop" => Route::Stop((*id).to_string()),
            "update" => Route::Update((*id).to_string()),
            _ => Route::PassThrough,
        },
        (&hyper::http::Method::DELETE, [id]) if valid_id(id) => Route::Remove((*id).to_string()),
        _ => Route::PassThrough,
    }
}

/// A query parameter, percent-decoded; `None` when absent or not UTF-8.
pub fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (percent_decode(key)? == name).then(|| percent_decode(value))?
    })
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The engine's cgroup driver (`CgroupDriver` of `GET /info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CgroupDriver {
    #[default]
    Cgroupfs,
    Systemd,
}

impl CgroupDriver {
    pub fn from_info(name: &str) -> Self {
        if name == "systemd" {
            CgroupDriver::Systemd
        } else {
            CgroupDriver::Cgroupfs
        }
    }
}

/// The cgroup parent the hooks see, in CRI form. Docker with the systemd
/// driver is given a slice name (`kubepods-burstable-pod1.slice`); the CRI
/// form is its full path (`/kubepods.slice/kubepods-burstable.slice/…`).
pub fn to_cri_cgroup_path(driver: CgroupDriver, parent: &str) -> String {
    if driver != CgroupDriver::Systemd || parent.is_empty() || parent.contains('/') {
        return parent.to_string();
    }
    let mut path = String::new();
    let mut prefix = String::new();
    let tokens: Vec<&str> = parent.split('-').collect();
    for (index, token) in tokens.iter().enumerate() {
        if index > 0 {
            prefix.push('-');
        }
        prefix.push_str(token);
        path.push('/');
        path.push_str(&prefix);
        if index + 1 < tokens.len() {
            path.push_str(".slice");
        }
    }
    path
}

/// The cgroup parent Docker is given for a hook's CRI-form answer: with the
/// systemd driver only the last path element (a slice name), as dockershim.
pub fn docker_cgroup_parent(driver: CgroupDriver, parent: &str) -> String {
    match driver {
        CgroupDriver::Systemd => parent
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string(),
        CgroupDriver::Cgroupfs => parent.to_string(),
    }
}

/// Splits Docker labels into pod/container labels and annotations (stored
/// as `annotation.<key>` labels).
pub fn split_labels(
    labels: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut plain = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    for (key, value) in labels {
        match key.strip_prefix(ANNOTATION_LABEL_PREFIX) {
            Some(annotation) => annotations.insert(annotation.to_string(), value.clone()),
            None => plain.insert(key.clone(), value.clone()),
        };
    }
    (plain, annotations)
}

/// Whether a container is a pod's sandbox or one of its containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sandbox,
    Container,
}

/// The Kubernetes identity of a Docker container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeMeta {
    pub kind: Kind,
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    /// Empty for a sandbox.
    pub container_name: String,
    /// The sandbox a container belongs to (its `io.kubernetes.sandbox.id`).
    pub sandbox_id: Option<String>,
    pub attempt: u32,
}

/// The Kubernetes identity of a container from its labels and its name
/// (`k8s_<container>_<pod>_<namespace>_<uid>_<attempt>`, the sandbox's
/// container being `POD`); labels win where both say. `None` for a container
/// that neither marks as Kubernetes'.
pub fn kube_meta(labels: &BTreeMap<String, String>, name: &str) -> Option<KubeMeta> {
    let tokens: Vec<&str> = name.trim_start_matches('/').split('_').collect();
    let named = (tokens.len() == 6 && tokens[0] == "k8s").then_some(tokens);
    let type_label = labels.get(CONTAINER_TYPE_LABEL).map(String::as_str);
    if named.is_none() && type_label.is_none() {
        return None;
    }
    let token = |index: usize| named.as_ref().map(|t| t[index].to_string());
    let from = |label: &str, index: usize| {
        labels
            .get(label)
            .cloned()
            .or_else(|| token(index))
            .unwrap_or_default()
    };
    let kind = match type_label {
        Some(CONTAINER_TYPE_SANDBOX) => Kind::Sandbox,
        Some(_) => Kind::Container,
        None if token(1).as_deref() == Some("POD") => Kind::Sandbox,
        None => Kind::Container,
    };
    Some(KubeMeta {
        kind,
        pod_name: from(POD_NAME_LABEL, 2),
        pod_namespace: from(POD_NAMESPACE_LABEL, 3),
        pod_uid: from(POD_UID_LABEL, 4),
        container_name: match kind {
            Kind::Sandbox => String::new(),
            Kind::Container => from(CONTAINER_NAME_LABEL, 1),
        },
        sandbox_id: labels.get(SANDBOX_ID_LABEL).cloned(),
        attempt: token(5).and_then(|a| a.parse().ok()).unwrap_or(0),
    })
}

/// Why a body could not be read; the request then goes to the engine
/// unchanged, whose own error the client gets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("body is not JSON: {0}")]
    NotJson(String),
    #[error("body is not a JSON object")]
    NotObject,
    #[error("field {field} {problem}")]
    Field {
        field: &'static str,
        problem: &'static str,
    },
}

/// The resource fields of a `HostConfig` (create) or `UpdateConfig` (update):
/// Docker name, and whether it is a string.
const RESOURCE_FIELDS: [(&str, bool); 8] = [
    ("CpuPeriod", false),
    ("CpuQuota", false),
    ("CpuShares", false),
    ("Memory", false),
    ("OomScoreAdj", false),
    ("CpusetCpus", true),
    ("CpusetMems", true),
    ("MemorySwap", false),
];

fn object(value: Value) -> Result<Map<String, Value>, BodyError> {
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(BodyError::NotObject),
    }
}

/// Parses a JSON object body.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, BodyError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|error| BodyError::NotJson(error.to_string()))?;
    object(value)
}

fn int_field(map: &Map<String, Value>, field: &'static str) -> Result<i64, BodyError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(value) => value.as_i64().ok_or(BodyError::Field {
            field,
            problem: "is not an integer",
        }),
    }
}

fn string_field(map: &Map<String, Value>, field: &'static str) -> Result<String, BodyError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(BodyError::Field {
            field,
            problem: "is not a string",
        }),
    }
}

/// The resources in a `HostConfig` or `UpdateConfig` object.
pub fn resources_of(map: &Map<String, Value>) -> Result<hook::LinuxContainerResources, BodyError> {
    Ok(hook::LinuxContainerResources {
        cpu_period: int_field(map, "CpuPeriod")?,
        cpu_quota: int_field(map, "CpuQuota")?,
        cpu_shares: int_field(map, "CpuShares")?,
        memory_limit_in_bytes: int_field(map, "Memory")?,
        oom_score_adj: int_field(map, "OomScoreAdj")?,
        cpuset_cpus: string_field(map, "CpusetCpus")?,
        cpuset_mems: string_field(map, "CpusetMems")?,
        memory_swap_limit_in_bytes: int_field(map, "MemorySwap")?,
        ..Default::default()
    })
}

fn resource_value(r: &hook::LinuxContainerResources, field: &str) -> Value {
    match field {
        "CpuPeriod" => r.cpu_period.into(),
        "CpuQuota" => r.cpu_quota.into(),
        "CpuShares" => r.cpu_shares.into(),
        "Memory" => r.memory_limit_in_bytes.into(),
        "OomScoreAdj" => r.oom_score_adj.into(),
        "CpusetCpus" => r.cpuset_cpus.clone().into(),
        "CpusetMems" => r.cpuset_mems.clone().into(),
        _ => r.memory_swap_limit_in_bytes.into(),
    }
}

/// Writes into `map` the resource fields a hook changed (`before` → `after`);
/// fields the hook left alone keep the client's spelling. Returns the names
/// written.
fn write_changed_resources(
    map: &mut Map<String, Value>,
    before: &hook::LinuxContainerResources,
    after: &hook::LinuxContainerResources,
    updatable: impl Fn(&str) -> bool,
) -> Vec<&'static str> {
    let mut written = Vec::new();
    for (field, _) in RESOURCE_FIELDS {
        let new = resource_value(after, field);
        if new != resource_value(before, field) && updatable(field) {
            map.insert(field.to_string(), new);
            written.push(field);
        }
    }
    written
}

fn labels_of(map: &Map<String, Value>) -> Result<BTreeMap<String, String>, BodyError> {
    match map.get("Labels") {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(labels)) => labels
            .iter()
            .map(|(key, value)| match value {
                Value::String(text) => Ok((key.clone(), text.clone())),
                _ => Err(BodyError::Field {
                    field: "Labels",
                    problem: "has a value that is not a string",
                }),
            })
            .collect(),
        Some(_) => Err(BodyError::Field {
            field: "Labels",
            problem: "is not an object",
        }),
    }
}

fn env_of(map: &Map<String, Value>) -> Result<Vec<String>, BodyError> {
    match map.get("Env") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str().map(str::to_string).ok_or(BodyError::Field {
                    field: "Env",
                    problem: "has an entry that is not a string",
                })
            })
            .collect(),
        Some(_) => Err(BodyError::Field {
            field: "Env",
            problem: "is not an array",
        }),
    }
}

/// `KEY=value` entries as a map; entries without `=` are not variables the
/// hooks can see (Docker passes `KEY` alone through from its own environment).
pub fn env_map(env: &[String]) -> BTreeMap<String, String> {
    env.iter()
        .filter_map(|entry| entry.split_once('='))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// A create body read for the hooks.
#[derive(Debug, Clone)]
pub struct CreateBody {
    body: Map<String, Value>,
    pub labels: BTreeMap<String, String>,
    pub env: Vec<String>,
    pub cgroup_parent: String,
    pub resources: hook::LinuxContainerResources,
}

impl CreateBody {
    pub fn parse(bytes: &[u8]) -> Result<Self, BodyError> {
        let body = parse_object(bytes)?;
        let host = match body.get("HostConfig") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(host)) => host.clone(),
            Some(_) => {
                return Err(BodyError::Field {
                    field: "HostConfig",
                    problem: "is not an object",
                });
            }
        };
        Ok(Self {
            labels: labels_of(&body)?,
            env: env_of(&body)?,
            cgroup_parent: string_field(&host, "CgroupParent")?,
            resources: resources_of(&host)?,
            body,
        })
    }

    fn host_config(&mut self) -> &mut Map<String, Value> {
        let host = self
            .body
            .entry("HostConfig")
            .or_insert_with(|| Value::Object(Map::new()));
        if !host.is_object() {
            *host = Value::Object(Map::new());
        }
        match host {
            Value::Object(map) => map,
            _ => unreachable!("HostConfig was just made an object"),
        }
    }

    fn set_labels(&mut self, labels: &BTreeMap<String, String>) {
        let entry = self
            .body
            .entry("Labels")
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        if let Value::Object(map) = entry {
            for (key, value) in labels {
                map.insert(key.clone(), value.clone().into());
            }
        }
    }

    fn set_cgroup_parent(&mut self, parent: String) {
        self.cgroup_parent = parent.clone();
        self.host_config()
            .insert("CgroupParent".into(), parent.into());
    }

    /// Sets the hook's env values: existing keys keep their place, new ones
    /// are appended in key order.
    fn merge_env(&mut self, answer: &BTreeMap<String, String>) {
        for (key, value) in answer {
            let entry = format!("{key}={value}");
            let existing = self
                .env
                .iter_mut()
                .find(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) == key);
            match existing {
                Some(slot) => *slot = entry,
                None => self.env.push(entry),
            }
        }
        self.body.insert(
            "Env".into(),
            Value::Array(self.env.iter().cloned().map(Value::String).collect()),
        );
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing a map of JSON values cannot fail.
        serde_json::to_vec(&self.body).unwrap_or_default()
    }

    pub fn into_map(self) -> Map<String, Value> {
        self.body
    }
}

fn with_annotation_prefix(annotations: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    annotations
        .iter()
        .map(|(k, v)| (format!("{ANNOTATION_LABEL_PREFIX}{k}"), v.clone()))
        .collect()
}

/// The PreRunPodSandbox request for a sandbox's create body.
pub fn pod_hook_request(
    meta: &KubeMeta,
    body: &CreateBody,
    driver: CgroupDriver,
) -> hook::PodSandboxHookRequest {
    let (labels, annotations) = split_labels(&body.labels);
    hook::PodSandboxHookRequest {
        pod_meta: Some(hook::PodSandboxMetadata {
            name: meta.pod_name.clone(),
            uid: meta.pod_uid.clone(),
            namespace: meta.pod_namespace.clone(),
            attempt: meta.attempt,
        }),
        runtime_handler: DOCKER_RUNTIME_HANDLER.to_string(),
        labels,
        annotations,
        cgroup_parent: to_cri_cgroup_path(driver, &body.cgroup_parent),
        overhead: None,
        resources: Some(body.resources.clone()),
    }
}

/// The PreCreateContainer request for a container's create body and its pod
/// (from the store; without it, what the container's labels say).
pub fn container_hook_request(
    meta: &KubeMeta,
    body: &CreateBody,
    pod: Option<&hook::PodSandboxHookRequest>,
    driver: CgroupDriver,
) -> hook::ContainerResourceHookRequest {
    let (_, annotations) = split_labels(&body.labels);
    let pod_meta = pod.and_then(|p| p.pod_meta.clone()).or_else(|| {
        Some(hook::PodSandboxMetadata {
            name: meta.pod_name.clone(),
            uid: meta.pod_uid.clone(),
            namespace: meta.pod_namespace.clone(),
            attempt: 0,
        })
    });
    hook::ContainerResourceHookRequest {
        pod_meta,
        container_meta: Some(hook::ContainerMetadata {
            name: meta.container_name.clone(),
            attempt: meta.attempt,
            id: String::new(),
        }),
        container_annotations: annotations,
        container_resources: Some(body.resources.clone()),
        pod_resources: pod.and_then(|p| p.resources.clone()),
        pod_annotations: pod.map(|p| p.annotations.clone()).unwrap_or_default(),
        pod_labels: pod.map(|p| p.labels.clone()).unwrap_or_default(),
        pod_cgroup_parent: match pod {
            Some(pod) if !pod.cgroup_parent.is_empty() => pod.cgroup_parent.clone(),
            _ => to_cri_cgroup_path(driver, &body.cgroup_parent),
        },
        container_envs: env_map(&body.env),
    }
}

/// What applying an answer changed, for the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    pub fields: Vec<&'static str>,
}

impl Applied {
    pub fn changed(&self) -> bool {
        !self.fields.is_empty()
    }
}

/// Applies a PreRunPodSandbox answer to a sandbox's create body and to the
/// pod context (the same merge as CRI mode: empty answers keep the request).
pub fn apply_pod_answer(
    body: &mut CreateBody,
    context: &mut hook::PodSandboxHookRequest,
    answer: &hook::PodSandboxHookResponse,
    driver: CgroupDriver,
) -> Applied {
    let mut applied = Applied::default();
    for (key, value) in &answer.labels {
        context.labels.insert(key.clone(), value.clone());
    }
    for (key, value) in &answer.annotations {
        context.annotations.insert(key.clone(), value.clone());
    }
    let mut labels = answer.labels.clone();
    labels.extend(with_annotation_prefix(&answer.annotations));
    if !labels.is_empty() {
        body.set_labels(&labels);
        applied.fields.push("Labels");
    }
    if !answer.cgroup_parent.is_empty() {
        context.cgroup_parent = answer.cgroup_parent.clone();
        body.set_cgroup_parent(docker_cgroup_parent(driver, &answer.cgroup_parent));
        applied.fields.push("HostConfig.CgroupParent");
    }
    if let Some(resources) = &answer.resources {
        let before = body.resources.clone();
        let after = overlay_resources(&before, resources);
        let written = write_changed_resources(body.host_config(), &before, &after, |_| true);
        applied.fields.extend(written);
        body.resources = after.clone();
        context.resources = Some(after);
    }
    applied
}

/// Applies a PreCreateContainer answer to a container's create body and to
/// the container context.
pub fn apply_create_answer(
    body: &mut CreateBody,
    context: &mut hook::ContainerResourceHookRequest,
    answer: &hook::ContainerResourceHookResponse,
    driver: CgroupDriver,
) -> Applied {
    let mut applied = Applied::default();
    if !answer.container_annotations.is_empty() {
        for (key, value) in &answer.container_annotations {
            context
                .container_annotations
                .insert(key.clone(), value.clone());
        }
        body.set_labels(&with_annotation_prefix(&answer.container_annotations));
        applied.fields.push("Labels");
    }
    if let Some(resources) = &answer.container_resources {
        let before = body.resources.clone();
        let after = overlay_resources(&before, resources);
        let written = write_changed_resources(body.host_config(), &before, &after, |_| true);
        applied.fields.extend(written);
        body.resources = after.clone();
        context.container_resources = Some(after);
    }
    if !answer.pod_cgroup_parent.is_empty() {
        context.pod_cgroup_parent = answer.pod_cgroup_parent.clone();
        body.set_cgroup_parent(docker_cgroup_parent(driver, &answer.pod_cgroup_parent));
        applied.fields.push("HostConfig.CgroupParent");
    }
    if !answer.container_envs.is_empty() {
        for (key, value) in &answer.container_envs {
            context.container_envs.insert(key.clone(), value.clone());
        }
        body.merge_env(&answer.container_envs);
        applied.fields.push("Env");
    }
    applied
}

/// An update body read for the hooks: its resource fields at the top level.
#[derive(Debug, Clone)]
pub struct UpdateBody {
    body: Map<String, Value>,
    pub resources: hook::LinuxContainerResources,
}

impl UpdateBody {
    pub fn parse(bytes: &[u8]) -> Result<Self, BodyError> {
        let body = parse_object(bytes)?;
        Ok(Self {
            resources: resources_of(&body)?,
            body,
        })
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.body).unwrap_or_default()
    }

    pub fn into_map(self) -> Map<String, Value> {
        self.body
    }
}

/// Overlays an update's values on the stored container resources (zero and
/// empty fields keep what is stored, as upstream).
pub fn update_context(context: &mut hook::ContainerResourceHookRequest, body: &UpdateBody) {
    let base = context.container_resources.clone().unwrap_or_default();
    context.container_resources = Some(overlay_resources(&base, &body.resources));
}

/// Applies a PreUpdateContainerResources answer to an update body and the
/// context. `OomScoreAdj` cannot be updated in Docker, so it is not written.
pub fn apply_update_answer(
    body: &mut UpdateBody,
    context: &mut hook::ContainerResourceHookRequest,
    answer: &hook::ContainerResourceHookResponse,
) -> Applied {
    let mut applied = Applied::default();
    let Some(resources) = &answer.container_resources else {
        return applied;
    };
    let before = context.container_resources.clone().unwrap_or_default();
    let after = overlay_resources(&before, resources);
    applied.fields = write_changed_resources(&mut body.body, &before, &after, |field| {
        field != "OomScoreAdj"
    });
    body.resources = after.clone();
    context.container_resources = Some(after);
    applied
}

/// A container as `GET /containers/{id}/json` describes it, in CRI terms
/// for the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Described {
    Sandbox {
        sandbox: Box<cri::PodSandbox>,
        cgroup_parent: String,
    },
    Container {
        container: Box<cri::Container>,
        resources: Box<cri::LinuxContainerResources>,
    },
    /// Not a Kubernetes container: no hooks.
    Other,
}

fn to_cri_resources(r: &hook::LinuxContainerResources) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        cpu_period: r.cpu_period,
        cpu_quota: r.cpu_quota,
        cpu_shares: r.cpu_shares,
        memory_limit_in_bytes: r.memory_limit_in_bytes,
        oom_score_adj: r.oom_score_adj,
        cpuset_cpus: r.cpuset_cpus.clone(),
        cpuset_mems: r.cpuset_mems.clone(),
        memory_swap_limit_in_bytes: r.memory_swap_limit_in_bytes,
        ..Default::default()
    }
}

/// Describes an inspected container (`Id`, `Name`, `Config.Labels`,
/// `HostConfig`).
pub fn describe(inspect: &Value, driver: CgroupDriver) -> Result<Described, BodyError> {
    let map = inspect.as_object().ok_or(BodyError::NotObject)?;
    let id = string_field(map, "Id")?;
    let name = string_field(map, "Name")?;
    let config = match map.get("Config") {
        Some(Value::Object(config)) => config.clone(),
        _ => Map::new(),
    };
    let host = match map.get("HostConfig") {
        Some(Value::Object(host)) => host.clone(),
        _ => Map::new(),
    };
    let labels = labels_of(&config)?;
    let Some(meta) = kube_meta(&labels, &name) else {
        return Ok(Described::Other);
    };
    let (plain, annotations) = split_labels(&labels);
    let parent = to_cri_cgroup_path(driver, &string_field(&host, "CgroupParent")?);
    Ok(match meta.kind {
        Kind::Sandbox => Described::Sandbox {
            sandbox: Box::new(cri::PodSandbox {
                id,
                metadata: Some(cri::PodSandboxMetadata {
                    name: meta.pod_name,
                    uid: meta.pod_uid,
                    namespace: meta.pod_namespace,
                    attempt: meta.attempt,
                }),
                labels: plain,
                annotations,
                runtime_handler: DOCKER_RUNTIME_HANDLER.to_string(),
                ..Default::default()
            }),
            cgroup_parent: parent,
        },
        Kind::Container => Described::Container {
            container: Box::new(cri::Container {
                id,
                pod_sandbox_id: meta.sandbox_id.unwrap_or_default(),
                metadata: Some(cri::ContainerMetadata {
                    name: meta.container_name,
                    attempt: meta.attempt,
                }),
                labels: plain,
                annotations,
                ..Default::default()
            }),
            resources: Box::new(to_cri_resources(&resources_of(&host)?)),
        },
    })
}

/// A Docker-style error body (`{"message": …}`), as the engine sends.
pub fn error_body(message: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "message": message })).unwrap_or_default()
}

/// The created container's id in the engine's answer to a create.
pub fn created_id(answer: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(answer).ok()?;
    value.get("Id")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::http::Method;
    use serde_json::json;

    fn pairs(items: &[(&str, &str)]) -> BTreeMap<String, String> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn routes_with_and_without_version_prefix() {
        let cases: &[(Method, &str, Route)] = &[
            (Method::POST, "/containers/create", Route::Create),
            (Method::POST, "/v1.41/containers/create", Route::Create),
            // Upstream's own test uses a one-digit minor version.
            (Method::POST, "/v1.3/containers/create", Route::Create),
            (
                Method::POST,
                "/v1.41/containers/abc123/start",
                Route::Start("abc123".into()),
            ),
            // Upstream's getContainerID case.
            (
                Method::POST,
                "/1.3/containers/5345hjkhjkf/start",
                Route::PassThrough,
            ),
            (
                Method::POST,
                "/containers/5345hjkhjkf/start",
                Route::Start("5345hjkhjkf".into()),
            ),
            (
                Method::POST,
                "/v1.24/containers/k8s_POD_a-b.c/stop",
                Route::Stop("k8s_POD_a-b.c".into()),
            ),
            (
                Method::POST,
                "/v1.41/containers/abc/update",
                Route::Update("abc".into()),
            ),
            (
                Method::DELETE,
                "/v1.41/containers/abc",
                Route::Remove("abc".into()),
            ),
            // Upstream's stop pattern has no end anchor; ours is exact.
            (
                Method::POST,
                "/v1.41/containers/abc/stopped",
                Route::PassThrough,
            ),
            (Method::GET, "/v1.41/containers/create", Route::PassThrough),
            (
                Method::GET,
                "/v1.41/containers/abc/json",
                Route::PassThrough,
            ),
            (
                Method::POST,
                "/v1.41/containers/abc/attach",
                Route::PassThrough,
            ),
            (Method::POST, "/v1.41/exec/abc/start", Route::PassThrough),
            (Method::POST, "/v1.41/containers//start", Route::PassThrough),
            (
                Method::POST,
                "/v1.41/containers/a%2Fb/start",
                Route::PassThrough,
            ),
            (Method::POST, "/vX.41/containers/create", Route::PassThrough),
            (Method::POST, "/v1./containers/create", Route::PassThrough),
            (Method::POST, "/containers/create/extra", Route::PassThrough),
            (Method::GET, "/_ping", Route::PassThrough),
        ];
        for (method, path, expected) in cases {
            assert_eq!(&route(method, path), expected, "{method} {path}");
        }
        let long = format!("/containers/{}/start", "a".repeat(MAX_ID_LEN + 1));
        assert_eq!(route(&Method::POST, &long), Route::PassThrough);
    }

    #[test]
    fn query_parameters_are_decoded() {
        let query = Some("fromImage=x&name=k8s_POD_nginx_default_uid%2D1_0&x");
        assert_eq!(
            query_param(query, "name").as_deref(),
            Some("k8s_POD_nginx_default_uid-1_0")
        );
        assert_eq!(query_param(query, "x").as_deref(), Some(""));
        assert_eq!(query_param(query, "missing"), None);
        assert_eq!(query_param(None, "name"), None);
        assert_eq!(query_param(Some("name=%zz"), "name"), None);
        assert_eq!(query_param(Some("name=%ff"), "name"), None);
        assert_eq!(query_param(Some("name=%4"), "name"), None);
    }

    #[test]
    fn upstream_cri_cgroup_paths() {
        use CgroupDriver::*;
        let cases = [
            (
                Systemd,
                "kubepods-burstable-djfklsjdf98.slice",
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-djfklsjdf98.slice",
            ),
            (
                Cgroupfs,
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-djfklsjdf98.slice",
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-djfklsjdf98.slice",
            ),
            (
                Systemd,
                "kubepods-besteffort-fsdfsdf.slice",
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-fsdfsdf.slice",
            ),
            (
                Systemd,
                "kubepods-dfsdfsdf.slice",
                "/kubepods.slice/kubepods-dfsdfsdf.slice",
            ),
            (
                Systemd,
                "koordinator-dfsdfsdf.slice",
                "/koordinator.slice/koordinator-dfsdfsdf.slice",
            ),
            (Systemd, "dfsdfsdf.slice", "/dfsdfsdf.slice"),
            // Not in upstream's table: nothing to convert.
            (Systemd, "", ""),
            (
                Systemd,
                "/kubepods.slice/x.slice",
                "/kubepods.slice/x.slice",
            ),
            (
                Cgroupfs,
                "/kubepods/burstable/pod1",
                "/kubepods/burstable/pod1",
            ),
        ];
        for (driver, parent, expected) in cases {
            assert_eq!(
                to_cri_cgroup_path(driver, parent),
                expected,
                "{driver:?} {parent}"
            );
        }
    }

    #[test]
    fn upstream_expected_cgroup_parents() {
        use CgroupDriver::*;
        let cases = [
            (
                Cgroupfs,
                "/kubepods/besteffort/poddjfklsjdf98",
                "/kubepods/besteffort/poddjfklsjdf98",
            ),
            (
                Systemd,
                "/kubepods.slice/kubepods-dfsdfsdf.slice",
                "kubepods-dfsdfsdf.slice",
            ),
            (
                Systemd,
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-fsdfsdf.slice",
                "kubepods-burstable-fsdfsdf.slice",
            ),
            (
                Systemd,
                "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-fsdfsdf.slice",
                "kubepods-besteffort-fsdfsdf.slice",
            ),
            (
                Systemd,
                "/koordinator.slice/koordinator-fsdfsdf.slice",
                "koordinator-fsdfsdf.slice",
            ),
            (Systemd, "kubepods-x.slice", "kubepods-x.slice"),
        ];
        for (driver, parent, expected) in cases {
            assert_eq!(
                docker_cgroup_parent(driver, parent),
                expected,
                "{driver:?} {parent}"
            );
        }
        assert_eq!(CgroupDriver::from_info("systemd"), Systemd);
        assert_eq!(CgroupDriver::from_info("cgroupfs"), Cgroupfs);
        assert_eq!(CgroupDriver::from_info(""), Cgroupfs);
    }

    #[test]
    fn upstream_label_and_annotation_split() {
        let (labels, annotations) = split_labels(&pairs(&[
            (
                "annotation.dummy.koordinator.sh/test_splitLabelsAndAnnotations",
                "true",
            ),
            ("io.kubernetes.docker.type", "podsandbox"),
        ]));
        assert_eq!(
            labels,
            pairs(&[("io.kubernetes.docker.type", "podsandbox")])
        );
        assert_eq!(
            annotations,
            pairs(&[(
                "dummy.koordinator.sh/test_splitLabelsAndAnnotations",
                "true"
            )])
        );
    }

    #[test]
    fn upstream_env_split() {
        let env = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            env_map(&env(&["a=b", "b=c"])),
            pairs(&[("a", "b"), ("b", "c")])
        );
        assert_eq!(env_map(&env(&["a=b=c"])), pairs(&[("a", "b=c")]));
        assert_eq!(env_map(&env(&["a"])), pairs(&[]));
    }

    #[test]
    fn kubernetes_identity_from_labels_and_names() {
        // cri-dockerd's sandbox: labels and name agree.
        let sandbox = kube_meta(
            &pairs(&[
                (CONTAINER_TYPE_LABEL, CONTAINER_TYPE_SANDBOX),
                (POD_NAME_LABEL, "nginx"),
                (POD_NAMESPACE_LABEL, "default"),
                (POD_UID_LABEL, "uid-1"),
            ]),
            "k8s_POD_nginx_default_uid-1_2",
        )
        .unwrap();
        assert_eq!(sandbox.kind, Kind::Sandbox);
        assert_eq!(
            (
                sandbox.pod_name.as_str(),
                sandbox.pod_namespace.as_str(),
                sandbox.pod_uid.as_str()
            ),
            ("nginx", "default", "uid-1")
        );
        assert_eq!(sandbox.attempt, 2);
        assert_eq!(sandbox.container_name, "");

        // A container: labels win over the name.
        let container = kube_meta(
            &pairs(&[
                (CONTAINER_TYPE_LABEL, CONTAINER_TYPE_CONTAINER),
                (CONTAINER_NAME_LABEL, "app"),
                (POD_NAME_LABEL, "nginx"),
                (SANDBOX_ID_LABEL, "sandbox1"),
            ]),
            "/k8s_other_nginx_default_uid-1_0",
        )
        .unwrap();
        assert_eq!(container.kind, Kind::Container);
        assert_eq!(container.container_name, "app");
        assert_eq!(container.pod_namespace, "default");
        assert_eq!(container.sandbox_id.as_deref(), Some("sandbox1"));

        // Upstream's GetRuntimeResourceType: anything but podsandbox is a container.
        let other_type = kube_meta(&pairs(&[(CONTAINER_TYPE_LABEL, "x")]), "").unwrap();
        assert_eq!(other_type.kind, Kind::Container);

        // Name only (upstream's rule): POD means the sandbox.
        let named = kube_meta(&pairs(&[]), "k8s_POD_p_ns_uid_x").unwrap();
        assert_eq!((named.kind, named.attempt), (Kind::Sandbox, 0));

        // Neither: not a Kubernetes container (upstream refuses these; we pass them).
        assert_eq!(kube_meta(&pairs(&[]), "my_web_server"), None);
        assert_eq!(kube_meta(&pairs(&[]), "k8s_too_few_parts"), None);
        assert_eq!(kube_meta(&pairs(&[]), "xx_xx_xx_xx_xx_xx"), None);
    }

    fn sandbox_body() -> Vec<u8> {
        json!({
            "Image": "pause",
            "Labels": {
                CONTAINER_TYPE_LABEL: CONTAINER_TYPE_SANDBOX,
                "app": "web",
                "annotation.kubernetes.io/config.source": "api",
            },
            "HostConfig": {
                "CgroupParent": "kubepods-burstable-pod1.slice",
                "Memory": 100,
                "CpuPeriod": 200,
                "NetworkMode": "none",
                "FutureField": {"kept": true},
            },
            "NetworkingConfig": {"EndpointsConfig": {}},
            "UnknownTopLevel": [1, 2],
        })
        .to_string()
        .into_bytes()
    }

    fn sandbox_meta() -> KubeMeta {
        kube_meta(&pairs(&[]), "k8s_POD_web_default_uid-1_0").unwrap()
    }

    #[test]
    fn pod_hook_request_from_a_sandbox_body() {
        let body = CreateBody::parse(&sandbox_body()).unwrap();
        let request = pod_hook_request(&sandbox_meta(), &body, CgroupDriver::Systemd);
        let meta = request.pod_meta.clone().unwrap();
        assert_eq!(
            (
                meta.name.as_str(),
                meta.namespace.as_str(),
                meta.uid.as_str()
            ),
            ("web", "default", "uid-1")
        );
        assert_eq!(
            request.cgroup_parent,
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
        );
        assert_eq!(request.labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            request
                .annotations
                .get("kubernetes.io/config.source")
                .map(String::as_str),
            Some("api")
        );
        let resources = request.resources.unwrap();
        assert_eq!(
            (resources.memory_limit_in_bytes, resources.cpu_period),
            (100, 200)
        );
        assert_eq!(request.runtime_handler, DOCKER_RUNTIME_HANDLER);
    }

    /// (case, hook answer, expected HostConfig fields after, fields reported)
    #[test]
    fn pod_answers_rewrite_the_sandbox_body() {
        let cases: Vec<(
            &str,
            hook::PodSandboxHookResponse,
            serde_json::Value,
            Vec<&str>,
        )> = vec![
            (
                "empty answer changes nothing",
                Default::default(),
                json!({"CgroupParent": "kubepods-burstable-pod1.slice", "Memory": 100, "CpuPeriod": 200}),
                vec![],
            ),
            (
                "cgroup parent, as a slice name under systemd",
                hook::PodSandboxHookResponse {
                    cgroup_parent:
                        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice"
                            .into(),
                    ..Default::default()
                },
                json!({"CgroupParent": "kubepods-besteffort-pod1.slice", "Memory": 100, "CpuPeriod": 200}),
                vec!["HostConfig.CgroupParent"],
            ),
            (
                "resources: set fields replace, zero fields keep (CRI mode's merge)",
                hook::PodSandboxHookResponse {
                    resources: Some(hook::LinuxContainerResources {
                        cpu_shares: 2,
                        cpu_quota: -1,
                        cpuset_cpus: "0-1".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                json!({"CgroupParent": "kubepods-burstable-pod1.slice", "Memory": 100, "CpuPeriod": 200, "CpuShares": 2, "CpuQuota": -1, "CpusetCpus": "0-1"}),
                vec!["CpuQuota", "CpuShares", "CpusetCpus"],
            ),
        ];
        for (case, answer, expected, fields) in cases {
            let mut body = CreateBody::parse(&sandbox_body()).unwrap();
            let mut context = pod_hook_request(&sandbox_meta(), &body, CgroupDriver::Systemd);
            let applied = apply_pod_answer(&mut body, &mut context, &answer, CgroupDriver::Systemd);
            assert_eq!(applied.fields, fields, "{case}");
            let rewritten = parse_object(&body.to_bytes()).unwrap();
            let host = rewritten["HostConfig"].as_object().unwrap();
            for (key, value) in expected.as_object().unwrap() {
                assert_eq!(&host[key], value, "{case}: {key}");
            }
            // Fields the proxy does not know survive the rewrite.
            assert_eq!(host["FutureField"], json!({"kept": true}), "{case}");
            assert_eq!(host["NetworkMode"], json!("none"), "{case}");
            assert_eq!(rewritten["UnknownTopLevel"], json!([1, 2]), "{case}");
            assert_eq!(
                rewritten["NetworkingConfig"],
                json!({"EndpointsConfig": {}}),
                "{case}"
            );
            if case.starts_with("cgroup") {
                assert_eq!(
                    context.cgroup_parent,
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice"
                );
            }
        }
    }

    #[test]
    fn pod_answer_labels_and_annotations_become_labels() {
        let mut body = CreateBody::parse(&sandbox_body()).unwrap();
        let mut context = pod_hook_request(&sandbox_meta(), &body, CgroupDriver::Cgroupfs);
        let answer = hook::PodSandboxHookResponse {
            labels: pairs(&[("koordinator.sh/qosClass", "BE")]),
            annotations: pairs(&[("note", "x")]),
            ..Default::default()
        };
        let applied = apply_pod_answer(&mut body, &mut context, &answer, CgroupDriver::Cgroupfs);
        assert_eq!(applied.fields, vec!["Labels"]);
        let labels = &parse_object(&body.to_bytes()).unwrap()["Labels"];
        assert_eq!(labels["koordinator.sh/qosClass"], json!("BE"));
        assert_eq!(labels["annotation.note"], json!("x"));
        assert_eq!(labels["app"], json!("web"));
        assert_eq!(
            context.annotations.get("note").map(String::as_str),
            Some("x")
        );
    }

    fn container_body() -> Vec<u8> {
        json!({
            "Image": "busybox",
            "Env": ["PATH=/bin", "KEEP=1", "BARE"],
            "Labels": {
                CONTAINER_TYPE_LABEL: CONTAINER_TYPE_CONTAINER,
                CONTAINER_NAME_LABEL: "app",
                SANDBOX_ID_LABEL: "sb1",
                "annotation.io.kubernetes.container.hash": "abc",
            },
            "HostConfig": {"CgroupParent": "/kubepods/burstable/pod1", "CpuShares": 512, "OomScoreAdj": 1000},
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn container_hook_request_with_and_without_its_pod() {
        let body = CreateBody::parse(&container_body()).unwrap();
        let meta = kube_meta(&body.labels, "k8s_app_web_default_uid-1_3").unwrap();
        let pod = hook::PodSandboxHookRequest {
            pod_meta: Some(hook::PodSandboxMetadata {
                name: "web".into(),
                namespace: "default".into(),
                uid: "uid-1".into(),
                attempt: 0,
            }),
            labels: pairs(&[("app", "web")]),
            cgroup_parent: "/kubepods/besteffort/pod1".into(),
            ..Default::default()
        };
        let with_pod = container_hook_request(&meta, &body, Some(&pod), CgroupDriver::Cgroupfs);
        assert_eq!(with_pod.pod_cgroup_parent, "/kubepods/besteffort/pod1");
        assert_eq!(with_pod.pod_labels, pairs(&[("app", "web")]));
        let container_meta = with_pod.container_meta.clone().unwrap();
        assert_eq!(
            (container_meta.name.as_str(), container_meta.attempt),
            ("app", 3)
        );
        assert_eq!(
            with_pod.container_envs,
            pairs(&[("KEEP", "1"), ("PATH", "/bin")])
        );
        assert_eq!(
            with_pod.container_annotations,
            pairs(&[("io.kubernetes.container.hash", "abc")])
        );
        assert_eq!(with_pod.container_resources.unwrap().cpu_shares, 512);

        let without = container_hook_request(&meta, &body, None, CgroupDriver::Cgroupfs);
        assert_eq!(without.pod_cgroup_parent, "/kubepods/burstable/pod1");
        assert_eq!(without.pod_meta.unwrap().name, "web");
        assert!(without.pod_labels.is_empty());
    }

    #[test]
    fn container_answers_rewrite_the_create_body() {
        let mut body = CreateBody::parse(&container_body()).unwrap();
        let meta = kube_meta(&body.labels, "").unwrap();
        let mut context = container_hook_request(&meta, &body, None, CgroupDriver::Cgroupfs);
        let answer = hook::ContainerResourceHookResponse {
            container_annotations: pairs(&[("koord", "yes")]),
            container_resources: Some(hook::LinuxContainerResources {
                cpu_shares: 2,
                cpu_period: 100_000,
                cpu_quota: 50_000,
                memory_limit_in_bytes: 1 << 30,
                cpuset_cpus: "1".into(),
                // Out of range: keeps the body's value (CRI mode's merge).
                oom_score_adj: 5000,
                ..Default::default()
            }),
            pod_cgroup_parent: "/kubepods/besteffort/pod1".into(),
            container_envs: pairs(&[("KEEP", "2"), ("NEW", "x")]),
        };
        let applied = apply_create_answer(&mut body, &mut context, &answer, CgroupDriver::Cgroupfs);
        assert_eq!(
            applied.fields,
            vec![
                "Labels",
                "CpuPeriod",
                "CpuQuota",
                "CpuShares",
                "Memory",
                "CpusetCpus",
                "HostConfig.CgroupParent",
                "Env"
            ]
        );
        let rewritten = parse_object(&body.to_bytes()).unwrap();
        assert_eq!(
            rewritten["HostConfig"],
            json!({
                "CgroupParent": "/kubepods/besteffort/pod1",
                "CpuShares": 2,
                "CpuPeriod": 100_000,
                "CpuQuota": 50_000,
                "Memory": 1_073_741_824,
                "CpusetCpus": "1",
                "OomScoreAdj": 1000,
            })
        );
        // Existing keys keep their place, new ones are appended; a bare name stays.
        assert_eq!(
            rewritten["Env"],
            json!(["PATH=/bin", "KEEP=2", "BARE", "NEW=x"])
        );
        assert_eq!(rewritten["Labels"]["annotation.koord"], json!("yes"));
        assert_eq!(rewritten["Labels"][SANDBOX_ID_LABEL], json!("sb1"));
        assert_eq!(rewritten["Image"], json!("busybox"));
        assert_eq!(
            context.container_envs.get("NEW").map(String::as_str),
            Some("x")
        );
        assert_eq!(context.pod_cgroup_parent, "/kubepods/besteffort/pod1");
        assert_eq!(context.container_resources.unwrap().cpu_shares, 2);
    }

    #[test]
    fn a_body_without_host_config_or_labels_gets_them() {
        let mut body =
            CreateBody::parse(br#"{"Image":"x","HostConfig":null,"Labels":null,"Env":null}"#)
                .unwrap();
        let meta = kube_meta(&pairs(&[]), "k8s_c_p_ns_u_0").unwrap();
        let mut context = container_hook_request(&meta, &body, None, CgroupDriver::Cgroupfs);
        let answer = hook::ContainerResourceHookResponse {
            container_annotations: pairs(&[("a", "b")]),
            pod_cgroup_parent: "/p".into(),
            container_envs: pairs(&[("E", "1")]),
            ..Default::default()
        };
        apply_create_answer(&mut body, &mut context, &answer, CgroupDriver::Cgroupfs);
        let rewritten = parse_object(&body.to_bytes()).unwrap();
        assert_eq!(rewritten["HostConfig"], json!({"CgroupParent": "/p"}));
        assert_eq!(rewritten["Labels"], json!({"annotation.a": "b"}));
        assert_eq!(rewritten["Env"], json!(["E=1"]));
    }

    #[test]
    fn malformed_bodies_are_reported_not_guessed() {
        let cases: &[(&[u8], BodyError)] = &[
            (b"{not json", BodyError::NotJson(String::new())),
            (b"[1,2]", BodyError::NotObject),
            (
                br#"{"HostConfig": 3}"#,
                BodyError::Field {
                    field: "HostConfig",
                    problem: "is not an object",
                },
            ),
            (
                br#"{"HostConfig": {"CpuShares": "512"}}"#,
                BodyError::Field {
                    field: "CpuShares",
                    problem: "is not an integer",
                },
            ),
            (
                br#"{"HostConfig": {"Memory": 1.5}}"#,
                BodyError::Field {
                    field: "Memory",
                    problem: "is not an integer",
                },
            ),
            (
                br#"{"HostConfig": {"CgroupParent": 1}}"#,
                BodyError::Field {
                    field: "CgroupParent",
                    problem: "is not a string",
                },
            ),
            (
                br#"{"Labels": ["a"]}"#,
                BodyError::Field {
                    field: "Labels",
                    problem: "is not an object",
                },
            ),
            (
                br#"{"Labels": {"a": 1}}"#,
                BodyError::Field {
                    field: "Labels",
                    problem: "has a value that is not a string",
                },
            ),
            (
                br#"{"Env": "A=1"}"#,
                BodyError::Field {
                    field: "Env",
                    problem: "is not an array",
                },
            ),
            (
                br#"{"Env": [1]}"#,
                BodyError::Field {
                    field: "Env",
                    problem: "has an entry that is not a string",
                },
            ),
        ];
        for (input, expected) in cases {
            let error = CreateBody::parse(input).unwrap_err();
            match (expected, &error) {
                (BodyError::NotJson(_), BodyError::NotJson(_)) => {}
                _ => assert_eq!(&error, expected, "{}", String::from_utf8_lossy(input)),
            }
        }
        assert_eq!(
            UpdateBody::parse(b"")
                .unwrap_err()
                .to_string()
                .split(':')
                .next(),
            Some("body is not JSON")
        );
        assert!(matches!(
            UpdateBody::parse(br#"{"CpuQuota": "x"}"#),
            Err(BodyError::Field {
                field: "CpuQuota",
                ..
            })
        ));
    }

    fn stored_container() -> hook::ContainerResourceHookRequest {
        hook::ContainerResourceHookRequest {
            container_resources: Some(hook::LinuxContainerResources {
                cpu_period: 10000,
                cpu_quota: 10000,
                cpu_shares: 1000,
                oom_score_adj: -998,
                cpuset_cpus: "0-63".into(),
                memory_swap_limit_in_bytes: 1000,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn upstream_update_merge_cases() {
        // "normal case": every field of the update replaces the stored one.
        let mut context = hook::ContainerResourceHookRequest {
            container_resources: Some(hook::LinuxContainerResources {
                cpu_period: 20,
                cpu_quota: 30,
                cpu_shares: 10,
                memory_limit_in_bytes: 40,
                oom_score_adj: -998,
                memory_swap_limit_in_bytes: 50,
                ..Default::default()
            }),
            ..Default::default()
        };
        let body = UpdateBody::parse(
            br#"{"CpuShares":100,"CpuPeriod":200,"CpuQuota":300,"CpusetCpus":"0-64","CpusetMems":"0-2","Memory":400,"MemorySwap":500}"#,
        )
        .unwrap();
        update_context(&mut context, &body);
        let merged = context.container_resources.unwrap();
        assert_eq!(
            (
                merged.cpu_period,
                merged.cpu_quota,
                merged.cpu_shares,
                merged.memory_limit_in_bytes
            ),
            (200, 300, 100, 400)
        );
        assert_eq!(
            (merged.cpuset_cpus.as_str(), merged.cpuset_mems.as_str()),
            ("0-64", "0-2")
        );
        assert_eq!(
            (merged.oom_score_adj, merged.memory_swap_limit_in_bytes),
            (-998, 500)
        );

        // "only a cpuset": the rest is kept.
        let mut context = stored_container();
        update_context(
            &mut context,
            &UpdateBody::parse(br#"{"CpusetCpus":"0-31"}"#).unwrap(),
        );
        let mut expected = stored_container().container_resources.unwrap();
        expected.cpuset_cpus = "0-31".into();
        assert_eq!(context.container_resources.unwrap(), expected);
    }

    #[test]
    fn update_answers_write_only_what_the_hook_changed() {
        let cases: Vec<(
            &str,
            Option<hook::LinuxContainerResources>,
            serde_json::Value,
        )> = vec![
            (
                "no resources in the answer",
                None,
                json!({"CpuShares": 700, "RestartPolicy": {"Name": "no"}}),
            ),
            (
                "the hook's values, stored values untouched by it not added",
                Some(hook::LinuxContainerResources {
                    cpu_shares: 2,
                    cpuset_cpus: "2-3".into(),
                    ..Default::default()
                }),
                json!({"CpuShares": 2, "CpusetCpus": "2-3", "RestartPolicy": {"Name": "no"}}),
            ),
            (
                "OomScoreAdj cannot be updated in Docker",
                Some(hook::LinuxContainerResources {
                    oom_score_adj: 100,
                    memory_limit_in_bytes: 4096,
                    ..Default::default()
                }),
                json!({"CpuShares": 700, "Memory": 4096, "RestartPolicy": {"Name": "no"}}),
            ),
        ];
        for (case, resources, expected) in cases {
            let mut body =
                UpdateBody::parse(br#"{"CpuShares":700,"RestartPolicy":{"Name":"no"}}"#).unwrap();
            let mut context = stored_container();
            update_context(&mut context, &body);
            let answer = hook::ContainerResourceHookResponse {
                container_resources: resources,
                ..Default::default()
            };
            apply_update_answer(&mut body, &mut context, &answer);
            assert_eq!(
                serde_json::Value::Object(body.into_map()),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn inspected_containers_are_described_for_the_store() {
        let sandbox = json!({
            "Id": "sb1",
            "Name": "/k8s_POD_web_default_uid-1_0",
            "Config": {"Labels": {
                CONTAINER_TYPE_LABEL: CONTAINER_TYPE_SANDBOX,
                POD_NAME_LABEL: "web", POD_NAMESPACE_LABEL: "default", POD_UID_LABEL: "uid-1",
                "annotation.a": "b", "app": "web",
            }},
            "HostConfig": {"CgroupParent": "kubepods-besteffort-poduid.slice"},
        });
        match describe(&sandbox, CgroupDriver::Systemd).unwrap() {
            Described::Sandbox {
                sandbox,
                cgroup_parent,
            } => {
                assert_eq!(sandbox.id, "sb1");
                assert_eq!(sandbox.metadata.unwrap().name, "web");
                assert_eq!(sandbox.annotations, pairs(&[("a", "b")]));
                assert_eq!(sandbox.labels.get("app").map(String::as_str), Some("web"));
                assert_eq!(
                    cgroup_parent,
                    "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poduid.slice"
                );
            }
            other => panic!("{other:?}"),
        }
        let container = json!({
            "Id": "c1",
            "Name": "/k8s_app_web_default_uid-1_1",
            "Config": {"Labels": {SANDBOX_ID_LABEL: "sb1", CONTAINER_TYPE_LABEL: CONTAINER_TYPE_CONTAINER}},
            "HostConfig": {"CpuShares": 2, "CpuQuota": -1},
        });
        match describe(&container, CgroupDriver::Cgroupfs).unwrap() {
            Described::Container {
                container,
                resources,
            } => {
                assert_eq!(
                    (container.id.as_str(), container.pod_sandbox_id.as_str()),
                    ("c1", "sb1")
                );
                let meta = container.metadata.unwrap();
                assert_eq!((meta.name.as_str(), meta.attempt), ("app", 1));
                assert_eq!((resources.cpu_shares, resources.cpu_quota), (2, -1));
            }
            other => panic!("{other:?}"),
        }
        let plain = json!({"Id": "x", "Name": "/web", "Config": {"Labels": {}}, "HostConfig": {}});
        assert_eq!(
            describe(&plain, CgroupDriver::Cgroupfs).unwrap(),
            Described::Other
        );
        assert_eq!(
            describe(&json!([]), CgroupDriver::Cgroupfs).unwrap_err(),
            BodyError::NotObject
        );
    }

    #[test]
    fn engine_answers_and_errors() {
        assert_eq!(
            created_id(br#"{"Id":"abc","Warnings":[]}"#).as_deref(),
            Some("abc")
        );
        assert_eq!(created_id(br#"{"Warnings":[]}"#), None);
        assert_eq!(created_id(b"nope"), None);
        assert_eq!(error_body("a \"b\""), br#"{"message":"a \"b\""}"#.to_vec());
    }
}
