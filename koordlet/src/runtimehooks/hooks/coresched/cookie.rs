//! Core scheduling cookies: the syscall layer ([`CoreSchedSyscalls`], with
//! the real `prctl(PR_SCHED_CORE, …)` in [`PrctlCoreSched`] and a fake for
//! tests) and the [`CookieManager`] that keeps one cookie per core-sched
//! group, as upstream's CoreSched plugin does:
//!
//! - **add**: the group has no cookie yet: create one on the container's
//!   first process (thread-group scope) and copy it to its other processes;
//! - **assign**: the group has a cookie: copy it from a process known to
//!   carry it (a "sibling") to the container's processes that lack it; when
//!   no sibling still carries it, fall back to add;
//! - **clear**: the pod is not (or no longer) core-scheduled: put the
//!   container's processes back on the default cookie 0.
//!
//! Copying a cookie needs a relay thread: `SHARE_FROM` pulls a cookie onto
//! the calling thread, `SHARE_TO` pushes the caller's cookie to a target.
//! [`PrctlCoreSched`] does both on a short-lived thread so koordlet's own
//! threads keep the default cookie (a new thread inherits its creator's
//! cookie, which is 0 for koordlet's threads).
//!
//! The manager's state is a cache (upstream keeps it 5 minutes without a
//! refresh; the reconciler refreshes every live container each round), so
//! a group whose containers are gone is forgotten.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

use koord_common::sync::MutexExt;

/// The cookie every task has unless given another.
pub const DEFAULT_COOKIE: u64 = 0;

/// How long a group or container is remembered without a refresh
/// (upstream's cache expiration).
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(300);

/// A failed `prctl(PR_SCHED_CORE, …)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("prctl(PR_SCHED_CORE, {op}) for pid {pid}: {message}")]
pub struct CoreSchedError {
    pub op: &'static str,
    pub pid: u32,
    /// The errno, when the kernel returned one.
    pub errno: Option<i32>,
    pub message: String,
}

impl CoreSchedError {
    fn from_errno(op: &'static str, pid: u32, errno: i32) -> Self {
        Self {
            op,
            pid,
            errno: Some(errno),
            message: std::io::Error::from_raw_os_error(errno).to_string(),
        }
    }
}

/// The core scheduling operations the manager needs. Scopes follow
/// upstream: cookies are read per thread and written per thread group.
pub trait CoreSchedSyscalls: Send {
    /// The cookie of thread `pid` (0: the default cookie).
    fn get(&self, pid: u32) -> Result<u64, CoreSchedError>;
    /// Gives the thread group of `pid` a new unique cookie.
    fn create(&mut self, pid: u32) -> Result<(), CoreSchedError>;
    /// Copies the cookie of thread `from` to the thread groups `to`.
    /// `Err`: the source could not be read and nothing changed; `Ok` lists
    /// the targets that failed.
    fn assign(
        &mut self,
        from: u32,
        to: &[u32],
    ) -> Result<Vec<(u32, CoreSchedError)>, CoreSchedError>;
    /// Puts the thread groups `pids` back on the default cookie; returns
    /// those that failed.
    fn clear(&mut self, pids: &[u32]) -> Vec<(u32, CoreSchedError)>;
}

/// The kernel's core scheduling through `prctl(PR_SCHED_CORE)`. Only
/// useful on kernels built with `CONFIG_SCHED_CORE` (elsewhere every call
/// fails with EINVAL; the capability probe keeps it unused there).
#[derive(Debug, Default, Clone, Copy)]
pub struct PrctlCoreSched;

fn kernel_pid(op: &'static str, pid: u32) -> Result<rustix::thread::Pid, CoreSchedError> {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::thread::Pid::from_raw)
        .ok_or_else(|| CoreSchedError {
            op,
            pid,
            errno: None,
            message: "not a valid process id".to_string(),
        })
}

/// Runs `work` on a fresh thread, whose cookie starts as the default one
/// and dies with it.
fn on_relay_thread<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    std::thread::Builder::new()
        .name("core-sched-relay".to_string())
        .spawn(work)
        .map_err(|error| format!("cannot start the relay thread: {error}"))?
        .join()
        .map_err(|_| "the relay thread panicked".to_string())
}

