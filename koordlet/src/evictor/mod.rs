//! Pod eviction for the QoS strategies (memoryevict, cpuevict).
//!
//! - Cluster mode, by default (upstream's default): the pod's containers
//!   are stopped through the container runtime's CRI (`StopContainer`,
//!   timeout 0; see [`runtime`]); the pod object stays and the kubelet
//!   restarts the containers per the pod's restart policy. koordlet records
//!   a Warning Event `evictPodSuccess` / `evictPodFail` (ours: upstream's
//!   kill path records none) and counts `koordlet_pod_eviction`.
//! - Cluster mode with `--only-evict-by-api=true`: a `policy/v1` Eviction through the API server, which
//!   respects PodDisruptionBudgets (a 429 answer means "not now": the pod is
//!   retried at a later round; the client must not retry 429s by itself:
//!   build the backend with [`EvictionBackend::api_without_retries`] or use
//!   [`PodEvictor::with_cluster_reload`]), then a Warning Event on the pod
//!   (`evictPodSuccess` / `evictPodFail`, as upstream) and the reason in the
//!   pod's `koordinator.sh/evict-reason` / `koordinator.sh/evict-trigger`
//!   annotations (upstream's descheduler keys).
//! - Standalone mode: SIGKILL to every process of the pod's cgroups, only
//!   with `--evict-standalone-kill=true`; otherwise the eviction is logged.
//! - Every mode: `--evict-dry-run` logs instead of acting, a token bucket
//!   (`--evict-qps`, `--evict-burst`) bounds the eviction rate, and a pod
//!   already evicted is not evicted again for two minutes (upstream's cache).

mod api;
pub mod bookkeeping;
pub mod kill;
pub mod qos;
pub mod ratelimit;
pub mod request;
pub mod runtime;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use koord_common::metrics::MetricsRegistry;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

pub use api::{
    ANNOTATION_EVICT_REASON, ANNOTATION_EVICT_TRIGGER, EVENT_REASON_EVICT_FAIL,
    EVENT_REASON_EVICT_SUCCESS, eviction_body, eviction_path,
};
use ratelimit::TokenBucket;
pub use request::{EVICTED_MEMORY, EVICTED_REASON, EvictionOutcome, EvictionRequest, PodRef};

/// Eviction flags.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct EvictorArgs {
    /// Cluster mode: evict through the Eviction API (which honours
    /// PodDisruptionBudgets) instead of stopping the pod's containers
    /// through the container runtime (upstream's default).
    #[arg(long = "only-evict-by-api", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub only_evict_by_api: bool,

    /// Log the evictions the strategies decide without evicting anything.
    #[arg(long = "evict-dry-run", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub dry_run: bool,

    /// In standalone mode (no API server), evict by sending SIGKILL to the
    /// processes of the pod's cgroups; without it evictions are only logged.
    #[arg(long = "evict-standalone-kill", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub standalone_kill: bool,

    /// Sustained evictions per second.
    #[arg(long = "evict-qps", default_value_t = 1.0, value_name = "QPS")]
    pub qps: f64,

    /// Evictions allowed at once before the rate applies.
    #[arg(long = "evict-burst", default_value_t = 5, value_name = "COUNT")]
    pub burst: u32,

    /// containerd's CRI socket, tried after `<var-run-root-dir>/containerd/containerd.sock`
    /// and `<var-run-root-dir>/containerd.sock` (upstream's order).
    #[arg(long = "containerd-endpoint", value_name = "PATH")]
    pub containerd_endpoint: Option<PathBuf>,
}

impl Default for EvictorArgs {
    fn default() -> Self {
        Self {
            only_evict_by_api: false,
            dry_run: false,
            standalone_kill: false,
            qps: 1.0,
            burst: 5,
            containerd_endpoint: None,
        }
    }
}

/// How evictions are carried out.
#[derive(Clone)]
pub enum EvictionBackend {
    /// The Eviction API of this cluster.
    Api(kube::Client),
    /// Stop the containers through the runtime; Events through `events`.
    RuntimeKill {
        stopper: Arc<dyn runtime::ContainerStopper>,
        events: Option<kube::Client>,
    },
    /// SIGKILL to the pod's processes (standalone, explicitly enabled).
    Kill,
    /// Log only (standalone without the kill flag).
    LogOnly,
}

