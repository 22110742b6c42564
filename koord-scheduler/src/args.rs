//! The command line's flags as clap types: the extender's own, leader
//! election, and `simulate`. [`crate::cli::parse_args`] parses them after
//! taking upstream's inert flags out.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use koord_common::cli::{VersionRequest, parse_go_bool_flag, parse_version_request};
use koord_common::leader::{
    LeaderElector, Leadership, LeaseTiming, LeaseTimingError, check_object_name, default_identity,
    export_leader_status, spawn_campaign,
};
use koord_common::{ClusterArgs, Endpoints, ListenAddr, ListenerSpec, LogArgs, Shutdown};

use crate::cluster::CacheSynced;
use crate::config::SchedulerConfiguration;
use crate::controller_plugins::ControllerPlugins;
use crate::tls;

/// Upstream's default insecure serving port for /healthz and /metrics.
pub const DEFAULT_PORT: u16 = 10251;

/// The extender's leader-election Lease. Upstream's koord-scheduler uses
/// `koord-scheduler`, but here that Lease belongs to the kube-scheduler
/// running next to the extender, so ours must differ.
pub const DEFAULT_LEASE_NAME: &str = "koord-scheduler-extender";

fn parse_lease_name(text: &str) -> Result<String, String> {
    check_object_name("lease name", text, 253)
}

fn parse_namespace(text: &str) -> Result<String, String> {
    check_object_name("namespace", text, 63)
}

/// Leader election of the cluster-writing background work (status
/// write-back, Reservation controller), with kube-scheduler's flag names and
/// defaults except for the Lease's name and namespace. The extender
/// endpoints and the cache run on every replica regardless.
#[derive(Debug, Clone, clap::Args)]
pub struct LeaderElectionArgs {
    /// Write status and run the Reservation controller only on the replica holding the Lease.
    #[arg(
        long = "leader-elect",
        default_value_t = true,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_parser = parse_go_bool_flag,
        value_name = "BOOL"
    )]
    pub leader_elect: bool,

    /// Only `leases` is supported (kube-scheduler's default).
    #[arg(long = "leader-elect-resource-lock", default_value = "leases", value_parser = ["leases"])]
    pub resource_lock: String,

    /// Name of the leader-election Lease.
    #[arg(long = "leader-elect-resource-name", default_value = DEFAULT_LEASE_NAME, value_parser = parse_lease_name)]
    pub resource_name: String,

    /// Namespace of the leader-election Lease.
    #[arg(
        long = "leader-elect-resource-namespace",
        default_value = apis::configuration::DEFAULT_CONFIG_NAMESPACE,
        value_parser = parse_namespace
    )]
    pub resource_namespace: String,

    /// How long a standby waits after the last renewal before taking the Lease over.
    #[arg(long = "leader-elect-lease-duration", default_value = "15s", value_parser = koord_common::cluster::parse_duration, value_name = "DURATION")]
    pub lease_duration: Duration,

    /// How long the leader keeps trying to renew before it stops leading; shorter than the lease duration.
    #[arg(long = "leader-elect-renew-deadline", default_value = "10s", value_parser = koord_common::cluster::parse_duration, value_name = "DURATION")]
    pub renew_deadline: Duration,

    /// Pause between election attempts.
    #[arg(long = "leader-elect-retry-period", default_value = "2s", value_parser = koord_common::cluster::parse_duration, value_name = "DURATION")]
    pub retry_period: Duration,
}

impl LeaderElectionArgs {
    /// The timing, checked against client-go's rules.
    pub fn timing(&self) -> Result<LeaseTiming, LeaseTimingError> {
        let timing = LeaseTiming {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        };
        timing.validate()?;
        Ok(timing)
    }

    /// Unconditional leadership when election is off; otherwise a campaign
    /// that starts once the cache is `synced` (a new leader must not act on
    /// a half-listed cluster), with its state exported as a metric.
    pub fn leadership(
        &self,
        client: &kube::Client,
        timing: LeaseTiming,
        mut synced: CacheSynced,
        metrics: &koord_common::MetricsRegistry,
        shutdown: &Shutdown,
    ) -> Leadership {
        if !self.leader_elect {
            tracing::info!(
                "--leader-elect=false: this replica writes status and runs the Reservation controller"
            );
            return Leadership::unconditional();
        }
        let elector = LeaderElector::new(
            client.clone(),
            &self.resource_namespace,
            &self.resource_name,
            default_identity(),
            timing,
        );
        let cache_synced = async move {
            if synced.wait_for(|synced| *synced).await.is_err() {
                // The watchers stopped (shutdown): never campaign.
                std::future::pending::<()>().await;
            }
        };
        let leadership = spawn_campaign(elector, cache_synced, shutdown.clone());
        export_leader_status(metrics, &self.resource_name, &leadership);
        leadership
    }
}

