//! Gang scheduling keys: the gang annotations on pods and PodGroups, the
//! light-weight coscheduling labels, and the internal bind-gang keys.

use super::annotations::{
    StringMap, parse_go_decimal_i32, parse_json_annotation_non_empty, set_json_annotation,
};
use super::duration::GoDuration;
use super::error::ExtensionError;
use super::network_topology::{NetworkTopologySpec, get_network_topology_spec};
use crate::wire_enum::wire_enum;

pub const ANNOTATION_GANG_PREFIX: &str = "gang.scheduling.koordinator.sh";
/// The gang's name.
pub const ANNOTATION_GANG_NAME: &str = "gang.scheduling.koordinator.sh/name";
/// Members that must be schedulable together.
pub const ANNOTATION_GANG_MIN_NUM: &str = "gang.scheduling.koordinator.sh/min-available";
/// How long members wait in Permit for the rest (Go duration text).
pub const ANNOTATION_GANG_WAIT_TIME: &str = "gang.scheduling.koordinator.sh/waiting-time";
/// All members of the gang; defaults to min-available.
pub const ANNOTATION_GANG_TOTAL_NUM: &str = "gang.scheduling.koordinator.sh/total-number";
/// [`GangMode`].
pub const ANNOTATION_GANG_MODE: &str = "gang.scheduling.koordinator.sh/mode";
/// JSON list of `namespace/name` gangs bound together.
pub const ANNOTATION_GANG_GROUPS: &str = "gang.scheduling.koordinator.sh/groups";
/// Set by the scheduler when the gang timed out.
pub const ANNOTATION_GANG_TIMEOUT: &str = "gang.scheduling.koordinator.sh/timeout";
/// [`GangMatchPolicy`].
pub const ANNOTATION_GANG_MATCH_POLICY: &str = "gang.scheduling.koordinator.sh/match-policy";
/// The same match policy under the scheduler-plugins prefix.
pub const ANNOTATION_ALIAS_GANG_MATCH_POLICY: &str =
    "pod-group.scheduling.sigs.k8s.io/match-policy";

/// Pod label naming the PodGroup (scheduler-plugins `PodGroupLabel`).
pub const LABEL_POD_GROUP: &str = "pod-group.scheduling.sigs.k8s.io";
/// Deprecated light-weight coscheduling label: the gang's name.
pub const LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_NAME: &str =
    "pod-group.scheduling.sigs.k8s.io/name";
/// Deprecated light-weight coscheduling label: the gang's min-available.
pub const LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_MIN_AVAILABLE: &str =
    "pod-group.scheduling.sigs.k8s.io/min-available";

/// Deprecated: use [`ANNOTATION_BIND_GANG_GROUP_ID`].
pub const DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID: &str =
    "scheduling.koordinator.sh/bind-gang-group-id";
/// Internal: the gang group a pod binds with.
pub const ANNOTATION_BIND_GANG_GROUP_ID: &str =
    "internal.scheduling.koordinator.sh/bind-gang-group-id";
/// Deprecated: use [`ANNOTATION_BIND_GANG_MEMBER_COUNT`].
pub const DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT: &str =
    "scheduling.koordinator.sh/bind-gang-member-count";
/// Internal: how many members of the gang group bind together.
pub const ANNOTATION_BIND_GANG_MEMBER_COUNT: &str =
    "internal.scheduling.koordinator.sh/bind-gang-member-count";

wire_enum! {
    /// What happens to the gang when one member fails to schedule.
    #[derive(Default)]
    pub enum GangMode closed {
        /// Reject the whole gang (default).
        #[default]
        Strict = "Strict",
        /// Keep the members already assumed.
        NonStrict = "NonStrict",
    }
}

wire_enum! {
    /// Which members count toward min-available.
    #[derive(Default)]
    pub enum GangMatchPolicy closed {
        OnlyWaiting = "only-waiting",
        WaitingAndRunning = "waiting-and-running",
        /// Once satisfied, the gang stays satisfied (upstream's documented default).
        #[default]
        OnceSatisfied = "once-satisfied",
    }
}

