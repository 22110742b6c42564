//! RDMA and FPGA devices: each device offers 100 units (its Device CR
//! resource); a request up to 100 is a share of one device, a multiple of
//! 100 asks for that many whole devices. Devices are taken least allocated
//! first (upstream's default scoring; most allocated first under a
//! MostAllocated strategy), then by minor. In a joint allocation the
//! devices on the primary devices' PCIe switches come first, one per
//! switch in turn (see [`Placement`]). The pod's
//! device-allocate-hint for the type may narrow the devices (`selector`),
//! ask for an SR-IOV virtual function on each (`vfSelector`), or change the
//! count (`ApplyForAll`: every matching device; `RequestsAsCount`: the
//! request is a number of devices).

use std::collections::{BTreeMap, BTreeSet};

use apis::configuration::selector::label_selector_matches;
use apis::extension::device_share::{
    DeviceAllocateHints, DeviceAllocateStrategy, DeviceExclusivePolicy, RESOURCE_FPGA,
    RESOURCE_RDMA, VirtualFunction,
};
use apis::scheduling::v1alpha1::DeviceType;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::cache::PodInfo;
use crate::framework::Rejection;

/// A device type handled the common way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommonKind {
    #[default]
    Rdma,
    Fpga,
}

impl CommonKind {
    pub const ALL: [CommonKind; 2] = [CommonKind::Rdma, CommonKind::Fpga];

    /// The pod resource that requests it.
    pub fn resource(self) -> &'static str {
        match self {
            CommonKind::Rdma => RESOURCE_RDMA,
            CommonKind::Fpga => RESOURCE_FPGA,
        }
    }

    /// The Device CR type, also the key in the device-allocated annotation.
    pub fn key(self) -> &'static str {
        match self {
            CommonKind::Rdma => "rdma",
            CommonKind::Fpga => "fpga",
        }
    }

    pub fn device_type(self) -> DeviceType {
        match self {
            CommonKind::Rdma => DeviceType::Rdma,
            CommonKind::Fpga => DeviceType::Fpga,
        }
    }

    pub fn of(device_type: &DeviceType) -> Option<Self> {
        match device_type {
            DeviceType::Rdma => Some(CommonKind::Rdma),
            DeviceType::Fpga => Some(CommonKind::Fpga),
            _ => None,
        }
    }

    /// Upstream's reason when a node cannot serve the request.
    pub fn insufficient(self) -> String {
        format!("Insufficient {} devices", self.key())
    }
}

/// What a pod asks of one device type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommonRequest {
    pub kind: CommonKind,
    /// How many devices (ignored with `all_devices`).
    pub count: i64,
    /// Units taken from each (100 = whole device).
    pub per_device: i64,
    /// Every device matching `selector` (hint `ApplyForAll`).
    pub all_devices: bool,
    /// Only devices whose labels match (hint `selector`).
    pub selector: Option<LabelSelector>,
    /// A virtual function from a VF group matching this, on every device
    /// taken (hint `vfSelector`).
    pub vf_selector: Option<LabelSelector>,
    /// Minors taken before any other (a pre-allocating reservation takes
    /// over the devices of the pods it takes in).
    pub preferred: BTreeSet<i32>,
}

/// The pod's RDMA / FPGA requests with its allocate hints applied,
/// validated: above 100 only whole devices.
pub fn common_requests(
    pod: &PodInfo,
    hints: Option<&DeviceAllocateHints>,
) -> Result<Vec<CommonRequest>, String> {
    let mut requests = Vec::new();
    for kind in CommonKind::ALL {
        let amount = pod.requests.get(kind.resource());
        if amount <= 0 {
            continue;
        }
        if amount > 100 && amount % 100 != 0 {
            return Err(format!(
                "invalid resource unit {}: {amount}",
                kind.resource()
            ));
        }
        let hint = hints.and_then(|h| h.get(kind.key()));
        let mut request = CommonRequest {
            kind,
            count: 1,
            per_device: amount,
            selector: hint.and_then(|h| h.selector.clone()),
            vf_selector: hint.and_then(|h| h.vf_selector.clone()),
            ..Default::default()
        };
        // Whole devices by quantity win over the hint's strategy, as upstream.
        if amount > 100 {
            request.count = amount / 100;
            request.per_device = 100;
        } else {
            match hint.and_then(|h| h.allocate_strategy) {
                Some(DeviceAllocateStrategy::ApplyForAll) => request.all_devices = true,
                Some(DeviceAllocateStrategy::RequestsAsCount) => {
                    request.count = amount;
                    let exclusive = hint.and_then(|h| h.exclusive_policy)
                        == Some(DeviceExclusivePolicy::DeviceLevel);
                    request.per_device = if exclusive { 100 } else { 1 };
                }
                _ => {}
            }
        }
        requests.push(request);
    }
    Ok(requests)
}

