//! The transport-neutral hook API: what a runtime event looks like to a hook
//! and what a hook may change. The [`HookDispatcher`] that runs the enabled
//! hooks of a stage under the configured failure policy sits above the hooks
//! in [`super::dispatcher`].
//!
//! # For transports (RuntimeHookService server, NRI plugin, reconciler)
//!
//! 1. Build a [`PodContext`] (sandbox events) or a [`ContainerContext`]
//!    (container events) from the wire message. The RuntimeHookService
//!    messages convert with `PodContext::from(&PodSandboxHookRequest)` and
//!    `ContainerContext::from(&ContainerResourceHookRequest)`; NRI fills the
//!    public fields itself. Fill what the transport knows and leave the rest
//!    empty/`None`: hooks treat missing data as "no opinion".
//! 2. Call [`HookDispatcher::run`] with the [`HookStage`] and a
//!    [`HookRequest`]. It runs every enabled, capability-supported hook that
//!    listens on that stage, in name order, merging their [`Adjustment`]s.
//! 3. `Err(HookFailure)` means a hook failed under the fail-closed policy
//!    (`Fail`): refuse the runtime call (gRPC: return the status from
//!    `HookFailure`; NRI: return an error). `Ok(adjustment)` may still list
//!    fail-open failures in [`Adjustment::ignored_failures`]: proceed.
//! 4. Apply the adjustment: [`Adjustment::resources`], [`Adjustment::env`]
//!    and [`Adjustment::annotations`] go into the runtime's reply (proxy
//!    response / NRI `ContainerAdjustment`/`ContainerUpdate`).
//!    [`Adjustment::side_effects`] (cgroup files the runtime cannot set,
//!    resctrl groups and tasks, `oom_score_adj` of started processes) are
//!    applied by the transport with
//!    [`crate::runtimehooks::apply::SideEffectApplier`] (through the
//!    resource executor, off the async reactor). Container-level cgroup
//!    writes at pre-create time target a cgroup that does not exist yet: the
//!    applier reports them as `NotFound` and the reconciler writes them once
//!    the container runs.
//!
//! `run` is synchronous, does no I/O and takes microseconds; call it directly
//! from an async handler.
//!
//! [`HookDispatcher`]: super::dispatcher::HookDispatcher
//! [`HookDispatcher::run`]: super::dispatcher::HookDispatcher::run

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use apis::extension::{
    ExtendedResourceSpec, PriorityClass, QoSClass, StringMap, get_extended_resource_spec,
    priority_class_for_qos, qos_class_from_labels,
};
use apis::runtime::v1alpha1 as wire;

use super::rules::NodeRules;
use super::scope::expand_slice;
use crate::capabilities::NodeCapabilities;
use crate::system::cgroup::{
    CgroupDriver, CgroupLayout, CgroupResource, CgroupValue, ContainerId, QosTier,
};

/// A point in the pod/container lifecycle where hooks run. Names are the
/// upstream `RuntimeHookType` strings used in the registration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookStage {
    PreRunPodSandbox,
    PostStopPodSandbox,
    PreCreateContainer,
    PreStartContainer,
    PostStartContainer,
    PostStopContainer,
    PreUpdateContainerResources,
    PreRemoveRunPodSandbox,
}

impl HookStage {
    pub const ALL: [HookStage; 8] = [
        HookStage::PreRunPodSandbox,
        HookStage::PostStopPodSandbox,
        HookStage::PreCreateContainer,
        HookStage::PreStartContainer,
        HookStage::PostStartContainer,
        HookStage::PostStopContainer,
        HookStage::PreUpdateContainerResources,
        HookStage::PreRemoveRunPodSandbox,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HookStage::PreRunPodSandbox => "PreRunPodSandbox",
            HookStage::PostStopPodSandbox => "PostStopPodSandbox",
            HookStage::PreCreateContainer => "PreCreateContainer",
            HookStage::PreStartContainer => "PreStartContainer",
            HookStage::PostStartContainer => "PostStartContainer",
            HookStage::PostStopContainer => "PostStopContainer",
            HookStage::PreUpdateContainerResources => "PreUpdateContainerResources",
            HookStage::PreRemoveRunPodSandbox => "PreRemoveRunPodSandbox",
        }
    }

    /// Sandbox (pod-level) stages take a [`PodContext`]; the others a
    /// [`ContainerContext`].
    pub fn is_pod_level(self) -> bool {
        matches!(
            self,
            HookStage::PreRunPodSandbox
                | HookStage::PostStopPodSandbox
                | HookStage::PreRemoveRunPodSandbox
        )
    }
}

impl fmt::Display for HookStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown runtime hook stage {0:?} (expected one of PreRunPodSandbox, PostStopPodSandbox, PreCreateContainer, PreStartContainer, PostStartContainer, PostStopContainer, PreUpdateContainerResources, PreRemoveRunPodSandbox)"
)]
pub struct UnknownStage(pub String);

