//! `config.koordinator.sh/v1alpha1`: ClusterColocationProfile.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

mod cluster_colocation_profile;

pub use cluster_colocation_profile::*;

/// The API group of this module.
pub const GROUP: &str = "config.koordinator.sh";
/// The API version of this module.
pub const VERSION: &str = "v1alpha1";

/// The CRDs of this group version, as they are installed (kube-derive's
/// output restyled like controller-gen's; see `crate::schema::controller_gen_style`).
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut profile = ClusterColocationProfile::crd();
    crate::schema::controller_gen_style(&mut profile);
    vec![profile]
}
