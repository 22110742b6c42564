//! Value types every binary shares: CPU id sets (the kernel's cpu-list
//! text), milli-CPU, bytes, byte rates, CFS quotas and the node's CPU topology. Leaf
//! modules: they import nothing from the rest of this crate.

pub mod cpuset;
pub mod quantity;
pub mod topology;

pub use cpuset::{
    CpuId, CpuListError, CpuSet, MAX_CPU_ID, MAX_CPU_LIST_BYTES, MAX_EXACT_CPU_LIST_BYTES,
};
pub use quantity::{
    Bytes, BytesPerSecond, CfsQuota, CfsQuotaError, DEFAULT_CFS_PERIOD_US, MIN_CFS_QUOTA_US,
    MilliCpu,
};
pub use topology::{CpuInfo, CpuTopology};
