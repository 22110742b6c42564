//! Pod and container context for CRI calls that carry only an id, rebuilt
//! from the runtime at start so a proxy restart loses nothing.
//!
//! Entries come from two sources. *Live* entries are recorded by intercepted
//! calls (RunPodSandbox, CreateContainer, UpdateContainerResources) and by
//! runtime lookups for ids the store missed. *Listed* entries come from a
//! listing of the runtime ([`MetaStore::merge_listing`]). A listing may be
//! answered long after the proxy started serving, so it is merged, never
//! swapped in:
//!
//! - a live entry always wins over a listed one for the same id (it carries
//!   the kubelet's request and the hooks' answers, a listing does not);
//! - a live entry the listing lacks is kept (it may be newer than the listing);
//! - a listed entry from an older listing that the new listing lacks is
//!   dropped (the runtime no longer has it);
//! - an id removed by a live call while the listing was in flight is not
//!   brought back by it ([`MetaStore::begin_listing`] starts that tracking).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use apis::runtime::v1alpha1 as hook;
use koord_common::sync::RwLockExt;

use crate::cri::v1 as cri;
use crate::merge::to_hook_resources;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerEntry {
    pub pod_id: String,
    pub request: hook::ContainerResourceHookRequest,
}

/// Where an entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Recorded by an intercepted call or a lookup while serving.
    Live,
    /// From a listing of the runtime.
    Listed,
}

#[derive(Debug, Default)]
struct Removed {
    pods: HashSet<String>,
    containers: HashSet<String>,
}

#[derive(Debug, Default)]
struct Inner {
    pods: HashMap<String, (hook::PodSandboxHookRequest, Origin)>,
    containers: HashMap<String, (ContainerEntry, Origin)>,
    /// Ids removed since the listing in flight began; `None` when none is.
    removed_during_listing: Option<Removed>,
}

/// What a merge did, for the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Listed entries added or refreshed (pods, containers).
    pub listed: (usize, usize),
    /// Listed ids whose live entry was kept instead.
    pub live_kept: (usize, usize),
    /// Entries of an older listing the runtime no longer reports.
    pub dropped: (usize, usize),
    /// Listed ids skipped because a live call removed them meanwhile.
    pub removed_meanwhile: (usize, usize),
}

/// Shared metadata store.
#[derive(Debug, Clone, Default)]
pub struct MetaStore {
    inner: Arc<RwLock<Inner>>,
}

impl MetaStore {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read_or_recover()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write_or_recover()
    }

    /// Records a pod from a live call.
    pub fn put_pod(&self, id: &str, pod: hook::PodSandboxHookRequest) {
        let mut inner = self.write();
        if let Some(removed) = inner.removed_during_listing.as_mut() {
            removed.pods.remove(id);
        }
        inner.pods.insert(id.to_string(), (pod, Origin::Live));
    }

    pub fn pod(&self, id: &str) -> Option<hook::PodSandboxHookRequest> {
        self.read().pods.get(id).map(|(pod, _)| pod.clone())
    }

    pub fn pod_origin(&self, id: &str) -> Option<Origin> {
        self.read().pods.get(id).map(|(_, origin)| *origin)
    }

    /// Forgets a pod and its containers.
    pub fn remove_pod(&self, id: &str) {
        let mut inner = self.write();
        let inner = &mut *inner;
        inner.pods.remove(id);
        let mut gone = Vec::new();
        inner.containers.retain(|container, (entry, _)| {
            let keep = entry.pod_id != id;
            if !keep {
                gone.push(container.clone());
            }
            keep
        });
        if let Some(removed) = inner.removed_during_listing.as_mut() {
            removed.pods.insert(id.to_string());
            removed.containers.extend(gone);
        }
    }

    /// Records a container from a live call.
    pub fn put_container(&self, id: &str, entry: ContainerEntry) {
        let mut inner = self.write();
        if let Some(removed) = inner.removed_during_listing.as_mut() {
            removed.containers.remove(id);
        }
        inner
            .containers
            .insert(id.to_string(), (entry, Origin::Live));
    }

    pub fn container(&self, id: &str) -> Option<ContainerEntry> {
        self.read()
            .containers
            .get(id)
            .map(|(entry, _)| entry.clone())
    }

    pub fn container_origin(&self, id: &str) -> Option<Origin> {
        self.read().containers.get(id).map(|(_, origin)| *origin)
    }

    pub fn remove_container(&self, id: &str) {
        let mut inner = self.write();
        inner.containers.remove(id);
        if let Some(removed) = inner.removed_during_listing.as_mut() {
            removed.containers.insert(id.to_string());
        }
    }

    pub fn counts(&self) -> (usize, usize) {
        let inner = self.read();
        (inner.pods.len(), inner.containers.len())
    }

    /// Call just before asking the runtime for a listing: from now until
    /// [`MetaStore::merge_listing`], live removals are remembered so the
    /// listing cannot bring them back.
    pub fn begin_listing(&self) {
        self.write().removed_during_listing = Some(Removed::default());
    }

    /// Merges a listing of the runtime into the store (rules in the module
    /// documentation). Without [`MetaStore::begin_listing`] before it, no
    /// live removal is known and every listed id is taken.
    pub fn merge_listing(&self, snapshot: RuntimeSnapshot) -> MergeStats {
        let mut stats = MergeStats::default();
        let mut inner = self.write();
        let inner = &mut *inner;
        let removed = inner.removed_during_listing.take().unwrap_or_default();
        let listed_pods: HashSet<&str> = snapshot
            .sandboxes
            .iter()
            .map(|(s, _)| s.id.as_str())
            .collect();
        let listed_containers: HashSet<&str> = snapshot
            .containers
            .iter()
            .map(|(c, _)| c.id.as_str())
            .collect();

        inner.pods.retain(|id, (_, origin)| {
            let keep = *origin == Origin::Live || listed_pods.contains(id.as_str());
            if !keep {
                stats.dropped.0 += 1;
            }
            keep
        });
        inner.containers.retain(|id, (_, origin)| {
            let keep = *origin == Origin::Live || listed_containers.contains(id.as_str());
            if !keep {
                stats.dropped.1 += 1;
            }
            keep
        });

        for (sandbox, cgroup_parent) in &snapshot.sandboxes {
            if removed.pods.contains(&sandbox.id) {
                stats.removed_meanwhile.0 += 1;
                continue;
            }
            match inner.pods.get(&sandbox.id) {
                Some((_, Origin::Live)) => stats.live_kept.0 += 1,
                _ => {
                    let pod = pod_from_sandbox(sandbox, cgroup_parent);
                    inner.pods.insert(sandbox.id.clone(), (pod, Origin::Listed));
                    stats.listed.0 += 1;
                }
            }
        }
        for (container, resources) in &snapshot.containers {
            if removed.containers.contains(&container.id) {
                stats.removed_meanwhile.1 += 1;
                continue;
            }
            if let Some((_, Origin::Live)) = inner.containers.get(&container.id) {
                stats.live_kept.1 += 1;
                continue;
            }
            // The pod context comes from the merged store, so a live pod's
            // richer context (resources, hook answers) is used when present.
            let Some((pod, _)) = inner.pods.get(&container.pod_sandbox_id) else {
                tracing::debug!(container = %container.id, "container of an unknown sandbox");
                inner.containers.remove(&container.id);
                continue;
            };
            let entry = ContainerEntry {
                pod_id: container.pod_sandbox_id.clone(),
                request: container_from_runtime(container, resources.as_ref(), pod),
            };
            inner
                .containers
                .insert(container.id.clone(), (entry, Origin::Listed));
            stats.listed.1 += 1;
        }
        stats
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
