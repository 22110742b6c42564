//! koordlet: the node agent. It runs the states informer, the metrics advisor
//! with peak prediction, the NodeMetric reporter, the QoS manager (strategies
//! and eviction) and the runtime hooks (RuntimeHookService server, NRI plugin,
//! reconciler), in cluster mode (API server and kubelet) or standalone (pods
//! and NodeSLO from files, NodeMetric to a file).

pub mod bounds;
pub mod capabilities;
pub mod cli;
pub mod evictor;
pub mod features;
pub mod identity;
pub mod metriccache;
pub mod metricsadvisor;
pub mod prediction;
pub mod qosmanager;
pub mod resourceexecutor;
pub mod runtimehooks;
pub mod statesinformer;
pub mod system;

use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::Parser;
use koord_common::metrics::{FloatGauge, MetricsRegistry, unix_seconds};
use koord_common::process::{ComponentContext, connect_required_cluster};
use koord_common::{ClusterArgs, Endpoints, ListenAddr, ListenerSpec, LogArgs, ShutdownReason};
use prometheus_client::metrics::family::Family;

use crate::metriccache::MetricCache;
use crate::resourceexecutor::{ExecutorConfig, ResourceExecutor};
use crate::statesinformer::metrics::StatesMetrics;
use crate::statesinformer::{
    NodeMetricReporter, ReportSink, RequiredSyncs, StandaloneConfig, StandalonePods, StatesInformer,
};
use crate::system::cgroup::CgroupLayout;

/// Readiness check of the standalone pods file: failing, with the reason,
/// while the file cannot be used (the last good pods are kept).
pub const PODS_FILE_CHECK: &str = "pods-file";
/// Readiness check of the standalone NodeSLO file.
pub const NODE_SLO_FILE_CHECK: &str = "node-slo-file";

/// Command-line flags; names and defaults follow upstream `cmd/koordlet`
/// (Go-style single-dash spellings such as `-addr=:9316` are accepted too).
/// Parse them with [`cli::parse_args`], which also accepts the upstream
/// flags that have no effect here (`docs/flags.md`).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "koordlet",
    version = koord_common::cli::version(),
    about = "Koordinator node agent",
    // A flag given twice takes its last value, as Go's flag package does.
    args_override_self = true
)]
pub struct KoordletArgs {
    /// Address of the koordlet HTTP server: /metrics, /healthz, /readyz
    /// and, on a loopback address only, /qos/explain and the resource
    /// executor's audit trail at /resource-executor/writes. Upstream's
    /// default is `:9316`; ours is loopback on the same port because these
    /// endpoints show pods, cgroup paths and values without authentication
    /// (issue 16). An address on other interfaces serves what upstream
    /// serves there: /metrics (pod names included) and the probes.
    #[arg(long = "addr", default_value = "127.0.0.1:9316", value_name = "ADDR")]
    pub addr: ListenAddr,

    /// (ours) An extra listener serving only /healthz and /readyz, for
    /// probes that cannot reach a loopback `--addr`; off by default.
    #[arg(long = "health-addr", value_name = "ADDR")]
    pub health_addr: Option<ListenAddr>,

    /// Seconds a written cgroup value is trusted before the resource
    /// executor writes it again even when unchanged.
    #[arg(
        long = "resource-force-update-seconds",
        default_value_t = 60,
        value_name = "SECONDS"
    )]
    pub resource_force_update_seconds: u64,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    #[command(flatten)]
    pub system: system::SystemArgs,

    #[command(flatten)]
    pub states: statesinformer::StatesArgs,

    #[command(flatten)]
    pub collector: metricsadvisor::CollectorArgs,

    #[command(flatten)]
    pub runtime_hooks: runtimehooks::RuntimeHooksArgs,

    #[command(flatten)]
    pub nri: runtimehooks::nri::NriArgs,

    #[command(flatten)]
    pub evictor: evictor::EvictorArgs,

    #[command(flatten)]
    pub qos: qosmanager::QosManagerArgs,

    #[command(flatten)]
    pub node_topology: statesinformer::nodetopo::NodeTopologyArgs,

    #[command(flatten)]
    pub devices: statesinformer::device::DeviceArgs,

    #[command(flatten)]
    pub prediction: prediction::PredictionArgs,

    #[command(flatten)]
    pub log: LogArgs,

    /// A one-shot command instead of the daemon.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands; without one koordlet runs as the node daemon.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Print what this node's kernel supports (cgroup layout, CPU burst, PSI,
    /// core scheduling, resctrl, topology…) and exit; needs no cluster.
    Capabilities(capabilities::CapabilitiesArgs),
}

