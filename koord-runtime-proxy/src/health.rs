//! Health of the backend runtime: a fresh socket probe for `/readyz` and a
//! debounced verdict for `/healthz`, so that one slow or refused connection
//! to a briefly busy runtime does not fail liveness.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use koord_common::health::{CheckFuture, CheckOutcome, HealthCheck};
use koord_common::sync::MutexExt;

use crate::endpoint::CriEndpoint;

/// How often the background monitor probes the runtime socket.
pub const DEFAULT_BACKEND_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// Consecutive failed probes before `/healthz` reports the runtime unreachable.
pub const DEFAULT_BACKEND_FAILURE_THRESHOLD: u32 = 3;

/// Checks that the backend runtime socket exists and accepts a connection.
pub struct BackendSocketCheck {
    endpoint: CriEndpoint,
    connect_timeout: Duration,
}

impl BackendSocketCheck {
    pub fn new(endpoint: CriEndpoint) -> Self {
        Self {
            endpoint,
            connect_timeout: Duration::from_secs(1),
        }
    }

    pub fn endpoint(&self) -> &CriEndpoint {
        &self.endpoint
    }

    pub async fn probe(&self) -> Result<(), String> {
        let path = self.endpoint.path();
        if !path.exists() {
            return Err(format!("runtime socket {} does not exist", path.display()));
        }
        match tokio::time::timeout(self.connect_timeout, tokio::net::UnixStream::connect(path))
            .await
        {
            Ok(Ok(_stream)) => Ok(()),
            Ok(Err(err)) => Err(format!(
                "cannot connect to runtime socket {}: {err}",
                path.display()
            )),
            Err(_) => Err(format!(
                "runtime socket {} did not accept a connection within {:?}",
                path.display(),
                self.connect_timeout
            )),
        }
    }
}

impl HealthCheck for BackendSocketCheck {
    fn check(&self) -> CheckFuture<'_> {
        Box::pin(self.probe())
    }
}

/// The last probe outcomes, newest last; the decision core of the liveness check.
#[derive(Debug, Clone)]
pub struct ProbeHistory {
    threshold: usize,
    recent: VecDeque<CheckOutcome>,
}

impl ProbeHistory {
    /// Keeps the last `threshold` outcomes (at least one).
    pub fn new(threshold: u32) -> Self {
        let threshold = usize::try_from(threshold.max(1)).unwrap_or(usize::MAX);
        Self {
            threshold,
            recent: VecDeque::with_capacity(threshold.min(64)),
        }
    }

    pub fn record(&mut self, outcome: CheckOutcome) {
        if self.recent.len() == self.threshold {
            self.recent.pop_front();
        }
        self.recent.push_back(outcome);
    }

    /// Fails only when the last `threshold` probes all failed; passes while
    /// fewer probes have run. `every` is the probe interval, for the message.
    pub fn verdict(&self, endpoint: &CriEndpoint, every: Duration) -> CheckOutcome {
        if self.recent.len() < self.threshold || self.recent.iter().any(Result::is_ok) {
            return Ok(());
        }
        let latest = match self.recent.back() {
            Some(Err(reason)) => reason.as_str(),
            _ => "",
        };
        Err(format!(
            "runtime {endpoint} unreachable in the last {} probe(s), {every:?} apart; latest: {latest}",
            self.threshold
        ))
    }
}

/// Probes the runtime socket at a fixed interval and keeps the history the
/// liveness check reads; [`BackendMonitor::probe_once`] runs one probe now.
#[derive(Clone)]
pub struct BackendMonitor {
    socket: Arc<BackendSocketCheck>,
    interval: Duration,
    history: Arc<Mutex<ProbeHistory>>,
}

impl BackendMonitor {
    pub fn new(endpoint: CriEndpoint, interval: Duration, threshold: u32) -> Self {
        Self {
            socket: Arc::new(BackendSocketCheck::new(endpoint)),
            interval,
            history: Arc::new(Mutex::new(ProbeHistory::new(threshold))),
        }
    }

    pub async fn probe_once(&self) {
        let outcome = self.socket.probe().await;
        if let Err(reason) = &outcome {
            tracing::debug!(%reason, "backend runtime probe failed");
        }
        self.history.lock_or_recover().record(outcome);
    }

    /// Probes now and then every interval, until the task is dropped.
    pub fn spawn(&self) -> tokio::task::JoinHandle<()> {
        let monitor = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(monitor.interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                monitor.probe_once().await;
            }
        })
    }

    pub fn verdict(&self) -> CheckOutcome {
        self.history
            .lock_or_recover()
            .verdict(self.socket.endpoint(), self.interval)
    }
}

impl HealthCheck for BackendMonitor {
    fn check(&self) -> CheckFuture<'_> {
        Box::pin(std::future::ready(self.verdict()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> CriEndpoint {
        "/run/containerd/containerd.sock".parse().unwrap()
    }

    #[test]
    fn liveness_fails_only_after_threshold_consecutive_failures() {
        let every = Duration::from_secs(2);
        let mut history = ProbeHistory::new(3);
        assert_eq!(history.verdict(&endpoint(), every), Ok(()), "no probe yet");
        history.record(Err("refused 1".into()));
        history.record(Err("refused 2".into()));
        assert_eq!(history.verdict(&endpoint(), every), Ok(()), "two failures");
        history.record(Err("refused 3".into()));
        let reason = history.verdict(&endpoint(), every).unwrap_err();
        assert!(
            reason.contains("/run/containerd/containerd.sock"),
            "{reason}"
        );
        assert!(reason.contains("last 3 probe(s), 2s apart"), "{reason}");
        assert!(reason.ends_with("latest: refused 3"), "{reason}");

        // One success clears it; failures must pile up again.
        history.record(Ok(()));
        assert_eq!(history.verdict(&endpoint(), every), Ok(()));
        history.record(Err("a".into()));
        history.record(Err("b".into()));
        assert_eq!(history.verdict(&endpoint(), every), Ok(()));
        history.record(Err("c".into()));
        assert!(history.verdict(&endpoint(), every).is_err());
    }

    #[test]
    fn a_flapping_runtime_stays_alive() {
        let mut history = ProbeHistory::new(2);
        for round in 0..10 {
            history.record(Err(format!("busy {round}")));
            assert_eq!(history.verdict(&endpoint(), Duration::from_secs(1)), Ok(()));
            history.record(Ok(()));
        }
    }

    #[test]
    fn threshold_zero_means_one() {
        let mut history = ProbeHistory::new(0);
        assert_eq!(history.verdict(&endpoint(), Duration::from_secs(1)), Ok(()));
        history.record(Err("gone".into()));
        assert!(
            history
                .verdict(&endpoint(), Duration::from_secs(1))
                .is_err()
        );
    }

    #[tokio::test]
    async fn backend_check_reports_missing_and_live_sockets() {
        let dir = std::env::temp_dir().join(format!("koord-rp-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("containerd.sock");
        let endpoint: CriEndpoint = socket.to_str().unwrap().parse().unwrap();
        let check = BackendSocketCheck::new(endpoint.clone());
        let missing = check.probe().await.unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");

        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(check.probe().await, Ok(()));
        drop(listener);
        // The file stays behind but nobody accepts any more.
        let refused = check.probe().await.unwrap_err();
        assert!(refused.contains("cannot connect"), "{refused}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
