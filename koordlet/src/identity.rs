//! Who this process is: the component name (logs, metrics, Events) and the
//! node it runs on. A leaf module, so every layer may name them.

use std::ffi::OsString;

use koord_common::process::Component;

pub const COMPONENT: Component = Component {
    name: "koordlet",
    metric_prefix: "koordlet",
};

/// Environment variable naming this node; upstream's DaemonSet sets it from `spec.nodeName`.
pub const NODE_NAME_ENV: &str = "NODE_NAME";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeNameError {
    #[error(
        "the {NODE_NAME_ENV} environment variable is not set; koordlet must know which node it runs on \
         (its DaemonSet sets it from spec.nodeName)"
    )]
    Missing,
    #[error("the {NODE_NAME_ENV} environment variable is not valid UTF-8: {0:?}")]
    NotUtf8(OsString),
    #[error("the {NODE_NAME_ENV} environment variable {0:?} is not a valid node name")]
    Invalid(String),
}

/// Validates the node name taken from the environment.
pub fn node_name_from(value: Option<OsString>) -> Result<String, NodeNameError> {
    let value = value.ok_or(NodeNameError::Missing)?;
    let name = value.into_string().map_err(NodeNameError::NotUtf8)?;
    let name = name.trim().to_string();
    if name.is_empty() {
        return Err(NodeNameError::Missing);
    }
    // Node names are DNS subdomains: lowercase alphanumerics, '-' and '.', at most 253 characters.
    let valid_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let valid_ends = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if name.len() > 253 || !valid_chars || !valid_ends {
        return Err(NodeNameError::Invalid(name));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_name_is_required_and_validated() {
        assert_eq!(node_name_from(None), Err(NodeNameError::Missing));
        assert_eq!(
            node_name_from(Some("  ".into())),
            Err(NodeNameError::Missing)
        );
        assert_eq!(
            node_name_from(Some("node-1.example".into())),
            Ok("node-1.example".to_string())
        );
        assert!(matches!(
            node_name_from(Some("Node_1".into())),
            Err(NodeNameError::Invalid(_))
        ));
        assert!(matches!(
            node_name_from(Some("-node".into())),
            Err(NodeNameError::Invalid(_))
        ));
        assert!(NodeNameError::Missing.to_string().contains("NODE_NAME"));
    }
}
