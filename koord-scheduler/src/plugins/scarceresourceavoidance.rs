//! ScarceResourceAvoidance: keeps pods that do not need a scarce resource
//! (e.g. GPUs) away from the nodes that have it.

use crate::cache::{ClusterCache, NodeInfo, PodInfo};
use crate::config::{ConfigError, ScarceResourceAvoidanceArgs, parse_args};
use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin};
use crate::resources::{KNOWN_RESOURCES, slot_of};

pub const NAME: &str = "ScarceResourceAvoidance";

const PODS_SLOT: usize = KNOWN_RESOURCES.len() - 1;

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let args: ScarceResourceAvoidanceArgs = parse_args(NAME, args)?;
    let mut scarce_slots = [false; KNOWN_RESOURCES.len()];
    for name in &args.resources {
        if let Some(slot) = slot_of(name) {
            scarce_slots[slot] = true;
        }
    }
    Ok(Box::new(ScarceResourceAvoidance { args, scarce_slots }))
}

/// See the module docs.
pub struct ScarceResourceAvoidance {
    args: ScarceResourceAvoidanceArgs,
    scarce_slots: [bool; KNOWN_RESOURCES.len()],
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
        // Resource kinds the node has but the pod does not ask for; `pods` is
        // a count, not a resource kind upstream compares.
        let (mut unrequested, mut scarce) = (0i64, 0i64);
        for (slot, amount) in node.allocatable.known_slots() {
            if amount > 0 && slot != PODS_SLOT && pod.requests.slot(slot) <= 0 {
                unrequested += 1;
                if self.scarce_slots[slot] {
                    scarce += 1;
                }
            }
        }
        for (name, amount) in node.allocatable.extras() {
            if amount > 0 && pod.requests.get(name) <= 0 {
                unrequested += 1;
                if self.args.resources.iter().any(|r| r == name) {
                    scarce += 1;
                }
            }
        }
        if unrequested == 0 || scarce == 0 {
            return MAX_NODE_SCORE;
        }
        (unrequested - scarce) * MAX_NODE_SCORE / unrequested
    }
}
