//! The I/O shell: [`NodeTopologyReporter`] creates the NodeResourceTopology
//! named after the node when it is missing and replaces it only when its
//! content changed, at start, after pod or Node changes (debounced) and
//! every `--node-topology-sync-interval`; it can also write the object to a
//! file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apis::topology::v1alpha1::NodeResourceTopology;
use k8s_openapi::api::core::v1::Node;
use koord_common::Shutdown;

use super::desired::{DesiredTopology, build_desired_topology};
use super::pools::{NodeHardware, NodeTopologyError};
use super::readers::read_node_facts;
use crate::metriccache::MetricCache;
use crate::statesinformer::StatesInformer;
use crate::system::SystemArgs;
use koord_common::units::CpuTopology;

/// Upstream's default `--node-topology-sync-interval`.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(3);
/// The feature gate (in `--feature-gates`) that turns API reporting off.
pub const NODE_TOPOLOGY_REPORT_GATE: &str = "NodeTopologyReport";

/// Flags of the NodeResourceTopology reporter (upstream names where upstream has one).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct NodeTopologyArgs {
    /// How often the node topology is recomputed and, when changed, reported.
    #[arg(long = "node-topology-sync-interval", default_value = "3s", value_name = "DURATION", value_parser = crate::statesinformer::parse_positive_duration)]
    pub node_topology_sync_interval: Duration,

    /// Also write the NodeResourceTopology (JSON) to this file whenever it changes;
    /// works in both modes (in standalone mode it is the only output).
    #[arg(long = "node-topology-output", value_name = "PATH")]
    pub node_topology_output: Option<PathBuf>,

    /// The kubelet's root directory as seen by koordlet; its cpu_manager_state names the
    /// CPU manager policy and the CPUs the static policy pinned.
    #[arg(
        long = "var-lib-kubelet-dir",
        default_value = "/var/lib/kubelet/",
        value_name = "DIR"
    )]
    pub var_lib_kubelet_dir: PathBuf,
}

impl Default for NodeTopologyArgs {
    fn default() -> Self {
        Self {
            node_topology_sync_interval: DEFAULT_SYNC_INTERVAL,
            node_topology_output: None,
            var_lib_kubelet_dir: PathBuf::from("/var/lib/kubelet/"),
        }
    }
}

/// Result of one API round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncOutcome {
    Created,
    Updated(String),
    Unchanged,
}

/// Reads the hardware; called off the async reactor.
pub type HardwareSource = Arc<dyn Fn() -> Result<NodeHardware, NodeTopologyError> + Send + Sync>;

/// The I/O shell: computes the desired topology from the states informer
/// and the hardware, and reports it (see the module doc).
pub struct NodeTopologyReporter {
    states: StatesInformer,
    hardware: HardwareSource,
    client: Option<kube::Client>,
    output: Option<PathBuf>,
    interval: Duration,
    debounce: Duration,
    resync: Duration,
    last_reported: Option<DesiredTopology>,
    last_checked: Option<tokio::time::Instant>,
    last_problems: Vec<String>,
    last_written: Option<String>,
}

impl NodeTopologyReporter {
    /// `client`: report to the API server; `output`: also write the object
    /// to this file.
    pub fn new(
        states: StatesInformer,
        hardware: HardwareSource,
        client: Option<kube::Client>,
        output: Option<PathBuf>,
    ) -> Self {
        Self {
            states,
            hardware,
            client,
            output,
            interval: DEFAULT_SYNC_INTERVAL,
            debounce: Duration::from_millis(500),
            resync: Duration::from_secs(60),
            last_reported: None,
            last_checked: None,
            last_problems: Vec::new(),
            last_written: None,
        }
    }

    /// How often the content is recomputed.
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Quiet time after a pod or Node change before recomputing.
    pub fn with_debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// How long an unchanged content goes without re-reading the object
    /// from the API server (repairs edits and deletions by others).
    pub fn with_resync(mut self, resync: Duration) -> Self {
        self.resync = resync;
        self
    }

    /// Computes the desired content; `None` while pods (or, with an API
    /// server, the Node) are not known yet.
    pub async fn desired(&mut self) -> Result<Option<DesiredTopology>, NodeTopologyError> {
        let Some(pods) = self.states.pods() else {
            return Ok(None);
        };
        let node = self.states.node();
        if self.client.is_some() && node.is_none() {
            return Ok(None);
        }
        let hardware = Arc::clone(&self.hardware);
        let hardware = tokio::task::spawn_blocking(move || hardware())
            .await
            .map_err(|err| NodeTopologyError::Malformed {
                path: PathBuf::from("/sys"),
                reason: format!("hardware reader failed: {err}"),
            })??;
        let (desired, problems) = build_desired_topology(&hardware, node.as_deref(), &pods.pods)?;
        if problems != self.last_problems {
            for problem in &problems {
                tracing::warn!(problem = %problem, "node topology input skipped: {problem}");
            }
            self.last_problems = problems;
        }
        Ok(Some(desired))
    }

