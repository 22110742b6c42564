//! The runtime's NRI socket as `koordlet capabilities` reports it. It is a
//! fact about the container runtime rather than the kernel, and it changes
//! whenever the runtime restarts, so it is part of the printed report only,
//! not of the matrix published on the Node (the daemon exports its live NRI
//! state as `koordlet_nri_connected`).
//!
//! A socket that accepts a connection says nothing about koordlet's own
//! plugin. When a koordlet daemon runs, the command asks it: it reads
//! `koordlet_nri_connected` from the daemon's `/metrics` on `--addr`
//! (loopback when the address is unspecified) and reports it as
//! `pluginConnected`; without an answer that is `null`, with the reason.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{DetectOptions, NodeCapabilities, detect_with};
use crate::runtimehooks::nri::{NriArgs, NriProbe, probe_socket};
use crate::statesinformer::cpumanager::KubeletCpuManagerView;
use crate::statesinformer::device::capability::DevicesCapability;
use crate::system::SystemArgs;

/// Key of the NRI entry in the JSON object and in `reasons`.
pub const NRI_KEY: &str = "nri";

/// Whether the container runtime offers NRI on the configured socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NriCapability {
    /// The socket probed: `--runtime-hooks-nri-socket-path`, a relative
    /// path taken below `/var/run/`.
    pub socket: String,
    /// The socket file exists.
    pub present: bool,
    /// A connection to it succeeded (and was closed at once).
    pub accepting: bool,
    /// `--enable-nri-runtime-hook`: whether the daemon would register as a
    /// plugin. The socket is probed either way.
    pub plugin_enabled: bool,
    /// Whether a running koordlet reports its NRI plugin registered with the
    /// runtime (its `koordlet_nri_connected`); `null` when no koordlet
    /// answered (or it was not asked). `accepting` alone does not mean this.
    #[serde(default)]
    pub plugin_connected: Option<bool>,
    /// Where `pluginConnected` comes from, or why it is unknown.
    #[serde(default)]
    pub plugin_detail: String,
}

/// The metric a running koordlet exports for its NRI plugin.
pub const NRI_CONNECTED_METRIC: &str = "koordlet_nri_connected";

/// How long the daemon query may take (connect, and each read/write).
pub const DAEMON_QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of a `/metrics` answer read (a koordlet's is far smaller).
const MAX_METRICS_BYTES: u64 = 16 << 20;

/// What a running koordlet said about its NRI plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonNriStatus {
    /// `Some` when the daemon answered with the metric.
    pub connected: Option<bool>,
    pub detail: String,
}

