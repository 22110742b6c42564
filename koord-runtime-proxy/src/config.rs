//! Hook-server registrations (`<dir>/*.json`, upstream's format), the rules
//! a file must meet to be read, how a scan of the directory changes the
//! registrations, and the mapping from intercepted CRI methods to hook
//! stages. No I/O here: `hookdir` reads the directory.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use koord_common::sync::RwLockExt;
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
    #[error(
        "{0} is a symbolic link; registration files must be regular files and links are not followed"
    )]
    Symlink(PathBuf),
    #[error("{path} is a {kind}, not a regular file; it is not opened")]
    NotRegularFile { path: PathBuf, kind: &'static str },
    #[error(
        "{path} holds at least {size} bytes, over the {limit}-byte limit for a registration file"
    )]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    #[error("reading {path} did not finish within {timeout:?}")]
    Timeout { path: PathBuf, timeout: Duration },
    #[error("an earlier read of {0} has not finished; it is not read again until it does")]
    StillReading(PathBuf),
    #[error("{path} is not read: {running} earlier reads in the directory have not finished")]
    TooManyStuckReads { path: PathBuf, running: usize },
    #[error(
        "{dir} holds more than {limit} *.json files; it is not read again until it holds at most {limit}"
    )]
    TooManyFiles { dir: PathBuf, limit: usize },
    #[error("listing {dir} did not finish within {timeout:?}")]
    ListTimeout { dir: PathBuf, timeout: Duration },
}

impl ConfigError {
    /// The `reason` label of `koord_runtime_proxy_hook_registration_errors_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            ConfigError::Read { .. } => "unreadable",
            ConfigError::Parse { .. } | ConfigError::NoEndpoint(_) => "invalid",
            ConfigError::Symlink(_) => "symlink",
            ConfigError::NotRegularFile { .. } => "not_regular_file",
            ConfigError::TooLarge { .. } => "too_large",
            ConfigError::Timeout { .. }
            | ConfigError::StillReading(_)
            | ConfigError::TooManyStuckReads { .. }
            | ConfigError::ListTimeout { .. } => "timeout",
            ConfigError::TooManyFiles { .. } => "too_many_files",
        }
    }

    /// Whether the same directory contents may load next time (a read that
    /// failed or did not finish), so the directory is read again without a
    /// change; other errors are about the file's type, size or contents.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ConfigError::Read { .. }
                | ConfigError::Timeout { .. }
                | ConfigError::StillReading(_)
                | ConfigError::TooManyStuckReads { .. }
                | ConfigError::ListTimeout { .. }
        )
    }
}

/// Parses one registration file's contents.
pub fn parse_registration(path: &Path, text: &str) -> Result<HookServerConfig, ConfigError> {
    parse_registration_bytes(path, text.as_bytes())
}

/// Parses one registration file's bytes (not UTF-8 is a parse error).
pub fn parse_registration_bytes(
    path: &Path,
    bytes: &[u8],
) -> Result<HookServerConfig, ConfigError> {
    let raw: RawHookServerConfig =
        serde_json::from_slice(bytes).map_err(|source| ConfigError::Parse {
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

/// What `lstat` says a directory entry is (links are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Regular,
    Symlink,
    Directory,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl EntryKind {
    pub fn of(file_type: std::fs::FileType) -> Self {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_symlink() {
            EntryKind::Symlink
        } else if file_type.is_dir() {
            EntryKind::Directory
        } else if file_type.is_fifo() {
            EntryKind::Fifo
        } else if file_type.is_socket() {
            EntryKind::Socket
        } else if file_type.is_char_device() {
            EntryKind::CharDevice
        } else if file_type.is_block_device() {
            EntryKind::BlockDevice
        } else {
            EntryKind::Regular
        }
    }

    fn describe(self) -> &'static str {
        match self {
            EntryKind::Regular => "regular file",
            EntryKind::Symlink => "symbolic link",
            EntryKind::Directory => "directory",
            EntryKind::Fifo => "FIFO",
            EntryKind::Socket => "socket",
            EntryKind::CharDevice => "character device",
            EntryKind::BlockDevice => "block device",
        }
    }
}

/// Whether an entry may be read as a registration: only a regular file (a
/// link is refused, not followed) of at most `limit` bytes. Decided on
/// `lstat` before anything is opened, and again on `fstat` of what was opened.
pub fn check_entry(path: &Path, kind: EntryKind, size: u64, limit: u64) -> Result<(), ConfigError> {
    match kind {
        EntryKind::Regular if size > limit => Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit,
        }),
        EntryKind::Regular => Ok(()),
        EntryKind::Symlink => Err(ConfigError::Symlink(path.to_path_buf())),
        other => Err(ConfigError::NotRegularFile {
            path: path.to_path_buf(),
            kind: other.describe(),
        }),
    }
}

