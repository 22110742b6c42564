//! The cgroup layout of a Kubernetes node, without I/O: where the kubepods
//! root, the QoS tiers, pods and containers live for each cgroup driver, which
//! file holds a resource in cgroup v1 and v2, and how values convert between
//! the two. Reading and writing happen in [`super::cgroupfs`].
//!
//! Values are expressed in cgroup v1 terms (as upstream koordlet does):
//! `cpu.shares`, a CFS quota with `-1` for unlimited, `memory.limit_in_bytes`.
//! [`CgroupResource::encode`] turns them into the file content of the running
//! version (`cpu.weight`, `cpu.max`, `memory.max`, ...), and
//! [`CgroupResource::decode`] turns file content back into v1 terms.
//!
//! ```
//! use koordlet::system::cgroup::*;
//! let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Systemd, "/sys/fs/cgroup");
//! let dir = layout
//!     .container_dir(QosTier::Burstable, "1234-ab", "containerd://c0ffee")
//!     .unwrap();
//! assert_eq!(
//!     dir.to_str().unwrap(),
//!     "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab.slice/cri-containerd-c0ffee.scope"
//! );
//! let file = layout.file_path(&dir, CgroupResource::CpuCfsQuota).unwrap();
//! assert!(file.starts_with("/sys/fs/cgroup/cpu/kubepods.slice"));
//! assert!(file.ends_with("cpu.cfs_quota_us"));
//! ```

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use koord_common::units::{CpuListError, CpuSet, DEFAULT_CFS_PERIOD_US, MIN_CFS_QUOTA_US};

/// The cgroup hierarchy flavour the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// One hierarchy per controller (`<root>/<controller>/<path>`).
    V1,
    /// The unified hierarchy (`<root>/<path>`).
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
        })
    }
}

/// How the kubelet names cgroups (its `cgroupDriver` setting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// Plain directories: `kubepods/burstable/pod<uid>/<container id>`.
    Cgroupfs,
    /// systemd slices and scopes: `kubepods.slice/kubepods-burstable.slice/...`.
    Systemd,
}

impl CgroupDriver {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cgroupfs => "cgroupfs",
            Self::Systemd => "systemd",
        }
    }

    /// The kubepods root directory name of this driver.
    pub fn kubepods_dir_name(self) -> &'static str {
        match self {
            Self::Cgroupfs => "kubepods",
            Self::Systemd => "kubepods.slice",
        }
    }
}

impl fmt::Display for CgroupDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CgroupDriver {
    type Err = CgroupPathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cgroupfs" => Ok(Self::Cgroupfs),
            "systemd" => Ok(Self::Systemd),
            other => Err(CgroupPathError::UnknownDriver(other.to_string())),
        }
    }
}

/// A Kubernetes pod QoS class, which decides the tier a pod's cgroup sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum QosTier {
    /// Directly under the kubepods root.
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosTier {
    pub const ALL: [QosTier; 3] = [Self::Guaranteed, Self::Burstable, Self::BestEffort];

    /// From a pod's `status.qosClass` (`Guaranteed`, `Burstable`, `BestEffort`);
    /// the lowercase directory spellings are accepted too.
    pub fn from_kubernetes_qos_class(class: &str) -> Result<Self, CgroupPathError> {
        match class {
            "Guaranteed" | "guaranteed" => Ok(Self::Guaranteed),
            "Burstable" | "burstable" => Ok(Self::Burstable),
            "BestEffort" | "besteffort" => Ok(Self::BestEffort),
            other => Err(CgroupPathError::UnknownQosClass(other.to_string())),
        }
    }

    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Guaranteed => "Guaranteed",
            Self::Burstable => "Burstable",
            Self::BestEffort => "BestEffort",
        }
    }

    /// The tier's directory-name fragment (`burstable`, `besteffort`); none
    /// for guaranteed pods, which sit directly under kubepods.
    fn dir_fragment(self) -> Option<&'static str> {
        match self {
            Self::Guaranteed => None,
            Self::Burstable => Some("burstable"),
            Self::BestEffort => Some("besteffort"),
        }
    }
}

impl FromStr for QosTier {
    type Err = CgroupPathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_kubernetes_qos_class(s)
    }
}

impl fmt::Display for QosTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A container runtime, as named in a container status' `containerID` prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerRuntime {
    Containerd,
    Docker,
    #[serde(rename = "cri-o")]
    CriO,
    Pouch,
}

impl ContainerRuntime {
    /// The `<prefix>://` of container IDs.
    pub fn id_prefix(self) -> &'static str {
        match self {
            Self::Containerd => "containerd",
            Self::Docker => "docker",
            Self::CriO => "cri-o",
            Self::Pouch => "pouch",
        }
    }

    /// The systemd scope name prefix the runtime gives container cgroups.
    fn systemd_scope_prefix(self) -> &'static str {
        match self {
            Self::Containerd => "cri-containerd-",
            Self::Docker => "docker-",
            Self::CriO => "crio-",
            Self::Pouch => "pouch-",
        }
    }

    const ALL: [ContainerRuntime; 4] = [Self::Containerd, Self::Docker, Self::CriO, Self::Pouch];
}

/// A container ID with its optional runtime prefix (`containerd://abc`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerId {
    pub runtime: Option<ContainerRuntime>,
    pub id: String,
}

impl ContainerId {
    /// Accepts `<runtime>://<id>` or a bare `<id>`; rejects unknown runtimes
    /// and ids that could escape a directory.
    pub fn parse(text: &str) -> Result<Self, CgroupPathError> {
        let (runtime, id) = match text.split_once("://") {
            Some((prefix, id)) => {
                let runtime = ContainerRuntime::ALL
                    .into_iter()
                    .find(|r| r.id_prefix() == prefix)
                    .ok_or_else(|| CgroupPathError::UnknownRuntime(text.to_string()))?;
                (Some(runtime), id)
            }
            None => (None, text),
        };
        if !is_safe_name(id) {
            return Err(CgroupPathError::InvalidContainerId(text.to_string()));
        }
        Ok(Self {
            runtime,
            id: id.to_string(),
        })
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.runtime {
            Some(runtime) => write!(f, "{}://{}", runtime.id_prefix(), self.id),
            None => f.write_str(&self.id),
        }
    }
}

/// Names that are safe as one path component: not empty, no separator, no
/// `..`, no NUL or whitespace.
fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && !name.contains("..")
        && !name
            .chars()
            .any(|c| c == '/' || c == '\0' || c.is_whitespace())
}

/// Invalid identifiers or directories given to the layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupPathError {
    #[error("invalid pod UID {0:?}: it must be non-empty and contain no '/', '..' or whitespace")]
    InvalidPodUid(String),
    #[error(
        "invalid container ID {0:?}: it must be non-empty and contain no '/', '..' or whitespace"
    )]
    InvalidContainerId(String),
    #[error(
        "container ID {0:?} has an unknown runtime prefix (expected containerd://, docker://, cri-o:// or pouch://)"
    )]
    UnknownRuntime(String),
    #[error("unknown Kubernetes QoS class {0:?} (expected Guaranteed, Burstable or BestEffort)")]
    UnknownQosClass(String),
    #[error("unknown cgroup driver {0:?} (expected cgroupfs or systemd)")]
    UnknownDriver(String),
    #[error("cgroup directory {0:?} must stay below the cgroup root (no '..' components)")]
    InvalidRelativeDir(PathBuf),
    #[error("unknown cgroup resource {0:?}")]
    UnknownResource(String),
}

/// A cgroup v1 controller (one hierarchy each in v1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Controller {
    Cpu,
    Cpuacct,
    Cpuset,
    Memory,
    Blkio,
    Pids,
}

impl Controller {
    pub const ALL: [Controller; 6] = [
        Self::Cpu,
        Self::Cpuacct,
        Self::Cpuset,
        Self::Memory,
        Self::Blkio,
        Self::Pids,
    ];

    /// The v1 mount directory name below the cgroup root.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Cpuacct => "cpuacct",
            Self::Cpuset => "cpuset",
            Self::Memory => "memory",
            Self::Blkio => "blkio",
            Self::Pids => "pids",
        }
    }
}