impl CoreSchedSyscalls for PrctlCoreSched {
    fn get(&self, pid: u32) -> Result<u64, CoreSchedError> {
        use rustix::thread::{CoreSchedulingScope, core_scheduling_cookie};
        let target = kernel_pid("GET", pid)?;
        core_scheduling_cookie(target, CoreSchedulingScope::Thread)
            .map_err(|errno| CoreSchedError::from_errno("GET", pid, errno.raw_os_error()))
    }

    fn create(&mut self, pid: u32) -> Result<(), CoreSchedError> {
        use rustix::thread::{CoreSchedulingScope, create_core_scheduling_cookie};
        let target = kernel_pid("CREATE", pid)?;
        create_core_scheduling_cookie(target, CoreSchedulingScope::ThreadGroup)
            .map_err(|errno| CoreSchedError::from_errno("CREATE", pid, errno.raw_os_error()))
    }

    fn assign(
        &mut self,
        from: u32,
        to: &[u32],
    ) -> Result<Vec<(u32, CoreSchedError)>, CoreSchedError> {
        use rustix::thread::{
            CoreSchedulingScope, pull_core_scheduling_cookie, push_core_scheduling_cookie,
        };
        let source = kernel_pid("SHARE_FROM", from)?;
        let targets = to.to_vec();
        let relayed = on_relay_thread(move || {
            pull_core_scheduling_cookie(source, CoreSchedulingScope::Thread).map_err(|errno| {
                CoreSchedError::from_errno("SHARE_FROM", from, errno.raw_os_error())
            })?;
            let mut failed = Vec::new();
            for pid in targets {
                let pushed = kernel_pid("SHARE_TO", pid).and_then(|target| {
                    push_core_scheduling_cookie(target, CoreSchedulingScope::ThreadGroup).map_err(
                        |errno| CoreSchedError::from_errno("SHARE_TO", pid, errno.raw_os_error()),
                    )
                });
                if let Err(error) = pushed {
                    failed.push((pid, error));
                }
            }
            Ok(failed)
        });
        relayed.unwrap_or_else(|message| {
            Err(CoreSchedError {
                op: "SHARE_FROM",
                pid: from,
                errno: None,
                message,
            })
        })
    }

    fn clear(&mut self, pids: &[u32]) -> Vec<(u32, CoreSchedError)> {
        use rustix::thread::{CoreSchedulingScope, push_core_scheduling_cookie};
        let targets = pids.to_vec();
        // The relay thread carries the default cookie: pushing it clears.
        let relayed = on_relay_thread(move || {
            let mut failed = Vec::new();
            for pid in targets {
                let pushed = kernel_pid("SHARE_TO", pid).and_then(|target| {
                    push_core_scheduling_cookie(target, CoreSchedulingScope::ThreadGroup).map_err(
                        |errno| CoreSchedError::from_errno("SHARE_TO", pid, errno.raw_os_error()),
                    )
                });
                if let Err(error) = pushed {
                    failed.push((pid, error));
                }
            }
            failed
        });
        relayed.unwrap_or_else(|message| {
            pids.iter()
                .map(|&pid| {
                    (
                        pid,
                        CoreSchedError {
                            op: "SHARE_TO",
                            pid,
                            errno: None,
                            message: message.clone(),
                        },
                    )
                })
                .collect()
        })
    }
}

/// What one request to the manager did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CookieOutcome {
    /// Every process already had the wanted cookie.
    Unchanged {
        cookie: u64,
    },
    /// A new cookie was created for the group.
    Created {
        cookie: u64,
        pids: usize,
    },
    /// The group's cookie was copied to processes that lacked it.
    Assigned {
        cookie: u64,
        pids: usize,
    },
    /// Processes were put back on the default cookie.
    Cleared {
        pids: usize,
    },
    /// No process to work on (none listed, or all gone).
    NoProcesses,
    Failed(String),
}

