//! Node resource amplification: a per-resource ratio by which the node's
//! allocatable is scaled up, and the raw allocatable before scaling.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::annotations::{StringMap, parse_json_annotation, set_json_annotation};
use super::error::ExtensionError;
use super::quantity::QuantityValue;
use super::resource::{RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE, RESOURCE_MEMORY, ResourceList};

/// Node annotation: JSON map resource → ratio, written with two decimals.
pub const ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO: &str =
    "node.koordinator.sh/resource-amplification-ratio";
/// Node annotation: the allocatable before amplification (a resource list).
pub const ANNOTATION_NODE_RAW_ALLOCATABLE: &str = "node.koordinator.sh/raw-allocatable";

/// An amplification ratio; values at or below 1 leave amounts unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ratio(pub f64);

/// The ratios, resource → ratio; absent → `Ok(None)`.
pub fn get_node_resource_amplification_ratios(
    node_annotations: &StringMap,
) -> Result<Option<BTreeMap<String, Ratio>>, ExtensionError> {
    parse_json_annotation(
        node_annotations,
        ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
    )
}

/// The ratio of one resource; `Ok(None)` when the annotation or the
/// resource is absent (upstream: -1).
pub fn get_node_resource_amplification_ratio(
    node_annotations: &StringMap,
    resource_name: &str,
) -> Result<Option<Ratio>, ExtensionError> {
    Ok(get_node_resource_amplification_ratios(node_annotations)?
        .and_then(|ratios| ratios.get(resource_name).copied()))
}

/// The annotation text upstream writes: a JSON object whose numbers have
/// exactly two decimals (`{"cpu":1.50}`). Non-finite ratios are an error.
pub fn format_node_resource_amplification_ratios(
    ratios: &BTreeMap<String, Ratio>,
) -> Result<String, ExtensionError> {
    let key = ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO;
    let mut text = String::from("{");
    for (index, (name, ratio)) in ratios.iter().enumerate() {
        if !ratio.0.is_finite() {
            return Err(ExtensionError::invalid_value(
                key,
                &ratio.0.to_string(),
                format!("ratio of {name} is not a finite number"),
            ));
        }
        if index > 0 {
            text.push(',');
        }
        let quoted_name = serde_json::to_string(name).map_err(|source| ExtensionError::Encode {
            key: key.to_owned(),
            source,
        })?;
        text.push_str(&format!("{quoted_name}:{:.2}", ratio.0));
    }
    text.push('}');
    Ok(text)
}

pub fn set_node_resource_amplification_ratios(
    node_annotations: &mut StringMap,
    ratios: &BTreeMap<String, Ratio>,
) -> Result<(), ExtensionError> {
    let text = format_node_resource_amplification_ratios(ratios)?;
    node_annotations.insert(
        ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO.to_owned(),
        text,
    );
    Ok(())
}

/// Sets one resource's ratio; returns whether it changed.
pub fn set_node_resource_amplification_ratio(
    node_annotations: &mut StringMap,
    resource_name: &str,
    ratio: Ratio,
) -> Result<bool, ExtensionError> {
    let mut ratios = get_node_resource_amplification_ratios(node_annotations)?.unwrap_or_default();
    if ratios.get(resource_name) == Some(&ratio) {
        return Ok(false);
    }
    ratios.insert(resource_name.to_owned(), ratio);
    set_node_resource_amplification_ratios(node_annotations, &ratios)?;
    Ok(true)
}

pub fn has_node_raw_allocatable(node_annotations: &StringMap) -> bool {
    node_annotations.contains_key(ANNOTATION_NODE_RAW_ALLOCATABLE)
}

pub fn get_node_raw_allocatable(
    node_annotations: &StringMap,
) -> Result<Option<ResourceList>, ExtensionError> {
    parse_json_annotation(node_annotations, ANNOTATION_NODE_RAW_ALLOCATABLE)
}

pub fn set_node_raw_allocatable(
    node_annotations: &mut StringMap,
    allocatable: &ResourceList,
) -> Result<(), ExtensionError> {
    set_json_annotation(
        node_annotations,
        ANNOTATION_NODE_RAW_ALLOCATABLE,
        allocatable,
    )
}

/// `origin × ratio`, rounded up; unchanged when the ratio is at most 1.
pub fn amplify(origin: i64, ratio: Ratio) -> i64 {
    if ratio.0 <= 1.0 {
        return origin;
    }
    // Float → integer `as` saturates, which is the sane result for overflow.
    (origin as f64 * ratio.0).ceil() as i64
}

/// Amplifies `requests` in place for the named resources (all when
/// `resource_names` is empty). CPU is scaled in milli-units, everything else
/// in whole units; zero, unparsable and unratioed amounts are left alone.
pub fn amplify_resource_list(
    requests: &mut ResourceList,
    ratios: &BTreeMap<String, Ratio>,
    resource_names: &[&str],
) {
    let names: Vec<String> = if resource_names.is_empty() {
        requests.keys().cloned().collect()
    } else {
        resource_names
            .iter()
            .map(|name| (*name).to_owned())
            .collect()
    };
    for name in names {
        let Some(ratio) = ratios.get(&name).copied().filter(|r| r.0 > 1.0) else {
            continue;
        };
        let Some(value) = requests.get(&name).and_then(|q| QuantityValue::of(q).ok()) else {
            continue;
        };
        if value.is_zero() {
            continue;
        }
        let text = if name == RESOURCE_CPU {
            QuantityValue::from_milli(amplify(value.milli_value(), ratio)).to_decimal_si()
        } else if name == RESOURCE_MEMORY || name == RESOURCE_EPHEMERAL_STORAGE {
            QuantityValue::from_units(amplify(value.value(), ratio)).to_binary_si()
        } else {
            QuantityValue::from_units(amplify(value.value(), ratio)).to_decimal_si()
        };
        requests.insert(
            name,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(text),
        );
    }
}
