//! One NRI connection: registers the plugin over the Runtime service and
//! serves the Plugin service until the runtime hangs up or koordlet stops.
//!
//! A single task owns both halves of the socket; calls from the runtime run
//! on the blocking pool (hooks may touch cgroupfs) and hand their encoded
//! responses back to that task. When [`serve_connection`] returns, every
//! handler has finished and the socket is closed, so the caller can safely
//! open the next connection.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::proto::{api, ttrpc as envelope};
use super::ttrpc::{FrameDecoder, FrameError, Message, MessageKind, PLUGIN_CONN, RUNTIME_CONN};

/// ttrpc service name of the calls the runtime makes into a plugin.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// ttrpc service name of the calls a plugin makes into the runtime.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// gRPC status codes used in ttrpc responses.
pub mod code {
    pub const INVALID_ARGUMENT: i32 = 3;
    pub const UNIMPLEMENTED: i32 = 12;
    pub const INTERNAL: i32 = 13;
}

/// A failed Plugin-service call, sent back as a ttrpc status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The plugin side of the Plugin service: method name and request bytes in,
/// encoded response out. Called on the blocking pool.
pub trait PluginService: Send + Sync + 'static {
    fn call(&self, method: &str, request: &[u8]) -> Result<Vec<u8>, RpcError>;
}

/// What the plugin registers as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub plugin_name: String,
    pub plugin_index: String,
    /// How long the runtime may take to acknowledge the registration.
    pub timeout: Duration,
}

/// Why a connection ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionEnd {
    /// The runtime closed the socket (restart, plugin evicted, shutdown).
    ClosedByRuntime,
    /// koordlet is stopping.
    Stopped,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("NRI socket I/O failed: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("cannot decode a ttrpc {what} from the runtime: {source}")]
    Decode {
        what: &'static str,
        source: prost::DecodeError,
    },
    #[error("the runtime refused plugin registration (code {code}): {message}")]
    RegistrationRefused { code: i32, message: String },
    #[error("the runtime did not acknowledge plugin registration within {0:?}")]
    RegistrationTimeout(Duration),
}

/// Serves one connected socket until it closes, `stop` resolves, or the
/// runtime misbehaves. `on_registered` runs once the runtime accepted us.
pub async fn serve_connection<S, F>(
    stream: UnixStream,
    registration: &Registration,
    service: Arc<S>,
    on_registered: impl FnOnce(),
    stop: F,
) -> Result<ConnectionEnd, ConnectionError>
where
    S: PluginService + ?Sized,
    F: std::future::Future<Output = ()>,
{
    let (mut reader, mut writer) = stream.into_split();
    let (responses, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    let mut handlers = JoinSet::new();
    let result = async {
        let register = api::RegisterPluginRequest {
            plugin_name: registration.plugin_name.clone(),
            plugin_idx: registration.plugin_index.clone(),
        };
        let request = envelope::Request {
            service: RUNTIME_SERVICE.to_string(),
            method: "RegisterPlugin".to_string(),
            payload: register.encode_to_vec(),
            ..Default::default()
        };
        let mut frame = Vec::new();
        // Our client stream ids are odd, starting at 1, as ttrpc's.
        super::ttrpc::encode_message(
            RUNTIME_CONN,
            REGISTER_STREAM,
            MessageKind::Request,
            &request.encode_to_vec(),
            &mut frame,
        )?;
        writer.write_all(&frame).await?;

        let mut on_registered = Some(on_registered);
        let registration_deadline = tokio::time::sleep(registration.timeout);
        tokio::pin!(registration_deadline);
        tokio::pin!(stop);
        let mut decoder = FrameDecoder::new();
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            tokio::select! {
                _ = &mut stop => return Ok(ConnectionEnd::Stopped),
                _ = &mut registration_deadline, if on_registered.is_some() => {
                    return Err(ConnectionError::RegistrationTimeout(registration.timeout));
                }
                Some(frame) = outgoing.recv() => writer.write_all(&frame).await?,
                Some(joined) = handlers.join_next(), if !handlers.is_empty() => {
                    if let Err(err) = joined {
                        tracing::error!(error = %err, "an NRI handler task failed");
                    }
                }
                read = reader.read(&mut buffer) => {
                    let read = read?;
                    if read == 0 {
                        return Ok(ConnectionEnd::ClosedByRuntime);
                    }
                    decoder.feed(&buffer[..read]);
                    while let Some(message) = decoder.next_message()? {
                        match (message.conn, message.kind) {
                            (PLUGIN_CONN, MessageKind::Request) => {
                                dispatch(message, Arc::clone(&service), responses.clone(), &mut handlers)?;
                            }
                            (RUNTIME_CONN, MessageKind::Response) if message.stream_id == REGISTER_STREAM => {
                                registration_result(&message.payload)?;
                                if let Some(callback) = on_registered.take() {
                                    callback();
                                }
                            }
                            (conn, kind) => tracing::debug!(conn, ?kind, stream = message.stream_id, "ignoring unexpected NRI message"),
                        }
                    }
                }
            }
        }
    }
    .await;
    // Handlers still running finish before the socket is considered closed,
    // so no response of this connection can leak into the next one.
    drop(outgoing);
    handlers.abort_all();
    while handlers.join_next().await.is_some() {}
    drop(reader);
    let _ = writer.shutdown().await;
    result
}

