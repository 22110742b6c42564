//! Conversions between CRI v1 and hook messages, and the merge of a
//! pre-hook's answer into the CRI request.

use std::collections::BTreeMap;

use apis::runtime::v1alpha1 as hook;

use crate::cri::v1 as cri;

pub fn to_hook_resources(r: &cri::LinuxContainerResources) -> hook::LinuxContainerResources {
    hook::LinuxContainerResources {
        cpu_period: r.cpu_period,
        cpu_quota: r.cpu_quota,
        cpu_shares: r.cpu_shares,
        memory_limit_in_bytes: r.memory_limit_in_bytes,
        oom_score_adj: r.oom_score_adj,
        cpuset_cpus: r.cpuset_cpus.clone(),
        cpuset_mems: r.cpuset_mems.clone(),
        hugepage_limits: r
            .hugepage_limits
            .iter()
            .map(|h| hook::HugepageLimit {
                page_size: h.page_size.clone(),
                limit: h.limit,
            })
            .collect(),
        unified: r.unified.clone(),
        memory_swap_limit_in_bytes: r.memory_swap_limit_in_bytes,
    }
}

/// Writes the hook's resources into the CRI ones, keeping CRI-only fields.
pub fn apply_hook_resources(
    target: &mut cri::LinuxContainerResources,
    r: &hook::LinuxContainerResources,
) {
    target.cpu_period = r.cpu_period;
    target.cpu_quota = r.cpu_quota;
    target.cpu_shares = r.cpu_shares;
    target.memory_limit_in_bytes = r.memory_limit_in_bytes;
    target.oom_score_adj = r.oom_score_adj;
    target.cpuset_cpus = r.cpuset_cpus.clone();
    target.cpuset_mems = r.cpuset_mems.clone();
    target.hugepage_limits = r
        .hugepage_limits
        .iter()
        .map(|h| cri::HugepageLimit {
            page_size: h.page_size.clone(),
            limit: h.limit,
        })
        .collect();
    target.unified = r.unified.clone();
    target.memory_swap_limit_in_bytes = r.memory_swap_limit_in_bytes;
}

/// Overlays a hook's resource answer on `base` (upstream's rules: zero or
/// out-of-range values keep the base; a quota of -1 is a real value).
pub fn overlay_resources(
    base: &hook::LinuxContainerResources,
    answer: &hook::LinuxContainerResources,
) -> hook::LinuxContainerResources {
    let mut merged = base.clone();
    if answer.cpu_period > 0 {
        merged.cpu_period = answer.cpu_period;
    }
    if answer.cpu_quota != 0 {
        merged.cpu_quota = answer.cpu_quota;
    }
    if answer.cpu_shares > 0 {
        merged.cpu_shares = answer.cpu_shares;
    }
    if answer.memory_limit_in_bytes > 0 {
        merged.memory_limit_in_bytes = answer.memory_limit_in_bytes;
    }
    if (-1000..=1000).contains(&answer.oom_score_adj) && answer.oom_score_adj != 0 {
        merged.oom_score_adj = answer.oom_score_adj;
    }
    if !answer.cpuset_cpus.is_empty() {
        merged.cpuset_cpus = answer.cpuset_cpus.clone();
    }
    if !answer.cpuset_mems.is_empty() {
        merged.cpuset_mems = answer.cpuset_mems.clone();
    }
    for (key, value) in &answer.unified {
        merged.unified.insert(key.clone(), value.clone());
    }
    if answer.memory_swap_limit_in_bytes > 0 {
        merged.memory_swap_limit_in_bytes = answer.memory_swap_limit_in_bytes;
    }
    merged
}

fn merge_map(target: &mut BTreeMap<String, String>, answer: &BTreeMap<String, String>) {
    for (key, value) in answer {
        target.insert(key.clone(), value.clone());
    }
}