impl FromStr for HookStage {
    type Err = UnknownStage;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        HookStage::ALL
            .into_iter()
            .find(|stage| stage.as_str() == text.trim())
            .ok_or_else(|| UnknownStage(text.to_string()))
    }
}

/// Upstream's failure policy names: `Fail` refuses the runtime call when a
/// hook fails (fail-closed), `Ignore` lets it proceed (fail-open).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum FailurePolicy {
    Fail,
    #[default]
    Ignore,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown failure policy {0:?} (expected Fail or Ignore)")]
pub struct UnknownFailurePolicy(pub String);

impl FromStr for FailurePolicy {
    type Err = UnknownFailurePolicy;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "Fail" => Ok(FailurePolicy::Fail),
            "Ignore" => Ok(FailurePolicy::Ignore),
            other => Err(UnknownFailurePolicy(other.to_string())),
        }
    }
}

impl serde::Serialize for FailurePolicy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for FailurePolicy {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Which policy applies to a failing hook at a stage: the most specific entry
/// wins (`hook_stages` > `hooks` > `stages` > `default`). Loaded from
/// `--runtime-hooks-failure-policy-config` (see `docs/runtimehooks.md`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailurePolicyConfig {
    /// Upstream `--runtime-hooks-plugin-failure-policy` (default `Ignore`).
    #[serde(default)]
    pub default: FailurePolicy,
    /// Per stage name (`PreCreateContainer: Fail`).
    #[serde(default)]
    pub stages: BTreeMap<String, FailurePolicy>,
    /// Per hook name (`BatchResource: Fail`).
    #[serde(default)]
    pub hooks: BTreeMap<String, FailurePolicy>,
    /// Per hook and stage, keyed `<hook>/<stage>` (`CPUSetAllocator/PreCreateContainer: Fail`).
    #[serde(default)]
    pub hook_stages: BTreeMap<String, FailurePolicy>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailurePolicyConfigError {
    #[error("failure policy config names unknown stage {0:?}")]
    UnknownStage(String),
    #[error("failure policy config key {0:?} is not <hook>/<stage>")]
    MalformedHookStage(String),
}

impl FailurePolicyConfig {
    /// A config where every hook uses `default`.
    pub fn uniform(default: FailurePolicy) -> Self {
        Self {
            default,
            ..Self::default()
        }
    }

    pub fn policy_for(&self, hook: &str, stage: HookStage) -> FailurePolicy {
        let key = format!("{hook}/{}", stage.as_str());
        self.hook_stages
            .get(&key)
            .or_else(|| self.hooks.get(hook))
            .or_else(|| self.stages.get(stage.as_str()))
            .copied()
            .unwrap_or(self.default)
    }

    /// Checks that every stage named in the config exists (hook names are
    /// checked by the dispatcher, which knows the hooks).
    pub fn validate(&self) -> Result<(), FailurePolicyConfigError> {
        for stage in self.stages.keys() {
            stage
                .parse::<HookStage>()
                .map_err(|_| FailurePolicyConfigError::UnknownStage(stage.clone()))?;
        }
        for key in self.hook_stages.keys() {
            let (_, stage) = key
                .split_once('/')
                .ok_or_else(|| FailurePolicyConfigError::MalformedHookStage(key.clone()))?;
            stage
                .parse::<HookStage>()
                .map_err(|_| FailurePolicyConfigError::UnknownStage(stage.to_string()))?;
        }
        Ok(())
    }
}

/// Pod identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodMeta {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl fmt::Display for PodMeta {
    /// `namespace/name`, each cut for logging (they come from requests).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::bounds::Bounded;
        write!(f, "{}/{}", Bounded(&self.namespace), Bounded(&self.name))
    }
}

/// Linux resources as the runtime would set them (v1 terms). `None` means
/// "not specified" both in requests and in adjustments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinuxResources {
    pub cpu_shares: Option<i64>,
    /// CFS quota in µs; `-1` is unlimited.
    pub cpu_quota: Option<i64>,
    pub cpu_period: Option<i64>,
    pub cpuset_cpus: Option<String>,
    pub cpuset_mems: Option<String>,
    /// Bytes; `-1` is unlimited.
    pub memory_limit: Option<i64>,
    pub oom_score_adj: Option<i64>,
}

impl LinuxResources {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Takes every field `other` sets.
    pub fn merge_from(&mut self, other: &LinuxResources) {
        fn take<T: Clone>(into: &mut Option<T>, from: &Option<T>) {
            if from.is_some() {
                into.clone_from(from);
            }
        }
        take(&mut self.cpu_shares, &other.cpu_shares);
        take(&mut self.cpu_quota, &other.cpu_quota);
        take(&mut self.cpu_period, &other.cpu_period);
        take(&mut self.cpuset_cpus, &other.cpuset_cpus);
        take(&mut self.cpuset_mems, &other.cpuset_mems);
        take(&mut self.memory_limit, &other.memory_limit);
        take(&mut self.oom_score_adj, &other.oom_score_adj);
    }
}

