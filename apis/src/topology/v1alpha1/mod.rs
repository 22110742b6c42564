//! `topology.node.k8s.io/v1alpha1`: NodeResourceTopology, the version
//! Koordinator's koordlet writes (zones, costs and per-zone resources, with
//! Koordinator's own details in annotations).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

mod node_resource_topology;

pub use node_resource_topology::*;

/// The API group of this module.
pub const GROUP: &str = "topology.node.k8s.io";
/// The API version of this module.
pub const VERSION: &str = "v1alpha1";

/// CRDs in `*.k8s.io` groups must carry this annotation or the API server
/// refuses them.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";
/// The approval the noderesourcetopology-api project cites.
pub const API_APPROVED_URL: &str = "https://github.com/kubernetes/enhancements/pull/1870";

/// The NodeResourceTopology CRD with both versions upstream installs:
/// v1alpha1 (served) and v1alpha2 (served and stored). Replacing the CRD
/// with a v1alpha1-only one would orphan objects other tools stored as
/// v1alpha2, so both live in this one CRD.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crd = NodeResourceTopology::crd();
    let stored = super::v1alpha2::NodeResourceTopology::crd();
    for version in &mut crd.spec.versions {
        version.storage = false;
    }
    crd.spec.versions.extend(stored.spec.versions);
    vec![crd]
}
