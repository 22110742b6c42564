//! The HTTP server for `/healthz`, `/readyz` and `/metrics`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::addr::ListenAddr;
use crate::health::{HealthRegistry, HealthReport, Probe};
use crate::metrics::{MetricsRegistry, OPENMETRICS_CONTENT_TYPE};
use crate::shutdown::{Shutdown, ShutdownReason};

const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";

/// Which endpoint groups a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    pub health: bool,
    pub metrics: bool,
}

impl Endpoints {
    pub const ALL: Endpoints = Endpoints {
        health: true,
        metrics: true,
    };
    pub const HEALTH: Endpoints = Endpoints {
        health: true,
        metrics: false,
    };
    pub const METRICS: Endpoints = Endpoints {
        health: false,
        metrics: true,
    };

    fn union(self, other: Endpoints) -> Endpoints {
        Endpoints {
            health: self.health || other.health,
            metrics: self.metrics || other.metrics,
        }
    }

    /// Human words used in the start-up log line, e.g. "health and metrics".
    pub fn describe(self) -> &'static str {
        match (self.health, self.metrics) {
            (true, true) => "health and metrics",
            (true, false) => "health probes",
            (false, true) => "metrics",
            (false, false) => "nothing",
        }
    }
}

/// One address to bind and what to serve there.
pub struct ListenerSpec {
    pub addr: ListenAddr,
    pub endpoints: Endpoints,
    /// Component-specific routes served next to the standard ones.
    pub extra_routes: Option<Router>,
}

impl ListenerSpec {
    pub fn new(addr: ListenAddr, endpoints: Endpoints) -> Self {
        Self {
            addr,
            endpoints,
            extra_routes: None,
        }
    }

    pub fn with_routes(mut self, routes: Router) -> Self {
        self.extra_routes = Some(routes);
        self
    }
}

/// What the handlers read.
#[derive(Clone)]
pub struct ServerState {
    pub health: HealthRegistry,
    pub metrics: MetricsRegistry,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr} for {what}: {source}")]
    Bind {
        addr: ListenAddr,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("server task on {addr} ended abnormally: {reason}")]
    Task { addr: SocketAddr, reason: String },
}

/// A listener that is accepting connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoundListener {
    pub addr: SocketAddr,
    pub endpoints: Endpoints,
}

/// The running server; it stops when the [`Shutdown`] it was started with fires.
pub struct RunningServer {
    listeners: Vec<BoundListener>,
    tasks: Vec<(SocketAddr, JoinHandle<()>)>,
}

impl RunningServer {
    pub fn listeners(&self) -> &[BoundListener] {
        &self.listeners
    }

    /// The bound address serving the given group, if any.
    pub fn addr_for(&self, health: bool) -> Option<SocketAddr> {
        self.listeners
            .iter()
            .find(|l| {
                if health {
                    l.endpoints.health
                } else {
                    l.endpoints.metrics
                }
            })
            .map(|l| l.addr)
    }

