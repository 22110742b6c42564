//! Network QoS (upstream's `TCNetworkQoS` runtime hook plugin `tc`): egress
//! bandwidth of the node's uplink shared by QoS class with an HTB tree, pods
//! classified by their addresses with u32 filters. See `koordlet/docs/netqos.md`.
//!
//! - [`plan`]: the pure decision (NodeSLO + pods + interface speed → classes
//!   and per-IP filters);
//! - [`diff`]: the pure reconcile (read-back state + plan → bounded changes);
//! - [`netlink`]: the rtnetlink shell that reads back and applies;
//! - [`capability`]: whether this kernel has what it takes;
//! - [`metrics`]: what rounds decide and change, as Prometheus metrics.
//!
//! [`spawn`] runs rounds on a thread of their own while the gate is on.

pub mod capability;
pub mod diff;
pub mod metrics;
pub mod netlink;
pub mod plan;
pub mod report;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use apis::extension::constants::{ANNOTATION_NETWORK_QOS, LABEL_POD_QOS};
use apis::slo::v1alpha1::NodeSLOSpec;
use k8s_openapi::api::core::v1::Pod;

pub use diff::{ObservedTc, TcAction, TcChanges, reconcile, removal};
pub use metrics::NetQosMetrics;
pub use netlink::{NetlinkError, RouteSocket};
pub use plan::{NetQosDecision, NetQosPlan, NetQosPod, PodNetworkQos, decide};
pub use report::RoundReport;

/// Upstream's feature gate (default off).
pub const FEATURE: &str = "TCNetworkQoS";
pub const FEATURE_DEFAULT: bool = false;
/// Time between two rounds.
pub const ROUND_INTERVAL: Duration = Duration::from_secs(5);

/// The core's view of a pod; addresses that do not parse are skipped.
pub fn net_qos_pod(pod: &Pod) -> NetQosPod {
    let metadata = &pod.metadata;
    let key = format!(
        "{}/{}",
        metadata.namespace.as_deref().unwrap_or_default(),
        metadata.name.as_deref().unwrap_or_default()
    );
    let status = pod.status.as_ref();
    let mut ips: Vec<IpAddr> = Vec::new();
    let listed = status
        .and_then(|s| s.pod_ips.as_ref())
        .into_iter()
        .flatten()
        .map(|ip| ip.ip.as_str());
    for text in status
        .and_then(|s| s.pod_ip.as_deref())
        .into_iter()
        .chain(listed)
    {
        if let Ok(ip) = text.trim().parse::<IpAddr>()
            && !ips.contains(&ip)
        {
            ips.push(ip);
        }
    }
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or_default();
    NetQosPod {
        key,
        qos_label: metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(LABEL_POD_QOS))
            .cloned(),
        ips,
        host_network: pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false),
        terminated: matches!(phase, "Succeeded" | "Failed"),
        network_qos: PodNetworkQos::from_annotation(
            metadata
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(ANNOTATION_NETWORK_QOS))
                .map(String::as_str),
        ),
    }
}

/// The interface speed in Mbit/s from `<sys>/class/net/<name>/speed`;
/// `None` when unreadable or not positive (virtual interfaces say -1).
pub fn link_speed_mbps(sys_root: &Path, interface: &str) -> Option<u64> {
    if interface.is_empty() || interface.contains('/') || interface.len() > 64 {
        return None;
    }
    let path = sys_root.join("class/net").join(interface).join("speed");
    let mut text = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(std::fs::File::open(path).ok()?, 64),
        &mut text,
    )
    .ok()?;
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|v| *v > 0)
        .map(i64::unsigned_abs)
}

/// One round on the interface `ifindex`: decide, read back, change what
/// differs. Errors of single changes are collected, not fatal.
pub fn run_round(
    socket: &mut RouteSocket,
    ifindex: u32,
    spec: Option<&NodeSLOSpec>,
    pods: &[NetQosPod],
    link_speed_mbps: Option<u64>,
) -> Result<RoundReport, NetlinkError> {
    let decision = decide(spec, pods, link_speed_mbps);
    apply_decision(socket, ifindex, &decision)
}

