//! ElasticQuota: guaranteed (`min`) and capped (`max`) resources of a quota
//! group. Koordinator keeps the quota tree and runtime figures in labels and
//! annotations (see `apis::extension`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::Resource;
use schemars::JsonSchema;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use crate::scheduling::hand_built::CrdDescription;
use crate::scheduling::hand_built_resource;

/// ElasticQuota's CRD names. Upstream has a `status` field but no status
/// subresource, so the root is hand-built.
pub const ELASTIC_QUOTA_CRD: CrdDescription = CrdDescription {
    group: super::GROUP,
    version: super::VERSION,
    kind: "ElasticQuota",
    plural: "elasticquotas",
    singular: "elasticquota",
    namespaced: true,
    short_names: &[],
    annotations: &[(super::API_APPROVED_ANNOTATION, super::API_APPROVED_URL)],
};

/// Resource limits of one quota group.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::scheduling::hand_built::without_property_defaults)]
pub struct ElasticQuota {
    #[serde(default)]
    #[schemars(skip)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ElasticQuotaSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ElasticQuotaStatus>,
}

hand_built_resource!(ElasticQuota, ELASTIC_QUOTA_CRD, Namespaced);

impl ElasticQuota {
    /// An ElasticQuota named `name` (set the namespace on `metadata`).
    pub fn new(name: &str, spec: ElasticQuotaSpec) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }
}

impl Serialize for ElasticQuota {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut state =
            serializer.serialize_struct("ElasticQuota", 4 + usize::from(self.status.is_some()))?;
        state.serialize_field("apiVersion", &Self::api_version(&()))?;
        state.serialize_field("kind", &Self::kind(&()))?;
        state.serialize_field("metadata", &self.metadata)?;
        state.serialize_field("spec", &self.spec)?;
        if let Some(status) = &self.status {
            state.serialize_field("status", status)?;
        }
        state.end()
    }
}

impl kube::core::object::HasSpec for ElasticQuota {
    type Spec = ElasticQuotaSpec;
    fn spec(&self) -> &ElasticQuotaSpec {
        &self.spec
    }
    fn spec_mut(&mut self) -> &mut ElasticQuotaSpec {
        &mut self.spec
    }
}

impl kube::core::object::HasStatus for ElasticQuota {
    type Status = ElasticQuotaStatus;
    fn status(&self) -> Option<&ElasticQuotaStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<ElasticQuotaStatus> {
        &mut self.status
    }
}

/// Guaranteed and maximum resources.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ElasticQuotaSpec {
    /// Guaranteed resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::resource_list")]
    pub min: Option<BTreeMap<String, Quantity>>,
    /// Upper bound on what scheduled pods may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::resource_list")]
    pub max: Option<BTreeMap<String, Quantity>>,
}

/// Observed use of a quota.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ElasticQuotaStatus {
    /// Resources requested by the quota's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::resource_list")]
    pub used: Option<BTreeMap<String, Quantity>>,
}
