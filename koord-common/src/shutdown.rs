//! Process shutdown: a token every task can wait on, and SIGTERM/SIGINT handling.

use std::fmt;
use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// A termination signal the process reacts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminationSignal {
    Terminate,
    Interrupt,
}

impl fmt::Display for TerminationSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TerminationSignal::Terminate => "SIGTERM",
            TerminationSignal::Interrupt => "SIGINT",
        })
    }
}

/// Why the process is stopping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShutdownReason {
    /// An operator or the kubelet asked us to stop; a clean exit.
    Signal(TerminationSignal),
    /// Code asked for an orderly stop; a clean exit.
    Requested(String),
    /// Something the process needs broke; the exit should be non-zero.
    Failed(String),
}

impl ShutdownReason {
    pub fn is_failure(&self) -> bool {
        matches!(self, ShutdownReason::Failed(_))
    }
}

impl fmt::Display for ShutdownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShutdownReason::Signal(signal) => write!(f, "received {signal}"),
            ShutdownReason::Requested(why) => write!(f, "shutdown requested: {why}"),
            ShutdownReason::Failed(why) => write!(f, "failure: {why}"),
        }
    }
}

/// A cloneable shutdown token. The first trigger wins; later ones are ignored.
#[derive(Clone)]
pub struct Shutdown {
    sender: Arc<watch::Sender<Option<ShutdownReason>>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        let (sender, _) = watch::channel(None);
        Self {
            sender: Arc::new(sender),
        }
    }

    /// Starts shutdown; returns false if it had already started.
    pub fn trigger(&self, reason: ShutdownReason) -> bool {
        self.sender.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        })
    }

    pub fn is_triggered(&self) -> bool {
        self.sender.borrow().is_some()
    }

    pub fn reason(&self) -> Option<ShutdownReason> {
        self.sender.borrow().clone()
    }

    /// Resolves once shutdown has been triggered (immediately if it already was).
    pub async fn wait(&self) -> ShutdownReason {
        let mut receiver = self.sender.subscribe();
        loop {
            if let Some(reason) = receiver.borrow_and_update().clone() {
                return reason;
            }
            // The sender lives in `self`, so the channel cannot close while we wait.
            if receiver.changed().await.is_err() {
                return ShutdownReason::Requested("shutdown channel closed".to_string());
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot install the {signal} handler: {source}")]
pub struct SignalError {
    signal: TerminationSignal,
    #[source]
    source: std::io::Error,
}

/// Handlers for SIGTERM and SIGINT, installed as soon as this is created.
pub struct TerminationSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl TerminationSignals {
    /// Installs the handlers; must run inside a tokio runtime.
    pub fn install() -> Result<Self, SignalError> {
        let terminate = signal(SignalKind::terminate()).map_err(|source| SignalError {
            signal: TerminationSignal::Terminate,
            source,
        })?;
        let interrupt = signal(SignalKind::interrupt()).map_err(|source| SignalError {
            signal: TerminationSignal::Interrupt,
            source,
        })?;
        Ok(Self {
            terminate,
            interrupt,
        })
    }

    /// Resolves on the next SIGTERM or SIGINT.
    pub async fn recv(&mut self) -> TerminationSignal {
        tokio::select! {
            _ = self.terminate.recv() => TerminationSignal::Terminate,
            _ = self.interrupt.recv() => TerminationSignal::Interrupt,
        }
    }
}

/// Resolves on the first SIGTERM or SIGINT received after the call.
pub async fn termination_signal() -> Result<TerminationSignal, SignalError> {
    let mut signals = TerminationSignals::install()?;
    Ok(signals.recv().await)
}

/// Installs the handlers now and triggers `shutdown` on the first signal. A
/// second signal ends the process at once with status 1, for operators whose
/// graceful stop is stuck.
pub fn spawn_signal_handler(
    shutdown: Shutdown,
) -> Result<tokio::task::JoinHandle<()>, SignalError> {
    let mut signals = TerminationSignals::install()?;
    Ok(tokio::spawn(async move {
        let first = signals.recv().await;
        tracing::info!(signal = %first, "received {first}, shutting down");
        shutdown.trigger(ShutdownReason::Signal(first));
        let second = signals.recv().await;
        tracing::warn!(signal = %second, "received {second} while shutting down, exiting immediately");
        std::process::exit(1);
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn first_reason_wins_and_waiters_wake() {
        let shutdown = Shutdown::new();
        assert!(!shutdown.is_triggered());
        let waiter = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { shutdown.wait().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(shutdown.trigger(ShutdownReason::Failed("server died".into())));
        assert!(!shutdown.trigger(ShutdownReason::Signal(TerminationSignal::Terminate)));
        let reason = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(reason, ShutdownReason::Failed("server died".into()));
        assert!(reason.is_failure());
        // Waiting after the fact returns at once.
        assert_eq!(shutdown.wait().await, reason);
    }

    #[test]
    fn reasons_read_well() {
        assert_eq!(
            ShutdownReason::Signal(TerminationSignal::Terminate).to_string(),
            "received SIGTERM"
        );
        assert!(!ShutdownReason::Signal(TerminationSignal::Interrupt).is_failure());
    }
}
