//! [`HostFiles`]: the read-only view of kernel files outside the cgroup tree
//! (procfs, sysfs, resctrl) that strategies decide from. Part of the
//! framework, so strategies do not depend on one another for it: the daemon
//! passes [`FsHostFiles`], unit tests a [`MapHostFiles`], and a strategy's
//! `decide` stays pure and testable on a map.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Read access to kernel files outside the cgroup tree.
pub trait HostFiles: Send + Sync {
    /// The file's content; `None` when it is missing or unreadable.
    fn read(&self, path: &Path) -> Option<String>;
    /// Whether `path` exists (file or directory).
    fn exists(&self, path: &Path) -> bool;
    /// Entry names of a directory (sorted); empty when it is missing.
    fn list(&self, path: &Path) -> Vec<String>;
    /// Where a symlink points, if `path` is one.
    fn link_target(&self, path: &Path) -> Option<PathBuf>;
    /// The file's content, refused when missing, unreadable, not UTF-8 or
    /// longer than `max` bytes (the error names the path and the reason).
    fn read_bounded(&self, path: &Path, max: usize) -> Result<String, String> {
        let content = self
            .read(path)
            .ok_or_else(|| format!("cannot read {}", path.display()))?;
        if content.len() > max {
            return Err(format!("{} is longer than {max} bytes", path.display()));
        }
        Ok(content)
    }
}

/// [`HostFiles`] over the real filesystem.
#[derive(Debug, Default, Clone)]
pub struct FsHostFiles;

impl HostFiles for FsHostFiles {
    fn read(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn list(&self, path: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(path) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    fn link_target(&self, path: &Path) -> Option<PathBuf> {
        std::fs::read_link(path).ok()
    }

    fn read_bounded(&self, path: &Path, max: usize) -> Result<String, String> {
        use std::io::Read;
        let file = std::fs::File::open(path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let mut bytes = Vec::new();
        file.take(max as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        if bytes.len() > max {
            return Err(format!("{} is longer than {max} bytes", path.display()));
        }
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8", path.display()))
    }
}

/// An in-memory [`HostFiles`] for tests: files, directories and links.
#[derive(Debug, Default, Clone)]
pub struct MapHostFiles {
    pub files: HashMap<PathBuf, String>,
    pub links: HashMap<PathBuf, PathBuf>,
}

impl MapHostFiles {
    pub fn with(mut self, path: impl Into<PathBuf>, content: impl Into<String>) -> Self {
        self.files.insert(path.into(), content.into());
        self
    }

    pub fn with_link(mut self, path: impl Into<PathBuf>, target: impl Into<PathBuf>) -> Self {
        self.links.insert(path.into(), target.into());
        self
    }
}

impl HostFiles for MapHostFiles {
    fn read(&self, path: &Path) -> Option<String> {
        self.files.get(path).cloned()
    }

    fn exists(&self, path: &Path) -> bool {
        self.files.contains_key(path)
            || self.links.contains_key(path)
            || self.files.keys().any(|file| file.starts_with(path))
    }

    fn list(&self, path: &Path) -> Vec<String> {
        let mut names: Vec<String> = self
            .files
            .keys()
            .chain(self.links.keys())
            .filter_map(|file| file.strip_prefix(path).ok())
            .filter_map(|rest| rest.components().next())
            .filter_map(|first| first.as_os_str().to_str().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn link_target(&self, path: &Path) -> Option<PathBuf> {
        self.links.get(path).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_files_list_and_exist() {
        let files = MapHostFiles::default()
            .with("/a/b/c", "1")
            .with("/a/d", "2")
            .with_link("/a/e", "../x");
        assert!(files.exists(Path::new("/a/b")));
        assert!(!files.exists(Path::new("/a/z")));
        assert_eq!(files.list(Path::new("/a")), ["b", "d", "e"]);
        assert_eq!(
            files.link_target(Path::new("/a/e")),
            Some(PathBuf::from("../x"))
        );
    }
}
