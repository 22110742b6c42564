//! NodeResourcesFit for the Koordinator resources kube-scheduler leaves to
//! the extender (`managedResources` with `ignoredByScheduler: true`):
//! batch-cpu/batch-memory and mid-cpu/mid-memory against node allocatable,
//! counting bound and assumed pods.

use apis::extension::resource::{BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY};

use crate::cache::{ClusterCache, NodeInfo, PodInfo};
use crate::config::ConfigError;
use crate::framework::{CycleState, Plugin, Rejection};

pub const NAME: &str = "NodeResourcesFit";

/// The resources this plugin checks.
pub const CHECKED_RESOURCES: [&str; 4] = [BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY];

pub fn build(_args: Option<&serde_json::Value>) -> Result<Box<dyn Plugin>, ConfigError> {
    Ok(Box::new(NodeResourcesFit))
}

/// See the module docs.
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
        for name in CHECKED_RESOURCES {
            let request = pod.requests.get(name);
            if request <= 0 {
                continue;
            }
            let free = node.allocatable.get(name) - node.requested.get(name);
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
