//! Standalone eviction: SIGKILL every process in a pod's cgroup tree.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Why the processes of a cgroup could not be listed or killed.
#[derive(Debug, thiserror::Error)]
pub enum KillError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("malformed process id {value:?} in {path}")]
    MalformedPid { path: PathBuf, value: String },
}

/// What a kill pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KillReport {
    /// Processes signalled.
    pub killed: Vec<i32>,
    /// Processes that were already gone when signalled.
    pub vanished: Vec<i32>,
    /// Process ids deliberately left alone (koordlet itself, pid 1).
    pub spared: Vec<i32>,
    /// Signals the kernel refused, with the error.
    pub failed: Vec<(i32, String)>,
}

/// Parses a `cgroup.procs` file: one decimal pid a line.
pub fn parse_procs(path: &Path, content: &str) -> Result<Vec<i32>, KillError> {
    content
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| match line.parse::<i32>() {
            Ok(pid) if pid > 0 => Ok(pid),
            _ => Err(KillError::MalformedPid {
                path: path.to_path_buf(),
                value: line.to_string(),
            }),
        })
        .collect()
}

/// The process ids in `dir` and every cgroup below it (sorted, unique).
/// A missing `dir` means the pod is already gone: no processes.
pub fn processes_in_tree(dir: &Path) -> Result<Vec<i32>, KillError> {
    let mut pids = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let procs = current.join("cgroup.procs");
        match fs::read_to_string(&procs) {
            Ok(content) => pids.extend(parse_procs(&procs, &content)?),
            // The cgroup (or the whole pod) went away meanwhile.
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(KillError::Read {
                    path: procs,
                    source,
                });
            }
        }
        let entries = match fs::read_dir(&current) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(KillError::Read {
                    path: current,
                    source,
                });
            }
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                pending.push(entry.path());
            }
        }
    }
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// Sends SIGKILL to every process of the cgroup trees `dirs`, never to
/// koordlet itself or to pid 1.
pub fn kill_cgroup_trees(dirs: &[PathBuf]) -> Result<KillReport, KillError> {
    use rustix::process::{Pid, Signal, kill_process};
    let own_pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let mut pids = Vec::new();
    for dir in dirs {
        pids.extend(processes_in_tree(dir)?);
    }
    pids.sort_unstable();
    pids.dedup();
    let mut report = KillReport::default();
    for pid in pids {
        let target = Pid::from_raw(pid).filter(|_| pid != own_pid && pid != 1);
        let Some(target) = target else {
            report.spared.push(pid);
            continue;
        };
        match kill_process(target, Signal::KILL) {
            Ok(()) => report.killed.push(pid),
            Err(rustix::io::Errno::SRCH) => report.vanished.push(pid),
            Err(err) => report.failed.push((pid, err.to_string())),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procs_parse_and_reject_garbage() {
        let path = Path::new("/x/cgroup.procs");
        assert_eq!(parse_procs(path, "12\n 34 \n\n").unwrap(), vec![12, 34]);
        assert!(parse_procs(path, "").unwrap().is_empty());
        for bad in ["abc", "-3", "0", "1 2"] {
            let err = parse_procs(path, bad).unwrap_err();
            assert!(err.to_string().contains("/x/cgroup.procs"), "{err}");
        }
    }

    #[test]
    fn tree_walk_collects_children_and_tolerates_a_missing_pod() {
        let base = std::env::temp_dir().join(format!("koord-kill-tree-{}", std::process::id()));
        let child = base.join("container-a");
        fs::create_dir_all(&child).unwrap();
        fs::write(base.join("cgroup.procs"), "7\n").unwrap();
        fs::write(child.join("cgroup.procs"), "9\n7\n").unwrap();
        assert_eq!(processes_in_tree(&base).unwrap(), vec![7, 9]);
        assert!(processes_in_tree(&base.join("gone")).unwrap().is_empty());
        fs::write(child.join("cgroup.procs"), "x\n").unwrap();
        assert!(processes_in_tree(&base).is_err());
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn koordlet_itself_is_never_signalled() {
        let base = std::env::temp_dir().join(format!("koord-kill-self-{}", std::process::id()));
        fs::create_dir_all(&base).unwrap();
        fs::write(
            base.join("cgroup.procs"),
            format!("1\n{}\n", std::process::id()),
        )
        .unwrap();
        let report = kill_cgroup_trees(std::slice::from_ref(&base)).unwrap();
        assert!(report.killed.is_empty());
        assert_eq!(report.spared.len(), 2);
        fs::remove_dir_all(&base).unwrap();
    }
}