impl fmt::Display for CookieOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unchanged { cookie } => write!(f, "unchanged (cookie {cookie})"),
            Self::Created { cookie, pids } => write!(f, "new cookie {cookie} for {pids} pid(s)"),
            Self::Assigned { cookie, pids } => write!(f, "cookie {cookie} on {pids} pid(s)"),
            Self::Cleared { pids } => write!(f, "default cookie back on {pids} pid(s)"),
            Self::NoProcesses => f.write_str("no process"),
            Self::Failed(error) => write!(f, "failed: {error}"),
        }
    }
}

#[derive(Debug, Clone)]
struct GroupEntry {
    cookie: u64,
    /// Processes known to carry the cookie.
    pids: BTreeSet<u32>,
    seen: Instant,
}

impl GroupEntry {
    fn valid(&self) -> bool {
        self.cookie != DEFAULT_COOKIE && !self.pids.is_empty()
    }
}

#[derive(Debug, Clone)]
struct ContainerEntry {
    group: String,
    seen: Instant,
}

/// One cookie per core-sched group, over a [`CoreSchedSyscalls`].
pub struct CookieManager {
    syscalls: Box<dyn CoreSchedSyscalls>,
    groups: HashMap<String, GroupEntry>,
    /// Container key (`<pod uid>/<container id>`) → its group.
    containers: HashMap<String, ContainerEntry>,
    ttl: Duration,
}

impl fmt::Debug for CookieManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CookieManager")
            .field("groups", &self.groups)
            .field("containers", &self.containers)
            .finish_non_exhaustive()
    }
}

/// The manager's key of a container.
pub fn container_key(pod_uid: &str, container_id: &str) -> String {
    format!("{pod_uid}/{container_id}")
}

impl CookieManager {
    pub fn new(syscalls: Box<dyn CoreSchedSyscalls>) -> Self {
        Self {
            syscalls,
            groups: HashMap::new(),
            containers: HashMap::new(),
            ttl: DEFAULT_CACHE_TTL,
        }
    }

    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The cookie the manager holds for `group`.
    pub fn group_cookie(&self, group: &str) -> Option<u64> {
        self.groups
            .get(group)
            .filter(|entry| entry.valid())
            .map(|entry| entry.cookie)
    }

    /// The group the manager last put `container` in.
    pub fn container_group(&self, container: &str) -> Option<&str> {
        self.containers
            .get(container)
            .map(|entry| entry.group.as_str())
    }

    /// Forgets groups and containers not refreshed within the TTL; returns
    /// how many entries went.
    pub fn expire(&mut self, now: Instant) -> usize {
        let ttl = self.ttl;
        let fresh = |seen: Instant| now.saturating_duration_since(seen) <= ttl;
        let before = self.groups.len() + self.containers.len();
        self.groups.retain(|_, entry| fresh(entry.seen));
        self.containers.retain(|_, entry| fresh(entry.seen));
        before - self.groups.len() - self.containers.len()
    }

    fn remember(&mut self, container: &str, group: &str, now: Instant) {
        // Processes that leave a group for another are no longer its siblings.
        if let Some(last) = self.containers.get(container)
            && last.group != group
        {
            let last = last.group.clone();
            self.drop_group_if_invalid(&last);
        }
        self.containers.insert(
            container.to_string(),
            ContainerEntry {
                group: group.to_string(),
                seen: now,
            },
        );
    }

    fn drop_group_if_invalid(&mut self, group: &str) {
        if self.groups.get(group).is_some_and(|entry| !entry.valid()) {
            self.groups.remove(group);
        }
    }

    /// Gives the processes `pids` of `container` the cookie of `group`.
    pub fn enable(
        &mut self,
        container: &str,
        group: &str,
        pids: &[u32],
        now: Instant,
    ) -> CookieOutcome {
        if pids.is_empty() {
            return CookieOutcome::NoProcesses;
        }
        if let Some(last) = self.containers.get(container).map(|e| e.group.clone())
            && last != group
            && let Some(entry) = self.groups.get_mut(&last)
        {
            for pid in pids {
                entry.pids.remove(pid);
            }
        }
        if self.group_cookie(group).is_none() {
            self.groups.remove(group);
            self.adopt(group, pids, now);
        }
        if let Some(outcome) = self.assign(container, group, pids, now) {
            return outcome;
        }
        self.add(container, group, pids, now)
    }

