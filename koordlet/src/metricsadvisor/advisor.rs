//! The collection loop and its flags.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use koord_common::Shutdown;
use koord_common::cluster::parse_duration;
use tokio::sync::watch;

use super::{
    AdvisorMetrics, Collector, CpuTopologyCollector, HostAppCollector, NodeResourceCollector,
    NumaResourceCollector, PodResourceCollector, PodsSnapshot, PsiCollector,
    derive_node_aggregates,
};
use crate::metriccache::{ConfigError, MetricCache, MetricCacheConfig, Sample};
use crate::system::SystemArgs;
use crate::system::cgroup::CgroupLayout;

/// Collector and metric cache flags; names and defaults follow upstream
/// where it has the flag.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct CollectorArgs {
    /// Interval of node, pod and container usage collection.
    #[arg(long = "collect-res-used-interval", default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub collect_res_used_interval: Duration,
    /// Series that received no sample for this many seconds are dropped.
    #[arg(
        long = "metric-expire-seconds",
        default_value_t = 1800,
        value_name = "SECONDS"
    )]
    pub metric_expire_seconds: u64,
    /// How often expired series and samples are garbage-collected.
    #[arg(
        long = "metric-gc-interval-seconds",
        default_value_t = 300,
        value_name = "SECONDS"
    )]
    pub metric_gc_interval_seconds: u64,
    /// How long samples stay in the in-memory metric cache (sizes its ring
    /// buffers; replaces upstream's on-disk `-tsdb-retention-duration`).
    #[arg(long = "metric-cache-retention", default_value = "30m", value_parser = parse_duration, value_name = "DURATION")]
    pub metric_cache_retention: Duration,
    /// Interval of PSI collection.
    #[arg(long = "psi-collector-interval", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub psi_collector_interval: Duration,
    /// Interval of the CPU topology refresh.
    #[arg(long = "collect-node-cpu-info-interval", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub collect_node_cpu_info_interval: Duration,
}

impl Default for CollectorArgs {
    fn default() -> Self {
        Self {
            collect_res_used_interval: Duration::from_secs(1),
            metric_expire_seconds: 1800,
            metric_gc_interval_seconds: 300,
            metric_cache_retention: Duration::from_secs(30 * 60),
            psi_collector_interval: Duration::from_secs(10),
            collect_node_cpu_info_interval: Duration::from_secs(60),
        }
    }
}

impl CollectorArgs {
    pub fn cache_config(&self) -> MetricCacheConfig {
        MetricCacheConfig {
            retention: self.metric_cache_retention,
            sample_interval: self.collect_res_used_interval,
            expire: Duration::from_secs(self.metric_expire_seconds),
        }
    }

    /// A metric cache sized by these flags.
    pub fn build_cache(&self) -> Result<MetricCache, ConfigError> {
        MetricCache::new(self.cache_config())
    }
}

/// Runs the collectors every interval and stores their samples.
pub struct MetricsAdvisor {
    cache: Arc<MetricCache>,
    pods: watch::Receiver<Arc<PodsSnapshot>>,
    collectors: Vec<Box<dyn Collector>>,
    metrics: Option<AdvisorMetrics>,
    gc_interval: Duration,
    last_gc: Option<SystemTime>,
}

impl MetricsAdvisor {
    /// An advisor without collectors; add them with [`MetricsAdvisor::with_collector`].
    pub fn new(cache: Arc<MetricCache>, pods: watch::Receiver<Arc<PodsSnapshot>>) -> Self {
        Self {
            cache,
            pods,
            collectors: Vec::new(),
            metrics: None,
            gc_interval: Duration::from_secs(300),
            last_gc: None,
        }
    }

    /// The node, pod, host application, PSI, topology and NUMA collectors
    /// wired from the flags.
    pub fn standard(
        args: &CollectorArgs,
        system: &SystemArgs,
        layout: CgroupLayout,
        cache: Arc<MetricCache>,
        pods: watch::Receiver<Arc<PodsSnapshot>>,
        metrics: Option<AdvisorMetrics>,
    ) -> Self {
        let mut psi = PsiCollector::new(
            &system.proc_root_dir,
            layout.clone(),
            args.psi_collector_interval,
        );
        if let Some(metrics) = &metrics {
            psi = psi.with_recorder(metrics.psi_recorder());
        }
        let mut advisor = Self::new(cache.clone(), pods)
            .with_gc_interval(Duration::from_secs(args.metric_gc_interval_seconds))
            .with_collector(Box::new(NodeResourceCollector::new(&system.proc_root_dir)))
            .with_collector(Box::new(PodResourceCollector::new(layout.clone())))
            .with_collector(Box::new(HostAppCollector::new(layout)))
            .with_collector(Box::new(psi))
            .with_collector(Box::new(CpuTopologyCollector::new(
                &system.sys_root_dir,
                cache.clone(),
                args.collect_node_cpu_info_interval,
            )))
            // After the topology collector, so the first round has the CPU-to-node map.
            .with_collector(Box::new(NumaResourceCollector::new(
                &system.proc_root_dir,
                &system.sys_root_dir,
                cache,
            )));
        advisor.metrics = metrics;
        advisor
    }

