//! The Plugin service: NRI events become hook contexts, the hooks'
//! [`Adjustment`] becomes an NRI `ContainerAdjustment` / `ContainerUpdate`.
//!
//! Stages per event (as upstream): RunPodSandbox → `PreRunPodSandbox`,
//! CreateContainer → `PreCreateContainer`, UpdateContainer →
//! `PreUpdateContainerResources`, RemovePodSandbox → `PreRemoveRunPodSandbox`.
//! Unlike upstream, Synchronize is not a no-op: existing pods get their
//! `PreRunPodSandbox` decision and existing containers their
//! `PreUpdateContainerResources` decision, returned as container updates, so
//! containers created while koordlet was away are corrected on (re)connect.
//!
//! The resources of an existing container (Synchronize, or UpdateContainer
//! without new resources) are the runtime's current values, which koordlet
//! may already have changed (CPUNormalization's scaled quota). Hooks must not
//! transform them again, so such a context starts from the pod spec's values
//! (states informer, as the reconciler does) and, for a pod the informer
//! does not know, without a CFS quota: every Synchronize then decides the
//! same values, however often the runtime reconnects.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use prost::Message as _;

use super::connection::{PluginService, RpcError, code};
use super::proto::api;
use super::status::NriStatus;
use crate::bounds::Bounded;
use crate::runtimehooks::apply::{EffectStatus, SideEffectApplier};
use crate::runtimehooks::dispatcher::HookDispatcher;
use crate::runtimehooks::protocol::{
    Adjustment, ContainerContext, ContainerMeta, HookRequest, HookStage, LinuxResources,
    PodContext, PodMeta, SideEffect,
};
use crate::runtimehooks::reconciler::pod_container_spec_resources;
use crate::statesinformer::StatesInformer;

/// Events koordlet subscribes to unless the runtime's plugin config says otherwise.
pub const DEFAULT_EVENTS: [api::Event; 4] = [
    api::Event::RunPodSandbox,
    api::Event::RemovePodSandbox,
    api::Event::CreateContainer,
    api::Event::UpdateContainer,
];

/// The bit of `event` in a Configure event mask.
pub fn event_bit(event: api::Event) -> i32 {
    let value = event as i32;
    if value <= 0 { 0 } else { 1 << (value - 1) }
}

pub fn event_mask(events: &[api::Event]) -> i32 {
    events
        .iter()
        .fold(0, |mask, event| mask | event_bit(*event))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginConfigError {
    #[error("NRI plugin config is not valid YAML/JSON: {0}")]
    Syntax(String),
    #[error("NRI plugin config names unknown event {0:?}")]
    UnknownEvent(String),
}

/// Parses the optional plugin config the runtime passes in Configure
/// (`events: [RunPodSandbox, CreateContainer, ...]`, as upstream); `None`
/// when the config is empty or names no events.
pub fn parse_plugin_config(config: &str) -> Result<Option<i32>, PluginConfigError> {
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(default)]
        events: Vec<String>,
    }
    if config.trim().is_empty() {
        return Ok(None);
    }
    let parsed: Config = apis::yaml::from_str(config, &apis::yaml::Limits::CONFIG)
        .map_err(|err| PluginConfigError::Syntax(err.to_string()))?;
    if parsed.events.is_empty() {
        return Ok(None);
    }
    let mut mask = 0;
    for name in &parsed.events {
        let normalized: String = name
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect();
        if normalized == "all" {
            mask |= event_mask(&ALL_EVENTS);
            continue;
        }
        let event = ALL_EVENTS
            .into_iter()
            .find(|event| {
                event
                    .as_str_name()
                    .chars()
                    .filter(|c| *c != '_')
                    .flat_map(char::to_lowercase)
                    .eq(normalized.chars())
            })
            .ok_or_else(|| PluginConfigError::UnknownEvent(name.clone()))?;
        mask |= event_bit(event);
    }
    Ok(Some(mask))
}

const ALL_EVENTS: [api::Event; 11] = [
    api::Event::RunPodSandbox,
    api::Event::StopPodSandbox,
    api::Event::RemovePodSandbox,
    api::Event::CreateContainer,
    api::Event::PostCreateContainer,
    api::Event::StartContainer,
    api::Event::PostStartContainer,
    api::Event::UpdateContainer,
    api::Event::PostUpdateContainer,
    api::Event::StopContainer,
    api::Event::RemoveContainer,
];

// ---- conversions ----

