//! The decision core of network QoS: NodeSLO + pods + the uplink's speed in,
//! the desired HTB tree and per-pod-IP u32 filters out. No I/O, no clock.
//!
//! Facts taken from upstream's `runtimehooks/hooks/tc` plugin:
//! - qdisc `1:0` (HTB) at the root of the uplink, default class `1:2`;
//! - class `1:1` under the root, rate = ceil = total bandwidth;
//! - `1:2` system (prio 1), `1:3` LS (prio 2), `1:4` BE (prio 3), each under
//!   `1:1`; LS and BE take rate/ceil from `egressRequest`/`egressLimit`, the
//!   system class gets what the two requests leave (ceil = total);
//! - LSE, LSR and LS pods share the LS class; pods without a
//!   `koordinator.sh/qosClass` label are not classified (their traffic falls
//!   into the default, system, class);
//! - a percentage (integer) outside 0..=100 and an unparsable quantity count
//!   as 0; bandwidth values are bits per second (upstream divides by 8 for
//!   the kernel's bytes per second).

use std::collections::BTreeMap;
use std::net::IpAddr;

use apis::extension::QuantityValue;
use apis::slo::v1alpha1::{NETQOSPolicy, NetworkQOS, NetworkQOSCfg, NodeSLOSpec, ResourceQOS};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Major number of every handle this feature owns (upstream `MAJOR_ID`).
pub const MAJOR: u16 = 1;
/// HTB qdisc `1:0` (upstream `QDISC_MINOR_ID`).
pub const QDISC_MINOR: u16 = 0;
/// Upstream's class minors.
pub const ROOT_CLASS_MINOR: u16 = 1;
pub const SYSTEM_CLASS_MINOR: u16 = 2;
pub const LS_CLASS_MINOR: u16 = 3;
pub const BE_CLASS_MINOR: u16 = 4;
/// HTB priorities (lower is served first), upstream's values.
pub const SYSTEM_CLASS_PRIO: u32 = 1;
pub const LS_CLASS_PRIO: u32 = 2;
pub const BE_CLASS_PRIO: u32 = 3;
/// Filter priority of the IPv4 pod filters (upstream `POD_FILTER_PRIO`).
pub const POD_FILTER_PRIO_V4: u16 = 4;
/// Filter priority of the IPv6 pod filters (ours: one tc priority holds one
/// protocol, so IPv6 needs its own).
pub const POD_FILTER_PRIO_V6: u16 = 5;
/// HTB's rate-to-quantum divisor (the `tc` default, which upstream keeps).
pub const RATE_TO_QUANTUM: u32 = 10;
/// The frame size upstream adds to a class's burst, in bytes.
pub const BURST_MTU_BYTES: u64 = 1600;
/// Timer frequency upstream's burst formula divides the rate by.
pub const BURST_HZ: u64 = 1000;
/// The smallest rate given to a class with no guarantee: HTB refuses a rate
/// of 0, and 8 kbit/s is no guarantee in practice.
pub const MIN_CLASS_RATE_BPS: u64 = 8_000;
/// HTB's quantum bounds (the kernel warns outside them).
pub const MIN_QUANTUM_BYTES: u32 = 1_000;
pub const MAX_QUANTUM_BYTES: u32 = 200_000;
/// At most this many pod-IP filters are planned (bounded work per round).
pub const MAX_POD_FILTERS: usize = 4096;

/// The kernel's handle of "the root" as a parent (`TC_H_ROOT`).
pub const TC_H_ROOT: u32 = 0xFFFF_FFFF;

/// tc handle `major:minor` as the kernel packs it.
pub const fn handle(major: u16, minor: u16) -> u32 {
    ((major as u32) << 16) | minor as u32
}

/// The network QoS class of a pod (upstream `NetQoSClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetQosClass {
    System,
    Ls,
    Be,
}

impl NetQosClass {
    /// From the `koordinator.sh/qosClass` label value; `None` for no or an
    /// unknown label (upstream `GetPodNetQoSClassByName`).
    pub fn from_label(label: &str) -> Option<Self> {
        match label {
            "SYSTEM" => Some(Self::System),
            "LSE" | "LSR" | "LS" => Some(Self::Ls),
            "BE" => Some(Self::Be),
            _ => None,
        }
    }

    pub const fn minor(self) -> u16 {
        match self {
            Self::System => SYSTEM_CLASS_MINOR,
            Self::Ls => LS_CLASS_MINOR,
            Self::Be => BE_CLASS_MINOR,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::Ls => "ls",
            Self::Be => "be",
        }
    }
}

