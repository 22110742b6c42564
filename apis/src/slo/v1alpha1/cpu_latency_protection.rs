//! (ours) The CPU latency-protection loop's settings, carried as the NodeSLO
//! extension `spec.extensions.Object["cpuLatencyProtection"]` (upstream has
//! no such loop; the extension map keeps upstream's NodeSLO schema intact).
//!
//! When enabled, koordlet's `cpusuppress` sizes BE's CPU from the LS pods'
//! run-queue wait instead of the fixed `cpuSuppressThresholdPercent`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::slo_extension::ExtensionsMap;

/// The extension key in `NodeSLOSpec.extensions`.
pub const CPU_LATENCY_PROTECTION_EXTENSION_KEY: &str = "cpuLatencyProtection";

/// Defaults of the optional fields.
pub const DEFAULT_TARGET_WAIT_PERCENT: i64 = 10;
pub const DEFAULT_HOLD_BAND_PERCENT: i64 = 30;
pub const DEFAULT_MIN_BE_CPU_PERCENT: i64 = 5;
pub const DEFAULT_MAX_BE_CPU_PERCENT: i64 = 100;
pub const DEFAULT_INCREASE_STEP_PERCENT: i64 = 5;
pub const DEFAULT_DECREASE_FACTOR_PERCENT: i64 = 50;

/// The extension as written in the NodeSLO (every field optional). Unknown
/// fields are refused: a misspelt bound must not silently become a default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CPULatencyProtectionStrategy {
    /// Turns the loop on; off when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// The LS pods' run-queue wait the loop aims below, as a percentage of
    /// their CPU run time in the same interval (1..=1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_wait_percent: Option<i64>,
    /// Deadband below the target, as a percentage of it (0..=90): between
    /// `target × (1 - band)` and the target the BE limit holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_band_percent: Option<i64>,
    /// BE never gets less than this share of the node's CPU (0..=100).
    #[serde(
        default,
        rename = "minBECPUPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub min_be_cpu_percent: Option<i64>,
    /// BE never gets more than this share of the node's CPU (1..=100, at
    /// least `minBECPUPercent`).
    #[serde(
        default,
        rename = "maxBECPUPercent",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_be_cpu_percent: Option<i64>,
    /// Additive increase per round below the band, as a share of the node's
    /// CPU (1..=50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub increase_step_percent: Option<i64>,
    /// Multiplicative decrease above the target: the limit becomes this
    /// percentage of itself (1..=99).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decrease_factor_percent: Option<i64>,
}

/// Validated settings with defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CPULatencyProtection {
    pub target_wait_percent: i64,
    pub hold_band_percent: i64,
    pub min_be_cpu_percent: i64,
    pub max_be_cpu_percent: i64,
    pub increase_step_percent: i64,
    pub decrease_factor_percent: i64,
}

/// Why the extension cannot be used (the loop stays off).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CPULatencyProtectionError {
    #[error("extension {CPU_LATENCY_PROTECTION_EXTENSION_KEY} is not valid: {0}")]
    Malformed(String),
    #[error(
        "extension {CPU_LATENCY_PROTECTION_EXTENSION_KEY}: {field} = {value} is outside {range}"
    )]
    OutOfRange {
        field: &'static str,
        value: i64,
        range: &'static str,
    },
    #[error(
        "extension {CPU_LATENCY_PROTECTION_EXTENSION_KEY}: minBECPUPercent {min} is above maxBECPUPercent {max}"
    )]
    MinAboveMax { min: i64, max: i64 },
}

impl CPULatencyProtectionStrategy {
    /// The settings when enabled, `None` when not; an out-of-range field is
    /// an error (the caller keeps the loop off).
    pub fn resolve(&self) -> Result<Option<CPULatencyProtection>, CPULatencyProtectionError> {
        if self.enable != Some(true) {
            return Ok(None);
        }
        let field = |name: &'static str,
                     value: Option<i64>,
                     default: i64,
                     (low, high, range): (i64, i64, &'static str)| {
            let value = value.unwrap_or(default);
            if (low..=high).contains(&value) {
                Ok(value)
            } else {
                Err(CPULatencyProtectionError::OutOfRange {
                    field: name,
                    value,
                    range,
                })
            }
        };
        let settings = CPULatencyProtection {
            target_wait_percent: field(
                "targetWaitPercent",
                self.target_wait_percent,
                DEFAULT_TARGET_WAIT_PERCENT,
                (1, 1000, "1..=1000"),
            )?,
            hold_band_percent: field(
                "holdBandPercent",
                self.hold_band_percent,
                DEFAULT_HOLD_BAND_PERCENT,
                (0, 90, "0..=90"),
            )?,
            min_be_cpu_percent: field(
                "minBECPUPercent",
                self.min_be_cpu_percent,
                DEFAULT_MIN_BE_CPU_PERCENT,
                (0, 100, "0..=100"),
            )?,
            max_be_cpu_percent: field(
                "maxBECPUPercent",
                self.max_be_cpu_percent,
                DEFAULT_MAX_BE_CPU_PERCENT,
                (1, 100, "1..=100"),
            )?,
            increase_step_percent: field(
                "increaseStepPercent",
                self.increase_step_percent,
                DEFAULT_INCREASE_STEP_PERCENT,
                (1, 50, "1..=50"),
            )?,
            decrease_factor_percent: field(
                "decreaseFactorPercent",
                self.decrease_factor_percent,
                DEFAULT_DECREASE_FACTOR_PERCENT,
                (1, 99, "1..=99"),
            )?,
        };
        if settings.min_be_cpu_percent > settings.max_be_cpu_percent {
            return Err(CPULatencyProtectionError::MinAboveMax {
                min: settings.min_be_cpu_percent,
                max: settings.max_be_cpu_percent,
            });
        }
        Ok(Some(settings))
    }

