//! QoS manager: strategies that keep running pods within their NodeSLO.
//!
//! [`framework`] holds the plugin contract ([`Strategy`], [`QosSnapshot`],
//! [`Decision`], [`Evictor`]) and the [`QosRunner`] that applies decisions;
//! [`hostfiles`] the read-only view of kernel files strategies decide from;
//! [`service`] builds snapshots from the states informer and metric cache,
//! runs the runner on its own thread and serves `GET /qos/explain`.

pub mod blkio;
pub mod blkvolume;
pub mod cgreconcile;
pub mod cpuburst;
pub mod cpuevict;
pub mod cpusuppress;
pub mod distribution;
pub mod evictreport;
pub mod evicttask;
pub mod framework;
pub mod hostfiles;
pub mod latencyguard;
pub mod lsschedstat;
pub mod memoryevict;
pub mod netqos;
pub mod reaction;
pub mod resctrl;
pub mod service;
pub mod sysreconcile;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use koord_common::units::MilliCpu;

pub use framework::{
    AnyStrategy, Capability, CgroupReader, Decision, EnsureDir, EvictionRequest, Evictor,
    FeatureGate, FileWrite, GaugeValue, LayoutReader, LoggingEvictor, ManagedFile, ManagedFiles,
    MapReader, MetricSample, NodeInfo, NodeUsage, Note, NoteKind, QosContainer, QosManagerConfig,
    QosMetrics, QosPod, QosRunner, QosSnapshot, ReadBack, RoundOutcome, Strategy, StrategyState,
    UnsupportedSetting, test_capabilities,
};
pub use hostfiles::{FsHostFiles, HostFiles, MapHostFiles};
pub use service::{EXPLAIN_PATH, SnapshotSource, explain_router, spawn_runner};

/// Upstream's QoS manager interval flags (whole seconds; 0 is refused).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct QosManagerArgs {
    /// Interval of cgroup reconciliation (cgreconcile, blkio, resctrl, sysreconcile).
    #[arg(long = "reconcile-interval-seconds", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub reconcile_interval_seconds: u64,
    /// Interval of BE CPU suppression.
    #[arg(long = "cpu-suppress-interval-seconds", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub cpu_suppress_interval_seconds: u64,
    /// Interval of BE eviction by CPU satisfaction.
    #[arg(long = "cpu-evict-interval-seconds", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub cpu_evict_interval_seconds: u64,
    /// Interval of BE eviction by memory usage.
    #[arg(long = "memory-evict-interval-seconds", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), value_name = "SECONDS")]
    pub memory_evict_interval_seconds: u64,
    /// Minimum time between two memory evictions.
    #[arg(
        long = "memory-evict-cool-time-seconds",
        default_value_t = 4,
        value_name = "SECONDS"
    )]
    pub memory_evict_cool_time_seconds: u64,
    /// Minimum time between two CPU evictions.
    #[arg(
        long = "cpu-evict-cool-time-seconds",
        default_value_t = 20,
        value_name = "SECONDS"
    )]
    pub cpu_evict_cool_time_seconds: u64,
    /// (ours) Eviction features that only report whom they would evict, on
    /// `GET /qos/explain?evictions`: comma-separated upstream feature names
    /// (BEMemoryEvict, MemoryEvict, MemoryAllocatableEvict, BECPUEvict,
    /// CPUEvict, CPUAllocatableEvict). The feature's gate must be on.
    #[arg(long = "evict-dry-run-features", value_delimiter = ',', value_parser = parse_eviction_feature, value_name = "FEATURES")]
    pub evict_dry_run_features: Vec<&'static str>,
    /// (ours) The CPU reaction path that wakes cpusuppress between ticks.
    #[command(flatten)]
    pub reaction: reaction::ReactionArgs,
}

/// Every eviction feature name (upstream's feature gates).
pub const EVICTION_FEATURES: [&str; 6] = [
    memoryevict::FEATURE,
    memoryevict::FEATURE_MEMORY_EVICT,
    memoryevict::FEATURE_ALLOCATABLE,
    cpuevict::FEATURE,
    cpuevict::FEATURE_CPU_EVICT,
    cpuevict::FEATURE_ALLOCATABLE,
];