impl fmt::Display for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a node's cgroups are, and how the kubelet names them.
///
/// Methods ending in `_dir` return directories RELATIVE to the hierarchy root
/// (the same relative path in every v1 controller); [`CgroupLayout::file_path`]
/// and [`CgroupLayout::controller_path`] make absolute paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLayout {
    pub version: CgroupVersion,
    pub driver: CgroupDriver,
    /// The cgroup root (`--cgroup-root-dir`, e.g. `/sys/fs/cgroup`).
    pub root: PathBuf,
    /// On v1 hosts with a cgroup2 mount beside the controllers (hybrid, e.g.
    /// `/sys/fs/cgroup/unified`), the per-cgroup PSI files live there under
    /// the same relative path. Without it, v1 PSI is looked up in the cpuacct
    /// hierarchy (where upstream's kernels put it). Ignored on v2.
    pub unified_root: Option<PathBuf>,
    /// The runtime assumed for bare container IDs under the systemd driver
    /// (upstream's `-default-runtime-type`, containerd).
    pub default_runtime: ContainerRuntime,
    /// The kubepods directory when not the driver's default
    /// (`--kubepods-cgroup-dir`), relative to the hierarchy root.
    pub kubepods: Option<PathBuf>,
}

impl CgroupLayout {
    pub fn new(version: CgroupVersion, driver: CgroupDriver, root: impl Into<PathBuf>) -> Self {
        Self {
            version,
            driver,
            root: root.into(),
            unified_root: None,
            default_runtime: ContainerRuntime::Containerd,
            kubepods: None,
        }
    }

    /// Uses `dir` (relative to the hierarchy root; a leading `/` is
    /// ignored) as the kubepods directory. A `dir` that is empty or holds
    /// `..` keeps the driver's default.
    pub fn with_kubepods_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.kubepods = normalize_relative_dir(dir.as_ref())
            .ok()
            .filter(|dir| !dir.as_os_str().is_empty());
        self
    }

    /// Sets the cgroup2 mount used for PSI on v1 hosts.
    pub fn with_unified_root(mut self, unified_root: impl Into<PathBuf>) -> Self {
        self.unified_root = Some(unified_root.into());
        self
    }

    /// `kubepods` or `kubepods.slice` (or `--kubepods-cgroup-dir`).
    pub fn kubepods_dir(&self) -> PathBuf {
        self.kubepods
            .clone()
            .unwrap_or_else(|| PathBuf::from(self.driver.kubepods_dir_name()))
    }

    /// The tier's directory; guaranteed pods share the kubepods root.
    pub fn qos_dir(&self, tier: QosTier) -> PathBuf {
        let kubepods = self.kubepods_dir();
        match (self.driver, tier.dir_fragment()) {
            (_, None) => kubepods,
            (CgroupDriver::Cgroupfs, Some(fragment)) => kubepods.join(fragment),
            (CgroupDriver::Systemd, Some(fragment)) => {
                kubepods.join(format!("kubepods-{fragment}.slice"))
            }
        }
    }

    /// The pod's directory: `pod<uid>` (cgroupfs) or
    /// `kubepods[-<tier>]-pod<uid with '_' for '-'>.slice` (systemd).
    pub fn pod_dir(&self, tier: QosTier, pod_uid: &str) -> Result<PathBuf, CgroupPathError> {
        if !is_safe_name(pod_uid) {
            return Err(CgroupPathError::InvalidPodUid(pod_uid.to_string()));
        }
        let name = match self.driver {
            CgroupDriver::Cgroupfs => format!("pod{pod_uid}"),
            CgroupDriver::Systemd => {
                let escaped = pod_uid.replace('-', "_");
                match tier.dir_fragment() {
                    None => format!("kubepods-pod{escaped}.slice"),
                    Some(fragment) => format!("kubepods-{fragment}-pod{escaped}.slice"),
                }
            }
        };
        Ok(self.qos_dir(tier).join(name))
    }

    /// The container's directory. `container_id` may carry a runtime prefix
    /// (`containerd://`, `docker://`, `cri-o://`, `pouch://`); under systemd a
    /// bare ID is taken to belong to [`CgroupLayout::default_runtime`].
    pub fn container_dir(
        &self,
        tier: QosTier,
        pod_uid: &str,
        container_id: &str,
    ) -> Result<PathBuf, CgroupPathError> {
        let container = ContainerId::parse(container_id)?;
        let pod_dir = self.pod_dir(tier, pod_uid)?;
        Ok(pod_dir.join(self.container_dir_name(&container)))
    }

    /// The last path component of a container's cgroup.
    pub fn container_dir_name(&self, container: &ContainerId) -> String {
        match self.driver {
            CgroupDriver::Cgroupfs => container.id.clone(),
            CgroupDriver::Systemd => {
                let runtime = container.runtime.unwrap_or(self.default_runtime);
                format!("{}{}.scope", runtime.systemd_scope_prefix(), container.id)
            }
        }
    }

    /// The pod UID encoded in a pod directory name, if it is one
    /// (systemd names get their '_' turned back into '-').
    pub fn pod_uid_from_dir_name(&self, name: &str) -> Option<String> {
        let uid = match self.driver {
            CgroupDriver::Cgroupfs => name.strip_prefix("pod")?.to_string(),
            CgroupDriver::Systemd => {
                let inner = name.strip_suffix(".slice")?;
                let escaped = [
                    "kubepods-burstable-pod",
                    "kubepods-besteffort-pod",
                    "kubepods-pod",
                ]
                .into_iter()
                .find_map(|prefix| inner.strip_prefix(prefix))?;
                escaped.replace('_', "-")
            }
        };
        is_safe_name(&uid).then_some(uid)
    }

    /// The container ID (and, for systemd scopes, the runtime) encoded in a
    /// container directory name.
    pub fn container_id_from_dir_name(&self, name: &str) -> Option<ContainerId> {
        let container = match self.driver {
            CgroupDriver::Cgroupfs => ContainerId {
                runtime: None,
                id: name.to_string(),
            },
            CgroupDriver::Systemd => {
                let inner = name.strip_suffix(".scope")?;
                ContainerRuntime::ALL.into_iter().find_map(|runtime| {
                    inner
                        .strip_prefix(runtime.systemd_scope_prefix())
                        .map(|id| ContainerId {
                            runtime: Some(runtime),
                            id: id.to_string(),
                        })
                })?
            }
        };
        is_safe_name(&container.id).then_some(container)
    }

    /// The absolute directory of `relative_dir` in one controller's hierarchy
    /// (v1: `<root>/<controller>/<dir>`; v2: `<root>/<dir>`). Use it to create
    /// cgroups or attach tasks in each v1 hierarchy.
    pub fn controller_path(
        &self,
        relative_dir: impl AsRef<Path>,
        controller: Controller,
    ) -> Result<PathBuf, CgroupPathError> {
        let relative = normalize_relative_dir(relative_dir.as_ref())?;
        Ok(match self.version {
            CgroupVersion::V1 => self.root.join(controller.as_str()).join(relative),
            CgroupVersion::V2 => self.root.join(relative),
        })
    }

    /// The absolute path of `resource`'s file for the cgroup at `relative_dir`.
    /// A leading `/` on the directory is ignored; `..` is rejected.
    pub fn file_path(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
    ) -> Result<PathBuf, CgroupPathError> {
        let relative = normalize_relative_dir(relative_dir.as_ref())?;
        let path = match self.version {
            CgroupVersion::V2 => self.root.join(relative).join(resource.v2_file_name()),
            CgroupVersion::V1 => match (&self.unified_root, resource.is_pressure()) {
                (Some(unified), true) => unified.join(relative).join(resource.v1_file_name()),
                _ => self
                    .root
                    .join(resource.v1_controller().as_str())
                    .join(relative)
                    .join(resource.v1_file_name()),
            },
        };
        Ok(path)
    }
}

/// Strips a leading `/` and `.` components; rejects `..` and prefixes.
fn normalize_relative_dir(dir: &Path) -> Result<PathBuf, CgroupPathError> {
    let mut relative = PathBuf::new();
    for component in dir.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => relative.push(part),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(CgroupPathError::InvalidRelativeDir(dir.to_path_buf()));
            }
        }
    }
    Ok(relative)
}

