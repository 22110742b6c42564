//! The CPU reaction path (ours; upstream has none): wakes `cpusuppress`
//! between its 1 s ticks when the LS tiers' CPU usage steps up, so BE is
//! suppressed within tens of milliseconds instead of up to two seconds
//! (one collection interval plus one suppress interval).
//!
//! - Event sources: a fast sampler reads `cpuacct.usage` of the kubepods
//!   root and of `kubepods/besteffort` (two small reads per sample; LS =
//!   kubepods − besteffort, so Guaranteed and Burstable pods together), and,
//!   where the kernel accepts it, a node PSI trigger on `<proc>/pressure/cpu`
//!   (`some <stall> <window>`, polled for `POLLPRI`) that takes a sample at
//!   once instead of waiting for the timer. [`detect`] says which is usable;
//!   it is shown as `cpuReaction` by `koordlet capabilities`.
//! - Hysteresis ([`observe`], pure): a mean of the last `step_samples`
//!   samples at least one step above the LS floor raises the floor to that
//!   mean at once and wakes `cpusuppress`; `restore_hold` after the last
//!   raise the floor falls to the mean of the last `restore_samples`
//!   samples, and falling never wakes: the 1 s tick restores BE, by at most
//!   10% of the node per round.
//! - `cpusuppress` counts LS usage as at least the floor
//!   ([`QosSnapshot::ls_floor`](super::QosSnapshot)), on woken and ticked
//!   rounds alike, so a tick fed by older metrics does not undo the reaction.
//!
//! Metrics: `koordlet_cpu_reaction_wakeups_total{source}` and
//! `koordlet_cpu_reaction_latency_seconds` (step detected → the woken round
//! has written its files).

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use koord_common::MetricsRegistry;
use koord_common::sync::MutexExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::system::cgroup::{CgroupLayout, CgroupResource, QosTier};
use koord_common::units::MilliCpu;

/// PSI trigger: 100 ms of "some" stall within a 1 s window. The kernel
/// accepts windows of 500 ms to 10 s and a stall no longer than the window.
pub const PSI_STALL: Duration = Duration::from_millis(100);
pub const PSI_WINDOW: Duration = Duration::from_secs(1);
const PSI_WINDOW_MIN: Duration = Duration::from_millis(500);
const PSI_WINDOW_MAX: Duration = Duration::from_secs(10);

/// The shortest interval a usage sample is computed over (CPU time is
/// accounted at scheduler ticks, every 1–10 ms).
const MIN_SAMPLE_WINDOW: Duration = Duration::from_millis(5);

/// A floor older than this is ignored by `cpusuppress` (the sampler is
/// gone or stuck): a stale floor must not keep BE suppressed.
pub const LS_FLOOR_MAX_AGE: Duration = Duration::from_secs(2);

/// Which event source the reaction path may use (`--cpu-reaction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReactionMode {
    /// PSI trigger plus the cpuacct sampler when the kernel accepts
    /// triggers, else the sampler alone.
    #[default]
    Auto,
    /// Only with a PSI trigger (off when the kernel refuses it).
    Psi,
    /// The cpuacct sampler alone.
    Cpuacct,
    Off,
}

/// Flags of the reaction path.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ReactionArgs {
    /// (ours) Wake cpusuppress between ticks on an LS load step: auto, psi,
    /// cpuacct or off. The sampler costs two small cgroup file reads per
    /// sample (see koordlet/docs/qos.md).
    #[arg(long = "cpu-reaction", value_enum, default_value_t = ReactionMode::Auto)]
    pub mode: ReactionMode,
    /// (ours) Period of the LS cpuacct sampler.
    #[arg(long = "cpu-reaction-sample-interval-ms", default_value_t = 20, value_parser = clap::value_parser!(u64).range(5..=1000), value_name = "MS")]
    pub sample_interval_ms: u64,
    /// (ours) LS usage rise, in percent of the node's CPUs, that counts as a
    /// load step.
    #[arg(long = "cpu-reaction-step-percent", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100), value_name = "PERCENT")]
    pub step_percent: u64,
    /// (ours) Samples averaged to detect a step (1: every sample alone).
    #[arg(long = "cpu-reaction-step-samples", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50), value_name = "COUNT")]
    pub step_samples: u32,
    /// (ours) Samples whose mean the LS floor falls back to after the hold.
    #[arg(long = "cpu-reaction-restore-samples", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000), value_name = "COUNT")]
    pub restore_samples: u32,
    /// (ours) Minimum time the LS floor holds after it was raised.
    #[arg(long = "cpu-reaction-restore-hold-ms", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=600_000), value_name = "MS")]
    pub restore_hold_ms: u64,
}

impl Default for ReactionArgs {
    fn default() -> Self {
        Self {
            mode: ReactionMode::Auto,
            sample_interval_ms: 20,
            step_percent: 10,
            step_samples: 3,
            restore_samples: 50,
            restore_hold_ms: 1000,
        }
    }
}

impl ReactionArgs {
    pub fn sample_interval(&self) -> Duration {
        Duration::from_millis(self.sample_interval_ms)
    }

    /// Hysteresis parameters for a node of `capacity` CPU.
    pub fn hysteresis(&self, capacity: MilliCpu) -> Hysteresis {
        Hysteresis {
            // At least 50m: below that a 20 ms sample is tick-granularity noise.
            step: MilliCpu((capacity.0.max(0) * self.step_percent as i64 / 100).max(50)),
            step_samples: self.step_samples,
            restore_samples: self.restore_samples,
            restore_hold: Duration::from_millis(self.restore_hold_ms),
        }
    }
}

