//! Joint allocation (`scheduling.koordinator.sh/device-joint-allocate`,
//! `{"deviceTypes": ["gpu", "rdma"], "requiredScope": "SamePCIe"}`), as
//! upstream: the first type is the primary and is allocated first; the
//! other types then prefer devices on the primary devices' PCIe switches,
//! one per switch in turn, taking up to one per switch even beyond their
//! count. With `requiredScope: SamePCIe` every other type's devices must sit
//! on exactly the primary's switches, else the node is turned away with
//! upstream's "node(s) Device Joint-Allocate rules violation". The rule
//! applies only when the pod asks for two or more device types.

use apis::extension::device_share::{DeviceJointAllocate, DeviceJointAllocateScope};

use super::common::CommonKind;

pub const ERR_JOINT_RULES_VIOLATION: &str = "node(s) Device Joint-Allocate rules violation";
pub const ERR_INSUFFICIENT_PRIMARY_DEVICE: &str = "node(s) Insufficient primary device";

/// A device type a joint allocation can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JointType {
    Gpu,
    Common(CommonKind),
}

impl JointType {
    fn parse(name: &str) -> Result<Self, String> {
        match name {
            "gpu" => Ok(JointType::Gpu),
            _ => CommonKind::ALL
                .into_iter()
                .find(|k| k.key() == name)
                .map(JointType::Common)
                .ok_or_else(|| format!("unsupported device type {name:?} in deviceTypes")),
        }
    }
}

/// A validated joint allocation rule for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JointRule {
    pub primary: JointType,
    /// The other listed types the pod requests, in the listed order.
    pub secondaries: Vec<JointType>,
    pub same_pcie: bool,
}

/// The rule for a pod requesting `requested` device types; None when the
/// annotation is absent, lists no types, or the pod asks for fewer than
/// two types (upstream then allocates each type alone).
pub fn joint_rule(
    joint: Option<&DeviceJointAllocate>,
    requested: &[JointType],
) -> Result<Option<JointRule>, String> {
    let Some(joint) = joint else {
        return Ok(None);
    };
    // Bounded: a type may appear once; there are only three.
    let mut types = Vec::new();
    for name in &joint.device_types {
        let parsed = JointType::parse(name)?;
        if types.contains(&parsed) {
            return Err(format!("device type {name:?} listed twice in deviceTypes"));
        }
        types.push(parsed);
    }
    let Some((&primary, rest)) = types.split_first() else {
        return Ok(None);
    };
    if requested.len() < 2 {
        return Ok(None);
    }
    Ok(Some(JointRule {
        primary,
        secondaries: rest
            .iter()
            .copied()
            .filter(|t| requested.contains(t))
            .collect(),
        same_pcie: joint.required_scope == Some(DeviceJointAllocateScope::SamePCIe),
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parse(json: &str) -> DeviceJointAllocate {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn rules_need_two_requested_types_and_known_names() {
        let both = [JointType::Gpu, JointType::Common(CommonKind::Rdma)];
        let joint = parse(r#"{"deviceTypes":["gpu","rdma"],"requiredScope":"SamePCIe"}"#);
        assert_eq!(
            joint_rule(Some(&joint), &both).unwrap(),
            Some(JointRule {
                primary: JointType::Gpu,
                secondaries: vec![JointType::Common(CommonKind::Rdma)],
                same_pcie: true,
            })
        );
        // One requested type: no joint allocation.
        assert_eq!(joint_rule(Some(&joint), &both[..1]).unwrap(), None);
        // No types: none.
        assert_eq!(joint_rule(Some(&parse("{}")), &both).unwrap(), None);
        // Preferred only (no required scope).
        let preferred = parse(r#"{"deviceTypes":["rdma","gpu"]}"#);
        let rule = joint_rule(Some(&preferred), &both).unwrap().unwrap();
        assert_eq!(rule.primary, JointType::Common(CommonKind::Rdma));
        assert!(!rule.same_pcie);
        // Unknown or repeated names are refused.
        assert!(
            joint_rule(Some(&parse(r#"{"deviceTypes":["gpu","tpu"]}"#)), &both)
                .err()
                .unwrap()
                .contains("tpu")
        );
        assert!(
            joint_rule(Some(&parse(r#"{"deviceTypes":["gpu","gpu"]}"#)), &both)
                .err()
                .unwrap()
                .contains("twice")
        );
    }
}
