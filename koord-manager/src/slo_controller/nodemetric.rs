//! NodeMetric decisions (upstream `slo-controller/nodemetric`): one NodeMetric
//! per Node, named after it, carrying the collect policy of the node's
//! colocation strategy; deleted when the node is.

use apis::configuration::{ColocationStrategy, is_colocation_strategy_valid};
use apis::slo::v1alpha1::{NodeMetric, NodeMetricCollectPolicy, NodeMetricSpec};
use k8s_openapi::api::core::v1::Node;

use super::config::NodeColocation;

/// The collect policy of a node, or why there is none (upstream errors out
/// the same way and leaves the NodeMetric as it is).
pub fn collect_policy(
    colocation: &NodeColocation,
) -> Result<NodeMetricCollectPolicy, &'static str> {
    let strategy: &ColocationStrategy = colocation
        .strategy
        .as_ref()
        .ok_or("no valid colocation strategy")?;
    if !is_colocation_strategy_valid(strategy) {
        return Err("invalid colocation strategy");
    }
    if strategy.enable != Some(true) {
        return Err("colocation disabled");
    }
    Ok(NodeMetricCollectPolicy {
        aggregate_duration_seconds: strategy.metric_aggregate_duration_seconds,
        report_interval_seconds: strategy.metric_report_interval_seconds,
        node_aggregate_policy: strategy.metric_aggregate_policy.clone(),
        node_memory_collect_policy: strategy.metric_memory_collect_policy.clone(),
    })
}

/// Upstream's spec for a new NodeMetric when the strategy gives none: 300 s
/// aggregation reported every 60 s.
pub fn default_spec() -> NodeMetricSpec {
    NodeMetricSpec {
        collect_policy: Some(NodeMetricCollectPolicy {
            aggregate_duration_seconds: Some(300),
            report_interval_seconds: Some(60),
            node_aggregate_policy: None,
            node_memory_collect_policy: None,
        }),
    }
}

/// What to do about one node's NodeMetric.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeMetricAction {
    None,
    /// Create with this spec; the shell adds the owner reference to the Node.
    Create(NodeMetricSpec),
    /// Replace the spec of the existing object.
    UpdateSpec(NodeMetricSpec),
    Delete(String),
}

pub fn reconcile_node_metric(
    name: &str,
    node: Option<&Node>,
    existing: Option<&NodeMetric>,
    colocation: Option<&NodeColocation>,
) -> NodeMetricAction {
    let policy = colocation.and_then(|c| collect_policy(c).ok());
    match (node, existing) {
        (None, None) => NodeMetricAction::None,
        (None, Some(_)) => NodeMetricAction::Delete(name.to_owned()),
        (Some(_), None) => NodeMetricAction::Create(match policy {
            Some(policy) => NodeMetricSpec {
                collect_policy: Some(policy),
            },
            None => default_spec(),
        }),
        (Some(_), Some(existing)) => match policy {
            Some(policy) if existing.spec.collect_policy.as_ref() != Some(&policy) => {
                NodeMetricAction::UpdateSpec(NodeMetricSpec {
                    collect_policy: Some(policy),
                })
            }
            _ => NodeMetricAction::None,
        },
    }
}