/// The address to dial for a daemon listening on `addr`: an unspecified
/// address (`:9316`, `0.0.0.0`, `[::]`) is reached on loopback.
pub fn daemon_dial_addr(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

/// Asks the koordlet serving HTTP on `addr` (its `--addr`) whether its NRI
/// plugin is registered, reading `koordlet_nri_connected` from `/metrics`
/// (blocking, bounded by `timeout` per step). Never fails: a missing daemon,
/// an error status or an unexpected body give `connected: None` and say why.
pub fn query_daemon_nri(addr: SocketAddr, timeout: Duration) -> DaemonNriStatus {
    let dial = daemon_dial_addr(addr);
    let unknown = |why: String| DaemonNriStatus {
        connected: None,
        detail: format!(
            "{why}; `accepting` only means the runtime's socket takes connections, not that koordlet's plugin is registered (a running koordlet reports that as {NRI_CONNECTED_METRIC} on its --addr /metrics; pass that address as --addr)"
        ),
    };
    let body = match http_get(dial, "/metrics", timeout) {
        Ok(body) => body,
        Err(error) => return unknown(format!("no koordlet answered on {dial}: {error}")),
    };
    match parse_connected_metric(&body) {
        Some(true) => DaemonNriStatus {
            connected: Some(true),
            detail: format!("koordlet on {dial} reports {NRI_CONNECTED_METRIC} 1"),
        },
        Some(false) => DaemonNriStatus {
            connected: Some(false),
            detail: format!(
                "koordlet on {dial} reports {NRI_CONNECTED_METRIC} 0: its plugin is not registered (see its /readyz?verbose check nri-plugin and its log)"
            ),
        },
        None => unknown(format!(
            "{dial} answered /metrics without {NRI_CONNECTED_METRIC} (not a koordlet?)"
        )),
    }
}

/// The value of the unlabelled `koordlet_nri_connected` sample: `Some(true)`
/// for 1, `Some(false)` for 0, `None` when absent or not a number.
pub fn parse_connected_metric(body: &str) -> Option<bool> {
    body.lines().find_map(|line| {
        let rest = line.strip_prefix(NRI_CONNECTED_METRIC)?;
        let value = rest.strip_prefix(' ')?.split_whitespace().next()?;
        let value: f64 = value.parse().ok()?;
        value.is_finite().then_some(value >= 1.0)
    })
}

/// A plain HTTP/1.0 GET; the body of a 200 answer (read-to-close, or
/// chunked should the server choose it), else an error.
fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<String, String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("cannot send the request: {e}"))?;
    let mut raw = Vec::new();
    stream
        .take(MAX_METRICS_BYTES)
        .read_to_end(&mut raw)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    parse_http_response(&raw)
}

/// The body of a raw HTTP response with status 200.
fn parse_http_response(raw: &[u8]) -> Result<String, String> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the answer is not HTTP (no header end)")?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "the HTTP header is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .filter(|line| line.starts_with("HTTP/"))
        .and_then(|line| line.split_whitespace().nth(1))
        .ok_or("the answer is not HTTP (no status line)")?;
    if status != "200" {
        return Err(format!("HTTP status {status}"));
    }
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = &raw[head_end + 4..];
    let body = if chunked {
        dechunk(body).ok_or("malformed chunked body")?
    } else {
        body.to_vec()
    };
    String::from_utf8(body).map_err(|_| "the body is not UTF-8".to_string())
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
        let size_text = size_text.split(';').next()?.trim();
        let size = usize::from_str_radix(size_text, 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        let chunk = body.get(..size)?;
        out.extend_from_slice(chunk);
        body = body.get(size..)?.strip_prefix(b"\r\n")?;
    }
}

/// What `koordlet capabilities` prints: the node matrix with the `nri`
/// entry beside its keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilitiesReport {
    #[serde(flatten)]
    pub node: NodeCapabilities,
    pub nri: NriCapability,
    /// The kubelet's CPU manager policy and pinned CPUs, from its
    /// `cpu_manager_state` below `--var-lib-kubelet-dir`.
    #[serde(
        default,
        rename = "kubeletCpuManager",
        skip_serializing_if = "Option::is_none"
    )]
    pub kubelet_cpu_manager: Option<KubeletCpuManagerView>,
    /// GPUs (NVML) and RDMA NICs found, and whether the Device is reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<DevicesCapability>,
    /// The CPU reaction path's event source (`qosmanager::reaction`).
    #[serde(
        default,
        rename = "cpuReaction",
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_reaction: Option<crate::qosmanager::reaction::ReactionCapability>,
    /// Network QoS (`TCNetworkQoS`): rtnetlink, HTB and the u32 classifier.
    #[serde(
        default,
        rename = "networkQos",
        skip_serializing_if = "Option::is_none"
    )]
    pub network_qos: Option<crate::qosmanager::netqos::capability::NetQosCapability>,
    /// Whether blkio throttles can reach volumes (`qosmanager::blkvolume`).
    #[serde(
        default,
        rename = "blkioVolumes",
        skip_serializing_if = "Option::is_none"
    )]
    pub blkio_volumes: Option<crate::qosmanager::blkvolume::BlkioVolumesCapability>,
    /// What can be enforced on NodeSLO host applications' cgroups.
    #[serde(
        default,
        rename = "hostApplications",
        skip_serializing_if = "Option::is_none"
    )]
    pub host_applications: Option<crate::runtimehooks::hostapp::HostAppsCapability>,
}