/// A pod as the hooks see it, at sandbox events and inside every container
/// event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodContext {
    pub meta: PodMeta,
    pub labels: StringMap,
    pub annotations: StringMap,
    /// The pod's cgroup parent as the runtime reports it: a path such as
    /// `/kubepods/besteffort/pod<uid>` (cgroupfs) or a slice name such as
    /// `kubepods-besteffort-pod<uid>.slice` (systemd). Empty when unknown.
    pub cgroup_parent: String,
    /// Pod-level resources (sandbox resources, or the sum the reconciler
    /// derives from the spec).
    pub resources: LinuxResources,
    /// Batch/mid resources per container, from the pod spec (reconciler) or
    /// the `node.koordinator.sh/extended-resource-spec` annotation (runtime
    /// events). `None` when absent or malformed (logged, never fatal).
    pub extended_resources: Option<ExtendedResourceSpec>,
}

impl PodContext {
    /// Koordinator QoS class from the `koordinator.sh/qosClass` label
    /// (`None` when absent or unknown).
    pub fn qos_class(&self) -> QoSClass {
        qos_class_from_labels(&self.labels)
    }

    pub fn priority_class(&self) -> PriorityClass {
        priority_class_for_qos(self.qos_class())
    }

    /// The Kubernetes QoS tier, read from the cgroup parent (which the
    /// kubelet names after it).
    pub fn kube_qos_tier(&self) -> Option<QosTier> {
        tier_of_cgroup_parent(&self.cgroup_parent)
    }

    /// The pod's cgroup directory relative to the hierarchy root, from the
    /// cgroup parent (expanding systemd slice names); `None` when there is
    /// none or it is not this pod's directory below kubepods (see
    /// [`super::scope`]): nothing is ever derived from a refused parent.
    pub fn cgroup_dir(&self, layout: &CgroupLayout) -> Option<PathBuf> {
        if self.cgroup_parent.is_empty() {
            return None;
        }
        super::scope::pod_scope(&self.cgroup_parent, &self.meta.uid, layout)
            .ok()
            .map(|scope| scope.dir)
    }

    /// Fills [`PodContext::extended_resources`] from the annotation; a
    /// malformed annotation leaves it `None` and is returned for logging.
    pub fn load_extended_resources_from_annotations(&mut self) -> Option<String> {
        match get_extended_resource_spec(&self.annotations) {
            Ok(spec) => {
                self.extended_resources = spec.filter(|spec| !spec.containers.is_empty());
                None
            }
            Err(error) => {
                self.extended_resources = None;
                Some(error.to_string())
            }
        }
    }
}

/// Container identity.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerMeta {
    pub name: String,
    /// Runtime ID, with or without a `containerd://` style prefix; empty
    /// before the runtime assigned one (e.g. proxy pre-create).
    pub id: String,
    pub attempt: u32,
    /// The pod sandbox ("pause") container rather than an app container.
    pub sandbox: bool,
}

/// A container as the hooks see it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContainerContext {
    pub pod: PodContext,
    pub container: ContainerMeta,
    pub annotations: StringMap,
    pub env: StringMap,
    /// Resources the runtime is about to set (or has set).
    pub resources: LinuxResources,
    /// The container's cgroup directory relative to the hierarchy root, when
    /// known (NRI and the reconciler know it; the proxy path derives it).
    pub cgroup_dir: Option<PathBuf>,
    /// Processes of the container, when known (post-start, reconciler).
    pub pids: Vec<u32>,
}

impl ContainerContext {
    /// The container's cgroup directory: the explicit one when it is one
    /// name below this pod's directory (see [`super::scope`]), else the
    /// pod's directory joined with the runtime's name for the container ID.
    pub fn cgroup_dir(&self, layout: &CgroupLayout) -> Option<PathBuf> {
        if let Some(dir) = &self.cgroup_dir {
            let (pod, dir) = super::scope::container_scope(dir, &self.pod.meta.uid, layout).ok()?;
            let same_pod = self.pod.cgroup_dir(layout).is_none_or(|own| own == pod.dir);
            return same_pod.then_some(dir);
        }
        if self.container.id.is_empty() {
            return None;
        }
        let id = ContainerId::parse(&self.container.id).ok()?;
        Some(
            self.pod
                .cgroup_dir(layout)?
                .join(layout.container_dir_name(&id)),
        )
    }
}

/// What a stage runs on.
// Built once per call and passed by reference: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum HookRequest {
    Pod(PodContext),
    Container(ContainerContext),
}

