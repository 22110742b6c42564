//! Exact arithmetic on Kubernetes resource quantities (`"500m"`, `"1.5Gi"`,
//! `"2e3"`), enough for the comparisons and sums the extension helpers need
//! (QoS derivation, exact-match reservations, amplification).
//!
//! Values are held in nano-units, the finest precision Kubernetes keeps;
//! finer digits round up, as Kubernetes does when it parses a quantity.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// A quantity string that does not follow the Kubernetes grammar, or whose
/// value is beyond what is representable here (about ±1.7e29).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?}: {reason}")]
pub struct QuantityError {
    pub value: String,
    pub reason: &'static str,
}

/// The exact numeric value of a [`Quantity`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct QuantityValue {
    nanos: i128,
}

impl QuantityValue {
    pub const ZERO: QuantityValue = QuantityValue { nanos: 0 };

    /// Parses the Kubernetes quantity grammar: a signed decimal number and a
    /// suffix (`n u m "" k M G T P E`, `Ki Mi Gi Ti Pi Ei`, or `e<int>`).
    ///
    /// As Kubernetes does, digits finer than a nano-unit round up (away
    /// from zero), however many there are. A value beyond what a nano-unit
    /// count in 128 bits holds (about ±1.7e29) is an error, never clamped.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let fail = |reason| QuantityError {
            value: text.to_owned(),
            reason,
        };
        let (negative, rest) = match text.as_bytes().first() {
            None => return Err(fail("empty quantity")),
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let number_len = rest
            .bytes()
            .position(|b| !(b.is_ascii_digit() || b == b'.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if fraction.contains('.') {
            return Err(fail("more than one decimal point"));
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(fail("no digits"));
        }
        let (base_two_exponent, base_ten_exponent) =
            suffix_exponents(suffix).ok_or_else(|| fail("unknown suffix"))?;
        // Zeros that do not change the value are dropped, so that only
        // significant digits take part in the arithmetic below.
        let whole = whole.trim_start_matches('0');
        let fraction = fraction.trim_end_matches('0');
        let digits = || whole.bytes().chain(fraction.bytes());
        if digits().all(|d| d == b'0') {
            return Ok(QuantityValue::ZERO);
        }
        let Some(base_ten_exponent) = base_ten_exponent else {
            return Err(fail("value out of range"));
        };
        // value = digits × 10^(exponent − fraction length) × 2^base_two, and
        // in nano-units the power of ten grows by 9.
        let ten_power = 9 + i128::from(base_ten_exponent) - fraction.len() as i128;
        let digit_count = (whole.len() + fraction.len()) as i128;
        let too_large = || fail("value out of range");
        let magnitude = if ten_power >= 0 {
            // Every digit lands at or above nano precision.
            let mut mantissa: i128 = 0;
            for digit in digits() {
                mantissa = mantissa
                    .checked_mul(10)
                    .and_then(|m| m.checked_add(i128::from(digit - b'0')))
                    .ok_or_else(too_large)?;
            }
            let factor = u32::try_from(ten_power)
                .ok()
                .and_then(|p| 10i128.checked_pow(p))
                .ok_or_else(too_large)?;
            mantissa
                .checked_mul(factor)
                .and_then(|m| m.checked_mul(1i128 << base_two_exponent))
                .ok_or_else(too_large)?
        } else if base_two_exponent == 0 {
            // The last `-ten_power` digits are finer than a nano-unit: they
            // only decide whether to round up.
            let kept = usize::try_from((digit_count + ten_power).max(0)).unwrap_or(0);
            let mut mantissa: i128 = 0;
            let mut finer = false;
            for (index, digit) in digits().enumerate() {
                if index < kept {
                    mantissa = mantissa
                        .checked_mul(10)
                        .and_then(|m| m.checked_add(i128::from(digit - b'0')))
                        .ok_or_else(too_large)?;
                } else {
                    finer |= digit != b'0';
                }
            }
            mantissa
                .checked_add(i128::from(finer))
                .ok_or_else(too_large)?
        } else {
            // A binary suffix with more than nine fraction digits:
            // ⌈digits × 2^base_two / 10^(−ten_power)⌉.
            let mut mantissa: i128 = 0;
            for digit in digits() {
                mantissa = mantissa
                    .checked_mul(10)
                    .and_then(|m| m.checked_add(i128::from(digit - b'0')))
                    .ok_or_else(|| fail("too many significant digits"))?;
            }
            let scaled = mantissa
                .checked_mul(1i128 << base_two_exponent)
                .ok_or_else(|| fail("too many significant digits"))?;
            match u32::try_from(-ten_power)
                .ok()
                .and_then(|p| 10i128.checked_pow(p))
            {
                Some(divisor) => ceil_div(scaled, divisor),
                // The divisor exceeds any mantissa: a positive fraction of a nano-unit.
                None => 1,
            }
        };
        Ok(QuantityValue {
            nanos: if negative { -magnitude } else { magnitude },
        })
    }

    /// The value of a k8s-openapi [`Quantity`].
    pub fn of(quantity: &Quantity) -> Result<Self, QuantityError> {
        Self::parse(&quantity.0)
    }

    /// A value given in milli-units (e.g. milli-CPU).
    pub const fn from_milli(milli: i64) -> Self {
        QuantityValue {
            nanos: milli as i128 * 1_000_000,
        }
    }

    /// A value given in whole units (e.g. bytes).
    pub const fn from_units(units: i64) -> Self {
        QuantityValue {
            nanos: units as i128 * NANOS_PER_UNIT,
        }
    }

    pub const fn nanos(self) -> i128 {
        self.nanos
    }

    pub const fn is_zero(self) -> bool {
        self.nanos == 0
    }

    pub const fn is_positive(self) -> bool {
        self.nanos > 0
    }

    pub const fn is_negative(self) -> bool {
        self.nanos < 0
    }

    /// Whole units, rounded up (Kubernetes `Quantity.Value`), saturating.
    /// Prefer [`Self::checked_value`] for amounts that came from outside.
    pub fn value(self) -> i64 {
        saturate(ceil_div(self.nanos, NANOS_PER_UNIT))
    }

    /// Milli-units, rounded up (Kubernetes `Quantity.MilliValue`), saturating.
    /// Prefer [`Self::checked_milli_value`] for amounts that came from outside.
    pub fn milli_value(self) -> i64 {
        saturate(ceil_div(self.nanos, 1_000_000))
    }

    /// Whole units, rounded up; `None` beyond the 64-bit range.
    pub fn checked_value(self) -> Option<i64> {
        i64::try_from(ceil_div(self.nanos, NANOS_PER_UNIT)).ok()
    }

    /// Milli-units, rounded up; `None` beyond the 64-bit range.
    pub fn checked_milli_value(self) -> Option<i64> {
        i64::try_from(ceil_div(self.nanos, 1_000_000)).ok()
    }

    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.nanos
            .checked_add(other.nanos)
            .map(|nanos| QuantityValue { nanos })
    }

    /// Canonical text in decimal SI form, as Kubernetes prints a
    /// `DecimalSI` quantity: the largest suffix that keeps an integer
    /// mantissa (`1500m`, `2`, `3k`).
    pub fn to_decimal_si(self) -> String {
        if self.nanos == 0 {
            return "0".to_owned();
        }
        const SUFFIXES: [(u32, &str); 10] = [
            (27, "E"),
            (24, "P"),
            (21, "T"),
            (18, "G"),
            (15, "M"),
            (12, "k"),
            (9, ""),
            (6, "m"),
            (3, "u"),
            (0, "n"),
        ];
        for (power, suffix) in SUFFIXES {
            let divisor = 10i128.pow(power);
            if self.nanos % divisor == 0 {
                return format!("{}{}", self.nanos / divisor, suffix);
            }
        }
        format!("{}n", self.nanos)
    }

    /// Canonical text in binary SI form, as Kubernetes prints a `BinarySI`
    /// quantity: whole multiples of 1024 get `Ki`..`Ei`; values below 1024 in
    /// magnitude, or with a fractional part, fall back to decimal SI.
    pub fn to_binary_si(self) -> String {
        if self.nanos % NANOS_PER_UNIT != 0 || self.nanos.abs() < 1024 * NANOS_PER_UNIT {
            return self.to_decimal_si();
        }
        let mut units = self.nanos / NANOS_PER_UNIT;
        let mut suffix_index = 0;
        const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
        while suffix_index + 1 < SUFFIXES.len() && units % 1024 == 0 {
            units /= 1024;
            suffix_index += 1;
        }
        format!("{}{}", units, SUFFIXES[suffix_index])
    }
}