/// Command-line flags; names and defaults follow upstream `cmd/koord-scheduler`.
/// Parse with [`crate::cli::parse_args`], which also accepts upstream's other flags.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "koord-scheduler",
    version = koord_common::cli::version(),
    disable_version_flag = true,
    about = "Koordinator scheduler"
)]
pub struct SchedulerArgs {
    /// IP address of the extender (/filter, /prioritize, /bind, and /healthz, /readyz, /metrics)
    /// with --port. Loopback by default: kube-scheduler runs in the same pod. Any other address
    /// needs --tls-cert-file, --tls-private-key-file and --client-ca-file (clients must present a
    /// certificate), or the process refuses to start.
    #[arg(long = "address", default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST), value_name = "IP")]
    pub address: IpAddr,

    /// Port of the extender; 0 turns it off (as upstream).
    #[arg(long = "port", default_value_t = DEFAULT_PORT, value_name = "PORT")]
    pub port: u16,

    /// IP address of the probe listener (--health-port), which serves only /healthz and /readyz.
    #[arg(long = "health-address", default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED), value_name = "IP")]
    pub health_address: IpAddr,

    /// Port serving only /healthz and /readyz, for kubelet probes (which do not come from inside
    /// the pod, so cannot reach a loopback extender); 0 (the default) turns it off.
    #[arg(long = "health-port", default_value_t = 0, value_name = "PORT")]
    pub health_port: u16,

    /// IP address of the metrics listener (--metrics-port), which serves only /metrics.
    #[arg(long = "metrics-address", default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED), value_name = "IP")]
    pub metrics_address: IpAddr,

    /// Port serving only /metrics, for a scraper outside the pod; 0 (the default) turns it off
    /// (/metrics stays on the extender's own address).
    #[arg(long = "metrics-port", default_value_t = 0, value_name = "PORT")]
    pub metrics_port: u16,

    /// Serving certificate (PEM, with its chain) of the extender over HTTPS.
    #[arg(long = "tls-cert-file", value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert-file.
    #[arg(long = "tls-private-key-file", value_name = "FILE")]
    pub tls_private_key_file: Option<PathBuf>,

    /// CA bundle (PEM) that every client certificate must chain to; required with TLS.
    #[arg(long = "client-ca-file", value_name = "FILE")]
    pub client_ca_file: Option<PathBuf>,

    /// KubeSchedulerConfiguration file (profiles, plugins, pluginConfig args).
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// How long a pod bound by the extender counts as assumed without the watch confirming it.
    #[arg(long = "assumed-pod-ttl", default_value = "5m", value_parser = koord_common::cluster::parse_duration, value_name = "DURATION")]
    pub assumed_pod_ttl: Duration,

    /// How long a `/bind` call of a gang member held at Permit waits for its gang group before it
    /// answers "still waiting" (the member stays assumed, its resources held, until the gang's wait
    /// time runs out; kube-scheduler's retry rejoins the wait). Keep it below the extender's
    /// `httpTimeout` in kube-scheduler's configuration (the chart's: 5s); 0 answers at once.
    #[arg(long = "gang-bind-wait", default_value = "3s", value_parser = koord_common::cluster::parse_duration, value_name = "DURATION")]
    pub gang_bind_wait: Duration,

    /// Which plugins' controllers run, by upstream's rule: `*` all, `Name` on, `-Name` off, the
    /// first entry naming a plugin decides. Here: Reservation (the Reservation controller),
    /// Coscheduling (PodGroup status), ElasticQuota (quota status and annotations).
    #[arg(
        long = "controller-plugins",
        value_delimiter = ',',
        allow_hyphen_values = true,
        default_value = "*",
        action = clap::ArgAction::Append,
        value_name = "NAMES"
    )]
    pub controller_plugins: Vec<String>,

    /// Print the version and exit (`--version`, `--version=raw`); `--version=false` runs as usual.
    #[arg(
        long = "version",
        short = 'V',
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_version_request,
        value_name = "true|false|raw"
    )]
    pub version: Option<VersionRequest>,

    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(flatten)]
    pub log: LogArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Schedule pending pods of a YAML snapshot offline and print the placements.
    Simulate(SimulateArgs),
}

