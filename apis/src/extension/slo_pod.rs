//! Pod-level SLO overrides (upstream `apis/slo/v1alpha1/pod.go`): the
//! cpuBurst, cpuQOS, memoryQOS and blkioQOS annotations, read with this
//! module's error type. The config types live in `crate::slo::v1alpha1`.

use serde::de::DeserializeOwned;

use super::annotations::{StringMap, parse_json_annotation, set_json_annotation};
use super::error::ExtensionError;
use crate::slo::v1alpha1::{
    self as slo, BlkIOQOS, CPUBurstConfig, CPUQOSCfg, PodMemoryQOSConfig, SloAnnotationError,
};

pub use crate::slo::v1alpha1::{
    ANNOTATION_POD_BLKIO_QOS, ANNOTATION_POD_CPU_BURST, ANNOTATION_POD_CPU_QOS,
    ANNOTATION_POD_MEMORY_QOS, LABEL_CORE_SCHED_GROUP_ID, LABEL_CORE_SCHED_POLICY,
};

/// The pod's CPU burst override; absent → `Ok(None)`.
pub fn get_pod_cpu_burst_config(
    annotations: &StringMap,
) -> Result<Option<CPUBurstConfig>, ExtensionError> {
    checked(
        annotations,
        ANNOTATION_POD_CPU_BURST,
        slo::pod_cpu_burst_config,
    )
}

pub fn set_pod_cpu_burst_config(
    annotations: &mut StringMap,
    config: &CPUBurstConfig,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_POD_CPU_BURST, config)
}

/// The pod's CPU QoS override; absent → `Ok(None)`; a group identity
/// outside [-1, 2] is an error, as upstream.
pub fn get_pod_cpu_qos_config(
    annotations: &StringMap,
) -> Result<Option<CPUQOSCfg>, ExtensionError> {
    checked(annotations, ANNOTATION_POD_CPU_QOS, slo::pod_cpu_qos_config)
}

pub fn set_pod_cpu_qos_config(
    annotations: &mut StringMap,
    config: &CPUQOSCfg,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_POD_CPU_QOS, config)
}

/// The pod's memory QoS override; absent → `Ok(None)`.
pub fn get_pod_memory_qos_config(
    annotations: &StringMap,
) -> Result<Option<PodMemoryQOSConfig>, ExtensionError> {
    checked(
        annotations,
        ANNOTATION_POD_MEMORY_QOS,
        slo::pod_memory_qos_config,
    )
}

pub fn set_pod_memory_qos_config(
    annotations: &mut StringMap,
    config: &PodMemoryQOSConfig,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_POD_MEMORY_QOS, config)
}

/// The pod's block IO settings; absent → `Ok(None)`.
pub fn get_pod_blkio_qos(annotations: &StringMap) -> Result<Option<BlkIOQOS>, ExtensionError> {
    checked(annotations, ANNOTATION_POD_BLKIO_QOS, slo::pod_blkio_qos)
}

pub fn set_pod_blkio_qos(
    annotations: &mut StringMap,
    config: &BlkIOQOS,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_POD_BLKIO_QOS, config)
}

/// Decodes with this module's JSON error, then lets the slo reader apply its
/// value checks (it re-reads the same text).
fn checked<T: DeserializeOwned>(
    annotations: &StringMap,
    key: &str,
    slo_reader: fn(&StringMap) -> Result<Option<T>, SloAnnotationError>,
) -> Result<Option<T>, ExtensionError> {
    let decoded: Option<T> = parse_json_annotation(annotations, key)?;
    if decoded.is_none() {
        return Ok(None);
    }
    slo_reader(annotations).map_err(|err| {
        let text = annotations.get(key).map_or("", String::as_str);
        ExtensionError::invalid_value(key, text, err)
    })
}
