//! QoS strategy `blkio` (upstream `BlkIOReconcile`): per-device I/O
//! throttles of the BE tier from `resourceQOSStrategy.beClass.blkioQOS`.
//!
//! - Each `blocks[]` entry names a device (`/dev/vdb`, `vdb`) or a mount
//!   point (`/data`); it is resolved to the whole disk's `major:minor`
//!   through `<proc>/self/mountinfo`, `<sys>/class/block/<dev>/dev` and
//!   `<sys>/dev/block/<major:minor>` (a partition resolves to its disk, the
//!   kernel throttles whole disks only).
//! - `readIOPS`, `writeIOPS`, `readBPS`, `writeBPS` (0 = no limit) go to the
//!   tier's `blkio.throttle.*_device` files; a device still throttled there
//!   but no longer configured is reset to 0 (upstream's recorder).
//! - `ioWeightPercent` needs `blkio.cost.weight` (Anolis blk-iocost); plain
//!   `blkio.weight` is a BFQ/CFQ knob upstream does not use. Where the file
//!   is missing the weight is reported unsupported and throttles still apply.
//! - cgroup v2: the same limits go to the tier's `io.max` (`rbps=`,
//!   `wbps=`, `riops=`, `wiops=`; 0 is written as `max`).
//! - LSR/LS classes are reported not supported, as upstream; `volumegroup`
//!   and `podvolume` blocks (LVM and CSI metadata) are reported unsupported.
//!
//! Throttle files list one line per device and drop a device set to 0, so
//! writes are decided against the parsed current content and carry
//! [`ReadBack::None`]: a write happens only when a device's value differs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use apis::extension::QoSClass;
use apis::extension::slo_pod::get_pod_blkio_qos;
use apis::slo::v1alpha1::{
    ANNOTATION_POD_BLKIO_QOS, BlkIOQOS, BlockCfg, BlockType, IOCfg, ResourceQOS,
};
use k8s_openapi::api::core::v1::Pod;

use super::blkvolume::VolumeResolver;
pub use super::blkvolume::{DeviceNumber, DeviceResolver, device_of_mount};
use super::framework::FeatureGate;
use super::framework::{Capability, Decision, FileWrite, QosPod, QosSnapshot, ReadBack, Strategy};
use super::hostfiles::{FsHostFiles, HostFiles};
use crate::system::SystemArgs;
use crate::system::cgroup::{CgroupResource, CgroupValue, CgroupVersion, Controller, QosTier};

pub const NAME: &str = "blkio";
/// Upstream's feature gate.
pub const FEATURE: &str = "BlkIOReconcile";
/// The blk-iocost weight file upstream writes.
pub const IO_WEIGHT_FILE: &str = "blkio.cost.weight";
/// Upstream's default weight (percent) for a configured device.
pub const DEFAULT_IO_WEIGHT_PERCENT: i64 = 100;
/// blk-iocost files at the hierarchy root: Anolis' v1 names, mainline v2 names.
pub const IOCOST_QOS_FILE: &str = "blkio.cost.qos";
pub const IOCOST_MODEL_FILE: &str = "blkio.cost.model";
pub const IOCOST_QOS_FILE_V2: &str = "io.cost.qos";
pub const IOCOST_MODEL_FILE_V2: &str = "io.cost.model";
/// Upstream's iocost defaults: latency target (µs) and its percentile.
pub const DEFAULT_IO_LATENCY_US: i64 = 3000;
pub const DEFAULT_LATENCY_PERCENT: i64 = 95;
/// Most blocks used from one class or pod.
pub const MAX_BLOCKS: usize = 256;
/// Largest `koordinator.sh/blkioQOS` annotation read.
pub const MAX_POD_ANNOTATION_BYTES: usize = 64 * 1024;
/// Largest iocost file read.
pub const MAX_IOCOST_FILE_BYTES: usize = 1024 * 1024;

/// One line per device: `major:minor value`.
pub fn parse_device_values(content: &str) -> Result<BTreeMap<DeviceNumber, i64>, String> {
    let mut values = BTreeMap::new();
    for line in content
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
    {
        let mut fields = line.split_whitespace();
        let (Some(device), Some(value), None) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(format!("malformed device line {line:?}"));
        };
        let value = value
            .parse::<i64>()
            .map_err(|_| format!("malformed value in device line {line:?}"))?;
        values.insert(DeviceNumber::parse(device)?, value);
    }
    Ok(values)
}

/// One limit of cgroup v2 `io.max` per device (`max` and absent read as 0).
pub fn parse_io_max(content: &str, key: &str) -> Result<BTreeMap<DeviceNumber, i64>, String> {
    let mut values = BTreeMap::new();
    for line in content
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
    {
        let mut fields = line.split_whitespace();
        let device = DeviceNumber::parse(fields.next().unwrap_or_default())?;
        let mut value = 0;
        for field in fields {
            let (name, limit) = field
                .split_once('=')
                .ok_or_else(|| format!("malformed io.max field {field:?} in {line:?}"))?;
            if name == key && limit != "max" {
                value = limit
                    .parse::<i64>()
                    .map_err(|_| format!("malformed io.max value {field:?} in {line:?}"))?;
            }
        }
        values.insert(device, value);
    }
    Ok(values)
}

fn io_max_key(resource: CgroupResource) -> &'static str {
    match resource {
        CgroupResource::BlkioThrottleReadIops => "riops",
        CgroupResource::BlkioThrottleReadBps => "rbps",
        CgroupResource::BlkioThrottleWriteIops => "wiops",
        _ => "wbps",
    }
}

