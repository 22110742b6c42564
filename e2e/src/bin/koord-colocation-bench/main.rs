//! The colocation benchmark's harness (run it through `hack/bench-colocation.sh`).
//!
//! One binary plays every part, so the parts can sit in different cgroups:
//! - `serve`: the latency-sensitive service, a small HTTP/1.1 server whose
//!   every request costs a fixed amount of CPU work (not wall time, so CPU
//!   contention shows up as latency);
//! - `load`: an open-loop load generator: requests are due on a fixed
//!   schedule and each latency counts from the time the request was due, so
//!   a slow server cannot slow the generator down and hide its own delay;
//! - `batch`: the best-effort job, busy threads counting work units;
//! - `run`: lays out kubelet-style cgroups, starts the others in them, runs
//!   every configuration with the same load pattern, samples the cgroups
//!   and prints the table (and CSV files for the plots).
//!
//! Needs root and cgroup v1 cpu, cpuacct, cpuset and memory hierarchies. The
//! runs of upstream's koordlet (`--upstream-koordlet PATH`) also need an API
//! server in `KUBECONFIG` with the CRDs applied (see `upstream`).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use koord_common::sync::MutexExt;

mod upstream;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "cpuset", "memory"];
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// A request head larger than this is refused by the service.
const MAX_REQUEST_HEAD: usize = 8 * 1024;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("serve") => Options::parse(&args[1..]).and_then(|o| serve(&o)),
        Some("load") => Options::parse(&args[1..]).and_then(|o| load(&o)),
        Some("batch") => Options::parse(&args[1..]).and_then(|o| batch(&o)),
        Some("run") => Options::parse(&args[1..]).and_then(|o| run(&o)),
        _ => Err(USAGE.to_string()),
    };
    if let Err(message) = result {
        eprintln!("koord-colocation-bench: {message}");
        std::process::exit(2);
    }
}

const USAGE: &str =
    "usage: koord-colocation-bench run --koordlet PATH [--upstream-koordlet PATH] [--out DIR]
                     [--phase-seconds N] [--work-us N] [--threshold PERCENT] [--runs LIST] [--conns N]
                     [--latency-target PERCENT] [--repeat N] [--rate-basis capacity|machine]
                     [--probe-seconds N] [--be-cpu-qos sched-idle|none] [--loadgen-cgroup root|ls-pod]
  runs: a comma-separated subset of ls-alone,no-agent,koordlet-cfsquota,koordlet-cpuset,
        koordlet-latency,upstream-cfsquota,upstream-cpuset (the upstream runs need
        --upstream-koordlet and an API server in KUBECONFIG)
  koordlet-latency: cfsQuota with the cpuLatencyProtection NodeSLO extension on, aiming the LS
        threads' run-queue wait at --latency-target % of their run time
  rate-basis: what 100 % of the pattern is: the LS service's capacity measured by a closed-loop
        probe first (default), or the bare CPUs (ncpu x 1 s / work-us)
  repeat: every run kind N times (1..10), kinds taking turns; adds a table of medians
  be-cpu-qos: sched-idle (default) gives both agents upstream's CPU QoS for BE in the NodeSLO
        (policies.cpuPolicy coreSched, beClass.cpuQOS schedIdle 1: the besteffort tier's cpu.idle);
        none leaves it out. The no-agent run never sets cpu.idle; the table says which runs had it.
  loadgen-cgroup: root (default) runs the load generator in a cgroup beside kubepods, where it
        competes with kubepods as a whole, BE included; ls-pod runs it in a container-like cgroup
        of the LS pod, where BE's idle tier makes way for it as for remote clients' interrupts
  (serve, load and batch are the parts `run` starts)";

/// `--key value` pairs; every option takes a value.
struct Options(HashMap<String, String>);

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut map = HashMap::new();
        let mut iter = args.iter();
        while let Some(key) = iter.next() {
            let name = key
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument {key:?}\n{USAGE}"))?;
            let value = iter
                .next()
                .ok_or_else(|| format!("--{name} needs a value"))?;
            map.insert(name.to_string(), value.clone());
        }
        Ok(Self(map))
    }

    fn text(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn number<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T, String> {
        match self.0.get(key) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{key} {v:?} is not a number")),
        }
    }
}

/// Fixed CPU work: a xorshift loop the optimiser cannot remove.
fn spin(iterations: u64) -> u64 {
    let mut x = black_box(0x9e37_79b9_7f4a_7c15u64);
    for _ in 0..iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x)
}

/// Iterations of `spin` per microsecond on an idle CPU (the fastest of a few
/// tries, so a preemption during one try does not skew it).
fn calibrate() -> f64 {
    let iterations = 2_000_000u64;
    let mut best = f64::MAX;
    for _ in 0..7 {
        let start = Instant::now();
        spin(iterations);
        best = best.min(start.elapsed().as_secs_f64());
    }
    iterations as f64 / (best * 1e6)
}

// ---------------------------------------------------------------- serve

fn serve(options: &Options) -> Result<(), String> {
    let port: u16 = options.number("port", 0)?;
    let iterations: u64 = options.number("iters", 0)?;
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| format!("bind 127.0.0.1:{port}: {e}"))?;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        thread::spawn(move || {
            let _ = serve_connection(stream, iterations);
        });
    }
    Ok(())
}

fn serve_connection(stream: TcpStream, iterations: u64) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        // Read one request head (no bodies: the generator only sends GETs).
        let mut head = 0usize;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            head += line.len();
            if head > MAX_REQUEST_HEAD {
                writer.write_all(b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")?;
                return Ok(());
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
        }
        let checksum = spin(iterations);
        let body = format!("{:016x}", checksum);
        write!(
            writer,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
    }
}

// ---------------------------------------------------------------- load

/// One phase of the load pattern: this many seconds at this many requests/s.
#[derive(Clone, Copy, Debug)]
struct Phase {
    seconds: f64,
    rate: f64,
}

fn parse_schedule(text: &str) -> Result<Vec<Phase>, String> {
    text.split(',')
        .map(|item| {
            let (seconds, rate) = item
                .split_once(':')
                .ok_or_else(|| format!("schedule item {item:?} is not SECONDS:RATE"))?;
            let phase = Phase {
                seconds: seconds
                    .parse()
                    .map_err(|_| format!("bad seconds in {item:?}"))?,
                rate: rate.parse().map_err(|_| format!("bad rate in {item:?}"))?,
            };
            if !(phase.seconds > 0.0
                && phase.seconds <= 3600.0
                && (0.0..=100_000.0).contains(&phase.rate))
            {
                return Err(format!("schedule item {item:?} is out of range"));
            }
            Ok(phase)
        })
        .collect()
}

