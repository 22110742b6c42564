//! The I/O half of the executor: applies a [`plan`] to the kernel from a
//! blocking thread, skips values it wrote recently, records an audit trail
//! and exports metrics.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use koord_common::MetricsRegistry;
use koord_common::sync::MutexExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::audit::{AuditRecord, AuditResult, AuditRing, rfc3339_utc};
use super::planner::{PlannedWrite, ResourceUpdate, StepKind, plan};
use crate::bounds::{Bounded, BoundedPath};
use crate::system::cgroup::{CgroupLayout, CgroupResource, CgroupValue};

/// Upstream's `-resource-force-update-seconds` default: a cached value is
/// rewritten at least this often, repairing changes made behind our back.
pub const DEFAULT_FORCE_UPDATE_INTERVAL: Duration = Duration::from_secs(60);

/// Audit records kept by default.
pub const DEFAULT_AUDIT_CAPACITY: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// How long a written value is trusted before being written again.
    pub force_update_interval: Duration,
    /// How many recent writes the audit ring keeps.
    pub audit_capacity: usize,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            force_update_interval: DEFAULT_FORCE_UPDATE_INTERVAL,
            audit_capacity: DEFAULT_AUDIT_CAPACITY,
        }
    }
}

/// What happened to one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteStatus {
    Written,
    /// The same value was written less than the force-update interval ago.
    SkippedCached,
    /// The file already held the value; nothing was written.
    SkippedUnchanged,
    /// The write failed; `error` names the path and value, `os_error` is the
    /// errno (EINVAL, EBUSY, ENOENT, ...) when the kernel refused.
    Failed {
        error: String,
        os_error: Option<i32>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReport {
    pub dir: PathBuf,
    pub resource: CgroupResource,
    pub value: CgroupValue,
    pub step: StepKind,
    pub status: WriteStatus,
}

/// The outcome of applying a batch, in execution order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub writes: Vec<WriteReport>,
}

impl ApplyReport {
    pub fn failures(&self) -> impl Iterator<Item = &WriteReport> {
        self.writes
            .iter()
            .filter(|w| matches!(w.status, WriteStatus::Failed { .. }))
    }

    pub fn is_success(&self) -> bool {
        self.failures().next().is_none()
    }

    pub fn count(&self, status: &WriteStatus) -> usize {
        self.writes.iter().filter(|w| &w.status == status).count()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("the blocking write task did not finish: {0}")]
    TaskFailed(String),
}

type Labels = Vec<(&'static str, &'static str)>;

/// The executor's Prometheus metrics (registered by
/// [`ResourceExecutor::register_metrics`]):
/// - `koordlet_resource_update_duration_milliseconds{type="cgroup",status="success|failed"}`
///   (histogram, upstream's name and buckets);
/// - `koordlet_resource_updates_total{type="cgroup",result="written|skipped_cached|skipped_unchanged|failed"}`.
#[derive(Clone)]
struct ExecutorMetrics {
    duration_ms: Family<Labels, Histogram>,
    updates: Family<Labels, Counter>,
}

impl ExecutorMetrics {
    fn new() -> Self {
        Self {
            duration_ms: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 4.0, 8))
            }),
            updates: Family::default(),
        }
    }

    fn count(&self, result: &'static str) {
        self.updates
            .get_or_create(&vec![("type", "cgroup"), ("result", result)])
            .inc();
    }

    fn observe(&self, status: &'static str, elapsed: Duration) {
        self.duration_ms
            .get_or_create(&vec![("type", "cgroup"), ("status", status)])
            .observe(elapsed.as_secs_f64() * 1000.0);
    }
}

/// The `result` label values of `koordlet_resource_updates_total`.
const UPDATE_RESULTS: [&str; 4] = ["written", "skipped_cached", "skipped_unchanged", "failed"];

type CacheKey = (PathBuf, CgroupResource);

struct CacheEntry {
    value: CgroupValue,
    written_at: SystemTime,
}

