//! Quantities the binaries exchange: milli-CPU, bytes and CFS bandwidth
//! quotas, with the kubelet's conversions between them.

use std::fmt;

/// Thousandths of a CPU core (Kubernetes' `m` unit: `500m` is half a core).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MilliCpu(pub i64);

impl MilliCpu {
    pub fn from_cores(cores: f64) -> Self {
        Self((cores * 1000.0).round() as i64)
    }

    pub fn as_cores(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

impl fmt::Display for MilliCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}m", self.0)
    }
}

/// A byte count (memory limits, usage).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bytes(pub u64);

impl Bytes {
    /// From a signed count (a Kubernetes quantity's value, a kernel file):
    /// negative amounts, which no memory size can be, become zero.
    pub fn from_i64_or_zero(value: i64) -> Self {
        Self(u64::try_from(value).unwrap_or(0))
    }

    /// As a signed count for arithmetic that may go below zero (saturates
    /// at `i64::MAX`, far above any memory size).
    pub fn as_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }

    /// `self - other`, zero when `other` is larger.
    pub fn saturating_sub(self, other: Self) -> Self {
        Self(self.0.saturating_sub(other.0))
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A data rate in bytes per second: the unit the kernel's traffic control
/// stores HTB rates in (`tc_ratespec.rate` and `TCA_HTB_RATE64`), where
/// configuration speaks bits per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BytesPerSecond(pub u64);

impl BytesPerSecond {
    /// From bits per second, rounding down to whole bytes as `tc` does.
    pub fn from_bits_per_second(bits: u64) -> Self {
        Self(bits / 8)
    }
}

impl fmt::Display for BytesPerSecond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}B/s", self.0)
    }
}

/// The CFS period the kubelet and upstream koordlet use, in microseconds.
pub const DEFAULT_CFS_PERIOD_US: u64 = 100_000;

/// Smallest quota the kernel accepts, in microseconds (except "unlimited").
pub const MIN_CFS_QUOTA_US: u64 = 1_000;

/// A CFS bandwidth quota per period: unlimited (`-1` in v1, `max` in v2) or a
/// number of microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CfsQuota {
    Unlimited,
    Micros(u64),
}

/// A quota value outside what the kernel accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CFS quota {0}: expected -1 (unlimited) or a non-negative number of microseconds")]
pub struct CfsQuotaError(pub i64);

impl CfsQuota {
    /// The quota giving `milli` CPUs per `period_us`, as the kubelet computes
    /// it (`milli * period / 1000`); zero or negative means unlimited.
    pub fn from_milli_cpu(milli: MilliCpu, period_us: u64) -> Self {
        if milli.0 <= 0 {
            return Self::Unlimited;
        }
        let quota = (milli.0 as u128 * period_us as u128 / 1000).min(u64::MAX as u128) as u64;
        Self::Micros(quota)
    }

    /// From the v1 file value: `-1` is unlimited.
    pub fn from_v1(value: i64) -> Result<Self, CfsQuotaError> {
        match value {
            -1 => Ok(Self::Unlimited),
            v if v >= 0 => Ok(Self::Micros(v as u64)),
            v => Err(CfsQuotaError(v)),
        }
    }

    /// The v1 file value: `-1` for unlimited.
    pub fn as_v1(self) -> i64 {
        match self {
            Self::Unlimited => -1,
            Self::Micros(v) => v.min(i64::MAX as u64) as i64,
        }
    }

    /// CPUs this quota allows per `period_us` (`None` when unlimited).
    pub fn as_milli_cpu(self, period_us: u64) -> Option<MilliCpu> {
        match self {
            Self::Unlimited => None,
            Self::Micros(_) if period_us == 0 => None,
            Self::Micros(v) => Some(MilliCpu(
                (v as u128 * 1000 / period_us as u128).min(i64::MAX as u128) as i64,
            )),
        }
    }
}

impl PartialOrd for CfsQuota {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for CfsQuota {
    /// Unlimited is larger than any finite quota.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Self::Unlimited, Self::Unlimited) => std::cmp::Ordering::Equal,
            (Self::Unlimited, Self::Micros(_)) => std::cmp::Ordering::Greater,
            (Self::Micros(_), Self::Unlimited) => std::cmp::Ordering::Less,
            (Self::Micros(a), Self::Micros(b)) => a.cmp(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cfs_quota_conversions() {
        assert_eq!(
            CfsQuota::from_milli_cpu(MilliCpu(200), DEFAULT_CFS_PERIOD_US),
            CfsQuota::Micros(20_000)
        );
        assert_eq!(
            CfsQuota::from_milli_cpu(MilliCpu(0), DEFAULT_CFS_PERIOD_US),
            CfsQuota::Unlimited
        );
        assert_eq!(CfsQuota::from_v1(-1), Ok(CfsQuota::Unlimited));
        assert_eq!(CfsQuota::from_v1(50_000), Ok(CfsQuota::Micros(50_000)));
        assert_eq!(CfsQuota::from_v1(-2), Err(CfsQuotaError(-2)));
        assert_eq!(CfsQuota::Unlimited.as_v1(), -1);
        assert_eq!(
            CfsQuota::Micros(150_000).as_milli_cpu(100_000),
            Some(MilliCpu(1500))
        );
        assert_eq!(CfsQuota::Unlimited.as_milli_cpu(100_000), None);
        assert!(CfsQuota::Unlimited > CfsQuota::Micros(u64::MAX));
        assert!(CfsQuota::Micros(1) < CfsQuota::Micros(2));
        assert_eq!(MilliCpu::from_cores(1.5), MilliCpu(1500));
        assert_eq!(MilliCpu(250).to_string(), "250m");
    }

    #[test]
    fn bytes_per_second_from_bits() {
        assert_eq!(
            BytesPerSecond::from_bits_per_second(100_000_000),
            BytesPerSecond(12_500_000)
        );
        assert_eq!(BytesPerSecond::from_bits_per_second(15), BytesPerSecond(1));
        assert_eq!(BytesPerSecond(625_000).to_string(), "625000B/s");
    }

    #[test]
    fn bytes_signed_conversions() {
        assert_eq!(Bytes::from_i64_or_zero(-1), Bytes(0));
        assert_eq!(Bytes::from_i64_or_zero(4096), Bytes(4096));
        assert_eq!(Bytes(4096).as_i64(), 4096);
        assert_eq!(Bytes(u64::MAX).as_i64(), i64::MAX);
        assert_eq!(Bytes(10).saturating_sub(Bytes(4)), Bytes(6));
        assert_eq!(Bytes(4).saturating_sub(Bytes(10)), Bytes(0));
    }
}