fn load(options: &Options) -> Result<(), String> {
    let port: u16 = options.number("port", 0)?;
    let connections: usize = options.number("conns", 64)?;
    if let Some(seconds) = options.text("closed-seconds") {
        let seconds: f64 = seconds
            .parse()
            .map_err(|_| format!("--closed-seconds {seconds:?} is not a number"))?;
        return probe(port, connections, seconds);
    }
    let schedule = parse_schedule(options.text("schedule").ok_or("--schedule is required")?)?;
    let out = PathBuf::from(options.text("out").ok_or("--out is required")?);
    // The harness starts the schedule at a shared instant: it passes the delay.
    let start_in_ms: u64 = options.number("start-in-ms", 200)?;
    let start = Instant::now() + Duration::from_millis(start_in_ms);

    let (due_tx, due_rx) = mpsc::sync_channel::<Instant>(1 << 20);
    let due_rx = Arc::new(Mutex::new(due_rx));
    let errors = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..connections.clamp(1, 1024) {
        let due_rx = Arc::clone(&due_rx);
        let errors = Arc::clone(&errors);
        workers.push(thread::spawn(move || {
            let mut records: Vec<(u32, u32)> = Vec::new();
            let mut connection: Option<(TcpStream, BufReader<TcpStream>)> = None;
            loop {
                let due = match due_rx.lock_or_recover().recv() {
                    Ok(due) => due,
                    Err(_) => break,
                };
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                match request(&mut connection, port) {
                    Ok(()) => {
                        let latency = due.elapsed();
                        let due_ms = due.saturating_duration_since(start).as_millis();
                        records.push((
                            u32::try_from(due_ms).unwrap_or(u32::MAX),
                            u32::try_from(latency.as_micros()).unwrap_or(u32::MAX),
                        ));
                    }
                    Err(_) => {
                        connection = None;
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            records
        }));
    }

    // Dispatch each request at its due time; a busy pool lets them queue.
    let mut phase_start = start;
    for phase in &schedule {
        let phase_end = phase_start + Duration::from_secs_f64(phase.seconds);
        if phase.rate > 0.0 {
            let interval = Duration::from_secs_f64(1.0 / phase.rate);
            let mut due = phase_start;
            while due < phase_end {
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                if due_tx.send(due).is_err() {
                    break;
                }
                due += interval;
            }
        }
        if let Some(wait) = phase_end.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        phase_start = phase_end;
    }
    drop(due_tx);

    let mut text = String::new();
    let mut count = 0usize;
    for worker in workers {
        for (due_ms, latency_us) in worker.join().map_err(|_| "a load worker panicked")? {
            let _ = writeln!(text, "{due_ms} {latency_us}");
            count += 1;
        }
    }
    fs::write(&out, text).map_err(|e| format!("write {}: {e}", out.display()))?;
    println!("requests {count} errors {}", errors.load(Ordering::Relaxed));
    Ok(())
}

/// Closed-loop load: every connection sends its next request as soon as the
/// previous answer arrives, so the service runs flat out. Prints how many
/// answers came back after a warm-up second and how long that window was;
/// the harness turns it into the service's capacity on this machine (the
/// generator's own CPU included, as in the runs).
fn probe(port: u16, connections: usize, seconds: f64) -> Result<(), String> {
    if !(2.0..=60.0).contains(&seconds) {
        return Err("--closed-seconds must be 2..60".into());
    }
    let warmed_up = Instant::now() + PROBE_WARM_UP;
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let answered = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..connections.clamp(1, 1024))
        .map(|_| {
            let answered = Arc::clone(&answered);
            let errors = Arc::clone(&errors);
            thread::spawn(move || {
                let mut connection = None;
                while Instant::now() < end {
                    match request(&mut connection, port) {
                        Ok(()) => {
                            let now = Instant::now();
                            if now >= warmed_up && now < end {
                                answered.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => {
                            connection = None;
                            errors.fetch_add(1, Ordering::Relaxed);
                            thread::sleep(Duration::from_millis(10));
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().map_err(|_| "a probe worker panicked")?;
    }
    println!(
        "answered {} seconds {:.3} errors {}",
        answered.load(Ordering::Relaxed),
        seconds - PROBE_WARM_UP.as_secs_f64(),
        errors.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Answers in the probe's first second are not counted: connections and
/// server threads are still being set up.
const PROBE_WARM_UP: Duration = Duration::from_secs(1);

/// `answered A seconds S errors E` from the probe: answers per second.
fn parse_probe(text: &str) -> Result<f64, String> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let value = |name: &str| -> Option<f64> {
        let at = fields.iter().position(|f| *f == name)?;
        fields.get(at + 1)?.parse().ok()
    };
    match (value("answered"), value("seconds"), value("errors")) {
        (Some(answered), Some(seconds), Some(errors)) if seconds > 0.0 => {
            if errors > answered / 100.0 {
                return Err(format!("the capacity probe saw {errors} errors: {text:?}"));
            }
            Ok(answered / seconds)
        }
        _ => Err(format!("unreadable capacity probe output {text:?}")),
    }
}

fn request(
    connection: &mut Option<(TcpStream, BufReader<TcpStream>)>,
    port: u16,
) -> std::io::Result<()> {
    if connection.is_none() {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        let reader = BufReader::new(stream.try_clone()?);
        *connection = Some((stream, reader));
    }
    let (stream, reader) = connection.as_mut().expect("connected above");
    stream.write_all(b"GET /work HTTP/1.1\r\nHost: ls\r\n\r\n")?;
    let mut content_length = 0usize;
    let mut line = String::new();
    let mut status_seen = false;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if !status_seen {
            status_seen = true;
            if !line.starts_with("HTTP/1.1 200") {
                return Err(std::io::Error::other(format!("status {}", line.trim())));
            }
            continue;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            content_length = value.trim().parse().unwrap_or(0).min(1 << 20);
        }
    }
    let mut body = vec![0u8; content_length];
    reader.read_exact(&mut body)
}

// ---------------------------------------------------------------- batch

fn batch(options: &Options) -> Result<(), String> {
    let threads: usize = options.number("threads", 1)?;
    let iterations: u64 = options.number("iters", 1000)?;
    let units = Arc::new(AtomicU64::new(0));
    for _ in 0..threads.clamp(1, 256) {
        let units = Arc::clone(&units);
        thread::spawn(move || {
            loop {
                spin(iterations);
                units.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    // The harness reads "milliseconds units" lines from stdout.
    let start = Instant::now();
    let stdout = std::io::stdout();
    loop {
        thread::sleep(Duration::from_millis(100));
        let mut out = stdout.lock();
        if writeln!(
            out,
            "{} {}",
            start.elapsed().as_millis(),
            units.load(Ordering::Relaxed)
        )
        .is_err()
            || out.flush().is_err()
        {
            return Ok(());
        }
    }
}

// ---------------------------------------------------------------- cgroups

fn cgroup_path(controller: &str, dir: &str) -> PathBuf {
    Path::new(CGROUP_ROOT).join(controller).join(dir)
}

fn read_trimmed(path: &Path) -> Result<String, String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("read {}: {e}", path.display()))
}

fn write_value(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("write {value:?} to {}: {e}", path.display()))
}

/// Makes `dir` in every controller; a new cpuset cgroup gets its parent's
/// CPUs and memory nodes. Returns whether this call created it.
fn make_cgroup(dir: &str) -> Result<bool, String> {
    let mut created = false;
    for controller in CONTROLLERS {
        let path = cgroup_path(controller, dir);
        if path.is_dir() {
            continue;
        }
        fs::create_dir(&path).map_err(|e| format!("mkdir {}: {e}", path.display()))?;
        created = true;
        if controller == "cpuset" {
            let parent = path.parent().expect("cgroup has a parent").to_path_buf();
            for file in ["cpuset.cpus", "cpuset.mems"] {
                write_value(&path.join(file), &read_trimmed(&parent.join(file))?)?;
            }
        }
    }
    Ok(created)
}

fn remove_cgroup(dir: &str) {
    for controller in CONTROLLERS {
        let path = cgroup_path(controller, dir);
        for _ in 0..50 {
            if !path.exists() || fs::remove_dir(&path).is_ok() {
                break;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

fn move_into(dir: &str, pid: u32) -> Result<(), String> {
    for controller in CONTROLLERS {
        write_value(
            &cgroup_path(controller, dir).join("cgroup.procs"),
            &pid.to_string(),
        )?;
    }
    Ok(())
}

fn cpu_count_of(list: &str) -> usize {
    list.split(',')
        .filter(|part| !part.is_empty())
        .map(|part| match part.split_once('-') {
            Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                (Ok(a), Ok(b)) if b >= a => b - a + 1,
                _ => 0,
            },
            None => usize::from(part.parse::<usize>().is_ok()),
        })
        .sum()
}

/// The kubelet-style layout of one run: tiers, the two pods and their
/// containers, plus a cgroup for the load generator outside kubepods.
struct Layout {
    ls_pod: String,
    ls_container: String,
    be_tier: String,
    be_pod: String,
    be_container: String,
    generator: String,
    /// What this harness created, parents first (removed in reverse).
    created: Vec<String>,
    /// `cpu.shares` of tiers that existed before (a stopped kubelet's), put back on removal.
    saved_shares: Vec<(PathBuf, String)>,
}

const LS_UID: &str = "koord-bench-ls";
const BE_UID: &str = "koord-bench-be";
const LS_CONTAINER_ID: &str = "c0ffee00000000000000000000000000000000000000000000000000000000a1";
const BE_CONTAINER_ID: &str = "c0ffee00000000000000000000000000000000000000000000000000000000b2";
/// The generator's cgroup with `--loadgen-cgroup root` (fixed names, so a
/// crashed run's leftovers are found and removed by the next one).
const ROOT_LOADGEN: &str = "koord-bench-loadgen";
/// Its container-like cgroup inside the LS pod with `--loadgen-cgroup ls-pod`.
const LS_LOADGEN_ID: &str = "c0ffee000000000000000000000000000000000000000000000000000000000c3";

/// Where the load generator runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum LoadgenPlacement {
    /// A cgroup of its own beside kubepods: it competes with kubepods as a
    /// whole, and BE's `cpu.idle` (inside kubepods) does not make way for it.
    Root,
    /// A container-like cgroup inside the LS pod: BE's idle tier yields to
    /// it as to the service, as the interrupts that carry a remote client's
    /// packets are never delayed by BE; its CPU counts as the LS pod's.
    LsPod,
}

impl LoadgenPlacement {
    /// The generator's cgroup, relative to each hierarchy's root.
    fn cgroup(self) -> String {
        match self {
            Self::Root => ROOT_LOADGEN.to_string(),
            Self::LsPod => format!("kubepods/burstable/pod{LS_UID}/{LS_LOADGEN_ID}"),
        }
    }
}

impl Layout {
    fn create(placement: LoadgenPlacement) -> Result<Self, String> {
        let generator = placement.cgroup();
        let mut layout = Layout {
            ls_pod: format!("kubepods/burstable/pod{LS_UID}"),
            ls_container: format!("kubepods/burstable/pod{LS_UID}/{LS_CONTAINER_ID}"),
            be_tier: "kubepods/besteffort".into(),
            be_pod: format!("kubepods/besteffort/pod{BE_UID}"),
            be_container: format!("kubepods/besteffort/pod{BE_UID}/{BE_CONTAINER_ID}"),
            generator,
            created: Vec::new(),
            saved_shares: Vec::new(),
        };
        // Leftovers of a crashed run would hold stale limits: start clean
        // (the generator's cgroup of either placement first: one sits in the LS pod).
        let loadgen_dirs =
            [LoadgenPlacement::Root, LoadgenPlacement::LsPod].map(LoadgenPlacement::cgroup);
        for dir in [
            &loadgen_dirs[0],
            &loadgen_dirs[1],
            &layout.ls_container,
            &layout.ls_pod,
            &layout.be_container,
            &layout.be_pod,
        ] {
            remove_cgroup(dir);
        }
        let dirs = [
            "kubepods".to_string(),
            "kubepods/burstable".to_string(),
            layout.be_tier.clone(),
            layout.ls_pod.clone(),
            layout.ls_container.clone(),
            layout.be_pod.clone(),
            layout.be_container.clone(),
            layout.generator.clone(),
        ];
        for dir in dirs {
            if make_cgroup(&dir)? {
                layout.created.push(dir);
            }
        }
        // The shares a kubelet would give these two pods: the node's CPUs to
        // kubepods, 1024 per requested LS core to the burstable tier and the
        // LS pod, 2 for best effort. Tiers left by a kubelet (the local
        // cluster's, stopped while the benchmark runs: it would remove pod
        // cgroups it does not know) carry its values for its own pods; they
        // are set for the bench's pods and restored on removal.
        let ncpu = thread::available_parallelism().map_or(1, |n| n.get());
        let shares = [
            ("kubepods".to_string(), (ncpu * 1024).to_string()),
            ("kubepods/burstable".to_string(), "1024".to_string()),
            (layout.be_tier.clone(), "2".to_string()),
            (layout.ls_pod.clone(), "1024".to_string()),
            (layout.be_pod.clone(), "2".to_string()),
            (layout.be_container.clone(), "2".to_string()),
        ];
        for (dir, value) in shares {
            let file = cgroup_path("cpu", &dir).join("cpu.shares");
            if !layout.created.contains(&dir) {
                let before = read_trimmed(&file)?;
                if before != value {
                    layout.saved_shares.push((file.clone(), before));
                }
            }
            write_value(&file, &value)?;
        }
        layout.reset_be_limits()?;
        Ok(layout)
    }

    /// Undoes what an agent wrote in the previous run: no quota, every CPU,
    /// the tier not idle.
    fn reset_be_limits(&self) -> Result<(), String> {
        let tier_cpu = cgroup_path("cpu", &self.be_tier);
        if self.be_tier_idle() == Some(true) {
            write_value(&tier_cpu.join("cpu.idle"), "0")?;
            // Leaving idle resets the tier's shares to 1024; put the
            // kubelet's value for best effort back.
            write_value(&tier_cpu.join("cpu.shares"), "2")?;
        }
        let all_cpus = read_trimmed(&cgroup_path("cpuset", "kubepods").join("cpuset.cpus"))?;
        for dir in [&self.be_tier, &self.be_pod, &self.be_container] {
            write_value(&cgroup_path("cpu", dir).join("cpu.cfs_quota_us"), "-1")?;
            write_value(&cgroup_path("cpuset", dir).join("cpuset.cpus"), &all_cpus)?;
        }
        Ok(())
    }

    /// The besteffort tier's `cpu.idle` (None where the kernel lacks it).
    fn be_tier_idle(&self) -> Option<bool> {
        read_trimmed(&cgroup_path("cpu", &self.be_tier).join("cpu.idle"))
            .ok()
            .map(|v| v == "1")
    }

    fn remove(&self) {
        for dir in self.created.iter().rev() {
            remove_cgroup(dir);
        }
        for (file, value) in &self.saved_shares {
            if file.exists() {
                let _ = write_value(file, value);
            }
        }
    }
}

// ---------------------------------------------------------------- run

#[derive(Clone, Copy, PartialEq, Debug)]
enum RunKind {
    LsAlone,
    NoAgent,
    KoordletCfsQuota,
    KoordletCpuset,
    KoordletLatency,
    UpstreamCfsQuota,
    UpstreamCpuset,
}

/// Which agent enforces a run.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Agent {
    Ours,
    Upstream,
}

impl RunKind {
    fn parse(name: &str) -> Result<Self, String> {
        match name {
            "ls-alone" => Ok(Self::LsAlone),
            "no-agent" => Ok(Self::NoAgent),
            "koordlet-cfsquota" => Ok(Self::KoordletCfsQuota),
            "koordlet-cpuset" => Ok(Self::KoordletCpuset),
            "koordlet-latency" => Ok(Self::KoordletLatency),
            "upstream-cfsquota" => Ok(Self::UpstreamCfsQuota),
            "upstream-cpuset" => Ok(Self::UpstreamCpuset),
            other => Err(format!("unknown run {other:?}")),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Self::LsAlone => "ls-alone",
            Self::NoAgent => "no-agent",
            Self::KoordletCfsQuota => "koordlet-cfsquota",
            Self::KoordletCpuset => "koordlet-cpuset",
            Self::KoordletLatency => "koordlet-latency",
            Self::UpstreamCfsQuota => "upstream-cfsquota",
            Self::UpstreamCpuset => "upstream-cpuset",
        }
    }
    fn with_batch(self) -> bool {
        self != Self::LsAlone
    }
    fn policy(self) -> Option<&'static str> {
        match self {
            Self::KoordletCfsQuota | Self::KoordletLatency | Self::UpstreamCfsQuota => {
                Some("cfsQuota")
            }
            Self::KoordletCpuset | Self::UpstreamCpuset => Some("cpuset"),
            _ => None,
        }
    }
    fn agent(self) -> Option<Agent> {
        match self {
            Self::KoordletCfsQuota | Self::KoordletCpuset | Self::KoordletLatency => {
                Some(Agent::Ours)
            }
            Self::UpstreamCfsQuota | Self::UpstreamCpuset => Some(Agent::Upstream),
            _ => None,
        }
    }
}

/// One sample of the cgroups and the node, every `SAMPLE_EVERY`.
#[derive(Clone, Copy, Debug)]
struct Sample {
    at: f64,
    ls_ns: u64,
    be_ns: u64,
    busy_ticks: u64,
    total_ticks: u64,
    /// BE tier's CPU limit in cores from cfs quota (None: unlimited).
    be_quota_cores: Option<f64>,
    be_cpuset_cpus: usize,
    /// The LS service's threads' summed schedstat (run ns, run-queue wait
    /// ns), read every [`SCHEDSTAT_EVERY`] samples.
    ls_sched: Option<(u64, u64)>,
    /// The same for the load generator's threads: time the generator waits
    /// for a CPU delays its requests and its reading of answers, so it
    /// counts in the LS latency although no remote client would see it.
    gen_sched: Option<(u64, u64)>,
}

/// LS schedstat is read every this many samples (250 ms): reading every
/// thread's file every 10 ms would load the machine it measures.
const SCHEDSTAT_EVERY: usize = 25;

/// The summed (run, wait) ns of the threads in `dir`'s cpu cgroup; threads
/// that exit while being read are left out.
fn cgroup_schedstat(dir: &str) -> Result<(u64, u64), String> {
    let tasks = read_trimmed(&cgroup_path("cpu", dir).join("tasks"))?;
    let (mut run, mut wait) = (0u64, 0u64);
    for tid in tasks.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
        let Ok(text) = fs::read_to_string(format!("/proc/{tid}/schedstat")) else {
            continue;
        };
        let mut fields = text.split_whitespace().map(str::parse::<u64>);
        if let (Some(Ok(r)), Some(Ok(w))) = (fields.next(), fields.next()) {
            run += r;
            wait += w;
        }
    }
    Ok((run, wait))
}

fn node_ticks() -> Result<(u64, u64), String> {
    let stat = fs::read_to_string("/proc/stat").map_err(|e| format!("read /proc/stat: {e}"))?;
    let line = stat.lines().next().ok_or("empty /proc/stat")?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    if values.len() < 5 {
        return Err("short cpu line in /proc/stat".into());
    }
    let total: u64 = values.iter().sum();
    let idle = values[3] + values[4];
    Ok((total - idle, total))
}

fn take_sample(layout: &Layout, at: f64, with_sched: bool) -> Result<Sample, String> {
    let usage = |dir: &str| -> Result<u64, String> {
        read_trimmed(&cgroup_path("cpuacct", dir).join("cpuacct.usage"))?
            .parse()
            .map_err(|_| format!("bad cpuacct.usage in {dir}"))
    };
    let quota: i64 = read_trimmed(&cgroup_path("cpu", &layout.be_tier).join("cpu.cfs_quota_us"))?
        .parse()
        .map_err(|_| "bad cfs_quota_us".to_string())?;
    let period: i64 = read_trimmed(&cgroup_path("cpu", &layout.be_tier).join("cpu.cfs_period_us"))?
        .parse()
        .map_err(|_| "bad cfs_period_us".to_string())?;
    let (busy_ticks, total_ticks) = node_ticks()?;
    Ok(Sample {
        at,
        ls_ns: usage(&layout.ls_pod)?,
        be_ns: usage(&layout.be_pod)?,
        busy_ticks,
        total_ticks,
        be_quota_cores: (quota > 0 && period > 0).then(|| quota as f64 / period as f64),
        be_cpuset_cpus: cpu_count_of(&read_trimmed(
            &cgroup_path("cpuset", &layout.be_tier).join("cpuset.cpus"),
        )?),
        ls_sched: if with_sched {
            Some(cgroup_schedstat(&layout.ls_container)?)
        } else {
            None
        },
        gen_sched: if with_sched {
            Some(cgroup_schedstat(&layout.generator)?)
        } else {
            None
        },
    })
}

struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A process's CPU seconds and peak RSS, from /proc.
fn process_usage(pid: u32) -> Option<(f64, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())?;
    Some((ticks as f64 / 100.0, hwm_kib * 1024))
}

/// Seconds from `mark` to now, negative before it.
fn seconds_since(mark: Instant) -> f64 {
    let now = Instant::now();
    match now.checked_duration_since(mark) {
        Some(after) => after.as_secs_f64(),
        None => -(mark - now).as_secs_f64(),
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn wait_for_port(port: u16, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "nothing listens on 127.0.0.1:{port} after {within:?}"
    ))
}

struct Config {
    koordlet: Option<PathBuf>,
    upstream_koordlet: Option<PathBuf>,
    out: PathBuf,
    phase_seconds: f64,
    work_us: u64,
    threshold: u32,
    latency_target: u32,
    connections: usize,
    iterations_per_us: f64,
    ncpu: usize,
    self_exe: PathBuf,
    /// Each run kind runs this many times, the kinds taking turns.
    repeat: usize,
    /// What "100 %" of the pattern is, in LS requests per second.
    full_rate: f64,
    /// How `full_rate` was found, for the header.
    full_rate_basis: String,
    /// Whether the agents' NodeSLO asks for BE's cpu.idle (upstream's
    /// coreSched CPU QoS policy with `schedIdle: 1` for the BE class).
    be_sched_idle: bool,
    /// Where the load generator runs (`--loadgen-cgroup`).
    loadgen: LoadgenPlacement,
}

/// The pattern's shares of `full_rate`: idle, 50 %, 90 %, idle.
const PATTERN: [f64; 4] = [0.0, 0.5, 0.9, 0.0];
/// The phases the table reports on (indexes into `PATTERN`).
const HALF_PHASE: usize = 1;
const NINETY_PHASE: usize = 2;

impl Config {
    /// What the machine's CPUs could serve if requests cost nothing but their
    /// work: `ncpu × 1 s / work`.
    fn machine_rate(&self) -> f64 {
        self.ncpu as f64 * 1e6 / self.work_us as f64
    }

    /// idle → 50 % → 90 % → idle of `full_rate`, in LS requests per second.
    fn schedule(&self) -> Vec<Phase> {
        PATTERN
            .iter()
            .map(|share| Phase {
                seconds: self.phase_seconds,
                rate: (share * self.full_rate).round(),
            })
            .collect()
    }
}

struct RunResult {
    kind: RunKind,
    round: usize,
    latencies_us: Vec<u32>,
    phase_p99_ms: Vec<Option<f64>>,
    /// Per phase: the LS threads' run-queue wait over their run time, %.
    phase_wait_percent: Vec<Option<f64>>,
    /// The same for the load generator's threads.
    phase_gen_wait_percent: Vec<Option<f64>>,
    be_units_per_s: f64,
    be_share_of_idle: Option<f64>,
    koordlet_cpu_percent: Option<f64>,
    koordlet_rss: Option<u64>,
    reactions_ms: Vec<f64>,
    load_summary: String,
    /// The besteffort tier's `cpu.idle` at the end of the pattern.
    be_tier_idle: Option<bool>,
}

fn run(options: &Options) -> Result<(), String> {
    if !Path::new(CGROUP_ROOT).join("cpu").join("tasks").exists() {
        return Err(
            "needs cgroup v1 hierarchies under /sys/fs/cgroup (cpu, cpuacct, cpuset, memory)"
                .into(),
        );
    }
    let upstream_koordlet = options.text("upstream-koordlet").map(PathBuf::from);
    let default_runs = if upstream_koordlet.is_some() {
        "ls-alone,no-agent,koordlet-cfsquota,koordlet-cpuset,koordlet-latency,upstream-cfsquota,upstream-cpuset"
    } else {
        "ls-alone,no-agent,koordlet-cfsquota,koordlet-cpuset,koordlet-latency"
    };
    let kinds = options
        .text("runs")
        .unwrap_or(default_runs)
        .split(',')
        .map(RunKind::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let koordlet = options.text("koordlet").map(PathBuf::from);
    if kinds.iter().any(|k| k.agent() == Some(Agent::Ours))
        && koordlet.as_ref().is_none_or(|p| !p.is_file())
    {
        return Err("the koordlet runs need --koordlet PATH (a koordlet binary)".into());
    }
    if kinds.iter().any(|k| k.agent() == Some(Agent::Upstream))
        && upstream_koordlet.as_ref().is_none_or(|p| !p.is_file())
    {
        return Err(
            "the upstream runs need --upstream-koordlet PATH (upstream's koordlet binary)".into(),
        );
    }
    let ncpu = thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut config = Config {
        koordlet,
        upstream_koordlet,
        out: PathBuf::from(options.text("out").unwrap_or("target/bench-colocation")),
        phase_seconds: options.number("phase-seconds", 20.0)?,
        work_us: options.number("work-us", 2000)?,
        threshold: options.number("threshold", 65)?,
        latency_target: options.number("latency-target", DEFAULT_LATENCY_TARGET)?,
        connections: options.number("conns", 64)?,
        iterations_per_us: calibrate(),
        ncpu,
        self_exe: std::env::current_exe().map_err(|e| format!("own path: {e}"))?,
        repeat: options.number("repeat", 1)?,
        full_rate: 0.0,
        full_rate_basis: String::new(),
        be_sched_idle: match options.text("be-cpu-qos").unwrap_or("sched-idle") {
            "sched-idle" => true,
            "none" => false,
            other => {
                return Err(format!(
                    "--be-cpu-qos {other:?}: expected sched-idle or none"
                ));
            }
        },
        loadgen: match options.text("loadgen-cgroup").unwrap_or("root") {
            "root" => LoadgenPlacement::Root,
            "ls-pod" => LoadgenPlacement::LsPod,
            other => {
                return Err(format!(
                    "--loadgen-cgroup {other:?}: expected root or ls-pod"
                ));
            }
        },
    };
    if !(1.0..=600.0).contains(&config.phase_seconds) || !(50..=100_000).contains(&config.work_us) {
        return Err("--phase-seconds must be 1..600 and --work-us 50..100000".into());
    }
    if !(1..=10).contains(&config.repeat) {
        return Err("--repeat must be 1..10".into());
    }
    let rate_basis = options.text("rate-basis").unwrap_or("capacity");
    if !matches!(rate_basis, "capacity" | "machine") {
        return Err(format!(
            "--rate-basis {rate_basis:?}: expected capacity or machine"
        ));
    }
    let probe_seconds: f64 = options.number("probe-seconds", 6.0)?;
    if !(2.0..=60.0).contains(&probe_seconds) {
        return Err("--probe-seconds must be 2..60".into());
    }
    if !(1..=100).contains(&config.threshold) {
        return Err("--threshold must be 1..100".into());
    }
    if !(1..=1000).contains(&config.latency_target) {
        return Err("--latency-target must be 1..1000".into());
    }
    fs::create_dir_all(&config.out).map_err(|e| format!("mkdir {}: {e}", config.out.display()))?;

    // Upstream's koordlet reads the pods from a kubelet and its node and
    // NodeSLO from the API server: one fake kubelet for every upstream run.
    let upstream = if kinds.iter().any(|k| k.agent() == Some(Agent::Upstream)) {
        let cluster = upstream::ClusterObjects::connect()?;
        let kubelet =
            upstream::FakeKubelet::start(pod_list_json(), &config.out.join("fake-kubelet.log"))?;
        println!(
            "== upstream's koordlet: node {} in the cluster of KUBECONFIG, fake kubelet on 127.0.0.1:{}",
            upstream::NODE_NAME,
            kubelet.port
        );
        Some(UpstreamSetup { cluster, kubelet })
    } else {
        None
    };

    let layout = Layout::create(config.loadgen)?;
    let machine_rate = config.machine_rate();
    let (full_rate, basis) = if rate_basis == "capacity" {
        match probe_capacity(&config, &layout, probe_seconds) {
            Ok(capacity) => (
                capacity,
                format!(
                    "the LS service's measured capacity, {capacity:.0} req/s \
                     ({:.0} % of the {machine_rate:.0} req/s the CPUs could serve at {} µs a request)",
                    100.0 * capacity / machine_rate,
                    config.work_us
                ),
            ),
            Err(e) => {
                layout.remove();
                return Err(format!("the capacity probe: {e}"));
            }
        }
    } else {
        (
            machine_rate,
            format!(
                "the machine, {machine_rate:.0} req/s ({ncpu} CPUs at {} µs a request)",
                config.work_us
            ),
        )
    };
    config.full_rate = full_rate;
    config.full_rate_basis = basis;
    println!(
        "== colocation benchmark: {ncpu} CPUs, LS request = {} µs of CPU, phases of {} s at {:?} req/s \
         (100 % = {}), threshold {} %, {} round(s), BE CPU QoS in the agents' NodeSLO: {}, \
         load generator's cgroup: {}",
        config.work_us,
        config.phase_seconds,
        config.schedule().iter().map(|p| p.rate).collect::<Vec<_>>(),
        config.full_rate_basis,
        config.threshold,
        config.repeat,
        if config.be_sched_idle {
            "coreSched policy, schedIdle 1"
        } else {
            "none"
        },
        match config.loadgen {
            LoadgenPlacement::Root => "beside kubepods",
            LoadgenPlacement::LsPod => "in the LS pod",
        }
    );
    let mut results = Vec::new();
    let mut failure = None;
    'rounds: for round in 1..=config.repeat {
        for &kind in &kinds {
            println!("-- {} ...", run_label(kind, round, config.repeat));
            let outcome = layout
                .reset_be_limits()
                .and_then(|()| run_one(&config, &layout, kind, round, upstream.as_ref()));
            match outcome {
                Ok(result) => {
                    println!("   {}", result.load_summary);
                    results.push(result);
                }
                Err(e) => {
                    failure = Some(format!("{}: {e}", run_label(kind, round, config.repeat)));
                    break 'rounds;
                }
            }
        }
    }
    let _ = layout.reset_be_limits();
    layout.remove();
    if let Some(setup) = &upstream
        && let Err(e) = setup.cluster.remove()
    {
        eprintln!("koord-colocation-bench: cleaning the cluster objects up: {e}");
    }
    print_table(&config, &results);
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// What the upstream runs share: the cluster's objects and the fake kubelet.
struct UpstreamSetup {
    cluster: upstream::ClusterObjects,
    kubelet: upstream::FakeKubelet,
}

/// The last lines of an agent's log, for an error message.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// A run's name in the output: the kind, and its round when there are several.
fn run_label(kind: RunKind, round: usize, rounds: usize) -> String {
    if rounds > 1 {
        format!("{}#{round}", kind.name())
    } else {
        kind.name().to_string()
    }
}

/// Starts the LS service in the LS container's cgroup; returns it and its port.
fn start_service(config: &Config, layout: &Layout) -> Result<(Child, u16), String> {
    let iterations = (config.iterations_per_us * config.work_us as f64).round() as u64;
    let port = free_port()?;
    let mut server = Command::new(&config.self_exe)
        .args([
            "serve",
            "--port",
            &port.to_string(),
            "--iters",
            &iterations.to_string(),
        ])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("start the LS service: {e}"))?;
    let placed = move_into(&layout.ls_container, server.id())
        .and_then(|()| wait_for_port(port, Duration::from_secs(10)));
    if let Err(e) = placed {
        let _ = server.kill();
        let _ = server.wait();
        return Err(e);
    }
    Ok((server, port))
}

/// The LS service's capacity on this machine: answers per second under a
/// closed-loop load from the generator's cgroup, nothing else running. The
/// pattern's 90 % phase is then 90 % of what the service can really serve,
/// not of the bare CPUs (HTTP, the generator and the kernel take their part,
/// and a phase above capacity only measures an ever-growing queue).
fn probe_capacity(config: &Config, layout: &Layout, seconds: f64) -> Result<f64, String> {
    let mut children = Children(Vec::new());
    let (server, port) = start_service(config, layout)?;
    children.0.push(server);
    let generator = Command::new(&config.self_exe)
        .args([
            "load",
            "--port",
            &port.to_string(),
            "--conns",
            &config.connections.to_string(),
            "--closed-seconds",
            &seconds.to_string(),
        ])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start the probe: {e}"))?;
    let mut generator = generator;
    if let Err(e) = move_into(&layout.generator, generator.id()) {
        let _ = generator.kill();
        let _ = generator.wait();
        return Err(e);
    }
    let output = generator
        .wait_with_output()
        .map_err(|e| format!("the probe: {e}"))?;
    if !output.status.success() {
        return Err(format!("the probe failed: {}", output.status));
    }
    parse_probe(&String::from_utf8_lossy(&output.stdout))
}

fn run_one(
    config: &Config,
    layout: &Layout,
    kind: RunKind,
    round: usize,
    upstream: Option<&UpstreamSetup>,
) -> Result<RunResult, String> {
    // Round 1 keeps the plain name, so one-round output looks as before.
    let dir = if round == 1 {
        config.out.join(kind.name())
    } else {
        config.out.join(format!("{}-round{round}", kind.name()))
    };
    fs::create_dir_all(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let mut children = Children(Vec::new());

    let (server, port) = start_service(config, layout)?;
    children.0.push(server);

    let batch_log = Arc::new(Mutex::new(Vec::<(f64, u64)>::new()));
    let run_start = Instant::now();
    if kind.with_batch() {
        let mut batch = Command::new(&config.self_exe)
            .args([
                "batch",
                "--threads",
                &config.ncpu.to_string(),
                "--iters",
                "20000",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start the BE job: {e}"))?;
        move_into(&layout.be_container, batch.id())?;
        let stdout = batch.stdout.take().expect("piped");
        let batch_log = Arc::clone(&batch_log);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(units) = line.split_whitespace().nth(1).and_then(|u| u.parse().ok()) {
                    batch_log
                        .lock_or_recover()
                        .push((run_start.elapsed().as_secs_f64(), units));
                }
            }
        });
        children.0.push(batch);
    }

    let mut koordlet_pid = None;
    let mut upstream_metrics_port = None;
    let mut latency_metrics_port = None;
    if let (Some(policy), Some(Agent::Upstream)) = (kind.policy(), kind.agent()) {
        let setup = upstream.ok_or("upstream runs need the cluster setup")?;
        let binary = config.upstream_koordlet.as_ref().expect("checked in run()");
        write_koordlet_inputs(&dir, policy, config, None)?;
        setup.cluster.apply(
            &upstream::node_object(setup.kubelet.port, config.ncpu, memory_total()?),
            &upstream::node_slo_object(policy, config.threshold, config.be_sched_idle),
        )?;
        let metrics_port = free_port()?;
        let log_path = dir.join("koordlet.log");
        let log = fs::File::create(&log_path).map_err(|e| format!("koordlet log: {e}"))?;
        let data = dir.join("upstream-data");
        // A previous run's TSDB and checkpoints would feed this one.
        let _ = fs::remove_dir_all(&data);
        for sub in ["hookserver.d", "prediction", "audit"] {
            fs::create_dir_all(data.join(sub))
                .map_err(|e| format!("mkdir {}: {e}", data.display()))?;
        }
        let requests_before = setup.kubelet.pod_requests();
        let mut child = upstream::upstream_command(
            binary,
            &data,
            setup.kubelet.port,
            metrics_port,
            config.be_sched_idle,
        )
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("start upstream's koordlet: {e}"))?;
        koordlet_pid = Some(child.id());
        upstream_metrics_port = Some(metrics_port);
        let started = wait_for_port(metrics_port, Duration::from_secs(60)).and_then(|()| {
            // Its first pod sync: from then on it knows both pods.
            if setup
                .kubelet
                .wait_for_pod_requests(requests_before, 1, Duration::from_secs(60))
            {
                Ok(())
            } else {
                Err("it never asked the fake kubelet for /pods".to_string())
            }
        });
        if let Err(e) = started {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "upstream's koordlet did not start: {e}; its log ends:\n{}",
                log_tail(&log_path)
            ));
        }
        children.0.push(child);
    } else if let Some(policy) = kind.policy() {
        let koordlet = config.koordlet.as_ref().expect("checked in run()");
        let koordlet_port = free_port()?;
        let latency_target = (kind == RunKind::KoordletLatency).then_some(config.latency_target);
        write_koordlet_inputs(&dir, policy, config, latency_target)?;
        let log =
            fs::File::create(dir.join("koordlet.log")).map_err(|e| format!("koordlet log: {e}"))?;
        let child = Command::new(koordlet)
            .args(["--standalone", "--node-name", upstream::NODE_NAME])
            .arg("--addr")
            .arg(format!("127.0.0.1:{koordlet_port}"))
            .arg("--pods-file")
            .arg(dir.join("pods.json"))
            .arg("--node-slo-file")
            .arg(dir.join("nodeslo.yaml"))
            .args(["--log-level", "warn"])
            // The hook that applies the coreSched CPU QoS is gated, as upstream's.
            .arg(format!(
                "--feature-gates=CoreSched={}",
                config.be_sched_idle
            ))
            // Each QoS round's notes (cpusuppress's budget formula with the
            // usages it counted) are debug lines of the runner: keep them in
            // the run's log, the counterpart of upstream's saved /metrics.
            .env("RUST_LOG", "koordlet::qosmanager::framework=debug")
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start koordlet: {e}"))?;
        koordlet_pid = Some(child.id());
        children.0.push(child);
        wait_for_port(koordlet_port, Duration::from_secs(30))?;
        if kind == RunKind::KoordletLatency {
            latency_metrics_port = Some(koordlet_port);
        }
    }
    // Let the agent see the node before the pattern starts (its collectors
    // need a few samples); the same settling time for every run.
    thread::sleep(Duration::from_secs(5));

    let schedule = config.schedule();
    let schedule_text: Vec<String> = schedule
        .iter()
        .map(|p| format!("{}:{}", p.seconds, p.rate))
        .collect();
    let latency_file = dir.join("latencies.txt");
    let start_in = Duration::from_millis(300);
    let generator = Command::new(&config.self_exe)
        .args([
            "load",
            "--port",
            &port.to_string(),
            "--conns",
            &config.connections.to_string(),
        ])
        .args(["--schedule", &schedule_text.join(",")])
        .args(["--start-in-ms", &start_in.as_millis().to_string()])
        .arg("--out")
        .arg(&latency_file)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("start the load generator: {e}"))?;
    move_into(&layout.generator, generator.id())?;
    let pattern_start = Instant::now() + start_in;
    let koordlet_before = koordlet_pid.and_then(process_usage);
    // The harness samples every 10 ms beside the pods: its own CPU is
    // reported so that its share of the machine is known, not guessed.
    let harness_before = process_usage(std::process::id());

    // Sample until the generator is done.
    let pattern_length: f64 = schedule.iter().map(|p| p.seconds).sum();
    let mut samples = Vec::new();
    let mut generator = generator;
    loop {
        let at = seconds_since(pattern_start);
        samples.push(take_sample(
            layout,
            at,
            samples.len() % SCHEDSTAT_EVERY == 0,
        )?);
        if let Some(status) = generator.try_wait().map_err(|e| e.to_string())? {
            if !status.success() {
                return Err(format!("the load generator failed: {status}"));
            }
            break;
        }
        if at > pattern_length + 120.0 {
            let _ = generator.kill();
            return Err("the load generator did not finish".into());
        }
        thread::sleep(SAMPLE_EVERY);
    }
    let mut load_summary = String::new();
    if let Some(mut out) = generator.stdout.take() {
        let _ = out.read_to_string(&mut load_summary);
    }
    let koordlet_after = koordlet_pid.and_then(process_usage);
    if let (Some((cpu0, _)), Some((cpu1, _))) = (harness_before, process_usage(std::process::id()))
    {
        load_summary = format!(
            "{}; harness CPU {:.2} % of one CPU",
            load_summary.trim(),
            100.0 * (cpu1 - cpu0) / pattern_length
        );
    }
    if let Some(port) = upstream_metrics_port {
        // What upstream's cpusuppress last saw and set, kept with the run.
        match upstream::fetch_metrics(port) {
            Ok(text) => {
                write_value(&dir.join("upstream-metrics.txt"), &text)?;
                let suppress = upstream::suppress_summary(&text);
                load_summary = format!(
                    "{}; upstream's last cpusuppress: {suppress}",
                    load_summary.trim()
                );
            }
            Err(e) => eprintln!("koord-colocation-bench: upstream's /metrics: {e}"),
        }
    }
    if let Some(port) = latency_metrics_port {
        // What the latency loop did, kept with the run.
        match upstream::fetch_metrics(port) {
            Ok(text) => {
                write_value(&dir.join("koordlet-metrics.txt"), &text)?;
                load_summary = format!(
                    "{}; latency loop: {}",
                    load_summary.trim(),
                    latency_loop_summary(&text)
                );
            }
            Err(e) => eprintln!("koord-colocation-bench: koordlet's /metrics: {e}"),
        }
    }
    // Read while the agent still runs: what it had applied.
    let be_tier_idle = layout.be_tier_idle();
    drop(children);

    let records = read_latencies(&latency_file)?;
    let batch_log = batch_log.lock_or_recover().clone();
    let mut result = summarise(
        config,
        (kind, round),
        &schedule,
        &samples,
        &records,
        &batch_log,
        run_start,
        pattern_start,
        koordlet_before,
        koordlet_after,
        load_summary.trim().to_string(),
    );
    result.be_tier_idle = be_tier_idle;
    write_timeseries(
        &dir,
        config,
        &schedule,
        &samples,
        &records,
        &batch_log,
        run_start,
        pattern_start,
    )?;
    Ok(result)
}

/// The latency loop's metrics in one line: rounds by direction, the last
/// wait ratio and the last limit.
fn latency_loop_summary(metrics: &str) -> String {
    let parts: Vec<String> = metrics
        .lines()
        .filter(|l| l.starts_with("koordlet_cpu_latency_guard_"))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let name = series.trim_start_matches("koordlet_cpu_latency_guard_");
            let name = match name.split_once('{') {
                Some((base, labels)) => match labels.split_once("direction=\"") {
                    Some((_, rest)) => format!("{base}[{}]", rest.split('"').next()?),
                    None => base.to_string(),
                },
                None => name.to_string(),
            };
            Some(format!("{name}={value}"))
        })
        .collect();
    if parts.is_empty() {
        "no koordlet_cpu_latency_guard_* metric".into()
    } else {
        parts.join(" ")
    }
}

/// The two pods as the kubelet lists them (`GET /pods`): ours reads them
/// from `--pods-file`, upstream's from the fake kubelet.
fn pod_list_json() -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"PodList","items":[
 {{"metadata":{{"name":"web","namespace":"bench","uid":"{LS_UID}","labels":{{"koordinator.sh/qosClass":"LS"}}}},
  "spec":{{"containers":[{{"name":"web","resources":{{"requests":{{"cpu":"1"}}}}}}]}},
  "status":{{"phase":"Running","qosClass":"Burstable",
            "containerStatuses":[{{"name":"web","containerID":"containerd://{LS_CONTAINER_ID}","state":{{"running":{{}}}}}}]}}}},
 {{"metadata":{{"name":"batch","namespace":"bench","uid":"{BE_UID}","labels":{{"koordinator.sh/qosClass":"BE"}}}},
  "spec":{{"containers":[{{"name":"batch"}}]}},
  "status":{{"phase":"Running","qosClass":"BestEffort",
            "containerStatuses":[{{"name":"batch","containerID":"containerd://{BE_CONTAINER_ID}","state":{{"running":{{}}}}}}]}}}}
]}}"#
    )
}

