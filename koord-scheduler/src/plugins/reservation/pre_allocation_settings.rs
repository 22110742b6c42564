//! `ReservationArgs.preAllocationConfig`: the scheduler-wide settings of
//! reservation pre-allocation (see [`super::pre_allocation`]), read with the
//! plugin args and checked once at start.

use apis::configuration::selector::validate_label_key;
use apis::extension::constants::{
    ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY, LABEL_POD_PRE_ALLOCATABLE,
};
use serde::Deserialize;

/// `ReservationArgs.preAllocationConfig`, as upstream spells it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreAllocationConfig {
    #[serde(default)]
    pub enable_cluster_mode: bool,
    /// Label marking Cluster-mode candidates (value `true`); empty = upstream's.
    #[serde(default)]
    pub cluster_label_key: String,
    /// Annotation ordering Cluster-mode candidates (an integer, higher
    /// first); empty = upstream's.
    #[serde(default)]
    pub cluster_priority_annotation_key: String,
    /// Where the reservation fits without taking a pod's place (and
    /// pre-allocation is not required), take none there.
    #[serde(default)]
    pub prefer_no_pre_allocated_pods: bool,
}

/// The scheduler-wide pre-allocation settings, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub cluster_mode: bool,
    pub cluster_label_key: String,
    pub cluster_priority_key: String,
    pub prefer_no_pre_allocated_pods: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            cluster_mode: false,
            cluster_label_key: LABEL_POD_PRE_ALLOCATABLE.to_string(),
            cluster_priority_key: ANNOTATION_POD_PRE_ALLOCATABLE_PRIORITY.to_string(),
            prefer_no_pre_allocated_pods: false,
        }
    }
}

impl Settings {
    /// Upstream's defaults for empty keys; a key that is no valid label or
    /// annotation name is refused (it could match no pod).
    pub fn from_config(config: Option<&PreAllocationConfig>) -> Result<Self, String> {
        let mut settings = Self::default();
        let Some(config) = config else {
            return Ok(settings);
        };
        settings.cluster_mode = config.enable_cluster_mode;
        settings.prefer_no_pre_allocated_pods = config.prefer_no_pre_allocated_pods;
        take_key(
            &mut settings.cluster_label_key,
            "preAllocationConfig.clusterLabelKey",
            &config.cluster_label_key,
        )?;
        take_key(
            &mut settings.cluster_priority_key,
            "preAllocationConfig.clusterPriorityAnnotationKey",
            &config.cluster_priority_annotation_key,
        )?;
        Ok(settings)
    }
}

/// `given` in place of the default `key` when set, once it checks as a
/// label (or annotation) key.
fn take_key(key: &mut String, field: &str, given: &str) -> Result<(), String> {
    if given.is_empty() {
        return Ok(());
    }
    validate_label_key(field, given).map_err(|e| e.to_string())?;
    given.clone_into(key);
    Ok(())
}
