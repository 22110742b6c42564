//! The hook reconciler: every interval it re-derives each hook's decision
//! for the running pods and containers and repairs what drifted.
//!
//! Levels (upstream's names, used as the `level` metric label):
//! - `kubeqos`: the Kubernetes QoS tier directories ([`Hook::qos_tier`]);
//! - `pod`: the decision of the `PreRunPodSandbox` stage on the pod cgroup;
//! - `container`: `PreCreateContainer` (+ `PostStartContainer` for
//!   per-process effects) on each started container's cgroup;
//! - `sandbox`: the cpuset decision on the pod's sandbox container (any
//!   container cgroup of the pod that is not an app container);
//! - `hostapp`: the NodeSLO's host applications ([`Hook::host_app`]), whose
//!   cgroup paths are validated first ([`super::hostapp`]).
//!
//! A cgroup file is rewritten only when the value read back differs from
//! the decision; each such repair counts in
//! `koordlet_runtime_hook_reconciler_drift_repaired_total{level,resource_type}`.
//! Writes go through the resource executor (ordering, audit, metrics).
//! Resctrl groups of pods that are gone are removed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apis::extension::{
    BATCH_CPU, BATCH_MEMORY, ExtendedResourceContainerSpec, ExtendedResourceSpec, MID_CPU,
    MID_MEMORY, QuantityValue, kube_qos_class_of_pod,
};
use k8s_openapi::api::core::v1::{Container, Pod};
use koord_common::Shutdown;
use koord_common::sync::MutexExt;

use super::apply::{EffectStatus, SideEffectApplier};
use super::dispatcher::HookDispatcher;
use super::hooks::cpumath::{milli_cpu_to_quota, milli_cpu_to_shares};
use super::hooks::resctrl::stale_groups;
use super::hostapp::HostAppRefusal;
use super::protocol::*;
use super::rules::NodeRules;
use crate::resourceexecutor::{ResourceUpdate, WriteStatus};
use crate::statesinformer::StatesInformer;
use crate::system::cgroup::{CgroupLayout, CgroupValue, Controller, QosTier};

/// Upstream's default `--runtime-hooks-reconcile-interval`.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(10);

/// One decided side effect and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub level: &'static str,
    pub pod: String,
    pub effect: SideEffect,
}

/// What a round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Cgroup files checked.
    pub checked: usize,
    /// Files that differed and were rewritten successfully.
    pub repaired: usize,
    /// Writes that failed (including cgroups that vanished mid-round).
    pub failed: usize,
    /// Other effects (resctrl, oom_score_adj) that changed something.
    pub applied_effects: usize,
    /// `oom_score_adj` writes the kernel refused because they lower the
    /// value without CAP_SYS_RESOURCE: (pid, wanted value).
    pub oom_lowering_denied: Vec<(u32, i64)>,
}

fn quantity(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    name: &str,
    milli: bool,
) -> Option<i64> {
    let value = QuantityValue::of(list?.get(name)?).ok()?;
    Some(if milli {
        value.milli_value()
    } else {
        value.value()
    })
}