/// `simulate` output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

/// Flags of `koord-scheduler simulate`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Multi-document YAML: Nodes, Pods, NodeMetrics, ElasticQuotas, Reservations, PodGroups, Devices, NodeResourceTopologies.
    #[arg(long = "snapshot", value_name = "YAML")]
    pub snapshot: PathBuf,
    /// Extra pending pods to schedule after the snapshot's own pending pods.
    #[arg(long = "pods", value_name = "YAML")]
    pub pods: Option<PathBuf>,
    #[arg(long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// The simulated time (RFC 3339); defaults to the latest NodeMetric report in the snapshot.
    #[arg(long = "now", value_name = "TIME")]
    pub now: Option<String>,
}

impl SchedulerArgs {
    /// The extender's address and transport, `None` with `--port=0`; an
    /// address off loopback without mutual TLS is refused.
    pub fn extender(&self) -> Result<Option<(SocketAddr, tls::Transport)>, tls::ServingError> {
        if self.port == 0 {
            return Ok(None);
        }
        let transport = tls::transport(
            self.address,
            self.tls_cert_file.as_deref(),
            self.tls_private_key_file.as_deref(),
            self.client_ca_file.as_deref(),
        )?;
        Ok(Some((SocketAddr::new(self.address, self.port), transport)))
    }

    /// The probe-only and metrics-only listeners (the extender's own is
    /// [`Self::extender`]).
    pub fn side_listeners(&self) -> Vec<ListenerSpec> {
        let mut specs = Vec::new();
        if self.health_port != 0 {
            let addr = ListenAddr::new(SocketAddr::new(self.health_address, self.health_port));
            specs.push(ListenerSpec::new(addr, Endpoints::HEALTH));
        }
        if self.metrics_port != 0 {
            let addr = ListenAddr::new(SocketAddr::new(self.metrics_address, self.metrics_port));
            specs.push(ListenerSpec::new(addr, Endpoints::METRICS));
        }
        specs
    }

    /// The `--controller-plugins` selection.
    pub fn controller_plugins(&self) -> ControllerPlugins {
        ControllerPlugins::new(self.controller_plugins.iter().cloned())
    }

