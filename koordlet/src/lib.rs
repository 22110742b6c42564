//! koordlet: the node agent. This build provides the process shell only:
//! flags, node identity, health/metrics serving and the cluster connection;
//! the states informer, metrics advisor, QoS manager and runtime hooks arrive
//! with their own changes.

pub mod capabilities;
pub mod metriccache;
pub mod metricsadvisor;
pub mod resourceexecutor;
pub mod statesinformer;
pub mod system;

use std::ffi::OsString;
use std::time::SystemTime;

use clap::Parser;
use koord_common::metrics::{FloatGauge, MetricsRegistry, unix_seconds};
use koord_common::process::{Component, ComponentContext, connect_required_cluster};
use koord_common::{ClusterArgs, Endpoints, ListenAddr, ListenerSpec, LogArgs, ShutdownReason};
use prometheus_client::metrics::family::Family;

pub const COMPONENT: Component = Component {
    name: "koordlet",
    metric_prefix: "koordlet",
};

/// Environment variable naming this node; upstream's DaemonSet sets it from `spec.nodeName`.
pub const NODE_NAME_ENV: &str = "NODE_NAME";

/// Readiness check that stays failing until the agent's modules exist.
pub const DAEMON_CHECK: &str = "daemon";

/// Command-line flags; names and defaults follow upstream `cmd/koordlet`
/// (Go-style single-dash spellings such as `-addr=:9316` are accepted too).
#[derive(Debug, Clone, Parser)]
#[command(name = "koordlet", version = koord_common::cli::version(), about = "Koordinator node agent")]
pub struct KoordletArgs {
    /// Address of the koordlet HTTP server (/metrics, /healthz, /readyz).
    #[arg(long = "addr", default_value = ":9316", value_name = "ADDR")]
    pub addr: ListenAddr,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(flatten)]
    pub system: system::SystemArgs,

    #[command(flatten)]
    pub log: LogArgs,

    /// A one-shot command instead of the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands; without one koordlet runs as the node daemon.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Print what this node's kernel supports (cgroup layout, CPU burst, PSI,
    /// core scheduling, resctrl, topology…) and exit; needs no cluster.
    Capabilities(capabilities::CapabilitiesArgs),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeNameError {
    #[error(
        "the {NODE_NAME_ENV} environment variable is not set; koordlet must know which node it runs on \
         (its DaemonSet sets it from spec.nodeName)"
    )]
    Missing,
    #[error("the {NODE_NAME_ENV} environment variable is not valid UTF-8: {0:?}")]
    NotUtf8(OsString),
    #[error("the {NODE_NAME_ENV} environment variable {0:?} is not a valid node name")]
    Invalid(String),
}

/// Validates the node name taken from the environment.
pub fn node_name_from(value: Option<OsString>) -> Result<String, NodeNameError> {
    let value = value.ok_or(NodeNameError::Missing)?;
    let name = value.into_string().map_err(NodeNameError::NotUtf8)?;
    let name = name.trim().to_string();
    if name.is_empty() {
        return Err(NodeNameError::Missing);
    }
    // Node names are DNS subdomains: lowercase alphanumerics, '-' and '.', at most 253 characters.
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let valid_ends = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if name.len() > 253 || !valid_chars || !valid_ends {
        return Err(NodeNameError::Invalid(name));
    }
    Ok(name)
}

/// Registers `koordlet_start_time{node}` as upstream does (seconds since the epoch).
pub fn register_start_time(metrics: &MetricsRegistry, node_name: &str, started_at: SystemTime) {
    let start_time = Family::<Vec<(String, String)>, FloatGauge>::default();
    start_time
        .get_or_create(&vec![("node".to_string(), node_name.to_string())])
        .set(unix_seconds(started_at));
    metrics.register_component(|registry| {
        registry.register("start_time", "the start time of koordlet", start_time);
    });
}

/// Runs until a signal or a failure; `Err` means start-up failed.
pub async fn run(
    args: KoordletArgs,
    node_name_env: Option<OsString>,
) -> anyhow::Result<ShutdownReason> {
    let node_name = node_name_from(node_name_env)?;
    tracing::info!(node = %node_name, "koordlet runs on node {node_name}");

    let context = ComponentContext::new(COMPONENT);
    register_start_time(&context.metrics, &node_name, context.started_at);
    koord_common::spawn_signal_handler(context.shutdown.clone())?;
    context.mark_not_implemented(DAEMON_CHECK);
    let cluster_check = context.register_cluster_check();

    let server = context
        .start_server(vec![ListenerSpec::new(args.addr, Endpoints::ALL)])
        .await?;

    match connect_required_cluster(&context, &args.cluster.options(), &cluster_check).await {
        Ok(Some(_cluster)) => {
            tracing::warn!(
                "the koordlet modules (states informer, metrics advisor, QoS manager, runtime hooks) \
                 are not implemented in this build yet; /readyz reports the {DAEMON_CHECK:?} check as failing"
            );
            Ok(context.wait_for_shutdown(Some(server)).await)
        }
        Ok(None) => Ok(context.wait_for_shutdown(Some(server)).await),
        Err(err) => {
            context
                .shutdown
                .trigger(ShutdownReason::Failed(err.to_string()));
            context.wait_for_shutdown(Some(server)).await;
            Err(err.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn default_address_matches_upstream_and_go_spelling_parses() {
        let args = KoordletArgs::try_parse_from(["koordlet"]).unwrap();
        assert_eq!(args.addr.to_string(), "0.0.0.0:9316");
        let argv = koord_common::cli::normalize_go_flag_args(
            [
                "koordlet",
                "-addr=127.0.0.1:9999",
                "--logtostderr=true",
                "--v=4",
            ]
            .map(OsString::from),
        );
        let args = KoordletArgs::try_parse_from(argv).unwrap();
        assert_eq!(args.addr.to_string(), "127.0.0.1:9999");
    }

    #[test]
    fn node_name_is_required_and_validated() {
        assert_eq!(node_name_from(None), Err(NodeNameError::Missing));
        assert_eq!(
            node_name_from(Some("  ".into())),
            Err(NodeNameError::Missing)
        );
        assert_eq!(
            node_name_from(Some("node-1.example".into())),
            Ok("node-1.example".to_string())
        );
        assert!(matches!(
            node_name_from(Some("Node_1".into())),
            Err(NodeNameError::Invalid(_))
        ));
        assert!(matches!(
            node_name_from(Some("-node".into())),
            Err(NodeNameError::Invalid(_))
        ));
        assert!(NodeNameError::Missing.to_string().contains("NODE_NAME"));
    }

    #[test]
    fn start_time_metric_matches_upstream_name_and_label() {
        let metrics = MetricsRegistry::new("koordlet");
        register_start_time(
            &metrics,
            "node-a",
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        );
        let body = metrics.encode().unwrap();
        assert!(
            body.contains("koordlet_start_time{node=\"node-a\"} 1700000000.0"),
            "{body}"
        );
    }
}
