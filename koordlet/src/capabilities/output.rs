//! Rendering for `koordlet capabilities`: an aligned table whose row names
//! are the JSON paths, or the JSON object itself.

use std::collections::BTreeSet;

use super::{CapabilitiesReport, NRI_KEY, NodeCapabilities, OutputFormat};
use crate::statesinformer::cpumanager::{KubeletCpuManagerView, PolicySource};

/// Renders in the chosen format, ending with a newline.
pub fn render(caps: &NodeCapabilities, format: OutputFormat) -> Result<String, serde_json::Error> {
    match format {
        OutputFormat::Table => Ok(render_table(caps)),
        OutputFormat::Json => render_json(caps),
    }
}

/// The documented JSON object, pretty-printed.
pub fn render_json(caps: &NodeCapabilities) -> Result<String, serde_json::Error> {
    let mut text = serde_json::to_string_pretty(caps)?;
    text.push('\n');
    Ok(text)
}

/// Renders what `koordlet capabilities` prints: the matrix and the NRI
/// entry (JSON key `nri`, table rows `nri.*`), ending with a newline.
pub fn render_report(
    report: &CapabilitiesReport,
    format: OutputFormat,
) -> Result<String, serde_json::Error> {
    match format {
        OutputFormat::Table => {
            let mut rows = table_rows(&report.node);
            let nri = &report.nri;
            let nri_reason = report
                .node
                .reasons
                .get(NRI_KEY)
                .cloned()
                .unwrap_or_default();
            rows.extend([
                ("nri.socket", nri.socket.clone(), String::new()),
                ("nri.present", nri.present.to_string(), String::new()),
                ("nri.accepting", nri.accepting.to_string(), nri_reason),
                (
                    "nri.pluginEnabled",
                    nri.plugin_enabled.to_string(),
                    String::new(),
                ),
                (
                    "nri.pluginConnected",
                    nri.plugin_connected
                        .map_or_else(|| "unknown".to_string(), |c| c.to_string()),
                    nri.plugin_detail.clone(),
                ),
            ]);
            if let Some(kubelet) = &report.kubelet_cpu_manager {
                rows.extend(kubelet_rows(kubelet));
            }
            if let Some(devices) = &report.devices {
                rows.extend(devices.rows());
            }
            if let Some(network) = &report.network_qos {
                rows.push((
                    "networkQos",
                    network.supported.to_string(),
                    network.detail.clone(),
                ));
            }
            if let Some(reaction) = &report.cpu_reaction {
                rows.push((
                    "cpuReaction",
                    reaction.mechanism.clone(),
                    reaction.detail.clone(),
                ));
            }
            if let Some(volumes) = &report.blkio_volumes {
                rows.extend(volumes.rows());
            }
            if let Some(host_apps) = &report.host_applications {
                rows.push((
                    crate::runtimehooks::hostapp::HOST_APPLICATIONS_KEY,
                    host_apps.knobs(),
                    host_apps.detail.clone(),
                ));
            }
            Ok(format_rows(&rows))
        }
        OutputFormat::Json => {
            let mut text = serde_json::to_string_pretty(report)?;
            text.push('\n');
            Ok(text)
        }
    }
}

/// Rows `kubeletCpuManager.*`: the policy and where it came from, the
/// CPUs pinned to Guaranteed pods (which BE never gets under `static`).
fn kubelet_rows(kubelet: &KubeletCpuManagerView) -> Vec<(&'static str, String, String)> {
    let policy = if kubelet.policy.is_empty() {
        "unknown".to_string()
    } else {
        kubelet.policy.clone()
    };
    let source = match (&kubelet.source, &kubelet.checkpoint_path) {
        (PolicySource::Checkpoint, Some(path)) => path.clone(),
        (PolicySource::NodeAnnotation, _) => "Node annotation".to_string(),
        (_, Some(path)) => format!("no checkpoint at {path}; treated as none"),
        _ => "no kubelet directory; treated as none".to_string(),
    };
    let pinned = if kubelet.pinned_cpus.is_empty() {
        "none".to_string()
    } else {
        kubelet.pinned_cpus.to_string()
    };
    let mut rows = vec![
        ("kubeletCpuManager.policy", policy, source),
        (
            "kubeletCpuManager.pinnedCpus",
            pinned,
            kubelet.pinned_pods.join("; "),
        ),
    ];
    if !kubelet.problems.is_empty() {
        rows.push((
            "kubeletCpuManager.problems",
            kubelet.problems.len().to_string(),
            kubelet.problems.join("; "),
        ));
    }
    rows
}

/// One row per capability: `CAPABILITY  VALUE  REASON`.
pub fn render_table(caps: &NodeCapabilities) -> String {
    format_rows(&table_rows(caps))
}

