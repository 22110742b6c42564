//! Wire-compatible Koordinator API types.
//!
//! Every name, JSON key and field number here follows upstream Koordinator
//! (github.com/koordinator-sh/koordinator) so that existing manifests,
//! annotations, ConfigMaps and gRPC peers work unchanged. Deliberate
//! differences are listed in `apis/README.md`.

pub mod config;
pub mod configuration;
pub mod crds;
pub mod extension;
pub mod hand_built;
pub mod quota;
pub mod runtime;
pub mod scheduling;
pub mod scheduling_sigs;
pub mod schema;
pub mod slo;
pub mod topology;
pub mod wire_enum;
pub mod yaml;
