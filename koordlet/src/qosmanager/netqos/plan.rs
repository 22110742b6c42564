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
//!   the kernel's bytes per second);
//! - a pod whose `koordinator.sh/networkQOS` annotation
//!   (`{"ingressLimit": "...", "egressLimit": "..."}`, quantities in bits per
//!   second) sets a non-zero limit gets an HTB class of its own under `1:1`,
//!   rate = ceil = its egress limit, with its QoS class's priority, and its
//!   address filter sends there; a bad annotation is logged and the pod
//!   stays in its QoS class; the ingress limit is parsed, not enforced.

use std::collections::BTreeMap;
use std::net::IpAddr;

use apis::extension::QuantityValue;
use apis::slo::v1alpha1::{NETQOSPolicy, NetworkQOS, NetworkQOSCfg, NodeSLOSpec, ResourceQOS};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use koord_common::units::{Bytes, BytesPerSecond};

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
/// Minors of the per-pod classes: `POD_CLASS_MINOR_FIRST` and the
/// `MAX_POD_CLASSES - 1` after it (upstream picks random minors, which may
/// collide with its fixed classes).
pub const POD_CLASS_MINOR_FIRST: u16 = 0x100;
/// At most this many pods get a class of their own; the rest stay in their
/// QoS class (noted).
pub const MAX_POD_CLASSES: u16 = 1024;
/// Longest `koordinator.sh/networkQOS` value accepted.
pub const MAX_POD_ANNOTATION_BYTES: usize = 1024;

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

    /// The HTB priority of the class (and of pod classes of its pods).
    pub const fn prio(self) -> u32 {
        match self {
            Self::System => SYSTEM_CLASS_PRIO,
            Self::Ls => LS_CLASS_PRIO,
            Self::Be => BE_CLASS_PRIO,
        }
    }
}

/// A pod's own limits from `koordinator.sh/networkQOS`, bits per second;
/// 0 means no limit in that direction (upstream's default "0").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodBandwidthLimits {
    pub ingress_bps: u64,
    pub egress_bps: u64,
}

/// Why a `koordinator.sh/networkQOS` annotation was not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodAnnotationError {
    #[error("{0} bytes is longer than the {MAX_POD_ANNOTATION_BYTES} accepted")]
    TooLong(usize),
    #[error("not a JSON object: {0}")]
    NotAnObject(String),
    #[error("{field} is not a string")]
    NotAString { field: &'static str },
    #[error("{field} {value:?} is not a quantity: {reason}")]
    BadQuantity {
        field: &'static str,
        value: String,
        reason: String,
    },
    #[error("{field} {value:?} is negative")]
    Negative { field: &'static str, value: String },
}

/// What a pod's annotation said.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PodNetworkQos {
    /// Absent or empty: the pod's QoS class decides.
    #[default]
    Unset,
    Limits(PodBandwidthLimits),
    Invalid(PodAnnotationError),
}

impl PodNetworkQos {
    /// From the annotation's value, if any (upstream ignores an empty one).
    pub fn from_annotation(value: Option<&str>) -> Self {
        match value {
            None | Some("") => Self::Unset,
            Some(text) => match parse_pod_network_qos(text) {
                Ok(limits) => Self::Limits(limits),
                Err(err) => Self::Invalid(err),
            },
        }
    }
}

/// Parses `{"ingressLimit": "10M", "egressLimit": "20M"}` (upstream's
/// `NetworkQoS`): both optional, quantities in bits per second. As Go's
/// decoder, key case does not matter (an exact match wins), unknown keys and
/// `null` values are ignored. Unlike upstream, a negative quantity is an
/// error (Go would wrap it into a huge unsigned rate).
pub fn parse_pod_network_qos(text: &str) -> Result<PodBandwidthLimits, PodAnnotationError> {
    if text.len() > MAX_POD_ANNOTATION_BYTES {
        return Err(PodAnnotationError::TooLong(text.len()));
    }
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|err| PodAnnotationError::NotAnObject(err.to_string()))?;
    let serde_json::Value::Object(object) = value else {
        return Err(PodAnnotationError::NotAnObject(
            "the value is not an object".to_string(),
        ));
    };
    let field = |name: &'static str| -> Result<u64, PodAnnotationError> {
        let found = object.get(name).or_else(|| {
            object
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value)
        });
        let text = match found {
            None | Some(serde_json::Value::Null) => return Ok(0),
            Some(serde_json::Value::String(text)) => text,
            Some(_) => return Err(PodAnnotationError::NotAString { field: name }),
        };
        let quantity =
            QuantityValue::parse(text).map_err(|err| PodAnnotationError::BadQuantity {
                field: name,
                value: text.clone(),
                reason: err.to_string(),
            })?;
        let value = quantity
            .checked_value()
            .ok_or_else(|| PodAnnotationError::BadQuantity {
                field: name,
                value: text.clone(),
                reason: "beyond the 64-bit range".to_string(),
            })?;
        u64::try_from(value).map_err(|_| PodAnnotationError::Negative {
            field: name,
            value: text.clone(),
        })
    };
    Ok(PodBandwidthLimits {
        ingress_bps: field("ingressLimit")?,
        egress_bps: field("egressLimit")?,
    })
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
    /// The `koordinator.sh/networkQOS` annotation.
    pub network_qos: PodNetworkQos,
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
    /// Bytes the class may send at once above its rate (`burst`) and ceil (`cburst`).
    pub burst: Bytes,
    pub cburst: Bytes,
}