impl PartialEq<i64> for QuantityValue {
    fn eq(&self, other: &i64) -> bool {
        self.nanos == i128::from(*other) * NANOS_PER_UNIT
    }
}

impl PartialOrd<i64> for QuantityValue {
    fn partial_cmp(&self, other: &i64) -> Option<Ordering> {
        self.nanos
            .partial_cmp(&(i128::from(*other) * NANOS_PER_UNIT))
    }
}

/// Compares two quantities by value (`"1Gi"` equals `"1073741824"`).
pub fn quantities_equal(a: &Quantity, b: &Quantity) -> Result<bool, QuantityError> {
    Ok(QuantityValue::of(a)? == QuantityValue::of(b)?)
}

/// A quantity in milli-units, rounded up (Kubernetes `MilliValue`): an error
/// when it does not parse or does not fit in 64 bits, never a clamped value.
pub fn milli_value_of(quantity: &Quantity) -> Result<i64, QuantityError> {
    QuantityValue::of(quantity)?
        .checked_milli_value()
        .ok_or_else(|| QuantityError {
            value: quantity.0.clone(),
            reason: "beyond the 64-bit range",
        })
}

/// A quantity in whole units, rounded up (Kubernetes `Value`): an error when
/// it does not parse or does not fit in 64 bits, never a clamped value.
pub fn value_of(quantity: &Quantity) -> Result<i64, QuantityError> {
    QuantityValue::of(quantity)?
        .checked_value()
        .ok_or_else(|| QuantityError {
            value: quantity.0.clone(),
            reason: "beyond the 64-bit range",
        })
}

