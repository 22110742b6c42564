//! The plugin framework: filter → score → bind-time reservation, shared by
//! the extender and the simulator.
//!
//! A plugin implements [`Plugin`] and is registered by name in
//! [`crate::plugins::registry`]; the framework never names plugins.

mod binding;
mod plugin;
mod scheduler;

pub use binding::{BindError, BindFuture, Binder, RecordingBinder, Reserved};
pub use plugin::{
    AnnotationWrite, CycleState, MAX_NODE_SCORE, Permit, PermitRelease, Plugin, PluginEntry,
    Rejection, StatusWrite,
};
pub use scheduler::{
    DEFAULT_PERMIT_BIND_WAIT, FilterOutcome, MAX_EXTENDER_PRIORITY, PermitStep,
    REASON_INVALID_ALLOCATABLE, ReleasedHold, ReserveError, Scheduler, ScoreOutcome,
    SharedScheduler, log_released,
};