    pub fn with_collector(mut self, collector: Box<dyn Collector>) -> Self {
        self.collectors.push(collector);
        self
    }

    pub fn with_metrics(mut self, metrics: AdvisorMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    pub fn with_gc_interval(mut self, interval: Duration) -> Self {
        self.gc_interval = interval;
        self
    }

    pub fn cache(&self) -> &Arc<MetricCache> {
        &self.cache
    }

    /// One round, on the calling thread (it blocks on file reads): collect,
    /// derive the node aggregates, store, export, and GC when due. Returns
    /// the round's samples.
    pub fn collect_round(&mut self, now: SystemTime) -> Vec<Sample> {
        let pods = self.pods.borrow().clone();
        let samples = run_round(&mut self.collectors, &self.cache, now, &pods);
        if let Some(metrics) = &self.metrics {
            metrics.record_round(&samples);
        }
        let gc_due = self.last_gc.is_none_or(|last| {
            now.duration_since(last)
                .is_ok_and(|age| age >= self.gc_interval)
        });
        if gc_due {
            self.last_gc = Some(now);
            let summary = self.cache.gc(now);
            tracing::debug!(
                removed_series = summary.removed_series,
                dropped_samples = summary.dropped_samples,
                "metric cache GC"
            );
        }
        samples
    }

    /// Collects every `interval` until `shutdown`. Rounds run on one
    /// dedicated thread (file reads never block the async reactor, and the
    /// cache's buffers are always grown by the same thread, which keeps the
    /// allocator from spreading them over several per-thread arenas). A
    /// round that overruns the interval delays the next one instead of
    /// queueing rounds.
    pub async fn run(self, interval: Duration, shutdown: Shutdown) {
        let (rounds, mut round_requests) =
            tokio::sync::mpsc::channel::<(SystemTime, tokio::sync::oneshot::Sender<()>)>(1);
        let mut advisor = self;
        let spawned = std::thread::Builder::new()
            .name("koordlet-advisor".to_string())
            .spawn(move || {
                while let Some((now, done)) = round_requests.blocking_recv() {
                    advisor.collect_round(now);
                    let _ = done.send(());
                }
            });
        if let Err(err) = spawned {
            tracing::error!(error = %err, "cannot start the metrics advisor thread; collection stops");
            return;
        }
        let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = ticker.tick() => {}
            }
            let (done, finished) = tokio::sync::oneshot::channel();
            let finished = if rounds.send((SystemTime::now(), done)).await.is_ok() {
                finished.await.is_ok()
            } else {
                false
            };
            if !finished {
                // Collector panics are caught per collector; reaching this is a bug in the loop itself.
                tracing::error!("metrics advisor thread ended; collection stops");
                return;
            }
        }
        // Dropping the sender ends the thread after its current round.
        drop(rounds);
        tracing::info!("metrics advisor stopped");
    }
}