/// A pod's gang settings as written on the pod. Absent optional settings
/// stay `None` so callers can apply their configured defaults (the
/// scheduler's default timeout and match policy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GangSpec {
    pub name: String,
    pub min_available: i32,
    /// `None` when absent or empty (upstream then uses min-available).
    pub total_number: Option<i32>,
    pub mode: Option<GangMode>,
    pub match_policy: Option<GangMatchPolicy>,
    /// As written; may be zero or negative, which upstream replaces by the
    /// default timeout.
    pub waiting_time: Option<GoDuration>,
    /// `namespace/name` of gangs bound with this one; empty when absent.
    pub groups: Vec<String>,
    pub network_topology_spec: Option<NetworkTopologySpec>,
}

/// The pod's gang name: the PodGroup label, else the light-weight label,
/// else the annotation; empty values are skipped.
pub fn gang_name<'a>(labels: &'a StringMap, annotations: &'a StringMap) -> Option<&'a str> {
    [
        labels.get(LABEL_POD_GROUP),
        labels.get(LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_NAME),
        annotations.get(ANNOTATION_GANG_NAME),
    ]
    .into_iter()
    .flatten()
    .map(String::as_str)
    .find(|name| !name.is_empty())
}

pub fn is_gang_pod(labels: &StringMap, annotations: &StringMap) -> bool {
    gang_name(labels, annotations).is_some()
}

/// The gang's min-available: the light-weight label when non-empty, else the
/// annotation; `Ok(None)` when neither is present.
pub fn get_gang_min_num(
    labels: &StringMap,
    annotations: &StringMap,
) -> Result<Option<i32>, ExtensionError> {
    let lightweight = labels
        .get(LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_MIN_AVAILABLE)
        .filter(|v| !v.is_empty());
    let (key, text) = match lightweight {
        Some(text) => (LABEL_LIGHTWEIGHT_COSCHEDULING_POD_GROUP_MIN_AVAILABLE, text),
        None => match annotations.get(ANNOTATION_GANG_MIN_NUM) {
            Some(text) => (ANNOTATION_GANG_MIN_NUM, text),
            None => return Ok(None),
        },
    };
    parse_go_decimal_i32(text)
        .map(Some)
        .map_err(|reason| ExtensionError::invalid_value(key, text, reason))
}

/// Absent or empty → `Ok(None)`.
pub fn get_gang_total_num(annotations: &StringMap) -> Result<Option<i32>, ExtensionError> {
    non_empty(annotations, ANNOTATION_GANG_TOTAL_NUM)
        .map(|text| {
            parse_go_decimal_i32(text).map_err(|reason| {
                ExtensionError::invalid_value(ANNOTATION_GANG_TOTAL_NUM, text, reason)
            })
        })
        .transpose()
}

/// Absent or empty → `Ok(None)`; otherwise Go duration text.
pub fn get_gang_wait_time(annotations: &StringMap) -> Result<Option<GoDuration>, ExtensionError> {
    non_empty(annotations, ANNOTATION_GANG_WAIT_TIME)
        .map(|text| {
            GoDuration::parse(text).map_err(|err| {
                ExtensionError::invalid_value(ANNOTATION_GANG_WAIT_TIME, text, err.reason)
            })
        })
        .transpose()
}

/// Absent or empty → `Ok(None)`; an unknown mode is an error (upstream logs
/// it and uses Strict).
pub fn get_gang_mode(annotations: &StringMap) -> Result<Option<GangMode>, ExtensionError> {
    parse_enum(annotations, ANNOTATION_GANG_MODE)
}

/// The match policy from the gang annotation, else its scheduler-plugins
/// alias; absent or empty → `Ok(None)`.
pub fn get_gang_match_policy(
    annotations: &StringMap,
) -> Result<Option<GangMatchPolicy>, ExtensionError> {
    if non_empty(annotations, ANNOTATION_GANG_MATCH_POLICY).is_some() {
        parse_enum(annotations, ANNOTATION_GANG_MATCH_POLICY)
    } else {
        parse_enum(annotations, ANNOTATION_ALIAS_GANG_MATCH_POLICY)
    }
}

