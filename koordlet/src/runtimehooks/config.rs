//! Runtime hook flags (upstream names) and the failure-policy config file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::protocol::{FailurePolicy, FailurePolicyConfig, FailurePolicyConfigError, HookStage};
use super::reconciler::DEFAULT_RECONCILE_INTERVAL;
use super::server::{DEFAULT_HOST_ENDPOINT, DEFAULT_REGISTRATION_DIR, DEFAULT_RUNTIME_HOOKS_ADDR};
use crate::statesinformer::parse_positive_duration;
use koord_common::cluster::parse_duration;

/// Default `--runtime-hooks-states-sync-timeout`.
pub const DEFAULT_STATES_SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Runtime hook flags.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct RuntimeHooksArgs {
    /// Network of the RuntimeHookService server (only `unix` is served).
    #[arg(
        id = "runtime-hooks-network",
        long = "runtime-hooks-network",
        default_value = "unix",
        value_name = "NETWORK"
    )]
    pub network: String,

    /// Socket of the RuntimeHookService server [default in cluster mode:
    /// /host-var-run-koordlet/koordlet.sock; standalone mode serves only
    /// when this is given].
    #[arg(
        id = "runtime-hooks-addr",
        long = "runtime-hooks-addr",
        value_name = "PATH"
    )]
    pub addr: Option<PathBuf>,

    /// Failure policy the runtime proxy applies when koordlet fails
    /// (written to the registration file): Fail or Ignore.
    #[arg(
        id = "runtime-hooks-failure-policy",
        long = "runtime-hooks-failure-policy",
        default_value = "Ignore",
        value_name = "POLICY"
    )]
    pub failure_policy: FailurePolicy,

    /// Default policy when one hook fails: Fail refuses the runtime call,
    /// Ignore proceeds (the reconciler repairs later).
    #[arg(
        id = "runtime-hooks-plugin-failure-policy",
        long = "runtime-hooks-plugin-failure-policy",
        default_value = "Ignore",
        value_name = "POLICY"
    )]
    pub plugin_failure_policy: FailurePolicy,

    /// YAML/JSON file with per-hook and per-stage failure policies
    /// (`default`, `stages`, `hooks`, `hookStages`); see docs/runtimehooks.md.
    #[arg(
        id = "runtime-hooks-failure-policy-config",
        long = "runtime-hooks-failure-policy-config",
        value_name = "PATH"
    )]
    pub failure_policy_config: Option<PathBuf>,

    /// Directory of the hook-server registration file (`koordlet.json`)
    /// the runtime proxy reads.
    #[arg(id = "runtime-hooks-config-path", long = "runtime-hooks-config-path", default_value = DEFAULT_REGISTRATION_DIR, value_name = "DIR")]
    pub config_path: PathBuf,

    /// Socket path the runtime proxy dials (as seen from the host).
    #[arg(id = "runtime-hooks-host-endpoint", long = "runtime-hooks-host-endpoint", default_value = DEFAULT_HOST_ENDPOINT, value_name = "PATH")]
    pub host_endpoint: String,

    /// Stages that run no hooks (comma-separated, e.g. PreStartContainer).
    #[arg(
        id = "runtime-hooks-disable-stages",
        long = "runtime-hooks-disable-stages",
        value_delimiter = ',',
        value_name = "STAGES"
    )]
    pub disable_stages: Vec<HookStage>,

    /// How often the reconciler re-applies hook decisions to running pods.
    #[arg(id = "runtime-hooks-reconcile-interval", long = "runtime-hooks-reconcile-interval", default_value = "10s", value_parser = parse_positive_duration, value_name = "DURATION")]
    pub reconcile_interval: Duration,

    /// How long the runtime hooks (server, NRI plugin, reconciler) wait for
    /// the states informer's first sync before starting with the rules known
    /// so far; 0 waits as long as it takes (upstream's behaviour). Not an
    /// upstream flag.
    #[arg(id = "runtime-hooks-states-sync-timeout", long = "runtime-hooks-states-sync-timeout", default_value = "60s", value_parser = parse_duration, value_name = "DURATION")]
    pub states_sync_timeout: Duration,

    /// Keep the CFS quota of cpuset-bound (LSE/LSR) containers.
    #[arg(id = "disable-unset-cpu-quota", long = "disable-unset-cpu-quota", default_value = "false", num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set, value_parser = koord_common::cli::parse_go_bool_flag, value_name = "BOOL")]
    pub disable_unset_cpu_quota: bool,

    /// Feature gates (`Name=true|false,...`); the runtime hook gates are
    /// GroupIdentity, CPUSetAllocator, BatchResource (on by default),
    /// GPUEnvInject, CPUNormalization, CoreSched, Resctrl, OOMScoreAdj.
    /// Given more than once, the lists merge and a later value of a gate
    /// wins, as upstream's map flag does; read them with
    /// [`RuntimeHooksArgs::feature_gates`].
    #[arg(
        id = "feature-gates",
        long = "feature-gates",
        action = clap::ArgAction::Append,
        value_name = "GATES"
    )]
    pub feature_gates: Vec<String>,
}