impl EvictionBackend {
    /// An API backend whose client does not retry by itself: kube's default
    /// client retries a 429 up to 15 times with backoff, which would hold an
    /// eviction refused by a PodDisruptionBudget for minutes instead of
    /// handing it back to the next round.
    pub fn api_without_retries(mut config: kube::Config) -> Result<Self, kube::Error> {
        config.default_retry = false;
        Ok(Self::Api(kube::Client::try_from(config)?))
    }
}

impl std::fmt::Debug for EvictionBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Api(_) => "Api",
            Self::RuntimeKill { .. } => "RuntimeKill",
            Self::Kill => "Kill",
            Self::LogOnly => "LogOnly",
        })
    }
}

type Labels = Vec<(&'static str, String)>;

/// Upstream's eviction counters plus one per outcome.
#[derive(Clone, Default)]
struct EvictionMetrics {
    /// `koordlet_pod_eviction{node,reason}`.
    evictions: Family<Labels, Counter>,
    /// `koordlet_pod_eviction_detail{node,pod_namespace,pod_name,reason}`.
    details: Family<Labels, Counter>,
    /// `koordlet_pod_eviction_requests{trigger,outcome}`.
    requests: Family<Labels, Counter>,
}

/// Carries out evictions; cheap to clone and shared by the strategies.
#[derive(Clone)]
pub struct PodEvictor {
    inner: Arc<Inner>,
}

struct Inner {
    backend: EvictionBackend,
    node_name: String,
    dry_run: bool,
    limiter: Mutex<TokenBucket>,
    evicted: Mutex<HashMap<String, Instant>>,
    /// Pods whose latest eviction was refused or failed, and when.
    refused: Mutex<HashMap<String, Instant>>,
    in_flight: Mutex<std::collections::HashSet<String>>,
    metrics: EvictionMetrics,
    /// Where to load a non-retrying client from on first use (see
    /// [`PodEvictor::with_cluster_reload`]).
    reload: Option<koord_common::ClusterOptions>,
    own_client: tokio::sync::OnceCell<kube::Client>,
}

impl std::fmt::Debug for PodEvictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodEvictor")
            .field("backend", &self.inner.backend)
            .field("node_name", &self.inner.node_name)
            .field("dry_run", &self.inner.dry_run)
            .finish()
    }
}

impl PodEvictor {
    pub fn new(backend: EvictionBackend, node_name: impl Into<String>, args: &EvictorArgs) -> Self {
        Self {
            inner: Arc::new(Inner {
                backend,
                node_name: node_name.into(),
                dry_run: args.dry_run,
                limiter: Mutex::new(TokenBucket::new(args.qps, args.burst)),
                evicted: Mutex::new(HashMap::new()),
                refused: Mutex::new(HashMap::new()),
                in_flight: Mutex::new(std::collections::HashSet::new()),
                metrics: EvictionMetrics::default(),
                reload: None,
                own_client: tokio::sync::OnceCell::new(),
            }),
        }
    }

    /// The backend the flags and the mode select. Cluster mode: the API
    /// with `--only-evict-by-api`, else stopping containers through the
    /// runtime (sockets below the default `/var/run/`; see
    /// [`PodEvictor::with_runtime_endpoints`]). Standalone: the cgroup kill
    /// only when `--evict-standalone-kill` is set, else log only.
    pub fn for_mode(client: Option<kube::Client>, node_name: &str, args: &EvictorArgs) -> Self {
        let backend = match client {
            Some(client) if args.only_evict_by_api => EvictionBackend::Api(client),
            Some(client) => EvictionBackend::RuntimeKill {
                stopper: Arc::new(runtime::CriStopper::new(runtime::CriEndpoints {
                    var_run_root: PathBuf::from(crate::system::VAR_RUN_ROOT),
                    containerd: args.containerd_endpoint.clone(),
                })),
                events: Some(client),
            },
            None if args.standalone_kill => EvictionBackend::Kill,
            None => EvictionBackend::LogOnly,
        };
        Self::new(backend, node_name, args)
    }