/// One device's capacity (0 when unhealthy), labels, virtual functions, and
/// what pods use of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommonDevice {
    pub total: i64,
    pub used: i64,
    pub labels: BTreeMap<String, String>,
    /// (VF group labels, VF).
    pub vfs: Vec<(BTreeMap<String, String>, VirtualFunction)>,
    /// Bus IDs of VFs pods hold.
    pub used_vfs: BTreeSet<String>,
    /// `topology.pcieID` of the Device CR, if any.
    pub pcie: Option<String>,
}

impl CommonDevice {
    pub fn free(&self) -> i64 {
        self.total.saturating_sub(self.used)
    }

    /// The free VF with the lowest bus ID in a group matching `selector`.
    fn free_vf(&self, selector: &LabelSelector) -> Option<&VirtualFunction> {
        self.vfs
            .iter()
            .filter(|(labels, vf)| {
                !self.used_vfs.contains(&vf.bus_id)
                    && label_selector_matches(selector, labels).unwrap_or(false)
            })
            .map(|(_, vf)| vf)
            .min_by(|a, b| a.bus_id.cmp(&b.bus_id))
    }
}

/// One device picked for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommonPick {
    pub minor: i32,
    pub units: i64,
    pub vf: Option<VirtualFunction>,
}

/// A node's devices of one kind, by minor.
pub type CommonDevices = BTreeMap<i32, CommonDevice>;

/// How devices are ordered and counted beyond the request itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Placement<'a> {
    /// Fullest device first (MostAllocated) instead of emptiest first.
    pub pack: bool,
    /// PCIe switches of a joint allocation's primary devices: devices there
    /// come first, round robin over the switches, and up to one per switch
    /// is taken even beyond the requested count (upstream's best effort).
    pub preferred_pcies: Option<&'a BTreeSet<String>>,
    /// The joint allocation requires the same PCIe switches: at least one
    /// device per preferred switch is needed.
    pub one_per_pcie: bool,
}

impl Placement<'_> {
    pub fn plain(pack: bool) -> Self {
        Placement {
            pack,
            ..Default::default()
        }
    }
}

