//! The QoS runner's [`Evictor`](crate::qosmanager::framework::Evictor):
//! hands each request to a [`PodEvictor`] on the async runtime.

use std::path::PathBuf;

use crate::qosmanager::framework;
use crate::system::cgroup::{CgroupLayout, Controller, QosTier};

use super::{EvictionRequest, PodEvictor, PodRef};

/// Adapts [`PodEvictor`] to the runner, which calls from a blocking thread.
#[derive(Debug, Clone)]
pub struct QosEvictor {
    evictor: PodEvictor,
    layout: CgroupLayout,
    runtime: tokio::runtime::Handle,
}

impl QosEvictor {
    pub fn new(evictor: PodEvictor, layout: CgroupLayout, runtime: tokio::runtime::Handle) -> Self {
        Self {
            evictor,
            layout,
            runtime,
        }
    }
}

/// Where the pod's processes can be: its directory in every QoS tier (only
/// one exists) of the cpu hierarchy (v1) or the unified tree (v2).
pub fn pod_cgroup_dirs(layout: &CgroupLayout, uid: &str) -> Vec<PathBuf> {
    QosTier::ALL
        .into_iter()
        .filter_map(|tier| layout.pod_dir(tier, uid).ok())
        .filter_map(|dir| layout.controller_path(dir, Controller::Cpu).ok())
        .collect()
}

/// The evictor's request for a runner request.
pub fn eviction_request_of(
    layout: &CgroupLayout,
    request: &framework::EvictionRequest,
) -> EvictionRequest {
    EvictionRequest {
        pod: PodRef {
            namespace: request.namespace.clone(),
            name: request.name.clone(),
            uid: request.uid.clone(),
        },
        trigger: request.reason.clone(),
        message: request.message.clone(),
        cgroup_dirs: pod_cgroup_dirs(layout, &request.uid),
    }
}

impl framework::Evictor for QosEvictor {
    fn evict(&self, request: framework::EvictionRequest) {
        let request = eviction_request_of(&self.layout, &request);
        let evictor = self.evictor.clone();
        self.runtime.spawn(async move {
            let outcome = evictor.evict(&request).await;
            tracing::debug!(pod = %request.pod, outcome = outcome.as_str(), "eviction finished");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::cgroup::{CgroupDriver, CgroupVersion};

    #[test]
    fn pod_dirs_cover_every_tier_in_the_cpu_hierarchy() {
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
        let dirs = pod_cgroup_dirs(&layout, "abc");
        assert_eq!(
            dirs,
            [
                "/sys/fs/cgroup/cpu/kubepods/podabc",
                "/sys/fs/cgroup/cpu/kubepods/burstable/podabc",
                "/sys/fs/cgroup/cpu/kubepods/besteffort/podabc",
            ]
            .map(PathBuf::from)
        );
        assert!(pod_cgroup_dirs(&layout, "../etc").is_empty());
    }
}
