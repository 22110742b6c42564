//! koord-manager: turns cluster policy into per-node policy and runs the
//! admission webhooks: the SLO and quota-profile controllers (leader only),
//! the webhooks, health/metrics serving and the `preview` subcommand.

pub mod args;
pub mod cert;
pub mod cli;
pub mod colocation_profile;
pub mod controllers;
pub mod metrics;
pub mod own_writes;
pub mod preview;
pub mod quota_profile;
pub mod reflector;
pub mod rest_config;
pub mod slo_controller;
pub mod webhook;

use koord_common::ShutdownReason;
use koord_common::process::{Component, ComponentContext, connect_required_cluster};

pub use args::{ManagerArgs, ManagerCommand};
pub use controllers::DEFAULT_LEASE_NAME;

pub const COMPONENT: Component = Component {
    name: "koord-manager",
    metric_prefix: "koord_manager",
};

/// Readiness check of the controllers: passes on a standby replica and on the
/// leader once its caches are synced and the first pass is done.
pub const CONTROLLERS_CHECK: &str = "controllers";

/// How long in-flight admission requests may take to finish at shutdown.
const WEBHOOK_DRAIN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

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
