//! QoS strategy `resctrl` (upstream `ResctrlReconcile`): the `LSR`, `LS`
//! and `BE` resctrl groups, their L3 CAT masks and MBA percentages from
//! `resourceQOSStrategy.<class>.resctrlQOS`, and their `tasks`.
//!
//! - L3 mask (upstream's formula): with `ways` = bit length of
//!   `info/L3/cbm_mask` (which must be contiguous from bit 0), the mask
//!   covers ways `[ceil(ways × start%), ceil(ways × end%))`; it must hold at
//!   least `info/L3/min_cbm_bits` bits. Every L3 domain of the root
//!   `schemata` gets the same mask.
//! - MBA: Intel rounds `mbaPercent` up to a multiple of 10; AMD expresses
//!   it as a bandwidth (100 % → 2048 = unlimited, else 160 × p ÷ 100).
//! - Tasks: threads of the containers of running or pending pods whose
//!   class has `resctrlQOS.enable`, and that have no pod-level
//!   `node.koordinator.sh/resctrl` annotation, are added to their class
//!   group (LSE and LSR share `LSR`); only threads not yet in the group are
//!   written.
//! - Upstream defaults (LSR/LS whole cache, BE the first 30 %, MBA 100 %)
//!   fill fields the NodeSLO leaves unset.
//!
//! The decision asks the runner to create the group directories in the
//! resctrl root ([`Decision::ensure_dir`]) before it writes their files; a
//! group the runner cannot create gets none of its writes. Without resctrl
//! the strategy reports "unsupported" through its required capability.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apis::configuration::defaults::default_resource_qos_strategy;
use apis::configuration::merge::merged;
use apis::extension::{ANNOTATION_RESCTRL, QoSClass};
use apis::slo::v1alpha1::{ResctrlQOSCfg, ResourceQOSStrategy};

use super::framework::FeatureGate;
use super::framework::{Capability, Decision, FileWrite, QosPod, QosSnapshot, ReadBack, Strategy};
use super::hostfiles::{FsHostFiles, HostFiles};
use crate::system::SystemArgs;
use crate::system::cgroup::CgroupResource;

pub const NAME: &str = "resctrl";
/// Upstream's feature gate (on by default).
pub const FEATURE: &str = "RdtResctrl";
/// The groups koordlet manages, in reconcile order.
pub const GROUPS: [&str; 3] = ["LSR", "LS", "BE"];
/// AMD's value for unlimited memory bandwidth.
pub const AMD_UNLIMITED_MB: i64 = 2048;
/// AMD per-CCD bandwidth upstream assumes (25 GB/s × 8 × 0.8).
pub const AMD_CCD_MAX_MB: f64 = 160.0;

/// The resctrl group of a pod's QoS class.
pub fn group_of(qos: QoSClass) -> Option<&'static str> {
    match qos {
        QoSClass::LSE | QoSClass::LSR => Some("LSR"),
        QoSClass::LS => Some("LS"),
        QoSClass::BE => Some("BE"),
        _ => None,
    }
}

/// The L3 CAT mask (hex) for `[start, end)` percent of the cache ways.
pub fn l3_mask(cbm: u64, min_cbm_bits: u32, start: i64, end: i64) -> Result<String, String> {
    // A full 64-way mask wraps to 0 here, which correctly reads as contiguous.
    if cbm == 0 || (cbm & cbm.wrapping_add(1)) != 0 {
        return Err(format!(
            "illegal cbm_mask {cbm:x}: the ways must be contiguous from bit 0"
        ));
    }
    if start < 0 || end > 100 || end <= start {
        return Err(format!("illegal L3 CAT range {start}%..{end}%"));
    }
    let ways = u64::from(64 - cbm.leading_zeros());
    let way_at = |percent: i64| (ways * percent as u64).div_ceil(100);
    let (first, last) = (way_at(start), way_at(end));
    let mask = ((1u128 << last) - (1u128 << first)) as u64;
    if mask.count_ones() < min_cbm_bits.max(1) {
        return Err(format!(
            "L3 CAT range {start}%..{end}% gives {} of {ways} ways, below min_cbm_bits {min_cbm_bits}",
            mask.count_ones()
        ));
    }
    Ok(format!("{mask:x}"))
}

