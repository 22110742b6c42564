//! Custom resources whose root object kube-derive cannot express: kinds with
//! a `status` field but no status subresource (Device, ElasticQuota,
//! PodGroup, ElasticQuotaProfile) and kinds without a `spec`
//! (NodeResourceTopology).
//!
//! `hand_built_resource!` declares such a root from its [`CrdDescription`]
//! and its data: the struct (deriving `Deserialize` and `JsonSchema`), a
//! `Serialize` that writes `apiVersion` and `kind` first as kube-derive's
//! does, a `new` constructor, `HasSpec`/`HasStatus` where there is a spec,
//! `kube::Resource` and `CustomResourceExt`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceValidation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

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

/// Starts writing a root object: `apiVersion`, `kind` and `metadata`, in that
/// order, followed by `other_fields` more fields the caller writes.
pub fn begin_root<S: Serializer>(
    serializer: S,
    description: &CrdDescription,
    metadata: &ObjectMeta,
    other_fields: usize,
) -> Result<S::SerializeStruct, S::Error> {
    let mut state = serializer.serialize_struct(description.kind, 3 + other_fields)?;
    state.serialize_field("apiVersion", &description.api_version())?;
    state.serialize_field("kind", description.kind)?;
    state.serialize_field("metadata", metadata)?;
    Ok(state)
}

/// A top-level field of a root without `spec`: absent `Option`s are left
/// out, lists are always written (as Go writes fields without `omitempty`).
pub trait RootField: Serialize {
    /// True when the field is not written.
    fn is_absent(&self) -> bool;
}

impl<T: Serialize> RootField for Option<T> {
    fn is_absent(&self) -> bool {
        self.is_none()
    }
}

impl<T: Serialize> RootField for Vec<T> {
    fn is_absent(&self) -> bool {
        false
    }
}

