//! `topology.node.k8s.io` NodeResourceTopology, from the
//! noderesourcetopology-api project. Upstream Koordinator reads and writes
//! v1alpha1; the CRD also serves v1alpha2, its storage version, so the
//! CRD is built here from both.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub mod v1alpha1;
pub mod v1alpha2;

/// The NodeResourceTopology CRD with both versions upstream installs:
/// v1alpha1 (served) and v1alpha2 (served and stored). Replacing the CRD
/// with a v1alpha1-only one would orphan objects other tools stored as
/// v1alpha2, so both live in this one CRD.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crd = v1alpha1::NodeResourceTopology::crd();
    let stored = v1alpha2::NodeResourceTopology::crd();
    for version in &mut crd.spec.versions {
        version.storage = false;
    }
    crd.spec.versions.extend(stored.spec.versions);
    vec![crd]
}
