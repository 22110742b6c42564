//! The reconcile core: what the uplink has (read back through netlink) against
//! the plan, as a bounded list of netlink changes. Pure.

use std::collections::BTreeMap;
use std::net::IpAddr;

use koord_common::units::{Bytes, BytesPerSecond};

use super::plan::{
    BE_CLASS_MINOR, HtbClassSpec, MAJOR, NetQosClass, NetQosPlan, POD_FILTER_PRIO_V4,
    POD_FILTER_PRIO_V6, PodIpFilter, QDISC_MINOR, SYSTEM_CLASS_MINOR, handle,
};

/// At most this many changes are made in one round; the rest wait for the
/// next round (bounded work under pod churn).
pub const MAX_ACTIONS_PER_ROUND: usize = 1024;

/// The root qdisc of the uplink as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedQdisc {
    pub kind: String,
    pub handle: u32,
    /// HTB's default class minor, when the qdisc is HTB.
    pub default_minor: Option<u32>,
}

/// One HTB class as read back; rates in bytes per second (the kernel's unit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedClass {
    pub handle: u32,
    pub parent: u32,
    pub rate: BytesPerSecond,
    pub ceil: BytesPerSecond,
    pub prio: u32,
    pub quantum: u32,
    /// Burst and cburst in psched ticks.
    pub buffer_ticks: u32,
    pub cbuffer_ticks: u32,
}

/// One u32 filter node under the qdisc `1:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedFilter {
    pub prio: u16,
    /// Ethernet protocol, host order (0x0800, 0x86dd).
    pub protocol: u16,
    /// The u32 node handle (`800::800`); hash-table entries are not listed.
    pub handle: u32,
    /// The class it sends to.
    pub class: Option<u32>,
    /// The source address matched, when the selector is exactly one full
    /// source-address match (the shape this feature installs).
    pub source: Option<IpAddr>,
}

/// Everything read back from the uplink.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedTc {
    pub root_qdisc: Option<ObservedQdisc>,
    pub classes: Vec<ObservedClass>,
    pub filters: Vec<ObservedFilter>,
}

impl ObservedTc {
    /// The root qdisc is the HTB `1:0` this feature installs.
    pub fn has_our_qdisc(&self) -> bool {
        self.root_qdisc
            .as_ref()
            .is_some_and(|q| q.kind == "htb" && q.handle == handle(MAJOR, QDISC_MINOR))
    }
}

/// One netlink change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcAction {
    /// Install HTB `1:0` at the root (replacing whatever qdisc is there).
    ReplaceRootQdisc {
        default_minor: u16,
    },
    /// Delete the HTB `1:0` at the root (and with it its classes and filters).
    DeleteRootQdisc,
    AddClass(HtbClassSpec),
    ChangeClass(HtbClassSpec),
    /// Delete a pod's class that is no longer planned (after the filters
    /// sending to it: the kernel refuses a class still bound to a filter).
    DeleteClass {
        handle: u32,
        parent: u32,
    },
    AddFilter(PodIpFilter),
    DeleteFilter {
        prio: u16,
        protocol: u16,
        handle: u32,
    },
}

impl TcAction {
    /// `(object, operation)` for the metrics: qdisc/class/filter and
    /// add/change/delete (a replaced qdisc counts as an add).
    pub const fn kind(&self) -> (&'static str, &'static str) {
        match self {
            Self::ReplaceRootQdisc { .. } => ("qdisc", "add"),
            Self::DeleteRootQdisc => ("qdisc", "delete"),
            Self::AddClass(_) => ("class", "add"),
            Self::ChangeClass(_) => ("class", "change"),
            Self::DeleteClass { .. } => ("class", "delete"),
            Self::AddFilter(_) => ("filter", "add"),
            Self::DeleteFilter { .. } => ("filter", "delete"),
        }
    }
}

/// The changes of one round and how many were left for the next.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TcChanges {
    pub actions: Vec<TcAction>,
    pub deferred: usize,
}

pub const ETH_P_IP: u16 = 0x0800;
pub const ETH_P_IPV6: u16 = 0x86dd;

/// The tc priority and protocol of the filter for `ip`.
pub fn filter_slot(ip: &IpAddr) -> (u16, u16) {
    match ip {
        IpAddr::V4(_) => (POD_FILTER_PRIO_V4, ETH_P_IP),
        IpAddr::V6(_) => (POD_FILTER_PRIO_V6, ETH_P_IPV6),
    }
}

