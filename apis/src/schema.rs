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

/// Adds the `apiVersion`, `kind` and `metadata` properties to every version's
/// root schema, as controller-gen writes them (kube-derive leaves them out).
/// Properties already present are kept.
pub fn add_type_meta_properties(
    crd: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

    let typed = |type_: &str| JSONSchemaProps {
        type_: Some(type_.to_owned()),
        ..Default::default()
    };
    for version in &mut crd.spec.versions {
        let Some(root) = version
            .schema
            .as_mut()
            .and_then(|schema| schema.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let properties = root.properties.get_or_insert_with(Default::default);
        for (name, type_) in [
            ("apiVersion", "string"),
            ("kind", "string"),
            ("metadata", "object"),
        ] {
            properties
                .entry(name.to_owned())
                .or_insert_with(|| typed(type_));
        }
    }
}

/// The OpenAPI v3 schema of `T` generated with the same settings kube-derive
/// uses, for custom resources whose root type is written by hand (no `spec`,
/// or a `status` field without the status subresource).
pub fn custom_resource_schema<T: schemars::JsonSchema>() -> Result<
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
    serde_json::Error,
> {
    let generator = schemars::generate::SchemaSettings::openapi3()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
        .into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>()).and_then(serde_json::from_value)
}

/// Removes the `nullable: true` markers (and the `null` entries they add to
/// enums) that kube-derive puts on every `Option` field, recursively.
/// controller-gen emits none, so the API server prunes explicit nulls and
/// then applies schema defaults; with `nullable` it would store the null.
pub fn remove_nullable(
    schema: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps,
) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
        JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    };

    schema.nullable = None;
    if let Some(values) = schema.enum_.as_mut() {
        values.retain(|value| !value.0.is_null());
    }
    let children = schema
        .properties
        .iter_mut()
        .flat_map(|properties| properties.values_mut())
        .chain(schema.any_of.iter_mut().flatten())
        .chain(schema.all_of.iter_mut().flatten())
        .chain(schema.one_of.iter_mut().flatten())
        .chain(schema.not.as_deref_mut());
    for child in children {
        remove_nullable(child);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => remove_nullable(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(remove_nullable),
        None => {}
    }
    if let Some(JSONSchemaPropsOrBool::Schema(values)) = schema.additional_properties.as_mut() {
        remove_nullable(values);
    }
}

/// Makes a kube-derive CRD look like controller-gen's: root `apiVersion`,
/// `kind` and `metadata` properties, no root `title`, and no `nullable`
/// markers.
pub fn controller_gen_style(
    crd: &mut k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) {
    add_type_meta_properties(crd);
    for version in &mut crd.spec.versions {
        if let Some(root) = version
            .schema
            .as_mut()
            .and_then(|schema| schema.open_api_v3_schema.as_mut())
        {
            root.title = None;
            remove_nullable(root);
        }
    }
}

/// The upstream pattern every `resource.Quantity` is validated against.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A `resource.Quantity` as controller-gen writes it: int-or-string with the
/// quantity pattern, so malformed quantities are rejected at admission.
pub fn quantity(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": true,
    })
}

/// A `corev1.ResourceList` (resource name to quantity).
pub fn resource_list(generator: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": quantity(generator),
    })
}

/// `T`'s schema marked `x-kubernetes-map-type: atomic` (replaced as a whole
/// by server-side apply), as upstream's `+structType=atomic` types are.
pub fn atomic<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<T>();
    schema.insert("x-kubernetes-map-type".to_owned(), "atomic".into());
    schema
}

/// A list of atomic `T`s.
pub fn list_of_atomic<T: schemars::JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": atomic::<T>(generator),
    })
}

/// A `metav1.LabelSelector` with the atomic markers upstream's schema carries.
pub fn label_selector(generator: &mut SchemaGenerator) -> Schema {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    let mut schema = atomic::<LabelSelector>(generator);
    if let Some(expressions) = schema
        .get_mut("properties")
        .and_then(|properties| properties.get_mut("matchExpressions"))
        .and_then(serde_json::Value::as_object_mut)
    {
        expressions.insert("x-kubernetes-list-type".to_owned(), "atomic".into());
        if let Some(values) = expressions
            .get_mut("items")
            .and_then(|items| items.get_mut("properties"))
            .and_then(|properties| properties.get_mut("values"))
            .and_then(serde_json::Value::as_object_mut)
        {
            values.insert("x-kubernetes-list-type".to_owned(), "atomic".into());
        }
    }
    schema
}

/// A list of `metav1.Condition` with the validations the upstream schema
/// carries for it (lengths, patterns, status enum).
pub fn metav1_conditions(generator: &mut SchemaGenerator) -> Schema {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    let mut condition = generator.subschema_for::<Condition>();
    let rules = [
        ("message", serde_json::json!({"maxLength": 32768})),
        ("observedGeneration", serde_json::json!({"minimum": 0})),
        (
            "reason",
            serde_json::json!({
                "maxLength": 1024,
                "minLength": 1,
                "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            }),
        ),
        (
            "status",
            serde_json::json!({"enum": ["True", "False", "Unknown"]}),
        ),
        (
            "type",
            serde_json::json!({
                "maxLength": 316,
                "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            }),
        ),
    ];
    if let Some(properties) = condition
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for (name, rule) in rules {
            if let (Some(property), Some(rule)) = (
                properties
                    .get_mut(name)
                    .and_then(serde_json::Value::as_object_mut),
                rule.as_object(),
            ) {
                property.extend(rule.clone());
            }
        }
    }
    json_schema!({
        "type": "array",
        "items": condition,
    })
}
