//! CPUSetAllocator: container cpusets.
//!
//! - A pod whose `scheduling.koordinator.sh/resource-status` carries a
//!   cpuset (LSE/LSR bound by the scheduler) gets it on every container;
//!   its pod and container CFS quota is unset (-1) so bound CPUs are not
//!   throttled, unless `--disable-unset-cpu-quota`.
//! - Otherwise by QoS class: SYSTEM → the node's system-QoS CPUs (when
//!   set); LS → the LS share pool (which leaves out the CPUs the kubelet's
//!   static policy pinned); BestEffort-tier pods (BE) → untouched,
//!   cpusuppress owns them; other pods → the share pool, unless the kubelet
//!   runs the static CPU manager policy (then untouched).
//! - A malformed resource-status annotation is a hook error (the failure
//!   policy decides; with `Ignore` the container is created unchanged). So
//!   is a cpuset that is not exactly a kernel cpu list
//!   ([`CpuSet::parse_exact`]: no whitespace, signs or empty items, ids up
//!   to 65535) or that names CPUs the node does not have online: the pod
//!   writes that annotation itself, and the runtime would pass it on.
//!
//! Upstream narrows NUMA-aware share-pod cpusets to the allocated NUMA
//! nodes' pools; this build has no per-NUMA pools and uses the whole pool.

use apis::extension::{
    ANNOTATION_RESOURCE_STATUS, QoSClass, ResourceStatus, StringMap, get_resource_status,
};

use crate::runtimehooks::hostapp::HostAppContext;
use crate::runtimehooks::protocol::*;
use crate::system::cgroup::{CgroupResource, CgroupValue, QosTier};
use koord_common::units::CpuSet;

pub struct CpuSetAllocator {
    pub disable_unset_cpu_quota: bool,
}

const STAGES: &[HookStage] = &[
    HookStage::PreRunPodSandbox,
    HookStage::PreCreateContainer,
    HookStage::PreUpdateContainerResources,
];

/// The scheduler-assigned cpuset of a pod, if any, parsed exactly and, when
/// the node's online CPUs are known, within them.
pub fn bound_cpuset(
    annotations: &StringMap,
    online: Option<&CpuSet>,
) -> Result<Option<CpuSet>, HookError> {
    let malformed = |error: String| HookError::MalformedAnnotation {
        key: ANNOTATION_RESOURCE_STATUS.to_string(),
        error,
    };
    let status: Option<ResourceStatus> =
        get_resource_status(annotations).map_err(|error| malformed(error.to_string()))?;
    let Some(text) = status.map(|status| status.cpuset).filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    let cpuset = CpuSet::parse_exact(&text).map_err(|error| malformed(error.to_string()))?;
    if let Some(online) = online
        && !cpuset.is_subset(online)
    {
        return Err(malformed(format!(
            "cpuset {cpuset} names CPUs that are not online on this node ({online})"
        )));
    }
    Ok((!cpuset.is_empty()).then_some(cpuset))
}

/// The cpuset a container should have (see the module doc); `None` leaves
/// the runtime's value.
pub fn container_cpuset(
    container: &ContainerContext,
    env: &HookEnv,
) -> Result<Option<String>, HookError> {
    let pod = &container.pod;
    let rules = &env.rules;
    if let Some(cpuset) = bound_cpuset(&pod.annotations, rules.online_cpus.as_ref())? {
        return Ok(Some(cpuset.to_string()));
    }
    let share_pool = rules.ls_share_pool.as_ref().map(|pool| pool.to_string());
    match pod.qos_class() {
        QoSClass::System if rules.system_qos_cpus.is_some() => {
            Ok(rules.system_qos_cpus.as_ref().map(|cpus| cpus.to_string()))
        }
        QoSClass::LS => Ok(share_pool),
        _ if pod.kube_qos_tier() == Some(QosTier::BestEffort)
            || pod.qos_class() == QoSClass::BE =>
        {
            Ok(None)
        }
        _ if rules.kubelet_static_cpu_policy => Ok(None),
        _ => Ok(share_pool),
    }
}

