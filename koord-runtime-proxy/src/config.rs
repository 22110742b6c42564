//! Hook-server registrations (`<dir>/*.json`, upstream's format) and the
//! mapping from intercepted CRI methods to hook stages.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

/// What the proxy does when a hook server fails or cannot be reached.
///
/// Upstream keeps the policy as the string written in the file and refuses a
/// call only when it equals `"Fail"` exactly (case-sensitive); every other
/// value forwards the original request. [`FailurePolicy::from_registration`]
/// reads it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Refuse the CRI call.
    Fail,
    /// Forward the original request.
    Ignore,
    /// Not configured: behaves like `Ignore` (upstream's empty policy).
    #[default]
    None,
}

impl FailurePolicy {
    /// Upstream's reading of a `failure-policy` value: exactly `Fail` refuses,
    /// `""` is no policy, anything else (`Ignore`, `fail`, `FAIL`, typos) ignores.
    pub fn from_registration(text: &str) -> Self {
        match text {
            "Fail" => FailurePolicy::Fail,
            "" => FailurePolicy::None,
            _ => FailurePolicy::Ignore,
        }
    }

    /// Whether `text` is one of the documented values (`Fail`, `Ignore`, empty).
    pub fn is_documented(text: &str) -> bool {
        matches!(text, "Fail" | "Ignore" | "")
    }
}

/// Hook stages a server may register for (upstream's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookType {
    PreRunPodSandbox,
    PostStopPodSandbox,
    PreCreateContainer,
    PreStartContainer,
    PostStartContainer,
    PreUpdateContainerResources,
    PostStopContainer,
    /// Accepted in files for upstream compatibility; no CRI call triggers it.
    PreRemoveRunPodSandbox,
}

/// Before or after forwarding to the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPhase {
    Pre,
    Post,
}

/// The CRI calls the proxy intercepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CriMethod {
    RunPodSandbox,
    StopPodSandbox,
    RemovePodSandbox,
    CreateContainer,
    StartContainer,
    StopContainer,
    RemoveContainer,
    UpdateContainerResources,
}

impl CriMethod {
    pub const ALL: [CriMethod; 8] = [
        CriMethod::RunPodSandbox,
        CriMethod::StopPodSandbox,
        CriMethod::RemovePodSandbox,
        CriMethod::CreateContainer,
        CriMethod::StartContainer,
        CriMethod::StopContainer,
        CriMethod::RemoveContainer,
        CriMethod::UpdateContainerResources,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CriMethod::RunPodSandbox => "RunPodSandbox",
            CriMethod::StopPodSandbox => "StopPodSandbox",
            CriMethod::RemovePodSandbox => "RemovePodSandbox",
            CriMethod::CreateContainer => "CreateContainer",
            CriMethod::StartContainer => "StartContainer",
            CriMethod::StopContainer => "StopContainer",
            CriMethod::RemoveContainer => "RemoveContainer",
            CriMethod::UpdateContainerResources => "UpdateContainerResources",
        }
    }

    /// The method behind a gRPC path such as `/runtime.v1.RuntimeService/StartContainer`.
    pub fn from_path(path: &str) -> Option<Self> {
        let method = path.strip_prefix("/runtime.v1.RuntimeService/")?;
        Self::ALL.into_iter().find(|m| m.name() == method)
    }

    /// The hook called at `phase` of this method, if any.
    pub fn hook(self, phase: HookPhase) -> Option<HookType> {
        match (self, phase) {
            (CriMethod::RunPodSandbox, HookPhase::Pre) => Some(HookType::PreRunPodSandbox),
            (CriMethod::StopPodSandbox, HookPhase::Post) => Some(HookType::PostStopPodSandbox),
            (CriMethod::CreateContainer, HookPhase::Pre) => Some(HookType::PreCreateContainer),
            (CriMethod::StartContainer, HookPhase::Pre) => Some(HookType::PreStartContainer),
            (CriMethod::StartContainer, HookPhase::Post) => Some(HookType::PostStartContainer),
            (CriMethod::StopContainer, HookPhase::Post) => Some(HookType::PostStopContainer),
            (CriMethod::UpdateContainerResources, HookPhase::Pre) => {
                Some(HookType::PreUpdateContainerResources)
            }
            _ => None,
        }
    }
}

impl HookType {
    pub const ALL: [HookType; 8] = [
        HookType::PreRunPodSandbox,
        HookType::PostStopPodSandbox,
        HookType::PreCreateContainer,
        HookType::PreStartContainer,
        HookType::PostStartContainer,
        HookType::PreUpdateContainerResources,
        HookType::PostStopContainer,
        HookType::PreRemoveRunPodSandbox,
    ];

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|hook| hook.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            HookType::PreRunPodSandbox => "PreRunPodSandbox",
            HookType::PostStopPodSandbox => "PostStopPodSandbox",
            HookType::PreCreateContainer => "PreCreateContainer",
            HookType::PreStartContainer => "PreStartContainer",
            HookType::PostStartContainer => "PostStartContainer",
            HookType::PreUpdateContainerResources => "PreUpdateContainerResources",
            HookType::PostStopContainer => "PostStopContainer",
            HookType::PreRemoveRunPodSandbox => "PreRemoveRunPodSandbox",
        }
    }
}