/// Reads every quantity of a resource list; the first malformed one is the error.
pub fn resource_list_values(
    list: &BTreeMap<String, Quantity>,
) -> Result<BTreeMap<String, QuantityValue>, QuantityError> {
    list.iter()
        .map(|(name, quantity)| Ok((name.clone(), QuantityValue::of(quantity)?)))
        .collect()
}

/// The powers of two and ten a suffix stands for; `None` when it does not
/// parse, `Some((_, None))` for an exponent beyond 64 bits.
fn suffix_exponents(suffix: &str) -> Option<(u32, Option<i64>)> {
    let decimal = |power: i64| Some((0, Some(power)));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => Some((10, Some(0))),
        "Mi" => Some((20, Some(0))),
        "Gi" => Some((30, Some(0))),
        "Ti" => Some((40, Some(0))),
        "Pi" => Some((50, Some(0))),
        "Ei" => Some((60, Some(0))),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((0, exponent.parse::<i64>().ok()))
        }
    }
}

fn ceil_div(numerator: i128, divisor: i128) -> i128 {
    let quotient = numerator / divisor;
    if numerator % divisor > 0 {
        quotient + 1
    } else {
        quotient
    }
}

fn saturate(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value > 0 { i64::MAX } else { i64::MIN })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nanos(text: &str) -> i128 {
        match QuantityValue::parse(text) {
            Ok(value) => value.nanos(),
            Err(err) => panic!("{text}: {err}"),
        }
    }

    #[test]
    fn parses_the_kubernetes_grammar() {
        assert_eq!(nanos("0"), 0);
        assert_eq!(nanos("1"), 1_000_000_000);
        assert_eq!(nanos("500m"), 500_000_000);
        assert_eq!(nanos("0.5"), 500_000_000);
        assert_eq!(nanos(".5"), 500_000_000);
        assert_eq!(nanos("5."), 5_000_000_000);
        assert_eq!(nanos("1k"), 1_000_000_000_000);
        assert_eq!(nanos("1Ki"), 1024 * 1_000_000_000);
        assert_eq!(nanos("1.5Gi"), 1_610_612_736 * 1_000_000_000);
        assert_eq!(nanos("2e3"), 2_000 * 1_000_000_000);
        assert_eq!(nanos("2E-3"), 2_000_000);
        assert_eq!(nanos("1E"), 1_000_000_000_000_000_000_000_000_000);
        assert_eq!(nanos("-1"), -1_000_000_000);
        assert_eq!(nanos("+3n"), 3);
        assert_eq!(nanos("100u"), 100_000);
        // Below nano precision rounds up.
        assert_eq!(nanos("0.1n"), 1);
    }

    #[test]
    fn rejects_malformed_quantities() {
        for text in [
            "", "abc", ".", "1..0", "1.0.0", "1 Gi", "1Gb", "1e", "1ee3", "--1", "1e99999",
        ] {
            assert!(QuantityValue::parse(text).is_err(), "{text:?} should fail");
        }
    }

    #[test]
    fn equal_values_in_different_units_compare_equal() {
        assert_eq!(
            QuantityValue::parse("1Gi"),
            QuantityValue::parse("1073741824")
        );
        assert_eq!(QuantityValue::parse("1000m"), QuantityValue::parse("1"));
        assert!(QuantityValue::parse("1001m").unwrap() > QuantityValue::parse("1").unwrap());
    }

    #[test]
    fn values_round_up() {
        let value = QuantityValue::parse("1500m").unwrap();
        assert_eq!(value.milli_value(), 1500);
        assert_eq!(value.value(), 2);
        assert_eq!(QuantityValue::parse("1n").unwrap().milli_value(), 1);
    }

    #[test]
    fn digits_below_nano_precision_round_up_without_overflow() {
        // Kubernetes keeps nano precision and rounds finer digits up; the
        // number of digits does not matter.
        assert_eq!(
            nanos("0.1234567890123456789012345678901234567890"),
            123_456_790
        );
        assert_eq!(
            nanos("1.000000000000000000000000000000000000000000000"),
            1_000_000_000
        );
        assert_eq!(nanos("0.000000000000000000000000000000000000000000001"), 1);
        assert_eq!(nanos("-0.0000000000000000000000000000000000000000001"), -1);
        assert_eq!(nanos("1000e-12"), 1);
        // 1e-10 × 1024 = 102.4 nano-units.
        assert_eq!(nanos("0.0000000001Ki"), 103);
        assert_eq!(nanos("0.5n"), 1);
        assert_eq!(
            nanos("000000000000000000000000000000000000000000001"),
            NANOS_PER_UNIT
        );
        assert_eq!(nanos("0e99999"), 0);
    }

    #[test]
    fn values_beyond_the_representable_range_are_errors() {
        for text in [
            "1e30",
            "999999999999999999999999999999999999999",
            "200000000000000000000Ei",
            "1e99999999999999999999",
        ] {
            let err = QuantityValue::parse(text).unwrap_err();
            assert_eq!(err.reason, "value out of range", "{text}");
        }
    }

    #[test]
    fn conversions_to_i64_refuse_what_does_not_fit() {
        let huge = QuantityValue::parse("1E").unwrap();
        assert_eq!(huge.checked_value(), Some(1_000_000_000_000_000_000));
        assert_eq!(huge.checked_milli_value(), None);
        assert_eq!(QuantityValue::parse("10E").unwrap().checked_value(), None);
        assert_eq!(
            QuantityValue::parse("1500m").unwrap().checked_value(),
            Some(2)
        );
        assert_eq!(
            QuantityValue::parse("-1500m")
                .unwrap()
                .checked_milli_value(),
            Some(-1500)
        );
        let q = |text: &str| Quantity(text.to_owned());
        assert_eq!(milli_value_of(&q("2")), Ok(2000));
        assert_eq!(value_of(&q("1Gi")), Ok(1 << 30));
        let err = milli_value_of(&q("1E")).unwrap_err();
        assert_eq!(
            (err.value.as_str(), err.reason),
            ("1E", "beyond the 64-bit range")
        );
        assert_eq!(value_of(&q("abc")).unwrap_err().reason, "no digits");
    }

    #[test]
    fn formats_canonically() {
        assert_eq!(QuantityValue::from_milli(1500).to_decimal_si(), "1500m");
        assert_eq!(QuantityValue::from_milli(2000).to_decimal_si(), "2");
        assert_eq!(QuantityValue::from_milli(12_000_000).to_decimal_si(), "12k");
        assert_eq!(QuantityValue::from_units(0).to_decimal_si(), "0");
        assert_eq!(QuantityValue::from_units(2048).to_binary_si(), "2Ki");
        assert_eq!(QuantityValue::from_units(1536).to_binary_si(), "1536");
        assert_eq!(QuantityValue::from_units(1 << 30).to_binary_si(), "1Gi");
        assert_eq!(QuantityValue::from_units(1000).to_binary_si(), "1k");
    }
}