/// The MB schemata value for `percent` on this vendor.
pub fn mba_value(percent: i64, amd: bool) -> Result<i64, String> {
    if !(1..=100).contains(&percent) {
        return Err(format!("mbaPercent {percent} is outside 1..=100"));
    }
    if amd {
        if percent == 100 {
            return Ok(AMD_UNLIMITED_MB);
        }
        return Ok((AMD_CCD_MAX_MB * percent as f64 / 100.0) as i64);
    }
    Ok((percent + 9) / 10 * 10)
}

/// `schemata` content: resource → domain id → value (values kept verbatim).
pub type Schemata = BTreeMap<String, BTreeMap<u32, String>>;

/// Parses a `schemata` file (`L3:0=fff;1=fff`, one resource a line).
pub fn parse_schemata(content: &str) -> Result<Schemata, String> {
    let mut schemata = Schemata::new();
    for line in content.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (resource, domains) = line
            .split_once(':')
            .ok_or_else(|| format!("malformed schemata line {line:?}"))?;
        let entry = schemata.entry(resource.trim().to_string()).or_default();
        for domain in domains.split(';').map(str::trim).filter(|d| !d.is_empty()) {
            let (id, value) = domain
                .split_once('=')
                .ok_or_else(|| format!("malformed schemata domain {domain:?}"))?;
            let id = id
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("malformed schemata domain id {id:?}"))?;
            entry.insert(id, value.trim().to_string());
        }
    }
    Ok(schemata)
}

/// Whether two mask/percent values are the same (hex masks compare as numbers).
fn same_value(resource: &str, a: &str, b: &str) -> bool {
    if resource.starts_with("L3") {
        return match (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
            (Ok(a), Ok(b)) => a == b,
            _ => a == b,
        };
    }
    a == b
}

/// Parses a list of thread ids (one a line, as `tasks` files hold them).
pub fn parse_task_ids(content: &str) -> Result<BTreeSet<u32>, String> {
    content
        .split_whitespace()
        .map(|id| {
            id.parse::<u32>()
                .map_err(|_| format!("malformed task id {id:?}"))
        })
        .collect()
}

/// What the resctrl filesystem offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResctrlInfo {
    /// `info/L3/cbm_mask` and `min_cbm_bits`; `None` without L3 CAT.
    pub l3: Option<(u64, u32)>,
    /// MBA is offered (`info/MB` exists).
    pub mba: bool,
    /// L3 (else MB) domain ids of the root `schemata`.
    pub domains: Vec<u32>,
    pub amd: bool,
}

/// The `resctrl` strategy.
pub struct ResctrlReconcile {
    gate: FeatureGate,
    roots: SystemArgs,
    files: Arc<dyn HostFiles>,
}

impl std::fmt::Debug for ResctrlReconcile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResctrlReconcile")
            .field("root", &self.roots.resctrl_root())
            .finish_non_exhaustive()
    }
}

impl ResctrlReconcile {
    pub fn new(roots: SystemArgs, files: Arc<dyn HostFiles>) -> Self {
        Self {
            gate: FeatureGate::on(FEATURE, true),
            roots,
            files,
        }
    }

    /// Applies parsed `--feature-gates` (upstream default: on).
    pub fn with_feature_gates(mut self, gates: &std::collections::BTreeMap<String, bool>) -> Self {
        self.gate = self.gate.from_gates(gates);
        self
    }

    pub fn on_host(roots: SystemArgs) -> Self {
        Self::new(roots, Arc::new(FsHostFiles))
    }

    fn root(&self) -> PathBuf {
        self.roots.resctrl_root()
    }

