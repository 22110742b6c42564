//! The HTTPS shell: koord-common's TLS server (handshakes off the accept loop) under
//! axum; every admission path decodes an AdmissionReview and answers one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use koord_common::Shutdown;
use tokio_rustls::TlsAcceptor;

use super::handlers::Handlers;
use super::review::{AdmissionReview, response_review};
use crate::cert::ReloadableCert;

/// Largest review accepted: an UPDATE carries two objects of up to etcd's 1.5 MiB each.
pub const MAX_REVIEW_BYTES: usize = 8 << 20;

/// How long a client gets to send a review's body (kube-apiserver gives a
/// webhook call at most 30 s in all).
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr} for the webhook server: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot build the TLS configuration: {0}")]
    Tls(#[from] crate::cert::CertError),
}

/// The admission routes plus `/healthz`.
pub fn router(handlers: Arc<Handlers>) -> Router {
    let mut router = Router::new();
    for path in handlers.paths.clone() {
        router = router.route(
            path,
            post(
                move |State(handlers): State<Arc<Handlers>>, request: Request| async move {
                    match read_body(request).await {
                        Ok(body) => admit(&handlers, path, &body).await,
                        Err(refused) => {
                            handlers.metrics.count_malformed(path);
                            tracing::warn!(path, reason = %refused.1, "admission request body refused");
                            refused_body(refused)
                        }
                    }
                },
            ),
        );
    }
    router
        .route("/healthz", get(|| async { "ok" }))
        .with_state(handlers)
}

/// The body of a review: at most [`MAX_REVIEW_BYTES`] (a larger announced
/// length is refused before anything is read), within [`BODY_TIMEOUT`].
async fn read_body(request: Request) -> Result<Bytes, (StatusCode, String)> {
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("AdmissionReview body larger than {MAX_REVIEW_BYTES} bytes"),
        )
    };
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if announced.is_some_and(|length| length > MAX_REVIEW_BYTES as u64) {
        return Err(too_large());
    }
    let read = async {
        use futures::StreamExt;
        let mut chunks = request.into_body().into_data_stream();
        let mut body = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|error| {
                (
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the AdmissionReview body: {error}"),
                )
            })?;
            if body.len() + chunk.len() > MAX_REVIEW_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(body))
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(read) => read,
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "AdmissionReview body not received within {}s",
                BODY_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// A refused body: the reason, and the connection closed (the rest of the
/// body is not read).
fn refused_body((status, message): (StatusCode, String)) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CONNECTION, "close"),
        ],
        message,
    )
        .into_response()
}

fn plain(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

async fn admit(handlers: &Handlers, path: &str, body: &[u8]) -> Response {
    let review: AdmissionReview = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(err) => {
            handlers.metrics.count_malformed(path);
            tracing::warn!(path, error = %err, "malformed admission request body");
            return plain(
                StatusCode::BAD_REQUEST,
                format!("malformed AdmissionReview: {err}"),
            );
        }
    };
    let Some(request) = review.request else {
        handlers.metrics.count_malformed(path);
        return plain(
            StatusCode::BAD_REQUEST,
            "AdmissionReview has no request".to_owned(),
        );
    };
    let decision = handlers.handle(path, &request).await;
    match response_review(&review.api_version, &request.uid, &decision) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(err) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the response: {err}"),
        ),
    }
}

/// A running webhook server.
pub type WebhookServer = koord_common::tls::TlsServer;

/// Binds `addr` and serves HTTPS with whatever certificate `cert` holds
/// (handshakes fail until one is loaded) until `shutdown` fires.
pub async fn serve(
    addr: SocketAddr,
    cert: &ReloadableCert,
    handlers: Arc<Handlers>,
    shutdown: &Shutdown,
) -> Result<WebhookServer, ServeError> {
    let acceptor = TlsAcceptor::from(cert.server_config()?);
    let server =
        koord_common::tls::serve_tls(addr, acceptor, router(handlers), shutdown, "webhook")
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
    let local = server.addr;
    tracing::info!(addr = %local, "serving admission webhooks on https://{local}");
    Ok(server)
}
