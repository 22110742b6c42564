//! Custom resources whose root object kube-derive cannot express: kinds with
//! a `status` field but no status subresource (Device, ElasticQuota,
//! PodGroup) and kinds without a `spec` (NodeResourceTopology).
//!
//! The root struct is written by hand (deriving `Deserialize` and
//! `JsonSchema`, with a manual `Serialize` that writes `apiVersion` and
//! `kind` first, as kube-derive's does); `hand_built_resource!` then supplies
//! `kube::Resource` and `CustomResourceExt` from a [`CrdDescription`].

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceValidation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

/// Names, scope and annotations of a hand-built CRD.
#[derive(Clone, Copy, Debug)]
pub struct CrdDescription {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Annotations on the CRD object (e.g. `api-approved.kubernetes.io`,
    /// which the API server demands for `*.k8s.io` groups).
    pub annotations: &'static [(&'static str, &'static str)],
}

impl CrdDescription {
    /// `<plural>.<group>`, the CRD object's name.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// `<group>/<version>`.
    pub fn api_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// Builds the single-version CRD of root type `T`: schema generated like
/// kube-derive's and styled like controller-gen's, served and stored, with
/// no subresources and no printer columns.
pub fn crd_for<T: schemars::JsonSchema>(description: &CrdDescription) -> CustomResourceDefinition {
    // The schema comes from our own types, never from input, so a failure is
    // a programming error caught by every CRD test.
    let schema = crate::schema::custom_resource_schema::<T>()
        .unwrap_or_else(|err| panic!("schema of {} is not valid: {err}", description.kind));
    let annotations = (!description.annotations.is_empty()).then(|| {
        description
            .annotations
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    });
    let short_names = (!description.short_names.is_empty()).then(|| {
        description
            .short_names
            .iter()
            .map(|name| (*name).to_owned())
            .collect()
    });
    let mut crd = CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(description.crd_name()),
            annotations,
            ..Default::default()
        },
        spec: CustomResourceDefinitionSpec {
            group: description.group.to_owned(),
            names: CustomResourceDefinitionNames {
                kind: description.kind.to_owned(),
                plural: description.plural.to_owned(),
                singular: Some(description.singular.to_owned()),
                short_names,
                ..Default::default()
            },
            scope: if description.namespaced {
                "Namespaced"
            } else {
                "Cluster"
            }
            .to_owned(),
            versions: vec![CustomResourceDefinitionVersion {
                name: description.version.to_owned(),
                served: true,
                storage: true,
                schema: Some(CustomResourceValidation {
                    open_api_v3_schema: Some(schema),
                }),
                ..Default::default()
            }],
            ..Default::default()
        },
        ..Default::default()
    };
    crate::schema::controller_gen_style(&mut crd);
    crd
}

/// Implements `kube::Resource` and `CustomResourceExt` for a hand-built root
/// struct with a `metadata: ObjectMeta` field, from a `CrdDescription` const.
macro_rules! hand_built_resource {
    ($root:ty, $description:expr, Cluster) => {
        $crate::scheduling::hand_built::hand_built_resource!(
            @impl $root, $description, ::kube::core::ClusterResourceScope
        );
    };
    ($root:ty, $description:expr, Namespaced) => {
        $crate::scheduling::hand_built::hand_built_resource!(
            @impl $root, $description, ::kube::core::NamespaceResourceScope
        );
    };
    (@impl $root:ty, $description:expr, $scope:ty) => {
        impl ::kube::core::Resource for $root {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($description.kind)
            }
            fn group(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($description.group)
            }
            fn version(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($description.version)
            }
            fn api_version(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Owned($description.api_version())
            }
            fn plural(_: &()) -> ::std::borrow::Cow<'_, str> {
                ::std::borrow::Cow::Borrowed($description.plural)
            }
            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }

        impl ::kube::core::crd::v1::CustomResourceExt for $root {
            fn crd() -> ::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
                $crate::scheduling::hand_built::crd_for::<$root>(&$description)
            }
            fn crd_name() -> &'static str {
                static NAME: ::std::sync::OnceLock<::std::string::String> = ::std::sync::OnceLock::new();
                NAME.get_or_init(|| $description.crd_name()).as_str()
            }
            fn api_resource() -> ::kube::core::dynamic::ApiResource {
                ::kube::core::dynamic::ApiResource::erase::<Self>(&())
            }
            fn shortnames() -> &'static [&'static str] {
                $description.short_names
            }
        }
    };
}

pub(crate) use hand_built_resource;

/// Reads a JSON `null` as the type's default, as Go decodes `null` into a
/// nil slice or map.
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Schema transform for hand-built roots: `#[serde(default)]` on `spec` (or
/// on top-level lists) is for decoding only; the CRD must not tell the API
/// server to default those properties.
pub fn without_property_defaults(schema: &mut schemars::Schema) {
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for property in properties.values_mut() {
            if let Some(property) = property.as_object_mut() {
                property.remove("default");
            }
        }
    }
}
