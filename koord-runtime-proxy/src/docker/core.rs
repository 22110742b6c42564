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
        sandbox: cri::PodSandbox,
        cgroup_parent: String,
    },
    Container {
        container: cri::Container,
        resources: cri::LinuxContainerResources,
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
            sandbox: cri::PodSandbox {
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
            },
            cgroup_parent: parent,
        },
        Kind::Container => Described::Container {
            container: cri::Container {
                id,
                pod_sandbox_id: meta.sandbox_id.unwrap_or_default(),
                metadata: Some(cri::ContainerMetadata {
                    name: meta.container_name,
                    attempt: meta.attempt,
                }),
                labels: plain,
                annotations,
                ..Default::default()
            },
            resources: to_cri_resources(&resources_of(&host)?),
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
