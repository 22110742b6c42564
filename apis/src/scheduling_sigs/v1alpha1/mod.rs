//! `scheduling.sigs.k8s.io/v1alpha1` (vendored by upstream from
//! scheduler-plugins): ElasticQuota and PodGroup.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

mod elastic_quota;
mod pod_group;

pub use elastic_quota::*;
pub use pod_group::*;

/// The API group of this module.
pub const GROUP: &str = "scheduling.sigs.k8s.io";
/// The API version of this module.
pub const VERSION: &str = "v1alpha1";

/// CRDs in `*.k8s.io` groups must carry this annotation or the API server
/// refuses them.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";
/// The approval upstream (scheduler-plugins) cites.
pub const API_APPROVED_URL: &str = "https://github.com/kubernetes-sigs/scheduler-plugins/pull/52";

/// The CRDs of this group version, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![ElasticQuota::crd(), PodGroup::crd()]
}
