//! The plugin framework: filter → score → bind-time reservation, shared by
//! the extender and the simulator.
//!
//! A plugin implements [`Plugin`] ([`plugin`], the only part of the
//! framework plugins import) and is registered by name in
//! [`crate::plugins::REGISTRY`]. The [`Scheduler`] runs them
//! as trait objects; it names plugins only through
//! [`crate::controller_plugins`] (which controllers' writes go out).
//! Sequencing the steps for one pod is [`crate::placement`]'s.

pub mod binding;
pub mod core;
pub mod plugin;
pub mod scheduler;

pub use self::core::{Poisoned, PublishStats, SchedulerCore, SharedScheduler, WriteGuard};
pub use binding::{BindError, BindFuture, Binder, Nomination, RecordingBinder, Reserved};
pub use plugin::{
    AnnotationWrite, CycleState, MAX_NODE_SCORE, Permit, PermitRelease, Plugin, PluginEntry,
    Reason, Rejection, StatusWrite,
};
pub use scheduler::{
    DEFAULT_PERMIT_BIND_WAIT, FilterOutcome, MAX_EXTENDER_PRIORITY, PermitStep,
    REASON_INVALID_ALLOCATABLE, ReleasedHold, ReserveError, Scheduler, ScoreOutcome, log_released,
};
