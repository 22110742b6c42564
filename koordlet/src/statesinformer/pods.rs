//! Keeps the node's pods current: reads them from a source at the sync
//! interval, publishes each good list, and keeps the last good list when a
//! read fails (counting the failure).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use koord_common::Shutdown;

use koord_common::health::StatusCheck;

use super::apiserver::ApiServerPods;
use super::inputfile::InputFile;
use super::kubelet::{KubeletClient, KubeletError};
use super::metrics::StatesMetrics;
use super::podsfile::{PodsFileError, parse_pods_text};
use super::{PodsOrigin, PodsSnapshot, StatesInformer};

/// How often a pods file is checked for changes (bounded by the sync interval).
pub const FILE_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// A kubelet that restarts briefly lists no pods; an empty list replacing a
/// non-empty one is believed only after this many consecutive reads.
pub const EMPTY_LIST_CONFIRMATIONS: u32 = 3;

/// Where pods are read from.
#[derive(Debug)]
pub enum PodSource {
    /// A kubelet's (or kubelet-compatible) `/pods`.
    Kubelet(KubeletClient),
    /// A JSON/YAML pods file.
    File(PathBuf),
    /// The API server, watching pods bound to this node.
    ApiServer(ApiServerPods),
}

#[derive(Debug, thiserror::Error)]
pub enum PodSourceError {
    #[error(transparent)]
    Kubelet(#[from] KubeletError),
    #[error(transparent)]
    File(#[from] PodsFileError),
    #[error(
        "the kubelet listed no pods while {previous} were known; keeping them until {EMPTY_LIST_CONFIRMATIONS} reads agree"
    )]
    UnconfirmedEmpty { previous: usize },
    #[error("the API server watch of this node's pods has not listed them yet")]
    ApiServerNotSynced,
}

impl PodSource {
    pub fn origin(&self) -> PodsOrigin {
        match self {
            PodSource::Kubelet(_) => PodsOrigin::Kubelet,
            PodSource::File(_) => PodsOrigin::File,
            PodSource::ApiServer(_) => PodsOrigin::ApiServer,
        }
    }

    /// Reads the current pods once.
    pub async fn fetch(&self) -> Result<Vec<Pod>, PodSourceError> {
        match self {
            PodSource::Kubelet(client) => Ok(client.get_pods().await?),
            PodSource::File(path) => read_pods(&InputFile::new(path)).await,
            PodSource::ApiServer(watch) => watch.pods().ok_or(PodSourceError::ApiServerNotSynced),
        }
    }

    fn describe(&self) -> String {
        match self {
            PodSource::Kubelet(client) => format!("kubelet {}", client.base_url()),
            PodSource::File(path) => format!("pods file {}", path.display()),
            PodSource::ApiServer(_) => "API server pod watch".to_string(),
        }
    }
}

/// Reads and parses the pods file with [`InputFile`]'s rules (regular
/// file, bounded size, deadline, one stuck read at most).
async fn read_pods(input: &InputFile) -> Result<Vec<Pod>, PodSourceError> {
    let path = input.path().to_path_buf();
    input
        .read(parse_pods_text, move |source| PodsFileError::Read {
            path: path.clone(),
            source,
        })
        .await
        .map_err(PodSourceError::from)
}

