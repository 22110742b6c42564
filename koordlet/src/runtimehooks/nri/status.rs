//! Whether the NRI plugin is connected, for the metric, `/readyz` and logs.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use koord_common::metrics::MetricsRegistry;
use koord_common::sync::RwLockExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// The plugin's connection state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum NriState {
    /// `--enable-nri-runtime-hook=false`.
    Disabled,
    /// Not connecting yet: the runtime hooks start once the states informer
    /// has synced (or its wait timed out), so that the first Synchronize and
    /// CreateContainer see the node's rules.
    WaitingForStates { socket: PathBuf },
    /// The runtime's NRI socket does not exist (NRI off, runtime down or too old).
    WaitingForSocket { socket: PathBuf },
    /// Connected, registration not yet acknowledged.
    Registering { socket: PathBuf },
    /// Registered with the runtime.
    Connected {
        socket: PathBuf,
        runtime: String,
        runtime_version: String,
    },
    /// The last connection failed or closed; retrying after a backoff.
    Disconnected { socket: PathBuf, reason: String },
}

impl fmt::Display for NriState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NriState::Disabled => f.write_str("disabled (--enable-nri-runtime-hook=false)"),
            NriState::WaitingForStates { socket } => write!(
                f,
                "waiting for the states informer's first sync before registering on {}",
                socket.display()
            ),
            NriState::WaitingForSocket { socket } => {
                write!(f, "waiting for the NRI socket {}", socket.display())
            }
            NriState::Registering { socket } => {
                write!(f, "registering on {}", socket.display())
            }
            NriState::Connected {
                socket,
                runtime,
                runtime_version,
            } => {
                let runtime = if runtime.is_empty() {
                    "the runtime"
                } else {
                    runtime
                };
                write!(
                    f,
                    "connected to {runtime} {runtime_version} on {}",
                    socket.display()
                )
            }
            NriState::Disconnected { socket, reason } => {
                write!(f, "disconnected from {}: {reason}", socket.display())
            }
        }
    }
}

/// A point-in-time copy of the status.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NriStatusSnapshot {
    #[serde(flatten)]
    pub state: NriState,
    /// Socket connections opened since start.
    pub connections: u64,
    /// Registrations the runtime acknowledged since start.
    pub registrations: u64,
    /// Calls the runtime made into the plugin since start.
    pub requests: u64,
    #[serde(skip)]
    pub since: Option<SystemTime>,
}

impl NriStatusSnapshot {
    pub fn is_connected(&self) -> bool {
        matches!(self.state, NriState::Connected { .. })
    }
}

#[derive(Clone, Default)]
struct NriMetrics {
    connected: Gauge,
    connections: Counter,
    registrations: Counter,
    requests: Family<Vec<(String, String)>, Counter>,
    request_errors: Family<Vec<(String, String)>, Counter>,
}

struct Inner {
    snapshot: RwLock<NriStatusSnapshot>,
    metrics: NriMetrics,
}

/// Shared, cheap-to-clone status of the NRI plugin.
#[derive(Clone)]
pub struct NriStatus(Arc<Inner>);

impl NriStatus {
    pub fn new(initial: NriState) -> Self {
        Self(Arc::new(Inner {
            snapshot: RwLock::new(NriStatusSnapshot {
                state: initial,
                connections: 0,
                registrations: 0,
                requests: 0,
                since: Some(SystemTime::now()),
            }),
            metrics: NriMetrics::default(),
        }))
    }

    /// Registers `koordlet_nri_connected`, `koordlet_nri_connections_total`,
    /// `koordlet_nri_registrations_total` and
    /// `koordlet_nri_requests_total{method}` / `koordlet_nri_request_errors_total{method}`.
    pub fn register_metrics(&self, registry: &MetricsRegistry) {
        let metrics = self.0.metrics.clone();
        registry.register_component(|registry| {
            registry.register(
                "nri_connected",
                "1 while the NRI plugin is registered with the container runtime",
                metrics.connected,
            );
            registry.register(
                "nri_connections",
                "NRI socket connections opened",
                metrics.connections,
            );
            registry.register(
                "nri_registrations",
                "NRI plugin registrations acknowledged by the runtime",
                metrics.registrations,
            );
            registry.register(
                "nri_requests",
                "NRI calls handled, by method",
                metrics.requests,
            );
            registry.register(
                "nri_request_errors",
                "NRI calls answered with an error, by method",
                metrics.request_errors,
            );
        });
    }

    pub fn snapshot(&self) -> NriStatusSnapshot {
        self.0.snapshot.read_or_recover().clone()
    }

    fn update(&self, change: impl FnOnce(&mut NriStatusSnapshot)) {
        let connected = {
            let mut guard = self.0.snapshot.write_or_recover();
            change(&mut guard);
            guard.is_connected()
        };
        self.0.metrics.connected.set(i64::from(connected));
    }

