//! Node annotations through which batch resources are shared with other
//! schedulers such as Hadoop YARN (upstream `slo/v1alpha1/node.go`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::SloAnnotationError;
use super::resources::{ResourceList, resource_list_schema};

/// Node annotation: the batch allocatable before other schedulers' allocations
/// are subtracted, as JSON [`OriginAllocatable`].
pub const NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY: &str =
    "node.koordinator.sh/originExtendedAllocatable";
/// Node annotation: allocations made by other schedulers, as JSON
/// [`ThirdPartyAllocations`]; subtracted before extended resources are updated.
pub const NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY: &str =
    "node.koordinator.sh/thirdPartyAllocations";

/// Extended allocatable before third-party allocations are subtracted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OriginAllocatable {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub resources: ResourceList,
}

/// Allocations of other schedulers on a node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThirdPartyAllocations {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<ThirdPartyAllocation>,
}

/// One allocator's share, in one priority band.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThirdPartyAllocation {
    #[serde(default)]
    pub name: String,
    /// Koordinator priority class name (`koord-batch`, ...).
    #[serde(default)]
    pub priority: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub resources: ResourceList,
}

impl ThirdPartyAllocations {
    /// The allocations made in one priority band.
    pub fn by_priority<'a>(
        &'a self,
        priority: &'a str,
    ) -> impl Iterator<Item = &'a ThirdPartyAllocation> + 'a {
        self.allocations
            .iter()
            .filter(move |a| a.priority == priority)
    }

    /// Adds the allocation, replacing an existing one of the same name.
    pub fn upsert(&mut self, allocation: ThirdPartyAllocation) {
        match self
            .allocations
            .iter_mut()
            .find(|a| a.name == allocation.name)
        {
            Some(existing) => *existing = allocation,
            None => self.allocations.push(allocation),
        }
    }
}

/// Reads [`NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY`].
pub fn origin_extended_allocatable(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<OriginAllocatable>, SloAnnotationError> {
    let key = NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY;
    annotations
        .get(key)
        .map(|raw| serde_json::from_str(raw))
        .transpose()
        .map_err(|source| SloAnnotationError::InvalidJson { key, source })
}

/// Records `extended` in [`NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY`],
/// keeping resources it does not mention; a malformed old value is replaced.
pub fn set_origin_extended_allocatable(
    annotations: &mut BTreeMap<String, String>,
    extended: &ResourceList,
) -> Result<(), SloAnnotationError> {
    let mut origin = origin_extended_allocatable(annotations)
        .ok()
        .flatten()
        .unwrap_or_default();
    origin.resources.extend(
        extended
            .iter()
            .map(|(name, quantity)| (name.clone(), quantity.clone())),
    );
    let key = NODE_ORIGIN_EXTENDED_ALLOCATABLE_ANNOTATION_KEY;
    let value = serde_json::to_string(&origin)
        .map_err(|source| SloAnnotationError::InvalidJson { key, source })?;
    annotations.insert(key.to_owned(), value);
    Ok(())
}

/// Reads [`NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY`].
pub fn third_party_allocations(
    annotations: &BTreeMap<String, String>,
) -> Result<Option<ThirdPartyAllocations>, SloAnnotationError> {
    let key = NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY;
    annotations
        .get(key)
        .map(|raw| serde_json::from_str(raw))
        .transpose()
        .map_err(|source| SloAnnotationError::InvalidJson { key, source })
}

/// Creates or replaces the named allocation in
/// [`NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY`]; a malformed old value is
/// replaced.
pub fn set_third_party_allocation(
    annotations: &mut BTreeMap<String, String>,
    allocation: ThirdPartyAllocation,
) -> Result<(), SloAnnotationError> {
    let mut allocations = third_party_allocations(annotations)
        .ok()
        .flatten()
        .unwrap_or_default();
    allocations.upsert(allocation);
    let key = NODE_THIRD_PARTY_ALLOCATIONS_ANNOTATION_KEY;
    let value = serde_json::to_string(&allocations)
        .map_err(|source| SloAnnotationError::InvalidJson { key, source })?;
    annotations.insert(key.to_owned(), value);
    Ok(())
}
