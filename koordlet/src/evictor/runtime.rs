//! Eviction by stopping the pod's containers through the container
//! runtime's CRI (`runtime.v1.RuntimeService/StopContainer`, timeout 0),
//! upstream koordlet's default: the pod object stays, the kubelet sees the
//! containers exit and restarts them according to the pod's restart policy.
//!
//! The runtime is picked by the container ID's prefix, as upstream:
//! `containerd://` and `cri-o://` speak CRI; `docker://` and `pouch://` do
//! not (upstream talks to them through their own APIs) and are reported
//! unsupported. Sockets are looked up like upstream's: below
//! `--var-run-root-dir` (`containerd/containerd.sock`, `containerd.sock`;
//! `crio/crio.sock`, `crio.sock`), then `--containerd-endpoint`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use koord_common::sync::MutexExt;

/// Upstream's CRI call timeout (`defaultConnectionTimeout`).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The CRI method.
pub const STOP_CONTAINER_PATH: &str = "/runtime.v1.RuntimeService/StopContainer";

/// Longest container ID accepted (runtimes use 64 hex digits).
const MAX_CONTAINER_ID: usize = 128;

/// CRI v1 `StopContainerRequest` (field numbers of the published API).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    /// Seconds before the runtime kills the container; 0 kills at once.
    #[prost(int64, tag = "2")]
    pub timeout: i64,
}

/// CRI v1 `StopContainerResponse` (empty).
#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerResponse {}

/// Why a container could not be stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StopError {
    #[error("malformed container id {0:?} (expected <runtime>://<id>)")]
    MalformedId(String),
    #[error(
        "runtime {0:?} is not reached through CRI; stop its containers with --only-evict-by-api=true instead"
    )]
    UnsupportedRuntime(String),
    #[error("no {runtime} CRI socket found (looked at {looked})")]
    NoEndpoint { runtime: String, looked: String },
    #[error("StopContainer {id} on {endpoint}: {message}")]
    Call {
        id: String,
        endpoint: String,
        message: String,
    },
}

/// A container runtime kind and ID, parsed from `<runtime>://<id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRef {
    pub runtime: String,
    pub id: String,
}

/// Parses a pod status container ID, refusing anything that is not a
/// plain ID (it is sent to the runtime as given).
pub fn parse_container_id(text: &str) -> Result<ContainerRef, StopError> {
    let malformed = || StopError::MalformedId(text.chars().take(MAX_CONTAINER_ID * 2).collect());
    let (runtime, id) = text.split_once("://").ok_or_else(malformed)?;
    let valid_id = !id.is_empty()
        && id.len() <= MAX_CONTAINER_ID
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if runtime.is_empty() || !valid_id {
        return Err(malformed());
    }
    Ok(ContainerRef {
        runtime: runtime.to_string(),
        id: id.to_string(),
    })
}

/// Stops containers; the CRI client in production, a fake in tests.
pub trait ContainerStopper: Send + Sync + std::fmt::Debug {
    /// Stops the container (`<runtime>://<id>`) at once.
    fn stop<'a>(
        &'a self,
        container_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), StopError>> + Send + 'a>>;
}

/// Where the CRI sockets are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriEndpoints {
    /// The host's /var/run as mounted in koordlet's container.
    pub var_run_root: PathBuf,
    /// `--containerd-endpoint`, tried after the defaults.
    pub containerd: Option<PathBuf>,
}

impl CriEndpoints {
    /// Candidate sockets for `runtime`, in upstream's order; `None` for a
    /// runtime that does not speak CRI.
    pub fn candidates(&self, runtime: &str) -> Option<Vec<PathBuf>> {
        let root = &self.var_run_root;
        match runtime {
            "containerd" => {
                let mut paths = vec![
                    root.join("containerd/containerd.sock"),
                    root.join("containerd.sock"),
                ];
                paths.extend(self.containerd.iter().map(|p| strip_unix(p)));
                Some(paths)
            }
            "cri-o" | "crio" => Some(vec![root.join("crio/crio.sock"), root.join("crio.sock")]),
            _ => None,
        }
    }