    /// With the runtime backend: look for the CRI sockets as `endpoints`
    /// say (koordlet's `--var-run-root-dir`). Call before cloning.
    pub fn with_runtime_endpoints(mut self, endpoints: runtime::CriEndpoints) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => {
                if let EvictionBackend::RuntimeKill { stopper, .. } = &mut inner.backend {
                    *stopper = Arc::new(runtime::CriStopper::new(endpoints));
                }
            }
            None => tracing::warn!("the evictor is already shared; keeping its runtime endpoints"),
        }
        self
    }

    /// How long a pod asked to go counts as still releasing its resources:
    /// until it is gone (two minutes at most) for an eviction; not at all
    /// for stopped containers, which the kubelet restarts (upstream only
    /// waits out the cool time there).
    pub fn pending_window(&self) -> Duration {
        match self.inner.backend {
            EvictionBackend::RuntimeKill { .. } => Duration::ZERO,
            _ => EVICTED_MEMORY,
        }
    }

    /// With an API backend: on the first eviction, load the cluster
    /// configuration again from `options` and use a client without kube's
    /// own 429 retries (so a PodDisruptionBudget refusal returns at once);
    /// if that fails, the given client is used. Call before cloning.
    pub fn with_cluster_reload(mut self, options: koord_common::ClusterOptions) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.reload = Some(options),
            None => tracing::warn!("the evictor is already shared; keeping its API client"),
        }
        self
    }

    async fn api_client(&self, connected: &kube::Client) -> kube::Client {
        let Some(options) = &self.inner.reload else {
            return connected.clone();
        };
        self.inner
            .own_client
            .get_or_init(|| async {
                match api::non_retrying_client(options).await {
                    Ok(client) => client,
                    Err(reason) => {
                        tracing::warn!(reason = %reason, "evictions use the shared API client, which retries 429 answers itself");
                        connected.clone()
                    }
                }
            })
            .await
            .clone()
    }

    pub fn backend(&self) -> &EvictionBackend {
        &self.inner.backend
    }

    pub fn is_dry_run(&self) -> bool {
        self.inner.dry_run
    }

    /// Adds the eviction counters to the component registry.
    pub fn register_metrics(&self, registry: &MetricsRegistry) {
        let metrics = self.inner.metrics.clone();
        registry.register_component(|registry| {
            registry.register(
                "pod_eviction",
                "Number of eviction launched by koordlet",
                metrics.evictions,
            );
            registry.register(
                "pod_eviction_detail",
                "evict detail launched by koordlet",
                metrics.details,
            );
            registry.register(
                "pod_eviction_requests",
                "eviction requests from the QoS strategies by trigger and outcome",
                metrics.requests,
            );
        });
    }

    /// Whether the pod was evicted less than [`EVICTED_MEMORY`] before `now`.
    pub fn is_evicted(&self, uid: &str, now: Instant) -> bool {
        let Ok(mut evicted) = self.inner.evicted.lock() else {
            return false;
        };
        evicted.retain(|_, at| now.saturating_duration_since(*at) < EVICTED_MEMORY);
        evicted.contains_key(uid)
    }

    /// Pods whose latest eviction, less than [`EVICTED_MEMORY`] before
    /// `now`, was refused, failed or rate-limited: they still hold their
    /// resources, so a strategy should not count them as being released.
    pub fn recently_refused(&self, now: Instant) -> std::collections::HashSet<String> {
        let Ok(mut refused) = self.inner.refused.lock() else {
            return Default::default();
        };
        refused.retain(|_, at| now.saturating_duration_since(*at) < EVICTED_MEMORY);
        refused.keys().cloned().collect()
    }

    /// Records (`Some(when)`) or clears (`None`) a refusal of `uid`.
    fn note_refused(&self, uid: &str, at: Option<Instant>) {
        if let Ok(mut refused) = self.inner.refused.lock() {
            match at {
                Some(at) => {
                    refused.insert(uid.to_string(), at);
                }
                None => {
                    refused.remove(uid);
                }
            }
        }
    }

    fn remember(&self, uid: &str, now: Instant) {
        if let Ok(mut evicted) = self.inner.evicted.lock() {
            evicted.insert(uid.to_string(), now);
        }
    }

    fn take_token(&self, now: Instant) -> bool {
        self.inner
            .limiter
            .lock()
            .map(|mut bucket| bucket.try_take(now))
            .unwrap_or(false)
    }

    /// Evicts one pod; never panics, every outcome is logged and counted.
    pub async fn evict(&self, request: &EvictionRequest) -> EvictionOutcome {
        let outcome = self.evict_uncounted(request).await;
        let node = self.inner.node_name.clone();
        let metrics = &self.inner.metrics;
        metrics
            .requests
            .get_or_create(&vec![
                ("trigger", request.trigger.clone()),
                ("outcome", outcome.as_str().to_string()),
            ])
            .inc();
        if matches!(
            outcome,
            EvictionOutcome::Evicted
                | EvictionOutcome::Killed { .. }
                | EvictionOutcome::Stopped { .. }
        ) {
            metrics
                .evictions
                .get_or_create(&vec![
                    ("node", node.clone()),
                    ("reason", EVICTED_REASON.to_string()),
                ])
                .inc();
            metrics
                .details
                .get_or_create(&vec![
                    ("node", node),
                    ("pod_namespace", request.pod.namespace.clone()),
                    ("pod_name", request.pod.name.clone()),
                    ("reason", EVICTED_REASON.to_string()),
                ])
                .inc();
        }
        outcome
    }

    async fn evict_uncounted(&self, request: &EvictionRequest) -> EvictionOutcome {
        let uid = request.pod.uid.clone();
        let claimed = self
            .inner
            .in_flight
            .lock()
            .map(|mut in_flight| in_flight.insert(uid.clone()))
            .unwrap_or(false);
        if !claimed {
            tracing::debug!(pod = %request.pod, "an eviction of this pod is already under way");
            return EvictionOutcome::InProgress;
        }
        let outcome = self.evict_claimed(request).await;
        if let Ok(mut in_flight) = self.inner.in_flight.lock() {
            in_flight.remove(&uid);
        }
        outcome
    }

    async fn evict_claimed(&self, request: &EvictionRequest) -> EvictionOutcome {
        let pod = &request.pod;
        let now = Instant::now();
        if self.is_evicted(&pod.uid, now) {
            tracing::debug!(pod = %pod, trigger = %request.trigger, "pod was evicted before and is still present");
            return EvictionOutcome::AlreadyEvicted;
        }
        if !self.take_token(now) {
            tracing::warn!(pod = %pod, trigger = %request.trigger, "eviction rate limit reached; the pod is reconsidered next round");
            self.note_refused(&pod.uid, Some(now));
            return EvictionOutcome::RateLimited;
        }
        if self.inner.dry_run {
            tracing::warn!(pod = %pod, trigger = %request.trigger, message = %request.message,
                "dry run: would evict pod {pod}");
            self.remember(&pod.uid, now);
            return EvictionOutcome::DryRun;
        }
        let outcome = match &self.inner.backend {
            EvictionBackend::Api(connected) => {
                let client = self.api_client(connected).await;
                api::evict_through_api(&client, &self.inner.node_name, request).await
            }
            EvictionBackend::Kill => {
                let dirs = request.cgroup_dirs.clone();
                match tokio::task::spawn_blocking(move || kill::kill_cgroup_trees(&dirs)).await {
                    Ok(Ok(report)) => {
                        for (pid, error) in &report.failed {
                            tracing::warn!(pod = %pod, pid, error = %error, "cannot kill a process of the pod");
                        }
                        if report.failed.is_empty() {
                            tracing::warn!(pod = %pod, trigger = %request.trigger, killed = report.killed.len(),
                                message = %request.message, "killed the processes of pod {pod}");
                            EvictionOutcome::Killed {
                                processes: report.killed.len(),
                            }
                        } else {
                            EvictionOutcome::Failed {
                                error: format!(
                                    "{} of the pod's processes could not be killed",
                                    report.failed.len()
                                ),
                            }
                        }
                    }
                    Ok(Err(err)) => EvictionOutcome::Failed {
                        error: err.to_string(),
                    },
                    Err(err) => EvictionOutcome::Failed {
                        error: format!("kill task failed: {err}"),
                    },
                }
            }
            EvictionBackend::RuntimeKill { stopper, events } => {
                let outcome = stop_containers(stopper.as_ref(), request).await;
                if let Some(client) = events {
                    api::record_stop_event(client, &self.inner.node_name, request, &outcome).await;
                }
                outcome
            }
            EvictionBackend::LogOnly => {
                tracing::warn!(pod = %pod, trigger = %request.trigger, message = %request.message,
                    "would evict pod {pod}, but standalone eviction is disabled (--evict-standalone-kill=false)");
                EvictionOutcome::LoggedOnly
            }
        };
        match &outcome {
            EvictionOutcome::Evicted | EvictionOutcome::Killed { .. } => {
                self.remember(&pod.uid, now);
                self.note_refused(&pod.uid, None);
            }
            // The pod stays and its containers restart: not "already
            // evicted" (as upstream, whose kill path marks nothing).
            EvictionOutcome::Stopped { .. } => self.note_refused(&pod.uid, None),
            EvictionOutcome::Blocked { message } => {
                tracing::warn!(pod = %pod, message = %message, "eviction refused for now (429, PodDisruptionBudget); retrying at a later round");
                self.note_refused(&pod.uid, Some(now));
            }
            EvictionOutcome::Failed { error } => {
                tracing::warn!(pod = %pod, error = %error, "eviction failed");
                self.note_refused(&pod.uid, Some(now));
            }
            _ => {}
        }
        outcome
    }
}

