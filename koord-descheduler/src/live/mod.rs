//! The live descheduler: reflectors keep caches of the cluster
//! ([`caches`]); every `deschedulingInterval`, while this replica leads, a
//! round digests them into the model the `plan` command uses and runs each
//! profile's LowNodeLoad over it ([`round`]), with the anomaly detectors
//! carried from round to round; the victims are handed to an
//! [`EvictorSink`] ([`sink`]), which creates their PodMigrationJobs, or,
//! with `dryRun` (top-level or the MigrationController's), only logged and
//! counted ([`metrics`]).
//!
//! Rounds follow upstream's `wait.NonSlidingUntil`: one at start (once the
//! caches are synced and leadership is held), then one every interval
//! measured from the start of the previous one; a round that overruns its
//! interval is followed at once by the next. With no interval, a single
//! round runs, as upstream.

pub mod caches;
pub mod metrics;
pub mod round;
pub mod sink;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use koord_common::Shutdown;
use koord_common::leader::Leadership;

use crate::config::Configuration;
use caches::{CachedView, Caches};
use metrics::{LiveMetrics, VictimOutcome};
use round::{Descheduler, RoundOutcome, Victim};
pub use sink::{EvictorSink, PodMigrationJobSink};

/// Where a round's cluster view comes from.
pub trait ViewSource: Send + Sync {
    fn view(&self) -> CachedView;
}

impl ViewSource for Caches {
    fn view(&self) -> CachedView {
        Caches::view(self)
    }
}

/// The wall clock a round judges NodeMetrics and anomalies by.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(Timestamp::now)
}

/// What a round did, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RoundSummary {
    pub round: u64,
    /// Why the round did nothing, if it did nothing.
    pub skipped: Option<String>,
    pub error: Option<String>,
    /// The victims and how each was handled.
    pub victims: Vec<(Victim, VictimOutcome)>,
}

/// The loop's state: the configuration, the descheduler (and its anomaly
/// detectors) and where victims go.
pub struct LiveLoop {
    configuration: Arc<Configuration>,
    descheduler: Descheduler,
    sink: Arc<dyn EvictorSink>,
    metrics: LiveMetrics,
    leadership: Leadership,
    clock: Clock,
}

impl LiveLoop {
    pub fn new(
        configuration: Arc<Configuration>,
        descheduler: Descheduler,
        sink: Arc<dyn EvictorSink>,
        metrics: LiveMetrics,
        leadership: Leadership,
        clock: Clock,
    ) -> Self {
        LiveLoop {
            configuration,
            descheduler,
            sink,
            metrics,
            leadership,
            clock,
        }
    }

    /// The configured interval; zero means a single round.
    pub fn interval(&self) -> Duration {
        self.configuration
            .file
            .descheduling_interval
            .to_std()
            .unwrap_or(Duration::ZERO)
    }

    /// One round over `cached` and the hand-off of its victims.
    pub async fn run_round(&mut self, cached: CachedView) -> RoundSummary {
        let started = tokio::time::Instant::now();
        let now = (self.clock)();
        if !cached.problems.is_empty() {
            tracing::debug!(
                count = cached.problems.len(),
                first = %cached.problems[0],
                "cluster objects with fields read as documented fallbacks"
            );
        }
        let outcome = self
            .descheduler
            .round(
                &self.configuration,
                &cached.view,
                &cached.priority_classes,
                now,
            )
            .map_err(|err| err.to_string());
        self.metrics.round(&outcome);
        let mut summary = RoundSummary {
            round: self.descheduler.rounds(),
            ..Default::default()
        };
        match outcome {
            Err(err) => {
                tracing::error!(round = summary.round, error = %err, "descheduling round failed");
                summary.error = Some(err);
            }
            Ok(RoundOutcome::Skipped(reason)) => {
                tracing::info!(round = summary.round, %reason, "descheduling round skipped");
                summary.skipped = Some(reason);
            }
            Ok(RoundOutcome::Ran { profiles, victims }) => {
                self.metrics.classified(&profiles);
                for profile in &profiles {
                    if profile.low_node_load_dry_run > 0 {
                        self.metrics.victim(
                            &profile.profile,
                            VictimOutcome::LowNodeLoadDryRun,
                            u64::try_from(profile.low_node_load_dry_run).unwrap_or(u64::MAX),
                        );
                    }
                    let sources: usize = profile.report.pools.iter().map(|p| p.sources.len()).sum();
                    tracing::info!(
                        round = summary.round,
                        profile = %profile.profile,
                        paused = profile.report.paused,
                        pools = profile.report.pools.len(),
                        hot_nodes_balanced = sources,
                        lownodeload_dry_run = profile.low_node_load_dry_run,
                        "LowNodeLoad round done"
                    );
                }
                for victim in victims {
                    let outcome = self.hand_off(&victim).await;
                    self.metrics.victim(&victim.profile, outcome, 1);
                    summary.victims.push((victim, outcome));
                }
            }
        }
        self.metrics
            .round_duration
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .last_round
            .set(now.as_nanosecond() as f64 / 1e9);
        summary
    }

    async fn hand_off(&self, victim: &Victim) -> VictimOutcome {
        if victim.dry_run {
            tracing::info!(
                pod = %format!("{}/{}", victim.namespace, victim.name),
                node = %victim.node,
                profile = %victim.profile,
                reason = %victim.reason,
                "dry run: would create a PodMigrationJob"
            );
            return VictimOutcome::DryRun;
        }
        match self.leadership.while_leading(self.sink.start(victim)).await {
            None => {
                tracing::warn!(
                    pod = %format!("{}/{}", victim.namespace, victim.name),
                    "leadership lost; migration not started"
                );
                VictimOutcome::NotLeading
            }
            Some(Ok(job)) => {
                tracing::info!(
                    pod = %format!("{}/{}", victim.namespace, victim.name),
                    node = %victim.node,
                    profile = %victim.profile,
                    job = %job,
                    mode = %victim.mode,
                    reason = %victim.reason,
                    "created a PodMigrationJob"
                );
                VictimOutcome::Created
            }
            Some(Err(err)) => {
                tracing::warn!(error = %err, "migration not started; the next round retries");
                VictimOutcome::Error
            }
        }
    }

    /// Runs rounds until shutdown, each one only while leading. `on_round`
    /// sees every summary (tests; logging is done here already).
    pub async fn run(
        mut self,
        source: Arc<dyn ViewSource>,
        shutdown: Shutdown,
        mut on_round: impl FnMut(&RoundSummary) + Send,
    ) {
        if !self.descheduler.balances() {
            tracing::info!(
                "no profile enables LowNodeLoad (profiles[].plugins.balance.enabled): rounds find nothing to balance"
            );
        }
        let interval = self.interval();
        let mut ticker = (!interval.is_zero()).then(|| {
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticker
        });
        loop {
            let leading = tokio::select! {
                leading = self.leadership.until_leading() => leading,
                _ = shutdown.wait() => return,
            };
            if !leading {
                return;
            }
            if let Some(ticker) = ticker.as_mut() {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = shutdown.wait() => return,
                }
            }
            if !self.leadership.is_leader() {
                continue;
            }
            let summary = self.run_round(source.view()).await;
            on_round(&summary);
            if ticker.is_none() {
                tracing::info!("deschedulingInterval is 0: the single round is done");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests;
