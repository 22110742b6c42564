//! An axum server over TLS: koord-manager's admission webhooks and koord-scheduler's extender
//! off loopback. The caller builds the rustls configuration (who may connect is its decision);
//! this module owns the accept loop, so a slow or silent client can hold a connection slot for
//! at most [`HANDSHAKE_TIMEOUT`] and never the loop itself.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::{Shutdown, ShutdownReason};

/// Longest a client may take to complete its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A running TLS server.
pub struct TlsServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl TlsServer {
    /// Waits for the server to drain after shutdown, aborting it after `grace`.
    pub async fn wait(self, grace: Duration) {
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// Binds `addr` and serves `app` over TLS until `shutdown` fires; a server that stops on its own
/// triggers `shutdown` with the reason. `name` says what is served, in logs.
pub async fn serve_tls(
    addr: SocketAddr,
    acceptor: TlsAcceptor,
    app: Router,
    shutdown: &Shutdown,
    name: &'static str,
) -> std::io::Result<TlsServer> {
    let tcp = TcpListener::bind(addr).await?;
    let local = tcp.local_addr()?;
    let (ready, incoming) = mpsc::channel(64);
    let listener = TlsListener {
        incoming,
        local,
        accept_task: spawn_accept_loop(tcp, acceptor, ready, name),
    };
    let stop = shutdown.clone();
    let on_failure = shutdown.clone();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                stop.wait().await;
            })
            .await;
        if let Err(err) = served {
            tracing::error!(addr = %local, error = %err, "{name} server stopped");
            on_failure.trigger(ShutdownReason::Failed(format!(
                "{name} server on {local} stopped: {err}"
            )));
        }
    });
    Ok(TlsServer { addr: local, task })
}

/// Connections whose handshake completed.
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

/// Handshakes run off the accept loop, each bounded by [`HANDSHAKE_TIMEOUT`]. Failures are
/// logged at debug level: anyone who can connect can cause one, so they must not flood the log.
fn spawn_accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
    name: &'static str,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "{name} accept failed");
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
                        tracing::debug!(%peer, error = %err, "{name} TLS handshake failed")
                    }
                    Err(_) => tracing::debug!(%peer, "{name} TLS handshake timed out"),
                }
            });
        }
    })
}
