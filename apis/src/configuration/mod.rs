//! The `slo-controller-config` ConfigMap.