/// One registration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookServerConfig {
    pub remote_endpoint: String,
    pub failure_policy: FailurePolicy,
    /// `failure-policy` exactly as written (empty when absent or null).
    pub failure_policy_text: String,
    /// Stage names as written; unknown names are kept but never match.
    pub runtime_hooks: Vec<String>,
}

/// The file's JSON as upstream's Go struct reads it: unknown keys are
/// ignored, `null` counts as absent, a value of the wrong type is an error.
#[derive(Deserialize)]
struct RawHookServerConfig {
    #[serde(rename = "remote-endpoint", default)]
    remote_endpoint: Option<String>,
    #[serde(rename = "failure-policy", default)]
    failure_policy: Option<String>,
    #[serde(rename = "runtime-hooks", default)]
    runtime_hooks: Option<Vec<String>>,
}

impl HookServerConfig {
    pub fn serves(&self, hook: HookType) -> bool {
        self.runtime_hooks.iter().any(|name| name == hook.name())
    }

    /// A warning when `failure-policy` is not a documented value: it then
    /// acts as `Ignore`, which is easy to miss for a misspelt `Fail`.
    pub fn policy_warning(&self) -> Option<String> {
        if FailurePolicy::is_documented(&self.failure_policy_text) {
            return None;
        }
        Some(format!(
            "failure-policy {:?} is neither \"Fail\" nor \"Ignore\"; it is treated as Ignore \
             (only \"Fail\", case-sensitive, refuses calls when the hook server fails)",
            self.failure_policy_text
        ))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid hook-server registration: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{0} has no remote-endpoint")]
    NoEndpoint(PathBuf),
}

/// Parses one registration file's contents.
pub fn parse_registration(path: &Path, text: &str) -> Result<HookServerConfig, ConfigError> {
    let raw: RawHookServerConfig =
        serde_json::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
    let remote_endpoint = raw.remote_endpoint.unwrap_or_default();
    if remote_endpoint.trim().is_empty() {
        return Err(ConfigError::NoEndpoint(path.to_path_buf()));
    }
    let failure_policy_text = raw.failure_policy.unwrap_or_default();
    Ok(HookServerConfig {
        remote_endpoint,
        failure_policy: FailurePolicy::from_registration(&failure_policy_text),
        failure_policy_text,
        runtime_hooks: raw.runtime_hooks.unwrap_or_default(),
    })
}

/// A registration with the file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub file: PathBuf,
    pub config: HookServerConfig,
}

/// Reads every `*.json` of `dir` in name order; bad files are reported and skipped.
pub fn load_dir(dir: &Path) -> (Vec<Registration>, Vec<ConfigError>) {
    let mut registrations = Vec::new();
    let mut errors = Vec::new();
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect(),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            errors.push(ConfigError::Read {
                path: dir.to_path_buf(),
                source,
            });
            Vec::new()
        }
    };
    files.sort();
    for file in files {
        let parsed = std::fs::read_to_string(&file)
            .map_err(|source| ConfigError::Read {
                path: file.clone(),
                source,
            })
            .and_then(|text| parse_registration(&file, &text));
        match parsed {
            Ok(config) => registrations.push(Registration { file, config }),
            Err(err) => errors.push(err),
        }
    }
    (registrations, errors)
}

/// The current registrations, reloaded when the directory changes.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    current: Arc<RwLock<Vec<Registration>>>,
}

impl Registry {
    pub fn new(registrations: Vec<Registration>) -> Self {
        Self {
            current: Arc::new(RwLock::new(registrations)),
        }
    }

    pub fn snapshot(&self) -> Vec<Registration> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn replace(&self, registrations: Vec<Registration>) {
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = registrations;
    }

    /// The first server registered for `hook` (upstream's order: file name).
    pub fn server_for(&self, hook: HookType) -> Option<HookServerConfig> {
        self.snapshot()
            .into_iter()
            .map(|r| r.config)
            .find(|config| config.serves(hook))
    }

    /// Loads `dir` now and then polls it every `interval`, reloading on any
    /// change of the file set or a file's size or mtime.
    pub fn watch(dir: PathBuf, interval: Duration) -> Self {
        let registry = Self::default();
        let fingerprint = reload(&registry, &dir, None);
        let watched = registry.clone();
        tokio::spawn(async move {
            let mut last = fingerprint;
            loop {
                tokio::time::sleep(interval).await;
                last = reload(&watched, &dir, Some(last));
            }
        });
        registry
    }
}

type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

fn fingerprint(dir: &Path) -> Fingerprint {
    let mut files: Fingerprint = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .filter_map(|entry| {
                    let meta = entry.metadata().ok()?;
                    Some((entry.path(), meta.len(), meta.modified().ok()))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn reload(registry: &Registry, dir: &Path, previous: Option<Fingerprint>) -> Fingerprint {
    let now = fingerprint(dir);
    if previous.as_ref() == Some(&now) {
        return now;
    }
    let (registrations, errors) = load_dir(dir);
    for error in &errors {
        tracing::warn!(%error, "skipping hook-server registration");
    }
    for registration in &registrations {
        if let Some(warning) = registration.config.policy_warning() {
            tracing::warn!(
                file = %registration.file.display(),
                value = %registration.config.failure_policy_text,
                "{warning}"
            );
        }
        tracing::info!(
            file = %registration.file.display(),
            endpoint = %registration.config.remote_endpoint,
            policy = ?registration.config.failure_policy,
            hooks = ?registration.config.runtime_hooks,
            "hook server registered"
        );
    }
    registry.replace(registrations);
    now
}