/// Registers `koordlet_start_time{node}` as upstream does (seconds since the epoch).
pub fn register_start_time(metrics: &MetricsRegistry, node_name: &str, started_at: SystemTime) {
    let start_time = Family::<Vec<(String, String)>, FloatGauge>::default();
    start_time
        .get_or_create(&vec![("node".to_string(), node_name.to_string())])
        .set(unix_seconds(started_at));
    metrics.register_component(|registry| {
        registry.register("start_time", "the start time of koordlet", start_time);
    });
}

/// Runs until a signal or a failure; `Err` means start-up failed.
///
/// Standalone mode (any of `--standalone`, `--pods-file`, `--kubelet-url`,
/// `--node-slo-file`, `--node-metric-output`) needs no API server; cluster
/// mode requires one and exits non-zero when it cannot be reached.
pub async fn run(
    args: KoordletArgs,
    node_name_env: Option<OsString>,
) -> anyhow::Result<ShutdownReason> {
    let standalone = args.states.standalone_config()?;
    let node_name = statesinformer::resolve_node_name(
        args.states.node_name.as_deref(),
        node_name_env,
        standalone.is_some(),
        || statesinformer::read_hostname(&args.system.proc_root_dir),
    )?;
    let mode = if standalone.is_some() {
        "standalone"
    } else {
        "cluster"
    };
    tracing::info!(node = %node_name, mode, "koordlet runs on node {node_name} ({mode} mode)");

    let context = ComponentContext::new(identity::COMPONENT);
    register_start_time(&context.metrics, &node_name, context.started_at);
    koord_common::spawn_signal_handler(context.shutdown.clone())?;

    // Capabilities decide the cgroup layout the collectors read.
    let system = args.system.clone();
    let caps = tokio::task::spawn_blocking(move || capabilities::detect(&system)).await?;
    capabilities::CapabilityMetrics::register(&context.metrics).update(&caps);
    let layout = cgroup_layout_of(&args.system, &caps);
    tracing::info!(version = %layout.version, driver = %layout.driver, root = %layout.root.display(), "cgroup layout");
    let cache = Arc::new(args.collector.build_cache()?);
    let executor = resource_executor(&args, layout.clone());
    executor.register_metrics(&context.metrics);
    // Runtime hooks: one dispatcher for the RuntimeHookService
    // server, the NRI plugin and the reconciler.
    let runtime_hooks = runtimehooks::RuntimeHooks::build(
        &args.runtime_hooks,
        &caps,
        layout.clone(),
        executor.clone(),
        &args.system,
        &context.metrics,
        &node_name,
    )?;

    let required = match &standalone {
        Some(config) => RequiredSyncs {
            node_slo: config.node_slo_file.is_some(),
            ..RequiredSyncs::PODS_ONLY
        },
        None => RequiredSyncs::CLUSTER,
    };
    let states = StatesInformer::new(node_name.clone(), required);
    states.register_readiness(&context.health);
    let states_metrics = StatesMetrics::register(&context.metrics, &node_name);
    // Server, NRI plugin and reconciler start once the informer synced
    // (as upstream), so their first decisions see the node's rules.
    runtime_hooks.start(
        &args.runtime_hooks,
        &args.nri,
        standalone.is_some(),
        &states,
        runtimehooks::online_cpus(&caps),
        Some(args.node_topology.var_lib_kubelet_dir.clone()),
        &context.metrics,
        &context.health,
        &context.shutdown,
    )?;
    let cluster_check = standalone
        .is_none()
        .then(|| context.register_cluster_check());
    // Expected values of the QoS manager, served at /qos/explain.
    let qos_managed = qosmanager::ManagedFiles::default();

    let server = context
        .start_server(listeners(
            &args,
            resourceexecutor::audit_router(executor.clone()).merge(qosmanager::explain_router(
                qos_managed.clone(),
                layout.clone(),
                Some(states.clone()),
            )),
        ))
        .await?;

    let sink = match (&standalone, &cluster_check) {
        (Some(config), _) => {
            if let Err(err) =
                start_standalone_sources(&args, config, &states, &states_metrics, &context)
            {
                context
                    .shutdown
                    .trigger(ShutdownReason::Failed(err.to_string()));
                context.wait_for_shutdown(Some(server)).await;
                return Err(err);
            }
            config.node_metric_output.clone().map(ReportSink::File)
        }
        (None, Some(cluster_check)) => {
            match connect_required_cluster(&context, &args.cluster.options(), cluster_check).await {
                Ok(Some(cluster)) => {
                    publish_capabilities(cluster.client.clone(), node_name.clone(), &caps);
                    statesinformer::apiserver::spawn_node_watchers(
                        &cluster.client,
                        &states,
                        &context.shutdown,
                    );
                    // podvolume blocks need PVC → PV; watched only when blkio runs.
                    let gates = features::parse_feature_gates(&args.runtime_hooks.feature_gates())
                        .unwrap_or_default();
                    if gates
                        .get(qosmanager::blkio::FEATURE)
                        .copied()
                        .unwrap_or(false)
                    {
                        let (lookup, _tasks) = statesinformer::volumes::spawn_volume_watchers(
                            &cluster.client,
                            &context.shutdown,
                        );
                        states.set_volume_lookup(lookup);
                    }
                    tokio::spawn(statesinformer::pods::run_cluster_pods(
                        args.states.clone(),
                        cluster.client.clone(),
                        states.clone(),
                        states_metrics.clone(),
                        context.shutdown.clone(),
                    ));
                    Some(ReportSink::ApiServer(cluster.client))
                }
                Ok(None) => return Ok(context.wait_for_shutdown(Some(server)).await),
                Err(err) => {
                    context
                        .shutdown
                        .trigger(ShutdownReason::Failed(err.to_string()));
                    context.wait_for_shutdown(Some(server)).await;
                    return Err(err.into());
                }
            }
        }
        (None, None) => None,
    };
    // NodeResourceTopology (see docs/nodetopology.md).
    statesinformer::nodetopo::spawn(
        &args.node_topology,
        &states,
        &args.system,
        Some(Arc::clone(&cache)),
        match &sink {
            Some(ReportSink::ApiServer(client)) => Some(client.clone()),
            _ => None,
        },
        statesinformer::nodetopo::report_gate(&args.runtime_hooks.feature_gates()),
        context.shutdown.clone(),
    );
    // Device and GPU usage (see koordlet/docs/devices.md): NVML is loaded
    // once, for both, when Accelerators is on.
    let gpu_sources = {
        let gates = args.runtime_hooks.feature_gates();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let shutdown = context.shutdown.clone();
        let stop_on_shutdown = Arc::clone(&stop);
        tokio::spawn(async move {
            shutdown.wait().await;
            stop_on_shutdown.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        tokio::task::spawn_blocking(move || {
            statesinformer::device::reporter::load_gpu_sources(&gates, stop)
        })
        .await?
    };
    statesinformer::device::reporter::spawn(
        &args.runtime_hooks.feature_gates(),
        args.system.sys_root_dir.clone(),
        &args.devices,
        gpu_sources.as_ref().map(|gpu| Arc::clone(&gpu.report)),
        &states,
        match &sink {
            Some(ReportSink::ApiServer(client)) => Some(client.clone()),
            _ => None,
        },
        args.node_topology.node_topology_sync_interval,
        context.shutdown.clone(),
    );
    start_qos_manager(
        &args,
        &context,
        &states,
        &layout,
        &cache,
        &caps,
        &executor,
        qos_managed,
        qos_evictor(&args, &node_name, &layout, &sink, &context),
    );
    start_network_qos(&args, &states, &context);
    let reporter = start_node_modules(
        &args,
        &context,
        &states,
        layout,
        cache,
        sink,
        states_metrics,
        gpu_sources.map(|gpu| gpu.usage),
    )
    .await;
    let reason = context.wait_for_shutdown(Some(server)).await;
    // The reporter saves the prediction checkpoint on its way out.
    if let Some(reporter) = reporter
        && tokio::time::timeout(REPORTER_STOP_GRACE, reporter)
            .await
            .is_err()
    {
        tracing::warn!(
            "the NodeMetric reporter did not stop in time; the last prediction checkpoint may be older"
        );
    }
    Ok(reason)
}

/// How long the exit waits for the reporter's last checkpoint.
const REPORTER_STOP_GRACE: Duration = Duration::from_secs(5);

/// What each listener serves (issue 16): `--addr` serves health and
/// metrics, plus `local_routes` (/qos/explain, the audit trail: pods, cgroup
/// paths and values) only when it is a loopback address; `--health-addr`
/// serves the probes alone.
fn listeners(args: &KoordletArgs, local_routes: axum::Router) -> Vec<ListenerSpec> {
    let loopback = args.addr.socket_addr().ip().is_loopback();
    let mut specs = vec![if loopback {
        ListenerSpec::new(args.addr, Endpoints::ALL).with_routes(local_routes)
    } else {
        tracing::warn!(
            addr = %args.addr,
            "--addr is not a loopback address: serving /metrics (which names pods) and the probes there without authentication, as upstream does; /qos/explain and /resource-executor/writes are served on loopback addresses only"
        );
        ListenerSpec::new(args.addr, Endpoints::ALL)
    }];
    if let Some(addr) = args.health_addr {
        specs.push(ListenerSpec::new(addr, Endpoints::HEALTH));
    }
    specs
}

/// The evictor the QoS strategies hand their evictions to: in cluster mode
/// the runtime's StopContainer (the Eviction API with `--only-evict-by-api`);
/// in standalone mode SIGKILL with `--evict-standalone-kill`, else log only.
fn qos_evictor(
    args: &KoordletArgs,
    node_name: &str,
    layout: &CgroupLayout,
    sink: &Option<ReportSink>,
    context: &ComponentContext,
) -> Arc<dyn qosmanager::Evictor> {
    let client = match sink {
        Some(ReportSink::ApiServer(client)) => Some(client.clone()),
        _ => None,
    };
    let evictor = evictor::PodEvictor::for_mode(client, node_name, &args.evictor)
        .with_cluster_reload(args.cluster.options())
        .with_runtime_endpoints(evictor::runtime::CriEndpoints {
            var_run_root: args.nri.var_run_root_dir.clone(),
            containerd: args.evictor.containerd_endpoint.clone(),
        });
    evictor.register_metrics(&context.metrics);
    Arc::new(evictor::qos::QosEvictor::new(
        evictor,
        layout.clone(),
        tokio::runtime::Handle::current(),
    ))
}

/// The QoS manager's strategies on their own thread (see `docs/qos.md`).
#[allow(clippy::too_many_arguments)]
fn start_qos_manager(
    args: &KoordletArgs,
    context: &ComponentContext,
    states: &StatesInformer,
    layout: &CgroupLayout,
    cache: &Arc<MetricCache>,
    caps: &capabilities::NodeCapabilities,
    executor: &ResourceExecutor,
    managed: qosmanager::ManagedFiles,
    evictor: Arc<dyn qosmanager::Evictor>,
) {
    let source = qosmanager::SnapshotSource {
        states: states.clone(),
        cache: Arc::clone(cache),
        capabilities: Arc::new(caps.clone()),
        layout: layout.clone(),
        collect_interval: args.collector.collect_res_used_interval,
        config: args.qos.config(args.collector.collect_res_used_interval),
        proc_root: args.system.proc_root_dir.clone(),
        kubelet_root: Some(args.node_topology.var_lib_kubelet_dir.clone()),
    };
    let started = qosmanager::start(
        source,
        qosmanager::standard_strategies(
            &args.system,
            // Malformed gates are refused when the runtime hooks start.
            &features::parse_feature_gates(&args.runtime_hooks.feature_gates()).unwrap_or_default(),
        ),
        executor.clone(),
        evictor,
        &context.metrics,
        managed,
        &args.qos.reaction,
        context.shutdown.clone(),
    );
    if let Err(err) = started {
        tracing::error!(error = %err, "cannot start the QoS manager thread: {err}");
    }
}

/// Network QoS on the uplink (`TCNetworkQoS`, off by default; `docs/netqos.md`).
fn start_network_qos(args: &KoordletArgs, states: &StatesInformer, context: &ComponentContext) {
    let gates =
        features::parse_feature_gates(&args.runtime_hooks.feature_gates()).unwrap_or_default();
    let on = gates
        .get(qosmanager::netqos::FEATURE)
        .copied()
        .unwrap_or(qosmanager::netqos::FEATURE_DEFAULT);
    if !on {
        return;
    }
    let metrics = qosmanager::netqos::NetQosMetrics::register(&context.metrics, states.node_name());
    if let Err(err) = qosmanager::netqos::spawn(
        states.clone(),
        args.system.proc_root_dir.clone(),
        args.system.sys_root_dir.clone(),
        metrics,
        context.shutdown.clone(),
    ) {
        tracing::error!(error = %err, "cannot start the network QoS thread: {err}");
    }
}

/// The daemon's one resource executor; its audit trail is served on `--addr`.
fn resource_executor(args: &KoordletArgs, layout: CgroupLayout) -> ResourceExecutor {
    let config = ExecutorConfig {
        force_update_interval: Duration::from_secs(args.resource_force_update_seconds),
        ..ExecutorConfig::default()
    };
    ResourceExecutor::new(layout, config)
}

/// The cgroup layout the detected capabilities describe; an undetected
/// driver means cgroupfs (the kubelet's default), hybrid hosts count as v1.
pub fn cgroup_layout_of(
    system: &system::SystemArgs,
    caps: &capabilities::NodeCapabilities,
) -> CgroupLayout {
    use crate::system::cgroup::{CgroupDriver, CgroupVersion};
    let version = match caps.cgroup.version {
        capabilities::CgroupVersion::V2 => CgroupVersion::V2,
        _ => CgroupVersion::V1,
    };
    let driver = match caps.cgroup.driver {
        capabilities::CgroupDriver::Systemd => CgroupDriver::Systemd,
        _ => CgroupDriver::Cgroupfs,
    };
    let mut layout = CgroupLayout::new(version, driver, &system.cgroup_root_dir);
    if let Some(dir) = &system.kubepods_cgroup_dir {
        layout = layout.with_kubepods_dir(dir);
    }
    let unified = system.cgroup_root_dir.join("unified");
    if version == CgroupVersion::V1 && caps.cgroup.unified_mount && unified.is_dir() {
        layout.with_unified_root(unified)
    } else {
        layout
    }
}

/// Publishes the capability labels and annotation on the Node, once.
fn publish_capabilities(
    client: kube::Client,
    node_name: String,
    caps: &capabilities::NodeCapabilities,
) {
    let patch = capabilities::node_patch(caps);
    tokio::spawn(async move {
        let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client);
        let params = kube::api::PatchParams::default();
        match nodes
            .patch(&node_name, &params, &kube::api::Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(node = %node_name, "node capabilities published"),
            Err(err) => {
                tracing::warn!(node = %node_name, error = %err, "cannot publish node capabilities")
            }
        }
    });
}

/// Standalone pods and NodeSLO sources.
fn start_standalone_sources(
    args: &KoordletArgs,
    config: &StandaloneConfig,
    states: &StatesInformer,
    metrics: &StatesMetrics,
    context: &ComponentContext,
) -> anyhow::Result<()> {
    use crate::statesinformer::kubelet::KubeletAuth;
    use crate::statesinformer::{KubeletClient, PodSource, PodsSyncer};
    let source = match &config.pods {
        StandalonePods::File(path) => PodSource::File(path.clone()),
        StandalonePods::KubeletUrl(url) => PodSource::Kubelet(
            KubeletClient::new(url, KubeletAuth::None, args.states.kubelet_sync_timeout)?
                .with_metrics(metrics.clone()),
        ),
    };
    let is_file = matches!(source, PodSource::File(_));
    let mut syncer = PodsSyncer::new(source, states.clone(), args.states.kubelet_sync_interval)
        .with_metrics(metrics.clone());
    if is_file {
        // A pods file that turns bad keeps the last pods; readiness says so.
        syncer = syncer.with_readiness(
            context
                .health
                .readiness_status(PODS_FILE_CHECK, Err("not read yet".to_string())),
        );
    }
    tokio::spawn(syncer.run(context.shutdown.clone()));
    if let Some(path) = &config.node_slo_file {
        let readiness = context
            .health
            .readiness_status(NODE_SLO_FILE_CHECK, Err("not read yet".to_string()));
        tokio::spawn(statesinformer::standalone::run_node_slo_file(
            path.clone(),
            states.clone(),
            Some(readiness),
            context.shutdown.clone(),
        ));
    }
    Ok(())
}

/// The metrics advisor and, when there is somewhere to write, the NodeMetric
/// reporter (whose prediction checkpoint is read before the advisor adds
/// samples, so the restored usage history comes first). Returns the
/// reporter's task.
#[allow(clippy::too_many_arguments)] // one caller; each input is a distinct module's
async fn start_node_modules(
    args: &KoordletArgs,
    context: &ComponentContext,
    states: &StatesInformer,
    layout: CgroupLayout,
    cache: Arc<MetricCache>,
    sink: Option<ReportSink>,
    states_metrics: StatesMetrics,
    gpu_usage: Option<Arc<dyn statesinformer::device::DeviceSource>>,
) -> Option<tokio::task::JoinHandle<()>> {
    let shutdown = &context.shutdown;
    let reporting = sink.is_some() && args.states.enable_node_metric_report;
    let prediction = args.prediction.config();
    let checkpoint = match args.prediction.checkpoint_dir(&args.nri.var_run_root_dir) {
        Some(dir) if reporting => {
            let checkpointer = prediction::checkpoint::Checkpointer::new(
                dir,
                states.node_name(),
                args.prediction.model_checkpoint_interval,
                Arc::clone(&cache),
            );
            let loader = checkpointer.clone();
            let half_lives = (prediction.cpu_half_life, prediction.memory_half_life);
            let models = tokio::task::spawn_blocking(move || loader.load_blocking(half_lives))
                .await
                .unwrap_or_default();
            Some((checkpointer, models))
        }
        _ => None,
    };
    let pods = statesinformer::podmeta::spawn_advisor_pods_feed(states, shutdown.clone());
    let mut advisor = metricsadvisor::MetricsAdvisor::standard(
        &args.collector,
        &args.system,
        layout.clone(),
        Arc::clone(&cache),
        pods,
        Some(metricsadvisor::AdvisorMetrics::register(
            &context.metrics,
            states.node_name(),
        )),
    );
    if let Some(source) = gpu_usage {
        advisor = advisor.with_collector(Box::new(metricsadvisor::GpuCollector::new(
            source,
            Arc::clone(&cache),
            layout,
        )));
    }
    tokio::spawn(advisor.run(args.collector.collect_res_used_interval, shutdown.clone()));
    match sink {
        Some(sink) if args.states.enable_node_metric_report => {
            let mut reporter = NodeMetricReporter::new(states.clone(), cache, sink)
                .with_prediction(Some(prediction))
                .with_interval_override(args.states.node_metric_report_interval)
                .with_metrics(states_metrics);
            if let Some((checkpointer, models)) = checkpoint {
                reporter = reporter.with_checkpointer(checkpointer, &models, SystemTime::now());
            }
            Some(tokio::spawn(reporter.run(shutdown.clone())))
        }
        Some(_) => {
            tracing::info!("NodeMetric reporting is disabled (--enable-node-metric-report=false)");
            None
        }
        None => {
            tracing::info!("no --node-metric-output given; NodeMetric is not reported");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn default_address_is_loopback_on_upstreams_port_and_go_spelling_parses() {
        // Upstream listens on :9316; the endpoints there show cluster data
        // (issue 16), so the default is loopback on the same port.
        let args = KoordletArgs::try_parse_from(["koordlet"]).unwrap();
        assert_eq!(args.addr.to_string(), "127.0.0.1:9316");
        let argv = koord_common::cli::normalize_go_flag_args(
            [
                "koordlet",
                "-addr=127.0.0.1:9999",
                "--logtostderr=true",
                "--v=4",
            ]
            .map(OsString::from),
        );
        let args = KoordletArgs::try_parse_from(argv).unwrap();
        assert_eq!(args.addr.to_string(), "127.0.0.1:9999");
    }

    #[test]
    fn upstream_runtime_hook_flags_parse_on_the_daemon_command_line() {
        // Flags from upstream's DaemonSet/config that used to stop koordlet at parsing.
        let argv = koord_common::cli::normalize_go_flag_args(
            [
                "koordlet",
                "-var-run-root-dir=/host-var-run/",
                "-runtime-hooks-nri-backoff-steps=2147483647",
                "-runtime-hooks-nri-backoff-duration=1s",
                "-runtime-hooks-nri-backoff-factor=2",
                "-runtime-hooks-nri-socket-path=nri/nri.sock",
                "-runtime-hooks-states-sync-timeout=0",
            ]
            .map(OsString::from),
        );
        let args = KoordletArgs::try_parse_from(argv).unwrap();
        assert_eq!(
            args.nri.socket(),
            std::path::PathBuf::from("/host-var-run/nri/nri.sock")
        );
        assert_eq!(args.nri.backoff_steps, 2_147_483_647);
        assert_eq!(args.runtime_hooks.states_sync_timeout(), None);
    }

    #[test]
    fn resource_force_update_seconds_defaults_to_upstream_and_reaches_the_executor() {
        let args = KoordletArgs::try_parse_from(["koordlet"]).unwrap();
        assert_eq!(args.resource_force_update_seconds, 60);
        let argv = koord_common::cli::normalize_go_flag_args(
            ["koordlet", "-resource-force-update-seconds=5"].map(OsString::from),
        );
        let args = KoordletArgs::try_parse_from(argv).unwrap();
        let layout = CgroupLayout::new(
            system::cgroup::CgroupVersion::V1,
            system::cgroup::CgroupDriver::Cgroupfs,
            "/sys/fs/cgroup",
        );
        let executor = resource_executor(&args, layout);
        assert_eq!(
            executor.config().force_update_interval,
            Duration::from_secs(5)
        );
        assert!(
            KoordletArgs::try_parse_from(["koordlet", "--resource-force-update-seconds=-1"])
                .is_err()
        );
    }

    #[test]
    fn start_time_metric_matches_upstream_name_and_label() {
        let metrics = MetricsRegistry::new("koordlet");
        register_start_time(
            &metrics,
            "node-a",
            UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        );
        let body = metrics.encode().unwrap();
        assert!(
            body.contains("koordlet_start_time{node=\"node-a\"} 1700000000.0"),
            "{body}"
        );
    }
}