/// The latency run's target (`--latency-target`): LS run-queue wait as a
/// percentage of LS run time. Chosen from ls-alone runs on the 2-CPU
/// machine (koordlet/docs/qos.md has the figures): alone, the service waited
/// 8.4 % of its run time in the 50 % phase of the quietest run (7.0–7.9 %
/// with the phases sized to its measured capacity), and 129–178 % in the
/// 90 % phase at 90 % of that capacity (over 1,000 % when the phase was
/// above it). 25 % (about three times the quiet 50 % figure) leaves BE its
/// CPU while LS is moderate and undisturbed and cuts BE as soon as LS queues
/// noticeably; at 90 % BE is held at its minimum.
const DEFAULT_LATENCY_TARGET: u32 = 25;

fn write_koordlet_inputs(
    dir: &Path,
    policy: &str,
    config: &Config,
    latency_target: Option<u32>,
) -> Result<(), String> {
    let pods = pod_list_json();
    let threshold = config.threshold;
    let mut slo = format!(
        "apiVersion: slo.koordinator.sh/v1alpha1\nkind: NodeSLO\nmetadata:\n  name: colocation-bench\nspec:\n  resourceUsedThresholdWithBE:\n    enable: true\n    cpuSuppressThresholdPercent: {threshold}\n    cpuSuppressPolicy: {policy}\n"
    );
    if config.be_sched_idle {
        // Upstream's spelling of "BE is an idle cgroup": the coreSched CPU
        // QoS policy with schedIdle on for the BE class only.
        slo.push_str(
            "  resourceQOSStrategy:\n    policies:\n      cpuPolicy: coreSched\n    beClass:\n      cpuQOS:\n        enable: true\n        schedIdle: 1\n",
        );
    }
    if let Some(target) = latency_target {
        let _ = write!(
            slo,
            "  extensions:\n    Object:\n      cpuLatencyProtection:\n        enable: true\n        targetWaitPercent: {target}\n        minBECPUPercent: 1\n        increaseStepPercent: 5\n        decreaseFactorPercent: 50\n"
        );
    }
    write_value(&dir.join("pods.json"), &pods)?;
    write_value(&dir.join("nodeslo.yaml"), &slo)
}

