//! Resolving blkio blocks of type `volumegroup` and `podvolume` to the disk
//! the kernel throttles (upstream resolves them through `lsblk`, `vgs`,
//! `lvs` and `findmnt`; we read sysfs and mountinfo instead, every read
//! bounded):
//!
//! - LVM names its device-mapper devices `<vg>-<lv>` with each `-` inside
//!   a name doubled, so `/sys/block/dm-N/dm/name` tells a logical volume's
//!   volume group; `/sys/block/dm-N/slaves/` lists what it sits on (the
//!   reverse of `/sys/block/<disk>/holders/`). A volume group resolves to
//!   the one disk under its logical volumes; one spread over several disks
//!   is refused, as upstream refuses `pv_count != 1`.
//! - A pod volume is the pod's `spec.volumes[name]`: a PVC (its bound PV's
//!   name) or an inline CSI volume. The kubelet mounts it at
//!   `<kubelet root>/pods/<uid>/volumes/kubernetes.io~csi/<name>/mount`
//!   (upstream's only path) or, for a local PV,
//!   `.../kubernetes.io~local-volume/<pv>`; `/proc/self/mountinfo` gives that
//!   mount's `major:minor`, and a device-mapper device goes down to its disk.
//!   A local PV whose `spec.local.path` is a `/dev/...` device resolves
//!   through sysfs directly.
//!
//! Resolution runs every reconcile, so a volume that appears (a mount made,
//! a claim bound) is picked up on the next round; a block that cannot be
//! resolved is dropped with its reason and the others still apply.

use std::cell::OnceCell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;

use super::hostfiles::HostFiles;
use crate::statesinformer::volumes::VolumeLookup;
use crate::system::SystemArgs;

/// Largest sysfs attribute read (`dev`, `dm/name`).
pub const MAX_SYSFS_BYTES: usize = 4096;
/// Largest `/proc/self/mountinfo` read (about 80,000 mounts).
pub const MAX_MOUNTINFO_BYTES: usize = 16 * 1024 * 1024;
/// Most `/sys/block` or `slaves/` entries looked at.
pub const MAX_BLOCK_ENTRIES: usize = 8192;
/// Deepest device-mapper stack followed (thin pools stack three deep).
pub const MAX_STACK_DEPTH: usize = 8;
/// Longest volume group, volume or uid accepted (a DNS subdomain).
pub const MAX_NAME_BYTES: usize = 253;

/// A block device number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceNumber {
    pub major: u32,
    pub minor: u32,
}

impl DeviceNumber {
    /// Parses `major:minor`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let parsed = text
            .split_once(':')
            .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
        match parsed {
            Some((major, minor)) => Ok(Self { major, minor }),
            None => Err(format!("malformed device number {text:?}")),
        }
    }
}

impl std::fmt::Display for DeviceNumber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape_mount_point(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|digits| bytes[i] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d)));
        match octal {
            Some(digits) => {
                let value = digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The device mounted at `mount_point` per `/proc/self/mountinfo` (the last
/// matching line wins: later mounts hide earlier ones).
pub fn device_of_mount(mountinfo: &str, mount_point: &str) -> Result<Option<DeviceNumber>, String> {
    let wanted = mount_point.trim_end_matches('/');
    let wanted = if wanted.is_empty() { "/" } else { wanted };
    let mut found = None;
    for (index, line) in mountinfo.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(device), Some(point)) = (fields.get(2), fields.get(4)) else {
            return Err(format!(
                "mountinfo line {} is malformed: {line:?}",
                index + 1
            ));
        };
        if unescape_mount_point(point) == wanted {
            found = Some(DeviceNumber::parse(device)?);
        }
    }
    Ok(found)
}

/// Resolves configured block names to whole-disk device numbers.
pub struct DeviceResolver<'a> {
    pub files: &'a dyn HostFiles,
    pub roots: &'a SystemArgs,
}