/// Runs every collector once, derives node aggregates and stores the result.
/// A collector that panics is logged and removed so it cannot fail every round.
fn run_round(
    collectors: &mut Vec<Box<dyn Collector>>,
    cache: &MetricCache,
    now: SystemTime,
    pods: &PodsSnapshot,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    collectors.retain_mut(|collector| {
        match catch_unwind(AssertUnwindSafe(|| collector.collect(now, pods))) {
            Ok(collected) => {
                samples.extend(collected);
                true
            }
            Err(_) => {
                tracing::error!(
                    collector = collector.name(),
                    "collector {} panicked; it is disabled",
                    collector.name()
                );
                false
            }
        }
    });
    let derived = derive_node_aggregates(now, pods, &samples);
    samples.extend(derived);
    let summary = cache.append(&samples);
    if let Some(first) = summary.rejected.first() {
        tracing::debug!(
            rejected = summary.rejected.len(),
            series = %first.key,
            error = %first.error,
            "metric cache rejected samples"
        );
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metriccache::{MetricKind, SeriesKey};
    use clap::Parser;
    use std::time::UNIX_EPOCH;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        collector: CollectorArgs,
    }

    #[test]
    fn flags_default_to_upstream_values() {
        let flags = Flags::try_parse_from(["koordlet"]).unwrap();
        assert_eq!(flags.collector, CollectorArgs::default());
        let config = flags.collector.cache_config();
        assert_eq!(config.sample_interval, Duration::from_secs(1));
        assert_eq!(config.expire, Duration::from_secs(1800));
        assert_eq!(config.max_samples_per_series(), 1801);

        let flags = Flags::try_parse_from([
            "koordlet",
            "--collect-res-used-interval=500ms",
            "--metric-expire-seconds=60",
            "--metric-cache-retention=5m",
            "--psi-collector-interval=30s",
        ])
        .unwrap();
        assert_eq!(
            flags.collector.collect_res_used_interval,
            Duration::from_millis(500)
        );
        assert_eq!(flags.collector.cache_config().max_samples_per_series(), 601);
        assert!(Flags::try_parse_from(["koordlet", "--collect-res-used-interval=1"]).is_err());
    }

    struct Fixed(f64);

    impl Collector for Fixed {
        fn name(&self) -> &'static str {
            "fixed"
        }
        fn collect(&mut self, now: SystemTime, _pods: &PodsSnapshot) -> Vec<Sample> {
            vec![
                Sample::new(SeriesKey::node(MetricKind::NodeCpuUsage), now, self.0),
                Sample::new(SeriesKey::node(MetricKind::NodeMemoryUsage), now, 100.0),
            ]
        }
    }

    struct Panics;

    impl Collector for Panics {
        fn name(&self) -> &'static str {
            "panics"
        }
        fn collect(&mut self, _now: SystemTime, _pods: &PodsSnapshot) -> Vec<Sample> {
            panic!("collector bug")
        }
    }

    fn advisor() -> (MetricsAdvisor, watch::Sender<Arc<PodsSnapshot>>) {
        let cache = Arc::new(MetricCache::new(MetricCacheConfig::default()).unwrap());
        let (sender, receiver) = watch::channel(Arc::new(PodsSnapshot::default()));
        (MetricsAdvisor::new(cache, receiver), sender)
    }

    #[test]
    fn a_round_stores_collected_and_derived_samples_and_survives_a_panicking_collector() {
        let (advisor, _sender) = advisor();
        let mut advisor = advisor
            .with_collector(Box::new(Panics))
            .with_collector(Box::new(Fixed(2.5)));
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000);
        let samples = advisor.collect_round(t0);
        assert_eq!(advisor.collectors.len(), 1);
        assert!(
            samples
                .iter()
                .any(|s| s.key.kind == MetricKind::SysCpuUsage)
        );
        let cache = advisor.cache().clone();
        assert_eq!(
            cache.latest(&SeriesKey::node(MetricKind::NodeCpuUsage)),
            Some((t0, 2.5))
        );
        // No pods: all node usage is system usage.
        assert_eq!(
            cache.latest(&SeriesKey::node(MetricKind::SysCpuUsage)),
            Some((t0, 2.5))
        );
        advisor.collect_round(t0 + Duration::from_secs(1));
        assert_eq!(
            cache
                .query(
                    &SeriesKey::node(MetricKind::NodeCpuUsage),
                    t0,
                    t0 + Duration::from_secs(1)
                )
                .count(),
            2
        );
    }

    #[test]
    fn gc_runs_at_its_interval() {
        let (advisor, _sender) = advisor();
        let mut advisor = advisor
            .with_gc_interval(Duration::from_secs(300))
            .with_collector(Box::new(Fixed(1.0)));
        let t0 = UNIX_EPOCH + Duration::from_secs(10_000);
        advisor.collect_round(t0);
        assert_eq!(advisor.last_gc, Some(t0));
        advisor.collect_round(t0 + Duration::from_secs(299));
        assert_eq!(advisor.last_gc, Some(t0));
        advisor.collect_round(t0 + Duration::from_secs(300));
        assert_eq!(advisor.last_gc, Some(t0 + Duration::from_secs(300)));
    }

    /// Records the name of the thread each round runs on.
    struct ThreadNames(Arc<std::sync::Mutex<Vec<Option<String>>>>);

    impl Collector for ThreadNames {
        fn name(&self) -> &'static str {
            "thread-names"
        }
        fn collect(&mut self, _now: SystemTime, _pods: &PodsSnapshot) -> Vec<Sample> {
            let name = std::thread::current().name().map(str::to_string);
            self.0.lock().unwrap().push(name);
            Vec::new()
        }
    }

    #[tokio::test]
    async fn every_round_runs_on_the_one_advisor_thread() {
        let (advisor, _sender) = advisor();
        let names = Arc::new(std::sync::Mutex::new(Vec::new()));
        let advisor = advisor.with_collector(Box::new(ThreadNames(Arc::clone(&names))));
        let shutdown = Shutdown::new();
        let task = tokio::spawn(advisor.run(Duration::from_millis(10), shutdown.clone()));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while names.lock().unwrap().len() < 3 {
            assert!(tokio::time::Instant::now() < deadline, "no rounds ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.trigger(koord_common::ShutdownReason::Requested("test".into()));
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
        let names = names.lock().unwrap();
        assert!(
            names
                .iter()
                .all(|name| name.as_deref() == Some("koordlet-advisor")),
            "{names:?}"
        );
    }

    #[tokio::test]
    async fn run_collects_until_shutdown() {
        let (advisor, _sender) = advisor();
        let advisor = advisor.with_collector(Box::new(Fixed(1.0)));
        let cache = advisor.cache().clone();
        let shutdown = Shutdown::new();
        let task = tokio::spawn(advisor.run(Duration::from_millis(20), shutdown.clone()));
        let key = SeriesKey::node(MetricKind::NodeCpuUsage);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while cache
            .query(
                &key,
                UNIX_EPOCH,
                SystemTime::now() + Duration::from_secs(60),
            )
            .count()
            < 3
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no samples collected"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        shutdown.trigger(koord_common::ShutdownReason::Requested("test".into()));
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .unwrap()
            .unwrap();
    }
}
