//! Why a configuration was refused, and the size limit its messages name.

use super::types::{API_VERSION, KIND};

/// The largest configuration file read (upstream files are a few KiB).
pub const MAX_CONFIG_BYTES: usize = 4 << 20;
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the configuration file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("the configuration is larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge,
    #[error("the configuration cannot be decoded: {0}")]
    Decode(String),
    #[error("apiVersion {found:?} is not supported: use {API_VERSION:?}")]
    ApiVersion { found: String },
    #[error("kind {found:?} is not {KIND:?}")]
    Kind { found: String },
    #[error(
        "decoding .profiles[{profile}].pluginConfig[{index}]: args for plugin {plugin}: {reason}"
    )]
    PluginArgs {
        profile: usize,
        index: usize,
        plugin: String,
        reason: String,
    },
    #[error("the configuration is invalid: {}", .0.join("; "))]
    Invalid(Vec<String>),
}
