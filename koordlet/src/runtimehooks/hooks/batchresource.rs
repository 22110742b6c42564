//! BatchResource: cgroup values of BE pods from their batch resources
//! (`kubernetes.io/batch-cpu` in milli-cores, `kubernetes.io/batch-memory`
//! in bytes), taken from the extended-resource spec.
//!
//! - cpu.shares from the batch-cpu request (none → 2);
//! - CFS quota from the batch-cpu limit, divided by the node's CPU
//!   normalization ratio when above 1; no limit → -1; -1 as well while the
//!   NodeSLO suppresses BE with the `cfsQuota` policy;
//! - memory limit from the batch-memory limit; no limit → -1.
//!
//! Pod level sums the containers; one unlimited container makes the pod
//! unlimited, and so does a limit sum beyond what the kernel can hold
//! (i64); the request sum saturates. Pods that are not BE, or have no extended-resource spec
//! (absent or malformed annotation), are left alone.

use apis::extension::{BATCH_CPU, BATCH_MEMORY, ExtendedResourceContainerSpec, QoSClass};

use super::cpumath::{milli_cpu_to_quota, milli_cpu_to_shares, resource_value, scale_quota};
use crate::runtimehooks::protocol::*;

pub struct BatchResource;

const STAGES: &[HookStage] = &[
    HookStage::PreRunPodSandbox,
    HookStage::PreCreateContainer,
    HookStage::PreUpdateContainerResources,
];

fn container_resources(
    spec: &ExtendedResourceContainerSpec,
    env: &HookEnv,
) -> Result<LinuxResources, HookError> {
    let request = resource_value(&spec.requests, BATCH_CPU)?.unwrap_or(0);
    let cpu_limit = resource_value(&spec.limits, BATCH_CPU)?.unwrap_or(0);
    let memory_limit = resource_value(&spec.limits, BATCH_MEMORY)?.unwrap_or(0);
    let quota = if env.rules.be_cfs_quota_enabled {
        scale_quota(
            milli_cpu_to_quota(cpu_limit, env.rules.cfs_period_us),
            env.rules.cpu_normalization_ratio,
        )
    } else {
        -1
    };
    Ok(LinuxResources {
        cpu_shares: Some(milli_cpu_to_shares(request)),
        cpu_quota: Some(quota),
        memory_limit: Some(if memory_limit > 0 { memory_limit } else { -1 }),
        ..LinuxResources::default()
    })
}

/// The pod-level values (see the module doc), or `None` when the pod is
/// not a batch pod.
pub fn pod_resources(pod: &PodContext, env: &HookEnv) -> Result<Option<LinuxResources>, HookError> {
    if pod.qos_class() != QoSClass::BE {
        return Ok(None);
    }
    let Some(spec) = &pod.extended_resources else {
        return Ok(None);
    };
    // The values come from an annotation: sums saturate (requests) or, for
    // limits, a sum beyond i64 counts as no limit, never an overflow.
    let mut request = 0i64;
    let mut cpu_limit = Some(0i64);
    let mut memory_limit = Some(0i64);
    for container in spec.containers.values() {
        request = request.saturating_add(
            resource_value(&container.requests, BATCH_CPU)?
                .filter(|v| *v > 0)
                .unwrap_or(0),
        );
        let cpu = resource_value(&container.limits, BATCH_CPU)?.filter(|v| *v > 0);
        cpu_limit = cpu_limit.zip(cpu).and_then(|(a, b)| a.checked_add(b));
        let memory = resource_value(&container.limits, BATCH_MEMORY)?.filter(|v| *v > 0);
        memory_limit = memory_limit.zip(memory).and_then(|(a, b)| a.checked_add(b));
    }
    let quota = match (env.rules.be_cfs_quota_enabled, cpu_limit) {
        (true, Some(limit)) => scale_quota(
            milli_cpu_to_quota(limit, env.rules.cfs_period_us),
            env.rules.cpu_normalization_ratio,
        ),
        _ => -1,
    };
    Ok(Some(LinuxResources {
        cpu_shares: Some(milli_cpu_to_shares(request)),
        cpu_quota: Some(quota),
        memory_limit: Some(memory_limit.filter(|v| *v > 0).unwrap_or(-1)),
        ..LinuxResources::default()
    }))
}