/// MemTotal in bytes, for the Node's capacity.
fn memory_total() -> Result<u64, String> {
    let text =
        fs::read_to_string("/proc/meminfo").map_err(|e| format!("read /proc/meminfo: {e}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| "no MemTotal in /proc/meminfo".to_string())
}

fn read_latencies(path: &Path) -> Result<Vec<(u32, u32)>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (due, latency) = line.split_once(' ')?;
            Some((due.parse().ok()?, latency.parse().ok()?))
        })
        .collect())
}

fn percentile(sorted: &[u32], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0)
}

/// Phase boundaries in seconds from the pattern's start.
fn phase_bounds(schedule: &[Phase]) -> Vec<(f64, f64)> {
    let mut start = 0.0;
    schedule
        .iter()
        .map(|p| {
            let bounds = (start, start + p.seconds);
            start += p.seconds;
            bounds
        })
        .collect()
}

/// BE's CPU limit in cores as the agent set it: the smaller of the quota and
/// the cpuset (either policy shows up here).
fn be_limit(sample: &Sample) -> f64 {
    let cpus = sample.be_cpuset_cpus as f64;
    sample.be_quota_cores.map_or(cpus, |q| q.min(cpus))
}

/// Reaction: from an LS step up to BE's limit covering half of the drop it
/// settles at in the second half of the phase. Steps that need no drop (less
/// than a tenth of a core) count as none.
fn reactions(schedule: &[Phase], samples: &[Sample]) -> Vec<f64> {
    let bounds = phase_bounds(schedule);
    let mut out = Vec::new();
    for i in 1..schedule.len() {
        if schedule[i].rate <= schedule[i - 1].rate {
            continue;
        }
        let (start, end) = bounds[i];
        let Some(before) = samples.iter().rev().find(|s| s.at <= start) else {
            continue;
        };
        let mut late: Vec<f64> = samples
            .iter()
            .filter(|s| s.at >= (start + end) / 2.0 && s.at < end)
            .map(be_limit)
            .collect();
        if late.is_empty() {
            continue;
        }
        late.sort_by(f64::total_cmp);
        let settled = late[late.len() / 2];
        let from = be_limit(before);
        if from - settled < 0.1 {
            continue;
        }
        let halfway = from - (from - settled) / 2.0;
        if let Some(hit) = samples
            .iter()
            .find(|s| s.at > start && s.at < end && be_limit(s) <= halfway)
        {
            out.push((hit.at - start) * 1000.0);
        }
    }
    out
}