/// A file's identity for change detection.
fn file_fingerprint(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// The loop that keeps [`StatesInformer::pods`] current.
pub struct PodsSyncer {
    source: PodSource,
    fallback: Option<ApiServerPods>,
    states: StatesInformer,
    interval: Duration,
    metrics: Option<StatesMetrics>,
    empty_reads: u32,
    /// The pods file (File sources), read with one guard across syncs.
    input: Option<InputFile>,
    /// Reports the pods file's state (standalone): failing with the error
    /// while the file cannot be used.
    readiness: Option<StatusCheck>,
}

impl PodsSyncer {
    pub fn new(source: PodSource, states: StatesInformer, interval: Duration) -> Self {
        let input = match &source {
            PodSource::File(path) => Some(InputFile::new(path)),
            _ => None,
        };
        Self {
            source,
            fallback: None,
            states,
            interval,
            metrics: None,
            empty_reads: 0,
            input,
            readiness: None,
        }
    }

    /// Sets `check` passing after each good read and failing with the error
    /// after each bad one.
    pub fn with_readiness(mut self, check: StatusCheck) -> Self {
        self.readiness = Some(check);
        self
    }

    /// Used while the primary source fails (cluster mode).
    pub fn with_fallback(mut self, fallback: ApiServerPods) -> Self {
        self.fallback = Some(fallback);
        self
    }

    pub fn with_metrics(mut self, metrics: StatesMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// One sync: on success publishes the pods and returns how many; on
    /// failure counts the error, keeps the last snapshot and, when a fallback
    /// exists, publishes the fallback's pods instead.
    pub async fn sync_once(&mut self) -> Result<usize, PodSourceError> {
        let fetched = match &self.input {
            Some(input) => read_pods(input).await,
            None => self.source.fetch().await,
        };
        let result = fetched.and_then(|pods| self.accept(pods));
        match result {
            Ok(pods) => {
                let count = pods.len();
                self.publish(pods, self.source.origin());
                if let Some(check) = &self.readiness {
                    check.set_passing();
                }
                Ok(count)
            }
            Err(err) => {
                if let Some(check) = &self.readiness {
                    check.set_failing(format!("{err}; keeping the last pods"));
                }
                self.states.record_pods_error();
                if let Some(metrics) = &self.metrics {
                    metrics.count_pods_sync_error(self.source.origin().as_str());
                }
                tracing::warn!(source = %self.source.describe(), error = %err, "pods sync failed; keeping the last pods");
                if let Some(fallback) = &self.fallback {
                    match fallback.pods() {
                        Some(pods) => {
                            tracing::info!(
                                pods = pods.len(),
                                "using the API server's view of this node's pods"
                            );
                            self.publish(pods, PodsOrigin::ApiServer);
                        }
                        None => tracing::debug!("the API server pod watch has not synced yet"),
                    }
                }
                Err(err)
            }
        }
    }

    fn accept(&mut self, pods: Vec<Pod>) -> Result<Vec<Pod>, PodSourceError> {
        if !matches!(self.source, PodSource::Kubelet(_)) || !pods.is_empty() {
            self.empty_reads = 0;
            return Ok(pods);
        }
        let previous = self.states.pods().map_or(0, |snapshot| snapshot.pods.len());
        self.empty_reads += 1;
        if previous > 0 && self.empty_reads < EMPTY_LIST_CONFIRMATIONS {
            return Err(PodSourceError::UnconfirmedEmpty { previous });
        }
        Ok(pods)
    }

    fn publish(&self, pods: Vec<Pod>, origin: PodsOrigin) {
        tracing::debug!(pods = pods.len(), origin = origin.as_str(), "pods synced");
        self.states.set_pods(PodsSnapshot {
            pods,
            origin,
            synced_at: SystemTime::now(),
        });
    }

    /// Syncs now and then at the interval until shutdown; a pods file is also
    /// re-read as soon as it changes.
    pub async fn run(mut self, shutdown: Shutdown) {
        tracing::info!(source = %self.source.describe(), interval = ?self.interval, "syncing pods");
        let file = match &self.source {
            PodSource::File(path) => Some(path.clone()),
            _ => None,
        };
        let poll = match &file {
            Some(_) => self.interval.min(FILE_POLL_INTERVAL),
            None => self.interval,
        };
        let mut fingerprint = file.as_deref().and_then(file_fingerprint);
        let _ = self.sync_once().await;
        let mut last_sync = Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = tokio::time::sleep(poll) => {}
            }
            let changed = match &file {
                Some(path) => {
                    let current = file_fingerprint(path);
                    let changed = current != fingerprint;
                    fingerprint = current;
                    changed
                }
                None => false,
            };
            if changed || last_sync.elapsed() >= self.interval {
                let _ = self.sync_once().await;
                last_sync = Instant::now();
            }
        }
    }
}