    /// Waits for every listener to drain after shutdown, aborting those still busy after `grace`.
    pub async fn wait(self, grace: Duration) -> Result<(), ServerError> {
        let mut first_error = None;
        for (addr, mut task) in self.tasks {
            let outcome = match tokio::time::timeout(grace, &mut task).await {
                Ok(joined) => joined,
                Err(_) => {
                    tracing::warn!(%addr, "connections still open after {grace:?}, closing them");
                    task.abort();
                    task.await
                }
            };
            if let Err(err) = outcome
                && !err.is_cancelled()
                && first_error.is_none()
            {
                first_error = Some(ServerError::Task {
                    addr,
                    reason: err.to_string(),
                });
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The standard routes for the given endpoint groups.
pub fn router(state: ServerState, endpoints: Endpoints) -> Router {
    let mut router = Router::new();
    if endpoints.health {
        router = router
            .route("/healthz", get(healthz))
            .route("/healthz/{name}", get(healthz_one))
            .route("/readyz", get(readyz))
            .route("/readyz/{name}", get(readyz_one));
    }
    if endpoints.metrics {
        router = router.route("/metrics", get(metrics));
    }
    router.with_state(state)
}

/// Binds every listener (same address → one listener), logs
/// `serving <what> on <addr>` for each, and serves until `shutdown` fires. A
/// listener failing on its own triggers `shutdown` with a failure reason.
pub async fn start_server(
    state: &ServerState,
    specs: Vec<ListenerSpec>,
    shutdown: &Shutdown,
) -> Result<RunningServer, ServerError> {
    let mut merged: Vec<ListenerSpec> = Vec::new();
    for spec in specs {
        match merged
            .iter_mut()
            .find(|existing| existing.addr == spec.addr)
        {
            Some(existing) => {
                existing.endpoints = existing.endpoints.union(spec.endpoints);
                existing.extra_routes = match (existing.extra_routes.take(), spec.extra_routes) {
                    (Some(a), Some(b)) => Some(a.merge(b)),
                    (a, b) => a.or(b),
                };
            }
            None => merged.push(spec),
        }
    }

    let mut bound = Vec::with_capacity(merged.len());
    for spec in merged {
        let what = spec.endpoints.describe();
        let listener = TcpListener::bind(spec.addr.socket_addr())
            .await
            .map_err(|source| ServerError::Bind {
                addr: spec.addr,
                what,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: spec.addr,
            what,
            source,
        })?;
        bound.push((listener, local, spec));
    }

    let mut listeners = Vec::with_capacity(bound.len());
    let mut tasks = Vec::with_capacity(bound.len());
    for (listener, addr, spec) in bound {
        let mut app = router(state.clone(), spec.endpoints);
        if let Some(extra) = spec.extra_routes {
            app = app.merge(extra);
        }
        let what = spec.endpoints.describe();
        tracing::info!(%addr, endpoints = what, "serving {what} on {addr}");
        let stop = shutdown.clone();
        let on_failure = shutdown.clone();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    stop.wait().await;
                })
                .await;
            if let Err(err) = served {
                tracing::error!(%addr, error = %err, "{what} server stopped");
                on_failure.trigger(ShutdownReason::Failed(format!(
                    "{what} server on {addr} stopped: {err}"
                )));
            }
        });
        listeners.push(BoundListener {
            addr,
            endpoints: spec.endpoints,
        });
        tasks.push((addr, task));
    }
    Ok(RunningServer { listeners, tasks })
}

fn wants_verbose(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "verbose" || pair.starts_with("verbose="))
    })
}

fn health_response(report: &HealthReport, verbose: bool) -> Response {
    let status = if report.is_healthy() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if !report.is_healthy() {
        let failing: Vec<&str> = report.failing().map(|r| r.name.as_str()).collect();
        tracing::debug!(probe = report.probe.endpoint(), ?failing, "probe failing");
    }
    (
        status,
        [(header::CONTENT_TYPE, TEXT_CONTENT_TYPE)],
        report.render(verbose),
    )
        .into_response()
}

async fn probe(state: &ServerState, probe: Probe, query: Option<String>) -> Response {
    let report = state.health.evaluate(probe).await;
    health_response(&report, wants_verbose(query.as_deref()))
}

async fn probe_one(state: &ServerState, probe: Probe, name: &str) -> Response {
    match state.health.evaluate_one(probe, name).await {
        Some(report) => match &report.results[..] {
            [single] => {
                let status = if report.is_healthy() {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                let body = match &single.outcome {
                    Ok(()) => "ok".to_string(),
                    Err(reason) => format!("[-]{} failed: {}", single.name, reason),
                };
                (status, [(header::CONTENT_TYPE, TEXT_CONTENT_TYPE)], body).into_response()
            }
            _ => health_response(&report, true),
        },
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, TEXT_CONTENT_TYPE)],
            format!("no {} check named {name:?}", probe.endpoint()),
        )
            .into_response(),
    }
}

async fn healthz(State(state): State<ServerState>, RawQuery(query): RawQuery) -> Response {
    probe(&state, Probe::Liveness, query).await
}

async fn readyz(State(state): State<ServerState>, RawQuery(query): RawQuery) -> Response {
    probe(&state, Probe::Readiness, query).await
}

async fn healthz_one(State(state): State<ServerState>, Path(name): Path<String>) -> Response {
    probe_one(&state, Probe::Liveness, &name).await
}

async fn readyz_one(State(state): State<ServerState>, Path(name): Path<String>) -> Response {
    probe_one(&state, Probe::Readiness, &name).await
}

async fn metrics(State(state): State<ServerState>) -> Response {
    match state.metrics.encode() {
        Ok(body) => ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], body).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "metrics encoding failed");
            (StatusCode::INTERNAL_SERVER_ERROR, err.to_string()).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_query_is_detected() {
        assert!(wants_verbose(Some("verbose")));
        assert!(wants_verbose(Some("x=1&verbose=true")));
        assert!(!wants_verbose(Some("verbosely")));
        assert!(!wants_verbose(None));
    }

    #[test]
    fn endpoints_describe_themselves() {
        assert_eq!(Endpoints::ALL.describe(), "health and metrics");
        assert_eq!(Endpoints::HEALTH.union(Endpoints::METRICS), Endpoints::ALL);
    }
}
