//! Generic access to labels and annotations: typed JSON values, Go-compatible
//! scalar parsing, and serde helpers that reproduce Go `encoding/json`
//! behaviour (`null` for nil maps and slices, `omitempty`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Display;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize, de::DeserializeOwned};

use super::error::ExtensionError;

/// Labels or annotations of an object, as k8s-openapi stores them.
pub type StringMap = BTreeMap<String, String>;

static EMPTY_MAP: StringMap = BTreeMap::new();

/// The labels of an object; an empty map when it has none.
pub fn labels_of(meta: &ObjectMeta) -> &StringMap {
    meta.labels.as_ref().unwrap_or(&EMPTY_MAP)
}

/// The annotations of an object; an empty map when it has none.
pub fn annotations_of(meta: &ObjectMeta) -> &StringMap {
    meta.annotations.as_ref().unwrap_or(&EMPTY_MAP)
}

/// The labels of an object for writing, created empty when absent.
pub fn labels_mut(meta: &mut ObjectMeta) -> &mut StringMap {
    meta.labels.get_or_insert_with(BTreeMap::new)
}

/// The annotations of an object for writing, created empty when absent.
pub fn annotations_mut(meta: &mut ObjectMeta) -> &mut StringMap {
    meta.annotations.get_or_insert_with(BTreeMap::new)
}

/// Decodes the JSON value stored under `key`. Absent → `Ok(None)`; an empty
/// string is malformed JSON, as in upstream.
pub fn parse_json_annotation<T: DeserializeOwned>(
    annotations: &StringMap,
    key: &str,
) -> Result<Option<T>, ExtensionError> {
    match annotations.get(key) {
        None => Ok(None),
        Some(text) => decode_json(key, text).map(Some),
    }
}

/// Like [`parse_json_annotation`], but an empty string counts as absent
/// (upstream checks `s != ""` for these keys).
pub fn parse_json_annotation_non_empty<T: DeserializeOwned>(
    annotations: &StringMap,
    key: &str,
) -> Result<Option<T>, ExtensionError> {
    match annotations.get(key) {
        None => Ok(None),
        Some(text) if text.is_empty() => Ok(None),
        Some(text) => decode_json(key, text).map(Some),
    }
}

/// Encodes `value` as compact JSON and stores it under `key`.
pub fn set_json_annotation<T: Serialize + ?Sized>(
    annotations: &mut StringMap,
    key: &str,
    value: &T,
) -> Result<(), ExtensionError> {
    let text = format_json_annotation(key, value)?;
    annotations.insert(key.to_owned(), text);
    Ok(())
}

/// Encodes `value` as the compact JSON text upstream writes for `key`.
pub fn format_json_annotation<T: Serialize + ?Sized>(
    key: &str,
    value: &T,
) -> Result<String, ExtensionError> {
    serde_json::to_string(value).map_err(|source| ExtensionError::Encode {
        key: key.to_owned(),
        source,
    })
}

/// The most Kubernetes stores in all annotations of one object together
/// (`TotalAnnotationSizeLimitB`); a single JSON value beyond it did not come
/// through the API server and is refused before it is parsed.
pub const MAX_ANNOTATION_VALUE_BYTES: usize = 256 * 1024;

pub(crate) fn decode_json<T: DeserializeOwned>(key: &str, text: &str) -> Result<T, ExtensionError> {
    if text.len() > MAX_ANNOTATION_VALUE_BYTES {
        return Err(ExtensionError::TooLarge {
            key: key.to_owned(),
            bytes: text.len(),
            limit: MAX_ANNOTATION_VALUE_BYTES,
        });
    }
    // Nesting is bounded by serde_json's recursion limit (128).
    serde_json::from_str(text).map_err(|source| ExtensionError::MalformedJson {
        key: key.to_owned(),
        source,
    })
}

/// Parses an integer as Go's `strconv.ParseInt(s, 10, 64)`: optional sign,
/// ASCII digits only.
pub(crate) fn parse_go_decimal_i64(text: &str) -> Result<i64, String> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a decimal integer".to_owned());
    }
    text.parse::<i64>().map_err(|err| err.to_string())
}

/// Parses a 32-bit integer as Go's `strconv.ParseInt(s, 10, 32)`.
pub(crate) fn parse_go_decimal_i32(text: &str) -> Result<i32, String> {
    let value = parse_go_decimal_i64(text)?;
    i32::try_from(value).map_err(|_| "out of the 32-bit integer range".to_owned())
}

