//! CPUNormalization: CPU-share pods (LS, or no class and no bound cpuset)
//! get their CFS quota divided by the node's normalization ratio
//! (`node.koordinator.sh/cpu-normalization-ratio`) when it is above 1, so a
//! "core" means the same compute on faster CPUs. Quota that is unset or
//! unlimited is left alone; a missing or malformed ratio means no scaling.

use apis::extension::QoSClass;

use super::cpumath::scale_quota;
use super::cpuset::bound_cpuset;
use crate::runtimehooks::protocol::*;

pub struct CpuNormalization;

fn is_cpu_share_pod(pod: &PodContext) -> Result<bool, HookError> {
    Ok(match pod.qos_class() {
        QoSClass::LS => true,
        QoSClass::None => bound_cpuset(&pod.annotations, None)?.is_none(),
        _ => false,
    })
}

fn scaled(quota: Option<i64>, env: &HookEnv) -> Option<i64> {
    let quota = quota.filter(|q| *q > 0)?;
    let ratio = env.rules.cpu_normalization_ratio.filter(|r| *r > 1.0)?;
    Some(scale_quota(quota, Some(ratio)))
}

impl Hook for CpuNormalization {
    fn name(&self) -> &'static str {
        "CPUNormalization"
    }
    fn description(&self) -> &'static str {
        "CFS quota of CPU-share pods divided by the node's CPU normalization ratio"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[
            HookStage::PreRunPodSandbox,
            HookStage::PreCreateContainer,
            HookStage::PreUpdateContainerResources,
        ]
    }
    fn required_capabilities(&self) -> &'static [RequiredCapability] {
        &[RequiredCapability::Controller("cpu")]
    }

    fn pod(
        &self,
        _stage: HookStage,
        pod: &PodContext,
        env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        if is_cpu_share_pod(pod)?
            && let Some(quota) = scaled(pod.resources.cpu_quota, env)
        {
            out.resources.cpu_quota = Some(quota);
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
        if is_cpu_share_pod(&container.pod)?
            && let Some(quota) = scaled(container.resources.cpu_quota, env)
        {
            out.resources.cpu_quota = Some(quota);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::runtimehooks::rules::NodeRules;

    #[test]
    fn scales_cpu_share_pods_only() {
        let env = env_with(NodeRules {
            cpu_normalization_ratio: Some(1.25),
            ..NodeRules::default()
        });
        let mut ls = container(pod("LS", "burstable", &[]), "main");
        ls.resources.cpu_quota = Some(200_000);
        let mut out = Adjustment::default();
        CpuNormalization
            .container(HookStage::PreCreateContainer, &ls, &env, &mut out)
            .unwrap();
        assert_eq!(out.resources.cpu_quota, Some(160_000));

        let mut lsr = container(
            pod(
                "",
                "",
                &[(
                    "scheduling.koordinator.sh/resource-status",
                    r#"{"cpuset":"1"}"#,
                )],
            ),
            "main",
        );
        lsr.resources.cpu_quota = Some(200_000);
        let mut out = Adjustment::default();
        CpuNormalization
            .container(HookStage::PreCreateContainer, &lsr, &env, &mut out)
            .unwrap();
        assert!(out.is_empty());

        let mut unlimited = ls.clone();
        unlimited.resources.cpu_quota = Some(-1);
        CpuNormalization
            .container(HookStage::PreCreateContainer, &unlimited, &env, &mut out)
            .unwrap();
        assert!(out.is_empty());

        let no_ratio = env_with(NodeRules::default());
        CpuNormalization
            .container(HookStage::PreCreateContainer, &ls, &no_ratio, &mut out)
            .unwrap();
        assert!(out.is_empty());
    }
}
