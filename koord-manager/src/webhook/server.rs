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

use apis::scheduling::v1alpha1::Reservation;
use apis::scheduling_sigs::v1alpha1::ElasticQuota;
use k8s_openapi::api::core::v1::{Binding, ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::Eviction;
use kube::core::DynamicObject;

use super::handlers::{
    Admitted, Handlers, PATH_MUTATE_ELASTIC_QUOTA, PATH_MUTATE_NODE_STATUS, PATH_MUTATE_POD,
    PATH_MUTATE_RESERVATION, PATH_VALIDATE_CONFIGMAP, PATH_VALIDATE_ELASTIC_QUOTA,
    PATH_VALIDATE_NODE, PATH_VALIDATE_POD, PATH_VALIDATE_POD_BINDING, PATH_VALIDATE_POD_EVICTION,
};
use super::review::{ReviewError, encode, read_review, respond};
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
    #[error(transparent)]
    Review(#[from] ReviewError),
}

impl BodyRefused {
    fn metric_label(&self) -> &'static str {
        match self {
            BodyRefused::TooLarge => "too_large",
            BodyRefused::Unreadable(_) => "unreadable",
            BodyRefused::Timeout => "timeout",
            BodyRefused::Review(ReviewError::Malformed(_)) => "malformed",
            BodyRefused::Review(ReviewError::NoRequest) => "no_request",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            BodyRefused::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefused::Timeout => StatusCode::REQUEST_TIMEOUT,
            BodyRefused::Unreadable(_) | BodyRefused::Review(_) => StatusCode::BAD_REQUEST,
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
/// after TLS and the body read (public for the webhook benchmark). The path
/// says what the review's objects are, so the body is read once, straight
/// into that type.
pub async fn admit(handlers: &Handlers, path: &str, body: &[u8]) -> Response {
    match path {
        PATH_MUTATE_POD | PATH_VALIDATE_POD => admit_as::<Pod>(handlers, path, body).await,
        PATH_MUTATE_ELASTIC_QUOTA | PATH_VALIDATE_ELASTIC_QUOTA => {
            admit_as::<ElasticQuota>(handlers, path, body).await
        }
        PATH_VALIDATE_CONFIGMAP => admit_as::<ConfigMap>(handlers, path, body).await,
        PATH_VALIDATE_POD_EVICTION => admit_as::<Eviction>(handlers, path, body).await,
        PATH_MUTATE_NODE_STATUS | PATH_VALIDATE_NODE => {
            admit_as::<Node>(handlers, path, body).await
        }
        PATH_VALIDATE_POD_BINDING => admit_as::<Binding>(handlers, path, body).await,
        PATH_MUTATE_RESERVATION => admit_as::<Reservation>(handlers, path, body).await,
        // No webhook here: the review is still read, and answered with a 400.
        _ => admit_as::<DynamicObject>(handlers, path, body).await,
    }
}

async fn admit_as<T: Admitted>(handlers: &Handlers, path: &str, body: &[u8]) -> Response {
    let request = match read_review::<T>(body) {
        Ok(request) => request,
        Err(error) => {
            // The body was read whole: the connection may stay open.
            let refused = BodyRefused::from(error);
            handlers
                .metrics
                .count_malformed(path, refused.metric_label());
            tracing::warn!(path, reason = %refused, "malformed admission request body");
            return plain(refused.status(), refused.to_string());
        }
    };
    let decision = handlers.handle(path, &request).await;
    match respond(&*request, &decision).and_then(|review| encode(&review)) {
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
