//! Process plumbing shared by the Koordinator binaries: flags, logging, the
//! health/metrics HTTP server, shutdown on signals, cluster reachability and
//! Lease leader election; and the value types they exchange ([`units`]:
//! cpusets, milli-CPU, bytes, CFS quotas, CPU topology).

pub mod addr;
pub mod cli;
pub mod cluster;
pub mod features;
pub mod health;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod process;
pub mod server;
pub mod shutdown;
pub mod sync;
pub mod tls;
pub mod units;

pub use addr::{AddrParseError, ListenAddr, ServeAt};
pub use cluster::{
    ClusterArgs, ClusterError, ClusterOptions, ConnectedCluster, connect_to_cluster,
};
pub use health::{HealthCheck, HealthRegistry, Probe, StatusCheck};
pub use logging::{LogArgs, init_logging};
pub use metrics::MetricsRegistry;
pub use process::{Component, ComponentContext, NOT_IMPLEMENTED};
pub use server::{Endpoints, ListenerSpec, RunningServer, ServerState, start_server};
pub use shutdown::{
    Shutdown, ShutdownReason, TerminationSignal, spawn_signal_handler, termination_signal,
};

#[cfg(any(test, feature = "testing"))]
pub mod testing;
