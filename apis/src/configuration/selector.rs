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

/// A well-formed selector parsed once, to match many label sets without
/// parsing and checking it again (the free functions here do both per call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledSelector {
    requirements: Vec<OwnedRequirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum OwnedRequirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl OwnedRequirement {
    fn of(requirement: &Requirement<'_>) -> Self {
        match *requirement {
            Requirement::Equals(key, value) => Self::Equals(key.to_owned(), value.to_owned()),
            Requirement::In(key, values) => Self::In(key.to_owned(), values.to_vec()),
            Requirement::NotIn(key, values) => Self::NotIn(key.to_owned(), values.to_vec()),
            Requirement::Exists(key) => Self::Exists(key.to_owned()),
            Requirement::DoesNotExist(key) => Self::DoesNotExist(key.to_owned()),
        }
    }

    fn borrowed(&self) -> Requirement<'_> {
        match self {
            Self::Equals(key, value) => Requirement::Equals(key, value),
            Self::In(key, values) => Requirement::In(key, values),
            Self::NotIn(key, values) => Requirement::NotIn(key, values),
            Self::Exists(key) => Requirement::Exists(key),
            Self::DoesNotExist(key) => Requirement::DoesNotExist(key),
        }
    }
}

impl CompiledSelector {
    /// Parses and checks `selector` as `LabelSelectorAsSelector` does.
    pub fn new(selector: &LabelSelector) -> Result<Self, SelectorError> {
        let requirements = parse(selector)?.iter().map(OwnedRequirement::of).collect();
        Ok(Self { requirements })
    }

    /// True when the selector has no terms (it matches every label set).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every term.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|requirement| requirement.borrowed().matches(labels))
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

/// Checks `key` as the API server checks a label (or annotation) key: an
/// optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters, alphanumeric at both ends with `-_.` inside.
pub fn validate_label_key(field: &str, key: &str) -> Result<(), SelectorError> {
    check_key(field, key)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(value: serde_json::Value) -> LabelSelector {
        serde_json::from_value(value).expect("a selector")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn compiled_selector_answers_as_the_per_call_matcher() {
        let selectors = [
            json!({}),
            json!({"matchLabels": {"app": "web"}}),
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}),
            json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["a"]}]}),
            json!({"matchLabels": {"app": "web"},
                   "matchExpressions": [{"key": "canary", "operator": "DoesNotExist"},
                                        {"key": "tier", "operator": "Exists"}]}),
        ];
        let label_sets = [
            labels(&[]),
            labels(&[("app", "web")]),
            labels(&[("app", "web"), ("tier", "a")]),
            labels(&[("app", "web"), ("tier", "c"), ("canary", "1")]),
            labels(&[("tier", "b")]),
        ];
        for value in selectors {
            let parsed = selector(value.clone());
            let compiled = CompiledSelector::new(&parsed).expect("well formed");
            assert_eq!(compiled.is_empty(), is_empty_selector(&parsed), "{value}");
            for set in &label_sets {
                assert_eq!(
                    compiled.matches(set),
                    label_selector_matches(&parsed, set).unwrap(),
                    "{value} on {set:?}"
                );
            }
        }
    }

    #[test]
    fn compiled_selector_refuses_what_the_api_machinery_refuses() {
        let bad = selector(json!({"matchExpressions": [{"key": "tier", "operator": "In"}]}));
        assert!(matches!(
            CompiledSelector::new(&bad),
            Err(SelectorError::MissingValues { .. })
        ));
        let bad_key = selector(json!({"matchLabels": {"-bad": "x"}}));
        assert!(CompiledSelector::new(&bad_key).is_err());
    }
}
