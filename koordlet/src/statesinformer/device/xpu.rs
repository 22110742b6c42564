//! XPU device-info files: the way upstream lets a vendor's daemon (its
//! `koord-device-daemon`, or any other) describe GPUs and NPUs that NVML
//! does not know, with their peer links (NVLink, Huawei HCCS).
//!
//! Every regular file in `--xpu-device-infos-dir` (upstream's default
//! `/var/run/koordlet/xpu-device-infos/`) holds one JSON list of devices in
//! upstream's shape ([`XpuDeviceInfo`]). A missing directory means no such
//! daemon and no XPU devices. Anything else that cannot be read whole, in
//! bounds and as that shape is an error for the whole source: the reporter
//! then keeps the Device as it last reported it instead of dropping the
//! devices (see [`super::DeviceSource::failure_keeps_report`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::{DeviceSnapshot, DeviceSource, DiscoveryError};

pub use super::xpuinfo::*;

/// Reads one device-info file: at most [`MAX_FILE_BYTES`], one JSON list
/// (or `null`, no devices), each device within the per-device bounds.
pub fn read_device_infos_file(path: &Path) -> Result<Vec<XpuDeviceInfo>, DiscoveryError> {
    let io = |source| DiscoveryError::Io {
        path: path.to_path_buf(),
        source,
    };
    let too_large = || DiscoveryError::TooLarge {
        path: path.to_path_buf(),
        limit: MAX_FILE_BYTES,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    if file.metadata().map_err(io)?.len() > MAX_FILE_BYTES {
        return Err(too_large());
    }
    // The size can change between the check and the read: read one byte
    // more than allowed to notice.
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(too_large());
    }
    let malformed = |reason: String| DiscoveryError::Malformed {
        path: path.to_path_buf(),
        reason,
    };
    let devices: Option<Vec<XpuDeviceInfo>> = serde_json::from_slice(&bytes).map_err(|err| {
        malformed(format!(
            "not a JSON list of device infos ({}): {err}",
            "vendor, model, uuid, minor, resources, topology, status"
        ))
    })?;
    let devices = devices.unwrap_or_default();
    for device in &devices {
        let resources = device.resources.as_ref().map_or(0, BTreeMap::len);
        if resources > MAX_RESOURCES_PER_DEVICE {
            return Err(malformed(format!(
                "device {:?} lists {resources} resources, more than {MAX_RESOURCES_PER_DEVICE}",
                crate::bounds::for_log(&device.uuid)
            )));
        }
        let links = device
            .topology
            .as_ref()
            .and_then(|t| t.p2p_links.as_ref())
            .map_or(0, Vec::len);
        if links > MAX_LINKS_PER_DEVICE {
            return Err(malformed(format!(
                "device {:?} lists {links} peer links, more than {MAX_LINKS_PER_DEVICE}",
                crate::bounds::for_log(&device.uuid)
            )));
        }
    }
    Ok(devices)
}

/// Reads every regular file of `dir` in name order (as upstream's
/// `os.ReadDir`); a missing directory has no devices.
pub fn read_device_infos_dir(dir: &Path) -> Result<Vec<XpuDeviceInfo>, DiscoveryError> {
    let io = |path: &Path, source| DiscoveryError::Io {
        path: path.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(io(dir, err)),
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for (seen, entry) in entries.enumerate() {
        if seen >= MAX_DIR_ENTRIES {
            return Err(DiscoveryError::TooManyEntries {
                path: dir.to_path_buf(),
                limit: MAX_DIR_ENTRIES,
            });
        }
        let entry = entry.map_err(|err| io(dir, err))?;
        // As upstream: directories are skipped, anything else (a symlink
        // included) is opened as a file.
        if entry
            .file_type()
            .map_err(|err| io(&entry.path(), err))?
            .is_dir()
        {
            continue;
        }
        files.push(entry.path());
    }
    files.sort();
    let mut devices = Vec::new();
    for file in files {
        devices.extend(read_device_infos_file(&file)?);
        if devices.len() > MAX_DEVICES {
            return Err(DiscoveryError::TooManyEntries {
                path: dir.to_path_buf(),
                limit: MAX_DEVICES,
            });
        }
    }
    Ok(devices)
}

/// The device-info directory as a [`DeviceSource`].
#[derive(Debug, Clone)]
pub struct XpuDeviceInfoSource {
    dir: PathBuf,
}

impl XpuDeviceInfoSource {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl DeviceSource for XpuDeviceInfoSource {
    fn name(&self) -> &'static str {
        "xpu-device-infos"
    }

    fn discover(&self) -> Result<DeviceSnapshot, DiscoveryError> {
        Ok(DeviceSnapshot {
            xpus: read_device_infos_dir(&self.dir)?,
            ..DeviceSnapshot::default()
        })
    }

    /// A file that is being rewritten or is garbage must not make the
    /// node's devices vanish from the Device.
    fn failure_keeps_report(&self) -> bool {
        true
    }
}
