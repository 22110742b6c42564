//! QoS management for processes that run on the node outside Kubernetes
//! (upstream `host_application.go`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::extension::{PriorityClass, QoSClass};
use crate::wire_enum::wire_enum;

/// One out-of-band application and how koordlet should treat it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostApplicationSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Koordinator priority class name (`koord-prod`, `koord-mid`, ...); kept as
    /// a string so unknown classes round-trip.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub priority: String,
    /// Koordinator QoS class name (`LSE`, `LSR`, `LS`, `BE`, `SYSTEM`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub qos: String,
    /// Where the application's cgroup lives; derived from priority and QoS
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_path: Option<CgroupPath>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<HostApplicationStrategy>,
}

impl HostApplicationSpec {
    /// The QoS class; [`QoSClass::None`] when empty or unknown.
    pub fn qos_class(&self) -> QoSClass {
        QoSClass::from_name(&self.qos)
    }

    /// The priority class; [`PriorityClass::None`] when empty or unknown.
    pub fn priority_class(&self) -> PriorityClass {
        PriorityClass::from_name(&self.priority)
    }
}

/// Per-application strategy; upstream defines no fields yet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostApplicationStrategy {}

/// Cgroup location of a host application: `<base>/<parentDir>/<relativePath>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CgroupPath {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<CgroupBaseType>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent_dir: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub relative_path: String,
}

wire_enum! {
    /// The cgroup directory a [`CgroupPath`] is relative to.
    pub enum CgroupBaseType open {
        /// The cgroupfs root of each subsystem.
        CgroupRoot = "CgroupRoot",
        /// The kubepods cgroup.
        Kubepods = "Kubepods",
        /// The kubepods burstable cgroup.
        KubepodsBurstable = "KubepodsBurstable",
        /// The kubepods besteffort cgroup.
        KubepodsBesteffort = "KubepodsBesteffort",
    }
}
