//! Koordinator preemption overrides on pods.

use super::annotations::StringMap;
use crate::wire_enum::wire_enum;

/// Pod label: the pod's preemption policy when the PreemptionPolicyTransformer
/// feature is on.
pub const LABEL_POD_PREEMPTION_POLICY: &str = "scheduling.koordinator.sh/preemption-policy";
/// Pod label: `true` keeps the pod from being a victim of reservation preemption.
pub const LABEL_DISABLE_PREEMPTIBLE: &str = "scheduling.koordinator.sh/disable-preemptible";

wire_enum! {
    /// Kubernetes `PreemptionPolicy` values.
    pub enum PreemptionPolicy closed {
        PreemptLowerPriority = "PreemptLowerPriority",
        Never = "Never",
    }
}

/// The policy used when the label is absent or unknown.
pub const DEFAULT_PREEMPTION_POLICY: PreemptionPolicy = PreemptionPolicy::Never;

/// The labelled policy; absent or unknown → `None`.
pub fn pod_koord_preemption_policy(pod_labels: &StringMap) -> Option<PreemptionPolicy> {
    pod_labels
        .get(LABEL_POD_PREEMPTION_POLICY)
        .and_then(|text| text.parse().ok())
}

/// The labelled policy, else [`DEFAULT_PREEMPTION_POLICY`].
pub fn pod_koord_preemption_policy_with_default(pod_labels: &StringMap) -> PreemptionPolicy {
    pod_koord_preemption_policy(pod_labels).unwrap_or(DEFAULT_PREEMPTION_POLICY)
}

/// The pod may be preempted unless labelled `disable-preemptible=true`.
pub fn is_pod_preemptible(pod_labels: &StringMap) -> bool {
    pod_labels
        .get(LABEL_DISABLE_PREEMPTIBLE)
        .is_none_or(|v| v != "true")
}