/// Picks the devices for `request`. A node without any usable device of
/// the kind (healthy, matching the selector) cannot ever fit
/// (unresolvable); one whose devices are too used may after a release.
pub fn choose(
    devices: Option<&CommonDevices>,
    request: &CommonRequest,
    placement: &Placement<'_>,
) -> Result<Vec<CommonPick>, Rejection> {
    let usable: Vec<(&i32, &CommonDevice)> = devices
        .into_iter()
        .flatten()
        .filter(|(_, d)| d.total > 0)
        .filter(|(_, d)| {
            request
                .selector
                .as_ref()
                .is_none_or(|s| label_selector_matches(s, &d.labels).unwrap_or(false))
        })
        .collect();
    if usable.is_empty() {
        return Err(Rejection::unresolvable(request.kind.insufficient()));
    }
    let mut wanted = if request.all_devices {
        usable.len()
    } else {
        usize::try_from(request.count).unwrap_or(usize::MAX)
    };
    let preferred = placement
        .preferred_pcies
        .filter(|p| !p.is_empty() && !request.all_devices);
    let mut take = wanted;
    if let Some(pcies) = preferred {
        if placement.one_per_pcie {
            wanted = wanted.max(pcies.len());
        }
        take = wanted.max(pcies.len());
    }
    let mut fitting: Vec<(i32, &CommonDevice)> = usable
        .into_iter()
        .filter(|(_, d)| d.free() >= request.per_device)
        .filter(|(_, d)| {
            request
                .vf_selector
                .as_ref()
                .is_none_or(|s| d.free_vf(s).is_some())
        })
        .map(|(minor, d)| (*minor, d))
        .collect();
    // Least allocated first: the highest free share, then the lowest minor
    // (cross-multiplied in i128: Device CR totals may be huge); reversed
    // share order when packing.
    let share = |free: i64, total: i64| i128::from(free) * i128::from(total);
    fitting.sort_by(|(a_minor, a), (b_minor, b)| {
        let by_share = share(b.free(), a.total).cmp(&share(a.free(), b.total));
        let by_share = if placement.pack {
            by_share.reverse()
        } else {
            by_share
        };
        by_share.then(a_minor.cmp(b_minor))
    });
    if let Some(pcies) = preferred {
        fitting = round_robin_by_pcie(fitting, pcies);
    }
    if !request.preferred.is_empty() {
        // Stable: otherwise in the order above.
        fitting.sort_by_key(|(minor, _)| !request.preferred.contains(minor));
    }
    if fitting.len() < wanted {
        return Err(Rejection::unschedulable(request.kind.insufficient()));
    }
    Ok(fitting
        .into_iter()
        .take(take)
        .map(|(minor, device)| CommonPick {
            minor,
            units: request.per_device,
            vf: request
                .vf_selector
                .as_ref()
                .and_then(|s| device.free_vf(s).cloned()),
        })
        .collect())
}

/// A device by minor, as ordered for picking.
type Candidate<'a> = (i32, &'a CommonDevice);

