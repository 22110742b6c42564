//! Named health checks behind `/healthz` (liveness) and `/readyz` (readiness).
//!
//! Readiness includes every liveness check: a process that is not alive is not
//! ready either. The rendered report follows the Kubernetes `[+]name ok` /
//! `[-]name failed: reason` layout so operators read it the familiar way.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::sync::RwLockExt;

/// `Ok(())` when the check passes, otherwise the reason it fails.
pub type CheckOutcome = Result<(), String>;

/// Future returned by [`HealthCheck::check`].
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = CheckOutcome> + Send + 'a>>;

/// A probe a component registers under a name.
pub trait HealthCheck: Send + Sync + 'static {
    fn check(&self) -> CheckFuture<'_>;
}

/// Adapts a synchronous closure into a check.
pub struct FnCheck<F>(pub F);

impl<F> HealthCheck for FnCheck<F>
where
    F: Fn() -> CheckOutcome + Send + Sync + 'static,
{
    fn check(&self) -> CheckFuture<'_> {
        let outcome = (self.0)();
        Box::pin(std::future::ready(outcome))
    }
}

/// A check whose state the owning component sets as it makes progress.
#[derive(Clone)]
pub struct StatusCheck {
    state: Arc<RwLock<CheckOutcome>>,
}

impl StatusCheck {
    pub fn passing() -> Self {
        Self {
            state: Arc::new(RwLock::new(Ok(()))),
        }
    }

    pub fn failing(reason: impl Into<String>) -> Self {
        Self {
            state: Arc::new(RwLock::new(Err(reason.into()))),
        }
    }

    pub fn set_passing(&self) {
        self.set(Ok(()));
    }

    pub fn set_failing(&self, reason: impl Into<String>) {
        self.set(Err(reason.into()));
    }

    pub fn set(&self, outcome: CheckOutcome) {
        // A poisoned lock only means a writer panicked mid-assignment; the value is still usable.
        let mut guard = self.state.write_or_recover();
        *guard = outcome;
    }

    pub fn current(&self) -> CheckOutcome {
        self.state.read_or_recover().clone()
    }
}

impl HealthCheck for StatusCheck {
    fn check(&self) -> CheckFuture<'_> {
        Box::pin(std::future::ready(self.current()))
    }
}

/// Which endpoint is being evaluated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `/healthz`: liveness checks only.
    Liveness,
    /// `/readyz`: liveness and readiness checks.
    Readiness,
}

impl Probe {
    pub fn endpoint(self) -> &'static str {
        match self {
            Probe::Liveness => "healthz",
            Probe::Readiness => "readyz",
        }
    }
}

/// The result of one named check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub name: String,
    pub outcome: CheckOutcome,
}

/// Results of every check relevant to one probe, in registration order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthReport {
    pub probe: Probe,
    pub results: Vec<CheckResult>,
}

impl HealthReport {
    pub fn is_healthy(&self) -> bool {
        self.results.iter().all(|result| result.outcome.is_ok())
    }

    pub fn failing(&self) -> impl Iterator<Item = &CheckResult> {
        self.results.iter().filter(|result| result.outcome.is_err())
    }

    /// Renders the body: just `ok` when healthy and not verbose, else one line per check.
    pub fn render(&self, verbose: bool) -> String {
        let healthy = self.is_healthy();
        if healthy && !verbose {
            return "ok".to_string();
        }
        let mut body = String::new();
        for result in &self.results {
            // Writing into a String cannot fail.
            let _ = match &result.outcome {
                Ok(()) => writeln!(body, "[+]{} ok", result.name),
                Err(reason) => writeln!(body, "[-]{} failed: {}", result.name, reason),
            };
        }
        let verdict = if healthy { "passed" } else { "failed" };
        let _ = write!(body, "{} check {}", self.probe.endpoint(), verdict);
        body
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Liveness,
    Readiness,
}

struct Registered {
    name: String,
    kind: Kind,
    check: Arc<dyn HealthCheck>,
}

/// Longest a single check may take before it counts as failed.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(3);

/// The set of named checks; cheap to clone and shared by the server and components.
#[derive(Clone)]
pub struct HealthRegistry {
    checks: Arc<RwLock<Vec<Registered>>>,
    check_timeout: Duration,
}

impl Default for HealthRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl HealthRegistry {
    /// A registry holding the always-passing liveness check `ping`.
    pub fn new() -> Self {
        let registry = Self::empty();
        registry.add_liveness_check("ping", FnCheck(|| Ok(())));
        registry
    }

