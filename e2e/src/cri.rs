//! A CRI v1 client (generated from `proto/cri/api.proto`) over a unix socket.

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/runtime.v1.rs"));
}

pub type RuntimeClient = v1::runtime_service_client::RuntimeServiceClient<Channel>;

/// Connects a CRI runtime client to the socket at `path`.
pub async fn connect(path: &Path) -> Result<RuntimeClient, tonic::transport::Error> {
    let path: PathBuf = path.to_path_buf();
    // The URI is required by tonic but unused: every connection goes to the socket.
    let channel = Endpoint::from_static("http://cri.local")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await?;
    Ok(v1::runtime_service_client::RuntimeServiceClient::new(
        channel,
    ))
}
