//! CoreSched: upstream's CPU QoS under the `coreSched` policy
//! (`resourceQOSStrategy.policies.cpuPolicy: coreSched`), in two parts
//! that need different kernel features:
//!
//! - **cgroup idle** (`cpu.idle`, kernel ≥ 5.15): each Kubernetes QoS tier
//!   directory gets `cpu.idle` = 1 when its class sets `schedIdle: 1`, else
//!   0 (BestEffort ← BE, Burstable ← LS, the kubepods root ← LSR when LSR's
//!   CPU QoS is enabled, else LS). Under any other policy every tier gets 0.
//!   Note: while a cgroup is idle the kernel pins its `cpu.shares` to the
//!   minimum and refuses writes to it; going back to 0 resets it to 1024.
//! - **core scheduling cookies** (`CONFIG_SCHED_CORE`): the processes of a
//!   pod whose class enables CPU QoS share one cookie per core-sched group,
//!   so pods of different groups never run on sibling hyper-threads at the
//!   same time. The group is the pod's `koordinator.sh/core-sched-group-id`
//!   label (empty: the "" group), the pod UID under the `exclusive` policy
//!   label, with `-expeller` appended when the class sets `coreExpeller`;
//!   the `none` policy label, a disabled class or another CPU QoS policy
//!   puts the processes back on the default cookie. SYSTEM pods are left
//!   alone (they keep the default cookie, as koordlet itself).
//!
//! The hook is active when the node has either feature; the missing part
//! is reported in the hook status (`degraded`) and decides nothing. Cookies
//! are decided for started containers (`PostStartContainer`, and each
//! reconcile round for app and sandbox containers) and applied by the
//! [`cookie::CookieManager`] the side-effect applier holds.

pub mod cookie;

use apis::extension::QoSClass;
use apis::slo::v1alpha1::{CoreSchedPolicy, core_sched_group_id, core_sched_policy};

use crate::runtimehooks::protocol::*;
use crate::runtimehooks::rules::{CpuQosPolicy, CpuQosRule, NodeRules, default_core_expeller};
use crate::system::cgroup::{CgroupResource, CgroupValue, ContainerId, QosTier};

/// Appended to the group of pods whose class expels idle pods.
pub const EXPELLER_GROUP_SUFFIX: &str = "-expeller";

pub struct CoreSched;

/// What the NodeSLO asks of one class under the `coreSched` policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreSchedParam {
    /// Pods of the class get a group cookie.
    pub pod_enabled: bool,
    /// Pods of the class use the `-expeller` group.
    pub expeller: bool,
    /// The class's QoS tier is an idle cgroup.
    pub cpu_idle: bool,
}

/// The parameters of `class` (all false under another policy).
pub fn class_param(rules: &NodeRules, class: QoSClass) -> CoreSchedParam {
    if rules.cpu_qos_policy != Some(CpuQosPolicy::CoreSched) {
        return CoreSchedParam::default();
    }
    let rule = rules
        .cpu_qos
        .get(&class)
        .copied()
        .unwrap_or_else(|| CpuQosRule {
            core_expeller: default_core_expeller(class),
            ..CpuQosRule::default()
        });
    CoreSchedParam {
        pod_enabled: rule.enable,
        expeller: rule.core_expeller,
        cpu_idle: rule.sched_idle == 1,
    }
}

/// The parameters of a Kubernetes QoS tier (and of pods without a
/// Koordinator class in it): Guaranteed follows LSR when LSR is enabled,
/// else LS; Burstable follows LS; BestEffort follows BE.
pub fn tier_param(rules: &NodeRules, tier: QosTier) -> CoreSchedParam {
    match tier {
        QosTier::Guaranteed => {
            let lsr = class_param(rules, QoSClass::LSR);
            if lsr.pod_enabled {
                lsr
            } else {
                class_param(rules, QoSClass::LS)
            }
        }
        QosTier::Burstable => class_param(rules, QoSClass::LS),
        QosTier::BestEffort => class_param(rules, QoSClass::BE),
    }
}

/// Whether any class has cookies on (upstream's node-level switch).
pub fn node_enabled(rules: &NodeRules) -> bool {
    [QoSClass::LSR, QoSClass::LS, QoSClass::BE]
        .into_iter()
        .any(|class| class_param(rules, class).pod_enabled)
}

/// What a pod's processes should carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CookieDecision {
    /// The cookie of this core-sched group.
    Group(String),
    /// The default cookie 0.
    Default,
}

