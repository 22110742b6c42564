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

#[macro_use]
mod macros;

pub mod annotations;
pub mod constants;
pub mod deprecated;
pub mod device_share;
pub mod duration;
pub mod error;
pub mod numa_aware;
pub mod operating_pod;
pub mod priority;
pub mod qos;
pub mod quantity;
pub mod reservation;
pub mod resource;

pub use annotations::*;
pub use constants::*;
pub use deprecated::*;
pub use device_share::*;
pub use duration::*;
pub use error::*;
pub use numa_aware::*;
pub use operating_pod::*;
pub use priority::*;
pub use qos::*;
pub use quantity::*;
pub use reservation::*;
pub use resource::*;
