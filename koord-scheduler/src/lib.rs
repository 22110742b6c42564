//! koord-scheduler: places pods with Koordinator policies as a Kubernetes
//! scheduler extender (`/filter`, `/prioritize`, `/bind`), and offline
//! through `koord-scheduler simulate`.
//!
//! Pure cores: [`cache`] (cluster indexes), [`framework`] (plugin pipeline),
//! [`permit`] (pods held at Permit until their gang can bind), [`plugins`],
//! [`node_checks`] (kube-scheduler's node checks), [`placement`] (the
//! per-pod placement cycle), [`preempt`];
//! thin shells: [`extender`] (HTTP), [`cluster`] (watchers,
//! binder, housekeeping), [`reservation_controller`], [`simulator`] (YAML in,
//! report out). With several replicas, only the one holding the leader Lease
//! writes status and runs the Reservation controller ([`LeaderElectionArgs`]).
//! A module imports only from the layers below it (`docs/extender.md`,
//! "Where the code lives"); this file only runs the process and re-exports.

/// The allocator of every binary that links this crate (the scheduler, its
/// benchmark and tests, so they measure the same thing). The state is
/// published as a copy-on-write snapshot after every write ([`framework::core`]),
/// so every thread frees and allocates many small objects all the time; under
/// a storm of 1,000 watch events/s glibc's malloc slowed `/filter` 3× (also in
/// the quiet seconds after it), mimalloc did not (`docs/extender.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process, before it serves.
/// mimalloc asks for huge pages on its arenas; then the first touch of a
/// 2 MiB region (new, or handed back to the kernel after a while unused)
/// zeroes all of it inside whatever request touched it: `perf` found 65 %
/// of an 18 ms `/filter` in the kernel zeroing huge pages (figures in
/// `docs/extender.md`). A kernel that refuses only costs those spikes.
pub fn disable_transparent_huge_pages() {
    match rustix::thread::disable_transparent_huge_pages(true) {
        Ok(()) => tracing::info!("transparent huge pages disabled for this process"),
        Err(error) => {
            tracing::warn!(%error, "could not disable transparent huge pages; expect latency spikes when the kernel zeroes a huge page inside a request")
        }
    }
}

pub mod admission;
pub mod args;
pub mod cache;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod controller_plugins;
pub mod cow;
pub mod cpuset;
pub mod disruption;
pub mod extender;
pub mod filtered;
pub mod framework;
pub mod node_checks;
pub mod node_map;
pub mod permit;
pub mod placement;
pub mod plugins;
pub mod preempt;
pub mod reservation_controller;
pub mod resources;
pub mod simulator;
#[cfg(test)]
mod testutil;
pub mod tls;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use koord_common::process::{Component, ComponentContext, connect_required_cluster};
use koord_common::{Endpoints, ListenAddr, ListenerSpec, ShutdownReason};

use crate::extender::{ExtenderMetrics, ExtenderState};
use crate::framework::SharedScheduler;

pub use crate::plugins::build_scheduler;

pub use crate::args::{
    Command, DEFAULT_LEASE_NAME, DEFAULT_PORT, LeaderElectionArgs, OutputFormat, SchedulerArgs,
    SimulateArgs,
};

/// Metric names use kube-scheduler's `scheduler_` namespace, as upstream does.
pub const COMPONENT: Component = Component {
    name: "koord-scheduler",
    metric_prefix: "scheduler",
};

/// Readiness check that passes once the cache has listed nodes and pods.
pub const SCHEDULER_CHECK: &str = "scheduler";

/// How often assumed pods are expired and due status is written.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);

/// `koord-scheduler simulate`: returns the text to print.
pub fn run_simulation(args: &SchedulerArgs, simulate: &SimulateArgs) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let config = args.configuration()?;
    let mut scheduler = build_scheduler(&config, args.assumed_pod_ttl)?;
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
    };
    let snapshot = simulator::Snapshot::from_yaml(&read(&simulate.snapshot)?)
        .with_context(|| format!("in snapshot {}", simulate.snapshot.display()))?;
    let extra = match &simulate.pods {
        Some(path) => simulator::Snapshot::from_yaml(&read(path)?)
            .with_context(|| format!("in pods file {}", path.display()))?,
        None => simulator::Snapshot::default(),
    };
    for kind in snapshot.skipped_kinds.iter().chain(&extra.skipped_kinds) {
        tracing::warn!(kind = %kind, "snapshot kind not used by the scheduler; skipped");
    }
    for refusal in snapshot.refused.iter().chain(&extra.refused) {
        tracing::warn!("{refusal}");
    }
    let now = match &simulate.now {
        Some(text) => {
            let timestamp: k8s_openapi::jiff::Timestamp = text
                .parse()
                .with_context(|| format!("--now {text:?} is not an RFC 3339 time"))?;
            SystemTime::from(timestamp)
        }
        None => snapshot.latest_report().unwrap_or_else(SystemTime::now),
    };
    let report = simulator::simulate(&mut scheduler, snapshot, extra, now);
    Ok(match simulate.output {
        OutputFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
        OutputFormat::Table => simulator::render_table(&report),
    })
}

