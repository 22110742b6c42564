//! `slo.koordinator.sh/v1alpha1`: NodeSLO and NodeMetric, plus the pod and node
//! annotations upstream defines next to them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

pub mod cpu_latency_protection;
pub mod host_application;
pub mod node;
pub mod nodemetric_types;
pub mod nodeslo_types;
pub mod pod;
pub mod resources;
pub mod slo_extension;

pub use cpu_latency_protection::*;
pub use host_application::*;
pub use node::*;
pub use nodemetric_types::*;
pub use nodeslo_types::*;
pub use pod::*;
pub use resources::*;
pub use slo_extension::*;

/// The API group of this module.
pub const GROUP: &str = "slo.koordinator.sh";
/// The API version of this module.
pub const VERSION: &str = "v1alpha1";

/// A malformed SLO-related annotation on a pod or node.
#[derive(Debug, thiserror::Error)]
pub enum SloAnnotationError {
    #[error("annotation {key} is not valid JSON for its type: {source}")]
    InvalidJson {
        key: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("annotation {ANNOTATION_POD_CPU_QOS}: groupIdentity {value} is outside -1..=2")]
    GroupIdentityOutOfRange { value: i64 },
}

/// The CRDs of this group version, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![polish(NodeSLO::crd()), polish(NodeMetric::crd())]
}

/// Brings kube-derive's output closer to upstream's controller-gen output:
/// `spec` is optional (upstream's sample NodeMetric leaves it empty; the spec
/// types read a missing or null spec as empty), the root lists `apiVersion`,
/// `kind` and `metadata`, and int-or-string values keep their
/// `anyOf: [integer, string]` branches, which kube-derive empties.
fn polish(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let root = version
            .schema
            .as_mut()
            .and_then(|schema| schema.open_api_v3_schema.as_mut());
        let Some(root) = root else { continue };
        if let Some(required) = root.required.as_mut() {
            required.retain(|field| field != "spec");
        }
        if root.required.as_ref().is_some_and(Vec::is_empty) {
            root.required = None;
        }
        let properties = root.properties.get_or_insert_with(Default::default);
        for (name, json_type) in [
            ("apiVersion", "string"),
            ("kind", "string"),
            ("metadata", "object"),
        ] {
            properties
                .entry(name.to_owned())
                .or_insert_with(|| JSONSchemaProps {
                    type_: Some(json_type.to_owned()),
                    ..Default::default()
                });
        }
        restore_int_or_string_branches(root);
    }
    crd
}

fn restore_int_or_string_branches(schema: &mut JSONSchemaProps) {
    if schema.x_kubernetes_int_or_string == Some(true)
        && let Some(any_of) = schema.any_of.as_mut()
        && any_of.len() == 2
        && any_of
            .iter()
            .all(|branch| *branch == JSONSchemaProps::default())
    {
        for (branch, json_type) in any_of.iter_mut().zip(["integer", "string"]) {
            branch.type_ = Some(json_type.to_owned());
        }
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        restore_int_or_string_branches(child);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => restore_int_or_string_branches(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => {
            items.iter_mut().for_each(restore_int_or_string_branches)
        }
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(value)) = schema.additional_properties.as_mut() {
        restore_int_or_string_branches(value);
    }
}