impl CapabilitiesReport {
    /// Combines a detected matrix with an NRI probe; a socket that does not
    /// accept connections gets its explanation under `reasons["nri"]`.
    pub fn new(mut node: NodeCapabilities, probe: NriProbe, plugin_enabled: bool) -> Self {
        if !probe.accepts_connections {
            node.reasons.insert(NRI_KEY.to_string(), probe.detail);
        }
        Self {
            node,
            nri: NriCapability {
                socket: probe.socket.display().to_string(),
                present: probe.socket_present,
                accepting: probe.accepts_connections,
                plugin_enabled,
                plugin_connected: None,
                plugin_detail: format!(
                    "no running koordlet was asked; `accepting` only means the runtime's socket takes connections, not that koordlet's plugin is registered (see {NRI_CONNECTED_METRIC})"
                ),
            },
            kubelet_cpu_manager: None,
            devices: None,
            cpu_reaction: None,
            network_qos: None,
            blkio_volumes: None,
            host_applications: None,
        }
    }

    /// Adds whether network QoS can run here; when it cannot, the reason is
    /// also under `reasons["networkQos"]`.
    pub fn with_network_qos(
        mut self,
        network_qos: crate::qosmanager::netqos::capability::NetQosCapability,
    ) -> Self {
        if !network_qos.supported {
            self.node.reasons.insert(
                crate::qosmanager::netqos::capability::NETWORK_QOS_KEY.to_string(),
                network_qos.detail.clone(),
            );
        }
        self.network_qos = Some(network_qos);
        self
    }

    /// Adds what can be enforced on host applications, derived from the
    /// node matrix; a knob that cannot is explained under
    /// `reasons["hostApplications"]`.
    pub fn with_host_applications(mut self) -> Self {
        let host_apps = crate::runtimehooks::hostapp::capability(&self.node);
        if !host_apps.complete() {
            self.node.reasons.insert(
                crate::runtimehooks::hostapp::HOST_APPLICATIONS_KEY.to_string(),
                host_apps.detail.clone(),
            );
        }
        self.host_applications = Some(host_apps);
        self
    }

    /// Adds what blkio volume throttling can do here.
    pub fn with_blkio_volumes(
        mut self,
        volumes: crate::qosmanager::blkvolume::BlkioVolumesCapability,
    ) -> Self {
        self.blkio_volumes = Some(volumes);
        self
    }

    /// Adds which event source the CPU reaction path would use.
    pub fn with_cpu_reaction(
        mut self,
        reaction: crate::qosmanager::reaction::ReactionCapability,
    ) -> Self {
        self.cpu_reaction = Some(reaction);
        self
    }

    /// Adds what the kubelet's CPU manager checkpoint says.
    pub fn with_kubelet_cpu_manager(mut self, view: KubeletCpuManagerView) -> Self {
        self.kubelet_cpu_manager = Some(view);
        self
    }

    /// Adds what device discovery finds.
    pub fn with_devices(mut self, devices: DevicesCapability) -> Self {
        self.devices = Some(devices);
        self
    }

    /// Adds what a running koordlet said about its plugin.
    pub fn with_daemon(mut self, daemon: DaemonNriStatus) -> Self {
        self.nri.plugin_connected = daemon.connected;
        self.nri.plugin_detail = daemon.detail;
        self
    }
}