    /// Reads `info/` and the root `schemata`.
    pub fn info(&self) -> Result<ResctrlInfo, String> {
        let root = self.root();
        if !self.files.exists(&root.join("info")) {
            return Err(format!(
                "unsupported: resctrl is not mounted at {}",
                root.display()
            ));
        }
        let l3_dir = root.join("info/L3");
        let l3 = match self.files.read(&l3_dir.join("cbm_mask")) {
            None => None,
            Some(text) => {
                let cbm = u64::from_str_radix(text.trim(), 16)
                    .map_err(|_| format!("malformed {}/cbm_mask {text:?}", l3_dir.display()))?;
                let min_bits = match self.files.read(&l3_dir.join("min_cbm_bits")) {
                    Some(text) => text.trim().parse::<u32>().map_err(|_| {
                        format!("malformed {}/min_cbm_bits {text:?}", l3_dir.display())
                    })?,
                    None => 1,
                };
                Some((cbm, min_bits))
            }
        };
        let mba = self.files.exists(&root.join("info/MB"));
        let schemata_path = root.join("schemata");
        let schemata = self
            .files
            .read(&schemata_path)
            .ok_or_else(|| format!("cannot read {}", schemata_path.display()))?;
        let schemata = parse_schemata(&schemata)?;
        let domains: Vec<u32> = schemata
            .get("L3")
            .or_else(|| schemata.get("MB"))
            .map(|domains| domains.keys().copied().collect())
            .unwrap_or_default();
        if domains.is_empty() {
            return Err(format!(
                "{} lists no L3 or MB domain",
                schemata_path.display()
            ));
        }
        let amd = self
            .files
            .read(&self.roots.proc_root_dir.join("cpuinfo"))
            .is_some_and(|cpuinfo| cpuinfo.contains("AuthenticAMD"));
        Ok(ResctrlInfo {
            l3,
            mba,
            domains,
            amd,
        })
    }

    /// The schemata lines a group should have, per resource.
    fn desired_schemata(
        &self,
        group: &str,
        cfg: &ResctrlQOSCfg,
        info: &ResctrlInfo,
        decision: &mut Decision,
    ) -> Schemata {
        let mut desired = Schemata::new();
        let qos = &cfg.resctrl_qos;
        match (
            info.l3,
            qos.cat_range_start_percent,
            qos.cat_range_end_percent,
        ) {
            (Some((cbm, min_bits)), Some(start), Some(end)) => {
                match l3_mask(cbm, min_bits, start, end) {
                    Ok(mask) => {
                        desired.insert(
                            "L3".to_string(),
                            info.domains.iter().map(|id| (*id, mask.clone())).collect(),
                        );
                    }
                    Err(err) => decision.info(format!("group {group}: {err}")),
                }
            }
            (None, Some(_), Some(_)) => decision.info(format!(
                "group {group}: unsupported, no L3 CAT (info/L3 missing)"
            )),
            _ => {}
        }
        if let Some(percent) = qos.mba_percent {
            if !info.mba {
                decision.info(format!(
                    "group {group}: unsupported, no MBA (info/MB missing)"
                ));
            } else {
                match mba_value(percent, info.amd) {
                    Ok(value) => {
                        desired.insert(
                            "MB".to_string(),
                            info.domains
                                .iter()
                                .map(|id| (*id, value.to_string()))
                                .collect(),
                        );
                    }
                    Err(err) => decision.info(format!("group {group}: {err}")),
                }
            }
        }
        desired
    }

    /// Threads of `pod`'s containers (from their cgroup `tasks` files).
    fn pod_tasks(
        &self,
        snapshot: &QosSnapshot,
        pod: &QosPod,
        decision: &mut Decision,
    ) -> BTreeSet<u32> {
        let mut tasks = BTreeSet::new();
        for container in &pod.containers {
            let Some(dir) = &container.cgroup_dir else {
                continue;
            };
            let Ok(path) = snapshot.layout.file_path(dir, CgroupResource::Tasks) else {
                continue;
            };
            // A container that just stopped has no tasks file: nothing to add.
            let Some(content) = self.files.read(&path) else {
                continue;
            };
            match parse_task_ids(&content) {
                Ok(ids) => tasks.extend(ids),
                Err(err) => decision.info(format!("{}: {err}", path.display())),
            }
        }
        tasks
    }
}