    /// The extension of a NodeSLO's `extensions`: `Ok(None)` when absent.
    pub fn from_extensions(
        extensions: Option<&ExtensionsMap>,
    ) -> Result<Option<Self>, CPULatencyProtectionError> {
        let Some(value) =
            extensions.and_then(|map| map.object.get(CPU_LATENCY_PROTECTION_EXTENSION_KEY))
        else {
            return Ok(None);
        };
        Self::deserialize(value)
            .map(Some)
            .map_err(|err| CPULatencyProtectionError::Malformed(err.to_string()))
    }
}

/// The enabled settings of a NodeSLO's extensions: `Ok(None)` when the
/// extension is absent or not enabled.
pub fn cpu_latency_protection(
    extensions: Option<&ExtensionsMap>,
) -> Result<Option<CPULatencyProtection>, CPULatencyProtectionError> {
    match CPULatencyProtectionStrategy::from_extensions(extensions)? {
        Some(strategy) => strategy.resolve(),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn extensions(value: serde_json::Value) -> ExtensionsMap {
        serde_json::from_value(json!({ "Object": { "cpuLatencyProtection": value } })).unwrap()
    }

    #[test]
    fn absent_or_disabled_is_off_and_defaults_fill_in() {
        assert_eq!(cpu_latency_protection(None), Ok(None));
        assert_eq!(
            cpu_latency_protection(Some(&ExtensionsMap::default())),
            Ok(None)
        );
        let off = extensions(json!({"enable": false, "targetWaitPercent": 5}));
        assert_eq!(cpu_latency_protection(Some(&off)), Ok(None));
        let on =
            extensions(json!({"enable": true, "targetWaitPercent": 20, "maxBECPUPercent": 80}));
        assert_eq!(
            cpu_latency_protection(Some(&on)),
            Ok(Some(CPULatencyProtection {
                target_wait_percent: 20,
                hold_band_percent: DEFAULT_HOLD_BAND_PERCENT,
                min_be_cpu_percent: DEFAULT_MIN_BE_CPU_PERCENT,
                max_be_cpu_percent: 80,
                increase_step_percent: DEFAULT_INCREASE_STEP_PERCENT,
                decrease_factor_percent: DEFAULT_DECREASE_FACTOR_PERCENT,
            }))
        );
    }

    #[test]
    fn bad_settings_are_refused_with_the_field_named() {
        let cases = [
            (
                json!({"enable": true, "targetWaitPercent": 0}),
                "targetWaitPercent = 0",
            ),
            (
                json!({"enable": true, "holdBandPercent": 95}),
                "holdBandPercent = 95",
            ),
            (
                json!({"enable": true, "minBECPUPercent": -1}),
                "minBECPUPercent = -1",
            ),
            (
                json!({"enable": true, "maxBECPUPercent": 0}),
                "maxBECPUPercent = 0",
            ),
            (
                json!({"enable": true, "increaseStepPercent": 51}),
                "increaseStepPercent = 51",
            ),
            (
                json!({"enable": true, "decreaseFactorPercent": 100}),
                "decreaseFactorPercent = 100",
            ),
            (
                json!({"enable": true, "minBECPUPercent": 60, "maxBECPUPercent": 50}),
                "minBECPUPercent 60 is above maxBECPUPercent 50",
            ),
            (
                json!({"enable": true, "targetWaitPercnt": 5}),
                "unknown field",
            ),
            (json!({"enable": "yes"}), "not valid"),
            (json!([1, 2]), "not valid"),
        ];
        for (value, want) in cases {
            let err = cpu_latency_protection(Some(&extensions(value.clone())))
                .expect_err(&value.to_string())
                .to_string();
            assert!(err.contains(want), "{value}: {err}");
        }
    }

    #[test]
    fn the_wire_shape_round_trips() {
        let strategy = CPULatencyProtectionStrategy {
            enable: Some(true),
            min_be_cpu_percent: Some(10),
            ..Default::default()
        };
        let value = serde_json::to_value(&strategy).unwrap();
        assert_eq!(value, json!({"enable": true, "minBECPUPercent": 10}));
        let back: CPULatencyProtectionStrategy = serde_json::from_value(value).unwrap();
        assert_eq!(back, strategy);
    }
}
