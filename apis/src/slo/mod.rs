//! The `slo.koordinator.sh` API group: NodeSLO and NodeMetric.

pub mod v1alpha1;