    /// After a restart the processes may already carry a cookie of this
    /// group: keep it rather than make a second one, unless another group
    /// the manager knows holds that cookie.
    fn adopt(&mut self, group: &str, pids: &[u32], now: Instant) {
        let mut first = None;
        let mut carriers = BTreeSet::new();
        for &pid in pids {
            let Ok(cookie) = self.syscalls.get(pid) else {
                continue;
            };
            if cookie == DEFAULT_COOKIE {
                continue;
            }
            let adopted = *first.get_or_insert(cookie);
            if cookie == adopted {
                carriers.insert(pid);
            }
        }
        let Some(cookie) = first else {
            return;
        };
        let owned_elsewhere = self
            .groups
            .iter()
            .any(|(other, entry)| other != group && entry.valid() && entry.cookie == cookie);
        if !owned_elsewhere {
            self.groups.insert(
                group.to_string(),
                GroupEntry {
                    cookie,
                    pids: carriers,
                    seen: now,
                },
            );
        }
    }

    /// The assign path; `None` when the group has no usable cookie (add).
    fn assign(
        &mut self,
        container: &str,
        group: &str,
        pids: &[u32],
        now: Instant,
    ) -> Option<CookieOutcome> {
        let entry = self.groups.get(group).filter(|entry| entry.valid())?;
        let target = entry.cookie;
        if pids.iter().all(|pid| entry.pids.contains(pid)) {
            if let Some(entry) = self.groups.get_mut(group) {
                entry.seen = now;
            }
            self.remember(container, group, now);
            return Some(CookieOutcome::Unchanged { cookie: target });
        }
        let mut unknown = 0;
        let mut carrying = Vec::new();
        let mut lacking = Vec::new();
        for &pid in pids {
            match self.syscalls.get(pid) {
                Err(_) => unknown += 1,
                Ok(cookie) if cookie == target => carrying.push(pid),
                Ok(_) => lacking.push(pid),
            }
        }
        if unknown == pids.len() {
            // Every process is gone (a restarting container): try next round.
            return Some(CookieOutcome::NoProcesses);
        }
        if lacking.is_empty() {
            let entry = self.groups.get_mut(group)?;
            entry.pids.extend(carrying);
            entry.seen = now;
            self.remember(container, group, now);
            return Some(CookieOutcome::Unchanged { cookie: target });
        }
        let siblings: Vec<u32> = entry.pids.iter().copied().collect();
        let mut stale = Vec::new();
        let mut source = None;
        for sibling in siblings {
            match self.syscalls.get(sibling) {
                Ok(cookie) if cookie == target => {
                    source = Some(sibling);
                    break;
                }
                _ => stale.push(sibling),
            }
        }
        let entry = self.groups.get_mut(group)?;
        for pid in &stale {
            entry.pids.remove(pid);
        }
        let source = source?;
        let failed = match self.syscalls.assign(source, &lacking) {
            Ok(failed) => failed,
            Err(error) => {
                tracing::debug!(group = %crate::bounds::Bounded(group), %error, "core sched sibling lost its cookie; creating a new one");
                if let Some(entry) = self.groups.get_mut(group) {
                    entry.pids.remove(&source);
                }
                return None;
            }
        };
        let failed: BTreeSet<u32> = failed.into_iter().map(|(pid, _)| pid).collect();
        let assigned: Vec<u32> = lacking
            .into_iter()
            .filter(|pid| !failed.contains(pid))
            .collect();
        let count = assigned.len();
        let entry = self.groups.get_mut(group)?;
        entry.pids.extend(assigned);
        entry.pids.extend(carrying);
        entry.seen = now;
        self.remember(container, group, now);
        Some(if count == 0 {
            CookieOutcome::Failed(format!(
                "cookie {target} of group {} could not be copied to any of {} pid(s)",
                crate::bounds::Bounded(group),
                failed.len()
            ))
        } else {
            CookieOutcome::Assigned {
                cookie: target,
                pids: count,
            }
        })
    }