/// Parses an integer as Go's `strconv.ParseInt(s, 0, 32)`: the base comes
/// from the prefix (`0x`, `0o`, `0b`, a leading `0` for octal) and
/// underscores may separate digits.
pub(crate) fn parse_go_auto_base_i32(text: &str) -> Result<i32, String> {
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = unsigned.to_ascii_lowercase();
    let (radix, body, has_prefix) = if let Some(rest) = lower.strip_prefix("0x") {
        (16, rest, true)
    } else if let Some(rest) = lower.strip_prefix("0o") {
        (8, rest, true)
    } else if let Some(rest) = lower.strip_prefix("0b") {
        (2, rest, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    if !go_underscores_ok(body, has_prefix) {
        return Err("misplaced underscore".to_owned());
    }
    let digits: String = body.chars().filter(|c| *c != '_').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(format!("not a base-{radix} integer"));
    }
    let magnitude = i64::from_str_radix(&digits, radix).map_err(|err| err.to_string())?;
    let value = if negative { -magnitude } else { magnitude };
    i32::try_from(value).map_err(|_| "out of the 32-bit integer range".to_owned())
}

/// Go only accepts `_` between digits, or right after a base prefix.
fn go_underscores_ok(body: &str, has_prefix: bool) -> bool {
    if !body.contains('_') {
        return true;
    }
    let bytes = body.as_bytes();
    // A leading underscore is allowed only after a base prefix (e.g. 0x_1f).
    if bytes.first() == Some(&b'_') && !has_prefix {
        return false;
    }
    if bytes.last() == Some(&b'_') {
        return false;
    }
    !body.contains("__")
}

/// Parses a boolean as Go's `strconv.ParseBool`.
pub fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Parses a finite float (Go's `strconv.ParseFloat` also accepts `NaN` and
/// `Inf`, which no ratio or threshold here can use).
pub(crate) fn parse_finite_f64(text: &str) -> Result<f64, String> {
    let value: f64 = text.parse().map_err(|_| "not a number".to_owned())?;
    if !value.is_finite() {
        return Err("not a finite number".to_owned());
    }
    Ok(value)
}

/// Deserializes JSON `null` as the type's default: Go writes `null` for nil
/// maps and slices that are not `omitempty`.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Deserializes an optional string enum where Go's zero value `""` means unset.
pub(crate) fn empty_as_none<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: Display,
{
    match Option::<Cow<'de, str>>::deserialize(deserializer)?.as_deref() {
        None | Some("") => Ok(None),
        Some(text) => text.parse().map(Some).map_err(serde::de::Error::custom),
    }
}

pub(crate) fn is_zero_i32(value: &i32) -> bool {
    *value == 0
}

pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_base_integers_follow_go() {
        assert_eq!(parse_go_auto_base_i32("10"), Ok(10));
        assert_eq!(parse_go_auto_base_i32("-10"), Ok(-10));
        assert_eq!(parse_go_auto_base_i32("+7"), Ok(7));
        assert_eq!(parse_go_auto_base_i32("010"), Ok(8));
        assert_eq!(parse_go_auto_base_i32("0x1F"), Ok(31));
        assert_eq!(parse_go_auto_base_i32("0b101"), Ok(5));
        assert_eq!(parse_go_auto_base_i32("0o17"), Ok(15));
        assert_eq!(parse_go_auto_base_i32("1_000"), Ok(1000));
        assert_eq!(parse_go_auto_base_i32("0"), Ok(0));
        assert!(parse_go_auto_base_i32("1__0").is_err());
        assert!(parse_go_auto_base_i32("_1").is_err());
        assert!(parse_go_auto_base_i32("1_").is_err());
        assert!(parse_go_auto_base_i32("09").is_err());
        assert!(parse_go_auto_base_i32("").is_err());
        assert!(parse_go_auto_base_i32("abc").is_err());
        assert!(parse_go_auto_base_i32("2147483648").is_err());
        assert_eq!(parse_go_auto_base_i32("-2147483648"), Ok(i32::MIN));
    }

    #[test]
    fn decimal_integers_reject_spaces_and_fractions() {
        assert_eq!(parse_go_decimal_i32("42"), Ok(42));
        assert_eq!(parse_go_decimal_i32("+42"), Ok(42));
        assert!(parse_go_decimal_i32(" 42").is_err());
        assert!(parse_go_decimal_i32("4.2").is_err());
        assert!(parse_go_decimal_i32("-").is_err());
        assert!(parse_go_decimal_i32("3000000000").is_err());
    }

    #[test]
    fn json_annotations_larger_than_kubernetes_allows_are_refused() {
        // Kubernetes caps all annotations of an object at 256 KiB together;
        // one value beyond that is refused before it is parsed.
        let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(256 * 1024));
        let annotations = StringMap::from([("example.com/big".to_owned(), big)]);
        let err = parse_json_annotation::<serde_json::Value>(&annotations, "example.com/big")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("example.com/big") && err.contains("262144 bytes"),
            "{err}"
        );
        let small = StringMap::from([("example.com/small".to_owned(), "{}".to_owned())]);
        assert!(
            parse_json_annotation::<serde_json::Value>(&small, "example.com/small")
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn booleans_follow_go() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(text), Some(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(text), Some(false), "{text}");
        }
        assert_eq!(parse_go_bool("yes"), None);
        assert_eq!(parse_go_bool("tRUE"), None);
    }
}