// ---------------------------------------------------------------------------
// Pure parts
// ---------------------------------------------------------------------------

/// The trigger line for `<proc>/pressure/cpu`, checked against the kernel's bounds.
pub fn psi_trigger_line(stall: Duration, window: Duration) -> Result<String, String> {
    if !(PSI_WINDOW_MIN..=PSI_WINDOW_MAX).contains(&window) {
        return Err(format!(
            "PSI window {window:?} outside the kernel's {PSI_WINDOW_MIN:?}..={PSI_WINDOW_MAX:?}"
        ));
    }
    if stall.is_zero() || stall > window {
        return Err(format!(
            "PSI stall {stall:?} must be above zero and at most the window {window:?}"
        ));
    }
    Ok(format!("some {} {}", stall.as_micros(), window.as_micros()))
}

/// Parses a `cpuacct.usage` value (nanoseconds); bounded to what fits an i64.
pub fn parse_cpuacct_usage(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.len() > 20 {
        return Err(format!("not a cpuacct.usage value: {trimmed:?}"));
    }
    let value: u64 = trimmed
        .parse()
        .map_err(|err| format!("not a cpuacct.usage value {trimmed:?}: {err}"))?;
    if value > i64::MAX as u64 {
        return Err(format!("cpuacct.usage {value} out of range"));
    }
    Ok(value)
}

/// One reading of the two counters, in nanoseconds of CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuacctReading {
    /// Monotonic time of the reading since the sampler started.
    pub at: Duration,
    pub kubepods_ns: u64,
    pub besteffort_ns: u64,
}

/// LS usage between two readings; `None` when the interval is empty or a
/// counter went backwards (a cgroup recreated).
pub fn ls_usage(previous: &CpuacctReading, current: &CpuacctReading) -> Option<MilliCpu> {
    let elapsed = current.at.checked_sub(previous.at)?.as_nanos();
    if elapsed == 0 {
        return None;
    }
    let all = current.kubepods_ns.checked_sub(previous.kubepods_ns)?;
    let be = current.besteffort_ns.checked_sub(previous.besteffort_ns)?;
    // BE is part of kubepods; a BE delta larger than the whole (reads
    // straddling an update) counts as no LS usage rather than negative.
    let ls = all.saturating_sub(be) as u128;
    i64::try_from(ls * 1000 / elapsed).ok().map(MilliCpu)
}

/// Hysteresis parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hysteresis {
    /// A short-window mean this far above the floor is a step.
    pub step: MilliCpu,
    /// Samples in the short window that detects a step (1 = each sample alone).
    pub step_samples: u32,
    /// Samples in the long window whose mean the floor falls back to.
    pub restore_samples: u32,
    /// Minimum time since the floor was last raised before it falls.
    pub restore_hold: Duration,
}

impl Hysteresis {
    /// Samples kept: enough for both windows.
    fn window(&self) -> usize {
        self.restore_samples.max(self.step_samples).max(1) as usize
    }
}

/// The LS floor the sampler holds, with the samples behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloorState {
    pub floor: MilliCpu,
    /// When the floor was last raised (monotonic, since the sampler started).
    pub raised_at: Duration,
    /// The latest samples in milli-CPU, oldest first, at most
    /// [`Hysteresis::window`] of them.
    recent: VecDeque<i64>,
}

impl FloorState {
    fn mean_of_last(&self, count: usize) -> MilliCpu {
        let count = count.clamp(1, self.recent.len().max(1));
        let sum: i64 = self.recent.iter().rev().take(count).sum();
        MilliCpu(sum / count as i64)
    }
}

/// What one sample did to the floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorChange {
    /// The first sample: the floor starts there, nobody is woken.
    Started,
    /// A load step: suppress now.
    Raised {
        from: MilliCpu,
        to: MilliCpu,
    },
    Held,
    /// The long-window mean fell below the floor after the hold time: BE
    /// may be restored (by the tick).
    Lowered {
        from: MilliCpu,
        to: MilliCpu,
    },
}

/// Feeds one LS usage sample (at monotonic `now`) to the hysteresis.
///
/// A step is the mean of the last `step_samples` samples at least `step`
/// above the floor: the floor rises to that mean at once. Averaging a few
/// samples keeps one noisy 20 ms sample from lifting the floor above what
/// LS really uses (which would hold BE below upstream's formula for as
/// long as the noise lasts); a real step still shows within a few samples.
/// The floor falls to the long window's mean once the hold time since the
/// last raise has passed and the window is full, so in a steady state it
/// sits at LS's mean usage, and the band between that mean and a step
/// above it is the hysteresis.
pub fn observe(
    state: Option<FloorState>,
    sample: MilliCpu,
    now: Duration,
    params: &Hysteresis,
) -> (FloorState, FloorChange) {
    let sample = sample.0.max(0);
    let window = params.window();
    let Some(mut state) = state else {
        let mut recent = VecDeque::with_capacity(window);
        recent.push_back(sample);
        return (
            FloorState {
                floor: MilliCpu(sample),
                raised_at: now,
                recent,
            },
            FloorChange::Started,
        );
    };
    while state.recent.len() >= window {
        state.recent.pop_front();
    }
    state.recent.push_back(sample);
    let short_mean = state.mean_of_last(params.step_samples as usize);
    let from = state.floor;
    if short_mean.0 >= from.0.saturating_add(params.step.0) {
        state.floor = short_mean;
        state.raised_at = now;
        return (
            state,
            FloorChange::Raised {
                from,
                to: short_mean,
            },
        );
    }
    let held_long_enough = now.saturating_sub(state.raised_at) >= params.restore_hold;
    let window_full = state.recent.len() >= params.restore_samples.max(1) as usize;
    if held_long_enough && window_full {
        let long_mean = state.mean_of_last(params.restore_samples as usize);
        if long_mean < from {
            state.floor = long_mean;
            return (
                state,
                FloorChange::Lowered {
                    from,
                    to: long_mean,
                },
            );
        }
    }
    (state, FloorChange::Held)
}