    /// One round: compute, then report where configured.
    pub async fn report_once(&mut self) -> Result<Option<SyncOutcome>, NodeTopologyError> {
        let Some(desired) = self.desired().await? else {
            tracing::debug!("node topology waits for pods and the Node");
            return Ok(None);
        };
        let node = self.states.node();
        let name = self.states.node_name().to_string();
        if let Some(path) = self.output.clone() {
            let object = desired.new_object(&name, node.as_deref());
            let text =
                serde_json::to_string_pretty(&object).map_err(|err| NodeTopologyError::Encode {
                    key: "NodeResourceTopology",
                    reason: err.to_string(),
                })?;
            if self.last_written.as_deref() != Some(text.as_str()) {
                let write_path = path.clone();
                let contents = text.clone();
                tokio::task::spawn_blocking(move || {
                    crate::statesinformer::nodemetric::write_atomically(&write_path, &contents)
                })
                .await
                .map_err(|err| NodeTopologyError::Write {
                    path: path.clone(),
                    source: std::io::Error::other(err.to_string()),
                })?
                .map_err(|source| NodeTopologyError::Write {
                    path: path.clone(),
                    source,
                })?;
                tracing::info!(path = %path.display(), "node topology written");
                self.last_written = Some(text);
            }
        }
        let Some(client) = self.client.clone() else {
            return Ok(None);
        };
        let fresh = self
            .last_checked
            .is_some_and(|checked| checked.elapsed() < self.resync);
        if fresh && self.last_reported.as_ref() == Some(&desired) {
            return Ok(Some(SyncOutcome::Unchanged));
        }
        let outcome = sync_to_api(client, &name, node.as_deref(), &desired).await?;
        match &outcome {
            SyncOutcome::Created => tracing::info!(name = %name, "NodeResourceTopology created"),
            SyncOutcome::Updated(reason) => {
                tracing::info!(name = %name, reason = %reason, "NodeResourceTopology updated: {reason}")
            }
            SyncOutcome::Unchanged => {
                tracing::debug!(name = %name, "NodeResourceTopology up to date")
            }
        }
        self.last_reported = Some(desired);
        self.last_checked = Some(tokio::time::Instant::now());
        Ok(Some(outcome))
    }

    /// Reports until shutdown: at start, after pod or Node changes
    /// (debounced) and every interval.
    pub async fn run(mut self, shutdown: Shutdown) {
        tracing::info!(
            interval = ?self.interval,
            apiserver = self.client.is_some(),
            output = ?self.output,
            "reporting the node topology"
        );
        let mut pods = self.states.subscribe_pods();
        let mut node = self.states.subscribe_node();
        // A persistent failure (e.g. the CRD is not installed) is warned
        // about once, not every interval.
        let mut last_error: Option<String> = None;
        loop {
            match self.report_once().await {
                Ok(_) => {
                    if last_error.take().is_some() {
                        tracing::info!("node topology report recovered");
                    }
                }
                Err(err) => {
                    let text = err.to_string();
                    if last_error.as_deref() == Some(text.as_str()) {
                        tracing::debug!(error = %text, "node topology report still failing");
                    } else {
                        tracing::warn!(error = %text, "node topology report failed: {text}");
                        last_error = Some(text);
                    }
                }
            }
            let changed = tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(self.interval) => false,
                result = pods.changed() => result.is_ok(),
                result = node.changed() => result.is_ok(),
            };
            if changed {
                tokio::select! {
                    _ = shutdown.wait() => return,
                    _ = tokio::time::sleep(self.debounce) => {}
                }
                pods.mark_unchanged();
                node.mark_unchanged();
            }
        }
    }
}

/// Creates the object when missing, replaces it when its content differs.
pub async fn sync_to_api(
    client: kube::Client,
    name: &str,
    node: Option<&Node>,
    desired: &DesiredTopology,
) -> Result<SyncOutcome, NodeTopologyError> {
    let api = kube::Api::<NodeResourceTopology>::all(client);
    let api_error = |source| NodeTopologyError::Api {
        name: name.to_string(),
        source,
    };
    let params = kube::api::PostParams::default();
    match api.get_opt(name).await.map_err(api_error)? {
        None => {
            api.create(&params, &desired.new_object(name, node))
                .await
                .map_err(api_error)?;
            Ok(SyncOutcome::Created)
        }
        Some(existing) => match desired.change_reason(&existing) {
            None => Ok(SyncOutcome::Unchanged),
            Some(reason) => {
                let mut updated = existing;
                desired.apply_to(&mut updated);
                // The resourceVersion read above guards against lost updates:
                // on conflict the next round starts over from a fresh read.
                api.replace(name, &params, &updated)
                    .await
                    .map_err(api_error)?;
                Ok(SyncOutcome::Updated(reason))
            }
        },
    }
}

/// Whether `--feature-gates` leaves `NodeTopologyReport` on (the default).
pub fn report_gate(feature_gates: &str) -> bool {
    crate::features::parse_feature_gates(feature_gates)
        .ok()
        .and_then(|gates| gates.get(NODE_TOPOLOGY_REPORT_GATE).copied())
        .unwrap_or(true)
}

/// Starts the reporter: API reporting in cluster mode unless the
/// `NodeTopologyReport` gate is off; the file output when configured. The
/// CPU topology comes from `cache` when its collector has filled it.
pub fn spawn(
    args: &NodeTopologyArgs,
    states: &StatesInformer,
    system: &SystemArgs,
    cache: Option<Arc<MetricCache>>,
    client: Option<kube::Client>,
    report_gate: bool,
    shutdown: Shutdown,
) {
    let client = client.filter(|_| report_gate);
    if client.is_none() && args.node_topology_output.is_none() {
        tracing::info!(
            "node topology is not reported (no API server or gate off, no --node-topology-output)"
        );
        return;
    }
    // The topology collector keeps the CPU topology in the metric cache;
    // sysfs is read only until it has.
    let kubelet_root = args.var_lib_kubelet_dir.clone();
    let system = system.clone();
    let hardware: HardwareSource = Arc::new(move || {
        let known = cache.as_ref().and_then(|cache| cache.cpu_topology());
        read_node_facts(
            &system,
            &kubelet_root,
            known.map(|cpus| CpuTopology::clone(&cpus)),
        )
    });
    let reporter = NodeTopologyReporter::new(
        states.clone(),
        hardware,
        client,
        args.node_topology_output.clone(),
    )
    .with_interval(args.node_topology_sync_interval);
    tokio::spawn(reporter.run(shutdown));
}