/// Devices on the preferred switches first: the best of each switch, then
/// the second best of each, and so on (each round in the given order),
/// then the others in the given order.
fn round_robin_by_pcie<'a>(
    ordered: Vec<(i32, &'a CommonDevice)>,
    preferred: &BTreeSet<String>,
) -> Vec<(i32, &'a CommonDevice)> {
    // Each device with its rank in `ordered`.
    let mut groups: BTreeMap<&str, Vec<(usize, Candidate<'a>)>> = BTreeMap::new();
    let mut others = Vec::new();
    for (rank, entry) in ordered.into_iter().enumerate() {
        match entry.1.pcie.as_deref().filter(|p| preferred.contains(*p)) {
            Some(pcie) => groups.entry(pcie).or_default().push((rank, entry)),
            None => others.push(entry),
        }
    }
    let rounds = groups.values().map(Vec::len).max().unwrap_or(0);
    let mut result = Vec::new();
    for round in 0..rounds {
        let mut this_round: Vec<(usize, Candidate<'_>)> = groups
            .values()
            .filter_map(|group| group.get(round).copied())
            .collect();
        this_round.sort_by_key(|(rank, _)| *rank);
        result.extend(this_round.into_iter().map(|(_, entry)| entry));
    }
    result.extend(others);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(used: &[i64]) -> CommonDevices {
        used.iter()
            .enumerate()
            .map(|(minor, used)| {
                (
                    i32::try_from(minor).unwrap_or(0),
                    CommonDevice {
                        total: 100,
                        used: *used,
                        ..Default::default()
                    },
                )
            })
            .collect()
    }

    fn choose_plain(
        devices: Option<&CommonDevices>,
        request: &CommonRequest,
    ) -> Result<Vec<CommonPick>, Rejection> {
        choose(devices, request, &Placement::plain(false))
    }

    fn rdma(count: i64, per_device: i64) -> CommonRequest {
        CommonRequest {
            kind: CommonKind::Rdma,
            count,
            per_device,
            ..Default::default()
        }
    }

    fn picked(picks: Result<Vec<CommonPick>, Rejection>) -> Vec<(i32, i64)> {
        picks
            .unwrap()
            .into_iter()
            .map(|p| (p.minor, p.units))
            .collect()
    }

    #[test]
    fn least_allocated_device_first_then_minor() {
        let node = devices(&[50, 0, 20, 0]);
        assert_eq!(
            picked(choose_plain(Some(&node), &rdma(1, 10))),
            vec![(1, 10)]
        );
        assert_eq!(
            picked(choose_plain(Some(&node), &rdma(3, 50))),
            vec![(1, 50), (3, 50), (2, 50)]
        );
    }

    #[test]
    fn whole_devices_need_untouched_ones_and_missing_devices_are_unresolvable() {
        let node = devices(&[1, 0, 0]);
        assert_eq!(
            picked(choose_plain(Some(&node), &rdma(2, 100))),
            vec![(1, 100), (2, 100)]
        );
        let err = choose_plain(Some(&node), &rdma(3, 100)).err();
        assert_eq!(
            err,
            Some(Rejection::unschedulable("Insufficient rdma devices"))
        );
        let unhealthy = BTreeMap::from([(0, CommonDevice::default())]);
        for node in [None, Some(&unhealthy)] {
            assert_eq!(
                choose_plain(node, &rdma(1, 1)).err(),
                Some(Rejection::unresolvable("Insufficient rdma devices"))
            );
        }
    }

    #[test]
    fn huge_device_totals_order_without_overflow() {
        let huge = |used| CommonDevice {
            total: i64::MAX,
            used,
            ..Default::default()
        };
        let node: CommonDevices = BTreeMap::from([(0, huge(i64::MAX / 2)), (1, huge(1))]);
        // Device 1 has more left; free × total overflows i64 for both.
        assert_eq!(
            picked(choose_plain(Some(&node), &rdma(1, 100))),
            vec![(1, 100)]
        );
    }

    fn nic(labels: &[(&str, &str)], vfs: &[(&str, &str)], used_vfs: &[&str]) -> CommonDevice {
        let group = |kind: &str| BTreeMap::from([("type".to_string(), kind.to_string())]);
        CommonDevice {
            total: 100,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            vfs: vfs
                .iter()
                .map(|(kind, bus)| {
                    (
                        group(kind),
                        VirtualFunction {
                            minor: 0,
                            bus_id: bus.to_string(),
                        },
                    )
                })
                .collect(),
            used_vfs: used_vfs.iter().map(|b| b.to_string()).collect(),
            ..Default::default()
        }
    }

    fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn hints_select_devices_count_them_and_pick_free_vfs() {
        let node: CommonDevices = BTreeMap::from([
            (
                0,
                nic(
                    &[("fabric", "a")],
                    &[("gpu", "0000:1f:00.3"), ("gpu", "0000:1f:00.2")],
                    &["0000:1f:00.2"],
                ),
            ),
            (1, nic(&[("fabric", "a")], &[("cpu", "0000:90:00.2")], &[])),
            (2, nic(&[("fabric", "b")], &[("gpu", "0000:a0:00.2")], &[])),
        ]);
        // ApplyForAll with a selector: both fabric-a NICs.
        let all = CommonRequest {
            all_devices: true,
            per_device: 1,
            selector: Some(selector(&[("fabric", "a")])),
            ..Default::default()
        };
        assert_eq!(
            picked(choose_plain(Some(&node), &all)),
            vec![(0, 1), (1, 1)]
        );
        // A VF from a "gpu" group: NIC 1 has none; NIC 0's free one is .3.
        let vf = CommonRequest {
            count: 1,
            per_device: 1,
            selector: Some(selector(&[("fabric", "a")])),
            vf_selector: Some(selector(&[("type", "gpu")])),
            ..Default::default()
        };
        let picks = choose_plain(Some(&node), &vf).unwrap();
        assert_eq!(picks.len(), 1);
        assert_eq!(picks[0].minor, 0);
        assert_eq!(picks[0].vf.as_ref().unwrap().bus_id, "0000:1f:00.3");
        // Two such VFs on fabric a do not exist.
        let two = CommonRequest { count: 2, ..vf };
        assert_eq!(
            choose_plain(Some(&node), &two).err(),
            Some(Rejection::unschedulable("Insufficient rdma devices"))
        );
        // A selector nothing matches: unresolvable.
        let none = CommonRequest {
            count: 1,
            per_device: 1,
            selector: Some(selector(&[("fabric", "z")])),
            ..Default::default()
        };
        assert_eq!(
            choose_plain(Some(&node), &none).err(),
            Some(Rejection::unresolvable("Insufficient rdma devices"))
        );
    }
}
