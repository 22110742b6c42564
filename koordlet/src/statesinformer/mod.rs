//! The agent's view of its node: pods, Node, NodeSLO, NodeMetric, Device.
//!
//! Two ways to fill it:
//! - cluster mode: pods from the kubelet's `/pods` (falling back to an API
//!   server watch filtered by `spec.nodeName`), the node's objects from API
//!   server watchers;
//! - standalone mode (no cluster): pods from a file or any kubelet-compatible
//!   URL, the NodeSLO from a file, the NodeMetric written to a file.
//!
//! Consumers read the latest snapshot through [`StatesInformer`] and may
//! subscribe to changes.

pub mod apiserver;
pub mod cpumanager;
pub mod device;
pub mod inputfile;
pub mod kubelet;
pub mod metrics;
pub mod nodemetric;
pub mod nodetopo;
pub mod podmeta;
pub mod pods;
pub mod podsfile;
pub mod ruleversion;
pub mod standalone;
pub mod volumes;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apis::extension::GoDuration;
use apis::scheduling::v1alpha1::Device;
use apis::slo::v1alpha1::{NodeMetric, NodeSLO};
use k8s_openapi::api::core::v1::{Node, Pod};
use koord_common::health::{FnCheck, HealthRegistry};
use koord_common::sync::{MutexExt, RwLockExt};
use tokio::sync::watch;

pub use kubelet::{KubeletClient, KubeletError, PodListError, parse_pod_list};
pub use nodemetric::{
    CollectPolicy, NodeMetricReporter, ReportSink, UsageQuery, UsageSeries, UsageStatistic,
    WindowValue, build_node_metric_status,
};
pub use pods::{PodSource, PodSourceError, PodsSyncer};
pub use ruleversion::{ObservedRule, RuleVersion};

/// Name of the readiness check that passes once every source has synced once.
pub const STATES_CHECK: &str = "states";

/// Upstream's default `--kubelet-read-only-port`.
pub const DEFAULT_KUBELET_READ_ONLY_PORT: u16 = 10255;

/// Parses a Go duration flag value (`10s`, `1m30s`); must be positive.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let duration = GoDuration::parse(text.trim()).map_err(|err| err.to_string())?;
    match duration.to_std() {
        Some(duration) if !duration.is_zero() => Ok(duration),
        _ => Err(format!("duration {text:?} must be positive")),
    }
}

