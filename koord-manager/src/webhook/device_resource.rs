//! GPU requests at pod admission, as upstream's pod webhooks handle them:
//! the mutation (on unless the gate `DisableDeviceResourceSpec`) turns
//! `koordinator.sh/gpu` into `gpu-core` + `gpu-memory-ratio` and gives every
//! GPU container a `koordinator.sh/gpu.shared` count; the validation (gate
//! `ValidatePodDeviceResource`, off by default) refuses GPU requests the
//! scheduler could not place. Pure functions over the pod.

use std::collections::BTreeMap;

use apis::extension::device_share::{
    RESOURCE_GPU, RESOURCE_GPU_CORE, RESOURCE_GPU_MEMORY, RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_GPU_SHARED, RESOURCE_HUAWEI_NPU_CORE,
};
use apis::extension::quantity::QuantityValue;
use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Upstream's field path for every device-resource error.
const REQUESTS_PATH: &str = "pod.spec.containers[*].resources.requests";

/// The resources that make a container a GPU container.
const GPU_RESOURCES: [&str; 5] = [
    RESOURCE_GPU,
    RESOURCE_GPU_CORE,
    RESOURCE_GPU_MEMORY,
    RESOURCE_GPU_MEMORY_RATIO,
    RESOURCE_GPU_SHARED,
];

/// Whole units of a request, rounded up (Kubernetes `Quantity.Value`);
/// None when missing or unreadable.
fn request_value(container: &Container, name: &str) -> Option<i64> {
    let quantity = container.resources.as_ref()?.requests.as_ref()?.get(name)?;
    QuantityValue::parse(&quantity.0).ok()?.checked_value()
}

fn has_request(container: &Container, name: &str) -> bool {
    container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .is_some_and(|requests| requests.contains_key(name))
}

fn has_gpu_resource(container: &Container) -> bool {
    let Some(resources) = container.resources.as_ref() else {
        return false;
    };
    let names = |list: &Option<BTreeMap<String, Quantity>>| {
        list.as_ref()
            .is_some_and(|l| GPU_RESOURCES.iter().any(|name| l.contains_key(*name)))
    };
    names(&resources.requests) || names(&resources.limits)
}

/// Sets a resource's request and limit to `value`.
fn set_both(resources: &mut ResourceRequirements, name: &str, value: i64) {
    let quantity = Quantity(value.to_string());
    resources
        .requests
        .get_or_insert_with(BTreeMap::new)
        .insert(name.to_owned(), quantity.clone());
    resources
        .limits
        .get_or_insert_with(BTreeMap::new)
        .insert(name.to_owned(), quantity);
}

/// How many GPUs a percentage spans: 300 → 3; anything else → 1.
fn whole_gpus(percent: i64) -> i64 {
    if percent > 100 && percent % 100 == 0 {
        percent / 100
    } else {
        1
    }
}

/// Upstream's device-resource mutation of a created pod; whether it changed.
/// A `koordinator.sh/gpu` request that cannot be read is left alone for the
/// API server's own validation to refuse.
pub fn mutate_device_resources(pod: &mut Pod) -> bool {
    let Some(spec) = pod.spec.as_mut() else {
        return false;
    };
    let mut mutated = false;
    for container in &mut spec.containers {
        if !has_gpu_resource(container) {
            continue;
        }
        if has_request(container, RESOURCE_GPU)
            && let Some(percent) = request_value(container, RESOURCE_GPU)
        {
            let resources = container.resources.get_or_insert_with(Default::default);
            set_both(resources, RESOURCE_GPU_CORE, percent);
            set_both(resources, RESOURCE_GPU_MEMORY_RATIO, percent);
            for list in [&mut resources.requests, &mut resources.limits] {
                if let Some(list) = list.as_mut() {
                    list.remove(RESOURCE_GPU);
                }
            }
            mutated = true;
        }
        if !has_request(container, RESOURCE_GPU_SHARED) {
            let shared = if has_request(container, RESOURCE_GPU_MEMORY_RATIO) {
                request_value(container, RESOURCE_GPU_MEMORY_RATIO).map_or(1, whole_gpus)
            } else if has_request(container, RESOURCE_GPU_CORE) {
                request_value(container, RESOURCE_GPU_CORE).map_or(1, whole_gpus)
            } else {
                1
            };
            let resources = container.resources.get_or_insert_with(Default::default);
            set_both(resources, RESOURCE_GPU_SHARED, shared);
            mutated = true;
        }
    }
    mutated
}

