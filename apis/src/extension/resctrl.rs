//! Per-pod resctrl (LLC and memory bandwidth) settings (`node.koordinator.sh/resctrl`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, is_zero_i32, null_as_default, parse_json_annotation, set_json_annotation,
};
use super::error::ExtensionError;

/// Pod annotation: [`ResctrlConfig`].
pub const ANNOTATION_RESCTRL: &str = "node.koordinator.sh/resctrl";

/// Resolved schemata per cache ID (no JSON tags upstream, hence the
/// capitalised keys).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resctrl {
    #[serde(rename = "L3", default, deserialize_with = "null_as_default")]
    pub l3: BTreeMap<i32, String>,
    #[serde(rename = "MB", default, deserialize_with = "null_as_default")]
    pub mb: BTreeMap<i32, String>,
}

/// Value of `node.koordinator.sh/resctrl`. Both parts are always written
/// (Go's `omitempty` has no effect on structs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResctrlConfig {
    #[serde(default, deserialize_with = "null_as_default")]
    pub llc: LLC,
    #[serde(default, deserialize_with = "null_as_default")]
    pub mb: MB,
}

/// Last-level cache allocation.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LLC {
    #[serde(default, deserialize_with = "null_as_default")]
    pub schemata: SchemataConfig,
    #[serde(
        rename = "schemataPerCache",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub schemata_per_cache: Vec<SchemataPerCacheConfig>,
}

/// Memory bandwidth allocation.
#[allow(clippy::upper_case_acronyms)]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MB {
    #[serde(default, deserialize_with = "null_as_default")]
    pub schemata: SchemataConfig,
    #[serde(
        rename = "schemataPerCache",
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub schemata_per_cache: Vec<SchemataPerCacheConfig>,
}

/// A share given as a percent or as a range of ways/percent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemataConfig {
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub percent: i32,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub range: Vec<i32>,
}

/// A schemata for one cache ID; the schemata fields sit beside `cacheID`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemataPerCacheConfig {
    #[serde(rename = "cacheID", default, skip_serializing_if = "is_zero_i32")]
    pub cache_id: i32,
    #[serde(flatten)]
    pub schemata: SchemataConfig,
}

pub fn get_resctrl_info(annotations: &StringMap) -> Result<Option<ResctrlConfig>, ExtensionError> {
    parse_json_annotation(annotations, ANNOTATION_RESCTRL)
}

pub fn set_resctrl_info(
    annotations: &mut StringMap,
    config: &ResctrlConfig,
) -> Result<(), ExtensionError> {
    set_json_annotation(annotations, ANNOTATION_RESCTRL, config)
}
