//! Rule distribution: which NodeSLO version each QoS strategy has applied,
//! and how long a NodeSLO change took from koordlet receiving it (and from
//! its last update on the API server) until every strategy had written the
//! cgroup and kernel files the change implies.
//!
//! [`RuleDistribution`] is the pure core: the runner tells it, after each
//! round, which version the round worked from and whether all its writes
//! succeeded; it answers when a version has reached every strategy.
//! [`DistributionMetrics`] is the Prometheus side (names in `docs/qos.md`).
//!
//! A round counts as having applied a version when it decided from that
//! version and none of its directory creations or writes failed. A round
//! that skipped (strategy disabled by the NodeSLO, kernel lacks the feature,
//! nothing to do) applied it too: the change asked nothing of it. A round
//! with failures did not; the strategy's next clean round completes it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use koord_common::MetricsRegistry;
use koord_common::metrics::FloatGauge;
use koord_common::sync::MutexExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::statesinformer::{ObservedRule, RuleVersion};

/// A version that reached every strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct Distributed {
    pub version: RuleVersion,
    /// From koordlet receiving the NodeSLO to the last strategy's clean round.
    pub since_observed: Duration,
    /// From the NodeSLO's update time (managedFields, else creation) to the
    /// same moment; `None` without an update time or when the clocks of the
    /// API server and this node disagree so much that it would be negative.
    pub since_updated: Option<Duration>,
}

/// What the runner should record after one round.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoundReport {
    /// The strategy applied a version different from the one it had applied.
    pub newly_applied: Option<RuleVersion>,
    /// The round's version had not reached every strategy yet when a newer
    /// one arrived: it never will (counted as superseded).
    pub superseded: Option<RuleVersion>,
    /// This round completed the distribution of its version.
    pub distributed: Option<Distributed>,
    /// A version seen for the first time.
    pub first_seen: Option<ObservedRule>,
}

#[derive(Debug, Clone)]
struct Pending {
    rule: ObservedRule,
    waiting_for: BTreeSet<&'static str>,
}

/// Per-runner bookkeeping of NodeSLO versions (pure; time comes in).
#[derive(Debug, Clone, Default)]
pub struct RuleDistribution {
    strategies: BTreeSet<&'static str>,
    /// The newest version seen, until every strategy applied it.
    pending: Option<Pending>,
    /// The newest version seen (pending or distributed).
    latest: Option<RuleVersion>,
    /// The version each strategy last applied.
    applied: BTreeMap<&'static str, RuleVersion>,
}

impl RuleDistribution {
    /// Tracks the strategies named (every strategy of the runner).
    pub fn new(strategies: impl IntoIterator<Item = &'static str>) -> Self {
        Self {
            strategies: strategies.into_iter().collect(),
            ..Self::default()
        }
    }

    /// The version `strategy` last applied.
    pub fn applied(&self, strategy: &str) -> Option<&RuleVersion> {
        self.applied.get(strategy)
    }

    /// Records one finished round of `strategy` that decided from `rule`
    /// (`None`: no NodeSLO yet), at `now`, `clean` when nothing failed.
    pub fn round_finished(
        &mut self,
        strategy: &'static str,
        rule: Option<&ObservedRule>,
        clean: bool,
        now: SystemTime,
    ) -> RoundReport {
        let mut report = RoundReport::default();
        let Some(rule) = rule else {
            return report;
        };
        if self.latest.as_ref() != Some(&rule.version) {
            // A round of an older version can still be running when a newer
            // one arrives; only a version newer than the pending one (by
            // arrival) replaces it.
            let newer = self
                .pending
                .as_ref()
                .is_none_or(|p| rule.observed_at >= p.rule.observed_at);
            if !newer {
                return report;
            }
            if let Some(old) = self.pending.take() {
                report.superseded = Some(old.rule.version);
            }
            self.latest = Some(rule.version.clone());
            self.pending = Some(Pending {
                rule: rule.clone(),
                waiting_for: self.strategies.clone(),
            });
            report.first_seen = Some(rule.clone());
        }
        if !clean {
            return report;
        }
        if self.applied.get(strategy) != Some(&rule.version) {
            self.applied.insert(strategy, rule.version.clone());
            report.newly_applied = Some(rule.version.clone());
        }
        let Some(pending) = self.pending.as_mut() else {
            return report;
        };
        if pending.rule.version != rule.version {
            return report;
        }
        pending.waiting_for.remove(strategy);
        if pending.waiting_for.is_empty() {
            let done = self.pending.take().map(|p| p.rule);
            if let Some(done) = done {
                report.distributed = Some(Distributed {
                    since_observed: now.duration_since(done.observed_at).unwrap_or_default(),
                    since_updated: done
                        .version
                        .updated_at
                        .and_then(|updated| now.duration_since(updated).ok()),
                    version: done.version,
                });
            }
        }
        report
    }
}

