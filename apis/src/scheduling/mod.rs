//! `scheduling.koordinator.sh` types, plus hand-built custom resources, which
//! the other scheduling-side API groups share.
pub mod hand_built;
pub mod v1alpha1;

pub(crate) use hand_built::hand_built_resource;