    fn add(&mut self, container: &str, group: &str, pids: &[u32], now: Instant) -> CookieOutcome {
        let first = pids[0];
        if let Err(error) = self.syscalls.create(first) {
            return CookieOutcome::Failed(error.to_string());
        }
        let cookie = match self.syscalls.get(first) {
            Ok(cookie) if cookie != DEFAULT_COOKIE => cookie,
            Ok(_) => {
                return CookieOutcome::Failed(format!(
                    "pid {first} still has the default cookie after CREATE"
                ));
            }
            Err(error) => return CookieOutcome::Failed(error.to_string()),
        };
        let rest = &pids[1..];
        let failed: BTreeSet<u32> = if rest.is_empty() {
            BTreeSet::new()
        } else {
            match self.syscalls.assign(first, rest) {
                Ok(failed) => failed.into_iter().map(|(pid, _)| pid).collect(),
                Err(_) => rest.iter().copied().collect(),
            }
        };
        let carriers: BTreeSet<u32> = pids
            .iter()
            .copied()
            .filter(|pid| !failed.contains(pid))
            .collect();
        let count = carriers.len();
        self.groups.insert(
            group.to_string(),
            GroupEntry {
                cookie,
                pids: carriers,
                seen: now,
            },
        );
        self.remember(container, group, now);
        CookieOutcome::Created {
            cookie,
            pids: count,
        }
    }

    /// Puts the processes `pids` of `container` back on the default cookie
    /// (those that carry another one) and forgets the container.
    pub fn disable(&mut self, container: &str, pids: &[u32]) -> CookieOutcome {
        let last = self.containers.remove(container).map(|entry| entry.group);
        if pids.is_empty() {
            return CookieOutcome::NoProcesses;
        }
        let mut unknown = 0;
        let mut carrying = Vec::new();
        for &pid in pids {
            match self.syscalls.get(pid) {
                Err(_) => unknown += 1,
                Ok(DEFAULT_COOKIE) => {}
                Ok(_) => carrying.push(pid),
            }
        }
        if let Some(last) = &last
            && let Some(entry) = self.groups.get_mut(last)
        {
            for pid in pids {
                entry.pids.remove(pid);
            }
            self.drop_group_if_invalid(last);
        }
        if unknown == pids.len() {
            return CookieOutcome::NoProcesses;
        }
        if carrying.is_empty() {
            return CookieOutcome::Unchanged {
                cookie: DEFAULT_COOKIE,
            };
        }
        let failed = self.syscalls.clear(&carrying);
        let cleared = carrying.len() - failed.len();
        match failed.first() {
            Some((_, error)) if cleared == 0 => CookieOutcome::Failed(error.to_string()),
            _ => CookieOutcome::Cleared { pids: cleared },
        }
    }
}

/// A fake kernel for tests: cookies per thread, thread groups, and pids
/// that fail every call (gone processes).
#[derive(Debug, Default, Clone)]
pub struct FakeCoreSched {
    /// Thread → cookie (absent: the default cookie).
    pub cookies: HashMap<u32, u64>,
    /// Thread → its thread group leader (absent: its own group).
    pub thread_groups: HashMap<u32, u32>,
    /// Threads every call fails for, as for a process that exited.
    pub gone: BTreeSet<u32>,
    pub next_cookie: u64,
    /// Operations done, for assertions (`get` is not recorded).
    pub log: Vec<String>,
}

impl FakeCoreSched {
    pub fn new() -> Self {
        Self {
            next_cookie: 1000,
            ..Self::default()
        }
    }

    fn check(&self, op: &'static str, pid: u32) -> Result<(), CoreSchedError> {
        if self.gone.contains(&pid) {
            return Err(CoreSchedError::from_errno(op, pid, 3));
        }
        Ok(())
    }