impl HookRequest {
    pub fn pod(&self) -> &PodContext {
        match self {
            HookRequest::Pod(pod) => pod,
            HookRequest::Container(container) => &container.pod,
        }
    }
}

/// Something beyond the runtime's reply that a decision needs done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SideEffect {
    /// Write `value` to `resource` of the cgroup at `dir` (relative).
    CgroupWrite {
        dir: PathBuf,
        resource: CgroupResource,
        value: CgroupValue,
        reason: String,
    },
    /// Make sure the resctrl group exists with this schemata (lines like
    /// `L3:0=ff;1=ff`); an empty schemata only creates the group.
    ResctrlGroup {
        group: String,
        schemata: Vec<String>,
    },
    /// Move these tasks into the resctrl group.
    ResctrlTasks { group: String, pids: Vec<u32> },
    /// Remove the resctrl group (pod gone).
    ResctrlRemoveGroup { group: String },
    /// Write `/proc/<pid>/oom_score_adj`.
    OomScoreAdj { pid: u32, value: i64 },
    /// Give the processes of a container the core scheduling cookie of
    /// `group`, or the default cookie when `group` is `None` (see
    /// [`super::hooks::coresched`]). `container` is `<pod uid>/<container id>`.
    CoreSchedCookie {
        container: String,
        group: Option<String>,
        pids: Vec<u32>,
    },
}

impl SideEffect {
    /// A one-line description for logs, every outside value cut (see
    /// [`crate::bounds`]).
    pub fn summary(&self) -> String {
        use crate::bounds::{Bounded, BoundedPath};
        match self {
            SideEffect::CgroupWrite {
                dir,
                resource,
                value,
                reason,
            } => format!(
                "write {} to {resource} of /{} ({})",
                Bounded(&value.to_string()),
                BoundedPath(dir),
                Bounded(reason)
            ),
            SideEffect::ResctrlGroup { group, schemata } => format!(
                "resctrl group {} with {} schemata line(s)",
                Bounded(group),
                schemata.len()
            ),
            SideEffect::ResctrlTasks { group, pids } => format!(
                "{} task(s) into resctrl group {}",
                pids.len(),
                Bounded(group)
            ),
            SideEffect::ResctrlRemoveGroup { group } => {
                format!("remove resctrl group {}", Bounded(group))
            }
            SideEffect::OomScoreAdj { pid, value } => {
                format!("oom_score_adj {value} for pid {pid}")
            }
            SideEffect::CoreSchedCookie {
                container,
                group,
                pids,
            } => match group {
                Some(group) => format!(
                    "core sched cookie of group \"{}\" for {} pid(s) of {}",
                    Bounded(group),
                    pids.len(),
                    Bounded(container)
                ),
                None => format!(
                    "default core sched cookie for {} pid(s) of {}",
                    pids.len(),
                    Bounded(container)
                ),
            },
        }
    }

    /// The `resource_type` metric label of the effect.
    pub fn resource_label(&self) -> String {
        match self {
            SideEffect::CgroupWrite { resource, .. } => resource.name().to_string(),
            SideEffect::ResctrlGroup { .. } => "resctrl.schemata".into(),
            SideEffect::ResctrlTasks { .. } => "resctrl.tasks".into(),
            SideEffect::ResctrlRemoveGroup { .. } => "resctrl.root".into(),
            SideEffect::OomScoreAdj { .. } => "oom_score_adj".into(),
            SideEffect::CoreSchedCookie { .. } => "core_sched_cookie".into(),
        }
    }
}

/// A hook that failed. The message is cut for logs and replies
/// ([`crate::bounds`]): it may quote an annotation value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hook {hook} at {stage}: {message}")]
pub struct HookFailure {
    pub hook: String,
    pub stage: HookStage,
    pub message: String,
}

/// A device node a container gets (OCI `linux.devices`; NRI `LinuxDevice`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinuxDevice {
    /// Path inside the container (the same as on the host for the hooks here).
    pub path: String,
    /// `c` (character) or `b` (block).
    pub kind: char,
    pub major: i64,
    pub minor: i64,
    /// Permission bits of the node (e.g. `0o666`).
    pub file_mode: u32,
}

/// The merged decision of the hooks that ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Adjustment {
    pub resources: LinuxResources,
    /// Environment variables to add or overwrite (container stages).
    pub env: StringMap,
    /// Annotations to add or overwrite.
    pub annotations: StringMap,
    /// The resctrl group (RDT class, upstream's `Closid`) the container is
    /// created in (container creation only). The NRI transport puts it in
    /// the `ContainerAdjustment`; the runtime proxy's CRI messages have no
    /// such field, so there the tasks are moved after start.
    pub rdt_class: Option<String>,
    /// Device nodes to add to a container being created (container
    /// creation only). Only the NRI transport can carry them: the runtime
    /// proxy's RuntimeHookService response has no device field.
    pub devices: Vec<LinuxDevice>,
    pub side_effects: Vec<SideEffect>,
    /// Failures of fail-open hooks (the call proceeds).
    pub ignored_failures: Vec<HookFailure>,
}