const REGISTER_STREAM: u32 = 1;

fn registration_result(payload: &[u8]) -> Result<(), ConnectionError> {
    let response =
        envelope::Response::decode(payload).map_err(|source| ConnectionError::Decode {
            what: "RegisterPlugin response",
            source,
        })?;
    match response.status {
        Some(status) if status.code != 0 => Err(ConnectionError::RegistrationRefused {
            code: status.code,
            message: status.message,
        }),
        _ => Ok(()),
    }
}

/// Runs one Plugin-service call on the blocking pool; its response goes back
/// through `responses` with the same stream id.
fn dispatch<S: PluginService + ?Sized>(
    message: Message,
    service: Arc<S>,
    responses: mpsc::UnboundedSender<Vec<u8>>,
    handlers: &mut JoinSet<()>,
) -> Result<(), ConnectionError> {
    let request = envelope::Request::decode(message.payload.as_slice()).map_err(|source| {
        ConnectionError::Decode {
            what: "request",
            source,
        }
    })?;
    let stream_id = message.stream_id;
    handlers.spawn_blocking(move || {
        let response = answer(service.as_ref(), &request);
        let mut frame = Vec::new();
        let encoded = match super::ttrpc::encode_message(
            PLUGIN_CONN,
            stream_id,
            MessageKind::Response,
            &response.encode_to_vec(),
            &mut frame,
        ) {
            Ok(()) => frame,
            Err(err) => {
                let failure = envelope::Response {
                    status: Some(envelope::Status {
                        code: code::INTERNAL,
                        message: err.to_string(),
                    }),
                    payload: Vec::new(),
                };
                let mut frame = Vec::new();
                if super::ttrpc::encode_message(
                    PLUGIN_CONN,
                    stream_id,
                    MessageKind::Response,
                    &failure.encode_to_vec(),
                    &mut frame,
                )
                .is_err()
                {
                    return;
                }
                frame
            }
        };
        // The connection may already be gone; then nobody waits for the answer.
        let _ = responses.send(encoded);
    });
    Ok(())
}

/// The ttrpc response for one request.
pub fn answer<S: PluginService + ?Sized>(
    service: &S,
    request: &envelope::Request,
) -> envelope::Response {
    let result = if request.service == PLUGIN_SERVICE {
        service.call(&request.method, &request.payload)
    } else {
        Err(RpcError::new(
            code::UNIMPLEMENTED,
            format!("unknown service {}", request.service),
        ))
    };
    match result {
        Ok(payload) => envelope::Response {
            status: None,
            payload,
        },
        Err(err) => envelope::Response {
            status: Some(envelope::Status {
                code: err.code,
                message: err.message,
            }),
            payload: Vec::new(),
        },
    }
}