/// Cluster mode: waits for the Node (its addresses and kubelet port say
/// where the kubelet is), then syncs pods from the kubelet, falling back to
/// the API server's view when enabled. Without a usable kubelet address the
/// API server watch is the only source (or, with the fallback disabled,
/// pods never sync and readiness says why).
pub async fn run_cluster_pods(
    args: super::StatesArgs,
    client: kube::Client,
    states: StatesInformer,
    metrics: StatesMetrics,
    shutdown: Shutdown,
) {
    let mut node_updates = states.subscribe_node();
    while !states.node_synced() {
        tokio::select! {
            _ = shutdown.wait() => return,
            changed = node_updates.changed() => if changed.is_err() { return },
        }
    }
    let fallback = args
        .pods_apiserver_fallback
        .then(|| ApiServerPods::new(client, states.node_name(), shutdown.clone()));
    let kubelet = match states.node() {
        None => {
            tracing::error!(node = %states.node_name(), "Node {} does not exist; cannot locate its kubelet", states.node_name());
            None
        }
        Some(node) => KubeletClient::for_node(
            &node,
            &args.kubelet_preferred_address_type,
            args.kubelet_insecure_tls,
            args.kubelet_read_only_port,
            Path::new(super::kubelet::SERVICE_ACCOUNT_TOKEN_FILE),
            args.kubelet_sync_timeout,
        )
        .inspect_err(|err| tracing::error!(error = %err, "cannot build the kubelet client"))
        .ok(),
    };
    let syncer = match (kubelet, fallback) {
        (Some(kubelet), fallback) => {
            let syncer = PodsSyncer::new(
                PodSource::Kubelet(kubelet.with_metrics(metrics.clone())),
                states,
                args.kubelet_sync_interval,
            );
            match fallback {
                Some(fallback) => syncer.with_fallback(fallback),
                None => syncer,
            }
        }
        (None, Some(fallback)) => {
            tracing::warn!("reading this node's pods from the API server only");
            PodsSyncer::new(
                PodSource::ApiServer(fallback),
                states,
                args.kubelet_sync_interval,
            )
        }
        (None, None) => {
            tracing::error!(
                "no kubelet to read pods from and --pods-apiserver-fallback=false; pods will not sync"
            );
            return;
        }
    };
    syncer.with_metrics(metrics).run(shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::statesinformer::RequiredSyncs;
    use koord_common::testing::TempDir;

    const ONE_POD: &str = "- metadata: {name: a, namespace: n, uid: u1}\n";

    #[tokio::test]
    async fn file_source_keeps_the_last_good_list() {
        let dir = TempDir::new("pods-file").unwrap();
        let path = dir.path().join("pods.yaml");
        std::fs::write(&path, ONE_POD).unwrap();
        let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
        let mut syncer = PodsSyncer::new(
            PodSource::File(path.clone()),
            states.clone(),
            Duration::from_secs(10),
        );
        assert_eq!(syncer.sync_once().await.unwrap(), 1);
        std::fs::write(&path, "{broken").unwrap();
        assert!(syncer.sync_once().await.is_err());
        let snapshot = states.pods().unwrap();
        assert_eq!(snapshot.pods.len(), 1);
        assert_eq!(snapshot.origin, PodsOrigin::File);
        assert_eq!(states.pods_stats().errors(), 1);
        // An empty file is not "no pods" (issue 16); an empty list is.
        std::fs::write(&path, "").unwrap();
        assert!(syncer.sync_once().await.is_err());
        assert_eq!(states.pods().unwrap().pods.len(), 1);
        std::fs::write(&path, "[]").unwrap();
        assert_eq!(syncer.sync_once().await.unwrap(), 0);
        assert!(states.pods().unwrap().pods.is_empty());
    }

    #[tokio::test]
    async fn run_rereads_a_changed_file_before_the_interval() {
        let dir = TempDir::new("pods-file-watch").unwrap();
        let path = dir.path().join("pods.yaml");
        std::fs::write(&path, ONE_POD).unwrap();
        let states = StatesInformer::new("node-a", RequiredSyncs::PODS_ONLY);
        let shutdown = Shutdown::new();
        let syncer = PodsSyncer::new(
            PodSource::File(path.clone()),
            states.clone(),
            Duration::from_secs(3600),
        );
        let task = tokio::spawn(syncer.run(shutdown.clone()));
        let mut updates = states.subscribe_pods();
        tokio::time::timeout(
            Duration::from_secs(10),
            updates.wait_for(|snapshot| snapshot.is_some()),
        )
        .await
        .unwrap()
        .unwrap();
        std::fs::write(
            &path,
            format!("{ONE_POD}- metadata: {{name: b, namespace: n, uid: u2}}\n"),
        )
        .unwrap();
        tokio::time::timeout(
            Duration::from_secs(10),
            updates.wait_for(|snapshot| snapshot.as_ref().is_some_and(|s| s.pods.len() == 2)),
        )
        .await
        .expect("the changed file is re-read within a few polls")
        .unwrap();
        shutdown.trigger(koord_common::ShutdownReason::Requested("test".into()));
        task.await.unwrap();
    }
}
