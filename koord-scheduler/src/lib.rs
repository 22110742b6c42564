//! koord-scheduler: places pods with Koordinator policies. This build provides
//! the process shell only: flags, health/metrics serving and the cluster
//! connection; the scheduling framework and plugins arrive with their own changes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use clap::Parser;
use koord_common::process::{Component, ComponentContext, connect_required_cluster};
use koord_common::{ClusterArgs, Endpoints, ListenAddr, ListenerSpec, LogArgs, ShutdownReason};

/// Metric names use kube-scheduler's `scheduler_` namespace, as upstream does.
pub const COMPONENT: Component = Component {
    name: "koord-scheduler",
    metric_prefix: "scheduler",
};

/// Readiness check that stays failing until scheduling exists.
pub const SCHEDULER_CHECK: &str = "scheduler";

/// Upstream's default insecure serving port for /healthz and /metrics.
pub const DEFAULT_PORT: u16 = 10251;

/// Command-line flags; names and defaults follow upstream `cmd/koord-scheduler`.
#[derive(Debug, Clone, Parser)]
#[command(name = "koord-scheduler", version = koord_common::cli::version(), about = "Koordinator scheduler")]
pub struct SchedulerArgs {
    /// IP address to serve plain HTTP (/healthz, /readyz, /metrics) on with --port.
    #[arg(long = "address", default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED), value_name = "IP")]
    pub address: IpAddr,

    /// Port to serve plain HTTP on; 0 turns plain HTTP serving off (as upstream).
    #[arg(long = "port", default_value_t = DEFAULT_PORT, value_name = "PORT")]
    pub port: u16,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

impl SchedulerArgs {
    pub fn listeners(&self) -> Vec<ListenerSpec> {
        if self.port == 0 {
            return Vec::new();
        }
        let addr = ListenAddr::new(SocketAddr::new(self.address, self.port));
        vec![ListenerSpec::new(addr, Endpoints::ALL)]
    }
}

/// Runs until a signal or a failure; `Err` means start-up failed.
pub async fn run(args: SchedulerArgs) -> anyhow::Result<ShutdownReason> {
    let context = ComponentContext::new(COMPONENT);
    koord_common::spawn_signal_handler(context.shutdown.clone())?;
    context.mark_not_implemented(SCHEDULER_CHECK);
    let cluster_check = context.register_cluster_check();

    let listeners = args.listeners();
    let server = if listeners.is_empty() {
        tracing::info!("--port=0: not serving /healthz, /readyz or /metrics");
        None
    } else {
        Some(context.start_server(listeners).await?)
    };

    match connect_required_cluster(&context, &args.cluster.options(), &cluster_check).await {
        Ok(Some(_cluster)) => {
            tracing::warn!(
                "koord-scheduler scheduling is not implemented in this build yet; \
                 /readyz reports the {SCHEDULER_CHECK:?} check as failing"
            );
            Ok(context.wait_for_shutdown(server).await)
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
        let args = SchedulerArgs::try_parse_from(["koord-scheduler"]).unwrap();
        let listeners = args.listeners();
        assert_eq!(listeners.len(), 1);
        assert_eq!(listeners[0].addr.to_string(), "0.0.0.0:10251");
    }

    #[test]
    fn port_zero_disables_serving_and_bad_ip_is_rejected() {
        let args = SchedulerArgs::try_parse_from(["koord-scheduler", "--port=0"]).unwrap();
        assert!(args.listeners().is_empty());
        assert!(SchedulerArgs::try_parse_from(["koord-scheduler", "--address=not-an-ip"]).is_err());
        assert!(SchedulerArgs::try_parse_from(["koord-scheduler", "--port=70000"]).is_err());
        let args = SchedulerArgs::try_parse_from([
            "koord-scheduler",
            "--address",
            "::1",
            "--port",
            "1234",
        ])
        .unwrap();
        assert_eq!(args.listeners()[0].addr.to_string(), "[::1]:1234");
    }
}
