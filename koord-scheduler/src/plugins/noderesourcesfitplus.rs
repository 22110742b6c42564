//! NodeResourcesFitPlus: per-resource LeastAllocated or MostAllocated
//! scoring with per-resource weights, over the resources the pod requests.

use crate::cache::{ClusterCache, NodeInfo, PodInfo};
use crate::config::{ConfigError, NodeResourcesFitPlusArgs, parse_args};
use crate::framework::{CycleState, MAX_NODE_SCORE, Plugin, Rejection};
use crate::resources::{SLOT_CPU, SLOT_MEMORY, slot_of};

pub const NAME: &str = "NodeResourcesFitPlus";

pub const LEAST_ALLOCATED: &str = "LeastAllocated";
pub const MOST_ALLOCATED: &str = "MostAllocated";

pub fn build(args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    let args: NodeResourcesFitPlusArgs = parse_args(NAME, args)?;
    for (name, spec) in &args.resources {
        if spec.scoring_type != LEAST_ALLOCATED && spec.scoring_type != MOST_ALLOCATED {
            return Err(ConfigError::InvalidArgs {
                plugin: NAME.into(),
                message: format!(
                    "resources[{name}].type {:?} is not LeastAllocated or MostAllocated",
                    spec.scoring_type
                ),
            });
        }
    }
    Ok(Box::new(NodeResourcesFitPlus { args }))
}

const TERMS: &str = "NodeResourcesFitPlus/terms";

/// One requested resource the args score, resolved once per pod.
struct Term {
    name: String,
    slot: Option<usize>,
    amount: i64,
    most_allocated: bool,
    weight: i64,
}

/// See the module docs.
#[derive(Clone)]
pub struct NodeResourcesFitPlus {
    args: NodeResourcesFitPlusArgs,
}

pub fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

pub fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

impl Plugin for NodeResourcesFitPlus {
    fn name(&self) -> &'static str {
        NAME
    }

    fn scores(&self) -> bool {
        true
    }

    fn pre_filter(
        &self,
        pod: &PodInfo,
        _cache: &ClusterCache,
        state: &mut CycleState,
    ) -> Result<(), Rejection> {
        let mut terms = Vec::new();
        for (name, amount) in pod.requests.iter() {
            if amount <= 0 {
                continue;
            }
            if let Some(spec) = self.args.resources.get(name) {
                terms.push(Term {
                    name: name.to_string(),
                    slot: slot_of(name),
                    amount,
                    most_allocated: spec.scoring_type == MOST_ALLOCATED,
                    weight: spec.weight,
                });
            }
        }
        state.write(TERMS, terms);
        Ok(())
    }

    fn score(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        state: &CycleState,
    ) -> i64 {
        let Some(terms) = state.read::<Vec<Term>>(TERMS) else {
            return 0;
        };
        let (mut node_score, mut weight_sum) = (0i64, 0i64);
        for term in terms {
            // cpu and memory use kube-scheduler's non-zero request accounting.
            let (allocatable, requested) = match term.slot {
                Some(SLOT_CPU) => (
                    node.allocatable.slot(SLOT_CPU),
                    node.non_zero_requested.0 + pod.non_zero_requests.0,
                ),
                Some(SLOT_MEMORY) => (
                    node.allocatable.slot(SLOT_MEMORY),
                    node.non_zero_requested.1 + pod.non_zero_requests.1,
                ),
                Some(slot) => (
                    node.allocatable.slot(slot),
                    node.requested.slot(slot) + term.amount,
                ),
                None => (
                    node.allocatable.get(&term.name),
                    node.requested.get(&term.name) + term.amount,
                ),
            };
            let score = if term.most_allocated {
                most_requested_score(requested, allocatable)
            } else {
                least_requested_score(requested, allocatable)
            };
            node_score += score * term.weight;
            weight_sum += term.weight;
        }
        if weight_sum == 0 {
            MAX_NODE_SCORE
        } else {
            node_score / weight_sum
        }
    }
}
