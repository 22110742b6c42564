//! koord-manager: turns cluster policy into per-node policy and runs the
//! admission webhooks: the SLO and quota-profile controllers (leader only),
//! the webhooks, health/metrics serving and the `preview` subcommand.

pub mod cert;
pub mod cli;
pub mod colocation_profile;
pub mod controllers;
pub mod metrics;
pub mod preview;
pub mod quota_profile;
pub mod rest_config;
pub mod slo_controller;
pub mod webhook;

use clap::Parser;
use koord_common::process::{Component, ComponentContext, connect_required_cluster};
use koord_common::{ClusterArgs, Endpoints, ListenerSpec, LogArgs, ServeAt, ShutdownReason};

pub const COMPONENT: Component = Component {
    name: "koord-manager",
    metric_prefix: "koord_manager",
};

/// Upstream's leader-election lease (`koordinator-manager`); the elector
/// itself lives in [`koord_common::leader`].
pub const DEFAULT_LEASE_NAME: &str = "koordinator-manager";

/// Readiness check of the controllers: passes on a standby replica and on the
/// leader once its caches are synced and the first pass is done.
pub const CONTROLLERS_CHECK: &str = "controllers";

/// How long in-flight admission requests may take to finish at shutdown.
const WEBHOOK_DRAIN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Command-line flags; names and defaults follow upstream `cmd/koord-manager`.
/// Parse with [`cli::parse_args`], which also takes upstream's Go spellings
/// and its inert flags. A flag given twice keeps the last value, as Go's
/// flag package does.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "koord-manager",
    version = koord_common::cli::version(),
    about = "Koordinator manager: SLO controllers and admission webhooks",
    args_override_self = true
)]
pub struct ManagerArgs {
    /// The address the metrics endpoint binds to ("0" disables it).
    #[arg(long = "metrics-addr", default_value = ":8080", value_name = "ADDR")]
    pub metrics_addr: ServeAt,

    /// The address the /healthz and /readyz endpoints bind to ("0" disables them).
    #[arg(
        long = "health-probe-addr",
        default_value = ":8000",
        value_name = "ADDR"
    )]
    pub health_probe_addr: ServeAt,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(flatten)]
    pub rest_config: rest_config::RestConfigArgs,

    #[command(flatten)]
    pub log: LogArgs,

    #[command(flatten)]
    pub controller: controllers::ControllerArgs,

    #[command(flatten)]
    pub colocation_profile: colocation_profile::ColocationProfileArgs,

    #[command(flatten)]
    pub webhook: webhook::WebhookArgs,

    #[command(subcommand)]
    pub command: Option<ManagerCommand>,
}

/// Subcommands; without one the manager runs.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ManagerCommand {
    /// Print the NodeSLOs and batch/mid resources the manager would write for
    /// a snapshot (no cluster needed).
    Preview(preview::PreviewArgs),
}

impl ManagerArgs {
    pub fn listeners(&self) -> Vec<ListenerSpec> {
        let mut specs = Vec::new();
        if let Some(addr) = self.metrics_addr.addr() {
            specs.push(ListenerSpec::new(addr, Endpoints::METRICS));
        }
        if let Some(addr) = self.health_probe_addr.addr() {
            specs.push(ListenerSpec::new(addr, Endpoints::HEALTH));
        }
        specs
    }
}

