//! CRI endpoints: the unix sockets the proxy serves on and forwards to, and
//! channels to them.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("CRI endpoint is empty")]
    Empty,
    #[error("CRI endpoint {0:?} is not supported; use a unix socket path or unix:///path")]
    UnsupportedScheme(String),
    #[error("CRI endpoint {0:?} must be an absolute socket path")]
    NotAbsolute(String),
}

/// A CRI endpoint: a unix socket, written as a path or `unix:///path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriEndpoint(PathBuf);

impl CriEndpoint {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl std::fmt::Display for CriEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0.display())
    }
}

impl FromStr for CriEndpoint {
    type Err = EndpointError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let text = input.trim();
        if text.is_empty() {
            return Err(EndpointError::Empty);
        }
        let path = match text.split_once("://") {
            Some(("unix", path)) => path,
            Some(_) => return Err(EndpointError::UnsupportedScheme(text.to_string())),
            None => text,
        };
        if !path.starts_with('/') {
            return Err(EndpointError::NotAbsolute(text.to_string()));
        }
        Ok(Self(PathBuf::from(path)))
    }
}

/// A lazily connected gRPC channel to a unix socket.
pub fn unix_channel(path: PathBuf) -> Channel {
    // The URI is required by tonic but unused: every connection goes to the socket.
    Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(
        move |_: Uri| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_accept_paths_and_unix_urls() {
        assert_eq!(
            "/run/containerd.sock"
                .parse::<CriEndpoint>()
                .unwrap()
                .path(),
            Path::new("/run/containerd.sock")
        );
        assert_eq!(
            "unix:///run/containerd.sock"
                .parse::<CriEndpoint>()
                .unwrap()
                .path(),
            Path::new("/run/containerd.sock")
        );
        assert_eq!("".parse::<CriEndpoint>(), Err(EndpointError::Empty));
        assert!(matches!(
            "tcp://1.2.3.4:1".parse::<CriEndpoint>(),
            Err(EndpointError::UnsupportedScheme(_))
        ));
        assert!(matches!(
            "run/x.sock".parse::<CriEndpoint>(),
            Err(EndpointError::NotAbsolute(_))
        ));
    }
}
