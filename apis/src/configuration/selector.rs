//! Kubernetes label selector matching (`metav1.LabelSelectorAsSelector` +
//! `Matches`), pure and without a client library.
//!
//! An empty selector matches everything; callers decide what an absent
//! selector means (for `nodeSelector` in the SLO config it matches nothing).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// A selector the API machinery would refuse to turn into a matcher. `field`
/// is relative to the selector, e.g. `matchExpressions[1].operator`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{field}: operator {operator:?} is not one of In, NotIn, Exists, DoesNotExist")]
    UnknownOperator { field: String, operator: String },
    #[error("{field}: operator {operator} needs at least one value")]
    MissingValues { field: String, operator: String },
    #[error("{field}: operator {operator} takes no values")]
    UnexpectedValues { field: String, operator: String },
    #[error("{field}: invalid label key {key:?}: {reason}")]
    InvalidKey {
        field: String,
        key: String,
        reason: &'static str,
    },
    #[error("{field}: invalid label value {value:?}: {reason}")]
    InvalidValue {
        field: String,
        value: String,
        reason: &'static str,
    },
}

/// One parsed requirement.
enum Requirement<'a> {
    Equals(&'a str, &'a str),
    In(&'a str, &'a [String]),
    NotIn(&'a str, &'a [String]),
    Exists(&'a str),
    DoesNotExist(&'a str),
}

impl Requirement<'_> {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match *self {
            Requirement::Equals(key, value) => labels.get(key).is_some_and(|v| v == value),
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
        }
    }
}

/// Whether `labels` satisfy every term of `selector`; an error when the
/// selector itself is malformed (whatever the labels).
pub fn label_selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SelectorError> {
    let requirements = parse(selector)?;
    Ok(requirements
        .iter()
        .all(|requirement| requirement.matches(labels)))
}

/// Checks that `selector` is well formed, as `LabelSelectorAsSelector` does.
pub fn validate_label_selector(selector: &LabelSelector) -> Result<(), SelectorError> {
    parse(selector).map(|_| ())
}

/// True when the selector has no terms, i.e. matches every node.
pub fn is_empty_selector(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

fn parse(selector: &LabelSelector) -> Result<Vec<Requirement<'_>>, SelectorError> {
    let mut requirements = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        let field = format!("matchLabels[{key:?}]");
        check_key(&field, key)?;
        check_value(&field, value)?;
        requirements.push(Requirement::Equals(key, value));
    }
    for (index, expression) in selector.match_expressions.iter().flatten().enumerate() {
        requirements.push(parse_expression(index, expression)?);
    }
    Ok(requirements)
}

fn parse_expression(
    index: usize,
    expression: &LabelSelectorRequirement,
) -> Result<Requirement<'_>, SelectorError> {
    let field = format!("matchExpressions[{index}]");
    let key = expression.key.as_str();
    check_key(&format!("{field}.key"), key)?;
    let values = expression.values.as_deref().unwrap_or_default();
    let operator = expression.operator.as_str();
    let needs_values = match operator {
        "In" | "NotIn" => true,
        "Exists" | "DoesNotExist" => false,
        other => {
            return Err(SelectorError::UnknownOperator {
                field: format!("{field}.operator"),
                operator: other.to_owned(),
            });
        }
    };
    if needs_values && values.is_empty() {
        return Err(SelectorError::MissingValues {
            field: format!("{field}.values"),
            operator: operator.to_owned(),
        });
    }
    if !needs_values && !values.is_empty() {
        return Err(SelectorError::UnexpectedValues {
            field: format!("{field}.values"),
            operator: operator.to_owned(),
        });
    }
    for (value_index, value) in values.iter().enumerate() {
        check_value(&format!("{field}.values[{value_index}]"), value)?;
    }
    Ok(match operator {
        "In" => Requirement::In(key, values),
        "NotIn" => Requirement::NotIn(key, values),
        "Exists" => Requirement::Exists(key),
        _ => Requirement::DoesNotExist(key),
    })
}

/// A label name part or value: alphanumeric at both ends, `-_.` inside.
fn is_label_token(text: &str) -> bool {
    let bytes = text.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: lowercase alphanumeric labels (with inner `-`)
/// joined by dots.
fn is_dns_subdomain(text: &str) -> bool {
    let lower_alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    text.len() <= 253
        && text.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(&first), Some(&last)) => {
                    lower_alnum(first)
                        && lower_alnum(last)
                        && bytes.iter().all(|&b| lower_alnum(b) || b == b'-')
                }
                _ => false,
            }
        })
}

fn check_key(field: &str, key: &str) -> Result<(), SelectorError> {
    let fail = |reason| SelectorError::InvalidKey {
        field: field.to_owned(),
        key: key.to_owned(),
        reason,
    };
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() || !is_dns_subdomain(prefix) {
                return Err(fail("the prefix must be a DNS subdomain"));
            }
            name
        }
        None => key,
    };
    if name.is_empty() {
        return Err(fail("the name part must not be empty"));
    }
    if name.len() > 63 {
        return Err(fail("the name part must be at most 63 characters"));
    }
    if !is_label_token(name) {
        return Err(fail(
            "the name part must be alphanumeric, '-', '_' or '.', and start and end alphanumeric",
        ));
    }
    Ok(())
}

fn check_value(field: &str, value: &str) -> Result<(), SelectorError> {
    let fail = |reason| SelectorError::InvalidValue {
        field: field.to_owned(),
        value: value.to_owned(),
        reason,
    };
    if value.len() > 63 {
        return Err(fail("must be at most 63 characters"));
    }
    if !value.is_empty() && !is_label_token(value) {
        return Err(fail(
            "must be alphanumeric, '-', '_' or '.', and start and end alphanumeric",
        ));
    }
    Ok(())
}
