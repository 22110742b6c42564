//! The hooks (one file each, named after upstream's) and the registry that
//! turns feature gates into the dispatcher's hook list.
//!
//! | hook | default | stages | needs |
//! |---|---|---|---|
//! | BatchResource | on | PreRunPodSandbox, PreCreateContainer, PreUpdateContainerResources | cpu, memory |
//! | CPUNormalization | off | PreRunPodSandbox, PreCreateContainer, PreUpdateContainerResources | cpu |
//! | CPUSetAllocator | on | PreRunPodSandbox, PreCreateContainer, PreUpdateContainerResources | cpuset |
//! | CoreSched | off | PostStartContainer (+ QoS tiers) | cpu.idle and/or core scheduling |
//! | GPUEnvInject | off | PreCreateContainer | — |
//! | GroupIdentity | on | PreRunPodSandbox | group identity |
//! | OOMScoreAdj | off | PreCreateContainer, PostStartContainer | — |
//! | RDMADeviceInject | off | PreCreateContainer (NRI only carries devices) | — |
//! | Resctrl | off | PreRunPodSandbox, PreCreateContainer, PostStartContainer, PreRemoveRunPodSandbox, PostStopPodSandbox | resctrl |

pub mod batchresource;
pub mod coresched;
pub mod cpumath;
pub mod cpunormalization;
pub mod cpuset;
pub mod gpu;
pub mod groupidentity;
pub mod oomscoreadj;
pub mod rdma;
pub mod resctrl;

use std::collections::BTreeMap;
use std::sync::Arc;

use super::protocol::Hook;

/// Per-hook settings from flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookOptions {
    /// Upstream `--disable-unset-cpu-quota`: keep the CFS quota of
    /// cpuset-bound containers.
    pub disable_unset_cpu_quota: bool,
    /// The host's /sys (`--sys-root-dir`): RDMADeviceInject finds the
    /// uverbs devices of PCI functions there.
    pub sys_root: std::path::PathBuf,
}

impl Default for HookOptions {
    fn default() -> Self {
        Self {
            disable_unset_cpu_quota: false,
            sys_root: "/sys/".into(),
        }
    }
}

/// Every hook with its upstream feature-gate default.
pub fn all_hooks(options: &HookOptions) -> Vec<(Arc<dyn Hook>, bool)> {
    vec![
        (Arc::new(batchresource::BatchResource), true),
        (Arc::new(cpunormalization::CpuNormalization), false),
        (
            Arc::new(cpuset::CpuSetAllocator {
                disable_unset_cpu_quota: options.disable_unset_cpu_quota,
            }),
            true,
        ),
        (Arc::new(coresched::CoreSched), false),
        (Arc::new(gpu::GpuEnvInject), false),
        (Arc::new(groupidentity::GroupIdentity), true),
        (Arc::new(oomscoreadj::OomScoreAdj), false),
        (
            Arc::new(rdma::RdmaDeviceInject::with_sys_root(&options.sys_root)),
            false,
        ),
        (Arc::new(resctrl::ResctrlHook), false),
    ]
}

// The parser moved to `crate::features` (one registry for every koordlet part);
// re-exported for callers of the old path.
pub use crate::features::{FeatureGateError, parse_feature_gates};

/// Applies gate overrides to the defaults of [`all_hooks`].
pub fn gated_hooks(
    options: &HookOptions,
    gates: &BTreeMap<String, bool>,
) -> Vec<(Arc<dyn Hook>, bool)> {
    all_hooks(options)
        .into_iter()
        .map(|(hook, default)| {
            let enabled = gates.get(hook.name()).copied().unwrap_or(default);
            (hook, enabled)
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use apis::extension::{ExtendedResourceContainerSpec, ExtendedResourceSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use crate::runtimehooks::protocol::*;
    use crate::runtimehooks::rules::NodeRules;
    use crate::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

    /// Capabilities of an empty node (nothing supported), for tests to
    /// switch on what they need.
    pub fn bare_caps() -> crate::capabilities::NodeCapabilities {
        let empty = std::path::Path::new("/nonexistent-koordlet-runtimehooks-test");
        crate::capabilities::detect(&crate::system::SystemArgs::under(empty))
    }

    pub fn env_with(rules: NodeRules) -> HookEnv {
        HookEnv {
            layout: CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup"),
            rules: Arc::new(rules),
            features: NodeFeatures::default(),
        }
    }

    pub fn pod(qos: &str, tier: &str, annotations: &[(&str, &str)]) -> PodContext {
        let mut labels = BTreeMap::new();
        if !qos.is_empty() {
            labels.insert("koordinator.sh/qosClass".to_string(), qos.to_string());
        }
        PodContext {
            meta: PodMeta {
                namespace: "default".into(),
                name: "p".into(),
                uid: "uid-1".into(),
            },
            labels,
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            cgroup_parent: match tier {
                "" => "/kubepods/poduid-1".to_string(),
                tier => format!("/kubepods/{tier}/poduid-1"),
            },
            ..PodContext::default()
        }
    }

    pub fn container(pod: PodContext, name: &str) -> ContainerContext {
        ContainerContext {
            pod,
            container: ContainerMeta {
                name: name.into(),
                id: "containerd://abc".into(),
                ..ContainerMeta::default()
            },
            ..ContainerContext::default()
        }
    }

    /// (container, batch-cpu request, batch-cpu limit, batch-memory limit)
    pub type BatchRow<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<&'a str>);

    pub fn batch_spec(containers: &[BatchRow<'_>]) -> ExtendedResourceSpec {
        let mut spec = ExtendedResourceSpec::default();
        for (name, cpu_request, cpu_limit, memory_limit) in containers {
            let mut c = ExtendedResourceContainerSpec::default();
            if let Some(v) = cpu_request {
                c.requests
                    .insert("kubernetes.io/batch-cpu".into(), Quantity(v.to_string()));
            }
            if let Some(v) = cpu_limit {
                c.limits
                    .insert("kubernetes.io/batch-cpu".into(), Quantity(v.to_string()));
            }
            if let Some(v) = memory_limit {
                c.limits
                    .insert("kubernetes.io/batch-memory".into(), Quantity(v.to_string()));
            }
            spec.containers.insert(name.to_string(), c);
        }
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_gates_override_defaults() {
        let gates = parse_feature_gates("GPUEnvInject=true, BatchResource=false").unwrap();
        let hooks = gated_hooks(&HookOptions::default(), &gates);
        let enabled = |name: &str| hooks.iter().find(|(h, _)| h.name() == name).unwrap().1;
        assert!(enabled("GPUEnvInject"));
        assert!(!enabled("BatchResource"));
        assert!(enabled("CPUSetAllocator"));
        assert!(!enabled("OOMScoreAdj"));
        let gates =
            parse_feature_gates("GPUEnvInject=1,BatchResource=F,CoreSched=True,CPUSetAllocator=0")
                .unwrap();
        let hooks = gated_hooks(&HookOptions::default(), &gates);
        let enabled = |name: &str| hooks.iter().find(|(h, _)| h.name() == name).unwrap().1;
        assert!(enabled("GPUEnvInject") && enabled("CoreSched"));
        assert!(!enabled("BatchResource") && !enabled("CPUSetAllocator"));
        assert!(parse_feature_gates("GPUEnvInject=yes").is_err());
        assert!(parse_feature_gates("GPUEnvInject").is_err());
        assert!(parse_feature_gates("Other=true").is_err());
    }
}