    /// The first candidate that exists as a socket.
    pub fn resolve(&self, runtime: &str) -> Result<PathBuf, StopError> {
        let candidates = self
            .candidates(runtime)
            .ok_or_else(|| StopError::UnsupportedRuntime(runtime.to_string()))?;
        candidates
            .iter()
            .find(|path| is_socket(path))
            .cloned()
            .ok_or_else(|| StopError::NoEndpoint {
                runtime: runtime.to_string(),
                looked: candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

fn strip_unix(path: &Path) -> PathBuf {
    let text = path.to_string_lossy();
    PathBuf::from(text.strip_prefix("unix://").unwrap_or(&text).to_string())
}

fn is_socket(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
}

/// The CRI client: one lazily connected channel per socket.
#[derive(Debug)]
pub struct CriStopper {
    endpoints: CriEndpoints,
    channels: std::sync::Mutex<std::collections::HashMap<PathBuf, tonic::transport::Channel>>,
}

impl CriStopper {
    pub fn new(endpoints: CriEndpoints) -> Self {
        Self {
            endpoints,
            channels: Default::default(),
        }
    }

    fn channel(&self, socket: &Path) -> tonic::transport::Channel {
        let mut channels = self.channels.lock_or_recover();
        channels
            .entry(socket.to_path_buf())
            .or_insert_with(|| unix_channel(socket.to_path_buf()))
            .clone()
    }
}

/// A lazily connecting gRPC channel over the unix socket `path`.
pub fn unix_channel(path: PathBuf) -> tonic::transport::Channel {
    use hyper_util::rt::TokioIo;
    // The URI is required by tonic but unused: every connection goes to the socket.
    tonic::transport::Endpoint::from_static("http://localhost")
        .connect_timeout(STOP_TIMEOUT)
        .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
            }
        }))
}

/// One `StopContainer` call with timeout 0, bounded by [`STOP_TIMEOUT`].
pub async fn stop_container(
    channel: tonic::transport::Channel,
    id: &str,
) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    let call = async {
        grpc.ready()
            .await
            .map_err(|err| tonic::Status::unavailable(format!("runtime not ready: {err}")))?;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(STOP_CONTAINER_PATH);
        let codec =
            tonic_prost::ProstCodec::<StopContainerRequest, StopContainerResponse>::default();
        let request = tonic::Request::new(StopContainerRequest {
            container_id: id.to_string(),
            timeout: 0,
        });
        grpc.unary(request, path, codec).await.map(|_| ())
    };
    match tokio::time::timeout(STOP_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(tonic::Status::deadline_exceeded(format!(
            "no answer within {STOP_TIMEOUT:?}"
        ))),
    }
}

