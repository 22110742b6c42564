//! The kubelet's `/pods` endpoint: a client for its read-only (HTTP) or
//! authenticated (HTTPS, service-account token) port, or for any
//! kubelet-compatible URL, and a validating parser of its `PodList` body.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Deserialize;

use super::metrics::StatesMetrics;

/// Where the service-account token is mounted in a pod.
pub const SERVICE_ACCOUNT_TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// The request path, as upstream sends it.
pub const PODS_PATH: &str = "/pods/";

/// A `/pods` body that is not a usable pod list.
#[derive(Debug, thiserror::Error)]
pub enum PodListError {
    #[error("pod list is not valid JSON for a PodList: {0}")]
    Json(#[source] serde_json::Error),
    #[error("pod list has kind {0:?}, expected PodList")]
    WrongKind(String),
    #[error("pod list item {index} ({name}): {reason}")]
    InvalidPod {
        index: usize,
        name: String,
        reason: &'static str,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePodList {
    #[serde(default)]
    kind: Option<String>,
    // The kubelet encodes an empty list as `"items": null`.
    #[serde(default)]
    items: Option<Vec<Pod>>,
}

/// Parses and validates a kubelet `/pods` body: a JSON `PodList` whose pods
/// each carry a name, a namespace and a UID (koordlet keys pods by UID and
/// derives cgroup paths from it).
pub fn parse_pod_list(body: &[u8]) -> Result<Vec<Pod>, PodListError> {
    let list: WirePodList = serde_json::from_slice(body).map_err(PodListError::Json)?;
    if let Some(kind) = list.kind.filter(|kind| !kind.is_empty())
        && kind != "PodList"
    {
        return Err(PodListError::WrongKind(kind));
    }
    let pods = list.items.unwrap_or_default();
    validate_pods(&pods)?;
    Ok(pods)
}

/// Checks the fields koordlet relies on; the first offending pod is named.
pub fn validate_pods(pods: &[Pod]) -> Result<(), PodListError> {
    for (index, pod) in pods.iter().enumerate() {
        let meta = &pod.metadata;
        let display = format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or("")
        );
        let invalid = |reason| PodListError::InvalidPod {
            index,
            name: display.clone(),
            reason,
        };
        if meta.name.as_deref().is_none_or(str::is_empty) {
            return Err(invalid("metadata.name is missing"));
        }
        if meta.namespace.as_deref().is_none_or(str::is_empty) {
            return Err(invalid("metadata.namespace is missing"));
        }
        match meta.uid.as_deref() {
            None | Some("") => return Err(invalid("metadata.uid is missing")),
            Some(uid)
                if !uid
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                return Err(invalid(
                    "metadata.uid has characters other than letters, digits, '-' and '_'",
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("invalid kubelet URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("cannot build a client for the kubelet at {url}: {reason}")]
    Client { url: String, reason: String },
    #[error("GET {url}{PODS_PATH} failed: {reason}")]
    Request { url: String, reason: String },
    #[error("GET {url}{PODS_PATH} got no answer within {timeout:?}")]
    Timeout { url: String, timeout: Duration },
    #[error("GET {url}{PODS_PATH} returned an invalid pod list: {source}")]
    Body {
        url: String,
        #[source]
        source: PodListError,
    },
    #[error(
        "node {node} has no address of type {address_type} (nor InternalIP) to reach its kubelet"
    )]
    NoNodeAddress { node: String, address_type: String },
    #[error(
        "node {node} does not report its kubelet port (status.daemonEndpoints.kubeletEndpoint.port)"
    )]
    NoKubeletPort { node: String },
}

/// Address types upstream accepts for `--kubelet-preferred-address-type`.
pub const NODE_ADDRESS_TYPES: &[&str] = &[
    "Hostname",
    "ExternalIP",
    "InternalIP",
    "ExternalDNS",
    "InternalDNS",
];

/// The node's address of the preferred type; an unknown type falls back to
/// `InternalIP` as upstream does.
pub fn node_address(node: &Node, preferred_type: &str) -> Option<String> {
    let wanted = if NODE_ADDRESS_TYPES.contains(&preferred_type) {
        preferred_type
    } else {
        "InternalIP"
    };
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|address| address.type_ == wanted && !address.address.is_empty())
        .map(|address| address.address.clone())
}

/// The kubelet's authenticated port from the Node status.
pub fn node_kubelet_port(node: &Node) -> Option<u16> {
    let port = node
        .status
        .as_ref()?
        .daemon_endpoints
        .as_ref()?
        .kubelet_endpoint
        .as_ref()?
        .port;
    u16::try_from(port).ok().filter(|port| *port != 0)
}

/// Largest CA bundle read beside the token (a real one is a few KiB).
const MAX_CA_BUNDLE_BYTES: u64 = 1 << 20;

/// The DER certificates of `ca.crt` in the token's directory (where the
/// service-account volume puts it), or `None` when there is none usable; kube
/// then falls back to the system's roots.
fn cluster_ca_beside(token_file: &std::path::Path) -> Option<Vec<Vec<u8>>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let ca_file = token_file.with_file_name("ca.crt");
    let pem = match super::inputfile::read_input_file(&ca_file, MAX_CA_BUNDLE_BYTES) {
        Ok(pem) => pem,
        Err(err) if err.is_not_found() => return None,
        Err(err) => {
            tracing::warn!(file = %ca_file.display(), error = %err, "cannot read the cluster CA for the kubelet client: {err}");
            return None;
        }
    };
    let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .map(|cert| cert.as_ref().to_vec())
        .collect();
    if certs.is_empty() {
        tracing::warn!(file = %ca_file.display(), "no PEM certificate in the cluster CA file; the kubelet client uses the system's roots");
        return None;
    }
    Some(certs)
}