type Labels = Vec<(&'static str, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 10 ms .. ~82 s: a one-second reconcile interval puts most samples in
    // the low seconds; API-server lag adds more for `from="updated"`.
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

/// The distribution metrics (all new; upstream has none for NodeSLO):
/// `koordlet_nodeslo_update_time_seconds{node}`,
/// `koordlet_nodeslo_observed_time_seconds{node}`,
/// `koordlet_nodeslo_rule_version{node,strategy,resource_version,generation}`,
/// `koordlet_nodeslo_rule_update_time_seconds{node,strategy}`,
/// `koordlet_nodeslo_distribution_latency_seconds{node,from}` and
/// `koordlet_nodeslo_distribution_superseded_total{node}`.
#[derive(Clone)]
pub struct DistributionMetrics {
    node: String,
    update_time: Family<Labels, FloatGauge>,
    observed_time: Family<Labels, FloatGauge>,
    rule_version: Family<Labels, FloatGauge>,
    rule_update_time: Family<Labels, FloatGauge>,
    latency: HistogramFamily,
    superseded: Family<Labels, Counter>,
    version_labels: Arc<Mutex<BTreeMap<&'static str, Labels>>>,
}

/// `from` label values of the latency histogram.
pub const FROM_OBSERVED: &str = "observed";
pub const FROM_UPDATED: &str = "updated";

impl DistributionMetrics {
    /// Creates and registers the metrics under the component prefix.
    pub fn register(registry: &MetricsRegistry, node: &str) -> Self {
        let metrics = Self {
            node: node.to_string(),
            update_time: Family::default(),
            observed_time: Family::default(),
            rule_version: Family::default(),
            rule_update_time: Family::default(),
            latency: HistogramFamily::new_with_constructor(latency_histogram),
            superseded: Family::default(),
            version_labels: Arc::default(),
        };
        registry.register_component(|r| {
            r.register(
                "nodeslo_update_time_seconds",
                "last update of the newest NodeSLO koordlet received (its newest managedFields time, else its creation), unix seconds",
                metrics.update_time.clone(),
            );
            r.register(
                "nodeslo_observed_time_seconds",
                "when koordlet received the newest NodeSLO version, unix seconds",
                metrics.observed_time.clone(),
            );
            r.register(
                "nodeslo_rule_version",
                "the NodeSLO version (resourceVersion, generation) a QoS strategy last applied without errors; always 1",
                metrics.rule_version.clone(),
            );
            r.register(
                "nodeslo_rule_update_time_seconds",
                "update time of the NodeSLO version a QoS strategy last applied, unix seconds",
                metrics.rule_update_time.clone(),
            );
            r.register(
                "nodeslo_distribution_latency_seconds",
                "time from a NodeSLO change (from=observed: koordlet received it; from=updated: its API-server update time) until every QoS strategy applied it",
                metrics.latency.clone(),
            );
            r.register(
                "nodeslo_distribution_superseded",
                "NodeSLO versions replaced by a newer one before every QoS strategy applied them",
                metrics.superseded.clone(),
            );
        });
        metrics
            .superseded
            .get_or_create(&metrics.node_labels())
            .inc_by(0);
        metrics
    }

    fn node_labels(&self) -> Labels {
        vec![("node", self.node.clone())]
    }

    fn strategy_labels(&self, strategy: &'static str) -> Labels {
        vec![
            ("node", self.node.clone()),
            ("strategy", strategy.to_string()),
        ]
    }

    /// Records what one round's report says.
    pub fn record(&self, strategy: &'static str, report: &RoundReport) {
        if let Some(first) = &report.first_seen {
            self.observed_time
                .get_or_create(&self.node_labels())
                .set(unix_seconds(first.observed_at));
            match first.version.updated_at {
                Some(updated) => {
                    self.update_time
                        .get_or_create(&self.node_labels())
                        .set(unix_seconds(updated));
                }
                None => {
                    self.update_time.remove(&self.node_labels());
                }
            }
        }
        if report.superseded.is_some() {
            self.superseded.get_or_create(&self.node_labels()).inc();
        }
        if let Some(version) = &report.newly_applied {
            // One series per strategy: drop the one of the version it replaces.
            self.clear_strategy_versions(strategy);
            let mut labels = self.strategy_labels(strategy);
            labels.push(("resource_version", version.resource_version.clone()));
            labels.push(("generation", version.generation_label()));
            self.rule_version.get_or_create(&labels).set(1.0);
            self.version_labels
                .lock_or_recover()
                .insert(strategy, labels);
            let labels = self.strategy_labels(strategy);
            match version.updated_at {
                Some(updated) => {
                    self.rule_update_time
                        .get_or_create(&labels)
                        .set(unix_seconds(updated));
                }
                None => {
                    self.rule_update_time.remove(&labels);
                }
            }
        }
        if let Some(done) = &report.distributed {
            let mut labels = self.node_labels();
            labels.push(("from", FROM_OBSERVED.to_string()));
            self.latency
                .get_or_create(&labels)
                .observe(done.since_observed.as_secs_f64());
            if let Some(since_updated) = done.since_updated {
                let mut labels = self.node_labels();
                labels.push(("from", FROM_UPDATED.to_string()));
                self.latency
                    .get_or_create(&labels)
                    .observe(since_updated.as_secs_f64());
            }
            tracing::info!(
                resource_version = %done.version.resource_version,
                generation = %done.version.generation_label(),
                since_observed_ms = done.since_observed.as_secs_f64() * 1000.0,
                since_updated_ms = done.since_updated.map(|d| d.as_secs_f64() * 1000.0),
                "NodeSLO applied by every QoS strategy"
            );
        }
    }

    /// Removes `strategy`'s version series (a family cannot be listed, so
    /// the labels of each strategy's current series are kept).
    fn clear_strategy_versions(&self, strategy: &'static str) {
        let previous = self.version_labels.lock_or_recover().remove(strategy);
        if let Some(previous) = previous {
            self.rule_version.remove(&previous);
        }
    }
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_millis(ms)
    }

    fn rule(rv: &str, observed_ms: u64, updated_ms: Option<u64>) -> ObservedRule {
        ObservedRule {
            version: RuleVersion {
                resource_version: rv.into(),
                generation: Some(1),
                updated_at: updated_ms.map(t),
            },
            observed_at: t(observed_ms),
        }
    }

    #[test]
    fn distributed_once_every_strategy_had_a_clean_round() {
        let mut d = RuleDistribution::new(["a", "b"]);
        let v1 = rule("10", 1_000, Some(400));
        let first = d.round_finished("a", Some(&v1), true, t(1_200));
        assert_eq!(first.first_seen, Some(v1.clone()));
        assert_eq!(first.newly_applied, Some(v1.version.clone()));
        assert!(first.distributed.is_none(), "b has not run yet");
        // b fails once: not applied.
        let failed = d.round_finished("b", Some(&v1), false, t(1_300));
        assert!(failed.distributed.is_none() && failed.newly_applied.is_none());
        assert!(d.applied("b").is_none());
        let done = d.round_finished("b", Some(&v1), true, t(2_500)).distributed;
        assert_eq!(
            done,
            Some(Distributed {
                version: v1.version.clone(),
                since_observed: Duration::from_millis(1_500),
                since_updated: Some(Duration::from_millis(2_100)),
            })
        );
        // Later rounds of the same version change nothing.
        assert_eq!(
            d.round_finished("a", Some(&v1), true, t(3_000)),
            RoundReport::default()
        );
        assert_eq!(d.applied("a"), Some(&v1.version));
    }

    #[test]
    fn a_newer_version_supersedes_an_unfinished_one() {
        let mut d = RuleDistribution::new(["a", "b"]);
        let v1 = rule("10", 1_000, None);
        let v2 = rule("11", 2_000, Some(9_000));
        d.round_finished("a", Some(&v1), true, t(1_100));
        let report = d.round_finished("a", Some(&v2), true, t(2_100));
        assert_eq!(report.superseded, Some(v1.version.clone()));
        // A late round of the old version neither completes nor resets it.
        let late = d.round_finished("b", Some(&v1), true, t(2_200));
        assert_eq!(late, RoundReport::default());
        let done = d
            .round_finished("b", Some(&v2), true, t(2_600))
            .distributed
            .unwrap();
        assert_eq!(done.since_observed, Duration::from_millis(600));
        // The API server's clock is ahead of ours: no negative latency.
        assert_eq!(done.since_updated, None);
    }

    #[test]
    fn no_nodeslo_reports_nothing() {
        let mut d = RuleDistribution::new(["a"]);
        assert_eq!(
            d.round_finished("a", None, true, t(0)),
            RoundReport::default()
        );
    }

    #[test]
    fn metrics_carry_versions_per_strategy_and_the_latency() {
        let registry = MetricsRegistry::new("koordlet");
        let metrics = DistributionMetrics::register(&registry, "node-a");
        let mut d = RuleDistribution::new(["a"]);
        let v1 = rule("10", 1_000, Some(500));
        metrics.record("a", &d.round_finished("a", Some(&v1), true, t(1_250)));
        let body = registry.encode().unwrap();
        for expected in [
            "koordlet_nodeslo_rule_version{node=\"node-a\",strategy=\"a\",resource_version=\"10\",generation=\"1\"} 1",
            "koordlet_nodeslo_distribution_latency_seconds_count{node=\"node-a\",from=\"observed\"} 1",
            "koordlet_nodeslo_distribution_latency_seconds_sum{node=\"node-a\",from=\"updated\"} 0.75",
            "koordlet_nodeslo_update_time_seconds{node=\"node-a\"} 1800000000.5",
            "koordlet_nodeslo_rule_update_time_seconds{node=\"node-a\",strategy=\"a\"} 1800000000.5",
            "koordlet_nodeslo_distribution_superseded_total{node=\"node-a\"} 0",
        ] {
            assert!(body.contains(expected), "{expected} missing in\n{body}");
        }
        let v2 = rule("11", 2_000, None);
        metrics.record("a", &d.round_finished("a", Some(&v2), true, t(2_100)));
        let body = registry.encode().unwrap();
        assert!(!body.contains("resource_version=\"10\""), "{body}");
        assert!(body.contains("resource_version=\"11\""), "{body}");
        assert!(
            !body.contains("koordlet_nodeslo_rule_update_time_seconds{"),
            "no update time for v2: {body}"
        );
    }
}
