//! Pod mutation by ClusterColocationProfiles (upstream `pod/mutating`):
//! matching profiles, applied in name order, set QoS class, priority,
//! scheduler, labels and annotations; batch and mid pods then request
//! `kubernetes.io/batch-*` / `mid-*` instead of cpu and memory.

use std::collections::BTreeMap;

use apis::config::v1alpha1::ClusterColocationProfile;
use apis::configuration::label_selector_matches;
use apis::extension::{
    BATCH_CPU, BATCH_MEMORY, ExtendedResourceContainerSpec, ExtendedResourceSpec,
    LABEL_POD_PRIORITY, LABEL_POD_QOS, PriorityClass, QuantityValue, RESOURCE_CPU, RESOURCE_MEMORY,
    extended_resource_name, get_extended_resource_spec, priority_class_of_pod,
    set_extended_resource_spec, should_skip_update_resource,
};
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

/// A PriorityClass as the pod mutation needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityClassInfo {
    pub value: i32,
    pub preemption_policy: Option<String>,
}

/// The cluster state the mutation reads.
pub struct ProfileContext<'a> {
    /// Every ClusterColocationProfile.
    pub profiles: &'a [&'a ClusterColocationProfile],
    /// Labels of the pod's namespace; `None` when the namespace is unknown.
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    /// PriorityClasses by name.
    pub priority_classes: &'a BTreeMap<String, PriorityClassInfo>,
    /// Upstream feature gate `ColocationProfileSkipMutatingResources`.
    pub skip_mutating_resources: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProfileError {
    #[error("clusterColocationProfile {profile}: invalid probability {value:?}: {reason}")]
    Probability {
        profile: String,
        value: String,
        reason: String,
    },
    #[error(
        "clusterColocationProfile {profile}: priorityclass.scheduling.k8s.io {name:?} not found"
    )]
    PriorityClassNotFound { profile: String, name: String },
    #[error("clusterColocationProfile {profile}: patch cannot be applied: {reason}")]
    Patch { profile: String, reason: String },
    #[error("failed to get current extended resource spec, err: {0}")]
    ExtendedResourceSpec(String),
    #[error("container {container}: {resource} quantity {value:?} is invalid")]
    Quantity {
        container: String,
        resource: String,
        value: String,
    },
}

/// Percent (0..=100) of matching pods a profile applies to.
pub fn profile_percent(profile: &ClusterColocationProfile) -> Result<i64, ProfileError> {
    let fail = |value: String, reason: &str| ProfileError::Probability {
        profile: profile_name(profile).to_owned(),
        value,
        reason: reason.to_owned(),
    };
    match &profile.spec.probability {
        None => Ok(100),
        Some(IntOrString::Int(value)) => Ok(i64::from(*value)),
        Some(IntOrString::String(text)) => {
            let Some(number) = text.strip_suffix('%') else {
                return Err(fail(
                    text.clone(),
                    "a string must be a percentage like \"50%\"",
                ));
            };
            number
                .parse::<i64>()
                .map_err(|_| fail(text.clone(), "not an integer percentage"))
        }
    }
}

pub(crate) fn profile_name(profile: &ClusterColocationProfile) -> &str {
    profile.metadata.name.as_deref().unwrap_or("")
}

/// `None` or empty selector → matches; a malformed selector matches too,
/// as upstream only skips a profile on a clean mismatch.
pub(crate) fn selector_admits(
    selector: Option<&LabelSelector>,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    match labels {
        Some(labels) => label_selector_matches(selector, labels).unwrap_or(true),
        None => label_selector_matches(selector, &BTreeMap::new()).unwrap_or(true),
    }
}