/// Flags of the states informer (upstream names where upstream has the flag)
/// and of the standalone mode (ours).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct StatesArgs {
    /// Node address type used to reach the kubelet (Hostname, InternalIP, ExternalIP, InternalDNS, ExternalDNS).
    #[arg(
        long = "kubelet-preferred-address-type",
        default_value = "InternalIP",
        value_name = "TYPE"
    )]
    pub kubelet_preferred_address_type: String,

    /// How often pods are re-read from the kubelet (or the pods file).
    #[arg(long = "kubelet-sync-interval", default_value = "10s", value_name = "DURATION", value_parser = parse_positive_duration)]
    pub kubelet_sync_interval: Duration,

    /// Bound on one request to the kubelet.
    #[arg(long = "kubelet-sync-timeout", default_value = "3s", value_name = "DURATION", value_parser = parse_positive_duration)]
    pub kubelet_sync_timeout: Duration,

    /// Use the kubelet's unauthenticated read-only port over plain HTTP instead of its authenticated HTTPS port.
    #[arg(long = "kubelet-insecure-tls", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub kubelet_insecure_tls: bool,

    /// The kubelet's read-only port (used with --kubelet-insecure-tls).
    #[arg(long = "kubelet-read-only-port", default_value_t = DEFAULT_KUBELET_READ_ONLY_PORT, value_name = "PORT")]
    pub kubelet_read_only_port: u16,

    /// Report node and pod usage in the NodeMetric status.
    #[arg(long = "enable-node-metric-report", default_value = "true", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub enable_node_metric_report: bool,

    /// When the kubelet cannot be reached, watch this node's pods on the API server instead.
    #[arg(long = "pods-apiserver-fallback", default_value = "true", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub pods_apiserver_fallback: bool,

    /// Run without a cluster: pods from --pods-file or --kubelet-url, NodeSLO from --node-slo-file,
    /// NodeMetric written to --node-metric-output. Implied by any of those flags.
    #[arg(long = "standalone", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub standalone: bool,

    /// This node's name; overrides NODE_NAME. In standalone mode the host name is used when neither is set.
    #[arg(long = "node-name", value_name = "NAME")]
    pub node_name: Option<String>,

    /// Standalone pods source: a JSON or YAML file holding a PodList, a list of Pods or Pod documents;
    /// re-read when it changes.
    #[arg(
        long = "pods-file",
        value_name = "PATH",
        conflicts_with = "kubelet_url"
    )]
    pub pods_file: Option<PathBuf>,

    /// Standalone pods source: base URL of any kubelet-compatible endpoint serving GET /pods
    /// (http:// or https://).
    #[arg(long = "kubelet-url", value_name = "URL")]
    pub kubelet_url: Option<String>,

    /// Standalone NodeSLO: a YAML or JSON file holding a NodeSLO object; re-read when it changes.
    #[arg(long = "node-slo-file", value_name = "PATH")]
    pub node_slo_file: Option<PathBuf>,

    /// Standalone NodeMetric output: the NodeMetric (spec and status) is written here at each report,
    /// as YAML when the name ends in .yaml or .yml, else as JSON.
    #[arg(long = "node-metric-output", value_name = "PATH")]
    pub node_metric_output: Option<PathBuf>,

    /// Report interval overriding the NodeMetric collect policy (and its 30s floor), e.g. for demos and tests.
    #[arg(long = "node-metric-report-interval", value_name = "DURATION", value_parser = parse_positive_duration)]
    pub node_metric_report_interval: Option<Duration>,
}

impl Default for StatesArgs {
    fn default() -> Self {
        Self {
            kubelet_preferred_address_type: "InternalIP".to_string(),
            kubelet_sync_interval: Duration::from_secs(10),
            kubelet_sync_timeout: Duration::from_secs(3),
            kubelet_insecure_tls: false,
            kubelet_read_only_port: DEFAULT_KUBELET_READ_ONLY_PORT,
            enable_node_metric_report: true,
            pods_apiserver_fallback: true,
            standalone: false,
            node_name: None,
            pods_file: None,
            kubelet_url: None,
            node_slo_file: None,
            node_metric_output: None,
            node_metric_report_interval: None,
        }
    }
}

/// Flags that cannot work together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatesConfigError {
    #[error(
        "standalone mode needs a pods source: --pods-file <path> or --kubelet-url <http(s)://host:port>"
    )]
    MissingPodsSource,
    #[error("--kubelet-url {0:?} must start with http:// or https:// and name a host")]
    InvalidKubeletUrl(String),
}

/// Where standalone pods come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StandalonePods {
    File(PathBuf),
    KubeletUrl(String),
}

/// The standalone sources and sinks, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandaloneConfig {
    pub pods: StandalonePods,
    pub node_slo_file: Option<PathBuf>,
    pub node_metric_output: Option<PathBuf>,
}

impl StatesArgs {
    /// True when koordlet should run without an API server.
    pub fn is_standalone(&self) -> bool {
        self.standalone
            || self.pods_file.is_some()
            || self.kubelet_url.is_some()
            || self.node_slo_file.is_some()
            || self.node_metric_output.is_some()
    }

    /// The standalone configuration, `None` in cluster mode.
    pub fn standalone_config(&self) -> Result<Option<StandaloneConfig>, StatesConfigError> {
        if !self.is_standalone() {
            return Ok(None);
        }
        let pods = match (&self.pods_file, &self.kubelet_url) {
            (Some(path), _) => StandalonePods::File(path.clone()),
            (None, Some(url)) => {
                validate_kubelet_url(url)?;
                StandalonePods::KubeletUrl(url.trim_end_matches('/').to_string())
            }
            (None, None) => return Err(StatesConfigError::MissingPodsSource),
        };
        Ok(Some(StandaloneConfig {
            pods,
            node_slo_file: self.node_slo_file.clone(),
            node_metric_output: self.node_metric_output.clone(),
        }))
    }
}