const THROTTLES: [(CgroupResource, &str); 4] = [
    (CgroupResource::BlkioThrottleReadIops, "readIOPS"),
    (CgroupResource::BlkioThrottleReadBps, "readBPS"),
    (CgroupResource::BlkioThrottleWriteIops, "writeIOPS"),
    (CgroupResource::BlkioThrottleWriteBps, "writeBPS"),
];

fn configured_value(block: &BlockCfg, resource: CgroupResource) -> i64 {
    let io = &block.io_cfg;
    let value = match resource {
        CgroupResource::BlkioThrottleReadIops => io.read_iops,
        CgroupResource::BlkioThrottleReadBps => io.read_bps,
        CgroupResource::BlkioThrottleWriteIops => io.write_iops,
        _ => io.write_bps,
    };
    value.unwrap_or(0).max(0)
}

fn class_blocks(class: Option<&ResourceQOS>) -> Option<(bool, &[BlockCfg])> {
    let cfg = class?.blkio_qos.as_ref()?;
    Some((cfg.enable == Some(true), cfg.blkio_qos.blocks.as_slice()))
}

/// The `blkio` strategy.
pub struct BlkioReconcile {
    gate: FeatureGate,
    roots: SystemArgs,
    files: Arc<dyn HostFiles>,
}

impl std::fmt::Debug for BlkioReconcile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlkioReconcile")
            .field("roots", &self.roots)
            .finish_non_exhaustive()
    }
}

impl BlkioReconcile {
    /// On; see [`BlkioReconcile::with_feature_gates`].
    pub fn new(roots: SystemArgs, files: Arc<dyn HostFiles>) -> Self {
        Self {
            gate: FeatureGate::on(FEATURE, false),
            roots,
            files,
        }
    }

    /// Applies parsed `--feature-gates` (upstream default: off).
    pub fn with_feature_gates(mut self, gates: &std::collections::BTreeMap<String, bool>) -> Self {
        self.gate = self.gate.from_gates(gates);
        self
    }

    pub fn on_host(roots: SystemArgs) -> Self {
        Self::new(roots, Arc::new(FsHostFiles))
    }
}

impl Strategy for BlkioReconcile {
    type State = ();

    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.reconcile_interval
    }

    fn required_capabilities(&self) -> &'static [Capability] {
        &[Capability::Blkio]
    }

    fn decide(&self, snapshot: &QosSnapshot, _: &()) -> (Decision, ()) {
        (self.reconcile(snapshot), ())
    }
}

impl BlkioReconcile {
    /// The round's blkio writes (the strategy keeps no state between rounds).
    fn reconcile(&self, snapshot: &QosSnapshot) -> Decision {
        if let Err(off) = self.gate.check() {
            return Decision::skipped(off);
        }
        let Some(strategy) = snapshot
            .node_slo
            .as_ref()
            .and_then(|spec| spec.resource_qos_strategy.as_ref())
        else {
            return Decision::skipped("no NodeSLO resourceQOSStrategy");
        };
        let mut decision = Decision::default();
        for (class, config) in [("LSR", &strategy.lsr_class), ("LS", &strategy.ls_class)] {
            if let Some((true, blocks)) = class_blocks(config.as_ref())
                && !blocks.is_empty()
            {
                decision.info(format!(
                    "blkioQOS of the {class} class is not supported (as upstream); only beClass, cgroupRoot and pod annotations apply"
                ));
            }
        }
        // Re-resolved every round: a volume mounted or a claim bound since
        // the last round is picked up now.
        let resolver = VolumeResolver::new(
            self.files.as_ref(),
            &self.roots,
            snapshot.kubelet_root.as_path(),
        );
        let mut configured = false;
        match class_blocks(strategy.be_class.as_ref()) {
            None => decision.info("beClass.blkioQOS is not configured"),
            Some((enabled, blocks)) => {
                configured |= enabled && !blocks.is_empty();
                let blocks = if enabled { blocks } else { &[] };
                let dir = snapshot.layout.qos_dir(QosTier::BestEffort);
                let desired = resolve_blocks(blocks, None, &resolver, snapshot, &mut decision);
                plan_throttles(snapshot, &dir, "beClass.blkioQOS", &desired, &mut decision);
                self.io_weight(snapshot, &dir, &desired, &mut decision);
            }
        }
        if let Some((enabled, blocks)) = class_blocks(strategy.cgroup_root.as_ref()) {
            configured |= enabled && !blocks.is_empty();
            let blocks = if enabled { blocks } else { &[] };
            self.root_iocost(snapshot, blocks, &resolver, &mut decision);
        }
        configured |= self.pod_blocks(snapshot, &resolver, &mut decision);
        if decision.file_writes.is_empty() && !configured {
            decision.skip("blkioQOS configures no block device");
        }
        decision
    }
}

/// Desired settings per device; a later block naming the same device wins,
/// as upstream's updaters apply in order.
type Desired<'b> = BTreeMap<DeviceNumber, &'b BlockCfg>;

