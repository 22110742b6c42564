//! The HTTPS shell: a rustls listener (handshakes off the accept loop) under
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
use koord_common::{Shutdown, ShutdownReason};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::handlers::Handlers;
use super::review::{AdmissionReview, response_review};
use crate::cert::ReloadableCert;

/// Largest review accepted: an UPDATE carries two objects of up to etcd's 1.5 MiB each.
pub const MAX_REVIEW_BYTES: usize = 8 << 20;

/// How long a client gets to send a review's body (kube-apiserver gives a
/// webhook call at most 30 s in all).
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// A slow or silent client gets this long to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// TLS connections whose handshake completed.
struct TlsListener {
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accept_task: JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(connection) => connection,
            // The accept loop ended (aborted on shutdown): nothing more comes.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

fn spawn_accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "webhook accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let acceptor = acceptor.clone();
            let ready = ready.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = ready.send((tls, peer)).await;
                    }
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, error = %err, "webhook TLS handshake failed")
                    }
                    Err(_) => tracing::debug!(%peer, "webhook TLS handshake timed out"),
                }
            });
        }
    })
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
pub struct WebhookServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl WebhookServer {
    /// Waits for the server to drain after shutdown, aborting it after `grace`.
    pub async fn wait(self, grace: Duration) {
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Binds `addr` and serves HTTPS with whatever certificate `cert` holds
/// (handshakes fail until one is loaded) until `shutdown` fires.
pub async fn serve(
    addr: SocketAddr,
    cert: &ReloadableCert,
    handlers: Arc<Handlers>,
    shutdown: &Shutdown,
) -> Result<WebhookServer, ServeError> {
    let tcp = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let local = tcp
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;
    let acceptor = TlsAcceptor::from(cert.server_config()?);
    let (ready, incoming) = mpsc::channel(64);
    let listener = TlsListener {
        incoming,
        local,
        accept_task: spawn_accept_loop(tcp, acceptor, ready),
    };
    tracing::info!(addr = %local, "serving admission webhooks on https://{local}");
    let stop = shutdown.clone();
    let on_failure = shutdown.clone();
    let app = router(handlers);
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                stop.wait().await;
            })
            .await;
        if let Err(err) = served {
            tracing::error!(addr = %local, error = %err, "webhook server stopped");
            on_failure.trigger(ShutdownReason::Failed(format!(
                "webhook server on {local} stopped: {err}"
            )));
        }
    });
    Ok(WebhookServer { addr: local, task })
}
