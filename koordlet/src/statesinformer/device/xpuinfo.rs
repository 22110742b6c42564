//! The shape of upstream's XPU device-info files and the bounds the reader
//! keeps ([`super::xpu`] reads them). Data only, so the Device snapshot can
//! hold these records without depending on the reader.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Upstream's default `--xpu-device-infos-dir`.
pub const DEFAULT_XPU_DEVICE_INFOS_DIR: &str = "/var/run/koordlet/xpu-device-infos/";
/// The largest device-info file read (a list of a few dozen devices is a
/// few tens of KiB).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most entries the directory may hold.
pub const MAX_DIR_ENTRIES: usize = 256;
/// The most devices all files may describe together.
pub const MAX_DEVICES: usize = 256;
/// The most resources one device may list.
pub const MAX_RESOURCES_PER_DEVICE: usize = 64;
/// The most peer links one device may list.
pub const MAX_LINKS_PER_DEVICE: usize = 64;

/// One device as a device-info file describes it (upstream's
/// `XPUDeviceInfo`; the JSON keys are upstream's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XpuDeviceInfo {
    #[serde(default)]
    pub vendor: String,
    #[serde(default)]
    pub model: String,
    /// The device's identifier; becomes the Device entry's `id`.
    #[serde(default)]
    pub uuid: String,
    /// The device's minor (`/dev/xxx0` → `"0"`), a decimal string.
    #[serde(default)]
    pub minor: String,
    /// Resource name → quantity text; `gpu-core` and `gpu-memory` without a
    /// domain mean `koordinator.sh/gpu-core` and `koordinator.sh/gpu-memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<XpuTopology>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<XpuStatus>,
}

/// Where the device sits and whom it links to (upstream's `DeviceTopology`
/// of the device-info file; the IDs are strings there).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XpuTopology {
    /// `Some` (even empty) means the device reports peer links, which makes
    /// the node's partition policy `Prefer` or `Honor`.
    #[serde(rename = "p2pLinks", default, skip_serializing_if = "Option::is_none")]
    pub p2p_links: Option<Vec<XpuP2pLink>>,
    /// The partitions the links form must be honoured (policy `Honor`).
    #[serde(
        rename = "mustHonorPartition",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub must_honor_partition: bool,
    /// Read but not reported: upstream reports the socket as unknown (-1).
    #[serde(rename = "socketID", default, skip_serializing_if = "String::is_empty")]
    pub socket_id: String,
    /// The NUMA node, a decimal string; empty is unknown (-1).
    #[serde(rename = "nodeID", default, skip_serializing_if = "String::is_empty")]
    pub node_id: String,
    #[serde(rename = "pcieID", default, skip_serializing_if = "String::is_empty")]
    pub pcie_id: String,
    #[serde(rename = "busID", default, skip_serializing_if = "String::is_empty")]
    pub bus_id: String,
}

/// A link to peers: `peerMinor` lists their minors, comma separated; the
/// device and its peers form one partition of that link type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XpuP2pLink {
    #[serde(rename = "peerMinor", default)]
    pub peer_minor: String,
    /// `NVLink`, `HCCS`, ...
    #[serde(rename = "type", default)]
    pub link_type: String,
}

/// The device's health as its daemon sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct XpuStatus {
    #[serde(default)]
    pub healthy: bool,
    #[serde(rename = "errCode", default, skip_serializing_if = "String::is_empty")]
    pub err_code: String,
    #[serde(
        rename = "errMessage",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub err_message: String,
}
