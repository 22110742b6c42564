//! Pod validation (upstream `pod/validating`): forbidden QoS/priority
//! combinations, colocation resources only on BE pods, whole CPUs for
//! LSR/LSE, immutable QoS and priority on update, the reserve-pod annotation,
//! plus well-formed Koordinator annotations.

use std::collections::BTreeMap;

use apis::extension::{
    ANNOTATION_DEVICE_ALLOCATE_HINT, ANNOTATION_DEVICE_JOINT_ALLOCATE, ANNOTATION_OOM_SCORE_ADJ,
    ANNOTATION_OOM_SCORE_ADJ_SPEC, ANNOTATION_RESERVE_POD, ANNOTATION_RESOURCE_SPEC, BATCH_CPU,
    BATCH_MEMORY, LABEL_POD_PRIORITY, LABEL_POD_QOS, PriorityClass, QoSClass, QuantityValue,
    RESOURCE_CPU, get_device_allocate_hints, get_device_joint_allocate, get_pod_oom_score_adj,
    get_pod_oom_score_adj_spec, get_pod_sub_priority, get_resource_spec, pod_priority_class_raw,
    pod_qos_class_raw,
};
use k8s_openapi::api::core::v1::Pod;

use super::review::Operation;

/// Upstream feature gate `ColocationProfileSkipValidatingPriority`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PodValidationOptions {
    pub skip_validating_priority: bool,
}

/// Every problem with the pod, formatted like Kubernetes field errors.
pub fn validate_pod(
    operation: Operation,
    new_pod: &Pod,
    old_pod: Option<&Pod>,
    options: PodValidationOptions,
) -> Vec<String> {
    let mut errors = Vec::new();
    if !matches!(operation, Operation::Create | Operation::Update) {
        return errors;
    }
    let annotations = new_pod.metadata.annotations.clone().unwrap_or_default();
    if annotations.contains_key(ANNOTATION_RESERVE_POD) {
        errors.push(format!(
            "annotations.{ANNOTATION_RESERVE_POD}: Forbidden: cannot set in annotations"
        ));
    }
    if let (Operation::Update, Some(old_pod)) = (operation, old_pod) {
        let (old_qos, new_qos) = (pod_qos_class_raw(old_pod), pod_qos_class_raw(new_pod));
        if old_qos != new_qos {
            errors.push(immutable(
                &format!("labels.{LABEL_POD_QOS}"),
                new_qos.as_str(),
            ));
        }
        let (old_class, new_class) = (
            pod_priority_class_raw(old_pod),
            pod_priority_class_raw(new_pod),
        );
        if old_class != new_class {
            errors.push(immutable("spec.priority", new_class.as_str()));
        }
        if !options.skip_validating_priority {
            let label = |pod: &Pod| {
                pod.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_POD_PRIORITY).cloned())
                    .unwrap_or_default()
            };
            let new_priority = label(new_pod);
            if label(old_pod) != new_priority {
                errors.push(immutable(
                    &format!("labels.{LABEL_POD_PRIORITY}"),
                    &new_priority,
                ));
            }
        }
    }

    let qos = pod_qos_class_raw(new_pod);
    let requests = match pod_requests(new_pod) {
        Ok(requests) => Some(requests),
        Err(problem) => {
            errors.push(problem.to_string());
            None
        }
    };
    // Checks of the requested amounts run only when they could be read.
    let readable = requests.is_some();
    let requests = requests.unwrap_or_default();
    let requested = |name: &str| requests.get(name).is_some_and(|v| !v.is_zero());
    if (requested(BATCH_CPU) || requested(BATCH_MEMORY)) && qos != QoSClass::BE {
        errors.push(format!(
            "labels.{LABEL_POD_QOS}: Required value: must specify koordinator QoS BE with koordinator colocation resources"
        ));
    }
    let class = pod_priority_class_raw(new_pod);
    let forbidden: &[PriorityClass] = match qos {
        QoSClass::BE => &[PriorityClass::None, PriorityClass::Prod],
        QoSClass::LSR => &[
            PriorityClass::None,
            PriorityClass::Mid,
            PriorityClass::Batch,
            PriorityClass::Free,
        ],
        _ => &[],
    };
    if forbidden.contains(&class) {
        errors.push(format!(
            "Pod: Forbidden: {LABEL_POD_QOS}={} and priorityClass={} cannot be used in combination",
            qos.as_str(),
            class.as_str()
        ));
    }
    if readable && matches!(qos, QoSClass::LSR | QoSClass::LSE) {
        let field = "pod.spec.containers[*].resources.requests";
        match requests
            .get(RESOURCE_CPU)
            .copied()
            .filter(|cpu| !cpu.is_zero())
        {
            None => errors.push(format!(
                "{field}: Required value: LSR Pod must declare the requested CPUs"
            )),
            Some(cpu) if cpu.milli_value() % 1000 != 0 => errors.push(format!(
                "{field}: Invalid value: \"{}\": the requested CPUs of LSR Pod must be integer",
                cpu.to_decimal_si()
            )),
            Some(_) => {}
        }
    }
    errors.extend(malformed_koordinator_metadata(new_pod));
    errors
}