/// What the core needs of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetQosPod {
    /// `namespace/name`, for notes.
    pub key: String,
    /// The raw `koordinator.sh/qosClass` label.
    pub qos_label: Option<String>,
    /// `status.podIPs` (and `status.podIP`), parsed; unparsable ones are
    /// dropped by the adapter with a note.
    pub ips: Vec<IpAddr>,
    /// `spec.hostNetwork`: the pod's traffic carries the node's address,
    /// which a per-IP filter cannot tell apart.
    pub host_network: bool,
    /// Succeeded or Failed: its IPs may already belong to another pod.
    pub terminated: bool,
}

/// Rate (guarantee) and ceil (limit) of one direction, bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateCeil {
    pub rate_bps: u64,
    pub ceil_bps: u64,
}

/// One HTB class to keep on the uplink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HtbClassSpec {
    pub minor: u16,
    /// Parent handle: [`TC_H_ROOT`] for the root class, else `1:1`.
    pub parent: u32,
    pub rate_bps: u64,
    pub ceil_bps: u64,
    pub prio: u32,
    pub quantum_bytes: u32,
    pub burst_bytes: u64,
    pub cburst_bytes: u64,
}

impl HtbClassSpec {
    fn new(minor: u16, parent: u32, limits: RateCeil, prio: u32) -> Self {
        let rate_bytes = limits.rate_bps / 8;
        let ceil_bytes = limits.ceil_bps / 8;
        let quantum = (rate_bytes / u64::from(RATE_TO_QUANTUM))
            .clamp(u64::from(MIN_QUANTUM_BYTES), u64::from(MAX_QUANTUM_BYTES));
        Self {
            minor,
            parent,
            rate_bps: limits.rate_bps,
            ceil_bps: limits.ceil_bps,
            prio,
            quantum_bytes: u32::try_from(quantum).unwrap_or(MAX_QUANTUM_BYTES),
            burst_bytes: rate_bytes / BURST_HZ + BURST_MTU_BYTES,
            cburst_bytes: ceil_bytes / BURST_HZ + BURST_MTU_BYTES,
        }
    }

    pub fn handle(&self) -> u32 {
        handle(MAJOR, self.minor)
    }
}

/// One u32 filter: packets whose source is `ip` go to class `1:<minor>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodIpFilter {
    pub ip: IpAddr,
    pub class: NetQosClass,
    /// The pod this address belongs to (`namespace/name`).
    pub pod: String,
}

/// Ingress figures of a class: computed as upstream does, not enforced here
/// (shaping what arrives needs an ifb device; upstream's tc plugin does not
/// enforce them either).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IngressFigures {
    pub ls: RateCeil,
    pub be: RateCeil,
}

/// The tree to keep on the uplink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetQosPlan {
    pub total_bps: u64,
    /// Where the total came from (`systemStrategy.totalNetworkBandwidth`
    /// or the interface speed).
    pub total_source: String,
    /// Root, system, LS and BE classes, parents first.
    pub classes: Vec<HtbClassSpec>,
    /// Sorted by address.
    pub filters: Vec<PodIpFilter>,
    pub ingress: IngressFigures,
    /// Clamps, skipped pods, conflicts: one sentence each.
    pub notes: Vec<String>,
}

impl NetQosPlan {
    pub fn class(&self, minor: u16) -> Option<&HtbClassSpec> {
        self.classes.iter().find(|c| c.minor == minor)
    }
}

/// What to do with the uplink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetQosDecision {
    /// Keep this tree.
    Apply(NetQosPlan),
    /// Remove the tree this feature installed (policy not `tc`, or no class
    /// enabled); leave any other qdisc alone.
    Remove { reason: String },
    /// Change nothing (no NodeSLO yet, no bandwidth known).
    Leave { reason: String },
}

