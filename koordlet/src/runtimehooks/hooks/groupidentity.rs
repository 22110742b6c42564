//! GroupIdentity: `cpu.bvt_warp_ns` of pod and QoS-tier cgroups from the
//! NodeSLO CPU QoS (`groupIdentity` per class when `enable` is true and the
//! CPU QoS policy is `groupIdentity` or unset, else 0). Needs an Anolis kernel; elsewhere the dispatcher keeps it inactive
//! and reports it unsupported.
//!
//! Pod value: the pod's Koordinator class (LSE/LSR → LSR rule, LS, BE),
//! else by Kubernetes tier (Guaranteed → LSR, Burstable → LS, BestEffort
//! → BE). Tier directories: Burstable → LS, BestEffort → BE, the root → 0.

use apis::extension::QoSClass;

use crate::runtimehooks::protocol::*;
use crate::runtimehooks::rules::{CpuQosPolicy, NodeRules};
use crate::system::cgroup::{CgroupResource, CgroupValue, QosTier};

pub struct GroupIdentity;

fn class_value(rules: &NodeRules, class: QoSClass) -> i64 {
    // Under another CPU QoS policy (coreSched) group identity is reset.
    if matches!(
        rules.cpu_qos_policy,
        Some(CpuQosPolicy::CoreSched | CpuQosPolicy::Unknown)
    ) {
        return 0;
    }
    rules
        .cpu_qos
        .get(&class)
        .filter(|rule| rule.enable)
        .map(|rule| rule.group_identity)
        .unwrap_or(0)
}

/// The bvt value of a pod (see the module doc).
pub fn pod_bvt(pod: &PodContext, rules: &NodeRules) -> i64 {
    let class = match pod.qos_class() {
        QoSClass::LSE | QoSClass::LSR => QoSClass::LSR,
        QoSClass::LS => QoSClass::LS,
        QoSClass::BE => QoSClass::BE,
        QoSClass::System => QoSClass::System,
        QoSClass::None => match pod.kube_qos_tier() {
            Some(QosTier::Guaranteed) => QoSClass::LSR,
            Some(QosTier::Burstable) => QoSClass::LS,
            Some(QosTier::BestEffort) => QoSClass::BE,
            None => return 0,
        },
    };
    class_value(rules, class)
}

