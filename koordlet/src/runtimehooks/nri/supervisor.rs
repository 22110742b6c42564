//! The single owner of the NRI connection.
//!
//! One task loops: wait for the socket, connect, serve until the connection
//! ends, back off, repeat. The connection is served inline (awaited), so a
//! second connection can only be opened after the first one has returned,
//! i.e. after its socket is closed and its handlers have finished.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use koord_common::Shutdown;
use tokio::net::UnixStream;

use super::connection::{ConnectionEnd, PluginService, Registration, serve_connection};
use super::status::{NriState, NriStatus};

/// Exponential reconnect delay: `initial * factor^attempt`, at most `cap`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub factor: f64,
    pub cap: Duration,
}

impl Backoff {
    /// Delay before retry number `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = if self.factor.is_finite() && self.factor >= 1.0 {
            self.factor
        } else {
            1.0
        };
        let scaled = self.initial.as_secs_f64() * factor.powi(attempt.min(64) as i32);
        let cap = self.cap.max(self.initial);
        if !scaled.is_finite() || scaled >= cap.as_secs_f64() {
            cap
        } else {
            Duration::from_secs_f64(scaled)
        }
    }
}

/// Runs the plugin against one socket for the life of the process.
pub struct NriSupervisor<S: PluginService> {
    pub socket: PathBuf,
    pub registration: Registration,
    pub backoff: Backoff,
    pub service: Arc<S>,
    pub status: NriStatus,
}

/// The reconnect attempt whose delay follows `failures` consecutive failed
/// attempts when the backoff starts over every `steps` attempts (upstream's
/// `--runtime-hooks-nri-backoff-steps`: its exponential backoff gives up after
/// that many tries and a fresh one begins at the initial delay).
pub fn backoff_attempt(failures: u64, steps: u64) -> u32 {
    u32::try_from(failures % steps.max(1)).unwrap_or(u32::MAX)
}

impl<S: PluginService> NriSupervisor<S> {
    /// Loops until `shutdown` triggers; returns once the last connection is
    /// closed. The backoff never starts over (see [`Self::run_with_steps`]).
    pub async fn run(self, shutdown: Shutdown) {
        self.run_with_steps(u64::MAX, shutdown).await
    }

    /// [`Self::run`], the reconnect delay starting over at the initial one
    /// after every `steps` consecutive failed attempts.
    pub async fn run_with_steps(self, steps: u64, shutdown: Shutdown) {
        let mut failures: u64 = 0;
        loop {
            if shutdown.is_triggered() {
                break;
            }
            if !self.socket.exists() {
                self.status.set_state(NriState::WaitingForSocket {
                    socket: self.socket.clone(),
                });
            } else {
                match UnixStream::connect(&self.socket).await {
                    Err(err) => {
                        self.status.set_state(NriState::Disconnected {
                            socket: self.socket.clone(),
                            reason: format!("cannot connect: {err}"),
                        });
                    }
                    Ok(stream) => {
                        self.status.connection_opened(self.socket.clone());
                        let registered = AtomicBool::new(false);
                        let status = self.status.clone();
                        let result = serve_connection(
                            stream,
                            &self.registration,
                            Arc::clone(&self.service),
                            || {
                                registered.store(true, Ordering::SeqCst);
                                status.registered();
                            },
                            async {
                                shutdown.wait().await;
                            },
                        )
                        .await;
                        let reason = match result {
                            Ok(ConnectionEnd::Stopped) => {
                                self.status.set_state(NriState::Disconnected {
                                    socket: self.socket.clone(),
                                    reason: "koordlet is stopping".to_string(),
                                });
                                break;
                            }
                            Ok(ConnectionEnd::ClosedByRuntime) => {
                                "the runtime closed the connection".to_string()
                            }
                            Err(err) => err.to_string(),
                        };
                        tracing::warn!(socket = %self.socket.display(), %reason, "NRI connection ended");
                        self.status.set_state(NriState::Disconnected {
                            socket: self.socket.clone(),
                            reason,
                        });
                        // A connection that registered was healthy: start the backoff over.
                        if registered.load(Ordering::SeqCst) {
                            failures = 0;
                        }
                    }
                }
            }
            let delay = self.backoff.delay(backoff_attempt(failures, steps));
            failures = failures.saturating_add(1);
            tokio::select! {
                _ = shutdown.wait() => break,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_geometrically_up_to_the_cap() {
        let backoff = Backoff {
            initial: Duration::from_secs(1),
            factor: 2.0,
            cap: Duration::from_secs(30),
        };
        assert_eq!(backoff.delay(0), Duration::from_secs(1));
        assert_eq!(backoff.delay(1), Duration::from_secs(2));
        assert_eq!(backoff.delay(4), Duration::from_secs(16));
        assert_eq!(backoff.delay(5), Duration::from_secs(30));
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(30));
        let flat = Backoff {
            factor: f64::NAN,
            ..backoff
        };
        assert_eq!(flat.delay(10), Duration::from_secs(1));
    }

    #[test]
    fn backoff_starts_over_after_the_steps() {
        let backoff = Backoff {
            initial: Duration::from_secs(1),
            factor: 2.0,
            cap: Duration::from_secs(30),
        };
        let delays: Vec<u64> = (0..7)
            .map(|failures| backoff.delay(backoff_attempt(failures, 3)).as_secs())
            .collect();
        assert_eq!(delays, vec![1, 2, 4, 1, 2, 4, 1]);
        // Upstream's default (MaxInt32) and our u64::MAX never start over in practice.
        assert_eq!(backoff_attempt(40, 2_147_483_647), 40);
        assert_eq!(backoff_attempt(u64::MAX - 1, u64::MAX), u32::MAX);
        // 0 would divide by zero: treated as 1 (every attempt is the first).
        assert_eq!(backoff_attempt(5, 0), 0);
        // An unbounded cap (upstream's 1<<62-1 ns) still yields finite delays.
        let unbounded = Backoff {
            cap: Duration::from_nanos((1 << 62) - 1),
            ..backoff
        };
        assert_eq!(unbounded.delay(5), Duration::from_secs(32));
        assert_eq!(unbounded.delay(u32::MAX), unbounded.cap);
    }
}
