//! ElasticQuotaProfile: derives an ElasticQuota from the nodes a selector
//! picks (the quota's `min`/`max` follow those nodes' allocatable).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::hand_built::{CrdDescription, hand_built_resource};

/// ElasticQuotaProfile's CRD names. Upstream has an (empty) `status` field
/// but no status subresource, so the root is hand-built.
pub const ELASTIC_QUOTA_PROFILE_CRD: CrdDescription = CrdDescription {
    group: super::GROUP,
    version: super::VERSION,
    kind: "ElasticQuotaProfile",
    plural: "elasticquotaprofiles",
    singular: "elasticquotaprofile",
    namespaced: true,
    short_names: &["eqp"],
    annotations: &[],
};

hand_built_resource! {
    /// A profile that keeps one ElasticQuota sized to a set of nodes.
    pub struct ElasticQuotaProfile {
        crd: ELASTIC_QUOTA_PROFILE_CRD,
        scope: Namespaced,
        spec: ElasticQuotaProfileSpec,
        status: ElasticQuotaProfileStatus,
    }
}

/// Which quota to maintain and from which nodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ElasticQuotaProfileSpec {
    /// Name of the ElasticQuota this profile maintains.
    pub quota_name: String,
    /// Labels put on that ElasticQuota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_labels: Option<BTreeMap<String, String>>,
    /// Fraction of the nodes' resources the quota gets, as decimal text
    /// (`"0.9"`), to leave room for fragmentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_ratio: Option<String>,
    /// The nodes whose resources make up the quota.
    #[schemars(schema_with = "crate::schema::label_selector")]
    pub node_selector: LabelSelector,
}

/// Why `resourceRatio` could not be used.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("resourceRatio {0:?} is not a finite, non-negative number")]
pub struct InvalidResourceRatio(pub String);

impl ElasticQuotaProfileSpec {
    /// `resourceRatio` as a number; `None` when unset.
    pub fn resource_ratio(&self) -> Result<Option<f64>, InvalidResourceRatio> {
        let Some(text) = self.resource_ratio.as_deref() else {
            return Ok(None);
        };
        match text.parse::<f64>() {
            Ok(ratio) if ratio.is_finite() && ratio >= 0.0 => Ok(Some(ratio)),
            _ => Err(InvalidResourceRatio(text.to_owned())),
        }
    }
}

/// Upstream defines no status fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ElasticQuotaProfileStatus {}