impl Adjustment {
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
            && self.env.is_empty()
            && self.annotations.is_empty()
            && self.rdt_class.is_none()
            && self.devices.is_empty()
            && self.side_effects.is_empty()
    }

    pub fn cgroup_write(
        &mut self,
        dir: impl Into<PathBuf>,
        resource: CgroupResource,
        value: CgroupValue,
        reason: impl Into<String>,
    ) {
        self.side_effects.push(SideEffect::CgroupWrite {
            dir: dir.into(),
            resource,
            value,
            reason: reason.into(),
        });
    }

    /// Merges the decision of the next hook (in name order) into this one.
    pub(crate) fn merge_from(&mut self, other: Adjustment) {
        self.resources.merge_from(&other.resources);
        self.env.extend(other.env);
        self.annotations.extend(other.annotations);
        if other.rdt_class.is_some() {
            self.rdt_class = other.rdt_class;
        }
        for device in other.devices {
            if !self.devices.iter().any(|known| known.path == device.path) {
                self.devices.push(device);
            }
        }
        self.side_effects.extend(other.side_effects);
        self.ignored_failures.extend(other.ignored_failures);
    }
}

/// Why a hook could not decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    #[error("annotation {key} is malformed: {error}")]
    MalformedAnnotation { key: String, error: String },
    #[error("{0}")]
    Invalid(String),
}

/// A node capability a hook needs; checked once at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequiredCapability {
    /// A cgroup controller (`cpu`, `cpuset`, `memory`).
    Controller(&'static str),
    CpuIdle,
    GroupIdentity,
    CoreSched,
    Resctrl,
}

impl RequiredCapability {
    pub fn name(self) -> String {
        match self {
            RequiredCapability::Controller(controller) => format!("cgroup controller {controller}"),
            RequiredCapability::CpuIdle => "cpu.idle".to_string(),
            RequiredCapability::GroupIdentity => "group identity (cpu.bvt_warp_ns)".to_string(),
            RequiredCapability::CoreSched => "core scheduling".to_string(),
            RequiredCapability::Resctrl => "resctrl".to_string(),
        }
    }

    pub fn is_met(self, caps: &NodeCapabilities) -> bool {
        match self {
            RequiredCapability::Controller(controller) => {
                caps.cgroup.controllers.iter().any(|c| c == controller)
            }
            RequiredCapability::CpuIdle => caps.cpu_idle,
            RequiredCapability::GroupIdentity => caps.group_identity,
            RequiredCapability::CoreSched => caps.core_sched,
            RequiredCapability::Resctrl => caps.resctrl.supported,
        }
    }
}

/// Kernel features some hooks use for part of their work (see
/// [`Hook::partial_capabilities`]), from the node capabilities.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeFeatures {
    pub cpu_idle: bool,
    pub core_sched: bool,
}

impl NodeFeatures {
    pub fn of(caps: &NodeCapabilities) -> Self {
        Self {
            cpu_idle: caps.cpu_idle,
            core_sched: caps.core_sched,
        }
    }
}

/// Node-level inputs of a decision (rules and layout), shared by all hooks.
#[derive(Debug, Clone)]
pub struct HookEnv {
    pub layout: CgroupLayout,
    pub rules: Arc<NodeRules>,
    pub features: NodeFeatures,
}

/// One runtime hook: a pure decision per stage.
pub trait Hook: Send + Sync {
    /// Upstream feature-gate name (`BatchResource`, `CPUSetAllocator`, ...).
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn stages(&self) -> &'static [HookStage];
    fn required_capabilities(&self) -> &'static [RequiredCapability] {
        &[]
    }
    /// Capabilities that each power one part of the hook, with that part's
    /// name: the hook is supported when at least one is met, and the parts
    /// whose capability is missing are reported in [`HookStatus::degraded`](super::dispatcher::HookStatus::degraded)
    /// (the hook checks [`HookEnv::features`] and skips them).
    fn partial_capabilities(&self) -> &'static [(RequiredCapability, &'static str)] {
        &[]
    }
    /// `Some(what is missing)` when this build only gates and reports the
    /// hook without implementing its effect: the dispatcher keeps it
    /// inactive on every node, whatever the kernel offers, and reports it as
    /// "not implemented" (distinct from a missing node capability).
    fn not_implemented(&self) -> Option<&'static str> {
        None
    }
    /// Decides for a pod-level stage, adding to `out`.
    fn pod(
        &self,
        _stage: HookStage,
        _pod: &PodContext,
        _env: &HookEnv,
        _out: &mut Adjustment,
    ) -> Result<(), HookError> {
        Ok(())
    }
    /// Decides for a Kubernetes QoS tier directory (`kubepods`,
    /// `kubepods/burstable`, `kubepods/besteffort`); only the reconciler
    /// asks. Adds cgroup writes to `out`.
    fn qos_tier(
        &self,
        _tier: QosTier,
        _env: &HookEnv,
        _out: &mut Adjustment,
    ) -> Result<(), HookError> {
        Ok(())
    }
    /// Decides for a host application of the NodeSLO (its cgroup path is
    /// already validated); only the reconciler asks. Adds cgroup writes to
    /// `out`.
    fn host_app(
        &self,
        _app: &super::hostapp::HostAppContext,
        _env: &HookEnv,
        _out: &mut Adjustment,
    ) -> Result<(), HookError> {
        Ok(())
    }
    /// Decides for a container-level stage, adding to `out`.
    fn container(
        &self,
        _stage: HookStage,
        _container: &ContainerContext,
        _env: &HookEnv,
        _out: &mut Adjustment,
    ) -> Result<(), HookError> {
        Ok(())
    }
}

