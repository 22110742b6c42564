//! ScarceResourceAvoidance: keeps pods that do not need a scarce resource
//! (e.g. GPUs) away from the nodes that have it.

use crate::cache::{ClusterCache, ClusterEvent, NodeInfo, ObjectKind, PodInfo};
use crate::config::{ConfigError, ScarceResourceAvoidanceArgs, parse_args};
use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin};
use crate::resources::{KNOWN_RESOURCES, Resources, slot_of};

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
    Ok(Box::new(ScarceResourceAvoidance {
        args,
        scarce_slots,
        extra_kinds: Vec::new(),
    }))
}

/// See the module docs.
pub struct ScarceResourceAvoidance {
    args: ScarceResourceAvoidanceArgs,
    scarce_slots: [bool; KNOWN_RESOURCES.len()],
    /// By `NodeInfo::index`, kept on Node events: the node's resource kinds
    /// without a fixed slot. Scoring a pod that asks for none of those kinds
    /// reads these two counts instead of the node's list of names, which is
    /// out of cache for most nodes of a large cluster.
    extra_kinds: Vec<Option<ExtraKinds>>,
}

/// Counts over a node's resource kinds without a fixed slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ExtraKinds {
    /// Kinds the node has (`amount > 0`).
    present: i64,
    /// Those of them that are scarce.
    scarce: i64,
}

impl ScarceResourceAvoidance {
    fn is_scarce_extra(&self, name: &str) -> bool {
        self.args.resources.iter().any(|r| r == name)
    }

    /// The counts over the kinds the node has and `requests` does not ask for.
    fn unrequested_extra_kinds(&self, node: &NodeInfo, requests: &Resources) -> ExtraKinds {
        let mut kinds = ExtraKinds {
            present: 0,
            scarce: 0,
        };
        for (name, amount) in node.allocatable.extras() {
            if amount > 0 && requests.get_extra(name) <= 0 {
                kinds.present += 1;
                kinds.scarce += i64::from(self.is_scarce_extra(name));
            }
        }
        kinds
    }
}

impl Plugin for ScarceResourceAvoidance {
    fn name(&self) -> &'static str {
        NAME
    }

    fn scores(&self) -> bool {
        true
    }

    fn on_event(&mut self, event: &ClusterEvent, cache: &ClusterCache) {
        let ClusterEvent::Object {
            kind: ObjectKind::Node,
            key,
        } = event
        else {
            return;
        };
        // A deleted node's index is never reused nor scored again.
        let Some(node) = cache.node(key) else {
            return;
        };
        if self.extra_kinds.len() <= node.index {
            self.extra_kinds.resize(node.index + 1, None);
        }
        self.extra_kinds[node.index] = Some(self.unrequested_extra_kinds(node, &Resources::new()));
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
        // A pod asking for no such kind leaves every one the node has idle.
        let kept = self.extra_kinds.get(node.index).copied().flatten();
        let extras = match kept {
            Some(kinds) if pod.requests.extras().next().is_none() => kinds,
            _ => self.unrequested_extra_kinds(node, &pod.requests),
        };
        unrequested += extras.present;
        scarce += extras.scarce;
        if unrequested == 0 || scarce == 0 {
            return MAX_NODE_SCORE;
        }
        (unrequested - scarce) * MAX_NODE_SCORE / unrequested
    }
}
