//! A gang's settings as upstream reads them: from its PodGroup (label
//! `pod-group.scheduling.sigs.k8s.io`) or from the gang annotations of its
//! pods, with the plugin args filling what neither says.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use apis::extension::coscheduling::{
    GangMatchPolicy, GangMode, LABEL_POD_GROUP, gang_name, get_gang_groups, get_gang_match_policy,
    get_gang_min_num, get_gang_mode, get_gang_total_num, get_gang_wait_time,
};
use apis::scheduling_sigs::v1alpha1::{PodGroup, PodGroupPhase};

use crate::cache::{ClusterCache, PodInfo, object_key};

/// Upstream's `defaultTimeout` (600 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Plugin-wide defaults a gang falls back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GangDefaults {
    pub timeout: Duration,
    pub match_policy: GangMatchPolicy,
}

impl Default for GangDefaults {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            match_policy: GangMatchPolicy::OnceSatisfied,
        }
    }
}

/// Where a gang's settings came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GangSource {
    PodGroup,
    Annotations,
}

/// One gang's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gang {
    /// `namespace/name`.
    pub key: String,
    pub source: GangSource,
    pub min_member: usize,
    /// total-number; never below min_member.
    pub total_number: usize,
    pub mode: GangMode,
    pub match_policy: GangMatchPolicy,
    /// How long the gang may wait for its members.
    pub wait_time: Duration,
    /// Keys of the gangs that must be satisfiable together, this one
    /// included, sorted and without duplicates.
    pub group: Vec<String>,
    /// PodGroup `status.scheduleStartTime`, when set.
    pub schedule_start: Option<SystemTime>,
}

impl Gang {
    /// Upstream's gang group id: the sorted keys joined by commas.
    pub fn group_id(&self) -> String {
        self.group.join(",")
    }
}

/// Why a gang cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GangError {
    /// Members name a PodGroup that is not in the cache (yet).
    #[error("can't find gang, gangName: {0}")]
    PodGroupNotFound(String),
    /// No member and no PodGroup: nothing defines the gang.
    #[error("gang {0} doesn't exist")]
    Unknown(String),
    /// min-available missing or malformed.
    #[error("invalid gang settings of {gang}: {reason}")]
    Invalid { gang: String, reason: String },
}

/// The gang key of a pod (`namespace/name`), if it belongs to one.
pub fn gang_key_of(pod: &PodInfo) -> Option<String> {
    gang_name(pod.labels(), pod.annotations()).map(|name| object_key(Some(&pod.namespace), name))
}

fn uses_pod_group(pod: &PodInfo) -> bool {
    pod.labels()
        .get(LABEL_POD_GROUP)
        .is_some_and(|name| !name.is_empty())
}

/// The group list, this gang included; malformed or empty lists mean the
/// gang alone (upstream logs and ignores them).
fn group_of(key: &str, annotations: &BTreeMap<String, String>) -> Vec<String> {
    let mut group = get_gang_groups(annotations)
        .ok()
        .flatten()
        .unwrap_or_default();
    group.retain(|g| !g.is_empty());
    group.push(key.to_string());
    group.sort();
    group.dedup();
    group
}

fn to_positive_duration(seconds: Option<i32>) -> Option<Duration> {
    seconds
        .filter(|s| *s > 0)
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs)
}

fn from_pod_group(key: &str, pod_group: &PodGroup, defaults: GangDefaults) -> Gang {
    let annotations = pod_group.metadata.annotations.clone().unwrap_or_default();
    let min_member = usize::try_from(pod_group.spec.min_member.unwrap_or(0).max(1)).unwrap_or(1);
    let spec = &pod_group.spec;
    Gang {
        key: key.to_string(),
        source: GangSource::PodGroup,
        min_member,
        total_number: total_of(&annotations, min_member),
        mode: get_gang_mode(&annotations)
            .ok()
            .flatten()
            .unwrap_or_default(),
        match_policy: get_gang_match_policy(&annotations)
            .ok()
            .flatten()
            .unwrap_or(defaults.match_policy),
        wait_time: to_positive_duration(spec.schedule_timeout_seconds).unwrap_or(defaults.timeout),
        group: group_of(key, &annotations),
        schedule_start: still_scheduling_since(pod_group),
    }
}

/// `status.scheduleStartTime` while the group has not been scheduled yet
/// (the field stays set afterwards).
fn still_scheduling_since(pod_group: &PodGroup) -> Option<SystemTime> {
    let status = pod_group.status.as_ref()?;
    let scheduling = matches!(
        status.phase,
        None | Some(
            PodGroupPhase::Pending | PodGroupPhase::PreScheduling | PodGroupPhase::Scheduling
        )
    );
    if !scheduling {
        return None;
    }
    let time = status.schedule_start_time.as_ref()?;
    Some(SystemTime::from(time.0))
}

fn total_of(annotations: &BTreeMap<String, String>, min_member: usize) -> usize {
    get_gang_total_num(annotations)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
        .max(min_member)
}

fn from_annotations(key: &str, pod: &PodInfo, defaults: GangDefaults) -> Result<Gang, GangError> {
    let annotations = pod.annotations();
    let invalid = |reason: String| GangError::Invalid {
        gang: key.to_string(),
        reason,
    };
    let min = get_gang_min_num(pod.labels(), annotations)
        .map_err(|e| invalid(e.to_string()))?
        .ok_or_else(|| invalid("missing min-available".into()))?;
    let min_member = usize::try_from(min.max(1)).unwrap_or(1);
    // A total below min-available is ignored upstream (logged), so it is here.
    let total_number = total_of(annotations, min_member);
    let wait_time = get_gang_wait_time(annotations)
        .ok()
        .flatten()
        .and_then(|d| d.to_std())
        .filter(|d| !d.is_zero())
        .unwrap_or(defaults.timeout);
    Ok(Gang {
        key: key.to_string(),
        source: GangSource::Annotations,
        min_member,
        total_number,
        mode: get_gang_mode(annotations)
            .ok()
            .flatten()
            .unwrap_or_default(),
        match_policy: get_gang_match_policy(annotations)
            .ok()
            .flatten()
            .unwrap_or(defaults.match_policy),
        wait_time,
        group: group_of(key, annotations),
        schedule_start: None,
    })
}

/// Resolves the gang `key`. Settings come from its PodGroup when its
/// members use the PodGroup label (or no member is known but the PodGroup
/// exists), else from `representative` or, failing that, the first member.
pub fn resolve(
    key: &str,
    representative: Option<&PodInfo>,
    first_member: Option<&PodInfo>,
    cache: &ClusterCache,
    defaults: GangDefaults,
) -> Result<Gang, GangError> {
    let pod = representative.or(first_member);
    match (pod, cache.pod_groups.get(key)) {
        (Some(pod), pod_group) if uses_pod_group(pod) => match pod_group {
            Some(pod_group) => Ok(from_pod_group(key, pod_group, defaults)),
            None => Err(GangError::PodGroupNotFound(key.to_string())),
        },
        (Some(pod), _) => from_annotations(key, pod, defaults),
        (None, Some(pod_group)) => Ok(from_pod_group(key, pod_group, defaults)),
        (None, None) => Err(GangError::Unknown(key.to_string())),
    }
}
