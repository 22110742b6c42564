//! Proxy metrics (prefix `koord_runtime_proxy_`; upstream's proxy has none).

use std::time::Duration;

use koord_common::metrics::MetricsRegistry;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

type Labels = Vec<(String, String)>;

#[derive(Clone)]
pub struct ProxyMetrics {
    calls: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    hook_calls: Family<Labels, Counter>,
    hook_latency: Family<Labels, Histogram>,
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~3.3 s
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.00005, 2.0, 17,
    ))
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        Self {
            calls: Family::default(),
            errors: Family::default(),
            hook_calls: Family::default(),
            hook_latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl ProxyMetrics {
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self::default();
        registry.register_component(|r| {
            r.register(
                "cri_calls",
                "CRI calls served, by method",
                metrics.calls.clone(),
            );
            r.register(
                "cri_errors",
                "CRI calls answered with an error, by method and gRPC code",
                metrics.errors.clone(),
            );
            r.register(
                "hook_calls",
                "Hook-server calls, by stage and result",
                metrics.hook_calls.clone(),
            );
            r.register(
                "hook_duration_seconds",
                "Hook-server call latency, by stage",
                metrics.hook_latency.clone(),
            );
        });
        metrics
    }

    pub fn call(&self, method: &str) {
        self.calls
            .get_or_create(&vec![("method".into(), method.into())])
            .inc();
    }

    pub fn error(&self, method: &str, code: tonic::Code) {
        self.errors
            .get_or_create(&vec![
                ("method".into(), method.into()),
                ("code".into(), format!("{code:?}")),
            ])
            .inc();
    }

    pub fn hook_call(&self, stage: &str, result: &str, elapsed: Duration) {
        self.hook_calls
            .get_or_create(&vec![
                ("stage".into(), stage.into()),
                ("result".into(), result.into()),
            ])
            .inc();
        self.hook_latency
            .get_or_create(&vec![("stage".into(), stage.into())])
            .observe(elapsed.as_secs_f64());
    }
}