/// A registration with the file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    pub file: PathBuf,
    pub config: Arc<HookServerConfig>,
}

/// The outcome of one scan of the directory, and what it did to the
/// registrations.
#[derive(Debug, Default)]
pub struct ScanMerge {
    /// The registrations to publish, in file-name order.
    pub registrations: Vec<Registration>,
    /// Files that loaded in this scan.
    pub loaded: Vec<PathBuf>,
    /// Files that failed, each with whether its previous registration stays.
    pub failed: Vec<(ConfigError, bool)>,
}

/// Merges one scan into the registrations before it. Files that loaded give
/// their registration. A file that did not load, whatever the reason, keeps
/// the registration it had, if any: a bad or half-written file never takes
/// a working hook server away. A file that is gone takes its registration
/// with it.
pub fn merge_scan(
    previous: &[Registration],
    scanned: Vec<(PathBuf, Result<HookServerConfig, ConfigError>)>,
) -> ScanMerge {
    let mut merge = ScanMerge::default();
    for (file, result) in scanned {
        match result {
            Ok(config) => {
                merge.loaded.push(file.clone());
                merge.registrations.push(Registration {
                    file,
                    config: Arc::new(config),
                });
            }
            Err(error) => {
                let kept = previous.iter().find(|r| r.file == file).cloned();
                merge.failed.push((error, kept.is_some()));
                merge.registrations.extend(kept);
            }
        }
    }
    merge.registrations.sort_by(|a, b| a.file.cmp(&b.file));
    merge
}

/// Registrations as published to CRI calls: the files in name order and,
/// per stage, the server that serves it (computed once per load, so a call
/// looks its server up without scanning or copying).
#[derive(Debug, Default)]
pub struct Registrations {
    files: Vec<Registration>,
    by_stage: [Option<Arc<HookServerConfig>>; HookType::ALL.len()],
}

impl Registrations {
    pub fn new(files: Vec<Registration>) -> Self {
        let by_stage = HookType::ALL.map(|hook| {
            files
                .iter()
                .find(|registration| registration.config.serves(hook))
                .map(|registration| Arc::clone(&registration.config))
        });
        Self { files, by_stage }
    }

    pub fn files(&self) -> &[Registration] {
        &self.files
    }

    /// The first server registered for `hook` (upstream's order: file name).
    pub fn server_for(&self, hook: HookType) -> Option<&Arc<HookServerConfig>> {
        let index = HookType::ALL.iter().position(|h| *h == hook)?;
        self.by_stage[index].as_ref()
    }
}

/// The current registrations. One writer (the directory watcher, see
/// `hookdir`) publishes immutable snapshots; CRI calls read them without
/// waiting on the directory.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    current: Arc<RwLock<Arc<Registrations>>>,
}

impl Registry {
    pub fn new(registrations: Vec<Registration>) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(Registrations::new(registrations)))),
        }
    }

    pub fn snapshot(&self) -> Arc<Registrations> {
        Arc::clone(&self.current.read_or_recover())
    }

    pub(crate) fn publish(&self, registrations: Vec<Registration>) {
        let published = Arc::new(Registrations::new(registrations));
        *self.current.write_or_recover() = published;
    }

    /// The first server registered for `hook` (upstream's order: file name).
    pub fn server_for(&self, hook: HookType) -> Option<Arc<HookServerConfig>> {
        self.snapshot().server_for(hook).cloned()
    }

    /// Whether some registration names `endpoint`.
    pub fn registers(&self, endpoint: &str) -> bool {
        self.snapshot()
            .files()
            .iter()
            .any(|registration| registration.config.remote_endpoint == endpoint)
    }
}

pub use crate::hookdir::{WatchOptions, load_dir};