impl ContainerStopper for CriStopper {
    fn stop<'a>(
        &'a self,
        container_id: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<(), StopError>> + Send + 'a>> {
        Box::pin(async move {
            let container = parse_container_id(container_id)?;
            let socket = self.endpoints.resolve(&container.runtime)?;
            stop_container(self.channel(&socket), &container.id)
                .await
                .map_err(|status| StopError::Call {
                    id: container.id.clone(),
                    endpoint: socket.display().to_string(),
                    message: format!("{:?}: {}", status.code(), status.message()),
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_are_parsed_and_bounded() {
        assert_eq!(
            parse_container_id("containerd://abc123").unwrap(),
            ContainerRef {
                runtime: "containerd".into(),
                id: "abc123".into()
            }
        );
        for bad in [
            "abc",
            "containerd://",
            "://abc",
            "containerd://a/b",
            "containerd://a b",
            &format!("containerd://{}", "a".repeat(129)),
        ] {
            assert!(parse_container_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints_follow_upstream_order_and_refuse_non_cri_runtimes() {
        let dir = koord_common::testing::TempDir::new("cri-endpoints").unwrap();
        let endpoints = CriEndpoints {
            var_run_root: dir.path().to_path_buf(),
            containerd: Some(PathBuf::from("unix:///elsewhere/containerd.sock")),
        };
        assert_eq!(
            endpoints.candidates("containerd").unwrap(),
            [
                dir.path().join("containerd/containerd.sock"),
                dir.path().join("containerd.sock"),
                PathBuf::from("/elsewhere/containerd.sock"),
            ]
        );
        assert!(matches!(
            endpoints.resolve("docker"),
            Err(StopError::UnsupportedRuntime(_))
        ));
        let missing = endpoints.resolve("containerd").unwrap_err();
        assert!(missing.to_string().contains("containerd.sock"), "{missing}");
        // A plain file is not a socket.
        std::fs::write(dir.path().join("containerd.sock"), "").unwrap();
        assert!(endpoints.resolve("containerd").is_err());
        let socket = dir.path().join("crio.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(endpoints.resolve("cri-o").unwrap(), socket);
    }

    /// A CRI runtime that implements only `StopContainer`, on a real unix
    /// socket, recording what it is asked; ids starting with `gone` fail
    /// with NotFound.
    #[derive(Clone, Default)]
    struct FakeRuntime {
        stopped: std::sync::Arc<std::sync::Mutex<Vec<(String, i64)>>>,
    }

    impl tonic::server::UnaryService<StopContainerRequest> for FakeRuntime {
        type Response = StopContainerResponse;
        type Future = Pin<
            Box<
                dyn Future<Output = Result<tonic::Response<StopContainerResponse>, tonic::Status>>
                    + Send,
            >,
        >;

        fn call(&mut self, request: tonic::Request<StopContainerRequest>) -> Self::Future {
            let stopped = self.stopped.clone();
            Box::pin(async move {
                let request = request.into_inner();
                if request.container_id.starts_with("gone") {
                    return Err(tonic::Status::not_found("no such container"));
                }
                stopped
                    .lock()
                    .unwrap()
                    .push((request.container_id, request.timeout));
                Ok(tonic::Response::new(StopContainerResponse {}))
            })
        }
    }

    impl tonic::server::NamedService for FakeRuntime {
        const NAME: &'static str = "runtime.v1.RuntimeService";
    }

    impl tower::Service<tonic::codegen::http::Request<tonic::body::Body>> for FakeRuntime {
        type Response = tonic::codegen::http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(
            &mut self,
            request: tonic::codegen::http::Request<tonic::body::Body>,
        ) -> Self::Future {
            let service = self.clone();
            Box::pin(async move {
                if request.uri().path() != STOP_CONTAINER_PATH {
                    return Ok(tonic::Status::unimplemented("only StopContainer").into_http());
                }
                let codec =
                    tonic_prost::ProstCodec::<StopContainerResponse, StopContainerRequest>::default(
                    );
                Ok(tonic::server::Grpc::new(codec)
                    .unary(service, request)
                    .await)
            })
        }
    }

    #[tokio::test]
    async fn stops_containers_through_a_real_cri_socket() {
        let dir = koord_common::testing::TempDir::new("cri-stop").unwrap();
        std::fs::create_dir(dir.path().join("containerd")).unwrap();
        let socket = dir.path().join("containerd/containerd.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let runtime = FakeRuntime::default();
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        let server = tonic::transport::Server::builder()
            .add_service(runtime.clone())
            .serve_with_incoming(incoming);
        tokio::spawn(server);

        let stopper = CriStopper::new(CriEndpoints {
            var_run_root: dir.path().to_path_buf(),
            containerd: None,
        });
        stopper.stop("containerd://abc123").await.unwrap();
        stopper.stop("containerd://def456").await.unwrap();
        assert_eq!(
            runtime.stopped.lock().unwrap().clone(),
            [("abc123".to_string(), 0), ("def456".to_string(), 0)],
            "ids without the runtime prefix, timeout 0"
        );
        let err = stopper.stop("containerd://gone1").await.unwrap_err();
        assert!(
            matches!(&err, StopError::Call { message, .. } if message.contains("NotFound")),
            "{err}"
        );
        // No cri-o socket here; docker is not CRI; junk is refused before any call.
        assert!(matches!(
            stopper.stop("cri-o://abc").await,
            Err(StopError::NoEndpoint { .. })
        ));
        assert!(matches!(
            stopper.stop("docker://abc").await,
            Err(StopError::UnsupportedRuntime(_))
        ));
        assert!(matches!(
            stopper.stop("containerd://../x").await,
            Err(StopError::MalformedId(_))
        ));
        assert_eq!(runtime.stopped.lock().unwrap().len(), 2);
    }
}