impl Hook for CpuSetAllocator {
    fn name(&self) -> &'static str {
        "CPUSetAllocator"
    }
    fn description(&self) -> &'static str {
        "container cpuset from the scheduler's allocation or the QoS share pool"
    }
    fn stages(&self) -> &'static [HookStage] {
        STAGES
    }
    fn required_capabilities(&self) -> &'static [RequiredCapability] {
        &[RequiredCapability::Controller("cpuset")]
    }

    fn pod(
        &self,
        _stage: HookStage,
        pod: &PodContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        let online = env.rules.online_cpus.as_ref();
        if !self.disable_unset_cpu_quota && bound_cpuset(&pod.annotations, online)?.is_some() {
            out.resources.cpu_quota = Some(-1);
        }
        Ok(())
    }

    fn container(
        &self,
        _stage: HookStage,
        container: &ContainerContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        if let Some(cpuset) = container_cpuset(container, env)? {
            out.resources.cpuset_cpus = Some(cpuset);
        }
        let online = env.rules.online_cpus.as_ref();
        if !self.disable_unset_cpu_quota
            && bound_cpuset(&container.pod.annotations, online)?.is_some()
        {
            out.resources.cpu_quota = Some(-1);
        }
        Ok(())
    }

    /// An LS host application gets the LS share pool (upstream's rule: all
    /// share pools). Upstream answers other classes with an error every
    /// round; they are left alone here without one.
    fn host_app(
        &self,
        app: &HostAppContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        if app.qos != apis::extension::QoSClass::LS {
            return Ok(());
        }
        let Some(pool) = env.rules.ls_share_pool.as_ref().filter(|p| !p.is_empty()) else {
            return Ok(());
        };
        out.cgroup_write(
            app.cgroup_dir.clone(),
            CgroupResource::CpusetCpus,
            CgroupValue::CpuSet(pool.clone()),
            "CPUSetAllocator: LS host application share pool",
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::runtimehooks::rules::NodeRules;
    use koord_common::units::CpuSet;

    const STATUS: &str = "scheduling.koordinator.sh/resource-status";

    fn rules() -> NodeRules {
        NodeRules {
            ls_share_pool: Some("4-7".parse::<CpuSet>().unwrap()),
            system_qos_cpus: Some("0".parse::<CpuSet>().unwrap()),
            ..NodeRules::default()
        }
    }

    /// Upstream's `Test_cpusetRule_getHostAppCpuset` cases, as facts: an LS
    /// application gets the share pool, LSR none (upstream: an error).
    #[test]
    fn host_applications_get_the_ls_share_pool() {
        let hook = CpuSetAllocator {
            disable_unset_cpu_quota: false,
        };
        let app = |qos| HostAppContext {
            name: "test-app".into(),
            qos,
            cgroup_dir: "host-latency-sensitive/test-app".into(),
        };
        let decide_app = |qos, rules: NodeRules| {
            let mut out = Adjustment::default();
            hook.host_app(&app(qos), &env_with(rules), &mut out)
                .unwrap();
            out.side_effects
        };
        let effects = decide_app(apis::extension::QoSClass::LS, rules());
        assert_eq!(
            effects,
            vec![SideEffect::CgroupWrite {
                dir: "host-latency-sensitive/test-app".into(),
                resource: CgroupResource::CpusetCpus,
                value: CgroupValue::CpuSet("4-7".parse().unwrap()),
                reason: "CPUSetAllocator: LS host application share pool".into(),
            }]
        );
        assert!(decide_app(apis::extension::QoSClass::LSR, rules()).is_empty());
        assert!(decide_app(apis::extension::QoSClass::BE, rules()).is_empty());
        // The pool is not known yet: nothing.
        assert!(decide_app(apis::extension::QoSClass::LS, NodeRules::default()).is_empty());
    }

    fn decide(hook: &CpuSetAllocator, pod: PodContext, rules: NodeRules) -> Adjustment {
        let mut out = Adjustment::default();
        hook.container(
            HookStage::PreCreateContainer,
            &container(pod, "main"),
            &env_with(rules),
            &mut out,
        )
        .unwrap();
        out
    }

    #[test]
    fn bound_pod_gets_its_cpuset_and_no_quota() {
        let hook = CpuSetAllocator {
            disable_unset_cpu_quota: false,
        };
        let lsr = pod("LSR", "", &[(STATUS, r#"{"cpuset":"2-3"}"#)]);
        let out = decide(&hook, lsr.clone(), rules());
        assert_eq!(out.resources.cpuset_cpus.as_deref(), Some("2-3"));
        assert_eq!(out.resources.cpu_quota, Some(-1));
        let mut pod_out = Adjustment::default();
        hook.pod(
            HookStage::PreRunPodSandbox,
            &lsr,
            &env_with(rules()),
            &mut pod_out,
        )
        .unwrap();
        assert_eq!(pod_out.resources.cpu_quota, Some(-1));

        let keep_quota = CpuSetAllocator {
            disable_unset_cpu_quota: true,
        };
        let out = decide(&keep_quota, lsr, rules());
        assert_eq!(out.resources.cpuset_cpus.as_deref(), Some("2-3"));
        assert_eq!(out.resources.cpu_quota, None);
    }

    #[test]
    fn share_pools_by_qos() {
        let hook = CpuSetAllocator {
            disable_unset_cpu_quota: false,
        };
        assert_eq!(
            decide(&hook, pod("LS", "burstable", &[]), rules())
                .resources
                .cpuset_cpus
                .as_deref(),
            Some("4-7")
        );
        assert_eq!(
            decide(&hook, pod("SYSTEM", "burstable", &[]), rules())
                .resources
                .cpuset_cpus
                .as_deref(),
            Some("0")
        );
        assert_eq!(
            decide(&hook, pod("BE", "besteffort", &[]), rules())
                .resources
                .cpuset_cpus,
            None
        );
        assert_eq!(
            decide(&hook, pod("", "burstable", &[]), rules())
                .resources
                .cpuset_cpus
                .as_deref(),
            Some("4-7")
        );
        let static_policy = NodeRules {
            kubelet_static_cpu_policy: true,
            ..rules()
        };
        assert_eq!(
            decide(&hook, pod("", "", &[]), static_policy)
                .resources
                .cpuset_cpus,
            None
        );
        // No pool known yet: leave the runtime's value.
        assert_eq!(
            decide(&hook, pod("LS", "burstable", &[]), NodeRules::default())
                .resources
                .cpuset_cpus,
            None
        );
        assert_eq!(
            decide(&hook, pod("LS", "burstable", &[]), rules())
                .resources
                .cpu_quota,
            None
        );
    }

    #[test]
    fn kubelet_checkpoint_decides_pool_and_unlabelled_pods() {
        let hook = CpuSetAllocator {
            disable_unset_cpu_quota: false,
        };
        let online: CpuSet = "0-3".parse().unwrap();
        let pinned: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "g", "namespace": "default", "uid": "u-g"}
        }))
        .unwrap();
        let rules_for = |policy: &str| {
            let checkpoint = serde_json::from_value(serde_json::json!({
                "policyName": policy,
                "entries": {"u-g": {"main": "1"}}
            }))
            .unwrap();
            let (rules, problems) = NodeRules::build(
                None,
                None,
                Some(std::slice::from_ref(&pinned)),
                Some(&online),
                Some(&checkpoint),
            );
            assert!(problems.is_empty(), "{problems:?}");
            rules
        };
        let cpuset =
            |pod: PodContext, rules: NodeRules| decide(&hook, pod, rules).resources.cpuset_cpus;
        // Static: LS avoids the pinned CPU; unlabelled pods keep the kubelet's cpuset.
        assert_eq!(
            cpuset(pod("LS", "burstable", &[]), rules_for("static")).as_deref(),
            Some("0,2-3")
        );
        assert_eq!(cpuset(pod("", "", &[]), rules_for("static")), None);
        // None: nothing pinned, unlabelled pods share the whole pool.
        assert_eq!(
            cpuset(pod("", "burstable", &[]), rules_for("none")).as_deref(),
            Some("0-3")
        );
    }

    /// Issue 16: the pod writes this annotation; the runtime would pass a
    /// value on as is.
    #[test]
    fn cpusets_outside_the_online_cpus_or_not_exact_are_errors() {
        let hook = CpuSetAllocator {
            disable_unset_cpu_quota: false,
        };
        let online = NodeRules {
            online_cpus: Some("0-3".parse::<CpuSet>().unwrap()),
            ..rules()
        };
        let run = |cpuset: &str, rules: NodeRules| {
            let status = serde_json::json!({ "cpuset": cpuset }).to_string();
            let mut out = Adjustment::default();
            hook.container(
                HookStage::PreCreateContainer,
                &container(pod("LSR", "", &[(STATUS, &status)]), "main"),
                &env_with(rules),
                &mut out,
            )
            .map(|()| out.resources.cpuset_cpus)
        };
        assert_eq!(
            run("3,1-2", online.clone()).unwrap().as_deref(),
            Some("1-3")
        );
        let error = run("2-5", online.clone()).unwrap_err();
        assert!(error.to_string().contains("not online"), "{error}");
        // Before the node is known only the list itself is checked.
        assert_eq!(run("2-5", rules()).unwrap().as_deref(), Some("2-5"));
        for bad in ["2-3 ", "2;3", "+2", "3-2", "0-65536"] {
            assert!(run(bad, rules()).is_err(), "{bad:?}");
        }
        // The pod-level quota follows the same check.
        let mut out = Adjustment::default();
        let bad = pod("LSR", "", &[(STATUS, r#"{"cpuset":"2-5"}"#)]);
        assert!(
            hook.pod(
                HookStage::PreRunPodSandbox,
                &bad,
                &env_with(online),
                &mut out
            )
            .is_err()
        );
    }

    #[test]
    fn malformed_status_is_an_error_not_a_panic() {
        let hook = CpuSetAllocator {
            disable_unset_cpu_quota: false,
        };
        let bad = pod("LSR", "", &[(STATUS, "{\"cpuset\":")]);
        let mut out = Adjustment::default();
        let err = hook
            .container(
                HookStage::PreCreateContainer,
                &container(bad, "main"),
                &env_with(rules()),
                &mut out,
            )
            .unwrap_err();
        assert!(err.to_string().contains(STATUS), "{err}");
    }
}