/// Maps Kubernetes' cpu.shares range [2, 262144] linearly onto cpu.weight
/// [1, 10000], as the kubelet (and upstream koordlet) do.
pub fn cpu_shares_to_weight(shares: i64) -> i64 {
    let shares = shares.clamp(MIN_CPU_SHARES, MAX_CPU_SHARES);
    1 + ((shares - MIN_CPU_SHARES) * (MAX_CPU_WEIGHT - 1)) / (MAX_CPU_SHARES - MIN_CPU_SHARES)
}

/// The inverse of [`cpu_shares_to_weight`] (lossy: weights are coarser).
pub fn cpu_weight_to_shares(weight: i64) -> i64 {
    let weight = weight.clamp(MIN_CPU_WEIGHT, MAX_CPU_WEIGHT);
    MIN_CPU_SHARES + ((weight - 1) * (MAX_CPU_SHARES - MIN_CPU_SHARES)) / (MAX_CPU_WEIGHT - 1)
}

pub const MIN_CPU_SHARES: i64 = 2;
pub const MAX_CPU_SHARES: i64 = 262_144;
pub const MIN_CPU_WEIGHT: i64 = 1;
pub const MAX_CPU_WEIGHT: i64 = 10_000;

/// The two halves of cgroup v2 `cpu.max` (`"<quota|max> <period>"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuMax {
    /// `None` is unlimited (`max`).
    pub quota_us: Option<u64>,
    pub period_us: u64,
}

impl CpuMax {
    pub fn parse(content: &str) -> Result<Self, CgroupValueError> {
        let malformed = || CgroupValueError::Malformed {
            content: content.trim().to_string(),
            expected: "\"<quota|max> <period>\"",
        };
        let mut fields = content.split_whitespace();
        let (Some(quota), Some(period), None) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(malformed());
        };
        let quota_us = match quota {
            "max" => None,
            q => Some(q.parse::<u64>().map_err(|_| malformed())?),
        };
        let period_us = period.parse::<u64>().map_err(|_| malformed())?;
        Ok(Self {
            quota_us,
            period_us,
        })
    }
}

impl fmt::Display for CpuMax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.quota_us {
            Some(quota) => write!(f, "{quota} {}", self.period_us),
            None => write!(f, "max {}", self.period_us),
        }
    }
}

/// A value of a cgroup resource, in v1 terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CgroupValue {
    Int(i64),
    /// No limit: `-1` in v1 quota/limit files, `max` in v2 and `pids.max`.
    Unlimited,
    CpuSet(CpuSet),
    /// Anything without structure koordlet interprets (stat files, PSI, blkio
    /// throttle lines `"<major>:<minor> <value>"`).
    Text(String),
}

impl CgroupValue {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Self::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_cpuset(&self) -> Option<&CpuSet> {
        match self {
            Self::CpuSet(set) => Some(set),
            _ => None,
        }
    }
}

impl fmt::Display for CgroupValue {
    /// The v1 spelling (`-1` for unlimited).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int(v) => write!(f, "{v}"),
            Self::Unlimited => f.write_str("-1"),
            Self::CpuSet(set) => write!(f, "{set}"),
            Self::Text(text) => f.write_str(text),
        }
    }
}

impl From<CpuSet> for CgroupValue {
    fn from(set: CpuSet) -> Self {
        Self::CpuSet(set)
    }
}

impl From<koord_common::units::CfsQuota> for CgroupValue {
    fn from(quota: koord_common::units::CfsQuota) -> Self {
        match quota {
            koord_common::units::CfsQuota::Unlimited => Self::Unlimited,
            koord_common::units::CfsQuota::Micros(v) => Self::Int(v.min(i64::MAX as u64) as i64),
        }
    }
}

/// A value that does not fit a resource, or file content that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CgroupValueError {
    #[error("{resource} is read-only")]
    ReadOnly { resource: CgroupResource },
    #[error("{value} is outside the range {min}..={max} of {resource}")]
    OutOfRange {
        resource: CgroupResource,
        value: i64,
        min: i64,
        max: i64,
    },
    #[error("{resource} cannot be unlimited")]
    UnlimitedNotAllowed { resource: CgroupResource },
    #[error("{resource} expects {expected}, got {value:?}")]
    WrongKind {
        resource: CgroupResource,
        expected: &'static str,
        value: String,
    },
    #[error("malformed content {content:?}: expected {expected}")]
    Malformed {
        content: String,
        expected: &'static str,
    },
    #[error("field {key:?} is missing")]
    MissingField { key: String },
    #[error(transparent)]
    CpuSet(#[from] CpuListError),
}

/// What a resource's file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// An integer in `min..=max`; `unlimited` says whether no-limit is valid.
    Int { min: i64, max: i64, unlimited: bool },
    /// A cpu/memory-node list.
    CpuList,
    /// `"<major>:<minor> <value>"` (blkio throttle files).
    DeviceLimit,
    /// Free-form, read-only (stat and pressure files).
    Text,
}

/// How [`crate::resourceexecutor`] orders writes of a resource across a
/// parent and its children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HierarchyOrder {
    /// Children must stay subsets of their parent (cpuset lists).
    SetInclusion,
    /// Larger values are looser; unlimited is the loosest (CFS quota, memory protection).
    Numeric,
}