struct State {
    cache: HashMap<CacheKey, CacheEntry>,
    audit: AuditRing,
    pending: Vec<ResourceUpdate>,
    last_prune: Option<SystemTime>,
}

struct Inner {
    layout: CgroupLayout,
    config: ExecutorConfig,
    /// Cache, audit ring and pending requests; never held across a kernel write.
    state: Mutex<State>,
    /// Serialises batches so two plans never interleave on one hierarchy.
    /// Held across writes, but only writers take it.
    apply_lock: Mutex<()>,
    metrics: ExecutorMetrics,
}

/// Applies cgroup updates. Cheap to clone (shared state).
///
/// Use [`ResourceExecutor::apply`] from async code (it runs the writes on
/// tokio's blocking pool), or [`ResourceExecutor::apply_blocking`] from a
/// thread that may block. Concurrent producers can
/// [`ResourceExecutor::submit`] requests and have them merged and applied
/// together by [`ResourceExecutor::flush`].
#[derive(Clone)]
pub struct ResourceExecutor {
    inner: Arc<Inner>,
}

impl ResourceExecutor {
    pub fn new(layout: CgroupLayout, config: ExecutorConfig) -> Self {
        let audit = AuditRing::new(config.audit_capacity);
        Self {
            inner: Arc::new(Inner {
                layout,
                config,
                state: Mutex::new(State {
                    cache: HashMap::new(),
                    audit,
                    pending: Vec::new(),
                    last_prune: None,
                }),
                apply_lock: Mutex::new(()),
                metrics: ExecutorMetrics::new(),
            }),
        }
    }