/// Builds the pod context from a Pod object (pure).
pub fn pod_context_of(pod: &Pod, layout: &CgroupLayout) -> Option<(PodContext, QosTier)> {
    let uid = pod.metadata.uid.as_deref().filter(|uid| !uid.is_empty())?;
    let tier = kube_qos_class_of_pod(pod)
        .and_then(|class| QosTier::from_kubernetes_qos_class(class.as_str()).ok())?;
    let pod_dir = layout.pod_dir(tier, uid).ok()?;
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();

    // Pod-level values the kubelet derives from the spec (baseline for
    // hooks that scale them, e.g. CPUNormalization).
    let mut request = 0i64;
    let mut cpu_limit = Some(0i64);
    let mut memory_limit = Some(0i64);
    let mut extended = ExtendedResourceSpec::default();
    for container in containers {
        let resources = container.resources.as_ref();
        let requests = resources.and_then(|r| r.requests.as_ref());
        let limits = resources.and_then(|r| r.limits.as_ref());
        // Spec values: the request sum saturates; a limit sum beyond i64
        // counts as no limit.
        request = request.saturating_add(
            quantity(requests, "cpu", true)
                .filter(|v| *v > 0)
                .unwrap_or(0),
        );
        cpu_limit = cpu_limit
            .zip(quantity(limits, "cpu", true).filter(|v| *v > 0))
            .and_then(|(a, b)| a.checked_add(b));
        memory_limit = memory_limit
            .zip(quantity(limits, "memory", false).filter(|v| *v > 0))
            .and_then(|(a, b)| a.checked_add(b));
        let mut spec = ExtendedResourceContainerSpec::default();
        for name in [BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY] {
            if let Some(q) = requests.and_then(|r| r.get(name)) {
                spec.requests.insert(name.to_string(), q.clone());
            }
            if let Some(q) = limits.and_then(|r| r.get(name)) {
                spec.limits.insert(name.to_string(), q.clone());
            }
        }
        if !spec.requests.is_empty() || !spec.limits.is_empty() {
            extended.containers.insert(container.name.clone(), spec);
        }
    }
    let mut context = PodContext {
        meta: PodMeta {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.to_string(),
        },
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        annotations: pod.metadata.annotations.clone().unwrap_or_default(),
        cgroup_parent: format!("/{}", pod_dir.display()),
        resources: LinuxResources {
            cpu_shares: Some(milli_cpu_to_shares(request)),
            cpu_quota: Some(milli_cpu_to_quota(
                cpu_limit.unwrap_or(0),
                super::rules::DEFAULT_CFS_PERIOD_US,
            )),
            memory_limit: Some(memory_limit.filter(|v| *v > 0).unwrap_or(-1)),
            ..LinuxResources::default()
        },
        extended_resources: None,
    };
    // The spec wins; the annotation covers pods whose spec was rewritten.
    if extended.containers.is_empty() {
        context.load_extended_resources_from_annotations();
    } else {
        context.extended_resources = Some(extended);
    }
    Some((context, tier))
}

/// The started app containers of a pod: (name, runtime ID, spec resources).
fn started_containers(pod: &Pod) -> Vec<(String, String, LinuxResources)> {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let specs = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    statuses
        .iter()
        .filter_map(|status| {
            let id = status.container_id.as_deref().filter(|id| !id.is_empty())?;
            let spec = specs.iter().find(|c| c.name == status.name);
            let linux = spec
                .map(container_spec_resources)
                .unwrap_or_else(|| container_spec_resources(&Container::default()));
            Some((status.name.clone(), id.to_string(), linux))
        })
        .collect()
}

/// The resources the kubelet gives a container for its spec: cpu.shares
/// from the CPU request, CFS quota from the CPU limit (none → -1) at the
/// default period, memory limit (none → -1). This is the unscaled baseline
/// of hooks that transform the runtime's values (CPUNormalization), so a
/// decision derived from it is the same however often it is made.
pub fn container_spec_resources(container: &Container) -> LinuxResources {
    let resources = container.resources.as_ref();
    let requests = resources.and_then(|r| r.requests.as_ref());
    let limits = resources.and_then(|r| r.limits.as_ref());
    LinuxResources {
        cpu_shares: Some(milli_cpu_to_shares(
            quantity(requests, "cpu", true).unwrap_or(0),
        )),
        cpu_quota: Some(milli_cpu_to_quota(
            quantity(limits, "cpu", true).unwrap_or(0),
            super::rules::DEFAULT_CFS_PERIOD_US,
        )),
        memory_limit: Some(
            quantity(limits, "memory", false)
                .filter(|v| *v > 0)
                .unwrap_or(-1),
        ),
        ..LinuxResources::default()
    }
}

/// [`container_spec_resources`] of the (app or init) container `name` of
/// `pod`; `None` when the spec has no such container.
pub fn pod_container_spec_resources(pod: &Pod, name: &str) -> Option<LinuxResources> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|container| container.name == name)
        .map(container_spec_resources)
}

/// Filesystem reads the planner needs, injectable for tests.
pub trait NodeView {
    /// PIDs in the cgroup at `dir` (empty when unknown).
    fn pids(&self, dir: &Path) -> Vec<u32>;
    /// Names of the child cgroups of `dir`.
    fn children(&self, dir: &Path) -> Vec<String>;
    /// Whether a host application's cgroup may be written (no symlink or
    /// file on the way); a generated tree without links passes.
    fn check_host_app_dir(&self, _dir: &Path) -> Result<(), HostAppRefusal> {
        Ok(())
    }
}