/// Some threads' run-queue wait (`pick`: the LS service's or the
/// generator's) as a percentage of their run time between the first and
/// last schedstat readings in `[start, end)`.
fn wait_percent(
    samples: &[Sample],
    pick: fn(&Sample) -> Option<(u64, u64)>,
    start: f64,
    end: f64,
) -> Option<f64> {
    let mut inside = samples
        .iter()
        .filter(|s| s.at >= start && s.at < end)
        .filter_map(pick);
    let (run0, wait0) = inside.next()?;
    let (run1, wait1) = inside.next_back()?;
    let run = run1.checked_sub(run0)?;
    let wait = wait1.checked_sub(wait0)?;
    (run > 0).then(|| 100.0 * wait as f64 / run as f64)
}

#[allow(clippy::too_many_arguments)]
fn summarise(
    config: &Config,
    (kind, round): (RunKind, usize),
    schedule: &[Phase],
    samples: &[Sample],
    records: &[(u32, u32)],
    batch_log: &[(f64, u64)],
    run_start: Instant,
    pattern_start: Instant,
    koordlet_before: Option<(f64, u64)>,
    koordlet_after: Option<(f64, u64)>,
    load_summary: String,
) -> RunResult {
    let mut latencies: Vec<u32> = records.iter().map(|r| r.1).collect();
    latencies.sort_unstable();
    let phase_p99_ms = phase_bounds(schedule)
        .iter()
        .map(|(start, end)| {
            let mut in_phase: Vec<u32> = records
                .iter()
                .filter(|(due, _)| {
                    (*due as f64 / 1000.0) >= *start && (*due as f64 / 1000.0) < *end
                })
                .map(|r| r.1)
                .collect();
            in_phase.sort_unstable();
            percentile(&in_phase, 99.0)
        })
        .collect();

    let phase_wait_percent = phase_bounds(schedule)
        .iter()
        .map(|&(start, end)| wait_percent(samples, |s| s.ls_sched, start, end))
        .collect();
    let phase_gen_wait_percent = phase_bounds(schedule)
        .iter()
        .map(|&(start, end)| wait_percent(samples, |s| s.gen_sched, start, end))
        .collect();

    // CPU over the pattern: BE's share of what the others left idle.
    let length: f64 = schedule.iter().map(|p| p.seconds).sum();
    let inside: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= 0.0 && s.at <= length)
        .collect();
    let be_share_of_idle = match (inside.first(), inside.last()) {
        (Some(a), Some(b)) if b.at > a.at && b.total_ticks > a.total_ticks => {
            let seconds = b.at - a.at;
            let node_busy = config.ncpu as f64 * (b.busy_ticks - a.busy_ticks) as f64
                / (b.total_ticks - a.total_ticks) as f64
                * seconds;
            let be = (b.be_ns - a.be_ns) as f64 / 1e9;
            let idle_for_be = config.ncpu as f64 * seconds - (node_busy - be);
            (kind.with_batch() && idle_for_be > 0.0).then(|| be / idle_for_be)
        }
        _ => None,
    };
    let offset = pattern_start
        .saturating_duration_since(run_start)
        .as_secs_f64();
    let in_pattern: Vec<&(f64, u64)> = batch_log
        .iter()
        .filter(|(t, _)| *t >= offset && *t <= offset + length)
        .collect();
    let be_units_per_s = match (in_pattern.first(), in_pattern.last()) {
        (Some(a), Some(b)) if b.0 > a.0 => (b.1 - a.1) as f64 / (b.0 - a.0),
        _ => 0.0,
    };
    let (koordlet_cpu_percent, koordlet_rss) = match (koordlet_before, koordlet_after) {
        (Some((cpu0, _)), Some((cpu1, rss))) => (Some(100.0 * (cpu1 - cpu0) / length), Some(rss)),
        _ => (None, None),
    };
    RunResult {
        kind,
        round,
        latencies_us: latencies,
        phase_p99_ms,
        phase_wait_percent,
        phase_gen_wait_percent,
        be_units_per_s,
        be_share_of_idle,
        koordlet_cpu_percent,
        koordlet_rss,
        reactions_ms: if kind.policy().is_some() {
            reactions(schedule, samples)
        } else {
            Vec::new()
        },
        load_summary,
        be_tier_idle: None,
    }
}

