//! Descheduling keys: eviction cost and soft (custom) eviction requests.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Time};
use serde::{Deserialize, Serialize};

use super::annotations::{StringMap, parse_json_annotation, set_json_annotation};
use super::error::ExtensionError;

/// Pod annotation: int32 eviction cost. Lower is evicted first among pods of
/// equal priority; absent = 0; `2147483647` means never evict.
pub const ANNOTATION_EVICTION_COST: &str = "scheduling.koordinator.sh/eviction-cost";
/// Pod annotation: a [`SoftEvictionSpec`] asking a custom evictor to act.
pub const ANNOTATION_SOFT_EVICTION: &str = "scheduling.koordinator.sh/soft-eviction";

/// Value of `scheduling.koordinator.sh/soft-eviction`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SoftEvictionSpec {
    /// When the eviction was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Time>,
    #[serde(
        rename = "deleteOptions",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub delete_options: Option<DeleteOptions>,
    /// Who asked.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub initiator: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

pub fn get_soft_eviction_spec(
    annotations: &StringMap,
) -> Result<Option<SoftEvictionSpec>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_SOFT_EVICTION)
}

pub fn set_soft_eviction_spec(
    annotations: &mut StringMap,
    spec: &SoftEvictionSpec,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_SOFT_EVICTION, spec)
}

/// The pod's eviction cost; absent → `Ok(None)` (upstream: 0). Like the
/// Kubernetes pod-deletion-cost, a leading `+` or a leading zero is invalid.
pub fn get_eviction_cost(annotations: &StringMap) -> Result<Option<i32>, ExtensionError> {
    let key = ANNOTATION_EVICTION_COST;
    let Some(text) = annotations.get(key) else {
        return Ok(None);
    };
    let invalid = |reason: &str| ExtensionError::invalid_value(key, text, reason);
    let first_digit_ok = match text.as_bytes() {
        [] => false,
        [b'-', ..] => true,
        [b'0'] => true,
        [first, ..] => (b'1'..=b'9').contains(first),
    };
    if !first_digit_ok {
        return Err(invalid(
            "must not be empty, start with '+' or have leading zeros",
        ));
    }
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("not a decimal integer"));
    }
    text.parse::<i32>()
        .map(Some)
        .map_err(|_| invalid("out of the 32-bit integer range"))
}

pub fn set_eviction_cost(annotations: &mut StringMap, cost: i32) {
    annotations.insert(ANNOTATION_EVICTION_COST.to_owned(), cost.to_string());
}
