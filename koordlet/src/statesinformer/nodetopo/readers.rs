//! The readers behind [`NodeHardware`]: the CPU topology and per-NUMA memory
//! below the sys root, the CPU basic info (`/proc/cpuinfo`, turbo, L3 CBM
//! mask) and the kubelet's CPU manager checkpoint. Every file read is
//! bounded; an optional input that cannot be read becomes a problem.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use apis::extension::CPUBasicInfo;

use super::pools::{NodeHardware, NodeTopologyError};
use crate::metricsadvisor::read_cpu_topology;
use crate::statesinformer::cpumanager::read_cpu_manager_checkpoint;
use crate::system::SystemArgs;
use koord_common::units::CpuTopology;

/// Reads the CPU topology and the per-NUMA memory below `sys_root`.
pub fn read_node_hardware(sys_root: &Path) -> Result<NodeHardware, NodeTopologyError> {
    let cpus = read_cpu_topology(sys_root)?;
    read_numa_memory(sys_root, cpus)
}

/// [`read_node_hardware`] (or [`read_numa_memory`] over a known topology)
/// plus the CPU basic info (below the `/proc`, `/sys` and resctrl roots of
/// `system`) and the kubelet checkpoint below `kubelet_root`; a checkpoint
/// that cannot be read becomes a problem, not a failure.
pub fn read_node_facts(
    system: &SystemArgs,
    kubelet_root: &Path,
    known_cpus: Option<CpuTopology>,
) -> Result<NodeHardware, NodeTopologyError> {
    let sys_root = &system.sys_root_dir;
    let mut hardware = match known_cpus {
        Some(cpus) => read_numa_memory(sys_root, cpus)?,
        None => read_node_hardware(sys_root)?,
    };
    hardware.cpu_basic_info = read_cpu_basic_info(
        &system.proc_root_dir,
        sys_root,
        &system.resctrl_root(),
        &hardware.cpus,
    );
    match read_cpu_manager_checkpoint(kubelet_root) {
        Ok(checkpoint) => hardware.kubelet_cpu_manager = checkpoint,
        Err(err) => hardware.problems.push(err.to_string()),
    }
    Ok(hardware)
}

/// Path of the intel_pstate turbo switch below the sys root.
pub const INTEL_PSTATE_NO_TURBO: &str = "devices/system/cpu/intel_pstate/no_turbo";
/// Path of the L3 capacity bit mask below the resctrl root.
pub const RESCTRL_L3_CBM_MASK: &str = "info/L3/cbm_mask";
/// Lines of `/proc/cpuinfo` looked at: the first processor's block is
/// enough (every processor repeats model and vendor), and reading stops
/// early because the kernel formats the file on demand, per CPU.
const CPUINFO_MAX_LINES: usize = 256;
/// Longest model or vendor string taken from `/proc/cpuinfo`.
const CPUINFO_MAX_VALUE_LEN: usize = 256;
/// A CBM mask fits 64 bits (the runtime hooks parse it as a `u64`).
const CBM_MASK_MAX_HEX_DIGITS: usize = 16;

/// The `node.koordinator.sh/cpu-basic-info` value. Every part that cannot
/// be read is left empty (false) and logged at debug; nothing fails.
pub fn read_cpu_basic_info(
    proc_root: &Path,
    sys_root: &Path,
    resctrl_root: &Path,
    topology: &CpuTopology,
) -> CPUBasicInfo {
    let identity = read_cpu_identity(&proc_root.join("cpuinfo"));
    CPUBasicInfo {
        cpu_model: identity.model.unwrap_or_default(),
        hyper_thread_enabled: hyper_threading_enabled(topology),
        turbo_enabled: read_turbo_enabled(&sys_root.join(INTEL_PSTATE_NO_TURBO)),
        cat_l3_cbm_mask: read_l3_cbm_mask(&resctrl_root.join(RESCTRL_L3_CBM_MASK))
            .unwrap_or_default(),
        vendor_id: identity.vendor.unwrap_or_default(),
    }
}

/// Model name and vendor of the first processor in `/proc/cpuinfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuIdentity {
    pub model: Option<String>,
    pub vendor: Option<String>,
}

/// A `/proc/cpuinfo` value as reported: trimmed, non-empty, printable and
/// of sane length.
fn cpuinfo_value(value: &str) -> Option<String> {
    let value = value.trim();
    let valid = !value.is_empty()
        && value.len() <= CPUINFO_MAX_VALUE_LEN
        && !value.chars().any(char::is_control);
    valid.then(|| value.to_string())
}

