//! GPUEnvInject: `NVIDIA_VISIBLE_DEVICES` of a container from the minors of
//! the GPUs the scheduler allocated (`scheduling.koordinator.sh/device-allocated`,
//! key `gpu`), e.g. `0,1`. No annotation or no GPU → nothing; a malformed
//! annotation is a hook error (the failure policy decides). Upstream's
//! HAMi-core extras (memory/SM limits, library mounts) are not injected.

use apis::extension::{ANNOTATION_DEVICE_ALLOCATED, DEVICE_TYPE_GPU, get_device_allocations};

use crate::runtimehooks::protocol::*;

pub struct GpuEnvInject;

/// Upstream's environment variable.
pub const GPU_ALLOC_ENV: &str = "NVIDIA_VISIBLE_DEVICES";

impl Hook for GpuEnvInject {
    fn name(&self) -> &'static str {
        "GPUEnvInject"
    }
    fn description(&self) -> &'static str {
        "NVIDIA_VISIBLE_DEVICES from the scheduler's GPU allocation"
    }
    fn stages(&self) -> &'static [HookStage] {
        &[HookStage::PreCreateContainer]
    }

    fn container(
        &self,
        _stage: HookStage,
        container: &ContainerContext,
        _env: &HookEnv,
        out: &mut Adjustment,
    ) -> Result<(), HookError> {
        let allocations = get_device_allocations(&container.pod.annotations).map_err(|error| {
            HookError::MalformedAnnotation {
                key: ANNOTATION_DEVICE_ALLOCATED.to_string(),
                error: error.to_string(),
            }
        })?;
        let Some(gpus) = allocations
            .as_ref()
            .and_then(|all| all.get(DEVICE_TYPE_GPU))
            .filter(|gpus| !gpus.is_empty())
        else {
            return Ok(());
        };
        let minors: Vec<String> = gpus.iter().map(|gpu| gpu.minor.to_string()).collect();
        out.env.insert(GPU_ALLOC_ENV.to_string(), minors.join(","));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtimehooks::hooks::testutil::*;
    use crate::runtimehooks::rules::NodeRules;

    fn decide(annotations: &[(&str, &str)]) -> Result<Adjustment, HookError> {
        let mut out = Adjustment::default();
        GpuEnvInject
            .container(
                HookStage::PreCreateContainer,
                &container(pod("LS", "burstable", annotations), "main"),
                &env_with(NodeRules::default()),
                &mut out,
            )
            .map(|()| out)
    }

    #[test]
    fn minors_become_visible_devices() {
        let out = decide(&[(
            ANNOTATION_DEVICE_ALLOCATED,
            r#"{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"100"}},{"minor":3,"resources":{}}]}"#,
        )])
        .unwrap();
        assert_eq!(out.env.get(GPU_ALLOC_ENV).map(String::as_str), Some("0,3"));
        assert!(decide(&[]).unwrap().is_empty());
        assert!(
            decide(&[(
                ANNOTATION_DEVICE_ALLOCATED,
                r#"{"rdma":[{"minor":1,"resources":{}}]}"#
            )])
            .unwrap()
            .is_empty()
        );
        assert!(matches!(
            decide(&[(ANNOTATION_DEVICE_ALLOCATED, "[1,2")]),
            Err(HookError::MalformedAnnotation { .. })
        ));
    }
}
