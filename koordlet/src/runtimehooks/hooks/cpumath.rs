//! CPU arithmetic shared by the hooks that set cpu.shares and CFS quota
//! (BatchResource, CPUNormalization) and by the reconciler: Kubernetes'
//! conversions from milli-CPU, clamped to what the kernel accepts.

use apis::extension::{QuantityValue, ResourceList};

use crate::runtimehooks::protocol::HookError;

/// Smallest and largest cpu.shares the kernel accepts.
pub const CPU_SHARES_MIN: i64 = 2;
pub const CPU_SHARES_MAX: i64 = 262_144;
/// Smallest positive CFS quota (µs).
pub const CFS_QUOTA_MIN: i64 = 1_000;

/// cpu.shares for a milli-CPU request (Kubernetes' formula, clamped).
pub fn milli_cpu_to_shares(milli_cpu: i64) -> i64 {
    if milli_cpu <= 0 {
        return CPU_SHARES_MIN;
    }
    (milli_cpu.saturating_mul(1024) / 1000).clamp(CPU_SHARES_MIN, CPU_SHARES_MAX)
}

/// CFS quota for a milli-CPU limit at `period_us`; no limit → -1.
pub fn milli_cpu_to_quota(milli_cpu: i64, period_us: i64) -> i64 {
    let quota = milli_cpu.saturating_mul(period_us) / 1000;
    if quota <= 0 {
        -1
    } else {
        quota.max(CFS_QUOTA_MIN)
    }
}

/// Divides a positive quota by a normalization ratio above 1 (rounding up).
pub fn scale_quota(quota: i64, ratio: Option<f64>) -> i64 {
    match ratio {
        Some(ratio) if quota > 0 && ratio > 1.0 => (quota as f64 / ratio).ceil() as i64,
        _ => quota,
    }
}

/// The whole-unit value of `name` in `list` (batch-cpu is counted in
/// milli-cores, batch-memory in bytes); `Ok(None)` when absent.
pub fn resource_value(list: &ResourceList, name: &str) -> Result<Option<i64>, HookError> {
    match list.get(name) {
        None => Ok(None),
        Some(quantity) => QuantityValue::of(quantity)
            .map(|value| Some(value.value()))
            .map_err(|error| HookError::Invalid(format!("resource {name}: {error}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_conversions_follow_kubernetes() {
        assert_eq!(milli_cpu_to_shares(500), 512);
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(1_000_000), CPU_SHARES_MAX);
        assert_eq!(milli_cpu_to_quota(1000, 100_000), 100_000);
        assert_eq!(milli_cpu_to_quota(0, 100_000), -1);
        assert_eq!(milli_cpu_to_quota(5, 100_000), 1_000);
        assert_eq!(scale_quota(100_000, Some(1.5)), 66_667);
        assert_eq!(scale_quota(100_000, Some(0.8)), 100_000);
        assert_eq!(scale_quota(-1, Some(2.0)), -1);
    }
}
