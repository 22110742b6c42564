//! Applies an [`Adjustment`](super::protocol::Adjustment)'s side effects:
//! cgroup files through the resource executor, resctrl groups and tasks,
//! `/proc/<pid>/oom_score_adj` and core scheduling cookies. Blocking; async
//! callers use [`SideEffectApplier::apply`], which runs on the blocking pool.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use koord_common::sync::MutexExt;

use super::hooks::coresched::cookie::{CookieManager, CookieOutcome};
use super::protocol::SideEffect;
use crate::resourceexecutor::{ResourceExecutor, ResourceUpdate, WriteStatus};
use crate::system::cgroupfs::read_file;

/// Result of one side effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EffectStatus {
    Applied,
    /// Already in place (or written recently; see the executor's cache).
    Unchanged,
    /// The cgroup, group or process does not exist (yet).
    NotFound,
    /// The kernel refused with EPERM/EACCES. `lowering` is set for an
    /// `oom_score_adj` below the current value, which needs
    /// CAP_SYS_RESOURCE.
    PermissionDenied {
        lowering: bool,
        error: String,
    },
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectReport {
    pub effect: SideEffect,
    pub status: EffectStatus,
}

/// Applies side effects under configurable roots.
#[derive(Clone)]
pub struct SideEffectApplier {
    executor: ResourceExecutor,
    proc_root: PathBuf,
    resctrl_root: PathBuf,
    /// Present on kernels with core scheduling. The lock serializes cookie
    /// changes (one relay thread per change; prctl does not block on
    /// cgroup locks).
    cookies: Option<Arc<Mutex<CookieManager>>>,
}

fn io_status(error: &io::Error) -> EffectStatus {
    match error.raw_os_error() {
        Some(code) if code == libc_enoent() || code == libc_esrch() => EffectStatus::NotFound,
        Some(code) if code == libc_eperm() || code == libc_eacces() => {
            EffectStatus::PermissionDenied {
                lowering: false,
                error: error.to_string(),
            }
        }
        _ => EffectStatus::Failed(error.to_string()),
    }
}

const fn libc_eperm() -> i32 {
    1
}
const fn libc_enoent() -> i32 {
    2
}
const fn libc_esrch() -> i32 {
    3
}
const fn libc_eacces() -> i32 {
    13
}

impl SideEffectApplier {
    pub fn new(
        executor: ResourceExecutor,
        proc_root: impl Into<PathBuf>,
        resctrl_root: impl Into<PathBuf>,
    ) -> Self {
        Self {
            executor,
            proc_root: proc_root.into(),
            resctrl_root: resctrl_root.into(),
            cookies: None,
        }
    }

    /// Applies core scheduling cookies through `manager`.
    pub fn with_cookie_manager(mut self, manager: CookieManager) -> Self {
        self.cookies = Some(Arc::new(Mutex::new(manager)));
        self
    }

    pub fn executor(&self) -> &ResourceExecutor {
        &self.executor
    }

    pub fn resctrl_root(&self) -> &Path {
        &self.resctrl_root
    }

    /// [`SideEffectApplier::apply_blocking`] on tokio's blocking pool.
    pub async fn apply(&self, effects: Vec<SideEffect>) -> Vec<EffectReport> {
        if effects.is_empty() {
            return Vec::new();
        }
        let applier = self.clone();
        let fallback = effects.clone();
        match tokio::task::spawn_blocking(move || applier.apply_blocking(&effects)).await {
            Ok(reports) => reports,
            Err(error) => fallback
                .into_iter()
                .map(|effect| EffectReport {
                    effect,
                    status: EffectStatus::Failed(format!("blocking task failed: {error}")),
                })
                .collect(),
        }
    }

