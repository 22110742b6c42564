//! The RDMA character devices of a PCI function, from sysfs: its uverbs
//! device (`<sys>/bus/pci/devices/<bdf>/infiniband_verbs/uverbs<N>/dev`)
//! and the RDMA connection manager (`<sys>/class/misc/rdma_cm/dev`, present
//! when `rdma_ucm` is loaded). Used by the RDMADeviceInject hook and the
//! `devices.rdmaInject` row of `koordlet capabilities`. Reads are bounded
//! ([`super::sysfs::read_attr`], [`super::sysfs::list_dir`]).

use std::path::{Path, PathBuf};

use super::DiscoveryError;
use super::sysfs::{is_pci_address, list_dir, read_attr};

/// The most entries of one `infiniband_verbs` directory (one per verbs
/// device of the function; one in practice).
const MAX_VERBS_ENTRIES: usize = 64;

/// A character device known by name and numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharDevice {
    /// The node's name below `/dev/infiniband` (`uverbs3`, `rdma_cm`).
    pub name: String,
    pub major: i64,
    pub minor: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum UverbsError {
    #[error("{0:?} is not a PCI address (dddd:bb:dd.f)")]
    NotABusId(String),
    #[error("PCI function {bdf} has no uverbs device (no uverbs<N> in {dir})")]
    NoUverbs { bdf: String, dir: PathBuf },
    #[error("{path} holds {text:?}, not <major>:<minor>")]
    BadDeviceNumbers { path: PathBuf, text: String },
    #[error(transparent)]
    Sysfs(#[from] DiscoveryError),
}

/// `<major>:<minor>` as sysfs `dev` attributes hold them.
fn parse_dev_numbers(path: PathBuf, text: &str) -> Result<(i64, i64), UverbsError> {
    let parsed = text.split_once(':').and_then(|(major, minor)| {
        let major = major.parse::<u32>().ok()?;
        let minor = minor.parse::<u32>().ok()?;
        Some((i64::from(major), i64::from(minor)))
    });
    parsed.ok_or_else(|| UverbsError::BadDeviceNumbers {
        path,
        text: crate::bounds::cut(text.to_string()),
    })
}

/// Whether `name` is a uverbs device name (`uverbs` and 1-5 digits).
fn is_uverbs_name(name: &str) -> bool {
    name.strip_prefix("uverbs").is_some_and(|digits| {
        !digits.is_empty() && digits.len() <= 5 && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The uverbs device of the PCI function `bdf`: the first `uverbs<N>` in
/// name order (upstream takes the directory's first entry).
pub fn uverbs_of(sys_root: &Path, bdf: &str) -> Result<CharDevice, UverbsError> {
    if !is_pci_address(bdf) {
        return Err(UverbsError::NotABusId(crate::bounds::cut(bdf.to_string())));
    }
    let dir = sys_root
        .join("bus/pci/devices")
        .join(bdf)
        .join("infiniband_verbs");
    let name = list_dir(&dir, MAX_VERBS_ENTRIES)?
        .into_iter()
        .find(|name| is_uverbs_name(name))
        .ok_or_else(|| UverbsError::NoUverbs {
            bdf: bdf.to_string(),
            dir: dir.clone(),
        })?;
    let dev = dir.join(&name).join("dev");
    let text = read_attr(&dev)?;
    let (major, minor) = parse_dev_numbers(dev, &text)?;
    Ok(CharDevice { name, major, minor })
}

/// The RDMA connection manager device.
pub fn rdma_cm(sys_root: &Path) -> Result<CharDevice, UverbsError> {
    let dev = sys_root.join("class/misc/rdma_cm/dev");
    let text = read_attr(&dev)?;
    let (major, minor) = parse_dev_numbers(dev, &text)?;
    Ok(CharDevice {
        name: "rdma_cm".to_string(),
        major,
        minor,
    })
}
