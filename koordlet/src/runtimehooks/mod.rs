//! Runtime hooks: container parameters decided at creation time.
//!
//! - [`protocol`]: the transport-neutral hook API and [`protocol::HookDispatcher`];
//! - [`apply`]: applies decisions that are not part of a runtime reply;
//! - [`rules`]: node-level inputs rebuilt from the states informer;
//! - [`metrics`]: per-hook calls, errors, latency and repaired drift;
//! - [`nri`]: the NRI plugin transport.

pub mod apply;
pub mod hooks;
pub mod metrics;
pub mod nri;
pub mod protocol;
pub mod rules;
pub mod server;
