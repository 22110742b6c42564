#![allow(clippy::unwrap_used)]
//! Who may reach `/bind` (issue 16), with the real binary: on a
//! non-loopback address the extender refuses to start without mutual TLS;
//! with it, only clients holding a certificate from `--client-ca-file` get
//! an answer, and the probe port serves `/healthz` and `/readyz` only.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use koord_common::testing::{
    FakeApiServer, HTTP_WAIT as HTTP, PROCESS_WAIT as WAIT, TempDir, TestProcess,
    closed_local_addr, command_with_kubeconfig, expect_failed_exit, http_get_blocking,
    write_kubeconfig,
};
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_koord-scheduler");

/// A CA and a certificate (PEM) it signed.
struct Pki {
    ca_cert: String,
    ca: Issuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = params.self_signed(&key).unwrap().pem();
        Pki {
            ca_cert,
            ca: Issuer::new(params, key),
        }
    }

    /// (certificate, key) for `names`, for a server or a client.
    fn issue(&self, names: &[&str], server: bool) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// POST /filter over TLS, presenting `client` (certificate, key) if given.
async fn post_tls(
    addr: std::net::SocketAddr,
    server_ca: &str,
    client: Option<&(String, String)>,
) -> Result<String, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(server_ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .map(Result::unwrap)
                    .collect();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let exchange = async {
        let mut tls = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let body =
            r#"{"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": ["n1"]}"#;
        let request = format!(
            "POST /filter HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tls.write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut raw = Vec::new();
        tls.read_to_end(&mut raw)
            .await
            .map_err(|e| format!("read: {e}"))?;
        Ok(String::from_utf8_lossy(&raw).to_string())
    };
    tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .map_err(|_| "timed out".to_string())?
}

#[test]
fn a_non_loopback_address_without_client_certificates_is_refused_at_start() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("scheduler-open-address").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args(["--address=0.0.0.0", "--port=0"]);
    // --port=0: nothing is served, so nothing needs protecting.
    let mut off = TestProcess::spawn(command).unwrap();
    off.expect_line("--port=0: not serving the extender", WAIT)
        .unwrap();
    off.stop_cleanly("TERM", WAIT).unwrap();

    let port = closed_local_addr().unwrap().port().to_string();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args(["--address=0.0.0.0", "--port", &port]);
    expect_failed_exit(
        command,
        WAIT,
        &[
            "--address=0.0.0.0 is not a loopback address",
            "--client-ca-file",
        ],
    )
    .unwrap();
    // A serving certificate without a client CA is refused as well.
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args([
        "--address=0.0.0.0",
        "--port",
        &port,
        "--tls-cert-file=/nonexistent/cert.pem",
        "--tls-private-key-file=/nonexistent/key.pem",
    ]);
    expect_failed_exit(command, WAIT, &["missing: --client-ca-file"]).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mutual_tls_only_clients_of_the_client_ca_are_answered() {
    let api = FakeApiServer::start().unwrap();
    let dir = TempDir::new("scheduler-mtls").unwrap();
    let kubeconfig = write_kubeconfig(dir.path(), &api.url()).unwrap();
    let serving = Pki::new();
    let clients = Pki::new();
    let strangers = Pki::new();
    let (cert, key) = serving.issue(&["localhost"], true);
    let cert_file = write(dir.path(), "tls.crt", &cert);
    let key_file = write(dir.path(), "tls.key", &key);
    let ca_file = write(dir.path(), "client-ca.crt", &clients.ca_cert);

    let port = closed_local_addr().unwrap().port();
    let health_port = closed_local_addr().unwrap().port();
    let mut command = command_with_kubeconfig(BIN, &kubeconfig);
    command.args([
        "--address=0.0.0.0".to_string(),
        format!("--port={port}"),
        format!("--health-port={health_port}"),
        format!("--tls-cert-file={cert_file}"),
        format!("--tls-private-key-file={key_file}"),
        format!("--client-ca-file={ca_file}"),
    ]);
    let mut process = TestProcess::spawn(command).unwrap();
    let health = process.serving_addr("health probes", WAIT).unwrap();
    assert_eq!(health.port(), health_port);
    process
        .expect_line("client certificates required", WAIT)
        .unwrap();
    let extender: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();

    // The probe port: /healthz and /readyz, nothing else.
    let probe = std::net::SocketAddr::new([127, 0, 0, 1].into(), health_port);
    let (status, metrics, filter) = tokio::task::spawn_blocking(move || {
        (
            http_get_blocking(probe, "/healthz", HTTP).unwrap().status,
            http_get_blocking(probe, "/metrics", HTTP).unwrap().status,
            http_get_blocking(probe, "/filter", HTTP).unwrap().status,
        )
    })
    .await
    .unwrap();
    assert_eq!((status, metrics, filter), (200, 404, 404));

    // No client certificate, or one from another CA: no answer.
    let refused = post_tls(extender, &serving.ca_cert, None).await;
    assert!(refused.is_err(), "{refused:?}");
    let stranger = strangers.issue(&["intruder"], false);
    let refused = post_tls(extender, &serving.ca_cert, Some(&stranger)).await;
    assert!(refused.is_err(), "{refused:?}");
    // Plain HTTP gets no answer either.
    let plain = tokio::task::spawn_blocking(move || http_get_blocking(extender, "/healthz", HTTP))
        .await
        .unwrap();
    assert!(plain.is_err() || plain.is_ok_and(|r| r.status != 200));

    // A client of the client CA is served.
    let member = clients.issue(&["kube-scheduler"], false);
    let answer = post_tls(extender, &serving.ca_cert, Some(&member))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("\"FailedAndUnresolvableNodes\""),
        "{answer}"
    );

    process.stop_cleanly("TERM", WAIT).unwrap();
}
