//! The executor's HTTP endpoint: its audit trail as JSON. Above both the
//! audit ring and the executor, which know nothing of HTTP.

use super::executor::ResourceExecutor;

/// Path of the audit endpoint served by [`audit_router`].
pub const AUDIT_PATH: &str = "/resource-executor/writes";

/// Records returned when the request gives no `limit`.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;

#[derive(Debug, serde::Deserialize)]
struct AuditQuery {
    limit: Option<usize>,
}

/// `GET /resource-executor/writes[?limit=N]`: the executor's recent writes as
/// a JSON array of [`super::audit::AuditRecord`], newest first (default 100 records). Merge
/// the returned router into koordlet's local HTTP server.
pub fn audit_router(executor: ResourceExecutor) -> axum::Router {
    use axum::extract::{Query, State};
    axum::Router::new()
        .route(
            AUDIT_PATH,
            axum::routing::get(
                |State(executor): State<ResourceExecutor>,
                 Query(query): Query<AuditQuery>| async move {
                    axum::Json(executor.recent_writes(query.limit.unwrap_or(DEFAULT_AUDIT_LIMIT)))
                },
            ),
        )
        .with_state(executor)
}
