//! ClusterColocationProfile controls.

use super::annotations::StringMap;

/// Profile annotation: the webhook must not rewrite pod resources.
pub const ANNOTATION_SKIP_UPDATE_RESOURCE: &str = "config.koordinator.sh/skip-update-resources";
/// Profile label: `true` lets the profile controller reconcile the profile.
pub const LABEL_CONTROLLER_MANAGED: &str = "config.koordinator.sh/controller-managed";

/// The profile carries the skip-update-resources annotation (any value).
pub fn should_skip_update_resource(profile_annotations: &StringMap) -> bool {
    profile_annotations.contains_key(ANNOTATION_SKIP_UPDATE_RESOURCE)
}

/// The profile is labelled `controller-managed=true`.
pub fn should_reconcile_profile(profile_labels: &StringMap) -> bool {
    profile_labels
        .get(LABEL_CONTROLLER_MANAGED)
        .is_some_and(|v| v == "true")
}
