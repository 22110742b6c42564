//! The manager's command-line flags: its own and those of the controllers,
//! the ClusterColocationProfile controller and the webhooks it runs;
//! [`crate::cli`] parses process arguments into them.

use clap::Parser;
use koord_common::{ClusterArgs, Endpoints, ListenerSpec, LogArgs, ServeAt};

use crate::{colocation_profile, controllers, preview, rest_config, webhook};

/// Command-line flags; names and defaults follow upstream `cmd/koord-manager`.
/// Parse with [`crate::cli::parse_args`], which also takes upstream's Go spellings
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

#[cfg(test)]
mod tests {
    use koord_common::ServeAt;

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
