//! The descheduler's command-line flags and what they select (configuration,
//! listeners); [`crate::cli`] parses process arguments into them.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use koord_common::{ClusterArgs, Endpoints, ListenerSpec, LogArgs, ServeAt};

use crate::config::{self, Configuration};
use crate::plan;

/// Command-line flags; names and defaults follow upstream `cmd/koord-descheduler`.
/// Parse with [`crate::cli::parse_args`], which also takes upstream's Go spellings
/// and its inert flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "koord-descheduler",
    about = "Koordinator descheduler: LowNodeLoad rebalancing through PodMigrationJobs",
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
        value_parser = parse_version_request,
        value_name = "true|false|raw"
    )]
    pub version: Option<VersionRequest>,

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

pub use koord_common::cli::{VersionRequest, parse_version_request};
