//! koord-runtime-proxy: sits between the kubelet and the container runtime on
//! the CRI (v1) socket and calls hook servers around lifecycle calls; see
//! `docs/proxy.md`.

pub mod args;
pub mod cli;
pub mod codec;
pub mod config;
pub mod cri;
pub mod dispatcher;
pub mod docker;
pub mod endpoint;
pub mod health;
pub mod hookdir;
pub mod listen;
pub mod merge;
pub mod metrics;
pub mod proxy;
pub mod store;
pub mod unknown_fields;
pub mod wire;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use koord_common::process::{Component, ComponentContext};
use koord_common::{Endpoints, ListenerSpec, ShutdownReason};

pub const COMPONENT: Component = Component {
    name: "koord-runtime-proxy",
    metric_prefix: "koord_runtime_proxy",
};

pub use args::{
    BackendRuntimeMode, DEFAULT_CONTAINERD_ENDPOINT, DEFAULT_HOOK_SERVER_CONFIG_DIR,
    DEFAULT_HOOK_SERVER_KEY, DEFAULT_HOOK_SERVER_VAL, DEFAULT_MAX_MESSAGE_SIZE,
    DEFAULT_METRICS_ADDR, DEFAULT_RUNTIME_PROXY_ENDPOINT, MESSAGE_SIZE_RANGE, RuntimeProxyArgs,
};
pub use endpoint::{CriEndpoint, EndpointError, unix_channel};
pub use health::{BackendMonitor, BackendSocketCheck};

/// Readiness check: the CRI socket is served and the store was rebuilt.
pub const CRI_PROXY_CHECK: &str = "cri-proxy";
/// Readiness check that the backend runtime socket accepts connections (probed
/// on each request).
pub const BACKEND_CHECK: &str = "backend";
/// Liveness check (so on `/healthz` and `/readyz`): the backend runtime socket
/// failed none of the last `--backend-failure-threshold` background probes.
pub const BACKEND_LIVENESS_CHECK: &str = "backend-reachable";

/// How long start-up waits for the runtime before serving without a rebuilt store.
pub const STORE_REBUILD_WAIT: Duration = Duration::from_secs(10);

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