/// Declares a hand-built root (see the module docs). Two shapes:
///
/// ```ignore
/// hand_built_resource! {
///     /// Doc (the CRD's root description).
///     pub struct Device {
///         crd: DEVICE_CRD,
///         scope: Cluster,
///         spec: DeviceSpec,
///         status: DeviceStatus,
///     }
/// }
///
/// hand_built_resource! {
///     /// Doc.
///     pub struct NodeResourceTopology {
///         crd: NODE_RESOURCE_TOPOLOGY_CRD,
///         scope: Cluster,
///         fields: {
///             /// Doc.
///             #[serde(default, deserialize_with = "null_as_default")]
///             "zones" => pub zones: Vec<Zone>,
///         }
///     }
/// }
/// ```
///
/// With `spec`/`status`, `status` is `Option<Status>` and left out when
/// `None`. With `fields`, each field's JSON name is given once and its type
/// must be a [`RootField`]; field attributes are kept (they shape decoding
/// and the schema).
macro_rules! hand_built_resource {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            crd: $crd:expr,
            scope: $scope:ident,
            spec: $spec:ty,
            status: $status:ty $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, ::serde::Deserialize, ::schemars::JsonSchema)]
        #[serde(rename_all = "camelCase")]
        #[schemars(transform = crate::hand_built::without_property_defaults)]
        $vis struct $name {
            #[serde(default)]
            #[schemars(skip)]
            pub metadata: ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            #[serde(default)]
            pub spec: $spec,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub status: ::std::option::Option<$status>,
        }

        impl $name {
            /// An object named `name` with `spec` and no status (set the
            /// namespace on `metadata` for a namespaced kind).
            pub fn new(name: &str, spec: $spec) -> Self {
                Self {
                    metadata: ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.to_owned()),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                use ::serde::ser::SerializeStruct as _;
                let mut state = $crate::hand_built::begin_root(
                    serializer,
                    &$crd,
                    &self.metadata,
                    1 + usize::from(self.status.is_some()),
                )?;
                state.serialize_field("spec", &self.spec)?;
                if let Some(status) = &self.status {
                    state.serialize_field("status", status)?;
                }
                state.end()
            }
        }

        impl ::kube::core::object::HasSpec for $name {
            type Spec = $spec;
            fn spec(&self) -> &$spec {
                &self.spec
            }
            fn spec_mut(&mut self) -> &mut $spec {
                &mut self.spec
            }
        }

        impl ::kube::core::object::HasStatus for $name {
            type Status = $status;
            fn status(&self) -> ::std::option::Option<&$status> {
                self.status.as_ref()
            }
            fn status_mut(&mut self) -> &mut ::std::option::Option<$status> {
                &mut self.status
            }
        }

        $crate::hand_built::hand_built_resource!(@resource $name, $crd, $scope);
    };
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            crd: $crd:expr,
            scope: $scope:ident,
            fields: {
                $(
                    $(#[$fmeta:meta])*
                    $wire:literal => $fvis:vis $field:ident: $fty:ty
                ),+ $(,)?
            } $(,)?
        }
    ) => {
        #[derive(Clone, Debug, Default, PartialEq, ::serde::Deserialize, ::schemars::JsonSchema)]
        #[schemars(transform = crate::hand_built::without_property_defaults)]
        $(#[$meta])*
        $vis struct $name {
            #[serde(default)]
            #[schemars(skip)]
            pub metadata: ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            $(
                $(#[$fmeta])*
                #[serde(rename = $wire)]
                $fvis $field: $fty,
            )+
        }

        impl $name {
            /// An empty object named `name`.
            pub fn new(name: &str) -> Self {
                Self {
                    metadata: ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.to_owned()),
                        ..Default::default()
                    },
                    ..Default::default()
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                use $crate::hand_built::RootField as _;
                use ::serde::ser::SerializeStruct as _;
                let present = 0 $( + usize::from(!self.$field.is_absent()) )+;
                let mut state =
                    $crate::hand_built::begin_root(serializer, &$crd, &self.metadata, present)?;
                $(
                    if !self.$field.is_absent() {
                        state.serialize_field($wire, &self.$field)?;
                    }
                )+
                state.end()
            }
        }

        $crate::hand_built::hand_built_resource!(@resource $name, $crd, $scope);
    };
    (@resource $root:ty, $description:expr, Cluster) => {
        $crate::hand_built::hand_built_resource!(
            @impl $root, $description, ::kube::core::ClusterResourceScope
        );
    };
    (@resource $root:ty, $description:expr, Namespaced) => {
        $crate::hand_built::hand_built_resource!(
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
                $crate::hand_built::crd_for::<$root>(&$description)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use kube::core::object::{HasSpec, HasStatus};

    use crate::scheduling::v1alpha1::{Device, DeviceSpec, DeviceStatus};
    use crate::scheduling_sigs::v1alpha1::{ElasticQuota, ElasticQuotaSpec};
    use crate::topology::{v1alpha1, v1alpha2};

    #[test]
    fn spec_roots_write_type_meta_first_and_status_only_when_set() {
        let mut device = Device::new("node-1", DeviceSpec::default());
        assert_eq!(
            serde_json::to_string(&device).unwrap(),
            r#"{"apiVersion":"scheduling.koordinator.sh/v1alpha1","kind":"Device","metadata":{"name":"node-1"},"spec":{}}"#
        );
        *device.status_mut() = Some(DeviceStatus::default());
        device.spec_mut().devices = Some(Vec::new());
        assert_eq!(
            serde_json::to_string(&device).unwrap(),
            r#"{"apiVersion":"scheduling.koordinator.sh/v1alpha1","kind":"Device","metadata":{"name":"node-1"},"spec":{"devices":[]},"status":{}}"#
        );
        assert_eq!(device.spec().devices, Some(Vec::new()));
        assert_eq!(device.status(), Some(&DeviceStatus::default()));

        let quota = ElasticQuota::new("team-a", ElasticQuotaSpec::default());
        assert_eq!(
            crate::yaml::to_string(&quota).unwrap(),
            "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: ElasticQuota\nmetadata:\n  name: team-a\nspec: {}\n"
        );
    }

    #[test]
    fn top_level_roots_always_write_lists_and_omit_absent_options() {
        assert_eq!(
            serde_json::to_string(&v1alpha1::NodeResourceTopology::new("n")).unwrap(),
            r#"{"apiVersion":"topology.node.k8s.io/v1alpha1","kind":"NodeResourceTopology","metadata":{"name":"n"},"topologyPolicies":[],"zones":[]}"#
        );
        let mut topology = v1alpha2::NodeResourceTopology::new("n");
        assert_eq!(
            serde_json::to_string(&topology).unwrap(),
            r#"{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology","metadata":{"name":"n"},"zones":[]}"#
        );
        topology.attributes = Some(Vec::new());
        topology.topology_policies = Some(vec![v1alpha2::TopologyManagerPolicy::None]);
        assert_eq!(
            serde_json::to_string(&topology).unwrap(),
            r#"{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology","metadata":{"name":"n"},"topologyPolicies":["None"],"zones":[],"attributes":[]}"#
        );
        let decoded: v1alpha2::NodeResourceTopology =
            serde_json::from_str(r#"{"zones":null,"topologyPolicies":null}"#).unwrap();
        assert_eq!(decoded.zones, Vec::new());
        assert_eq!(decoded.topology_policies, None);
    }
}
