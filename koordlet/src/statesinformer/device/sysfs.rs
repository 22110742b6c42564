//! Bounded sysfs reads: PCI device attributes (`numa_node`, `class`,
//! `sriov_numvfs`, `physfn`, `virtfn<N>`), the PCIe root from a device's
//! resolved path, and the RDMA NICs under `/sys/class/infiniband`.
//!
//! Every file read is capped at [`MAX_ATTR_BYTES`] and every directory
//! listing at [`MAX_DIR_ENTRIES`] (or a smaller per-use limit); names that
//! come from the filesystem are validated before they are joined into a
//! path.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{DeviceSnapshot, DeviceSource, DiscoveryError, PciTopology, RdmaNic};

/// The most of one sysfs attribute read (they are a few bytes).
pub const MAX_ATTR_BYTES: u64 = 4096;
/// The most entries one directory listing may have.
pub const MAX_DIR_ENTRIES: usize = 4096;
/// The most RDMA devices considered (a node has a handful).
pub const MAX_IB_DEVICES: usize = 256;
/// The most ports of one RDMA device.
pub const MAX_IB_PORTS: usize = 64;
/// The most VFs of one PF (the SR-IOV capability's TotalVFs is 16 bits, but
/// NICs offer at most a few hundred).
pub const MAX_VFS: usize = 1024;

