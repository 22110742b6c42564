//! Validated, cached, ordered writes of cgroup files, with an audit trail.
//!
//! - [`planner`] (pure): [`ResourceUpdate`] requests are merged per file
//!   ([`MergePolicy`]) and ordered so hierarchical resources (cpuset lists,
//!   CFS quota, memory protection) never violate the parent/child constraint.
//! - [`executor`]: [`ResourceExecutor`] applies a batch from a blocking
//!   thread, skips values written less than the force-update interval ago
//!   (upstream `-resource-force-update-seconds`, 60 s), and keeps an audit
//!   ring of recent writes.
//! - [`audit`]: the audit records; [`http`]: [`audit_router`], which serves
//!   them as JSON at [`AUDIT_PATH`].
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use koordlet::resourceexecutor::*;
//! use koordlet::system::cgroup::*;
//! let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/sys/fs/cgroup");
//! let executor = ResourceExecutor::new(layout.clone(), ExecutorConfig::default());
//! let dir = layout.qos_dir(QosTier::BestEffort);
//! let update = ResourceUpdate::new(dir, CgroupResource::CpuCfsQuota, CgroupValue::Int(200_000), "BE suppress")?;
//! let report = executor.apply(vec![update]).await?;
//! assert!(report.is_success());
//! # Ok(()) }
//! ```

pub mod audit;
pub mod executor;
pub mod http;
pub mod planner;

pub use audit::{AuditRecord, AuditResult};
pub use executor::{
    ApplyReport, DEFAULT_FORCE_UPDATE_INTERVAL, ExecutorConfig, ExecutorError, ResourceExecutor,
    WriteReport, WriteStatus,
};
pub use http::{AUDIT_PATH, audit_router};
pub use planner::{MergePolicy, PlannedWrite, ResourceUpdate, StepKind, merge_updates, plan};