impl Hook for GroupIdentity {
    fn name(&self) -> &'static str {
        "GroupIdentity"
    }
    fn description(&self) -> &'static str {
        "cpu.bvt_warp_ns of pods and QoS tiers by QoS class"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[HookStage::PreRunPodSandbox]
    }
    fn required_capabilities(&self) -> &'static [RequiredCapability] {
        &[RequiredCapability::GroupIdentity]
    }

    fn pod(
        &self,
        _stage: HookStage,
        pod: &PodContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        let Some(dir) = pod.cgroup_dir(&env.layout) else {
            return Ok(());
        };
        let value = pod_bvt(pod, &env.rules);
        out.cgroup_write(
            dir,
            CgroupResource::CpuBvtWarpNs,
            CgroupValue::Int(value),
            "GroupIdentity: pod bvt",
        );
        Ok(())
    }

    /// A host application takes its class's value (LSE as LSR); SYSTEM and
    /// none get 0, as upstream's `getHostQOSBvtValue`.
    fn host_app(
        &self,
        app: &crate::runtimehooks::hostapp::HostAppContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        let value = match app.qos {
            QoSClass::LSE | QoSClass::LSR => class_value(&env.rules, QoSClass::LSR),
            QoSClass::LS => class_value(&env.rules, QoSClass::LS),
            QoSClass::BE => class_value(&env.rules, QoSClass::BE),
            QoSClass::System | QoSClass::None => 0,
        };
        out.cgroup_write(
            app.cgroup_dir.clone(),
            CgroupResource::CpuBvtWarpNs,
            CgroupValue::Int(value),
            "GroupIdentity: host application bvt",
        );
        Ok(())
    }

    fn qos_tier(
        &self,
        tier: QosTier,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        let value = match tier {
            QosTier::Guaranteed => 0,
            QosTier::Burstable => class_value(&env.rules, QoSClass::LS),
            QosTier::BestEffort => class_value(&env.rules, QoSClass::BE),
        };
        out.cgroup_write(
            env.layout.qos_dir(tier),
            CgroupResource::CpuBvtWarpNs,
            CgroupValue::Int(value),
            "GroupIdentity: QoS tier bvt",
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::dispatcher::HookDispatcher;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::runtimehooks::rules::CpuQosRule;

    #[test]
    fn bvt_by_class_and_tier() {
        let mut rules = NodeRules::default();
        rules.cpu_qos.insert(
            QoSClass::LSR,
            CpuQosRule {
                enable: true,
                group_identity: 2,
                ..CpuQosRule::default()
            },
        );
        rules.cpu_qos.insert(
            QoSClass::LS,
            CpuQosRule {
                enable: true,
                group_identity: 2,
                ..CpuQosRule::default()
            },
        );
        rules.cpu_qos.insert(
            QoSClass::BE,
            CpuQosRule {
                enable: true,
                group_identity: -1,
                ..CpuQosRule::default()
            },
        );
        assert_eq!(pod_bvt(&pod("BE", "besteffort", &[]), &rules), -1);
        // Host applications (upstream's Test_bvtPlugin_ruleUpdateCbForHostApp:
        // an LS app gets the LS value 2).
        let host_app = |qos| {
            let app = crate::runtimehooks::hostapp::HostAppContext {
                name: "test-app".into(),
                qos,
                cgroup_dir: "test-ls/test-app".into(),
            };
            let mut out = Adjustment::default();
            GroupIdentity
                .host_app(&app, &env_with(rules.clone()), &mut out)
                .unwrap();
            match out.side_effects.as_slice() {
                [
                    SideEffect::CgroupWrite {
                        dir,
                        resource,
                        value: CgroupValue::Int(v),
                        ..
                    },
                ] => {
                    assert_eq!(dir, std::path::Path::new("test-ls/test-app"));
                    assert_eq!(*resource, CgroupResource::CpuBvtWarpNs);
                    *v
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(host_app(QoSClass::LS), 2);
        assert_eq!(host_app(QoSClass::LSE), 2);
        assert_eq!(host_app(QoSClass::BE), -1);
        assert_eq!(host_app(QoSClass::System), 0);
        assert_eq!(host_app(QoSClass::None), 0);
        assert_eq!(pod_bvt(&pod("", "", &[]), &rules), 2);
        assert_eq!(pod_bvt(&pod("LSE", "", &[]), &rules), 2);
        rules.cpu_qos.insert(
            QoSClass::BE,
            CpuQosRule {
                enable: false,
                group_identity: -1,
                ..CpuQosRule::default()
            },
        );
        assert_eq!(pod_bvt(&pod("BE", "besteffort", &[]), &rules), 0);
        // The coreSched policy resets group identity.
        let mut core_sched = rules.clone();
        core_sched.cpu_qos_policy = Some(CpuQosPolicy::CoreSched);
        assert_eq!(pod_bvt(&pod("LS", "burstable", &[]), &core_sched), 0);
        assert_eq!(pod_bvt(&pod("LS", "burstable", &[]), &rules), 2);

        let env = env_with(rules);
        let mut out = Adjustment::default();
        GroupIdentity
            .pod(
                HookStage::PreRunPodSandbox,
                &pod("LS", "burstable", &[]),
                &env,
                &mut out,
            )
            .unwrap();
        assert_eq!(
            out.side_effects,
            vec![SideEffect::CgroupWrite {
                dir: "kubepods/burstable/poduid-1".into(),
                resource: CgroupResource::CpuBvtWarpNs,
                value: CgroupValue::Int(2),
                reason: "GroupIdentity: pod bvt".into(),
            }]
        );
    }

    #[test]
    fn unsupported_kernel_keeps_the_hook_inactive() {
        use crate::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};
        use std::sync::Arc;
        let caps = bare_caps();
        assert!(!caps.group_identity);
        let metrics = crate::runtimehooks::metrics::HookMetrics::new("n");
        let dispatcher = HookDispatcher::new(
            vec![(Arc::new(GroupIdentity) as Arc<dyn Hook>, true)],
            &caps,
            CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
            FailurePolicyConfig::default(),
        )
        .with_metrics(metrics.clone());
        let status = &dispatcher.statuses()[0];
        assert!(status.enabled);
        assert!(
            status
                .unsupported
                .as_deref()
                .unwrap_or_default()
                .contains("group identity")
        );
        // The kernel lacks it; the hook itself is implemented.
        assert!(status.implemented);
        assert_eq!(metrics.hook_state("GroupIdentity"), (0, 1));
        let out = dispatcher
            .run(
                HookStage::PreRunPodSandbox,
                &HookRequest::Pod(pod("LS", "burstable", &[])),
            )
            .unwrap();
        assert!(out.is_empty());
        assert!(dispatcher.stages().is_empty());
    }
}