impl DeviceResolver<'_> {
    /// A device name (`/dev/vdb`, `vdb`) or a mount point (`/data`).
    pub fn resolve(&self, name: &str) -> Result<DeviceNumber, String> {
        let device = match name.strip_prefix("/dev/") {
            Some(device) => self.by_device_name(device)?,
            None if !name.starts_with('/') => self.by_device_name(name)?,
            None => {
                let path = self.roots.proc_root_dir.join("self/mountinfo");
                let mountinfo = self.files.read_bounded(&path, MAX_MOUNTINFO_BYTES)?;
                device_of_mount(&mountinfo, name)?
                    .ok_or_else(|| format!("{name} is neither a device nor a mount point"))?
            }
        };
        self.whole_disk(device)
    }

    /// `<sys>/class/block/<device>/dev`.
    pub(crate) fn by_device_name(&self, device: &str) -> Result<DeviceNumber, String> {
        if device.is_empty() || device.contains('/') || device == ".." {
            return Err(format!("{device:?} is not a block device name"));
        }
        let path = self
            .roots
            .sys_root_dir
            .join("class/block")
            .join(device)
            .join("dev");
        if !self.files.exists(&path) {
            return Err(format!(
                "block device {device} not found ({} is missing)",
                path.display()
            ));
        }
        let content = self.files.read_bounded(&path, MAX_SYSFS_BYTES)?;
        DeviceNumber::parse(&content)
    }

    /// A partition's disk: the parent directory of its sysfs device.
    pub(crate) fn whole_disk(&self, device: DeviceNumber) -> Result<DeviceNumber, String> {
        let link = self
            .roots
            .sys_root_dir
            .join("dev/block")
            .join(device.to_string());
        if !self.files.exists(&link.join("partition")) {
            return Ok(device);
        }
        let target = self
            .files
            .link_target(&link)
            .ok_or_else(|| format!("cannot follow {}", link.display()))?;
        let disk = target
            .parent()
            .and_then(Path::file_name)
            .and_then(|name| name.to_str())
            .ok_or_else(|| format!("cannot find the disk of partition {device}"))?;
        self.by_device_name(disk)
    }
}

/// Splits an LVM device-mapper name into (volume group, logical volume):
/// the first `-` that is not part of a `--` separates them, and `--`
/// stands for `-` inside either name. `None` for non-LVM names.
pub fn split_lvm_dm_name(name: &str) -> Option<(String, String)> {
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'-' {
            if bytes.get(i + 1) == Some(&b'-') {
                i += 2;
                continue;
            }
            let (vg, lv) = (&name[..i], &name[i + 1..]);
            if vg.is_empty() || lv.is_empty() {
                return None;
            }
            return Some((vg.replace("--", "-"), lv.replace("--", "-")));
        }
        i += 1;
    }
    None
}

/// The device-mapper name LVM gives `vg/lv` (upstream's `/dev/mapper/` name).
pub fn lvm_dm_name(vg: &str, lv: &str) -> String {
    format!("{}-{}", vg.replace('-', "--"), lv.replace('-', "--"))
}

/// A name used as one path component: non-empty, bounded, no `/`, not `.`/`..`.
fn path_component<'n>(what: &str, name: &'n str) -> Result<&'n str, String> {
    if name.is_empty()
        || name.len() > MAX_NAME_BYTES
        || name.contains('/')
        || name.contains('\0')
        || name == "."
        || name == ".."
    {
        return Err(format!(
            "{what} {:?} is not a valid name",
            crate::bounds::for_log(name)
        ));
    }
    Ok(name)
}

/// Resolves every block type; one per reconcile (mountinfo is read once).
pub struct VolumeResolver<'a> {
    files: &'a dyn HostFiles,
    roots: &'a SystemArgs,
    kubelet_root: &'a Path,
    mountinfo: OnceCell<Result<String, String>>,
}

impl<'a> VolumeResolver<'a> {
    pub fn new(files: &'a dyn HostFiles, roots: &'a SystemArgs, kubelet_root: &'a Path) -> Self {
        Self {
            files,
            roots,
            kubelet_root,
            mountinfo: OnceCell::new(),
        }
    }

