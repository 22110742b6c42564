//! The [`HookDispatcher`]: runs the active hooks of a stage in name order,
//! merges their [`Adjustment`]s and applies the failure policy; checks a
//! request's cgroup scope first and counts everything in [`HookMetrics`].
//! Above the protocol types and the hooks, below the transports (gRPC server,
//! NRI plugin, reconciler). See [`super::protocol`] for how a transport uses it.

use koord_common::sync::RwLockExt;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::capabilities::NodeCapabilities;
use crate::runtimehooks::metrics::HookMetrics;
use crate::runtimehooks::protocol::{
    Adjustment, FailurePolicy, FailurePolicyConfig, Hook, HookEnv, HookFailure, HookRequest,
    HookStage, NodeFeatures, resource_writes,
};
use crate::runtimehooks::rules::NodeRules;
use crate::system::cgroup::{CgroupLayout, QosTier};

/// Whether a hook runs, and why not.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    pub name: String,
    pub enabled: bool,
    /// False when this build does not implement the hook's effect (see
    /// [`Hook::not_implemented`]); such a hook is always unsupported.
    pub implemented: bool,
    /// `None` when supported; else why not: "not implemented in this
    /// build: ..." or "missing <capabilities>".
    pub unsupported: Option<String>,
    /// Parts of a supported hook that do nothing on this node:
    /// "<part>: the node lacks <capability>".
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<String>,
    pub stages: Vec<String>,
}

struct HookEntry {
    hook: Arc<dyn Hook>,
    enabled: bool,
    implemented: bool,
    unsupported: Option<String>,
    degraded: Vec<String>,
}

impl HookEntry {
    fn active(&self) -> bool {
        self.enabled && self.unsupported.is_none()
    }
}

/// Runs the active hooks of a stage and applies the failure policy. Cheap to
/// share (`Arc`); rules are swapped in by the rule updater.
pub struct HookDispatcher {
    hooks: Vec<HookEntry>,
    policy: FailurePolicyConfig,
    disabled_stages: BTreeSet<HookStage>,
    layout: CgroupLayout,
    rules: RwLock<Arc<NodeRules>>,
    metrics: Option<HookMetrics>,
    features: NodeFeatures,
}

impl HookDispatcher {
    /// `hooks` with whether each is enabled (feature gate); hooks whose
    /// required capabilities `caps` lacks are kept but inactive, logged once
    /// and reported by [`HookDispatcher::statuses`] and the metrics.
    pub fn new(
        hooks: Vec<(Arc<dyn Hook>, bool)>,
        caps: &NodeCapabilities,
        layout: CgroupLayout,
        policy: FailurePolicyConfig,
    ) -> Self {
        let mut entries: Vec<HookEntry> = hooks
            .into_iter()
            .map(|(hook, enabled)| {
                let mut missing: Vec<String> = hook
                    .required_capabilities()
                    .iter()
                    .filter(|cap| !cap.is_met(caps))
                    .map(|cap| cap.name())
                    .collect();
                let partial = hook.partial_capabilities();
                let degraded: Vec<String> = partial
                    .iter()
                    .filter(|(cap, _)| !cap.is_met(caps))
                    .map(|(cap, part)| format!("{part}: the node lacks {}", cap.name()))
                    .collect();
                if !partial.is_empty() && degraded.len() == partial.len() {
                    missing.extend(partial.iter().map(|(cap, _)| cap.name()));
                }
                let not_implemented = hook.not_implemented();
                let unsupported = match (not_implemented, missing.is_empty()) {
                    (Some(what), true) => Some(format!("not implemented in this build: {what}")),
                    (Some(what), false) => Some(format!(
                        "not implemented in this build: {what} (the node also lacks {})",
                        missing.join(", ")
                    )),
                    (None, false) => Some(format!("missing {}", missing.join(", "))),
                    (None, true) => None,
                };
                match (enabled, not_implemented, &unsupported) {
                    (true, Some(_), Some(reason)) => tracing::warn!(
                        hook = hook.name(),
                        reason = %reason,
                        "runtime hook {} is enabled but not implemented in this build; it changes nothing on any node",
                        hook.name()
                    ),
                    (true, None, Some(reason)) => tracing::warn!(
                        hook = hook.name(),
                        reason = %reason,
                        "runtime hook {} is enabled but unsupported on this node; it changes nothing",
                        hook.name()
                    ),
                    (true, None, None) if !degraded.is_empty() => tracing::warn!(
                        hook = hook.name(),
                        degraded = %degraded.join("; "),
                        "runtime hook {} is enabled; part of it is unsupported on this node and does nothing",
                        hook.name()
                    ),
                    _ => {}
                }
                let degraded = if unsupported.is_some() {
                    Vec::new()
                } else {
                    degraded
                };
                HookEntry {
                    hook,
                    enabled,
                    implemented: not_implemented.is_none(),
                    unsupported,
                    degraded,
                }
            })
            .collect();
        entries.sort_by(|a, b| a.hook.name().cmp(b.hook.name()));
        Self {
            hooks: entries,
            policy,
            disabled_stages: BTreeSet::new(),
            layout,
            rules: RwLock::new(Arc::new(NodeRules::default())),
            metrics: None,
            features: NodeFeatures::of(caps),
        }
    }

