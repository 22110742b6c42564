//! The live loop's metrics (names under the `koord_descheduler_` prefix).
//! Upstream's `descheduler_pods_evicted` counts evictions, which the
//! MigrationController performs, so it is not counted here.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::round::{ProfileRound, RoundOutcome};

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// How a victim was handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VictimOutcome {
    /// A PodMigrationJob was created.
    Created,
    /// The sink failed.
    Error,
    /// `dryRun`: logged only.
    DryRun,
    /// LowNodeLoad's own `dryRun`: never handed on.
    LowNodeLoadDryRun,
    /// Leadership was lost before it was handed on.
    NotLeading,
}

impl VictimOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            VictimOutcome::Created => "created",
            VictimOutcome::Error => "error",
            VictimOutcome::DryRun => "dry_run",
            VictimOutcome::LowNodeLoadDryRun => "lownodeload_dry_run",
            VictimOutcome::NotLeading => "not_leading",
        }
    }
}

#[derive(Clone)]
pub struct LiveMetrics {
    /// Rounds by result: `ran`, `skipped`, `error`.
    pub rounds: Family<Labels, Counter>,
    pub round_duration: Histogram,
    /// Nodes of the last round by profile, pool and class.
    pub nodes_classified: Family<Labels, Gauge>,
    /// Victims by profile and outcome.
    pub victims: Family<Labels, Counter>,
    /// Unix time of the last round that ran.
    pub last_round: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl Default for LiveMetrics {
    fn default() -> Self {
        LiveMetrics {
            rounds: Family::default(),
            round_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            nodes_classified: Family::default(),
            victims: Family::default(),
            last_round: Gauge::default(),
        }
    }
}

impl LiveMetrics {
    /// Registers the metrics with `registry` and returns them.
    pub fn register(registry: &koord_common::MetricsRegistry) -> Self {
        let metrics = LiveMetrics::default();
        registry.register_component(|r| {
            r.register(
                "descheduling_rounds",
                "Descheduling rounds by result (ran, skipped, error)",
                metrics.rounds.clone(),
            );
            r.register(
                "descheduling_round_duration_seconds",
                "Time a descheduling round took, handing on its victims included",
                metrics.round_duration.clone(),
            );
            r.register(
                "nodes_classified",
                "Nodes of the last round by profile, node pool and LowNodeLoad class",
                metrics.nodes_classified.clone(),
            );
            r.register(
                "victims",
                "Pods chosen for migration by profile and outcome (created, error, dry_run, lownodeload_dry_run, not_leading)",
                metrics.victims.clone(),
            );
            r.register(
                "last_round_timestamp_seconds",
                "Unix time at which the last descheduling round ran",
                metrics.last_round.clone(),
            );
        });
        metrics
    }

    pub fn round(&self, outcome: &Result<RoundOutcome, String>) {
        let result = match outcome {
            Ok(RoundOutcome::Ran { .. }) => "ran",
            Ok(RoundOutcome::Skipped(_)) => "skipped",
            Err(_) => "error",
        };
        self.rounds
            .get_or_create(&labels(&[("result", result)]))
            .inc();
    }

    /// Replaces the classification gauges with the last round's counts.
    pub fn classified(&self, profiles: &[ProfileRound]) {
        self.nodes_classified.clear();
        for profile in profiles {
            for ((pool, class), count) in profile.classified() {
                self.nodes_classified
                    .get_or_create(&labels(&[
                        ("profile", &profile.profile),
                        ("pool", &pool),
                        ("class", &class),
                    ]))
                    .set(i64::try_from(count).unwrap_or(i64::MAX));
            }
        }
    }

    pub fn victim(&self, profile: &str, outcome: VictimOutcome, by: u64) {
        self.victims
            .get_or_create(&labels(&[
                ("profile", profile),
                ("outcome", outcome.as_str()),
            ]))
            .inc_by(by);
    }
}
