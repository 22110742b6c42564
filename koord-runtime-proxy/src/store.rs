//! Pod and container context for CRI calls that carry only an id, rebuilt
//! from the runtime at start so a proxy restart loses nothing.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use apis::runtime::v1alpha1 as hook;

use crate::cri::v1 as cri;
use crate::merge::to_hook_resources;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerEntry {
    pub pod_id: String,
    pub request: hook::ContainerResourceHookRequest,
}

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<String, hook::PodSandboxHookRequest>,
    containers: HashMap<String, ContainerEntry>,
}

/// Shared metadata store.
#[derive(Debug, Clone, Default)]
pub struct MetaStore {
    inner: Arc<RwLock<Inner>>,
}

impl MetaStore {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    pub fn put_pod(&self, id: &str, pod: hook::PodSandboxHookRequest) {
        self.write().pods.insert(id.to_string(), pod);
    }

    pub fn pod(&self, id: &str) -> Option<hook::PodSandboxHookRequest> {
        self.read().pods.get(id).cloned()
    }

    /// Forgets a pod and its containers.
    pub fn remove_pod(&self, id: &str) {
        let mut inner = self.write();
        inner.pods.remove(id);
        inner.containers.retain(|_, entry| entry.pod_id != id);
    }

    pub fn put_container(&self, id: &str, entry: ContainerEntry) {
        self.write().containers.insert(id.to_string(), entry);
    }

    pub fn container(&self, id: &str) -> Option<ContainerEntry> {
        self.read().containers.get(id).cloned()
    }

    pub fn remove_container(&self, id: &str) {
        self.write().containers.remove(id);
    }

    pub fn counts(&self) -> (usize, usize) {
        let inner = self.read();
        (inner.pods.len(), inner.containers.len())
    }

    /// Replaces the content with what the runtime reports.
    pub fn rebuild(&self, snapshot: RuntimeSnapshot) {
        let mut pods = HashMap::new();
        for (sandbox, cgroup_parent) in &snapshot.sandboxes {
            pods.insert(sandbox.id.clone(), pod_from_sandbox(sandbox, cgroup_parent));
        }
        let mut containers = HashMap::new();
        for (container, resources) in &snapshot.containers {
            let Some(pod) = pods.get(&container.pod_sandbox_id) else {
                tracing::debug!(container = %container.id, "container of an unknown sandbox");
                continue;
            };
            containers.insert(
                container.id.clone(),
                ContainerEntry {
                    pod_id: container.pod_sandbox_id.clone(),
                    request: container_from_runtime(container, resources.as_ref(), pod),
                },
            );
        }
        let mut inner = self.write();
        inner.pods = pods;
        inner.containers = containers;
    }
}

/// What the runtime knows: sandboxes with their cgroup parent (from the
/// verbose status, empty when unknown), containers with their resources.
#[derive(Debug, Clone, Default)]
pub struct RuntimeSnapshot {
    pub sandboxes: Vec<(cri::PodSandbox, String)>,
    pub containers: Vec<(cri::Container, Option<cri::LinuxContainerResources>)>,
}

pub fn pod_from_sandbox(
    sandbox: &cri::PodSandbox,
    cgroup_parent: &str,
) -> hook::PodSandboxHookRequest {
    let meta = sandbox.metadata.clone().unwrap_or_default();
    hook::PodSandboxHookRequest {
        pod_meta: Some(hook::PodSandboxMetadata {
            name: meta.name,
            uid: meta.uid,
            namespace: meta.namespace,
            attempt: meta.attempt,
        }),
        runtime_handler: sandbox.runtime_handler.clone(),
        labels: sandbox.labels.clone(),
        annotations: sandbox.annotations.clone(),
        cgroup_parent: cgroup_parent.to_string(),
        overhead: None,
        resources: None,
    }
}

pub fn container_from_runtime(
    container: &cri::Container,
    resources: Option<&cri::LinuxContainerResources>,
    pod: &hook::PodSandboxHookRequest,
) -> hook::ContainerResourceHookRequest {
    let meta = container.metadata.clone().unwrap_or_default();
    hook::ContainerResourceHookRequest {
        pod_meta: pod.pod_meta.clone(),
        container_meta: Some(hook::ContainerMetadata {
            name: meta.name,
            attempt: meta.attempt,
            id: container.id.clone(),
        }),
        container_annotations: container.annotations.clone(),
        container_resources: resources.map(to_hook_resources),
        pod_resources: pod.resources.clone(),
        pod_annotations: pod.annotations.clone(),
        pod_labels: pod.labels.clone(),
        pod_cgroup_parent: pod.cgroup_parent.clone(),
        container_envs: Default::default(),
    }
}

/// The cgroup parent in containerd's verbose sandbox status (`info` JSON,
/// `config.linux.cgroup_parent`); empty when absent or unreadable.
pub fn cgroup_parent_from_info(info: &std::collections::BTreeMap<String, String>) -> String {
    info.get("info")
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .and_then(|value| {
            value
                .pointer("/config/linux/cgroup_parent")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default()
}
