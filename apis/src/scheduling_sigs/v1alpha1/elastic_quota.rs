//! ElasticQuota: guaranteed (`min`) and capped (`max`) resources of a quota
//! group. Koordinator keeps the quota tree and runtime figures in labels and
//! annotations (see `apis::extension`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hand_built::{CrdDescription, hand_built_resource};

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

hand_built_resource! {
    /// Resource limits of one quota group.
    pub struct ElasticQuota {
        crd: ELASTIC_QUOTA_CRD,
        scope: Namespaced,
        spec: ElasticQuotaSpec,
        status: ElasticQuotaStatus,
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
