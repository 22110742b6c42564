//! The QoS runner's [`Evictor`](crate::qosmanager::framework::Evictor):
//! hands each request to a [`PodEvictor`] on the async runtime.

use std::path::PathBuf;
use std::sync::Arc;

use koord_common::ClusterOptions;
use koord_common::MetricsRegistry;

use crate::qosmanager::framework;
use crate::system::cgroup::{CgroupLayout, Controller, QosTier};

use super::{EvictionBackend, EvictionRequest, EvictorArgs, PodEvictor, PodRef};

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

/// The runner's evictor for the daemon's mode, its metrics registered.
///
/// Cluster mode (`cluster` set) stops the pod's containers through the
/// runtime unless `--only-evict-by-api`; with it, evicts through the API with a client built
/// from the same configuration as the connected one but without kube's own
/// 429 retries (see [`EvictionBackend::api_without_retries`]); when that
/// configuration cannot be loaded again the connected client is used.
/// Standalone mode kills only with `--evict-standalone-kill`, else logs.
pub async fn runner_evictor(
    cluster: Option<(ClusterOptions, kube::Client)>,
    node_name: &str,
    args: &EvictorArgs,
    layout: CgroupLayout,
    metrics: &MetricsRegistry,
) -> Arc<dyn framework::Evictor> {
    let backend = match cluster {
        Some((_, connected)) if !args.only_evict_by_api => EvictionBackend::RuntimeKill {
            stopper: Arc::new(super::runtime::CriStopper::new(
                super::runtime::CriEndpoints {
                    var_run_root: PathBuf::from(crate::system::VAR_RUN_ROOT),
                    containerd: args.containerd_endpoint.clone(),
                },
            )),
            events: Some(connected),
        },
        Some((options, connected)) => match super::api::non_retrying_client(&options).await {
            Ok(client) => EvictionBackend::Api(client),
            Err(reason) => {
                tracing::warn!(reason = %reason, "evictions use the shared API client, which retries 429 answers itself");
                EvictionBackend::Api(connected)
            }
        },
        None if args.standalone_kill => EvictionBackend::Kill,
        None => EvictionBackend::LogOnly,
    };
    tracing::info!(backend = ?backend, dry_run = args.dry_run, qps = args.qps, burst = args.burst, "pod evictor ready");
    let evictor = PodEvictor::new(backend, node_name, args);
    evictor.register_metrics(metrics);
    Arc::new(QosEvictor::new(
        evictor,
        layout,
        tokio::runtime::Handle::current(),
    ))
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
        containers: request.container_ids.clone(),
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

    fn recently_refused(&self) -> std::collections::HashSet<String> {
        self.evictor.recently_refused(std::time::Instant::now())
    }

    fn pending_window(&self) -> std::time::Duration {
        self.evictor.pending_window()
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