    /// Applies `effects`: all cgroup writes as one executor batch (so the
    /// executor orders hierarchical writes), then the others in order.
    pub fn apply_blocking(&self, effects: &[SideEffect]) -> Vec<EffectReport> {
        let mut reports: Vec<Option<EffectReport>> = vec![None; effects.len()];
        let mut updates = Vec::new();
        let mut update_index = Vec::new();
        for (index, effect) in effects.iter().enumerate() {
            if let SideEffect::CgroupWrite {
                dir,
                resource,
                value,
                reason,
            } = effect
            {
                match ResourceUpdate::new(dir.clone(), *resource, value.clone(), reason.clone()) {
                    Ok(update) => {
                        updates.push(update);
                        update_index.push(index);
                    }
                    Err(error) => {
                        reports[index] = Some(EffectReport {
                            effect: effect.clone(),
                            status: EffectStatus::Failed(format!(
                                "invalid value {value} for {resource} of /{}: {error}",
                                dir.display()
                            )),
                        })
                    }
                }
            }
        }
        if !updates.is_empty() {
            let requested: Vec<ResourceUpdate> = updates.clone();
            let report = self.executor.apply_blocking(updates, SystemTime::now());
            for (update, index) in requested.iter().zip(update_index) {
                // The last step for a file is its final outcome.
                let write = report
                    .writes
                    .iter()
                    .rev()
                    .find(|w| w.resource == update.resource && same_dir(&w.dir, &update.dir));
                let status = match write.map(|w| &w.status) {
                    Some(WriteStatus::Written) => EffectStatus::Applied,
                    Some(WriteStatus::SkippedCached | WriteStatus::SkippedUnchanged) => {
                        EffectStatus::Unchanged
                    }
                    Some(WriteStatus::Failed { error, os_error }) => match os_error {
                        Some(code) if *code == libc_enoent() => EffectStatus::NotFound,
                        Some(code) if *code == libc_eperm() || *code == libc_eacces() => {
                            EffectStatus::PermissionDenied {
                                lowering: false,
                                error: error.clone(),
                            }
                        }
                        _ => EffectStatus::Failed(error.clone()),
                    },
                    None => EffectStatus::Failed("the executor did not report the write".into()),
                };
                reports[index] = Some(EffectReport {
                    effect: effects[index].clone(),
                    status,
                });
            }
        }
        let now = Instant::now();
        if let Some(cookies) = &self.cookies
            && effects
                .iter()
                .any(|effect| matches!(effect, SideEffect::CoreSchedCookie { .. }))
        {
            let mut manager = cookies.lock_or_recover();
            manager.expire(now);
        }
        for (index, effect) in effects.iter().enumerate() {
            if reports[index].is_some() {
                continue;
            }
            let status = match effect {
                SideEffect::CgroupWrite { .. } => continue,
                SideEffect::ResctrlGroup { group, schemata } => self.resctrl_group(group, schemata),
                SideEffect::ResctrlTasks { group, pids } => self.resctrl_tasks(group, pids),
                SideEffect::ResctrlRemoveGroup { group } => self.resctrl_remove(group),
                SideEffect::OomScoreAdj { pid, value } => self.oom_score_adj(*pid, *value),
                SideEffect::CoreSchedCookie {
                    container,
                    group,
                    pids,
                } => self.core_sched_cookie(container, group.as_deref(), pids, now),
            };
            reports[index] = Some(EffectReport {
                effect: effect.clone(),
                status,
            });
        }
        reports.into_iter().flatten().collect()
    }

    fn core_sched_cookie(
        &self,
        container: &str,
        group: Option<&str>,
        pids: &[u32],
        now: Instant,
    ) -> EffectStatus {
        let Some(cookies) = &self.cookies else {
            return EffectStatus::Failed(
                "core scheduling is not available on this node (no cookie manager)".to_string(),
            );
        };
        let mut manager = cookies.lock_or_recover();
        let outcome = match group {
            Some(group) => manager.enable(container, group, pids, now),
            None => manager.disable(container, pids),
        };
        drop(manager);
        match outcome {
            CookieOutcome::Unchanged { .. } => EffectStatus::Unchanged,
            CookieOutcome::Created { .. }
            | CookieOutcome::Assigned { .. }
            | CookieOutcome::Cleared { .. } => {
                tracing::debug!(container = %crate::bounds::Bounded(container), group = %group.map_or("(default cookie)".into(), crate::bounds::for_log), %outcome, "core sched cookie");
                EffectStatus::Applied
            }
            CookieOutcome::NoProcesses => EffectStatus::NotFound,
            CookieOutcome::Failed(error) => EffectStatus::Failed(error),
        }
    }

    /// Whether the resctrl group `group` exists (a valid name whose
    /// directory is below the resctrl root).
    pub fn resctrl_group_exists(&self, group: &str) -> bool {
        self.group_dir(group).is_ok_and(|dir| dir.is_dir())
    }

    fn group_dir(&self, group: &str) -> Result<PathBuf, EffectStatus> {
        if super::resctrlnode::is_group_name(group) {
            Ok(self.resctrl_root.join(group))
        } else {
            Err(EffectStatus::Failed(format!(
                "invalid resctrl group name {group:?}"
            )))
        }
    }

    fn resctrl_group(&self, group: &str, schemata: &[String]) -> EffectStatus {
        let dir = match self.group_dir(group) {
            Ok(dir) => dir,
            Err(status) => return status,
        };
        if !self.resctrl_root.is_dir() {
            return EffectStatus::NotFound;
        }
        let mut changed = false;
        if !dir.is_dir() {
            if let Err(error) = std::fs::create_dir(&dir) {
                if error.kind() != io::ErrorKind::AlreadyExists {
                    return io_status(&error);
                }
            } else {
                changed = true;
            }
        }
        if !schemata.is_empty() {
            let path = dir.join("schemata");
            let current = read_file(&path).unwrap_or_default();
            let missing: Vec<&str> = schemata
                .iter()
                .map(|line| line.trim())
                .filter(|line| !current.lines().any(|l| same_schemata_line(l, line)))
                .collect();
            // resctrl takes several lines in one write.
            if !missing.is_empty() {
                let content = format!("{}\n", missing.join("\n"));
                if let Err(error) = write_resctrl(&path, &content) {
                    return EffectStatus::Failed(write_error(&path, &content, &error));
                }
                changed = true;
            }
        }
        if changed {
            EffectStatus::Applied
        } else {
            EffectStatus::Unchanged
        }
    }