fn resources_from_nri(resources: Option<&api::LinuxResources>) -> LinuxResources {
    let Some(resources) = resources else {
        return LinuxResources::default();
    };
    let cpu = resources.cpu.as_ref();
    let memory = resources.memory.as_ref();
    let non_empty = |text: &str| (!text.is_empty()).then(|| text.to_string());
    LinuxResources {
        cpu_shares: cpu
            .and_then(|cpu| cpu.shares.as_ref())
            .map(|v| i64::try_from(v.value).unwrap_or(i64::MAX)),
        cpu_quota: cpu.and_then(|cpu| cpu.quota.as_ref()).map(|v| v.value),
        cpu_period: cpu
            .and_then(|cpu| cpu.period.as_ref())
            .map(|v| i64::try_from(v.value).unwrap_or(i64::MAX)),
        cpuset_cpus: cpu.and_then(|cpu| non_empty(&cpu.cpus)),
        cpuset_mems: cpu.and_then(|cpu| non_empty(&cpu.mems)),
        memory_limit: memory.and_then(|m| m.limit.as_ref()).map(|v| v.value),
        oom_score_adj: None,
    }
}

/// The hooks' view of an NRI pod sandbox.
pub fn pod_context(pod: &api::PodSandbox) -> PodContext {
    let linux = pod.linux.as_ref();
    let mut context = PodContext {
        meta: PodMeta {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        },
        labels: pod.labels.clone(),
        annotations: pod.annotations.clone(),
        cgroup_parent: linux.map(|l| l.cgroup_parent.clone()).unwrap_or_default(),
        resources: resources_from_nri(linux.and_then(|l| l.pod_resources.as_ref())),
        extended_resources: None,
    };
    if let Some(error) = context.load_extended_resources_from_annotations() {
        tracing::debug!(pod = %context.meta, error = %Bounded(&error), "ignoring malformed extended-resource-spec");
    }
    context
}

/// The hooks' view of an NRI container of `pod`.
pub fn container_context(pod: &PodContext, container: &api::Container) -> ContainerContext {
    let linux = container.linux.as_ref();
    let env = container
        .env
        .iter()
        .filter_map(|entry| entry.split_once('='))
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    ContainerContext {
        pod: pod.clone(),
        container: ContainerMeta {
            name: container.name.clone(),
            id: container.id.clone(),
            attempt: 0,
            sandbox: false,
        },
        annotations: container.annotations.clone(),
        env,
        resources: resources_from_nri(linux.and_then(|l| l.resources.as_ref())),
        cgroup_dir: linux.and_then(|l| cgroupfs_dir(&l.cgroups_path)),
        pids: (container.pid != 0)
            .then_some(container.pid)
            .into_iter()
            .collect(),
    }
}

/// A cgroupfs-style cgroups path (`/kubepods/.../<id>`) relative to the
/// hierarchy root; `None` for systemd's `slice:prefix:name` form (the hooks
/// derive it from the pod) or anything escaping the root.
fn cgroupfs_dir(cgroups_path: &str) -> Option<PathBuf> {
    let text = cgroups_path.trim();
    if text.is_empty() || text.contains(':') {
        return None;
    }
    let mut dir = PathBuf::new();
    for part in text.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            return None;
        }
        dir.push(part);
    }
    (!dir.as_os_str().is_empty()).then_some(dir)
}

fn nri_resources(
    resources: &LinuxResources,
    rdt_class: Option<&str>,
) -> Option<api::LinuxResources> {
    let rdt_class = rdt_class.map(|value| api::OptionalString {
        value: value.to_string(),
    });
    if resources.is_empty() && rdt_class.is_none() {
        return None;
    }
    let mut cpu = api::LinuxCpu {
        shares: resources.cpu_shares.map(|v| api::OptionalUInt64 {
            value: v.max(0) as u64,
        }),
        quota: resources
            .cpu_quota
            .map(|value| api::OptionalInt64 { value }),
        period: resources.cpu_period.map(|v| api::OptionalUInt64 {
            value: v.max(0) as u64,
        }),
        ..Default::default()
    };
    if let Some(cpus) = &resources.cpuset_cpus {
        cpu.cpus.clone_from(cpus);
    }
    if let Some(mems) = &resources.cpuset_mems {
        cpu.mems.clone_from(mems);
    }
    let has_cpu = cpu != api::LinuxCpu::default();
    let memory = resources.memory_limit.map(|value| api::LinuxMemory {
        limit: Some(api::OptionalInt64 { value }),
        ..Default::default()
    });
    if !has_cpu && memory.is_none() && rdt_class.is_none() {
        return None;
    }
    Some(api::LinuxResources {
        cpu: has_cpu.then_some(cpu),
        memory,
        rdt_class,
        ..Default::default()
    })
}

