//! The command-line flags, their upstream defaults and their bounds; parse
//! process arguments with [`crate::cli::parse_args`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use koord_common::{LogArgs, ServeAt};

use crate::endpoint::CriEndpoint;
use crate::health;

pub const DEFAULT_RUNTIME_PROXY_ENDPOINT: &str = "/var/run/koord-runtimeproxy/runtimeproxy.sock";
pub const DEFAULT_CONTAINERD_ENDPOINT: &str = "/var/run/containerd/containerd.sock";
pub const DEFAULT_HOOK_SERVER_KEY: &str = "runtimeproxy.koordinator.sh/skip-hookserver";
pub const DEFAULT_HOOK_SERVER_VAL: &str = "true";
/// Upstream reads hook-server registrations from this directory (it has no flag for it).
pub const DEFAULT_HOOK_SERVER_CONFIG_DIR: &str = "/etc/runtime/hookserver.d";
/// Upstream serves no metrics here; this port sits next to koordlet's 9316/9317, on
/// loopback because the proxy runs on the host, outside any pod network.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9318";

/// The kubelet's CRI message limit (`maxMsgSize` of k8s.io/cri-client, for
/// sending and receiving; containerd's server defaults to the same), where
/// gRPC's default is 4 MiB: a node's pod list outgrows that. Shared with
/// koordlet's RuntimeHookService server.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = apis::runtime::CRI_MAX_MESSAGE_SIZE;

/// The container engine behind the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendRuntimeMode {
    #[value(name = "Containerd")]
    Containerd,
    #[value(name = "Docker")]
    Docker,
}

/// Command-line flags; upstream names and defaults from `cmd/koord-runtime-proxy`,
/// plus the serving address, image endpoint and hook config directory (no upstream flag).
/// Parse with [`cli::parse_args`], which takes Go's spellings.
#[derive(Debug, Clone, Parser)]
#[command(name = "koord-runtime-proxy", version = koord_common::cli::version(), about = "Koordinator runtime proxy (CRI, or the Docker Engine API with --backend-runtime-mode=Docker)")]
pub struct RuntimeProxyArgs {
    /// Unix socket the proxy serves CRI on (the kubelet's --container-runtime-endpoint).
    #[arg(long = "koord-runtimeproxy-endpoint", default_value = DEFAULT_RUNTIME_PROXY_ENDPOINT, value_name = "PATH")]
    pub runtime_proxy_endpoint: CriEndpoint,

    /// The backend runtime's CRI RuntimeService socket.
    #[arg(long = "remote-runtime-service-endpoint", default_value = DEFAULT_CONTAINERD_ENDPOINT, value_name = "PATH")]
    pub remote_runtime_service_endpoint: CriEndpoint,

    /// The backend's CRI ImageService socket, when it differs from the runtime service socket.
    #[arg(long = "remote-image-service-endpoint", value_name = "PATH")]
    pub remote_image_service_endpoint: Option<CriEndpoint>,

    /// Backend container engine.
    #[arg(
        long = "backend-runtime-mode",
        value_enum,
        ignore_case = true,
        default_value = "Containerd",
        value_name = "MODE"
    )]
    pub backend_runtime_mode: BackendRuntimeMode,

    /// Sandbox label key marking pods whose CRI calls skip the hook servers (e.g. koordlet itself).
    #[arg(long = "runtime-hook-server-key", default_value = DEFAULT_HOOK_SERVER_KEY, value_name = "KEY")]
    pub runtime_hook_server_key: String,

    /// Label value that goes with --runtime-hook-server-key.
    #[arg(long = "runtime-hook-server-val", default_value = DEFAULT_HOOK_SERVER_VAL, value_name = "VALUE")]
    pub runtime_hook_server_val: String,

    /// Directory of hook-server registration files (*.json).
    #[arg(long = "hook-server-config-dir", default_value = DEFAULT_HOOK_SERVER_CONFIG_DIR, value_name = "DIR")]
    pub hook_server_config_dir: PathBuf,

    /// Largest CRI message, in bytes, the proxy takes or sends, both from and to the kubelet and
    /// from and to the runtime (the kubelet's own limit is 16 MiB).
    #[arg(long = "cri-max-message-size", default_value_t = DEFAULT_MAX_MESSAGE_SIZE, value_parser = parse_message_size, value_name = "BYTES")]
    pub cri_max_message_size: usize,

    /// Largest message, in bytes, the proxy sends to or takes from a hook server.
    #[arg(long = "hook-max-message-size", default_value_t = DEFAULT_MAX_MESSAGE_SIZE, value_parser = parse_message_size, value_name = "BYTES")]
    pub hook_max_message_size: usize,

    /// Longest wait for one hook-server call.
    #[arg(long = "hook-call-timeout", default_value = "5s", value_parser = koord_common::cluster::parse_duration, value_name = "DURATION")]
    pub hook_call_timeout: Duration,

    /// How often the runtime socket is probed for the /healthz check `backend-reachable`.
    #[arg(long = "backend-probe-interval", default_value = "2s", value_parser = parse_probe_interval, value_name = "DURATION")]
    pub backend_probe_interval: Duration,

    /// Consecutive failed runtime probes before /healthz fails (a single slow
    /// or refused connection to a busy runtime does not).
    #[arg(long = "backend-failure-threshold", default_value_t = health::DEFAULT_BACKEND_FAILURE_THRESHOLD, value_parser = clap::value_parser!(u32).range(1..=1000), value_name = "COUNT")]
    pub backend_failure_threshold: u32,

    /// Address of the /healthz, /readyz and /metrics server ("0" disables it).
    #[arg(long = "metrics-addr", default_value = DEFAULT_METRICS_ADDR, value_name = "ADDR")]
    pub metrics_addr: ServeAt,

    #[command(flatten)]
    pub log: LogArgs,
}