/// Cgroup writes that set `resources` on the cgroup at `dir` (v1 terms;
/// the executor translates for v2). `oom_score_adj` is per process and is
/// not a cgroup file.
pub fn resource_writes(dir: &Path, resources: &LinuxResources, reason: &str) -> Vec<SideEffect> {
    let mut writes = Vec::new();
    let mut push = |resource: CgroupResource, value: CgroupValue| {
        writes.push(SideEffect::CgroupWrite {
            dir: dir.to_path_buf(),
            resource,
            value,
            reason: reason.to_string(),
        })
    };
    if let Some(v) = resources.cpu_shares {
        push(CgroupResource::CpuShares, CgroupValue::Int(v));
    }
    if let Some(v) = resources.cpu_period {
        push(CgroupResource::CpuCfsPeriod, CgroupValue::Int(v));
    }
    if let Some(v) = resources.cpu_quota {
        let value = if v < 0 {
            CgroupValue::Unlimited
        } else {
            CgroupValue::Int(v)
        };
        push(CgroupResource::CpuCfsQuota, value);
    }
    if let Some(v) = resources.memory_limit {
        let value = if v < 0 {
            CgroupValue::Unlimited
        } else {
            CgroupValue::Int(v)
        };
        push(CgroupResource::MemoryLimit, value);
    }
    let cpusets = [
        (CgroupResource::CpusetCpus, &resources.cpuset_cpus),
        (CgroupResource::CpusetMems, &resources.cpuset_mems),
    ];
    for (resource, list) in cpusets {
        // Empty means "not set"; an unparsable list is not written.
        if let Some(text) = list.as_deref().filter(|c| !c.trim().is_empty())
            && let Ok(value) = resource.parse_value(text)
        {
            push(resource, value);
        }
    }
    writes
}

/// The Kubernetes QoS tier of a kubelet pod cgroup parent, read from its
/// pod directory name (`kubepods[-<tier>]-pod<uid>.slice`, systemd) or the
/// directory above `pod<uid>` (`besteffort`, `burstable`, else the
/// kubepods root: Guaranteed). `None` for anything that is not a pod
/// directory (which the dispatcher refuses anyway, see [`super::scope`]).
pub fn tier_of_cgroup_parent(cgroup_parent: &str) -> Option<QosTier> {
    let path = Path::new(cgroup_parent);
    let mut names = path
        .components()
        .rev()
        .filter_map(|component| match component {
            Component::Normal(name) => name.to_str(),
            _ => None,
        });
    let pod = names.next()?;
    if pod.ends_with(".slice") {
        return if pod.starts_with("kubepods-besteffort-pod") {
            Some(QosTier::BestEffort)
        } else if pod.starts_with("kubepods-burstable-pod") {
            Some(QosTier::Burstable)
        } else if pod.starts_with("kubepods-pod") {
            Some(QosTier::Guaranteed)
        } else {
            None
        };
    }
    if !pod.starts_with("pod") {
        return None;
    }
    match names.next() {
        Some("besteffort") => Some(QosTier::BestEffort),
        Some("burstable") => Some(QosTier::Burstable),
        Some(_) => Some(QosTier::Guaranteed),
        None => None,
    }
}

/// The directory (relative to the hierarchy root) of a cgroup parent as the
/// runtime reports it. A systemd slice name (`a-b-c.slice`) expands to its
/// nested path (`a.slice/a-b.slice/a-b-c.slice`); `..` is rejected.
pub fn cgroup_parent_dir(cgroup_parent: &str, driver: CgroupDriver) -> Option<PathBuf> {
    let text = cgroup_parent.trim();
    if text.is_empty() {
        return None;
    }
    let is_bare_slice = !text.contains('/') && text.ends_with(".slice");
    let path = if driver == CgroupDriver::Systemd && is_bare_slice {
        expand_slice(text)?
    } else {
        PathBuf::from(text)
    };
    let mut relative = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => relative.push(part),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    (!relative.as_os_str().is_empty()).then_some(relative)
}