impl HtbClassSpec {
    fn new(minor: u16, parent: u32, limits: RateCeil, prio: u32) -> Self {
        let rate = BytesPerSecond::from_bits_per_second(limits.rate_bps);
        let ceil = BytesPerSecond::from_bits_per_second(limits.ceil_bps);
        let quantum = (rate.0 / u64::from(RATE_TO_QUANTUM))
            .clamp(u64::from(MIN_QUANTUM_BYTES), u64::from(MAX_QUANTUM_BYTES));
        Self {
            minor,
            parent,
            rate_bps: limits.rate_bps,
            ceil_bps: limits.ceil_bps,
            prio,
            quantum_bytes: u32::try_from(quantum).unwrap_or(MAX_QUANTUM_BYTES),
            burst: Bytes(rate.0 / BURST_HZ + BURST_MTU_BYTES),
            cburst: Bytes(ceil.0 / BURST_HZ + BURST_MTU_BYTES),
        }
    }

    pub fn handle(&self) -> u32 {
        handle(MAJOR, self.minor)
    }
}

/// One u32 filter: packets whose source is `ip` go to class `1:<target_minor>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodIpFilter {
    pub ip: IpAddr,
    /// The pod's QoS class.
    pub class: NetQosClass,
    /// The pod this address belongs to (`namespace/name`).
    pub pod: String,
    /// The class the filter sends to: the QoS class's minor, or the pod's own
    /// class when its annotation limits it.
    pub target_minor: u16,
}

/// A pod with a class of its own (from `koordinator.sh/networkQOS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClass {
    pub pod: String,
    pub class: NetQosClass,
    pub minor: u16,
    /// The egress limit enforced (rate = ceil), after clamping to the total.
    pub egress_bps: u64,
    /// Parsed, not enforced.
    pub ingress_bps: u64,
}

/// Why a pod, or part of what it asked, was not enforced: the bounded set
/// of reasons the metrics count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PodRefusal {
    /// Host network: its packets carry the node's address.
    HostNetwork,
    /// Its `koordinator.sh/networkQOS` is malformed; the QoS class decides.
    InvalidAnnotation,
    /// It asks for an ingress limit, which is not enforced.
    IngressNotEnforced,
    /// One of its addresses is claimed by another pod.
    AddressConflict,
    /// Beyond [`MAX_POD_FILTERS`] addresses.
    FilterLimit,
    /// Beyond [`MAX_POD_CLASSES`] pods with their own class.
    PodClassLimit,
}

impl PodRefusal {
    pub const ALL: [Self; 6] = [
        Self::HostNetwork,
        Self::InvalidAnnotation,
        Self::IngressNotEnforced,
        Self::AddressConflict,
        Self::FilterLimit,
        Self::PodClassLimit,
    ];

    /// The `reason` label value.
    pub const fn label(self) -> &'static str {
        match self {
            Self::HostNetwork => "host_network",
            Self::InvalidAnnotation => "invalid_annotation",
            Self::IngressNotEnforced => "ingress_not_enforced",
            Self::AddressConflict => "address_conflict",
            Self::FilterLimit => "filter_limit",
            Self::PodClassLimit => "pod_class_limit",
        }
    }
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
    /// Pods with a class of their own, in pod key order (their classes are
    /// in `classes` after the four fixed ones).
    pub pod_classes: Vec<PodClass>,
    /// How many pods each refusal touched this round.
    pub refusals: BTreeMap<PodRefusal, usize>,
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
    let mut classes = vec![
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
    let classified = classify_pods(pods, total, &mut notes);
    classes.extend(classified.pod_classes.iter().map(|pod_class| {
        HtbClassSpec::new(
            pod_class.minor,
            root,
            RateCeil {
                rate_bps: pod_class.egress_bps,
                ceil_bps: pod_class.egress_bps,
            },
            pod_class.class.prio(),
        )
    }));
    NetQosDecision::Apply(NetQosPlan {
        total_bps: total,
        total_source,
        classes,
        filters: classified.filters,
        pod_classes: classified.pod_classes,
        refusals: classified.refusals,
        ingress,
        notes,
    })
}

/// FNV-1a: a per-pod starting minor that is the same in every process (the
/// standard hasher promises no stability).
fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Minors of the per-pod classes: each pod starts at the slot its key hashes
/// to and takes the next free one, in pod key order, so a pod keeps its
/// minor across rounds unless a colliding pod comes or goes.
#[derive(Debug, Default)]
struct PodMinors {
    used: std::collections::BTreeSet<u16>,
}

