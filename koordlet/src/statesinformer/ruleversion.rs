//! Which NodeSLO a consumer works from: its version (resourceVersion,
//! generation), when it was last updated on the API server (its newest
//! managedFields time, else its creation time) and when koordlet received it.
//! The QoS manager uses these to report which rules each strategy applied and
//! how long a NodeSLO change took to reach the cgroup files (see
//! `qosmanager::distribution`).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::NodeSLO;

/// Longest resourceVersion kept; the API server's are short decimal numbers,
/// a longer one (from a hand-written file) is cut so a metric label stays small.
const MAX_RESOURCE_VERSION_LEN: usize = 64;

/// The identity of one NodeSLO revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleVersion {
    /// `metadata.resourceVersion`; for a NodeSLO without one (standalone
    /// mode reads it from a file) `spec-<hash of the spec>`, so an edit of the
    /// file is still a new version.
    pub resource_version: String,
    /// `metadata.generation`, when set.
    pub generation: Option<i64>,
    /// The newest `metadata.managedFields[].time`, else
    /// `metadata.creationTimestamp`; `None` when the object carries neither.
    pub updated_at: Option<SystemTime>,
}

impl RuleVersion {
    /// The version of `slo`.
    pub fn of(slo: &NodeSLO) -> Self {
        let meta = &slo.metadata;
        let resource_version = match meta.resource_version.as_deref().map(str::trim) {
            Some(rv) if !rv.is_empty() => rv.chars().take(MAX_RESOURCE_VERSION_LEN).collect(),
            _ => format!("spec-{:016x}", spec_hash(slo)),
        };
        let managed = meta
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|entry| entry.time.as_ref())
            .filter_map(|time| system_time(time.0))
            .max();
        let created = meta
            .creation_timestamp
            .as_ref()
            .and_then(|time| system_time(time.0));
        Self {
            resource_version,
            generation: meta.generation,
            updated_at: managed.or(created),
        }
    }

    /// The generation as a label value (empty when unset).
    pub fn generation_label(&self) -> String {
        self.generation.map(|g| g.to_string()).unwrap_or_default()
    }
}

/// A NodeSLO version and when koordlet received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedRule {
    pub version: RuleVersion,
    pub observed_at: SystemTime,
}

fn spec_hash(slo: &NodeSLO) -> u64 {
    // The JSON of the spec is deterministic (BTreeMaps, declared field order).
    let text = serde_json::to_string(&slo.spec).unwrap_or_default();
    let mut hasher = DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

fn system_time(timestamp: k8s_openapi::jiff::Timestamp) -> Option<SystemTime> {
    let nanos = timestamp.as_nanosecond();
    if nanos < 0 {
        return None;
    }
    let nanos = u64::try_from(nanos).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos))
}

#[cfg(test)]
mod tests {
    use apis::slo::v1alpha1::NodeSLOSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(secs: i64) -> Option<Time> {
        Some(Time(Timestamp::from_second(secs).unwrap()))
    }

    #[test]
    fn newest_managed_fields_time_wins_over_creation() {
        let mut slo = NodeSLO::new("n", NodeSLOSpec::default());
        slo.metadata.resource_version = Some("4711".into());
        slo.metadata.generation = Some(3);
        slo.metadata.creation_timestamp = at(1_000);
        slo.metadata.managed_fields = Some(vec![
            ManagedFieldsEntry {
                time: at(2_000),
                ..Default::default()
            },
            ManagedFieldsEntry {
                time: at(3_000),
                ..Default::default()
            },
            ManagedFieldsEntry::default(),
        ]);
        let version = RuleVersion::of(&slo);
        assert_eq!(version.resource_version, "4711");
        assert_eq!(version.generation_label(), "3");
        assert_eq!(
            version.updated_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(3_000))
        );
        slo.metadata.managed_fields = None;
        assert_eq!(
            RuleVersion::of(&slo).updated_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000))
        );
    }

    #[test]
    fn a_file_nodeslo_is_versioned_by_its_spec() {
        let mut slo = NodeSLO::new("n", NodeSLOSpec::default());
        let first = RuleVersion::of(&slo);
        assert!(first.resource_version.starts_with("spec-"));
        assert_eq!(first.generation_label(), "");
        assert_eq!(first.updated_at, None);
        assert_eq!(RuleVersion::of(&slo), first, "same spec, same version");
        slo.spec.resource_used_threshold_with_be = Some(Default::default());
        assert_ne!(RuleVersion::of(&slo), first);
        // Pre-epoch and over-long values stay bounded.
        slo.metadata.resource_version = Some("9".repeat(500));
        slo.metadata.creation_timestamp = at(-5);
        let odd = RuleVersion::of(&slo);
        assert_eq!(odd.resource_version.len(), MAX_RESOURCE_VERSION_LEN);
        assert_eq!(odd.updated_at, None);
    }
}
