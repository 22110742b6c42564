//! Hook-server registrations (`<dir>/*.json`, upstream's format) and the
//! mapping from intercepted CRI methods to hook stages.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

/// What the proxy does when a hook server fails or cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum FailurePolicy {
    /// Refuse the CRI call.
    Fail,
    /// Forward the original request.
    Ignore,
    /// Not configured: behaves like `Ignore` (upstream's empty policy).
    #[default]
    #[serde(rename = "")]
    None,
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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HookServerConfig {
    #[serde(rename = "remote-endpoint", default)]
    pub remote_endpoint: String,
    #[serde(rename = "failure-policy", default)]
    pub failure_policy: FailurePolicy,
    /// Stage names as written; unknown names are kept but never match.
    #[serde(rename = "runtime-hooks", default)]
    pub runtime_hooks: Vec<String>,
}

impl HookServerConfig {
    pub fn serves(&self, hook: HookType) -> bool {
        self.runtime_hooks.iter().any(|name| name == hook.name())
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
    let config: HookServerConfig =
        serde_json::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
    if config.remote_endpoint.trim().is_empty() {
        return Err(ConfigError::NoEndpoint(path.to_path_buf()));
    }
    Ok(config)
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
