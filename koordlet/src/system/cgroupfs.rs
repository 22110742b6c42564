//! Reading and writing cgroup files through a [`CgroupLayout`]. Blocking
//! I/O: call it from a blocking thread, never from the async reactor. Every
//! error names the file and, for writes, the value.

use std::io;
use std::path::{Path, PathBuf};

use super::cgroup::{CgroupLayout, CgroupPathError, CgroupResource, CgroupValue, CgroupValueError};
use koord_common::units::CpuSet;

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

/// Where a cgroup file is: the hierarchy root (followed as configured: on
/// v1 hosts `cpu` is often a symlink to `cpu,cpuacct`) and the path below
/// it. The first `trusted` components below the root are the kubepods
/// directory (`--kubepods-cgroup-dir`), node configuration that may be a
/// symlink; no other component is followed when it is a symlink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileLocation {
    pub base: PathBuf,
    pub relative: PathBuf,
    pub trusted: usize,
}

impl FileLocation {
    /// The file's path as the kernel would resolve it (for messages).
    pub fn path(&self) -> PathBuf {
        self.base.join(&self.relative)
    }
}

/// How [`open_beneath`] opens the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenFor {
    Read,
    /// Write, truncating (cgroupfs ignores the truncation as `>` does).
    Write,
}

/// Opens `location` one component at a time (`openat`), refusing every
/// symlink below the hierarchy root except within the trusted prefix, so a
/// pod directory that is a symlink cannot redirect a read or a write (issue
/// 16). A refused symlink is an error naming it.
pub fn open_beneath(location: &FileLocation, purpose: OpenFor) -> io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags, open, openat};
    use std::path::Component;
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a plain path below {}",
                crate::bounds::BoundedPath(&location.relative),
                location.base.display()
            ),
        )
    };
    let mut parts = Vec::new();
    for component in location.relative.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            _ => return Err(invalid()),
        }
    }
    let (file, dirs) = parts.split_last().ok_or_else(invalid)?;
    let refused = |error: rustix::io::Errno, upto: usize| -> io::Error {
        let error = io::Error::from(error);
        let mut path = location.base.clone();
        path.extend(&parts[..upto]);
        let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        if is_link {
            io::Error::other(format!(
                "refusing to follow the symlink {} below {}",
                crate::bounds::BoundedPath(&path),
                location.base.display()
            ))
        } else {
            error
        }
    };
    let mut dir = open(
        &location.base,
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for (index, part) in dirs.iter().enumerate() {
        let mut flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
        if index >= location.trusted {
            flags |= OFlags::NOFOLLOW;
        }
        dir = openat(&dir, *part, flags, Mode::empty()).map_err(|e| refused(e, index + 1))?;
    }
    let flags = match purpose {
        OpenFor::Read => OFlags::RDONLY,
        OpenFor::Write => OFlags::WRONLY | OFlags::TRUNC,
    } | OFlags::NOFOLLOW
        | OFlags::CLOEXEC
        | OFlags::NOCTTY;
    let fd = openat(&dir, *file, flags, Mode::empty()).map_err(|e| refused(e, parts.len()))?;
    Ok(std::fs::File::from(fd))
}

/// Reads a whole cgroup file through [`open_beneath`].
pub fn read_beneath(location: &FileLocation) -> Result<String, CgroupIoError> {
    use std::io::Read;
    let read = || -> io::Result<String> {
        let mut text = String::new();
        open_beneath(location, OpenFor::Read)?.read_to_string(&mut text)?;
        Ok(text)
    };
    read().map_err(|source| CgroupIoError::Read {
        path: location.path(),
        source,
    })
}

/// Writes `content` in a single `write(2)` through [`open_beneath`].
pub fn write_beneath(location: &FileLocation, content: &str) -> Result<(), CgroupIoError> {
    use std::io::Write;
    let write = || -> io::Result<()> {
        open_beneath(location, OpenFor::Write)?.write_all(content.as_bytes())
    };
    write().map_err(|source| CgroupIoError::Write {
        path: location.path(),
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
        let mut layout = Self::new(version, driver, &args.cgroup_root_dir);
        if let Some(dir) = &args.kubepods_cgroup_dir {
            layout = layout.with_kubepods_dir(dir);
        }
        let unified = args.cgroup_root_dir.join("unified");
        if version == super::cgroup::CgroupVersion::V1 && unified.join("cgroup.procs").is_file() {
            layout.with_unified_root(unified)
        } else {
            layout
        }
    }

    /// Where `resource`'s file of the cgroup at `relative_dir` is, for
    /// [`open_beneath`] (see [`FileLocation`]).
    pub fn file_location(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
    ) -> Result<FileLocation, CgroupPathError> {
        let path = self.file_path(relative_dir.as_ref(), resource)?;
        let base = match (self.version, &self.unified_root, resource.is_pressure()) {
            (super::cgroup::CgroupVersion::V2, _, _) => self.root.clone(),
            (_, Some(unified), true) => unified.clone(),
            _ => self.root.join(resource.v1_controller().as_str()),
        };
        let relative = path
            .strip_prefix(&base)
            .map_err(|_| CgroupPathError::InvalidRelativeDir(relative_dir.as_ref().to_path_buf()))?
            .to_path_buf();
        let kubepods = self.kubepods_dir();
        let trusted = if relative.starts_with(&kubepods) {
            kubepods.components().count()
        } else {
            0
        };
        Ok(FileLocation {
            base,
            relative,
            trusted,
        })
    }

    /// The trimmed content of `resource`'s file.
    pub fn read_raw(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
    ) -> Result<String, CgroupIoError> {
        let location = self.file_location(relative_dir, resource)?;
        Ok(read_beneath(&location)?.trim().to_string())
    }

    /// The value in v1 terms (see [`CgroupResource::decode`]).
    pub fn read_value(
        &self,
        relative_dir: impl AsRef<Path>,
        resource: CgroupResource,
    ) -> Result<CgroupValue, CgroupIoError> {
        let location = self.file_location(relative_dir, resource)?;
        let path = location.path();
        let content = read_beneath(&location)?;
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
        let location = self.file_location(relative_dir, resource)?;
        let path = location.path();
        let content = read_beneath(&location)?;
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
        let location = self.file_location(relative_dir, resource)?;
        let path = location.path();
        let previous = if resource.is_cacheable() {
            match read_beneath(&location) {
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
        write_beneath(&location, &content)?;
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