fn parse_eviction_feature(text: &str) -> Result<&'static str, String> {
    let name = text.trim();
    EVICTION_FEATURES
        .iter()
        .find(|feature| **feature == name)
        .copied()
        .ok_or_else(|| {
            format!(
                "unknown eviction feature {name:?} (expected one of {})",
                EVICTION_FEATURES.join(", ")
            )
        })
}

impl Default for QosManagerArgs {
    fn default() -> Self {
        Self {
            reconcile_interval_seconds: 1,
            cpu_suppress_interval_seconds: 1,
            cpu_evict_interval_seconds: 1,
            memory_evict_interval_seconds: 1,
            memory_evict_cool_time_seconds: 4,
            cpu_evict_cool_time_seconds: 20,
            evict_dry_run_features: Vec::new(),
            reaction: reaction::ReactionArgs::default(),
        }
    }
}

impl QosManagerArgs {
    /// The runner configuration these flags describe; cpuburst follows the
    /// collection interval as upstream's does.
    pub fn config(&self, collect_interval: Duration) -> QosManagerConfig {
        QosManagerConfig {
            reconcile_interval: Duration::from_secs(self.reconcile_interval_seconds),
            cpu_suppress_interval: Duration::from_secs(self.cpu_suppress_interval_seconds),
            cpu_evict_interval: Duration::from_secs(self.cpu_evict_interval_seconds),
            memory_evict_interval: Duration::from_secs(self.memory_evict_interval_seconds),
            memory_evict_cool_time: Duration::from_secs(self.memory_evict_cool_time_seconds),
            cpu_evict_cool_time: Duration::from_secs(self.cpu_evict_cool_time_seconds),
            cpu_burst_interval: collect_interval.max(Duration::from_secs(1)),
            evict_dry_run_features: self.evict_dry_run_features.clone(),
        }
    }
}

/// Upstream feature gates of the QoS strategies in this module, with their
/// upstream defaults (the others' gates live with their strategies).
pub const FEATURE_CPU_BURST: (&str, bool) = ("CPUBurst", true);
pub const FEATURE_BE_CPU_SUPPRESS: (&str, bool) = ("BECPUSuppress", true);
pub const FEATURE_CGROUP_RECONCILE: (&str, bool) = ("CgroupReconcile", false);

fn gate(gates: &BTreeMap<String, bool>, (name, default): (&str, bool)) -> bool {
    gates.get(name).copied().unwrap_or(default)
}

/// The strategies koordlet runs, in upstream's registration order; a
/// strategy whose feature gate is off is left out (or, for the strategies
/// that hold their own gate, reports itself skipped). `gates` is koordlet's
/// parsed `--feature-gates` (upstream defaults: BECPUSuppress, CPUBurst,
/// RdtResctrl on; BECPUEvict, BEMemoryEvict, CgroupReconcile, SystemConfig,
/// BlkIOReconcile off).
pub fn standard_strategies(
    system: &crate::system::SystemArgs,
    gates: &BTreeMap<String, bool>,
) -> Vec<Box<dyn AnyStrategy>> {
    let mut strategies: Vec<Box<dyn AnyStrategy>> = Vec::new();
    if gate(gates, FEATURE_CPU_BURST) {
        strategies.push(Box::new(cpuburst::CpuBurst));
    }
    if gate(gates, FEATURE_BE_CPU_SUPPRESS) {
        strategies.push(Box::new(cpusuppress::CpuSuppress));
    }
    strategies.push(Box::new(
        cpuevict::CpuEvict::new().with_feature_gates(gates),
    ));
    strategies.push(Box::new(
        memoryevict::MemoryEvict::new().with_feature_gates(gates),
    ));
    if gate(gates, FEATURE_CGROUP_RECONCILE) {
        strategies.push(Box::new(cgreconcile::CgroupReconcile));
    }
    strategies.push(Box::new(
        resctrl::ResctrlReconcile::on_host(system.clone()).with_feature_gates(gates),
    ));
    strategies.push(Box::new(
        sysreconcile::SysReconcile::on_host(system.clone()).with_feature_gates(gates),
    ));
    strategies.push(Box::new(
        blkio::BlkioReconcile::on_host(system.clone()).with_feature_gates(gates),
    ));
    strategies
}