macro_rules! cgroup_resources {
    ($( $(#[$doc:meta])* $variant:ident => $v1_controller:ident, $v1_file:literal, $v2_file:literal; )*) => {
        /// A cgroup file koordlet reads or writes, named after its v1 file.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum CgroupResource {
            $( $(#[$doc])* $variant, )*
        }

        impl CgroupResource {
            pub const ALL: &'static [CgroupResource] = &[$(Self::$variant),*];

            /// The controller holding the file in v1.
            pub fn v1_controller(self) -> Controller {
                match self { $(Self::$variant => Controller::$v1_controller,)* }
            }

            /// The v1 file name; also the resource's name (upstream's resource type).
            pub fn v1_file_name(self) -> &'static str {
                match self { $(Self::$variant => $v1_file,)* }
            }

            /// The v2 file name holding this resource.
            pub fn v2_file_name(self) -> &'static str {
                match self { $(Self::$variant => $v2_file,)* }
            }
        }
    };
}

cgroup_resources! {
    /// `cpu.shares` (v2 `cpu.weight`, converted).
    CpuShares => Cpu, "cpu.shares", "cpu.weight";
    /// `cpu.cfs_quota_us` (v2: first field of `cpu.max`); unlimited is -1 / max.
    CpuCfsQuota => Cpu, "cpu.cfs_quota_us", "cpu.max";
    /// `cpu.cfs_period_us` (v2: second field of `cpu.max`).
    CpuCfsPeriod => Cpu, "cpu.cfs_period_us", "cpu.max";
    /// `cpu.cfs_burst_us` (v2 `cpu.max.burst`).
    CpuBurst => Cpu, "cpu.cfs_burst_us", "cpu.max.burst";
    CpuIdle => Cpu, "cpu.idle", "cpu.idle";
    /// Anolis group identity.
    CpuBvtWarpNs => Cpu, "cpu.bvt_warp_ns", "cpu.bvt_warp_ns";
    CpuStat => Cpu, "cpu.stat", "cpu.stat";
    /// Cumulative CPU time in nanoseconds (v2: `usage_usec` of `cpu.stat` × 1000).
    CpuacctUsage => Cpuacct, "cpuacct.usage", "cpu.stat";
    CpuacctStat => Cpuacct, "cpuacct.stat", "cpu.stat";
    CpusetCpus => Cpuset, "cpuset.cpus", "cpuset.cpus";
    CpusetMems => Cpuset, "cpuset.mems", "cpuset.mems";
    CpusetCpusEffective => Cpuset, "cpuset.effective_cpus", "cpuset.cpus.effective";
    CpusetMemsEffective => Cpuset, "cpuset.effective_mems", "cpuset.mems.effective";
    /// `memory.limit_in_bytes` (v2 `memory.max`); unlimited is -1 / max.
    MemoryLimit => Memory, "memory.limit_in_bytes", "memory.max";
    /// `memory.usage_in_bytes` (v2 `memory.current`).
    MemoryUsage => Memory, "memory.usage_in_bytes", "memory.current";
    MemoryStat => Memory, "memory.stat", "memory.stat";
    MemoryNumaStat => Memory, "memory.numa_stat", "memory.numa_stat";
    /// v2, or Anolis v1.
    MemoryMin => Memory, "memory.min", "memory.min";
    MemoryLow => Memory, "memory.low", "memory.low";
    MemoryHigh => Memory, "memory.high", "memory.high";
    MemoryWmarkRatio => Memory, "memory.wmark_ratio", "memory.wmark_ratio";
    MemoryWmarkScaleFactor => Memory, "memory.wmark_scale_factor", "memory.wmark_scale_factor";
    MemoryWmarkMinAdj => Memory, "memory.wmark_min_adj", "memory.wmark_min_adj";
    MemoryPriority => Memory, "memory.priority", "memory.priority";
    MemoryUsePriorityOom => Memory, "memory.use_priority_oom", "memory.use_priority_oom";
    MemoryOomGroup => Memory, "memory.oom.group", "memory.oom.group";
    /// Alibaba Cloud Linux per-memcg page cache limit: switch, bytes, and
    /// synchronous (1) or asynchronous (0) reclaim.
    MemoryPagecacheLimitEnable => Memory, "memory.pagecache_limit.enable", "memory.pagecache_limit.enable";
    MemoryPagecacheLimitSize => Memory, "memory.pagecache_limit.size", "memory.pagecache_limit.size";
    MemoryPagecacheLimitSync => Memory, "memory.pagecache_limit.sync", "memory.pagecache_limit.sync";
    PidsMax => Pids, "pids.max", "pids.max";
    PidsCurrent => Pids, "pids.current", "pids.current";
    /// Process IDs of the cgroup (v1: in the cpu hierarchy); writing one moves the process.
    CgroupProcs => Cpu, "cgroup.procs", "cgroup.procs";
    /// Thread IDs (v1 `tasks`, v2 `cgroup.threads`).
    Tasks => Cpu, "tasks", "cgroup.threads";
    /// `"<major>:<minor> <bytes/s>"`; v2 `io.max` key `rbps`.
    BlkioThrottleReadBps => Blkio, "blkio.throttle.read_bps_device", "io.max";
    BlkioThrottleWriteBps => Blkio, "blkio.throttle.write_bps_device", "io.max";
    BlkioThrottleReadIops => Blkio, "blkio.throttle.read_iops_device", "io.max";
    BlkioThrottleWriteIops => Blkio, "blkio.throttle.write_iops_device", "io.max";
    /// PSI; on v1 see [`CgroupLayout::unified_root`].
    CpuPressure => Cpuacct, "cpu.pressure", "cpu.pressure";
    MemoryPressure => Cpuacct, "memory.pressure", "memory.pressure";
    IoPressure => Cpuacct, "io.pressure", "io.pressure";
}

const I64_MAX: i64 = i64::MAX;

impl CgroupResource {
    /// The resource's name (its v1 file name).
    pub fn name(self) -> &'static str {
        self.v1_file_name()
    }

    pub fn is_pressure(self) -> bool {
        matches!(
            self,
            Self::CpuPressure | Self::MemoryPressure | Self::IoPressure
        )
    }

    /// What the file holds and which values are valid (upstream's validators).
    pub fn value_kind(self) -> ValueKind {
        let int = |min, max, unlimited| ValueKind::Int {
            min,
            max,
            unlimited,
        };
        match self {
            Self::CpuShares => int(MIN_CPU_SHARES, MAX_CPU_SHARES, false),
            Self::CpuCfsQuota => int(MIN_CFS_QUOTA_US as i64, I64_MAX, true),
            Self::CpuCfsPeriod => int(1_000, 1_000_000, false),
            Self::CpuBurst => int(0, 100 * 10 * DEFAULT_CFS_PERIOD_US as i64, false),
            Self::CpuIdle
            | Self::MemoryUsePriorityOom
            | Self::MemoryOomGroup
            | Self::MemoryPagecacheLimitEnable
            | Self::MemoryPagecacheLimitSync => int(0, 1, false),
            Self::MemoryPagecacheLimitSize => int(0, I64_MAX, false),
            Self::CpuBvtWarpNs => int(-1, 2, false),
            Self::CpuacctUsage | Self::MemoryUsage | Self::PidsCurrent => int(0, I64_MAX, false),
            Self::CpusetCpus
            | Self::CpusetMems
            | Self::CpusetCpusEffective
            | Self::CpusetMemsEffective => ValueKind::CpuList,
            Self::MemoryLimit | Self::MemoryMin | Self::MemoryLow | Self::MemoryHigh => {
                int(0, I64_MAX, true)
            }
            Self::MemoryWmarkRatio => int(0, 100, false),
            Self::MemoryWmarkScaleFactor => int(1, 1000, false),
            Self::MemoryWmarkMinAdj => int(-25, 50, false),
            Self::MemoryPriority => int(0, 12, false),
            Self::PidsMax => int(0, I64_MAX, true),
            Self::CgroupProcs | Self::Tasks => int(1, I64_MAX, false),
            Self::BlkioThrottleReadBps
            | Self::BlkioThrottleWriteBps
            | Self::BlkioThrottleReadIops
            | Self::BlkioThrottleWriteIops => ValueKind::DeviceLimit,
            Self::CpuStat
            | Self::CpuacctStat
            | Self::MemoryStat
            | Self::MemoryNumaStat
            | Self::CpuPressure
            | Self::MemoryPressure
            | Self::IoPressure => ValueKind::Text,
        }
    }

    /// Read-only usage counters (`cpuacct.usage`, memory usage,
    /// `pids.current`): never negative.
    pub fn is_counter(self) -> bool {
        matches!(
            self,
            Self::CpuacctUsage | Self::MemoryUsage | Self::PidsCurrent
        )
    }

    /// Whether koordlet may write the file.
    pub fn is_writable(self) -> bool {
        !matches!(
            self,
            Self::CpuStat
                | Self::CpuacctUsage
                | Self::CpuacctStat
                | Self::CpusetCpusEffective
                | Self::CpusetMemsEffective
                | Self::MemoryUsage
                | Self::MemoryStat
                | Self::MemoryNumaStat
                | Self::PidsCurrent
                | Self::CpuPressure
                | Self::MemoryPressure
                | Self::IoPressure
        )
    }

    /// Whether a repeated write of the same value can be skipped: false for
    /// files where a write is an action (moving a process), not a setting.
    pub fn is_cacheable(self) -> bool {
        !matches!(self, Self::CgroupProcs | Self::Tasks)
    }

    /// How writes are ordered across a parent and its children, if at all.
    pub fn hierarchy_order(self) -> Option<HierarchyOrder> {
        match self {
            Self::CpusetCpus | Self::CpusetMems => Some(HierarchyOrder::SetInclusion),
            Self::CpuCfsQuota | Self::MemoryMin | Self::MemoryLow | Self::MemoryHigh => {
                Some(HierarchyOrder::Numeric)
            }
            _ => None,
        }
    }

    /// Parses a value written in v1 terms (`"-1"`, `"max"`, `"0-3"`, ...) and
    /// validates it for this resource.
    pub fn parse_value(self, text: &str) -> Result<CgroupValue, CgroupValueError> {
        let text = text.trim();
        let value = match self.value_kind() {
            ValueKind::Int { .. } => match text {
                "max" | "-1" => CgroupValue::Unlimited,
                _ => CgroupValue::Int(text.parse::<i64>().map_err(|_| {
                    CgroupValueError::WrongKind {
                        resource: self,
                        expected: "an integer",
                        value: text.to_string(),
                    }
                })?),
            },
            ValueKind::CpuList => CgroupValue::CpuSet(text.parse()?),
            ValueKind::DeviceLimit | ValueKind::Text => CgroupValue::Text(text.to_string()),
        };
        // -1 is a real value only for group identity.
        let value = match (self, value) {
            (Self::CpuBvtWarpNs, CgroupValue::Unlimited) if text == "-1" => CgroupValue::Int(-1),
            (_, value) => value,
        };
        self.validate(value)
    }

    /// Checks a value for writing and normalises it (`Int(-1)` becomes
    /// `Unlimited` where no-limit is valid).
    pub fn validate(self, value: CgroupValue) -> Result<CgroupValue, CgroupValueError> {
        if !self.is_writable() {
            return Err(CgroupValueError::ReadOnly { resource: self });
        }
        let wrong_kind = |expected, value: &CgroupValue| CgroupValueError::WrongKind {
            resource: self,
            expected,
            value: value.to_string(),
        };
        match (self.value_kind(), value) {
            (ValueKind::Int { unlimited, .. }, CgroupValue::Int(-1)) if unlimited => {
                Ok(CgroupValue::Unlimited)
            }
            (ValueKind::Int { min, max, .. }, CgroupValue::Int(v)) => {
                if (min..=max).contains(&v) {
                    Ok(CgroupValue::Int(v))
                } else {
                    Err(CgroupValueError::OutOfRange {
                        resource: self,
                        value: v,
                        min,
                        max,
                    })
                }
            }
            (ValueKind::Int { unlimited, .. }, CgroupValue::Unlimited) => {
                if unlimited {
                    Ok(CgroupValue::Unlimited)
                } else {
                    Err(CgroupValueError::UnlimitedNotAllowed { resource: self })
                }
            }
            (ValueKind::Int { .. }, other) => Err(wrong_kind("an integer", &other)),
            (ValueKind::CpuList, CgroupValue::CpuSet(set)) => Ok(CgroupValue::CpuSet(set)),
            (ValueKind::CpuList, CgroupValue::Text(text)) => Ok(CgroupValue::CpuSet(text.parse()?)),
            (ValueKind::CpuList, other) => Err(wrong_kind("a cpu list", &other)),
            (ValueKind::DeviceLimit, CgroupValue::Text(text)) => {
                parse_device_limit(&text).map_err(|_| {
                    wrong_kind(
                        "\"<major>:<minor> <value>\"",
                        &CgroupValue::Text(text.clone()),
                    )
                })?;
                Ok(CgroupValue::Text(text.trim().to_string()))
            }
            (ValueKind::DeviceLimit, other) => {
                Err(wrong_kind("\"<major>:<minor> <value>\"", &other))
            }
            (ValueKind::Text, _) => Err(CgroupValueError::ReadOnly { resource: self }),
        }
    }

    /// The file content to write for `value` (validated first). On v2,
    /// `cpu.max` holds quota and period together: `current` is the file's
    /// present content, whose other half is kept (the default period, or
    /// `max`, when absent).
    pub fn encode(
        self,
        version: CgroupVersion,
        value: &CgroupValue,
        current: Option<&str>,
    ) -> Result<String, CgroupValueError> {
        let value = self.validate(value.clone())?;
        if version == CgroupVersion::V1 {
            return Ok(match (self, &value) {
                // pids.max (and the Anolis memory knobs) spell no-limit "max" even on v1.
                (
                    Self::PidsMax | Self::MemoryMin | Self::MemoryLow | Self::MemoryHigh,
                    CgroupValue::Unlimited,
                ) => "max".to_string(),
                _ => value.to_string(),
            });
        }
        let current_cpu_max = || current.map(CpuMax::parse).transpose();
        Ok(match (self, &value) {
            (Self::CpuShares, CgroupValue::Int(shares)) => {
                cpu_shares_to_weight(*shares).to_string()
            }
            (Self::CpuCfsQuota, quota) => {
                let period_us = current_cpu_max()?.map_or(DEFAULT_CFS_PERIOD_US, |m| m.period_us);
                let quota_us = match quota {
                    CgroupValue::Int(v) => Some(*v as u64),
                    _ => None,
                };
                CpuMax {
                    quota_us,
                    period_us,
                }
                .to_string()
            }
            (Self::CpuCfsPeriod, CgroupValue::Int(period)) => {
                let quota_us = current_cpu_max()?.and_then(|m| m.quota_us);
                CpuMax {
                    quota_us,
                    period_us: *period as u64,
                }
                .to_string()
            }
            (
                Self::BlkioThrottleReadBps
                | Self::BlkioThrottleWriteBps
                | Self::BlkioThrottleReadIops
                | Self::BlkioThrottleWriteIops,
                CgroupValue::Text(text),
            ) => {
                let (device, limit) = parse_device_limit(text)?;
                let key = self.io_max_key().unwrap_or("rbps");
                // v1 uses 0 to remove a limit; v2 spells it max.
                if limit == 0 {
                    format!("{device} {key}=max")
                } else {
                    format!("{device} {key}={limit}")
                }
            }
            (_, CgroupValue::Unlimited) => "max".to_string(),
            (_, value) => value.to_string(),
        })
    }

    /// Parses file content of `version` into a v1-terms value. Stat and
    /// pressure files come back as trimmed text.
    pub fn decode(
        self,
        version: CgroupVersion,
        content: &str,
    ) -> Result<CgroupValue, CgroupValueError> {
        let trimmed = content.trim();
        let parse_int = |text: &str| {
            text.parse::<i64>()
                .map_err(|_| CgroupValueError::Malformed {
                    content: trimmed.to_string(),
                    expected: "an integer",
                })
        };
        match (version, self) {
            (CgroupVersion::V2, Self::CpuShares) => {
                Ok(CgroupValue::Int(cpu_weight_to_shares(parse_int(trimmed)?)))
            }
            (CgroupVersion::V2, Self::CpuCfsQuota) => Ok(match CpuMax::parse(trimmed)?.quota_us {
                Some(quota) => CgroupValue::Int(quota.min(i64::MAX as u64) as i64),
                None => CgroupValue::Unlimited,
            }),
            (CgroupVersion::V2, Self::CpuCfsPeriod) => Ok(CgroupValue::Int(
                CpuMax::parse(trimmed)?.period_us.min(i64::MAX as u64) as i64,
            )),
            (CgroupVersion::V2, Self::CpuacctUsage) => {
                let usage_usec = stat_field(trimmed, "usage_usec")?;
                usage_usec
                    .checked_mul(1000)
                    .filter(|ns| *ns >= 0)
                    .map(CgroupValue::Int)
                    .ok_or_else(|| CgroupValueError::Malformed {
                        content: crate::bounds::cut(trimmed.to_string()),
                        expected: "a non-negative usage_usec that fits in nanoseconds",
                    })
            }
            _ => match self.value_kind() {
                ValueKind::Int { unlimited, .. } => match trimmed {
                    "max" => Ok(CgroupValue::Unlimited),
                    "-1" if unlimited => Ok(CgroupValue::Unlimited),
                    text => {
                        let value = parse_int(text)?;
                        // Counters the kernel reports are never negative.
                        if self.is_counter() && value < 0 {
                            return Err(CgroupValueError::Malformed {
                                content: trimmed.to_string(),
                                expected: "a non-negative counter",
                            });
                        }
                        Ok(CgroupValue::Int(value))
                    }
                },
                ValueKind::CpuList => Ok(CgroupValue::CpuSet(trimmed.parse()?)),
                ValueKind::DeviceLimit | ValueKind::Text => {
                    Ok(CgroupValue::Text(trimmed.to_string()))
                }
            },
        }
    }

    fn io_max_key(self) -> Option<&'static str> {
        match self {
            Self::BlkioThrottleReadBps => Some("rbps"),
            Self::BlkioThrottleWriteBps => Some("wbps"),
            Self::BlkioThrottleReadIops => Some("riops"),
            Self::BlkioThrottleWriteIops => Some("wiops"),
            _ => None,
        }
    }
}

