//! CPU sets and the Linux cpu-list text they come in (`0-3,8`): the one
//! [`CpuSet`] of `koord_common::units`. The scheduler reads annotations with
//! [`CpuSet::parse_each_cpu_once`] (bounded, each CPU listed once; see that
//! module's docs) and holds the APIs' `int32` CPU ids, which the set takes
//! and gives back through `koord_common::units::CpuId`.

pub use koord_common::units::{CpuListError, CpuSet};

/// The highest CPU id a cpu list may name, as the APIs' `int32` ids.
pub const MAX_CPU_ID: i32 = koord_common::units::MAX_CPU_ID as i32;
const _: () = assert!(MAX_CPU_ID as u32 == koord_common::units::MAX_CPU_ID);
