//! The cgroup layer and resource executor against the machine's real cgroup
//! v1 hierarchy, in throwaway cgroups removed even when a test fails. Skips
//! (printing `SKIP: <reason>`) when not root or the hierarchy is not writable.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use koordlet::resourceexecutor::{
    ExecutorConfig, ResourceExecutor, ResourceUpdate, StepKind, WriteStatus,
};
use koordlet::system::cgroup::{CgroupLayout, CgroupResource, CgroupValue, Controller};
use koordlet::system::units::CpuSet;
use support::cgroup::{BusyProcess, ThrowawayCgroup, real_v1_layout_or_skip};

fn update(dir: &Path, resource: CgroupResource, value: CgroupValue) -> ResourceUpdate {
    ResourceUpdate::new(dir, resource, value, "cgroup_real test").unwrap()
}

fn executor(layout: &CgroupLayout) -> ResourceExecutor {
    ResourceExecutor::new(layout.clone(), ExecutorConfig::default())
}

/// The error kind of a kernel refusal (EBUSY, EACCES, EINVAL, ...).
fn refusal_kind(error: &koordlet::system::cgroupfs::CgroupIoError) -> ErrorKind {
    let code = error
        .raw_os_error()
        .unwrap_or_else(|| panic!("expected a kernel refusal, got {error}"));
    std::io::Error::from_raw_os_error(code).kind()
}

