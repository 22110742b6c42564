//! `quota.koordinator.sh/v1alpha1`: ElasticQuotaProfile.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

mod elastic_quota_profile;

pub use elastic_quota_profile::*;

/// The API group of this module.
pub const GROUP: &str = "quota.koordinator.sh";
/// The API version of this module.
pub const VERSION: &str = "v1alpha1";

/// The CRDs of this group version, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![ElasticQuotaProfile::crd()]
}
