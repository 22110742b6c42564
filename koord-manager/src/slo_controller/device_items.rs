//! What a device plugin (GPU, RDMA) computes from a node's Device CR, and
//! the helpers both plugins compute it with: the Device's healthy devices
//! and exact quantity sums.

use std::collections::BTreeMap;

use apis::extension::QuantityValue;
use apis::scheduling::v1alpha1::{Device, DeviceInfo, DeviceType};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// What one device plugin's Calculate returns (upstream's resource items).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceItems {
    /// Per resource: the quantity for capacity and allocatable, or `None` to
    /// remove it. Resources the plugin manages but leaves out here are left
    /// as the node has them.
    pub resources: BTreeMap<&'static str, Option<Quantity>>,
    /// Node labels to set (upstream never removes them).
    pub labels: BTreeMap<&'static str, String>,
    /// Upstream's message for the result (e.g. `reset node gpu resources`).
    pub message: &'static str,
}

/// Why a device plugin produced nothing: the node's resources of that
/// plugin are left as they are.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceResourceError {
    /// Upstream's message for a node without `status.allocatable`.
    #[error("missing essential arguments")]
    MissingArguments,
    #[error("Device {device}: spec.devices[{index}].resources[{resource}]: {reason}")]
    InvalidAmount {
        device: String,
        index: usize,
        resource: String,
        reason: String,
    },
    #[error("Device {device}: the sum of {resource} over its healthy devices overflows")]
    Overflow { device: String, resource: String },
}

/// The healthy devices of `kind` in the Device, with their index in
/// `spec.devices`.
pub(crate) fn healthy_devices(
    device: &Device,
    kind: DeviceType,
) -> impl Iterator<Item = (usize, &DeviceInfo)> {
    device
        .spec
        .devices
        .iter()
        .flatten()
        .enumerate()
        .filter(move |(_, info)| info.health && info.type_.as_ref() == Some(&kind))
}

/// How a summed quantity is printed: like the first amount added, as Go's
/// `Quantity.Add` keeps the format of the quantity it adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Decimal,
    Binary,
}

fn format_of(text: &str) -> Format {
    const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if BINARY.iter().any(|suffix| text.ends_with(suffix)) {
        Format::Binary
    } else {
        Format::Decimal
    }
}

/// An exact sum of quantities, printed in the format of its first term.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sum {
    value: QuantityValue,
    format: Option<Format>,
}

impl Sum {
    pub(crate) const ZERO: Sum = Sum {
        value: QuantityValue::ZERO,
        format: None,
    };

    /// A whole-unit count in decimal form (e.g. `rdma` = 100 per device).
    pub(crate) fn units(units: i64) -> Sum {
        Sum {
            value: QuantityValue::from_units(units),
            format: Some(Format::Decimal),
        }
    }

    /// Adds one device's amount; a negative or unreadable one is refused.
    pub(crate) fn add(
        &mut self,
        quantity: &Quantity,
        at: impl FnOnce() -> (String, usize, String),
    ) -> Result<(), DeviceResourceError> {
        let invalid = |reason: String, at: (String, usize, String)| {
            let (device, index, resource) = at;
            DeviceResourceError::InvalidAmount {
                device,
                index,
                resource,
                reason,
            }
        };
        let value = match QuantityValue::of(quantity) {
            Ok(value) if value.is_negative() => {
                return Err(invalid(format!("negative amount {:?}", quantity.0), at()));
            }
            Ok(value) => value,
            Err(error) => return Err(invalid(error.to_string(), at())),
        };
        let Some(total) = self.value.checked_add(value) else {
            let (device, _, resource) = at();
            return Err(DeviceResourceError::Overflow { device, resource });
        };
        self.value = total;
        self.format.get_or_insert(format_of(&quantity.0));
        Ok(())
    }

    pub(crate) fn quantity(self) -> Quantity {
        Quantity(match self.format {
            Some(Format::Binary) => self.value.to_binary_si(),
            _ => self.value.to_decimal_si(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Quantity {
        Quantity(text.to_owned())
    }

    #[test]
    fn sums_keep_the_first_format_and_refuse_bad_amounts() {
        let mut sum = Sum::ZERO;
        for text in ["16Gi", "16Gi"] {
            sum.add(&q(text), || ("d".into(), 0, "m".into())).unwrap();
        }
        assert_eq!(sum.quantity(), q("32Gi"));
        let mut mixed = Sum::ZERO;
        mixed
            .add(&q("8000"), || ("d".into(), 0, "m".into()))
            .unwrap();
        mixed
            .add(&q("1Ki"), || ("d".into(), 1, "m".into()))
            .unwrap();
        assert_eq!(mixed.quantity(), q("9024"));
        assert_eq!(Sum::ZERO.quantity(), q("0"));
        let mut negative = Sum::ZERO;
        let err = negative
            .add(&q("-1"), || {
                ("n1".into(), 3, "koordinator.sh/gpu-core".into())
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Device n1: spec.devices[3].resources[koordinator.sh/gpu-core]: negative amount \"-1\""
        );
        let mut unreadable = Sum::ZERO;
        assert!(
            unreadable
                .add(&q("lots"), || ("n1".into(), 0, "r".into()))
                .is_err()
        );
    }
}