/// Reads the real (or generated) cgroup tree.
pub struct CgroupNodeView<'a>(pub &'a CgroupLayout);

impl NodeView for CgroupNodeView<'_> {
    fn pids(&self, dir: &Path) -> Vec<u32> {
        super::server::read_pids(self.0, dir)
    }
    fn children(&self, dir: &Path) -> Vec<String> {
        // A pod directory that is a symlink lists someone else's cgroups.
        if super::scope::check_fs(self.0, dir).is_err() {
            return Vec::new();
        }
        let Ok(path) = self.0.controller_path(dir, Controller::Cpu) else {
            return Vec::new();
        };
        std::fs::read_dir(path)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
    fn check_host_app_dir(&self, dir: &Path) -> Result<(), HostAppRefusal> {
        super::hostapp::check_fs(self.0, dir)
    }
}

fn push_effects(out: &mut Vec<Desired>, level: &'static str, pod: &str, effects: Vec<SideEffect>) {
    out.extend(effects.into_iter().map(|effect| Desired {
        level,
        pod: pod.to_string(),
        effect,
    }));
}

/// Every decided effect for `pods`, by level (pure apart from `view`).
pub fn plan_round(dispatcher: &HookDispatcher, pods: &[Pod], view: &dyn NodeView) -> Vec<Desired> {
    let layout = dispatcher.layout();
    let mut desired = Vec::new();
    for tier in [QosTier::Guaranteed, QosTier::Burstable, QosTier::BestEffort] {
        let adjustment = dispatcher.run_qos_tier(tier);
        push_effects(&mut desired, "kubeqos", "", adjustment.side_effects);
    }
    for pod in pods {
        let Some((pod_context, _tier)) = pod_context_of(pod, layout) else {
            continue;
        };
        let pod_name = pod_context.meta.to_string();
        let Some(pod_dir) = pod_context.cgroup_dir(layout) else {
            continue;
        };
        // Pod level: the dispatcher already turns pod resources into writes.
        match dispatcher.run(
            HookStage::PreRunPodSandbox,
            &HookRequest::Pod(pod_context.clone()),
        ) {
            Ok(adjustment) => push_effects(&mut desired, "pod", &pod_name, adjustment.side_effects),
            Err(failure) => {
                tracing::debug!(pod = %pod_name, %failure, "pod-level decision failed; skipped this round")
            }
        }

        let mut app_dirs = Vec::new();
        for (name, id, resources) in started_containers(pod) {
            let mut container = ContainerContext {
                pod: pod_context.clone(),
                container: ContainerMeta {
                    name,
                    id,
                    ..ContainerMeta::default()
                },
                resources,
                ..ContainerContext::default()
            };
            let Some(dir) = container.cgroup_dir(layout) else {
                continue;
            };
            app_dirs.push(dir.clone());
            container.cgroup_dir = Some(dir.clone());
            container.pids = view.pids(&dir);
            for stage in [HookStage::PreCreateContainer, HookStage::PostStartContainer] {
                match dispatcher.run(stage, &HookRequest::Container(container.clone())) {
                    Ok(adjustment) => {
                        let mut effects = resource_writes(
                            &dir,
                            &without_oom(&adjustment.resources),
                            "container resources",
                        );
                        effects.extend(adjustment.side_effects);
                        push_effects(&mut desired, "container", &pod_name, effects);
                    }
                    Err(failure) => {
                        tracing::debug!(pod = %pod_name, %failure, "container decision failed; skipped this round")
                    }
                }
            }
        }

        // Sandbox level: other container cgroups of the pod take the cpuset.
        for child in view.children(&pod_dir) {
            let dir = pod_dir.join(&child);
            if app_dirs.contains(&dir) {
                continue;
            }
            let Some(id) = layout.container_id_from_dir_name(&child) else {
                continue;
            };
            let mut sandbox = ContainerContext {
                pod: pod_context.clone(),
                container: ContainerMeta {
                    name: String::new(),
                    id: id.to_string(),
                    sandbox: true,
                    ..ContainerMeta::default()
                },
                cgroup_dir: Some(dir.clone()),
                ..ContainerContext::default()
            };
            // Core scheduling cookies cover the sandbox's processes too
            // (upstream's sandbox-level reconciler); only those effects of
            // the post-start decision are kept here.
            if dispatcher.is_active("CoreSched") {
                sandbox.pids = view.pids(&dir);
                if let Ok(adjustment) = dispatcher.run(
                    HookStage::PostStartContainer,
                    &HookRequest::Container(sandbox.clone()),
                ) {
                    let cookies = adjustment
                        .side_effects
                        .into_iter()
                        .filter(|effect| matches!(effect, SideEffect::CoreSchedCookie { .. }))
                        .collect();
                    push_effects(&mut desired, "sandbox", &pod_name, cookies);
                }
            }
            if let Ok(adjustment) = dispatcher.run(
                HookStage::PreCreateContainer,
                &HookRequest::Container(sandbox),
            ) {
                let cpuset_only = LinuxResources {
                    cpuset_cpus: adjustment.resources.cpuset_cpus.clone(),
                    ..LinuxResources::default()
                };
                push_effects(
                    &mut desired,
                    "sandbox",
                    &pod_name,
                    resource_writes(&dir, &cpuset_only, "sandbox cpuset"),
                );
            }
        }
    }
    desired
}