// ---- RuntimeHookService conversions ----

fn non_zero(value: i64) -> Option<i64> {
    (value != 0).then_some(value)
}

fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

impl From<&wire::LinuxContainerResources> for LinuxResources {
    fn from(wire: &wire::LinuxContainerResources) -> Self {
        LinuxResources {
            cpu_shares: non_zero(wire.cpu_shares),
            cpu_quota: non_zero(wire.cpu_quota),
            cpu_period: non_zero(wire.cpu_period),
            cpuset_cpus: non_empty(&wire.cpuset_cpus),
            cpuset_mems: non_empty(&wire.cpuset_mems),
            // 0 is "not set"; any negative value means unlimited.
            memory_limit: non_zero(wire.memory_limit_in_bytes).map(|v| v.max(-1)),
            oom_score_adj: non_zero(wire.oom_score_adj),
        }
    }
}

impl LinuxResources {
    /// Overlays the set fields onto a wire message (the request's own
    /// resources, so unset fields keep the runtime's values).
    pub fn apply_to(&self, wire: &mut wire::LinuxContainerResources) {
        if let Some(v) = self.cpu_shares {
            wire.cpu_shares = v;
        }
        if let Some(v) = self.cpu_quota {
            wire.cpu_quota = v;
        }
        if let Some(v) = self.cpu_period {
            wire.cpu_period = v;
        }
        if let Some(v) = &self.cpuset_cpus {
            wire.cpuset_cpus.clone_from(v);
        }
        if let Some(v) = &self.cpuset_mems {
            wire.cpuset_mems.clone_from(v);
        }
        if let Some(v) = self.memory_limit {
            wire.memory_limit_in_bytes = v;
        }
        if let Some(v) = self.oom_score_adj {
            wire.oom_score_adj = v;
        }
    }
}

impl From<&wire::PodSandboxHookRequest> for PodContext {
    fn from(request: &wire::PodSandboxHookRequest) -> Self {
        let meta = request.pod_meta.clone().unwrap_or_default();
        let mut pod = PodContext {
            meta: PodMeta {
                namespace: meta.namespace,
                name: meta.name,
                uid: meta.uid,
            },
            labels: request.labels.clone(),
            annotations: request.annotations.clone(),
            cgroup_parent: request.cgroup_parent.clone(),
            resources: request
                .resources
                .as_ref()
                .map(LinuxResources::from)
                .unwrap_or_default(),
            extended_resources: None,
        };
        if let Some(error) = pod.load_extended_resources_from_annotations() {
            tracing::debug!(pod = %pod.meta, error = %crate::bounds::Bounded(&error), "ignoring malformed extended-resource-spec");
        }
        pod
    }
}

impl From<&wire::ContainerResourceHookRequest> for ContainerContext {
    fn from(request: &wire::ContainerResourceHookRequest) -> Self {
        let meta = request.pod_meta.clone().unwrap_or_default();
        let mut pod = PodContext {
            meta: PodMeta {
                namespace: meta.namespace,
                name: meta.name,
                uid: meta.uid,
            },
            labels: request.pod_labels.clone(),
            annotations: request.pod_annotations.clone(),
            cgroup_parent: request.pod_cgroup_parent.clone(),
            resources: request
                .pod_resources
                .as_ref()
                .map(LinuxResources::from)
                .unwrap_or_default(),
            extended_resources: None,
        };
        if let Some(error) = pod.load_extended_resources_from_annotations() {
            tracing::debug!(pod = %pod.meta, error = %crate::bounds::Bounded(&error), "ignoring malformed extended-resource-spec");
        }
        let container = request.container_meta.clone().unwrap_or_default();
        ContainerContext {
            pod,
            container: ContainerMeta {
                name: container.name,
                id: container.id,
                attempt: container.attempt,
                sandbox: false,
            },
            annotations: request.container_annotations.clone(),
            env: request.container_envs.clone(),
            resources: request
                .container_resources
                .as_ref()
                .map(LinuxResources::from)
                .unwrap_or_default(),
            cgroup_dir: None,
            pids: Vec::new(),
        }
    }
}

impl Adjustment {
    /// The sandbox reply: the request's resources overlaid with the
    /// adjustment, plus added annotations.
    pub fn to_pod_response(
        &self,
        request: &wire::PodSandboxHookRequest,
    ) -> wire::PodSandboxHookResponse {
        let resources = (request.resources.is_some() || !self.resources.is_empty()).then(|| {
            let mut resources = request.resources.clone().unwrap_or_default();
            self.resources.apply_to(&mut resources);
            resources
        });
        let mut annotations = request.annotations.clone();
        annotations.extend(self.annotations.clone());
        wire::PodSandboxHookResponse {
            labels: request.labels.clone(),
            annotations,
            cgroup_parent: request.cgroup_parent.clone(),
            resources,
        }
    }

