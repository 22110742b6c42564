//! Node status mutation (upstream `webhook/node/mutating` with the
//! `resourceamplification` plugin): on every update of `nodes/status`
//! (the kubelet's status reports, the node resource controller's writes),
//! CPU and memory allocatable are amplified by the node's
//! `node.koordinator.sh/resource-amplification-ratio` annotation, and the
//! kubelet's own values are kept in `node.koordinator.sh/raw-allocatable`.
//!
//! Pure: the node as sent, the node as stored and the operation come in;
//! the node is changed in place, or an error says why it cannot be.
//!
//! Upstream's rules, in order:
//! - without a ratio annotation (or with an empty one) the raw-allocatable
//!   annotation is removed and nothing else changes;
//! - the raw values are recorded (from the incoming allocatable) when there
//!   is no raw annotation yet or when the incoming CPU or memory allocatable
//!   differs from the stored one (the kubelet reported new values);
//!   otherwise they are read back from the annotation, which must parse;
//! - each of CPU and memory with a ratio above 1 and a raw value becomes
//!   `raw × ratio` in milli-units, truncated; other resources and ratios are
//!   left alone.

use std::collections::BTreeMap;

use apis::extension::{
    ANNOTATION_NODE_RAW_ALLOCATABLE, ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, QuantityValue,
    RESOURCE_CPU, RESOURCE_MEMORY, ResourceList, get_node_raw_allocatable,
    get_node_resource_amplification_ratios, has_node_raw_allocatable,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::review::{Operation, Refusal};

/// Why a node's allocatable could not be amplified; the messages name the
/// node, the resource and the text that failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AmplificationError {
    #[error("invalid quantity {value:?}: {reason}")]
    InvalidQuantity { value: String, reason: &'static str },
    #[error("quantity {0:?} is beyond 64 bits of milli-units")]
    BeyondMilliRange(String),
    #[error("failed to encode raw allocatable: {0}")]
    EncodeRawAllocatable(String),
    #[error("admit for {node}, failed to parse raw allocatable: {message}")]
    MalformedRawAllocatable { node: String, message: String },
    #[error("admit for {node}, failed to parse resource amplification ratios: {message}")]
    MalformedRatios { node: String, message: String },
    /// A raw allocatable value that cannot be amplified.
    #[error("admit for {node}, raw allocatable {resource}: {source}")]
    Amplify {
        node: String,
        resource: &'static str,
        source: Box<AmplificationError>,
    },
}

impl Refusal for AmplificationError {
    fn metric_label(&self) -> &'static str {
        match self {
            AmplificationError::InvalidQuantity { .. } => "invalid_quantity",
            AmplificationError::BeyondMilliRange(_) => "out_of_range",
            AmplificationError::EncodeRawAllocatable(_) => "encode_failed",
            AmplificationError::MalformedRawAllocatable { .. } => "malformed_raw_allocatable",
            AmplificationError::MalformedRatios { .. } => "malformed_ratios",
            AmplificationError::Amplify { source, .. } => source.metric_label(),
        }
    }
}

impl From<apis::extension::QuantityError> for AmplificationError {
    fn from(err: apis::extension::QuantityError) -> Self {
        AmplificationError::InvalidQuantity {
            value: err.value,
            reason: err.reason,
        }
    }
}

/// Upstream's plugin name (metrics label).
pub const PLUGIN_NAME: &str = "NodeResourceAmplificationPlugin";

/// The resources amplified; only their raw values are recorded.
pub const SUPPORTED_RESOURCES: [&str; 2] = [RESOURCE_CPU, RESOURCE_MEMORY];

/// Admits a `nodes/status` request (upstream `Admit`): creates pass as they
/// are, updates are amplified. `old` is the stored node of an update.
pub fn admit(
    operation: Operation,
    node: &mut Node,
    old: Option<&Node>,
) -> Result<(), AmplificationError> {
    match operation {
        Operation::Update => handle_update(old, node),
        _ => Ok(()),
    }
}

/// The CPU and memory entries of a node's allocatable.
fn supported_allocatable(node: &Node) -> ResourceList {
    let mut list = ResourceList::new();
    if let Some(allocatable) = node.status.as_ref().and_then(|s| s.allocatable.as_ref()) {
        for name in SUPPORTED_RESOURCES {
            if let Some(quantity) = allocatable.get(name) {
                list.insert(name.to_owned(), quantity.clone());
            }
        }
    }
    list
}

