//! What an eviction round releases and reports: the resource and release
//! lists of the eviction core ([`super::evicttask`]) and the
//! [`EvictionReport`] a strategy's decision carries (served by
//! `GET /qos/explain?evictions`). Plain data, below both the runner and the
//! eviction core.

use std::collections::BTreeMap;

/// Resource name → amount (units: see [`super::evicttask`]).
pub type ResourceList = BTreeMap<String, i64>;

/// What a task's amounts measure (upstream `ReleaseTargetType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum ReleaseTarget {
    /// What pods use (`podUsed`).
    #[serde(rename = "podUsed")]
    PodUsed,
    /// What pods request (`podResourceRequest`).
    #[serde(rename = "podResourceRequest")]
    PodResourceRequest,
}

impl ReleaseTarget {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PodUsed => "podUsed",
            Self::PodResourceRequest => "podResourceRequest",
        }
    }
}

/// Released amounts per target.
pub type ReleaseList = BTreeMap<ReleaseTarget, ResourceList>;

/// One victim in a report.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VictimReport {
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    pub releases: ReleaseList,
}

/// One task in a report.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskReport {
    pub feature: &'static str,
    /// `trigger by koordlet feature <feature>`.
    pub reason: String,
    /// A dry-run task evicts nobody: `victims` are whom it would evict.
    pub dry_run: bool,
    pub target: ReleaseTarget,
    pub to_release: ResourceList,
    /// Released towards this task's target once the plan is carried out.
    pub released: ResourceList,
    /// What would still be missing; empty when the target is covered.
    pub shortfall: ResourceList,
    pub candidates: usize,
    /// Victims this task picked, in eviction order.
    pub victims: Vec<VictimReport>,
    /// Pods asked to go earlier and still present, counted as released.
    pub pending: Vec<String>,
}

/// An eviction strategy's account of one round.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionReport {
    pub strategy: &'static str,
    /// RFC 3339 time of the round.
    pub decided_at: String,
    pub tasks: Vec<TaskReport>,
    /// Why features did not produce a task (disabled, config, below threshold).
    pub notes: Vec<String>,
}