    pub fn layout(&self) -> &CgroupLayout {
        &self.inner.layout
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// Adds the executor's metrics to the component registry. Every result
    /// counter starts at 0 so the family is exported (and `rate()` works)
    /// before the first write; the duration histogram appears with the first write.
    pub fn register_metrics(&self, registry: &MetricsRegistry) {
        let metrics = self.inner.metrics.clone();
        for result in UPDATE_RESULTS {
            metrics
                .updates
                .get_or_create(&vec![("type", "cgroup"), ("result", result)])
                .inc_by(0);
        }
        registry.register_component(|registry| {
            registry.register(
                "resource_update_duration_milliseconds",
                "time duration of resource update such as cgroup files",
                metrics.duration_ms,
            );
            registry.register(
                "resource_updates",
                "cgroup updates by result: written, skipped (cached or unchanged), failed",
                metrics.updates,
            );
        });
    }

    /// Up to `limit` recent writes, newest first.
    pub fn recent_writes(&self, limit: usize) -> Vec<AuditRecord> {
        self.state().audit.recent(limit)
    }

    /// Forgets cached values for `dir` and everything below it (e.g. when a
    /// pod is gone), so the next request for that path is written.
    pub fn forget(&self, dir: impl AsRef<Path>) {
        let dir = normalized(dir.as_ref());
        self.state()
            .cache
            .retain(|(path, _), _| !path.starts_with(&dir));
    }

    /// Queues requests; [`ResourceExecutor::flush`] merges and applies them.
    pub fn submit(&self, updates: impl IntoIterator<Item = ResourceUpdate>) {
        self.state().pending.extend(updates);
    }

    /// Applies everything submitted so far, as one batch, at `now`.
    pub fn flush_blocking(&self, now: SystemTime) -> ApplyReport {
        let pending = std::mem::take(&mut self.state().pending);
        self.apply_blocking(pending, now)
    }

    /// [`ResourceExecutor::flush_blocking`] on the blocking pool.
    pub async fn flush(&self) -> Result<ApplyReport, ExecutorError> {
        let executor = self.clone();
        tokio::task::spawn_blocking(move || executor.flush_blocking(SystemTime::now()))
            .await
            .map_err(|error| ExecutorError::TaskFailed(error.to_string()))
    }

    /// [`ResourceExecutor::apply_blocking`] on tokio's blocking pool, at the
    /// current time.
    pub async fn apply(&self, updates: Vec<ResourceUpdate>) -> Result<ApplyReport, ExecutorError> {
        let executor = self.clone();
        tokio::task::spawn_blocking(move || executor.apply_blocking(updates, SystemTime::now()))
            .await
            .map_err(|error| ExecutorError::TaskFailed(error.to_string()))
    }

    /// Merges, orders (see [`super::planner`]) and writes `updates`. A request
    /// whose value equals the one cached for that file is skipped unless the
    /// cache entry is older than the force-update interval at `now`. Blocks;
    /// never call it on the async reactor.
    pub fn apply_blocking(
        &self,
        updates: impl IntoIterator<Item = ResourceUpdate>,
        now: SystemTime,
    ) -> ApplyReport {
        let _serialised = self.inner.apply_lock.lock_or_recover();
        let mut report = ApplyReport::default();

        let mut to_write = Vec::new();
        {
            let mut state = self.state();
            self.prune_expired(&mut state, now);
            for update in super::planner::merge_updates(updates) {
                if self.is_cached(&state, &update, now) {
                    self.inner.metrics.count("skipped_cached");
                    report.writes.push(WriteReport {
                        dir: update.dir,
                        resource: update.resource,
                        value: update.value,
                        step: StepKind::Unchanged,
                        status: WriteStatus::SkippedCached,
                    });
                } else {
                    to_write.push(update);
                }
            }
        }

        let layout = &self.inner.layout;
        let steps = plan(to_write, |dir, resource| {
            layout.read_value(dir, resource).ok()
        });
        for step in steps {
            let status = self.write_step(&step, now);
            report.writes.push(WriteReport {
                dir: step.dir,
                resource: step.resource,
                value: step.value,
                step: step.step,
                status,
            });
        }
        report
    }

    fn write_step(&self, step: &PlannedWrite, now: SystemTime) -> WriteStatus {
        let started = Instant::now();
        let result = self
            .inner
            .layout
            .write_value(&step.dir, step.resource, &step.value);
        let elapsed = started.elapsed();
        let key = (normalized(&step.dir), step.resource);
        let metrics = &self.inner.metrics;
        match result {
            Ok(outcome) => {
                metrics.observe("success", elapsed);
                let status = if outcome.written {
                    metrics.count("written");
                    tracing::info!(
                        path = %BoundedPath(&outcome.path),
                        old = %Bounded(outcome.previous.as_deref().unwrap_or("?")),
                        new = %Bounded(&outcome.content),
                        step = ?step.step,
                        reason = %Bounded(&step.reason),
                        "cgroup file written"
                    );
                    WriteStatus::Written
                } else {
                    metrics.count("skipped_unchanged");
                    WriteStatus::SkippedUnchanged
                };
                let mut state = self.state();
                if outcome.written {
                    state.audit.push(AuditRecord {
                        time: rfc3339_utc(now),
                        path: outcome.path.display().to_string(),
                        resource: step.resource,
                        old_value: outcome.previous,
                        new_value: outcome.content,
                        reason: step.reason.clone(),
                        result: AuditResult::Written,
                        error: None,
                    });
                }
                if step.is_final() && step.resource.is_cacheable() {
                    state.cache.insert(
                        key,
                        CacheEntry {
                            value: step.value.clone(),
                            written_at: now,
                        },
                    );
                } else {
                    state.cache.remove(&key);
                }
                status
            }
            Err(error) => {
                metrics.observe("failed", elapsed);
                metrics.count("failed");
                // Errors name the path, which may come from a request: cut.
                let message = crate::bounds::cut(error.to_string());
                tracing::warn!(
                    error = %message,
                    step = ?step.step,
                    reason = %Bounded(&step.reason),
                    "cgroup write failed"
                );
                let path = self
                    .inner
                    .layout
                    .file_path(&step.dir, step.resource)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| step.dir.display().to_string());
                let mut state = self.state();
                state.cache.remove(&key);
                state.audit.push(AuditRecord {
                    time: rfc3339_utc(now),
                    path,
                    resource: step.resource,
                    old_value: None,
                    new_value: step.value.to_string(),
                    reason: step.reason.clone(),
                    result: AuditResult::Failed,
                    error: Some(message.clone()),
                });
                WriteStatus::Failed {
                    error: message,
                    os_error: error.raw_os_error(),
                }
            }
        }
    }