/// The LS usage `cpusuppress` must count at least, as published by the sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LsFloor {
    pub cpu: MilliCpu,
    /// The latest sample behind it (the floor is fresh while the sampler runs).
    pub sampled_at: SystemTime,
}

impl LsFloor {
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        now.duration_since(self.sampled_at).unwrap_or_default() <= LS_FLOOR_MAX_AGE
    }
}

/// What woke the runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeSource {
    /// A PSI trigger fired and the sample it caused showed a step.
    Psi,
    /// The sampler's timer sample showed a step.
    Cpuacct,
}

impl WakeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            WakeSource::Psi => "psi",
            WakeSource::Cpuacct => "cpuacct",
        }
    }
}

/// A request to run `cpusuppress` now.
#[derive(Debug, Clone, Copy)]
pub struct Wakeup {
    pub source: WakeSource,
    /// When the step was seen (for the latency histogram).
    pub detected_at: Instant,
    pub floor: MilliCpu,
}

/// Which mechanism is in use, and why (`koordlet capabilities` row `cpuReaction`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReactionCapability {
    /// `psi+cpuacct`, `cpuacct` or `off`.
    pub mechanism: String,
    /// Whether the kernel accepted a PSI trigger (`None`: not tried).
    pub psi_trigger: Option<bool>,
    pub detail: String,
}

/// Chooses the mechanism from the mode and what the probes found (pure).
pub fn choose_mechanism(
    mode: ReactionMode,
    psi: Option<&Result<(), String>>,
    cpuacct: &Result<(), String>,
    interval: Duration,
) -> ReactionCapability {
    let psi_trigger = psi.map(Result::is_ok);
    let psi_text = match psi {
        None => "PSI trigger not tried".to_string(),
        Some(Ok(())) => "PSI trigger accepted".to_string(),
        Some(Err(err)) => format!("PSI trigger refused: {err}"),
    };
    let sampler = format!("cpuacct sampler every {}ms", interval.as_millis());
    let (mechanism, detail) = match (mode, psi, cpuacct) {
        (ReactionMode::Off, _, _) => ("off", "switched off by --cpu-reaction=off".to_string()),
        (_, _, Err(err)) => (
            "off",
            format!("cannot sample LS CPU usage: {err}; {psi_text}"),
        ),
        (ReactionMode::Auto | ReactionMode::Psi, Some(Ok(())), Ok(())) => {
            ("psi+cpuacct", format!("{psi_text}; {sampler}"))
        }
        (ReactionMode::Psi, _, Ok(())) => (
            "off",
            format!("{psi_text}, and --cpu-reaction=psi does not fall back"),
        ),
        (ReactionMode::Auto, _, Ok(())) => ("cpuacct", format!("{psi_text}; {sampler}")),
        (ReactionMode::Cpuacct, _, Ok(())) => ("cpuacct", sampler),
    };
    ReactionCapability {
        mechanism: mechanism.to_string(),
        psi_trigger,
        detail,
    }
}

// ---------------------------------------------------------------------------
// Shell: probes, sampler thread, metrics
// ---------------------------------------------------------------------------

/// An armed PSI trigger; the kernel drops it when the file is closed.
pub struct PsiTrigger {
    file: File,
}

impl PsiTrigger {
    /// Opens `<proc_root>/pressure/cpu` read-write, non-blocking, and writes
    /// the trigger. Every failure (missing file, EINVAL, EPERM) is an `Err`
    /// with the path and the kernel's answer.
    pub fn arm(proc_root: &Path, stall: Duration, window: Duration) -> Result<Self, String> {
        let line = psi_trigger_line(stall, window)?;
        let path = proc_root.join("pressure/cpu");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&path)
            .map_err(|err| format!("cannot open {}: {err}", path.display()))?;
        if !file
            .metadata()
            .map(|m| m.file_type().is_file())
            .unwrap_or(false)
        {
            return Err(format!("{} is not a regular file", path.display()));
        }
        // The kernel wants the whole trigger in one write, NUL-terminated.
        let mut bytes = line.clone().into_bytes();
        bytes.push(0);
        file.write_all(&bytes)
            .map_err(|err| format!("write {line:?} to {}: {err}", path.display()))?;
        Ok(Self { file })
    }

    /// Waits up to `timeout` for the trigger; `Ok(true)` when it fired.
    pub fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let mut fds = [PollFd::new(&self.file, PollFlags::PRI)];
        let timeout = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: timeout.subsec_nanos() as i64,
        };
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => Ok(false),
            Ok(_) => {
                let revents = fds[0].revents();
                if revents.contains(PollFlags::ERR) {
                    return Err(std::io::Error::other("PSI trigger file reported POLLERR"));
                }
                Ok(revents.contains(PollFlags::PRI))
            }
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(err) => Err(err.into()),
        }
    }
}

/// Reads the two counters the sampler needs; the files stay open and are
/// re-read with `pread` (one syscall each per sample).
pub struct CpuacctSource {
    kubepods: (PathBuf, File),
    besteffort: (PathBuf, File),
}