/// `(JSON path, value, reason)` for each row of the node matrix.
fn table_rows(caps: &NodeCapabilities) -> Vec<(&'static str, String, String)> {
    let reason = |key: &str| caps.reasons.get(key).cloned().unwrap_or_default();
    let optional = |value: Option<String>| value.unwrap_or_else(|| "-".to_string());
    let cgroup = &caps.cgroup;
    let memory = &caps.memory_qos;
    // Present knobs by JSON name; the reason lists the missing files.
    let present: Vec<&str> = [
        ("min", memory.min),
        ("low", memory.low),
        ("high", memory.high),
        ("wmarkRatio", memory.wmark_ratio),
        ("wmarkScaleFactor", memory.wmark_scale_factor),
        ("wmarkMinAdj", memory.wmark_min_adj),
        ("priority", memory.priority),
        ("usePriorityOom", memory.use_priority_oom),
        ("oomGroup", memory.oom_group),
        ("pagecacheLimitEnable", memory.pagecache_limit_enable),
        ("pagecacheLimitSize", memory.pagecache_limit_size),
        ("pagecacheLimitSync", memory.pagecache_limit_sync),
    ]
    .into_iter()
    .filter_map(|(name, found)| found.then_some(name))
    .collect();
    let memory_knobs = if present.is_empty() {
        "none".to_string()
    } else {
        present.join(",")
    };

    vec![
        (
            "cgroup.version",
            cgroup.version.to_string(),
            cgroup.version_reason.clone(),
        ),
        (
            "cgroup.driver",
            cgroup.driver.to_string(),
            cgroup.driver_source.clone().map_or_else(
                || reason("cgroup.driver"),
                |source| format!("from {source}"),
            ),
        ),
        (
            "cgroup.controllers",
            cgroup.controllers.join(","),
            reason("cgroup.controllers"),
        ),
        (
            "cgroup.v1Controllers",
            cgroup.v1_controllers.join(","),
            String::new(),
        ),
        (
            "cgroup.v2Controllers",
            cgroup.v2_controllers.join(","),
            String::new(),
        ),
        (
            "cgroup.unifiedMount",
            cgroup.unified_mount.to_string(),
            optional(cgroup.unified_mount_path.clone()),
        ),
        ("cpuBurst", caps.cpu_burst.to_string(), reason("cpuBurst")),
        ("cpuIdle", caps.cpu_idle.to_string(), reason("cpuIdle")),
        ("psi", caps.psi.to_string(), reason("psi")),
        (
            "psiCgroup",
            caps.psi_cgroup.to_string(),
            caps.psi_cgroup_source
                .clone()
                .map_or_else(|| reason("psiCgroup"), |source| format!("in {source}")),
        ),
        (
            "coreSched",
            caps.core_sched.to_string(),
            reason("coreSched"),
        ),
        (
            "groupIdentity",
            caps.group_identity.to_string(),
            reason("groupIdentity"),
        ),
        (
            "resctrl.supported",
            caps.resctrl.supported.to_string(),
            reason("resctrl"),
        ),
        (
            "resctrl.cat",
            caps.resctrl.cat.to_string(),
            reason("resctrl.cat"),
        ),
        (
            "resctrl.mba",
            caps.resctrl.mba.to_string(),
            reason("resctrl.mba"),
        ),
        (
            "resctrl.closids",
            optional(caps.resctrl.closids.map(|n| n.to_string())),
            String::new(),
        ),
        (
            "resctrl.cbmMask",
            optional(caps.resctrl.cbm_mask.clone()),
            String::new(),
        ),
        ("smt", caps.smt.to_string(), reason("smt")),
        (
            "numaNodes",
            caps.numa_nodes.to_string(),
            reason("numaNodes"),
        ),
        ("cpus", caps.cpus.to_string(), reason("cpus")),
        ("cpuTopology", topology_summary(caps), reason("cpuTopology")),
        ("kernel", caps.kernel.clone(), reason("kernel")),
        ("memoryQos", memory_knobs, reason("memoryQos")),
    ]
}

/// Aligns the rows under a `CAPABILITY  VALUE  REASON` header.
fn format_rows(rows: &[(&str, String, String)]) -> String {
    let key_width = rows.iter().map(|(key, _, _)| key.len()).max().unwrap_or(0);
    let value_width = rows
        .iter()
        .map(|(_, value, _)| value.chars().count())
        .max()
        .unwrap_or(0);
    let mut text = format!(
        "{:key_width$}  {:value_width$}  REASON\n",
        "CAPABILITY", "VALUE"
    );
    for (key, value, reason) in rows {
        let line = format!("{key:key_width$}  {value:value_width$}  {reason}");
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn topology_summary(caps: &NodeCapabilities) -> String {
    let distinct = |ids: Vec<Option<u32>>| ids.into_iter().flatten().collect::<BTreeSet<_>>().len();
    let topology = &caps.cpu_topology;
    let sockets = distinct(topology.iter().map(|cpu| cpu.socket).collect());
    let cores = topology
        .iter()
        .filter_map(|cpu| Some((cpu.socket?, cpu.core?)))
        .collect::<BTreeSet<_>>()
        .len();
    let nodes = distinct(topology.iter().map(|cpu| cpu.node).collect());
    format!(
        "cpus={} sockets={sockets} cores={cores} nodes={nodes}",
        topology.len()
    )
}