    fn is_cached(&self, state: &State, update: &ResourceUpdate, now: SystemTime) -> bool {
        if !update.resource.is_cacheable() {
            return false;
        }
        let key = (normalized(&update.dir), update.resource);
        state.cache.get(&key).is_some_and(|entry| {
            entry.value == update.value && self.is_fresh(entry.written_at, now)
        })
    }

    /// A clock that went backwards counts as expired, so we write rather than trust.
    fn is_fresh(&self, written_at: SystemTime, now: SystemTime) -> bool {
        now.duration_since(written_at)
            .is_ok_and(|age| age < self.inner.config.force_update_interval)
    }

    /// Drops entries that can no longer cause a skip, once per interval, so
    /// the cache does not grow with pod churn.
    fn prune_expired(&self, state: &mut State, now: SystemTime) {
        let due = state
            .last_prune
            .is_none_or(|last| !self.is_fresh(last, now));
        if due {
            state
                .cache
                .retain(|_, entry| self.is_fresh(entry.written_at, now));
            state.last_prune = Some(now);
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock_or_recover()
    }

    #[cfg(test)]
    fn cache_len(&self) -> usize {
        self.state().cache.len()
    }
}

fn normalized(dir: &Path) -> PathBuf {
    dir.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::cgroup::{CgroupDriver, CgroupVersion};
    use koord_common::testing::TempDir;

    const DIR: &str = "kubepods/besteffort";

    /// A v1 tree with the cpu controller files the tests touch.
    fn tree() -> (TempDir, CgroupLayout) {
        let temp = TempDir::new("executor").unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, temp.path());
        let cpu = temp.path().join("cpu").join(DIR);
        std::fs::create_dir_all(&cpu).unwrap();
        std::fs::write(cpu.join("cpu.shares"), "1024\n").unwrap();
        std::fs::write(cpu.join("cpu.cfs_quota_us"), "-1\n").unwrap();
        (temp, layout)
    }

