//! Errors of the extension helpers. Every variant names the label or
//! annotation key it came from, so a log line points at the offending object
//! field.

/// A label or annotation value that could not be decoded or encoded.
#[derive(Debug, thiserror::Error)]
pub enum ExtensionError {
    /// The value is not the JSON shape upstream writes for this key.
    #[error("{key}: malformed JSON value: {source}")]
    MalformedJson {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    /// The value is well-formed text but not acceptable for this key
    /// (not a number, out of range, unknown enum value, ...).
    #[error("{key}: invalid value {value:?}: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    /// The value is larger than Kubernetes lets all annotations of one
    /// object be together; refused before it is parsed.
    #[error("{key}: value of {bytes} bytes is larger than {limit} bytes")]
    TooLarge {
        key: String,
        bytes: usize,
        limit: usize,
    },
    /// A key another key depends on is absent (e.g. a gang without
    /// `min-available`).
    #[error("{key}: required but absent")]
    Missing { key: String },
    /// The value could not be encoded to JSON (e.g. a map with non-string keys).
    #[error("{key}: cannot encode value as JSON: {source}")]
    Encode {
        key: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ExtensionError {
    /// The label or annotation key the error is about.
    pub fn key(&self) -> &str {
        match self {
            ExtensionError::MalformedJson { key, .. }
            | ExtensionError::InvalidValue { key, .. }
            | ExtensionError::TooLarge { key, .. }
            | ExtensionError::Missing { key }
            | ExtensionError::Encode { key, .. } => key,
        }
    }

    pub(crate) fn invalid_value(key: &str, value: &str, reason: impl ToString) -> Self {
        ExtensionError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            reason: reason.to_string(),
        }
    }
}

/// A string that is not one of the values of an upstream string enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}, expected one of {allowed:?}")]
pub struct UnknownValueError {
    /// The Rust type name of the enum.
    pub kind: &'static str,
    /// The rejected input.
    pub value: String,
    /// The accepted values.
    pub allowed: &'static [&'static str],
}
