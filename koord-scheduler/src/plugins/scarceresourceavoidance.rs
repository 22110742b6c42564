//! ScarceResourceAvoidance: keeps pods that do not need a scarce resource
//! (e.g. GPUs) away from the nodes that have it.

use crate::cache::{ClusterCache, ClusterEvent, NodeInfo, ObjectKind, PodInfo};
use crate::config::{ConfigError, ScarceResourceAvoidanceArgs, parse_args};
use crate::cow::CowVec;
use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin};
use crate::resources::{KNOWN_RESOURCES, Resources, slot_of};

pub const NAME: &str = "ScarceResourceAvoidance";

const PODS_SLOT: usize = KNOWN_RESOURCES.len() - 1;

// Fixed slots are kept as bits of a u16.
const _: () = assert!(KNOWN_RESOURCES.len() <= 16);

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let args: ScarceResourceAvoidanceArgs = parse_args(NAME, args)?;
    let mut scarce_slots = 0u16;
    for name in &args.resources {
        if let Some(slot) = slot_of(name) {
            scarce_slots |= 1 << slot;
        }
    }
    Ok(Box::new(ScarceResourceAvoidance {
        args,
        scarce_slots,
        node_kinds: CowVec::new(),
    }))
}

/// See the module docs.
#[derive(Clone)]
pub struct ScarceResourceAvoidance {
    args: ScarceResourceAvoidanceArgs,
    /// The scarce fixed-slot kinds, a bit per slot.
    scarce_slots: u16,
    /// By `NodeInfo::index`, kept on Node events: the node's resource kinds.
    /// Scoring reads this dense array instead of the node's own record and
    /// list of names, which are out of cache for most nodes of a large
    /// cluster (a pod asking for a kind without a fixed slot still reads them).
    /// Copy-on-write: a clone shares it, a write after it copies one chunk.
    node_kinds: CowVec<Option<NodeKinds>>,
}

/// Counts over a node's resource kinds without a fixed slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ExtraKinds {
    /// Kinds the node has (`amount > 0`).
    present: i64,
    /// Those of them that are scarce.
    scarce: i64,
}

/// What scoring reads of one node: the fixed-slot kinds it has (`pods`
/// left out) as a bit per slot, and the counts over its other kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeKinds {
    slots: u16,
    extras: ExtraKinds,
}

/// The fixed-slot kinds of `resources` with `amount > 0`, `pods` left out.
fn slot_bits(resources: &Resources) -> u16 {
    resources
        .known_slots()
        .filter(|(slot, amount)| *amount > 0 && *slot != PODS_SLOT)
        .fold(0, |bits, (slot, _)| bits | 1 << slot)
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
        if self.node_kinds.len() <= node.index {
            self.node_kinds.resize(node.index + 1, None);
        }
        let kinds = Some(NodeKinds {
            slots: slot_bits(&node.allocatable),
            extras: self.unrequested_extra_kinds(node, &Resources::new()),
        });
        if let Some(slot) = self.node_kinds.get_mut(node.index) {
            *slot = kinds;
        }
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
        let kept = self.node_kinds.get(node.index).copied().flatten();
        let slots = kept.map_or_else(|| slot_bits(&node.allocatable), |k| k.slots);
        let unrequested_slots = slots & !slot_bits(&pod.requests);
        // A pod asking for no kind without a fixed slot leaves every such
        // kind the node has idle.
        let extras = match kept {
            Some(kinds) if pod.requests.extras().next().is_none() => kinds.extras,
            _ => self.unrequested_extra_kinds(node, &pod.requests),
        };
        let unrequested = i64::from(unrequested_slots.count_ones()) + extras.present;
        let scarce =
            i64::from((unrequested_slots & self.scarce_slots).count_ones()) + extras.scarce;
        if unrequested == 0 || scarce == 0 {
            return MAX_NODE_SCORE;
        }
        (unrequested - scarce) * MAX_NODE_SCORE / unrequested
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::cache::Change;
    use crate::testutil::{self, PodSpec, t0};

    #[test]
    fn a_clone_keeps_answering_as_before_while_the_original_changes() {
        let mut cache = ClusterCache::new();
        let mut plugin = ScarceResourceAvoidance {
            args: ScarceResourceAvoidanceArgs {
                resources: vec!["nvidia.com/gpu".into()],
            },
            scarce_slots: 0,
            node_kinds: CowVec::new(),
        };
        let apply = |plugin: &mut ScarceResourceAvoidance, cache: &mut ClusterCache, object| {
            let event = cache.apply(Change::Upsert(object));
            plugin.on_event(&event, cache);
        };
        for object in [
            testutil::node("n1", &[("cpu", "8")]),
            testutil::pod(PodSpec {
                name: "probe",
                requests: &[("cpu", "1")],
                ..Default::default()
            }),
        ] {
            apply(&mut plugin, &mut cache, object);
        }
        let score = |plugin: &ScarceResourceAvoidance, cache: &ClusterCache| {
            let probe = cache.pod("default/probe").unwrap();
            let node = cache.node("n1").unwrap();
            let kinds = plugin.node_kinds.get(node.index).copied().flatten();
            let score = plugin.score(probe, node, cache, &CycleState::new(t0()));
            (score, kinds)
        };
        let before = score(&plugin, &cache);
        assert_eq!(before.0, MAX_NODE_SCORE);
        let (snapshot, snapshot_cache) = (plugin.clone(), cache.clone());

        // n1 gains GPUs in the original only.
        apply(
            &mut plugin,
            &mut cache,
            testutil::node("n1", &[("cpu", "8"), ("nvidia.com/gpu", "4")]),
        );
        assert_eq!(score(&plugin, &cache).0, 0);
        assert_eq!(score(&snapshot, &snapshot_cache), before);
    }
}