/// The adjustment for a container being created.
pub fn container_adjustment(adjustment: &Adjustment) -> api::ContainerAdjustment {
    api::ContainerAdjustment {
        annotations: adjustment.annotations.clone(),
        env: adjustment
            .env
            .iter()
            .map(|(key, value)| api::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        linux: linux_adjustment(adjustment),
        ..Default::default()
    }
}

/// The Linux part of a creation adjustment: resources, RDT class and
/// device nodes; `None` when there is none of them.
fn linux_adjustment(adjustment: &Adjustment) -> Option<api::LinuxContainerAdjustment> {
    let resources = nri_resources(&adjustment.resources, adjustment.rdt_class.as_deref());
    if resources.is_none() && adjustment.devices.is_empty() {
        return None;
    }
    Some(api::LinuxContainerAdjustment {
        resources,
        devices: adjustment
            .devices
            .iter()
            .map(|device| api::LinuxDevice {
                path: device.path.clone(),
                r#type: device.kind.to_string(),
                major: device.major,
                minor: device.minor,
                file_mode: Some(api::OptionalFileMode {
                    value: device.file_mode,
                }),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })
}

/// The update of an existing container; `None` when nothing changes. The
/// RDT class is chosen at creation only (a running container keeps its).
pub fn container_update(
    container_id: &str,
    adjustment: &Adjustment,
) -> Option<api::ContainerUpdate> {
    let resources = nri_resources(&adjustment.resources, None)?;
    Some(api::ContainerUpdate {
        container_id: container_id.to_string(),
        linux: Some(api::LinuxContainerUpdate {
            resources: Some(resources),
        }),
        // One container we cannot update must not fail the whole batch.
        ignore_failure: true,
    })
}

// ---- the service ----

/// koordlet's NRI plugin: runs the hooks for each event.
pub struct NriPlugin {
    dispatcher: Arc<HookDispatcher>,
    applier: Option<SideEffectApplier>,
    status: NriStatus,
    events: AtomicI32,
    /// Pod specs: the baseline resources of existing containers.
    states: Option<StatesInformer>,
}

impl NriPlugin {
    /// `applier` performs the side effects (pod cgroup files etc.); without
    /// one they are only logged (tests, benchmarks).
    pub fn new(
        dispatcher: Arc<HookDispatcher>,
        applier: Option<SideEffectApplier>,
        status: NriStatus,
    ) -> Self {
        Self {
            dispatcher,
            applier,
            status,
            events: AtomicI32::new(event_mask(&DEFAULT_EVENTS)),
            states: None,
        }
    }

    /// Takes existing containers' baseline resources from the pod specs
    /// `states` knows (see the module doc); without it they have none.
    pub fn with_states(mut self, states: StatesInformer) -> Self {
        self.states = Some(states);
        self
    }

    pub fn status(&self) -> &NriStatus {
        &self.status
    }

    /// Replaces the runtime's current CPU/memory values of an existing
    /// container with those of its pod spec (unscaled, what the kubelet
    /// asked for). A container the states informer does not know keeps no
    /// CFS quota: the current one may already be a hook's result, and
    /// transforming it again would drift on every reconnect.
    fn use_spec_baseline(&self, context: &mut ContainerContext) {
        let uid = context.pod.meta.uid.as_str();
        let spec = self
            .states
            .as_ref()
            .filter(|_| !uid.is_empty())
            .and_then(StatesInformer::pods)
            .and_then(|snapshot| {
                let pod = snapshot.pod_by_uid(uid)?;
                pod_container_spec_resources(pod, &context.container.name)
            });
        match spec {
            Some(spec) => {
                context.resources.cpu_shares = spec.cpu_shares;
                context.resources.cpu_quota = spec.cpu_quota;
                context.resources.memory_limit = spec.memory_limit;
            }
            None => {
                tracing::debug!(pod = %context.pod.meta, container = %Bounded(&context.container.name), "pod spec unknown; existing container decided without its current CFS quota");
                context.resources.cpu_quota = None;
            }
        }
    }

    /// Drops an RDT class whose resctrl group does not exist: runc refuses
    /// to create a container in a missing class (without a schema), so the
    /// container starts in the default group and the reconciler moves it.
    fn check_rdt_class(&self, adjustment: &mut Adjustment, container: &str) {
        let (Some(applier), Some(group)) = (&self.applier, &adjustment.rdt_class) else {
            return;
        };
        if !applier.resctrl_group_exists(group) {
            tracing::warn!(container, group = %group, root = %applier.resctrl_root().display(), "resctrl group missing at container creation; the container starts in the default group and the reconciler moves its tasks");
            adjustment.rdt_class = None;
        }
    }

    fn apply_side_effects(&self, what: &str, effects: Vec<SideEffect>) {
        if effects.is_empty() {
            return;
        }
        let Some(applier) = &self.applier else {
            tracing::debug!(
                what,
                count = effects.len(),
                "no applier; side effects skipped"
            );
            return;
        };
        for report in applier.apply_blocking(&effects) {
            match report.status {
                EffectStatus::Applied | EffectStatus::Unchanged => {}
                // Container cgroups do not exist before the container starts; the reconciler writes them.
                EffectStatus::NotFound => {
                    tracing::debug!(what, effect = %report.effect.summary(), "side effect target not there yet")
                }
                EffectStatus::PermissionDenied { error, .. } | EffectStatus::Failed(error) => {
                    tracing::warn!(what, effect = %report.effect.summary(), error = %Bounded(&error), "side effect failed")
                }
            }
        }
    }

    /// Runs the hooks after checking the request's cgroups, also on the
    /// node (no symlink below kubepods, see `runtimehooks::scope`). NRI calls
    /// are served on the connection's thread, which may block.
    fn run(&self, stage: HookStage, request: &HookRequest) -> Result<Adjustment, RpcError> {
        self.dispatcher
            .run_checked(stage, request, crate::runtimehooks::scope::check_fs)
            .map_err(|failure| RpcError::new(code::INTERNAL, failure.to_string()))
    }

    pub fn configure(
        &self,
        request: &api::ConfigureRequest,
    ) -> Result<api::ConfigureResponse, RpcError> {
        let mask = parse_plugin_config(&request.config)
            .map_err(|err| RpcError::new(code::INVALID_ARGUMENT, err.to_string()))?
            .unwrap_or_else(|| event_mask(&DEFAULT_EVENTS));
        self.events.store(mask, Ordering::Relaxed);
        self.status
            .configured(&request.runtime_name, &request.runtime_version);
        tracing::info!(runtime = %request.runtime_name, version = %request.runtime_version, events = mask, "NRI plugin configured");
        Ok(api::ConfigureResponse { events: mask })
    }

    pub fn synchronize(&self, request: &api::SynchronizeRequest) -> api::SynchronizeResponse {
        let mut pods = std::collections::BTreeMap::new();
        for pod in &request.pods {
            let context = pod_context(pod);
            match self.run(
                HookStage::PreRunPodSandbox,
                &HookRequest::Pod(context.clone()),
            ) {
                Ok(adjustment) => {
                    self.apply_side_effects("Synchronize pod", adjustment.side_effects)
                }
                Err(err) => {
                    tracing::warn!(pod = %context.meta, error = %Bounded(&err.message), "cannot synchronize pod")
                }
            }
            pods.insert(pod.id.clone(), context);
        }
        let mut updates = Vec::new();
        for container in &request.containers {
            let Some(pod) = pods.get(&container.pod_sandbox_id) else {
                tracing::debug!(container = %Bounded(&container.id), "container of an unknown pod; skipped");
                continue;
            };
            let mut context = container_context(pod, container);
            self.use_spec_baseline(&mut context);
            match self.run(
                HookStage::PreUpdateContainerResources,
                &HookRequest::Container(context),
            ) {
                Ok(adjustment) => {
                    updates.extend(container_update(&container.id, &adjustment));
                    self.apply_side_effects("Synchronize container", adjustment.side_effects);
                }
                Err(err) => {
                    tracing::warn!(container = %Bounded(&container.id), error = %Bounded(&err.message), "cannot synchronize container")
                }
            }
        }
        tracing::info!(
            pods = request.pods.len(),
            containers = request.containers.len(),
            updates = updates.len(),
            "NRI synchronize"
        );
        api::SynchronizeResponse { update: updates }
    }

    pub fn create_container(
        &self,
        request: &api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, RpcError> {
        let (pod, container) = pod_and_container(request.pod.as_ref(), request.container.as_ref())?;
        let pod = pod_context(pod);
        let context = container_context(&pod, container);
        let mut adjustment = self.run(
            HookStage::PreCreateContainer,
            &HookRequest::Container(context),
        )?;
        self.check_rdt_class(&mut adjustment, &container.id);
        let adjust = container_adjustment(&adjustment);
        self.apply_side_effects("CreateContainer", adjustment.side_effects);
        Ok(api::CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }

    pub fn update_container(
        &self,
        request: &api::UpdateContainerRequest,
    ) -> Result<api::UpdateContainerResponse, RpcError> {
        let (pod, container) = pod_and_container(request.pod.as_ref(), request.container.as_ref())?;
        let pod = pod_context(pod);
        let mut context = container_context(&pod, container);
        if request.linux_resources.is_some() {
            // The kubelet's new values: not yet transformed by any hook.
            context.resources = resources_from_nri(request.linux_resources.as_ref());
        } else {
            self.use_spec_baseline(&mut context);
        }
        let adjustment = self.run(
            HookStage::PreUpdateContainerResources,
            &HookRequest::Container(context),
        )?;
        let update = container_update(&container.id, &adjustment)
            .map(|mut update| {
                // This is the container being updated: its update must succeed.
                update.ignore_failure = false;
                update
            })
            .into_iter()
            .collect();
        self.apply_side_effects("UpdateContainer", adjustment.side_effects);
        Ok(api::UpdateContainerResponse {
            update,
            ..Default::default()
        })
    }

    pub fn state_change(&self, event: &api::StateChangeEvent) -> Result<api::Empty, RpcError> {
        let stage = match api::Event::try_from(event.event) {
            Ok(api::Event::RunPodSandbox) => HookStage::PreRunPodSandbox,
            Ok(api::Event::RemovePodSandbox) => HookStage::PreRemoveRunPodSandbox,
            _ => return Ok(api::Empty {}),
        };
        let Some(pod) = event.pod.as_ref() else {
            return Err(RpcError::new(
                code::INVALID_ARGUMENT,
                "state change without a pod",
            ));
        };
        let adjustment = self.run(stage, &HookRequest::Pod(pod_context(pod)))?;
        self.apply_side_effects(stage.as_str(), adjustment.side_effects);
        Ok(api::Empty {})
    }

    /// Dispatches one Plugin-service call by method name (also what the
    /// latency benchmark drives).
    pub fn handle(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, RpcError> {
        fn decode<M: prost::Message + Default>(bytes: &[u8], method: &str) -> Result<M, RpcError> {
            M::decode(bytes).map_err(|err| {
                RpcError::new(
                    code::INVALID_ARGUMENT,
                    format!("cannot decode {method} request: {err}"),
                )
            })
        }
        match method {
            "Configure" => Ok(self.configure(&decode(request, method)?)?.encode_to_vec()),
            "Synchronize" => Ok(self.synchronize(&decode(request, method)?).encode_to_vec()),
            "CreateContainer" => Ok(self
                .create_container(&decode(request, method)?)?
                .encode_to_vec()),
            "UpdateContainer" => Ok(self
                .update_container(&decode(request, method)?)?
                .encode_to_vec()),
            "StopContainer" => Ok(api::StopContainerResponse::default().encode_to_vec()),
            "StateChange" => Ok(self
                .state_change(&decode(request, method)?)?
                .encode_to_vec()),
            "Shutdown" => {
                tracing::info!(
                    "the runtime asked the NRI plugin to shut down; koordlet will reconnect"
                );
                Ok(api::Empty {}.encode_to_vec())
            }
            other => Err(RpcError::new(
                code::UNIMPLEMENTED,
                format!("unknown NRI method {other}"),
            )),
        }
    }
}

fn pod_and_container<'a>(
    pod: Option<&'a api::PodSandbox>,
    container: Option<&'a api::Container>,
) -> Result<(&'a api::PodSandbox, &'a api::Container), RpcError> {
    match (pod, container) {
        (Some(pod), Some(container)) => Ok((pod, container)),
        _ => Err(RpcError::new(
            code::INVALID_ARGUMENT,
            "request without pod or container",
        )),
    }
}

impl PluginService for NriPlugin {
    fn call(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, RpcError> {
        let result = self.handle(method, request);
        if let Err(err) = &result {
            tracing::warn!(method, code = err.code, error = %Bounded(&err.message), "NRI call failed");
        }
        self.status.request_handled(method, result.is_ok());
        result
    }
}
