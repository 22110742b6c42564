//! `topology.node.k8s.io/v1alpha1`: NodeResourceTopology, the version
//! Koordinator's koordlet writes (zones, costs and per-zone resources, with
//! Koordinator's own details in annotations).

mod node_resource_topology;

/// The one CRD serving this version and v1alpha2 (defined beside both).
pub use super::crds;
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