/// Parses into whatever type the caller needs (here the URI type of kube's
/// `Config`, which this crate does not name).
fn parse_text<T: std::str::FromStr>(text: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    text.parse().map_err(|err: T::Err| err.to_string())
}

/// `host:port`, bracketing IPv6 literals.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// How the client authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KubeletAuth {
    /// No credentials (read-only port, test endpoints).
    None,
    /// A bearer token re-read from this file; the kubelet's serving
    /// certificate is not verified, as upstream does (kubelet certificates are
    /// usually self-signed).
    TokenFile(PathBuf),
}

/// A client for one kubelet's `/pods`.
#[derive(Clone)]
pub struct KubeletClient {
    client: kube::Client,
    base_url: String,
    timeout: Duration,
    metrics: Option<StatesMetrics>,
}

impl std::fmt::Debug for KubeletClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletClient")
            .field("base_url", &self.base_url)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl KubeletClient {
    /// A client for `base_url` (`http://host:port` or `https://host:port`).
    pub fn new(base_url: &str, auth: KubeletAuth, timeout: Duration) -> Result<Self, KubeletError> {
        let base_url = base_url.trim_end_matches('/').to_string();
        let cluster_url = parse_text(&base_url).map_err(|reason| KubeletError::InvalidUrl {
            url: base_url.clone(),
            reason,
        })?;
        let mut config = kube::Config::new(cluster_url);
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        config.reset_reader_on_write = true;
        if let KubeletAuth::TokenFile(path) = auth {
            config.accept_invalid_certs = true;
            // kube loads a root store before it learns that verification is
            // skipped, and koordlet's image has no system CA bundle: hand it
            // the pod's cluster CA (beside the token) so the build succeeds.
            config.root_cert = cluster_ca_beside(&path);
            config.auth_info.token_file = Some(path.display().to_string());
        }
        let client = kube::Client::try_from(config).map_err(|err| KubeletError::Client {
            url: base_url.clone(),
            reason: err.to_string(),
        })?;
        Ok(Self {
            client,
            base_url,
            timeout,
            metrics: None,
        })
    }

    /// The read-only port of `address` over plain HTTP.
    pub fn read_only(address: &str, port: u16, timeout: Duration) -> Result<Self, KubeletError> {
        Self::new(
            &format!("http://{}", host_port(address, port)),
            KubeletAuth::None,
            timeout,
        )
    }

    /// The kubelet of `node`, as upstream picks it: the preferred address
    /// type; HTTPS on the Node's kubelet port with the bearer token in
    /// `token_file` (normally [`SERVICE_ACCOUNT_TOKEN_FILE`]), or with
    /// `insecure` the read-only port over HTTP.
    pub fn for_node(
        node: &Node,
        preferred_type: &str,
        insecure: bool,
        read_only_port: u16,
        token_file: &std::path::Path,
        timeout: Duration,
    ) -> Result<Self, KubeletError> {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let address =
            node_address(node, preferred_type).ok_or_else(|| KubeletError::NoNodeAddress {
                node: node_name.clone(),
                address_type: preferred_type.to_string(),
            })?;
        if insecure {
            return Self::read_only(&address, read_only_port, timeout);
        }
        let port =
            node_kubelet_port(node).ok_or(KubeletError::NoKubeletPort { node: node_name })?;
        Self::new(
            &format!("https://{}", host_port(&address, port)),
            KubeletAuth::TokenFile(token_file.to_path_buf()),
            timeout,
        )
    }

    /// Records request durations in `koordlet_kubelet_request_duration_seconds`.
    pub fn with_metrics(mut self, metrics: StatesMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// GET `/pods/`, parsed and validated.
    pub async fn get_pods(&self) -> Result<Vec<Pod>, KubeletError> {
        let request = kube::core::Request::new(PODS_PATH)
            .list(&kube::api::ListParams::default())
            .map_err(|err| KubeletError::Request {
                url: self.base_url.clone(),
                reason: err.to_string(),
            })?;
        let started = Instant::now();
        let outcome = tokio::time::timeout(self.timeout, self.client.request_text(request)).await;
        let (code, result) = match outcome {
            Err(_) => (
                "timeout".to_string(),
                Err(KubeletError::Timeout {
                    url: self.base_url.clone(),
                    timeout: self.timeout,
                }),
            ),
            Ok(Err(kube::Error::Api(status))) => (
                status.code.to_string(),
                Err(KubeletError::Request {
                    url: self.base_url.clone(),
                    reason: format!("HTTP {}: {}", status.code, status.message),
                }),
            ),
            Ok(Err(err)) => (
                "error".to_string(),
                Err(KubeletError::Request {
                    url: self.base_url.clone(),
                    reason: koord_common::cluster::error_chain(&err),
                }),
            ),
            Ok(Ok(body)) => (
                "200".to_string(),
                parse_pod_list(body.as_bytes()).map_err(|source| KubeletError::Body {
                    url: self.base_url.clone(),
                    source,
                }),
            ),
        };
        if let Some(metrics) = &self.metrics {
            metrics.observe_kubelet_request(PODS_PATH, &code, started.elapsed());
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        DaemonEndpoint, NodeAddress, NodeDaemonEndpoints, NodeStatus,
    };

    const VALID: &str = r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[
        {"metadata":{"name":"web","namespace":"default","uid":"0f6e9a1c-1111-2222-3333-444455556666",
          "labels":{"koordinator.sh/qosClass":"LS"}},
         "spec":{"containers":[{"name":"app","image":"nginx"}]},
         "status":{"phase":"Running","qosClass":"Burstable",
           "containerStatuses":[{"name":"app","containerID":"containerd://abc","image":"nginx","imageID":"","ready":true,"restartCount":0}]}},
        {"metadata":{"name":"batch","namespace":"jobs","uid":"u2"},"unknownField":1}
    ]}"#;

    /// A self-signed test CA (P-256), as a service-account `ca.crt` holds one.
    const TEST_CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBjjCCATOgAwIBAgIUEHMwEtziSgLI/OW8atoQBu/bgzkwCgYIKoZIzj0EAwIw
GzEZMBcGA1UEAwwQa29vcmRsZXQtdGVzdC1jYTAgFw0yNjEyMDIwODE4NDVaGA8y
MTI2MTEwODA4MTg0NVowGzEZMBcGA1UEAwwQa29vcmRsZXQtdGVzdC1jYTBZMBMG
ByqGSM49AgEGCCqGSM49AwEHA0IABLEnPrZvOwIZWywq0+9Xy2A9Z6eokOlDh3to
j69v4EUSrSQEY7rdp7kmD/u4wLeSjEjy3/PyT+AOrhNZZrcpL0ejUzBRMB0GA1Ud
DgQWBBSkZQemiDyoSRrlt5pbdYIq2ilrFzAfBgNVHSMEGDAWgBSkZQemiDyoSRrl
t5pbdYIq2ilrFzAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQCT
6dCqljWHYp1t+296rRNnvecgMoIT8Wam9BAjoER2EwIhAP0WvzIAQiXkg3AdKbHc
Ze3Lcuh3ernXoiiR1AsR6baX
-----END CERTIFICATE-----
";

    #[tokio::test]
    async fn the_cluster_ca_beside_the_token_replaces_the_system_roots() {
        let dir = koord_common::testing::TempDir::new("kubelet-ca").unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t").unwrap();
        assert_eq!(cluster_ca_beside(&token), None, "no ca.crt: system roots");

        std::fs::write(dir.path().join("ca.crt"), "not a certificate").unwrap();
        assert_eq!(cluster_ca_beside(&token), None, "no PEM in ca.crt");

        std::fs::write(
            dir.path().join("ca.crt"),
            format!("{TEST_CA_PEM}{TEST_CA_PEM}"),
        )
        .unwrap();
        let roots = cluster_ca_beside(&token).unwrap();
        assert_eq!(roots.len(), 2);
        assert_eq!(roots[0][0], 0x30, "DER starts with a SEQUENCE");

        let client = KubeletClient::new(
            "https://127.0.0.1:10250",
            KubeletAuth::TokenFile(token),
            Duration::from_secs(1),
        );
        assert!(client.is_ok(), "{:?}", client.err());
    }

    #[test]
    fn a_fifo_as_ca_file_is_refused_without_blocking() {
        let dir = koord_common::testing::TempDir::new("kubelet-ca-fifo").unwrap();
        let token = dir.path().join("token");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            dir.path().join("ca.crt"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(cluster_ca_beside(&token), None);
    }

    #[test]
    fn valid_pod_list_parses() {
        let pods = parse_pod_list(VALID.as_bytes()).unwrap();
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[0].metadata.name.as_deref(), Some("web"));
        assert_eq!(
            pods[0].metadata.uid.as_deref(),
            Some("0f6e9a1c-1111-2222-3333-444455556666")
        );
        let statuses = pods[0]
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap();
        assert_eq!(
            statuses[0].container_id.as_deref(),
            Some("containerd://abc")
        );
        assert_eq!(pods[1].metadata.namespace.as_deref(), Some("jobs"));
    }

    #[test]
    fn empty_lists_parse_in_every_spelling() {
        for body in [
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{},"items":null}"#,
            r#"{"kind":"PodList","items":[]}"#,
            r#"{}"#,
        ] {
            assert!(
                parse_pod_list(body.as_bytes()).unwrap().is_empty(),
                "{body}"
            );
        }
    }

    #[test]
    fn malformed_bodies_are_typed_errors() {
        let cases: &[(&str, &str)] = &[
            ("not json", "not valid JSON"),
            ("<html>502 Bad Gateway</html>", "not valid JSON"),
            (r#"{"items":{"a":1}}"#, "not valid JSON"),
            (r#"{"kind":"Pod","items":[]}"#, "kind \"Pod\""),
            (
                r#"{"items":[{"metadata":{"namespace":"a","uid":"u"}}]}"#,
                "item 0 (a/): metadata.name is missing",
            ),
            (
                r#"{"items":[{"metadata":{"name":"p","uid":"u"}}]}"#,
                "metadata.namespace is missing",
            ),
            (
                r#"{"items":[{"metadata":{"name":"p","namespace":"n","uid":"x"}},{"metadata":{"name":"q","namespace":"n"}}]}"#,
                "item 1 (n/q): metadata.uid is missing",
            ),
            (
                r#"{"items":[{"metadata":{"name":"p","namespace":"n","uid":"../../etc"}}]}"#,
                "metadata.uid has characters",
            ),
        ];
        for (body, expected) in cases {
            let err = parse_pod_list(body.as_bytes()).unwrap_err();
            assert!(err.to_string().contains(expected), "{body}: {err}");
        }
    }

    fn node(addresses: &[(&str, &str)], port: Option<i32>) -> Node {
        Node {
            metadata: kube::api::ObjectMeta {
                name: Some("node-a".into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                addresses: Some(
                    addresses
                        .iter()
                        .map(|(type_, address)| NodeAddress {
                            type_: type_.to_string(),
                            address: address.to_string(),
                        })
                        .collect(),
                ),
                daemon_endpoints: port.map(|port| NodeDaemonEndpoints {
                    kubelet_endpoint: Some(DaemonEndpoint { port }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn node_address_follows_the_preferred_type_with_internal_ip_fallback() {
        let n = node(
            &[("Hostname", "node-a"), ("InternalIP", "10.0.0.5")],
            Some(10250),
        );
        assert_eq!(node_address(&n, "Hostname").as_deref(), Some("node-a"));
        assert_eq!(node_address(&n, "InternalIP").as_deref(), Some("10.0.0.5"));
        assert_eq!(node_address(&n, "Bogus").as_deref(), Some("10.0.0.5"));
        assert_eq!(node_address(&n, "ExternalIP"), None);
        assert_eq!(node_kubelet_port(&n), Some(10250));
        assert_eq!(node_kubelet_port(&node(&[], Some(0))), None);
        assert_eq!(host_port("fd00::1", 10255), "[fd00::1]:10255");
        assert_eq!(host_port("10.0.0.5", 10255), "10.0.0.5:10255");
    }

    #[tokio::test]
    async fn client_for_node_picks_scheme_and_port() {
        let dir = koord_common::testing::TempDir::new("kubelet-token").unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "service-account-token").unwrap();
        let second = Duration::from_secs(1);
        let n = node(&[("InternalIP", "10.0.0.5")], Some(10250));
        let secure =
            KubeletClient::for_node(&n, "InternalIP", false, 10255, &token, second).unwrap();
        assert_eq!(secure.base_url(), "https://10.0.0.5:10250");
        let insecure =
            KubeletClient::for_node(&n, "InternalIP", true, 10255, &token, second).unwrap();
        assert_eq!(insecure.base_url(), "http://10.0.0.5:10255");
        let err =
            KubeletClient::for_node(&node(&[], None), "InternalIP", true, 10255, &token, second)
                .unwrap_err();
        assert!(matches!(err, KubeletError::NoNodeAddress { .. }), "{err}");
        let no_port = node(&[("InternalIP", "10.0.0.5")], None);
        let err = KubeletClient::for_node(&no_port, "InternalIP", false, 10255, &token, second)
            .unwrap_err();
        assert!(matches!(err, KubeletError::NoKubeletPort { .. }), "{err}");
        let missing = dir.path().join("missing-token");
        let err =
            KubeletClient::for_node(&n, "InternalIP", false, 10255, &missing, second).unwrap_err();
        assert!(err.to_string().contains("missing-token"), "{err}");
    }
}