/// Per 250 ms: the LS rate due, LS and BE cores, BE's limit, the window's
/// LS p99 and BE work units per second (the plots read this).
#[allow(clippy::too_many_arguments)]
fn write_timeseries(
    dir: &Path,
    config: &Config,
    schedule: &[Phase],
    samples: &[Sample],
    records: &[(u32, u32)],
    batch_log: &[(f64, u64)],
    run_start: Instant,
    pattern_start: Instant,
) -> Result<(), String> {
    let window = 0.25;
    let length: f64 = schedule.iter().map(|p| p.seconds).sum();
    let bounds = phase_bounds(schedule);
    let offset = pattern_start
        .saturating_duration_since(run_start)
        .as_secs_f64();
    let mut csv =
        String::from("t_s,ls_rate_due,ls_cores,be_cores,be_limit_cores,ls_p99_ms,be_units_per_s\n");
    let mut t = 0.0;
    while t < length {
        let at = |time: f64| samples.iter().rev().find(|s| s.at <= time);
        let rate = bounds
            .iter()
            .zip(schedule)
            .find(|((a, b), _)| t >= *a && t < *b)
            .map_or(0.0, |(_, p)| p.rate);
        let (ls_cores, be_cores, limit) = match (at(t), at(t + window)) {
            (Some(a), Some(b)) if b.at > a.at => {
                let span = (b.at - a.at) * 1e9;
                (
                    (b.ls_ns - a.ls_ns) as f64 / span,
                    (b.be_ns - a.be_ns) as f64 / span,
                    be_limit(b),
                )
            }
            _ => (0.0, 0.0, config.ncpu as f64),
        };
        let mut in_window: Vec<u32> = records
            .iter()
            .filter(|(due, _)| (*due as f64 / 1000.0) >= t && (*due as f64 / 1000.0) < t + window)
            .map(|r| r.1)
            .collect();
        in_window.sort_unstable();
        let p99 = percentile(&in_window, 99.0).map_or(String::new(), |v| format!("{v:.3}"));
        let units = |time: f64| {
            batch_log
                .iter()
                .rev()
                .find(|(s, _)| *s <= time + offset)
                .copied()
        };
        let be_units = match (units(t), units(t + window)) {
            (Some(a), Some(b)) if b.0 > a.0 => (b.1 - a.1) as f64 / (b.0 - a.0),
            _ => 0.0,
        };
        let _ = writeln!(
            csv,
            "{t:.2},{rate},{ls_cores:.3},{be_cores:.3},{limit:.3},{p99},{be_units:.1}"
        );
        t += window;
    }
    write_value(&dir.join("timeseries.csv"), &csv)
}

