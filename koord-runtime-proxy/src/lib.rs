//! koord-runtime-proxy: sits between the kubelet and the container runtime on
//! the CRI (v1) socket and calls hook servers around lifecycle calls; see
//! `docs/proxy.md`.

pub mod cli;
pub mod codec;
pub mod config;
pub mod dispatcher;
pub mod docker;
pub mod health;
pub mod hookdir;
pub mod listen;
pub mod merge;
pub mod metrics;
pub mod proxy;
pub mod store;
pub mod unknown_fields;
pub mod wire;

/// CRI v1 (`runtime.v1`) messages and client, generated from `proto/cri/api.proto`.
pub mod cri {
    #[allow(clippy::all, clippy::pedantic, missing_docs)]
    pub mod v1 {
        include!(concat!(env!("OUT_DIR"), "/runtime.v1.rs"));
    }
}

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

use clap::Parser;
use koord_common::process::{Component, ComponentContext};
use koord_common::{Endpoints, ListenerSpec, LogArgs, ServeAt, ShutdownReason};

pub const COMPONENT: Component = Component {
    name: "koord-runtime-proxy",
    metric_prefix: "koord_runtime_proxy",
};

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

pub use health::{BackendMonitor, BackendSocketCheck};

/// Readiness check: the CRI socket is served and the store was rebuilt.
pub const CRI_PROXY_CHECK: &str = "cri-proxy";
/// Readiness check that the backend runtime socket accepts connections (probed
/// on each request).
pub const BACKEND_CHECK: &str = "backend";
/// Liveness check (so on `/healthz` and `/readyz`): the backend runtime socket
/// failed none of the last `--backend-failure-threshold` background probes.
pub const BACKEND_LIVENESS_CHECK: &str = "backend-reachable";

/// The container engine behind the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendRuntimeMode {
    #[value(name = "Containerd")]
    Containerd,
    #[value(name = "Docker")]
    Docker,
}

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

/// How long start-up waits for the runtime before serving without a rebuilt store.
pub const STORE_REBUILD_WAIT: Duration = Duration::from_secs(10);

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