pub fn envs_to_map(envs: &[cri::KeyValue]) -> BTreeMap<String, String> {
    envs.iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

/// Sets the hook's env values: existing keys keep their place, new ones are appended.
fn merge_envs(envs: &mut Vec<cri::KeyValue>, answer: &BTreeMap<String, String>) {
    for (key, value) in answer {
        match envs.iter_mut().find(|kv| &kv.key == key) {
            Some(kv) => kv.value = value.clone(),
            None => envs.push(cri::KeyValue {
                key: key.clone(),
                value: value.clone(),
            }),
        }
    }
}

/// The pod context the hooks get, from a RunPodSandbox request.
pub fn pod_hook_request(request: &cri::RunPodSandboxRequest) -> hook::PodSandboxHookRequest {
    let config = request.config.clone().unwrap_or_default();
    let metadata = config.metadata.clone().unwrap_or_default();
    let linux = config.linux.clone().unwrap_or_default();
    hook::PodSandboxHookRequest {
        pod_meta: Some(hook::PodSandboxMetadata {
            name: metadata.name,
            uid: metadata.uid,
            namespace: metadata.namespace,
            attempt: metadata.attempt,
        }),
        runtime_handler: request.runtime_handler.clone(),
        labels: config.labels,
        annotations: config.annotations,
        cgroup_parent: linux.cgroup_parent,
        overhead: linux.overhead.as_ref().map(to_hook_resources),
        resources: linux.resources.as_ref().map(to_hook_resources),
    }
}

/// Merges a PreRunPodSandbox answer into the request and the stored pod context.
pub fn merge_pod_answer(
    request: &mut cri::RunPodSandboxRequest,
    context: &mut hook::PodSandboxHookRequest,
    answer: &hook::PodSandboxHookResponse,
) {
    merge_map(&mut context.labels, &answer.labels);
    merge_map(&mut context.annotations, &answer.annotations);
    if !answer.cgroup_parent.is_empty() {
        context.cgroup_parent = answer.cgroup_parent.clone();
    }
    if let Some(resources) = &answer.resources {
        let base = context.resources.clone().unwrap_or_default();
        context.resources = Some(overlay_resources(&base, resources));
    }
    let config = request.config.get_or_insert_with(Default::default);
    merge_map(&mut config.labels, &answer.labels);
    merge_map(&mut config.annotations, &answer.annotations);
    if !answer.cgroup_parent.is_empty() {
        config
            .linux
            .get_or_insert_with(Default::default)
            .cgroup_parent = answer.cgroup_parent.clone();
    }
    if let (Some(resources), Some(linux)) = (&context.resources, config.linux.as_mut())
        && linux.resources.is_some()
    {
        apply_hook_resources(
            linux.resources.get_or_insert_with(Default::default),
            resources,
        );
    }
}

/// The container context the hooks get, from a CreateContainer request and its pod.
pub fn container_hook_request(
    request: &cri::CreateContainerRequest,
    pod: Option<&hook::PodSandboxHookRequest>,
) -> hook::ContainerResourceHookRequest {
    let config = request.config.clone().unwrap_or_default();
    let metadata = config.metadata.clone().unwrap_or_default();
    let sandbox_linux = request
        .sandbox_config
        .as_ref()
        .and_then(|c| c.linux.clone())
        .unwrap_or_default();
    let (pod_meta, pod_labels, pod_annotations, pod_resources) = match pod {
        Some(pod) => (
            pod.pod_meta.clone(),
            pod.labels.clone(),
            pod.annotations.clone(),
            pod.resources.clone(),
        ),
        // Without stored context the sandbox config in the request still tells a lot.
        None => {
            let sandbox = request.sandbox_config.clone().unwrap_or_default();
            let meta = sandbox.metadata.unwrap_or_default();
            (
                Some(hook::PodSandboxMetadata {
                    name: meta.name,
                    uid: meta.uid,
                    namespace: meta.namespace,
                    attempt: meta.attempt,
                }),
                sandbox.labels,
                sandbox.annotations,
                None,
            )
        }
    };
    hook::ContainerResourceHookRequest {
        pod_meta,
        container_meta: Some(hook::ContainerMetadata {
            name: metadata.name,
            attempt: metadata.attempt,
            id: String::new(),
        }),
        container_annotations: config.annotations.clone(),
        container_resources: Some(
            config
                .linux
                .as_ref()
                .and_then(|l| l.resources.as_ref())
                .map(to_hook_resources)
                .unwrap_or_default(),
        ),
        pod_resources,
        pod_annotations,
        pod_labels,
        pod_cgroup_parent: sandbox_linux.cgroup_parent,
        container_envs: envs_to_map(&config.envs),
    }
}

fn merge_container_context(
    context: &mut hook::ContainerResourceHookRequest,
    answer: &hook::ContainerResourceHookResponse,
) {
    merge_map(
        &mut context.container_annotations,
        &answer.container_annotations,
    );
    if let Some(resources) = &answer.container_resources {
        let base = context.container_resources.clone().unwrap_or_default();
        context.container_resources = Some(overlay_resources(&base, resources));
    }
    if !answer.pod_cgroup_parent.is_empty() {
        context.pod_cgroup_parent = answer.pod_cgroup_parent.clone();
    }
    merge_map(&mut context.container_envs, &answer.container_envs);
}

/// Merges a PreCreateContainer answer into the request and the container context.
pub fn merge_create_answer(
    request: &mut cri::CreateContainerRequest,
    context: &mut hook::ContainerResourceHookRequest,
    answer: &hook::ContainerResourceHookResponse,
) {
    merge_container_context(context, answer);
    let config = request.config.get_or_insert_with(Default::default);
    merge_map(&mut config.annotations, &answer.container_annotations);
    if let Some(resources) = &context.container_resources
        && answer.container_resources.is_some()
    {
        let linux = config.linux.get_or_insert_with(Default::default);
        apply_hook_resources(
            linux.resources.get_or_insert_with(Default::default),
            resources,
        );
    }
    merge_envs(&mut config.envs, &answer.container_envs);
    if !answer.pod_cgroup_parent.is_empty() {
        request
            .sandbox_config
            .get_or_insert_with(Default::default)
            .linux
            .get_or_insert_with(Default::default)
            .cgroup_parent = answer.pod_cgroup_parent.clone();
    }
}

/// Overlays an UpdateContainerResources request's values on the stored
/// container resources (empty and zero fields keep what is stored).
pub fn update_context_from_request(
    context: &mut hook::ContainerResourceHookRequest,
    request: &cri::UpdateContainerResourcesRequest,
) {
    if let Some(linux) = &request.linux {
        let base = context.container_resources.clone().unwrap_or_default();
        context.container_resources = Some(overlay_resources(&base, &to_hook_resources(linux)));
    }
    merge_map(&mut context.container_annotations, &request.annotations);
}

/// Merges a PreUpdateContainerResources answer into the request.
pub fn merge_update_answer(
    request: &mut cri::UpdateContainerResourcesRequest,
    context: &mut hook::ContainerResourceHookRequest,
    answer: &hook::ContainerResourceHookResponse,
) {
    merge_container_context(context, answer);
    merge_map(&mut request.annotations, &answer.container_annotations);
    if let Some(resources) = &context.container_resources
        && answer.container_resources.is_some()
    {
        apply_hook_resources(
            request.linux.get_or_insert_with(Default::default),
            resources,
        );
    }
}
