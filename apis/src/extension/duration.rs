//! Go `time.Duration` text (`"300ms"`, `"1h30m"`, `"-1.5s"`), as used by
//! `metav1.Duration` fields and the gang `waiting-time` annotation.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A signed duration with nanosecond precision and Go's text form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration {
    nanos: i64,
}

/// Text that Go's `time.ParseDuration` would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {value:?}: {reason}")]
pub struct DurationError {
    pub value: String,
    pub reason: &'static str,
}

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

impl GoDuration {
    pub const ZERO: GoDuration = GoDuration { nanos: 0 };

    pub const fn from_nanos(nanos: i64) -> Self {
        GoDuration { nanos }
    }

    pub const fn from_secs(secs: i64) -> Self {
        GoDuration {
            nanos: secs.saturating_mul(SECOND as i64),
        }
    }

    /// A std duration; saturates at Go's maximum (about 292 years).
    pub fn from_std(duration: Duration) -> Self {
        GoDuration {
            nanos: i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX),
        }
    }

    pub const fn as_nanos(self) -> i64 {
        self.nanos
    }

    /// The std duration, or `None` when negative.
    pub fn to_std(self) -> Option<Duration> {
        u64::try_from(self.nanos).ok().map(Duration::from_nanos)
    }

    /// Parses Go duration text: a sequence of decimal numbers with units
    /// `ns us µs μs ms s m h`, optionally signed; `"0"` needs no unit.
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        let fail = |reason| DurationError {
            value: text.to_owned(),
            reason,
        };
        let (negative, mut rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        if rest == "0" {
            return Ok(GoDuration::ZERO);
        }
        if rest.is_empty() {
            return Err(fail("empty duration"));
        }
        let mut total: u64 = 0;
        while !rest.is_empty() {
            let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let (whole, after_whole) = rest.split_at(whole_len);
            let (fraction, after_number) = match after_whole.strip_prefix('.') {
                Some(tail) => {
                    let len = tail.bytes().take_while(u8::is_ascii_digit).count();
                    tail.split_at(len)
                }
                None => ("", after_whole),
            };
            if whole.is_empty() && fraction.is_empty() {
                return Err(fail("expected a number"));
            }
            let unit_len = after_number
                .char_indices()
                .find(|(_, c)| *c == '.' || c.is_ascii_digit())
                .map_or(after_number.len(), |(i, _)| i);
            let (unit_text, tail) = after_number.split_at(unit_len);
            let unit = match unit_text {
                "ns" => NANOSECOND,
                "us" | "\u{b5}s" | "\u{3bc}s" => MICROSECOND,
                "ms" => MILLISECOND,
                "s" => SECOND,
                "m" => MINUTE,
                "h" => HOUR,
                "" => return Err(fail("missing unit")),
                _ => return Err(fail("unknown unit")),
            };
            let overflow = || fail("duration out of range");
            let mut value: u64 = 0;
            for digit in whole.bytes() {
                value = value
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(digit - b'0')))
                    .ok_or_else(overflow)?;
            }
            value = value.checked_mul(unit).ok_or_else(overflow)?;
            // Go keeps fraction digits only while they fit, then truncates
            // the fractional nanoseconds.
            let mut fraction_value: u128 = 0;
            let mut scale: u128 = 1;
            for digit in fraction.bytes().take(18) {
                fraction_value = fraction_value * 10 + u128::from(digit - b'0');
                scale *= 10;
            }
            let fraction_nanos =
                u64::try_from(fraction_value * u128::from(unit) / scale).map_err(|_| overflow())?;
            value = value.checked_add(fraction_nanos).ok_or_else(overflow)?;
            total = total.checked_add(value).ok_or_else(overflow)?;
            rest = tail;
        }
        let nanos = if negative {
            0i64.checked_sub_unsigned(total)
        } else {
            i64::try_from(total).ok()
        };
        nanos
            .map(GoDuration::from_nanos)
            .ok_or_else(|| fail("duration out of range"))
    }
}

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        GoDuration::parse(text)
    }
}

/// Go's `Duration.String`: `"1h2m3.5s"`, `"2m0s"`, `"300ms"`, `"1.5µs"`, `"0s"`.
impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let magnitude = self.nanos.unsigned_abs();
        if magnitude == 0 {
            return f.write_str("0s");
        }
        if magnitude < SECOND {
            let (unit_size, digits, unit) = if magnitude < MICROSECOND {
                (NANOSECOND, 0, "ns")
            } else if magnitude < MILLISECOND {
                (MICROSECOND, 3, "\u{b5}s")
            } else {
                (MILLISECOND, 6, "ms")
            };
            let number = decimal_with_fraction(magnitude, unit_size, digits);
            return write!(f, "{sign}{number}{unit}");
        }
        let hours = magnitude / HOUR;
        let minutes = (magnitude % HOUR) / MINUTE;
        let seconds = decimal_with_fraction(magnitude % MINUTE, SECOND, 9);
        if hours > 0 {
            write!(f, "{sign}{hours}h{minutes}m{seconds}s")
        } else if minutes > 0 {
            write!(f, "{sign}{minutes}m{seconds}s")
        } else {
            write!(f, "{sign}{seconds}s")
        }
    }
}

/// `value / unit` with up to `digits` fractional digits, trailing zeros trimmed.
fn decimal_with_fraction(value: u64, unit: u64, digits: usize) -> String {
    let whole = value / unit;
    let remainder = value % unit;
    if remainder == 0 || digits == 0 {
        return whole.to_string();
    }
    let fraction = format!("{remainder:0digits$}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}

impl serde::Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        GoDuration::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for GoDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("GoDuration")
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> i64 {
        match GoDuration::parse(text) {
            Ok(duration) => duration.as_nanos(),
            Err(err) => panic!("{err}"),
        }
    }

    #[test]
    fn parses_go_duration_text() {
        assert_eq!(parse("0"), 0);
        assert_eq!(parse("+0"), 0);
        assert_eq!(parse("300ms"), 300_000_000);
        assert_eq!(parse("1.5h"), 5_400_000_000_000);
        assert_eq!(parse("2h45m"), 9_900_000_000_000);
        assert_eq!(parse("-1.5s"), -1_500_000_000);
        assert_eq!(parse("1us"), 1_000);
        assert_eq!(parse("1\u{b5}s"), 1_000);
        assert_eq!(parse("1\u{3bc}s"), 1_000);
        assert_eq!(parse(".5s"), 500_000_000);
        assert_eq!(parse("5.s"), 5_000_000_000);
        assert_eq!(parse("1.5ns"), 1);
        assert_eq!(parse("2562047h47m16.854775807s"), i64::MAX);
        assert_eq!(parse("-2562047h47m16.854775808s"), i64::MIN);
    }

    #[test]
    fn rejects_what_go_rejects() {
        for text in [
            "",
            "-",
            "10",
            "1x",
            "s",
            ".s",
            "1h-1m",
            "2562047h47m16.854775808s",
            "1 s",
            "1.2.3s",
        ] {
            assert!(GoDuration::parse(text).is_err(), "{text:?} should fail");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5\u{b5}s"),
            (300_000_000, "300ms"),
            (1_500_000_000, "1.5s"),
            (120_000_000_000, "2m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_723_500_000_000, "1h2m3.5s"),
            (-90_000_000_000, "-1m30s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(GoDuration::from_nanos(nanos).to_string(), text);
            assert_eq!(parse(text), nanos, "round trip of {text}");
        }
    }
}