    pub(crate) fn set_state(&self, state: NriState) {
        let mut log_line = None;
        self.update(|snapshot| {
            if snapshot.state != state {
                log_line = Some(state.to_string());
                snapshot.since = Some(SystemTime::now());
            }
            snapshot.state = state;
        });
        if let Some(line) = log_line {
            tracing::info!(status = %line, "NRI plugin: {line}");
        }
    }

    pub(crate) fn connection_opened(&self, socket: PathBuf) {
        self.0.metrics.connections.inc();
        self.update(|snapshot| snapshot.connections += 1);
        self.set_state(NriState::Registering { socket });
    }

    pub(crate) fn registered(&self) {
        self.0.metrics.registrations.inc();
        self.update(|snapshot| {
            snapshot.registrations += 1;
            if let NriState::Registering { socket } = &snapshot.state {
                snapshot.state = NriState::Connected {
                    socket: socket.clone(),
                    runtime: String::new(),
                    runtime_version: String::new(),
                };
                snapshot.since = Some(SystemTime::now());
            }
        });
        tracing::info!(status = %self.snapshot().state, "NRI plugin registered");
    }

    /// Records the runtime name and version from `Configure`.
    pub(crate) fn configured(&self, runtime: &str, version: &str) {
        self.update(|snapshot| match &mut snapshot.state {
            NriState::Connected {
                runtime: name,
                runtime_version,
                ..
            } => {
                *name = runtime.to_string();
                *runtime_version = version.to_string();
            }
            NriState::Registering { socket } => {
                // Configure usually arrives before the registration reply.
                snapshot.state = NriState::Connected {
                    socket: socket.clone(),
                    runtime: runtime.to_string(),
                    runtime_version: version.to_string(),
                };
            }
            _ => {}
        });
    }

    pub(crate) fn request_handled(&self, method: &str, ok: bool) {
        let labels = vec![("method".to_string(), method.to_string())];
        self.0.metrics.requests.get_or_create(&labels).inc();
        if !ok {
            self.0.metrics.request_errors.get_or_create(&labels).inc();
        }
        self.update(|snapshot| snapshot.requests += 1);
    }

    /// The readiness outcome: failing only while the runtime offers NRI (its
    /// socket exists) and the plugin is not registered, so nodes without NRI
    /// stay ready.
    pub fn readiness(&self) -> Result<(), String> {
        let snapshot = self.snapshot();
        match &snapshot.state {
            NriState::Registering { socket }
            | NriState::Disconnected { socket, .. }
            | NriState::WaitingForStates { socket }
                if socket.exists() =>
            {
                Err(format!("NRI plugin not registered: {}", snapshot.state))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_lifecycle_drives_state_counters_and_gauge() {
        let registry = MetricsRegistry::new("koordlet");
        let status = NriStatus::new(NriState::WaitingForSocket {
            socket: "/nonexistent/nri.sock".into(),
        });
        status.register_metrics(&registry);
        assert!(status.readiness().is_ok(), "no socket: still ready");

        status.connection_opened("/nonexistent/nri.sock".into());
        status.configured("containerd", "1.7.24");
        assert!(status.snapshot().is_connected());
        status.registered();
        status.request_handled("CreateContainer", true);
        status.request_handled("CreateContainer", false);
        let snapshot = status.snapshot();
        assert_eq!(snapshot.connections, 1);
        assert_eq!(snapshot.registrations, 1);
        assert_eq!(snapshot.requests, 2);
        assert_eq!(
            snapshot.state.to_string(),
            "connected to containerd 1.7.24 on /nonexistent/nri.sock"
        );
        let body = registry.encode().unwrap();
        assert!(body.contains("koordlet_nri_connected 1"), "{body}");
        assert!(
            body.contains("koordlet_nri_registrations_total 1"),
            "{body}"
        );
        assert!(
            body.contains("koordlet_nri_request_errors_total{method=\"CreateContainer\"} 1"),
            "{body}"
        );

        status.set_state(NriState::Disconnected {
            socket: "/nonexistent/nri.sock".into(),
            reason: "closed by the runtime".into(),
        });
        assert!(
            registry
                .encode()
                .unwrap()
                .contains("koordlet_nri_connected 0")
        );
    }

    #[test]
    fn readiness_fails_when_the_socket_exists_but_we_are_not_registered() {
        let dir = std::env::temp_dir().join(format!("koord-nri-status-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("nri.sock");
        std::fs::write(&socket, b"").unwrap();
        let status = NriStatus::new(NriState::Disconnected {
            socket: socket.clone(),
            reason: "refused".into(),
        });
        let failure = status.readiness().unwrap_err();
        assert!(failure.contains("refused"), "{failure}");
        // Holding back until the states informer synced: not registered either.
        status.set_state(NriState::WaitingForStates {
            socket: socket.clone(),
        });
        let failure = status.readiness().unwrap_err();
        assert!(failure.contains("states informer"), "{failure}");
        status.set_state(NriState::WaitingForStates {
            socket: dir.join("absent.sock"),
        });
        assert!(status.readiness().is_ok(), "no NRI on the node: ready");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
