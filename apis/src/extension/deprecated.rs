//! Deprecated resource names and label keys that are still accepted and
//! mapped to their current names.

use super::device_share::{
    RESOURCE_FPGA, RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_RDMA,
};
use super::resource::{BATCH_CPU, BATCH_MEMORY};

/// Deprecated: use [`BATCH_CPU`].
pub const KOORD_BATCH_CPU: &str = "koordinator.sh/batch-cpu";
/// Deprecated: use [`BATCH_MEMORY`].
pub const KOORD_BATCH_MEMORY: &str = "koordinator.sh/batch-memory";
/// Deprecated: use [`RESOURCE_RDMA`].
pub const DEPRECATED_KOORD_RDMA: &str = "kubernetes.io/rdma";
/// Deprecated: use [`RESOURCE_FPGA`].
pub const DEPRECATED_KOORD_FPGA: &str = "kubernetes.io/fpga";
/// Deprecated: use [`RESOURCE_GPU`].
pub const DEPRECATED_KOORD_GPU: &str = "kubernetes.io/gpu";
/// Deprecated: use [`RESOURCE_GPU_CORE`].
pub const DEPRECATED_GPU_CORE: &str = "kubernetes.io/gpu-core";
/// Deprecated: use [`RESOURCE_GPU_MEMORY`].
pub const DEPRECATED_GPU_MEMORY: &str = "kubernetes.io/gpu-memory";
/// Deprecated: use [`RESOURCE_GPU_MEMORY_RATIO`].
pub const DEPRECATED_GPU_MEMORY_RATIO: &str = "kubernetes.io/gpu-memory-ratio";
/// Deprecated Device label: GPU driver version.
pub const DEPRECATED_GPU_DRIVER: &str = "kubernetes.io/gpu-driver";
/// Deprecated Device label: GPU model.
pub const DEPRECATED_GPU_MODEL: &str = "kubernetes.io/gpu-model";

/// Deprecated batch resource → current name.
pub const DEPRECATED_BATCH_RESOURCES_MAPPER: &[(&str, &str)] = &[
    (KOORD_BATCH_CPU, BATCH_CPU),
    (KOORD_BATCH_MEMORY, BATCH_MEMORY),
];

/// Deprecated device resource → current name.
pub const DEPRECATED_DEVICE_RESOURCES_MAPPER: &[(&str, &str)] = &[
    (DEPRECATED_KOORD_RDMA, RESOURCE_RDMA),
    (DEPRECATED_KOORD_FPGA, RESOURCE_FPGA),
    (DEPRECATED_KOORD_GPU, RESOURCE_GPU),
    (DEPRECATED_GPU_CORE, RESOURCE_GPU_CORE),
    (DEPRECATED_GPU_MEMORY, RESOURCE_GPU_MEMORY),
    (DEPRECATED_GPU_MEMORY_RATIO, RESOURCE_GPU_MEMORY_RATIO),
];

/// The current name of a deprecated batch resource, if `name` is one.
pub fn current_batch_resource_name(name: &str) -> Option<&'static str> {
    lookup(DEPRECATED_BATCH_RESOURCES_MAPPER, name)
}

/// The current name of a deprecated device resource, if `name` is one.
pub fn current_device_resource_name(name: &str) -> Option<&'static str> {
    lookup(DEPRECATED_DEVICE_RESOURCES_MAPPER, name)
}

fn lookup(mapper: &[(&str, &'static str)], name: &str) -> Option<&'static str> {
    mapper
        .iter()
        .find(|(deprecated, _)| *deprecated == name)
        .map(|(_, current)| *current)
}