/// A host application whose cgroup is left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAppRefused {
    pub name: String,
    pub refusal: HostAppRefusal,
}

/// The decided effects for the NodeSLO's host applications (level
/// `hostapp`), and the applications refused (pure apart from `view`).
pub fn plan_host_apps(
    dispatcher: &HookDispatcher,
    view: &dyn NodeView,
) -> (Vec<Desired>, Vec<HostAppRefused>) {
    let rules = dispatcher.rules();
    let mut desired = Vec::new();
    let mut refused = Vec::new();
    for (name, resolved) in
        super::hostapp::resolve_all(dispatcher.layout(), &rules.host_applications)
    {
        let checked = resolved.and_then(|app| {
            view.check_host_app_dir(&app.cgroup_dir)?;
            Ok(app)
        });
        match checked {
            Ok(app) => {
                let adjustment = dispatcher.run_host_app(&app);
                push_effects(
                    &mut desired,
                    "hostapp",
                    &format!("hostapp/{name}"),
                    adjustment.side_effects,
                );
            }
            Err(refusal) => refused.push(HostAppRefused { name, refusal }),
        }
    }
    (desired, refused)
}

fn without_oom(resources: &LinuxResources) -> LinuxResources {
    LinuxResources {
        oom_score_adj: None,
        ..resources.clone()
    }
}

/// Whether the value read back satisfies the decision. Unlimited memory
/// reads back as a page-rounded huge number on v1.
pub fn value_matches(desired: &CgroupValue, current: &CgroupValue) -> bool {
    match (desired, current) {
        (CgroupValue::Unlimited, CgroupValue::Int(v)) => *v >= (1i64 << 62),
        (a, b) => a == b,
    }
}