fn forbidden(detail: &str) -> String {
    format!("{REQUESTS_PATH}: Forbidden: {detail}")
}

fn invalid(value: &str, detail: &str) -> String {
    format!("{REQUESTS_PATH}: Invalid value: {value:?}: {detail}")
}

/// A device request that is not a quantity of whole units.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", invalid(.text, &format!("{} is not a valid quantity", .name)))]
struct InvalidQuantity {
    text: String,
    name: String,
}

/// The request's text (for messages) and whole units; an unreadable
/// quantity gives an error instead.
fn read(container: &Container, name: &str) -> Result<(String, i64), InvalidQuantity> {
    let Some(quantity) = container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(name))
    else {
        return Ok(("0".to_owned(), 0));
    };
    let value = QuantityValue::parse(&quantity.0)
        .ok()
        .and_then(QuantityValue::checked_value)
        .ok_or_else(|| InvalidQuantity {
            text: quantity.0.clone(),
            name: name.to_owned(),
        })?;
    Ok((quantity.0.clone(), value))
}

/// Upstream's device-resource validation; every problem, formatted like
/// Kubernetes field errors.
pub fn validate_device_resources(pod: &Pod) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(spec) = pod.spec.as_ref() else {
        return errors;
    };
    for container in &spec.containers {
        let (has_gpu, has_shared) = (
            has_request(container, RESOURCE_GPU),
            has_request(container, RESOURCE_GPU_SHARED),
        );
        if has_gpu && has_shared {
            errors.push(forbidden(
                "Forbidden declare GPU and GPU share at same time",
            ));
            continue;
        }
        if has_gpu {
            match read(container, RESOURCE_GPU) {
                Err(error) => errors.push(error.to_string()),
                Ok((text, value)) => {
                    if value == 0 {
                        errors.push(invalid(
                            &text,
                            "the requested GPU must be greater than zero",
                        ));
                    }
                    if value > 100 && value % 100 != 0 {
                        errors.push(invalid(
                            &text,
                            "the requested GPU must be percentage of 100",
                        ));
                    }
                }
            }
        }
        if has_shared {
            validate_gpu_share(container, &mut errors);
        }
    }
    errors
}

fn validate_gpu_share(container: &Container, errors: &mut Vec<String>) {
    let values = [
        RESOURCE_GPU_SHARED,
        RESOURCE_GPU_MEMORY,
        RESOURCE_GPU_MEMORY_RATIO,
        RESOURCE_GPU_CORE,
        RESOURCE_HUAWEI_NPU_CORE,
    ]
    .map(|name| read(container, name));
    let mut read_values = Vec::with_capacity(values.len());
    for value in values {
        match value {
            Ok(v) => read_values.push(v),
            Err(error) => {
                errors.push(error.to_string());
                return;
            }
        }
    }
    let [shared, memory, ratio, core, npu_core] = [0, 1, 2, 3, 4].map(|i| read_values[i].clone());
    if shared.1 == 0 {
        errors.push(invalid(
            &shared.0,
            "the requested GPU must be greater than zero",
        ));
    }
    // Huawei NPUs are shared by cores; the GPU memory rules do not apply.
    if npu_core.1 != 0 {
        return;
    }
    if memory.1 == 0 && ratio.1 == 0 {
        errors.push(forbidden("GPU memory and GPU memory ratio all is zero"));
    }
    if memory.1 != 0 && ratio.1 != 0 {
        errors.push(forbidden(
            "declare GPU memory and GPU memory ratio at same time",
        ));
    }
    if shared.1 != 0 {
        let multiple = |amount: i64| amount.checked_rem(shared.1) == Some(0);
        if !multiple(core.1) {
            errors.push(invalid(
                &core.0,
                "the requested gpuCore must multiple of shared",
            ));
        }
        if !multiple(ratio.1) {
            errors.push(invalid(
                &ratio.0,
                "the requested gpuMemoryRatio must multiple of shared",
            ));
        }
    }
}

#[cfg(test)]
#[path = "device_resource_tests.rs"]
mod tests;
