//! Free-form extension data carried by NodeSLO and NodeMetric (upstream
//! `slo_extension.go`).

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// Third-party extension values, keyed by extension name.
///
/// Upstream's Go field carries a `json:",inline"` tag, which `encoding/json`
/// does not honour, so the map is written under the Go field name `Object`:
/// `extensions: {"Object": {"<name>": ...}}`. We keep that wire shape so both
/// implementations read each other's objects. The API server stores the value
/// without a schema (`x-kubernetes-preserve-unknown-fields`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtensionsMap {
    #[serde(rename = "Object", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub object: BTreeMap<String, serde_json::Value>,
}

impl ExtensionsMap {
    /// True when no extension is set.
    pub fn is_empty(&self) -> bool {
        self.object.is_empty()
    }
}

impl JsonSchema for ExtensionsMap {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ExtensionsMap".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        crate::schema::preserve_unknown_object(generator)
    }
}
