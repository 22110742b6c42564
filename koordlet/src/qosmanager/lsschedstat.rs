//! (ours) The latency-protection loop's I/O shell: reads the LS pods'
//! threads' `/proc/<tid>/schedstat` (field 1: CPU run time, field 2:
//! run-queue wait, both ns) and keeps them as cumulative counters for
//! [`super::latencyguard`].
//!
//! Threads are listed from the LS pods' cgroups: the pod directory and its
//! immediate children (the containers), `tasks` on cgroup v1 and
//! `cgroup.threads` on v2 (both list a cgroup's own threads only). Bounded:
//! at most [`MAX_THREADS_PER_ROUND`] threads, [`MAX_DIRS_PER_POD`] child
//! cgroups per pod and [`MAX_TASKS_FILE_BYTES`] per thread list; a thread
//! that exits between listing and reading is skipped.
//!
//! The counters add each thread's increase since it was last read; a thread
//! seen for the first time only sets its baseline (its past is not this
//! interval's), so new pods and threads do not show up as a burst of wait.
//! Threads that live shorter than one round are not seen at all.

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use apis::slo::v1alpha1::cpu_latency_protection;

use super::cpusuppress::threshold_strategy;
use super::framework::{QosPod, QosSnapshot};
use super::latencyguard::LsSchedCounters;
use crate::system::cgroup::{CgroupLayout, CgroupResource, Controller, QosTier};

/// Threads read per round at most.
pub const MAX_THREADS_PER_ROUND: usize = 8192;
/// Child cgroups (containers) looked at per pod at most.
pub const MAX_DIRS_PER_POD: usize = 64;
/// Bytes read from one `tasks` / `cgroup.threads` file at most (8,192 ids
/// of up to 7 digits and a newline fit).
pub const MAX_TASKS_FILE_BYTES: u64 = 64 * 1024;
/// `schedstat` is three numbers; anything longer is not one.
const MAX_SCHEDSTAT_BYTES: usize = 128;

/// The run and wait times (ns) of one `schedstat` line.
pub fn parse_schedstat(text: &str) -> Result<(u64, u64), String> {
    let mut fields = text.split_ascii_whitespace();
    let mut next = |name: &str| -> Result<u64, String> {
        fields
            .next()
            .ok_or_else(|| format!("schedstat has no {name} field: {text:?}"))?
            .parse()
            .map_err(|_| format!("schedstat {name} is not a number: {text:?}"))
    };
    Ok((next("run time")?, next("wait time")?))
}

/// Thread ids of a `tasks` / `cgroup.threads` file; `truncated` drops a
/// last line the byte cap may have cut. Lines that are no id are skipped.
pub fn parse_task_ids(text: &str, truncated: bool, out: &mut Vec<u32>) {
    let complete = if truncated {
        text.rfind('\n').map_or("", |end| &text[..end])
    } else {
        text
    };
    out.extend(
        complete
            .lines()
            .filter_map(|line| line.trim().parse::<u32>().ok()),
    );
}

/// Reads the LS threads' schedstat and keeps the cumulative counters.
#[derive(Debug)]
pub struct LsSchedSampler {
    proc_root: PathBuf,
    layout: CgroupLayout,
    /// Per thread: (run ns, wait ns) at its last reading.
    threads: HashMap<u32, (u64, u64)>,
    run_total: u64,
    wait_total: u64,
}

/// One round's reading outcome, beyond the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Threads listed but gone (or unreadable) when read.
    pub vanished: usize,
    /// Thread-list files that could not be read (cgroup removed meanwhile).
    pub unreadable_lists: usize,
}

impl LsSchedSampler {
    pub fn new(proc_root: impl Into<PathBuf>, layout: CgroupLayout) -> Self {
        Self {
            proc_root: proc_root.into(),
            layout,
            threads: HashMap::new(),
            run_total: 0,
            wait_total: 0,
        }
    }

    /// Forgets every thread and the totals (the loop was turned off).
    pub fn reset(&mut self) {
        self.threads = HashMap::new();
        self.run_total = 0;
        self.wait_total = 0;
    }

    /// The cgroups whose threads count as LS: non-BE pods in the
    /// Guaranteed and Burstable tiers.
    pub fn ls_pod_dirs(pods: &[QosPod]) -> impl Iterator<Item = &Path> {
        pods.iter()
            .filter(|pod| !pod.is_be() && pod.kube_qos != QosTier::BestEffort)
            .map(|pod| pod.cgroup_dir.as_path())
    }