/// Two quantities are equal when their values are; text that does not parse
/// is compared as text.
fn same_quantity(a: &Quantity, b: &Quantity) -> bool {
    match (QuantityValue::of(a), QuantityValue::of(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a.0 == b.0,
    }
}

/// Upstream `isSupportedResourceChanged`: whether CPU or memory allocatable
/// appeared, vanished or changed in value between the stored and the
/// incoming node. False when either is missing.
pub fn supported_resources_changed(old: Option<&Node>, new: Option<&Node>) -> bool {
    let (Some(old), Some(new)) = (old, new) else {
        return false;
    };
    let old = supported_allocatable(old);
    let new = supported_allocatable(new);
    old.len() != new.len()
        || old.iter().any(|(name, quantity)| {
            new.get(name)
                .is_none_or(|other| !same_quantity(quantity, other))
        })
}

/// The canonical text Kubernetes prints for a quantity (as Go's JSON
/// encoding of a ResourceList writes it): binary suffixes stay binary.
fn canonical(quantity: &Quantity) -> Result<Quantity, AmplificationError> {
    let value = QuantityValue::of(quantity)?;
    Ok(Quantity(if is_binary(quantity) {
        value.to_binary_si()
    } else {
        value.to_decimal_si()
    }))
}

/// Whether the text uses a binary suffix (`Ki` … `Ei`), which Kubernetes
/// keeps as the quantity's format.
fn is_binary(quantity: &Quantity) -> bool {
    quantity.0.trim_end().ends_with('i')
}

/// Upstream `MultiplyMilliQuant`: the value in milli-units (rounded up) ×
/// `factor`, truncated, in the quantity's own format.
pub fn multiply_milli(quantity: &Quantity, factor: f64) -> Result<Quantity, AmplificationError> {
    let value = QuantityValue::of(quantity)?;
    let milli = value
        .checked_milli_value()
        .ok_or_else(|| AmplificationError::BeyondMilliRange(quantity.0.clone()))?;
    // Float to integer `as` saturates, the sane result for an overflow.
    let scaled = QuantityValue::from_milli((milli as f64 * factor) as i64);
    Ok(Quantity(if is_binary(quantity) {
        scaled.to_binary_si()
    } else {
        scaled.to_decimal_si()
    }))
}

fn handle_update(old: Option<&Node>, node: &mut Node) -> Result<(), AmplificationError> {
    let ratio_set = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO))
        .is_some_and(|text| !text.is_empty());
    if !ratio_set {
        // The feature is off for the node: drop the saved raw values.
        if let Some(annotations) = node.metadata.annotations.as_mut() {
            annotations.remove(ANNOTATION_NODE_RAW_ALLOCATABLE);
        }
        return Ok(());
    }
    if node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .is_none()
    {
        return Ok(());
    }
    let name = node.metadata.name.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let has_raw = has_node_raw_allocatable(node.metadata.annotations.as_ref().unwrap_or(&empty));
    let raw = if !has_raw || supported_resources_changed(old, Some(&*node)) {
        let mut incoming = ResourceList::new();
        for (resource, quantity) in supported_allocatable(node) {
            incoming.insert(resource, canonical(&quantity)?);
        }
        if !incoming.is_empty() {
            let text = serde_json::to_string(&incoming)
                .map_err(|err| AmplificationError::EncodeRawAllocatable(err.to_string()))?;
            node.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ANNOTATION_NODE_RAW_ALLOCATABLE.to_owned(), text);
        }
        incoming
    } else {
        match get_node_raw_allocatable(node.metadata.annotations.as_ref().unwrap_or(&empty)) {
            Ok(Some(raw)) => raw,
            Ok(None) => ResourceList::new(),
            Err(err) => {
                return Err(AmplificationError::MalformedRawAllocatable {
                    node: name,
                    message: err.to_string(),
                });
            }
        }
    };
    let ratios = get_node_resource_amplification_ratios(
        node.metadata.annotations.as_ref().unwrap_or(&empty),
    )
    .map_err(|err| AmplificationError::MalformedRatios {
        node: name.clone(),
        message: err.to_string(),
    })?
    .unwrap_or_default();
    let Some(allocatable) = node.status.as_mut().and_then(|s| s.allocatable.as_mut()) else {
        return Ok(());
    };
    for resource in SUPPORTED_RESOURCES {
        let Some(ratio) = ratios.get(resource) else {
            continue;
        };
        if ratio.0 <= 1.0 || ratio.0.is_nan() {
            continue;
        }
        let Some(original) = raw.get(resource) else {
            continue;
        };
        let amplified =
            multiply_milli(original, ratio.0).map_err(|err| AmplificationError::Amplify {
                node: name.clone(),
                resource,
                source: Box::new(err),
            })?;
        allocatable.insert(resource.to_owned(), amplified);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    //! Cases transcribed from upstream's
    //! `webhook/node/plugins/resourceamplification/resource_amplification_test.go`.

    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;

    fn node(annotations: &[(&str, &str)], allocatable: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("test-node".into());
        node.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        node.status = Some(NodeStatus {
            allocatable: Some(
                allocatable
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect(),
            ),
            ..NodeStatus::default()
        });
        node
    }

    fn milli(node: &Node, resource: &str) -> i64 {
        let quantity = &node.status.as_ref().unwrap().allocatable.as_ref().unwrap()[resource];
        QuantityValue::of(quantity).unwrap().milli_value()
    }

    fn raw_milli(node: &Node, resource: &str) -> Option<i64> {
        let annotations = node.metadata.annotations.as_ref().unwrap();
        let raw = get_node_raw_allocatable(annotations).unwrap()?;
        Some(QuantityValue::of(raw.get(resource)?).unwrap().milli_value())
    }

    #[test]
    fn handle_update_follows_upstream() {
        let ratio = ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO;
        let raw = ANNOTATION_NODE_RAW_ALLOCATABLE;
        // (name, annotations, resource, allocatable milli, want allocatable, want raw)
        let cases: [(&str, Vec<(&str, &str)>, &str, Option<i64>); 6] = [
            (
                "normal",
                vec![(ratio, r#"{"cpu": 1.5}"#)],
                "1500m",
                Some(1000),
            ),
            (
                "disable1",
                vec![(ratio, r#"{"cpu": 0.5}"#)],
                "1",
                Some(1000),
            ),
            ("disable2", vec![(ratio, r#"{"cpu": 1}"#)], "1", Some(1000)),
            (
                "disable amplication will remove original allocatable",
                vec![(raw, "{}")],
                "1",
                None,
            ),
            (
                "unsupported ratio will be ignored",
                vec![(ratio, r#"{"eni": 2}"#)],
                "1",
                Some(1000),
            ),
            (
                "get original resource from annotation and amplify",
                vec![(ratio, r#"{"cpu": 2}"#), (raw, r#"{"cpu":"1"}"#)],
                "2",
                Some(1000),
            ),
        ];
        for (name, annotations, want_allocatable, want_raw) in cases {
            let mut node = node(&annotations, &[("cpu", "1")]);
            handle_update(None, &mut node).unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(
                milli(&node, "cpu"),
                QuantityValue::parse(want_allocatable)
                    .unwrap()
                    .milli_value(),
                "{name}"
            );
            match want_raw {
                Some(want) => assert_eq!(raw_milli(&node, "cpu"), Some(want), "{name}"),
                None => assert!(
                    !node
                        .metadata
                        .annotations
                        .as_ref()
                        .unwrap()
                        .contains_key(raw),
                    "{name}"
                ),
            }
        }
    }

    #[test]
    fn creates_and_empty_updates_pass() {
        let mut created = Node::default();
        assert_eq!(admit(Operation::Create, &mut created, None), Ok(()));
        let mut updated = Node::default();
        assert_eq!(
            admit(Operation::Update, &mut updated, Some(&Node::default())),
            Ok(())
        );
        assert_eq!(updated, Node::default());
    }

    #[test]
    fn supported_resource_changes_follow_upstream() {
        let with = |pairs: &[(&str, &str)]| node(&[], pairs);
        let cases = [
            ("oldNode is nil", None, Some(Node::default()), false),
            ("newNode is nil", Some(Node::default()), None, false),
            ("oldNode & newNode is nil", None, None, false),
            (
                "resource is unchanged",
                Some(with(&[("cpu", "4"), ("memory", "8Gi")])),
                Some(with(&[("cpu", "4"), ("memory", "8Gi")])),
                false,
            ),
            (
                "add resource",
                Some(with(&[("cpu", "4")])),
                Some(with(&[("cpu", "4"), ("memory", "8Gi")])),
                true,
            ),
            (
                "remove resource",
                Some(with(&[("cpu", "4"), ("memory", "8Gi")])),
                Some(with(&[("cpu", "4")])),
                true,
            ),
            (
                "remove updated",
                Some(with(&[("cpu", "4"), ("memory", "8Gi")])),
                Some(with(&[("cpu", "5"), ("memory", "8Gi")])),
                true,
            ),
            (
                "unsupported resource remove",
                Some(with(&[("cpu", "4"), ("ephemeral-storage", "80")])),
                Some(with(&[("cpu", "4"), ("ephemeral-storage", "100")])),
                false,
            ),
            (
                "same value, other spelling",
                Some(with(&[("cpu", "4000m"), ("memory", "8Gi")])),
                Some(with(&[("cpu", "4"), ("memory", "8589934592")])),
                false,
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(
                supported_resources_changed(old.as_ref(), new.as_ref()),
                want,
                "{name}"
            );
        }
    }

    /// A kubelet status report (raw values) over a stored, amplified node,
    /// then the controller's status write that leaves CPU and memory as
    /// stored: both end at raw × ratio, never amplified twice.
    #[test]
    fn kubelet_reports_and_other_status_writes_converge() {
        let ratio = (
            ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO,
            r#"{"cpu":1.50,"memory":2.00}"#,
        );
        let stored = node(
            &[ratio],
            &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")],
        );
        let mut report = stored.clone();
        handle_update(Some(&stored), &mut report).unwrap();
        let alloc = report.status.as_ref().unwrap().allocatable.clone().unwrap();
        assert_eq!(alloc["cpu"].0, "6");
        assert_eq!(alloc["memory"].0, "16Gi");
        assert_eq!(alloc["pods"].0, "110");
        assert_eq!(
            report.metadata.annotations.as_ref().unwrap()[ANNOTATION_NODE_RAW_ALLOCATABLE],
            r#"{"cpu":"4","memory":"8Gi"}"#
        );
        // Another status write keeps the amplified values it read.
        let mut rewrite = report.clone();
        handle_update(Some(&report), &mut rewrite).unwrap();
        assert_eq!(rewrite, report);
        // The kubelet reports its raw values again: same result.
        let mut again = stored.clone();
        again.metadata.annotations = report.metadata.annotations.clone();
        handle_update(Some(&report), &mut again).unwrap();
        assert_eq!(again, report);
        // The ratio is removed: the raw annotation goes, values stay as sent.
        let mut off = again.clone();
        off.metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO);
        handle_update(Some(&again), &mut off).unwrap();
        assert!(
            !off.metadata
                .annotations
                .as_ref()
                .unwrap()
                .contains_key(ANNOTATION_NODE_RAW_ALLOCATABLE)
        );
    }

    #[test]
    fn malformed_annotations_are_errors_naming_the_node() {
        let mut bad_raw = node(
            &[
                (ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, r#"{"cpu":2}"#),
                (ANNOTATION_NODE_RAW_ALLOCATABLE, "{not json"),
            ],
            &[("cpu", "1")],
        );
        let err = handle_update(None, &mut bad_raw).unwrap_err();
        assert!(
            err.to_string()
                .contains("admit for test-node, failed to parse raw allocatable"),
            "{err}"
        );
        let mut bad_ratio = node(
            &[(ANNOTATION_NODE_RESOURCE_AMPLIFICATION_RATIO, "[}")],
            &[("cpu", "1")],
        );
        let err = handle_update(None, &mut bad_ratio).unwrap_err();
        assert!(
            err.to_string()
                .contains("failed to parse resource amplification ratios"),
            "{err}"
        );
    }

    #[test]
    fn multiplying_truncates_milli_units_and_keeps_the_format() {
        let q = |text: &str| Quantity(text.to_owned());
        assert_eq!(multiply_milli(&q("3"), 1.33).unwrap().0, "3990m");
        assert_eq!(multiply_milli(&q("1Gi"), 1.5).unwrap().0, "1536Mi");
        assert_eq!(multiply_milli(&q("1000"), 1.5).unwrap().0, "1500");
        assert!(multiply_milli(&q("x"), 2.0).is_err());
    }
}
