//! Cost of one latency-protection read round: listing the LS threads and
//! reading each one's `/proc/<tid>/schedstat`, for N real threads of this
//! process (parked). The thread list is a generated `tasks` file in a
//! temporary cgroup-like tree; the schedstat files are the kernel's.
//!
//! Run: `cargo bench -p koordlet --bench lsschedstat`

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Instant, SystemTime};

use koord_common::testing::TempDir;
use koordlet::qosmanager::lsschedstat::LsSchedSampler;
use koordlet::system::cgroup::{CgroupDriver, CgroupLayout, CgroupVersion};

const ROUNDS: usize = 50;

/// The kernel thread id of the calling thread.
fn own_tid() -> u32 {
    let link = fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

fn main() {
    for threads in [64usize, 512, 2048] {
        let done = Arc::new(Barrier::new(threads + 1));
        let (tx, rx) = mpsc::channel();
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let done = Arc::clone(&done);
                let tx = tx.clone();
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        tx.send(own_tid()).unwrap();
                        done.wait();
                    })
                    .unwrap()
            })
            .collect();
        let tids: Vec<u32> = rx.iter().take(threads).collect();
        let tmp = TempDir::new("lsschedstat-bench").unwrap();
        let pod = tmp.path().join("cpu/kubepods/burstable/podbench");
        fs::create_dir_all(pod.join("c1")).unwrap();
        fs::write(pod.join("tasks"), "").unwrap();
        let list: String = tids.iter().map(|t| format!("{t}\n")).collect();
        fs::write(pod.join("c1/tasks"), list).unwrap();
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, tmp.path());
        let mut sampler = LsSchedSampler::new("/proc", layout);
        let dir = PathBuf::from("kubepods/burstable/podbench");
        let mut rounds_us = Vec::with_capacity(ROUNDS);
        let mut read = 0;
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let (counters, _) = sampler.read([dir.as_path()], SystemTime::now());
            rounds_us.push(started.elapsed().as_secs_f64() * 1e6);
            read = counters.threads;
        }
        rounds_us.sort_by(f64::total_cmp);
        let p50 = rounds_us[ROUNDS / 2];
        let p99 = rounds_us[ROUNDS * 99 / 100];
        println!(
            "lsschedstat {threads:>5} threads ({read} read): p50 {p50:>8.0} µs/round, p99 {p99:>8.0} µs/round, {:.2} µs/thread at p50",
            p50 / threads as f64
        );
        done.wait();
        for handle in handles {
            handle.join().unwrap();
        }
    }
}
