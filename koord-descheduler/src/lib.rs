//! koord-descheduler: moves pods off nodes that stay hot (LowNodeLoad) so
//! that the scheduler can place them on cold ones.
//!
//! This build holds the decision core ([`loadaware`]), the protective
//! filters and limits of the MigrationController ([`evictor`]), upstream's
//! configuration file ([`config`]) and the offline `plan` command
//! ([`plan`]), and the MigrationController that carries PodMigrationJobs
//! out ([`migration`], entry point [`migration::run_migration_controller`]). Run without a subcommand, the binary loads and validates its
//! configuration, serves health and metrics and connects to the cluster; the
//! live descheduling loop and the MigrationController's PodMigrationJob
//! handling are not in this build, and its readiness check says so.

pub mod cli;
pub mod config;
pub mod evictor;
pub mod loadaware;
pub mod migration;
pub mod model;
pub mod nodefit;
pub mod plan;
pub mod snapshot;

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use koord_common::process::{Component, ComponentContext, connect_required_cluster};
use koord_common::{ClusterArgs, Endpoints, ListenerSpec, LogArgs, ServeAt, ShutdownReason};

use crate::config::Configuration;

pub const COMPONENT: Component = Component {
    name: "koord-descheduler",
    metric_prefix: "koord_descheduler",
};

/// Readiness check of the descheduling loop, which this build lacks.
pub const DESCHEDULER_CHECK: &str = "descheduler";

/// Command-line flags; names and defaults follow upstream `cmd/koord-descheduler`.
/// Parse with [`cli::parse_args`], which also takes upstream's Go spellings
/// and its inert flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "koord-descheduler",
    about = "Koordinator descheduler: LowNodeLoad rebalancing (offline plan in this build)",
    disable_version_flag = true,
    args_override_self = true
)]
pub struct DeschedulerArgs {
    /// The path to the DeschedulerConfiguration file.
    #[arg(long = "config", value_name = "PATH", global = true)]
    pub config: Option<PathBuf>,

    /// Write the configuration in effect (defaults applied) to this file and exit.
    #[arg(long = "write-config-to", value_name = "PATH")]
    pub write_config_to: Option<PathBuf>,

    /// DEPRECATED upstream: the IP address healthz and metrics listen on;
    /// ignored when --config is given.
    #[arg(long = "address", value_name = "IP", default_value = "0.0.0.0")]
    pub address: String,

    /// DEPRECATED upstream: the port healthz and metrics listen on (0 turns
    /// them off); ignored when --config is given.
    #[arg(long = "port", value_name = "PORT", default_value_t = config::DEFAULT_INSECURE_PORT)]
    pub port: u16,

    /// Print the version and exit (`raw` for details).
    #[arg(
        long = "version",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = cli::parse_version_request,
        value_name = "true|false|raw"
    )]
    pub version: Option<cli::VersionRequest>,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(flatten)]
    pub log: LogArgs,

    #[command(subcommand)]
    pub command: Option<DeschedulerCommand>,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum DeschedulerCommand {
    /// Print what LowNodeLoad would do with a cluster snapshot (no cluster needed).
    Plan(plan::PlanArgs),
}

impl DeschedulerArgs {
    /// The configuration: the `--config` file, else upstream's defaults.
    pub fn configuration(&self) -> anyhow::Result<Configuration> {
        match &self.config {
            Some(path) => {
                config::load_file(path).with_context(|| format!("--config {}", path.display()))
            }
            None => Ok(config::from_file(config::default_configuration())?),
        }
    }

    /// Where healthz and metrics are served: the file's bind addresses with
    /// --config, else --address:--port (upstream's deprecated insecure serving).
    pub fn listeners(&self, configuration: &Configuration) -> anyhow::Result<Vec<ListenerSpec>> {
        let (healthz, metrics) = if self.config.is_some() {
            (
                configuration
                    .file
                    .healthz_bind_address
                    .clone()
                    .unwrap_or_default(),
                configuration
                    .file
                    .metrics_bind_address
                    .clone()
                    .unwrap_or_default(),
            )
        } else if self.port == 0 {
            (String::new(), String::new())
        } else {
            let ip: std::net::IpAddr = self
                .address
                .parse()
                .with_context(|| format!("--address {} is an invalid IP address", self.address))?;
            let both = std::net::SocketAddr::new(ip, self.port).to_string();
            (both.clone(), both)
        };
        let parse = |text: &str| -> anyhow::Result<ServeAt> {
            // Port 0 turns a server off, as upstream.
            if text.is_empty() || text.ends_with(":0") {
                return Ok(ServeAt::Disabled);
            }
            text.parse::<ServeAt>()
                .with_context(|| format!("bind address {text:?}"))
        };
        let healthz = parse(&healthz)?;
        let metrics = parse(&metrics)?;
        let mut specs = Vec::new();
        match (healthz.addr(), metrics.addr()) {
            (Some(h), Some(m)) if h == m => specs.push(ListenerSpec::new(h, Endpoints::ALL)),
            (h, m) => {
                specs.extend(h.map(|addr| ListenerSpec::new(addr, Endpoints::HEALTH)));
                specs.extend(m.map(|addr| ListenerSpec::new(addr, Endpoints::METRICS)));
            }
        }
        Ok(specs)
    }
}

/// Writes the configuration in effect (JSON, which YAML readers take).
pub fn write_config(configuration: &Configuration, path: &std::path::Path) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(&configuration.file)?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

/// Runs until a signal or a failure; `Err` means start-up failed.
pub async fn run(args: DeschedulerArgs) -> anyhow::Result<ShutdownReason> {
    let configuration = args.configuration()?;
    let listeners = args.listeners(&configuration)?;
    for profile in &configuration.profiles {
        tracing::info!(
            profile = %profile.name,
            plugins = ?profile.enabled_plugins(),
            "profile {} loaded",
            profile.name
        );
    }
    let context = ComponentContext::new(COMPONENT);
    koord_common::spawn_signal_handler(context.shutdown.clone())?;
    let _loop_check = context.health.readiness_status(
        DESCHEDULER_CHECK,
        Err(format!(
            "{}: the descheduling loop is not in this build; `koord-descheduler plan` runs LowNodeLoad offline",
            koord_common::NOT_IMPLEMENTED
        )),
    );
    let cluster_check = context.register_cluster_check();
    let server = if listeners.is_empty() {
        None
    } else {
        Some(context.start_server(listeners).await?)
    };
    let mut cluster = args.cluster.options();
    if cluster.kubeconfig.is_none() && !configuration.file.client_connection.kubeconfig.is_empty() {
        cluster.kubeconfig = Some(
            configuration
                .file
                .client_connection
                .kubeconfig
                .clone()
                .into(),
        );
    }
    match connect_required_cluster(&context, &cluster, &cluster_check).await {
        Ok(_) => Ok(context.wait_for_shutdown(server).await),
        Err(err) => {
            context
                .shutdown
                .trigger(ShutdownReason::Failed(err.to_string()));
            context.wait_for_shutdown(server).await;
            Err(err.into())
        }
    }
}