    /// Stages that run no hook (upstream `--runtime-hooks-disable-stages`).
    pub fn with_disabled_stages(mut self, stages: impl IntoIterator<Item = HookStage>) -> Self {
        self.disabled_stages = stages.into_iter().collect();
        self
    }

    pub fn with_metrics(self, metrics: HookMetrics) -> Self {
        for entry in &self.hooks {
            metrics.set_hook_state(
                entry.hook.name(),
                entry.enabled,
                entry.unsupported.is_none(),
                entry.implemented,
            );
        }
        Self {
            metrics: Some(metrics),
            ..self
        }
    }

    pub fn metrics(&self) -> Option<&HookMetrics> {
        self.metrics.as_ref()
    }

    pub fn layout(&self) -> &CgroupLayout {
        &self.layout
    }

    pub fn failure_policy(&self) -> &FailurePolicyConfig {
        &self.policy
    }

    /// Hook names in the failure policy config that no hook has.
    pub fn unknown_policy_hooks(&self) -> Vec<String> {
        let known: BTreeSet<&str> = self
            .hooks
            .iter()
            .map(|e| e.hook.name())
            .chain([crate::runtimehooks::scope::SCOPE_HOOK])
            .collect();
        let mut unknown: Vec<String> = self
            .policy
            .hooks
            .keys()
            .map(String::as_str)
            .chain(
                self.policy
                    .hook_stages
                    .keys()
                    .filter_map(|key| key.split_once('/').map(|(hook, _)| hook)),
            )
            .filter(|hook| !known.contains(hook))
            .map(str::to_string)
            .collect();
        unknown.sort();
        unknown.dedup();
        unknown
    }

    pub fn set_rules(&self, rules: NodeRules) {
        let mut slot = self.rules.write_or_recover();
        *slot = Arc::new(rules);
    }

    pub fn rules(&self) -> Arc<NodeRules> {
        Arc::clone(&self.rules.read_or_recover())
    }

    pub fn env(&self) -> HookEnv {
        HookEnv {
            layout: self.layout.clone(),
            rules: self.rules(),
            features: self.features,
        }
    }

    /// Stages with at least one active hook, minus disabled ones (what the
    /// registration file advertises).
    pub fn stages(&self) -> Vec<HookStage> {
        HookStage::ALL
            .into_iter()
            .filter(|stage| !self.disabled_stages.contains(stage))
            .filter(|stage| {
                self.hooks
                    .iter()
                    .any(|e| e.active() && e.hook.stages().contains(stage))
            })
            .collect()
    }

    /// Whether the hook named `name` is enabled and supported.
    pub fn is_active(&self, name: &str) -> bool {
        self.hooks
            .iter()
            .any(|entry| entry.hook.name() == name && entry.active())
    }

    pub fn statuses(&self) -> Vec<HookStatus> {
        self.hooks
            .iter()
            .map(|entry| HookStatus {
                name: entry.hook.name().to_string(),
                enabled: entry.enabled,
                implemented: entry.implemented,
                unsupported: entry.unsupported.clone(),
                degraded: entry.degraded.clone(),
                stages: entry
                    .hook
                    .stages()
                    .iter()
                    .map(|s| s.as_str().to_string())
                    .collect(),
            })
            .collect()
    }

    /// Runs every active hook of `stage` on `request`. A failing hook under
    /// `Fail` stops the run with `Err`; under `Ignore` it is recorded in
    /// [`Adjustment::ignored_failures`] and the others still run.
    ///
    /// First the cgroups the request names are checked (pure part of
    /// [`super::scope`]); a refused request runs no hook and follows the
    /// failure policy of [`crate::runtimehooks::scope::SCOPE_HOOK`]. Transports that touch
    /// the node use [`HookDispatcher::run_checked`] to add the filesystem
    /// half.
    pub fn run(&self, stage: HookStage, request: &HookRequest) -> Result<Adjustment, HookFailure> {
        self.run_checked(stage, request, |_, _| Ok(()))
    }