    /// The configuration file, or upstream defaults without one.
    pub fn configuration(&self) -> anyhow::Result<SchedulerConfiguration> {
        Ok(match &self.config {
            Some(path) => SchedulerConfiguration::load(path)?,
            None => SchedulerConfiguration::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extender_listens_on_loopback_by_default_with_no_other_listener() {
        let args = SchedulerArgs::try_parse_from(["koord-scheduler"]).unwrap();
        let (addr, transport) = args.extender().unwrap().unwrap();
        assert_eq!(addr.to_string(), "127.0.0.1:10251");
        assert_eq!(transport, tls::Transport::Plain);
        assert!(args.side_listeners().is_empty());
    }

    #[test]
    fn probes_and_metrics_get_their_own_listeners_and_off_loopback_needs_mutual_tls() {
        let args = SchedulerArgs::try_parse_from([
            "koord-scheduler",
            "--health-port=10258",
            "--metrics-port=10259",
            "--metrics-address=10.0.0.1",
        ])
        .unwrap();
        let listeners: Vec<(String, Endpoints)> = args
            .side_listeners()
            .iter()
            .map(|l| (l.addr.to_string(), l.endpoints))
            .collect();
        assert_eq!(
            listeners,
            [
                ("0.0.0.0:10258".to_string(), Endpoints::HEALTH),
                ("10.0.0.1:10259".to_string(), Endpoints::METRICS)
            ]
        );
        let open = SchedulerArgs::try_parse_from(["koord-scheduler", "--address=0.0.0.0"]).unwrap();
        let err = open.extender().unwrap_err().to_string();
        assert!(
            err.contains("--address=0.0.0.0 is not a loopback address"),
            "{err}"
        );
        let secured = SchedulerArgs::try_parse_from([
            "koord-scheduler",
            "--address=0.0.0.0",
            "--tls-cert-file=/c.pem",
            "--tls-private-key-file=/k.pem",
            "--client-ca-file=/ca.pem",
        ])
        .unwrap();
        assert!(matches!(
            secured.extender(),
            Ok(Some((_, tls::Transport::MutualTls(_))))
        ));
        let off =
            SchedulerArgs::try_parse_from(["koord-scheduler", "--address=0.0.0.0", "--port=0"])
                .unwrap();
        assert_eq!(off.extender(), Ok(None));
    }

    #[test]
    fn leader_election_follows_kube_scheduler_flags_with_our_own_lease() {
        let args = SchedulerArgs::try_parse_from(["koord-scheduler"]).unwrap();
        let election = &args.leader_election;
        assert!(election.leader_elect);
        assert_eq!(election.resource_name, DEFAULT_LEASE_NAME);
        assert_eq!(election.resource_namespace, "koordinator-system");
        assert_eq!(election.timing().unwrap(), LeaseTiming::default());

        let argv = koord_common::cli::normalize_go_flag_args(
            [
                "koord-scheduler",
                "--leader-elect=false",
                "--leader-elect-resource-namespace=koord",
                "--leader-elect-resource-name=lead",
                "--leader-elect-lease-duration=30s",
                "--leader-elect-renew-deadline=20s",
                "--leader-elect-retry-period=4s",
            ]
            .map(std::ffi::OsString::from),
        );
        let args = SchedulerArgs::try_parse_from(argv).unwrap();
        let election = &args.leader_election;
        assert!(!election.leader_elect);
        assert_eq!(
            (
                election.resource_namespace.as_str(),
                election.resource_name.as_str()
            ),
            ("koord", "lead")
        );
        assert_eq!(
            election.timing().unwrap().renew_deadline,
            Duration::from_secs(20)
        );
        // A bare flag means true, as with Go's bool flags.
        let bare = SchedulerArgs::try_parse_from(["koord-scheduler", "--leader-elect", "--port=1"])
            .unwrap();
        assert!(bare.leader_election.leader_elect);
    }

    #[test]
    fn bad_leader_election_input_is_rejected_with_a_reason() {
        for bad in [
            "--leader-elect-resource-namespace=Not_A_Namespace",
            "--leader-elect-resource-name=",
            "--leader-elect-resource-lock=endpoints",
            "--leader-elect-lease-duration=soon",
        ] {
            assert!(
                SchedulerArgs::try_parse_from(["koord-scheduler", bad]).is_err(),
                "{bad}"
            );
        }
        let args = SchedulerArgs::try_parse_from([
            "koord-scheduler",
            "--leader-elect-lease-duration=5s",
            "--leader-elect-renew-deadline=10s",
        ])
        .unwrap();
        let err = args.leader_election.timing().unwrap_err().to_string();
        assert!(err.contains("shorter than the lease duration"), "{err}");
    }

    #[test]
    fn gang_bind_wait_defaults_below_the_charts_http_timeout_and_parses_go_durations() {
        let args = SchedulerArgs::try_parse_from(["koord-scheduler"]).unwrap();
        assert_eq!(args.gang_bind_wait, Duration::from_secs(3));
        assert_eq!(
            args.gang_bind_wait,
            crate::framework::DEFAULT_PERMIT_BIND_WAIT
        );
        let args =
            SchedulerArgs::try_parse_from(["koord-scheduler", "--gang-bind-wait=1500ms"]).unwrap();
        assert_eq!(args.gang_bind_wait, Duration::from_millis(1500));
        let args =
            SchedulerArgs::try_parse_from(["koord-scheduler", "--gang-bind-wait=0"]).unwrap();
        assert_eq!(args.gang_bind_wait, Duration::ZERO);
        for bad in ["--gang-bind-wait=soon", "--gang-bind-wait=-1s"] {
            assert!(
                SchedulerArgs::try_parse_from(["koord-scheduler", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn port_zero_disables_serving_and_bad_ip_is_rejected() {
        let args = SchedulerArgs::try_parse_from(["koord-scheduler", "--port=0"]).unwrap();
        assert_eq!(args.extender(), Ok(None));
        assert!(args.side_listeners().is_empty());
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
        let (addr, _) = args.extender().unwrap().unwrap();
        assert_eq!(addr.to_string(), "[::1]:1234");
    }
}
