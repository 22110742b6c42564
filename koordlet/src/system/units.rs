//! The value types koordlet moves between modules (cpusets, milli-CPU,
//! bytes, CFS quotas) live in `koord_common::units`, shared with the other
//! binaries; re-exported here for paths that name them through koordlet.

pub use koord_common::units::{
    Bytes, CfsQuota, CfsQuotaError, CpuListError, CpuSet, DEFAULT_CFS_PERIOD_US, MIN_CFS_QUOTA_US,
    MilliCpu,
};