/// Registers the strategy metrics and starts the runner thread (and, when
/// cpusuppress runs and the node allows it, the CPU reaction sampler);
/// `managed` is the registry the explain endpoint reads.
#[allow(clippy::too_many_arguments)]
pub fn start(
    source: SnapshotSource,
    strategies: Vec<Box<dyn AnyStrategy>>,
    executor: crate::resourceexecutor::ResourceExecutor,
    evictor: Arc<dyn Evictor>,
    metrics: &koord_common::MetricsRegistry,
    managed: ManagedFiles,
    reaction_args: &reaction::ReactionArgs,
    shutdown: koord_common::Shutdown,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let qos_metrics = QosMetrics::register(metrics, source.states.node_name(), &strategies);
    let names: Vec<&str> = strategies.iter().map(|s| s.name()).collect();
    tracing::info!(strategies = ?names, "QoS manager starts");
    let link = if names.contains(&cpusuppress::NAME) {
        start_reaction(&source, reaction_args, metrics, shutdown.clone())
    } else {
        None
    };
    let runner = QosRunner::new(strategies, executor)
        .with_evictor(evictor)
        .with_metrics(qos_metrics)
        .with_distribution_metrics(distribution::DistributionMetrics::register(
            metrics,
            source.states.node_name(),
        ))
        .with_managed_files(managed);
    service::spawn_runner_with_reaction(runner, source, shutdown, Duration::from_secs(1), link)
}

/// Detects and starts the CPU reaction sampler; `None` (logged) when it is
/// off or cannot run here.
fn start_reaction(
    source: &SnapshotSource,
    args: &reaction::ReactionArgs,
    metrics: &koord_common::MetricsRegistry,
    shutdown: koord_common::Shutdown,
) -> Option<reaction::ReactionLink> {
    let capability = reaction::detect(&source.proc_root, &source.layout, args);
    let capacity = MilliCpu(i64::from(source.capabilities.cpus) * 1000);
    let started = reaction::spawn_sampler(
        &capability,
        args,
        &source.proc_root,
        &source.layout,
        capacity,
        reaction::ReactionMetrics::register(metrics),
        shutdown,
    );
    match started {
        Ok(Some(link)) => {
            tracing::info!(mechanism = %capability.mechanism, "CPU reaction path on: {}", capability.detail);
            Some(link)
        }
        Ok(None) => {
            tracing::info!("CPU reaction path off: {}", capability.detail);
            None
        }
        Err(err) => {
            tracing::warn!("CPU reaction path off: {err}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        qos: QosManagerArgs,
    }

    fn names(gates: &str) -> Vec<&'static str> {
        let gates = crate::runtimehooks::hooks::parse_feature_gates(gates).unwrap();
        standard_strategies(&crate::system::SystemArgs::default(), &gates)
            .iter()
            .map(|s| s.name())
            .collect()
    }

    #[test]
    fn flags_default_to_upstream_and_gates_pick_strategies() {
        let flags = Flags::try_parse_from(["x"]).unwrap();
        assert_eq!(flags.qos, QosManagerArgs::default());
        let config = flags.qos.config(Duration::from_secs(1));
        assert_eq!(config, QosManagerConfig::default());
        let default = names("");
        assert!(default.contains(&"cpusuppress") && default.contains(&"cpuburst"));
        assert!(!default.contains(&"cgreconcile"));
        let switched = names("CgroupReconcile=true, BECPUSuppress=false");
        assert!(switched.contains(&"cgreconcile") && !switched.contains(&"cpusuppress"));
        assert!(Flags::try_parse_from(["x", "--cpu-suppress-interval-seconds=0"]).is_err());
        let dry = Flags::try_parse_from([
            "x",
            "--evict-dry-run-features=MemoryEvict,CPUAllocatableEvict",
        ])
        .unwrap();
        assert_eq!(
            dry.qos
                .config(Duration::from_secs(1))
                .evict_dry_run_features,
            ["MemoryEvict", "CPUAllocatableEvict"]
        );
        let err = Flags::try_parse_from(["x", "--evict-dry-run-features=MemEvict"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("unknown eviction feature"), "{err}");
    }
}
