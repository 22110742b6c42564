//! Pod-level QoS overrides carried in pod annotations and labels (upstream
//! `slo/v1alpha1/pod.go`).

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;

use super::SloAnnotationError;
use super::nodeslo_types::{BlkIOQOS, CPUBurstConfig, CPUQOSCfg, PodMemoryQOSConfig};

/// Pod annotation holding a JSON [`CPUBurstConfig`].
pub const ANNOTATION_POD_CPU_BURST: &str = "koordinator.sh/cpuBurst";
/// Pod annotation holding a JSON [`CPUQOSCfg`].
pub const ANNOTATION_POD_CPU_QOS: &str = "koordinator.sh/cpuQOS";
/// Pod annotation holding a JSON [`PodMemoryQOSConfig`].
pub const ANNOTATION_POD_MEMORY_QOS: &str = "koordinator.sh/memoryQOS";
/// Pod annotation holding a JSON [`BlkIOQOS`].
pub const ANNOTATION_POD_BLKIO_QOS: &str = "koordinator.sh/blkioQOS";

/// Pod label: the Linux core scheduling group of the pod. Pods with different
/// group IDs never share an SMT core at the same time; an empty value is a
/// group of its own.
pub const LABEL_CORE_SCHED_GROUP_ID: &str = "koordinator.sh/core-sched-group-id";
/// Pod label: the [`CoreSchedPolicy`] of the pod.
pub const LABEL_CORE_SCHED_POLICY: &str = "koordinator.sh/core-sched-policy";

/// Valid range of a group identity (bvt) value.
pub const GROUP_IDENTITY_RANGE: std::ops::RangeInclusive<i64> = -1..=2;

/// Core scheduling policy of a pod, from [`LABEL_CORE_SCHED_POLICY`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CoreSchedPolicy {
    /// Group by [`LABEL_CORE_SCHED_GROUP_ID`] (label absent, empty or unknown).
    #[default]
    Default,
    /// Core scheduling off for this pod (`none`).
    None,
    /// A group of its own, keyed by the pod UID (`exclusive`).
    Exclusive,
}

impl CoreSchedPolicy {
    /// The label value; `""` for the default policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "",
            Self::None => "none",
            Self::Exclusive => "exclusive",
        }
    }
}

/// The core scheduling group ID of a pod; empty when the label is absent.
pub fn core_sched_group_id(labels: &BTreeMap<String, String>) -> &str {
    labels
        .get(LABEL_CORE_SCHED_GROUP_ID)
        .map_or("", String::as_str)
}

/// The core scheduling policy of a pod; unknown values mean the default.
pub fn core_sched_policy(labels: &BTreeMap<String, String>) -> CoreSchedPolicy {
    match labels.get(LABEL_CORE_SCHED_POLICY).map(String::as_str) {
        Some("none") => CoreSchedPolicy::None,
        Some("exclusive") => CoreSchedPolicy::Exclusive,
        _ => CoreSchedPolicy::Default,
    }
}

fn parse_annotation<T: DeserializeOwned>(
    annotations: &BTreeMap<String, String>,
    key: &'static str,
) -> Result<Option<T>, SloAnnotationError> {
    let Some(raw) = annotations.get(key) else {
        return Ok(None);
    };
    serde_json::from_str(raw)
        .map(Some)
        .map_err(|source| SloAnnotationError::InvalidJson { key, source })
}

/// The pod's CPU burst override, if annotated.
pub fn pod_cpu_burst_config(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<CPUBurstConfig>, SloAnnotationError> {
    parse_annotation(annotations, ANNOTATION_POD_CPU_BURST)
}

/// The pod's memory QoS override, if annotated.
pub fn pod_memory_qos_config(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<PodMemoryQOSConfig>, SloAnnotationError> {
    parse_annotation(annotations, ANNOTATION_POD_MEMORY_QOS)
}

/// The pod's block IO settings, if annotated.
pub fn pod_blkio_qos(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<BlkIOQOS>, SloAnnotationError> {
    parse_annotation(annotations, ANNOTATION_POD_BLKIO_QOS)
}

/// The pod's CPU QoS override, if annotated; a group identity outside
/// [`GROUP_IDENTITY_RANGE`] is rejected as upstream does.
pub fn pod_cpu_qos_config(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<CPUQOSCfg>, SloAnnotationError> {
    let config: Option<CPUQOSCfg> = parse_annotation(annotations, ANNOTATION_POD_CPU_QOS)?;
    if let Some(value) = config.as_ref().and_then(|c| c.cpu_qos.group_identity)
        && !GROUP_IDENTITY_RANGE.contains(&value)
    {
        return Err(SloAnnotationError::GroupIdentityOutOfRange { value });
    }
    Ok(config)
}