fn validate_kubelet_url(url: &str) -> Result<(), StatesConfigError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(()),
        _ => Err(StatesConfigError::InvalidKubeletUrl(url.to_string())),
    }
}

/// Picks the node name: `--node-name`, else `NODE_NAME`; in standalone mode
/// the host name is the last resort (a demo machine has no DaemonSet to set
/// `NODE_NAME`). Every candidate is validated as a node name.
pub fn resolve_node_name(
    flag: Option<&str>,
    env: Option<OsString>,
    standalone: bool,
    hostname: impl FnOnce() -> Option<String>,
) -> Result<String, crate::identity::NodeNameError> {
    if let Some(name) = flag {
        return crate::identity::node_name_from(Some(OsString::from(name)));
    }
    match crate::identity::node_name_from(env) {
        Err(crate::identity::NodeNameError::Missing) if standalone => {
            let host = hostname().map(|name| name.trim().to_ascii_lowercase());
            crate::identity::node_name_from(host.map(OsString::from))
        }
        other => other,
    }
}

/// The host name from `<proc-root>/sys/kernel/hostname`.
pub fn read_hostname(proc_root: &Path) -> Option<String> {
    std::fs::read_to_string(proc_root.join("sys/kernel/hostname"))
        .ok()
        .map(|text| text.trim().to_string())
        .filter(|text| !text.is_empty())
}

/// Where the current pods came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodsOrigin {
    Kubelet,
    File,
    ApiServer,
}

impl PodsOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            PodsOrigin::Kubelet => "kubelet",
            PodsOrigin::File => "file",
            PodsOrigin::ApiServer => "apiserver",
        }
    }
}

/// The pods of this node at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct PodsSnapshot {
    pub pods: Vec<Pod>,
    pub origin: PodsOrigin,
    pub synced_at: SystemTime,
}

impl PodsSnapshot {
    /// The pod with this UID.
    pub fn pod_by_uid(&self, uid: &str) -> Option<&Pod> {
        self.pods
            .iter()
            .find(|pod| pod.metadata.uid.as_deref() == Some(uid))
    }
}

/// Counters of pod syncs, readable by tests and the `/metrics` adapter.
#[derive(Debug, Default)]
pub struct PodsSyncStats {
    successes: AtomicU64,
    errors: AtomicU64,
}

impl PodsSyncStats {
    pub fn successes(&self) -> u64 {
        self.successes.load(Ordering::Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }
}

/// Which of the node's objects the informer waits for before it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequiredSyncs {
    pub node: bool,
    pub node_slo: bool,
    pub node_metric: bool,
    pub device: bool,
}

impl RequiredSyncs {
    /// Standalone mode: only pods (and, when given, the NodeSLO file).
    pub const PODS_ONLY: RequiredSyncs = RequiredSyncs {
        node: false,
        node_slo: false,
        node_metric: false,
        device: false,
    };
    /// Cluster mode waits for the Node, NodeSLO and NodeMetric watchers, as
    /// upstream's informers do. The Device watch is not a gate (upstream
    /// only writes Devices, and clusters without device plugins may lack it).
    pub const CLUSTER: RequiredSyncs = RequiredSyncs {
        node: true,
        node_slo: true,
        node_metric: true,
        device: false,
    };
}

struct Slot<T> {
    value: watch::Sender<Option<Arc<T>>>,
    synced: AtomicBool,
}

impl<T> Slot<T> {
    fn new() -> Self {
        Self {
            value: watch::channel(None).0,
            synced: AtomicBool::new(false),
        }
    }

    fn set(&self, value: Option<T>) {
        self.value.send_replace(value.map(Arc::new));
        self.synced.store(true, Ordering::Release);
    }

    fn get(&self) -> Option<Arc<T>> {
        self.value.borrow().clone()
    }

    fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

struct Inner {
    node_name: String,
    required: RequiredSyncs,
    pods: Slot<PodsSnapshot>,
    node: Slot<Node>,
    node_slo: Slot<NodeSLO>,
    node_slo_observed: Mutex<Option<ObservedRule>>,
    node_metric: Slot<NodeMetric>,
    device: Slot<Device>,
    pods_stats: PodsSyncStats,
    /// PVC → PV lookups for blkio `podvolume` blocks.
    volumes: std::sync::RwLock<Arc<dyn volumes::VolumeLookup>>,
}

/// Shared, cheaply cloned view of the node's state. Writers are the sources
/// (pods syncer, watchers, files); readers are the other koordlet modules.
#[derive(Clone)]
pub struct StatesInformer {
    inner: Arc<Inner>,
}

impl StatesInformer {
    pub fn new(node_name: impl Into<String>, required: RequiredSyncs) -> Self {
        Self {
            inner: Arc::new(Inner {
                node_name: node_name.into(),
                required,
                pods: Slot::new(),
                node: Slot::new(),
                node_slo: Slot::new(),
                node_slo_observed: Mutex::new(None),
                node_metric: Slot::new(),
                device: Slot::new(),
                pods_stats: PodsSyncStats::default(),
                volumes: std::sync::RwLock::new(Arc::new(volumes::NoVolumeLookup(
                    "no PersistentVolumeClaim watch (standalone mode or BlkIOReconcile off)",
                ))),
            }),
        }
    }

    pub fn node_name(&self) -> &str {
        &self.inner.node_name
    }

    /// Where PVCs are looked up (cluster mode sets the API server's).
    pub fn set_volume_lookup(&self, lookup: Arc<dyn volumes::VolumeLookup>) {
        if let Ok(mut slot) = self.inner.volumes.write() {
            *slot = lookup;
        }
    }

    pub fn volume_lookup(&self) -> Arc<dyn volumes::VolumeLookup> {
        Arc::clone(&self.inner.volumes.read_or_recover())
    }

    /// The latest pods snapshot; `None` before the first successful sync.
    pub fn pods(&self) -> Option<Arc<PodsSnapshot>> {
        self.inner.pods.get()
    }

    /// Notified on every new pods snapshot.
    pub fn subscribe_pods(&self) -> watch::Receiver<Option<Arc<PodsSnapshot>>> {
        self.inner.pods.value.subscribe()
    }

    pub fn node(&self) -> Option<Arc<Node>> {
        self.inner.node.get()
    }

    pub fn subscribe_node(&self) -> watch::Receiver<Option<Arc<Node>>> {
        self.inner.node.value.subscribe()
    }

    pub fn node_slo(&self) -> Option<Arc<NodeSLO>> {
        self.inner.node_slo.get()
    }

    pub fn subscribe_node_slo(&self) -> watch::Receiver<Option<Arc<NodeSLO>>> {
        self.inner.node_slo.value.subscribe()
    }

    pub fn node_metric(&self) -> Option<Arc<NodeMetric>> {
        self.inner.node_metric.get()
    }

    pub fn device(&self) -> Option<Arc<Device>> {
        self.inner.device.get()
    }

    pub fn pods_stats(&self) -> &PodsSyncStats {
        &self.inner.pods_stats
    }

    /// Publishes a successful pods sync.
    pub fn set_pods(&self, snapshot: PodsSnapshot) {
        self.inner
            .pods_stats
            .successes
            .fetch_add(1, Ordering::Relaxed);
        self.inner.pods.set(Some(snapshot));
    }

