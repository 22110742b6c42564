#![allow(clippy::unwrap_used)]
//! Issue 19's restart check: a koordlet killed with SIGKILL after a stretch of
//! history comes back reporting the same `prodReclaimable` (within 5 %) in
//! its first NodeMetric, because the prediction checkpoint carried the peak
//! models across the restart.
//!
//! A standalone koordlet watches one prod pod (16 GiB requested, created two
//! days ago so it is past the predictor's cold start) made of a real process
//! in a kubelet-style cgroup: it holds 2 GiB for the first half of the
//! history and is stopped for the second, so the memory peak (p98) remembers
//! 2 GiB that the last minutes do not show. A koordlet started without the
//! checkpoint (the control) sees only the quiet minutes and must report
//! something else: that is what makes the check able to fail. Memory, not
//! CPU, carries the check: on a 2-core machine the rest of the machine's load
//! (the "system" share of the peak) often leaves no reclaimable CPU at all,
//! while 24 GiB leaves reclaimable memory under any load CI puts there. CPU
//! is printed but not compared: with a minute of history, the few samples
//! the restarted koordlet adds before its first report move the system's
//! p95 whenever CI's other tests change the machine's load (CI saw 0.794
//! cores before and 0.0 after). The unit test
//! `a_restarted_reporter_reports_the_same_prod_reclaimable_from_its_checkpoint`
//! checks the CPU restore on a fixed load.
//!
//! The history lasts `KOORD_RESTART_HISTORY_SECS` seconds (default 60, so CI
//! stays short; the figure is 600). Needs root and the cgroup v1 cpu,
//! cpuacct and memory hierarchies (prints `SKIP:` otherwise).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use koord_common::testing::{PROCESS_WAIT, TempDir, TestProcess, isolated_command};

mod support;

use support::standalone::*;

const BIN: &str = env!("CARGO_BIN_EXE_koordlet");
const NODE: &str = "restart-test-node";
/// How often the checkpoint is rewritten in this test.
const CHECKPOINT_INTERVAL_SECS: u64 = 10;
/// How close the first report after the restart must be.
const TOLERANCE: f64 = 0.05;
/// What the pod holds in the first half of the history.
const HOG_MIB: u64 = 2048;

/// Within the tolerance (and a hair, for values near zero).
fn close(a: f64, b: f64, hair: f64) -> bool {
    (a - b).abs() <= b.abs() * TOLERANCE + hair
}

fn now_epoch() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn history() -> Duration {
    let secs = std::env::var("KOORD_RESTART_HISTORY_SECS")
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .unwrap_or(60)
        .max(30);
    Duration::from_secs(secs)
}

/// The koordlet command; `checkpoints` `None` turns the checkpoint off.
fn koordlet(kubepods: &str, dir: &Path, checkpoints: Option<&Path>) -> Command {
    let mut command = isolated_command(BIN);
    command
        .args([
            "--addr=127.0.0.1:0",
            "--node-metric-report-interval=3s",
            "--collect-res-used-interval=1s",
            "--enable-nri-runtime-hook=false",
        ])
        .arg(format!("--node-name={NODE}"))
        .arg(format!("--kubepods-cgroup-dir={kubepods}"))
        .arg(format!(
            "--prediction-model-checkpoint-interval={CHECKPOINT_INTERVAL_SECS}s"
        ))
        .arg(format!(
            "--prediction-checkpoint-filepath={}",
            checkpoints
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        ))
        .arg("--pods-file")
        .arg(dir.join("pods.json"))
        .arg("--node-metric-output")
        .arg(dir.join("nodemetric.json"));
    command
}

/// `prodReclaimableMetric` of one report: CPU in cores, memory in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Reclaimable {
    cpu: f64,
    memory: f64,
}

/// `prodReclaimableMetric` in the NodeMetric file, if the report was written
/// at or after `since` (the outer `None`) and has it (the inner one).
fn report_since(output: &Path, since: u64) -> Option<Option<Reclaimable>> {
    let text = fs::read_to_string(output).ok()?;
    let report: serde_json::Value = serde_json::from_str(&text).ok()?;
    let updated = report["status"]["updateTime"]
        .as_str()
        .and_then(seconds_since_epoch)?;
    if updated < since {
        return None;
    }
    let resources = &report["status"]["prodReclaimableMetric"]["resource"]["resources"];
    let (cpu, memory) = (&resources["cpu"], &resources["memory"]);
    Some(
        (cpu.is_string() && memory.is_string()).then(|| Reclaimable {
            cpu: cores(cpu),
            memory: bytes(memory),
        }),
    )
}