/// Stops every container of the request through `stopper`; a pod without a
/// started container, or any container that fails, is a failure (retried
/// at a later round).
pub async fn stop_containers(
    stopper: &dyn runtime::ContainerStopper,
    request: &EvictionRequest,
) -> EvictionOutcome {
    let pod = &request.pod;
    if request.containers.is_empty() {
        return EvictionOutcome::Failed {
            error: "the pod has no started container to stop".to_string(),
        };
    }
    let mut errors = Vec::new();
    for id in &request.containers {
        if let Err(err) = stopper.stop(id).await {
            tracing::warn!(pod = %pod, container = %id, error = %err, "cannot stop a container of the pod");
            errors.push(err.to_string());
        }
    }
    if errors.is_empty() {
        tracing::warn!(pod = %pod, trigger = %request.trigger, containers = request.containers.len(),
            message = %request.message, "stopped the containers of pod {pod} through the runtime");
        EvictionOutcome::Stopped {
            containers: request.containers.len(),
        }
    } else {
        EvictionOutcome::Failed {
            error: format!(
                "{} of {} containers not stopped: {}",
                errors.len(),
                request.containers.len(),
                errors.join("; ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        evictor: EvictorArgs,
    }

    fn request(uid: &str) -> EvictionRequest {
        EvictionRequest {
            pod: PodRef {
                namespace: "ns".into(),
                name: format!("pod-{uid}"),
                uid: uid.into(),
            },
            trigger: "BEMemoryEvict".into(),
            message: "memory over threshold".into(),
            cgroup_dirs: vec![],
            containers: vec![],
        }
    }

    #[test]
    fn flags_parse_go_style_and_default_safe() {
        let defaults = Flags::try_parse_from(["koordlet"]).unwrap().evictor;
        assert_eq!(defaults, EvictorArgs::default());
        assert!(!defaults.dry_run && !defaults.standalone_kill && !defaults.only_evict_by_api);
        let args = Flags::try_parse_from([
            "koordlet",
            "--evict-dry-run",
            "--evict-standalone-kill=true",
            "--only-evict-by-api=true",
            "--evict-qps=0.5",
            "--evict-burst=2",
        ])
        .unwrap()
        .evictor;
        assert!(args.dry_run && args.standalone_kill && args.only_evict_by_api);
        assert_eq!((args.qps, args.burst), (0.5, 2));
    }

    #[test]
    fn backend_follows_mode_and_flag() {
        let off = EvictorArgs::default();
        let on = EvictorArgs {
            standalone_kill: true,
            ..EvictorArgs::default()
        };
        assert!(matches!(
            PodEvictor::for_mode(None, "n", &off).backend(),
            EvictionBackend::LogOnly
        ));
        assert!(matches!(
            PodEvictor::for_mode(None, "n", &on).backend(),
            EvictionBackend::Kill
        ));
    }

    #[tokio::test]
    async fn log_only_dry_run_rate_limit_and_memory() {
        let args = EvictorArgs {
            burst: 2,
            qps: 0.0,
            ..EvictorArgs::default()
        };
        let evictor = PodEvictor::new(EvictionBackend::LogOnly, "n", &args);
        assert_eq!(
            evictor.evict(&request("a")).await,
            EvictionOutcome::LoggedOnly
        );
        // Logged-only does not mark the pod evicted.
        assert!(!evictor.is_evicted("a", Instant::now()));
        assert_eq!(
            evictor.evict(&request("b")).await,
            EvictionOutcome::LoggedOnly
        );
        assert_eq!(
            evictor.evict(&request("c")).await,
            EvictionOutcome::RateLimited
        );

        let dry = PodEvictor::new(
            EvictionBackend::Kill,
            "n",
            &EvictorArgs {
                dry_run: true,
                ..EvictorArgs::default()
            },
        );
        assert_eq!(dry.evict(&request("a")).await, EvictionOutcome::DryRun);
        assert!(dry.is_evicted("a", Instant::now()));
        assert_eq!(
            dry.evict(&request("a")).await,
            EvictionOutcome::AlreadyEvicted
        );
        assert!(!dry.is_evicted("a", Instant::now() + EVICTED_MEMORY));
        assert!(EvictionOutcome::DryRun.releases());
        assert!(!EvictionOutcome::RateLimited.releases());
        assert!(
            !EvictionOutcome::Blocked {
                message: String::new()
            }
            .releases()
        );
    }

    #[tokio::test]
    async fn counters_use_upstream_names() {
        let registry = MetricsRegistry::new("koordlet");
        let evictor = PodEvictor::new(EvictionBackend::Kill, "node-a", &EvictorArgs::default());
        evictor.register_metrics(&registry);
        // Nothing to kill: the pod's cgroups are gone, which counts as killed (0 processes).
        assert_eq!(
            evictor.evict(&request("a")).await,
            EvictionOutcome::Killed { processes: 0 }
        );
        let body = registry.encode().unwrap();
        assert!(
            body.contains("koordlet_pod_eviction_total{node=\"node-a\",reason=\"evicted\"} 1"),
            "{body}"
        );
        assert!(
            body.contains("pod_namespace=\"ns\",pod_name=\"pod-a\""),
            "{body}"
        );
        assert!(
            body.contains(
                "koordlet_pod_eviction_requests_total{trigger=\"BEMemoryEvict\",outcome=\"killed\"} 1"
            ),
            "{body}"
        );
    }

    /// Records the containers it is asked to stop; ids containing `fail` fail.
    #[derive(Debug, Default)]
    struct FakeStopper(Mutex<Vec<String>>);

    impl runtime::ContainerStopper for FakeStopper {
        fn stop<'a>(
            &'a self,
            container_id: &'a str,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<(), runtime::StopError>> + Send + 'a>,
        > {
            Box::pin(async move {
                if container_id.contains("fail") {
                    return Err(runtime::StopError::UnsupportedRuntime("fake".into()));
                }
                self.0.lock().unwrap().push(container_id.to_string());
                Ok(())
            })
        }
    }

    #[tokio::test]
    async fn runtime_backend_stops_containers_counts_and_never_marks_the_pod_evicted() {
        let stopper = Arc::new(FakeStopper::default());
        let registry = MetricsRegistry::new("koordlet");
        let evictor = PodEvictor::new(
            EvictionBackend::RuntimeKill {
                stopper: stopper.clone(),
                events: None,
            },
            "node-a",
            &EvictorArgs::default(),
        );
        evictor.register_metrics(&registry);
        assert_eq!(evictor.pending_window(), Duration::ZERO);
        let mut two = request("a");
        two.containers = vec!["containerd://c1".into(), "containerd://c2".into()];
        assert_eq!(
            evictor.evict(&two).await,
            EvictionOutcome::Stopped { containers: 2 }
        );
        assert_eq!(
            stopper.0.lock().unwrap().clone(),
            ["containerd://c1", "containerd://c2"]
        );
        // Upstream's kill path marks nothing: the restarted pod can be stopped again.
        assert!(!evictor.is_evicted("a", Instant::now()));
        assert_eq!(
            evictor.evict(&two).await,
            EvictionOutcome::Stopped { containers: 2 }
        );
        // A failing container or a pod without containers is a failure, retried later.
        let mut failing = request("b");
        failing.containers = vec!["containerd://ok".into(), "containerd://fail".into()];
        assert!(matches!(
            evictor.evict(&failing).await,
            EvictionOutcome::Failed { .. }
        ));
        assert!(evictor.recently_refused(Instant::now()).contains("b"));
        assert!(matches!(
            evictor.evict(&request("c")).await,
            EvictionOutcome::Failed { error } if error.contains("no started container")
        ));
        let body = registry.encode().unwrap();
        assert!(
            body.contains("koordlet_pod_eviction_total{node=\"node-a\",reason=\"evicted\"} 2"),
            "{body}"
        );
        assert!(body.contains("outcome=\"containers_stopped\"} 2"), "{body}");
    }

    #[test]
    fn only_evict_by_api_picks_the_api_in_cluster_mode() {
        // A client that is never called: building one needs no server.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let client = kube::Client::try_from(config).unwrap();
        let default = PodEvictor::for_mode(Some(client.clone()), "n", &EvictorArgs::default());
        assert!(matches!(
            default.backend(),
            EvictionBackend::RuntimeKill { .. }
        ));
        let api = PodEvictor::for_mode(
            Some(client),
            "n",
            &EvictorArgs {
                only_evict_by_api: true,
                ..EvictorArgs::default()
            },
        );
        assert!(matches!(api.backend(), EvictionBackend::Api(_)));
        assert_eq!(api.pending_window(), EVICTED_MEMORY);
    }
}