/// Runs until a signal or a failure; `Err` means start-up failed.
pub async fn run(args: SchedulerArgs) -> anyhow::Result<ShutdownReason> {
    disable_transparent_huge_pages();
    let extender_at = args.extender()?;
    let tls_config = match &extender_at {
        Some((_, tls::Transport::MutualTls(files))) => Some(tls::server_config(files)?),
        _ => None,
    };
    let config = args.configuration()?;
    let lease_timing = args.leader_election.timing()?;
    let profile = config.profile();
    let mut built = build_scheduler(&config, args.assumed_pod_ttl)?;
    built.permit_bind_wait = args.gang_bind_wait;
    built.controllers = args.controller_plugins();
    let disabled = built.controllers.disabled();
    if !disabled.is_empty() {
        tracing::info!(controllers = ?disabled, "controller plugins disabled by --controller-plugins");
    }
    let scheduler: SharedScheduler = Arc::new(framework::SchedulerCore::new(built));
    let context = ComponentContext::new(COMPONENT);
    koord_common::spawn_signal_handler(context.shutdown.clone())?;
    let ready = context.health.readiness_status(
        SCHEDULER_CHECK,
        Err("waiting for the node and pod caches to sync".into()),
    );
    let cluster_check = context.register_cluster_check();
    let metrics = ExtenderMetrics::new(
        profile
            .scheduler_name
            .as_deref()
            .unwrap_or("koord-scheduler"),
    );
    metrics.register(&context.metrics);
    scheduler.register(&context.metrics);
    let input_metrics = admission::InputMetrics::default();
    input_metrics.register(&context.metrics);

    // The binder needs the client, so the routes start once the cluster is reachable;
    // until then they are absent and readiness fails.
    let (binder_tx, binder_rx) =
        tokio::sync::watch::channel::<Option<Arc<dyn framework::Binder>>>(None);
    let extender_routes = LazyBinderState {
        scheduler: Arc::clone(&scheduler),
        binder: binder_rx,
        metrics: metrics.clone(),
    }
    .router();
    let mut listeners = args.side_listeners();
    let mut tls_server = None;
    match (extender_at, tls_config) {
        (Some((addr, tls::Transport::MutualTls(_))), Some(config)) => {
            let app = koord_common::server::router(context.server_state(), Endpoints::ALL)
                .merge(extender_routes);
            tls_server = Some(tls::serve(addr, config, app, &context.shutdown).await?);
        }
        (Some((addr, _)), _) => listeners.push(
            ListenerSpec::new(ListenAddr::new(addr), Endpoints::ALL).with_routes(extender_routes),
        ),
        (None, _) => tracing::info!("--port=0: not serving the extender"),
    }
    let server = if listeners.is_empty() {
        None
    } else {
        Some(context.start_server(listeners).await?)
    };

    match connect_required_cluster(&context, &args.cluster.options(), &cluster_check).await {
        Ok(Some(connected)) => {
            let binder: Arc<dyn framework::Binder> = Arc::new(cluster::KubeBinder {
                client: connected.client.clone(),
            });
            let _ = binder_tx.send(Some(binder));
            let synced = cluster::start_watchers_counted(
                &connected.client,
                &scheduler,
                ready,
                &input_metrics,
                &context.shutdown,
            );
            let leadership = args.leader_election.leadership(
                &connected.client,
                lease_timing,
                synced,
                &context.metrics,
                &context.shutdown,
            );
            cluster::start_background_work(
                &connected.client,
                &scheduler,
                &config,
                HOUSEKEEPING_INTERVAL,
                &leadership,
                &context.shutdown,
            );
            tracing::info!(plugins = ?scheduler.read().map(|s| s.plugin_names()).unwrap_or_default(), "serving the scheduler extender");
            Ok(drain(&context, server, tls_server).await)
        }
        Ok(None) => Ok(drain(&context, server, tls_server).await),
        Err(err) => {
            context
                .shutdown
                .trigger(ShutdownReason::Failed(err.to_string()));
            drain(&context, server, tls_server).await;
            Err(err.into())
        }
    }
}

/// Waits for shutdown and lets both servers drain.
async fn drain(
    context: &ComponentContext,
    server: Option<koord_common::RunningServer>,
    tls_server: Option<tls::TlsServer>,
) -> ShutdownReason {
    let reason = context.wait_for_shutdown(server).await;
    if let Some(tls_server) = tls_server {
        tls_server.wait(tls::DRAIN_GRACE).await;
    }
    reason
}

/// Extender routes whose binder arrives after the cluster connection.
struct LazyBinderState {
    scheduler: SharedScheduler,
    binder: tokio::sync::watch::Receiver<Option<Arc<dyn framework::Binder>>>,
    metrics: ExtenderMetrics,
}

impl LazyBinderState {
    fn router(self) -> axum::Router {
        let binder: Arc<dyn framework::Binder> = Arc::new(DeferredBinder(self.binder));
        extender::router(ExtenderState {
            scheduler: self.scheduler,
            binder,
            metrics: self.metrics,
        })
    }
}

/// Fails binds until the cluster binder is available.
struct DeferredBinder(tokio::sync::watch::Receiver<Option<Arc<dyn framework::Binder>>>);

impl framework::Binder for DeferredBinder {
    fn bind<'a>(&'a self, reserved: &'a framework::Reserved) -> framework::BindFuture<'a> {
        let binder = self.0.borrow().clone();
        Box::pin(async move {
            match binder {
                Some(binder) => binder.bind(reserved).await,
                None => Err(framework::BindError::NotConnected),
            }
        })
    }

    fn nominate<'a>(&'a self, nomination: &'a framework::Nomination) -> framework::BindFuture<'a> {
        let binder = self.0.borrow().clone();
        Box::pin(async move {
            match binder {
                Some(binder) => binder.nominate(nomination).await,
                None => Err(framework::BindError::NotConnected),
            }
        })
    }
}
