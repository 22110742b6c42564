//! `scheduling.koordinator.sh` types, plus the `wire_enum!` macro the other
//! scheduling-side API groups share.
pub mod v1alpha1;
pub mod wire_enum;

pub(crate) use wire_enum::wire_enum;
