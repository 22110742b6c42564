//! Schema helpers for fields whose upstream CRD schema is not what the Rust
//! type would derive (controller-gen markers such as
//! `+kubebuilder:pruning:PreserveUnknownFields` and int-or-string values).

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object the API server stores as-is (`x-kubernetes-preserve-unknown-fields`),
/// used where upstream embeds large Kubernetes types (pod templates, patches)
/// without a schema.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A value that may be an integer or a string (percentages such as `"50%"`,
/// quantities), as upstream's IntOrString.
pub fn int_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "anyOf": [{"type": "integer"}, {"type": "string"}],
    })
}