impl fmt::Display for CgroupResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CgroupResource {
    type Err = CgroupPathError;

    /// From the v1 file name (upstream's resource type names).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .iter()
            .copied()
            .find(|r| r.name() == s)
            .ok_or_else(|| CgroupPathError::UnknownResource(s.to_string()))
    }
}

impl serde::Serialize for CgroupResource {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// `"<major>:<minor> <value>"` → (`"<major>:<minor>"`, value).
fn parse_device_limit(text: &str) -> Result<(String, u64), CgroupValueError> {
    let malformed = || CgroupValueError::Malformed {
        content: text.trim().to_string(),
        expected: "\"<major>:<minor> <value>\"",
    };
    let mut fields = text.split_whitespace();
    let (Some(device), Some(limit), None) = (fields.next(), fields.next(), fields.next()) else {
        return Err(malformed());
    };
    let (major, minor) = device.split_once(':').ok_or_else(malformed)?;
    major.parse::<u32>().map_err(|_| malformed())?;
    minor.parse::<u32>().map_err(|_| malformed())?;
    let limit = limit.parse::<u64>().map_err(|_| malformed())?;
    Ok((device.to_string(), limit))
}

/// One integer field of a flat-keyed stat file (`cpu.stat`, `memory.stat`).
pub fn stat_field(content: &str, key: &str) -> Result<i64, CgroupValueError> {
    for line in content.lines() {
        let mut fields = line.split_whitespace();
        if fields.next() == Some(key) {
            return fields
                .next()
                .and_then(|v| v.parse::<i64>().ok())
                .ok_or_else(|| CgroupValueError::Malformed {
                    content: line.to_string(),
                    expected: "\"<key> <integer>\"",
                });
        }
    }
    Err(CgroupValueError::MissingField {
        key: key.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "6f1c-22ab";

    fn layout(version: CgroupVersion, driver: CgroupDriver) -> CgroupLayout {
        CgroupLayout::new(version, driver, "/cg")
    }

    #[test]
    fn directories_for_both_drivers_and_all_tiers() {
        use CgroupDriver::*;
        use QosTier::*;
        // (driver, tier, qos dir, pod dir, container dir for containerd://abc)
        let table = [
            (
                Cgroupfs,
                Guaranteed,
                "kubepods",
                "kubepods/pod6f1c-22ab",
                "kubepods/pod6f1c-22ab/abc",
            ),
            (
                Cgroupfs,
                Burstable,
                "kubepods/burstable",
                "kubepods/burstable/pod6f1c-22ab",
                "kubepods/burstable/pod6f1c-22ab/abc",
            ),
            (
                Cgroupfs,
                BestEffort,
                "kubepods/besteffort",
                "kubepods/besteffort/pod6f1c-22ab",
                "kubepods/besteffort/pod6f1c-22ab/abc",
            ),
            (
                Systemd,
                Guaranteed,
                "kubepods.slice",
                "kubepods.slice/kubepods-pod6f1c_22ab.slice",
                "kubepods.slice/kubepods-pod6f1c_22ab.slice/cri-containerd-abc.scope",
            ),
            (
                Systemd,
                Burstable,
                "kubepods.slice/kubepods-burstable.slice",
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1c_22ab.slice",
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6f1c_22ab.slice/cri-containerd-abc.scope",
            ),
            (
                Systemd,
                BestEffort,
                "kubepods.slice/kubepods-besteffort.slice",
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6f1c_22ab.slice",
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod6f1c_22ab.slice/cri-containerd-abc.scope",
            ),
        ];
        for version in [CgroupVersion::V1, CgroupVersion::V2] {
            for (driver, tier, qos, pod, container) in table {
                let layout = layout(version, driver);
                let kubepods = if driver == Cgroupfs {
                    "kubepods"
                } else {
                    "kubepods.slice"
                };
                assert_eq!(layout.kubepods_dir(), Path::new(kubepods));
                assert_eq!(layout.qos_dir(tier), Path::new(qos), "{driver} {tier}");
                assert_eq!(layout.pod_dir(tier, UID).unwrap(), Path::new(pod));
                assert_eq!(
                    layout.container_dir(tier, UID, "containerd://abc").unwrap(),
                    Path::new(container)
                );
            }
        }
    }

    #[test]
    fn container_directory_names_per_runtime() {
        let systemd = layout(CgroupVersion::V1, CgroupDriver::Systemd);
        let cgroupfs = layout(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        let cases = [
            ("containerd://abc", "cri-containerd-abc.scope"),
            ("docker://abc", "docker-abc.scope"),
            ("cri-o://abc", "crio-abc.scope"),
            ("pouch://abc", "pouch-abc.scope"),
            ("abc", "cri-containerd-abc.scope"),
        ];
        for (id, scope) in cases {
            let dir = systemd.container_dir(QosTier::BestEffort, UID, id).unwrap();
            assert_eq!(dir.file_name().unwrap(), scope, "{id}");
            let dir = cgroupfs
                .container_dir(QosTier::BestEffort, UID, id)
                .unwrap();
            assert_eq!(dir.file_name().unwrap(), "abc", "{id}");
        }
        let mut docker_default = systemd.clone();
        docker_default.default_runtime = ContainerRuntime::Docker;
        let dir = docker_default
            .container_dir(QosTier::Guaranteed, UID, "abc")
            .unwrap();
        assert_eq!(dir.file_name().unwrap(), "docker-abc.scope");
    }

    #[test]
    fn unsafe_identifiers_are_rejected() {
        let layout = layout(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        for uid in ["", "..", "a/b", "../x", "a b", "a\0b", "."] {
            assert_eq!(
                layout.pod_dir(QosTier::Burstable, uid),
                Err(CgroupPathError::InvalidPodUid(uid.to_string())),
                "{uid:?}"
            );
        }
        for id in [
            "containerd://",
            "containerd://../x",
            "docker://a/b",
            "..",
            "x y",
        ] {
            assert_eq!(
                layout.container_dir(QosTier::Burstable, UID, id),
                Err(CgroupPathError::InvalidContainerId(id.to_string())),
                "{id:?}"
            );
        }
        assert_eq!(
            layout.container_dir(QosTier::Burstable, UID, "rkt://abc"),
            Err(CgroupPathError::UnknownRuntime("rkt://abc".to_string()))
        );
        assert!(matches!(
            layout.file_path("kubepods/../../etc", CgroupResource::CpuShares),
            Err(CgroupPathError::InvalidRelativeDir(_))
        ));
    }

    #[test]
    fn directory_names_parse_back() {
        let systemd = layout(CgroupVersion::V2, CgroupDriver::Systemd);
        let cgroupfs = layout(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        assert_eq!(
            systemd.pod_uid_from_dir_name("kubepods-burstable-pod6f1c_22ab.slice"),
            Some(UID.to_string())
        );
        assert_eq!(
            systemd.pod_uid_from_dir_name("kubepods-pod6f1c_22ab.slice"),
            Some(UID.to_string())
        );
        assert_eq!(
            systemd.pod_uid_from_dir_name("kubepods-burstable.slice"),
            None
        );
        assert_eq!(systemd.pod_uid_from_dir_name("system.slice"), None);
        assert_eq!(
            cgroupfs.pod_uid_from_dir_name("pod6f1c-22ab"),
            Some(UID.to_string())
        );
        assert_eq!(cgroupfs.pod_uid_from_dir_name("burstable"), None);
        assert_eq!(
            systemd.container_id_from_dir_name("crio-abc.scope"),
            Some(ContainerId {
                runtime: Some(ContainerRuntime::CriO),
                id: "abc".to_string()
            })
        );
        assert_eq!(systemd.container_id_from_dir_name("crio-abc"), None);
        assert_eq!(
            cgroupfs
                .container_id_from_dir_name("abc")
                .map(|c| c.to_string()),
            Some("abc".to_string())
        );
        assert_eq!(
            ContainerId::parse("docker://ff").unwrap().to_string(),
            "docker://ff"
        );
    }

    #[test]
    fn qos_classes_and_drivers_parse() {
        assert_eq!(
            QosTier::from_kubernetes_qos_class("BestEffort"),
            Ok(QosTier::BestEffort)
        );
        assert_eq!("Guaranteed".parse::<QosTier>(), Ok(QosTier::Guaranteed));
        assert_eq!("burstable".parse::<QosTier>(), Ok(QosTier::Burstable));
        assert_eq!(
            "LS".parse::<QosTier>(),
            Err(CgroupPathError::UnknownQosClass("LS".to_string()))
        );
        assert_eq!("systemd".parse::<CgroupDriver>(), Ok(CgroupDriver::Systemd));
        assert!("Systemd".parse::<CgroupDriver>().is_err());
    }

    #[test]
    fn file_mapping_v1_and_v2() {
        use CgroupResource::*;
        let dir = "kubepods/besteffort";
        // (resource, v1 path below /cg, v2 path below /cg)
        let table = [
            (
                CpuShares,
                "cpu/kubepods/besteffort/cpu.shares",
                "kubepods/besteffort/cpu.weight",
            ),
            (
                CpuCfsQuota,
                "cpu/kubepods/besteffort/cpu.cfs_quota_us",
                "kubepods/besteffort/cpu.max",
            ),
            (
                CpuCfsPeriod,
                "cpu/kubepods/besteffort/cpu.cfs_period_us",
                "kubepods/besteffort/cpu.max",
            ),
            (
                CpuBurst,
                "cpu/kubepods/besteffort/cpu.cfs_burst_us",
                "kubepods/besteffort/cpu.max.burst",
            ),
            (
                CpuIdle,
                "cpu/kubepods/besteffort/cpu.idle",
                "kubepods/besteffort/cpu.idle",
            ),
            (
                CpuStat,
                "cpu/kubepods/besteffort/cpu.stat",
                "kubepods/besteffort/cpu.stat",
            ),
            (
                CpuacctUsage,
                "cpuacct/kubepods/besteffort/cpuacct.usage",
                "kubepods/besteffort/cpu.stat",
            ),
            (
                CpusetCpus,
                "cpuset/kubepods/besteffort/cpuset.cpus",
                "kubepods/besteffort/cpuset.cpus",
            ),
            (
                CpusetMems,
                "cpuset/kubepods/besteffort/cpuset.mems",
                "kubepods/besteffort/cpuset.mems",
            ),
            (
                CpusetCpusEffective,
                "cpuset/kubepods/besteffort/cpuset.effective_cpus",
                "kubepods/besteffort/cpuset.cpus.effective",
            ),
            (
                MemoryLimit,
                "memory/kubepods/besteffort/memory.limit_in_bytes",
                "kubepods/besteffort/memory.max",
            ),
            (
                MemoryUsage,
                "memory/kubepods/besteffort/memory.usage_in_bytes",
                "kubepods/besteffort/memory.current",
            ),
            (
                MemoryStat,
                "memory/kubepods/besteffort/memory.stat",
                "kubepods/besteffort/memory.stat",
            ),
            (
                MemoryMin,
                "memory/kubepods/besteffort/memory.min",
                "kubepods/besteffort/memory.min",
            ),
            (
                MemoryHigh,
                "memory/kubepods/besteffort/memory.high",
                "kubepods/besteffort/memory.high",
            ),
            (
                PidsMax,
                "pids/kubepods/besteffort/pids.max",
                "kubepods/besteffort/pids.max",
            ),
            (
                CgroupProcs,
                "cpu/kubepods/besteffort/cgroup.procs",
                "kubepods/besteffort/cgroup.procs",
            ),
            (
                Tasks,
                "cpu/kubepods/besteffort/tasks",
                "kubepods/besteffort/cgroup.threads",
            ),
            (
                BlkioThrottleReadBps,
                "blkio/kubepods/besteffort/blkio.throttle.read_bps_device",
                "kubepods/besteffort/io.max",
            ),
            (
                CpuPressure,
                "cpuacct/kubepods/besteffort/cpu.pressure",
                "kubepods/besteffort/cpu.pressure",
            ),
            (
                IoPressure,
                "cpuacct/kubepods/besteffort/io.pressure",
                "kubepods/besteffort/io.pressure",
            ),
        ];
        let v1 = layout(CgroupVersion::V1, CgroupDriver::Cgroupfs);
        let v2 = layout(CgroupVersion::V2, CgroupDriver::Cgroupfs);
        for (resource, v1_path, v2_path) in table {
            assert_eq!(
                v1.file_path(dir, resource).unwrap(),
                Path::new("/cg").join(v1_path),
                "{resource}"
            );
            assert_eq!(
                v2.file_path(dir, resource).unwrap(),
                Path::new("/cg").join(v2_path),
                "{resource}"
            );
        }
        // A leading slash and "." are tolerated; the root cgroup is the empty dir.
        assert_eq!(
            v1.file_path("/kubepods/./besteffort", CpuShares).unwrap(),
            Path::new("/cg/cpu/kubepods/besteffort/cpu.shares")
        );
        assert_eq!(
            v2.file_path("", MemoryStat).unwrap(),
            Path::new("/cg/memory.stat")
        );
        assert_eq!(
            v1.controller_path(dir, Controller::Cpuset).unwrap(),
            Path::new("/cg/cpuset/kubepods/besteffort")
        );
        assert_eq!(
            v2.controller_path(dir, Controller::Cpuset).unwrap(),
            Path::new("/cg/kubepods/besteffort")
        );
    }

    #[test]
    fn v1_pressure_files_follow_the_unified_mount_when_given() {
        let layout =
            layout(CgroupVersion::V1, CgroupDriver::Cgroupfs).with_unified_root("/cg/unified");
        assert_eq!(
            layout
                .file_path("kubepods", CgroupResource::MemoryPressure)
                .unwrap(),
            Path::new("/cg/unified/kubepods/memory.pressure")
        );
        // Other files are unaffected.
        assert_eq!(
            layout
                .file_path("kubepods", CgroupResource::CpuStat)
                .unwrap(),
            Path::new("/cg/cpu/kubepods/cpu.stat")
        );
        // v2 ignores the setting.
        let mut v2 = layout.clone();
        v2.version = CgroupVersion::V2;
        assert_eq!(
            v2.file_path("kubepods", CgroupResource::CpuPressure)
                .unwrap(),
            Path::new("/cg/kubepods/cpu.pressure")
        );
    }

    #[test]
    fn resource_names_round_trip() {
        for resource in CgroupResource::ALL {
            assert_eq!(resource.name().parse::<CgroupResource>(), Ok(*resource));
        }
        assert!("cpu.weight".parse::<CgroupResource>().is_err());
        assert_eq!(
            serde_json::to_string(&CgroupResource::CpuCfsQuota).unwrap(),
            "\"cpu.cfs_quota_us\""
        );
    }

    #[test]
    fn shares_weight_conversion_matches_kubernetes() {
        // Reference points of the kubelet's linear mapping.
        let table = [
            (2, 1),
            (1024, 39),
            (512, 20),
            (102, 4),
            (262_144, 10_000),
            (1, 1),
            (1_000_000, 10_000),
        ];
        for (shares, weight) in table {
            assert_eq!(cpu_shares_to_weight(shares), weight, "shares {shares}");
        }
        let back = [(1, 2), (39, 998), (10_000, 262_144), (0, 2)];
        for (weight, shares) in back {
            assert_eq!(cpu_weight_to_shares(weight), shares, "weight {weight}");
        }
    }

    #[test]
    fn v1_encoding() {
        use CgroupResource::*;
        let v1 = CgroupVersion::V1;
        let cases = [
            (CpuCfsQuota, CgroupValue::Int(20_000), "20000"),
            (CpuCfsQuota, CgroupValue::Unlimited, "-1"),
            (CpuCfsQuota, CgroupValue::Int(-1), "-1"),
            (CpuShares, CgroupValue::Int(1024), "1024"),
            (MemoryLimit, CgroupValue::Unlimited, "-1"),
            (PidsMax, CgroupValue::Unlimited, "max"),
            (MemoryHigh, CgroupValue::Unlimited, "max"),
            (CpuBvtWarpNs, CgroupValue::Int(-1), "-1"),
            (
                CpusetCpus,
                CgroupValue::CpuSet("3,0-1".parse().unwrap()),
                "0-1,3",
            ),
            (
                BlkioThrottleReadBps,
                CgroupValue::Text("8:0 1048576".to_string()),
                "8:0 1048576",
            ),
        ];
        for (resource, value, expected) in cases {
            assert_eq!(
                resource.encode(v1, &value, None).unwrap(),
                expected,
                "{resource}"
            );
        }
    }

    #[test]
    fn v2_encoding() {
        use CgroupResource::*;
        let v2 = CgroupVersion::V2;
        let cases: [(CgroupResource, CgroupValue, Option<&str>, &str); 12] = [
            (CpuShares, CgroupValue::Int(1024), None, "39"),
            (CpuCfsQuota, CgroupValue::Int(20_000), None, "20000 100000"),
            (
                CpuCfsQuota,
                CgroupValue::Int(20_000),
                Some("max 50000\n"),
                "20000 50000",
            ),
            (
                CpuCfsQuota,
                CgroupValue::Int(-1),
                Some("20000 100000"),
                "max 100000",
            ),
            (CpuCfsQuota, CgroupValue::Unlimited, None, "max 100000"),
            (
                CpuCfsPeriod,
                CgroupValue::Int(50_000),
                Some("20000 100000"),
                "20000 50000",
            ),
            (
                CpuCfsPeriod,
                CgroupValue::Int(50_000),
                Some("max 100000"),
                "max 50000",
            ),
            (MemoryLimit, CgroupValue::Unlimited, None, "max"),
            (MemoryLimit, CgroupValue::Int(1 << 30), None, "1073741824"),
            (CpuBurst, CgroupValue::Int(5000), None, "5000"),
            (
                BlkioThrottleWriteIops,
                CgroupValue::Text("253:1 300".to_string()),
                None,
                "253:1 wiops=300",
            ),
            (
                BlkioThrottleReadBps,
                CgroupValue::Text("253:1 0".to_string()),
                None,
                "253:1 rbps=max",
            ),
        ];
        for (resource, value, current, expected) in cases {
            assert_eq!(
                resource.encode(v2, &value, current).unwrap(),
                expected,
                "{resource} {value} over {current:?}"
            );
        }
        // A malformed present cpu.max is an error, not a guess.
        assert!(matches!(
            CpuCfsQuota.encode(v2, &CgroupValue::Int(20_000), Some("garbage")),
            Err(CgroupValueError::Malformed { .. })
        ));
    }

    #[test]
    fn invalid_values_are_rejected() {
        use CgroupResource::*;
        let v1 = CgroupVersion::V1;
        let rejected = [
            (CpuShares, CgroupValue::Int(1)),
            (CpuShares, CgroupValue::Int(262_145)),
            (CpuShares, CgroupValue::Unlimited),
            (CpuCfsQuota, CgroupValue::Int(999)),
            (CpuCfsQuota, CgroupValue::Int(-2)),
            (CpuCfsPeriod, CgroupValue::Int(999)),
            (CpuIdle, CgroupValue::Int(2)),
            (CpuBvtWarpNs, CgroupValue::Int(3)),
            (MemoryWmarkMinAdj, CgroupValue::Int(-26)),
            (CpusetCpus, CgroupValue::Int(3)),
            (CpusetCpus, CgroupValue::Text("0-".to_string())),
            (CgroupProcs, CgroupValue::Int(0)),
            (BlkioThrottleReadBps, CgroupValue::Text("8:0".to_string())),
            (BlkioThrottleReadBps, CgroupValue::Text("sda 5".to_string())),
            (CpuStat, CgroupValue::Text("x".to_string())),
            (MemoryUsage, CgroupValue::Int(5)),
            (CpuacctUsage, CgroupValue::Int(5)),
        ];
        for (resource, value) in rejected {
            assert!(
                resource.encode(v1, &value, None).is_err(),
                "{resource} accepted {value:?}"
            );
        }
        assert_eq!(
            CpuShares.validate(CgroupValue::Int(1)),
            Err(CgroupValueError::OutOfRange {
                resource: CpuShares,
                value: 1,
                min: 2,
                max: 262_144
            })
        );
    }

    #[test]
    fn parse_value_from_v1_text() {
        use CgroupResource::*;
        assert_eq!(CpuCfsQuota.parse_value("-1"), Ok(CgroupValue::Unlimited));
        assert_eq!(CpuCfsQuota.parse_value("max"), Ok(CgroupValue::Unlimited));
        assert_eq!(
            CpuCfsQuota.parse_value(" 20000\n"),
            Ok(CgroupValue::Int(20_000))
        );
        assert_eq!(CpuBvtWarpNs.parse_value("-1"), Ok(CgroupValue::Int(-1)));
        assert!(CpuShares.parse_value("-1").is_err());
        assert!(CpuShares.parse_value("ten").is_err());
        assert_eq!(
            CpusetMems.parse_value("0"),
            Ok(CgroupValue::CpuSet("0".parse().unwrap()))
        );
    }

    #[test]
    fn decoding_file_content() {
        use CgroupResource::*;
        let (v1, v2) = (CgroupVersion::V1, CgroupVersion::V2);
        assert_eq!(CpuCfsQuota.decode(v1, "-1\n"), Ok(CgroupValue::Unlimited));
        assert_eq!(
            CpuCfsQuota.decode(v1, "20000\n"),
            Ok(CgroupValue::Int(20_000))
        );
        assert_eq!(
            CpuCfsQuota.decode(v2, "max 100000\n"),
            Ok(CgroupValue::Unlimited)
        );
        assert_eq!(
            CpuCfsQuota.decode(v2, "20000 100000\n"),
            Ok(CgroupValue::Int(20_000))
        );
        assert_eq!(
            CpuCfsPeriod.decode(v2, "20000 50000\n"),
            Ok(CgroupValue::Int(50_000))
        );
        assert_eq!(
            CpuShares.decode(v2, "10000\n"),
            Ok(CgroupValue::Int(262_144))
        );
        assert_eq!(MemoryLimit.decode(v2, "max\n"), Ok(CgroupValue::Unlimited));
        assert_eq!(
            MemoryLimit.decode(v1, "9223372036854771712\n"),
            Ok(CgroupValue::Int(9_223_372_036_854_771_712))
        );
        assert_eq!(PidsMax.decode(v1, "max\n"), Ok(CgroupValue::Unlimited));
        assert_eq!(
            CpuacctUsage.decode(v2, "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"),
            Ok(CgroupValue::Int(1_500_000))
        );
        assert_eq!(
            CpuacctUsage.decode(v1, "123456789\n"),
            Ok(CgroupValue::Int(123_456_789))
        );
        assert_eq!(
            CpusetCpus.decode(v1, "0-1\n"),
            Ok(CgroupValue::CpuSet("0,1".parse().unwrap()))
        );
        assert_eq!(
            CpuPressure.decode(v1, "some avg10=0.00\n"),
            Ok(CgroupValue::Text("some avg10=0.00".to_string()))
        );
        // Malformed content is a typed error.
        for (resource, version, content) in [
            (CpuCfsQuota, v2, "20000"),
            (CpuCfsQuota, v2, "20000 100000 1"),
            (CpuCfsQuota, v2, "x 100000"),
            (CpuCfsPeriod, v2, "max y"),
            (CpuCfsQuota, v1, "twenty"),
            (CpuShares, v2, ""),
            (CpuacctUsage, v2, "user_usec 5\n"),
            (CpuacctUsage, v2, "usage_usec x\n"),
            (CpusetCpus, v1, "0-a"),
        ] {
            assert!(
                resource.decode(version, content).is_err(),
                "{resource} {version} {content:?}"
            );
        }
    }

    #[test]
    fn stat_fields() {
        let stat = "nr_periods 10\nnr_throttled 2\nthrottled_time 300\n";
        assert_eq!(stat_field(stat, "nr_throttled"), Ok(2));
        assert_eq!(
            stat_field(stat, "usage_usec"),
            Err(CgroupValueError::MissingField {
                key: "usage_usec".to_string()
            })
        );
        assert!(stat_field("nr_periods x", "nr_periods").is_err());
    }

    /// Issue 16: usage counters read back from cgroup files are never
    /// negative and never clamped: such content is malformed.
    #[test]
    fn negative_or_overflowing_usage_is_refused() {
        for (resource, content) in [
            (CgroupResource::MemoryUsage, "-4096"),
            (CgroupResource::CpuacctUsage, "-1"),
            (CgroupResource::PidsCurrent, "-3"),
            (CgroupResource::MemoryUsage, "99999999999999999999"),
        ] {
            assert!(
                resource.decode(CgroupVersion::V1, content).is_err(),
                "{resource} {content:?} was taken"
            );
        }
        let overflowing = format!("usage_usec {}\nuser_usec 0\n", i64::MAX / 10);
        assert!(
            CgroupResource::CpuacctUsage
                .decode(CgroupVersion::V2, &overflowing)
                .is_err()
        );
        assert!(
            CgroupResource::CpuacctUsage
                .decode(CgroupVersion::V2, "usage_usec -5\n")
                .is_err()
        );
        assert_eq!(
            CgroupResource::MemoryUsage.decode(CgroupVersion::V1, "4096\n"),
            Ok(CgroupValue::Int(4096))
        );
    }

    #[test]
    fn hierarchy_order_classification() {
        use CgroupResource::*;
        assert_eq!(
            CpusetCpus.hierarchy_order(),
            Some(HierarchyOrder::SetInclusion)
        );
        assert_eq!(CpuCfsQuota.hierarchy_order(), Some(HierarchyOrder::Numeric));
        assert_eq!(CpuShares.hierarchy_order(), None);
        assert!(!CgroupProcs.is_cacheable());
        assert!(CpuShares.is_cacheable());
        assert!(!CpuStat.is_writable());
    }
}