/// Reads a small attribute file, trimmed; an error when it is larger than
/// [`MAX_ATTR_BYTES`] or not UTF-8.
pub fn read_attr(path: &Path) -> Result<String, DiscoveryError> {
    let file = std::fs::File::open(path).map_err(|source| DiscoveryError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_ATTR_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| DiscoveryError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_ATTR_BYTES {
        return Err(DiscoveryError::TooLarge {
            path: path.to_path_buf(),
            limit: MAX_ATTR_BYTES,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| DiscoveryError::Malformed {
        path: path.to_path_buf(),
        reason: "not UTF-8 text".to_string(),
    })?;
    Ok(text.trim().to_string())
}

/// The names in `dir`, sorted; an error past `limit` entries. A missing
/// directory is an empty list.
pub fn list_dir(dir: &Path, limit: usize) -> Result<Vec<String>, DiscoveryError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(DiscoveryError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| DiscoveryError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        if names.len() == limit {
            return Err(DiscoveryError::TooManyEntries {
                path: dir.to_path_buf(),
                limit,
            });
        }
        // Sysfs names are ASCII; anything else is not one of ours.
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Whether `text` is a PCI address in sysfs form: `dddd:bb:dd.f`, lowercase
/// hex, function 0-7.
pub fn is_pci_address(text: &str) -> bool {
    let bytes = text.as_bytes();
    let hex = |range: std::ops::Range<usize>| {
        bytes[range]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    bytes.len() == 12
        && hex(0..4)
        && bytes[4] == b':'
        && hex(5..7)
        && bytes[7] == b':'
        && hex(8..10)
        && bytes[10] == b'.'
        && (b'0'..=b'7').contains(&bytes[11])
}

/// Whether `name` may be an RDMA device name (`mlx5_0`, `irdma1`).
fn is_ib_device_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The RDMA minor of an mlx device name: `mlx5_3` → 3 (upstream's rule;
/// other vendors' names have none).
pub fn rdma_minor(ib_device: &str) -> Option<i32> {
    let rest = ib_device.strip_prefix("mlx")?;
    let (model, index) = rest.split_once('_')?;
    if model.is_empty() || !model.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    index.parse().ok()
}

/// The PCIe root complex in a resolved sysfs path: the first component
/// `pci<domain>:<bus>` (`/sys/devices/pci0000:3a/0000:3a:00.0/...` →
/// `pci0000:3a`), empty when there is none.
pub fn pcie_root_of(path: &Path) -> String {
    path.components()
        .filter_map(|component| component.as_os_str().to_str())
        .find(|name| {
            let Some(rest) = name.strip_prefix("pci") else {
                return false;
            };
            let bytes = rest.as_bytes();
            bytes.len() == 7
                && bytes[4] == b':'
                && bytes[..4].iter().all(u8::is_ascii_hexdigit)
                && bytes[5..].iter().all(u8::is_ascii_hexdigit)
        })
        .map(str::to_string)
        .unwrap_or_default()
}

/// The PCI devices of a sysfs tree (`<sys>/bus/pci/devices`).
#[derive(Debug, Clone)]
pub struct PciSysfs {
    sys_root: PathBuf,
}

impl PciSysfs {
    pub fn new(sys_root: impl Into<PathBuf>) -> Self {
        Self {
            sys_root: sys_root.into(),
        }
    }

    pub fn sys_root(&self) -> &Path {
        &self.sys_root
    }

    fn device_dir(&self, bdf: &str) -> Result<PathBuf, DiscoveryError> {
        if !is_pci_address(bdf) {
            return Err(DiscoveryError::Malformed {
                path: self.sys_root.join("bus/pci/devices"),
                reason: format!(
                    "{:?} is not a PCI address (dddd:bb:dd.f)",
                    crate::bounds::for_log(bdf)
                ),
            });
        }
        Ok(self.sys_root.join("bus/pci/devices").join(bdf))
    }

    /// The device's NUMA node; -1 (no affinity, as on single-node machines)
    /// counts as node 0, as upstream does.
    pub fn numa_node(&self, bdf: &str) -> Result<i32, DiscoveryError> {
        let path = self.device_dir(bdf)?.join("numa_node");
        let text = read_attr(&path)?;
        let node: i32 = text.parse().map_err(|_| DiscoveryError::Malformed {
            path: path.clone(),
            reason: format!(
                "{:?} is not a NUMA node number",
                crate::bounds::for_log(&text)
            ),
        })?;
        match node {
            -1 => Ok(0),
            0..=4095 => Ok(node),
            _ => Err(DiscoveryError::Malformed {
                path,
                reason: format!("NUMA node {node} is out of range"),
            }),
        }
    }

    /// The device's PCIe root complex from its resolved sysfs path.
    pub fn pcie_root(&self, bdf: &str) -> Result<String, DiscoveryError> {
        let link = self.device_dir(bdf)?;
        let resolved = std::fs::canonicalize(&link).map_err(|source| DiscoveryError::Io {
            path: link.clone(),
            source,
        })?;
        // Only the part below the sysfs root counts, so a root directory
        // whose own name looks like `pciXXXX:XX` cannot be taken for it.
        let root = std::fs::canonicalize(&self.sys_root).unwrap_or_else(|_| self.sys_root.clone());
        let below = resolved.strip_prefix(&root).unwrap_or(&resolved);
        Ok(pcie_root_of(below))
    }

    /// NUMA node and PCIe root of the device.
    pub fn topology(&self, bdf: &str) -> Result<PciTopology, DiscoveryError> {
        Ok(PciTopology {
            node_id: self.numa_node(bdf)?,
            pcie_id: self.pcie_root(bdf)?,
        })
    }

    /// The PCI class code (`0x020000` → 0x020000).
    pub fn class(&self, bdf: &str) -> Result<u32, DiscoveryError> {
        let path = self.device_dir(bdf)?.join("class");
        let text = read_attr(&path)?;
        let digits = text.strip_prefix("0x").unwrap_or(&text);
        u32::from_str_radix(digits, 16).map_err(|_| DiscoveryError::Malformed {
            path,
            reason: format!(
                "{:?} is not a PCI class code",
                crate::bounds::for_log(&text)
            ),
        })
    }

    /// Whether the device is an SR-IOV virtual function (has `physfn`).
    pub fn is_virtual_function(&self, bdf: &str) -> Result<bool, DiscoveryError> {
        Ok(self
            .device_dir(bdf)?
            .join("physfn")
            .symlink_metadata()
            .is_ok())
    }

    /// `sriov_numvfs`; 0 when the device has no SR-IOV capability.
    pub fn sriov_numvfs(&self, bdf: &str) -> Result<u32, DiscoveryError> {
        let path = self.device_dir(bdf)?.join("sriov_numvfs");
        if path.symlink_metadata().is_err() {
            return Ok(0);
        }
        let text = read_attr(&path)?;
        text.parse().map_err(|_| DiscoveryError::Malformed {
            path,
            reason: format!("{:?} is not a VF count", crate::bounds::for_log(&text)),
        })
    }

    /// The PCI addresses of the VFs (`virtfn<N>` links), by N.
    pub fn virtual_functions(&self, bdf: &str) -> Result<Vec<String>, DiscoveryError> {
        let dir = self.device_dir(bdf)?;
        let mut numbered = Vec::new();
        for name in list_dir(&dir, MAX_DIR_ENTRIES)? {
            let Some(index) = name.strip_prefix("virtfn") else {
                continue;
            };
            let Ok(index) = index.parse::<u32>() else {
                continue;
            };
            if numbered.len() == MAX_VFS {
                return Err(DiscoveryError::TooManyEntries {
                    path: dir.clone(),
                    limit: MAX_VFS,
                });
            }
            let link = dir.join(&name);
            let target = std::fs::read_link(&link).map_err(|source| DiscoveryError::Io {
                path: link.clone(),
                source,
            })?;
            let vf = target
                .file_name()
                .and_then(|name| name.to_str())
                .filter(|name| is_pci_address(name))
                .ok_or_else(|| DiscoveryError::Malformed {
                    path: link.clone(),
                    reason: "does not point at a PCI device".to_string(),
                })?;
            numbered.push((index, vf.to_string()));
        }
        numbered.sort();
        Ok(numbered.into_iter().map(|(_, vf)| vf).collect())
    }
}

/// RDMA NICs from `<sys>/class/infiniband`: each RDMA device's PCI function
/// (its `device` link); VFs are left out (they are listed under their PF),
/// and only network-class functions count, as upstream does.
#[derive(Debug, Clone)]
pub struct RdmaSysfsSource {
    pci: PciSysfs,
}

impl RdmaSysfsSource {
    pub fn new(sys_root: impl Into<PathBuf>) -> Self {
        Self {
            pci: PciSysfs::new(sys_root),
        }
    }

    fn class_dir(&self) -> PathBuf {
        self.pci.sys_root().join("class/infiniband")
    }

    /// The PCI address behind an RDMA device.
    fn pci_address_of(&self, ib_device: &str) -> Result<String, DiscoveryError> {
        let link = self.class_dir().join(ib_device).join("device");
        let resolved = std::fs::canonicalize(&link).map_err(|source| DiscoveryError::Io {
            path: link.clone(),
            source,
        })?;
        resolved
            .file_name()
            .and_then(|name| name.to_str())
            .filter(|name| is_pci_address(name))
            .map(str::to_string)
            .ok_or_else(|| DiscoveryError::Malformed {
                path: link,
                reason: "does not resolve to a PCI device".to_string(),
            })
    }

    /// Every port of `ib_device` reads `ACTIVE` (`4: ACTIVE`); no port, or
    /// an unreadable one, is unhealthy.
    fn ports_active(&self, ib_device: &str) -> Result<bool, DiscoveryError> {
        let ports = self.class_dir().join(ib_device).join("ports");
        let names = list_dir(&ports, MAX_IB_PORTS)?;
        if names.is_empty() {
            return Ok(false);
        }
        for port in names {
            let state = read_attr(&ports.join(port).join("state"))?;
            if !state.contains("ACTIVE") {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn nic(&self, bus_id: &str, mut ib_devices: Vec<String>) -> Result<RdmaNic, String> {
        ib_devices.sort();
        // The PF's driver registers first, so its RDMA device sorts first.
        let primary = ib_devices[0].clone();
        let minor = rdma_minor(&primary).ok_or_else(|| {
            format!("RDMA device {primary} on {bus_id} has no minor (mlx<N>_<minor>); skipped")
        })?;
        let healthy = match self.ports_active(&primary) {
            Ok(healthy) => healthy,
            Err(err) => {
                tracing::debug!(device = %primary, error = %err, "RDMA port state unreadable; unhealthy");
                false
            }
        };
        let vfs = match self.pci.sriov_numvfs(bus_id) {
            Ok(0) => None,
            Ok(_) => Some(
                self.pci
                    .virtual_functions(bus_id)
                    .map_err(|err| format!("VFs of {bus_id}: {err}"))?,
            ),
            Err(err) => return Err(format!("SR-IOV state of {bus_id}: {err}")),
        };
        Ok(RdmaNic {
            bus_id: bus_id.to_string(),
            ib_devices,
            minor,
            healthy,
            vfs,
            topology: None,
        })
    }
}

impl DeviceSource for RdmaSysfsSource {
    fn name(&self) -> &'static str {
        "rdma-sysfs"
    }

    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
        let mut snapshot = DeviceSnapshot::default();
        let mut by_function: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for ib_device in list_dir(&self.class_dir(), MAX_IB_DEVICES)? {
            if !is_ib_device_name(&ib_device) {
                snapshot.problems.push(format!(
                    "RDMA device name {:?} is not valid; skipped",
                    crate::bounds::for_log(&ib_device)
                ));
                continue;
            }
            let bus_id = match self.pci_address_of(&ib_device) {
                Ok(bus_id) => bus_id,
                Err(err) => {
                    snapshot
                        .problems
                        .push(format!("RDMA device {ib_device}: {err}"));
                    continue;
                }
            };
            match self.pci.is_virtual_function(&bus_id) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(err) => {
                    snapshot
                        .problems
                        .push(format!("RDMA device {ib_device}: {err}"));
                    continue;
                }
            }
            match self.pci.class(&bus_id) {
                // Base class 0x02: network controller.
                Ok(class) if class >> 16 == 0x02 => {}
                Ok(class) => {
                    snapshot.problems.push(format!(
                        "RDMA device {ib_device} on {bus_id} is PCI class {class:#08x}, not a network controller; skipped"
                    ));
                    continue;
                }
                Err(err) => {
                    snapshot
                        .problems
                        .push(format!("RDMA device {ib_device}: {err}"));
                    continue;
                }
            }
            by_function.entry(bus_id).or_default().push(ib_device);
        }
        for (bus_id, ib_devices) in by_function {
            match self.nic(&bus_id, ib_devices) {
                Ok(nic) => snapshot.rdma.push(nic),
                Err(problem) => snapshot.problems.push(problem),
            }
        }
        snapshot.rdma.sort_by_key(|nic| nic.minor);
        Ok(snapshot)
    }
}