    /// `tasks` on v1, `cgroup.threads` on v2 (the layout's `Tasks` file).
    fn thread_list_file(&self, dir: &Path) -> Option<PathBuf> {
        self.layout.file_path(dir, CgroupResource::Tasks).ok()
    }

    /// The thread ids of `pod_dirs` (each pod and its child cgroups); listing
    /// stops after the file that took the count past `MAX_THREADS_PER_ROUND`
    /// (each file holds at most [`MAX_TASKS_FILE_BYTES`]).
    pub fn list_threads<'a>(
        &self,
        pod_dirs: impl IntoIterator<Item = &'a Path>,
        stats: &mut ReadStats,
    ) -> Vec<u32> {
        let mut ids = Vec::new();
        let mut text = String::new();
        'pods: for pod_dir in pod_dirs {
            let Ok(absolute) = self.layout.controller_path(pod_dir, Controller::Cpu) else {
                continue;
            };
            let mut dirs = vec![pod_dir.to_path_buf()];
            if let Ok(entries) = std::fs::read_dir(&absolute) {
                dirs.extend(
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .take(MAX_DIRS_PER_POD)
                        .map(|e| pod_dir.join(e.file_name())),
                );
            }
            for dir in dirs {
                let Some(file) = self.thread_list_file(&dir) else {
                    continue;
                };
                text.clear();
                let read = File::open(&file)
                    .and_then(|f| f.take(MAX_TASKS_FILE_BYTES).read_to_string(&mut text));
                match read {
                    Ok(bytes) => {
                        parse_task_ids(&text, bytes as u64 >= MAX_TASKS_FILE_BYTES, &mut ids)
                    }
                    Err(_) => stats.unreadable_lists += 1,
                }
                if ids.len() > MAX_THREADS_PER_ROUND {
                    break 'pods;
                }
            }
        }
        ids
    }

    /// The (run, wait) ns of thread `tid`; `None` when it is gone.
    fn read_thread(&self, tid: u32, buffer: &mut [u8; MAX_SCHEDSTAT_BYTES]) -> Option<(u64, u64)> {
        let path = self.proc_root.join(tid.to_string()).join("schedstat");
        let mut file = File::open(path).ok()?;
        let mut len = 0;
        while len < buffer.len() {
            match file.read(&mut buffer[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        let text = std::str::from_utf8(&buffer[..len]).ok()?;
        parse_schedstat(text).ok()
    }

    /// Adds the readings of this round to the totals; threads not in
    /// `readings` are forgotten. A thread whose counters went back (its id
    /// reused) starts a new baseline.
    pub fn fold(&mut self, readings: &[(u32, u64, u64)]) {
        let mut next = HashMap::with_capacity(readings.len());
        for &(tid, run, wait) in readings {
            if let Some(&(old_run, old_wait)) = self.threads.get(&tid)
                && run >= old_run
                && wait >= old_wait
            {
                self.run_total = self.run_total.saturating_add(run - old_run);
                self.wait_total = self.wait_total.saturating_add(wait - old_wait);
            }
            next.insert(tid, (run, wait));
        }
        self.threads = next;
    }

    /// Lists and reads the LS threads of `pod_dirs` and returns the
    /// cumulative counters as of `now`.
    pub fn read<'a>(
        &mut self,
        pod_dirs: impl IntoIterator<Item = &'a Path>,
        now: SystemTime,
    ) -> (LsSchedCounters, ReadStats) {
        let mut stats = ReadStats::default();
        let mut ids = self.list_threads(pod_dirs, &mut stats);
        ids.sort_unstable();
        ids.dedup();
        let skipped = ids.len().saturating_sub(MAX_THREADS_PER_ROUND);
        ids.truncate(MAX_THREADS_PER_ROUND);
        let mut buffer = [0u8; MAX_SCHEDSTAT_BYTES];
        let mut readings = Vec::with_capacity(ids.len());
        for tid in ids {
            match self.read_thread(tid, &mut buffer) {
                Some((run, wait)) => readings.push((tid, run, wait)),
                None => stats.vanished += 1,
            }
        }
        self.fold(&readings);
        (
            LsSchedCounters {
                taken_at: now,
                wait_ns: self.wait_total,
                run_ns: self.run_total,
                threads: readings.len(),
                threads_skipped: skipped,
            },
            stats,
        )
    }
}

/// Readings closer together than this reuse the last one: the runner loop
/// may build several snapshots a second (strategies due at different times,
/// reaction wakeups), and the loop compares readings about a second apart.
/// This is the loop's only throttle, and it sits here rather than in the
/// core because what it saves is the read itself (one procfs open per LS
/// thread, up to 8,192 a round); the core only sees a re-delivered reading
/// as `LsSignal::Repeated` and holds. It also bounds the shortest interval
/// the core compares, so a ratio is never taken over a few milliseconds.
pub const MIN_READ_GAP: std::time::Duration = std::time::Duration::from_millis(500);

/// The runner loop's side of the latency-protection loop: reads the LS
/// counters into each snapshot while the NodeSLO enables the loop (and
/// cpusuppress), and nothing otherwise. An invalid extension is logged
/// once per distinct problem; cpusuppress notes it every round.
#[derive(Debug)]
pub struct LatencyShell {
    sampler: LsSchedSampler,
    on: bool,
    last_problem: Option<String>,
    last: Option<LsSchedCounters>,
}

impl LatencyShell {
    pub fn new(proc_root: impl Into<PathBuf>, layout: CgroupLayout) -> Self {
        Self {
            sampler: LsSchedSampler::new(proc_root, layout),
            on: false,
            last_problem: None,
            last: None,
        }
    }

    /// Sets `snapshot.ls_sched` when the loop is on.
    pub fn update(&mut self, snapshot: &mut QosSnapshot) {
        let extensions = snapshot
            .node_slo
            .as_deref()
            .and_then(|spec| spec.extensions.as_ref());
        let wanted = match cpu_latency_protection(extensions) {
            Ok(settings) => {
                self.last_problem = None;
                settings.is_some() && threshold_strategy(snapshot).enable == Some(true)
            }
            Err(err) => {
                let problem = err.to_string();
                if self.last_problem.as_deref() != Some(problem.as_str()) {
                    tracing::warn!("{problem}; latency-protection loop off");
                    self.last_problem = Some(problem);
                }
                false
            }
        };
        if wanted != self.on {
            tracing::info!(on = wanted, "CPU latency-protection loop switched");
            self.sampler.reset();
            self.last = None;
            self.on = wanted;
        }
        if !wanted {
            return;
        }
        if let Some(last) = self.last
            && snapshot
                .now
                .duration_since(last.taken_at)
                .is_ok_and(|gap| gap < MIN_READ_GAP)
        {
            snapshot.ls_sched = Some(last);
            return;
        }
        let started = Instant::now();
        let (counters, stats) = self
            .sampler
            .read(LsSchedSampler::ls_pod_dirs(&snapshot.pods), snapshot.now);
        tracing::debug!(
            threads = counters.threads,
            skipped = counters.threads_skipped,
            vanished = stats.vanished,
            unreadable_lists = stats.unreadable_lists,
            read_us = started.elapsed().as_micros() as u64,
            "LS schedstat read"
        );
        self.last = Some(counters);
        snapshot.ls_sched = Some(counters);
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use koord_common::testing::TempDir;

    use super::*;
    use crate::system::cgroup::{CgroupDriver, CgroupVersion};

    #[test]
    fn schedstat_and_task_lists_are_parsed_and_bounded() {
        assert_eq!(parse_schedstat("314707 1410172 2\n"), Ok((314707, 1410172)));
        assert!(parse_schedstat("314707\n").is_err());
        assert!(parse_schedstat("x 1 2").is_err());
        assert!(parse_schedstat("").is_err());
        let mut ids = Vec::new();
        parse_task_ids("1\n22\nbad\n333\n", false, &mut ids);
        assert_eq!(ids, [1, 22, 333]);
        ids.clear();
        // Cut by the byte cap: the partial last id is not trusted.
        parse_task_ids("1\n22\n33", true, &mut ids);
        assert_eq!(ids, [1, 22]);
    }

    #[test]
    fn fold_adds_increases_and_baselines_new_or_reused_threads() {
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, "/nonexistent");
        let mut sampler = LsSchedSampler::new("/nonexistent", layout);
        sampler.fold(&[(1, 1000, 100), (2, 5000, 500)]);
        assert_eq!((sampler.run_total, sampler.wait_total), (0, 0));
        // Thread 1 ran 500 and waited 50; thread 3 is new; thread 2 left.
        sampler.fold(&[(1, 1500, 150), (3, 9000, 900)]);
        assert_eq!((sampler.run_total, sampler.wait_total), (500, 50));
        // Thread 1's id reused by a younger thread: a new baseline.
        sampler.fold(&[(1, 10, 1), (3, 9100, 950)]);
        assert_eq!((sampler.run_total, sampler.wait_total), (600, 100));
        sampler.fold(&[(1, 20, 3)]);
        assert_eq!((sampler.run_total, sampler.wait_total), (610, 102));
        assert_eq!(sampler.threads.len(), 1);
    }

    /// A cgroup v1 tree whose LS pod lists `ids` (pod level and one
    /// container) and a proc tree with their schedstat; id 99 is listed but
    /// has exited.
    fn fake_node(ids: &[(u32, u64, u64)]) -> (TempDir, CgroupLayout, PathBuf) {
        let tmp = TempDir::new("lsschedstat").unwrap();
        let cgroup_root = tmp.path().join("cgroup");
        let pod = cgroup_root.join("cpu/kubepods/burstable/poduid-ls");
        fs::create_dir_all(pod.join("c1")).unwrap();
        let (first, rest) = ids.split_at(1);
        let list = |ids: &[(u32, u64, u64)]| {
            ids.iter()
                .map(|(id, _, _)| format!("{id}\n"))
                .collect::<String>()
        };
        fs::write(pod.join("tasks"), list(first)).unwrap();
        fs::write(pod.join("c1/tasks"), list(rest) + "99\n").unwrap();
        let proc_root = tmp.path().join("proc");
        for (id, run, wait) in ids {
            fs::create_dir_all(proc_root.join(id.to_string())).unwrap();
            fs::write(
                proc_root.join(id.to_string()).join("schedstat"),
                format!("{run} {wait} 7\n"),
            )
            .unwrap();
        }
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, cgroup_root);
        (tmp, layout, proc_root)
    }

    #[test]
    fn reads_pod_and_container_threads_and_skips_exited_ones() {
        let (_tmp, layout, proc_root) = fake_node(&[(10, 1000, 100), (11, 2000, 200)]);
        let mut sampler = LsSchedSampler::new(&proc_root, layout);
        let dir = PathBuf::from("kubepods/burstable/poduid-ls");
        let gone = PathBuf::from("kubepods/burstable/poduid-gone");
        let (first, stats) = sampler.read([dir.as_path(), gone.as_path()], SystemTime::UNIX_EPOCH);
        assert_eq!((first.threads, first.run_ns, first.wait_ns), (2, 0, 0));
        assert_eq!(stats.vanished, 1, "{stats:?}");
        assert_eq!(stats.unreadable_lists, 1, "{stats:?}");
        fs::write(proc_root.join("10/schedstat"), "1600 400 9\n").unwrap();
        let (second, _) = sampler.read([dir.as_path()], SystemTime::UNIX_EPOCH);
        assert_eq!((second.run_ns, second.wait_ns), (600, 300));
    }

    #[test]
    fn cgroup_v2_lists_threads_from_cgroup_threads() {
        let tmp = TempDir::new("lsschedstat-v2").unwrap();
        let pod = tmp
            .path()
            .join("cgroup/kubepods.slice/kubepods-burstable.slice/pod.slice");
        fs::create_dir_all(pod.join("cri-containerd-abc.scope")).unwrap();
        fs::write(pod.join("cgroup.threads"), "").unwrap();
        fs::write(pod.join("cri-containerd-abc.scope/cgroup.threads"), "21\n").unwrap();
        // A v1-style tasks file is not looked at on v2.
        fs::write(pod.join("cri-containerd-abc.scope/tasks"), "22\n").unwrap();
        let proc_root = tmp.path().join("proc");
        for id in [21, 22] {
            fs::create_dir_all(proc_root.join(id.to_string())).unwrap();
            fs::write(proc_root.join(format!("{id}/schedstat")), "10 5 1\n").unwrap();
        }
        let layout = CgroupLayout::new(
            CgroupVersion::V2,
            CgroupDriver::Systemd,
            tmp.path().join("cgroup"),
        );
        let mut sampler = LsSchedSampler::new(&proc_root, layout);
        let dir = PathBuf::from("kubepods.slice/kubepods-burstable.slice/pod.slice");
        let mut stats = ReadStats::default();
        assert_eq!(sampler.list_threads([dir.as_path()], &mut stats), [21]);
        let (counters, _) = sampler.read([dir.as_path()], SystemTime::UNIX_EPOCH);
        assert_eq!(counters.threads, 1);
    }

    #[test]
    fn the_thread_cap_holds() {
        let ids: Vec<(u32, u64, u64)> = (1..=(MAX_THREADS_PER_ROUND as u32 + 50))
            .map(|id| (id, 0, 0))
            .collect();
        let (_tmp, layout, proc_root) = fake_node(&ids[..3]);
        // List more ids than the cap in the container (only 3 exist in proc).
        let list: String = ids.iter().map(|(id, _, _)| format!("{id}\n")).collect();
        let c1 = layout
            .controller_path("kubepods/burstable/poduid-ls/c1", Controller::Cpu)
            .unwrap();
        fs::write(c1.join("tasks"), list).unwrap();
        let mut sampler = LsSchedSampler::new(&proc_root, layout);
        let dir = PathBuf::from("kubepods/burstable/poduid-ls");
        let (counters, stats) = sampler.read([dir.as_path()], SystemTime::UNIX_EPOCH);
        assert!(counters.threads_skipped > 0, "{counters:?}");
        assert_eq!(counters.threads + stats.vanished, MAX_THREADS_PER_ROUND);
    }

    /// This process's own threads through the real /proc.
    #[test]
    fn reads_real_threads() {
        let tmp = TempDir::new("lsschedstat-real").unwrap();
        let pod = tmp.path().join("cpu/kubepods/podx");
        fs::create_dir_all(&pod).unwrap();
        let tids: String = fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| format!("{}\n", e.file_name().to_string_lossy()))
            .collect();
        fs::write(pod.join("tasks"), tids).unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, tmp.path());
        let mut sampler = LsSchedSampler::new("/proc", layout);
        let dir = PathBuf::from("kubepods/podx");
        let (first, _) = sampler.read([dir.as_path()], SystemTime::UNIX_EPOCH);
        assert!(first.threads >= 1, "{first:?}");
        // Burn some CPU on this thread: its run time grows.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let (second, _) = sampler.read([dir.as_path()], SystemTime::UNIX_EPOCH);
        assert!(second.run_ns > first.run_ns, "{first:?} {second:?}");
    }
    #[test]
    fn the_shell_reads_only_while_the_loop_is_on() {
        use std::sync::Arc;

        use apis::slo::v1alpha1::{ExtensionsMap, NodeSLOSpec, ResourceThresholdStrategy};
        use serde_json::json;

        let (_tmp, layout, proc_root) = fake_node(&[(10, 1000, 100)]);
        let mut shell = LatencyShell::new(&proc_root, layout.clone());
        let snapshot_with = |extension: serde_json::Value, suppress: bool| {
            let mut snapshot = QosSnapshot::for_test(SystemTime::UNIX_EPOCH);
            snapshot.layout = layout.clone();
            let extensions: ExtensionsMap =
                serde_json::from_value(json!({"Object": {"cpuLatencyProtection": extension}}))
                    .unwrap();
            snapshot.node_slo = Some(Arc::new(NodeSLOSpec {
                resource_used_threshold_with_be: Some(ResourceThresholdStrategy {
                    enable: Some(suppress),
                    ..Default::default()
                }),
                extensions: Some(extensions),
                ..Default::default()
            }));
            snapshot
        };
        let mut on = snapshot_with(json!({"enable": true}), true);
        shell.update(&mut on);
        // No LS pod in the snapshot: nothing listed, but a reading.
        assert_eq!(on.ls_sched.map(|c| c.threads), Some(0));
        // A snapshot 100 ms later reuses it; 600 ms later reads again.
        let first = on.ls_sched.unwrap();
        let mut soon = snapshot_with(json!({"enable": true}), true);
        soon.now = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(100);
        shell.update(&mut soon);
        assert_eq!(soon.ls_sched, Some(first));
        let mut later = snapshot_with(json!({"enable": true}), true);
        later.now = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(600);
        shell.update(&mut later);
        assert_eq!(later.ls_sched.map(|c| c.taken_at), Some(later.now));
        for (extension, suppress) in [
            (json!({"enable": false}), true),
            (json!({"enable": true}), false),
            (json!({"enable": true, "decreaseFactorPercent": 0}), true),
        ] {
            let mut snapshot = snapshot_with(extension.clone(), suppress);
            shell.update(&mut snapshot);
            assert_eq!(snapshot.ls_sched, None, "{extension} {suppress}");
        }
    }
}
