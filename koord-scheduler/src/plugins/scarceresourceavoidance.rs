//! ScarceResourceAvoidance: keeps pods that do not need a scarce resource
//! (e.g. GPUs) away from the nodes that have it.

use crate::cache::{ClusterCache, NodeInfo, PodInfo};
use crate::config::{ConfigError, ScarceResourceAvoidanceArgs, parse_args};
use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin};

pub const NAME: &str = "ScarceResourceAvoidance";

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let args: ScarceResourceAvoidanceArgs = parse_args(NAME, args)?;
    Ok(Box::new(ScarceResourceAvoidance { args }))
}

/// See the module docs.
pub struct ScarceResourceAvoidance {
    args: ScarceResourceAvoidanceArgs,
}

impl Plugin for ScarceResourceAvoidance {
    fn name(&self) -> &'static str {
        NAME
    }

    fn scores(&self) -> bool {
        true
    }

    /// The share of the node's resource kinds that are scarce and unrequested,
    /// inverted: 100 when the pod leaves no scarce resource idle.
    fn score(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> i64 {
        // Resource kinds the node has but the pod does not ask for.
        let unrequested: Vec<&str> = node
            .allocatable
            .iter()
            // `pods` is a count, not a resource kind upstream compares.
            .filter(|(name, amount)| *amount > 0 && *name != "pods")
            .map(|(name, _)| name)
            .filter(|name| pod.requests.get(name) <= 0)
            .collect();
        let scarce = unrequested
            .iter()
            .filter(|name| self.args.resources.iter().any(|r| r == *name))
            .count() as i64;
        let total = unrequested.len() as i64;
        if total == 0 || scarce == 0 {
            return MAX_NODE_SCORE;
        }
        (total - scarce) * MAX_NODE_SCORE / total
    }
}
