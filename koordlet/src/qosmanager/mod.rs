//! QoS manager: strategies that keep running pods within their NodeSLO.

pub mod blkio;
pub mod cgreconcile;
pub mod cpuburst;
pub mod cpuevict;
pub mod cpusuppress;
pub mod memoryevict;
pub mod resctrl;
pub mod sysreconcile;