impl CpuacctSource {
    pub fn open(layout: &CgroupLayout) -> Result<Self, String> {
        let open = |tier| -> Result<(PathBuf, File), String> {
            let path = layout
                .file_path(layout.qos_dir(tier), CgroupResource::CpuacctUsage)
                .map_err(|err| err.to_string())?;
            if path.file_name().and_then(|n| n.to_str()) != Some("cpuacct.usage") {
                return Err(format!(
                    "{} is not a v1 cpuacct.usage file (this build samples cgroup v1 only)",
                    path.display()
                ));
            }
            let file = File::open(&path)
                .map_err(|err| format!("cannot open {}: {err}", path.display()))?;
            Ok((path, file))
        };
        let mut source = Self {
            kubepods: open(QosTier::Guaranteed)?,
            besteffort: open(QosTier::BestEffort)?,
        };
        source.read(Duration::ZERO)?;
        Ok(source)
    }

    /// One positioned read (the value is far shorter than the buffer, and
    /// cgroup files return it whole), so one syscall per counter.
    fn read_one((path, file): &(PathBuf, File)) -> Result<u64, String> {
        let mut buffer = [0u8; 32];
        let read = file
            .read_at(&mut buffer, 0)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        let text = std::str::from_utf8(&buffer[..read])
            .map_err(|_| format!("{}: not text", path.display()))?;
        if read == buffer.len() {
            return Err(format!("{}: value too long", path.display()));
        }
        parse_cpuacct_usage(text).map_err(|err| format!("{}: {err}", path.display()))
    }

    /// Both counters, labelled with monotonic time `at`.
    pub fn read(&mut self, at: Duration) -> Result<CpuacctReading, String> {
        // BE first: a BE update between the two reads then only makes LS
        // look smaller, never larger.
        let besteffort_ns = Self::read_one(&self.besteffort)?;
        let kubepods_ns = Self::read_one(&self.kubepods)?;
        Ok(CpuacctReading {
            at,
            kubepods_ns,
            besteffort_ns,
        })
    }
}

/// Probes the node: tries a PSI trigger (unless the mode excludes it) and
/// the LS counters. Blocking file I/O.
pub fn detect(proc_root: &Path, layout: &CgroupLayout, args: &ReactionArgs) -> ReactionCapability {
    let cpuacct = CpuacctSource::open(layout).map(|_| ());
    let psi = matches!(args.mode, ReactionMode::Auto | ReactionMode::Psi)
        .then(|| PsiTrigger::arm(proc_root, PSI_STALL, PSI_WINDOW).map(|_| ()));
    choose_mechanism(args.mode, psi.as_ref(), &cpuacct, args.sample_interval())
}

/// How often a disarmed sampler looks whether it is armed again.
const DISARMED_POLL: Duration = Duration::from_millis(500);

/// The floor the sampler publishes and the runner reads, and whether the
/// runner wants samples at all.
#[derive(Clone)]
pub struct SharedFloor {
    floor: Arc<Mutex<Option<LsFloor>>>,
    armed: Arc<AtomicBool>,
}

impl Default for SharedFloor {
    /// Armed until the runner's first round says otherwise.
    fn default() -> Self {
        Self {
            floor: Arc::default(),
            armed: Arc::new(AtomicBool::new(true)),
        }
    }
}

impl SharedFloor {
    pub fn get(&self) -> Option<LsFloor> {
        *self.floor.lock_or_recover()
    }

    pub fn set(&self, floor: LsFloor) {
        *self.floor.lock_or_recover() = Some(floor);
    }

    /// Whether the sampler samples at its period (else it checks twice a
    /// second and costs next to nothing).
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Relaxed)
    }

    pub fn set_armed(&self, armed: bool) {
        self.armed.store(armed, Ordering::Relaxed);
    }
}

/// What the runner thread needs from the reaction path.
pub struct ReactionLink {
    pub wakeups: Receiver<Wakeup>,
    pub floor: SharedFloor,
    pub metrics: ReactionMetrics,
}

/// `koordlet_cpu_reaction_wakeups_total{source}`,
/// `koordlet_cpu_reaction_latency_seconds` and
/// `koordlet_cpu_reaction_samples_total`.
#[derive(Clone)]
pub struct ReactionMetrics {
    wakeups: Family<Vec<(&'static str, &'static str)>, Counter>,
    latency: Histogram,
    samples: Counter,
}

impl Default for ReactionMetrics {
    fn default() -> Self {
        Self {
            wakeups: Family::default(),
            // 1 ms .. ~4 s.
            latency: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                0.001, 2.0, 13,
            )),
            samples: Counter::default(),
        }
    }
}

impl ReactionMetrics {
    pub fn register(registry: &MetricsRegistry) -> Self {
        let metrics = Self::default();
        for source in [WakeSource::Psi, WakeSource::Cpuacct] {
            metrics
                .wakeups
                .get_or_create(&vec![("source", source.as_str())])
                .inc_by(0);
        }
        let m = metrics.clone();
        registry.register_component(move |r| {
            r.register(
                "cpu_reaction_wakeups",
                "cpusuppress rounds run between ticks because the LS tiers' CPU usage stepped up, by event source",
                m.wakeups,
            );
            r.register(
                "cpu_reaction_latency_seconds",
                "time from an LS CPU step being detected to the woken cpusuppress round having written its files",
                m.latency,
            );
            r.register(
                "cpu_reaction_samples",
                "LS CPU usage samples taken by the reaction sampler",
                m.samples,
            );
        });
        metrics
    }

