//! `scheduling.koordinator.sh` types, plus helpers the other scheduling-side
//! API groups share: the `wire_enum!` macro and hand-built custom resources.
pub mod hand_built;
pub mod v1alpha1;
pub mod wire_enum;

pub(crate) use hand_built::hand_built_resource;
pub(crate) use wire_enum::wire_enum;
