//! Value types every binary shares: CPU id sets (the kernel's cpu-list
//! text), milli-CPU, bytes, CFS quotas and the node's CPU topology. Leaf
//! modules: they import nothing from the rest of this crate.

pub mod cpuset;

pub use cpuset::{
    CpuId, CpuListError, CpuSet, MAX_CPU_ID, MAX_CPU_LIST_BYTES, MAX_EXACT_CPU_LIST_BYTES,
};
