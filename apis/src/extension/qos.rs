//! Koordinator QoS classes and how a pod gets one: the `koordinator.sh/qosClass`
//! label, else its Kubernetes QoS class.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use super::annotations::{StringMap, labels_of};
use super::constants::LABEL_POD_QOS;
use super::quantity::QuantityValue;
use crate::wire_enum::wire_enum;

wire_enum! {
    /// Koordinator QoS class (label `koordinator.sh/qosClass`).
    #[allow(clippy::upper_case_acronyms)]
    #[derive(Default)]
    pub enum QoSClass closed {
        /// Latency-sensitive, exclusive cores.
        LSE = "LSE",
        /// Latency-sensitive, reserved cores.
        LSR = "LSR",
        /// Latency-sensitive, shared pool.
        LS = "LS",
        /// Best-effort (batch).
        BE = "BE",
        /// System daemons.
        System = "SYSTEM",
        /// No Koordinator QoS class.
        #[default]
        None = "",
    }
}

impl QoSClass {
    /// Upstream's lenient lookup: an unknown name means no class.
    pub fn from_name(name: &str) -> QoSClass {
        name.parse().unwrap_or(QoSClass::None)
    }
}

/// The Koordinator class given to Kubernetes Guaranteed pods without a label.
pub const QOS_CLASS_FOR_GUARANTEED: QoSClass = QoSClass::LSR;

wire_enum! {
    /// Kubernetes pod QoS class (`status.qosClass`).
    pub enum KubeQoSClass closed {
        Guaranteed = "Guaranteed",
        Burstable = "Burstable",
        BestEffort = "BestEffort",
    }
}

/// The class named by the `koordinator.sh/qosClass` label; `None` when the
/// label is absent or names no known class.
pub fn qos_class_from_labels(labels: &StringMap) -> QoSClass {
    labels
        .get(LABEL_POD_QOS)
        .map_or(QoSClass::None, |name| QoSClass::from_name(name))
}

/// The class from the pod's label only (upstream `GetPodQoSClassRaw`).
pub fn pod_qos_class_raw(pod: &Pod) -> QoSClass {
    qos_class_from_labels(labels_of(&pod.metadata))
}

/// The pod's effective class: the label, else mapped from its Kubernetes QoS
/// class (upstream `GetPodQoSClassWithDefault`).
pub fn qos_class_of_pod(pod: &Pod) -> QoSClass {
    match pod_qos_class_raw(pod) {
        QoSClass::None => kube_qos_class_of_pod(pod).map_or(QoSClass::None, qos_class_for_kube_qos),
        labelled => labelled,
    }
}

/// Guaranteed → LSR, Burstable → LS, BestEffort → BE.
pub fn qos_class_for_kube_qos(kube_qos: KubeQoSClass) -> QoSClass {
    match kube_qos {
        KubeQoSClass::Guaranteed => QOS_CLASS_FOR_GUARANTEED,
        KubeQoSClass::Burstable => QoSClass::LS,
        KubeQoSClass::BestEffort => QoSClass::BE,
    }
}

/// The pod's Kubernetes QoS class: `status.qosClass` when set, else computed
/// from the containers. `None` when the status holds an unknown class.
pub fn kube_qos_class_of_pod(pod: &Pod) -> Option<KubeQoSClass> {
    let recorded = pod
        .status
        .as_ref()
        .and_then(|status| status.qos_class.as_deref())
        .unwrap_or("");
    if recorded.is_empty() {
        Some(compute_kube_qos_class(pod.spec.as_ref()))
    } else {
        recorded.parse().ok()
    }
}

/// Computes the Kubernetes QoS class from requests and limits, by the
/// kubelet's rules: only cpu and memory count, only positive amounts count,
/// init containers count; Guaranteed needs cpu and memory limits on every
/// container and requests equal to limits. Quantities that do not parse are
/// skipped (the API server never stores such a pod).
pub fn compute_kube_qos_class(spec: Option<&PodSpec>) -> KubeQoSClass {
    let Some(spec) = spec else {
        return KubeQoSClass::BestEffort;
    };
    let containers: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let mut requests: BTreeMap<&str, QuantityValue> = BTreeMap::new();
    let mut limits: BTreeMap<&str, QuantityValue> = BTreeMap::new();
    let mut guaranteed = true;
    for container in containers {
        let resources = container.resources.as_ref();
        if let Some(container_requests) = resources.and_then(|r| r.requests.as_ref()) {
            for (name, quantity) in positive_compute_resources(container_requests) {
                add_to(&mut requests, name, quantity);
            }
        }
        let mut has_cpu_limit = false;
        let mut has_memory_limit = false;
        if let Some(container_limits) = resources.and_then(|r| r.limits.as_ref()) {
            for (name, quantity) in positive_compute_resources(container_limits) {
                has_cpu_limit |= name == "cpu";
                has_memory_limit |= name == "memory";
                add_to(&mut limits, name, quantity);
            }
        }
        if !(has_cpu_limit && has_memory_limit) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return KubeQoSClass::BestEffort;
    }
    let requests_match_limits = requests
        .iter()
        .all(|(name, request)| limits.get(name) == Some(request));
    if guaranteed && requests_match_limits && requests.len() == limits.len() {
        KubeQoSClass::Guaranteed
    } else {
        KubeQoSClass::Burstable
    }
}

fn positive_compute_resources<'a>(
    list: &'a BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> impl Iterator<Item = (&'a str, QuantityValue)> + 'a {
    list.iter()
        .filter(|(name, _)| name.as_str() == "cpu" || name.as_str() == "memory")
        .filter_map(|(name, quantity)| {
            let value = QuantityValue::of(quantity).ok()?;
            value.is_positive().then_some((name.as_str(), value))
        })
}

fn add_to<'a>(totals: &mut BTreeMap<&'a str, QuantityValue>, name: &'a str, value: QuantityValue) {
    let total = totals.entry(name).or_default();
    // Saturating: a sum beyond the representable range is "very large" either way.
    *total = total.checked_add(value).unwrap_or(*total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_strictly_and_leniently() {
        assert_eq!("LSE".parse::<QoSClass>(), Ok(QoSClass::LSE));
        assert_eq!("SYSTEM".parse::<QoSClass>(), Ok(QoSClass::System));
        assert_eq!("".parse::<QoSClass>(), Ok(QoSClass::None));
        assert!("ls".parse::<QoSClass>().is_err());
        assert_eq!(QoSClass::from_name("ls"), QoSClass::None);
        assert_eq!(QoSClass::from_name("BE"), QoSClass::BE);
        assert_eq!(QoSClass::System.as_str(), "SYSTEM");
    }

    #[test]
    fn json_uses_upstream_strings() {
        assert_eq!(serde_json::to_string(&QoSClass::LSR).unwrap(), r#""LSR""#);
        assert_eq!(
            serde_json::from_str::<QoSClass>(r#""BE""#).unwrap(),
            QoSClass::BE
        );
        assert!(serde_json::from_str::<QoSClass>(r#""XX""#).is_err());
    }
}