/// The cookie decision for `pod`; `None` when the pod is left alone
/// (SYSTEM pods, or no NodeSLO known yet).
pub fn cookie_decision(pod: &PodContext, rules: &NodeRules) -> Option<CookieDecision> {
    rules.cpu_qos_policy?;
    let class = pod.qos_class();
    if class == QoSClass::System {
        return None;
    }
    let param = if !node_enabled(rules) {
        CoreSchedParam::default()
    } else {
        match class {
            QoSClass::LSE | QoSClass::LSR => class_param(rules, QoSClass::LSR),
            QoSClass::LS => class_param(rules, QoSClass::LS),
            QoSClass::BE => class_param(rules, QoSClass::BE),
            QoSClass::None | QoSClass::System => match pod.kube_qos_tier() {
                Some(tier) => tier_param(rules, tier),
                None => CoreSchedParam::default(),
            },
        }
    };
    let mut enabled = param.pod_enabled;
    let mut group = core_sched_group_id(&pod.labels).to_string();
    match core_sched_policy(&pod.labels) {
        CoreSchedPolicy::Exclusive => group.clone_from(&pod.meta.uid),
        CoreSchedPolicy::None => enabled = false,
        CoreSchedPolicy::Default => {}
    }
    if !enabled {
        return Some(CookieDecision::Default);
    }
    if param.expeller {
        group.push_str(EXPELLER_GROUP_SUFFIX);
    }
    Some(CookieDecision::Group(group))
}

