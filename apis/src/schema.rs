//! Schema helpers for fields whose upstream CRD schema is not what the Rust
//! type would derive (controller-gen markers such as
//! `+kubebuilder:pruning:PreserveUnknownFields` and int-or-string values).

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON value the API server stores as-is: `x-kubernetes-preserve-unknown-fields`
/// with no type, as upstream's `+kubebuilder:pruning:PreserveUnknownFields` +
/// `+kubebuilder:validation:Schemaless` fields (pod templates, patches).
pub fn preserve_unknown_fields(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// An object whose members the API server stores as-is (`type: object` +
/// `x-kubernetes-preserve-unknown-fields`), as upstream's free-form extension maps.
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
