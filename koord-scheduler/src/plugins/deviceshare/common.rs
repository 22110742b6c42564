//! RDMA and FPGA devices: each device offers 100 units (its Device CR
//! resource); a request up to 100 is a share of one device, a multiple of
//! 100 asks for that many whole devices. Devices are taken least allocated
//! first (upstream's default scoring), then by minor.

use std::collections::BTreeMap;

use apis::extension::device_share::{RESOURCE_FPGA, RESOURCE_RDMA};
use apis::scheduling::v1alpha1::DeviceType;

use crate::cache::PodInfo;
use crate::framework::Rejection;

/// A device type handled the common way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CommonKind {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommonRequest {
    pub kind: CommonKind,
    /// How many devices.
    pub count: i64,
    /// Units taken from each (100 = whole device).
    pub per_device: i64,
}

/// The pod's RDMA / FPGA requests, validated: above 100 only whole devices.
pub fn common_requests(pod: &PodInfo) -> Result<Vec<CommonRequest>, String> {
    let mut requests = Vec::new();
    for kind in CommonKind::ALL {
        let amount = pod.requests.get(kind.resource());
        if amount <= 0 {
            continue;
        }
        let (count, per_device) = if amount > 100 {
            if amount % 100 != 0 {
                return Err(format!(
                    "invalid resource unit {}: {amount}",
                    kind.resource()
                ));
            }
            (amount / 100, 100)
        } else {
            (1, amount)
        };
        requests.push(CommonRequest {
            kind,
            count,
            per_device,
        });
    }
    Ok(requests)
}

/// One device's capacity (0 when unhealthy) and what pods use of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommonDevice {
    pub total: i64,
    pub used: i64,
}

impl CommonDevice {
    pub fn free(&self) -> i64 {
        self.total - self.used
    }
}

/// A node's devices of one kind, by minor.
pub type CommonDevices = BTreeMap<i32, CommonDevice>;

/// Picks `request.count` devices: minor → units. A node without any usable
/// device of the kind cannot ever fit (unresolvable); one whose devices are
/// too used may after a release.
pub fn choose(
    devices: Option<&CommonDevices>,
    request: &CommonRequest,
) -> Result<Vec<(i32, i64)>, Rejection> {
    let usable: Vec<(&i32, &CommonDevice)> = devices
        .into_iter()
        .flatten()
        .filter(|(_, d)| d.total > 0)
        .collect();
    if usable.is_empty() {
        return Err(Rejection::unresolvable(request.kind.insufficient()));
    }
    let mut fitting: Vec<(i32, &CommonDevice)> = usable
        .into_iter()
        .filter(|(_, d)| d.free() >= request.per_device)
        .map(|(minor, d)| (*minor, d))
        .collect();
    // Least allocated first: the highest free share, then the lowest minor.
    fitting.sort_by(|(a_minor, a), (b_minor, b)| {
        (b.free() * a.total)
            .cmp(&(a.free() * b.total))
            .then(a_minor.cmp(b_minor))
    });
    let wanted = usize::try_from(request.count).unwrap_or(usize::MAX);
    if fitting.len() < wanted {
        return Err(Rejection::unschedulable(request.kind.insufficient()));
    }
    Ok(fitting
        .into_iter()
        .take(wanted)
        .map(|(minor, _)| (minor, request.per_device))
        .collect())
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
                    },
                )
            })
            .collect()
    }

    fn rdma(count: i64, per_device: i64) -> CommonRequest {
        CommonRequest {
            kind: CommonKind::Rdma,
            count,
            per_device,
        }
    }

    #[test]
    fn least_allocated_device_first_then_minor() {
        let node = devices(&[50, 0, 20, 0]);
        assert_eq!(choose(Some(&node), &rdma(1, 10)), Ok(vec![(1, 10)]));
        assert_eq!(
            choose(Some(&node), &rdma(3, 50)),
            Ok(vec![(1, 50), (3, 50), (2, 50)])
        );
    }

    #[test]
    fn whole_devices_need_untouched_ones_and_missing_devices_are_unresolvable() {
        let node = devices(&[1, 0, 0]);
        assert_eq!(
            choose(Some(&node), &rdma(2, 100)),
            Ok(vec![(1, 100), (2, 100)])
        );
        let err = choose(Some(&node), &rdma(3, 100)).err();
        assert_eq!(
            err,
            Some(Rejection::unschedulable("Insufficient rdma devices"))
        );
        let unhealthy = BTreeMap::from([(0, CommonDevice { total: 0, used: 0 })]);
        for node in [None, Some(&unhealthy)] {
            assert_eq!(
                choose(node, &rdma(1, 1)).err(),
                Some(Rejection::unresolvable("Insufficient rdma devices"))
            );
        }
    }
}