/// LS p99 of a run against the ls-alone run of the same round (or of any
/// round when that one is missing), in percent.
/// A phase's LS p99 against the same phase of the same round's ls-alone run.
fn phase_inflation_percent(results: &[RunResult], run: &RunResult, phase: usize) -> Option<f64> {
    let alone = results
        .iter()
        .filter(|r| r.kind == RunKind::LsAlone)
        .min_by_key(|r| usize::from(r.round != run.round))?;
    let alone_p99 = alone.phase_p99_ms.get(phase).copied().flatten()?;
    let p99 = run.phase_p99_ms.get(phase).copied().flatten()?;
    (alone_p99 > 0.0).then(|| 100.0 * (p99 / alone_p99 - 1.0))
}

fn inflation_percent(results: &[RunResult], run: &RunResult) -> Option<f64> {
    let alone = results
        .iter()
        .filter(|r| r.kind == RunKind::LsAlone)
        .min_by_key(|r| usize::from(r.round != run.round))?;
    let alone_p99 = percentile(&alone.latencies_us, 99.0)?;
    let p99 = percentile(&run.latencies_us, 99.0)?;
    (alone_p99 > 0.0).then(|| 100.0 * (p99 / alone_p99 - 1.0))
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}

fn or_dash(value: Option<f64>, show: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "-".to_string(), show)
}

/// Which runs ended with the besteffort tier idle (`cpu.idle` = 1): what
/// each agent made of the NodeSLO's BE CPU QoS.
fn idle_line(config: &Config, results: &[RunResult]) -> String {
    let mut idle = Vec::new();
    let mut not_idle = Vec::new();
    for r in results.iter().filter(|r| r.kind.with_batch()) {
        let name = run_label(r.kind, r.round, config.repeat);
        match r.be_tier_idle {
            Some(true) => idle.push(name),
            Some(false) => not_idle.push(name),
            None => {}
        }
    }
    let list = |names: &[String]| {
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    };
    let asked = if config.be_sched_idle {
        "asked for in the agents' NodeSLO (coreSched policy, BE schedIdle 1)"
    } else {
        "not asked for (--be-cpu-qos none)"
    };
    if idle.is_empty() && not_idle.is_empty() {
        return format!("BE tier cpu.idle {asked}; this kernel has no cpu.idle.");
    }
    format!(
        "BE tier cpu.idle {asked}; idle at the end of: {}; not idle: {}.",
        list(&idle),
        list(&not_idle)
    )
}