/// Waits for the first report written at or after `since`.
fn first_report(process: &TestProcess, output: &Path, since: u64) -> Option<Reclaimable> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            Instant::now() < deadline,
            "no NodeMetric report after {since}; koordlet said:\n{}",
            process.output()
        );
        if let Some(reclaimable) = report_since(output, since) {
            return reclaimable;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn kill(process: &mut TestProcess) {
    process.signal("KILL").unwrap();
    let status = process.wait_exit(PROCESS_WAIT).unwrap();
    assert!(status.is_some(), "koordlet survived SIGKILL");
}

#[test]
fn a_koordlet_killed_with_sigkill_reports_the_same_prod_reclaimable_after_restart() {
    if let Some(reason) = skip_reason() {
        println!("SKIP: {reason}");
        return;
    }
    let unique = format!(
        "{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let kubepods = format!("kubepods-koord-restart-{unique}");
    let pod = TestPod {
        name: "prod-peaky",
        uid: format!("koord-restart-{unique}"),
        container_id: format!("koordrestart{unique}").replace('-', ""),
        kubepods: kubepods.clone(),
    };
    let mut cleanup = Cleanup::default();
    for tier in [kubepods.clone(), format!("{kubepods}/burstable")] {
        create_cgroup(Path::new(&tier), &mut cleanup);
    }
    create_cgroup(&pod.relative_dir(), &mut cleanup);
    create_cgroup(&pod.container_dir(), &mut cleanup);
    let hog = start_memory_hog_in(&pod.container_dir(), HOG_MIB, &mut cleanup);

    let dir = TempDir::new("restart-checkpoint").unwrap();
    let pods = serde_json::json!({
        "apiVersion": "v1", "kind": "PodList",
        "items": [pod_json(&pod, serde_json::json!({}), serde_json::json!({"cpu": "1", "memory": "16Gi"}))]
    });
    fs::write(dir.path().join("pods.json"), pods.to_string()).unwrap();
    let checkpoints = dir.path().join("checkpoints");
    fs::create_dir(&checkpoints).unwrap();
    let output = dir.path().join("nodemetric.json");

    // History: 2 GiB held for the first half, nothing for the second.
    let history = history();
    let started = Instant::now();
    let mut first =
        TestProcess::spawn(koordlet(&kubepods, dir.path(), Some(&checkpoints))).unwrap();
    let filled_by = Instant::now() + Duration::from_secs(30);
    loop {
        let held = memory_usage_bytes(&pod.container_dir());
        if held >= (HOG_MIB << 20) * 9 / 10 {
            break;
        }
        assert!(
            Instant::now() < filled_by,
            "the hog holds only {held} bytes in its cgroup after 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep((history / 2).saturating_sub(started.elapsed()));
    cleanup.stop_process(hog);
    let stopped_epoch = now_epoch();
    let remaining = history.saturating_sub(started.elapsed());
    std::thread::sleep(remaining);
    // A checkpoint written after the idle stretch began, so both halves are in it.
    let checkpoint = checkpoints.join("koordlet-prediction-checkpoint.json");
    let deadline = Instant::now() + Duration::from_secs(CHECKPOINT_INTERVAL_SECS * 3);
    loop {
        let written = fs::metadata(&checkpoint)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        if written.is_some_and(|t| t > stopped_epoch + 3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoint written since {stopped_epoch} (last {written:?}); koordlet said:\n{}",
            first.output()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let before = first_report(&first, &output, now_epoch())
        .unwrap_or_else(|| panic!("no prodReclaimable before the kill:\n{}", first.output()));
    kill(&mut first);

    // The restart: same flags, same checkpoint directory.
    let restarted_at = now_epoch();
    let _ = fs::remove_file(&output);
    let mut second =
        TestProcess::spawn(koordlet(&kubepods, dir.path(), Some(&checkpoints))).unwrap();
    let after = first_report(&second, &output, restarted_at);
    kill(&mut second);

    // The control: no checkpoint, only the idle minutes.
    let control_at = now_epoch();
    let _ = fs::remove_file(&output);
    let mut third = TestProcess::spawn(koordlet(&kubepods, dir.path(), None)).unwrap();
    let control = first_report(&third, &output, control_at);
    third.stop_cleanly("TERM", PROCESS_WAIT).unwrap();

    println!(
        "history {} s: prodReclaimable before the kill {before:?}, in the first report after \
         the restart {after:?}, without the checkpoint {control:?}",
        history.as_secs()
    );
    let after = after.unwrap_or_else(|| {
        panic!(
            "the restarted koordlet's first report has no prodReclaimable:\n{}",
            second.output()
        )
    });
    assert!(
        close(after.memory, before.memory, 1e6),
        "prodReclaimable memory {after:?} after the restart, {before:?} before (more than {}% apart)",
        TOLERANCE * 100.0
    );
    // The peak the history holds is what keeps reclaimable memory down.
    assert!(
        before.memory > 0.0,
        "no reclaimable memory before the kill: {before:?}"
    );
    assert!(
        control.is_none_or(|c| !close(c.memory, before.memory, 1e6)),
        "without the checkpoint the first report ({control:?}) matches too: the history did not \
         matter and the test proves nothing"
    );
    drop(cleanup);
}