/// One bandwidth value: an integer is a percentage of `total`, a string a
/// quantity in bits per second. `None` when absent; `Some(0)` (with a note)
/// when invalid, as upstream (`getBandwidthVal`).
pub fn bandwidth_value(
    total_bps: u64,
    value: Option<&IntOrString>,
    field: &str,
    notes: &mut Vec<String>,
) -> Option<u64> {
    match value? {
        IntOrString::Int(percent) => {
            if (0..=100).contains(percent) {
                // percent <= 100, so the product fits in u128.
                let scaled = u128::from(total_bps) * u128::from(percent.unsigned_abs()) / 100;
                Some(u64::try_from(scaled).unwrap_or(u64::MAX))
            } else {
                notes.push(format!(
                    "{field}: percentage {percent} outside 0..=100 counts as 0"
                ));
                Some(0)
            }
        }
        IntOrString::String(text) => match QuantityValue::parse(text)
            .ok()
            .and_then(|q| q.checked_value())
        {
            Some(value) if value >= 0 => Some(value.unsigned_abs()),
            _ => {
                notes.push(format!(
                    "{field}: {text:?} is not a bandwidth quantity; counts as 0"
                ));
                Some(0)
            }
        },
    }
}

/// The node's total bandwidth in bits per second: `totalNetworkBandwidth`
/// when positive, else the interface speed (Mbit/s), else `None`.
pub fn total_bandwidth(spec: &NodeSLOSpec, link_speed_mbps: Option<u64>) -> Option<(u64, String)> {
    let configured = spec
        .system_strategy
        .as_ref()
        .and_then(|s| s.total_network_bandwidth.as_ref())
        .and_then(|q| QuantityValue::parse(&q.0).ok())
        .and_then(|q| q.checked_value())
        .filter(|v| *v > 0);
    if let Some(value) = configured {
        return Some((
            value.unsigned_abs(),
            "systemStrategy.totalNetworkBandwidth".to_string(),
        ));
    }
    link_speed_mbps.filter(|speed| *speed > 0).map(|speed| {
        (
            speed.saturating_mul(1_000_000),
            format!("interface speed {speed} Mbit/s"),
        )
    })
}

fn enabled_config(class: Option<&ResourceQOS>) -> Option<&NetworkQOS> {
    let cfg: &NetworkQOSCfg = class?.network_qos.as_ref()?;
    cfg.enable.unwrap_or(false).then_some(&cfg.network_qos)
}

/// Request and limit of one direction of an enabled class, clamped so that
/// request <= limit <= total. A missing limit is 100 % (the CRD default),
/// a limit of 0 means the request (upstream: ceil 0 becomes the rate).
fn class_limits(
    total: u64,
    request: Option<&IntOrString>,
    limit: Option<&IntOrString>,
    field: &str,
    notes: &mut Vec<String>,
) -> RateCeil {
    let request = bandwidth_value(total, request, &format!("{field}Request"), notes).unwrap_or(0);
    let mut limit = bandwidth_value(total, limit, &format!("{field}Limit"), notes).unwrap_or(total);
    if limit == 0 {
        limit = request;
    }
    if limit > total {
        notes.push(format!(
            "{field}Limit {limit} bit/s is above the total {total}; using the total"
        ));
        limit = total;
    }
    let mut rate = request;
    if rate > limit {
        notes.push(format!(
            "{field}Request {rate} bit/s is above its limit {limit}; using the limit"
        ));
        rate = limit;
    }
    RateCeil {
        rate_bps: rate.max(MIN_CLASS_RATE_BPS),
        ceil_bps: limit.max(rate).max(MIN_CLASS_RATE_BPS),
    }
}