/// Detects the node matrix and probes the NRI socket of `nri` (blocking I/O
/// and one connect: call from a blocking context).
pub fn detect_report(
    system: &SystemArgs,
    options: &DetectOptions,
    nri: &NriArgs,
) -> CapabilitiesReport {
    let node = detect_with(system, options);
    // The capability is the runtime's, so probe even when koordlet's own
    // plugin is switched off (the probe skips the socket for a disabled one).
    let probe = probe_socket(&NriArgs {
        enable: true,
        ..nri.clone()
    });
    CapabilitiesReport::new(node, probe, nri.enable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// Serves one connection with `answer` (raw bytes) after reading the request.
    fn serve_once(answer: &'static [u8]) -> (SocketAddr, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                let read = stream.read(&mut buffer).unwrap();
                if read == 0 {
                    break;
                }
                request.extend_from_slice(&buffer[..read]);
            }
            stream.write_all(answer).unwrap();
            String::from_utf8_lossy(&request).into_owned()
        });
        (addr, thread)
    }

    #[test]
    fn the_connected_sample_is_read_from_the_exposition() {
        let body = "# HELP koordlet_nri_connected 1 while registered\n# TYPE koordlet_nri_connected gauge\nkoordlet_nri_connected 1\nkoordlet_nri_connections_total 3\n";
        assert_eq!(parse_connected_metric(body), Some(true));
        assert_eq!(
            parse_connected_metric("koordlet_nri_connected 0\n"),
            Some(false)
        );
        // Other families with the same prefix and garbage do not count.
        assert_eq!(
            parse_connected_metric("koordlet_nri_connections_total 1\n"),
            None
        );
        assert_eq!(parse_connected_metric("koordlet_nri_connected NaN\n"), None);
        assert_eq!(parse_connected_metric("koordlet_nri_connected\n"), None);
        assert_eq!(parse_connected_metric(""), None);
    }

    #[test]
    fn unspecified_listen_addresses_are_dialled_on_loopback() {
        let dial = |text: &str| daemon_dial_addr(text.parse().unwrap()).to_string();
        assert_eq!(dial("0.0.0.0:9316"), "127.0.0.1:9316");
        assert_eq!(dial("[::]:9316"), "[::1]:9316");
        assert_eq!(dial("10.1.2.3:9316"), "10.1.2.3:9316");
    }

    #[test]
    fn a_daemon_answer_gives_the_plugin_state() {
        let (addr, server) = serve_once(
            b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nkoordlet_nri_connected 1\n",
        );
        let status = query_daemon_nri(addr, Duration::from_secs(5));
        assert_eq!(status.connected, Some(true), "{}", status.detail);
        assert!(
            status.detail.contains(&addr.to_string()),
            "{}",
            status.detail
        );
        let request = server.join().unwrap();
        assert!(
            request.starts_with("GET /metrics HTTP/1.0\r\n"),
            "{request}"
        );

        // Chunked, with the sample split across chunks.
        let (addr, _server) = serve_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nkoordlet_nri_con\r\n9\r\nnected 0\n\r\n0\r\n\r\n",
        );
        let status = query_daemon_nri(addr, Duration::from_secs(5));
        assert_eq!(status.connected, Some(false), "{}", status.detail);
        assert!(
            status.detail.contains("not registered"),
            "{}",
            status.detail
        );
    }

    #[test]
    fn no_daemon_or_a_foreign_answer_leaves_it_unknown_and_says_why() {
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let status = query_daemon_nri(closed, Duration::from_secs(5));
        assert_eq!(status.connected, None);
        assert!(
            status.detail.contains("no koordlet answered"),
            "{}",
            status.detail
        );
        assert!(
            status
                .detail
                .contains("not that koordlet's plugin is registered")
        );

        for answer in [
            &b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"[..],
            &b"HTTP/1.0 200 OK\r\n\r\nsome_other_metric 1\n"[..],
            &b"SSH-2.0-OpenSSH\r\n"[..],
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"[..],
            &b"HTTP/1.0 200 OK\r\n\r\n\xff\xfe"[..],
        ] {
            let (addr, _server) = serve_once(answer);
            let status = query_daemon_nri(addr, Duration::from_secs(5));
            assert_eq!(status.connected, None, "{answer:?}: {}", status.detail);
            assert!(!status.detail.is_empty());
        }
    }
}