fn print_table(config: &Config, results: &[RunResult]) {
    println!();
    println!(
        "{:<21} {:>8} {:>8} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>13}",
        "run",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        "p99 infl",
        "p99@50%",
        "p99@90%",
        "wait@50%",
        "wait@90%",
        "gwait@50%",
        "gwait@90%",
        "BE units/s",
        "BE idle%",
        "agent CPU%",
        "agent MiB",
        "reaction ms"
    );
    for r in results {
        let p = |q| or_dash(percentile(&r.latencies_us, q), |v| format!("{v:.2}"));
        let phase_p99 = |i: usize| {
            or_dash(r.phase_p99_ms.get(i).copied().flatten(), |v| {
                format!("{v:.2}")
            })
        };
        let wait = |i: usize| {
            or_dash(r.phase_wait_percent.get(i).copied().flatten(), |v| {
                format!("{v:.1}%")
            })
        };
        let gen_wait = |i: usize| {
            or_dash(r.phase_gen_wait_percent.get(i).copied().flatten(), |v| {
                format!("{v:.1}%")
            })
        };
        let mut reactions = r.reactions_ms.clone();
        reactions.sort_by(f64::total_cmp);
        let reaction = if reactions.is_empty() {
            "-".to_string()
        } else {
            reactions
                .iter()
                .map(|v| format!("{v:.0}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        println!(
            "{:<21} {:>8} {:>8} {:>9} {:>9} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9.0} {:>9} {:>9} {:>8} {:>13}",
            run_label(r.kind, r.round, config.repeat),
            p(50.0),
            p(99.0),
            p(99.9),
            or_dash(inflation_percent(results, r), |v| format!("{v:+.1}%")),
            phase_p99(HALF_PHASE),
            phase_p99(NINETY_PHASE),
            wait(HALF_PHASE),
            wait(NINETY_PHASE),
            gen_wait(HALF_PHASE),
            gen_wait(NINETY_PHASE),
            r.be_units_per_s,
            or_dash(r.be_share_of_idle, |v| format!("{:.0}%", 100.0 * v)),
            or_dash(r.koordlet_cpu_percent, |v| format!("{v:.2}")),
            or_dash(
                r.koordlet_rss.map(|v| v as f64 / (1 << 20) as f64),
                |v| format!("{v:.1}")
            ),
            reaction,
        );
    }
    if config.repeat > 1 {
        print_medians(config, results);
    }
    println!();
    println!(
        "p99 infl: LS p99 against the ls-alone run of the same round; BE idle%: BE's CPU over the CPU the rest left idle during the pattern;"
    );
    println!(
        "wait@N%: the LS threads' run-queue wait over their CPU run time in that phase (schedstat, the latency loop's signal);"
    );
    println!(
        "gwait@N%: the same for the load generator's threads ({});",
        match config.loadgen {
            LoadgenPlacement::Root =>
                "in a cgroup beside kubepods, so BE's cpu.idle does not make way for them",
            LoadgenPlacement::LsPod => "in the LS pod, where BE's cpu.idle makes way for them",
        }
    );
    println!(
        "reaction: per LS step up, ms until BE's limit covered half of the drop it settled at (the two steps, in order of size)."
    );
    println!("100 % of the pattern = {}.", config.full_rate_basis);
    println!("{}", idle_line(config, results));
    println!(
        "Per-run files (latencies, timeseries.csv, koordlet inputs and log) are under {}",
        config.out.display()
    );
}

/// One line per run kind: medians over the rounds, with the inflation's range.
fn print_medians(config: &Config, results: &[RunResult]) {
    println!();
    println!("medians over {} rounds:", config.repeat);
    println!(
        "{:<21} {:>8} {:>16} {:>10} {:>11} {:>10} {:>9} {:>13}",
        "run",
        "p99 ms",
        "p99 infl (range)",
        "p99@50%",
        "infl@50%",
        "p99@90%",
        "BE idle%",
        "reaction ms"
    );
    let mut kinds: Vec<RunKind> = Vec::new();
    for r in results {
        if !kinds.contains(&r.kind) {
            kinds.push(r.kind);
        }
    }
    for kind in kinds {
        let runs: Vec<&RunResult> = results.iter().filter(|r| r.kind == kind).collect();
        let collect = |f: &dyn Fn(&RunResult) -> Option<f64>| -> Vec<f64> {
            runs.iter().filter_map(|r| f(r)).collect()
        };
        let inflations = collect(&|r| inflation_percent(results, r));
        let range = match (
            inflations.iter().copied().reduce(f64::min),
            inflations.iter().copied().reduce(f64::max),
        ) {
            (Some(low), Some(high)) if kind != RunKind::LsAlone => format!(
                "{:+.1}% ({:+.1}..{:+.1})",
                median(inflations.clone()).unwrap_or(0.0),
                low,
                high
            ),
            _ => "-".to_string(),
        };
        let reactions: Vec<f64> = runs.iter().flat_map(|r| r.reactions_ms.clone()).collect();
        let phase_p99 = |phase: usize| {
            or_dash(
                median(collect(&|r| r.phase_p99_ms.get(phase).copied().flatten())),
                |v| format!("{v:.2}"),
            )
        };
        let half_inflation = if kind == RunKind::LsAlone {
            "-".to_string()
        } else {
            or_dash(
                median(collect(&|r| {
                    phase_inflation_percent(results, r, HALF_PHASE)
                })),
                |v| format!("{v:+.1}%"),
            )
        };
        println!(
            "{:<21} {:>8} {:>16} {:>10} {:>11} {:>10} {:>9} {:>13}",
            kind.name(),
            or_dash(
                median(collect(&|r| percentile(&r.latencies_us, 99.0))),
                |v| format!("{v:.2}")
            ),
            range,
            phase_p99(HALF_PHASE),
            half_inflation,
            phase_p99(NINETY_PHASE),
            or_dash(median(collect(&|r| r.be_share_of_idle)), |v| format!(
                "{:.0}%",
                100.0 * v
            )),
            or_dash(median(reactions), |v| format!("{v:.0}")),
        );
    }
    if let Some(line) = noise_floor_line(results) {
        println!("{line}");
    }
}

/// How much ls-alone's own p99 moved between rounds: an inflation smaller
/// than that is within the machine's noise.
fn noise_floor_line(results: &[RunResult]) -> Option<String> {
    let alone: Vec<f64> = results
        .iter()
        .filter(|r| r.kind == RunKind::LsAlone)
        .filter_map(|r| percentile(&r.latencies_us, 99.0))
        .collect();
    let low = alone.iter().copied().reduce(f64::min)?;
    let high = alone.iter().copied().reduce(f64::max)?;
    (alone.len() >= 2 && low > 0.0).then(|| {
        format!(
            "noise floor: ls-alone's p99 ranged {low:.2}..{high:.2} ms over {} rounds, {:.0} % apart",
            alone.len(),
            100.0 * (high / low - 1.0)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_items_are_checked() {
        assert_eq!(parse_schedule("1:0,2.5:100").unwrap().len(), 2);
        assert!(parse_schedule("1").is_err());
        assert!(parse_schedule("0:10").is_err());
        assert!(parse_schedule("1:-1").is_err());
        assert!(parse_schedule("1:1e9").is_err());
    }

    #[test]
    fn the_probe_output_becomes_answers_per_second() {
        assert_eq!(
            parse_probe("answered 4000 seconds 5.000 errors 0\n"),
            Ok(800.0)
        );
        // A few errors (reconnects) are tolerated, many are not.
        assert!(parse_probe("answered 4000 seconds 5 errors 40").is_ok());
        assert!(parse_probe("answered 4000 seconds 5 errors 41").is_err());
        assert!(parse_probe("answered 4000 seconds 0 errors 0").is_err());
        assert!(parse_probe("answered x seconds 5 errors 0").is_err());
        assert!(parse_probe("").is_err());
    }

    fn config(be_sched_idle: bool) -> Config {
        Config {
            koordlet: None,
            upstream_koordlet: None,
            out: PathBuf::from("/nonexistent"),
            phase_seconds: 1.0,
            work_us: 2000,
            threshold: 65,
            latency_target: DEFAULT_LATENCY_TARGET,
            connections: 1,
            iterations_per_us: 1.0,
            ncpu: 2,
            self_exe: PathBuf::from("/nonexistent"),
            repeat: 1,
            full_rate: 100.0,
            full_rate_basis: String::new(),
            be_sched_idle,
            loadgen: LoadgenPlacement::Root,
        }
    }

    #[test]
    fn the_idle_line_names_what_each_agent_applied() {
        let mut ours = result(RunKind::KoordletCfsQuota, 1, 10);
        ours.be_tier_idle = Some(true);
        let mut theirs = result(RunKind::UpstreamCfsQuota, 1, 10);
        theirs.be_tier_idle = Some(false);
        // ls-alone runs no BE: it is not listed even with a reading.
        let mut alone = result(RunKind::LsAlone, 1, 10);
        alone.be_tier_idle = Some(false);
        let line = idle_line(&config(true), &[alone, ours, theirs]);
        assert!(line.contains("asked for in the agents' NodeSLO"), "{line}");
        assert!(
            line.contains("idle at the end of: koordlet-cfsquota; not idle: upstream-cfsquota."),
            "{line}"
        );
        let line = idle_line(&config(false), &[result(RunKind::NoAgent, 1, 10)]);
        assert_eq!(
            line,
            "BE tier cpu.idle not asked for (--be-cpu-qos none); this kernel has no cpu.idle."
        );
    }

    #[test]
    fn the_agents_nodeslo_file_asks_for_be_idle_only_when_told() {
        let dir = std::env::temp_dir().join(format!("koord-bench-slo-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        write_koordlet_inputs(&dir, "cfsQuota", &config(true), Some(25)).unwrap();
        let idle = fs::read_to_string(dir.join("nodeslo.yaml")).unwrap();
        write_koordlet_inputs(&dir, "cfsQuota", &config(false), None).unwrap();
        let plain = fs::read_to_string(dir.join("nodeslo.yaml")).unwrap();
        let _ = fs::remove_dir_all(&dir);
        assert!(
            idle.contains("cpuPolicy: coreSched") && idle.contains("schedIdle: 1"),
            "{idle}"
        );
        assert!(idle.contains("minBECPUPercent: 1"), "{idle}");
        assert!(!plain.contains("resourceQOSStrategy") && !plain.contains("cpuLatencyProtection"));
    }

    #[test]
    fn phase_inflation_compares_the_same_phase_of_the_same_round() {
        let mut alone1 = result(RunKind::LsAlone, 1, 20);
        alone1.phase_p99_ms = vec![None, Some(4.0), Some(30.0), None];
        let mut alone2 = result(RunKind::LsAlone, 2, 20);
        alone2.phase_p99_ms = vec![None, Some(5.0), Some(90.0), None];
        let mut agent = result(RunKind::KoordletCfsQuota, 2, 20);
        agent.phase_p99_ms = vec![None, Some(6.0), Some(45.0), None];
        let all = [alone1, alone2, agent];
        let near = |got: Option<f64>, want: f64| got.is_some_and(|v| (v - want).abs() < 1e-9);
        assert!(near(
            phase_inflation_percent(&all, &all[2], HALF_PHASE),
            20.0
        ));
        assert!(near(
            phase_inflation_percent(&all, &all[2], NINETY_PHASE),
            -50.0
        ));
        // A phase with no reading has no inflation.
        assert_eq!(phase_inflation_percent(&all, &all[2], 0), None);
    }

    #[test]
    fn the_noise_floor_is_ls_alone_spread_between_rounds() {
        let one = [result(RunKind::LsAlone, 1, 20)];
        assert_eq!(noise_floor_line(&one), None);
        let rounds = [
            result(RunKind::LsAlone, 1, 20),
            result(RunKind::NoAgent, 1, 90),
            result(RunKind::LsAlone, 2, 25),
        ];
        assert_eq!(
            noise_floor_line(&rounds).unwrap(),
            "noise floor: ls-alone's p99 ranged 20.00..25.00 ms over 2 rounds, 25 % apart"
        );
    }

    #[test]
    fn medians_take_the_middle() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    fn result(kind: RunKind, round: usize, p99_ms: u32) -> RunResult {
        RunResult {
            kind,
            round,
            latencies_us: vec![p99_ms * 1000],
            phase_p99_ms: Vec::new(),
            phase_wait_percent: Vec::new(),
            phase_gen_wait_percent: Vec::new(),
            be_units_per_s: 0.0,
            be_share_of_idle: None,
            koordlet_cpu_percent: None,
            koordlet_rss: None,
            reactions_ms: Vec::new(),
            load_summary: String::new(),
            be_tier_idle: None,
        }
    }

    #[test]
    fn inflation_is_against_the_same_rounds_ls_alone() {
        let results = vec![
            result(RunKind::LsAlone, 1, 10),
            result(RunKind::KoordletCfsQuota, 1, 11),
            result(RunKind::LsAlone, 2, 20),
            result(RunKind::KoordletCfsQuota, 2, 21),
            result(RunKind::KoordletCfsQuota, 3, 12),
        ];
        let infl = |i: usize| inflation_percent(&results, &results[i]).unwrap();
        assert!((infl(1) - 10.0).abs() < 1e-9);
        assert!((infl(3) - 5.0).abs() < 1e-9);
        // Round 3 has no ls-alone: another round's stands in.
        assert!(infl(4).is_finite());
        assert_eq!(inflation_percent(&results[1..2], &results[1]), None);
    }

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(cpu_count_of("0-3,6"), 5);
        assert_eq!(cpu_count_of("1"), 1);
        assert_eq!(cpu_count_of(""), 0);
        assert_eq!(cpu_count_of("3-1"), 0);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let sorted: Vec<u32> = (1..=100).map(|v| v * 1000).collect();
        assert_eq!(percentile(&sorted, 50.0), Some(50.0));
        assert_eq!(percentile(&sorted, 99.0), Some(99.0));
        assert_eq!(percentile(&sorted, 100.0), Some(100.0));
        assert_eq!(percentile(&[], 99.0), None);
    }

    fn sample(at: f64, quota: Option<f64>) -> Sample {
        Sample {
            at,
            ls_ns: 0,
            be_ns: 0,
            busy_ticks: 0,
            total_ticks: 0,
            be_quota_cores: quota,
            be_cpuset_cpus: 2,
            ls_sched: None,
            gen_sched: None,
        }
    }

    #[test]
    fn latency_loop_metrics_are_summarised() {
        let text = "# HELP x\nkoordlet_cpu_latency_guard_adjustments_total{node=\"n\",direction=\"hold\"} 3\nkoordlet_cpu_latency_guard_be_limit_cores{node=\"n\"} 0.1\nkoordlet_other 1\n";
        assert_eq!(
            latency_loop_summary(text),
            "adjustments_total[hold]=3 be_limit_cores=0.1"
        );
        assert_eq!(
            latency_loop_summary("koordlet_other 1\n"),
            "no koordlet_cpu_latency_guard_* metric"
        );
    }

    #[test]
    fn wait_percent_uses_the_phase_readings() {
        let mut samples: Vec<Sample> = (0..10).map(|i| sample(i as f64, None)).collect();
        samples[1].ls_sched = Some((1000, 100));
        samples[3].ls_sched = Some((3000, 400));
        samples[6].ls_sched = Some((9000, 900));
        // [0, 5): readings at 1 and 3: 300 / 2000.
        assert_eq!(wait_percent(&samples, |s| s.ls_sched, 0.0, 5.0), Some(15.0));
        // One reading only, or none: no figure.
        assert_eq!(wait_percent(&samples, |s| s.ls_sched, 5.0, 10.0), None);
        assert_eq!(wait_percent(&samples, |s| s.ls_sched, 7.0, 10.0), None);
        // The generator's readings are picked apart from the LS ones.
        samples[2].gen_sched = Some((100, 1000));
        samples[4].gen_sched = Some((300, 2500));
        assert_eq!(
            wait_percent(&samples, |s| s.gen_sched, 0.0, 5.0),
            Some(750.0)
        );
        // Counters that went back (threads gone): no figure.
        samples[3].ls_sched = Some((500, 50));
        assert_eq!(wait_percent(&samples, |s| s.ls_sched, 0.0, 5.0), None);
    }

    #[test]
    fn reaction_is_the_time_to_half_of_the_settled_drop() {
        let schedule = [
            Phase {
                seconds: 1.0,
                rate: 0.0,
            },
            Phase {
                seconds: 2.0,
                rate: 100.0,
            },
        ];
        // 1.8 cores before the step, 0.2 settled from 1.3 s on: halfway is 1.0.
        let samples: Vec<Sample> = (0..300)
            .map(|i| {
                let at = i as f64 / 100.0;
                let quota = if at < 1.15 {
                    1.8
                } else if at < 1.3 {
                    1.2
                } else {
                    0.2
                };
                sample(at, Some(quota))
            })
            .collect();
        let got = reactions(&schedule, &samples);
        assert_eq!(got.len(), 1);
        assert!((got[0] - 300.0).abs() < 11.0, "{got:?}");
        // No drop needed: no reaction counted.
        let flat: Vec<Sample> = (0..300).map(|i| sample(i as f64 / 100.0, None)).collect();
        assert!(reactions(&schedule, &flat).is_empty());
    }
}