impl PodMinors {
    fn allocate(&mut self, key: &str) -> Option<u16> {
        let slots = u64::from(MAX_POD_CLASSES);
        let start = stable_hash(key) % slots;
        (0..slots).find_map(|step| {
            let offset = u16::try_from((start + step) % slots).ok()?;
            let minor = POD_CLASS_MINOR_FIRST + offset;
            self.used.insert(minor).then_some(minor)
        })
    }
}

/// Filters, per-pod classes and refusals of one round.
#[derive(Debug, Default)]
struct Classified {
    filters: Vec<PodIpFilter>,
    pod_classes: Vec<PodClass>,
    refusals: BTreeMap<PodRefusal, usize>,
}

/// One filter per distinct pod address; a conflicting claim on an address
/// keeps the first pod in key order and is noted. A pod whose annotation
/// sets an egress limit gets a class of its own.
fn classify_pods(pods: &[NetQosPod], total: u64, notes: &mut Vec<String>) -> Classified {
    let mut ordered: Vec<&NetQosPod> = pods.iter().collect();
    ordered.sort_by(|a, b| a.key.cmp(&b.key));
    let mut by_ip: BTreeMap<IpAddr, PodIpFilter> = BTreeMap::new();
    let mut out = Classified::default();
    let mut minors = PodMinors::default();
    let mut filter_overflow = 0usize;
    let refuse = |out: &mut Classified, reason: PodRefusal| {
        *out.refusals.entry(reason).or_insert(0) += 1;
    };
    for pod in ordered {
        let Some(class) = pod.qos_label.as_deref().and_then(NetQosClass::from_label) else {
            continue;
        };
        if pod.terminated {
            continue;
        }
        let limits = match &pod.network_qos {
            PodNetworkQos::Unset => PodBandwidthLimits::default(),
            PodNetworkQos::Limits(limits) => *limits,
            PodNetworkQos::Invalid(err) => {
                notes.push(format!(
                    "pod {}: {} ignored ({err}); it stays in the {} class",
                    pod.key,
                    apis::extension::constants::ANNOTATION_NETWORK_QOS,
                    class.name()
                ));
                refuse(&mut out, PodRefusal::InvalidAnnotation);
                PodBandwidthLimits::default()
            }
        };
        if limits.ingress_bps > 0 {
            notes.push(format!(
                "pod {}: ingressLimit {} bit/s is not enforced (no ingress shaping)",
                pod.key, limits.ingress_bps
            ));
            refuse(&mut out, PodRefusal::IngressNotEnforced);
        }
        if pod.host_network {
            notes.push(format!(
                "pod {} uses the host network: its traffic carries the node's address and is not classified",
                pod.key
            ));
            refuse(&mut out, PodRefusal::HostNetwork);
            continue;
        }
        let mut free_ips = Vec::new();
        let mut conflicted = false;
        for ip in &pod.ips {
            match by_ip.get(ip) {
                Some(existing) if existing.pod != pod.key => {
                    notes.push(format!(
                        "address {ip} is claimed by pods {} and {}; keeping {}",
                        existing.pod, pod.key, existing.pod
                    ));
                    conflicted = true;
                }
                Some(_) => {}
                None if !free_ips.contains(ip) => free_ips.push(*ip),
                None => {}
            }
        }
        if conflicted {
            refuse(&mut out, PodRefusal::AddressConflict);
        }
        if free_ips.is_empty() {
            continue;
        }
        let mut target_minor = class.minor();
        if limits.egress_bps > 0 {
            match minors.allocate(&pod.key) {
                Some(minor) => {
                    let mut egress = limits.egress_bps;
                    if egress > total {
                        notes.push(format!(
                            "pod {}: egressLimit {egress} bit/s is above the total {total}; using the total",
                            pod.key
                        ));
                        egress = total;
                    }
                    target_minor = minor;
                    out.pod_classes.push(PodClass {
                        pod: pod.key.clone(),
                        class,
                        minor,
                        egress_bps: egress.max(MIN_CLASS_RATE_BPS),
                        ingress_bps: limits.ingress_bps,
                    });
                }
                None => {
                    notes.push(format!(
                        "pod {}: more than {MAX_POD_CLASSES} pods have their own limit; it stays in the {} class",
                        pod.key,
                        class.name()
                    ));
                    refuse(&mut out, PodRefusal::PodClassLimit);
                }
            }
        }
        let mut overflowed = false;
        for ip in free_ips {
            if by_ip.len() >= MAX_POD_FILTERS {
                filter_overflow += 1;
                overflowed = true;
                continue;
            }
            by_ip.insert(
                ip,
                PodIpFilter {
                    ip,
                    class,
                    pod: pod.key.clone(),
                    target_minor,
                },
            );
        }
        if overflowed {
            refuse(&mut out, PodRefusal::FilterLimit);
        }
    }
    if filter_overflow > 0 {
        notes.push(format!(
            "{filter_overflow} pod addresses beyond the limit of {MAX_POD_FILTERS} filters are not classified"
        ));
    }
    out.filters = by_ip.into_values().collect();
    out
}
