//! The accept loop both front ends (CRI over HTTP/2, the Docker Engine API over HTTP/1.1) run
//! on their unix socket.

use std::future::Future;

use tokio::net::{UnixListener, UnixStream};

/// Hands every connection accepted on `listener` to `serve_connection` (which spawns its own
/// task) until `shutdown` resolves. A failed accept is logged and the loop goes on.
pub async fn accept_until(
    listener: UnixListener,
    shutdown: impl Future<Output = ()>,
    what: &'static str,
    mut serve_connection: impl FnMut(UnixStream),
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => serve_connection(stream),
                Err(error) => tracing::warn!(%error, "accepting a {what} connection failed"),
            },
            () = &mut shutdown => return,
        }
    }
}
