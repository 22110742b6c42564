//! NodeResourcesFit for the Koordinator batch and mid resources:
//! batch-cpu/batch-memory and mid-cpu/mid-memory against node allocatable,
//! counting bound and assumed pods. kube-scheduler checks these too (they
//! are `kubernetes.io/` scalar resources, which an extender may not declare
//! as managed); this check also counts the pods the extender has assumed
//! but the watch has not confirmed yet, and is what `simulate` runs.

use apis::extension::resource::{BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY};

use crate::cache::{ClusterCache, NodeInfo, PodInfo};
use crate::config::ConfigError;
use crate::framework::{CycleState, Plugin, Rejection};

pub const NAME: &str = "NodeResourcesFit";

/// The resources this plugin checks.
pub const CHECKED_RESOURCES: [&str; 4] = [BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY];
/// Slots of [`CHECKED_RESOURCES`] in [`crate::resources::KNOWN_RESOURCES`]:
/// the filter runs for every node, so it reads slots instead of matching names.
const CHECKED_SLOTS: [usize; 4] = [3, 4, 5, 6];

pub fn build(_args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    Ok(Box::new(NodeResourcesFit))
}

/// See the module docs.
#[derive(Clone)]
pub struct NodeResourcesFit;

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        _cache: &ClusterCache,
        _state: &CycleState,
    ) -> Result<(), Rejection> {
        let mut insufficient = Vec::new();
        for (name, slot) in CHECKED_RESOURCES.into_iter().zip(CHECKED_SLOTS) {
            let request = pod.requests.slot(slot);
            if request <= 0 {
                continue;
            }
            let free = node.allocatable.slot(slot) - node.requested.slot(slot);
            if request > free {
                insufficient.push(format!("Insufficient {name}"));
            }
        }
        if insufficient.is_empty() {
            Ok(())
        } else {
            Err(Rejection::unschedulable(insufficient.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::slot_of;

    #[test]
    fn checked_slots_match_the_known_resource_table() {
        for (name, slot) in CHECKED_RESOURCES.into_iter().zip(CHECKED_SLOTS) {
            assert_eq!(slot_of(name), Some(slot), "{name}");
        }
    }
}
