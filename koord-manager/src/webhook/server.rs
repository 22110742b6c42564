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
use super::review::{AdmissionRequest, AdmissionReview, encode, respond};
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

/// Why a request got no AdmissionReview answer. The messages are the
/// plain-text bodies; [`BodyRefused::metric_label`] is the `reason` label of
/// `koord_manager_webhook_malformed_requests`.
#[derive(Debug, thiserror::Error)]
enum BodyRefused {
    #[error("AdmissionReview body larger than {MAX_REVIEW_BYTES} bytes")]
    TooLarge,
    #[error("cannot read the AdmissionReview body: {0}")]
    Unreadable(String),
    #[error("AdmissionReview body not received within {}s", BODY_TIMEOUT.as_secs())]
    Timeout,
    #[error("malformed AdmissionReview: {0}")]
    Malformed(#[source] serde_json::Error),
    #[error("AdmissionReview has no request")]
    NoRequest,
}

impl BodyRefused {
    fn metric_label(&self) -> &'static str {
        match self {
            BodyRefused::TooLarge => "too_large",
            BodyRefused::Unreadable(_) => "unreadable",
            BodyRefused::Timeout => "timeout",
            BodyRefused::Malformed(_) => "malformed",
            BodyRefused::NoRequest => "no_request",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            BodyRefused::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefused::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyRefused::Unreadable(_) | BodyRefused::Malformed(_) | BodyRefused::NoRequest => {
                StatusCode::BAD_REQUEST
            }
        }
    }
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
                            handlers.metrics.count_malformed(path, refused.metric_label());
                            tracing::warn!(path, reason = %refused, "admission request body refused");
                            refused_body(&refused)
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
async fn read_body(request: Request) -> Result<Bytes, BodyRefused> {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<u64>().ok());
    if announced.is_some_and(|length| length > MAX_REVIEW_BYTES as u64) {
        return Err(BodyRefused::TooLarge);
    }
    let read = async {
        use futures::StreamExt;
        let mut chunks = request.into_body().into_data_stream();
        let mut body = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|error| BodyRefused::Unreadable(error.to_string()))?;
            if body.len() + chunk.len() > MAX_REVIEW_BYTES {
                return Err(BodyRefused::TooLarge);
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(body))
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(read) => read,
        Err(_) => Err(BodyRefused::Timeout),
    }
}

/// A refused body: the reason, and the connection closed (the rest of the
/// body is not read).
fn refused_body(refused: &BodyRefused) -> Response {
    (
        refused.status(),
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CONNECTION, "close"),
        ],
        refused.to_string(),
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

/// Answers one review body read whole for `path`: what the HTTPS server does
/// after TLS and the body read (public for the webhook benchmark).
pub async fn admit(handlers: &Handlers, path: &str, body: &[u8]) -> Response {
    // The body was read whole: the connection may stay open.
    let refuse = |refused: BodyRefused| {
        handlers
            .metrics
            .count_malformed(path, refused.metric_label());
        tracing::warn!(path, reason = %refused, "malformed admission request body");
        plain(refused.status(), refused.to_string())
    };
    let review: AdmissionReview = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(err) => return refuse(BodyRefused::Malformed(err)),
    };
    // Taking the request out gives it the review's apiVersion for the answer.
    let request: AdmissionRequest = match review.try_into() {
        Ok(request) => request,
        Err(_) => return refuse(BodyRefused::NoRequest),
    };
    let decision = handlers.handle(path, &request).await;
    match respond(&request, &decision).and_then(|review| encode(&review)) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(err) => plain(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
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