    fn resctrl_tasks(&self, group: &str, pids: &[u32]) -> EffectStatus {
        let dir = match self.group_dir(group) {
            Ok(dir) => dir,
            Err(status) => return status,
        };
        if !dir.is_dir() {
            return EffectStatus::NotFound;
        }
        let path = dir.join("tasks");
        let current = read_file(&path).unwrap_or_default();
        let present: Vec<u32> = current
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let mut changed = false;
        for pid in pids {
            if present.contains(pid) {
                continue;
            }
            // The kernel takes one task per write; a task that exited is not an error.
            let content = format!("{pid}\n");
            match write_resctrl(&path, &content) {
                Ok(()) => changed = true,
                Err(error) if error.raw_os_error() == Some(libc_esrch()) => {}
                Err(error) => return EffectStatus::Failed(write_error(&path, &content, &error)),
            }
        }
        if changed {
            EffectStatus::Applied
        } else {
            EffectStatus::Unchanged
        }
    }

    fn resctrl_remove(&self, group: &str) -> EffectStatus {
        let dir = match self.group_dir(group) {
            Ok(dir) => dir,
            Err(status) => return status,
        };
        if !dir.is_dir() {
            return EffectStatus::Unchanged;
        }
        // resctrl removes a group with rmdir; a generated tree holds plain files.
        match std::fs::remove_dir(&dir).or_else(|_| std::fs::remove_dir_all(&dir)) {
            Ok(()) => EffectStatus::Applied,
            Err(error) => io_status(&error),
        }
    }

    fn oom_score_adj(&self, pid: u32, value: i64) -> EffectStatus {
        if !(-1000..=1000).contains(&value) {
            return EffectStatus::Failed(format!(
                "oom_score_adj {value} for pid {pid} is outside [-1000, 1000]"
            ));
        }
        let path = self.proc_root.join(pid.to_string()).join("oom_score_adj");
        let current = match std::fs::read_to_string(&path) {
            Ok(text) => match text.trim().parse::<i64>() {
                Ok(current) => current,
                Err(_) => {
                    return EffectStatus::Failed(format!(
                        "{} holds {:?}, not an integer",
                        path.display(),
                        text.trim()
                    ));
                }
            },
            Err(error) => return io_status(&error),
        };
        if current == value {
            return EffectStatus::Unchanged;
        }
        match std::fs::write(&path, value.to_string()) {
            Ok(()) => EffectStatus::Applied,
            Err(error) => match io_status(&error) {
                EffectStatus::PermissionDenied { .. } => EffectStatus::PermissionDenied {
                    lowering: value < current,
                    error: format!(
                        "writing {value} to {} (current {current}): {error}",
                        path.display()
                    ),
                },
                other => other,
            },
        }
    }
}

/// One write to a resctrl file. The kernel creates a group's files with
/// the group; a generated tree may not have them yet, so create if absent.
fn write_resctrl(path: &Path, content: &str) -> io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .and_then(|mut file| file.write_all(content.as_bytes()))
}

fn write_error(path: &Path, content: &str, error: &io::Error) -> String {
    format!("cannot write {content:?} to {}: {error}", path.display())
}

fn same_dir(a: &Path, b: &Path) -> bool {
    let strip = |p: &Path| p.to_string_lossy().trim_matches('/').to_string();
    strip(a) == strip(b)
}

/// Whether two schemata lines set the same values (the kernel pads masks
/// with zeros and may list domains in another order).
pub fn same_schemata_line(a: &str, b: &str) -> bool {
    fn parse(line: &str) -> Option<(String, Vec<(u32, u64)>)> {
        let (resource, domains) = line.trim().split_once(':')?;
        let radix = if resource.trim().starts_with("MB") {
            10
        } else {
            16
        };
        let mut values = Vec::new();
        for domain in domains.split(';').filter(|d| !d.trim().is_empty()) {
            let (id, value) = domain.split_once('=')?;
            values.push((
                id.trim().parse().ok()?,
                u64::from_str_radix(value.trim(), radix).ok()?,
            ));
        }
        values.sort_unstable();
        Some((resource.trim().to_string(), values))
    }
    match (parse(a), parse(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a.trim() == b.trim(),
    }
}