    /// [`HookDispatcher::run`] with `fs_check` run on every directory of the
    /// validated scope (the shell passes [`crate::runtimehooks::scope::check_fs`]).
    pub fn run_checked(
        &self,
        stage: HookStage,
        request: &HookRequest,
        fs_check: impl Fn(&CgroupLayout, &Path) -> Result<(), crate::runtimehooks::scope::ScopeRefusal>,
    ) -> Result<Adjustment, HookFailure> {
        let mut merged = Adjustment::default();
        if self.disabled_stages.contains(&stage) {
            return Ok(merged);
        }
        let pod = request.pod();
        let container_dir = match request {
            HookRequest::Container(container) => container.cgroup_dir.as_deref(),
            HookRequest::Pod(_) => None,
        };
        let checked = crate::runtimehooks::scope::check_request(
            &pod.cgroup_parent,
            &pod.meta.uid,
            container_dir,
            &self.layout,
        )
        .and_then(|scope| scope.dirs().try_for_each(|dir| fs_check(&self.layout, dir)));
        if let Err(refusal) = checked {
            return self.refuse(stage, request, &refusal);
        }
        let env = self.env();
        for entry in &self.hooks {
            if !entry.active() || !entry.hook.stages().contains(&stage) {
                continue;
            }
            let name = entry.hook.name();
            let started = Instant::now();
            let mut out = Adjustment::default();
            let result = match request {
                HookRequest::Pod(pod) => entry.hook.pod(stage, pod, &env, &mut out),
                HookRequest::Container(container) => {
                    entry.hook.container(stage, container, &env, &mut out)
                }
            };
            if let Some(metrics) = &self.metrics {
                metrics.observe_call(name, stage, result.is_ok(), started.elapsed());
            }
            match result {
                Ok(()) => merged.merge_from(out),
                Err(error) => {
                    let failure = HookFailure {
                        hook: name.to_string(),
                        stage,
                        message: crate::bounds::cut(error.to_string()),
                    };
                    let error = &failure.message;
                    let pod = &request.pod().meta;
                    match self.policy.policy_for(name, stage) {
                        FailurePolicy::Fail => {
                            tracing::warn!(hook = name, %stage, pod = %pod, error = %error, "runtime hook failed; refusing the call (failure policy Fail)");
                            return Err(failure);
                        }
                        FailurePolicy::Ignore => {
                            tracing::warn!(hook = name, %stage, pod = %pod, error = %error, "runtime hook failed; proceeding (failure policy Ignore)");
                            merged.ignored_failures.push(failure);
                        }
                    }
                }
            }
        }
        // The kubelet creates the pod cgroup before the sandbox, and runtimes
        // do not apply sandbox resources to it: write pod-level values here.
        if stage == HookStage::PreRunPodSandbox
            && !merged.resources.is_empty()
            && let Some(dir) = request.pod().cgroup_dir(&self.layout)
        {
            let writes = resource_writes(&dir, &merged.resources, "pod resources");
            merged.side_effects.splice(0..0, writes);
        }
        Ok(merged)
    }

    /// A request whose cgroups were refused: counted by reason, logged once
    /// (cut), and then what the failure policy of
    /// [`crate::runtimehooks::scope::SCOPE_HOOK`] says: `Fail` refuses the runtime call,
    /// `Ignore` lets it proceed with no change from koordlet.
    fn refuse(
        &self,
        stage: HookStage,
        request: &HookRequest,
        refusal: &crate::runtimehooks::scope::ScopeRefusal,
    ) -> Result<Adjustment, HookFailure> {
        use crate::runtimehooks::scope::SCOPE_HOOK;
        if let Some(metrics) = &self.metrics {
            metrics.count_scope_refused(refusal.reason.as_str());
        }
        let failure = HookFailure {
            hook: SCOPE_HOOK.to_string(),
            stage,
            message: crate::bounds::cut(refusal.to_string()),
        };
        let pod = &request.pod().meta;
        match self.policy.policy_for(SCOPE_HOOK, stage) {
            FailurePolicy::Fail => {
                tracing::warn!(%stage, pod = %pod, reason = %refusal.reason, error = %failure.message, "cgroup outside the pod's scope; refusing the call (failure policy Fail)");
                Err(failure)
            }
            FailurePolicy::Ignore => {
                tracing::warn!(%stage, pod = %pod, reason = %refusal.reason, error = %failure.message, "cgroup outside the pod's scope; the call proceeds without koordlet's changes (failure policy Ignore)");
                Ok(Adjustment {
                    ignored_failures: vec![failure],
                    ..Adjustment::default()
                })
            }
        }
    }

    /// Runs the active hooks' QoS-tier decisions (reconciler).
    /// The merged decision of the active hooks for a host application;
    /// a hook that cannot decide is logged and left out.
    pub fn run_host_app(&self, app: &crate::runtimehooks::hostapp::HostAppContext) -> Adjustment {
        let env = self.env();
        let mut merged = Adjustment::default();
        for entry in self.hooks.iter().filter(|e| e.active()) {
            let mut out = Adjustment::default();
            match entry.hook.host_app(app, &env, &mut out) {
                Ok(()) => merged.merge_from(out),
                Err(error) => {
                    tracing::warn!(hook = entry.hook.name(), app = %crate::bounds::Bounded(&app.name), %error, "host application decision failed")
                }
            }
        }
        merged
    }

    pub fn run_qos_tier(&self, tier: QosTier) -> Adjustment {
        let env = self.env();
        let mut merged = Adjustment::default();
        for entry in self.hooks.iter().filter(|e| e.active()) {
            let mut out = Adjustment::default();
            match entry.hook.qos_tier(tier, &env, &mut out) {
                Ok(()) => merged.merge_from(out),
                Err(error) => {
                    tracing::warn!(hook = entry.hook.name(), %tier, %error, "QoS tier decision failed")
                }
            }
        }
        merged
    }
}
