//! Proxy metrics (prefix `koord_runtime_proxy_`; upstream's proxy has none).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use koord_common::metrics::MetricsRegistry;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

type Labels = Vec<(String, String)>;

#[derive(Clone)]
pub struct ProxyMetrics {
    calls: Family<Labels, Counter>,
    errors: Family<Labels, Counter>,
    hook_calls: Family<Labels, Counter>,
    hook_latency: Family<Labels, Histogram>,
    unknown_forwarded: Family<Labels, Counter>,
    unknown_dropped: Family<Labels, Counter>,
    registration_errors: Family<Labels, Counter>,
    registration_files: Family<Labels, Gauge>,
    /// Methods whose dropped unknown fields were already logged.
    drop_logged: Arc<Mutex<BTreeSet<String>>>,
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
            unknown_forwarded: Family::default(),
            unknown_dropped: Family::default(),
            registration_errors: Family::default(),
            registration_files: Family::default(),
            drop_logged: Arc::default(),
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
            r.register(
                "unknown_fields_forwarded",
                "Request fields unknown to the proxy's CRI API that were passed on after a merge, by method",
                metrics.unknown_forwarded.clone(),
            );
            r.register(
                "unknown_fields_dropped",
                "Request fields unknown to the proxy's CRI API that a merge had to drop, by method",
                metrics.unknown_dropped.clone(),
            );
            r.register(
                "hook_registration_errors",
                "Hook-server registration files or directory listings that could not be loaded, by reason",
                metrics.registration_errors.clone(),
            );
            r.register(
                "hook_registration_files",
                "Hook-server registration files after the last directory scan: registered, or failed (skipped, or kept at their previous registration)",
                metrics.registration_files.clone(),
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

    /// Counts unknown fields passed on and dropped; true the first time
    /// `method` drops any, so the caller logs once per method.
    pub fn unknown_fields(&self, method: &str, forwarded: usize, dropped: usize) -> bool {
        let labels = vec![("method".into(), method.into())];
        if forwarded > 0 {
            self.unknown_forwarded
                .get_or_create(&labels)
                .inc_by(forwarded as u64);
        }
        if dropped == 0 {
            return false;
        }
        self.unknown_dropped
            .get_or_create(&labels)
            .inc_by(dropped as u64);
        match self.drop_logged.lock() {
            Ok(mut logged) => logged.insert(method.to_string()),
            Err(_) => false,
        }
    }

    /// One registration file (or the directory listing) that did not load.
    pub fn registration_error(&self, reason: &str) {
        self.registration_errors
            .get_or_create(&vec![("reason".into(), reason.into())])
            .inc();
    }

    /// The outcome of a directory scan.
    pub fn registrations(&self, registered: usize, failed: usize) {
        for (state, count) in [("registered", registered), ("failed", failed)] {
            self.registration_files
                .get_or_create(&vec![("state".into(), state.into())])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    pub fn registration_error_count(&self, reason: &str) -> u64 {
        self.registration_errors
            .get_or_create(&vec![("reason".into(), reason.into())])
            .get()
    }

    pub fn unknown_fields_forwarded_count(&self, method: &str) -> u64 {
        self.unknown_forwarded
            .get_or_create(&vec![("method".into(), method.into())])
            .get()
    }

    pub fn unknown_fields_dropped_count(&self, method: &str) -> u64 {
        self.unknown_dropped
            .get_or_create(&vec![("method".into(), method.into())])
            .get()
    }
}