fn immutable(field: &str, value: &str) -> String {
    format!("{field}: Invalid value: \"{value}\": field is immutable")
}

/// Parse errors of the Koordinator annotations and labels a pod may carry.
fn malformed_koordinator_metadata(pod: &Pod) -> Vec<String> {
    let empty = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let mut errors = Vec::new();
    // Each reader's own error type; only its message is kept, as a field error.
    fn check<T, E: std::fmt::Display>(errors: &mut Vec<String>, key: &str, outcome: Result<T, E>) {
        if let Err(reason) = outcome {
            errors.push(format!("annotations.{key}: Invalid value: {reason}"));
        }
    }
    check(
        &mut errors,
        ANNOTATION_RESOURCE_SPEC,
        get_resource_spec(annotations),
    );
    check(
        &mut errors,
        ANNOTATION_DEVICE_ALLOCATE_HINT,
        get_device_allocate_hints(annotations),
    );
    check(
        &mut errors,
        ANNOTATION_DEVICE_JOINT_ALLOCATE,
        get_device_joint_allocate(annotations),
    );
    check(
        &mut errors,
        ANNOTATION_OOM_SCORE_ADJ,
        get_pod_oom_score_adj(annotations),
    );
    check(
        &mut errors,
        ANNOTATION_OOM_SCORE_ADJ_SPEC,
        get_pod_oom_score_adj_spec(annotations),
    );
    if let Err(err) = get_pod_sub_priority(labels) {
        errors.push(format!("labels.{LABEL_POD_PRIORITY}: Invalid value: {err}"));
    }
    errors
}

/// A pod request that cannot be counted, as a Kubernetes field error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("{field}: Invalid value: {source}")]
    Invalid {
        field: String,
        #[source]
        source: apis::extension::QuantityError,
    },
    #[error("{field}: Invalid value: the pod's total request is out of range")]
    OutOfRange { field: String },
}