impl RuntimeHooksArgs {
    /// Every `--feature-gates` value in order, as one `A=true,B=false` list.
    pub fn feature_gates(&self) -> String {
        self.feature_gates.join(",")
    }
}

impl Default for RuntimeHooksArgs {
    fn default() -> Self {
        Self {
            network: "unix".into(),
            addr: None,
            failure_policy: FailurePolicy::Ignore,
            plugin_failure_policy: FailurePolicy::Ignore,
            failure_policy_config: None,
            config_path: DEFAULT_REGISTRATION_DIR.into(),
            host_endpoint: DEFAULT_HOST_ENDPOINT.into(),
            disable_stages: Vec::new(),
            reconcile_interval: DEFAULT_RECONCILE_INTERVAL,
            states_sync_timeout: DEFAULT_STATES_SYNC_TIMEOUT,
            disable_unset_cpu_quota: false,
            feature_gates: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--runtime-hooks-network {0:?} is not supported (only unix)")]
    Network(String),
    #[error("cannot read --runtime-hooks-failure-policy-config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--runtime-hooks-failure-policy-config {path} is not valid: {error}")]
    Parse {
        path: PathBuf,
        error: apis::yaml::YamlError,
    },
    #[error("--runtime-hooks-failure-policy-config {path}: {source}")]
    Invalid {
        path: PathBuf,
        source: FailurePolicyConfigError,
    },
    #[error(transparent)]
    FeatureGates(#[from] crate::features::FeatureGateError),
}

impl RuntimeHooksArgs {
    /// The states-informer wait limit; `None` (flag `0`) waits forever.
    pub fn states_sync_timeout(&self) -> Option<Duration> {
        (!self.states_sync_timeout.is_zero()).then_some(self.states_sync_timeout)
    }

    /// The server socket: the flag, else upstream's default in cluster mode,
    /// else none (standalone).
    pub fn server_socket(&self, standalone: bool) -> Result<Option<PathBuf>, ConfigError> {
        if self.network != "unix" {
            return Err(ConfigError::Network(self.network.clone()));
        }
        Ok(match (&self.addr, standalone) {
            (Some(addr), _) => Some(addr.clone()),
            (None, false) => Some(PathBuf::from(DEFAULT_RUNTIME_HOOKS_ADDR)),
            (None, true) => None,
        })
    }

    /// The failure policies: the file when given (its `default` falls back
    /// to `--runtime-hooks-plugin-failure-policy` when absent), else the flag.
    pub fn failure_policies(&self) -> Result<FailurePolicyConfig, ConfigError> {
        let Some(path) = &self.failure_policy_config else {
            return Ok(FailurePolicyConfig::uniform(self.plugin_failure_policy));
        };
        load_failure_policy_config(path, self.plugin_failure_policy)
    }
}

/// Reads a failure policy file (YAML or JSON; JSON is YAML).
pub fn load_failure_policy_config(
    path: &Path,
    default: FailurePolicy,
) -> Result<FailurePolicyConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let value: serde_json::Value = apis::yaml::from_str(&text, &apis::yaml::Limits::CONFIG)
        .map_err(|error| ConfigError::Parse {
            path: path.to_path_buf(),
            error,
        })?;
    let has_default = value.as_object().is_some_and(|m| m.contains_key("default"));
    let mut config: FailurePolicyConfig =
        apis::yaml::null_as_empty::deserialize(value).map_err(|error| ConfigError::Parse {
            path: path.to_path_buf(),
            error: apis::yaml::YamlError::Invalid(error.to_string()),
        })?;
    if !has_default {
        config.default = default;
    }
    config.validate().map_err(|source| ConfigError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused_for_their_budget() {
        use apis::yaml::hostile;
        let dir = std::env::temp_dir().join(format!("koordlet-rh-hostile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("failure-policy.yaml");
        for text in [
            hostile::alias_bomb(),
            hostile::deep_flow(10_000),
            hostile::deep_block(10_000),
        ] {
            std::fs::write(&path, &text).unwrap();
            match load_failure_policy_config(&path, FailurePolicy::Ignore) {
                Err(ConfigError::Parse { error, .. }) => assert!(error.is_budget(), "{error}"),
                other => panic!("not refused for its budget: {other:?}"),
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        hooks: RuntimeHooksArgs,
    }

    #[test]
    fn defaults_and_names_follow_upstream() {
        let cli = Cli::try_parse_from(["koordlet"]).unwrap();
        assert_eq!(cli.hooks, RuntimeHooksArgs::default());
        assert_eq!(
            cli.hooks.server_socket(false).unwrap(),
            Some(PathBuf::from("/host-var-run-koordlet/koordlet.sock"))
        );
        assert_eq!(cli.hooks.server_socket(true).unwrap(), None);
        let cli = Cli::try_parse_from([
            "koordlet",
            "--runtime-hooks-addr=/tmp/k.sock",
            "--runtime-hooks-failure-policy=Fail",
            "--runtime-hooks-disable-stages=PreStartContainer,PostStopContainer",
            "--runtime-hooks-reconcile-interval=3s",
            "--disable-unset-cpu-quota",
        ])
        .unwrap();
        assert_eq!(cli.hooks.failure_policy, FailurePolicy::Fail);
        assert_eq!(
            cli.hooks.disable_stages,
            vec![HookStage::PreStartContainer, HookStage::PostStopContainer]
        );
        assert_eq!(cli.hooks.reconcile_interval, Duration::from_secs(3));
        assert!(cli.hooks.disable_unset_cpu_quota);
        assert_eq!(
            cli.hooks.server_socket(true).unwrap(),
            Some(PathBuf::from("/tmp/k.sock"))
        );
        assert!(Cli::try_parse_from(["koordlet", "--runtime-hooks-failure-policy=Maybe"]).is_err());
        assert!(Cli::try_parse_from(["koordlet", "--runtime-hooks-disable-stages=Nope"]).is_err());
        assert_eq!(
            cli.hooks.states_sync_timeout(),
            Some(Duration::from_secs(60))
        );
        let forever =
            Cli::try_parse_from(["koordlet", "--runtime-hooks-states-sync-timeout=0"]).unwrap();
        assert_eq!(forever.hooks.states_sync_timeout(), None);
        let short =
            Cli::try_parse_from(["koordlet", "--runtime-hooks-states-sync-timeout=1m30s"]).unwrap();
        assert_eq!(
            short.hooks.states_sync_timeout(),
            Some(Duration::from_secs(90))
        );
        assert!(
            Cli::try_parse_from(["koordlet", "--runtime-hooks-states-sync-timeout=soon"]).is_err()
        );
        let tcp = Cli::try_parse_from(["koordlet", "--runtime-hooks-network=tcp"]).unwrap();
        assert!(tcp.hooks.server_socket(false).is_err());
    }

    #[test]
    fn failure_policy_file_overrides_and_defaults() {
        let dir = std::env::temp_dir().join(format!("koordlet-rh-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy.yaml");
        std::fs::write(&path, "hooks:\n  BatchResource: Fail\nhookStages:\n  CPUSetAllocator/PreCreateContainer: Fail\n").unwrap();
        let args = RuntimeHooksArgs {
            failure_policy_config: Some(path.clone()),
            plugin_failure_policy: FailurePolicy::Ignore,
            ..RuntimeHooksArgs::default()
        };
        let config = args.failure_policies().unwrap();
        assert_eq!(config.default, FailurePolicy::Ignore);
        assert_eq!(
            config.policy_for("BatchResource", HookStage::PreRunPodSandbox),
            FailurePolicy::Fail
        );
        assert_eq!(
            config.policy_for("CPUSetAllocator", HookStage::PreCreateContainer),
            FailurePolicy::Fail
        );
        assert_eq!(
            config.policy_for("CPUSetAllocator", HookStage::PreRunPodSandbox),
            FailurePolicy::Ignore
        );
        std::fs::write(&path, "stages:\n  PreFoo: Fail\n").unwrap();
        assert!(matches!(
            args.failure_policies(),
            Err(ConfigError::Invalid { .. })
        ));
        std::fs::write(&path, "hooks: [").unwrap();
        assert!(matches!(
            args.failure_policies(),
            Err(ConfigError::Parse { .. })
        ));
        std::fs::write(&path, "surprise: 1\n").unwrap();
        assert!(matches!(
            args.failure_policies(),
            Err(ConfigError::Parse { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
