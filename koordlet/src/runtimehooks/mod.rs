//! Runtime hooks: container parameters decided at creation time and kept
//! right afterwards.
//!
//! Layered bottom-up; a module names only modules on its own or a lower
//! line (`hack/check-module-cycles.py` keeps the files free of circles):
//!
//! 0. below this module: feature gates (`crate::features`), capabilities,
//!    the CPU topology (`koord_common::units::CpuTopology`) and the pure share-pool
//!    arithmetic (`crate::statesinformer::nodetopo::pools`);
//! 1. node inputs: [`rules`] (node-level inputs rebuilt from the states
//!    informer), [`resctrlnode`] (the resctrl root and group naming),
//!    [`scope`] (which cgroups a request may touch, issue 16) and
//!    [`hostapp`] (the NodeSLO's host applications);
//! 2. [`protocol`]: the transport-neutral types and the [`protocol::Hook`]
//!    trait;
//! 3. [`hooks`]: the hooks, their shared CPU arithmetic and feature gates;
//! 4. [`dispatcher`] (runs a stage's hooks under the failure policy),
//!    [`metrics`] and [`apply`] (applies decisions that are not part of a
//!    runtime reply);
//! 5. transports: [`server`] (RuntimeHookService gRPC server and
//!    registration file), [`nri`] (the NRI plugin) and [`reconciler`]
//!    (periodic re-application and drift repair), with [`config`] (their
//!    flags and the failure-policy file); this file wires them up.
//!
//! User documentation: `koordlet/docs/runtimehooks.md`.

pub mod apply;
pub mod config;
pub mod dispatcher;
pub mod hooks;
pub mod hostapp;
pub mod metrics;
pub mod nri;
pub mod protocol;
pub mod reconciler;
pub mod resctrlnode;
pub mod rules;
pub mod scope;
pub mod server;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use koord_common::{HealthRegistry, MetricsRegistry, Shutdown};

pub use config::RuntimeHooksArgs;

use self::apply::SideEffectApplier;
use self::dispatcher::HookDispatcher;
use self::resctrlnode::ResctrlNodeInfo;
use crate::capabilities::NodeCapabilities;
use crate::resourceexecutor::ResourceExecutor;
use crate::statesinformer::StatesInformer;
use crate::system::SystemArgs;
use crate::system::cgroup::CgroupLayout;
use koord_common::units::CpuSet;

/// Readiness check name of the RuntimeHookService server.
pub const SERVER_READINESS_CHECK: &str = "runtime-hooks-server";

/// The shared decision engine; transports (server, NRI, reconciler) use
/// the same dispatcher and applier.
#[derive(Clone)]
pub struct RuntimeHooks {
    pub dispatcher: Arc<HookDispatcher>,
    pub applier: SideEffectApplier,
}

impl RuntimeHooks {
    /// Builds the dispatcher from flags and capabilities and registers the
    /// hook metrics.
    pub fn build(
        args: &RuntimeHooksArgs,
        caps: &NodeCapabilities,
        layout: CgroupLayout,
        executor: ResourceExecutor,
        system: &SystemArgs,
        metrics: &MetricsRegistry,
        node_name: &str,
    ) -> Result<Self, config::ConfigError> {
        let gates = crate::features::parse_feature_gates(&args.feature_gates())?;
        let options = hooks::HookOptions {
            disable_unset_cpu_quota: args.disable_unset_cpu_quota,
            sys_root: system.sys_root_dir.clone(),
        };
        let dispatcher = HookDispatcher::new(
            hooks::gated_hooks(&options, &gates),
            caps,
            layout,
            args.failure_policies()?,
        )
        .with_disabled_stages(args.disable_stages.iter().copied())
        .with_metrics(metrics::HookMetrics::register(metrics, node_name));
        for hook in dispatcher.unknown_policy_hooks() {
            tracing::warn!(
                hook,
                "the failure policy config names a hook that does not exist"
            );
        }
        let resctrl_root = system.resctrl_root();
        if caps.resctrl.supported {
            match ResctrlNodeInfo::read(&resctrl_root) {
                Ok(info) => {
                    let mut rules = (*dispatcher.rules()).clone();
                    rules.resctrl_info = Some(info);
                    dispatcher.set_rules(rules);
                }
                Err(error) => {
                    tracing::warn!(%error, "cannot read the resctrl root; resctrl groups get no schemata")
                }
            }
        }
        for status in dispatcher.statuses() {
            tracing::info!(hook = %status.name, enabled = status.enabled, unsupported = ?status.unsupported, "runtime hook");
        }
        let mut applier = SideEffectApplier::new(executor, &system.proc_root_dir, resctrl_root);
        if caps.core_sched {
            applier = applier.with_cookie_manager(hooks::coresched::cookie::CookieManager::new(
                Box::new(hooks::coresched::cookie::PrctlCoreSched),
            ));
        }
        Ok(Self {
            dispatcher: Arc::new(dispatcher),
            applier,
        })
    }