    pub fn record_wakeup(&self, source: WakeSource, latency: Duration) {
        self.wakeups
            .get_or_create(&vec![("source", source.as_str())])
            .inc();
        self.latency.observe(latency.as_secs_f64());
    }

    /// Wakeups counted for `source` (tests).
    pub fn wakeups(&self, source: WakeSource) -> u64 {
        self.wakeups
            .get_or_create(&vec![("source", source.as_str())])
            .get()
    }
}

/// Starts the sampler thread for `capability` (none when it is `off`);
/// returns the runner's end. The thread ends with `shutdown` or when the
/// runner's end is dropped.
pub fn spawn_sampler(
    capability: &ReactionCapability,
    args: &ReactionArgs,
    proc_root: &Path,
    layout: &CgroupLayout,
    capacity: MilliCpu,
    metrics: ReactionMetrics,
    shutdown: koord_common::Shutdown,
) -> Result<Option<ReactionLink>, String> {
    if capability.mechanism == "off" {
        return Ok(None);
    }
    let mut source = CpuacctSource::open(layout)?;
    let psi = if capability.mechanism == "psi+cpuacct" {
        Some(PsiTrigger::arm(proc_root, PSI_STALL, PSI_WINDOW)?)
    } else {
        None
    };
    let (sender, receiver) = std::sync::mpsc::channel();
    let floor = SharedFloor::default();
    let published = floor.clone();
    let interval = args.sample_interval();
    let params = args.hysteresis(capacity);
    let sampler_metrics = metrics.clone();
    std::thread::Builder::new()
        .name("cpu-reaction".to_string())
        .spawn(move || {
            sample_loop(
                &mut source,
                psi.as_ref(),
                interval,
                &params,
                &published,
                &sender,
                &sampler_metrics,
                &shutdown,
            )
        })
        .map_err(|err| format!("cannot start the cpu-reaction thread: {err}"))?;
    Ok(Some(ReactionLink {
        wakeups: receiver,
        floor,
        metrics,
    }))
}