    /// A registry with no checks at all.
    pub fn empty() -> Self {
        Self {
            checks: Arc::new(RwLock::new(Vec::new())),
            check_timeout: DEFAULT_CHECK_TIMEOUT,
        }
    }

    pub fn with_check_timeout(mut self, timeout: Duration) -> Self {
        self.check_timeout = timeout;
        self
    }

    /// Adds (or replaces, by name) a check that `/healthz` and `/readyz` both run.
    pub fn add_liveness_check(&self, name: impl Into<String>, check: impl HealthCheck) {
        self.add(name.into(), Kind::Liveness, Arc::new(check));
    }

    /// Adds (or replaces, by name) a check that only `/readyz` runs.
    pub fn add_readiness_check(&self, name: impl Into<String>, check: impl HealthCheck) {
        self.add(name.into(), Kind::Readiness, Arc::new(check));
    }

    /// Registers a readiness [`StatusCheck`] starting in the given state and returns its handle.
    pub fn readiness_status(&self, name: impl Into<String>, initial: CheckOutcome) -> StatusCheck {
        let status = StatusCheck::passing();
        status.set(initial);
        self.add_readiness_check(name, status.clone());
        status
    }

    pub fn remove_check(&self, name: &str) -> bool {
        let mut checks = self.checks.write_or_recover();
        let before = checks.len();
        checks.retain(|registered| registered.name != name);
        checks.len() != before
    }