/// Resolves each block to its disk; a block that cannot be resolved is
/// dropped with its reason (upstream drops the whole class instead).
/// `pod` is `Some` for a pod's annotation, the only place `podvolume`
/// blocks mean something.
fn resolve_blocks<'b>(
    blocks: &'b [BlockCfg],
    pod: Option<(&QosPod, &Pod)>,
    resolver: &VolumeResolver<'_>,
    snapshot: &QosSnapshot,
    decision: &mut Decision,
) -> Desired<'b> {
    let mut desired = BTreeMap::new();
    let origin = pod.map_or_else(String::new, |(pod, _)| format!("pod {}: ", pod.key()));
    for block in blocks.iter().take(MAX_BLOCKS) {
        let resolved = match (&block.block_type, pod) {
            (None | Some(BlockType::Device), _) => resolver.device(&block.name),
            (Some(BlockType::VolumeGroup), _) => resolver.volume_group(&block.name),
            (Some(BlockType::PodVolume), Some((_, kube_pod))) => {
                resolver.pod_volume(kube_pod, &block.name, snapshot.volumes.as_ref())
            }
            (Some(BlockType::PodVolume), None) => Err(
                "podvolume blocks apply only in a pod's koordinator.sh/blkioQOS annotation"
                    .to_string(),
            ),
            (Some(other), _) => Err(format!("blockType {} is not supported", other.as_str())),
        };
        match resolved {
            Ok(device) => {
                desired.insert(device, block);
            }
            Err(err) => decision.info(format!(
                "{origin}block {}: {err}; dropped",
                crate::bounds::for_log(&block.name)
            )),
        }
    }
    if blocks.len() > MAX_BLOCKS {
        decision.info(format!(
            "{origin}{} blocks configured; only the first {MAX_BLOCKS} are used",
            blocks.len()
        ));
    }
    desired
}

/// The throttle writes that bring `dir`'s four throttle files (v2: `io.max`)
/// to `desired`: a device whose value differs is written, a device listed
/// but no longer desired is reset to 0 (upstream's recorder).
pub fn plan_throttles(
    snapshot: &QosSnapshot,
    dir: &Path,
    origin: &str,
    desired: &Desired<'_>,
    decision: &mut Decision,
) {
    let v2 = snapshot.layout.version == CgroupVersion::V2;
    for (resource, field) in THROTTLES {
        let current = match snapshot.current(dir, resource) {
            Some(CgroupValue::Text(text)) => match if v2 {
                parse_io_max(&text, io_max_key(resource))
            } else {
                parse_device_values(&text)
            } {
                Ok(values) => values,
                Err(err) => {
                    decision.info(format!("{}: {err}", resource.name()));
                    continue;
                }
            },
            _ => {
                decision.info(format!(
                    "unsupported: {} of {} is missing",
                    resource.name(),
                    dir.display()
                ));
                continue;
            }
        };
        let Ok(path) = snapshot.layout.file_path(dir, resource) else {
            continue;
        };
        let devices: std::collections::BTreeSet<DeviceNumber> =
            desired.keys().chain(current.keys()).copied().collect();
        for device in devices {
            let want = desired
                .get(&device)
                .map_or(0, |block| configured_value(block, resource));
            let have = current.get(&device).copied().unwrap_or(0);
            if want == have {
                continue;
            }
            let reason = match desired.get(&device) {
                Some(block) => format!("{origin} {} {field}", block.name),
                None => format!("{origin}: device no longer configured"),
            };
            decision.file_writes.push(FileWrite {
                path: path.clone(),
                value: throttle_line(device, resource, want, v2),
                reason,
                read_back: ReadBack::None,
            });
        }
    }
}

/// One throttle line: v1 `major:minor value`, v2 `major:minor key=value`
/// (0 is `max` there).
pub fn throttle_line(
    device: DeviceNumber,
    resource: CgroupResource,
    value: i64,
    v2: bool,
) -> String {
    match (v2, value) {
        (false, value) => format!("{device} {value}"),
        (true, 0) => format!("{device} {}=max", io_max_key(resource)),
        (true, value) => format!("{device} {}={value}", io_max_key(resource)),
    }
}

impl BlkioReconcile {
    /// Pods with a `koordinator.sh/blkioQOS` annotation (upstream: Running
    /// pods carrying a koordinator QoS label): throttles at the pod's own
    /// cgroup. Returns whether any pod configures a block.
    fn pod_blocks(
        &self,
        snapshot: &QosSnapshot,
        resolver: &VolumeResolver<'_>,
        decision: &mut Decision,
    ) -> bool {
        let mut configured = false;
        for pod in &snapshot.pods {
            if pod.qos_label == QoSClass::None || pod.phase != "Running" {
                continue;
            }
            let Some(kube_pod) = pod.kube_index.and_then(|i| snapshot.kube_pods.get(i)) else {
                continue;
            };
            let Some(annotations) = kube_pod.metadata.annotations.as_ref() else {
                continue;
            };
            let Some(text) = annotations.get(ANNOTATION_POD_BLKIO_QOS) else {
                continue;
            };
            if text.len() > MAX_POD_ANNOTATION_BYTES {
                decision.info(format!(
                    "pod {}: {ANNOTATION_POD_BLKIO_QOS} is {} bytes, more than {MAX_POD_ANNOTATION_BYTES}; ignored",
                    pod.key(),
                    text.len()
                ));
                continue;
            }
            // An empty value removes the pod's limits, as upstream.
            let config = if text.is_empty() {
                BlkIOQOS::default()
            } else {
                match get_pod_blkio_qos(annotations) {
                    Ok(config) => config.unwrap_or_default(),
                    Err(err) => {
                        decision.info(format!(
                            "pod {}: {}",
                            pod.key(),
                            crate::bounds::cut(err.to_string())
                        ));
                        continue;
                    }
                }
            };
            configured |= !config.blocks.is_empty();
            let desired = resolve_blocks(
                &config.blocks,
                Some((pod, kube_pod)),
                resolver,
                snapshot,
                decision,
            );
            let origin = format!("pod {} blkioQOS", pod.key());
            plan_throttles(snapshot, &pod.cgroup_dir, &origin, &desired, decision);
            self.io_weight(snapshot, &pod.cgroup_dir, &desired, decision);
        }
        configured
    }