    fn shares(value: i64, reason: &str) -> ResourceUpdate {
        ResourceUpdate::new(
            DIR,
            CgroupResource::CpuShares,
            CgroupValue::Int(value),
            reason,
        )
        .unwrap()
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + seconds)
    }

    fn statuses(report: &ApplyReport) -> Vec<WriteStatus> {
        report.writes.iter().map(|w| w.status.clone()).collect()
    }

    #[test]
    fn cached_value_is_skipped_until_the_force_interval() {
        let (temp, layout) = tree();
        let file = temp.path().join("cpu").join(DIR).join("cpu.shares");
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());

        let report = executor.apply_blocking([shares(2, "first")], at(0));
        assert_eq!(statuses(&report), [WriteStatus::Written]);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "2");

        // Someone else changes the file; within the interval we trust our cache.
        std::fs::write(&file, "512").unwrap();
        let report = executor.apply_blocking([shares(2, "again")], at(30));
        assert_eq!(statuses(&report), [WriteStatus::SkippedCached]);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "512");

        // After the interval the value is rewritten, repairing the drift.
        let report = executor.apply_blocking([shares(2, "refresh")], at(61));
        assert_eq!(statuses(&report), [WriteStatus::Written]);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "2");

        // A forced refresh of a file that already holds the value writes nothing.
        let report = executor.apply_blocking([shares(2, "refresh")], at(200));
        assert_eq!(statuses(&report), [WriteStatus::SkippedUnchanged]);

        // A different value is always written.
        let report = executor.apply_blocking([shares(4, "change")], at(201));
        assert_eq!(statuses(&report), [WriteStatus::Written]);

        // A clock that jumps backwards does not keep a stale entry alive.
        std::fs::write(&file, "512").unwrap();
        let report = executor.apply_blocking([shares(4, "clock")], at(100));
        assert_eq!(statuses(&report), [WriteStatus::Written]);
    }

    #[test]
    fn audit_records_old_and_new_values_with_reason() {
        let (_temp, layout) = tree();
        let executor = ResourceExecutor::new(
            layout,
            ExecutorConfig {
                audit_capacity: 2,
                ..ExecutorConfig::default()
            },
        );
        executor.apply_blocking([shares(100, "r1")], at(0));
        executor.apply_blocking([shares(200, "r2")], at(1));
        executor.apply_blocking([shares(300, "r3")], at(2));
        let recent = executor.recent_writes(10);
        assert_eq!(recent.len(), 2, "bounded by capacity");
        assert_eq!(recent[0].new_value, "300");
        assert_eq!(recent[0].old_value.as_deref(), Some("200"));
        assert_eq!(recent[0].reason, "r3");
        assert_eq!(recent[0].result, AuditResult::Written);
        assert_eq!(recent[0].time, "2023-11-14T22:13:22.000Z");
        assert!(
            recent[0]
                .path
                .ends_with("cpu/kubepods/besteffort/cpu.shares")
        );
        assert_eq!(recent[1].new_value, "200");
        assert_eq!(executor.recent_writes(1).len(), 1);
    }

    #[test]
    fn errors_name_path_and_value_and_are_audited() {
        let (temp, layout) = tree();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        let missing = ResourceUpdate::new(
            "kubepods/gone",
            CgroupResource::CpuCfsQuota,
            CgroupValue::Int(20_000),
            "pod quota",
        )
        .unwrap();
        let report = executor.apply_blocking([missing.clone()], at(0));
        let [failure] = report.writes.as_slice() else {
            panic!("one write expected: {report:?}")
        };
        let WriteStatus::Failed { error, os_error } = &failure.status else {
            panic!("failure expected: {failure:?}")
        };
        let expected_path = temp
            .path()
            .join("cpu/kubepods/gone/cpu.cfs_quota_us")
            .display()
            .to_string();
        assert!(error.contains(&expected_path), "{error}");
        assert!(error.contains("\"20000\""), "{error}");
        let kind = os_error.map(|code| std::io::Error::from_raw_os_error(code).kind());
        assert_eq!(kind, Some(std::io::ErrorKind::NotFound));
        let audit = executor.recent_writes(1);
        assert_eq!(audit[0].result, AuditResult::Failed);
        assert_eq!(audit[0].path, expected_path);
        // A failed write is not cached: the retry writes again.
        let report = executor.apply_blocking([missing], at(1));
        assert!(!report.is_success());
    }

    #[test]
    fn escaping_directories_fail_without_touching_files() {
        let (_temp, layout) = tree();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        let escape = ResourceUpdate::new(
            "kubepods/../../etc",
            CgroupResource::CpuShares,
            CgroupValue::Int(2),
            "x",
        )
        .unwrap();
        let report = executor.apply_blocking([escape], at(0));
        let WriteStatus::Failed { error, os_error } = &report.writes[0].status else {
            panic!("failure expected: {report:?}")
        };
        assert!(error.contains("kubepods/../../etc"), "{error}");
        assert_eq!(*os_error, None);
    }

    /// Issue 16: a write to a 10 MB directory fails without keeping or
    /// logging the path whole.
    #[test]
    fn a_huge_directory_is_audited_cut() {
        let (_temp, layout) = tree();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        let huge = format!("kubepods/besteffort/{}", "b".repeat(10 << 20));
        let update = ResourceUpdate::new(
            huge.as_str(),
            CgroupResource::CpuShares,
            CgroupValue::Int(2),
            "x",
        )
        .unwrap();
        let report = executor.apply_blocking([update], at(0));
        let WriteStatus::Failed { error, .. } = &report.writes[0].status else {
            panic!("failure expected")
        };
        assert!(error.len() < 1024, "error of {} bytes", error.len());
        let audit = executor.recent_writes(1);
        assert!(audit[0].path.len() < 1024, "{} bytes", audit[0].path.len());
        let error = audit[0].error.as_deref().unwrap_or_default();
        assert!(error.len() < 1024, "{} bytes", error.len());
    }

    #[test]
    fn malformed_present_value_is_reported_not_panicked() {
        let (temp, layout) = tree();
        let quota = temp.path().join("cpu").join(DIR).join("cpu.cfs_quota_us");
        std::fs::write(&quota, "garbage\n").unwrap();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        // The planner cannot classify the present value and treats it as unknown; the
        // write itself still goes through on v1 (the new value does not depend on it).
        let update = ResourceUpdate::new(
            DIR,
            CgroupResource::CpuCfsQuota,
            CgroupValue::Int(50_000),
            "x",
        )
        .unwrap();
        let report = executor.apply_blocking([update], at(0));
        assert_eq!(statuses(&report), [WriteStatus::Written]);
        assert_eq!(report.writes[0].step, StepKind::Widen);
        assert_eq!(std::fs::read_to_string(&quota).unwrap(), "50000");
    }

    #[test]
    fn submitted_requests_are_merged_on_flush() {
        let (temp, layout) = tree();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        executor.submit([shares(100, "strategy a")]);
        executor.submit([shares(300, "strategy b")]);
        let report = executor.flush_blocking(at(0));
        assert_eq!(report.writes.len(), 1);
        assert_eq!(report.writes[0].value, CgroupValue::Int(300));
        let file = temp.path().join("cpu").join(DIR).join("cpu.shares");
        assert_eq!(std::fs::read_to_string(file).unwrap(), "300");
        assert_eq!(executor.recent_writes(5)[0].reason, "strategy b");
        assert!(executor.flush_blocking(at(1)).writes.is_empty());
    }

    #[test]
    fn forget_and_prune_bound_the_cache() {
        let (_temp, layout) = tree();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        executor.apply_blocking([shares(100, "x")], at(0));
        assert_eq!(executor.cache_len(), 1);
        executor.forget("/kubepods");
        assert_eq!(executor.cache_len(), 0);
        executor.apply_blocking([shares(200, "x")], at(1));
        assert_eq!(executor.cache_len(), 1);
        // An empty batch far in the future prunes the expired entry.
        executor.apply_blocking(Vec::new(), at(1_000));
        assert_eq!(executor.cache_len(), 0);
    }

    #[test]
    fn metrics_count_results_with_upstream_names() {
        let (_temp, layout) = tree();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        let registry = MetricsRegistry::new("koordlet");
        executor.register_metrics(&registry);
        let before_any_write = registry.encode().unwrap();
        for result in ["written", "skipped_cached", "skipped_unchanged", "failed"] {
            let zero =
                format!("koordlet_resource_updates_total{{type=\"cgroup\",result=\"{result}\"}} 0");
            assert!(before_any_write.contains(&zero), "{before_any_write}");
        }
        executor.apply_blocking([shares(100, "x")], at(0));
        executor.apply_blocking([shares(100, "x")], at(1));
        let body = registry.encode().unwrap();
        assert!(
            body.contains("koordlet_resource_updates_total{type=\"cgroup\",result=\"written\"} 1"),
            "{body}"
        );
        assert!(
            body.contains(
                "koordlet_resource_updates_total{type=\"cgroup\",result=\"skipped_cached\"} 1"
            ),
            "{body}"
        );
        assert!(
            body.contains(
                "koordlet_resource_update_duration_milliseconds_count{type=\"cgroup\",status=\"success\"} 1"
            ),
            "{body}"
        );
    }

    #[tokio::test]
    async fn async_apply_runs_off_the_reactor() {
        let (temp, layout) = tree();
        let executor = ResourceExecutor::new(layout, ExecutorConfig::default());
        let report = executor.apply(vec![shares(50, "async")]).await.unwrap();
        assert!(report.is_success());
        let file = temp.path().join("cpu").join(DIR).join("cpu.shares");
        assert_eq!(std::fs::read_to_string(file).unwrap(), "50");
        executor.submit([shares(60, "queued")]);
        assert_eq!(
            executor.flush().await.unwrap().count(&WriteStatus::Written),
            1
        );
    }
}
