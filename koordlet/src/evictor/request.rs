//! What an eviction is: the pod, the request a strategy hands over and its
//! outcome. Plain data shared by every eviction path (the API path, the
//! runtime and cgroup kills, the QoS adapter, the strategies' bookkeeping).

use std::path::PathBuf;
use std::time::Duration;

/// Upstream's reason string for every koordlet eviction (metric label and
/// Event message).
pub const EVICTED_REASON: &str = "evicted";

/// How long a pod stays "already evicted" (upstream's expiring cache).
pub const EVICTED_MEMORY: Duration = Duration::from_secs(120);

/// The pod to evict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One eviction a strategy asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionRequest {
    pub pod: PodRef,
    /// The upstream feature that decided it (`BEMemoryEvict`, `BECPUEvict`).
    pub trigger: String,
    /// Why, for humans (logged, in the Event and the annotation).
    pub message: String,
    /// Absolute cgroup directories of the pod (for the standalone kill).
    pub cgroup_dirs: Vec<PathBuf>,
    /// Runtime IDs (`containerd://<id>`) of the pod's started containers
    /// (for stopping them through the runtime).
    pub containers: Vec<String>,
}

impl EvictionRequest {
    /// Upstream's wording: `trigger by koordlet feature <trigger>, kill pod: <name>`.
    pub fn upstream_message(&self) -> String {
        format!(
            "trigger by koordlet feature {}, kill pod: {}",
            self.trigger, self.pod.name
        )
    }
}

/// What happened to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// The API server accepted the eviction.
    Evicted,
    /// The pod's processes were killed (standalone).
    Killed { processes: usize },
    /// The pod's containers were stopped through the runtime.
    Stopped { containers: usize },
    /// Evicted by an earlier round and not gone yet.
    AlreadyEvicted,
    /// An eviction of the same pod is still under way.
    InProgress,
    /// `--evict-dry-run`: only logged.
    DryRun,
    /// Standalone without `--evict-standalone-kill`: only logged.
    LoggedOnly,
    /// The rate limit is exhausted; try again later.
    RateLimited,
    /// The API server refused for now (429: a PodDisruptionBudget does not
    /// allow it yet); retried at a later round.
    Blocked { message: String },
    /// Anything else.
    Failed { error: String },
}

impl EvictionOutcome {
    /// Whether the strategy may count the pod's resources as released
    /// (dry runs count, so a dry run shows the victims a real run would pick).
    pub fn releases(&self) -> bool {
        matches!(
            self,
            Self::Evicted
                | Self::Killed { .. }
                | Self::Stopped { .. }
                | Self::AlreadyEvicted
                | Self::DryRun
        )
    }

    /// The metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Evicted => "evicted",
            Self::Killed { .. } => "killed",
            Self::Stopped { .. } => "containers_stopped",
            Self::AlreadyEvicted => "already_evicted",
            Self::InProgress => "in_progress",
            Self::DryRun => "dry_run",
            Self::LoggedOnly => "logged_only",
            Self::RateLimited => "rate_limited",
            Self::Blocked { .. } => "blocked",
            Self::Failed { .. } => "failed",
        }
    }
}