impl Hook for CoreSched {
    fn name(&self) -> &'static str {
        "CoreSched"
    }
    fn description(&self) -> &'static str {
        "core scheduling cookies by pod group and cpu.idle of the QoS tiers (coreSched CPU QoS policy)"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[HookStage::PostStartContainer]
    }
    fn partial_capabilities(&self) -> &'static [(RequiredCapability, &'static str)] {
        &[
            (RequiredCapability::CpuIdle, "cpu.idle of the QoS tiers"),
            (RequiredCapability::CoreSched, "core scheduling cookies"),
        ]
    }

    fn qos_tier(
        &self,
        tier: QosTier,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        if !env.features.cpu_idle || env.rules.cpu_qos_policy.is_none() {
            return Ok(());
        }
        let idle = tier_param(&env.rules, tier).cpu_idle;
        out.cgroup_write(
            env.layout.qos_dir(tier),
            CgroupResource::CpuIdle,
            CgroupValue::Int(i64::from(idle)),
            "CoreSched: QoS tier cpu.idle",
        );
        Ok(())
    }

    fn container(
        &self,
        _stage: HookStage,
        container: &ContainerContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        if !env.features.core_sched || container.pids.is_empty() {
            return Ok(());
        }
        let uid = &container.pod.meta.uid;
        if uid.is_empty() || container.container.id.is_empty() {
            return Ok(());
        }
        let Some(decision) = cookie_decision(&container.pod, &env.rules) else {
            return Ok(());
        };
        let id = ContainerId::parse(&container.container.id)
            .map_err(|error| HookError::Invalid(format!("container id: {error}")))?;
        out.side_effects.push(SideEffect::CoreSchedCookie {
            container: cookie::container_key(uid, &id.id),
            group: match decision {
                CookieDecision::Group(group) => Some(group),
                CookieDecision::Default => None,
            },
            pids: container.pids.clone(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::dispatcher::HookDispatcher;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};
    use std::sync::Arc;

    fn slo_rules(spec: serde_json::Value) -> NodeRules {
        let slo: apis::slo::v1alpha1::NodeSLO =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}, "spec": spec}))
                .unwrap();
        let (rules, problems) = NodeRules::build(None, Some(&slo), None, None, None);
        assert!(problems.is_empty(), "{problems:?}");
        rules
    }

    /// Upstream's rule test shape: coreSched policy, LSR/LS enabled and
    /// expelling, BE enabled and idle.
    fn core_sched_rules() -> NodeRules {
        slo_rules(serde_json::json!({
            "resourceQOSStrategy": {
                "policies": {"cpuPolicy": "coreSched"},
                "lsrClass": {"cpuQOS": {"enable": true, "coreExpeller": true, "schedIdle": 0}},
                "lsClass": {"cpuQOS": {"enable": true, "coreExpeller": true, "schedIdle": 0}},
                "beClass": {"cpuQOS": {"enable": true, "coreExpeller": false, "schedIdle": 1}}
            }
        }))
    }

    fn labelled(mut pod: PodContext, labels: &[(&str, &str)]) -> PodContext {
        for (key, value) in labels {
            pod.labels.insert(key.to_string(), value.to_string());
        }
        pod
    }

    #[test]
    fn params_follow_the_policy_and_the_tiers() {
        let rules = core_sched_rules();
        assert!(node_enabled(&rules));
        assert_eq!(
            tier_param(&rules, QosTier::BestEffort),
            CoreSchedParam {
                pod_enabled: true,
                expeller: false,
                cpu_idle: true
            }
        );
        assert_eq!(
            tier_param(&rules, QosTier::Guaranteed),
            class_param(&rules, QoSClass::LSR)
        );
        assert!(tier_param(&rules, QosTier::Burstable).expeller);

        // The same classes under group identity: nothing.
        let mut group_identity = rules.clone();
        group_identity.cpu_qos_policy = Some(CpuQosPolicy::GroupIdentity);
        assert!(!node_enabled(&group_identity));
        assert_eq!(
            tier_param(&group_identity, QosTier::BestEffort),
            CoreSchedParam::default()
        );

        // Guaranteed follows LS when LSR is off; LS's coreExpeller
        // defaults to true (upstream's DefaultCPUQOS).
        let rules = slo_rules(serde_json::json!({
            "resourceQOSStrategy": {
                "policies": {"cpuPolicy": "coreSched"},
                "lsrClass": {"cpuQOS": {"enable": false}},
                "lsClass": {"cpuQOS": {"enable": true}}
            }
        }));
        assert_eq!(
            tier_param(&rules, QosTier::Guaranteed),
            CoreSchedParam {
                pod_enabled: true,
                expeller: true,
                cpu_idle: false
            }
        );
    }

    #[test]
    fn cookie_groups_follow_labels_policy_and_expeller() {
        let rules = core_sched_rules();
        let group = |pod: &PodContext| cookie_decision(pod, &rules);
        let be = labelled(
            pod("BE", "besteffort", &[]),
            &[("koordinator.sh/core-sched-group-id", "team-a")],
        );
        assert_eq!(group(&be), Some(CookieDecision::Group("team-a".into())));
        let ls = labelled(
            pod("LS", "burstable", &[]),
            &[("koordinator.sh/core-sched-group-id", "team-a")],
        );
        assert_eq!(
            group(&ls),
            Some(CookieDecision::Group("team-a-expeller".into()))
        );
        // No label: the "" group.
        assert_eq!(
            group(&pod("BE", "besteffort", &[])),
            Some(CookieDecision::Group(String::new()))
        );
        // Unlabelled Guaranteed pod: LSR's parameters.
        assert_eq!(
            group(&pod("", "", &[])),
            Some(CookieDecision::Group("-expeller".into()))
        );
        let exclusive = labelled(
            pod("BE", "besteffort", &[]),
            &[
                ("koordinator.sh/core-sched-group-id", "team-a"),
                ("koordinator.sh/core-sched-policy", "exclusive"),
            ],
        );
        assert_eq!(
            group(&exclusive),
            Some(CookieDecision::Group("uid-1".into()))
        );
        let opted_out = labelled(
            pod("LS", "burstable", &[]),
            &[("koordinator.sh/core-sched-policy", "none")],
        );
        assert_eq!(group(&opted_out), Some(CookieDecision::Default));
        assert_eq!(group(&pod("SYSTEM", "burstable", &[])), None);

        // BE disabled: BE pods go back to the default cookie.
        let mut rules = core_sched_rules();
        rules.cpu_qos.get_mut(&QoSClass::BE).unwrap().enable = false;
        assert_eq!(cookie_decision(&be, &rules), Some(CookieDecision::Default));
        // Another policy: every pod back on the default cookie.
        rules.cpu_qos_policy = Some(CpuQosPolicy::GroupIdentity);
        assert_eq!(cookie_decision(&ls, &rules), Some(CookieDecision::Default));
        // No NodeSLO yet: no decision at all.
        assert_eq!(cookie_decision(&ls, &NodeRules::default()), None);
    }

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

    fn started(pod: PodContext, pids: &[u32]) -> HookRequest {
        let mut container = container(pod, "main");
        container.pids = pids.to_vec();
        HookRequest::Container(container)
    }

    #[test]
    fn without_either_feature_the_hook_is_unsupported() {
        let caps = bare_caps();
        let metrics = crate::runtimehooks::metrics::HookMetrics::new("n");
        let dispatcher = dispatcher(&caps, &metrics);
        let status = &dispatcher.statuses()[0];
        assert!(status.implemented);
        let reason = status.unsupported.as_deref().unwrap();
        assert!(reason.contains("cpu.idle"), "{reason}");
        assert!(reason.contains("core scheduling"), "{reason}");
        assert_eq!(metrics.hook_state("CoreSched"), (0, 1));
        dispatcher.set_rules(core_sched_rules());
        assert!(dispatcher.run_qos_tier(QosTier::BestEffort).is_empty());
    }

    #[test]
    fn cpu_idle_alone_writes_the_tiers_and_reports_cookies_missing() {
        // This machine's kind of kernel: cpu.idle, no core scheduling.
        let mut caps = bare_caps();
        caps.cpu_idle = true;
        let metrics = crate::runtimehooks::metrics::HookMetrics::new("n");
        let dispatcher = dispatcher(&caps, &metrics);
        let status = &dispatcher.statuses()[0];
        assert_eq!(status.unsupported, None);
        assert_eq!(
            status.degraded,
            vec!["core scheduling cookies: the node lacks core scheduling".to_string()]
        );
        assert_eq!(metrics.hook_state("CoreSched"), (1, 1));

        // No NodeSLO yet: nothing is written.
        assert!(dispatcher.run_qos_tier(QosTier::BestEffort).is_empty());
        dispatcher.set_rules(core_sched_rules());
        let idle_of = |tier| match dispatcher.run_qos_tier(tier).side_effects.as_slice() {
            [
                SideEffect::CgroupWrite {
                    dir,
                    resource: CgroupResource::CpuIdle,
                    value: CgroupValue::Int(value),
                    ..
                },
            ] => (dir.display().to_string(), *value),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            idle_of(QosTier::BestEffort),
            ("kubepods/besteffort".into(), 1)
        );
        assert_eq!(
            idle_of(QosTier::Burstable),
            ("kubepods/burstable".into(), 0)
        );
        assert_eq!(idle_of(QosTier::Guaranteed), ("kubepods".into(), 0));
        // Cookies stay off: no effect for a started BE container.
        let out = dispatcher
            .run(
                HookStage::PostStartContainer,
                &started(pod("BE", "besteffort", &[]), &[42]),
            )
            .unwrap();
        assert!(out.side_effects.is_empty());

        // Group identity policy: the BE tier goes back to 0.
        let mut rules = core_sched_rules();
        rules.cpu_qos_policy = Some(CpuQosPolicy::GroupIdentity);
        dispatcher.set_rules(rules);
        assert_eq!(idle_of(QosTier::BestEffort).1, 0);
    }

    #[test]
    fn with_core_scheduling_started_containers_get_cookie_effects() {
        let mut caps = bare_caps();
        caps.core_sched = true;
        let metrics = crate::runtimehooks::metrics::HookMetrics::new("n");
        let dispatcher = dispatcher(&caps, &metrics);
        let status = &dispatcher.statuses()[0];
        assert_eq!(status.unsupported, None);
        assert_eq!(
            status.degraded,
            vec!["cpu.idle of the QoS tiers: the node lacks cpu.idle".to_string()]
        );
        dispatcher.set_rules(core_sched_rules());
        assert!(dispatcher.stages().contains(&HookStage::PostStartContainer));
        let out = dispatcher
            .run(
                HookStage::PostStartContainer,
                &started(
                    labelled(
                        pod("BE", "besteffort", &[]),
                        &[("koordinator.sh/core-sched-group-id", "g")],
                    ),
                    &[42, 43],
                ),
            )
            .unwrap();
        assert_eq!(
            out.side_effects,
            vec![SideEffect::CoreSchedCookie {
                container: "uid-1/abc".into(),
                group: Some("g".into()),
                pids: vec![42, 43],
            }]
        );
        // cpu.idle is missing: the tiers are left alone.
        assert!(dispatcher.run_qos_tier(QosTier::BestEffort).is_empty());
        // Without processes there is nothing to decide.
        let out = dispatcher
            .run(
                HookStage::PostStartContainer,
                &started(pod("BE", "besteffort", &[]), &[]),
            )
            .unwrap();
        assert!(out.side_effects.is_empty());
        // An opted-out pod is cleared.
        let out = dispatcher
            .run(
                HookStage::PostStartContainer,
                &started(
                    labelled(
                        pod("LS", "burstable", &[]),
                        &[("koordinator.sh/core-sched-policy", "none")],
                    ),
                    &[50],
                ),
            )
            .unwrap();
        assert!(matches!(
            out.side_effects.as_slice(),
            [SideEffect::CoreSchedCookie { group: None, .. }]
        ));
    }
}