    /// Counts a failed pods sync; the last good snapshot stays.
    pub fn record_pods_error(&self) {
        self.inner.pods_stats.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Publishes the Node (or its absence) and marks it synced.
    pub fn set_node(&self, node: Option<Node>) {
        self.inner.node.set(node);
    }

    /// Publishes the NodeSLO; a new version (see [`RuleVersion`]) is stamped
    /// with the time it arrived, a repeat of the current one keeps its stamp.
    pub fn set_node_slo(&self, node_slo: Option<NodeSLO>) {
        self.set_node_slo_at(node_slo, SystemTime::now());
    }

    /// [`StatesInformer::set_node_slo`] with the arrival time given.
    pub fn set_node_slo_at(&self, node_slo: Option<NodeSLO>, received_at: SystemTime) {
        {
            let mut observed = self.inner.node_slo_observed.lock_or_recover();
            *observed = node_slo.as_ref().map(|slo| {
                let version = RuleVersion::of(slo);
                match observed.take() {
                    Some(previous) if previous.version == version => previous,
                    _ => ObservedRule {
                        version,
                        observed_at: received_at,
                    },
                }
            });
        }
        self.inner.node_slo.set(node_slo);
    }

    /// The current NodeSLO with its version and arrival time, read together.
    pub fn node_slo_observed(&self) -> Option<(Arc<NodeSLO>, ObservedRule)> {
        let slo = self.inner.node_slo.get()?;
        let version = RuleVersion::of(&slo);
        let observed = self
            .inner
            .node_slo_observed
            .lock_or_recover()
            .clone()
            .filter(|o| o.version == version)
            // Published between the two reads: its stamp is about now.
            .unwrap_or_else(|| ObservedRule {
                version,
                observed_at: SystemTime::now(),
            });
        Some((slo, observed))
    }

    pub fn set_node_metric(&self, node_metric: Option<NodeMetric>) {
        self.inner.node_metric.set(node_metric);
    }

    pub fn set_device(&self, device: Option<Device>) {
        self.inner.device.set(device);
    }

    pub fn pods_synced(&self) -> bool {
        self.inner.pods.is_synced()
    }

    /// True once the Node watcher has listed (the Node may still be absent).
    pub fn node_synced(&self) -> bool {
        self.inner.node.is_synced()
    }

    /// The sources still waiting for their first sync, by name.
    pub fn pending_syncs(&self) -> Vec<&'static str> {
        let inner = &self.inner;
        let required = inner.required;
        let mut pending = Vec::new();
        if !inner.pods.is_synced() {
            pending.push("pods");
        }
        if required.node && !inner.node.is_synced() {
            pending.push("Node");
        }
        if required.node_slo && !inner.node_slo.is_synced() {
            pending.push("NodeSLO");
        }
        if required.node_metric && !inner.node_metric.is_synced() {
            pending.push("NodeMetric");
        }
        if required.device && !inner.device.is_synced() {
            pending.push("Device");
        }
        pending
    }