    fn devices(&self) -> DeviceResolver<'a> {
        DeviceResolver {
            files: self.files,
            roots: self.roots,
        }
    }

    fn mountinfo(&self) -> Result<&str, String> {
        self.mountinfo
            .get_or_init(|| {
                let path = self.roots.proc_root_dir.join("self/mountinfo");
                self.files.read_bounded(&path, MAX_MOUNTINFO_BYTES)
            })
            .as_deref()
            .map_err(Clone::clone)
    }

    /// A `device` block: a device name or a mount point, down to its disk.
    pub fn device(&self, name: &str) -> Result<DeviceNumber, String> {
        let device = if name.starts_with('/') && !name.starts_with("/dev/") {
            let mountinfo = self.mountinfo()?;
            device_of_mount(mountinfo, name)?
                .ok_or_else(|| format!("{name} is neither a device nor a mount point"))?
        } else {
            self.devices().resolve(name)?
        };
        self.backing_disk(self.devices().whole_disk(device)?, 0)
    }

    /// The disk under `device`: itself, or for a device-mapper device the one
    /// disk its stack sits on.
    pub fn backing_disk(&self, device: DeviceNumber, depth: usize) -> Result<DeviceNumber, String> {
        let sys_dev = self
            .roots
            .sys_root_dir
            .join("dev/block")
            .join(device.to_string());
        if !self.files.exists(&sys_dev.join("dm")) {
            return Ok(device);
        }
        if depth >= MAX_STACK_DEPTH {
            return Err(format!(
                "device-mapper stack above {device} is deeper than {MAX_STACK_DEPTH}"
            ));
        }
        let slaves = self.files.list(&sys_dev.join("slaves"));
        if slaves.len() > MAX_BLOCK_ENTRIES {
            return Err(format!(
                "{device} lists more than {MAX_BLOCK_ENTRIES} slaves"
            ));
        }
        let mut disks = BTreeSet::new();
        for slave in &slaves {
            let slave = path_component("slave device", slave)?;
            let number = self.devices().by_device_name(slave)?;
            let disk = self.devices().whole_disk(number)?;
            disks.insert(self.backing_disk(disk, depth + 1)?);
        }
        match disks.len() {
            0 => Err(format!("device-mapper device {device} has no slaves")),
            1 => Ok(disks.into_iter().next().unwrap_or(device)),
            n => Err(format!(
                "device-mapper device {device} spans {n} disks ({}); only single-disk volumes are throttled, as upstream",
                disks
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// A `volumegroup` block: the one disk under the group's logical volumes.
    pub fn volume_group(&self, vg: &str) -> Result<DeviceNumber, String> {
        let vg = path_component("volume group", vg)?;
        let block_dir = self.roots.sys_root_dir.join("block");
        let entries = self.files.list(&block_dir);
        if entries.len() > MAX_BLOCK_ENTRIES {
            return Err(format!(
                "{} lists more than {MAX_BLOCK_ENTRIES} devices",
                block_dir.display()
            ));
        }
        let mut disks = BTreeSet::new();
        let mut volumes = 0;
        for entry in entries.iter().filter(|name| name.starts_with("dm-")) {
            let Ok(dm_name) = self
                .files
                .read_bounded(&block_dir.join(entry).join("dm/name"), MAX_SYSFS_BYTES)
            else {
                continue;
            };
            let Some((group, _)) = split_lvm_dm_name(dm_name.trim()) else {
                continue;
            };
            if group != vg {
                continue;
            }
            volumes += 1;
            let number = DeviceNumber::parse(
                &self
                    .files
                    .read_bounded(&block_dir.join(entry).join("dev"), MAX_SYSFS_BYTES)?,
            )?;
            disks.insert(
                self.backing_disk(number, 0)
                    .map_err(|err| format!("volume group {vg}: {err}"))?,
            );
        }
        match disks.len() {
            0 if volumes == 0 => Err(format!(
                "volume group {vg} has no logical volume under {} (no dm-*/dm/name of {vg}-*)",
                block_dir.display()
            )),
            1 => Ok(disks
                .into_iter()
                .next()
                .unwrap_or(DeviceNumber { major: 0, minor: 0 })),
            n => Err(format!(
                "volume group {vg} spans {n} disks; only single-disk volume groups are throttled, as upstream"
            )),
        }
    }

    /// Where the kubelet mounts a pod's volume of `plugin` named `name`.
    pub fn kubelet_volume_path(&self, pod_uid: &str, plugin: &str, name: &str) -> PathBuf {
        let mut path = self
            .kubelet_root
            .join("pods")
            .join(pod_uid)
            .join("volumes")
            .join(plugin)
            .join(name);
        if plugin == "kubernetes.io~csi" {
            path.push("mount");
        }
        path
    }

    fn mounted_disk(&self, path: &Path) -> Result<Option<DeviceNumber>, String> {
        let Some(point) = path.to_str() else {
            return Err(format!("{} is not UTF-8", path.display()));
        };
        match device_of_mount(self.mountinfo()?, point)? {
            None => Ok(None),
            Some(device) => {
                let disk = self.devices().whole_disk(device)?;
                self.backing_disk(disk, 0).map(Some)
            }
        }
    }

    /// A `podvolume` block: the pod's volume `volume_name` down to its disk.
    pub fn pod_volume(
        &self,
        pod: &Pod,
        volume_name: &str,
        lookup: &dyn VolumeLookup,
    ) -> Result<DeviceNumber, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let uid = path_component("pod uid", pod.metadata.uid.as_deref().unwrap_or_default())?;
        let volume = pod
            .spec
            .as_ref()
            .and_then(|spec| spec.volumes.as_ref())
            .and_then(|volumes| volumes.iter().find(|v| v.name == volume_name))
            .ok_or_else(|| format!("pod {namespace}/{pod_name} has no volume {volume_name:?}"))?;
        // (plugin dir, name) pairs to look for, then a local PV's own path.
        let mut candidates = Vec::new();
        let mut local_path = None;
        if let Some(claim) = &volume.persistent_volume_claim {
            let bound = lookup.claim(namespace, &claim.claim_name)?;
            let pv = path_component("persistent volume", &bound.pv_name)?;
            candidates.push(self.kubelet_volume_path(uid, "kubernetes.io~csi", pv));
            candidates.push(self.kubelet_volume_path(uid, "kubernetes.io~local-volume", pv));
            local_path = bound.local_path;
        } else if volume.csi.is_some() {
            let name = path_component("volume", &volume.name)?;
            candidates.push(self.kubelet_volume_path(uid, "kubernetes.io~csi", name));
        } else {
            return Err(format!(
                "volume {volume_name} of pod {namespace}/{pod_name} is neither a PVC nor a CSI volume"
            ));
        }
        for path in &candidates {
            if let Some(disk) = self.mounted_disk(path)? {
                return Ok(disk);
            }
        }
        if let Some(local) = local_path.filter(|path| path.starts_with("/dev/")) {
            return self.device(&local);
        }
        Err(format!(
            "volume {volume_name} of pod {namespace}/{pod_name} is not mounted yet (looked for {})",
            candidates
                .iter()
                .map(|path| path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// What `koordlet capabilities` says about blkio by volume.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlkioVolumesCapability {
    /// The throttle files exist where the strategy writes them.
    pub throttle: bool,
    /// Device-mapper devices exist (LVM volume groups can resolve).
    pub device_mapper: bool,
    /// LVM volume groups seen through their logical volumes.
    pub volume_groups: Vec<String>,
    /// blk-iocost's QoS and model files exist at the hierarchy root.
    pub iocost: bool,
    pub throttle_detail: String,
    pub iocost_detail: String,
}

impl BlkioVolumesCapability {
    /// Table rows `blkio.volumes` and `blkio.iocost`.
    pub fn rows(&self) -> Vec<(&'static str, String, String)> {
        let volumes = match (self.device_mapper, self.volume_groups.is_empty()) {
            (false, _) => "no device-mapper devices: volumegroup blocks and LVM-backed pod volumes cannot resolve".to_string(),
            (true, true) => "device-mapper present, no LVM volume group seen".to_string(),
            (true, false) => format!("volume groups: {}", self.volume_groups.join(", ")),
        };
        vec![
            (
                "blkio.volumes",
                if self.throttle {
                    "throttle"
                } else {
                    "unsupported"
                }
                .to_string(),
                format!("{}; {volumes}", self.throttle_detail),
            ),
            (
                "blkio.iocost",
                if self.iocost {
                    "supported"
                } else {
                    "unsupported"
                }
                .to_string(),
                self.iocost_detail.clone(),
            ),
        ]
    }
}

/// Detects throttle files, device-mapper devices, LVM volume groups and
/// blk-iocost (read-only, bounded like the strategy's own reads).
pub fn detect_capability(
    files: &dyn HostFiles,
    roots: &SystemArgs,
    layout: &crate::system::cgroup::CgroupLayout,
) -> BlkioVolumesCapability {
    use crate::system::cgroup::{CgroupResource, CgroupVersion, QosTier};
    let v2 = layout.version == CgroupVersion::V2;
    let be = layout.qos_dir(QosTier::BestEffort);
    let throttle_path = layout
        .file_path(&be, CgroupResource::BlkioThrottleReadBps)
        .ok();
    let throttle = throttle_path.as_deref().is_some_and(|p| files.exists(p));
    let throttle_detail = match (&throttle_path, throttle) {
        (Some(path), true) => format!("{} present", path.display()),
        (Some(path), false) => format!("{} is missing", path.display()),
        (None, _) => "no BE cgroup path".to_string(),
    };
    let block_dir = roots.sys_root_dir.join("block");
    let mut device_mapper = false;
    let mut volume_groups = BTreeSet::new();
    for entry in files
        .list(&block_dir)
        .iter()
        .take(MAX_BLOCK_ENTRIES)
        .filter(|name| name.starts_with("dm-"))
    {
        device_mapper = true;
        if let Ok(name) =
            files.read_bounded(&block_dir.join(entry).join("dm/name"), MAX_SYSFS_BYTES)
            && let Some((vg, _)) = split_lvm_dm_name(name.trim())
        {
            volume_groups.insert(vg);
        }
    }
    let (qos_file, model_file) = if v2 {
        ("io.cost.qos", "io.cost.model")
    } else {
        ("blkio.cost.qos", "blkio.cost.model")
    };
    let root = layout
        .controller_path("", crate::system::cgroup::Controller::Blkio)
        .unwrap_or_default();
    let iocost = files.exists(&root.join(qos_file)) && files.exists(&root.join(model_file));
    let iocost_detail = if iocost {
        format!("{} present", root.join(qos_file).display())
    } else if v2 {
        format!(
            "{} is missing (kernel without blk-iocost); cgroupRoot.blkioQOS is not applied",
            root.join(qos_file).display()
        )
    } else {
        format!(
            "{} is missing: cgroup v1 has blk-iocost only on Anolis/Alibaba Cloud Linux kernels; cgroupRoot.blkioQOS and ioWeightPercent are not applied",
            root.join(qos_file).display()
        )
    };
    BlkioVolumesCapability {
        throttle,
        device_mapper,
        volume_groups: volume_groups.into_iter().collect(),
        iocost,
        throttle_detail,
        iocost_detail,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::qosmanager::hostfiles::MapHostFiles;
    use crate::statesinformer::volumes::{BoundVolume, MapVolumeLookup};
    use k8s_openapi::api::core::v1::{
        CSIVolumeSource, EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, PodSpec, Volume,
    };
    use kube::api::ObjectMeta;

    const LV_87: &str = "yoda--pool0-yoda--87d8625a--dcc9--47bf--a14a--994cf2971193";
    const PV_87: &str = "yoda-87d8625a-dcc9-47bf-a14a-994cf2971193";

    fn dev(major: u32, minor: u32) -> DeviceNumber {
        DeviceNumber { major, minor }
    }

    /// Upstream's storage test host as a sysfs tree: vda (253:0) and vda1,
    /// vdb (253:16), vdc (253:32) with vdc3 (253:35), vdd (253:48), vde
    /// (253:64); volume group yoda-pool0 on vdc3, yoda-pool1 on vdb, hunbu
    /// on vdd and vde (two PVs, refused as upstream).
    pub(crate) fn upstream_host() -> MapHostFiles {
        let mut files = MapHostFiles::default();
        for (name, number) in [
            ("vda", "253:0"),
            ("vdb", "253:16"),
            ("vdc", "253:32"),
            ("vdd", "253:48"),
            ("vde", "253:64"),
        ] {
            files = files
                .with(
                    format!("/sys/class/block/{name}/dev"),
                    format!("{number}\n"),
                )
                .with(format!("/sys/block/{name}/dev"), format!("{number}\n"))
                .with_link(
                    format!("/sys/dev/block/{number}"),
                    format!("../../devices/virtio/block/{name}"),
                );
        }
        for (disk, part, number) in [("vda", "vda1", "253:1"), ("vdc", "vdc3", "253:35")] {
            files = files
                .with(
                    format!("/sys/class/block/{part}/dev"),
                    format!("{number}\n"),
                )
                .with(format!("/sys/dev/block/{number}/partition"), "1\n")
                .with_link(
                    format!("/sys/dev/block/{number}"),
                    format!("../../devices/virtio/block/{disk}/{part}"),
                );
        }
        let lvs: [(&str, &str, &str, &[&str]); 5] = [
            ("dm-3", "252:3", LV_87, &["vdc3"]),
            ("dm-6", "252:6", "yoda--pool0-yoda--test1", &["vdc3"]),
            ("dm-7", "252:7", "yoda--pool1-data", &["vdb"]),
            ("dm-8", "252:8", "hunbu-striped", &["vdd", "vde"]),
            ("dm-9", "252:9", "not-lvm-ignored", &["vda"]),
        ];
        for (dm, number, name, slaves) in lvs {
            files = files
                .with(format!("/sys/block/{dm}/dev"), format!("{number}\n"))
                .with(format!("/sys/block/{dm}/dm/name"), format!("{name}\n"))
                .with(format!("/sys/class/block/{dm}/dev"), format!("{number}\n"))
                .with(
                    format!("/sys/dev/block/{number}/dm/name"),
                    format!("{name}\n"),
                );
            for slave in slaves {
                files = files.with(format!("/sys/dev/block/{number}/slaves/{slave}"), "");
            }
        }
        files.with(
            "/proc/self/mountinfo",
            format!(
                "22 27 0:21 / /proc rw - proc proc rw\n\
                 40 27 252:3 / /var/lib/kubelet/pods/uid-0/volumes/kubernetes.io~csi/{PV_87}/mount rw - ext4 /dev/mapper/{LV_87} rw\n\
                 41 27 252:6 / /var/lib/kubelet/pods/uid-1/volumes/kubernetes.io~csi/html/mount rw - ext4 /dev/mapper/yoda--pool0-yoda--test1 rw\n\
                 42 27 253:1 /disks/ssd1 /var/lib/kubelet/pods/uid-3/volumes/kubernetes.io~local-volume/local-pv rw - ext4 /dev/vda1 rw\n"
            ),
        )
    }

    fn pod(uid: &str, volume: Volume) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some("default".to_string()),
                name: Some(format!("pod-{uid}")),
                uid: Some(uid.to_string()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![volume]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) fn pvc_volume(name: &str, claim: &str) -> Volume {
        Volume {
            name: name.to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.to_string(),
                read_only: None,
            }),
            ..Default::default()
        }
    }

    pub(crate) fn csi_volume(name: &str) -> Volume {
        Volume {
            name: name.to_string(),
            csi: Some(CSIVolumeSource {
                driver: "yodaplugin.csi.alibabacloud.com".to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) fn upstream_claims() -> MapVolumeLookup {
        MapVolumeLookup::default().with(
            "default",
            "test-pvc",
            BoundVolume {
                pv_name: PV_87.to_string(),
                local_path: None,
            },
        )
    }

    #[test]
    fn lvm_names_split_and_join_like_lvm() {
        // Upstream's lvs/lsblk facts: yoda-pool0 / yoda-<uuid>.
        assert_eq!(
            split_lvm_dm_name(LV_87),
            Some(("yoda-pool0".to_string(), PV_87.to_string()))
        );
        assert_eq!(lvm_dm_name("yoda-pool0", PV_87), LV_87);
        assert_eq!(
            split_lvm_dm_name("vg-thin-tpool"),
            Some(("vg".to_string(), "thin-tpool".to_string()))
        );
        for not_lvm in ["", "-lv", "vg-", "novolume", "a--b"] {
            assert_eq!(split_lvm_dm_name(not_lvm), None, "{not_lvm}");
        }
    }

    #[test]
    fn volume_groups_resolve_to_their_single_disk() {
        let files = upstream_host();
        let roots = SystemArgs::under(Path::new("/"));
        let resolver = VolumeResolver::new(&files, &roots, Path::new("/var/lib/kubelet"));
        // Upstream's vgs table: yoda-pool0 on /dev/vdc3 → /dev/vdc,
        // yoda-pool1 on /dev/vdb, hunbu on two PVs is not supported.
        assert_eq!(resolver.volume_group("yoda-pool0"), Ok(dev(253, 32)));
        assert_eq!(resolver.volume_group("yoda-pool1"), Ok(dev(253, 16)));
        assert!(
            resolver
                .volume_group("hunbu")
                .unwrap_err()
                .contains("spans 2 disks")
        );
        assert!(
            resolver
                .volume_group("missing")
                .unwrap_err()
                .contains("no logical volume")
        );
        assert!(resolver.volume_group("../etc").is_err());
        assert!(resolver.volume_group("").is_err());
        // A device block naming an LV (or a mount on one) also reaches the disk.
        assert_eq!(resolver.device("/dev/dm-7"), Ok(dev(253, 16)));
        assert_eq!(resolver.device("/dev/vdc3"), Ok(dev(253, 32)));
    }

    #[test]
    fn pod_volumes_resolve_through_claim_mount_and_volume_group() {
        let files = upstream_host();
        let roots = SystemArgs::under(Path::new("/"));
        let resolver = VolumeResolver::new(&files, &roots, Path::new("/var/lib/kubelet"));
        let claims = upstream_claims().with(
            "default",
            "local-claim",
            BoundVolume {
                pv_name: "local-pv".to_string(),
                local_path: Some("/disks/ssd1".to_string()),
            },
        );
        // Upstream's pod0: PVC test-pvc → PV yoda-87d8… → its CSI mount on
        // an LV of yoda-pool0 → /dev/vdc.
        let pod0 = pod("uid-0", pvc_volume("html", "test-pvc"));
        assert_eq!(
            resolver.pod_volume(&pod0, "html", &claims),
            Ok(dev(253, 32))
        );
        // Upstream's pod1: an inline CSI volume "html".
        let pod1 = pod("uid-1", csi_volume("html"));
        assert_eq!(
            resolver.pod_volume(&pod1, "html", &claims),
            Ok(dev(253, 32))
        );
        // A local PV bind-mounted from a partition of vda.
        let pod3 = pod("uid-3", pvc_volume("data", "local-claim"));
        assert_eq!(resolver.pod_volume(&pod3, "data", &claims), Ok(dev(253, 0)));
        // A local PV that is a raw device.
        let raw = MapVolumeLookup::default().with(
            "default",
            "raw",
            BoundVolume {
                pv_name: "raw-pv".to_string(),
                local_path: Some("/dev/vde".to_string()),
            },
        );
        let pod4 = pod("uid-4", pvc_volume("data", "raw"));
        assert_eq!(resolver.pod_volume(&pod4, "data", &raw), Ok(dev(253, 64)));

        let not_mounted = pod("uid-9", csi_volume("html"));
        let err = resolver
            .pod_volume(&not_mounted, "html", &claims)
            .unwrap_err();
        assert!(err.contains("not mounted yet"), "{err}");
        assert!(err.contains("/var/lib/kubelet/pods/uid-9/volumes/kubernetes.io~csi/html/mount"));
        let unbound = pod("uid-0", pvc_volume("html", "other"));
        assert!(
            resolver
                .pod_volume(&unbound, "html", &claims)
                .unwrap_err()
                .contains("not bound")
        );
        assert!(
            resolver
                .pod_volume(&pod0, "nope", &claims)
                .unwrap_err()
                .contains("has no volume")
        );
        let empty_dir = pod(
            "uid-0",
            Volume {
                name: "scratch".to_string(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            },
        );
        assert!(
            resolver
                .pod_volume(&empty_dir, "scratch", &claims)
                .unwrap_err()
                .contains("neither a PVC nor a CSI volume")
        );
        let hostile = pod("../../etc", csi_volume("html"));
        assert!(
            resolver
                .pod_volume(&hostile, "html", &claims)
                .unwrap_err()
                .contains("pod uid")
        );
    }

    #[test]
    fn oversized_and_garbage_inputs_are_refused() {
        let roots = SystemArgs::under(Path::new("/"));
        let huge = MapHostFiles::default()
            .with("/proc/self/mountinfo", "x".repeat(MAX_MOUNTINFO_BYTES + 1));
        let resolver = VolumeResolver::new(&huge, &roots, Path::new("/var/lib/kubelet"));
        let pod1 = pod("uid-1", csi_volume("html"));
        assert!(
            resolver
                .pod_volume(&pod1, "html", &upstream_claims())
                .unwrap_err()
                .contains("longer than")
        );
        let garbage = upstream_host()
            .with("/sys/block/dm-3/dev", "garbage\n")
            .with("/sys/block/dm-5/dm/name", "x".repeat(MAX_SYSFS_BYTES + 1));
        let resolver = VolumeResolver::new(&garbage, &roots, Path::new("/var/lib/kubelet"));
        assert!(
            resolver
                .volume_group("yoda-pool0")
                .unwrap_err()
                .contains("malformed device number")
        );
        // A slave entry that escapes sysfs is refused by name.
        let escaping = upstream_host().with("/sys/dev/block/252:7/slaves/..", "");
        let resolver = VolumeResolver::new(&escaping, &roots, Path::new("/var/lib/kubelet"));
        assert!(resolver.volume_group("yoda-pool1").is_err());
    }
}