    /// The thread group of `pid`: the threads whose leader is `pid`, and `pid`.
    fn members(&self, pid: u32) -> Vec<u32> {
        let mut members: Vec<u32> = self
            .thread_groups
            .iter()
            .filter(|(_, leader)| **leader == pid)
            .map(|(thread, _)| *thread)
            .collect();
        members.push(pid);
        members
    }

    fn set_group(&mut self, pid: u32, cookie: u64) {
        for member in self.members(pid) {
            if !self.gone.contains(&member) {
                self.cookies.insert(member, cookie);
            }
        }
    }

    pub fn cookie(&self, pid: u32) -> u64 {
        self.cookies.get(&pid).copied().unwrap_or(DEFAULT_COOKIE)
    }
}

impl CoreSchedSyscalls for FakeCoreSched {
    fn get(&self, pid: u32) -> Result<u64, CoreSchedError> {
        self.check("GET", pid)?;
        Ok(self.cookie(pid))
    }

    fn create(&mut self, pid: u32) -> Result<(), CoreSchedError> {
        self.check("CREATE", pid)?;
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.set_group(pid, cookie);
        self.log.push(format!("create {pid} -> {cookie}"));
        Ok(())
    }

    fn assign(
        &mut self,
        from: u32,
        to: &[u32],
    ) -> Result<Vec<(u32, CoreSchedError)>, CoreSchedError> {
        self.check("SHARE_FROM", from)?;
        let cookie = self.cookie(from);
        let mut failed = Vec::new();
        for &pid in to {
            match self.check("SHARE_TO", pid) {
                Ok(()) => self.set_group(pid, cookie),
                Err(error) => failed.push((pid, error)),
            }
        }
        self.log.push(format!("assign {from} -> {to:?}"));
        Ok(failed)
    }

    fn clear(&mut self, pids: &[u32]) -> Vec<(u32, CoreSchedError)> {
        let mut failed = Vec::new();
        for &pid in pids {
            match self.check("SHARE_TO", pid) {
                Ok(()) => self.set_group(pid, DEFAULT_COOKIE),
                Err(error) => failed.push((pid, error)),
            }
        }
        self.log.push(format!("clear {pids:?}"));
        failed
    }
}

/// A [`FakeCoreSched`] the test keeps a handle on while the manager owns it.
#[derive(Debug, Clone, Default)]
pub struct SharedFake(pub std::sync::Arc<std::sync::Mutex<FakeCoreSched>>);

impl SharedFake {
    pub fn new(fake: FakeCoreSched) -> Self {
        Self(std::sync::Arc::new(std::sync::Mutex::new(fake)))
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut FakeCoreSched) -> T) -> T {
        let mut guard = self.0.lock_or_recover();
        f(&mut guard)
    }
}