impl Hook for BatchResource {
    fn name(&self) -> &'static str {
        "BatchResource"
    }
    fn description(&self) -> &'static str {
        "cgroup cpu shares, CFS quota and memory limit of batch pods from batch resources"
    }
    fn stages(&self) -> &'static [HookStage] {
        STAGES
    }
    fn required_capabilities(&self) -> &'static [RequiredCapability] {
        &[
            RequiredCapability::Controller("cpu"),
            RequiredCapability::Controller("memory"),
        ]
    }

    fn pod(
        &self,
        _stage: HookStage,
        pod: &PodContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        if let Some(resources) = pod_resources(pod, env)? {
            out.resources.merge_from(&resources);
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
        if container.pod.qos_class() != QoSClass::BE || container.container.sandbox {
            return Ok(());
        }
        let Some(spec) = container
            .pod
            .extended_resources
            .as_ref()
            .and_then(|spec| spec.containers.get(&container.container.name))
        else {
            return Ok(());
        };
        out.resources.merge_from(&container_resources(spec, env)?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::runtimehooks::rules::NodeRules;

    fn be_pod() -> PodContext {
        let mut pod = pod("BE", "besteffort", &[]);
        pod.extended_resources = Some(batch_spec(&[
            ("main", Some("500"), Some("1000"), Some("512Mi")),
            ("side", Some("250"), Some("500"), Some("256Mi")),
        ]));
        pod
    }

    #[test]
    fn be_pod_sums_batch_resources() {
        let env = env_with(NodeRules::default());
        let mut out = Adjustment::default();
        BatchResource
            .pod(HookStage::PreRunPodSandbox, &be_pod(), &env, &mut out)
            .unwrap();
        assert_eq!(out.resources.cpu_shares, Some(768));
        assert_eq!(out.resources.cpu_quota, Some(150_000));
        assert_eq!(out.resources.memory_limit, Some(768 * 1024 * 1024));
    }

    #[test]
    fn be_container_gets_its_own_batch_resources() {
        let env = env_with(NodeRules::default());
        let mut out = Adjustment::default();
        let c = container(be_pod(), "main");
        BatchResource
            .container(HookStage::PreCreateContainer, &c, &env, &mut out)
            .unwrap();
        assert_eq!(out.resources.cpu_shares, Some(512));
        assert_eq!(out.resources.cpu_quota, Some(100_000));
        assert_eq!(out.resources.memory_limit, Some(512 * 1024 * 1024));
    }

    #[test]
    fn unlimited_container_makes_pod_unlimited_and_cfs_policy_unsets_quota() {
        let mut pod = pod("BE", "besteffort", &[]);
        pod.extended_resources = Some(batch_spec(&[
            ("main", Some("500"), Some("1000"), Some("1Gi")),
            ("side", Some("500"), None, None),
        ]));
        let env = env_with(NodeRules::default());
        let mut out = Adjustment::default();
        BatchResource
            .pod(HookStage::PreRunPodSandbox, &pod, &env, &mut out)
            .unwrap();
        assert_eq!(out.resources.cpu_quota, Some(-1));
        assert_eq!(out.resources.memory_limit, Some(-1));
        assert_eq!(out.resources.cpu_shares, Some(1024));

        let env = env_with(NodeRules {
            be_cfs_quota_enabled: false,
            ..NodeRules::default()
        });
        let mut out = Adjustment::default();
        BatchResource
            .container(
                HookStage::PreCreateContainer,
                &container(be_pod(), "main"),
                &env,
                &mut out,
            )
            .unwrap();
        assert_eq!(out.resources.cpu_quota, Some(-1));
        assert_eq!(out.resources.cpu_shares, Some(512));
    }

    #[test]
    fn huge_annotation_values_do_not_overflow() {
        // 8Ei is 2^63 bytes: one past i64::MAX on its own; two of them, or
        // two 4Ei, overflow any plain sum.
        let env = env_with(NodeRules::default());
        for (memory, cpu) in [("8Ei", "9223372036854775807"), ("4Ei", "5e18")] {
            let mut huge = pod("BE", "besteffort", &[]);
            huge.extended_resources = Some(batch_spec(&[
                ("main", Some(cpu), Some(cpu), Some(memory)),
                ("side", Some(cpu), Some(cpu), Some(memory)),
            ]));
            let mut out = Adjustment::default();
            BatchResource
                .pod(HookStage::PreRunPodSandbox, &huge, &env, &mut out)
                .unwrap_or_else(|err| panic!("{memory}/{cpu}: {err}"));
            assert_eq!(out.resources.memory_limit, Some(-1), "{memory}");
            assert_eq!(out.resources.cpu_quota, Some(-1), "{cpu}");
            assert_eq!(
                out.resources.cpu_shares,
                Some(crate::runtimehooks::hooks::cpumath::CPU_SHARES_MAX)
            );
            // Per container: no sum, the value itself (or its clamp).
            let mut out = Adjustment::default();
            BatchResource
                .container(
                    HookStage::PreCreateContainer,
                    &container(huge, "main"),
                    &env,
                    &mut out,
                )
                .unwrap();
            assert!(out.resources.memory_limit.is_some_and(|v| v != 0));
            assert!(out.resources.cpu_quota.is_some_and(|v| v > 0));
        }
        // Sums that fit are still exact.
        let mut fits = pod("BE", "besteffort", &[]);
        fits.extended_resources = Some(batch_spec(&[
            ("main", None, None, Some("2Ei")),
            ("side", None, None, Some("2Ei")),
        ]));
        let mut out = Adjustment::default();
        BatchResource
            .pod(HookStage::PreRunPodSandbox, &fits, &env, &mut out)
            .unwrap();
        assert_eq!(out.resources.memory_limit, Some(1i64 << 62));
    }

    #[test]
    fn normalization_ratio_scales_quota() {
        let env = env_with(NodeRules {
            cpu_normalization_ratio: Some(2.0),
            ..NodeRules::default()
        });
        let mut out = Adjustment::default();
        BatchResource
            .container(
                HookStage::PreCreateContainer,
                &container(be_pod(), "main"),
                &env,
                &mut out,
            )
            .unwrap();
        assert_eq!(out.resources.cpu_quota, Some(50_000));
    }

    #[test]
    fn non_be_or_missing_spec_is_left_alone() {
        let env = env_with(NodeRules::default());
        let mut ls = be_pod();
        ls.labels
            .insert("koordinator.sh/qosClass".into(), "LS".into());
        let mut out = Adjustment::default();
        BatchResource
            .pod(HookStage::PreRunPodSandbox, &ls, &env, &mut out)
            .unwrap();
        assert!(out.is_empty());
        // Malformed annotation: the context has no spec, so nothing changes.
        let mut malformed = pod(
            "BE",
            "besteffort",
            &[("node.koordinator.sh/extended-resource-spec", "{not json")],
        );
        assert!(
            malformed
                .load_extended_resources_from_annotations()
                .is_some()
        );
        BatchResource
            .pod(HookStage::PreRunPodSandbox, &malformed, &env, &mut out)
            .unwrap();
        BatchResource
            .container(
                HookStage::PreCreateContainer,
                &container(malformed, "main"),
                &env,
                &mut out,
            )
            .unwrap();
        assert!(out.is_empty());
    }
}