/// Applies every matching profile to `pod` (which must carry its namespace in
/// `namespace`), returning whether anything changed. `roll` returns a number
/// in `0..100` each time a partial-probability profile is considered.
pub fn apply_colocation_profiles(
    pod: &mut Pod,
    ctx: &ProfileContext<'_>,
    roll: &mut dyn FnMut() -> i64,
) -> Result<bool, ProfileError> {
    let mut matched: Vec<&ClusterColocationProfile> = ctx
        .profiles
        .iter()
        .copied()
        .filter(|profile| {
            let namespace_ok = match &profile.spec.namespace_selector {
                None => true,
                Some(selector) => match ctx.namespace_labels {
                    Some(labels) => selector_admits(Some(selector), Some(labels)),
                    // An unknown namespace only matches an empty selector.
                    None => apis::configuration::is_empty_selector(selector),
                },
            };
            namespace_ok
                && selector_admits(profile.spec.selector.as_ref(), pod.metadata.labels.as_ref())
        })
        .collect();
    if matched.is_empty() {
        return Ok(false);
    }
    matched.sort_by(|a, b| profile_name(a).cmp(profile_name(b)));

    let mut mutated = false;
    let mut skip_resources = ctx.skip_mutating_resources;
    for profile in matched {
        let annotations = profile.metadata.annotations.clone().unwrap_or_default();
        if should_skip_update_resource(&annotations) {
            skip_resources = true;
        }
        let percent = profile_percent(profile)?;
        if percent <= 0 || (percent < 100 && roll() > percent) {
            tracing::debug!(
                profile = profile_name(profile),
                "profile skipped by probability"
            );
            continue;
        }
        apply_one_profile(pod, profile, ctx)?;
        mutated = true;
    }
    if skip_resources {
        return Ok(mutated);
    }
    Ok(convert_to_extended_resources(pod)? || mutated)
}

fn apply_one_profile(
    pod: &mut Pod,
    profile: &ClusterColocationProfile,
    ctx: &ProfileContext<'_>,
) -> Result<(), ProfileError> {
    apply_profile_metadata(pod, profile);
    let spec = &profile.spec;
    let pod_spec = pod.spec.get_or_insert_with(Default::default);
    if let Some(scheduler) = spec.scheduler_name.as_deref().filter(|s| !s.is_empty()) {
        pod_spec.scheduler_name = Some(scheduler.to_owned());
    }
    if let Some(name) = spec
        .priority_class_name
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        let class =
            ctx.priority_classes
                .get(name)
                .ok_or_else(|| ProfileError::PriorityClassNotFound {
                    profile: profile_name(profile).to_owned(),
                    name: name.to_owned(),
                })?;
        pod_spec.priority_class_name = Some(name.to_owned());
        pod_spec.priority = Some(class.value);
        pod_spec.preemption_policy = class.preemption_policy.clone();
    }
    apply_profile_patch(pod, profile)
}

/// The profile's labels, annotations, key mappings, label suffixes, QoS class
/// and Koordinator priority: the part of a profile the colocation-profile
/// controller also applies to pods that already exist.
pub fn apply_profile_metadata(pod: &mut Pod, profile: &ClusterColocationProfile) {
    apply_profile_to_metadata(&mut pod.metadata, profile);
}

/// [`apply_profile_metadata`] on any object's metadata (pods, Reservations).
pub fn apply_profile_to_metadata(metadata: &mut ObjectMeta, profile: &ClusterColocationProfile) {
    let spec = &profile.spec;
    let had_labels = metadata.labels.is_some();
    let had_annotations = metadata.annotations.is_some();
    let labels = metadata.labels.get_or_insert_with(BTreeMap::new);
    for (key, value) in spec.labels.iter().flatten() {
        labels.insert(key.clone(), value.clone());
    }
    let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (key, value) in spec.annotations.iter().flatten() {
        annotations.insert(key.clone(), value.clone());
    }
    for (from, to) in spec.label_keys_mapping.iter().flatten() {
        let value = labels.get(from).cloned().unwrap_or_default();
        labels.insert(to.clone(), value);
    }
    for (from, to) in spec.annotation_keys_mapping.iter().flatten() {
        let value = annotations.get(from).cloned().unwrap_or_default();
        annotations.insert(to.clone(), value);
    }
    for (key, suffix) in spec.label_suffixes.iter().flatten() {
        if let Some(value) = labels.get_mut(key) {
            value.push_str(suffix);
        }
    }
    if let Some(qos) = spec.qos_class {
        labels.insert(LABEL_POD_QOS.to_owned(), qos.as_str().to_owned());
    }
    if let Some(priority) = spec.koordinator_priority {
        labels.insert(LABEL_POD_PRIORITY.to_owned(), priority.to_string());
    }
    if !had_annotations
        && metadata
            .annotations
            .as_ref()
            .is_some_and(BTreeMap::is_empty)
    {
        metadata.annotations = None;
    }
    if !had_labels && metadata.labels.as_ref().is_some_and(BTreeMap::is_empty) {
        metadata.labels = None;
    }
}