    /// The container reply: the request's container resources overlaid
    /// with the adjustment, request annotations/env plus added ones.
    pub fn to_container_response(
        &self,
        request: &wire::ContainerResourceHookRequest,
    ) -> wire::ContainerResourceHookResponse {
        let container_resources =
            (request.container_resources.is_some() || !self.resources.is_empty()).then(|| {
                let mut resources = request.container_resources.clone().unwrap_or_default();
                self.resources.apply_to(&mut resources);
                resources
            });
        let mut container_annotations = request.container_annotations.clone();
        container_annotations.extend(self.annotations.clone());
        let mut container_envs = request.container_envs.clone();
        container_envs.extend(self.env.clone());
        wire::ContainerResourceHookResponse {
            container_annotations,
            container_resources,
            pod_cgroup_parent: request.pod_cgroup_parent.clone(),
            container_envs,
        }
    }
}

/// `dir` relative to the root, for logs.
pub fn display_dir(dir: &Path) -> String {
    format!("/{}", dir.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_names_round_trip() {
        for stage in HookStage::ALL {
            assert_eq!(stage.as_str().parse::<HookStage>(), Ok(stage));
        }
        assert!("PreFoo".parse::<HookStage>().is_err());
    }

    #[test]
    fn most_specific_failure_policy_wins() {
        let config: FailurePolicyConfig = serde_json::from_str(
            r#"{"default":"Ignore","stages":{"PreCreateContainer":"Fail"},
                "hooks":{"GPUEnvInject":"Ignore","BatchResource":"Fail"},
                "hookStages":{"BatchResource/PreRunPodSandbox":"Ignore"}}"#,
        )
        .unwrap();
        config.validate().unwrap();
        use FailurePolicy::*;
        assert_eq!(
            config.policy_for("CPUSetAllocator", HookStage::PreCreateContainer),
            Fail
        );
        assert_eq!(
            config.policy_for("CPUSetAllocator", HookStage::PreRunPodSandbox),
            Ignore
        );
        assert_eq!(
            config.policy_for("GPUEnvInject", HookStage::PreCreateContainer),
            Ignore
        );
        assert_eq!(
            config.policy_for("BatchResource", HookStage::PreCreateContainer),
            Fail
        );
        assert_eq!(
            config.policy_for("BatchResource", HookStage::PreRunPodSandbox),
            Ignore
        );
        let bad: FailurePolicyConfig =
            serde_json::from_str(r#"{"stages":{"PreFoo":"Fail"}}"#).unwrap();
        assert!(bad.validate().is_err());
        assert!(serde_json::from_str::<FailurePolicyConfig>(r#"{"default":"Maybe"}"#).is_err());
    }

    #[test]
    fn systemd_slices_expand_and_escapes_are_rejected() {
        assert_eq!(
            cgroup_parent_dir("kubepods-besteffort-podab_cd.slice", CgroupDriver::Systemd),
            Some(PathBuf::from(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podab_cd.slice"
            ))
        );
        assert_eq!(
            cgroup_parent_dir("/kubepods/besteffort/podx", CgroupDriver::Cgroupfs),
            Some(PathBuf::from("kubepods/besteffort/podx"))
        );
        assert_eq!(
            cgroup_parent_dir("/kubepods/../etc", CgroupDriver::Cgroupfs),
            None
        );
        assert_eq!(cgroup_parent_dir("", CgroupDriver::Cgroupfs), None);
        assert_eq!(
            tier_of_cgroup_parent("/kubepods/burstable/pod1"),
            Some(QosTier::Burstable)
        );
        assert_eq!(
            tier_of_cgroup_parent("/kubepods/pod1"),
            Some(QosTier::Guaranteed)
        );
    }

    #[test]
    fn wire_resources_convert_both_ways() {
        let wire_in = wire::LinuxContainerResources {
            cpu_shares: 512,
            cpu_quota: 0,
            memory_limit_in_bytes: -5,
            cpuset_cpus: "0-1".into(),
            ..Default::default()
        };
        let ours = LinuxResources::from(&wire_in);
        assert_eq!(ours.cpu_shares, Some(512));
        assert_eq!(ours.cpu_quota, None);
        assert_eq!(ours.memory_limit, Some(-1));
        assert_eq!(ours.cpuset_cpus.as_deref(), Some("0-1"));
        let mut out = wire_in.clone();
        LinuxResources {
            cpu_quota: Some(-1),
            ..Default::default()
        }
        .apply_to(&mut out);
        assert_eq!(out.cpu_quota, -1);
        assert_eq!(out.cpu_shares, 512);
    }
}
