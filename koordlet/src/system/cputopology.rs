//! The node's CPU topology lives in `koord_common::units::topology`, shared
//! with the other binaries; re-exported here for paths that name it through
//! koordlet.

pub use koord_common::units::{CpuInfo, CpuTopology};