/// The profile's `patch` (a strategic-merge-patch subset, [`merge_patch`])
/// on a pod or a Reservation.
pub fn apply_profile_patch<T>(
    object: &mut T,
    profile: &ClusterColocationProfile,
) -> Result<(), ProfileError>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let Some(patch) = &profile.spec.patch else {
        return Ok(());
    };
    let fail = |reason: String| ProfileError::Patch {
        profile: profile_name(profile).to_owned(),
        reason,
    };
    let mut current = serde_json::to_value(&*object).map_err(|e| fail(e.to_string()))?;
    merge_patch(&mut current, patch);
    *object = serde_json::from_value(current).map_err(|e| fail(e.to_string()))?;
    Ok(())
}

/// A strategic-merge-patch subset: objects merge recursively, `null`
/// deletes, and lists whose items all carry a `name` merge item by item on
/// it (containers, volumes, env…); other lists are replaced.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else if let Some(existing) = target.get_mut(key) {
                    merge_patch(existing, value);
                } else {
                    let mut fresh = Value::Null;
                    merge_patch(&mut fresh, value);
                    target.insert(key.clone(), fresh);
                }
            }
        }
        (Value::Array(target), Value::Array(patch))
            if named_items(target) && named_items(patch) =>
        {
            for item in patch {
                let name = item.get("name").cloned();
                match target
                    .iter_mut()
                    .find(|existing| existing.get("name") == name.as_ref())
                {
                    Some(existing) => merge_patch(existing, item),
                    None => target.push(item.clone()),
                }
            }
        }
        (target, patch) => {
            let mut replacement = patch.clone();
            strip_nulls(&mut replacement);
            *target = replacement;
        }
    }
}

fn named_items(items: &[Value]) -> bool {
    !items.is_empty()
        && items
            .iter()
            .all(|item| item.get("name").is_some_and(Value::is_string))
}

fn strip_nulls(value: &mut Value) {
    if let Value::Object(map) = value {
        map.retain(|_, v| !v.is_null());
        map.values_mut().for_each(strip_nulls);
    }
}

/// Batch/mid pods: cpu → `*-cpu` in milli-cores, memory → `*-memory` as is,
/// in requests, limits and overhead; a limit without a request gets the
/// request copied from it. Prod and unclassified pods are left alone.
pub fn convert_to_extended_resources(pod: &mut Pod) -> Result<bool, ProfileError> {
    let class = priority_class_of_pod(pod);
    if matches!(class, PriorityClass::None | PriorityClass::Prod) {
        return Ok(false);
    }
    let Some(spec) = pod.spec.as_mut() else {
        return Ok(false);
    };
    let mut mutated = false;
    let init = spec.init_containers.iter_mut().flatten();
    for container in init.chain(spec.containers.iter_mut()) {
        let had_resources = container.resources.is_some();
        let resources = container
            .resources
            .get_or_insert_with(ResourceRequirements::default);
        for list in [&mut resources.requests, &mut resources.limits] {
            if let Some(list) = list.as_mut() {
                mutated |= replace_resource(class, list, RESOURCE_CPU, &container.name)?;
                mutated |= replace_resource(class, list, RESOURCE_MEMORY, &container.name)?;
            }
        }
        for resource in [RESOURCE_CPU, RESOURCE_MEMORY] {
            mutated |= copy_limit_to_request(class, resources, resource);
        }
        // Keep an absent `resources` absent so the patch stays minimal.
        if !had_resources && resources == &ResourceRequirements::default() {
            container.resources = None;
        }
    }
    if let Some(overhead) = spec.overhead.as_mut() {
        mutated |= replace_resource(class, overhead, RESOURCE_CPU, "overhead")?;
        mutated |= replace_resource(class, overhead, RESOURCE_MEMORY, "overhead")?;
    }
    Ok(mutated)
}

fn replace_resource(
    class: PriorityClass,
    list: &mut BTreeMap<String, Quantity>,
    resource: &str,
    container: &str,
) -> Result<bool, ProfileError> {
    let Some(extended) = extended_resource_name(class, resource) else {
        return Ok(false);
    };
    let Some(quantity) = list.remove(resource) else {
        return Ok(false);
    };
    let converted = if resource == RESOURCE_CPU {
        // Milli-cores as a whole number: beyond 64 bits it is refused, not clamped.
        let milli = QuantityValue::of(&quantity)
            .ok()
            .and_then(QuantityValue::checked_milli_value)
            .ok_or_else(|| ProfileError::Quantity {
                container: container.to_owned(),
                resource: resource.to_owned(),
                value: quantity.0.clone(),
            })?;
        Quantity(milli.to_string())
    } else {
        quantity
    };
    list.insert(extended.to_owned(), converted);
    Ok(true)
}