#[test]
fn cfs_quota_is_written_and_read_back() {
    let Some(layout) = real_v1_layout_or_skip(&[Controller::Cpu]) else {
        return;
    };
    let cgroup = ThrowawayCgroup::new(&layout, "quota", &[Controller::Cpu]).unwrap();
    let executor = executor(&layout);
    let report = executor.apply_blocking(
        [
            update(
                cgroup.dir(),
                CgroupResource::CpuCfsPeriod,
                CgroupValue::Int(100_000),
            ),
            update(
                cgroup.dir(),
                CgroupResource::CpuCfsQuota,
                CgroupValue::Int(20_000),
            ),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");

    let quota_file = cgroup
        .path(cgroup.dir(), Controller::Cpu)
        .join("cpu.cfs_quota_us");
    assert_eq!(
        std::fs::read_to_string(&quota_file).unwrap().trim(),
        "20000"
    );
    assert_eq!(
        layout
            .read_int(cgroup.dir(), CgroupResource::CpuCfsQuota)
            .unwrap(),
        Some(20_000)
    );
    assert_eq!(
        layout
            .read_int(cgroup.dir(), CgroupResource::CpuCfsPeriod)
            .unwrap(),
        Some(100_000)
    );

    // Unlimited is written as -1 and reads back as unlimited.
    let report = executor.apply_blocking(
        [update(
            cgroup.dir(),
            CgroupResource::CpuCfsQuota,
            CgroupValue::Unlimited,
        )],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    assert_eq!(std::fs::read_to_string(&quota_file).unwrap().trim(), "-1");
    assert_eq!(
        layout
            .read_int(cgroup.dir(), CgroupResource::CpuCfsQuota)
            .unwrap(),
        None
    );

    // A value the kernel rejects is refused before the write, naming the path.
    let bad = layout
        .write_value(
            cgroup.dir(),
            CgroupResource::CpuCfsQuota,
            &CgroupValue::Int(10),
        )
        .unwrap_err();
    assert!(
        bad.to_string().contains(&quota_file.display().to_string()),
        "{bad}"
    );

    let audit = executor.recent_writes(10);
    assert_eq!(audit[0].new_value, "-1");
    assert_eq!(audit[0].old_value.as_deref(), Some("20000"));
}

#[test]
fn busy_process_under_a_twenty_percent_quota_uses_about_a_fifth_of_a_core() {
    let controllers = [Controller::Cpu, Controller::Cpuacct];
    let Some(layout) = real_v1_layout_or_skip(&controllers) else {
        return;
    };
    let cgroup = ThrowawayCgroup::new(&layout, "busy", &controllers).unwrap();
    let executor = executor(&layout);
    let report = executor.apply_blocking(
        [
            update(
                cgroup.dir(),
                CgroupResource::CpuCfsPeriod,
                CgroupValue::Int(100_000),
            ),
            update(
                cgroup.dir(),
                CgroupResource::CpuCfsQuota,
                CgroupValue::Int(20_000),
            ),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");

    // Declared after the cgroup so it is killed before the cgroup is removed.
    let busy = BusyProcess::spawn().unwrap();
    // The cpu hierarchy through the executor, cpuacct directly (the executor's
    // cgroup.procs resource lives in the cpu hierarchy).
    let report = executor.apply_blocking(
        [update(
            cgroup.dir(),
            CgroupResource::CgroupProcs,
            CgroupValue::Int(busy.pid() as i64),
        )],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    std::fs::write(
        cgroup
            .path(cgroup.dir(), Controller::Cpuacct)
            .join("cgroup.procs"),
        busy.pid().to_string(),
    )
    .unwrap();
    let procs = layout
        .read_raw(cgroup.dir(), CgroupResource::CgroupProcs)
        .unwrap();
    assert!(
        procs
            .split_whitespace()
            .any(|p| p == busy.pid().to_string()),
        "{procs}"
    );

    std::thread::sleep(Duration::from_millis(300));
    let usage = || {
        layout
            .read_int(cgroup.dir(), CgroupResource::CpuacctUsage)
            .unwrap()
            .unwrap()
    };
    let (usage_before, started) = (usage(), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (usage_after, elapsed) = (usage(), started.elapsed());
    let share = (usage_after - usage_before) as f64 / elapsed.as_nanos() as f64;
    println!(
        "busy process used {:.1}% of a core under a 20% quota",
        share * 100.0
    );
    assert!(
        (0.10..=0.30).contains(&share),
        "expected about 20% of a core, measured {:.1}%",
        share * 100.0
    );

    // The kernel reports the throttling that enforced it.
    let stat = layout
        .read_raw(cgroup.dir(), CgroupResource::CpuStat)
        .unwrap();
    let throttled = koordlet::system::cgroup::stat_field(&stat, "nr_throttled").unwrap();
    assert!(throttled > 0, "{stat}");
}

#[test]
fn cpuset_narrowing_and_widening_follow_the_plan() {
    let Some(layout) = real_v1_layout_or_skip(&[Controller::Cpuset]) else {
        return;
    };
    let root_cpus: CpuSet = std::fs::read_to_string(layout.root.join("cpuset/cpuset.cpus"))
        .unwrap()
        .parse()
        .unwrap();
    if root_cpus.len() < 2 {
        println!("SKIP: cpuset ordering needs at least 2 CPUs, the root cpuset has {root_cpus}");
        return;
    }
    let all = CgroupValue::CpuSet(root_cpus.clone());
    let first_cpu = root_cpus.iter().next().unwrap();
    let second_cpu = root_cpus.iter().nth(1).unwrap();
    let first = CgroupValue::CpuSet(CpuSet::from_ids([first_cpu]).unwrap());
    let second = CgroupValue::CpuSet(CpuSet::from_ids([second_cpu]).unwrap());

    let mut cgroup = ThrowawayCgroup::new(&layout, "cpuset", &[Controller::Cpuset]).unwrap();
    let parent = cgroup.dir().to_path_buf();
    let child = cgroup.create_child("child").unwrap();
    let executor = executor(&layout);
    let read = |dir: &Path| {
        CgroupValue::CpuSet(layout.read_cpuset(dir, CgroupResource::CpusetCpus).unwrap())
    };
    assert_eq!(read(&parent), all);
    assert_eq!(read(&child), all);

    // Narrowing the parent first: the kernel refuses while the child still
    // uses the CPUs being removed (EBUSY on current kernels).
    let naive = layout
        .write_value(&parent, CgroupResource::CpusetCpus, &first)
        .unwrap_err();
    println!("naive narrowing refused: {naive}");
    assert!(
        matches!(
            refusal_kind(&naive),
            ErrorKind::ResourceBusy | ErrorKind::InvalidInput | ErrorKind::PermissionDenied
        ),
        "{naive}"
    );
    assert_eq!(read(&parent), all);

    // The executor, given the same naive order, narrows child first.
    let report = executor.apply_blocking(
        [
            update(&parent, CgroupResource::CpusetCpus, first.clone()),
            update(&child, CgroupResource::CpusetCpus, first.clone()),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    let order: Vec<_> = report
        .writes
        .iter()
        .map(|w| (w.dir.clone(), w.step))
        .collect();
    assert_eq!(
        order,
        [
            (child.clone(), StepKind::Narrow),
            (parent.clone(), StepKind::Narrow)
        ]
    );
    assert_eq!(read(&parent), first);
    assert_eq!(read(&child), first);

    // Widening the child first: refused, it would leave its parent's set
    // (EACCES on current kernels).
    let naive = layout
        .write_value(&child, CgroupResource::CpusetCpus, &all)
        .unwrap_err();
    println!("naive widening refused: {naive}");
    assert!(
        matches!(
            refusal_kind(&naive),
            ErrorKind::PermissionDenied | ErrorKind::InvalidInput | ErrorKind::ResourceBusy
        ),
        "{naive}"
    );
    assert_eq!(read(&child), first);

    let report = executor.apply_blocking(
        [
            update(&child, CgroupResource::CpusetCpus, all.clone()),
            update(&parent, CgroupResource::CpusetCpus, all.clone()),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    assert_eq!(report.writes[0].dir, parent);
    assert_eq!(read(&parent), all);
    assert_eq!(read(&child), all);

    // Moving both from one CPU to another: widen to the union, then narrow.
    let report = executor.apply_blocking(
        [
            update(&parent, CgroupResource::CpusetCpus, first.clone()),
            update(&child, CgroupResource::CpusetCpus, first.clone()),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    let naive = layout
        .write_value(&parent, CgroupResource::CpusetCpus, &second)
        .unwrap_err();
    println!("naive shift refused: {naive}");
    let report = executor.apply_blocking(
        [
            update(&parent, CgroupResource::CpusetCpus, second.clone()),
            update(&child, CgroupResource::CpusetCpus, second.clone()),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    let steps: Vec<_> = report.writes.iter().map(|w| w.step).collect();
    assert_eq!(
        steps,
        [
            StepKind::Loosen,
            StepKind::Loosen,
            StepKind::Narrow,
            StepKind::Narrow
        ]
    );
    assert_eq!(read(&parent), second);
    assert_eq!(read(&child), second);
    assert_eq!(report.count(&WriteStatus::Written), 4);
}

#[test]
fn quota_raising_and_lowering_follow_the_plan() {
    let Some(layout) = real_v1_layout_or_skip(&[Controller::Cpu]) else {
        return;
    };
    let mut cgroup = ThrowawayCgroup::new(&layout, "quota-order", &[Controller::Cpu]).unwrap();
    let parent = cgroup.dir().to_path_buf();
    let child = cgroup.create_child("child").unwrap();
    let executor = executor(&layout);
    let quota = |value| CgroupValue::Int(value);
    let read = |dir: &Path| layout.read_int(dir, CgroupResource::CpuCfsQuota).unwrap();
    let report = executor.apply_blocking(
        [
            update(&parent, CgroupResource::CpuCfsQuota, quota(20_000)),
            update(&child, CgroupResource::CpuCfsQuota, quota(10_000)),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");

    // Raising the child above its parent first is refused (EINVAL).
    let naive = layout
        .write_value(&child, CgroupResource::CpuCfsQuota, &quota(50_000))
        .unwrap_err();
    println!("naive raise refused: {naive}");
    assert_eq!(refusal_kind(&naive), ErrorKind::InvalidInput, "{naive}");
    let report = executor.apply_blocking(
        [
            update(&child, CgroupResource::CpuCfsQuota, quota(50_000)),
            update(&parent, CgroupResource::CpuCfsQuota, quota(100_000)),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    assert_eq!((read(&parent), read(&child)), (Some(100_000), Some(50_000)));

    // Lowering the parent below its child first is refused too.
    let naive = layout
        .write_value(&parent, CgroupResource::CpuCfsQuota, &quota(10_000))
        .unwrap_err();
    println!("naive lower refused: {naive}");
    assert_eq!(refusal_kind(&naive), ErrorKind::InvalidInput, "{naive}");
    let report = executor.apply_blocking(
        [
            update(&parent, CgroupResource::CpuCfsQuota, quota(10_000)),
            update(&child, CgroupResource::CpuCfsQuota, quota(5_000)),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    assert_eq!((read(&parent), read(&child)), (Some(10_000), Some(5_000)));

    // Lifting both limits: unlimited is the widest value, parent first.
    let report = executor.apply_blocking(
        [
            update(&child, CgroupResource::CpuCfsQuota, CgroupValue::Unlimited),
            update(&parent, CgroupResource::CpuCfsQuota, CgroupValue::Unlimited),
        ],
        SystemTime::now(),
    );
    assert!(report.is_success(), "{report:?}");
    assert_eq!(report.writes[0].dir, parent);
    assert_eq!((read(&parent), read(&child)), (None, None));
}

#[test]
fn pressure_files_are_found_in_the_unified_mount() {
    let Some(layout) = real_v1_layout_or_skip(&[Controller::Cpu]) else {
        return;
    };
    if layout.unified_root.is_none() {
        println!("SKIP: no cgroup2 mount at /sys/fs/cgroup/unified for per-cgroup PSI");
        return;
    }
    // The root cgroup's PSI: the layout resolves it under the unified mount.
    let content = layout.read_raw("", CgroupResource::CpuPressure).unwrap();
    assert!(content.starts_with("some avg10="), "{content}");
}

#[test]
fn throwaway_cgroups_are_removed_even_when_a_test_panics() {
    let controllers = [Controller::Cpu, Controller::Cpuset];
    let Some(layout) = real_v1_layout_or_skip(&controllers) else {
        return;
    };
    // Outlives the guard, so the guard must move it out to remove the cgroups.
    let busy = BusyProcess::spawn().unwrap();
    let mut created = Vec::new();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut cgroup = ThrowawayCgroup::new(&layout, "panics", &controllers).unwrap();
        let child = cgroup.create_child("a/b").unwrap();
        cgroup.attach(&child, busy.pid()).unwrap();
        for controller in controllers {
            created.push(cgroup.path(cgroup.dir(), controller));
            created.push(cgroup.path(&child, controller));
        }
        panic!("simulated test failure");
    }));
    assert!(outcome.is_err());
    for dir in &created {
        assert!(!dir.exists(), "{} was left behind", dir.display());
    }
    let cpu_cgroup = std::fs::read_to_string(format!("/proc/{}/cgroup", busy.pid())).unwrap();
    assert!(
        cpu_cgroup.lines().any(|line| line.ends_with(":cpu:/")),
        "{cpu_cgroup}"
    );
}