/// The pod's effective requests: the containers' sum, raised to any single
/// init container's request, plus overhead (upstream `GetPodRequest`). A
/// quantity that does not parse, or a sum beyond the representable range,
/// is an error naming the field (the API server never stores such a pod;
/// counting it as zero would let the checks below pass it).
pub fn pod_requests(pod: &Pod) -> Result<BTreeMap<String, QuantityValue>, RequestError> {
    let mut total: BTreeMap<String, QuantityValue> = BTreeMap::new();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(total);
    };
    let requests_of = |field: String,
                       resources: Option<&k8s_openapi::api::core::v1::ResourceRequirements>|
     -> Result<Vec<(String, QuantityValue)>, RequestError> {
        resources
            .and_then(|r| r.requests.as_ref())
            .into_iter()
            .flatten()
            .map(|(name, q)| {
                QuantityValue::of(q)
                    .map(|v| (name.clone(), v))
                    .map_err(|source| RequestError::Invalid {
                        field: format!("{field}.resources.requests.{name}"),
                        source,
                    })
            })
            .collect()
    };
    let overflow = |field: &str, name: &str| RequestError::OutOfRange {
        field: format!("{field}.{name}"),
    };
    for (index, container) in spec.containers.iter().enumerate() {
        let field = format!("pod.spec.containers[{index}]");
        for (name, value) in requests_of(field.clone(), container.resources.as_ref())? {
            let entry = total.entry(name.clone()).or_insert(QuantityValue::ZERO);
            *entry = entry
                .checked_add(value)
                .ok_or_else(|| overflow(&field, &name))?;
        }
    }
    for (index, container) in spec.init_containers.iter().flatten().enumerate() {
        let field = format!("pod.spec.initContainers[{index}]");
        for (name, value) in requests_of(field, container.resources.as_ref())? {
            let entry = total.entry(name).or_insert(QuantityValue::ZERO);
            if value.nanos() > entry.nanos() {
                *entry = value;
            }
        }
    }
    for (name, q) in spec.overhead.iter().flatten() {
        let value = QuantityValue::of(q).map_err(|source| RequestError::Invalid {
            field: format!("pod.spec.overhead.{name}"),
            source,
        })?;
        let entry = total.entry(name.clone()).or_insert(QuantityValue::ZERO);
        *entry = entry
            .checked_add(value)
            .ok_or_else(|| overflow("pod.spec.overhead", name))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: serde_json::Value, priority: Option<i32>, requests: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "d", "labels": labels},
            "spec": {"priority": priority, "containers": [{"name": "c", "resources": {"requests": requests}}]}
        }))
        .unwrap()
    }

    fn create(pod: &Pod) -> Vec<String> {
        validate_pod(
            Operation::Create,
            pod,
            None,
            PodValidationOptions::default(),
        )
    }

    #[test]
    fn unreadable_requests_are_denied_by_field_not_counted_as_zero() {
        // A BE pod whose batch request does not parse used to pass (zero),
        // and an LSR pod's was reported as not declared at all.
        let be = pod(
            json!({"koordinator.sh/qosClass": "BE"}),
            Some(5500),
            json!({"kubernetes.io/batch-cpu": "lots"}),
        );
        let lsr = pod(
            json!({"koordinator.sh/qosClass": "LSR"}),
            Some(9500),
            json!({"cpu": "2x"}),
        );
        for (pod, value) in [(be, "lots"), (lsr, "2x")] {
            let errors = create(&pod);
            assert_eq!(errors.len(), 1, "{errors:?}");
            assert!(
                errors[0].starts_with("pod.spec.containers[0].resources.requests.")
                    && errors[0].contains(&format!("{value:?}")),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn be_with_prod_priority_is_forbidden() {
        let errors = create(&pod(
            json!({"koordinator.sh/qosClass": "BE"}),
            Some(9500),
            json!({}),
        ));
        assert_eq!(
            errors,
            [
                "Pod: Forbidden: koordinator.sh/qosClass=BE and priorityClass=koord-prod cannot be used in combination"
            ]
        );
        assert!(
            create(&pod(
                json!({"koordinator.sh/qosClass": "BE"}),
                Some(5500),
                json!({})
            ))
            .is_empty()
        );
    }

    #[test]
    fn lsr_needs_whole_cpus_and_a_non_batch_priority() {
        let errors = create(&pod(
            json!({"koordinator.sh/qosClass": "LSR"}),
            Some(9500),
            json!({"cpu": "1500m"}),
        ));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("must be integer"), "{errors:?}");
        let errors = create(&pod(
            json!({"koordinator.sh/qosClass": "LSR"}),
            Some(5500),
            json!({"cpu": "2"}),
        ));
        assert!(
            errors[0].contains("priorityClass=koord-batch"),
            "{errors:?}"
        );
        let errors = create(&pod(
            json!({"koordinator.sh/qosClass": "LSE"}),
            Some(9500),
            json!({}),
        ));
        assert!(
            errors[0].contains("must declare the requested CPUs"),
            "{errors:?}"
        );
        assert!(
            create(&pod(
                json!({"koordinator.sh/qosClass": "LSR"}),
                Some(9500),
                json!({"cpu": "2"})
            ))
            .is_empty()
        );
    }

    #[test]
    fn batch_resources_require_be() {
        let errors = create(&pod(
            json!({"koordinator.sh/qosClass": "LS"}),
            None,
            json!({"kubernetes.io/batch-cpu": "500"}),
        ));
        assert!(
            errors[0].starts_with("labels.koordinator.sh/qosClass: Required value"),
            "{errors:?}"
        );
        let errors = create(&pod(
            json!({}),
            None,
            json!({"kubernetes.io/batch-memory": "1Gi"}),
        ));
        assert_eq!(errors.len(), 1, "{errors:?}");
    }

    #[test]
    fn qos_and_priority_are_immutable_on_update() {
        let old = pod(
            json!({"koordinator.sh/qosClass": "LS", "koordinator.sh/priority": "1"}),
            Some(9500),
            json!({}),
        );
        let new = pod(
            json!({"koordinator.sh/qosClass": "BE", "koordinator.sh/priority": "2"}),
            Some(5500),
            json!({}),
        );
        let errors = validate_pod(
            Operation::Update,
            &new,
            Some(&old),
            PodValidationOptions::default(),
        );
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors.iter().all(|e| e.contains("field is immutable")));
        let errors = validate_pod(
            Operation::Update,
            &new,
            Some(&old),
            PodValidationOptions {
                skip_validating_priority: true,
            },
        );
        assert_eq!(errors.len(), 2, "{errors:?}");
    }

    #[test]
    fn malformed_annotations_and_reserve_pod_are_reported() {
        let mut bad = pod(json!({}), None, json!({}));
        bad.metadata.annotations = Some(
            [
                (ANNOTATION_RESOURCE_SPEC.to_owned(), "{not json".to_owned()),
                (ANNOTATION_RESERVE_POD.to_owned(), "true".to_owned()),
            ]
            .into(),
        );
        let errors = create(&bad);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors
                .iter()
                .any(|e| e.contains("scheduling.koordinator.sh/resource-spec"))
        );
        assert!(errors.iter().any(|e| e.contains("reserve-pod: Forbidden")));
    }

    #[test]
    fn requests_take_the_larger_init_container() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "500m"}}}
                ],
                "overhead": {"cpu": "100m"}
            }
        }))
        .unwrap();
        let requests = pod_requests(&pod).unwrap();
        assert_eq!(requests["cpu"].milli_value(), 3100);
        assert_eq!(requests["memory"].value(), 1 << 30);
    }
}