/// The decision for one round.
pub fn decide(
    spec: Option<&NodeSLOSpec>,
    pods: &[NetQosPod],
    link_speed_mbps: Option<u64>,
) -> NetQosDecision {
    let Some(spec) = spec else {
        return NetQosDecision::Leave {
            reason: "no NodeSLO received yet".to_string(),
        };
    };
    let strategy = spec.resource_qos_strategy.as_ref();
    let policy = strategy
        .and_then(|s| s.policies.as_ref())
        .and_then(|p| p.net_qos_policy.clone());
    if let Some(policy) = policy.filter(|p| *p != NETQOSPolicy::Tc) {
        return NetQosDecision::Remove {
            reason: format!("resourceQOSStrategy.policies.netQOSPolicy is {policy:?}, not tc"),
        };
    }
    let ls = enabled_config(strategy.and_then(|s| s.ls_class.as_ref()));
    let be = enabled_config(strategy.and_then(|s| s.be_class.as_ref()));
    if ls.is_none() && be.is_none() {
        return NetQosDecision::Remove {
            reason: "networkQOS is enabled for neither lsClass nor beClass".to_string(),
        };
    }
    let Some((total, total_source)) = total_bandwidth(spec, link_speed_mbps) else {
        return NetQosDecision::Leave {
            reason: "no total bandwidth: systemStrategy.totalNetworkBandwidth is unset or 0 and the interface reports no speed".to_string(),
        };
    };
    let mut notes = Vec::new();
    // A class without networkQOS.enable keeps no guarantee and no limit.
    let unlimited = RateCeil {
        rate_bps: MIN_CLASS_RATE_BPS,
        ceil_bps: total.max(MIN_CLASS_RATE_BPS),
    };
    let direction =
        |cfg: Option<&NetworkQOS>, class: &str, egress: bool, notes: &mut Vec<String>| match cfg {
            Some(cfg) if egress => class_limits(
                total,
                cfg.egress_request.as_ref(),
                cfg.egress_limit.as_ref(),
                &format!("{class}.networkQOS.egress"),
                notes,
            ),
            Some(cfg) => class_limits(
                total,
                cfg.ingress_request.as_ref(),
                cfg.ingress_limit.as_ref(),
                &format!("{class}.networkQOS.ingress"),
                notes,
            ),
            None => unlimited,
        };
    let ls_egress = direction(ls, "lsClass", true, &mut notes);
    let be_egress = direction(be, "beClass", true, &mut notes);
    let ingress = IngressFigures {
        ls: direction(ls, "lsClass", false, &mut notes),
        be: direction(be, "beClass", false, &mut notes),
    };
    let guaranteed = ls_egress.rate_bps.saturating_add(be_egress.rate_bps);
    let system_rate = total.saturating_sub(guaranteed);
    if system_rate < MIN_CLASS_RATE_BPS {
        notes.push(format!(
            "LS and BE egress requests ({guaranteed} bit/s) leave nothing of the total {total} for the system class"
        ));
    }
    // The kernel reports a top-level class's parent as the root handle.
    let root_parent = TC_H_ROOT;
    let root = handle(MAJOR, ROOT_CLASS_MINOR);
    let whole = RateCeil {
        rate_bps: total.max(MIN_CLASS_RATE_BPS),
        ceil_bps: total.max(MIN_CLASS_RATE_BPS),
    };
    let classes = vec![
        HtbClassSpec::new(ROOT_CLASS_MINOR, root_parent, whole, 0),
        HtbClassSpec::new(
            SYSTEM_CLASS_MINOR,
            root,
            RateCeil {
                rate_bps: system_rate.max(MIN_CLASS_RATE_BPS),
                ceil_bps: whole.ceil_bps,
            },
            SYSTEM_CLASS_PRIO,
        ),
        HtbClassSpec::new(LS_CLASS_MINOR, root, ls_egress, LS_CLASS_PRIO),
        HtbClassSpec::new(BE_CLASS_MINOR, root, be_egress, BE_CLASS_PRIO),
    ];
    let filters = pod_filters(pods, &mut notes);
    NetQosDecision::Apply(NetQosPlan {
        total_bps: total,
        total_source,
        classes,
        filters,
        ingress,
        notes,
    })
}

/// One filter per distinct pod address; a conflicting claim on an address
/// keeps the first pod in key order and is noted.
fn pod_filters(pods: &[NetQosPod], notes: &mut Vec<String>) -> Vec<PodIpFilter> {
    let mut ordered: Vec<&NetQosPod> = pods.iter().collect();
    ordered.sort_by(|a, b| a.key.cmp(&b.key));
    let mut by_ip: BTreeMap<IpAddr, PodIpFilter> = BTreeMap::new();
    let mut overflow = 0usize;
    for pod in ordered {
        let Some(class) = pod.qos_label.as_deref().and_then(NetQosClass::from_label) else {
            continue;
        };
        if pod.terminated {
            continue;
        }
        if pod.host_network {
            notes.push(format!(
                "pod {} uses the host network: its traffic carries the node's address and is not classified",
                pod.key
            ));
            continue;
        }
        for ip in &pod.ips {
            if let Some(existing) = by_ip.get(ip) {
                if existing.pod != pod.key {
                    notes.push(format!(
                        "address {ip} is claimed by pods {} and {}; keeping {}",
                        existing.pod, pod.key, existing.pod
                    ));
                }
                continue;
            }
            if by_ip.len() >= MAX_POD_FILTERS {
                overflow += 1;
                continue;
            }
            by_ip.insert(
                *ip,
                PodIpFilter {
                    ip: *ip,
                    class,
                    pod: pod.key.clone(),
                },
            );
        }
    }
    if overflow > 0 {
        notes.push(format!(
            "{overflow} pod addresses beyond the limit of {MAX_POD_FILTERS} filters are not classified"
        ));
    }
    by_ip.into_values().collect()
}
