//! Every CRD this project installs, generated from the Rust types.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// All CRDs, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    let mut crds = Vec::new();
    crds.extend(crate::slo::v1alpha1::crds());
    crds.extend(crate::scheduling::v1alpha1::crds());
    crds.extend(crate::scheduling_sigs::v1alpha1::crds());
    crds.extend(crate::quota::v1alpha1::crds());
    crds.extend(crate::config::v1alpha1::crds());
    crds.extend(crate::topology::v1alpha1::crds());
    crds
}