    /// cgroupRoot blocks: blk-iocost's QoS and cost model at the hierarchy
    /// root, where the kernel has them (Anolis `blkio.cost.*` on v1,
    /// `io.cost.*` on v2); reported unsupported otherwise.
    fn root_iocost(
        &self,
        snapshot: &QosSnapshot,
        blocks: &[BlockCfg],
        resolver: &VolumeResolver<'_>,
        decision: &mut Decision,
    ) {
        let v2 = snapshot.layout.version == CgroupVersion::V2;
        let Ok(root) = snapshot.layout.controller_path("", Controller::Blkio) else {
            return;
        };
        let (qos_file, model_file) = if v2 {
            (IOCOST_QOS_FILE_V2, IOCOST_MODEL_FILE_V2)
        } else {
            (IOCOST_QOS_FILE, IOCOST_MODEL_FILE)
        };
        let qos_path = root.join(qos_file);
        let model_path = root.join(model_file);
        if !self.files.exists(&qos_path) || !self.files.exists(&model_path) {
            if !blocks.is_empty() {
                decision.info(format!(
                    "cgroupRoot.blkioQOS: iocost unsupported: {} is missing (needs blk-iocost)",
                    qos_path.display()
                ));
            }
            return;
        }
        let read = |path: &Path| {
            self.files
                .read_bounded(path, MAX_IOCOST_FILE_BYTES)
                .and_then(|text| parse_iocost(&text))
        };
        let (current_qos, current_model) = match (read(&qos_path), read(&model_path)) {
            (Ok(qos), Ok(model)) => (qos, model),
            (Err(err), _) | (_, Err(err)) => {
                decision.info(format!("cgroupRoot.blkioQOS: {err}"));
                return;
            }
        };
        let desired = resolve_blocks(blocks, None, resolver, snapshot, decision);
        for (device, block) in &desired {
            for (path, current, line) in [
                (
                    &qos_path,
                    &current_qos,
                    iocost_qos_line(*device, &block.io_cfg),
                ),
                (
                    &model_path,
                    &current_model,
                    iocost_model_line(*device, &block.io_cfg),
                ),
            ] {
                if iocost_converged(current.get(device), &line) {
                    continue;
                }
                decision.file_writes.push(FileWrite {
                    path: path.clone(),
                    value: line,
                    reason: format!("cgroupRoot.blkioQOS {}", block.name),
                    read_back: ReadBack::None,
                });
            }
        }
        for (device, fields) in &current_qos {
            if desired.contains_key(device) || fields.get("enable").map(String::as_str) != Some("1")
            {
                continue;
            }
            decision.file_writes.push(FileWrite {
                path: qos_path.clone(),
                value: format!("{device} enable=0"),
                reason: "cgroupRoot.blkioQOS: device no longer configured".to_string(),
                read_back: ReadBack::None,
            });
        }
    }

    fn io_weight(
        &self,
        snapshot: &QosSnapshot,
        dir: &Path,
        desired: &Desired<'_>,
        decision: &mut Decision,
    ) {
        let weighted: Vec<(DeviceNumber, i64)> = desired
            .iter()
            .filter_map(|(device, block)| Some((*device, block.io_cfg.io_weight_percent?)))
            .collect();
        if weighted.is_empty() {
            return;
        }
        let Ok(blkio_dir) = snapshot.layout.controller_path(dir, Controller::Blkio) else {
            return;
        };
        let path: PathBuf = blkio_dir.join(IO_WEIGHT_FILE);
        if !self.files.exists(&path) {
            decision.info(format!(
                "ioWeightPercent: unsupported, {} is missing (needs blk-iocost; blkio.weight is not used)",
                path.display()
            ));
            return;
        }
        for (device, weight) in weighted {
            if !(1..=100).contains(&weight) {
                decision.info(format!(
                    "ioWeightPercent {weight} for {device} is outside 1..=100; not written"
                ));
                continue;
            }
            decision.file_writes.push(FileWrite {
                path: path.clone(),
                value: format!("{device} {weight}"),
                reason: "blkioQOS ioWeightPercent".to_string(),
                read_back: ReadBack::None,
            });
        }
    }
}

/// blk-iocost's QoS line (upstream's defaults: latency 3000 µs at the 95th
/// percentile).
pub fn iocost_qos_line(device: DeviceNumber, io: &IOCfg) -> String {
    format!(
        "{device} enable=1 ctrl=user rpct={} rlat={} wpct={} wlat={}",
        io.read_latency_percent.unwrap_or(DEFAULT_LATENCY_PERCENT),
        io.read_latency.unwrap_or(DEFAULT_IO_LATENCY_US),
        io.write_latency_percent.unwrap_or(DEFAULT_LATENCY_PERCENT),
        io.write_latency.unwrap_or(DEFAULT_IO_LATENCY_US),
    )
}

/// blk-iocost's cost model line: the user's model when `enableUserModel`
/// (unset values 0, as upstream), else the kernel's own.
pub fn iocost_model_line(device: DeviceNumber, io: &IOCfg) -> String {
    if io.enable_user_model != Some(true) {
        return format!("{device} ctrl=auto");
    }
    format!(
        "{device} ctrl=user rbps={} rseqiops={} rrandiops={} wbps={} wseqiops={} wrandiops={}",
        io.model_read_bps.unwrap_or(0),
        io.model_read_seq_iops.unwrap_or(0),
        io.model_read_rand_iops.unwrap_or(0),
        io.model_write_bps.unwrap_or(0),
        io.model_write_seq_iops.unwrap_or(0),
        io.model_write_rand_iops.unwrap_or(0),
    )
}

/// `major:minor key=value ...` lines of `*.cost.qos` / `*.cost.model`.
pub fn parse_iocost(
    content: &str,
) -> Result<BTreeMap<DeviceNumber, BTreeMap<String, String>>, String> {
    let mut devices = BTreeMap::new();
    for line in content.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut fields = line.split_whitespace();
        let device = DeviceNumber::parse(fields.next().unwrap_or_default())?;
        let mut values = BTreeMap::new();
        for field in fields {
            let (key, value) = field
                .split_once('=')
                .ok_or_else(|| format!("malformed iocost field {field:?}"))?;
            values.insert(key.to_string(), value.to_string());
        }
        devices.insert(device, values);
    }
    Ok(devices)
}