/// A probe interval: a duration of at least 10ms.
fn parse_probe_interval(input: &str) -> Result<Duration, String> {
    let interval = koord_common::cluster::parse_duration(input)?;
    if interval < Duration::from_millis(10) {
        return Err(format!(
            "probe interval {input:?} is too short; use at least 10ms"
        ));
    }
    Ok(interval)
}

/// Smallest and largest accepted message-size limits.
pub const MESSAGE_SIZE_RANGE: std::ops::RangeInclusive<usize> = 64 * 1024..=1024 * 1024 * 1024;

/// A message-size limit in bytes, within [`MESSAGE_SIZE_RANGE`].
fn parse_message_size(input: &str) -> Result<usize, String> {
    let size: usize = input
        .trim()
        .parse()
        .map_err(|_| format!("message size {input:?} is not a number of bytes"))?;
    if !MESSAGE_SIZE_RANGE.contains(&size) {
        return Err(format!(
            "message size {size} is out of range; use {} to {} bytes",
            MESSAGE_SIZE_RANGE.start(),
            MESSAGE_SIZE_RANGE.end()
        ));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn defaults_match_upstream() {
        let args = RuntimeProxyArgs::try_parse_from(["koord-runtime-proxy"]).unwrap();
        assert_eq!(
            args.runtime_proxy_endpoint.path(),
            Path::new(DEFAULT_RUNTIME_PROXY_ENDPOINT)
        );
        assert_eq!(
            args.remote_runtime_service_endpoint.path(),
            Path::new(DEFAULT_CONTAINERD_ENDPOINT)
        );
        assert_eq!(args.backend_runtime_mode, BackendRuntimeMode::Containerd);
        assert_eq!(
            args.runtime_hook_server_key,
            "runtimeproxy.koordinator.sh/skip-hookserver"
        );
        assert_eq!(args.runtime_hook_server_val, "true");
        assert_eq!(
            args.hook_server_config_dir,
            Path::new("/etc/runtime/hookserver.d")
        );
        assert_eq!(args.remote_image_service_endpoint, None);
        assert_eq!(args.metrics_addr.to_string(), "127.0.0.1:9318");
        assert_eq!(args.cri_max_message_size, 16 * 1024 * 1024);
        assert_eq!(args.hook_max_message_size, 16 * 1024 * 1024);
    }

    #[test]
    fn message_sizes_are_bytes_in_range() {
        let args = RuntimeProxyArgs::try_parse_from([
            "p",
            "--cri-max-message-size=33554432",
            "--hook-max-message-size",
            "4194304",
        ])
        .unwrap();
        assert_eq!(args.cri_max_message_size, 32 * 1024 * 1024);
        assert_eq!(args.hook_max_message_size, 4 * 1024 * 1024);
        for bad in ["0", "1024", "16Mi", "-1", "2147483648"] {
            assert!(
                RuntimeProxyArgs::try_parse_from(["p", "--cri-max-message-size", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn backend_mode_accepts_upstream_spelling() {
        for (flag, mode) in [
            ("Docker", BackendRuntimeMode::Docker),
            ("docker", BackendRuntimeMode::Docker),
            ("Containerd", BackendRuntimeMode::Containerd),
        ] {
            let args =
                RuntimeProxyArgs::try_parse_from(["p", "--backend-runtime-mode", flag]).unwrap();
            assert_eq!(args.backend_runtime_mode, mode);
        }
        assert!(RuntimeProxyArgs::try_parse_from(["p", "--backend-runtime-mode", "crio"]).is_err());
    }
}
