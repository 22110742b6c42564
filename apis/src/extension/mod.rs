//! Label/annotation keys, QoS and priority classes, resource names, and typed
//! helpers for the JSON-valued annotations Koordinator puts on pods, nodes and
//! quotas.
//!
//! Mirrors upstream `apis/extension` (one Go package): every item is
//! re-exported here, so `apis::extension::LABEL_POD_QOS` and
//! `apis::extension::qos::LABEL_POD_QOS` name the same thing. Files are named
//! after the upstream Go files.
//!
//! Getter convention: `get_<thing>(annotations)` returns `Ok(None)` when the
//! key is absent, `Err(ExtensionError)` naming the key when the value is
//! malformed, and never panics. Where upstream returns an empty struct for an
//! absent key, callers use `unwrap_or_default()`.

pub mod annotations;
pub mod cluster_colocation_profile;
pub mod constants;
pub mod coscheduling;
pub mod cpu_normalization;
pub mod deprecated;
pub mod descheduling;
pub mod device_share;
pub mod duration;
pub mod elastic_quota;
pub mod error;
pub mod evict;
pub mod load_aware;
pub mod multi_scheduler;
pub mod network_topology;
pub mod node_colocation;
pub mod node_qos;
pub mod node_reservation;
pub mod node_resource_amplification;
pub mod numa_aware;
pub mod operating_pod;
pub mod preemption;
pub mod priority;
pub mod qos;
pub mod quantity;
pub mod resctrl;
pub mod reservation;
pub mod resource;
pub mod schedule_explanation;
pub mod slo_pod;
pub mod system_qos;

pub use annotations::*;
pub use cluster_colocation_profile::*;
pub use constants::*;
pub use coscheduling::*;
pub use cpu_normalization::*;
pub use deprecated::*;
pub use descheduling::*;
pub use device_share::*;
pub use duration::*;
pub use elastic_quota::*;
pub use error::*;
pub use evict::*;
pub use load_aware::*;
pub use multi_scheduler::*;
pub use network_topology::*;
pub use node_colocation::*;
pub use node_qos::*;
pub use node_reservation::*;
pub use node_resource_amplification::*;
pub use numa_aware::*;
pub use operating_pod::*;
pub use preemption::*;
pub use priority::*;
pub use qos::*;
pub use quantity::*;
pub use resctrl::*;
pub use reservation::*;
pub use resource::*;
pub use schedule_explanation::*;
pub use slo_pod::*;
pub use system_qos::*;