fn copy_limit_to_request(
    class: PriorityClass,
    resources: &mut ResourceRequirements,
    resource: &str,
) -> bool {
    let Some(extended) = extended_resource_name(class, resource) else {
        return false;
    };
    let has_request = resources
        .requests
        .as_ref()
        .is_some_and(|r| r.contains_key(extended));
    let limit = resources
        .limits
        .as_ref()
        .and_then(|l| l.get(extended))
        .cloned();
    match limit {
        Some(limit) if !has_request => {
            resources
                .requests
                .get_or_insert_with(BTreeMap::new)
                .insert(extended.to_owned(), limit);
            true
        }
        _ => false,
    }
}

/// Records each container's batch-cpu/batch-memory requests and limits in
/// the `node.koordinator.sh/extended-resource-spec` annotation koordlet reads
/// (upstream `ExtendedResourceSpec` plugin). Returns whether it changed.
pub fn apply_extended_resource_spec(pod: &mut Pod) -> Result<bool, ProfileError> {
    let mut desired = ExtendedResourceSpec::default();
    for container in pod.spec.iter().flat_map(|spec| spec.containers.iter()) {
        let resources = container.resources.as_ref();
        let pick = |list: Option<&BTreeMap<String, Quantity>>| -> BTreeMap<String, Quantity> {
            [BATCH_CPU, BATCH_MEMORY]
                .iter()
                .filter_map(|name| {
                    list.and_then(|l| l.get(*name))
                        .map(|q| ((*name).to_owned(), q.clone()))
                })
                .collect()
        };
        let entry = ExtendedResourceContainerSpec {
            requests: pick(resources.and_then(|r| r.requests.as_ref())),
            limits: pick(resources.and_then(|r| r.limits.as_ref())),
        };
        if !entry.requests.is_empty() || !entry.limits.is_empty() {
            desired.containers.insert(container.name.clone(), entry);
        }
    }
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let current = get_extended_resource_spec(&annotations)
        .map_err(|err| ProfileError::ExtendedResourceSpec(err.to_string()))?
        .unwrap_or_default();
    if current == desired {
        return Ok(false);
    }
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    set_extended_resource_spec(annotations, &desired)
        .map_err(|err| ProfileError::ExtendedResourceSpec(err.to_string()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apis::config::v1alpha1::ClusterColocationProfileSpec;
    use apis::extension::QoSClass;
    use serde_json::json;

    fn profile(name: &str, spec: ClusterColocationProfileSpec) -> ClusterColocationProfile {
        let mut profile = ClusterColocationProfile::new(name, spec);
        profile.metadata.name = Some(name.to_owned());
        profile
    }

    fn batch_profile() -> ClusterColocationProfile {
        profile(
            "colocation-batch",
            ClusterColocationProfileSpec {
                namespace_selector: Some(LabelSelector {
                    match_labels: Some(
                        [("koordinator.sh/enable-colocation".into(), "true".into())].into(),
                    ),
                    ..Default::default()
                }),
                selector: Some(LabelSelector {
                    match_labels: Some([("app".into(), "spark".into())].into()),
                    ..Default::default()
                }),
                qos_class: Some(QoSClass::BE),
                priority_class_name: Some("koord-batch".into()),
                koordinator_priority: Some(1000),
                scheduler_name: Some("koord-scheduler".into()),
                labels: Some([("team".into(), "data".into())].into()),
                annotations: Some([("note".into(), "colocated".into())].into()),
                ..Default::default()
            },
        )
    }

    fn spark_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "spark", "labels": {"app": "spark"}},
            "spec": {"containers": [
                {"name": "main", "resources": {
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                    "limits": {"cpu": "2", "memory": "2Gi"}}},
                {"name": "limits-only", "resources": {"limits": {"cpu": "1500m"}}}
            ]}
        }))
        .unwrap()
    }

    fn classes() -> BTreeMap<String, PriorityClassInfo> {
        [(
            "koord-batch".to_owned(),
            PriorityClassInfo {
                value: 5000,
                preemption_policy: Some("PreemptLowerPriority".into()),
            },
        )]
        .into()
    }

    fn enabled_namespace() -> BTreeMap<String, String> {
        [("koordinator.sh/enable-colocation".into(), "true".into())].into()
    }

    #[test]
    fn batch_profile_sets_everything_and_converts_resources() {
        let profile = batch_profile();
        let classes = classes();
        let namespace = enabled_namespace();
        let ctx = ProfileContext {
            profiles: &[&profile],
            namespace_labels: Some(&namespace),
            priority_classes: &classes,
            skip_mutating_resources: false,
        };
        let mut pod = spark_pod();
        assert!(apply_colocation_profiles(&mut pod, &ctx, &mut || 0).unwrap());
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["koordinator.sh/qosClass"], "BE");
        assert_eq!(labels["koordinator.sh/priority"], "1000");
        assert_eq!(labels["team"], "data");
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()["note"],
            "colocated"
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.scheduler_name.as_deref(), Some("koord-scheduler"));
        assert_eq!(spec.priority, Some(5000));
        assert_eq!(spec.priority_class_name.as_deref(), Some("koord-batch"));
        let main = spec.containers[0].resources.as_ref().unwrap();
        let requests = main.requests.as_ref().unwrap();
        assert_eq!(requests["kubernetes.io/batch-cpu"].0, "500");
        assert_eq!(requests["kubernetes.io/batch-memory"].0, "1Gi");
        assert!(!requests.contains_key("cpu") && !requests.contains_key("memory"));
        assert_eq!(
            main.limits.as_ref().unwrap()["kubernetes.io/batch-cpu"].0,
            "2000"
        );
        let limits_only = spec.containers[1].resources.as_ref().unwrap();
        assert_eq!(
            limits_only.requests.as_ref().unwrap()["kubernetes.io/batch-cpu"].0,
            "1500",
            "a limit without a request gets the request copied"
        );
    }

    #[test]
    fn cpu_beyond_64_bits_of_milli_cores_is_refused_not_clamped() {
        let profile = batch_profile();
        let classes = classes();
        let namespace = enabled_namespace();
        let ctx = ProfileContext {
            profiles: &[&profile],
            namespace_labels: Some(&namespace),
            priority_classes: &classes,
            skip_mutating_resources: false,
        };
        let mut pod = spark_pod();
        pod.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert("cpu".into(), Quantity("1E".into()));
        let err = apply_colocation_profiles(&mut pod, &ctx, &mut || 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cpu") && err.contains("\"1E\""), "{err}");
    }

    #[test]
    fn selectors_and_probability_decide_whether_a_profile_applies() {
        let profile = batch_profile();
        let classes = classes();
        let other_namespace = BTreeMap::new();
        let ctx = ProfileContext {
            profiles: &[&profile],
            namespace_labels: Some(&other_namespace),
            priority_classes: &classes,
            skip_mutating_resources: false,
        };
        let mut pod = spark_pod();
        assert!(!apply_colocation_profiles(&mut pod, &ctx, &mut || 0).unwrap());
        assert_eq!(pod, spark_pod());

        let namespace = enabled_namespace();
        let mut half = batch_profile();
        half.spec.probability = Some(IntOrString::String("50%".into()));
        let ctx = ProfileContext {
            profiles: &[&half],
            namespace_labels: Some(&namespace),
            ..ctx
        };
        let mut pod = spark_pod();
        assert!(
            !apply_colocation_profiles(&mut pod, &ctx, &mut || 51).unwrap(),
            "roll above 50 skips"
        );
        let mut pod = spark_pod();
        assert!(
            apply_colocation_profiles(&mut pod, &ctx, &mut || 50).unwrap(),
            "roll of 50 applies"
        );

        let mut bad = batch_profile();
        bad.spec.probability = Some(IntOrString::String("half".into()));
        let ctx = ProfileContext {
            profiles: &[&bad],
            ..ctx
        };
        let err = apply_colocation_profiles(&mut spark_pod(), &ctx, &mut || 0).unwrap_err();
        assert!(matches!(err, ProfileError::Probability { .. }), "{err}");
    }

    #[test]
    fn missing_priority_class_is_an_error_naming_it() {
        let profile = batch_profile();
        let namespace = enabled_namespace();
        let ctx = ProfileContext {
            profiles: &[&profile],
            namespace_labels: Some(&namespace),
            priority_classes: &BTreeMap::new(),
            skip_mutating_resources: false,
        };
        let err = apply_colocation_profiles(&mut spark_pod(), &ctx, &mut || 0).unwrap_err();
        assert!(
            err.to_string().contains("\"koord-batch\" not found"),
            "{err}"
        );
    }

    #[test]
    fn skip_annotation_keeps_cpu_and_memory() {
        let mut profile = batch_profile();
        profile.metadata.annotations = Some(
            [(
                "config.koordinator.sh/skip-update-resources".into(),
                "true".into(),
            )]
            .into(),
        );
        let classes = classes();
        let namespace = enabled_namespace();
        let ctx = ProfileContext {
            profiles: &[&profile],
            namespace_labels: Some(&namespace),
            priority_classes: &classes,
            skip_mutating_resources: false,
        };
        let mut pod = spark_pod();
        assert!(apply_colocation_profiles(&mut pod, &ctx, &mut || 0).unwrap());
        let requests = pod.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap();
        assert_eq!(requests["cpu"].0, "500m");
    }

    #[test]
    fn profiles_apply_in_name_order_and_mappings_work() {
        let first = profile(
            "a",
            ClusterColocationProfileSpec {
                labels: Some([("tier".into(), "gold".into())].into()),
                label_keys_mapping: Some([("app".into(), "app-copy".into())].into()),
                label_suffixes: Some([("app".into(), "-x".into())].into()),
                ..Default::default()
            },
        );
        let second = profile(
            "b",
            ClusterColocationProfileSpec {
                labels: Some([("tier".into(), "silver".into())].into()),
                patch: Some(
                    json!({"spec": {"containers": [{"name": "main", "image": "patched"}]}}),
                ),
                ..Default::default()
            },
        );
        let ctx = ProfileContext {
            profiles: &[&second, &first],
            namespace_labels: None,
            priority_classes: &BTreeMap::new(),
            skip_mutating_resources: false,
        };
        let mut pod = spark_pod();
        assert!(apply_colocation_profiles(&mut pod, &ctx, &mut || 0).unwrap());
        let labels = pod.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["tier"], "silver", "b applies after a");
        assert_eq!(labels["app-copy"], "spark");
        assert_eq!(labels["app"], "spark-x");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("patched"));
        assert_eq!(spec.containers.len(), 2, "containers merge by name");
        assert_eq!(
            spec.containers[0]
                .resources
                .as_ref()
                .unwrap()
                .requests
                .as_ref()
                .unwrap()["cpu"]
                .0,
            "500m"
        );
    }

    #[test]
    fn extended_resource_spec_records_batch_resources_once() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [
                {"name": "a", "resources": {"requests": {"kubernetes.io/batch-cpu": "500", "cpu": "1"},
                                           "limits": {"kubernetes.io/batch-memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1"}}}
            ]}
        }))
        .unwrap();
        assert!(apply_extended_resource_spec(&mut pod).unwrap());
        let annotation = &pod.metadata.annotations.as_ref().unwrap()["node.koordinator.sh/extended-resource-spec"];
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(annotation).unwrap(),
            json!({"containers": {"a": {"requests": {"kubernetes.io/batch-cpu": "500"},
                                        "limits": {"kubernetes.io/batch-memory": "1Gi"}}}})
        );
        assert!(
            !apply_extended_resource_spec(&mut pod).unwrap(),
            "second pass changes nothing"
        );

        let mut plain = spark_pod();
        assert!(!apply_extended_resource_spec(&mut plain).unwrap());
        assert!(plain.metadata.annotations.is_none());
    }

    #[test]
    fn mid_pods_convert_to_mid_resources_and_prod_pods_do_not_convert() {
        let mut pod = spark_pod();
        pod.metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert("koordinator.sh/priority-class".into(), "koord-mid".into());
        assert!(convert_to_extended_resources(&mut pod).unwrap());
        let requests = pod.spec.unwrap().containers[0]
            .resources
            .clone()
            .unwrap()
            .requests
            .unwrap();
        assert_eq!(requests["kubernetes.io/mid-cpu"].0, "500");
        assert_eq!(requests["kubernetes.io/mid-memory"].0, "1Gi");

        let mut prod = spark_pod();
        prod.spec.as_mut().unwrap().priority = Some(9500);
        assert!(!convert_to_extended_resources(&mut prod).unwrap());
    }
}