#[allow(clippy::too_many_arguments)]
fn sample_loop(
    source: &mut CpuacctSource,
    psi: Option<&PsiTrigger>,
    interval: Duration,
    params: &Hysteresis,
    floor: &SharedFloor,
    wakeups: &Sender<Wakeup>,
    metrics: &ReactionMetrics,
    shutdown: &koord_common::Shutdown,
) {
    let started = Instant::now();
    let mut previous: Option<CpuacctReading> = None;
    let mut state: Option<FloorState> = None;
    let mut psi = psi;
    let mut failures = 0u32;
    while !shutdown.is_triggered() {
        if !floor.is_armed() {
            // Nothing to suppress: start afresh when armed again, so no
            // sample spans the idle time.
            previous = None;
            state = None;
            std::thread::sleep(DISARMED_POLL);
            continue;
        }
        let fired = match psi {
            Some(trigger) => match trigger.wait(interval) {
                Ok(fired) => fired,
                Err(err) => {
                    tracing::warn!("PSI trigger failed, sampling on the timer only: {err}");
                    psi = None;
                    false
                }
            },
            None => {
                std::thread::sleep(interval);
                false
            }
        };
        if fired
            && let Some(prev) = previous
            && let Some(short) =
                MIN_SAMPLE_WINDOW.checked_sub(started.elapsed().saturating_sub(prev.at))
        {
            // A trigger right after a timer sample: widen the window so the
            // scheduler tick's accounting granularity does not dominate it.
            std::thread::sleep(short);
        }
        let at = started.elapsed();
        let reading = match source.read(at) {
            Ok(reading) => reading,
            Err(err) => {
                failures += 1;
                // Logged once per 500 failures: the tier may be briefly gone.
                if failures % 500 == 1 {
                    tracing::warn!("cpu-reaction sample failed ({failures} so far): {err}");
                }
                previous = None;
                continue;
            }
        };
        metrics.samples.inc();
        let Some(usage) = previous.and_then(|prev| ls_usage(&prev, &reading)) else {
            previous = Some(reading);
            continue;
        };
        previous = Some(reading);
        let (next, change) = observe(state.take(), usage, at, params);
        floor.set(LsFloor {
            cpu: next.floor,
            sampled_at: SystemTime::now(),
        });
        state = Some(next);
        match change {
            FloorChange::Raised { from, to } => {
                let wake = Wakeup {
                    source: if fired {
                        WakeSource::Psi
                    } else {
                        WakeSource::Cpuacct
                    },
                    detected_at: Instant::now(),
                    floor: to,
                };
                tracing::debug!(
                    from = from.0,
                    to = to.0,
                    source = wake.source.as_str(),
                    "LS CPU step"
                );
                if wakeups.send(wake).is_err() {
                    return;
                }
            }
            FloorChange::Lowered { from, to } => {
                tracing::debug!(from = from.0, to = to.0, "LS CPU floor lowered");
            }
            FloorChange::Started | FloorChange::Held => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::cgroup::{CgroupDriver, CgroupVersion};
    use koord_common::testing::TempDir;

    #[test]
    fn trigger_lines_follow_the_kernel_bounds() {
        let ms = Duration::from_millis;
        let cases = [
            (ms(100), ms(1000), Ok("some 100000 1000000")),
            (ms(500), ms(500), Ok("some 500000 500000")),
            (ms(1), ms(10_000), Ok("some 1000 10000000")),
            (ms(100), ms(499), Err("outside")),
            (ms(100), ms(10_001), Err("outside")),
            (ms(0), ms(1000), Err("above zero")),
            (ms(1001), ms(1000), Err("at most the window")),
        ];
        for (stall, window, expected) in cases {
            match (psi_trigger_line(stall, window), expected) {
                (Ok(line), Ok(want)) => assert_eq!(line, want),
                (Err(err), Err(want)) => assert!(err.contains(want), "{err}"),
                (got, want) => panic!("{stall:?}/{window:?}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn cpuacct_values_are_parsed_and_bounded() {
        assert_eq!(parse_cpuacct_usage("12345\n"), Ok(12345));
        assert_eq!(parse_cpuacct_usage(" 0 "), Ok(0));
        for bad in [
            "",
            "  \n",
            "-1",
            "12a",
            "1.5",
            "99999999999999999999",
            "9223372036854775808",
        ] {
            assert!(parse_cpuacct_usage(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            parse_cpuacct_usage("9223372036854775807"),
            Ok(i64::MAX as u64)
        );
    }

    #[test]
    fn ls_usage_is_kubepods_minus_besteffort_over_the_interval() {
        let reading = |ms: u64, all: u64, be: u64| CpuacctReading {
            at: Duration::from_millis(ms),
            kubepods_ns: all,
            besteffort_ns: be,
        };
        let cases = [
            // 20 ms: 20 ms of kubepods CPU, 5 of it BE → 750m LS.
            (
                reading(0, 0, 0),
                reading(20, 20_000_000, 5_000_000),
                Some(750),
            ),
            // Two full CPUs of LS.
            (reading(0, 0, 0), reading(10, 20_000_000, 0), Some(2000)),
            // BE read after an update: never negative.
            (reading(0, 0, 0), reading(10, 1_000_000, 2_000_000), Some(0)),
            // No time passed.
            (reading(5, 0, 0), reading(5, 1, 0), None),
            // Time going backwards.
            (reading(6, 0, 0), reading(5, 1, 0), None),
            // Counter reset (cgroup recreated).
            (reading(0, 10, 0), reading(20, 5, 0), None),
            (reading(0, 10, 10), reading(20, 20, 5), None),
        ];
        for (previous, current, expected) in cases {
            assert_eq!(
                ls_usage(&previous, &current),
                expected.map(MilliCpu),
                "{previous:?} -> {current:?}"
            );
        }
    }

    fn params() -> Hysteresis {
        Hysteresis {
            step: MilliCpu(200),
            step_samples: 1,
            restore_samples: 3,
            restore_hold: Duration::from_millis(100),
        }
    }

    /// Feeds `(time ms, sample milli, expected change, floor after)` rows.
    fn run_rows(params: &Hysteresis, rows: &[(u64, i64, FloorChange, i64)]) -> FloorState {
        let mut state = None;
        for &(at, sample, change, floor) in rows {
            let (next, got) = observe(state, MilliCpu(sample), Duration::from_millis(at), params);
            assert_eq!((got, next.floor), (change, MilliCpu(floor)), "at {at} ms");
            state = Some(next);
        }
        state.expect("rows")
    }

    fn raised(from: i64, to: i64) -> FloorChange {
        FloorChange::Raised {
            from: MilliCpu(from),
            to: MilliCpu(to),
        }
    }

    fn lowered(from: i64, to: i64) -> FloorChange {
        FloorChange::Lowered {
            from: MilliCpu(from),
            to: MilliCpu(to),
        }
    }

    #[test]
    fn hysteresis_rises_at_once_and_falls_to_the_long_mean_after_the_hold() {
        use FloorChange::{Held, Started};
        run_rows(
            &params(),
            &[
                (0, 100, Started, 100),
                // Below a step: held, nobody woken.
                (20, 299, Held, 100),
                (40, 300, raised(100, 300), 300),
                (60, 1200, raised(300, 1200), 1200),
                // Noise below the floor within the hold time (100 ms after 60).
                (80, 1100, Held, 1200),
                (100, 1001, Held, 1200),
                // Held long enough, window full: the floor falls to the mean
                // of the last three samples, (1001 + 0 + 0) / 3.
                (120, 0, Held, 1200),
                (160, 0, lowered(1200, 333), 333),
                // The floor follows the long mean down, (0 + 0 + 500) / 3 ...
                (180, 500, lowered(333, 166), 166),
                // ... and a step above it raises it again.
                (200, 400, raised(166, 400), 400),
                (220, 300, Held, 400),
                // Negative samples are clamped: (400 + 300 + 0) / 3.
                (300, -50, lowered(400, 233), 233),
            ],
        );
    }

    #[test]
    fn hysteresis_waits_for_the_hold_time_and_a_full_window() {
        let ms = Duration::from_millis;
        let params = Hysteresis {
            restore_hold: ms(1000),
            ..params()
        };
        let mut state = Some(observe(None, MilliCpu(1000), ms(0), &params).0);
        for at in [10, 20, 30, 40, 500, 999] {
            let (next, change) = observe(state, MilliCpu(0), ms(at), &params);
            assert_eq!(change, FloorChange::Held, "at {at}");
            state = Some(next);
        }
        let (next, change) = observe(state, MilliCpu(0), ms(1000), &params);
        assert_eq!(change, lowered(1000, 0));
        assert_eq!(next.raised_at, ms(0), "falling does not restart the hold");

        // A fresh floor with too few samples for the long window holds.
        let params = Hysteresis {
            restore_samples: 10,
            restore_hold: Duration::ZERO,
            ..params
        };
        let mut state = Some(observe(None, MilliCpu(1000), ms(0), &params).0);
        for at in 1..9 {
            let (next, change) = observe(state, MilliCpu(0), ms(at), &params);
            assert_eq!(change, FloorChange::Held, "at {at}");
            state = Some(next);
        }
        let (_, change) = observe(state, MilliCpu(0), ms(9), &params);
        assert_eq!(
            change,
            lowered(1000, 100),
            "ten samples: (1000 + 9 x 0) / 10"
        );
    }

    #[test]
    fn a_short_window_ignores_one_noisy_sample_but_catches_a_step() {
        use FloorChange::{Held, Started};
        let params = Hysteresis {
            step_samples: 3,
            restore_samples: 50,
            restore_hold: Duration::from_secs(1),
            ..params()
        };
        let state = run_rows(
            &params,
            &[
                (0, 1000, Started, 1000),
                (20, 1000, Held, 1000),
                (40, 1000, Held, 1000),
                // One sample 500m high: the mean of three is 1166m, no step.
                (60, 1500, Held, 1000),
                (80, 1000, Held, 1000),
                (100, 1000, Held, 1000),
                // A real step to 1800m shows in its first sample,
                // (1000 + 1000 + 1800) / 3 = 1266m, and the floor climbs
                // with each of the next two.
                (120, 1800, raised(1000, 1266), 1266),
                (140, 1800, raised(1266, 1533), 1533),
                (160, 1800, raised(1533, 1800), 1800),
                (180, 1800, Held, 1800),
            ],
        );
        assert_eq!(state.raised_at, Duration::from_millis(160));

        // With one-sample detection (the old behaviour) the noisy sample
        // alone would have lifted the floor by 500m.
        let single = Hysteresis {
            step_samples: 1,
            ..params
        };
        run_rows(
            &single,
            &[
                (0, 1000, Started, 1000),
                (20, 1500, raised(1000, 1500), 1500),
            ],
        );
    }

    #[test]
    fn in_a_steady_noisy_load_the_floor_settles_at_the_mean() {
        // 20 ms samples alternating 700m and 1300m (mean 1000m) after an
        // idle start: the floor is raised at the step, then falls to the
        // mean and stays within a step of it.
        let params = ReactionArgs::default().hysteresis(MilliCpu(2000));
        let mut state = Some(observe(None, MilliCpu(0), Duration::ZERO, &params).0);
        let mut raises = 0;
        for i in 1..=500u64 {
            let sample = if i % 2 == 0 { 1300 } else { 700 };
            let (next, change) = observe(
                state,
                MilliCpu(sample),
                Duration::from_millis(20 * i),
                &params,
            );
            if matches!(change, FloorChange::Raised { .. }) {
                raises += 1;
            }
            state = Some(next);
        }
        let floor = state.unwrap().floor;
        assert_eq!(floor, MilliCpu(1000), "the floor settles at the mean");
        assert!(
            raises <= 5,
            "only the step raised the floor ({raises} raises)"
        );
    }

    #[test]
    fn observe_is_deterministic() {
        let params = ReactionArgs::default().hysteresis(MilliCpu(4000));
        let feed = || {
            let mut state = None;
            let mut changes = Vec::new();
            for i in 0..300u64 {
                let sample = MilliCpu(((i * 7919) % 3000) as i64);
                let (next, change) = observe(state, sample, Duration::from_millis(20 * i), &params);
                changes.push((change, next.floor));
                state = Some(next);
            }
            changes
        };
        assert_eq!(feed(), feed());
    }

    #[test]
    fn step_scales_with_the_node_and_has_a_floor() {
        let args = ReactionArgs::default();
        let step = |capacity| args.hysteresis(MilliCpu(capacity)).step.0;
        assert_eq!(step(2000), 200);
        assert_eq!(step(64_000), 6400);
        assert_eq!(step(100), 50);
        assert_eq!(step(-5), 50);
    }

    #[test]
    fn mechanism_choice_falls_back_and_says_why() {
        let ms = Duration::from_millis(20);
        let ok: Result<(), String> = Ok(());
        let refused: Result<(), String> = Err("Invalid argument".into());
        let missing: Result<(), String> = Err("no kubepods".into());
        let cases = [
            (
                ReactionMode::Auto,
                Some(&ok),
                &ok,
                "psi+cpuacct",
                "accepted",
            ),
            (
                ReactionMode::Auto,
                Some(&refused),
                &ok,
                "cpuacct",
                "PSI trigger refused: Invalid argument",
            ),
            (
                ReactionMode::Auto,
                Some(&ok),
                &missing,
                "off",
                "no kubepods",
            ),
            (
                ReactionMode::Psi,
                Some(&refused),
                &ok,
                "off",
                "does not fall back",
            ),
            (
                ReactionMode::Psi,
                Some(&ok),
                &ok,
                "psi+cpuacct",
                "every 20ms",
            ),
            (ReactionMode::Cpuacct, None, &ok, "cpuacct", "every 20ms"),
            (ReactionMode::Off, Some(&ok), &ok, "off", "switched off"),
        ];
        for (mode, psi, cpuacct, mechanism, detail) in cases {
            let got = choose_mechanism(mode, psi, cpuacct, ms);
            assert_eq!(got.mechanism, mechanism, "{mode:?}: {got:?}");
            assert!(got.detail.contains(detail), "{mode:?}: {got:?}");
            assert_eq!(got.psi_trigger, psi.map(Result::is_ok));
        }
    }

    fn fake_tree(with_be: bool) -> (TempDir, CgroupLayout) {
        let dir = TempDir::new("reaction").unwrap();
        let kubepods = dir.path().join("cpuacct/kubepods");
        std::fs::create_dir_all(kubepods.join("besteffort")).unwrap();
        std::fs::write(kubepods.join("cpuacct.usage"), "1000\n").unwrap();
        if with_be {
            std::fs::write(kubepods.join("besteffort/cpuacct.usage"), "400\n").unwrap();
        }
        let layout = CgroupLayout::new(CgroupVersion::V1, CgroupDriver::Cgroupfs, dir.path());
        (dir, layout)
    }

    #[test]
    fn trigger_setup_failure_falls_back_to_the_sampler() {
        let (dir, layout) = fake_tree(true);
        // No pressure file at all.
        let proc_root = dir.path().join("proc");
        std::fs::create_dir_all(&proc_root).unwrap();
        let got = detect(&proc_root, &layout, &ReactionArgs::default());
        assert_eq!(got.mechanism, "cpuacct", "{got:?}");
        assert_eq!(got.psi_trigger, Some(false));
        assert!(got.detail.contains("pressure/cpu"), "{got:?}");
        // A directory where the file should be.
        std::fs::create_dir_all(proc_root.join("pressure/cpu")).unwrap();
        let got = detect(&proc_root, &layout, &ReactionArgs::default());
        assert_eq!(got.mechanism, "cpuacct", "{got:?}");
        // psi-only mode is off instead.
        let psi_only = ReactionArgs {
            mode: ReactionMode::Psi,
            ..ReactionArgs::default()
        };
        assert_eq!(detect(&proc_root, &layout, &psi_only).mechanism, "off");
        // And with no BE tier counter nothing can be sampled.
        let (_dir2, no_be) = fake_tree(false);
        let got = detect(&proc_root, &no_be, &ReactionArgs::default());
        assert_eq!(got.mechanism, "off");
        assert!(got.detail.contains("besteffort/cpuacct.usage"), "{got:?}");
    }

    #[test]
    fn the_real_kernel_trigger_is_detected_either_way() {
        // This kernel may or may not accept triggers; either answer must be
        // explicit (a refusal carries the kernel's error).
        let proc_root = Path::new("/proc");
        if !proc_root.join("pressure/cpu").exists() {
            println!("SKIP: no /proc/pressure/cpu");
            return;
        }
        match PsiTrigger::arm(proc_root, PSI_STALL, PSI_WINDOW) {
            Ok(trigger) => {
                println!("PSI trigger accepted");
                // Polling must work (fired or timed out).
                trigger.wait(Duration::from_millis(10)).unwrap();
            }
            Err(err) => {
                println!("PSI trigger refused: {err}");
                assert!(err.contains("pressure/cpu"), "{err}");
            }
        }
    }

    #[test]
    fn the_source_reads_both_counters_and_rejects_garbage() {
        let (dir, layout) = fake_tree(true);
        let mut source = CpuacctSource::open(&layout).unwrap();
        let reading = source.read(Duration::from_millis(5)).unwrap();
        assert_eq!((reading.kubepods_ns, reading.besteffort_ns), (1000, 400));
        std::fs::write(dir.path().join("cpuacct/kubepods/cpuacct.usage"), "3000\n").unwrap();
        assert_eq!(source.read(Duration::ZERO).unwrap().kubepods_ns, 3000);
        std::fs::write(dir.path().join("cpuacct/kubepods/cpuacct.usage"), "lots\n").unwrap();
        let err = source.read(Duration::ZERO).unwrap_err();
        assert!(err.contains("kubepods/cpuacct.usage"), "{err}");
    }

    #[test]
    fn sampler_wakes_on_a_step_and_publishes_the_floor() {
        let (dir, layout) = fake_tree(true);
        let file = dir.path().join("cpuacct/kubepods/cpuacct.usage");
        let args = ReactionArgs {
            mode: ReactionMode::Cpuacct,
            sample_interval_ms: 5,
            ..ReactionArgs::default()
        };
        let capability = detect(Path::new("/nonexistent"), &layout, &args);
        assert_eq!(capability.mechanism, "cpuacct");
        let shutdown = koord_common::Shutdown::new();
        let link = spawn_sampler(
            &capability,
            &args,
            Path::new("/nonexistent"),
            &layout,
            MilliCpu(2000),
            ReactionMetrics::default(),
            shutdown.clone(),
        )
        .unwrap()
        .unwrap();
        // Idle for a few samples: the floor starts near zero, nobody is woken.
        std::thread::sleep(Duration::from_millis(40));
        assert!(link.wakeups.try_recv().is_err());
        // A burst far above what 5 ms of two CPUs could use: a step.
        std::fs::write(&file, format!("{}\n", 1000 + 1_000_000_000u64)).unwrap();
        let wake = link
            .wakeups
            .recv_timeout(Duration::from_secs(2))
            .expect("a step wakes the runner");
        assert_eq!(wake.source, WakeSource::Cpuacct);
        assert!(wake.floor > MilliCpu(200), "{wake:?}");
        let floor = link.floor.get().unwrap();
        assert!(
            floor.cpu > MilliCpu(200) && floor.is_fresh(SystemTime::now()),
            "{floor:?}"
        );

        // Disarmed (suppression off or no BE pod): a further step wakes nobody.
        link.floor.set_armed(false);
        std::thread::sleep(Duration::from_millis(30));
        while link.wakeups.try_recv().is_ok() {}
        std::fs::write(&file, format!("{}\n", 1000 + 5_000_000_000u64)).unwrap();
        assert!(
            link.wakeups
                .recv_timeout(Duration::from_millis(200))
                .is_err(),
            "a disarmed sampler must not wake the runner"
        );
        shutdown.trigger(koord_common::shutdown::ShutdownReason::Requested(
            "test over".into(),
        ));
    }
}
