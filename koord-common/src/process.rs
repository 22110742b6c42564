//! The pieces every binary wires the same way: identity, registries, shutdown,
//! the health/metrics server and the "needs a cluster" start-up check.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use crate::cluster::{ClusterError, ClusterOptions, ConnectedCluster};
use crate::health::{HealthRegistry, StatusCheck};
use crate::metrics::{MetricsRegistry, register_process_metrics};
use crate::server::{ListenerSpec, RunningServer, ServerError, ServerState, start_server};
use crate::shutdown::{Shutdown, ShutdownReason};

/// Reason reported by readiness checks for parts that later work will provide.
pub const NOT_IMPLEMENTED: &str = "not implemented in this build";

/// Name of the readiness check that tracks the API server connection.
pub const CLUSTER_CHECK: &str = "cluster";

/// How long open HTTP connections may linger once shutdown starts.
pub const SERVER_DRAIN_GRACE: Duration = Duration::from_secs(5);

/// A binary's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Component {
    /// Binary name, e.g. `koord-manager`.
    pub name: &'static str,
    /// Metric namespace, e.g. `koord_manager` or `koordlet`.
    pub metric_prefix: &'static str,
}

/// Registries and the shutdown token, created once per process.
#[derive(Clone)]
pub struct ComponentContext {
    pub component: Component,
    pub health: HealthRegistry,
    pub metrics: MetricsRegistry,
    pub shutdown: Shutdown,
    pub started_at: SystemTime,
}

impl ComponentContext {
    /// Creates the registries and records the process start-time and build-info metrics.
    pub fn new(component: Component) -> Self {
        let started_at = SystemTime::now();
        let metrics = MetricsRegistry::new(component.metric_prefix);
        register_process_metrics(&metrics, started_at, crate::cli::version());
        Self {
            component,
            health: HealthRegistry::new(),
            metrics,
            shutdown: Shutdown::new(),
            started_at,
        }
    }

    pub fn server_state(&self) -> ServerState {
        ServerState {
            health: self.health.clone(),
            metrics: self.metrics.clone(),
        }
    }

    pub async fn start_server(
        &self,
        specs: Vec<ListenerSpec>,
    ) -> Result<RunningServer, ServerError> {
        start_server(&self.server_state(), specs, &self.shutdown).await
    }

    /// Registers the `cluster` readiness check, failing until [`connect_required_cluster`]
    /// succeeds. Call it before starting the server so no probe sees the process without it.
    pub fn register_cluster_check(&self) -> StatusCheck {
        self.health.readiness_status(
            CLUSTER_CHECK,
            Err("not connected to the Kubernetes API server yet".into()),
        )
    }

    /// Registers a readiness check that fails with [`NOT_IMPLEMENTED`].
    pub fn mark_not_implemented(&self, check_name: &str) -> StatusCheck {
        self.health
            .readiness_status(check_name, Err(NOT_IMPLEMENTED.to_string()))
    }

    /// Waits for shutdown, lets the server drain, and returns why the process stops.
    pub async fn wait_for_shutdown(&self, server: Option<RunningServer>) -> ShutdownReason {
        let reason = self.shutdown.wait().await;
        tracing::debug!(component = self.component.name, %reason, "draining before exit");
        if let Some(server) = server
            && let Err(err) = server.wait(SERVER_DRAIN_GRACE).await
        {
            tracing::warn!(error = %err, "health/metrics server did not stop cleanly");
        }
        reason
    }
}

/// A cluster is required but could not be reached.
#[derive(Debug, thiserror::Error)]
#[error("{source}; {component} needs a cluster")]
pub struct NeedsClusterError {
    pub component: &'static str,
    #[source]
    pub source: ClusterError,
}

/// Connects to the API server, updating the check from
/// [`ComponentContext::register_cluster_check`]. Returns `Ok(None)` when shutdown fires first.
pub async fn connect_required_cluster(
    context: &ComponentContext,
    options: &ClusterOptions,
    readiness: &StatusCheck,
) -> Result<Option<ConnectedCluster>, NeedsClusterError> {
    readiness.set_failing("connecting to the Kubernetes API server");
    tracing::info!(timeout = ?options.timeout, "connecting to the Kubernetes API server");
    let connected = tokio::select! {
        result = crate::cluster::connect(options) => result,
        _ = context.shutdown.wait() => return Ok(None),
    };
    match connected {
        Ok(cluster) => {
            readiness.set_passing();
            tracing::info!(
                api_server = %cluster.api_server,
                server_version = %cluster.server_version,
                origin = %cluster.origin,
                "connected to the Kubernetes API server at {} ({})",
                cluster.api_server,
                cluster.server_version,
            );
            Ok(Some(cluster))
        }
        Err(source) => {
            readiness.set_failing(source.to_string());
            Err(NeedsClusterError {
                component: context.component.name,
                source,
            })
        }
    }
}

/// Logs how the process ends and maps it to an exit status: 0 for a signal or
/// requested stop, 1 for a failure.
pub fn exit_code(component: &Component, outcome: anyhow::Result<ShutdownReason>) -> ExitCode {
    match outcome {
        Ok(reason) if !reason.is_failure() => {
            tracing::info!(component = component.name, %reason, "{} stopped: {reason}", component.name);
            ExitCode::SUCCESS
        }
        Ok(reason) => {
            tracing::error!(component = component.name, %reason, "{} stopped: {reason}", component.name);
            ExitCode::FAILURE
        }
        Err(err) => {
            // Our error messages already embed their causes; print each cause once.
            let message = crate::cluster::error_chain(err.as_ref());
            tracing::error!(
                component = component.name,
                "{} cannot run: {message}",
                component.name
            );
            ExitCode::FAILURE
        }
    }
}

/// Installs logging for a binary; on a bad `RUST_LOG` prints why to stderr and
/// returns the exit status to use.
pub fn init_process_logging(
    component: &Component,
    args: &crate::logging::LogArgs,
) -> Result<(), ExitCode> {
    match crate::logging::init_logging(args) {
        Ok(_) => {
            tracing::info!(
                component = component.name,
                version = crate::cli::version(),
                "starting {} {}",
                component.name,
                crate::cli::version()
            );
            Ok(())
        }
        Err(err) => {
            eprintln!("{}: {err}", component.name);
            Err(ExitCode::from(2))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Probe;

    #[tokio::test]
    async fn context_starts_alive_and_not_implemented_blocks_readiness() {
        let context = ComponentContext::new(Component {
            name: "koord-test",
            metric_prefix: "koord_test",
        });
        assert!(context.health.evaluate(Probe::Liveness).await.is_healthy());
        context.mark_not_implemented("controllers");
        let report = context.health.evaluate(Probe::Readiness).await;
        assert!(
            report
                .render(false)
                .contains("[-]controllers failed: not implemented in this build")
        );
        let body = context.metrics.encode().unwrap();
        assert!(body.contains("koord_test_build_info"), "{body}");
        assert!(body.contains("process_start_time_seconds"), "{body}");
    }
}
