//! `scheduling.sigs.k8s.io` types that upstream vendors from scheduler-plugins.
pub mod v1alpha1;
