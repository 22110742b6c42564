//! The MigrationController's metrics. Upstream's `descheduler_pods_evicted`
//! keeps its exact name (no component prefix, no `_total`: a gauge that only
//! counts up, as koord-manager exposes upstream's plain counters); the rest
//! are ours, under the `koord_descheduler_` prefix.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use koord_common::metrics::MetricsRegistry;

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// The metrics the controller records.
#[derive(Clone, Default)]
pub struct MigrationMetrics {
    pods_evicted: Family<Labels, Gauge>,
    jobs_finished: Family<Labels, Counter>,
    reconciles: Family<Labels, Counter>,
    arbitrations: Family<Labels, Counter>,
    api_errors: Family<Labels, Counter>,
    jobs: Family<Labels, Gauge>,
}

impl MigrationMetrics {
    /// Creates and registers the metrics.
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = MigrationMetrics::default();
        registry.register_root(|root| {
            root.register(
                "descheduler_pods_evicted",
                "Number of evicted pods, by the result, by the strategy, by the namespace, by the node name. 'error' result means a pod could not be evicted",
                metrics.pods_evicted.clone(),
            );
        });
        registry.register_component(|component| {
            component.register(
                "migration_jobs_finished",
                "PodMigrationJobs this controller ended, by phase and reason",
                metrics.jobs_finished.clone(),
            );
            component.register(
                "migration_reconciles",
                "PodMigrationJob reconcile passes, by outcome (skipped, waiting, acting, finished, error)",
                metrics.reconciles.clone(),
            );
            component.register(
                "migration_arbitrations",
                "Arbitration verdicts on waiting PodMigrationJobs (passed, forbidden, limited)",
                metrics.arbitrations.clone(),
            );
            component.register(
                "migration_api_errors",
                "Failed API calls of the MigrationController, by operation",
                metrics.api_errors.clone(),
            );
            component.register(
                "migration_jobs",
                "PodMigrationJobs in the cache, by phase",
                metrics.jobs.clone(),
            );
        });
        metrics
    }

    pub fn pod_evicted(&self, succeeded: bool, strategy: &str, namespace: &str, node: &str) {
        let result = if succeeded { "success" } else { "error" };
        self.pods_evicted
            .get_or_create(&labels(&[
                ("result", result),
                ("strategy", strategy),
                ("namespace", namespace),
                ("node", node),
            ]))
            .inc();
    }

    pub fn job_finished(&self, phase: &str, reason: &str) {
        self.jobs_finished
            .get_or_create(&labels(&[("phase", phase), ("reason", reason)]))
            .inc();
    }

    pub fn reconciled(&self, outcome: &str) {
        self.reconciles
            .get_or_create(&labels(&[("outcome", outcome)]))
            .inc();
    }

    pub fn arbitrated(&self, verdict: &str) {
        self.arbitrations
            .get_or_create(&labels(&[("verdict", verdict)]))
            .inc();
    }

    pub fn api_error(&self, operation: &str) {
        self.api_errors
            .get_or_create(&labels(&[("operation", operation)]))
            .inc();
    }

    pub fn set_jobs(&self, phase: &str, count: usize) {
        self.jobs
            .get_or_create(&labels(&[("phase", phase)]))
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
}
