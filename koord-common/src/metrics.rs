//! The Prometheus registry served on `/metrics`, plus the process metrics every
//! binary exports (start time and build info).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::sync::RwLockExt;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

/// Content type of the OpenMetrics text format produced by [`MetricsRegistry::encode`].
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A float gauge, as used for timestamps.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Labels of the `<component>_build_info` gauge.
pub type BuildInfoLabels = Vec<(String, String)>;

#[derive(Debug, thiserror::Error)]
#[error("cannot encode metrics: {0}")]
pub struct EncodeError(#[from] std::fmt::Error);

/// A shared registry. `prefix` is the component's metric namespace (e.g.
/// `koordlet`, `koord_manager`), applied by [`MetricsRegistry::register_component`].
#[derive(Clone)]
pub struct MetricsRegistry {
    prefix: String,
    root: Arc<RwLock<Registry>>,
}

impl MetricsRegistry {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            root: Arc::new(RwLock::new(Registry::default())),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Registers into the unprefixed root registry.
    pub fn register_root<R>(&self, register: impl FnOnce(&mut Registry) -> R) -> R {
        let mut root = self.root.write_or_recover();
        register(&mut root)
    }

    /// Registers into a sub-registry carrying the component prefix.
    pub fn register_component<R>(&self, register: impl FnOnce(&mut Registry) -> R) -> R {
        let prefix = self.prefix.clone();
        self.register_root(|root| {
            if prefix.is_empty() {
                register(root)
            } else {
                register(root.sub_registry_with_prefix(prefix))
            }
        })
    }

    /// The OpenMetrics text exposition of everything registered.
    pub fn encode(&self) -> Result<String, EncodeError> {
        let root = self.root.read_or_recover();
        let mut body = String::new();
        encode(&mut body, &root)?;
        Ok(body)
    }
}

/// Seconds since the Unix epoch, as a float; 0 if the clock is before 1970.
pub fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

/// Registers `process_start_time_seconds` (the name Prometheus client
/// libraries use, so dashboards keep working) and `<prefix>_build_info`.
pub fn register_process_metrics(registry: &MetricsRegistry, started_at: SystemTime, version: &str) {
    let start_time = FloatGauge::default();
    start_time.set(unix_seconds(started_at));
    registry.register_root(|root| {
        root.register_with_unit(
            "process_start_time",
            "Start time of the process since the Unix epoch",
            Unit::Seconds,
            start_time,
        );
    });

    let build_info = Family::<BuildInfoLabels, Gauge>::default();
    let mut labels = vec![("version".to_string(), version.to_string())];
    if let Some(commit) = crate::cli::git_commit() {
        labels.push(("git_commit".to_string(), commit.to_string()));
    }
    build_info.get_or_create(&labels).set(1);
    registry.register_component(|component| {
        component.register(
            "build_info",
            "Build information of this binary; always 1",
            build_info,
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use std::time::Duration;

    #[test]
    fn process_metrics_are_encoded_with_component_prefix() {
        let registry = MetricsRegistry::new("koord_manager");
        let started = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        register_process_metrics(&registry, started, "1.2.3");
        let body = registry.encode().unwrap();
        assert!(
            body.contains("# TYPE process_start_time_seconds gauge"),
            "{body}"
        );
        assert!(
            body.contains("process_start_time_seconds 1700000000.0"),
            "{body}"
        );
        assert!(
            body.contains("# TYPE koord_manager_build_info gauge"),
            "{body}"
        );
        assert!(
            body.contains("koord_manager_build_info{version=\"1.2.3\""),
            "{body}"
        );
        assert!(body.trim_end().ends_with("# EOF"), "{body}");
    }

    #[test]
    fn component_metrics_registered_later_are_served() {
        let registry = MetricsRegistry::new("koordlet");
        let counter: Counter = Counter::default();
        registry.register_component(|r| r.register("pod_eviction", "evictions", counter.clone()));
        counter.inc_by(3);
        let body = registry.encode().unwrap();
        assert!(body.contains("koordlet_pod_eviction_total 3"), "{body}");
    }

    #[test]
    fn empty_prefix_registers_at_the_root() {
        let registry = MetricsRegistry::new("");
        let gauge: Gauge = Gauge::default();
        gauge.set(7);
        registry.register_component(|r| r.register("plain", "plain gauge", gauge));
        assert!(registry.encode().unwrap().contains("\nplain 7\n"));
    }

    #[test]
    fn clock_before_epoch_is_zero() {
        assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_secs(5)), 0.0);
        assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_millis(1500)), 1.5);
    }
}
