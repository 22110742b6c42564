//! Runtime hooks: container parameters decided at creation time and kept
//! right afterwards.
//!
//! - [`protocol`]: the transport-neutral hook API and [`protocol::HookDispatcher`];
//! - [`hooks`]: the hooks and their feature gates;
//! - [`apply`]: applies decisions that are not part of a runtime reply;
//! - [`rules`]: node-level inputs rebuilt from the states informer;
//! - [`server`]: the RuntimeHookService gRPC server and registration file;
//! - [`reconciler`]: periodic re-application and drift repair;
//! - [`config`]: flags and the failure-policy file;
//! - [`metrics`]: per-hook calls, errors, latency and repaired drift;
//! - [`nri`]: the NRI plugin transport.
//!
//! User documentation: `koordlet/docs/runtimehooks.md`.

pub mod apply;
pub mod config;
pub mod hooks;
pub mod metrics;
pub mod nri;
pub mod protocol;
pub mod reconciler;
pub mod rules;
pub mod server;

use std::path::PathBuf;
use std::sync::Arc;

use koord_common::{HealthRegistry, MetricsRegistry, Shutdown};

pub use config::RuntimeHooksArgs;

use self::apply::SideEffectApplier;
use self::hooks::resctrl::ResctrlNodeInfo;
use self::protocol::HookDispatcher;
use crate::capabilities::NodeCapabilities;
use crate::resourceexecutor::ResourceExecutor;
use crate::statesinformer::StatesInformer;
use crate::system::SystemArgs;
use crate::system::cgroup::CgroupLayout;
use crate::system::units::CpuSet;

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
        let gates = hooks::parse_feature_gates(&args.feature_gates)?;
        let options = hooks::HookOptions {
            disable_unset_cpu_quota: args.disable_unset_cpu_quota,
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
        let applier = SideEffectApplier::new(executor, &system.proc_root_dir, resctrl_root);
        Ok(Self {
            dispatcher: Arc::new(dispatcher),
            applier,
        })
    }

    /// Starts the RuntimeHookService server (when a socket is configured)
    /// and the reconciler. A server that cannot bind fails its readiness
    /// check (`runtime-hooks-server`) instead of stopping koordlet.
    /// `kubelet_root` holds the kubelet's CPU manager checkpoint.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        args: &RuntimeHooksArgs,
        standalone: bool,
        states: &StatesInformer,
        online_cpus: Option<CpuSet>,
        kubelet_root: Option<PathBuf>,
        health: &HealthRegistry,
        shutdown: &Shutdown,
    ) -> Result<(), config::ConfigError> {
        if let Some(socket) = args.server_socket(standalone)? {
            let readiness = health.readiness_status(
                SERVER_READINESS_CHECK,
                Err(format!("binding {}", socket.display())),
            );
            let config = server::ServerConfig {
                socket: socket.clone(),
                registration_dir: args.config_path.clone(),
                host_endpoint: args.host_endpoint.clone(),
                proxy_failure_policy: args.failure_policy,
            };
            let service =
                server::HookService::new(Arc::clone(&self.dispatcher), self.applier.clone());
            if let Err(error) = server::start(&config, service, readiness.clone(), shutdown.clone())
            {
                tracing::error!(%error, "runtime hooks server not started");
                readiness.set_failing(error.to_string());
            }
        } else {
            tracing::info!(
                "runtime hooks server disabled in standalone mode (set --runtime-hooks-addr to serve)"
            );
        }
        let reconciler = reconciler::Reconciler {
            dispatcher: Arc::clone(&self.dispatcher),
            applier: self.applier.clone(),
            states: states.clone(),
            interval: args.reconcile_interval,
            online_cpus,
            kubelet_root,
            reported_denials: Default::default(),
        };
        tokio::spawn(reconciler.run(shutdown.clone()));
        Ok(())
    }
}

/// The node's online CPUs from the capabilities' topology.
pub fn online_cpus(caps: &NodeCapabilities) -> Option<CpuSet> {
    let ids = caps.cpu_topology.iter().map(|cpu| cpu.cpu);
    CpuSet::from_ids(ids).ok().filter(|set| !set.is_empty())
}
