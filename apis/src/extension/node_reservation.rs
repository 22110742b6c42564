//! Node-level reservation of resources and CPUs for system use
//! (`node.koordinator.sh/reservation`).

use serde::{Deserialize, Serialize};

use super::annotations::{
    StringMap, empty_as_none, null_as_default, parse_json_annotation_non_empty, set_json_annotation,
};
use super::error::ExtensionError;
use super::quantity::QuantityValue;
use super::resource::{RESOURCE_CPU, ResourceList};
use crate::wire_enum::wire_enum;

/// Node annotation: [`NodeReservation`].
pub const ANNOTATION_NODE_RESERVATION: &str = "node.koordinator.sh/reservation";
/// Node label: enables NUMA-level allocatable reservation.
pub const LABEL_NODE_ENABLE_NUMA_RESERVATION: &str = "node.koordinator.sh/enable-numa-reservation";

/// Value of `node.koordinator.sh/reservation`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeReservation {
    /// Amounts to hold back, e.g. `{"cpu":"1","memory":"2Gi"}`.
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "std::collections::BTreeMap::is_empty"
    )]
    pub resources: ResourceList,
    /// Specific CPUs to hold back, in cpu-list form (`1-6`, `2,4,6,8`).
    #[serde(
        rename = "reservedCPUs",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub reserved_cpus: String,
    #[serde(
        rename = "applyPolicy",
        default,
        deserialize_with = "empty_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub apply_policy: Option<NodeReservationApplyPolicy>,
}

wire_enum! {
    pub enum NodeReservationApplyPolicy closed {
        /// Deduct from schedulable resources and reserve the CPUs (default).
        Default = "Default",
        /// Only keep the CPUs out of cpuset allocation; kubelet's own
        /// reservation accounts for the amounts.
        ReservedCPUsOnly = "ReservedCPUsOnly",
    }
}

impl NodeReservation {
    /// The reserved cpuset and the number of CPUs reserved by amount.
    /// Explicit CPUs win: with `reservedCPUs` set the count is 0; otherwise
    /// the CPU amount rounded up to whole CPUs (upstream `GetReservedCPUs`).
    pub fn reserved_cpus_and_count(&self) -> (&str, i64) {
        if !self.reserved_cpus.is_empty() {
            return (&self.reserved_cpus, 0);
        }
        let milli = self
            .resources
            .get(RESOURCE_CPU)
            .and_then(|q| QuantityValue::of(q).ok())
            .map_or(0, QuantityValue::milli_value);
        let count = if milli > 0 {
            milli / 1000 + i64::from(milli % 1000 != 0)
        } else {
            0
        };
        ("", count)
    }
}

/// Absent or empty → `Ok(None)`.
pub fn get_node_reservation(
    node_annotations: &StringMap,
) -> Result<Option<NodeReservation>, ExtensionError> {
    parse_json_annotation_non_empty(node_annotations, ANNOTATION_NODE_RESERVATION)
}

pub fn set_node_reservation(
    node_annotations: &mut StringMap,
    reservation: &NodeReservation,
) -> Result<(), ExtensionError> {
    set_json_annotation(node_annotations, ANNOTATION_NODE_RESERVATION, reservation)
}