/// Runs until a signal or a failure; `Err` means start-up failed.
pub async fn run(args: ManagerArgs) -> anyhow::Result<ShutdownReason> {
    let context = ComponentContext::new(COMPONENT);
    koord_common::spawn_signal_handler(context.shutdown.clone())?;
    let controllers_check = context.health.readiness_status(
        CONTROLLERS_CHECK,
        Err("not connected to the Kubernetes API server yet".into()),
    );
    let controller_metrics = metrics::ControllerMetrics::register(&context.metrics);
    let cluster_check = context.register_cluster_check();

    let listeners = args.listeners();
    let server = if listeners.is_empty() {
        None
    } else {
        Some(context.start_server(listeners).await?)
    };

    match connect_required_cluster(&context, &args.cluster.options(), &cluster_check).await {
        Ok(Some(cluster)) => {
            let client = rest_config::apply(cluster.client.clone(), &args.rest_config);
            // Webhooks serve on every replica, leader or not.
            let webhooks = if args.webhook.should_serve() {
                let slo_config = webhook::configmap::SloConfigRef {
                    namespace: args.controller.config_namespace.clone(),
                    name: args.controller.slo_config_name.clone(),
                    options: apis::configuration::ValidationOptions {
                        require_node_strategy_names: args.controller.require_node_strategy_names(),
                    },
                };
                match webhook::start(&context, &args.webhook, client.clone(), slo_config).await {
                    Ok(webhooks) => Some(webhooks),
                    Err(err) => {
                        context
                            .shutdown
                            .trigger(ShutdownReason::Failed(err.to_string()));
                        context.wait_for_shutdown(server).await;
                        return Err(err.into());
                    }
                }
            } else {
                None
            };
            // Upstream runs this controller when both its name in --controllers and its gate say so.
            let colocation_profile = (args
                .controller
                .is_enabled(colocation_profile::CONTROLLER_NAME)
                && args
                    .webhook
                    .feature_gates
                    .enabled(colocation_profile::FEATURE_GATE))
            .then(|| args.colocation_profile.clone());
            let mut controller_args = args.controller.clone();
            controller_args.sync_gpu_shared_resource = args
                .webhook
                .feature_gates
                .enabled("EnableSyncGPUSharedResource");
            tokio::spawn(controllers::run_controllers(
                client,
                controller_args,
                colocation_profile,
                controller_metrics,
                controllers_check,
                context.shutdown.clone(),
            ));
            let reason = context.wait_for_shutdown(server).await;
            if let Some(webhooks) = webhooks {
                webhooks.server.wait(WEBHOOK_DRAIN_GRACE).await;
            }
            Ok(reason)
        }
        Ok(None) => Ok(context.wait_for_shutdown(server).await),
        Err(err) => {
            context
                .shutdown
                .trigger(ShutdownReason::Failed(err.to_string()));
            context.wait_for_shutdown(server).await;
            Err(err.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_upstream() {
        let args = ManagerArgs::try_parse_from(["koord-manager"]).unwrap();
        assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(args.health_probe_addr.to_string(), "0.0.0.0:8000");
        assert_eq!(
            args.cluster.cluster_connect_timeout,
            std::time::Duration::from_secs(10)
        );
        assert_eq!(args.listeners().len(), 2);
    }

    #[test]
    fn a_zero_sync_period_from_upstream_manifests_keeps_the_default_pass_period() {
        let zero = ManagerArgs::try_parse_from(["koord-manager", "--sync-period=0"]).unwrap();
        assert_eq!(
            zero.controller.full_pass_period(),
            std::time::Duration::from_secs(60)
        );
        let five = ManagerArgs::try_parse_from(["koord-manager", "--sync-period=5m"]).unwrap();
        assert_eq!(
            five.controller.full_pass_period(),
            std::time::Duration::from_secs(300)
        );
    }

    #[test]
    fn upstream_manifest_flags_parse() {
        let argv = koord_common::cli::normalize_go_flag_args(
            [
                "koord-manager",
                "--metrics-addr=:8080",
                "--health-probe-addr=:8000",
                "--logtostderr=true",
                "--v=4",
            ]
            .map(std::ffi::OsString::from),
        );
        let args = ManagerArgs::try_parse_from(argv).unwrap();
        assert_eq!(
            args.log.effective_level(),
            koord_common::logging::LogLevel::Debug
        );
    }

    #[test]
    fn zero_disables_a_listener_and_bad_addresses_are_rejected() {
        let args = ManagerArgs::try_parse_from(["koord-manager", "--metrics-addr=0"]).unwrap();
        assert_eq!(args.metrics_addr, ServeAt::Disabled);
        assert_eq!(args.listeners().len(), 1);
        let err =
            ManagerArgs::try_parse_from(["koord-manager", "--metrics-addr=8080"]).unwrap_err();
        assert!(err.to_string().contains(":8080"), "{err}");
    }
}