    /// Registers the [`STATES_CHECK`] readiness check: failing until every
    /// required source has synced once.
    pub fn register_readiness(&self, health: &HealthRegistry) {
        let states = self.clone();
        health.add_readiness_check(
            STATES_CHECK,
            FnCheck(move || {
                let pending = states.pending_syncs();
                if pending.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "waiting for the first sync of {}",
                        pending.join(", ")
                    ))
                }
            }),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use koord_common::Probe;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        states: StatesArgs,
    }

    fn parse(args: &[&str]) -> Result<StatesArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("koordlet").chain(args.iter().copied()))
            .map(|cli| cli.states)
    }

    #[test]
    fn defaults_match_upstream_flags() {
        let args = parse(&[]).unwrap();
        assert_eq!(args, StatesArgs::default());
        assert_eq!(args.kubelet_sync_interval, Duration::from_secs(10));
        assert_eq!(args.kubelet_sync_timeout, Duration::from_secs(3));
        assert_eq!(args.kubelet_read_only_port, 10255);
        assert_eq!(args.kubelet_preferred_address_type, "InternalIP");
        assert!(!args.kubelet_insecure_tls);
        assert!(args.enable_node_metric_report);
        assert!(!args.is_standalone());
        assert_eq!(args.standalone_config(), Ok(None));
    }

    #[test]
    fn go_durations_and_bools_parse() {
        let args = parse(&[
            "--kubelet-sync-interval=1m30s",
            "--kubelet-insecure-tls",
            "--enable-node-metric-report=false",
            "--node-metric-report-interval=2s",
        ])
        .unwrap();
        assert_eq!(args.kubelet_sync_interval, Duration::from_secs(90));
        assert!(args.kubelet_insecure_tls);
        assert!(!args.enable_node_metric_report);
        assert_eq!(
            args.node_metric_report_interval,
            Some(Duration::from_secs(2))
        );
        assert!(parse(&["--kubelet-sync-interval=0s"]).is_err());
        assert!(parse(&["--kubelet-sync-interval=ten"]).is_err());
    }

    #[test]
    fn any_standalone_flag_selects_standalone_mode() {
        let args = parse(&["--pods-file", "/tmp/pods.yaml"]).unwrap();
        assert_eq!(
            args.standalone_config().unwrap().unwrap().pods,
            StandalonePods::File("/tmp/pods.yaml".into())
        );
        let args = parse(&["--kubelet-url", "http://127.0.0.1:10255/"]).unwrap();
        assert_eq!(
            args.standalone_config().unwrap().unwrap().pods,
            StandalonePods::KubeletUrl("http://127.0.0.1:10255".into())
        );
        let args = parse(&["--standalone"]).unwrap();
        assert_eq!(
            args.standalone_config(),
            Err(StatesConfigError::MissingPodsSource)
        );
        let args = parse(&["--node-metric-output", "/tmp/nm.json"]).unwrap();
        assert!(args.is_standalone());
        let args = parse(&["--kubelet-url", "ftp://x"]).unwrap();
        assert!(matches!(
            args.standalone_config(),
            Err(StatesConfigError::InvalidKubeletUrl(_))
        ));
        assert!(parse(&["--pods-file", "a", "--kubelet-url", "http://b"]).is_err());
    }

    #[test]
    fn node_name_prefers_flag_then_env_then_hostname_in_standalone_only() {
        let no_host = || None;
        assert_eq!(
            resolve_node_name(Some("flag-node"), Some("env-node".into()), false, no_host),
            Ok("flag-node".to_string())
        );
        assert_eq!(
            resolve_node_name(None, Some("env-node".into()), true, || Some("h".into())),
            Ok("env-node".to_string())
        );
        assert_eq!(
            resolve_node_name(None, None, true, || Some("My-Host\n".into())),
            Ok("my-host".to_string())
        );
        assert_eq!(
            resolve_node_name(None, None, false, || Some("host".into())),
            Err(crate::identity::NodeNameError::Missing)
        );
        assert!(matches!(
            resolve_node_name(Some("Bad_Name"), None, true, no_host),
            Err(crate::identity::NodeNameError::Invalid(_))
        ));
    }

    #[tokio::test]
    async fn readiness_waits_for_every_required_source() {
        let health = HealthRegistry::new();
        let states = StatesInformer::new("node-a", RequiredSyncs::CLUSTER);
        states.register_readiness(&health);
        let report = health.evaluate(Probe::Readiness).await;
        assert!(
            report.render(false).contains(
                "[-]states failed: waiting for the first sync of pods, Node, NodeSLO, NodeMetric\n"
            ),
            "{}",
            report.render(false)
        );
        states.set_node(None);
        states.set_node_slo(None);
        states.set_node_metric(None);
        assert!(!health.evaluate(Probe::Readiness).await.is_healthy());
        states.record_pods_error();
        assert!(!health.evaluate(Probe::Readiness).await.is_healthy());
        states.set_pods(PodsSnapshot {
            pods: vec![],
            origin: PodsOrigin::File,
            synced_at: SystemTime::UNIX_EPOCH,
        });
        assert!(health.evaluate(Probe::Readiness).await.is_healthy());
        assert_eq!(states.pods_stats().errors(), 1);
        assert_eq!(states.pods_stats().successes(), 1);
    }

    #[test]
    fn standalone_readiness_needs_pods_only() {
        let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
        assert_eq!(states.pending_syncs(), ["pods"]);
        let with_device = RequiredSyncs {
            device: true,
            ..RequiredSyncs::PODS_ONLY
        };
        let states = StatesInformer::new("node-a", with_device);
        assert_eq!(states.pending_syncs(), ["pods", "Device"]);
        states.set_device(None);
        assert_eq!(states.pending_syncs(), ["pods"]);
    }
}
