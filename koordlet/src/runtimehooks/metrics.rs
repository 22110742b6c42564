//! Prometheus metrics of the runtime hooks (names follow upstream where it
//! has them):
//! - `koordlet_runtime_hook_invoked_duration_milliseconds{node,hook,stage,status}`
//!   histogram (upstream's name and buckets; `status` = succeeded|failed);
//! - `koordlet_runtime_hook_calls_total{hook,stage,status}` counter;
//! - `koordlet_runtime_hook_enabled{hook}` / `koordlet_runtime_hook_supported{hook}`
//!   gauges (a hook runs when both are 1);
//! - `koordlet_runtime_hook_implemented{hook}` gauge: 0 for a hook this build
//!   only gates and reports (none today), so its `supported` 0 is not read as
//!   "the kernel lacks it";
//! - `koordlet_runtime_hook_reconciler_invoked_duration_milliseconds{node,level,resource_type,status}`
//!   histogram (upstream's name);
//! - `koordlet_runtime_hook_reconciler_drift_repaired_total{level,resource_type}`
//!   counter: files found different from the decision and rewritten;
//! - `koordlet_runtime_hook_permission_denied_total{resource_type}` counter
//!   of effects the kernel refused with EPERM (lowering `oom_score_adj`);
//! - `koordlet_runtime_hook_server_requests_total{method,code}` counter of
//!   RuntimeHookService calls;
//! - `koordlet_runtime_hook_cgroup_scope_refused_total{reason}` counter of
//!   requests refused because a cgroup they name is not the pod's own (see
//!   `runtimehooks::scope`; not an upstream metric);
//! - `koordlet_runtime_hook_host_applications{state}` gauge: NodeSLO host
//!   applications enforced or refused for their cgroup path (not upstream).

use std::time::Duration;

use koord_common::metrics::MetricsRegistry;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::protocol::HookStage;

type Labels = Vec<(&'static str, String)>;

/// Shared handles; cheap to clone.
#[derive(Clone)]
pub struct HookMetrics {
    node: String,
    invoked_ms: Family<Labels, Histogram>,
    calls: Family<Labels, Counter>,
    enabled: Family<Labels, Gauge>,
    supported: Family<Labels, Gauge>,
    implemented: Family<Labels, Gauge>,
    reconcile_ms: Family<Labels, Histogram>,
    drift_repaired: Family<Labels, Counter>,
    server_requests: Family<Labels, Counter>,
    permission_denied: Family<Labels, Counter>,
    scope_refused: Family<Labels, Counter>,
    host_apps: Family<Labels, Gauge>,
}

fn ms_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 4.0, 8))
}

impl HookMetrics {
    /// Unregistered metrics (tests, benchmarks).
    pub fn new(node: impl Into<String>) -> Self {
        Self {
            node: node.into(),
            invoked_ms: Family::new_with_constructor(ms_histogram),
            calls: Family::default(),
            enabled: Family::default(),
            supported: Family::default(),
            implemented: Family::default(),
            reconcile_ms: Family::new_with_constructor(ms_histogram),
            drift_repaired: Family::default(),
            server_requests: Family::default(),
            permission_denied: Family::default(),
            scope_refused: Family::default(),
            host_apps: Family::default(),
        }
    }

    pub fn register(registry: &MetricsRegistry, node: &str) -> Self {
        let metrics = Self::new(node);
        // Every reason is exported from the start, so `rate()` works.
        for reason in super::scope::RefusalReason::ALL {
            metrics
                .scope_refused
                .get_or_create(&vec![("reason", reason.as_str().to_string())])
                .inc_by(0);
        }
        let m = metrics.clone();
        registry.register_component(move |r| {
            r.register(
                "runtime_hook_invoked_duration_milliseconds",
                "time duration of invocations of runtime hook plugins",
                m.invoked_ms,
            );
            r.register(
                "runtime_hook_calls",
                "runtime hook invocations by hook, stage and status",
                m.calls,
            );
            r.register(
                "runtime_hook_enabled",
                "whether the runtime hook is enabled by its feature gate",
                m.enabled,
            );
            r.register(
                "runtime_hook_supported",
                "whether the runtime hook can run here: implemented by this build and the node has the capabilities it needs",
                m.supported,
            );
            r.register(
                "runtime_hook_implemented",
                "whether this build implements the runtime hook's effect (0: gated and reported only)",
                m.implemented,
            );
            r.register(
                "runtime_hook_reconciler_invoked_duration_milliseconds",
                "time duration of invocations of runtime hook reconciler plugins",
                m.reconcile_ms,
            );
            r.register(
                "runtime_hook_reconciler_drift_repaired",
                "cgroup files found different from the hook decision and rewritten",
                m.drift_repaired,
            );
            r.register(
                "runtime_hook_permission_denied",
                "hook effects the kernel refused with EPERM/EACCES (e.g. lowering oom_score_adj without CAP_SYS_RESOURCE)",
                m.permission_denied,
            );
            r.register(
                "runtime_hook_cgroup_scope_refused",
                "runtime hook requests refused because a cgroup they name is not the pod's own directory below kubepods, by reason",
                m.scope_refused,
            );
            r.register(
                "runtime_hook_host_applications",
                "NodeSLO host applications whose cgroup QoS the runtime hooks enforce (state=enforced) or refuse because of their cgroup path (state=refused)",
                m.host_apps,
            );
            r.register(
                "runtime_hook_server_requests",
                "RuntimeHookService calls by method and gRPC code",
                m.server_requests,
            );
        });
        metrics
    }