impl CoreSchedSyscalls for SharedFake {
    fn get(&self, pid: u32) -> Result<u64, CoreSchedError> {
        self.with(|fake| fake.get(pid))
    }
    fn create(&mut self, pid: u32) -> Result<(), CoreSchedError> {
        self.with(|fake| fake.create(pid))
    }
    fn assign(
        &mut self,
        from: u32,
        to: &[u32],
    ) -> Result<Vec<(u32, CoreSchedError)>, CoreSchedError> {
        self.with(|fake| fake.assign(from, to))
    }
    fn clear(&mut self, pids: &[u32]) -> Vec<(u32, CoreSchedError)> {
        self.with(|fake| fake.clear(pids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(fake: &SharedFake) -> CookieManager {
        CookieManager::new(Box::new(fake.clone()))
    }

    #[test]
    fn the_first_container_of_a_group_gets_a_new_cookie_and_the_next_shares_it() {
        let fake = SharedFake::new(FakeCoreSched::new());
        let mut manager = manager(&fake);
        let now = Instant::now();
        let outcome = manager.enable("pod-a/c1", "g", &[10, 11], now);
        assert_eq!(
            outcome,
            CookieOutcome::Created {
                cookie: 1000,
                pids: 2
            }
        );
        assert_eq!(fake.with(|f| (f.cookie(10), f.cookie(11))), (1000, 1000));
        // Same group, another pod: the cookie is copied, not recreated.
        let outcome = manager.enable("pod-b/c1", "g", &[20], now);
        assert_eq!(
            outcome,
            CookieOutcome::Assigned {
                cookie: 1000,
                pids: 1
            }
        );
        assert_eq!(fake.with(|f| f.cookie(20)), 1000);
        // A refresh with nothing new makes no syscall that changes anything.
        let before = fake.with(|f| f.log.len());
        assert_eq!(
            manager.enable("pod-b/c1", "g", &[20], now),
            CookieOutcome::Unchanged { cookie: 1000 }
        );
        assert_eq!(fake.with(|f| f.log.len()), before);
        // Another group gets its own cookie.
        assert_eq!(
            manager.enable("pod-c/c1", "h", &[30], now),
            CookieOutcome::Created {
                cookie: 1001,
                pids: 1
            }
        );
        assert_eq!(manager.group_cookie("g"), Some(1000));
        assert_eq!(manager.group_cookie("h"), Some(1001));
    }

    #[test]
    fn a_new_process_of_a_known_container_is_assigned_from_a_sibling() {
        let fake = SharedFake::new(FakeCoreSched::new());
        let mut manager = manager(&fake);
        let now = Instant::now();
        manager.enable("p/c", "g", &[10], now);
        // 12 joined the container's cgroup without inheriting the cookie
        // (the runtime started it, as with an exec).
        assert_eq!(
            manager.enable("p/c", "g", &[10, 12], now),
            CookieOutcome::Assigned {
                cookie: 1000,
                pids: 1
            }
        );
        assert_eq!(fake.with(|f| f.cookie(12)), 1000);
    }

    #[test]
    fn when_every_sibling_is_gone_the_group_gets_a_new_cookie() {
        let fake = SharedFake::new(FakeCoreSched::new());
        let mut manager = manager(&fake);
        let now = Instant::now();
        manager.enable("p1/c", "g", &[10], now);
        fake.with(|f| f.gone.insert(10));
        assert_eq!(
            manager.enable("p2/c", "g", &[20], now),
            CookieOutcome::Created {
                cookie: 1001,
                pids: 1
            }
        );
        assert_eq!(manager.group_cookie("g"), Some(1001));
    }

    #[test]
    fn a_restarting_container_whose_processes_are_gone_changes_nothing() {
        let fake = SharedFake::new(FakeCoreSched::new());
        let mut manager = manager(&fake);
        let now = Instant::now();
        manager.enable("p1/c", "g", &[10], now);
        fake.with(|f| f.gone.insert(20));
        assert_eq!(
            manager.enable("p2/c", "g", &[20], now),
            CookieOutcome::NoProcesses
        );
        assert_eq!(
            manager.enable("p2/c", "g", &[], now),
            CookieOutcome::NoProcesses
        );
        assert_eq!(manager.group_cookie("g"), Some(1000));
    }

    #[test]
    fn disable_clears_carriers_and_forgets_the_container() {
        let fake = SharedFake::new(FakeCoreSched::new());
        let mut manager = manager(&fake);
        let now = Instant::now();
        manager.enable("p/c", "g", &[10, 11], now);
        assert_eq!(
            manager.disable("p/c", &[10, 11]),
            CookieOutcome::Cleared { pids: 2 }
        );
        assert_eq!(fake.with(|f| (f.cookie(10), f.cookie(11))), (0, 0));
        assert_eq!(manager.container_group("p/c"), None);
        // The group had no other member: forgotten.
        assert_eq!(manager.group_cookie("g"), None);
        // Nothing left to clear.
        assert_eq!(
            manager.disable("p/c", &[10, 11]),
            CookieOutcome::Unchanged { cookie: 0 }
        );
    }

    #[test]
    fn disable_after_a_restart_clears_a_cookie_the_manager_never_saw() {
        let fake = SharedFake::new(FakeCoreSched::new());
        fake.with(|f| {
            f.cookies.insert(10, 77);
        });
        let mut manager = manager(&fake);
        assert_eq!(
            manager.disable("p/c", &[10]),
            CookieOutcome::Cleared { pids: 1 }
        );
        assert_eq!(fake.with(|f| f.cookie(10)), 0);
    }

    #[test]
    fn after_a_restart_an_existing_group_cookie_is_adopted() {
        let fake = SharedFake::new(FakeCoreSched::new());
        fake.with(|f| {
            f.cookies.insert(10, 55);
        });
        let mut manager = manager(&fake);
        let now = Instant::now();
        assert_eq!(
            manager.enable("p/c", "g", &[10, 11], now),
            CookieOutcome::Assigned {
                cookie: 55,
                pids: 1
            }
        );
        assert_eq!(fake.with(|f| f.cookie(11)), 55);
        assert!(fake.with(|f| !f.log.iter().any(|op| op.starts_with("create"))));
        // A cookie another known group holds is not adopted.
        fake.with(|f| {
            f.cookies.insert(20, 55);
        });
        assert_eq!(
            manager.enable("q/c", "other", &[20], now),
            CookieOutcome::Created {
                cookie: 1000,
                pids: 1
            }
        );
    }

    #[test]
    fn moving_a_container_to_another_group_moves_its_processes() {
        let fake = SharedFake::new(FakeCoreSched::new());
        let mut manager = manager(&fake);
        let now = Instant::now();
        manager.enable("p/c", "g", &[10], now);
        manager.enable("q/c", "g", &[20], now);
        manager.enable("p/c", "g-expeller", &[10], now);
        assert_eq!(manager.container_group("p/c"), Some("g-expeller"));
        assert_ne!(fake.with(|f| f.cookie(10)), fake.with(|f| f.cookie(20)));
        // 10 is no longer a sibling of g: q's new process copies from 20.
        fake.with(|f| f.gone.insert(20));
        assert_eq!(
            manager.enable("r/c", "g", &[30], now),
            CookieOutcome::Created {
                cookie: 1002,
                pids: 1
            }
        );
    }

    #[test]
    fn failed_targets_are_not_recorded_as_carriers() {
        let fake = SharedFake::new(FakeCoreSched::new());
        let mut manager = manager(&fake);
        let now = Instant::now();
        fake.with(|f| f.gone.insert(11));
        assert_eq!(
            manager.enable("p/c", "g", &[10, 11], now),
            CookieOutcome::Created {
                cookie: 1000,
                pids: 1
            }
        );
        fake.with(|f| f.gone.insert(10));
        // 10 was the only carrier and is gone too.
        assert_eq!(
            manager.enable("q/c", "g", &[20], now),
            CookieOutcome::Created {
                cookie: 1001,
                pids: 1
            }
        );
    }

    #[test]
    fn entries_expire_without_a_refresh() {
        let fake = SharedFake::new(FakeCoreSched::new());
        let mut manager = manager(&fake).with_ttl(Duration::from_secs(60));
        let start = Instant::now();
        manager.enable("p/c", "g", &[10], start);
        assert_eq!(manager.expire(start + Duration::from_secs(30)), 0);
        assert_eq!(manager.expire(start + Duration::from_secs(61)), 2);
        assert_eq!(manager.group_cookie("g"), None);
    }

    #[test]
    fn the_real_syscalls_report_the_kernel_error() {
        // On a kernel without CONFIG_SCHED_CORE every call fails with
        // EINVAL; with it, reading our own cookie works. Either way the
        // result is a value, never a panic.
        let me = std::process::id();
        match PrctlCoreSched.get(me) {
            Ok(cookie) => assert_eq!(cookie, DEFAULT_COOKIE),
            Err(error) => {
                assert_eq!(error.op, "GET");
                assert!(error.errno.is_some(), "{error}");
            }
        }
        let error = PrctlCoreSched.get(0).unwrap_err();
        assert_eq!(error.errno, None);
        assert!(PrctlCoreSched.clear(&[0]).len() == 1);
    }
}
