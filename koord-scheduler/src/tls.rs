//! Where the extender listens, and the HTTPS shell for a non-loopback
//! address. `/bind` acts with the scheduler's service account, so anything
//! that can reach the extender can bind pods: by default it listens on
//! loopback only (kube-scheduler runs in the same pod), and any other
//! address needs TLS with client certificates checked against
//! `--client-ca-file` — without them the process refuses to start.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use koord_common::Shutdown;
pub use koord_common::tls::TlsServer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// How long open connections may drain after shutdown.
pub const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// The PEM files of the extender's TLS serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// How the extender is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Plain HTTP, on a loopback address only.
    Plain,
    /// HTTPS, every client presenting a certificate signed by the client CA.
    MutualTls(TlsFiles),
}

/// Why the serving flags were refused at start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServingError {
    #[error(
        "--address={address} is not a loopback address, and plain HTTP there would let anyone who \
         reaches it bind any pod with the scheduler's service account: serve on 127.0.0.1 (the \
         default; kube-scheduler runs in the same pod) or give --tls-cert-file, \
         --tls-private-key-file and --client-ca-file so that clients must present a certificate"
    )]
    PlainOffLoopback { address: IpAddr },
    #[error(
        "TLS serving needs all of --tls-cert-file, --tls-private-key-file and --client-ca-file \
         (clients must authenticate); missing: {missing}"
    )]
    Incomplete { missing: String },
}

/// Decides the transport from the flags (see the module docs).
pub fn transport(
    address: IpAddr,
    cert: Option<&Path>,
    key: Option<&Path>,
    client_ca: Option<&Path>,
) -> Result<Transport, ServingError> {
    match (cert, key, client_ca) {
        (Some(cert), Some(key), Some(client_ca)) => Ok(Transport::MutualTls(TlsFiles {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            client_ca: client_ca.to_path_buf(),
        })),
        (None, None, None) if address.is_loopback() => Ok(Transport::Plain),
        (None, None, None) => Err(ServingError::PlainOffLoopback { address }),
        _ => {
            let missing: Vec<&str> = [
                ("--tls-cert-file", cert.is_none()),
                ("--tls-private-key-file", key.is_none()),
                ("--client-ca-file", client_ca.is_none()),
            ]
            .into_iter()
            .filter_map(|(flag, absent)| absent.then_some(flag))
            .collect();
            Err(ServingError::Incomplete {
                missing: missing.join(", "),
            })
        }
    }
}

/// A TLS file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} {path}: {reason}")]
    Pem {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("cannot build the TLS configuration: {0}")]
    Config(String),
    #[error("cannot listen on {addr} for the extender: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let fail = |reason: String| TlsError::Pem {
        what,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("no CERTIFICATE block".into()));
    }
    Ok(certs)
}

/// The rustls configuration: the serving certificate, and client
/// certificates required and verified against the client CA.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates("certificate", &files.cert)?;
    let key_pem = read("private key", &files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        what: "private key",
        path: files.key.clone(),
        reason: e.to_string(),
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in certificates("client CA", &files.client_ca)? {
        roots.add(ca).map_err(|e| TlsError::Pem {
            what: "client CA",
            path: files.client_ca.clone(),
            reason: e.to_string(),
        })?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|e| TlsError::Config(e.to_string()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Binds `addr` and serves `app` over mutual TLS until `shutdown` fires.
pub async fn serve(
    addr: SocketAddr,
    config: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: &Shutdown,
) -> Result<TlsServer, TlsError> {
    let server =
        koord_common::tls::serve_tls(addr, TlsAcceptor::from(config), app, shutdown, "extender")
            .await
            .map_err(|source| TlsError::Bind { addr, source })?;
    let local = server.addr;
    tracing::info!(addr = %local, "serving the extender (client certificates required) on https://{local}");
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::Ipv4Addr;

    #[test]
    fn loopback_serves_plain_anything_else_needs_mutual_tls() {
        let p = |s: &str| Some(Path::new(s).to_path_buf());
        let (cert, key, ca) = (p("c.pem"), p("k.pem"), p("ca.pem"));
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(transport(loopback, None, None, None), Ok(Transport::Plain));
        assert_eq!(
            transport("::1".parse().unwrap(), None, None, None),
            Ok(Transport::Plain)
        );
        for address in ["0.0.0.0", "10.0.0.5", "::", "::ffff:127.0.0.1"] {
            let address: IpAddr = address.parse().unwrap();
            let err = transport(address, None, None, None).unwrap_err();
            assert_eq!(err, ServingError::PlainOffLoopback { address });
            assert!(err.to_string().contains("--client-ca-file"), "{err}");
        }
        let all = transport(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            cert.as_deref(),
            key.as_deref(),
            ca.as_deref(),
        );
        assert!(matches!(all, Ok(Transport::MutualTls(_))));
        // A serving certificate without a client CA is not enough, anywhere.
        let err = transport(loopback, cert.as_deref(), key.as_deref(), None).unwrap_err();
        assert_eq!(
            err,
            ServingError::Incomplete {
                missing: "--client-ca-file".into()
            }
        );
    }
}