/// Rebuilds the store from the runtime, retrying until it answers. The
/// listing is merged into what live calls recorded meanwhile (see `store`).
pub async fn rebuild_store(proxy: &proxy::Proxy) {
    let mut client = proxy.runtime_client();
    loop {
        proxy.store.begin_listing();
        match proxy::snapshot_runtime(&mut client).await {
            Ok(snapshot) => {
                let stats = proxy.store.merge_listing(snapshot);
                let (pods, containers) = proxy.store.counts();
                tracing::info!(
                    pods,
                    containers,
                    listed = ?stats.listed,
                    live_kept = ?stats.live_kept,
                    dropped = ?stats.dropped,
                    removed_meanwhile = ?stats.removed_meanwhile,
                    "metadata store rebuilt from the runtime"
                );
                return;
            }
            Err(status) => {
                tracing::warn!(%status, "cannot list pods from the runtime yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Runs until a signal or a failure; `Err` means start-up failed.
pub async fn run(args: RuntimeProxyArgs) -> anyhow::Result<ShutdownReason> {
    let context = ComponentContext::new(COMPONENT);
    if let Err(error) = unknown_fields::Schema::cri() {
        tracing::warn!(%error, "request fields unknown to the CRI API will be dropped when hooks merge answers");
    }
    koord_common::spawn_signal_handler(context.shutdown.clone())?;
    let ready = context
        .health
        .readiness_status(CRI_PROXY_CHECK, Err("CRI socket not served yet".into()));
    context.health.add_readiness_check(
        BACKEND_CHECK,
        BackendSocketCheck::new(args.remote_runtime_service_endpoint.clone()),
    );
    let backend_monitor = BackendMonitor::new(
        args.remote_runtime_service_endpoint.clone(),
        args.backend_probe_interval,
        args.backend_failure_threshold,
    );
    let _monitoring = backend_monitor.spawn();
    context
        .health
        .add_liveness_check(BACKEND_LIVENESS_CHECK, backend_monitor);

    let server = match args.metrics_addr.addr() {
        Some(addr) => Some(
            context
                .start_server(vec![ListenerSpec::new(addr, Endpoints::ALL)])
                .await?,
        ),
        None => None,
    };

    let metrics = metrics::ProxyMetrics::register(&context.metrics);
    let registry = config::Registry::watch_with(
        args.hook_server_config_dir.clone(),
        hookdir::WatchOptions::default(),
        metrics.clone(),
    )
    .await;
    if args.backend_runtime_mode == BackendRuntimeMode::Docker {
        let dispatcher =
            dispatcher::Dispatcher::new(registry, args.hook_call_timeout, metrics.clone())
                .with_max_message_size(args.hook_max_message_size);
        return run_docker(&args, context, server, ready, dispatcher, metrics).await;
    }
    let runtime = unix_channel(args.remote_runtime_service_endpoint.path().to_path_buf());
    let image = match &args.remote_image_service_endpoint {
        Some(endpoint) => unix_channel(endpoint.path().to_path_buf()),
        None => runtime.clone(),
    };
    let proxy = Arc::new(proxy::Proxy {
        backend: proxy::Backend { runtime, image },
        dispatcher: dispatcher::Dispatcher::new(registry, args.hook_call_timeout, metrics.clone())
            .with_max_message_size(args.hook_max_message_size),
        store: store::MetaStore::default(),
        max_message_size: args.cri_max_message_size,
        metrics,
        skip: proxy::SkipLabel {
            key: args.runtime_hook_server_key.clone(),
            value: args.runtime_hook_server_val.clone(),
        },
    });
    // Calls that arrive before the store is rebuilt would miss pod context,
    // so give the runtime a moment to answer before serving.
    let rebuilt = {
        let proxy = Arc::clone(&proxy);
        let ready = ready.clone();
        tokio::spawn(async move {
            rebuild_store(&proxy).await;
            ready.set_passing();
        })
    };
    if tokio::time::timeout(STORE_REBUILD_WAIT, rebuilt)
        .await
        .is_err()
    {
        tracing::warn!("serving CRI before the metadata store could be rebuilt");
    }

    let socket = args.runtime_proxy_endpoint.path().to_path_buf();
    let listener = bind_socket(&socket)?;
    tracing::info!(
        endpoint = %args.runtime_proxy_endpoint,
        backend = %args.remote_runtime_service_endpoint,
        "serving CRI"
    );
    let shutdown = context.shutdown.clone();
    let serving = tokio::spawn(Arc::clone(&proxy).serve(listener, async move {
        shutdown.wait().await;
    }));
    let reason = context.wait_for_shutdown(server).await;
    let _ = serving.await;
    let _ = std::fs::remove_file(&socket);
    Ok(reason)
}

/// Binds the proxy's unix socket, making its directory and replacing a
/// socket a previous run left (it would make bind fail).
fn bind_socket(socket: &Path) -> std::io::Result<tokio::net::UnixListener> {
    if let Some(parent) = socket.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::remove_file(socket) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
        _ => {}
    }
    tokio::net::UnixListener::bind(socket)
}

/// Docker mode: serves the Engine API in front of dockerd's socket
/// (`--remote-runtime-service-endpoint`) on `--koord-runtimeproxy-endpoint`.
async fn run_docker(
    args: &RuntimeProxyArgs,
    context: ComponentContext,
    server: Option<koord_common::RunningServer>,
    ready: koord_common::health::StatusCheck,
    dispatcher: dispatcher::Dispatcher,
    metrics: metrics::ProxyMetrics,
) -> anyhow::Result<ShutdownReason> {
    let proxy = Arc::new(docker::DockerProxy::new(
        args.remote_runtime_service_endpoint.path().to_path_buf(),
        dispatcher,
        metrics,
        proxy::SkipLabel {
            key: args.runtime_hook_server_key.clone(),
            value: args.runtime_hook_server_val.clone(),
        },
    ));
    // As in CRI mode: give the engine a moment to describe its containers
    // before serving, so calls about them find their pod context.
    let rebuilt = {
        let proxy = Arc::clone(&proxy);
        let ready = ready.clone();
        tokio::spawn(async move {
            proxy.rebuild_store().await;
            ready.set_passing();
        })
    };
    if tokio::time::timeout(STORE_REBUILD_WAIT, rebuilt)
        .await
        .is_err()
    {
        tracing::warn!("serving the Docker API before the metadata store could be rebuilt");
    }
    let socket = args.runtime_proxy_endpoint.path().to_path_buf();
    let listener = bind_socket(&socket)?;
    tracing::info!(
        endpoint = %args.runtime_proxy_endpoint,
        backend = %args.remote_runtime_service_endpoint,
        "serving the Docker Engine API"
    );
    let shutdown = context.shutdown.clone();
    let serving = tokio::spawn(Arc::clone(&proxy).serve(listener, async move {
        shutdown.wait().await;
    }));
    let reason = context.wait_for_shutdown(server).await;
    let _ = serving.await;
    let _ = std::fs::remove_file(&socket);
    Ok(reason)
}

#[cfg(test)]
mod tests {
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

    #[tokio::test]
    async fn backend_check_reports_missing_and_live_sockets() {
        let dir = std::env::temp_dir().join(format!("koord-rp-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("containerd.sock");
        let endpoint: CriEndpoint = socket.to_str().unwrap().parse().unwrap();
        let check = BackendSocketCheck::new(endpoint.clone());
        let missing = check.probe().await.unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");

        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(check.probe().await, Ok(()));
        drop(listener);
        // The file stays behind but nobody accepts any more.
        let refused = check.probe().await.unwrap_err();
        assert!(refused.contains("cannot connect"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