/// The JSON list of bound gangs; absent or empty → `Ok(None)`.
pub fn get_gang_groups(annotations: &StringMap) -> Result<Option<Vec<String>>, ExtensionError> {
    parse_json_annotation_non_empty(annotations, ANNOTATION_GANG_GROUPS)
}

pub fn set_gang_groups(
    annotations: &mut StringMap,
    groups: &[String],
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_GANG_GROUPS, groups)
}

/// All gang settings of a pod; `Ok(None)` when the pod is not in a gang.
/// Strict: any malformed setting, or a missing min-available, is an error.
pub fn get_gang_spec(
    labels: &StringMap,
    annotations: &StringMap,
) -> Result<Option<GangSpec>, ExtensionError> {
    let Some(name) = gang_name(labels, annotations) else {
        return Ok(None);
    };
    let min_available = get_gang_min_num(labels, annotations)?.ok_or(ExtensionError::Missing {
        key: ANNOTATION_GANG_MIN_NUM.to_owned(),
    })?;
    Ok(Some(GangSpec {
        name: name.to_owned(),
        min_available,
        total_number: get_gang_total_num(annotations)?,
        mode: get_gang_mode(annotations)?,
        match_policy: get_gang_match_policy(annotations)?,
        waiting_time: get_gang_wait_time(annotations)?,
        groups: get_gang_groups(annotations)?.unwrap_or_default(),
        network_topology_spec: get_network_topology_spec(annotations)?,
    }))
}

/// Writes the gang annotations of `spec` (name, min-available and every set
/// optional field); fields that are `None` or empty are removed.
pub fn set_gang_spec(annotations: &mut StringMap, spec: &GangSpec) -> Result<(), ExtensionError> {
    annotations.insert(ANNOTATION_GANG_NAME.to_owned(), spec.name.clone());
    annotations.insert(
        ANNOTATION_GANG_MIN_NUM.to_owned(),
        spec.min_available.to_string(),
    );
    let optional_text = [
        (
            ANNOTATION_GANG_TOTAL_NUM,
            spec.total_number.map(|n| n.to_string()),
        ),
        (
            ANNOTATION_GANG_MODE,
            spec.mode.map(|m| m.as_str().to_owned()),
        ),
        (
            ANNOTATION_GANG_MATCH_POLICY,
            spec.match_policy.map(|p| p.as_str().to_owned()),
        ),
        (
            ANNOTATION_GANG_WAIT_TIME,
            spec.waiting_time.map(|d| d.to_string()),
        ),
    ];
    for (key, value) in optional_text {
        match value {
            Some(value) => annotations.insert(key.to_owned(), value),
            None => annotations.remove(key),
        };
    }
    if spec.groups.is_empty() {
        annotations.remove(ANNOTATION_GANG_GROUPS);
    } else {
        set_gang_groups(annotations, &spec.groups)?;
    }
    match &spec.network_topology_spec {
        Some(topology) => super::network_topology::set_network_topology_spec(annotations, topology),
        None => {
            annotations.remove(super::network_topology::ANNOTATION_GANG_NETWORK_TOPOLOGY_SPEC);
            Ok(())
        }
    }
}

fn non_empty<'a>(annotations: &'a StringMap, key: &str) -> Option<&'a str> {
    annotations
        .get(key)
        .map(String::as_str)
        .filter(|text| !text.is_empty())
}

fn parse_enum<T>(annotations: &StringMap, key: &str) -> Result<Option<T>, ExtensionError>
where
    T: std::str::FromStr<Err = super::error::UnknownValueError>,
{
    non_empty(annotations, key)
        .map(|text| {
            text.parse()
                .map_err(|err| ExtensionError::invalid_value(key, text, err))
        })
        .transpose()
}
