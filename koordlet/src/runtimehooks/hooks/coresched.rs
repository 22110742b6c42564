//! CoreSched: Linux core-scheduling cookies for pods that opt in (needs a
//! kernel with `prctl(PR_SCHED_CORE)`).
//!
//! This build gates and reports the hook but assigns no cookies: cookie
//! management (upstream's per-group cookie cache and task relinking) is not
//! implemented. So the hook declares itself not implemented
//! ([`Hook::not_implemented`]) and the dispatcher keeps it inactive on
//! **every** node, including kernels with core scheduling: it never claims
//! support it does not give. The start-up log, the hook status and
//! `koordlet_runtime_hook_implemented{hook="CoreSched"}=0` say "not
//! implemented", distinct from `supported=0` with `implemented=1`, which
//! means the node lacks a capability.

use crate::runtimehooks::protocol::*;

pub struct CoreSched;

impl Hook for CoreSched {
    fn name(&self) -> &'static str {
        "CoreSched"
    }
    fn description(&self) -> &'static str {
        "core scheduling cookies by pod group (not implemented: gated and reported only)"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[HookStage::PreRunPodSandbox, HookStage::PreCreateContainer]
    }
    fn required_capabilities(&self) -> &'static [RequiredCapability] {
        &[RequiredCapability::CoreSched]
    }
    fn not_implemented(&self) -> Option<&'static str> {
        Some("core scheduling cookies are not assigned (no cookie management)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};
    use std::sync::Arc;

    fn dispatcher(
        caps: &crate::capabilities::NodeCapabilities,
        metrics: &crate::runtimehooks::metrics::HookMetrics,
    ) -> HookDispatcher {
        HookDispatcher::new(
            vec![(Arc::new(CoreSched) as Arc<dyn Hook>, true)],
            caps,
            CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
            FailurePolicyConfig::default(),
        )
        .with_metrics(metrics.clone())
    }

    #[test]
    fn unsupported_without_core_scheduling_and_changes_nothing() {
        let caps = bare_caps();
        assert!(!caps.core_sched);
        let metrics = crate::runtimehooks::metrics::HookMetrics::new("n");
        let dispatcher = dispatcher(&caps, &metrics);
        let status = &dispatcher.statuses()[0];
        let reason = status.unsupported.as_deref().unwrap();
        assert!(reason.contains("not implemented"), "{reason}");
        assert!(reason.contains("core scheduling"), "{reason}");
        assert!(!status.implemented);
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

    #[test]
    fn a_kernel_with_core_scheduling_does_not_make_it_supported() {
        let mut caps = bare_caps();
        caps.core_sched = true;
        let metrics = crate::runtimehooks::metrics::HookMetrics::new("n");
        let dispatcher = dispatcher(&caps, &metrics);
        let status = &dispatcher.statuses()[0];
        assert!(status.enabled);
        assert!(!status.implemented);
        let reason = status.unsupported.as_deref().unwrap();
        assert!(reason.starts_with("not implemented"), "{reason}");
        assert!(!reason.contains("lacks"), "{reason}");
        assert!(!dispatcher.is_active("CoreSched"));
        assert!(!dispatcher.stages().contains(&HookStage::PreRunPodSandbox));
        // supported=0 and implemented=0: not a kernel problem.
        assert_eq!(metrics.hook_state("CoreSched"), (0, 0));
        let request = HookRequest::Pod(pod("LS", "burstable", &[]));
        assert!(
            dispatcher
                .run(HookStage::PreRunPodSandbox, &request)
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            metrics.calls("CoreSched", HookStage::PreRunPodSandbox, true),
            0
        );
    }
}
