//! RDMA device resources (upstream noderesource plugin
//! `RDMADeviceResource`): `koordinator.sh/rdma` on the Node from its Device
//! CR.
//!
//! Pure. Upstream's rules: 100 per healthy RDMA device (the amounts the
//! Device lists are not read); no Device for the node, or no healthy RDMA
//! device in it, removes the resource. The plugin writes no labels.

use std::collections::BTreeMap;

use apis::extension::RESOURCE_RDMA;
use apis::scheduling::v1alpha1::{Device, DeviceType};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::device_items::{DeviceItems, DeviceResourceError, Sum, healthy_devices};
use super::resources::is_resource_diff;

/// The plugin's name in `--noderesource-plugins`.
pub const PLUGIN_NAME: &str = "RDMADeviceResource";

/// The resources the plugin writes or resets.
pub const RESOURCE_NAMES: [&str; 1] = [RESOURCE_RDMA];

/// Upstream's messages.
pub const RESET_RESOURCES_MSG: &str = "reset node rdma resources";
pub const UPDATE_RESOURCES_MSG: &str = "node rdma resources from device";
pub const NEED_SYNC_FOR_RESOURCE_DIFF: &str = "rdma resource diff is big than threshold";

/// The plugin's resources reset (removed from the node).
pub fn reset() -> DeviceItems {
    DeviceItems {
        resources: RESOURCE_NAMES.iter().map(|name| (*name, None)).collect(),
        labels: BTreeMap::new(),
        message: RESET_RESOURCES_MSG,
    }
}

/// Upstream `Calculate`: `koordinator.sh/rdma` of the node from its Device
/// (`None`: no Device named after the node).
pub fn calculate(node: &Node, device: Option<&Device>) -> Result<DeviceItems, DeviceResourceError> {
    if node
        .status
        .as_ref()
        .and_then(|status| status.allocatable.as_ref())
        .is_none()
    {
        return Err(DeviceResourceError::MissingArguments);
    }
    let Some(device) = device else {
        return Ok(reset());
    };
    let healthy = healthy_devices(device, DeviceType::Rdma).count();
    if healthy == 0 {
        return Ok(reset());
    }
    let count = i64::try_from(healthy).unwrap_or(i64::MAX);
    Ok(DeviceItems {
        resources: BTreeMap::from([(
            RESOURCE_RDMA,
            Some(Sum::units(count.saturating_mul(100)).quantity()),
        )]),
        labels: BTreeMap::new(),
        message: UPDATE_RESOURCES_MSG,
    })
}

/// Upstream `NeedSync`: `koordinator.sh/rdma` appears, vanishes or moves
/// beyond `threshold` between the node's allocatable and the prepared one.
pub fn need_sync(
    threshold: f64,
    old: &BTreeMap<String, Quantity>,
    new: &BTreeMap<String, Quantity>,
) -> Option<&'static str> {
    RESOURCE_NAMES
        .iter()
        .any(|name| is_resource_diff(old.get(*name), new.get(*name), threshold))
        .then_some(NEED_SYNC_FOR_RESOURCE_DIFF)
}

#[cfg(test)]
mod tests {
    //! Cases transcribed from upstream's
    //! `noderesource/plugins/rdmadevicereource/plugin_test.go` (the
    //! "get device object error" case has no counterpart: the Device comes
    //! from the controller's cache).

    use super::*;
    use crate::slo_controller::device_resources::prepare;
    use apis::scheduling::v1alpha1::{DeviceInfo, DeviceSpec};
    use k8s_openapi::api::core::v1::NodeStatus;

    fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

    fn allocatable(extra: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        let mut pairs = vec![("cpu", "100"), ("memory", "400Gi")];
        pairs.extend_from_slice(extra);
        list(&pairs)
    }

    fn node() -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("test-node".into());
        node.status = Some(NodeStatus {
            allocatable: Some(allocatable(&[])),
            capacity: Some(allocatable(&[])),
            ..NodeStatus::default()
        });
        node
    }

    fn rdma(health: bool) -> DeviceInfo {
        DeviceInfo {
            type_: Some(DeviceType::Rdma),
            health,
            resources: Some(list(&[(RESOURCE_RDMA, "200")])),
            ..DeviceInfo::default()
        }
    }

    fn device(infos: Vec<DeviceInfo>) -> Device {
        Device::new(
            "test-node",
            DeviceSpec {
                devices: Some(infos),
            },
        )
    }

    #[test]
    fn calculate_follows_upstream() {
        let two = device(vec![rdma(true), rdma(true)]);
        let updated = DeviceItems {
            resources: BTreeMap::from([(RESOURCE_RDMA, Some(Quantity("200".into())))]),
            labels: BTreeMap::new(),
            message: UPDATE_RESOURCES_MSG,
        };
        let cases: Vec<(&str, Option<Device>, DeviceItems)> = vec![
            ("calculate device resources", Some(two), updated),
            ("no device: reset", None, reset()),
            (
                "no rdma in device: reset",
                Some(device(Vec::new())),
                reset(),
            ),
            (
                "only unhealthy rdma: reset",
                Some(device(vec![rdma(false)])),
                reset(),
            ),
        ];
        for (name, device, want) in cases {
            assert_eq!(calculate(&node(), device.as_ref()), Ok(want), "{name}");
        }
        assert_eq!(
            calculate(&Node::default(), None),
            Err(DeviceResourceError::MissingArguments),
            "args missing essential fields"
        );
        // One healthy of three counts once.
        let mixed = device(vec![rdma(true), rdma(false), rdma(false)]);
        assert_eq!(
            calculate(&node(), Some(&mixed)).unwrap().resources[RESOURCE_RDMA],
            Some(Quantity("100".into()))
        );
    }

    #[test]
    fn need_sync_follows_upstream() {
        let without = allocatable(&[]);
        let with = allocatable(&[(RESOURCE_RDMA, "200")]);
        let updated = allocatable(&[(RESOURCE_RDMA, "300")]);
        let cases = [
            ("both without rdma", &without, &without, None),
            ("both with rdma", &with, &with, None),
            (
                "add resources",
                &without,
                &with,
                Some(NEED_SYNC_FOR_RESOURCE_DIFF),
            ),
            (
                "resource update",
                &with,
                &updated,
                Some(NEED_SYNC_FOR_RESOURCE_DIFF),
            ),
            (
                "delete resources",
                &with,
                &without,
                Some(NEED_SYNC_FOR_RESOURCE_DIFF),
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(need_sync(0.1, old, new), want, "{name}");
        }
    }

    #[test]
    fn prepare_follows_upstream() {
        let mut list = allocatable(&[]);
        prepare(&mut list, &BTreeMap::new());
        assert_eq!(list, allocatable(&[]), "nothing to prepare");
        prepare(
            &mut list,
            &BTreeMap::from([(RESOURCE_RDMA, Some(Quantity("200".into())))]),
        );
        assert_eq!(list, allocatable(&[(RESOURCE_RDMA, "200")]), "update");
        prepare(&mut list, &reset().resources);
        assert_eq!(list, allocatable(&[]), "reset");
    }
}