/// What the kernel stores for a class spec: bytes per second and ticks
/// (1 tick = 64 ns, the kernel's `PSCHED_SHIFT`).
pub fn wire_class(spec: &HtbClassSpec) -> ObservedClass {
    let rate = BytesPerSecond::from_bits_per_second(spec.rate_bps);
    let ceil = BytesPerSecond::from_bits_per_second(spec.ceil_bps);
    ObservedClass {
        handle: spec.handle(),
        parent: spec.parent,
        rate,
        ceil,
        prio: spec.prio,
        quantum: spec.quantum_bytes,
        buffer_ticks: burst_ticks(spec.burst, rate),
        cbuffer_ticks: burst_ticks(spec.cburst, ceil),
    }
}

/// Time to send `bytes` at `rate`, in psched ticks (saturating; a zero rate
/// never finishes).
pub fn burst_ticks(bytes: Bytes, rate: BytesPerSecond) -> u32 {
    if rate.0 == 0 {
        return u32::MAX;
    }
    let nanos = u128::from(bytes.0) * 1_000_000_000 / u128::from(rate.0);
    u32::try_from(nanos >> 6).unwrap_or(u32::MAX)
}

/// The changes that bring `observed` to `plan`: the qdisc first, then the
/// classes (parents first), then filter deletions, then deletions of pod
/// classes no longer planned, then filter additions; at most
/// [`MAX_ACTIONS_PER_ROUND`].
pub fn reconcile(observed: &ObservedTc, plan: &NetQosPlan) -> TcChanges {
    let mut actions = Vec::new();
    let fresh = !observed.has_our_qdisc()
        || observed
            .root_qdisc
            .as_ref()
            .and_then(|q| q.default_minor)
            .is_some_and(|minor| minor != u32::from(SYSTEM_CLASS_MINOR));
    if fresh {
        // A new qdisc starts without classes or filters.
        actions.push(TcAction::ReplaceRootQdisc {
            default_minor: SYSTEM_CLASS_MINOR,
        });
        actions.extend(plan.classes.iter().cloned().map(TcAction::AddClass));
        actions.extend(plan.filters.iter().cloned().map(TcAction::AddFilter));
        return bounded(actions);
    }
    for spec in &plan.classes {
        let want = wire_class(spec);
        match observed.classes.iter().find(|c| c.handle == want.handle) {
            None => actions.push(TcAction::AddClass(spec.clone())),
            Some(have) if *have != want => actions.push(TcAction::ChangeClass(spec.clone())),
            Some(_) => {}
        }
    }
    let wanted: BTreeMap<IpAddr, &PodIpFilter> = plan.filters.iter().map(|f| (f.ip, f)).collect();
    let mut kept: BTreeMap<IpAddr, ()> = BTreeMap::new();
    let our_slots = [POD_FILTER_PRIO_V4, POD_FILTER_PRIO_V6];
    for filter in observed
        .filters
        .iter()
        .filter(|f| our_slots.contains(&f.prio))
    {
        let keep = filter.source.is_some_and(|ip| {
            let slot_matches = filter_slot(&ip) == (filter.prio, filter.protocol);
            let class_matches = wanted
                .get(&ip)
                .is_some_and(|want| Some(handle(MAJOR, want.target_minor)) == filter.class);
            slot_matches && class_matches && kept.insert(ip, ()).is_none()
        });
        if !keep {
            actions.push(TcAction::DeleteFilter {
                prio: filter.prio,
                protocol: filter.protocol,
                handle: filter.handle,
            });
        }
    }
    // Classes below `1:` beyond the fixed four are pod classes (ours, or
    // upstream's random minors): the ones not planned go.
    for class in &observed.classes {
        let ours_major = class.handle >> 16 == u32::from(MAJOR);
        let minor = class.handle & 0xFFFF;
        let planned = plan
            .classes
            .iter()
            .any(|spec| spec.handle() == class.handle);
        if ours_major && minor > u32::from(BE_CLASS_MINOR) && !planned {
            actions.push(TcAction::DeleteClass {
                handle: class.handle,
                parent: class.parent,
            });
        }
    }
    for filter in &plan.filters {
        if !kept.contains_key(&filter.ip) {
            actions.push(TcAction::AddFilter(filter.clone()));
        }
    }
    bounded(actions)
}

/// The changes that take this feature's tree off the uplink.
pub fn removal(observed: &ObservedTc) -> TcChanges {
    let actions = if observed.has_our_qdisc() {
        vec![TcAction::DeleteRootQdisc]
    } else {
        Vec::new()
    };
    TcChanges {
        actions,
        deferred: 0,
    }
}

fn bounded(mut actions: Vec<TcAction>) -> TcChanges {
    let deferred = actions.len().saturating_sub(MAX_ACTIONS_PER_ROUND);
    actions.truncate(MAX_ACTIONS_PER_ROUND);
    TcChanges { actions, deferred }
}

/// The class a filter action sends to.
pub fn class_handle(class: NetQosClass) -> u32 {
    handle(MAJOR, class.minor())
}