/// Parses the first processor block of `/proc/cpuinfo` (lines up to the
/// first blank line after content): `model name` (some kernels spell it
/// `Model Name`) and `vendor_id`. Invalid values are left out.
pub fn parse_cpu_identity<I, S>(lines: I) -> CpuIdentity
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut identity = CpuIdentity::default();
    let mut in_block = false;
    for line in lines.into_iter().take(CPUINFO_MAX_LINES) {
        let line = line.as_ref();
        if line.trim().is_empty() {
            if in_block {
                break;
            }
            continue;
        }
        in_block = true;
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim();
        if key.eq_ignore_ascii_case("model name") && identity.model.is_none() {
            identity.model = cpuinfo_value(value);
        } else if key == "vendor_id" && identity.vendor.is_none() {
            identity.vendor = cpuinfo_value(value);
        }
        if identity.model.is_some() && identity.vendor.is_some() {
            break;
        }
    }
    identity
}

/// Reads [`CpuIdentity`] from `path` (`<proc-root>/cpuinfo`), stopping after
/// the first processor's block.
pub fn read_cpu_identity(path: &Path) -> CpuIdentity {
    use std::io::BufRead as _;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) => {
            tracing::debug!(path = %path.display(), %error, "cpu basic info: no model or vendor");
            return CpuIdentity::default();
        }
    };
    let mut failure = None;
    let lines = std::io::BufReader::new(file)
        .split(b'\n')
        .map_while(|line| match line {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(error) => {
                failure = Some(error);
                None
            }
        });
    let identity = parse_cpu_identity(lines);
    if let Some(error) = failure {
        tracing::debug!(path = %path.display(), %error, "cpu basic info: cpuinfo read stopped");
    }
    if identity.model.is_none() {
        tracing::debug!(path = %path.display(), "cpu basic info: no valid model name");
    }
    if identity.vendor.is_none() {
        tracing::debug!(path = %path.display(), "cpu basic info: no valid vendor_id");
    }
    identity
}

/// Whether any physical core (socket, core id) runs more than one CPU.
pub fn hyper_threading_enabled(topology: &CpuTopology) -> bool {
    let mut threads: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for cpu in &topology.cpus {
        *threads.entry((cpu.socket, cpu.core)).or_default() += 1;
    }
    threads.values().any(|count| *count > 1)
}

/// Turbo from intel_pstate's `no_turbo` (`0`: turbo on). Other drivers
/// expose no such switch: absent, unreadable or malformed counts as off,
/// as upstream.
pub fn read_turbo_enabled(no_turbo: &Path) -> bool {
    let text = match std::fs::read_to_string(no_turbo) {
        Ok(text) => text,
        Err(error) => {
            tracing::debug!(path = %no_turbo.display(), %error, "cpu basic info: turbo counted as off");
            return false;
        }
    };
    match text.trim().parse::<i64>() {
        Ok(value) => value == 0,
        Err(_) => {
            tracing::debug!(path = %no_turbo.display(), content = %text.trim(), "cpu basic info: malformed no_turbo, turbo counted as off");
            false
        }
    }
}

/// The L3 capacity bit mask (hex, as the kernel prints it) from resctrl's
/// `info/L3/cbm_mask`; `None` without resctrl L3 CAT or when malformed.
pub fn read_l3_cbm_mask(path: &Path) -> Option<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            tracing::debug!(path = %path.display(), %error, "cpu basic info: no L3 CBM mask");
            return None;
        }
    };
    let mask = text.trim();
    let valid = !mask.is_empty()
        && mask.len() <= CBM_MASK_MAX_HEX_DIGITS
        && mask.chars().all(|c| c.is_ascii_hexdigit());
    if !valid {
        tracing::debug!(path = %path.display(), content = %mask, "cpu basic info: malformed L3 CBM mask");
        return None;
    }
    Some(mask.to_string())
}

/// Adds the memory of each NUMA node of `cpus` (`node<N>/meminfo` below
/// `sys_root`); nodes without a meminfo file (no NUMA support) are left out.
pub fn read_numa_memory(
    sys_root: &Path,
    cpus: CpuTopology,
) -> Result<NodeHardware, NodeTopologyError> {
    let node_root = sys_root.join("devices/system/node");
    let mut numa_memory_bytes = BTreeMap::new();
    let nodes: BTreeSet<u32> = cpus.cpus.iter().map(|cpu| cpu.node).collect();
    for node in nodes {
        let path = node_root.join(format!("node{node}/meminfo"));
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(NodeTopologyError::Read { path, source }),
        };
        let info = crate::metricsadvisor::parse::parse_numa_meminfo(&text).map_err(|err| {
            NodeTopologyError::Malformed {
                path: path.clone(),
                reason: err.to_string(),
            }
        })?;
        numa_memory_bytes.insert(node, info.total);
    }
    Ok(NodeHardware {
        cpus,
        numa_memory_bytes,
        ..NodeHardware::default()
    })
}