/// Reads the uplink back and carries out `decision` on it.
pub fn apply_decision(
    socket: &mut RouteSocket,
    ifindex: u32,
    decision: &NetQosDecision,
) -> Result<RoundReport, NetlinkError> {
    let observed = socket.observe(ifindex)?;
    let changes = match decision {
        NetQosDecision::Apply(plan) => {
            for note in &plan.notes {
                tracing::info!(feature = FEATURE, "network QoS: {note}");
            }
            reconcile(&observed, plan)
        }
        NetQosDecision::Remove { reason } => {
            let changes = removal(&observed);
            if !changes.actions.is_empty() {
                tracing::info!(feature = FEATURE, "network QoS tree removed: {reason}");
            }
            changes
        }
        NetQosDecision::Leave { reason } => {
            return Ok(RoundReport {
                left: Some(reason.clone()),
                ..RoundReport::default()
            });
        }
    };
    let mut report = RoundReport {
        deferred: changes.deferred,
        ..RoundReport::default()
    };
    for action in &changes.actions {
        match socket.apply(ifindex, action) {
            Ok(()) => {
                tracing::debug!(feature = FEATURE, ?action, "network QoS change applied");
                report.applied += 1;
                *report.applied_by_kind.entry(action.kind()).or_insert(0) += 1;
            }
            Err(err) => {
                tracing::warn!(
                    feature = FEATURE,
                    ?action,
                    "network QoS change failed: {err}"
                );
                report.errors.push(err.to_string());
                *report.failed.entry(action.kind()).or_insert(0) += 1;
            }
        }
    }
    Ok(report)
}

/// Runs rounds every [`ROUND_INTERVAL`] on the default route's interface
/// until `shutdown`; the capability probe runs first and a node without
/// HTB or u32 only logs why.
pub fn spawn(
    states: crate::statesinformer::StatesInformer,
    proc_root: PathBuf,
    sys_root: PathBuf,
    metrics: NetQosMetrics,
    shutdown: koord_common::Shutdown,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("koordlet-netqos".to_string())
        .spawn(move || {
            let capability = capability::probe_host(&proc_root);
            metrics.record_capability(&capability);
            if !capability.supported {
                tracing::warn!(
                    feature = FEATURE,
                    "network QoS not supported here: {}",
                    capability.detail
                );
                return;
            }
            let mut socket = match RouteSocket::open() {
                Ok(socket) => socket,
                Err(err) => {
                    tracing::warn!(feature = FEATURE, "network QoS off: {err}");
                    return;
                }
            };
            while !shutdown.is_triggered() {
                round_on_uplink(&mut socket, &states, &sys_root, &metrics);
                std::thread::sleep(ROUND_INTERVAL);
            }
        })
}

fn round_on_uplink(
    socket: &mut RouteSocket,
    states: &crate::statesinformer::StatesInformer,
    sys_root: &Path,
    metrics: &NetQosMetrics,
) {
    let ifindex = match socket.default_route_link() {
        Ok(Some(index)) => index,
        Ok(None) => {
            tracing::debug!(
                feature = FEATURE,
                "no IPv4 default route: no uplink to shape"
            );
            metrics.record_failed_round();
            return;
        }
        Err(err) => {
            tracing::warn!(feature = FEATURE, "cannot find the uplink: {err}");
            metrics.record_failed_round();
            return;
        }
    };
    let speed = socket
        .link_name(ifindex)
        .ok()
        .and_then(|name| link_speed_mbps(sys_root, &name));
    let slo = states.node_slo();
    let pods: Vec<NetQosPod> = states
        .pods()
        .map(|snapshot| snapshot.pods.iter().map(net_qos_pod).collect())
        .unwrap_or_default();
    let decision = decide(slo.as_ref().map(|s| &s.spec), &pods, speed);
    metrics.record_decision(&decision);
    match apply_decision(socket, ifindex, &decision) {
        Ok(report) => {
            if !report.errors.is_empty() || report.deferred > 0 {
                tracing::warn!(
                    feature = FEATURE,
                    applied = report.applied,
                    deferred = report.deferred,
                    errors = report.errors.len(),
                    "network QoS round incomplete"
                );
            }
            metrics.record_round(&report);
        }
        Err(err) => {
            tracing::warn!(feature = FEATURE, "network QoS round failed: {err}");
            metrics.record_failed_round();
        }
    }
}

#[cfg(test)]
mod tests;