/// Compares and repairs (blocking: reads and writes kernel files).
pub fn repair_blocking(
    desired: Vec<Desired>,
    dispatcher: &HookDispatcher,
    applier: &SideEffectApplier,
) -> RoundReport {
    let layout = dispatcher.layout();
    let metrics = dispatcher.metrics();
    let mut report = RoundReport::default();
    let mut drifted: Vec<(&'static str, ResourceUpdate)> = Vec::new();
    let mut others: Vec<Desired> = Vec::new();
    for item in desired {
        let SideEffect::CgroupWrite {
            dir,
            resource,
            value,
            reason,
        } = &item.effect
        else {
            others.push(item);
            continue;
        };
        let Ok(current) = layout.read_value(dir, *resource) else {
            // Missing cgroup or unsupported file: nothing to repair now.
            continue;
        };
        report.checked += 1;
        if value_matches(value, &current) {
            continue;
        }
        tracing::info!(level = item.level, pod = %item.pod, dir = %display_dir(dir), resource = %resource, expected = %value, actual = %current, "runtime hook drift; repairing");
        match ResourceUpdate::new(
            dir.clone(),
            *resource,
            value.clone(),
            format!("reconcile: {reason}"),
        ) {
            Ok(update) => drifted.push((item.level, update)),
            Err(error) => {
                report.failed += 1;
                tracing::warn!(dir = %display_dir(dir), resource = %resource, %error, "invalid reconcile value");
            }
        }
    }
    if !drifted.is_empty() {
        let started = Instant::now();
        for (_, update) in &drifted {
            // The executor would skip a value it wrote recently; the file says otherwise.
            applier.executor().forget(&update.dir);
        }
        let updates: Vec<ResourceUpdate> = drifted.iter().map(|(_, u)| u.clone()).collect();
        let result = applier
            .executor()
            .apply_blocking(updates, std::time::SystemTime::now());
        let elapsed = started.elapsed();
        for (level, update) in &drifted {
            let write = result
                .writes
                .iter()
                .rev()
                .find(|w| w.resource == update.resource && w.dir == update.dir);
            let ok = matches!(
                write.map(|w| &w.status),
                Some(WriteStatus::Written | WriteStatus::SkippedUnchanged)
            );
            if let Some(metrics) = metrics {
                metrics.observe_reconcile(level, update.resource.name(), ok, elapsed);
                if ok {
                    metrics.count_drift_repaired(level, update.resource.name());
                }
            }
            if ok {
                report.repaired += 1;
            } else {
                report.failed += 1;
                tracing::warn!(dir = %display_dir(&update.dir), resource = %update.resource, status = ?write.map(|w| &w.status), "runtime hook drift repair failed");
            }
        }
    }
    if !others.is_empty() {
        let effects: Vec<SideEffect> = others.iter().map(|d| d.effect.clone()).collect();
        for (item, result) in others.iter().zip(applier.apply_blocking(&effects)) {
            match &result.status {
                EffectStatus::Applied => {
                    report.applied_effects += 1;
                    if let Some(metrics) = metrics {
                        metrics.count_drift_repaired(item.level, &item.effect.resource_label());
                    }
                }
                EffectStatus::PermissionDenied {
                    lowering: true,
                    error,
                } => {
                    if let SideEffect::OomScoreAdj { pid, value } = &item.effect {
                        report.oom_lowering_denied.push((*pid, *value));
                    }
                    if let Some(metrics) = metrics {
                        metrics.count_permission_denied(&item.effect.resource_label());
                    }
                    tracing::debug!(pod = %item.pod, %error, "cannot lower oom_score_adj without CAP_SYS_RESOURCE");
                }
                EffectStatus::Failed(error) => {
                    report.failed += 1;
                    tracing::warn!(pod = %item.pod, effect = %item.effect.summary(), error = %crate::bounds::Bounded(error), "runtime hook effect failed");
                }
                _ => {}
            }
        }
    }
    report
}

/// Resctrl groups of pods that are gone (when the Resctrl hook is active).
pub fn resctrl_gc(dispatcher: &HookDispatcher, applier: &SideEffectApplier, pods: &[Pod]) -> usize {
    if !dispatcher.is_active("Resctrl") {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(applier.resctrl_root()) else {
        return 0;
    };
    let names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    let live: Vec<&str> = pods
        .iter()
        .filter(|pod| {
            pod.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(apis::extension::ANNOTATION_RESCTRL))
        })
        .filter_map(|pod| pod.metadata.uid.as_deref())
        .collect();
    let stale = stale_groups(names.iter().map(String::as_str), &live);
    let count = stale.len();
    for result in applier.apply_blocking(&stale) {
        tracing::info!(effect = ?result.effect, status = ?result.status, "resctrl group of a gone pod removed");
    }
    count
}

/// Rebuilds the node rules from the states informer and the kubelet's
/// CPU manager checkpoint below `kubelet_root` (blocking: reads that file).
pub fn refresh_rules(
    dispatcher: &HookDispatcher,
    states: &StatesInformer,
    online_cpus: Option<&koord_common::units::CpuSet>,
    kubelet_root: Option<&Path>,
) {
    let node = states.node();
    let node_slo = states.node_slo();
    let pods = states.pods();
    // Absent, unreadable or malformed: no kubelet information, as in the
    // NodeResourceTopology report.
    let (checkpoint, checkpoint_problem) =
        match kubelet_root.map(crate::statesinformer::cpumanager::read_cpu_manager_checkpoint) {
            Some(Ok(checkpoint)) => (checkpoint, None),
            Some(Err(error)) => (None, Some(error.to_string())),
            None => (None, None),
        };
    let (mut rules, problems) = NodeRules::build(
        node.as_deref(),
        node_slo.as_deref(),
        pods.as_ref().map(|p| p.pods.as_slice()),
        online_cpus,
        checkpoint.as_ref(),
    );
    rules.resctrl_info = dispatcher.rules().resctrl_info.clone();
    for problem in checkpoint_problem.into_iter().chain(problems) {
        tracing::debug!(%problem, "runtime hook rule input skipped");
    }
    dispatcher.set_rules(rules);
}

/// The periodic reconciler.
pub struct Reconciler {
    pub dispatcher: Arc<HookDispatcher>,
    pub applier: SideEffectApplier,
    pub states: StatesInformer,
    pub interval: Duration,
    pub online_cpus: Option<koord_common::units::CpuSet>,
    /// The kubelet's root directory (`--var-lib-kubelet-dir`); its
    /// `cpu_manager_state` names the CPUs the static policy pinned.
    pub kubelet_root: Option<std::path::PathBuf>,
    /// Refused `oom_score_adj` lowerings already reported (warned once each).
    pub reported_denials: std::sync::Mutex<std::collections::BTreeSet<(u32, i64)>>,
    /// Host application refusals already warned about: (name, refusal).
    pub reported_host_app_refusals: std::sync::Mutex<std::collections::BTreeSet<(String, String)>>,
}

impl Reconciler {
    /// Rebuilds the hook rules (blocking: reads the kubelet checkpoint).
    pub fn refresh_rules_blocking(&self) {
        refresh_rules(
            &self.dispatcher,
            &self.states,
            self.online_cpus.as_ref(),
            self.kubelet_root.as_deref(),
        );
    }

    /// [`Self::refresh_rules_blocking`] off the async reactor.
    async fn refresh_rules(self: &Arc<Self>) {
        let this = Arc::clone(self);
        if let Err(error) = tokio::task::spawn_blocking(move || this.refresh_rules_blocking()).await
        {
            tracing::warn!(%error, "runtime hook rules refresh did not finish");
        }
    }

    /// One round over the current pods (blocking).
    pub fn round_blocking(&self) -> RoundReport {
        self.refresh_rules_blocking();
        let Some(snapshot) = self.states.pods() else {
            return RoundReport::default();
        };
        let layout = self.dispatcher.layout().clone();
        let view = CgroupNodeView(&layout);
        let mut desired = plan_round(&self.dispatcher, &snapshot.pods, &view);
        let (host_app_effects, refused) = plan_host_apps(&self.dispatcher, &view);
        desired.extend(host_app_effects);
        self.report_host_app_refusals(&refused);
        let report = repair_blocking(desired, &self.dispatcher, &self.applier);
        resctrl_gc(&self.dispatcher, &self.applier, &snapshot.pods);
        let mut reported = self.reported_denials.lock_or_recover();
        for (pid, value) in &report.oom_lowering_denied {
            if reported.insert((*pid, *value)) {
                tracing::warn!(
                    pid,
                    value,
                    "cannot lower oom_score_adj: the kernel refused with EPERM (koordlet lacks CAP_SYS_RESOURCE)"
                );
            }
        }
        // Forget processes that are gone so the set stays small.
        reported.retain(|entry| report.oom_lowering_denied.contains(entry));
        drop(reported);
        report
    }

    /// Warns once per refused host application (and refusal), and sets
    /// the refused / enforced gauges.
    fn report_host_app_refusals(&self, refused: &[HostAppRefused]) {
        let total = self
            .dispatcher
            .rules()
            .host_applications
            .len()
            .min(super::hostapp::MAX_HOST_APPS);
        if let Some(metrics) = self.dispatcher.metrics() {
            metrics.set_host_apps(total.saturating_sub(refused.len()), refused.len());
        }
        let mut reported = self.reported_host_app_refusals.lock_or_recover();
        let current: std::collections::BTreeSet<(String, String)> = refused
            .iter()
            .map(|r| (r.name.clone(), r.refusal.to_string()))
            .collect();
        for (name, refusal) in &current {
            if !reported.contains(&(name.clone(), refusal.clone())) {
                tracing::warn!(app = %name, %refusal, "host application cgroup refused; its QoS is not enforced");
            }
        }
        *reported = current;
    }

    /// Runs rounds every interval (and refreshes rules when the pods change)
    /// until shutdown.
    pub async fn run(self, shutdown: Shutdown) {
        let this = Arc::new(self);
        let mut pods = this.states.subscribe_pods();
        let mut node = this.states.subscribe_node();
        let mut node_slo = this.states.subscribe_node_slo();
        let mut ticker = tokio::time::interval(this.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = ticker.tick() => {
                    let round = Arc::clone(&this);
                    match tokio::task::spawn_blocking(move || round.round_blocking()).await {
                        Ok(report) if report.repaired > 0 || report.failed > 0 => {
                            tracing::info!(?report, "runtime hook reconcile round")
                        }
                        Ok(report) => tracing::debug!(?report, "runtime hook reconcile round"),
                        Err(error) => tracing::warn!(%error, "runtime hook reconcile round did not finish"),
                    }
                }
                // New pods (share pool), Node (annotations) or NodeSLO (CPU QoS,
                // suppress policy) change the decisions of the next call.
                changed = pods.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    this.refresh_rules().await;
                }
                changed = node.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    this.refresh_rules().await;
                }
                changed = node_slo.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    this.refresh_rules().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::bare_caps;
    use crate::runtimehooks::hooks::{HookOptions, all_hooks};
    use crate::system::cgroup::{CgroupDriver, CgroupResource, CgroupVersion};
    use k8s_openapi::api::core::v1::{ContainerStatus, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    struct FakeView;

    impl NodeView for FakeView {
        fn pids(&self, _dir: &Path) -> Vec<u32> {
            vec![42]
        }
        fn children(&self, dir: &Path) -> Vec<String> {
            if dir.ends_with("podlsr") {
                vec!["app".into(), "pause".into()]
            } else {
                Vec::new()
            }
        }
    }

    fn lsr_pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("lsr".into()),
                namespace: Some("default".into()),
                uid: Some("lsr".into()),
                labels: Some([("koordinator.sh/qosClass".to_string(), "LSR".to_string())].into()),
                annotations: Some(
                    [(
                        "scheduling.koordinator.sh/resource-status".to_string(),
                        r#"{"cpuset":"1"}"#.to_string(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                qos_class: Some("Guaranteed".into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "main".into(),
                    container_id: Some("containerd://app".into()),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn plan_covers_pod_container_and_sandbox_levels() {
        let mut caps = bare_caps();
        caps.cgroup.controllers = vec!["cpu".into(), "cpuset".into(), "memory".into()];
        let dispatcher = HookDispatcher::new(
            all_hooks(&HookOptions::default()),
            &caps,
            CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
            FailurePolicyConfig::default(),
        );
        let mut no_uid = lsr_pod();
        no_uid.metadata.uid = None;
        let desired = plan_round(&dispatcher, &[lsr_pod(), no_uid], &FakeView);
        let find = |level: &str, dir: &str, resource: CgroupResource| {
            desired.iter().find_map(|d| match &d.effect {
                SideEffect::CgroupWrite {
                    dir: d_dir,
                    resource: r,
                    value,
                    ..
                } if d.level == level && d_dir == Path::new(dir) && *r == resource => {
                    Some(value.clone())
                }
                _ => None,
            })
        };
        let one = CgroupResource::CpusetCpus.parse_value("1").unwrap();
        assert_eq!(
            find("pod", "kubepods/podlsr", CgroupResource::CpuCfsQuota),
            Some(CgroupValue::Unlimited)
        );
        assert_eq!(
            find(
                "container",
                "kubepods/podlsr/app",
                CgroupResource::CpusetCpus
            ),
            Some(one.clone())
        );
        assert_eq!(
            find(
                "container",
                "kubepods/podlsr/app",
                CgroupResource::CpuCfsQuota
            ),
            Some(CgroupValue::Unlimited)
        );
        assert_eq!(
            find(
                "sandbox",
                "kubepods/podlsr/pause",
                CgroupResource::CpusetCpus
            ),
            Some(one)
        );
        // The sandbox only takes the cpuset.
        assert_eq!(
            find(
                "sandbox",
                "kubepods/podlsr/pause",
                CgroupResource::CpuCfsQuota
            ),
            None
        );
        // No group identity on this node: no QoS-tier writes.
        assert!(desired.iter().all(|d| d.level != "kubeqos"));
    }

    #[test]
    fn huge_spec_limits_do_not_overflow_the_pod_sums() {
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
        let huge = |name: &str, memory: &str, cpu: &str| Container {
            name: name.into(),
            resources: Some(k8s_openapi::api::core::v1::ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity(cpu.to_string()))].into()),
                limits: Some(
                    [
                        ("cpu".to_string(), Quantity(cpu.to_string())),
                        ("memory".to_string(), Quantity(memory.to_string())),
                    ]
                    .into(),
                ),
                ..Default::default()
            }),
            ..Container::default()
        };
        let mut pod = lsr_pod();
        pod.spec = Some(PodSpec {
            containers: vec![huge("a", "8Ei", "9e15"), huge("b", "8Ei", "9e15")],
            ..PodSpec::default()
        });
        let (context, _) = pod_context_of(&pod, &layout).unwrap();
        assert_eq!(context.resources.memory_limit, Some(-1));
        assert_eq!(context.resources.cpu_quota, Some(-1));
        assert_eq!(
            context.resources.cpu_shares,
            Some(crate::runtimehooks::hooks::cpumath::CPU_SHARES_MAX)
        );
        // Sums that fit stay exact.
        pod.spec = Some(PodSpec {
            containers: vec![huge("a", "1Gi", "500m"), huge("b", "1Gi", "250m")],
            ..PodSpec::default()
        });
        let (context, _) = pod_context_of(&pod, &layout).unwrap();
        assert_eq!(context.resources.memory_limit, Some(2 << 30));
        assert_eq!(context.resources.cpu_quota, Some(75_000));
        assert_eq!(
            pod_container_spec_resources(&pod, "b").and_then(|r| r.cpu_quota),
            Some(25_000)
        );
        assert_eq!(pod_container_spec_resources(&pod, "c"), None);
    }

    #[test]
    fn unlimited_memory_reads_back_as_a_huge_number() {
        assert!(value_matches(
            &CgroupValue::Unlimited,
            &CgroupValue::Int(9_223_372_036_854_771_712)
        ));
        assert!(!value_matches(
            &CgroupValue::Unlimited,
            &CgroupValue::Int(512)
        ));
        assert!(value_matches(&CgroupValue::Int(5), &CgroupValue::Int(5)));
    }

    #[test]
    fn rules_refresh_reads_the_kubelet_checkpoint() {
        use crate::statesinformer::{PodsOrigin, PodsSnapshot, RequiredSyncs};
        let dispatcher = HookDispatcher::new(
            all_hooks(&HookOptions::default()),
            &bare_caps(),
            CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
            FailurePolicyConfig::default(),
        );
        let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
        let mut pinned = lsr_pod();
        pinned.metadata.uid = Some("u-g".into());
        pinned.metadata.labels = None;
        pinned.metadata.annotations = None;
        states.set_pods(PodsSnapshot {
            pods: vec![lsr_pod(), pinned],
            origin: PodsOrigin::File,
            synced_at: std::time::SystemTime::now(),
        });
        let online: koord_common::units::CpuSet = "0-3".parse().unwrap();
        let kubelet = koord_common::testing::TempDir::new("hook-rules-kubelet").unwrap();
        let state_file = kubelet.path().join("cpu_manager_state");
        let refresh = || {
            refresh_rules(&dispatcher, &states, Some(&online), Some(kubelet.path()));
            let rules = dispatcher.rules();
            (
                rules.ls_share_pool.as_ref().map(ToString::to_string),
                rules.kubelet_static_cpu_policy,
            )
        };

        std::fs::write(
            &state_file,
            r#"{"policyName":"static","defaultCpuSet":"0-1","entries":{"u-g":{"main":"2-3"}}}"#,
        )
        .unwrap();
        // LSR holds 1, the kubelet pinned 2-3.
        assert_eq!(refresh(), (Some("0".to_string()), true));

        // Malformed or absent: no kubelet information, as in the report.
        std::fs::write(&state_file, "{").unwrap();
        assert_eq!(refresh(), (Some("0,2-3".to_string()), false));
        std::fs::remove_file(&state_file).unwrap();
        assert_eq!(refresh(), (Some("0,2-3".to_string()), false));
    }
}