/// Whether the kernel's fields already say what `line` would write (the
/// kernel prints percentiles as `90.00`, so numbers compare as numbers).
pub fn iocost_converged(current: Option<&BTreeMap<String, String>>, line: &str) -> bool {
    let Some(current) = current else {
        return false;
    };
    line.split_whitespace().skip(1).all(|field| {
        let Some((key, want)) = field.split_once('=') else {
            return false;
        };
        match (current.get(key), want.parse::<f64>()) {
            (Some(have), Ok(want)) => have
                .parse::<f64>()
                .is_ok_and(|have| (have - want).abs() < 1e-6),
            (Some(have), Err(_)) => have == want,
            (None, _) => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qosmanager::framework::MapReader;
    use crate::qosmanager::framework::testing::{DecideFresh, assert_deterministic};
    use crate::qosmanager::hostfiles::MapHostFiles;
    use apis::extension::QoSClass;
    use apis::slo::v1alpha1::{BlkIOQOS, BlkIOQOSCfg, IOCfg, NodeSLOSpec, ResourceQOSStrategy};
    use std::time::SystemTime;

    fn roots() -> SystemArgs {
        SystemArgs::under(Path::new("/host"))
    }

    /// vda (254:0) with partition vda1 (254:1) mounted at /data.
    fn host_files() -> MapHostFiles {
        MapHostFiles::default()
            .with(
                "/host/proc/self/mountinfo",
                "22 27 0:21 / /proc rw - proc proc rw\n\
                 30 27 254:1 / /data rw,relatime - ext4 /dev/vda1 rw\n\
                 31 27 254:1 / /my\\040disk rw - ext4 /dev/vda1 rw\n",
            )
            .with("/host/sys/class/block/vda/dev", "254:0\n")
            .with("/host/sys/class/block/vda1/dev", "254:1\n")
            .with("/host/sys/dev/block/254:1/partition", "1\n")
            .with_link(
                "/host/sys/dev/block/254:1",
                "../../devices/pci0000:00/virtio1/block/vda/vda1",
            )
            .with_link(
                "/host/sys/dev/block/254:0",
                "../../devices/pci0000:00/virtio1/block/vda",
            )
    }

    fn block(name: &str, io: IOCfg) -> BlockCfg {
        BlockCfg {
            name: name.to_string(),
            block_type: Some(BlockType::Device),
            io_cfg: io,
        }
    }

    fn snapshot(
        enable: bool,
        blocks: Vec<BlockCfg>,
        current: &[(CgroupResource, &str)],
    ) -> QosSnapshot {
        let mut snapshot = QosSnapshot::for_test(SystemTime::UNIX_EPOCH);
        let be = ResourceQOS {
            blkio_qos: Some(BlkIOQOSCfg {
                enable: Some(enable),
                blkio_qos: BlkIOQOS { blocks },
            }),
            ..ResourceQOS::default()
        };
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            resource_qos_strategy: Some(ResourceQOSStrategy {
                be_class: Some(be),
                ..ResourceQOSStrategy::default()
            }),
            ..NodeSLOSpec::default()
        }));
        let dir = snapshot.layout.qos_dir(QosTier::BestEffort);
        let mut reader = MapReader::default();
        for (resource, content) in current {
            reader = reader.with(
                dir.clone(),
                *resource,
                CgroupValue::Text(content.to_string()),
            );
        }
        snapshot.reader = Arc::new(reader);
        snapshot
    }

    fn all_empty() -> Vec<(CgroupResource, &'static str)> {
        THROTTLES
            .iter()
            .map(|(resource, _)| (*resource, ""))
            .collect()
    }

    fn writes(decision: &Decision) -> Vec<(String, String)> {
        decision
            .file_writes
            .iter()
            .map(|w| {
                let file = w.path.file_name().unwrap().to_str().unwrap().to_string();
                (file, w.value.clone())
            })
            .collect()
    }

    #[test]
    fn names_resolve_to_whole_disks() {
        let files = host_files();
        let roots = roots();
        let resolver = DeviceResolver {
            files: &files,
            roots: &roots,
        };
        let vda = DeviceNumber {
            major: 254,
            minor: 0,
        };
        assert_eq!(resolver.resolve("/dev/vda"), Ok(vda));
        assert_eq!(resolver.resolve("vda1"), Ok(vda));
        assert_eq!(resolver.resolve("/data"), Ok(vda));
        assert_eq!(resolver.resolve("/data/"), Ok(vda));
        assert_eq!(resolver.resolve("/my disk"), Ok(vda));
        assert!(
            resolver
                .resolve("/nowhere")
                .unwrap_err()
                .contains("neither")
        );
        assert!(
            resolver
                .resolve("/dev/sdz")
                .unwrap_err()
                .contains("not found")
        );
        assert!(resolver.resolve("/dev/../etc").is_err());
    }

    #[test]
    fn throttles_are_written_per_device_and_weight_reported_unsupported() {
        let io = IOCfg {
            read_bps: Some(1_048_576),
            write_iops: Some(300),
            io_weight_percent: Some(60),
            ..IOCfg::default()
        };
        let strategy = BlkioReconcile::new(roots(), Arc::new(host_files()));
        let decision =
            strategy.decide_fresh(&snapshot(true, vec![block("/data", io)], &all_empty()));
        assert_eq!(
            writes(&decision),
            [
                (
                    "blkio.throttle.read_bps_device".to_string(),
                    "254:0 1048576".to_string()
                ),
                (
                    "blkio.throttle.write_iops_device".to_string(),
                    "254:0 300".to_string()
                ),
            ]
        );
        assert!(
            decision.file_writes[0]
                .path
                .ends_with("blkio/kubepods/besteffort/blkio.throttle.read_bps_device")
        );
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("ioWeightPercent: unsupported"))
        );
    }

    #[test]
    fn converged_files_need_no_write_and_removed_devices_are_reset() {
        let io = IOCfg {
            read_bps: Some(1_048_576),
            ..IOCfg::default()
        };
        let strategy = BlkioReconcile::new(roots(), Arc::new(host_files()));
        let mut current = all_empty();
        current[1] = (
            CgroupResource::BlkioThrottleReadBps,
            "254:0 1048576\n8:0 500\n",
        );
        // Decided twice on the same inputs: the same writes (the strategy is pure).
        let decision = assert_deterministic(
            &strategy,
            &snapshot(true, vec![block("vda", io)], &current),
            &(),
        )
        .0;
        // 254:0 is converged; 8:0 is no longer configured → reset to 0.
        assert_eq!(
            writes(&decision),
            [(
                "blkio.throttle.read_bps_device".to_string(),
                "8:0 0".to_string()
            )]
        );
        // Disabled: every limit is removed.
        let disabled = strategy.decide_fresh(&snapshot(false, vec![], &current));
        assert_eq!(
            writes(&disabled),
            [
                (
                    "blkio.throttle.read_bps_device".to_string(),
                    "8:0 0".to_string()
                ),
                (
                    "blkio.throttle.read_bps_device".to_string(),
                    "254:0 0".to_string()
                ),
            ]
        );
    }

    #[test]
    fn weight_is_written_where_blk_iocost_exists() {
        let files = host_files().with(
            "/sys/fs/cgroup/blkio/kubepods/besteffort/blkio.cost.weight",
            "",
        );
        let io = IOCfg {
            io_weight_percent: Some(60),
            ..IOCfg::default()
        };
        let decision = BlkioReconcile::new(roots(), Arc::new(files)).decide_fresh(&snapshot(
            true,
            vec![block("vda", io)],
            &all_empty(),
        ));
        assert_eq!(
            writes(&decision),
            [("blkio.cost.weight".to_string(), "254:0 60".to_string())]
        );
    }

    #[test]
    fn missing_files_unknown_blocks_and_missing_config_are_reported() {
        let strategy = BlkioReconcile::new(roots(), Arc::new(host_files()));
        let io = IOCfg {
            read_bps: Some(10),
            ..IOCfg::default()
        };
        // No throttle files at all (blkio controller without throttling).
        let decision = strategy.decide_fresh(&snapshot(true, vec![block("vda", io.clone())], &[]));
        assert!(decision.file_writes.is_empty());
        assert_eq!(
            decision
                .notes
                .iter()
                .filter(|n| n.text.starts_with("unsupported"))
                .count(),
            4
        );
        let vg = BlockCfg {
            block_type: Some(BlockType::VolumeGroup),
            ..block("pool", io.clone())
        };
        let decision = strategy.decide_fresh(&snapshot(
            true,
            vec![vg, block("/dev/sdz", io)],
            &all_empty(),
        ));
        assert!(decision.file_writes.is_empty());
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("volume group pool has no logical volume"))
        );
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("sdz not found"))
        );
        let none = strategy.decide_fresh(&QosSnapshot::for_test(SystemTime::UNIX_EPOCH));
        assert!(none.skip_reason().unwrap().contains("resourceQOSStrategy"));
    }

    #[test]
    fn cgroup_v2_limits_go_to_io_max() {
        let io = IOCfg {
            read_bps: Some(1_048_576),
            write_iops: Some(300),
            ..IOCfg::default()
        };
        let mut snap = snapshot(true, vec![block("vda", io)], &[]);
        snap.layout = crate::system::cgroup::CgroupLayout::new(
            CgroupVersion::V2,
            crate::system::cgroup::CgroupDriver::Cgroupfs,
            "/sys/fs/cgroup",
        );
        let dir = snap.layout.qos_dir(QosTier::BestEffort);
        // io.max holds a stale write limit for 254:0 and one for 8:0.
        let content =
            "254:0 rbps=max wbps=5 riops=max wiops=300\n8:0 rbps=7 wbps=max riops=max wiops=max";
        let mut reader = MapReader::default();
        for (resource, _) in THROTTLES {
            reader = reader.with(
                dir.clone(),
                resource,
                CgroupValue::Text(content.to_string()),
            );
        }
        snap.reader = Arc::new(reader);
        let decision = BlkioReconcile::new(roots(), Arc::new(host_files())).decide_fresh(&snap);
        let mut got = writes(&decision);
        got.sort();
        assert_eq!(
            got,
            [
                ("io.max".to_string(), "254:0 rbps=1048576".to_string()),
                ("io.max".to_string(), "254:0 wbps=max".to_string()),
                ("io.max".to_string(), "8:0 rbps=max".to_string()),
            ]
        );
        assert!(parse_io_max("254:0 rbps", "rbps").is_err());
        assert!(parse_io_max("254:0 rbps=x", "rbps").is_err());
    }

    #[test]
    fn device_lines_parse_strictly() {
        let parsed = parse_device_values("8:0 10\n254:0 20\n").unwrap();
        assert_eq!(parsed.len(), 2);
        assert!(parse_device_values("8:0").is_err());
        assert!(parse_device_values("8-0 1").is_err());
        assert!(parse_device_values("8:0 x").is_err());
        assert!(device_of_mount("garbage", "/").is_err());
    }

    /// Upstream's reconcile test (`newNodeSLO`, pods with a PVC and an
    /// inline CSI volume, one Pending) on upstream's storage host.
    #[test]
    fn upstream_reconcile_table() {
        use crate::qosmanager::blkvolume::tests::{
            csi_volume, pvc_volume, upstream_claims, upstream_host,
        };
        use crate::qosmanager::framework::QosPod;
        use k8s_openapi::api::core::v1::{PodSpec, Volume};
        use kube::api::ObjectMeta;

        let io = |f: fn(&mut IOCfg)| {
            let mut io = IOCfg::default();
            f(&mut io);
            io
        };
        let class = |blocks: Vec<BlockCfg>| ResourceQOS {
            blkio_qos: Some(BlkIOQOSCfg {
                enable: Some(true),
                blkio_qos: BlkIOQOS { blocks },
            }),
            ..ResourceQOS::default()
        };
        let vg = BlockCfg {
            name: "yoda-pool0".into(),
            block_type: Some(BlockType::VolumeGroup),
            io_cfg: io(|io| {
                io.io_weight_percent = Some(40);
                io.read_iops = Some(1024);
                io.write_iops = Some(1024);
                io.read_bps = Some(1_048_576);
                io.write_bps = Some(1_048_576);
            }),
        };
        let root = BlockCfg {
            name: "/dev/vdb".into(),
            block_type: Some(BlockType::Device),
            io_cfg: io(|io| {
                io.read_latency = Some(1000);
                io.write_latency = Some(1000);
                io.read_latency_percent = Some(90);
                io.write_latency_percent = Some(90);
                io.enable_user_model = Some(true);
                io.model_read_bps = Some(3_324_911_720);
                io.model_write_bps = Some(2_765_819_289);
                io.model_read_seq_iops = Some(168_274);
                io.model_write_seq_iops = Some(367_565);
                io.model_read_rand_iops = Some(352_545);
                io.model_write_rand_iops = Some(339_390);
            }),
        };
        let weight100 = io(|io| io.io_weight_percent = Some(100));
        let mut snap = QosSnapshot::for_test(SystemTime::UNIX_EPOCH);
        snap.node_slo = Some(Arc::new(NodeSLOSpec {
            resource_qos_strategy: Some(ResourceQOSStrategy {
                lsr_class: Some(class(vec![block("/dev/vdc", weight100.clone())])),
                ls_class: Some(class(vec![block("/dev/vdd", weight100)])),
                be_class: Some(class(vec![vg])),
                cgroup_root: Some(class(vec![root])),
                ..ResourceQOSStrategy::default()
            }),
            ..NodeSLOSpec::default()
        }));
        // Upstream's pod annotation, with its `iocfg` spelling.
        let annotation = r#"{"blocks":[{"name":"html","type":"podvolume","iocfg":{"readIOPS":1024,"writeIOPS":512}}]}"#;
        let kube_pod = |uid: &str, volume: Volume| Pod {
            metadata: ObjectMeta {
                namespace: Some("default".into()),
                name: Some(uid.replace("uid", "pod")),
                uid: Some(uid.into()),
                annotations: Some(
                    [(ANNOTATION_POD_BLKIO_QOS.to_string(), annotation.to_string())].into(),
                ),
                ..Default::default()
            },
            spec: Some(PodSpec {
                volumes: Some(vec![volume]),
                ..Default::default()
            }),
            ..Default::default()
        };
        snap.kube_pods = Arc::new(vec![
            kube_pod("uid-0", pvc_volume("html", "test-pvc")),
            kube_pod("uid-1", csi_volume("html")),
            kube_pod("uid-2", csi_volume("html")),
        ]);
        let be_dir = snap.layout.qos_dir(QosTier::BestEffort);
        snap.pods = (0..3)
            .map(|i| QosPod {
                uid: format!("uid-{i}"),
                namespace: "default".into(),
                name: format!("pod-{i}"),
                qos: QoSClass::BE,
                qos_label: QoSClass::BE,
                kube_qos: QosTier::BestEffort,
                priority: apis::extension::PriorityClass::None,
                priority_value: 0,
                phase: if i == 2 { "Pending" } else { "Running" }.into(),
                cgroup_dir: be_dir.join(format!("pod{i}")),
                containers: Vec::new(),
                allocated_cpus: None,
                cpu_usage: None,
                memory_usage: None,
                kube_index: Some(i),
            })
            .collect();
        snap.volumes = Arc::new(upstream_claims());
        // The files upstream's test starts from.
        let mut reader = MapReader::default();
        for (dir, contents) in [
            (
                be_dir.clone(),
                ["253:16 2048", "253:0 2048", "253:16 2048", "253:0 2048"],
            ),
            (
                be_dir.join("pod0"),
                [
                    "253:16 2048",
                    "253:16 10485760",
                    "253:16 2048",
                    "253:16 10485760",
                ],
            ),
            (
                be_dir.join("pod1"),
                [
                    "253:16 2048",
                    "253:16 10485760",
                    "253:16 2048",
                    "253:16 10485760",
                ],
            ),
            (
                be_dir.join("pod2"),
                [
                    "253:16 2048",
                    "253:16 10485760",
                    "253:16 2048",
                    "253:16 10485760",
                ],
            ),
        ] {
            for ((resource, _), content) in THROTTLES.iter().zip(contents) {
                reader = reader.with(dir.clone(), *resource, CgroupValue::Text(content.into()));
            }
        }
        snap.reader = Arc::new(reader);
        let files = upstream_host()
            .with(
                "/sys/fs/cgroup/blkio/blkio.cost.qos",
                "253:16 enable=1 ctrl=user rlat=2000 wlat=2000\n",
            )
            .with("/sys/fs/cgroup/blkio/blkio.cost.model", "")
            .with(
                "/sys/fs/cgroup/blkio/kubepods/besteffort/blkio.cost.weight",
                "253:16 100\n",
            )
            .with(
                "/sys/fs/cgroup/blkio/kubepods/besteffort/pod0/blkio.cost.weight",
                "",
            );
        let roots = SystemArgs::under(Path::new("/"));
        let decision = BlkioReconcile::new(roots, Arc::new(files)).decide_fresh(&snap);
        let got: Vec<String> = decision
            .file_writes
            .iter()
            .map(|w| {
                let path = w
                    .path
                    .strip_prefix("/sys/fs/cgroup/blkio")
                    .unwrap_or(&w.path);
                format!("{} <- {}", path.display(), w.value)
            })
            .collect();
        let be = "kubepods/besteffort";
        let mut want: Vec<String> = vec![
            // BE: yoda-pool0 is on vdc3, so vdc (253:32); old devices reset.
            format!("{be}/blkio.throttle.read_iops_device <- 253:16 0"),
            format!("{be}/blkio.throttle.read_iops_device <- 253:32 1024"),
            format!("{be}/blkio.throttle.read_bps_device <- 253:0 0"),
            format!("{be}/blkio.throttle.read_bps_device <- 253:32 1048576"),
            format!("{be}/blkio.throttle.write_iops_device <- 253:16 0"),
            format!("{be}/blkio.throttle.write_iops_device <- 253:32 1024"),
            format!("{be}/blkio.throttle.write_bps_device <- 253:0 0"),
            format!("{be}/blkio.throttle.write_bps_device <- 253:32 1048576"),
            format!("{be}/blkio.cost.weight <- 253:32 40"),
            // cgroupRoot: vdb's iocost QoS and user model.
            "blkio.cost.qos <- 253:16 enable=1 ctrl=user rpct=90 rlat=1000 wpct=90 wlat=1000".into(),
            "blkio.cost.model <- 253:16 ctrl=user rbps=3324911720 rseqiops=168274 rrandiops=352545 wbps=2765819289 wseqiops=367565 wrandiops=339390".into(),
        ];
        // pod0 (PVC → LV on vdc3) and pod1 (inline CSI on vdc3); pod2 is Pending.
        for pod in ["pod0", "pod1"] {
            want.extend([
                format!("{be}/{pod}/blkio.throttle.read_iops_device <- 253:16 0"),
                format!("{be}/{pod}/blkio.throttle.read_iops_device <- 253:32 1024"),
                format!("{be}/{pod}/blkio.throttle.read_bps_device <- 253:16 0"),
                format!("{be}/{pod}/blkio.throttle.write_iops_device <- 253:16 0"),
                format!("{be}/{pod}/blkio.throttle.write_iops_device <- 253:32 512"),
                format!("{be}/{pod}/blkio.throttle.write_bps_device <- 253:16 0"),
            ]);
        }
        assert_eq!(got, want, "{:?}", decision.notes);
        let notes: Vec<&str> = decision.notes.iter().map(|n| n.text.as_str()).collect();
        assert!(
            notes
                .iter()
                .any(|n| n.contains("LSR class is not supported")),
            "{notes:?}"
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("LS class is not supported")),
            "{notes:?}"
        );

        // Converged: the kernel's own spelling of the same iocost values.
        let qos = parse_iocost("253:16 enable=1 ctrl=user rpct=90.00 rlat=1000 wpct=90.00 wlat=1000 min=1.00 max=10000.00").unwrap();
        assert!(iocost_converged(
            qos.get(&DeviceNumber {
                major: 253,
                minor: 16
            }),
            &want[9].replace("blkio.cost.qos <- ", "")
        ));
        assert!(!iocost_converged(None, "253:16 enable=1"));
        assert!(parse_iocost("253:16 enable").is_err());
    }

    #[test]
    fn iocost_unsupported_is_reported_and_stale_devices_disabled() {
        let root = BlockCfg {
            name: "vda".into(),
            block_type: Some(BlockType::Device),
            io_cfg: IOCfg::default(),
        };
        let mut snap = snapshot(true, vec![], &all_empty());
        let strategy = Arc::make_mut(snap.node_slo.as_mut().unwrap())
            .resource_qos_strategy
            .as_mut()
            .unwrap();
        strategy.cgroup_root = Some(ResourceQOS {
            blkio_qos: Some(BlkIOQOSCfg {
                enable: Some(true),
                blkio_qos: BlkIOQOS { blocks: vec![root] },
            }),
            ..ResourceQOS::default()
        });
        // No blk-iocost files (this kernel): reported, nothing written.
        let decision = BlkioReconcile::new(roots(), Arc::new(host_files())).decide_fresh(&snap);
        assert!(decision.file_writes.is_empty());
        assert!(
            decision
                .notes
                .iter()
                .any(|n| n.text.contains("iocost unsupported"))
        );
        // With them: defaults (upstream: 95th percentile, 3000 µs, auto model),
        // and a device no longer configured is disabled.
        let files = host_files()
            .with(
                "/sys/fs/cgroup/blkio/blkio.cost.qos",
                "8:0 enable=1 ctrl=user\n",
            )
            .with("/sys/fs/cgroup/blkio/blkio.cost.model", "");
        let decision = BlkioReconcile::new(roots(), Arc::new(files)).decide_fresh(&snap);
        assert_eq!(
            writes(&decision),
            [
                (
                    "blkio.cost.qos".to_string(),
                    "254:0 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000".to_string()
                ),
                (
                    "blkio.cost.model".to_string(),
                    "254:0 ctrl=auto".to_string()
                ),
                ("blkio.cost.qos".to_string(), "8:0 enable=0".to_string()),
            ]
        );
    }
}
