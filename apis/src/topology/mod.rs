//! `topology.node.k8s.io` NodeResourceTopology, from the
//! noderesourcetopology-api project. Upstream Koordinator reads and writes
//! v1alpha1; the CRD also serves v1alpha2, its storage version.
pub mod v1alpha1;
pub mod v1alpha2;
