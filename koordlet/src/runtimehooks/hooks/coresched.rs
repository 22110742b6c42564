//! CoreSched: Linux core-scheduling cookies for pods that opt in. Needs a
//! kernel with `prctl(PR_SCHED_CORE)`; on other kernels (including this
//! build's test machines) the dispatcher keeps it inactive, reports it
//! unsupported (capability, `koordlet_runtime_hook_supported{hook="CoreSched"}=0`,
//! one log line) and it changes nothing.
//!
//! This build gates and reports the hook but assigns no cookies: cookie
//! management (upstream's per-group cookie cache and task relinking) is not
//! implemented yet, so even on a capable kernel the decision is empty.

use crate::runtimehooks::protocol::*;

pub struct CoreSched;

impl Hook for CoreSched {
    fn name(&self) -> &'static str {
        "CoreSched"
    }
    fn description(&self) -> &'static str {
        "core scheduling cookies by pod group (capability-gated)"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[HookStage::PreRunPodSandbox, HookStage::PreCreateContainer]
    }
    fn required_capabilities(&self) -> &'static [RequiredCapability] {
        &[RequiredCapability::CoreSched]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};
    use std::sync::Arc;

    #[test]
    fn unsupported_without_core_scheduling_and_changes_nothing() {
        let caps = bare_caps();
        assert!(!caps.core_sched);
        let metrics = crate::runtimehooks::metrics::HookMetrics::new("n");
        let dispatcher = HookDispatcher::new(
            vec![(Arc::new(CoreSched) as Arc<dyn Hook>, true)],
            &caps,
            CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
            FailurePolicyConfig::default(),
        )
        .with_metrics(metrics.clone());
        assert!(dispatcher.statuses()[0].unsupported.is_some());
        let request = HookRequest::Container(container(pod("LS", "burstable", &[]), "main"));
        assert!(
            dispatcher
                .run(HookStage::PreCreateContainer, &request)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            metrics.calls("CoreSched", HookStage::PreCreateContainer, true),
            0
        );
    }
}
