//! The MigrationController: it carries PodMigrationJobs (PMJs) through
//! upstream's phases (Pending → Running → Succeeded, or Failed/Aborted).
//!
//! - [`core`]: the pure decision of one reconcile pass over one job.
//! - [`reservation`]: the Reservation a ReservationFirst job creates.
//! - [`arbitration`]: which waiting jobs may start (upstream's arbitrator:
//!   sort, then the evictor's non-retryable and retryable filters).
//! - [`limiter`]: the object limiters (`objectLimiters`) and the eviction
//!   rate limiter (`evictQPS`/`evictBurst`), with time as an argument.
//! - [`job`]: the PMJ the live loop creates for a victim.
//! - [`controller`]: the shell over the Kubernetes API.
//!
//! Phases, conditions, modes, limits and every difference from upstream are
//! described in `koord-descheduler/docs/migration.md`.

pub mod arbitration;
pub mod conditions;
pub mod controller;
pub mod core;
pub mod job;
pub mod limiter;
pub mod metrics;
pub mod reservation;

#[cfg(test)]
mod tests;

pub use controller::{MigrationHandle, run_migration_controller};
pub use job::{JobContext, JobError, ReconcilerId};

/// Marks a PMJ created by one controller instance (upstream
/// `AnnotationJobCreatedBy`); other instances leave it alone.
pub const ANNOTATION_JOB_CREATED_BY: &str = "koordinator.sh/job-created-by";
/// Set to `"true"` on a PMJ the arbitrator let start.
pub const ANNOTATION_PASSED_ARBITRATION: &str = "descheduler.koordinator.sh/passed-arbitration";
/// Why the pod is migrated (upstream `AnnotationEvictReason`).
pub const ANNOTATION_EVICT_REASON: &str = "koordinator.sh/evict-reason";
/// Which plugin asked for the migration (upstream `AnnotationEvictTrigger`).
pub const ANNOTATION_EVICT_TRIGGER: &str = "koordinator.sh/evict-trigger";
/// A pod or job label choosing the eviction policy (`Eviction` or `Delete`).
pub const LABEL_EVICT_POLICY: &str = "koordinator.sh/evict-policy";
/// Reservations the controller creates carry this label...
pub const LABEL_CREATED_BY: &str = "app.kubernetes.io/created-by";
/// ...with this value.
pub const CREATOR: &str = "koord-descheduler";

/// How long a pass waits before looking again at a job that waits for
/// something (upstream `defaultRequeueAfter`).
pub const DEFAULT_REQUEUE_AFTER: std::time::Duration = std::time::Duration::from_secs(3);

/// The trigger and the reason of a job, as upstream reads them: the reason
/// falls back to the trigger, then to `NotSet`.
pub fn trigger_and_reason(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> (String, String) {
    let get = |key: &str| {
        annotations
            .and_then(|a| a.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let trigger = get(ANNOTATION_EVICT_TRIGGER);
    let mut reason = get(ANNOTATION_EVICT_REASON);
    if reason.is_empty() {
        reason = if trigger.is_empty() {
            "NotSet".to_string()
        } else {
            trigger.clone()
        };
    }
    (trigger, reason)
}

/// `MigrationControllerArgs` with upstream's defaults applied (what a
/// configuration file without MigrationController args yields).
pub fn default_args() -> crate::config::types::MigrationControllerArgs {
    let mut args = crate::config::types::MigrationControllerArgs::default();
    crate::config::defaults::set_migration_controller_defaults(&mut args);
    args
}