fn class_cfg<'a>(strategy: &'a ResourceQOSStrategy, group: &str) -> Option<&'a ResctrlQOSCfg> {
    let class = match group {
        "LSR" => strategy.lsr_class.as_ref(),
        "LS" => strategy.ls_class.as_ref(),
        _ => strategy.be_class.as_ref(),
    };
    class?.resctrl_qos.as_ref()
}

fn is_active(pod: &QosPod) -> bool {
    matches!(pod.phase.as_str(), "Running" | "Pending")
}

impl Strategy for ResctrlReconcile {
    type State = ();

    fn name(&self) -> &'static str {
        NAME
    }

    fn interval(&self, snapshot: &QosSnapshot) -> Duration {
        snapshot.config.reconcile_interval
    }

    fn required_capabilities(&self) -> &'static [Capability] {
        &[Capability::Resctrl]
    }

    fn decide(&self, snapshot: &QosSnapshot, _: &()) -> (Decision, ()) {
        (self.reconcile(snapshot), ())
    }
}

impl ResctrlReconcile {
    /// The round's resctrl groups and writes (no state between rounds).
    fn reconcile(&self, snapshot: &QosSnapshot) -> Decision {
        if let Err(off) = self.gate.check() {
            return Decision::skipped(off);
        }
        let Some(configured) = snapshot
            .node_slo
            .as_ref()
            .and_then(|spec| spec.resource_qos_strategy.clone())
        else {
            return Decision::skipped("no NodeSLO resourceQOSStrategy");
        };
        let strategy = merged(&default_resource_qos_strategy(), &configured);
        let info = match self.info() {
            Ok(info) => info,
            Err(err) => return Decision::skipped(err),
        };
        let root = self.root();
        let mut decision = Decision::default();
        for group in GROUPS {
            decision.ensure_dir(root.join(group), format!("{group} resctrl group"));
        }
        for group in GROUPS {
            let Some(cfg) = class_cfg(&strategy, group) else {
                continue;
            };
            let desired = self.desired_schemata(group, cfg, &info, &mut decision);
            let path = root.join(group).join("schemata");
            let current = match self.files.read(&path).map(|text| parse_schemata(&text)) {
                Some(Ok(current)) => current,
                Some(Err(err)) => {
                    decision.info(format!("{}: {err}", path.display()));
                    Schemata::new()
                }
                None => Schemata::new(),
            };
            // One write per group: the kernel takes several schemata lines
            // at once, and a group's file is then replaced as a whole.
            let mut lines = Vec::new();
            for (resource, domains) in &desired {
                let converged = domains.iter().all(|(id, value)| {
                    current
                        .get(resource)
                        .and_then(|have| have.get(id))
                        .is_some_and(|have| same_value(resource, have, value))
                });
                if converged {
                    continue;
                }
                let line: Vec<String> = domains
                    .iter()
                    .map(|(id, value)| format!("{id}={value}"))
                    .collect();
                lines.push(format!("{resource}:{}", line.join(";")));
            }
            if !lines.is_empty() {
                decision.file_writes.push(FileWrite {
                    path: path.clone(),
                    value: lines.join("\n"),
                    reason: format!("{group} class resctrlQOS"),
                    read_back: ReadBack::None,
                });
            }
        }
        // Tasks: only threads not already in their group.
        let mut wanted: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        for pod in snapshot.pods.iter().filter(|pod| is_active(pod)) {
            let Some(group) = group_of(pod.qos) else {
                continue;
            };
            if class_cfg(&strategy, group).and_then(|cfg| cfg.enable) != Some(true) {
                continue;
            }
            let pod_level = snapshot
                .kube_pod(pod)
                .and_then(|kube| kube.metadata.annotations.as_ref())
                .is_some_and(|annotations| annotations.contains_key(ANNOTATION_RESCTRL));
            if pod_level {
                continue;
            }
            let tasks = self.pod_tasks(snapshot, pod, &mut decision);
            wanted.entry(group).or_default().extend(tasks);
        }
        for (group, tasks) in wanted {
            let path = root.join(group).join("tasks");
            let present = self
                .files
                .read(&path)
                .and_then(|text| parse_task_ids(&text).ok())
                .unwrap_or_default();
            let new: Vec<String> = tasks.difference(&present).map(u32::to_string).collect();
            if new.is_empty() {
                continue;
            }
            decision.info(format!("group {group}: adding {} threads", new.len()));
            decision.file_writes.push(FileWrite {
                path,
                value: new.join("\n"),
                reason: format!("{group} class resctrlQOS tasks"),
                read_back: ReadBack::None,
            });
        }
        if decision.file_writes.is_empty() && decision.notes.is_empty() {
            decision.info("resctrl groups are converged");
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qosmanager::framework::QosContainer;
    use crate::qosmanager::framework::testing::{DecideFresh, assert_deterministic};
    use crate::qosmanager::hostfiles::MapHostFiles;
    use crate::qosmanager::memoryevict::test_pods::{pod, t0};
    use apis::slo::v1alpha1::{NodeSLOSpec, ResctrlQOS, ResourceQOS};
    use std::path::Path;

    #[test]
    fn l3_masks_follow_upstream_examples() {
        // Upstream's documented cases.
        assert_eq!(l3_mask(0x3ff, 1, 10, 80).unwrap(), "fe");
        assert_eq!(l3_mask(0x7ff, 1, 10, 50).unwrap(), "3c");
        assert_eq!(l3_mask(0x7ff, 1, 0, 30).unwrap(), "f");
        assert_eq!(l3_mask(0xfff, 1, 0, 100).unwrap(), "fff");
        // A 64-way mask: no overflow, and the whole range is every way.
        assert_eq!(l3_mask(u64::MAX, 1, 0, 100).unwrap(), "ffffffffffffffff");
        assert_eq!(l3_mask(u64::MAX, 1, 50, 100).unwrap(), "ffffffff00000000");
        assert!(
            l3_mask(0xf0, 1, 0, 100).is_err(),
            "non-contiguous from bit 0"
        );
        assert!(l3_mask(0xfff, 1, 50, 50).is_err());
        assert!(l3_mask(0xfff, 1, 0, 101).is_err());
        // 12 ways, 0..10 % → one way; min_cbm_bits 2 rejects it.
        assert_eq!(l3_mask(0xfff, 1, 0, 10).unwrap(), "3");
        assert!(
            l3_mask(0xfff, 3, 0, 10)
                .unwrap_err()
                .contains("min_cbm_bits")
        );
    }

    #[test]
    fn mba_rounds_for_intel_and_scales_for_amd() {
        assert_eq!(mba_value(100, false), Ok(100));
        assert_eq!(mba_value(35, false), Ok(40));
        assert_eq!(mba_value(30, false), Ok(30));
        assert_eq!(mba_value(100, true), Ok(2048));
        assert_eq!(mba_value(50, true), Ok(80));
        assert!(mba_value(0, false).is_err());
        assert!(mba_value(101, true).is_err());
    }

    #[test]
    fn schemata_and_tasks_parse_strictly() {
        let parsed = parse_schemata("    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n").unwrap();
        assert_eq!(parsed["L3"][&1], "7ff");
        assert_eq!(parsed["MB"][&0], "100");
        assert!(parse_schemata("L3 0=7ff").is_err());
        assert!(parse_schemata("L3:x=7ff").is_err());
        assert_eq!(parse_task_ids("1\n2\n").unwrap().len(), 2);
        assert!(parse_task_ids("1 x").is_err());
    }

    /// A resctrl tree with 12 L3 ways on two domains, MBA, an Intel CPU.
    fn tree() -> MapHostFiles {
        MapHostFiles::default()
            .with("/host/sys/fs/resctrl/info/L3/cbm_mask", "fff\n")
            .with("/host/sys/fs/resctrl/info/L3/min_cbm_bits", "1\n")
            .with("/host/sys/fs/resctrl/info/MB/min_bandwidth", "10\n")
            .with(
                "/host/sys/fs/resctrl/schemata",
                "L3:0=fff;1=fff\nMB:0=100;1=100\n",
            )
            .with("/host/proc/cpuinfo", "vendor_id\t: GenuineIntel\n")
    }

    fn snapshot(be: ResctrlQOS, be_enabled: bool) -> QosSnapshot {
        let mut snapshot = QosSnapshot::for_test(t0());
        snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
            resource_qos_strategy: Some(ResourceQOSStrategy {
                be_class: Some(ResourceQOS {
                    resctrl_qos: Some(ResctrlQOSCfg {
                        enable: Some(be_enabled),
                        resctrl_qos: be,
                    }),
                    ..ResourceQOS::default()
                }),
                ..ResourceQOSStrategy::default()
            }),
            ..NodeSLOSpec::default()
        }));
        snapshot
    }

    fn strategy(files: MapHostFiles) -> ResctrlReconcile {
        let roots = SystemArgs::under(Path::new("/host"));
        ResctrlReconcile::new(roots, Arc::new(files))
    }

    /// The directories the decision asks the runner to create, relative to
    /// the resctrl root.
    fn dirs(decision: &Decision) -> Vec<String> {
        decision
            .dirs
            .iter()
            .map(|d| {
                let rel = d.path.strip_prefix("/host/sys/fs/resctrl").unwrap();
                rel.display().to_string()
            })
            .collect()
    }

    fn writes(decision: &Decision) -> Vec<(String, String)> {
        decision
            .file_writes
            .iter()
            .map(|w| {
                let rel = w.path.strip_prefix("/host/sys/fs/resctrl").unwrap();
                (rel.display().to_string(), w.value.clone())
            })
            .collect()
    }

    #[test]
    fn groups_get_masks_and_mba_with_upstream_defaults_filled_in() {
        let strategy = strategy(tree());
        let be = ResctrlQOS {
            cat_range_start_percent: Some(0),
            cat_range_end_percent: Some(30),
            mba_percent: Some(35),
        };
        // Decided twice on the same inputs: the same groups and writes.
        let decision = assert_deterministic(&strategy, &snapshot(be, true), &()).0;
        assert_eq!(dirs(&decision), ["LSR", "LS", "BE"]);
        // LSR and LS keep the default whole cache and 100 % MBA; BE gets
        // ceil(12 × 0.3) = 4 ways and 35 % rounded up to 40.
        assert_eq!(
            writes(&decision),
            [
                (
                    "LSR/schemata".to_string(),
                    "L3:0=fff;1=fff\nMB:0=100;1=100".to_string()
                ),
                (
                    "LS/schemata".to_string(),
                    "L3:0=fff;1=fff\nMB:0=100;1=100".to_string()
                ),
                (
                    "BE/schemata".to_string(),
                    "L3:0=f;1=f\nMB:0=40;1=40".to_string()
                ),
            ]
        );
    }

    #[test]
    fn converged_groups_write_nothing_and_new_threads_are_added() {
        let files = tree()
            .with(
                "/host/sys/fs/resctrl/LSR/schemata",
                "    L3:0=fff;1=fff\n    MB:0=100;1=100\n",
            )
            .with(
                "/host/sys/fs/resctrl/LS/schemata",
                "L3:0=0fff;1=fff\nMB:0=100;1=100\n",
            )
            .with(
                "/host/sys/fs/resctrl/BE/schemata",
                "L3:0=f;1=f\nMB:0=100;1=100\n",
            )
            .with("/host/sys/fs/resctrl/BE/tasks", "100\n")
            .with(
                "/sys/fs/cgroup/cpu/kubepods/besteffort/podbe/c1/tasks",
                "100\n101\n",
            )
            .with(
                "/sys/fs/cgroup/cpu/kubepods/besteffort/podbe/c2/tasks",
                "102\n",
            );
        let strategy = strategy(files);
        let be = ResctrlQOS {
            cat_range_start_percent: Some(0),
            cat_range_end_percent: Some(30),
            mba_percent: Some(100),
        };
        let mut snap = snapshot(be, true);
        let mut be_pod = pod("be", QoSClass::BE, 5500);
        for name in ["c1", "c2", "c3"] {
            be_pod.containers.push(QosContainer {
                name: name.to_string(),
                id: None,
                // c3 has not started: no cgroup yet.
                cgroup_dir: (name != "c3")
                    .then(|| PathBuf::from(format!("kubepods/besteffort/podbe/{name}"))),
                cpu_request: None,
                cpu_limit: None,
                memory_request: None,
                memory_limit: None,
                cpu_usage: None,
                memory_usage: None,
            });
        }
        let mut finished = be_pod.clone();
        finished.uid = "done".into();
        finished.phase = "Succeeded".into();
        snap.pods = vec![be_pod.clone(), finished];
        let decision = strategy.decide_fresh(&snap);
        assert_eq!(
            writes(&decision),
            [("BE/tasks".to_string(), "101\n102".to_string())],
            "{decision:?}"
        );
        // BE resctrl disabled: schemata still managed, no tasks moved.
        let mut disabled = snapshot(
            ResctrlQOS {
                cat_range_start_percent: Some(0),
                cat_range_end_percent: Some(30),
                mba_percent: Some(100),
            },
            false,
        );
        disabled.pods = vec![be_pod];
        assert!(strategy.decide_fresh(&disabled).file_writes.is_empty());
    }

    #[test]
    fn missing_resctrl_or_features_are_reported() {
        let no_mount = strategy(MapHostFiles::default());
        let decision = no_mount.decide_fresh(&snapshot(ResctrlQOS::default(), true));
        assert!(
            decision
                .skip_reason()
                .unwrap()
                .contains("unsupported: resctrl is not mounted")
        );
        assert!(
            decision.dirs.is_empty(),
            "no group is created without resctrl"
        );

        let mba_only = MapHostFiles::default()
            .with("/host/sys/fs/resctrl/info/MB/min_bandwidth", "10\n")
            .with("/host/sys/fs/resctrl/schemata", "MB:0=100\n");
        let strategy = strategy(mba_only);
        let be = ResctrlQOS {
            cat_range_start_percent: Some(0),
            cat_range_end_percent: Some(30),
            mba_percent: Some(50),
        };
        let decision = strategy.decide_fresh(&snapshot(be, true));
        assert!(decision.notes.iter().any(|n| n.text.contains("no L3 CAT")));
        assert!(writes(&decision).contains(&("BE/schemata".to_string(), "MB:0=50".to_string())));

        let no_slo = no_mount.decide_fresh(&QosSnapshot::for_test(t0()));
        assert!(
            no_slo
                .skip_reason()
                .unwrap()
                .contains("resourceQOSStrategy")
        );
    }

    #[test]
    fn feature_gate_defaults_on_and_can_be_turned_off() {
        use std::collections::BTreeMap;
        let on = strategy(tree());
        let on = on.with_feature_gates(&BTreeMap::new());
        assert!(
            !on.decide_fresh(&snapshot(ResctrlQOS::default(), true))
                .file_writes
                .is_empty()
        );
        let off = strategy(tree());
        let off = off.with_feature_gates(&BTreeMap::from([("RdtResctrl".to_string(), false)]));
        let decision = off.decide_fresh(&snapshot(ResctrlQOS::default(), true));
        assert!(decision.skip_reason().unwrap().contains("RdtResctrl"));
        assert!(decision.dirs.is_empty(), "no group is created when off");
    }

    #[test]
    fn amd_bandwidth_from_cpuinfo() {
        let files = tree().with("/host/proc/cpuinfo", "vendor_id\t: AuthenticAMD\n");
        let strategy = strategy(files);
        let be = ResctrlQOS {
            cat_range_start_percent: None,
            cat_range_end_percent: None,
            mba_percent: Some(50),
        };
        let decision = strategy.decide_fresh(&snapshot(be, true));
        assert!(
            writes(&decision)
                .iter()
                .any(|(file, value)| file == "BE/schemata" && value.contains("MB:0=80;1=80"))
        );
    }
}