    /// Starts the runtime hooks: the RuntimeHookService server (when a
    /// socket is configured), the NRI plugin and the reconciler.
    ///
    /// As upstream (`koordlet.go` starts the runtime hooks after the states
    /// informer synced), they are held back until every source `states`
    /// requires has synced once and the rules are rebuilt from it, so that
    /// the NRI Synchronize (run once per connection), the first
    /// CreateContainer and the first proxy call see the node's rules (LS
    /// share pool, system-QoS CPUs, kubelet policy, normalization ratio, BE
    /// suppression). Unlike upstream, the wait ends after
    /// `--runtime-hooks-states-sync-timeout` (logged with what is still
    /// pending; the hooks then start with the rules known so far and the
    /// reconciler corrects running containers once the informer syncs).
    ///
    /// Returns at once; metrics and readiness checks are registered before
    /// it returns. A server that cannot bind fails its readiness check
    /// (`runtime-hooks-server`) instead of stopping koordlet.
    /// `kubelet_root` holds the kubelet's CPU manager checkpoint.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        args: &RuntimeHooksArgs,
        nri_args: &nri::NriArgs,
        standalone: bool,
        states: &StatesInformer,
        online_cpus: Option<CpuSet>,
        kubelet_root: Option<PathBuf>,
        metrics: &MetricsRegistry,
        health: &HealthRegistry,
        shutdown: &Shutdown,
    ) -> Result<nri::NriStatus, config::ConfigError> {
        let server = match args.server_socket(standalone)? {
            Some(socket) => {
                let readiness = health.readiness_status(
                    SERVER_READINESS_CHECK,
                    Err(format!(
                        "waiting for the states informer's first sync before binding {}",
                        socket.display()
                    )),
                );
                let config = server::ServerConfig {
                    socket,
                    registration_dir: args.config_path.clone(),
                    host_endpoint: args.host_endpoint.clone(),
                    proxy_failure_policy: args.failure_policy,
                };
                Some((config, readiness))
            }
            None => {
                tracing::info!(
                    "runtime hooks server disabled in standalone mode (set --runtime-hooks-addr to serve)"
                );
                None
            }
        };
        let nri_status = nri::register(nri_args, metrics, health);
        let reconciler = reconciler::Reconciler {
            dispatcher: Arc::clone(&self.dispatcher),
            applier: self.applier.clone(),
            states: states.clone(),
            interval: args.reconcile_interval,
            online_cpus,
            kubelet_root,
            reported_denials: Default::default(),
            reported_host_app_refusals: Default::default(),
        };
        let plugin = nri::NriPlugin::new(
            Arc::clone(&self.dispatcher),
            Some(self.applier.clone()),
            nri_status.clone(),
        )
        .with_states(states.clone());
        let hooks = self.clone();
        let states = states.clone();
        let nri_args = nri_args.clone();
        let timeout = args.states_sync_timeout();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            if wait_for_states(&states, timeout, &shutdown).await == StatesWait::Stopped {
                return;
            }
            // The first decisions must see the synced rules.
            let refreshed = tokio::task::spawn_blocking(move || {
                reconciler.refresh_rules_blocking();
                reconciler
            })
            .await;
            let reconciler = match refreshed {
                Ok(reconciler) => Some(reconciler),
                Err(error) => {
                    tracing::error!(%error, "runtime hook rules refresh did not finish; the reconciler is not started");
                    None
                }
            };
            if let Some((config, readiness)) = server {
                let service =
                    server::HookService::new(Arc::clone(&hooks.dispatcher), hooks.applier.clone());
                if let Err(error) =
                    server::start(&config, service, readiness.clone(), shutdown.clone())
                {
                    tracing::error!(%error, "runtime hooks server not started");
                    readiness.set_failing(error.to_string());
                }
            }
            nri::spawn(&nri_args, plugin, shutdown.clone());
            if let Some(reconciler) = reconciler {
                reconciler.run(shutdown).await;
            }
        });
        Ok(nri_status)
    }
}

/// How the wait for the states informer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatesWait {
    /// Every required source synced.
    Synced,
    /// The timeout passed; these sources were still pending.
    TimedOut(Vec<&'static str>),
    /// koordlet is stopping.
    Stopped,
}

/// How often the wait looks at the informer (as client-go's
/// `WaitForCacheSync`).
const STATES_POLL: Duration = Duration::from_millis(100);

/// Waits until every source `states` requires has synced once, at most
/// `timeout` (`None`: as long as it takes, upstream's behaviour), logging
/// what it waits for and how the wait ended.
pub async fn wait_for_states(
    states: &StatesInformer,
    timeout: Option<Duration>,
    shutdown: &Shutdown,
) -> StatesWait {
    let started = tokio::time::Instant::now();
    let mut pending = states.pending_syncs();
    if pending.is_empty() {
        return StatesWait::Synced;
    }
    let limit = timeout.map_or_else(|| "no timeout".to_string(), |t| format!("timeout {t:?}"));
    tracing::info!(
        pending = %pending.join(", "),
        "runtime hooks (server, NRI plugin, reconciler) wait for the states informer's first sync ({limit})"
    );
    loop {
        tokio::select! {
            _ = shutdown.wait() => return StatesWait::Stopped,
            _ = tokio::time::sleep(STATES_POLL) => {}
        }
        pending = states.pending_syncs();
        if pending.is_empty() {
            tracing::info!(
                waited = ?started.elapsed(),
                "states informer synced; starting the runtime hooks"
            );
            return StatesWait::Synced;
        }
        if timeout.is_some_and(|timeout| started.elapsed() >= timeout) {
            tracing::warn!(
                pending = %pending.join(", "),
                waited = ?started.elapsed(),
                "the states informer has not synced {}; starting the runtime hooks anyway with the node rules known so far (the first NRI Synchronize and new containers may miss the share pool, system-QoS CPUs, kubelet policy or normalization ratio; the reconciler corrects running containers once it syncs)",
                pending.join(", ")
            );
            return StatesWait::TimedOut(pending);
        }
    }
}

/// The node's online CPUs from the capabilities' topology.
pub fn online_cpus(caps: &NodeCapabilities) -> Option<CpuSet> {
    let ids = caps.cpu_topology.iter().map(|cpu| cpu.cpu);
    CpuSet::from_ids(ids).ok().filter(|set| !set.is_empty())
}
