//! Reading and writing cgroup files through a [`CgroupLayout`]. Blocking
//! I/O: call it from a blocking thread, never from the async reactor. Every
//! error names the file and, for writes, the value.

use std::io;
use std::path::{Path, PathBuf};

use super::cgroup::{CgroupLayout, CgroupPathError, CgroupResource, CgroupValue, CgroupValueError};
use super::units::CpuSet;

/// A failed cgroup read or write.
#[derive(Debug, thiserror::Error)]
pub enum CgroupIoError {
    #[error(transparent)]
    Path(#[from] CgroupPathError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write {value:?} to {path}: {source}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot parse {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: CgroupValueError,
    },
    #[error("invalid value {value:?} for {path}: {source}")]
    InvalidValue {
        path: PathBuf,
        value: String,
        #[source]
        source: CgroupValueError,
    },
}

impl CgroupIoError {
    /// The OS error number of a failed read or write (e.g. EINVAL, EBUSY).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::Read { source, .. } | Self::Write { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The file or directory does not exist (e.g. the cgroup is gone, or the
    /// kernel lacks the knob).
    pub fn is_not_found(&self) -> bool {
        match self {
            Self::Read { source, .. } | Self::Write { source, .. } => {
                source.kind() == io::ErrorKind::NotFound
            }
            _ => false,
        }
    }
}

/// Reads a whole file.
pub fn read_file(path: &Path) -> Result<String, CgroupIoError> {
    std::fs::read_to_string(path).map_err(|source| CgroupIoError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `content` in a single `write(2)`, as cgroup files require (no
/// appended newline). `O_TRUNC`, which cgroupfs ignores as the shell's `>`
/// does, keeps plain files of generated test trees exact.
pub fn write_file(path: &Path, content: &str) -> Result<(), CgroupIoError> {
    use std::io::Write;
    let write = || -> io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)?;
        file.write_all(content.as_bytes())
    };
    write().map_err(|source| CgroupIoError::Write {
        path: path.to_path_buf(),
        value: content.to_string(),
        source,
    })
}

/// What [`CgroupLayout::write_value`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    pub path: PathBuf,
    /// The file's trimmed content before the write, when it was read.
    pub previous: Option<String>,
    /// The content written (or that would have been).
    pub content: String,
    /// False when the file already held `content` and nothing was written.
    pub written: bool,
}

impl CgroupLayout {
    /// The layout under `--cgroup-root-dir`. On v1 a cgroup2 mount at
    /// `<root>/unified` (hybrid hosts) becomes the PSI location.
    pub fn for_host(
        args: &super::SystemArgs,
        version: super::cgroup::CgroupVersion,
        driver: super::cgroup::CgroupDriver,
    ) -> Self {
        let layout = Self::new(version, driver, &args.cgroup_root_dir);
        let unified = args.cgroup_root_dir.join("unified");
        if version == super::cgroup::CgroupVersion::V1 && unified.join("cgroup.procs").is_file() {
            layout.with_unified_root(unified)
        } else {
            layout
        }
    }

    /// The trimmed content of `resource`'s file.
    pub fn read_raw(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
    ) -> Result<String, CgroupIoError> {
        let path = self.file_path(relative_dir, resource)?;
        Ok(read_file(&path)?.trim().to_string())
    }

    /// The value in v1 terms (see [`CgroupResource::decode`]).
    pub fn read_value(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
    ) -> Result<CgroupValue, CgroupIoError> {
        let path = self.file_path(relative_dir, resource)?;
        let content = read_file(&path)?;
        resource
            .decode(self.version, &content)
            .map_err(|source| CgroupIoError::Parse { path, source })
    }

    /// An integer value; `None` means unlimited (`max` / `-1`).
    pub fn read_int(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
    ) -> Result<Option<i64>, CgroupIoError> {
        let path = self.file_path(relative_dir.as_ref(), resource)?;
        match self.read_value(relative_dir, resource)? {
            CgroupValue::Int(v) => Ok(Some(v)),
            CgroupValue::Unlimited => Ok(None),
            other => Err(CgroupIoError::Parse {
                path,
                source: CgroupValueError::Malformed {
                    content: other.to_string(),
                    expected: "an integer",
                },
            }),
        }
    }

    /// A cpu or memory-node list (`cpuset.cpus`, `cpuset.mems`, effective lists).
    pub fn read_cpuset(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
    ) -> Result<CpuSet, CgroupIoError> {
        let path = self.file_path(relative_dir, resource)?;
        let content = read_file(&path)?;
        content
            .parse::<CpuSet>()
            .map_err(|error| CgroupIoError::Parse {
                path,
                source: error.into(),
            })
    }

    /// Validates, converts to the running version's syntax and writes
    /// `value`, unless the file already holds exactly that content (files
    /// where a write is an action, like `cgroup.procs`, are always written).
    pub fn write_value(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
        value: &CgroupValue,
    ) -> Result<WriteOutcome, CgroupIoError> {
        let path = self.file_path(relative_dir, resource)?;
        let previous = if resource.is_cacheable() {
            match read_file(&path) {
                Ok(content) => Some(content.trim().to_string()),
                // A missing file fails the write below with a clearer message.
                Err(_) => None,
            }
        } else {
            None
        };
        let content = resource
            .encode(self.version, value, previous.as_deref())
            .map_err(|source| CgroupIoError::InvalidValue {
                path: path.clone(),
                value: value.to_string(),
                source,
            })?;
        if previous.as_deref() == Some(content.as_str()) {
            return Ok(WriteOutcome {
                path,
                previous,
                content,
                written: false,
            });
        }
        write_file(&path, &content)?;
        Ok(WriteOutcome {
            path,
            previous,
            content,
            written: true,
        })
    }

    /// Creates the cgroup `relative_dir` in every given controller (one
    /// directory on v2). Existing directories are fine.
    pub fn create_cgroup(
        &self,
        relative_dir: impl AsRef<Path>,
        controllers: &[super::cgroup::Controller],
    ) -> Result<(), CgroupIoError> {
        for controller in controllers {
            let dir = self.controller_path(relative_dir.as_ref(), *controller)?;
            std::fs::create_dir_all(&dir).map_err(|source| CgroupIoError::Write {
                path: dir.clone(),
                value: "<mkdir>".to_string(),
                source,
            })?;
        }
        Ok(())
    }
}
