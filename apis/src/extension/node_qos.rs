//! Node network bandwidth, for network QoS.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::annotations::StringMap;
use super::error::ExtensionError;
use super::quantity::QuantityValue;

/// Node annotation: total network bandwidth as a quantity in bps.
pub const ANNOTATION_NODE_BANDWIDTH: &str = "node.koordinator.sh/network-bandwidth";

/// The node's total bandwidth; absent → `Ok(None)`, not a quantity → error.
pub fn get_node_total_bandwidth(
    node_annotations: &StringMap,
) -> Result<Option<Quantity>, ExtensionError> {
    let key = ANNOTATION_NODE_BANDWIDTH;
    let Some(text) = node_annotations.get(key) else {
        return Ok(None);
    };
    QuantityValue::parse(text)
        .map_err(|err| ExtensionError::invalid_value(key, text, err.reason))?;
    Ok(Some(Quantity(text.clone())))
}
