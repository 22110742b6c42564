//! Koordinator priority classes: bands of `spec.priority`, the
//! `koordinator.sh/priority-class` override label and the sub-priority label.

use std::ops::RangeInclusive;

use k8s_openapi::api::core::v1::Pod;

use super::annotations::{StringMap, labels_of, parse_go_auto_base_i32};
use super::constants::{LABEL_POD_PRIORITY, LABEL_POD_PRIORITY_CLASS};
use super::error::ExtensionError;
use super::qos::{QoSClass, qos_class_of_pod};
use crate::wire_enum::wire_enum;

wire_enum! {
    /// Koordinator priority class. The names are also the names of the
    /// Kubernetes PriorityClass objects the Helm chart installs.
    #[derive(Default)]
    pub enum PriorityClass closed {
        Prod = "koord-prod",
        Mid = "koord-mid",
        Batch = "koord-batch",
        Free = "koord-free",
        #[default]
        None = "",
    }
}

pub const PRIORITY_PROD_VALUE_MAX: i32 = 9999;
pub const PRIORITY_PROD_VALUE_MIN: i32 = 9000;
pub const PRIORITY_MID_VALUE_MAX: i32 = 7999;
pub const PRIORITY_MID_VALUE_MIN: i32 = 7000;
pub const PRIORITY_BATCH_VALUE_MAX: i32 = 5999;
pub const PRIORITY_BATCH_VALUE_MIN: i32 = 5000;
pub const PRIORITY_FREE_VALUE_MAX: i32 = 3999;
pub const PRIORITY_FREE_VALUE_MIN: i32 = 3000;

pub const PRIORITY_PROD_VALUE_DEFAULT: i32 = 9500;
pub const PRIORITY_MID_VALUE_DEFAULT: i32 = 7500;
pub const PRIORITY_BATCH_VALUE_DEFAULT: i32 = 5500;
pub const PRIORITY_FREE_VALUE_DEFAULT: i32 = 3500;
pub const PRIORITY_NONE_VALUE_DEFAULT: i32 = 0;

/// The class of a priority value outside every band.
pub const DEFAULT_PRIORITY_CLASS: PriorityClass = PriorityClass::None;

/// Every class, `None` last (upstream `KnownPriorityClasses`).
pub const KNOWN_PRIORITY_CLASSES: &[PriorityClass] = PriorityClass::ALL;

impl PriorityClass {
    /// Upstream's lenient lookup: an unknown name means no class.
    pub fn from_name(name: &str) -> PriorityClass {
        name.parse().unwrap_or(PriorityClass::None)
    }

    /// The class whose band contains `priority`, else [`DEFAULT_PRIORITY_CLASS`].
    pub fn from_priority_value(priority: i32) -> PriorityClass {
        [
            PriorityClass::Prod,
            PriorityClass::Mid,
            PriorityClass::Batch,
            PriorityClass::Free,
        ]
        .into_iter()
        .find(|class| {
            class
                .value_range()
                .is_some_and(|band| band.contains(&priority))
        })
        .unwrap_or(DEFAULT_PRIORITY_CLASS)
    }

    /// The inclusive band of `spec.priority` values of the class.
    pub fn value_range(self) -> Option<RangeInclusive<i32>> {
        match self {
            PriorityClass::Prod => Some(PRIORITY_PROD_VALUE_MIN..=PRIORITY_PROD_VALUE_MAX),
            PriorityClass::Mid => Some(PRIORITY_MID_VALUE_MIN..=PRIORITY_MID_VALUE_MAX),
            PriorityClass::Batch => Some(PRIORITY_BATCH_VALUE_MIN..=PRIORITY_BATCH_VALUE_MAX),
            PriorityClass::Free => Some(PRIORITY_FREE_VALUE_MIN..=PRIORITY_FREE_VALUE_MAX),
            PriorityClass::None => None,
        }
    }

    /// The value a pod of this class gets when it has no priority of its own.
    pub fn default_value(self) -> i32 {
        match self {
            PriorityClass::Prod => PRIORITY_PROD_VALUE_DEFAULT,
            PriorityClass::Mid => PRIORITY_MID_VALUE_DEFAULT,
            PriorityClass::Batch => PRIORITY_BATCH_VALUE_DEFAULT,
            PriorityClass::Free => PRIORITY_FREE_VALUE_DEFAULT,
            PriorityClass::None => PRIORITY_NONE_VALUE_DEFAULT,
        }
    }
}

/// The class from the label, else from the band of `spec.priority`; `None`
/// when neither says (upstream `GetPodPriorityClassRaw`). A label with an
/// unknown value yields `None` without looking at `spec.priority`.
pub fn pod_priority_class_raw(pod: &Pod) -> PriorityClass {
    if let Some(name) = labels_of(&pod.metadata).get(LABEL_POD_PRIORITY_CLASS) {
        return PriorityClass::from_name(name);
    }
    pod.spec
        .as_ref()
        .and_then(|spec| spec.priority)
        .map_or(PriorityClass::None, PriorityClass::from_priority_value)
}

/// The pod's effective class: label, else priority band, else derived from
/// its QoS class (upstream `GetPodPriorityClassWithDefault`).
pub fn priority_class_of_pod(pod: &Pod) -> PriorityClass {
    match pod_priority_class_raw(pod) {
        PriorityClass::None => priority_class_for_qos(qos_class_of_pod(pod)),
        class => class,
    }
}

/// SYSTEM/LSE/LSR/LS → prod, BE → batch, no class → none.
pub fn priority_class_for_qos(qos: QoSClass) -> PriorityClass {
    match qos {
        QoSClass::System | QoSClass::LSE | QoSClass::LSR | QoSClass::LS => PriorityClass::Prod,
        QoSClass::BE => PriorityClass::Batch,
        QoSClass::None => DEFAULT_PRIORITY_CLASS,
    }
}

/// The pod's priority value: `spec.priority` when set and non-zero, else the
/// default value of its effective class (upstream `GetPodPriorityValueWithDefault`).
pub fn pod_priority_value_with_default(pod: &Pod) -> i32 {
    match pod.spec.as_ref().and_then(|spec| spec.priority) {
        Some(priority) if priority != PRIORITY_NONE_VALUE_DEFAULT => priority,
        _ => priority_class_of_pod(pod).default_value(),
    }
}

/// The `koordinator.sh/priority` sub-priority. Absent or empty → `Ok(None)`
/// (upstream treats both as 0); the value is read like Go's
/// `strconv.ParseInt(s, 0, 32)`, so `0x10` and `010` are accepted.
pub fn get_pod_sub_priority(labels: &StringMap) -> Result<Option<i32>, ExtensionError> {
    match labels.get(LABEL_POD_PRIORITY) {
        None => Ok(None),
        Some(text) if text.is_empty() => Ok(None),
        Some(text) => parse_go_auto_base_i32(text)
            .map(Some)
            .map_err(|reason| ExtensionError::invalid_value(LABEL_POD_PRIORITY, text, reason)),
    }
}

/// Writes the `koordinator.sh/priority` sub-priority label.
pub fn set_pod_sub_priority(labels: &mut StringMap, sub_priority: i32) {
    labels.insert(LABEL_POD_PRIORITY.to_owned(), sub_priority.to_string());
}