    fn status(ok: bool) -> String {
        if ok { "succeeded" } else { "failed" }.to_string()
    }

    pub fn observe_call(&self, hook: &str, stage: HookStage, ok: bool, elapsed: Duration) {
        self.invoked_ms
            .get_or_create(&vec![
                ("node", self.node.clone()),
                ("hook", hook.to_string()),
                ("stage", stage.as_str().to_string()),
                ("status", Self::status(ok)),
            ])
            .observe(elapsed.as_secs_f64() * 1000.0);
        self.calls
            .get_or_create(&vec![
                ("hook", hook.to_string()),
                ("stage", stage.as_str().to_string()),
                ("status", Self::status(ok)),
            ])
            .inc();
    }

    pub fn set_hook_state(&self, hook: &str, enabled: bool, supported: bool, implemented: bool) {
        let labels = vec![("hook", hook.to_string())];
        self.enabled.get_or_create(&labels).set(i64::from(enabled));
        self.supported
            .get_or_create(&labels)
            .set(i64::from(supported));
        self.implemented
            .get_or_create(&labels)
            .set(i64::from(implemented));
    }

    /// The `koordlet_runtime_hook_supported` / `_implemented` values of `hook`.
    pub fn hook_state(&self, hook: &str) -> (i64, i64) {
        let labels = vec![("hook", hook.to_string())];
        (
            self.supported.get_or_create(&labels).get(),
            self.implemented.get_or_create(&labels).get(),
        )
    }

    pub fn observe_reconcile(&self, level: &str, resource: &str, ok: bool, elapsed: Duration) {
        self.reconcile_ms
            .get_or_create(&vec![
                ("node", self.node.clone()),
                ("level", level.to_string()),
                ("resource_type", resource.to_string()),
                ("status", Self::status(ok)),
            ])
            .observe(elapsed.as_secs_f64() * 1000.0);
    }

    pub fn count_drift_repaired(&self, level: &str, resource: &str) {
        self.drift_repaired
            .get_or_create(&vec![
                ("level", level.to_string()),
                ("resource_type", resource.to_string()),
            ])
            .inc();
    }

    pub fn drift_repaired(&self, level: &str, resource: &str) -> u64 {
        self.drift_repaired
            .get_or_create(&vec![
                ("level", level.to_string()),
                ("resource_type", resource.to_string()),
            ])
            .get()
    }

    pub fn calls(&self, hook: &str, stage: HookStage, ok: bool) -> u64 {
        self.calls
            .get_or_create(&vec![
                ("hook", hook.to_string()),
                ("stage", stage.as_str().to_string()),
                ("status", Self::status(ok)),
            ])
            .get()
    }

    pub fn count_permission_denied(&self, resource: &str) {
        self.permission_denied
            .get_or_create(&vec![("resource_type", resource.to_string())])
            .inc();
    }

    /// Counts a request refused by the cgroup scope check.
    pub fn count_scope_refused(&self, reason: &str) {
        self.scope_refused
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }

    /// Refusals counted for `reason`.
    pub fn scope_refused(&self, reason: &str) -> u64 {
        self.scope_refused
            .get_or_create(&vec![("reason", reason.to_string())])
            .get()
    }

    /// Sets the host application gauges.
    pub fn set_host_apps(&self, enforced: usize, refused: usize) {
        for (state, count) in [("enforced", enforced), ("refused", refused)] {
            self.host_apps
                .get_or_create(&vec![("state", state.to_string())])
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
    }

    /// The host application gauge of `state`.
    pub fn host_apps(&self, state: &str) -> i64 {
        self.host_apps
            .get_or_create(&vec![("state", state.to_string())])
            .get()
    }

    pub fn count_server_request(&self, method: &str, code: &str) {
        self.server_requests
            .get_or_create(&vec![
                ("method", method.to_string()),
                ("code", code.to_string()),
            ])
            .inc();
    }
}