    pub fn check_names(&self, probe: Probe) -> Vec<String> {
        self.selected(probe, None)
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    fn add(&self, name: String, kind: Kind, check: Arc<dyn HealthCheck>) {
        let mut checks = self.checks.write_or_recover();
        match checks.iter_mut().find(|registered| registered.name == name) {
            Some(existing) => {
                existing.kind = kind;
                existing.check = check;
            }
            None => checks.push(Registered { name, kind, check }),
        }
    }

    fn selected(&self, probe: Probe, only: Option<&str>) -> Vec<(String, Arc<dyn HealthCheck>)> {
        let checks = self.checks.read_or_recover();
        checks
            .iter()
            .filter(|registered| probe == Probe::Readiness || registered.kind == Kind::Liveness)
            .filter(|registered| only.is_none_or(|name| registered.name == name))
            .map(|registered| (registered.name.clone(), Arc::clone(&registered.check)))
            .collect()
    }

    /// Runs every check for the probe, each bounded by the check timeout.
    pub async fn evaluate(&self, probe: Probe) -> HealthReport {
        self.run(probe, None).await
    }

    /// Runs the single named check if the probe covers it; `None` when there is no such check.
    pub async fn evaluate_one(&self, probe: Probe, name: &str) -> Option<HealthReport> {
        let report = self.run(probe, Some(name)).await;
        (!report.results.is_empty()).then_some(report)
    }

    async fn run(&self, probe: Probe, only: Option<&str>) -> HealthReport {
        // Snapshot first so no lock is held while checks run.
        let selected = self.selected(probe, only);
        let mut results = Vec::with_capacity(selected.len());
        for (name, check) in selected {
            let outcome = match tokio::time::timeout(self.check_timeout, check.check()).await {
                Ok(outcome) => outcome,
                Err(_) => Err(format!("no answer within {:?}", self.check_timeout)),
            };
            results.push(CheckResult { name, outcome });
        }
        HealthReport { probe, results }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NeverAnswers;

    impl HealthCheck for NeverAnswers {
        fn check(&self) -> CheckFuture<'_> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test]
    async fn fresh_registry_is_alive_and_ready() {
        let registry = HealthRegistry::new();
        let live = registry.evaluate(Probe::Liveness).await;
        let ready = registry.evaluate(Probe::Readiness).await;
        assert!(live.is_healthy() && ready.is_healthy());
        assert_eq!(ready.render(false), "ok");
        assert_eq!(ready.render(true), "[+]ping ok\nreadyz check passed");
    }

    #[tokio::test]
    async fn ready_only_when_every_readiness_check_passes() {
        let registry = HealthRegistry::new();
        let cluster = registry.readiness_status("cluster", Err("connecting".into()));
        registry.add_readiness_check(
            "controllers",
            FnCheck(|| Err("not implemented".to_string())),
        );

        let report = registry.evaluate(Probe::Readiness).await;
        assert!(!report.is_healthy());
        let failing: Vec<_> = report.failing().map(|r| r.name.as_str()).collect();
        assert_eq!(failing, ["cluster", "controllers"]);
        assert_eq!(
            report.render(false),
            "[+]ping ok\n[-]cluster failed: connecting\n[-]controllers failed: not implemented\nreadyz check failed"
        );

        cluster.set_passing();
        let report = registry.evaluate(Probe::Readiness).await;
        let failing: Vec<_> = report.failing().map(|r| r.name.as_str()).collect();
        assert_eq!(failing, ["controllers"]);

        registry.add_readiness_check("controllers", FnCheck(|| Ok(())));
        assert!(registry.evaluate(Probe::Readiness).await.is_healthy());
    }

    #[tokio::test]
    async fn readiness_failures_do_not_affect_liveness_but_liveness_failures_affect_both() {
        let registry = HealthRegistry::new();
        registry.add_readiness_check("backend", FnCheck(|| Err("down".to_string())));
        assert!(registry.evaluate(Probe::Liveness).await.is_healthy());
        assert!(!registry.evaluate(Probe::Readiness).await.is_healthy());

        let registry = HealthRegistry::new();
        let loop_alive = StatusCheck::failing("event loop stalled");
        registry.add_liveness_check("loop", loop_alive.clone());
        assert!(!registry.evaluate(Probe::Liveness).await.is_healthy());
        assert!(!registry.evaluate(Probe::Readiness).await.is_healthy());
        assert_eq!(registry.check_names(Probe::Liveness), ["ping", "loop"]);
    }

    #[tokio::test]
    async fn a_hanging_check_fails_after_the_timeout() {
        let registry = HealthRegistry::new().with_check_timeout(Duration::from_millis(20));
        registry.add_readiness_check("stuck", NeverAnswers);
        let report = registry.evaluate(Probe::Readiness).await;
        let stuck = report.results.iter().find(|r| r.name == "stuck").unwrap();
        assert!(stuck.outcome.as_ref().unwrap_err().contains("no answer"));
    }

    #[tokio::test]
    async fn single_checks_can_be_queried_by_name() {
        let registry = HealthRegistry::new();
        registry.add_readiness_check("backend", FnCheck(|| Err("down".to_string())));
        let one = registry
            .evaluate_one(Probe::Readiness, "backend")
            .await
            .unwrap();
        assert_eq!(one.results.len(), 1);
        assert!(!one.is_healthy());
        assert!(
            registry
                .evaluate_one(Probe::Liveness, "backend")
                .await
                .is_none()
        );
        assert!(
            registry
                .evaluate_one(Probe::Readiness, "missing")
                .await
                .is_none()
        );
        assert!(registry.remove_check("backend"));
        assert!(!registry.remove_check("backend"));
    }
}
